// The system calls behind libc's mmap, munmap and madvise, made inline by
// the page hooks' fast paths (optimize mode, a range that holds nothing
// pinshim pinned), where libc's own functions are the next ones after
// pinshim's (PageHookLine::raw_calls, set by Init).
//
// Why: a hook that calls libc's wrapper returns twice after the system
// call (wrapper to hook, hook to program) where the program alone returns
// once. After a call the kernel works on (a MAP_FIXED over a mapped page),
// the extra return is measurable, against nothing after a call it refuses
// at once (bench/RESULTS.md, "2026-12-02, fourth part": the page hooks'
// frame after the kernel worked). Made here, the call returns once, as the
// program's own call to libc does.
//
// What libc's x86-64 wrappers do besides the system call, done the same:
// the result, or -1 / MAP_FAILED with errno set. (glibc's mmap changes its
// arguments only with the glibc.cpu.prefer_map_32bit_exec tunable, for an
// executable mapping without MAP_FIXED: never a fast path's call.) Another
// library interposing these functions between pinshim and libc is called as
// before.
#ifndef PINSHIM_SHIM_HOOKS_RAW_SYSCALL_H_
#define PINSHIM_SHIM_HOOKS_RAW_SYSCALL_H_

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <cstddef>

namespace pinshim {

#if defined(__x86_64__)
constexpr bool kRawPageCalls = true;

inline long RawSyscall6(long nr, long a, long b, long c, long d, long e, long f) {
  long r;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(r)
               : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return r;
}
#else
constexpr bool kRawPageCalls = false;
inline long RawSyscall6(long, long, long, long, long, long, long) { return -ENOSYS; }
#endif

// A raw result as libc returns it: failures are -errno.
inline bool RawFailed(long r) { return r < 0 && r > -4096; }

inline void* RawMmap(void* addr, size_t len, int prot, int flags, int fd, long off) {
  const long r = RawSyscall6(SYS_mmap, reinterpret_cast<long>(addr), static_cast<long>(len), prot,
                             flags, fd, off);
  if (RawFailed(r)) {
    errno = static_cast<int>(-r);
    return MAP_FAILED;
  }
  return reinterpret_cast<void*>(r);
}

inline int RawMunmap(void* addr, size_t len) {
  const long r =
      RawSyscall6(SYS_munmap, reinterpret_cast<long>(addr), static_cast<long>(len), 0, 0, 0, 0);
  if (RawFailed(r)) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return static_cast<int>(r);
}

inline int RawMadvise(void* addr, size_t len, int advice) {
  const long r = RawSyscall6(SYS_madvise, reinterpret_cast<long>(addr), static_cast<long>(len),
                             advice, 0, 0, 0);
  if (RawFailed(r)) {
    errno = static_cast<int>(-r);
    return -1;
  }
  return static_cast<int>(r);
}

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_RAW_SYSCALL_H_
