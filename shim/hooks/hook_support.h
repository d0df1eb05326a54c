// What the driver wrappers (copy_hooks.cc, pinned_hooks.cc,
// device_memory_hooks.cc, pointer_hooks.cc, context_hooks.cc, sync_hooks.cc)
// share: the real function of an entry
// point, a driver function looked up once by name, timestamps taken only
// while a trace is written, the current device, the running optimizer, and
// the entry macro that makes a nested call forward uncounted.
// Include after cuda.h.
#ifndef PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_
#define PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_

#include <time.h>

#include <atomic>
#include <cstdint>

#include "shim/core/live_counters.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace hook {

template <typename Fn>
inline Fn RealFn(Api api) {
  return reinterpret_cast<Fn>(RealDriverFunction(api));
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

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// 0 (and no clock read) unless a trace is being written.
inline uint64_t StartTime() { return trace::RecorderActive() ? NowNs() : 0; }

// The same for a copy, which the live metrics (PINSHIM_METRICS_FILE) time too.
inline uint64_t CopyStartTime() {
  return trace::RecorderActive() || LiveCountersEnabled() ? NowNs() : 0;
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

// First statement of a wrapper: forwards when nested (count once) or when
// pinshim is not set up yet; otherwise notes that the driver is in use and
// holds the depth guard for the rest of the call. Defines `real_fn`.
#define PINSHIM_HOOK_ENTER(api, type, ...)                                       \
  auto real_fn = ::pinshim::hook::RealFn<type>(api);                             \
  if (real_fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                     \
  if (::pinshim::Reentered(::pinshim::Reentry::kHook) ||                         \
      !::pinshim::g_initialized.load(std::memory_order_relaxed))                 \
    return real_fn(__VA_ARGS__);                                                 \
  if (PINSHIM_UNLIKELY(!::pinshim::g_cuda_seen.load(std::memory_order_relaxed))) \
    ::pinshim::NoteCudaSeen();                                                   \
  ::pinshim::ReentryGuard depth_guard(::pinshim::Reentry::kHook)

#endif  // PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_
