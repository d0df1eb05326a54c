// The table of wrapped driver entry points and the two ways programs reach
// them: dlsym of an ABI symbol, and cuGetProcAddress[_v2] by name, version
// and flags.
#ifndef PINSHIM_SHIM_HOOKS_DRIVER_TABLE_H_
#define PINSHIM_SHIM_HOOKS_DRIVER_TABLE_H_

#include <atomic>

#include "shim/core/events.h"
#include "shim/hooks/state.h"

namespace pinshim {

enum Api : ApiId {
#define X(base, abi, version, per_thread) kApi_##abi,
#include "shim/hooks/driver_entry_points.inc"
#undef X
  kApiCount
};

struct DriverEntry {
  const char* base;  // the name cuGetProcAddress is asked for
  const char* abi;   // the exported symbol with this ABI
  int version;       // CUDA version that introduced the ABI
  bool per_thread;   // per-thread default stream variant
  void* wrapper;     // pinshim's function with this ABI
};

extern const DriverEntry kDriverEntries[kApiCount] PINSHIM_HIDDEN;
// The real driver function behind each entry, once known.
extern std::atomic<void*> g_driver_real[kApiCount] PINSHIM_HIDDEN;

// The real function for `api`: the one the program's lookup returned, else
// the one libcuda.so.1 exports under the ABI name. Null when neither exists.
void* RealDriverFunction(ApiId api) PINSHIM_HIDDEN;

// A driver function for pinshim's own use, straight from the loaded
// libcuda (never a wrapper, never loading the library). Null when absent.
void* DriverLibrarySymbol(const char* name) PINSHIM_HIDDEN;

// For dlsym: returns pinshim's wrapper for ABI symbol `name` when `found`
// lies in the CUDA driver library; `found` otherwise.
void* WrapDlsymResult(const char* name, void* found) PINSHIM_HIDDEN;

// For cuGetProcAddress: returns pinshim's wrapper for what the driver gave
// back for (symbol, version, flags), or `found` when pinshim does not wrap it
// or the driver's ABI for that version is not one pinshim knows.
void* WrapProcAddressResult(const char* symbol, void* found, int version,
                            unsigned long long flags) PINSHIM_HIDDEN;

// The name of an entry point, for the summary and the trace.
const char* ApiName(ApiId api) PINSHIM_HIDDEN;
// How many entry points there are (the trace header says so).
uint32_t kApiCountForTrace() PINSHIM_HIDDEN;

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_DRIVER_TABLE_H_
