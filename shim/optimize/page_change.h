// Calls that change which pages back a range of the program's memory, and
// what optimize mode must do about each before it takes effect (invariant 8,
// shim/INVARIANTS.md).
//
// pinshim pins memory three ways, and a page change means something else
// to each (measured on the H200, bench/RESULTS.md "pages that change under
// pinned memory"):
//   - registration cache and host arena: the program's private anonymous
//     memory pinned in place. A call that replaces its pages leaves the
//     registration holding the old ones: the device would get stale data.
//     pinshim unpins before the call (the cache) or unpins and pins again
//     after it (the arena, whose memory the program took for malloc's).
//   - pinned pool: the driver's own page-locked memory (shared anonymous
//     memory), carved into the program's cuMemHostAlloc blocks. A call on a
//     block does to it exactly what it does to the driver's own allocation
//     (the same kind of memory); what pinshim must prevent is handing those
//     pages to a later allocation, so the block's slab is retired.
//
// Advice values (madvise, posix_madvise, process_madvise), from the kernel's
// documented semantics and, where marked, measured on the H200:
//
//   advice                      private memory          shared (pool) memory
//   NORMAL RANDOM SEQUENTIAL    hint only               hint only
//   WILLNEED COLD DONTDUMP
//   DODUMP POPULATE_READ
//   POPULATE_WRITE (measured)
//   DONTFORK DOFORK KEEPONFORK  a fork child's view only; the parent's pages stay
//   (DONTFORK measured)
//   UNMERGEABLE NOHUGEPAGE      stops future merging    -
//   DONTNEED DONTNEED_LOCKED    pages replaced          content kept (measured)
//   (measured: device got the old data)
//   FREE                        may be replaced         refused by the kernel
//   PAGEOUT                     reclaim (pinned pages stay; measured) -
//   WIPEONFORK                  the child's view only, but unpinned:
//                               conservative
//   MERGEABLE HUGEPAGE COLLAPSE KSM / khugepaged may replace pages; both skip
//                               pinned pages, unpinned conservatively
//   REMOVE                      (refused)               pages punched out
//                                                       (measured: device old)
//   HWPOISON SOFT_OFFLINE       page replaced           page replaced
//   GUARD_INSTALL GUARD_REMOVE  pages zapped            pages zapped
//   any other value             treated as replacing    treated as replacing
#ifndef PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_H_
#define PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_H_

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"

namespace pinshim {
namespace optimize {

// What one call does to the pages of [start, start + bytes).
struct PageChange {
  OwnPinReason reason = OwnPinReason::kPageChangeMadvise;  // the call, for the trace
  uint32_t detail = 0;           // the advice, or the mmap/mremap/shmat flags
  bool replaces_private = true;  // private memory (cache, arena) must be unpinned
  bool replaces_shared = false;  // shared memory (pool blocks) gets new pages
  // The range is mapped afterwards by private anonymous memory (the arena
  // may pin it again): madvise keeps the mapping; MAP_FIXED does when the
  // new mapping is private anonymous.
  bool stays_anonymous = true;
};

// The PageChange an madvise advice makes (see the table above); false when
// the advice changes no page pinshim pinned.
bool PageChangeOfAdvice(int advice, PageChange* out);

// Page changes in progress, so that no registration pins the pages of a
// range while a call is replacing them. The hooks mark their range before
// they look at what is pinned and clear it after the call; a registration,
// once its entry is visible to those hooks, asks whether any marked range
// overlaps it, and pins nothing if so (it is retried at a later copy).
//
// The hook side is a few plain stores: the registration side, which is rare
// and costs far more anyway, pays for the ordering with membarrier()
// (MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every thread of the
// process pass a full memory barrier. Where membarrier is unavailable the
// hooks pay for a fence themselves.
class PageChangeSlots {
 public:
  // Once, before optimize mode pins anything (registers with membarrier).
  static void Setup();
  // Hook side: [lo, hi) is about to change on this thread / has changed.
  // Nested calls on one thread keep the outer range marked.
  static void Begin(uintptr_t lo, uintptr_t hi);
  static void End();
  // Registration side: whether a marked range overlaps [lo, hi). Call after
  // the registration became visible to the hooks (its entry published).
  // ignore_own: leave the calling thread's own change out (a hook pinning
  // again after the change it made).
  static bool AnyOverlapping(uintptr_t lo, uintptr_t hi, bool ignore_own = false);
  // In a fork child: forgets the parent's threads.
  static void AfterForkChild();
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_H_
