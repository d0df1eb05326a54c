// Interposed calls that change the pages behind a range without allocating
// or freeing: madvise and its relatives, System V shared memory attached
// over a range, and the heap's break moved down. (mmap with MAP_FIXED,
// munmap and mremap are in libc_hooks.cc, with the rest of mmap.) Each one
// forwards its arguments untouched and returns what libc returns; in
// optimize mode pinshim's pinning of the range is dealt with first
// (optimize/page_change_protocol.h; optimize/page_change.h for the table of
// advice).
//
// Not interposed, and why: shmdt detaches System V segments, which pinshim
// never pins (they are not malloc or mmap memory); mprotect changes no page;
// system calls made without libc's wrappers (syscall(SYS_madvise, ...),
// io_uring, another process) cannot be seen: docs/limits.md, and
// PINSHIM_VERIFY_PAGES, cover them.
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "shim/hooks/raw_syscall.h"
#include "shim/hooks/state.h"
#include "shim/optimize/page_change_protocol.h"

namespace pinshim {
namespace {

inline bool EnsureRealFunctions() {
  if (PINSHIM_LIKELY(__atomic_load_n(&g_real.malloc, __ATOMIC_ACQUIRE) != nullptr)) return true;
  ResolveRealFunctions();
  return __atomic_load_n(&g_real.malloc, __ATOMIC_ACQUIRE) != nullptr;
}

// madvise before the real functions are known (the first calls in a
// process): resolves them, or makes the system call. Out of line, so the
// hooks keep no frame for it.
__attribute__((noinline)) int MadviseUnresolved(void* addr, size_t len, int advice) {
  if (EnsureRealFunctions() && g_real.madvise != nullptr) return g_real.madvise(addr, len, advice);
  return static_cast<int>(syscall(SYS_madvise, addr, len, advice));
}

__attribute__((noinline)) int PosixMadviseUnresolved(void* addr, size_t len, int advice) {
  if (EnsureRealFunctions() && g_real.posix_madvise != nullptr) {
    return g_real.posix_madvise(addr, len, advice);
  }
  return static_cast<int>(syscall(SYS_madvise, addr, len, advice)) == 0 ? 0 : errno;
}

// The PageChange of madvise-family advice with these effects (the engine's
// table, optimize/page_change.h).
constexpr optimize::PageChange AdviceChange(int advice, uint8_t effects) {
  return optimize::PageChange(OwnPinReason::kPageChangeMadvise, static_cast<uint32_t>(advice),
                              effects);
}

// posix_madvise with advice that changes pages, in optimize mode. Out of
// line and reached by a tail call, so the hook's path for every other call
// keeps no frame, and this one keeps little across the real call.
__attribute__((noinline)) int AdviseChangingPages(int (*real)(void*, size_t, int), void* addr,
                                                  size_t len, int advice, uint8_t effects) {
  return optimize::ChangePages(true, addr, len, AdviceChange(advice, effects), real, addr, len,
                               advice);
}

// madvise with advice that changes pages, in optimize mode, the same way:
// it makes the system call itself where libc's madvise is the next one
// (raw_syscall.h), and otherwise reads the real function only now.
__attribute__((noinline)) int MadviseChangingPages(void* addr, size_t len, int advice,
                                                   uint8_t effects) {
  const optimize::PageHookLine& line = optimize::PageLine();
  if (line.raw_calls && optimize::NothingThere(line, g_allocations, addr, len))
    return RawMadvise(addr, len, advice);
  if (line.raw_calls) {
    return optimize::ChangePages(true, addr, len, AdviceChange(advice, effects), RawMadvise, addr,
                                 len, advice);
  }
  auto real = __atomic_load_n(&g_real.madvise, __ATOMIC_RELAXED);
  if (PINSHIM_UNLIKELY(real == nullptr)) return MadviseUnresolved(addr, len, advice);
  return AdviseChangingPages(real, addr, len, advice, effects);
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the hooks below are extern "C"

extern "C" {

// Each entry of g_real is written once, so a non-null one read without
// ordering is the right one.
// madvise reads the page hooks' line first: in optimize mode, advice that
// changes pages goes on from there (the line says the real functions are
// known: it is set after they were resolved).
int madvise(void* addr, size_t len, int advice) {
  uint8_t effects;
  if (PINSHIM_UNLIKELY(optimize::PageLine().optimizing) &&
      (effects = optimize::AdviceEffects(advice)) != 0) {
    return MadviseChangingPages(addr, len, advice, effects);
  }
  auto real = __atomic_load_n(&g_real.madvise, __ATOMIC_RELAXED);
  if (PINSHIM_UNLIKELY(real == nullptr)) return MadviseUnresolved(addr, len, advice);
  return real(addr, len, advice);
}

// glibc ignores POSIX_MADV_DONTNEED (the POSIX meaning differs); the other
// values are madvise's. Treated as madvise's advice of the same value.
int posix_madvise(void* addr, size_t len, int advice) {
  auto real = __atomic_load_n(&g_real.posix_madvise, __ATOMIC_RELAXED);
  if (PINSHIM_UNLIKELY(real == nullptr)) return PosixMadviseUnresolved(addr, len, advice);
  uint8_t effects;
  if (PINSHIM_LIKELY(!g_optimize) || (effects = optimize::AdviceEffects(advice)) == 0) {
    return real(addr, len, advice);
  }
  return AdviseChangingPages(real, addr, len, advice, effects);
}

// The target may be this process or another; it is taken to be this one
// (for another, pinshim drops pinning it did not need to). One range covers
// all the vectors.
ssize_t process_madvise(int pidfd, const struct iovec* iov, size_t vlen, int advice,
                        unsigned int flags) {
  auto call = [&] {
    if (g_real.process_madvise != nullptr) {
      return g_real.process_madvise(pidfd, iov, vlen, advice, flags);
    }
    return static_cast<ssize_t>(syscall(SYS_process_madvise, pidfd, iov, vlen, advice, flags));
  };
  uint8_t effects = 0;
  if (PINSHIM_UNLIKELY(!EnsureRealFunctions()) || PINSHIM_LIKELY(!g_optimize) || iov == nullptr ||
      vlen == 0 || (effects = optimize::AdviceEffects(advice)) == 0) {
    return call();
  }
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (size_t i = 0; i < vlen && i < 1024; ++i) {
    const auto b = reinterpret_cast<uintptr_t>(iov[i].iov_base);
    if (iov[i].iov_len == 0 || b > UINTPTR_MAX - iov[i].iov_len) continue;
    if (b < lo) lo = b;
    if (b + iov[i].iov_len > hi) hi = b + iov[i].iov_len;
  }
  if (hi <= lo) return call();
  return optimize::ChangePages(g_optimize, reinterpret_cast<void*>(lo), hi - lo,
                               AdviceChange(advice, effects), call);
}

// SHM_REMAP attaches a segment over whatever is mapped at shmaddr.
void* shmat(int shmid, const void* shmaddr, int shmflg) {
  if (PINSHIM_UNLIKELY(!EnsureRealFunctions() || g_real.shmat == nullptr)) {
    errno = ENOSYS;
    return reinterpret_cast<void*>(-1);
  }
  if (PINSHIM_LIKELY(!g_optimize) || shmaddr == nullptr || (shmflg & SHM_REMAP) == 0) {
    return g_real.shmat(shmid, shmaddr, shmflg);
  }
  struct shmid_ds ds;
  size_t len = 0;
  if (shmctl(shmid, IPC_STAT, &ds) == 0) len = ds.shm_segsz;
  uintptr_t at = reinterpret_cast<uintptr_t>(shmaddr);
  if ((shmflg & SHM_RND) != 0) at -= at % SHMLBA;
  return optimize::ChangePages(
      g_optimize, reinterpret_cast<void*>(at), len,
      optimize::PageChangeOf(OwnPinReason::kPageChangeShm, static_cast<uint32_t>(shmflg), false),
      g_real.shmat, shmid, shmaddr, shmflg);
}

// Moving the break down unmaps the heap's top. glibc's malloc moves it
// itself without these symbols, but only over memory no live allocation
// holds (and pinshim pins only live allocations' pages).
int brk(void* addr) {
  if (PINSHIM_UNLIKELY(!EnsureRealFunctions() || g_real.brk == nullptr)) {
    errno = ENOMEM;
    return -1;
  }
  void* now = PINSHIM_LIKELY(!g_optimize) || g_real.sbrk == nullptr ? nullptr : g_real.sbrk(0);
  if (now == nullptr || addr >= now) return g_real.brk(addr);
  return optimize::ChangePages(
      g_optimize, addr, reinterpret_cast<uintptr_t>(now) - reinterpret_cast<uintptr_t>(addr),
      optimize::PageChangeOf(OwnPinReason::kPageChangeBrk, 0, false), g_real.brk, addr);
}

void* sbrk(intptr_t increment) {
  if (PINSHIM_UNLIKELY(!EnsureRealFunctions() || g_real.sbrk == nullptr)) {
    errno = ENOMEM;
    return reinterpret_cast<void*>(-1);
  }
  if (PINSHIM_LIKELY(!g_optimize) || increment >= 0) return g_real.sbrk(increment);
  auto* now = static_cast<char*>(g_real.sbrk(0));
  return optimize::ChangePages(g_optimize, now + increment, static_cast<size_t>(-increment),
                               optimize::PageChangeOf(OwnPinReason::kPageChangeBrk, 0, false),
                               g_real.sbrk, increment);
}

}  // extern "C"
