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

// What one call does to the pages of [start, start + bytes). Eight bytes,
// passed in one register: the hooks build it from constants at every call.
class PageChange {
 public:
  enum Effect : uint8_t {
    kReplacesPrivate = 1,  // private memory (cache, arena) must be unpinned
    kReplacesShared = 2,   // shared memory (pool blocks) gets new pages
    // The range is mapped afterwards by private anonymous memory (the arena
    // may pin it again): madvise keeps the mapping; MAP_FIXED does when the
    // new mapping is private anonymous.
    kStaysAnonymous = 4,
  };
  constexpr PageChange(OwnPinReason reason, uint32_t detail, uint8_t effects)
      : detail_(detail), reason_(reason), effects_(effects) {}

  OwnPinReason reason() const { return reason_; }  // the call, for the trace
  uint32_t detail() const { return detail_; }      // the advice, or the mmap/mremap/shmat flags
  bool replaces_private() const { return (effects_ & kReplacesPrivate) != 0; }
  bool replaces_shared() const { return (effects_ & kReplacesShared) != 0; }
  bool stays_anonymous() const { return (effects_ & kStaysAnonymous) != 0; }

 private:
  uint32_t detail_;
  OwnPinReason reason_;
  uint8_t effects_;
};

// What an madvise advice does to pinshim's pinning (see the table above):
// 0 when it changes no page pinshim pinned, else PageChange effects.
constexpr uint8_t AdviceEffectsOf(int advice) {
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
    case MADV_NOHUGEPAGE: return 0;
    case MADV_DONTNEED:
    case MADV_DONTNEED_LOCKED:
    case MADV_FREE:
    case MADV_PAGEOUT:
    case MADV_WIPEONFORK:
    case MADV_MERGEABLE:
    case MADV_HUGEPAGE:
    case MADV_COLLAPSE: return PageChange::kReplacesPrivate | PageChange::kStaysAnonymous;
    default:  // MADV_REMOVE, HWPOISON, SOFT_OFFLINE, guards, values yet to come
      return PageChange::kReplacesPrivate | PageChange::kReplacesShared |
             PageChange::kStaysAnonymous;
  }
}

// The same from two constants the compiler puts in the instructions
// (inline: the madvise hooks ask at every call, and a table would be one
// more cache line for them to read after the kernel's work). Bit a of
// `changes`: advice a changes pages pinshim may have pinned (every such
// advice below 64 replaces private pages and leaves them anonymous); of
// `shared`: it replaces shared pages too.
struct AdviceMasks {
  uint64_t changes = 0;
  uint64_t shared = 0;
  constexpr AdviceMasks() {
    for (int a = 0; a < 64; ++a) {
      const uint8_t e = AdviceEffectsOf(a);
      if (e != 0) changes |= uint64_t{1} << a;
      if ((e & PageChange::kReplacesShared) != 0) shared |= uint64_t{1} << a;
    }
  }
};
inline constexpr AdviceMasks kAdviceMasks;

constexpr uint8_t AdviceEffects(int advice) {
  const auto a = static_cast<unsigned>(advice);
  if (a >= 64) return AdviceEffectsOf(advice);
  if (((kAdviceMasks.changes >> a) & 1) == 0) return 0;
  return PageChange::kReplacesPrivate | PageChange::kStaysAnonymous |
         (((kAdviceMasks.shared >> a) & 1) != 0 ? PageChange::kReplacesShared : 0);
}

// The masks say what the switch says, for every advice they answer.
constexpr bool AdviceMasksAgree() {
  for (int a = 0; a < 64; ++a) {
    if (AdviceEffects(a) != AdviceEffectsOf(a)) return false;
  }
  return true;
}
static_assert(AdviceMasksAgree(), "AdviceEffects answers as AdviceEffectsOf");

