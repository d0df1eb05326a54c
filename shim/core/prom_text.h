// Writing Prometheus text exposition format (as node exporter's textfile
// collector reads it) to a file descriptor without stdio, which allocates.
// Header-only; one writer per file.
#ifndef PINSHIM_SHIM_CORE_PROM_TEXT_H_
#define PINSHIM_SHIM_CORE_PROM_TEXT_H_

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdio>

namespace pinshim {

class PromWriter {
 public:
  explicit PromWriter(int fd) : fd_(fd) {}

  void Printf(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    if (used_ + kMaxLine > sizeof(buf_)) Flush();
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf_ + used_, sizeof(buf_) - used_, fmt, ap);
    va_end(ap);
    // Lines are far shorter than kMaxLine; a longer one is cut, not overrun.
    const size_t room = sizeof(buf_) - used_ - 1;
    if (n > 0) used_ += static_cast<size_t>(n) < room ? static_cast<size_t>(n) : room;
  }

  // The HELP and TYPE lines that open a metric family.
  void Family(const char* name, const char* type, const char* help) {
    Printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  }

  // Returns 0 or the first write error.
  int Flush() {
    for (size_t off = 0; off < used_ && error_ == 0;) {
      ssize_t n = write(fd_, buf_ + off, used_ - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? errno : EIO;
        break;
      }
      off += static_cast<size_t>(n);
    }
    used_ = 0;
    return error_;
  }

 private:
  static constexpr size_t kMaxLine = 512;
  int fd_;
  int error_ = 0;
  size_t used_ = 0;
  char buf_[16384];
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_PROM_TEXT_H_
