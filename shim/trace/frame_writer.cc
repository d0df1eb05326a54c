#include "shim/trace/frame_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>

#include "shim/core/safe_file.h"
#include "shim/trace/crc32c.h"

namespace pinshim {
namespace trace {

void EncodeFileHeader(uint8_t out[kFileHeaderBytes]) {
  memset(out, 0, kFileHeaderBytes);
  memcpy(out, kTraceMagic, sizeof(kTraceMagic));
  StoreU16(out + 8, kTraceVersion);
  StoreU16(out + 10, static_cast<uint16_t>(kFileHeaderBytes));
  StoreU32(out + 28, MaskCrc(Crc32c(out, 28)));
}

void EncodeFrameHeader(FrameType type, const struct iovec* parts, int n_parts,
                       uint8_t out[kFrameHeaderBytes]) {
  uint8_t type_byte = static_cast<uint8_t>(type);
  uint32_t crc = Crc32cExtend(0, &type_byte, 1);
  size_t len = 0;
  for (int i = 0; i < n_parts; ++i) {
    crc = Crc32cExtend(crc, parts[i].iov_base, parts[i].iov_len);
    len += parts[i].iov_len;
  }
  StoreU32(out, MaskCrc(crc));
  StoreU32(out + 4, static_cast<uint32_t>(len));
  out[8] = type_byte;
}

bool WriteFrame(int fd, FrameType type, const struct iovec* parts, int n_parts, int* error) {
  constexpr int kMaxParts = 8;
  if (fd < 0 || n_parts > kMaxParts - 1) {
    if (error != nullptr) *error = fd < 0 ? EBADF : EINVAL;
    return false;
  }
  uint8_t header[kFrameHeaderBytes];
  EncodeFrameHeader(type, parts, n_parts, header);
  struct iovec iov[kMaxParts];
  iov[0].iov_base = header;
  iov[0].iov_len = sizeof(header);
  size_t total = sizeof(header);
  for (int i = 0; i < n_parts; ++i) {
    iov[i + 1] = parts[i];
    total += parts[i].iov_len;
  }
  if (total - sizeof(header) > kMaxFramePayload) return false;
  int saved_errno = errno;
  ssize_t n;
  do {
    n = writev(fd, iov, n_parts + 1);
  } while (n < 0 && errno == EINTR);
  if (error != nullptr) *error = n < 0 ? errno : n == static_cast<ssize_t>(total) ? 0 : ENOSPC;
  errno = saved_errno;
  // A short write (disk full) leaves a torn frame that the reader skips; a
  // retry could interleave with another thread's frame, so there is none.
  return n == static_cast<ssize_t>(total);
}

namespace {

// snprintf into a fixed buffer; true when it fit.
bool Format(char* out, size_t len, const char* fmt, const char* a, const char* b, long pid, int n) {
  int r = n == 0 ? snprintf(out, len, fmt, a, b, pid) : snprintf(out, len, fmt, a, b, pid, n);
  return r > 0 && static_cast<size_t>(r) < len;
}

// mkdir -p, without allocating.
bool MakeDirs(const char* dir) {
  char path[PATH_MAX];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof(path)) {
    errno = ENAMETOOLONG;
    return false;
  }
  memcpy(path, dir, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (path[i] != '/' && path[i] != '\0') continue;
    char c = path[i];
    path[i] = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST) return false;
    path[i] = c;
  }
  return true;
}

}  // namespace

int CreateTraceFile(const char* dir, const char* program, long pid, char* path, size_t path_len,
                    char* err, size_t err_len) {
  const char* base = strrchr(program, '/');
  base = base ? base + 1 : program;
  if (*base == '\0') base = "program";
  int saved_errno = errno;
  if (!MakeDirs(dir)) {
    snprintf(err, err_len, "cannot create trace directory %s: %s", dir, strerror(errno));
    errno = saved_errno;
    return -1;
  }
  int fd = -1;
  for (int n = 0; n < 1000 && fd < 0; ++n) {
    bool fit = n == 0 ? Format(path, path_len, "%s/%s.%ld.pstrace", dir, base, pid, 0)
                      : Format(path, path_len, "%s/%s.%ld.%d.pstrace", dir, base, pid, n);
    if (!fit) {
      snprintf(err, err_len, "trace path too long in %s", dir);
      errno = saved_errno;
      return -1;
    }
    // A new file only, never through a link planted at the name.
    fd = CreateExclusive(path, O_APPEND, 0644);
    if (fd < 0 && fd != -EEXIST) {
      snprintf(err, err_len, "cannot create trace file %s: %s", path, SafeFileReason(-fd));
      errno = saved_errno;
      return -1;
    }
  }
  if (fd < 0) {
    snprintf(err, err_len, "no free trace file name for pid %ld in %s", pid, dir);
    errno = saved_errno;
    return -1;
  }
  uint8_t header[kFileHeaderBytes];
  EncodeFileHeader(header);
  if (write(fd, header, sizeof(header)) != static_cast<ssize_t>(sizeof(header))) {
    snprintf(err, err_len, "cannot write trace file %s: %s", path, strerror(errno));
    close(fd);
    unlink(path);
    errno = saved_errno;
    return -1;
  }
  errno = saved_errno;
  return fd;
}

}  // namespace trace
}  // namespace pinshim
