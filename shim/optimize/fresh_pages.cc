#include "shim/optimize/fresh_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace pinshim {
namespace optimize {

HugePageMode ParseHugePageMode(const char* text, size_t len) {
  const char* open = static_cast<const char*>(memchr(text, '[', len));
  if (open == nullptr) return HugePageMode::kUnknown;
  const size_t rest = len - static_cast<size_t>(open + 1 - text);
  auto is = [&](const char* word) {
    const size_t n = strlen(word);
    return rest > n && memcmp(open + 1, word, n) == 0 && open[1 + n] == ']';
  };
  if (is("always")) return HugePageMode::kAlways;
  if (is("madvise")) return HugePageMode::kAdvised;
  if (is("never")) return HugePageMode::kNever;
  return HugePageMode::kUnknown;
}

HugePageMode KernelHugePageMode() {
  static const HugePageMode mode = [] {
    const int fd = static_cast<int>(syscall(
        SYS_openat, AT_FDCWD, "/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC));
    if (fd < 0) return HugePageMode::kUnknown;
    char text[128];
    const ssize_t n = syscall(SYS_read, fd, text, sizeof(text));
    syscall(SYS_close, fd);
    return n > 0 ? ParseHugePageMode(text, static_cast<size_t>(n)) : HugePageMode::kUnknown;
  }();
  return mode;
}

bool AdviseFreshDestination(void* host, uint64_t bytes, HugePageMode mode) {
  constexpr uintptr_t kHuge = kHugePageBytes;
  const bool advise = mode == HugePageMode::kAdvised;
  if ((!advise && mode != HugePageMode::kAlways) || host == nullptr || bytes < kAdviseMinBytes) {
    return false;
  }
  const auto start = reinterpret_cast<uintptr_t>(host);
  if (bytes > UINTPTR_MAX - start) return false;
  const uintptr_t lo = (start + kHuge - 1) / kHuge * kHuge;
  const uintptr_t hi = (start + bytes) / kHuge * kHuge;
  if (hi <= lo) return false;
  unsigned char present = 0;
  if (syscall(SYS_mincore, lo, 4096, &present) != 0 || (present & 1) != 0) return false;
  return !advise || syscall(SYS_madvise, lo, hi - lo, MADV_HUGEPAGE) == 0;
}

}  // namespace optimize
}  // namespace pinshim
