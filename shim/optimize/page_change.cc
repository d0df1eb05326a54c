#include "shim/optimize/page_change.h"

#include <linux/membarrier.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "shim/core/macros.h"
#include "shim/core/reentry.h"
#include "shim/optimize/optimizer.h"

namespace pinshim {
namespace optimize {

PageChangeSlots::Slot PageChangeSlots::slots_[PageChangeSlots::kSlots];
PageChangeSlots::Slot PageChangeSlots::overflow_;
std::atomic<bool> PageChangeSlots::membarrier_{false};
PINSHIM_TLS PageChangeSlots::Slot* PageChangeSlots::t_slot_ = nullptr;
PINSHIM_TLS PageChangeSlots::Slot* PageChangeSlots::t_fast_ = nullptr;
PINSHIM_TLS int PageChangeSlots::t_unslotted_ = 0;

namespace {

// Changes in progress on threads that found no free slot: they overlap
// every registration.
std::atomic<int> g_unslotted{0};

pid_t Tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

bool Alive(pid_t tid) { return syscall(SYS_tgkill, getpid(), tid, 0) == 0 || errno != ESRCH; }

}  // namespace

PageChangeSlots::Mark PageChangeSlots::Begin(uintptr_t lo, uintptr_t hi) {
  if (TryBeginFast(lo, hi)) return kSlot;
  Slot* s = t_slot_;
  if (s == nullptr) {
    const pid_t self = Tid();
    for (int pass = 0; pass < 2 && s == nullptr; ++pass) {
      for (int i = 0; i < kSlots; ++i) {
        pid_t owner = slots_[i].owner.load(std::memory_order_relaxed);
        // A slot of a thread that exited is taken over (it ended its change).
        if (owner != 0 && (pass == 0 || owner == self || Alive(owner))) continue;
        if (slots_[i].owner.compare_exchange_strong(owner, self)) {
          s = &slots_[i];
          break;
        }
      }
    }
    if (s == nullptr) {
      overflow_.hi.store(UINTPTR_MAX, std::memory_order_relaxed);
      s = &overflow_;
    }
    t_slot_ = s;
  }
  if (s == &overflow_) {
    ++t_unslotted_;
    g_unslotted.fetch_add(1, std::memory_order_seq_cst);
    return kUnslotted;
  }
  if (s->hi.load(std::memory_order_relaxed) == 0) {
    // Not nested. From now on the fast path serves this thread, where the
    // registration side's membarrier orders its stores.
    if (membarrier_.load(std::memory_order_relaxed)) t_fast_ = s;
    s->hi.store(hi, std::memory_order_relaxed);
    s->lo.store(lo, std::memory_order_relaxed);
    OrderMark();
    return kSlot;
  }
  // Nested: the outer mark grows to cover this range too.
  if (lo < s->lo.load(std::memory_order_relaxed)) s->lo.store(lo, std::memory_order_relaxed);
  if (hi > s->hi.load(std::memory_order_relaxed)) s->hi.store(hi, std::memory_order_relaxed);
  OrderMark();
  return kNested;
}

void PageChangeSlots::EndUnslotted() {
  --t_unslotted_;
  g_unslotted.fetch_sub(1, std::memory_order_release);
}

void PageChangeSlots::Setup() {
  // Registration is per process and cheap; a kernel without it (< 4.14) or
  // a seccomp filter that refuses it leaves the hooks on fences.
  const bool ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  membarrier_.store(ok, std::memory_order_release);
}

bool PageChangeSlots::AnyOverlapping(uintptr_t lo, uintptr_t hi, bool ignore_own) {
  if (membarrier_.load(std::memory_order_acquire)) {
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  const int own_unslotted = ignore_own ? t_unslotted_ : 0;
  if (g_unslotted.load(std::memory_order_acquire) > own_unslotted) return true;
  for (int i = 0; i < kSlots; ++i) {
    if (ignore_own && &slots_[i] == t_slot_) continue;
    const uintptr_t shi = slots_[i].hi.load(std::memory_order_acquire);
    if (shi == 0) continue;
    const uintptr_t slo = slots_[i].lo.load(std::memory_order_relaxed);
    if (slo < hi && lo < shi) return true;
  }
  return false;
}

void PageChangeSlots::AfterForkChild() {
  for (Slot& s : slots_) {
    s.owner.store(0, std::memory_order_relaxed);
    s.hi.store(0, std::memory_order_relaxed);
  }
  g_unslotted.store(0);
  t_slot_ = nullptr;
  t_fast_ = nullptr;
  t_unslotted_ = 0;
  membarrier_.store(false);
}

// The engine's side of the protocol (page_change_protocol.h, steps 3 and 5).

void Optimizer::DropPinningForPageChange(uintptr_t start, uintptr_t end, PageChange what,
                                         ArenaChangeTicket* arena) {
  arena->n = 0;
  if (!active()) return;
  const uint64_t n = end - start;
  ReentryGuard guard(Reentry::kHook);
  // Each part looks at its own bounds first (MayOverlap).
  if (what.replaces_private() && cache_on_.load(std::memory_order_relaxed)) {
    cache_.OnPageChange(start, n, what.reason(), what.detail());
  }
  if (what.replaces_private() && arena_on_.load(std::memory_order_relaxed)) {
    arena_.BeginPageChange(start, n, what.reason(), what.detail(), arena);
  }
  if (what.replaces_shared() && pool_on_.load(std::memory_order_relaxed)) {
    pool_.Retire(start, n, what.reason(), what.detail());
  }
}

void Optimizer::RepinAfterPageChange(const ArenaChangeTicket& arena, bool stays_anonymous) {
  ReentryGuard guard(Reentry::kHook);
  arena_.EndPageChange(arena, stays_anonymous);
}

}  // namespace optimize
}  // namespace pinshim
