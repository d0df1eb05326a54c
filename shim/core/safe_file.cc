#include "shim/core/safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "shim/core/fixed_text.h"

namespace pinshim {
namespace {

void Fill(FileFacts* facts, const struct stat& st) {
  if (facts == nullptr) return;
  facts->size = static_cast<uint64_t>(st.st_size);
  facts->uid = st.st_uid;
  facts->mode = st.st_mode;
  facts->dev = st.st_dev;
  facts->ino = st.st_ino;
  facts->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Letters for a temporary name that another user cannot guess ahead of
// time; should the kernel give no random bytes, the clock, the pid and a
// counter still differ per call, and O_EXCL keeps the name safe anyway.
void RandomLetters(char* out, size_t n) {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  static std::atomic<uint64_t> counter{0};
  unsigned char bytes[32];
  if (n > sizeof(bytes)) n = sizeof(bytes);
  ssize_t got = getrandom(bytes, n, GRND_NONBLOCK);
  if (got != static_cast<ssize_t>(n)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = static_cast<uint64_t>(ts.tv_nsec) ^ (static_cast<uint64_t>(getpid()) << 32) ^
                 (counter.fetch_add(1, std::memory_order_relaxed) * 0x9e3779b97f4a7c15ull);
    for (size_t i = 0; i < n; ++i) {
      x ^= x >> 33;
      x *= 0xff51afd7ed558ccdull;
      bytes[i] = static_cast<unsigned char>(x >> 56);
    }
  }
  for (size_t i = 0; i < n; ++i) out[i] = kAlphabet[bytes[i] % (sizeof(kAlphabet) - 1)];
}

// "<dir>/.<base>.<letters>.tmp": hidden, and not ending in the target's
// extension, so that a collector of *.prom files never reads it half done.
bool TempName(const char* path, char* out, size_t len) {
  const char* slash = strrchr(path, '/');
  const size_t dir_len = slash == nullptr ? 0 : static_cast<size_t>(slash - path) + 1;
  const char* base = path + dir_len;
  size_t base_len = strlen(base);
  if (base_len > 200) base_len = 200;  // the whole name stays under NAME_MAX
  char letters[12];
  RandomLetters(letters, sizeof(letters));
  FixedText text(out, len);
  text.Append(path, dir_len).Append(".").Append(base, base_len).Append(".");
  text.Append(letters, sizeof(letters)).Append(".tmp");
  return text.size() + 1 < len;
}

// What may be replaced or appended to: nothing, or a regular file of ours.
int CheckTarget(const char* path, struct stat* st, bool* exists) {
  *exists = false;
  if (lstat(path, st) != 0) return errno == ENOENT ? 0 : errno;
  *exists = true;
  if (S_ISLNK(st->st_mode)) return kFileSymlink;
  if (!S_ISREG(st->st_mode)) return kFileNotRegular;
  if (st->st_uid != geteuid()) return kFileOtherOwner;
  return 0;
}

}  // namespace

const char* SafeFileReason(int code) {
  switch (code) {
    case 0: return "no error";
    case kFileNotRegular: return "not a regular file";
    case kFileTooLarge: return "larger than pinshim accepts for it";
    case kFileOtherOwner: return "belongs to another user";
    case kFileSymlink: return "is a symbolic link";
    default: break;
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  const char* text = strerrordesc_np(code);
  return text != nullptr ? text : "unknown error";
#else
  return strerror(code);
#endif
}

int OpenRegularForRead(const char* path, uint64_t max_bytes, FileFacts* facts) {
  if (path == nullptr || path[0] == '\0') return -ENOENT;
  int fd;
  do {
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -errno;
  struct stat st;
  int code = 0;
  if (fstat(fd, &st) != 0) {
    code = errno;
  } else if (!S_ISREG(st.st_mode)) {
    code = kFileNotRegular;
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    code = kFileTooLarge;
  }
  if (code != 0) {
    close(fd);
    return -code;
  }
  Fill(facts, st);
  return fd;
}

int CheckedPathForLoader(const char* path, uint64_t max_bytes, char* out, size_t len) {
  const int fd = OpenRegularForRead(path, max_bytes, nullptr);
  if (fd < 0) return fd;
  FixedText name(out, len);
  name.Append("/proc/self/fd/").AppendUint(static_cast<uint64_t>(fd));
  if (access(out, R_OK) != 0) FixedText(out, len).Append(path);
  return fd;
}

void RestorePathInMessage(char* text, size_t len, const char* from, const char* to) {
  const size_t from_len = strlen(from);
  if (len == 0 || strncmp(text, from, from_len) != 0) return;
  char rest[1024];
  FixedText(rest, sizeof(rest)).Append(text + from_len);
  FixedText(text, len).Append(to).Append(rest);
}

long ReadUpTo(int fd, void* buf, size_t cap) {
  size_t got = 0;
  char* p = static_cast<char*>(buf);
  while (got < cap) {
    const ssize_t n = read(fd, p + got, cap - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return static_cast<long>(got);
}

int WriteFully(int fd, const void* buf, size_t len) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return 0;
}

int OpenForAppend(const char* path, mode_t mode) {
  if (path == nullptr || path[0] == '\0') return -ENOENT;
  int fd;
  do {
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
              mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -(errno == ELOOP ? kFileSymlink : errno == ENXIO ? kFileNotRegular : errno);
  struct stat st;
  int code = 0;
  if (fstat(fd, &st) != 0) {
    code = errno;
  } else if (!S_ISREG(st.st_mode)) {
    code = kFileNotRegular;
  } else if (st.st_uid != geteuid()) {
    code = kFileOtherOwner;
  }
  if (code != 0) {
    close(fd);
    return -code;
  }
  return fd;
}

int CreateExclusive(const char* path, int extra_flags, mode_t mode) {
  int fd;
  do {
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | extra_flags,
              mode);
  } while (fd < 0 && errno == EINTR);
  return fd < 0 ? -errno : fd;
}

int BeginReplace(const char* path, mode_t mode, ReplaceFile* file) {
  file->fd = -1;
  file->tmp[0] = '\0';
  const size_t n = path == nullptr ? 0 : strlen(path);
  if (n == 0) return ENOENT;
  if (n >= sizeof(file->path)) return ENAMETOOLONG;
  memcpy(file->path, path, n + 1);
  struct stat st;
  bool exists = false;
  const int code = CheckTarget(path, &st, &exists);
  if (code != 0) return code;
  for (int attempt = 0; attempt < 64; ++attempt) {
    if (!TempName(path, file->tmp, sizeof(file->tmp))) return ENAMETOOLONG;
    const int fd = CreateExclusive(file->tmp, 0, mode);
    if (fd == -EEXIST) continue;
    if (fd < 0) {
      file->tmp[0] = '\0';
      return -fd;
    }
    file->fd = fd;
    // The user's own permission bits stay as they chose them.
    if (exists && fchmod(fd, st.st_mode & 0777) != 0) {
      const int e = errno;
      AbortReplace(file);
      return e;
    }
    return 0;
  }
  file->tmp[0] = '\0';
  return EEXIST;
}

int CommitReplace(ReplaceFile* file) {
  if (file->fd < 0) return EBADF;
  int err = close(file->fd) != 0 ? errno : 0;
  file->fd = -1;
  if (err == 0 && rename(file->tmp, file->path) != 0) err = errno;
  if (err != 0) {
    unlink(file->tmp);
  }
  file->tmp[0] = '\0';
  return err;
}

void AbortReplace(ReplaceFile* file) {
  if (file->fd >= 0) close(file->fd);
  file->fd = -1;
  if (file->tmp[0] != '\0') unlink(file->tmp);
  file->tmp[0] = '\0';
}

int ReplaceWithData(const char* path, mode_t mode, const void* data, size_t len) {
  ReplaceFile file;
  int err = BeginReplace(path, mode, &file);
  if (err != 0) return err;
  err = WriteFully(file.fd, data, len);
  if (err != 0) {
    AbortReplace(&file);
    return err;
  }
  return CommitReplace(&file);
}

}  // namespace pinshim
