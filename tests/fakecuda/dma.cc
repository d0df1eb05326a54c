// How the simulated device moves bytes to and from page-locked host memory.
//
// A real device reaches page-locked memory by DMA, which CPU page
// protections do not affect, and which never faults: pinshim's copy guard
// (PINSHIM_COPY_GUARD) protects the pages under a queued copy and relies on
// exactly that. So bytes of page-locked ranges (cuMemHostAlloc allocations
// and registrations) move through /proc/self/mem, which the kernel serves
// whatever the protection of a private mapping (as it does for debuggers);
// a range the program unmapped while registered takes nothing and gives
// nothing, where the hardware would have used the pages the driver still
// holds. Everything else, and every range where /proc/self/mem cannot be
// opened, moves with libc's own memmove, invisible to interposed copy
// functions like the DMA it stands for.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

// This process's /proc/self/mem, opened again after a fork; -1 when it
// cannot be opened.
int MemFd() {
  static std::atomic<int> fd{-2};
  static std::atomic<pid_t> owner{0};
  const pid_t pid = getpid();
  int f = fd.load(std::memory_order_acquire);
  if (f != -2 && owner.load(std::memory_order_acquire) == pid) return f;
  int opened = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
  int expected = f;
  if (fd.compare_exchange_strong(expected, opened)) {
    owner.store(pid, std::memory_order_release);
    return opened;
  }
  if (opened >= 0) close(opened);
  return fd.load(std::memory_order_acquire);
}

// Whether [p, p + n) lies in a page-locked range of this driver's.
bool PageLocked(const void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto* ranges : {&s.host_allocs, &s.registrations}) {
    auto it = ranges->upper_bound(a + (n == 0 ? 0 : n - 1));
    if (it == ranges->begin()) continue;
    --it;
    if (a < it->first + it->second.size) return true;
  }
  return false;
}

bool Full(ssize_t done, size_t n) { return done >= 0 && static_cast<size_t>(done) == n; }

// Reads [src, src + n) into dst (ordinary memory) through the memory file.
bool ReadMem(int fd, void* dst, const void* src, size_t n) {
  size_t off = 0;
  while (off < n) {
    ssize_t got = pread(fd, static_cast<char*>(dst) + off, n - off,
                        static_cast<off_t>(reinterpret_cast<uintptr_t>(src) + off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    off += static_cast<size_t>(got);
  }
  return true;
}

bool WriteMem(int fd, void* dst, const void* src, size_t n) {
  size_t off = 0;
  while (off < n) {
    ssize_t put = pwrite(fd, static_cast<const char*>(src) + off, n - off,
                         static_cast<off_t>(reinterpret_cast<uintptr_t>(dst) + off));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    off += static_cast<size_t>(put);
  }
  return true;
}

}  // namespace

void DmaMove(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  const bool dst_locked = PageLocked(dst, n);
  const bool src_locked = PageLocked(src, n);
  const int fd = dst_locked || src_locked ? MemFd() : -1;
  if (fd < 0) {
    LibcMemmove()(dst, src, n);
    return;
  }
  if (dst_locked && !src_locked) {
    WriteMem(fd, dst, src, n);
  } else if (src_locked && !dst_locked) {
    ReadMem(fd, dst, src, n);
  } else {
    // Host to host between page-locked ranges: through a bounce buffer, in
    // the direction that keeps overlapping ranges right.
    char bounce[64 * 1024];
    const bool backward = dst > src;
    for (size_t done = 0; done < n;) {
      const size_t chunk = n - done < sizeof(bounce) ? n - done : sizeof(bounce);
      const size_t at = backward ? n - done - chunk : done;
      if (!ReadMem(fd, bounce, static_cast<const char*>(src) + at, chunk)) break;
      if (!WriteMem(fd, static_cast<char*>(dst) + at, bounce, chunk)) break;
      done += chunk;
    }
  }
}

}  // namespace fakecuda
