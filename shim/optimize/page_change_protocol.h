// The page-change protocol (invariant 8, shim/INVARIANTS.md): no pinning of
// pinshim's outlives a change of the pages behind it, and no registration
// pins pages while such a change is under way on them.
//
// The page hooks (shim/hooks/page_hooks.cc, libc_hooks.cc) call one entry
// point, ChangePages, with the real libc call as `fn`. Every step lives
// here or in the files this one names:
//   1. Not optimizing, an empty range, or a call pinshim makes itself: the
//      call alone.
//   2. The range is marked in the thread's slot (PageChangeSlots,
//      page_change.h): a registration that starts while it is marked sees it
//      (PageChangeSlots::AnyOverlapping, asked by the registration cache once
//      its entry is visible) and pins nothing.
//   3. Where the bounds say the range may hold pinning (MayHoldPinning:
//      pin_bounds.h, one cache line), the engine drops it BEFORE the call
//      (DropPinningForPageChange, page_change.cc): the registration cache
//      unregisters, the host arena unpins (with a ticket), the pinned pool
//      retires the slab.
//   4. The call.
//   5. The arena pins its memory again (RepinAfterPageChange, by the ticket).
//   6. The mark is cleared.
// The advice table (which madvise values change pages) is page_change.h's.
//
// One shortcut, for MAP_FIXED, munmap and madvise only: NothingThere lets a
// hook make its call without ChangePages where the range holds no tracked
// allocation and no pinning (why that is safe is written at NothingThere).
// A copy into a stream capture, which unpins the program's memory for the
// driver's call, goes through CallMarked (copy_path.cc).
#ifndef PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_PROTOCOL_H_
#define PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/core/reentry.h"
#include "shim/core/registry.h"
#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_change.h"
#include "shim/optimize/pin_bounds.h"

namespace pinshim {
namespace optimize {

// The line every page hook's fast path reads (pin_bounds.h).
inline PageHookLine& PageLine() { return Optimizer::Process().page_line(); }

// The PageChange of each call kind other than madvise (AdviceEffects).
constexpr PageChange PageChangeOf(OwnPinReason reason, uint32_t detail, bool stays_anonymous) {
  return PageChange(reason, detail,
                    PageChange::kReplacesPrivate | PageChange::kReplacesShared |
                        (stays_anonymous ? PageChange::kStaysAnonymous : 0));
}

// The shortcut of MAP_FIXED, munmap and page-changing madvise in optimize
// mode, the common case of a range near no tracked allocation (`tracked`,
// the hooks' registry) and no pinning: the page hooks' line (the mode, the
// pinning's bounds) and the registry's summary are read, and the call made
// without ChangePages; nothing is left to do after it. False where
// ChangePages must run (not optimizing, an empty or wrapping range, a
// tracked allocation or pinning maybe there).
//
// Unlike every other page change, this one is not marked in
// PageChangeSlots (two stores before the call and one after: most of the
// shortcut's cost, bench/RESULTS.md "the page hooks' fast paths within
// 10 ns"). The mark keeps a registration from pinning pages of the range
// while the call replaces them. Here none can: pinshim registers tracked
// allocations only (the cache), and the arena's and pool's memory lies
// within the bounds read; the range held none of either when they were
// read. An allocation could appear in it before the call only by another
// thread being given memory this call then replaces or discards (mapped
// where the range was unmapped, or handed out by an allocator that owns the
// range): a race the program has without pinshim, whose memory the call
// destroys either way (shim/INVARIANTS.md, 8).
__attribute__((always_inline)) inline bool NothingThere(const PageHookLine& line,
                                                        const Registry& tracked, const void* addr,
                                                        size_t len) {
  const auto start = reinterpret_cast<uintptr_t>(addr);
  return PINSHIM_LIKELY(line.optimizing && len != 0 && len <= UINTPTR_MAX - start &&
                        !tracked.MayHoldAny(start, start + (len - 1)) &&
                        !line.MayHoldAny(start, start + len));
}

// Steps 3 to 5: the range holds, or may hold, what pinshim pinned: dropped
// before the call, the arena's memory pinned again after it (the engine
// takes the hook guard).
template <typename Fn, typename... Args>
inline auto CallDroppingPinning(uintptr_t start, uintptr_t end, PageChange what, Fn fn,
                                Args... args) -> decltype(fn(args...)) {
  ArenaChangeTicket arena;
  Optimizer& engine = Optimizer::Process();
  engine.DropPinningForPageChange(start, end, what, &arena);
  auto result = fn(args...);
  if (arena.n != 0) engine.RepinAfterPageChange(arena, what.stays_anonymous());
  return result;
}

// Every case but the common one, start to end: the thread has no slot yet
// or an outer change holds it (PageChangeSlots::Begin), or the range may
// hold what pinshim pinned. `marked`: the caller's fast mark holds the
// thread's slot already. Out of line and reached by a tail call, so the
// common path keeps nothing across its own call and no ticket on its stack.
template <typename Fn, typename... Args>
__attribute__((noinline)) auto CallMarked(uintptr_t start, uintptr_t end, PageChange what,
                                          bool marked, Fn fn, Args... args)
    -> decltype(fn(args...)) {
  const PageChangeSlots::Mark mark =
      marked ? PageChangeSlots::kSlot : PageChangeSlots::Begin(start, end);
  auto result = Optimizer::Process().MayHoldPinning(start, end, what)
                    ? CallDroppingPinning(start, end, what, fn, args...)
                    : fn(args...);
  PageChangeSlots::End(mark);
  return result;
}

// The entry point: returns fn(args...) (the real libc call), run as a
// change of the pages of [addr, addr + len) that does `what`. `optimizing`
// is the hooks' mode flag, or true where the caller knows it is on (it
// folds away). Where the range holds nothing pinshim pinned (nearly every
// call) this adds a few loads and two stores each way (bench/RESULTS.md,
// "2026-12-02, fifth part", measured with bench/page). Inlined into each
// hook, so that `what`, known there, folds away; the arguments are passed on
// as values, so none has to be kept in memory, and nothing but the result
// lives across the call. Calls nest (mremap's target inside its source).
template <typename Fn, typename... Args>
__attribute__((always_inline)) inline auto ChangePages(bool optimizing, const void* addr,
                                                       size_t len, const PageChange what, Fn fn,
                                                       Args... args) -> decltype(fn(args...)) {
  if (PINSHIM_LIKELY(!optimizing)) return fn(args...);
  if (len == 0 || Reentered(Reentry::kHook)) return fn(args...);
  const auto start = reinterpret_cast<uintptr_t>(addr);
  // Up to the top of the address space at most (a range there is empty only
  // when it starts at the very last byte, which no call can change).
  const uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;
  // Marked first: a registration that starts while this looks sees it.
  PageChangeSlots::Slot* mark = PageChangeSlots::TryMarkFast(start, end);
  if (PINSHIM_UNLIKELY(mark == nullptr)) return CallMarked(start, end, what, false, fn, args...);
  if (PINSHIM_UNLIKELY(Optimizer::Process().MayHoldPinning(start, end, what))) {
    return CallMarked(start, end, what, true, fn, args...);
  }
  auto result = fn(args...);
  PageChangeSlots::EndFast(mark);  // no load of the slot after the call
  return result;
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_PROTOCOL_H_
