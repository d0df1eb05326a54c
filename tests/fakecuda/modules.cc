// Modules and kernels are not simulated: their entry points resolve to stubs
// that say so (proc_address.cc). Only the loading mode is answered, which
// the CUDA runtime asks for at start-up.
#include <cstdlib>
#include <cstring>

#include "tests/fakecuda/internal.h"

extern "C" {

// Documented: lazy loading unless CUDA_MODULE_LOADING=EAGER (lazy became the
// default in CUDA 12.2).
CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  FAKECUDA_ENTER("cuModuleGetLoadingMode");
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = fakecuda::RequireInit()) return err;
  const char* setting = std::getenv("CUDA_MODULE_LOADING");
  *mode = setting != nullptr && std::strcmp(setting, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING
                                                                   : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

}  // extern "C"
