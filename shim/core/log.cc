#include "shim/core/log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace pinshim {

void LogLine(const char* fmt, ...) {
  int saved_errno = errno;
  char line[1024];
  static const char kPrefix[] = "pinshim: ";
  memcpy(line, kPrefix, sizeof(kPrefix) - 1);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line + sizeof(kPrefix) - 1, sizeof(line) - sizeof(kPrefix), fmt, ap);
  va_end(ap);
  size_t len = sizeof(kPrefix) - 1 + (n < 0 ? 0 : static_cast<size_t>(n));
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, len);
  (void)ignored;
  errno = saved_errno;
}

}  // namespace pinshim
