// The gate between pinned memory optimize mode makes in a context (pooled
// allocations, shim/hooks/pinned_hooks.cc; staging rings pinned in the
// background, shim/optimize/stager.cc) and the program's context teardowns
// (shim/hooks/context_hooks.cc).
#ifndef PINSHIM_SHIM_CORE_CONTEXT_GATE_H_
#define PINSHIM_SHIM_CORE_CONTEXT_GATE_H_

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "shim/core/macros.h"

namespace pinshim {

// Optimize mode and context teardown. The pool keys its slabs by the context
// that was current when they were allocated, and the driver frees them with
// that context; a later context may get the same handle. So from the moment
// a teardown wrapper starts until it has told the optimizer, no pooled
// allocation runs: the ones in flight are waited for, new ones go to the
// driver (what the program gets is a dedicated allocation, which frees
// correctly), and no slab can be made in the dying context or reused under
// a recycled handle. The stager's workers pin staging rings for a context
// inside the gate too (a ring pinned in a dying context would be freed
// under the stager's feet). One word holds both counts, so the two sides
// see each other in one order.
class ContextGate {
 public:
  // Around a pooled allocation (or a ring's pinning); false: a teardown
  // runs, use the driver.
  bool EnterAlloc() {
    if (PINSHIM_LIKELY((state_.fetch_add(1, std::memory_order_acq_rel) >> 32) == 0)) return true;
    state_.fetch_sub(1, std::memory_order_release);
    return false;
  }
  void ExitAlloc() { state_.fetch_sub(1, std::memory_order_release); }

  // Closes the gate and waits for the allocations already inside.
  // They never wait for a teardown, so this ends. (A signal handler cannot
  // get here from inside one: the depth guard makes it forward.)
  void BeginTeardown() {
    state_.fetch_add(kTeardown, std::memory_order_acq_rel);
    while ((state_.load(std::memory_order_acquire) & (kTeardown - 1)) != 0) sched_yield();
  }
  void EndTeardown() { state_.fetch_sub(kTeardown, std::memory_order_release); }

 private:
  static constexpr uint64_t kTeardown = uint64_t{1} << 32;
  std::atomic<uint64_t> state_{0};  // teardowns << 32 | pooled allocations in flight
};

extern ContextGate g_context_gate PINSHIM_HIDDEN;

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_CONTEXT_GATE_H_
