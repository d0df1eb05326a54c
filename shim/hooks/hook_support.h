// What the driver wrappers (copy_hooks.cc, pinned_hooks.cc,
// device_memory_hooks.cc, pointer_hooks.cc, context_hooks.cc, sync_hooks.cc)
// share: the real function of an entry
// point, a driver function looked up once by name, timestamps taken only
// while a trace is written, the current device, the running optimizer, and
// the opening every wrapper has, in three plain statements:
//   const Fn real = RealFn<Fn>(api);
//   if (!Handles(real)) return Forward(real, args...);
//   const HookScope scope;
// Include after cuda.h.
#ifndef PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_
#define PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_

#include <time.h>

#include <atomic>
#include <cstdint>

#include "shim/core/clock.h"
#include "shim/core/live_counters.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace hook {

// The driver's function once known is a load; the lookup is out of line.
template <typename Fn>
inline Fn RealFn(Api api) {
  void* fn = g_driver_real[api].load(std::memory_order_acquire);
  return reinterpret_cast<Fn>(fn != nullptr ? fn : RealDriverFunction(api));
}

// A driver function pinshim calls for itself (not a wrapped entry point),
// looked up in the driver library on first use and kept in `cache`, a
// function-local static of the caller; `fallback` is an older name of it.
template <typename Fn>
Fn LazyDriverSymbol(std::atomic<void*>* cache, const char* name, const char* fallback = nullptr) {
  void* fn = cache->load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = DriverLibrarySymbol(name);
    if (fn == nullptr && fallback != nullptr) fn = DriverLibrarySymbol(fallback);
    if (fn != nullptr) cache->store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

// 0 (and no clock read) unless a trace is being written.
inline uint64_t StartTime() { return trace::RecorderActive() ? MonotonicNs() : 0; }

// The same for a copy, which the live metrics (PINSHIM_METRICS_FILE) time too.
inline uint64_t CopyStartTime() {
  return trace::RecorderActive() || LiveCountersEnabled() ? MonotonicNs() : 0;
}

// The device of the calling thread's current context, -1 when none.
int CurrentDevice() PINSHIM_HIDDEN;

// The optimize-mode engine when it is running, else null.
inline optimize::Optimizer* ActiveOptimizer() {
  if (PINSHIM_LIKELY(!g_optimize)) return nullptr;
  optimize::Optimizer& opt = optimize::Optimizer::Process();
  return opt.active() ? &opt : nullptr;
}

// Whether a wrapper forwards the call untouched and uncounted: a call
// pinshim makes itself (nested in another hook, counted once there), or one
// made before pinshim's start-up finished.
inline bool PassThrough() {
  return Reentered(Reentry::kHook) || !g_initialized.load(std::memory_order_relaxed);
}

// Whether a wrapper handles this call itself: the driver has the entry point
// and PassThrough does not hold. When not, the wrapper returns Forward.
template <typename Fn>
inline bool Handles(Fn real) {
  return real != nullptr && !PassThrough();
}

// The answer to a call a wrapper does not handle: the driver's own, uncounted,
// or CUDA_ERROR_NOT_INITIALIZED from a driver without the entry point.
template <typename Fn, typename... Args>
inline CUresult Forward(Fn real, Args... args) {
  return real == nullptr ? CUDA_ERROR_NOT_INITIALIZED : real(args...);
}

// Held by a wrapper for the rest of a call it handles: the driver is noted
// as in use, and the re-entry guard makes the driver's and pinshim's own
// calls inside it pass through.
class HookScope {
 public:
  HookScope() = default;
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;

 private:
  static bool NoteCuda() {
    if (PINSHIM_UNLIKELY(!g_cuda_seen.load(std::memory_order_relaxed))) NoteCudaSeen();
    return true;
  }
  bool noted_ = NoteCuda();  // before the guard: members start in this order
  ReentryGuard guard_{Reentry::kHook};
};

// Records that a driver call which waits for the device's queued work
// (cuMemFree, measured) returned; a no-op without a trace (start_ns 0).
void RecordDriverWait(ApiId api, uint64_t start_ns, int result) PINSHIM_HIDDEN;

}  // namespace hook
}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_
