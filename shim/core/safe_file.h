// Opening the files pinshim reads and writes, safely where other users can
// write too: a directory of mode 1777, a group-writable trace directory, a
// name another user chose. Used by every reader and writer of pinshim, the
// preloaded library's and the tool's alike, so it allocates nothing, uses no
// stdio and takes no lock.
//
// Reading: a file is opened with O_NONBLOCK, so a FIFO or a device opens at
// once, and then must be a regular file of at most the caller's size limit.
//
// Writing, three ways, none of which follows a symbolic link at the name:
// - ReplaceFile: the whole file is written under a fresh temporary name with
//   unpredictable letters beside it (O_CREAT|O_EXCL|O_NOFOLLOW), then renamed
//   over the name, so nobody ever sees half a file and nothing planted under
//   a temporary name is ever written to. The name may hold nothing or a
//   regular file of the caller's own (effective uid); that file's permission
//   bits are kept. A symbolic link, another user's file, a FIFO or a
//   directory there is refused.
// - OpenForAppend: O_APPEND|O_CREAT|O_NOFOLLOW; an existing file must be a
//   regular file of the caller's own.
// - CreateExclusive: a new file only (O_CREAT|O_EXCL|O_NOFOLLOW).
#ifndef PINSHIM_SHIM_CORE_SAFE_FILE_H_
#define PINSHIM_SHIM_CORE_SAFE_FILE_H_

#include <limits.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace pinshim {

// Results: 0, an errno value, or one of these (above every errno value).
constexpr int kFileNotRegular = 100001;  // a FIFO, device, socket or directory
constexpr int kFileTooLarge = 100002;    // over the caller's size limit
constexpr int kFileOtherOwner = 100003;  // belongs to another user
constexpr int kFileSymlink = 100004;     // a symbolic link where a file was expected

// A short reason for a result of the functions below ("not a regular file",
// or the errno's text). Never allocates.
const char* SafeFileReason(int code);

struct FileFacts {
  uint64_t size = 0;
  uid_t uid = 0;
  mode_t mode = 0;  // st_mode
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t mtime_ns = 0;  // CLOCK_REALTIME
};

// Opens path read-only without blocking: O_NONBLOCK|O_NOCTTY|O_CLOEXEC. The
// file must be regular and at most max_bytes long. Returns the descriptor
// (still O_NONBLOCK, which a regular file ignores), or -code.
int OpenRegularForRead(const char* path, uint64_t max_bytes, FileFacts* facts);

// Reads from fd until end of file or until cap bytes; returns the bytes read
// or -errno. A file that grew past cap is cut there (the caller checked the
// size when opening).
long ReadUpTo(int fd, void* buf, size_t cap);

// Writes all of buf; returns 0 or an errno (EIO for a write of 0 bytes).
int WriteFully(int fd, const void* buf, size_t len);

// For a loader that takes a path and opens it itself: opens path as
// OpenRegularForRead does and writes into out a name for exactly the file
// just checked, "/proc/self/fd/N" (path itself where /proc is not mounted).
// Returns the descriptor, which the caller closes after loading, or -code.
int CheckedPathForLoader(const char* path, uint64_t max_bytes, char* out, size_t len);

// Where text starts with `from` (the name CheckedPathForLoader gave), puts
// `to` in its place, cutting the end of text if it no longer fits.
void RestorePathInMessage(char* text, size_t len, const char* from, const char* to);

// Opens path for appending: O_WRONLY|O_APPEND|O_CREAT|O_NOFOLLOW|O_NONBLOCK,
// created with mode (less the umask). An existing file must be a regular
// file owned by the effective uid. Returns the descriptor or -code.
int OpenForAppend(const char* path, mode_t mode);

// Creates path, which must not exist: O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|
// O_CLOEXEC plus extra_flags. Returns the descriptor or -errno.
int CreateExclusive(const char* path, int extra_flags, mode_t mode);

// A file being written under a temporary name, to be renamed over `path`.
struct ReplaceFile {
  int fd = -1;
  char path[PATH_MAX] = {};
  char tmp[PATH_MAX] = {};
};

// Checks path (nothing there, or a regular file of the caller's own) and
// creates the temporary file beside it: mode less the umask for a new file,
// the existing file's permission bits (rwx, not set-id) otherwise. Returns 0 or a code; on
// failure nothing was created.
int BeginReplace(const char* path, mode_t mode, ReplaceFile* file);

// Closes the temporary file and renames it over the name. Returns 0 or a
// code; on failure the temporary file is removed.
int CommitReplace(ReplaceFile* file);

// Removes the temporary file unwritten. Safe after a failed Begin or Commit.
void AbortReplace(ReplaceFile* file);

// Begin, one write of data, Commit.
int ReplaceWithData(const char* path, mode_t mode, const void* data, size_t len);

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_SAFE_FILE_H_
