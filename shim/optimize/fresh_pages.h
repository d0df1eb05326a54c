// Huge pages for the fresh destination of a long download.
//
// A staged download's copy-out into memory the program has never touched
// takes a page fault per 4 KiB page, and those faults, not the copying, set
// its pace. Where the kernel gives transparent huge pages only to ranges
// advised for them (its "madvise" mode, the common default), advising the
// destination first makes each fault fill 2 MiB instead; in its "always"
// mode they come unasked. Either way the copy-out then takes one huge page
// per piece, so that each of its threads faults (and the kernel zeroes) a
// page of its own: pieces smaller than a huge page put several threads on
// one fault, waiting for the thread that zeroes it, and gain nothing
// (bench/RESULTS.md, "2026-12-06: fresh downloads in huge-page pieces"). The advice changes no byte
// the program sees, and only the 2 MiB blocks that the copy writes whole
// are advised, so no page is populated that the program did not ask to be
// written.
#ifndef PINSHIM_SHIM_OPTIMIZE_FRESH_PAGES_H_
#define PINSHIM_SHIM_OPTIMIZE_FRESH_PAGES_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {
namespace optimize {

enum class HugePageMode { kUnknown, kAlways, kAdvised, kNever };

// The mode named by the contents of /sys/kernel/mm/transparent_hugepage/enabled
// ("always [madvise] never": the bracketed word is the mode).
HugePageMode ParseHugePageMode(const char* text, size_t len);

// The running kernel's mode, read once (kUnknown where it cannot be read).
HugePageMode KernelHugePageMode();

// Downloads at least this long are advised.
constexpr uint64_t kAdviseMinBytes = uint64_t{8} << 20;

constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

// The bytes from host to the next huge-page boundary (0 when host is on one).
inline uint64_t HugePageHead(const void* host) {
  const uint64_t a = reinterpret_cast<uintptr_t>(host);
  return (kHugePageBytes - a % kHugePageBytes) % kHugePageBytes;
}

// Whether the download into [host, host + bytes) goes to fresh memory that
// will be filled in huge pages: mode is kAlways or kAdvised, bytes >=
// kAdviseMinBytes, some 2 MiB block lies inside the range and the first
// such block is not present yet (memory already faulted in gains nothing).
// In mode kAdvised the blocks inside the range are advised for huge pages
// first, by a raw system call: the program's own madvise (which pinshim's
// page hooks see) is not called.
bool AdviseFreshDestination(void* host, uint64_t bytes, HugePageMode mode);

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_FRESH_PAGES_H_
