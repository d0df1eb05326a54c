// Entry points the CUDA runtime calls on its way to the memory, copy and
// stream API: module loading mode, device identity and context queries.
#include <cstdlib>
#include <cstring>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"

extern "C" {

// Documented: lazy loading unless CUDA_MODULE_LOADING=EAGER (the default
// became lazy in CUDA 12.2).
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
