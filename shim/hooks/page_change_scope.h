// Around every interposed call that may change which pages back a range
// (mmap MAP_FIXED, munmap, mremap, madvise and its relatives, shmat, brk):
// in optimize mode, pinshim's pinning of that range is dropped, retired or
// re-established (optimize/page_change.h) before the call takes effect.
// Outside optimize mode, and for calls pinshim makes itself, it is one load.
#ifndef PINSHIM_SHIM_HOOKS_PAGE_CHANGE_SCOPE_H_
#define PINSHIM_SHIM_HOOKS_PAGE_CHANGE_SCOPE_H_

#include <cstddef>
#include <cstdint>

#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_change_call.h"

namespace pinshim {

// The line every page hook's fast path reads (optimize/pin_bounds.h).
inline optimize::PageHookLine& PageLine() { return optimize::Optimizer::Process().page_line(); }

// The fast path of MAP_FIXED, munmap and page-changing madvise in optimize
// mode, the common case of a range near no tracked allocation and no
// pinning: the page hooks' line (PageHookLine: the mode, the pinning's
// bounds) and the allocation registry's summary are read, and the call
// made; nothing is left to do after it. False where the general path must
// run (not optimizing, an empty or wrapping range, a tracked allocation or
// pinning maybe there).
//
// Unlike every other page change, this one is not marked in
// PageChangeSlots (two stores before the call and one after: 5 to 6 ns of
// MAP_FIXED's 10, bench/RESULTS.md, 2026-12-02, fifth part). The mark
// keeps a registration from pinning pages of the range while the call
// replaces them. Here none can: pinshim registers tracked allocations only
// (the cache), and the arena's and pool's memory lies within the bounds
// read; the range held none of either when they were read. An allocation
// could appear in it before the call only by another thread being given
// memory this call then replaces or discards (mapped where the range was
// unmapped, or handed out by an allocator that owns the range): a race the
// program has without pinshim, whose memory the call destroys either way
// (shim/INVARIANTS.md, 8).
__attribute__((always_inline)) inline bool NothingThere(const optimize::PageHookLine& line,
                                                        const void* addr, size_t len) {
  const auto start = reinterpret_cast<uintptr_t>(addr);
  return PINSHIM_LIKELY(line.optimizing && len != 0 && len <= UINTPTR_MAX - start &&
                        !g_allocations.MayHoldAny(start, start + (len - 1)) &&
                        !line.MayHoldAny(start, start + len));
}

// WithPageChange where the caller knows optimize mode is on.
template <typename Fn, typename... Args>
__attribute__((always_inline)) inline auto WithPageChangeOptimizing(const void* addr, size_t len,
                                                                    const optimize::PageChange what,
                                                                    Fn fn, Args... args)
    -> decltype(fn(args...)) {
  if (len == 0 || Reentered(Reentry::kHook)) return fn(args...);
  const auto start = reinterpret_cast<uintptr_t>(addr);
  // Up to the top of the address space at most (a range there is empty only
  // when it starts at the very last byte, which no call can change).
  const uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;
  // Marked first: a registration that starts while this looks sees it.
  optimize::PageChangeSlots::Slot* mark = optimize::PageChangeSlots::TryMarkFast(start, end);
  if (PINSHIM_UNLIKELY(mark == nullptr)) {
    return optimize::CallMarked(start, end, what, false, fn, args...);
  }
  if (PINSHIM_UNLIKELY(optimize::Optimizer::Process().MayHoldPinning(start, end, what))) {
    return optimize::CallMarked(start, end, what, true, fn, args...);
  }
  auto result = fn(args...);
  optimize::PageChangeSlots::EndFast(mark);  // no load of the slot after the call
  return result;
}

// Returns fn(args...) (the real libc call), run as a change of the pages of
// [addr, addr + len) that does `what`. Where the range holds nothing
// pinshim pinned (nearly every call) this adds a few loads and two stores
// each way (bench/page: at most 10 ns added). Inlined into each hook, so
// that `what`, known there, folds away; the arguments are passed on as
// values, so none has to be kept in memory, and nothing but the result
// lives across the call. Calls nest (mremap's target inside its source).
template <typename Fn, typename... Args>
__attribute__((always_inline)) inline auto WithPageChange(const void* addr, size_t len,
                                                          const optimize::PageChange what, Fn fn,
                                                          Args... args) -> decltype(fn(args...)) {
  if (PINSHIM_LIKELY(!g_optimize)) return fn(args...);
  return WithPageChangeOptimizing(addr, len, what, fn, args...);
}

// The PageChange of each call kind other than madvise (AdviceEffects).
constexpr optimize::PageChange PageChangeOf(OwnPinReason reason, uint32_t detail,
                                            bool stays_anonymous) {
  return optimize::PageChange(reason, detail,
                              optimize::PageChange::kReplacesPrivate |
                                  optimize::PageChange::kReplacesShared |
                                  (stays_anonymous ? optimize::PageChange::kStaysAnonymous : 0));
}

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_PAGE_CHANGE_SCOPE_H_
