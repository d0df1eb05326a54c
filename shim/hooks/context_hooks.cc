// The wrapped context-teardown entry points (which tell optimize mode that
// a context's memory went), cuGetProcAddress (whose answers are wrapped so a
// program that looks the driver up by name still reaches pinshim), and the
// table of every wrapped entry point (driver_entry_points.inc).
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>

#include "shim/core/context_gate.h"
#include "shim/core/mutex.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"

namespace pinshim {

ContextGate g_context_gate;

}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"
using pinshim::hook::ActiveOptimizer;

extern "C" {

// --- context teardown ---------------------------------------------------------
//
// Destroying a context frees its memory, the pool's slabs included (see
// ContextGate). In optimize mode these wrappers tell the optimizer which
// context went, after the driver destroyed it and before returning; in every
// other case they forward untouched. They count nothing.
//
// A primary context is destroyed by cuDevicePrimaryCtxReset, and by the
// cuDevicePrimaryCtxRelease that drops its last reference; its handle is
// found before the call (ActivePrimaryContext). These two and
// cuDevicePrimaryCtxRetain run one at a time (g_primary_mu), so no retain
// can bring the context back between the call and the look at its state,
// and the handle lookup cannot race a destruction. The lock is held across
// the driver call; nothing else takes it, and in a forked child optimize
// mode is off, so nothing waits for it there.

namespace {

// It guards no data of ours (the driver's primary contexts are the state):
// what it annotates is which calls need it held.
Mutex g_primary_mu;

// One context teardown by the program, in optimize mode. A primary
// context's is made with g_primary_mu held, taken before it.
class Teardown {
 public:
  Teardown() { g_context_gate.BeginTeardown(); }
  ~Teardown() { g_context_gate.EndTeardown(); }
  Teardown(const Teardown&) = delete;
  Teardown& operator=(const Teardown&) = delete;
};

// Whether dev's primary context is active: 1 yes, 0 no, -1 unknown.
int PrimaryActive(CUdevice dev) {
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static std::atomic<void*> fn{nullptr};
  auto get_state = hook::LazyDriverSymbol<GetState>(&fn, "cuDevicePrimaryCtxGetState");
  unsigned int flags = 0;
  int active = 0;
  if (get_state == nullptr || get_state(dev, &flags, &active) != CUDA_SUCCESS) return -1;
  return active != 0 ? 1 : 0;
}

// The handle of dev's primary context when it is active, else null. Asked
// under g_primary_mu, so it stays active throughout: the retain creates
// nothing, and the release that balances it is never the last.
CUcontext ActivePrimaryContext(CUdevice dev) REQUIRES(g_primary_mu) {
  if (PrimaryActive(dev) != 1) return nullptr;
  using Retain = CUresult (*)(CUcontext*, CUdevice);
  using Release = CUresult (*)(CUdevice);
  static std::atomic<void*> retain_fn{nullptr}, release_fn{nullptr};
  auto retain = hook::LazyDriverSymbol<Retain>(&retain_fn, "cuDevicePrimaryCtxRetain");
  auto release = hook::LazyDriverSymbol<Release>(&release_fn, "cuDevicePrimaryCtxRelease_v2",
                                                 "cuDevicePrimaryCtxRelease");
  if (retain == nullptr || release == nullptr) return nullptr;
  CUcontext ctx = nullptr;
  if (retain(&ctx, dev) != CUDA_SUCCESS) return nullptr;
  release(dev);
  return ctx;
}

CUresult DestroyContextCall(Api api, CUcontext ctx) {
  using Fn = CUresult (*)(CUcontext);
  const Fn real_fn = hook::RealFn<Fn>(api);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, ctx);
  const hook::HookScope scope;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(ctx);
  Teardown teardown;
  CUresult r = real_fn(ctx);
  if (r == CUDA_SUCCESS && ctx != nullptr) opt->OnContextDestroyed(ctx);
  return r;
}

// cuDevicePrimaryCtxReset (reset) or cuDevicePrimaryCtxRelease.
CUresult EndPrimaryContext(Api api, CUdevice dev, bool reset) {
  using Fn = CUresult (*)(CUdevice);
  const Fn real_fn = hook::RealFn<Fn>(api);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, dev);
  const hook::HookScope scope;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(dev);
  MutexLock primary_lock(&g_primary_mu);
  Teardown teardown;
  CUcontext primary = ActivePrimaryContext(dev);
  CUresult r = real_fn(dev);
  if (r != CUDA_SUCCESS || primary == nullptr) return r;
  // A reset destroys an active primary context by definition; a release
  // only when it dropped the last reference, which leaves it inactive.
  if (reset || PrimaryActive(dev) == 0) opt->OnContextDestroyed(primary);
  return r;
}

}  // namespace

CUresult cuCtxDestroy(CUcontext ctx) { return DestroyContextCall(kApi_cuCtxDestroy, ctx); }

CUresult cuCtxDestroy_v2(CUcontext ctx) { return DestroyContextCall(kApi_cuCtxDestroy_v2, ctx); }

CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxReset, dev, /*reset=*/true);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxReset_v2, dev, /*reset=*/true);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxRelease, dev, /*reset=*/false);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxRelease_v2, dev, /*reset=*/false);
}

// Wrapped to wait while a primary context teardown runs (see above), and
// to attach optimize mode's engine when the program makes its context (the
// CUDA runtime's first call that needs one), not at its first copy: the
// attach's driver lookups and its thread then cost the context's creation,
// which takes far longer, instead of the copy.
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  using Fn = CUresult (*)(CUcontext*, CUdevice);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuDevicePrimaryCtxRetain);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, pctx, dev);
  const hook::HookScope scope;
  if (PINSHIM_LIKELY(ActiveOptimizer() == nullptr)) {
    const CUresult r = real_fn(pctx, dev);
    if (r == CUDA_SUCCESS && g_optimize) EnsureOptimizerStarted();
    return r;
  }
  MutexLock primary_lock(&g_primary_mu);
  return real_fn(pctx, dev);
}

// --- cuGetProcAddress --------------------------------------------------------

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto real_fn = hook::RealFn<Fn>(kApi_cuGetProcAddress_v2);
  if (real_fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!g_initialized.load(std::memory_order_acquire)) Init();
  if (PINSHIM_UNLIKELY(!g_cuda_seen.load(std::memory_order_relaxed))) NoteCudaSeen();
  CUresult r = real_fn(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr &&
      !Reentered(Reentry::kHook)) {
    *pfn = WrapProcAddressResult(symbol, *pfn, version, flags);
  }
  return r;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto real_fn = hook::RealFn<Fn>(kApi_cuGetProcAddress);
  if (real_fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!g_initialized.load(std::memory_order_acquire)) Init();
  if (PINSHIM_UNLIKELY(!g_cuda_seen.load(std::memory_order_relaxed))) NoteCudaSeen();
  CUresult r = real_fn(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr &&
      !Reentered(Reentry::kHook)) {
    *pfn = WrapProcAddressResult(symbol, *pfn, version, flags);
  }
  return r;
}

}  // extern "C"

namespace pinshim {

const DriverEntry kDriverEntries[kApiCount] = {
#define X(base, abi, version, per_thread) \
  {#base, #abi, version, per_thread != 0, reinterpret_cast<void*>(&::abi)},
#include "shim/hooks/driver_entry_points.inc"
#undef X
};

}  // namespace pinshim
