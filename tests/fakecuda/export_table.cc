// cuGetExportTable: the driver's private tables, which the CUDA runtime asks
// for by UUID. None is simulated (README.md says what the runtime asks and
// why it stops here): every UUID is refused with CUDA_ERROR_NOT_SUPPORTED,
// and the first request says so on stderr.
#include <cstdio>

#include "tests/fakecuda/internal.h"

extern "C" {

CUresult cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  FAKECUDA_ENTER("cuGetExportTable");
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  char id[33];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(id + 2 * i, 3, "%02x", static_cast<unsigned char>(pExportTableId->bytes[i]));
  }
  fakecuda::DebugLog("cuGetExportTable(%s): not simulated", id);
  return fakecuda::NotSimulated(
      "cuGetExportTable",
      "the CUDA runtime's private tables; programs built with cudart stop here");
}

}  // extern "C"
