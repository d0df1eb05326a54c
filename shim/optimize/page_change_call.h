// A call that may change which pages back [start, end), made as a page
// change (page_change.h): marked in PageChangeSlots, with what pinshim
// pinned there dropped before it and the arena's memory pinned again after
// it. The page hooks' general path (shim/hooks/page_change_scope.h) and a
// copy into a stream capture (copy_path.h), which unpins the program's
// memory for the driver's call, both make their calls through CallMarked.
#ifndef PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_CALL_H_
#define PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_CALL_H_

#include <cstdint>

#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_change.h"

namespace pinshim {
namespace optimize {

// The range holds, or may hold, what pinshim pinned: dropped before the
// call, the arena's memory pinned again after it (the engine takes the hook
// guard).
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
// hold what pinshim pinned. Out of line and reached by a tail call, so the
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

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_CALL_H_
