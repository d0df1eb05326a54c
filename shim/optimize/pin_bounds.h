// Where optimize mode's pinning lies, as bounds the page hooks compare
// against before they look any further.
//
// PinBounds: the address range [lo, hi) that holds everything one part of
// optimize mode pinned (the registration cache's registrations, the pool's
// slabs, the arena's reservation); empty is lo = UINTPTR_MAX, hi = 0. Only
// its part writes it, and widens it before what it bounds becomes visible
// to the hooks (the registration side of PageChangeSlots runs after that),
// so a hook that marked its range and then finds the bounds apart from it
// has nothing to drop. Read without a lock.
//
// PageHookLine: what every page hook's fast path reads (mmap with
// MAP_FIXED, munmap, madvise), side by side in one cache line: the three
// parts' bounds and the hooks' own settings, written once at startup. The
// kernel's work in such a call (unmapping a page) leaves the hook's data
// out of the first-level cache by its next call, and each line the hook
// reads again costs nanoseconds of a budget of ten (bench/RESULTS.md,
// 2026-12-02, fifth part). Each Optimizer holds one; its parts write their
// bounds into it.
#ifndef PINSHIM_SHIM_OPTIMIZE_PIN_BOUNDS_H_
#define PINSHIM_SHIM_OPTIMIZE_PIN_BOUNDS_H_

#include <atomic>
#include <cstdint>

namespace pinshim {
namespace optimize {

struct PinBounds {
  std::atomic<uintptr_t> lo{UINTPTR_MAX};
  std::atomic<uintptr_t> hi{0};

  // Whether [start, end) may overlap what the bounds hold: two loads.
  bool MayOverlap(uintptr_t start, uintptr_t end) const {
    return start < hi.load(std::memory_order_acquire) && end > lo.load(std::memory_order_acquire);
  }
  // Widens them to hold [start, end) as well; safe against other writers.
  void Widen(uintptr_t start, uintptr_t end) {
    uintptr_t cur = lo.load(std::memory_order_relaxed);
    while (start < cur && !lo.compare_exchange_weak(cur, start, std::memory_order_release)) {
    }
    cur = hi.load(std::memory_order_relaxed);
    while (end > cur && !hi.compare_exchange_weak(cur, end, std::memory_order_release)) {
    }
  }
  // Empty again: only where the part holds nothing, under its lock.
  void Clear() {
    lo.store(UINTPTR_MAX, std::memory_order_release);
    hi.store(0, std::memory_order_release);
  }
};

struct alignas(64) PageHookLine {
  PinBounds cache;  // RegistrationCache: widened as entries come, cleared when it empties
  PinBounds pool;   // PinnedPool: every slab ever made (widened only)
  PinBounds arena;  // HostArena: its reservation, once made
  // Set by the hooks at startup before any hook reads them (startup.cc):
  uint64_t track_threshold = UINT64_MAX;  // as g_track_threshold
  bool optimizing = false;                // as g_optimize
  bool raw_calls = false;  // the page hooks make their system calls themselves (raw_syscall.h)

  // Whether [start, end) may hold any pinning of any part.
  bool MayHoldAny(uintptr_t start, uintptr_t end) const {
    return cache.MayOverlap(start, end) || pool.MayOverlap(start, end) ||
           arena.MayOverlap(start, end);
  }
};
static_assert(sizeof(PageHookLine) == 64, "the page hooks' fast path reads one cache line");

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PIN_BOUNDS_H_
