#include "shim/trace/wc_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "shim/core/macros.h"
#include "shim/trace/copy_watch.h"
#include "shim/trace/wc_ranges.h"

namespace pinshim {
namespace trace {
namespace {

// Pages armed lately. A fault on one of them that lost a race with a disarm
// (the page is accessible again) is still the guard's: the access is simply
// retried. Without this, such a fault would reach the program's handler.
constexpr int kRecent = 8;

// Constant-initialised, like the recorder's state (see recorder.cc).
struct GuardState {
  constexpr GuardState() = default;
  std::atomic<bool> installed{false};
  std::atomic<bool> arming{false};
  std::atomic<uintptr_t> armed{0};  // the page now protected, 0 none
  std::atomic<uintptr_t> recent[kRecent] = {};
  std::atomic<unsigned> recent_next{0};
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> armed_at_ns{0};
  std::atomic<uint64_t> last_arm_ns{0};
  std::atomic<uint64_t> pick{0};
  WcGuardReadFn on_read = nullptr;
  std::atomic<CopyGuardAccessFn> on_copy{nullptr};
  std::atomic<bool> trap_installed{false};
  std::atomic<uint64_t> steps{0};
  uintptr_t page_size = 4096;
  struct sigaction previous = {};
  struct sigaction previous_trap = {};
};
GuardState g;

// A step over one instruction next to a guarded copy (copy_watch.h,
// kStep): the pages opened for it, and the traps this thread owes pinshim
// (contexts it set the trap flag in that have not trapped yet). Only the
// thread itself and its signal handlers touch it; pinshim's handlers run
// with every asynchronous signal blocked.
constexpr int kStepPages = 4;
struct StepState {
  uintptr_t pages[kStepPages];
  int n;
  int owed;
};
PINSHIM_TLS StepState t_step;

#if defined(__x86_64__)
constexpr greg_t kTrapFlag = 0x100;  // EFLAGS.TF: trap after the next instruction
#endif

bool InRecent(uintptr_t page) {
  for (int i = 0; i < kRecent; ++i) {
    if (g.recent[i].load(std::memory_order_acquire) == page) return true;
  }
  return false;
}

void Unprotect(uintptr_t page) {
  int saved = errno;
  mprotect(reinterpret_cast<void*>(page), g.page_size, PROT_READ | PROT_WRITE);
  errno = saved;
}

void Disarm() {
  uintptr_t page = g.armed.exchange(0, std::memory_order_acq_rel);
  if (page != 0) Unprotect(page);
}

// Hands a signal that is not pinshim's to the handler the program had.
void ChainToPrevious(const struct sigaction& prev, int sig, siginfo_t* info, void* uc) {
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, uc);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: restore it. A fault repeats when the handler returns
  // and the kernel applies it (a core dump, as without pinshim); a trap
  // does not repeat, so it is raised again.
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  if (sig == SIGTRAP) raise(sig);
}

bool TrapHandlerInPlace();

void RestoreStepPages() {
  StepState& t = t_step;
  while (t.n > 0) CopyGuardRestorePage(t.pages[--t.n]);
}

// Lets the faulting instruction touch `page` once (copy_watch.h, kStep):
// opens it and sets the trap flag, so that OnTrap protects it again after
// that one instruction. An instruction that touches several guarded pages
// faults once for each, inside one step.
void StepOver(uintptr_t page, void* ucontext) {
#if defined(__x86_64__)
  greg_t& flags = static_cast<ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_EFL];
  StepState& t = t_step;
  // Pages left open by a step that never trapped in this context (a
  // handler of the program's ran in between, or left by longjmp): they are
  // protected again now, and fault again if still needed.
  if ((flags & kTrapFlag) == 0) RestoreStepPages();
  if (t.n == kStepPages || !TrapHandlerInPlace()) {
    CopyGuardDropPage(page);
    return;
  }
  bool listed = false;
  for (int i = 0; i < t.n; ++i) listed = listed || t.pages[i] == page;
  if (!listed) t.pages[t.n++] = page;
  CopyGuardOpenPage(page);
  g.steps.fetch_add(1, std::memory_order_relaxed);
  if ((flags & kTrapFlag) == 0) {
    flags |= kTrapFlag;
    ++t.owed;
  }
#else
  (void)ucontext;
  CopyGuardDropPage(page);
#endif
}

// The trap after a stepped instruction: its pages are protected again. A
// trap pinshim did not ask for goes to the program's handler.
void OnTrap(int sig, siginfo_t* info, void* uc) {
  StepState& t = t_step;
  RestoreStepPages();
#if defined(__x86_64__)
  if (info->si_code == TRAP_TRACE && t.owed > 0) {
    --t.owed;
    static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_EFL] &= ~kTrapFlag;
    return;
  }
#endif
  ChainToPrevious(g.previous_trap, sig, info, uc);
}

