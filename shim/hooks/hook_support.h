// What the driver wrappers of stream_hooks.cc share: the real function of an
// entry point, timestamps taken only while a trace is written, the current
// device, and the entry macro that makes a nested call forward uncounted.
// Include after cuda.h.
#ifndef PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_
#define PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_

#include <time.h>

#include <cstdint>

#include "shim/hooks/driver_table.h"
#include "shim/hooks/state.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace hook {

template <typename Fn>
inline Fn RealFn(Api api) {
  return reinterpret_cast<Fn>(RealDriverFunction(api));
}

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// 0 (and no clock read) unless a trace is being written.
inline uint64_t StartTime() { return trace::RecorderActive() ? NowNs() : 0; }

// The device of the calling thread's current context, -1 when none.
int CurrentDevice() PINSHIM_HIDDEN;

// Records that a driver call which waits for the device's queued work
// (cuMemFree, measured) returned; a no-op without a trace (start_ns 0).
void RecordDriverWait(ApiId api, uint64_t start_ns, int result) PINSHIM_HIDDEN;

}  // namespace hook
}  // namespace pinshim

// First statement of a wrapper: forwards when nested (count once) or when
// pinshim is not set up yet; otherwise notes that the driver is in use and
// holds the depth guard for the rest of the call. Defines `real_fn`.
#define PINSHIM_HOOK_ENTER(api, type, ...)                                     \
  auto real_fn = ::pinshim::hook::RealFn<type>(api);                           \
  if (real_fn == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                   \
  if (::pinshim::t_depth > 0 ||                                                \
      !::pinshim::g_initialized.load(std::memory_order_relaxed))               \
    return real_fn(__VA_ARGS__);                                               \
  if (PINSHIM_UNLIKELY(!::pinshim::g_cuda_seen.load(std::memory_order_relaxed))) \
    ::pinshim::NoteCudaSeen();                                                 \
  ::pinshim::DepthGuard depth_guard

#endif  // PINSHIM_SHIM_HOOKS_HOOK_SUPPORT_H_
