#include "shim/budget/proc.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pinshim {
namespace budget {
namespace {

// Reads up to cap - 1 bytes of a small file and terminates them. Returns the
// length, or -errno.
ssize_t ReadSmallFile(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t used = 0;
  while (used + 1 < cap) {
    ssize_t n = read(fd, buf + used, cap - 1 - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return -err;
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  close(fd);
  buf[used] = '\0';
  return static_cast<ssize_t>(used);
}

void ProcPath(uint32_t pid, const char* leaf, char (&out)[64]) {
  snprintf(out, sizeof(out), "/proc/%u/%s", pid, leaf);
}

bool ParseU64(const char* s, const char* end, uint64_t* out) {
  if (s == end) return false;
  uint64_t v = 0;
  for (; s < end; ++s) {
    if (*s < '0' || *s > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*s - '0');
  }
  *out = v;
  return true;
}

}  // namespace

bool ParseProcStat(const char* line, ProcStat* out) {
  // The comm (field 2) is free text in parentheses; the last ')' ends it.
  const char* close_paren = strrchr(line, ')');
  if (close_paren == nullptr || close_paren[1] != ' ' || close_paren[2] == '\0') {
    return false;
  }
  const char* p = close_paren + 2;
  out->state = *p;
  bool have_threads = false;
  bool have_start = false;
  for (int field = 3; *p != '\0' && !(have_threads && have_start); ++field) {
    const char* end = p;
    while (*end != '\0' && *end != ' ' && *end != '\n') ++end;
    if (field == 20) have_threads = ParseU64(p, end, &out->num_threads);
    if (field == 22) have_start = ParseU64(p, end, &out->start_time);
    if (*end != ' ') break;
    p = end + 1;
  }
  return have_threads && have_start;
}

uint64_t SelfPidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

bool ReadComm(uint32_t pid, char (&out)[kCommBytes]) {
  char path[64];
  ProcPath(pid, "comm", path);
  char buf[64];
  ssize_t n = ReadSmallFile(path, buf, sizeof(buf));
  if (n <= 0) return false;
  size_t len = static_cast<size_t>(n);
  if (buf[len - 1] == '\n') --len;
  if (len > kCommBytes - 1) len = kCommBytes - 1;
  memcpy(out, buf, len);
  out[len] = '\0';
  return true;
}

void ReadSelfIdentity(ProcessIdentity* out) {
  memset(out, 0, sizeof(*out));
  out->pid = static_cast<uint32_t>(getpid());
  out->pid_ns = SelfPidNamespace();
  char buf[1024];
  ProcStat stat;
  if (ReadSmallFile("/proc/self/stat", buf, sizeof(buf)) > 0 && ParseProcStat(buf, &stat)) {
    out->start_time = stat.start_time;
  }
  ReadComm(out->pid, out->comm);
}

Liveness CheckProcess(uint32_t pid, uint64_t start_time) {
  if (pid == 0) return Liveness::kDead;
  // kill(pid, 0) sees processes of every user; EPERM still means "exists".
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
    return Liveness::kDead;
  }
  char path[64];
  ProcPath(pid, "stat", path);
  char buf[1024];
  ProcStat stat;
  // Unreadable (hidepid=2 hides other users' processes) or malformed: the pid
  // exists, so count it alive rather than risk reclaiming a live share.
  if (ReadSmallFile(path, buf, sizeof(buf)) <= 0 || !ParseProcStat(buf, &stat)) {
    return Liveness::kAlive;
  }
  if (start_time != 0 && stat.start_time != start_time) return Liveness::kDead;
  // A zombie holds no memory. A thread-group leader that called pthread_exit
  // also shows 'Z' while its other threads run; it then still counts them.
  if ((stat.state == 'Z' || stat.state == 'X') && stat.num_threads <= 1) {
    return Liveness::kDead;
  }
  return Liveness::kAlive;
}

}  // namespace budget
}  // namespace pinshim
