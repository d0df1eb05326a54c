#include "shim/hooks/profile_file.h"

#include <unistd.h>

#include <cstdio>

#include "shim/core/safe_file.h"

namespace pinshim {

bool LoadProfile(const char* path, optimize::SiteProfile* profile, char* err, size_t err_len) {
  // The loader opens what it is given by name: it gets a name for exactly
  // the file checked here.
  char checked[64];
  const int fd = CheckedPathForLoader(path, kMaxProfileBytes, checked, sizeof(checked));
  if (fd < 0) {
    // Worded as the loader words its own errors: "no such file or directory".
    const char* reason = SafeFileReason(-fd);
    const char first = reason[0] >= 'A' && reason[0] <= 'Z' ? reason[0] - 'A' + 'a' : reason[0];
    snprintf(err, err_len, "%s: cannot open profile: %c%s", path, first, reason + 1);
    return false;
  }
  const bool ok = profile->Load(checked, err, err_len);
  close(fd);
  if (!ok) RestorePathInMessage(err, err_len, checked, path);
  return ok;
}

}  // namespace pinshim
