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

#include <sys/mman.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/core/macros.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

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
// the advice changes no page pinshim pinned. Inline: the madvise hooks ask
// at every call.
inline bool PageChangeOfAdvice(int advice, PageChange* out) {
  PageChange c;
  c.reason = OwnPinReason::kPageChangeMadvise;
  c.detail = static_cast<uint32_t>(advice);
  c.stays_anonymous = true;
  switch (advice) {
    case MADV_NORMAL:
    case MADV_RANDOM:
    case MADV_SEQUENTIAL:
    case MADV_WILLNEED:
    case MADV_COLD:
    case MADV_DONTDUMP:
    case MADV_DODUMP:
    case MADV_POPULATE_READ:
    case MADV_POPULATE_WRITE:
    case MADV_DONTFORK:
    case MADV_DOFORK:
    case MADV_KEEPONFORK:
    case MADV_UNMERGEABLE:
    case MADV_NOHUGEPAGE: return false;
    case MADV_DONTNEED:
    case MADV_DONTNEED_LOCKED:
    case MADV_FREE:
    case MADV_PAGEOUT:
    case MADV_WIPEONFORK:
    case MADV_MERGEABLE:
    case MADV_HUGEPAGE:
    case MADV_COLLAPSE:
      c.replaces_private = true;
      c.replaces_shared = false;
      break;
    default:  // MADV_REMOVE, HWPOISON, SOFT_OFFLINE, guards, values yet to come
      c.replaces_private = true;
      c.replaces_shared = true;
      break;
  }
  *out = c;
  return true;
}

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
  // Nested calls on one thread keep the outer range marked. Inline: every
  // page-changing call in optimize mode makes them (a few TLS and plain
  // stores).
  static void Begin(uintptr_t lo, uintptr_t hi);
  static void End();
  // Registration side: whether a marked range overlaps [lo, hi). Call after
  // the registration became visible to the hooks (its entry published).
  // ignore_own: leave the calling thread's own change out (a hook pinning
  // again after the change it made).
  static bool AnyOverlapping(uintptr_t lo, uintptr_t hi, bool ignore_own = false);
  // In a fork child: forgets the parent's threads.
  static void AfterForkChild();

 private:
  static constexpr int kSlots = 512;
  struct alignas(64) Slot {
    std::atomic<pid_t> owner{0};  // thread id, 0 free
    std::atomic<uintptr_t> lo{0};
    std::atomic<uintptr_t> hi{0};  // 0: no change in progress
  };
  // -1: none claimed yet; -2: none free (BeginUnslotted).
  static int ClaimSlot();
  static void BeginUnslotted();
  static void EndUnslotted();

  static Slot slots_[kSlots];
  static std::atomic<bool> membarrier_;
  static PINSHIM_TLS int t_slot_;
  static PINSHIM_TLS int t_nesting_;
};

inline void PageChangeSlots::Begin(uintptr_t lo, uintptr_t hi) {
  if (t_nesting_++ != 0) return;
  if (PINSHIM_UNLIKELY(t_slot_ == -1)) t_slot_ = ClaimSlot();
  if (PINSHIM_UNLIKELY(t_slot_ < 0)) {
    BeginUnslotted();
    return;
  }
  Slot& s = slots_[t_slot_];
  s.lo.store(lo, std::memory_order_relaxed);
  s.hi.store(hi > lo ? hi : lo + 1, std::memory_order_relaxed);
  if (PINSHIM_LIKELY(membarrier_.load(std::memory_order_relaxed))) {
    // The registration side's membarrier orders these stores before this
    // thread's next loads; the compiler must not move them either.
    asm volatile("" ::: "memory");
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

inline void PageChangeSlots::End() {
  if (--t_nesting_ != 0) return;
  if (PINSHIM_UNLIKELY(t_slot_ < 0)) {
    EndUnslotted();
    return;
  }
  slots_[t_slot_].hi.store(0, std::memory_order_release);
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_H_