// Page changes in progress, so that no registration pins the pages of a
// range while a call is replacing them. The hooks mark their range before
// they look at what is pinned and clear it after the call (all but a
// MAP_FIXED, munmap or madvise of a range that holds no tracked allocation
// and no pinning: page_change_protocol.h, NothingThere); a registration,
// once its entry is visible to those hooks, asks whether any marked range
// overlaps it, and pins nothing if so (it is retried at a later copy).
//
// The hook side is two plain stores into the thread's own slot: the
// registration side, which is rare and costs far more anyway, pays for the
// ordering with membarrier() (MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes
// every thread of the process pass a full memory barrier. Where membarrier
// is unavailable the hooks pay for a fence themselves.
class PageChangeSlots {
 public:
  // What Begin hands to End.
  enum Mark : uint8_t {
    kNested = 0,     // an outer change on this thread holds the mark (widened)
    kSlot = 1,       // this call marked the thread's slot
    kUnslotted = 2,  // no slot was free: counted in the global count
  };
  // Once, before optimize mode pins anything (registers with membarrier).
  static void Setup();
  // Hook side: [lo, hi) (hi > lo) is about to change on this thread / has
  // changed. TryMarkFast marks the thread's own slot when it has one and no
  // outer change holds it (nearly always), and returns it as a handle the
  // caller keeps in a register across its call (null otherwise);
  // EndFast(mark) clears it: a few TLS and plain stores, inline, and no
  // load of the slot after the call. TryBeginFast is TryMarkFast for Begin.
  // Begin and End do every case: claiming a slot, none free, and nesting,
  // where a nested call on one thread (mremap's target inside its source)
  // widens the outer mark to cover both ranges, and the outer End clears it.
  struct Slot;
  static Slot* TryMarkFast(uintptr_t lo, uintptr_t hi);
  static bool TryBeginFast(uintptr_t lo, uintptr_t hi);
  static void EndFast(Slot* mark);
  static Mark Begin(uintptr_t lo, uintptr_t hi);
  static void End(Mark m);
  // Registration side: whether a marked range overlaps [lo, hi). Call after
  // the registration became visible to the hooks (its entry published).
  // ignore_own: leave the calling thread's own change out (a hook pinning
  // again after the change it made).
  static bool AnyOverlapping(uintptr_t lo, uintptr_t hi, bool ignore_own = false);
  // In a fork child: forgets the parent's threads.
  static void AfterForkChild();

 private:
  static constexpr int kSlots = 512;

 public:
  struct alignas(64) Slot {
    std::atomic<pid_t> owner{0};  // thread id, 0 free
    std::atomic<uintptr_t> lo{0};
    std::atomic<uintptr_t> hi{0};  // 0: no change in progress
  };

 private:
  // The slot a thread uses once no slot is free: its hi is never 0, so
  // TryBeginFast declines, and AnyOverlapping never reads it (the global
  // count stands for it).
  static Slot overflow_;
  static void EndUnslotted();
  static void OrderMark();

  static Slot slots_[kSlots];
  static std::atomic<bool> membarrier_;
  static PINSHIM_TLS Slot* t_slot_;  // null: none claimed yet
  // The same slot once claimed, where membarrier is registered (the fast
  // path orders its stores with a compiler barrier only); null otherwise.
  static PINSHIM_TLS Slot* t_fast_;
  static PINSHIM_TLS int t_unslotted_;  // this thread's changes in the global count
};

inline void PageChangeSlots::OrderMark() {
  if (PINSHIM_LIKELY(membarrier_.load(std::memory_order_relaxed))) {
    // The registration side's membarrier orders the mark's stores before
    // this thread's next loads; the compiler must not move them either.
    asm volatile("" ::: "memory");
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

inline PageChangeSlots::Slot* PageChangeSlots::TryMarkFast(uintptr_t lo, uintptr_t hi) {
  Slot* s = t_fast_;
  // Unclaimed, no membarrier, or nested: Begin.
  if (PINSHIM_UNLIKELY(s == nullptr || s->hi.load(std::memory_order_relaxed) != 0)) return nullptr;
  // hi first: a signal handler's change arriving between the stores finds
  // the slot held and widens it (the lo stored after is this call's; the
  // handler's change is over by then).
  s->hi.store(hi, std::memory_order_relaxed);
  s->lo.store(lo, std::memory_order_relaxed);
  // The registration side's membarrier orders these stores before this
  // thread's next loads; the compiler must not move them either.
  asm volatile("" ::: "memory");
  return s;
}

inline bool PageChangeSlots::TryBeginFast(uintptr_t lo, uintptr_t hi) {
  return TryMarkFast(lo, hi) != nullptr;
}

inline void PageChangeSlots::EndFast(Slot* mark) { mark->hi.store(0, std::memory_order_release); }

inline void PageChangeSlots::End(Mark m) {
  if (PINSHIM_LIKELY(m == kSlot)) {
    t_slot_->hi.store(0, std::memory_order_release);
  } else if (m == kUnslotted) {
    EndUnslotted();
  }
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PAGE_CHANGE_H_
