#include "shim/hooks/driver_table.h"

#include <dlfcn.h>

#include <cstring>

#include "shim/core/stats.h"

extern "C" void* pinshim_real_dlsym;
extern "C" void* pinshim_resolve_real_dlsym();

namespace pinshim {

std::atomic<void*> g_driver_real[kApiCount];

namespace {

// Per-thread default stream flag of cuGetProcAddress (cuda.h).
constexpr unsigned long long kPerThreadFlag = 1ull << 1;

using GetProcV2 = int (*)(const char*, void**, int, unsigned long long, void*);
using GetProcV1 = int (*)(const char*, void**, int, unsigned long long);
using RealDlsym = void* (*)(void*, const char*);

RealDlsym RealDlsymFn() {
  void* fn = __atomic_load_n(&pinshim_real_dlsym, __ATOMIC_ACQUIRE);
  if (fn == nullptr) fn = pinshim_resolve_real_dlsym();
  return reinterpret_cast<RealDlsym>(fn);
}

// The driver library, if the process has loaded it. Never loads it: a
// program that has not loaded libcuda gets nothing from pinshim either.
void* LibcudaHandle() {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h == nullptr && g_real.dlopen != nullptr) {
    ReentryGuard guard(Reentry::kHook);
    h = g_real.dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h != nullptr) handle.store(h, std::memory_order_release);
  }
  return h;
}

bool InDriverLibrary(void* fn) {
  Dl_info info;
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = strrchr(info.dli_fname, '/');
  const char* base = slash ? slash + 1 : info.dli_fname;
  return strncmp(base, "libcuda.so", 10) == 0;
}

int FindByAbi(const char* name) {
  for (int i = 0; i < kApiCount; ++i) {
    if (strcmp(kDriverEntries[i].abi, name) == 0) return i;
  }
  return -1;
}

// The newest ABI of `symbol` introduced at or before `version`, preferring
// the per-thread variant when asked for and one exists.
int FindForLookup(const char* symbol, int version, bool per_thread) {
  int best = -1;
  bool any_per_thread = false;
  for (int i = 0; i < kApiCount; ++i) {
    if (strcmp(kDriverEntries[i].base, symbol) == 0 && kDriverEntries[i].per_thread) {
      any_per_thread = true;
    }
  }
  const bool want_pt = per_thread && any_per_thread;
  for (int i = 0; i < kApiCount; ++i) {
    const DriverEntry& e = kDriverEntries[i];
    if (e.per_thread != want_pt || e.version > version || strcmp(e.base, symbol) != 0) continue;
    if (best < 0 || e.version > kDriverEntries[best].version) best = i;
  }
  return best;
}

// Asks the real driver for `symbol` at `version`, bypassing every wrapper.
void* RealLookup(const char* symbol, int version, unsigned long long flags) {
  void* out = nullptr;
  ReentryGuard guard(Reentry::kHook);
  if (void* v2 = RealDriverFunction(kApi_cuGetProcAddress_v2)) {
    if (reinterpret_cast<GetProcV2>(v2)(symbol, &out, version, flags, nullptr) == 0) return out;
    return nullptr;
  }
  if (void* v1 = RealDriverFunction(kApi_cuGetProcAddress)) {
    if (reinterpret_cast<GetProcV1>(v1)(symbol, &out, version, flags) == 0) return out;
  }
  return nullptr;
}

}  // namespace

uint32_t kApiCountForTrace() { return kApiCount; }

void* DriverLibrarySymbol(const char* name) {
  void* lib = LibcudaHandle();
  RealDlsym real_dlsym = RealDlsymFn();
  return lib != nullptr && real_dlsym != nullptr ? real_dlsym(lib, name) : nullptr;
}

const char* ApiName(ApiId api) { return api < kApiCount ? kDriverEntries[api].abi : "unknown"; }

void* RealDriverFunction(ApiId api) {
  void* fn = g_driver_real[api].load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // A program linked against libcuda calls pinshim's export directly.
  void* lib = LibcudaHandle();
  if (lib == nullptr) return nullptr;
  RealDlsym real_dlsym = RealDlsymFn();
  if (real_dlsym == nullptr) return nullptr;
  fn = real_dlsym(lib, kDriverEntries[api].abi);
  if (fn != nullptr && fn != kDriverEntries[api].wrapper) {
    g_driver_real[api].store(fn, std::memory_order_release);
    return fn;
  }
  return nullptr;
}

void* WrapDlsymResult(const char* name, void* found) {
  int api = FindByAbi(name);
  if (api < 0) return found;
  const DriverEntry& e = kDriverEntries[api];
  if (found == e.wrapper) {
    // The lookup found pinshim's own export (RTLD_DEFAULT). Without pinshim
    // it would have found the driver's, or nothing if no driver is loaded.
    return LibcudaHandle() != nullptr ? found : nullptr;
  }
  if (!InDriverLibrary(found)) return found;
  g_driver_real[api].store(found, std::memory_order_release);
  if (PINSHIM_UNLIKELY(!g_cuda_seen.load(std::memory_order_relaxed))) NoteCudaSeen();
  return e.wrapper;
}

void* WrapProcAddressResult(const char* symbol, void* found, int version,
                            unsigned long long flags) {
  int api = FindForLookup(symbol, version, (flags & kPerThreadFlag) != 0);
  if (api < 0) return found;
  const DriverEntry& e = kDriverEntries[api];
  if (found == e.wrapper) return found;
  // A newer driver may have added an ABI pinshim does not know. The driver's
  // answer at the listed version must be the same function, else leave it.
  if (version != e.version && RealLookup(symbol, e.version, flags) != found) {
    CountNote(Note::kUnknownAbi);
    return found;
  }
  g_driver_real[api].store(found, std::memory_order_release);
  return e.wrapper;
}

}  // namespace pinshim
