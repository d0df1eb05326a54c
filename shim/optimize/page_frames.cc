#include "shim/optimize/page_frames.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace pinshim {
namespace optimize {
namespace {

constexpr uint64_t kPresent = uint64_t{1} << 63;
constexpr uint64_t kFrameMask = (uint64_t{1} << 55) - 1;

std::atomic<int> g_fd{-1};
std::atomic<pid_t> g_fd_pid{0};
uint64_t g_page = 4096;

// The library's own file accesses go to the kernel directly (a hook of the
// program's may be on open/read).
int RawOpen(const char* path) {
  return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC));
}

bool RawPread(int fd, void* buf, size_t n, uint64_t off) {
  char* p = static_cast<char*>(buf);
  while (n != 0) {
    long r = syscall(SYS_pread64, fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

PageFrame FrameOf(uint64_t entry) { return (entry & kPresent) != 0 ? entry & kFrameMask : 0; }

}  // namespace

bool PageFrames::Open() {
  const pid_t self = static_cast<pid_t>(syscall(SYS_getpid));
  if (g_fd.load() >= 0 && g_fd_pid.load() == self) return true;
  long page = sysconf(_SC_PAGESIZE);
  g_page = page > 0 ? static_cast<uint64_t>(page) : 4096;
  int fd = RawOpen("/proc/self/pagemap");
  if (fd < 0) return false;
  // A page of our own, present: its frame must read non-zero.
  static volatile uint64_t probe = 1;
  probe = probe + 1;
  const uintptr_t a = reinterpret_cast<uintptr_t>(&probe) / g_page * g_page;
  uint64_t entry = 0;
  if (!RawPread(fd, &entry, sizeof(entry), a / g_page * sizeof(entry)) || FrameOf(entry) == 0) {
    syscall(SYS_close, fd);
    return false;
  }
  const int old = g_fd.exchange(fd);
  g_fd_pid.store(self);
  if (old >= 0 && old != fd) syscall(SYS_close, old);
  return true;
}

bool PageFrames::Read(uintptr_t first, uint64_t pages, PageFrame* out) {
  const int fd = g_fd.load(std::memory_order_acquire);
  if (fd < 0) return false;
  uint64_t done = 0;
  uint64_t buf[512];
  while (done < pages) {
    const uint64_t n = pages - done < 512 ? pages - done : 512;
    if (!RawPread(fd, buf, n * sizeof(uint64_t), (first / g_page + done) * sizeof(uint64_t))) {
      return false;
    }
    for (uint64_t i = 0; i < n; ++i) out[done + i] = FrameOf(buf[i]);
    done += n;
  }
  return true;
}

bool PageFrames::Same(uintptr_t first, uint64_t pages, const PageFrame* expected) {
  const int fd = g_fd.load(std::memory_order_acquire);
  if (fd < 0) return true;  // nothing to compare with
  uint64_t done = 0;
  uint64_t buf[512];
  while (done < pages) {
    const uint64_t n = pages - done < 512 ? pages - done : 512;
    if (!RawPread(fd, buf, n * sizeof(uint64_t), (first / g_page + done) * sizeof(uint64_t))) {
      return false;
    }
    for (uint64_t i = 0; i < n; ++i) {
      if (FrameOf(buf[i]) != expected[done + i] || expected[done + i] == 0) return false;
    }
    done += n;
  }
  return true;
}

uint64_t PageFrames::page_bytes() { return g_page; }

}  // namespace optimize
}  // namespace pinshim