void OnSegv(int sig, siginfo_t* info, void* uc) {
  uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  uintptr_t page = addr & ~(g.page_size - 1);
  bool write = false;
#if defined(__x86_64__)
  // Page-fault error code: bit 1 set for a write access.
  write = (static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
  if (info->si_code == SEGV_ACCERR) {
    switch (CopyGuardFault(addr, write)) {
      case GuardFault::kRecord: {
        CopyGuardAccessFn fn = g.on_copy.load(std::memory_order_acquire);
        if (fn != nullptr) fn(uc, addr, write);
        return;
      }
      case GuardFault::kRetry: return;
      case GuardFault::kStep: StepOver(page, uc); return;
      case GuardFault::kNotGuard: break;
    }
  }
  if (info->si_code == SEGV_ACCERR && page != 0 && InRecent(page)) {
    uintptr_t expected = page;
    bool was_armed = g.armed.compare_exchange_strong(expected, 0);
    if (was_armed) Unprotect(page);
    if (was_armed && !write) {
      g.reads.fetch_add(1, std::memory_order_relaxed);
      if (g.on_read != nullptr) g.on_read(uc, addr);
    }
    return;
  }
  ChainToPrevious(g.previous, sig, info, uc);
}

bool OurHandlerInstalled() {
  struct sigaction now;
  if (sigaction(SIGSEGV, nullptr, &now) != 0) return false;
  return (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == OnSegv;
}

bool TrapHandlerInPlace() {
  struct sigaction now;
  if (!g.trap_installed.load(std::memory_order_acquire)) return false;
  if (sigaction(SIGTRAP, nullptr, &now) != 0) return false;
  return (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == OnTrap;
}

// pinshim's handlers run with every asynchronous signal blocked, so that
// no handler of the program's interrupts them half way through a step's
// bookkeeping; the synchronous ones stay open (a fault inside must not be
// held back).
void BlockAsynchronous(sigset_t* mask) {
  static constexpr int kSynchronous[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT};
  sigfillset(mask);
  for (int sig : kSynchronous) sigdelset(mask, sig);
}

void Arm(uint64_t now_ns) {
  WcRange ranges[64];
  size_t n = SnapshotWcRanges(ranges, 64);
  if (n == 0) return;
  // Walk ranges and pages with a stride, so that every page gets its turn.
  uint64_t k = g.pick.fetch_add(1);
  const WcRange& r = ranges[k % n];
  uintptr_t first = (r.begin + g.page_size - 1) & ~(g.page_size - 1);
  uintptr_t last = r.end & ~(g.page_size - 1);  // exclusive
  if (last <= first) return;                    // no whole page inside the range
  uint64_t pages = (last - first) / g.page_size;
  uintptr_t page = first + ((k / n) * 7919 % pages) * g.page_size;
  unsigned slot = g.recent_next.fetch_add(1) % kRecent;
  g.recent[slot].store(page, std::memory_order_release);
  g.armed_at_ns.store(now_ns);
  g.armed.store(page, std::memory_order_release);
  int saved = errno;
  if (mprotect(reinterpret_cast<void*>(page), g.page_size, PROT_NONE) != 0) {
    uintptr_t expected = page;
    g.armed.compare_exchange_strong(expected, 0);
  }
  errno = saved;
}

// Installs OnSegv once, keeping the program's handler to chain to.
bool InstallHandler(char* err, size_t err_len) {
#if !defined(__x86_64__)
  snprintf(err, err_len, "the page guards need x86-64");
  return false;
#else
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0) g.page_size = static_cast<uintptr_t>(ps);
  if (g.installed.load()) return true;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  BlockAsynchronous(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &g.previous) != 0) {
    snprintf(err, err_len, "cannot install the SIGSEGV handler: %s", strerror(errno));
    return false;
  }
  g.installed.store(true);
  return true;
#endif
}

}  // namespace

bool StartWcGuard(WcGuardReadFn on_read, char* err, size_t err_len) {
  g.on_read = on_read;
  if (!InstallHandler(err, err_len)) return false;
  g.arming.store(true);
  return true;
}

// Installs OnTrap once, keeping the program's handler to chain to. Without
// it, the copy guard keeps to the pages wholly inside a range.
void InstallTrapHandler() {
#if defined(__x86_64__)
  if (g.trap_installed.load()) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnTrap;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  BlockAsynchronous(&sa.sa_mask);
  if (sigaction(SIGTRAP, &sa, &g.previous_trap) == 0) g.trap_installed.store(true);
#endif
}

bool StartCopyGuard(CopyGuardAccessFn on_access, char* err, size_t err_len) {
  g.on_copy.store(on_access, std::memory_order_release);
  if (!InstallHandler(err, err_len)) return false;
  InstallTrapHandler();
  return true;
}

bool GuardHandlerInPlace() { return g.installed.load() && OurHandlerInstalled(); }

GuardPages CopyGuardPagesNow() {
  if (!GuardHandlerInPlace()) return GuardPages::kNone;
  return TrapHandlerInPlace() ? GuardPages::kAll : GuardPages::kWhole;
}

void WcGuardTick(uint64_t now_ns, uint32_t every_ms, uint32_t window_ms) {
  if (!g.arming.load(std::memory_order_relaxed)) return;
  uintptr_t armed = g.armed.load(std::memory_order_acquire);
  if (armed != 0) {
    if (now_ns - g.armed_at_ns.load() >= uint64_t{window_ms} * 1000000) Disarm();
    return;
  }
  if (now_ns - g.last_arm_ns.load() < uint64_t{every_ms} * 1000000) return;
  g.last_arm_ns.store(now_ns);
  // The program may have put its own handler in place since; then a guard
  // fault would reach it. Stop for good.
  if (!OurHandlerInstalled()) {
    g.arming.store(false);
    return;
  }
  Arm(now_ns);
}

void WcGuardDisarmFor(const void* ptr, size_t len) {
  uintptr_t page = g.armed.load(std::memory_order_acquire);
  if (page == 0) return;
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t b = a + (len == 0 ? 1 : len);
  if (a < page + g.page_size && page < b) {
    uintptr_t expected = page;
    if (g.armed.compare_exchange_strong(expected, 0)) Unprotect(page);
  }
}

void StopWcGuard() {
  g.arming.store(false);
  Disarm();
}

uint64_t WcGuardReads() { return g.reads.load(); }

uint64_t CopyGuardSteps() { return g.steps.load(); }

}  // namespace trace
}  // namespace pinshim
