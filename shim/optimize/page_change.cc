#include "shim/optimize/page_change.h"

#include <linux/membarrier.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "shim/core/macros.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace pinshim {
namespace optimize {

bool PageChangeOfAdvice(int advice, PageChange* out) {
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

namespace {

constexpr int kSlots = 512;

struct alignas(64) Slot {
  std::atomic<pid_t> owner{0};  // thread id, 0 free
  std::atomic<uintptr_t> lo{0};
  std::atomic<uintptr_t> hi{0};  // 0: no change in progress
};

Slot g_slots[kSlots];
// Changes in progress on threads that found no free slot: they overlap
// every registration.
std::atomic<int> g_unslotted{0};
std::atomic<bool> g_membarrier{false};

// -1: not claimed yet; -2: none free (uses g_unslotted).
PINSHIM_TLS int t_slot = -1;
PINSHIM_TLS int t_nesting = 0;

pid_t Tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

bool Alive(pid_t tid) { return syscall(SYS_tgkill, getpid(), tid, 0) == 0 || errno != ESRCH; }

int ClaimSlot() {
  const pid_t self = Tid();
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kSlots; ++i) {
      pid_t owner = g_slots[i].owner.load(std::memory_order_relaxed);
      // A slot of a thread that exited is taken over (it ended its change).
      if (owner != 0 && (pass == 0 || owner == self || Alive(owner))) continue;
      if (g_slots[i].owner.compare_exchange_strong(owner, self)) return i;
    }
  }
  return -2;
}

}  // namespace

void PageChangeSlots::Setup() {
  // Registration is per process and cheap; a kernel without it (< 4.14) or
  // a seccomp filter that refuses it leaves the hooks on fences.
  const bool ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  g_membarrier.store(ok, std::memory_order_release);
}

void PageChangeSlots::Begin(uintptr_t lo, uintptr_t hi) {
  if (t_nesting++ != 0) return;
  if (t_slot == -1) t_slot = ClaimSlot();
  if (t_slot < 0) {
    g_unslotted.fetch_add(1, std::memory_order_seq_cst);
    return;
  }
  Slot& s = g_slots[t_slot];
  s.lo.store(lo, std::memory_order_relaxed);
  s.hi.store(hi > lo ? hi : lo + 1, std::memory_order_relaxed);
  if (g_membarrier.load(std::memory_order_relaxed)) {
    // The registration side's membarrier orders these stores before this
    // thread's next loads; the compiler must not move them either.
    asm volatile("" ::: "memory");
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

void PageChangeSlots::End() {
  if (--t_nesting != 0) return;
  if (t_slot < 0) {
    g_unslotted.fetch_sub(1, std::memory_order_release);
    return;
  }
  g_slots[t_slot].hi.store(0, std::memory_order_release);
}

bool PageChangeSlots::AnyOverlapping(uintptr_t lo, uintptr_t hi, bool ignore_own) {
  if (g_membarrier.load(std::memory_order_acquire)) {
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  const int own_unslotted = ignore_own && t_slot == -2 && t_nesting != 0 ? 1 : 0;
  if (g_unslotted.load(std::memory_order_acquire) > own_unslotted) return true;
  for (int i = 0; i < kSlots; ++i) {
    if (ignore_own && i == t_slot) continue;
    const uintptr_t shi = g_slots[i].hi.load(std::memory_order_acquire);
    if (shi == 0) continue;
    const uintptr_t slo = g_slots[i].lo.load(std::memory_order_relaxed);
    if (slo < hi && lo < shi) return true;
  }
  return false;
}

void PageChangeSlots::AfterForkChild() {
  for (Slot& s : g_slots) {
    s.owner.store(0, std::memory_order_relaxed);
    s.hi.store(0, std::memory_order_relaxed);
  }
  g_unslotted.store(0);
  t_slot = -1;
  t_nesting = 0;
  g_membarrier.store(false);
}

}  // namespace optimize
}  // namespace pinshim
