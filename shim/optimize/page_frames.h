// Which physical pages back a range now: the page frame numbers that
// /proc/self/pagemap reports (readable with CAP_SYS_ADMIN; without it the
// kernel reports 0 for every frame, and nothing can be verified).
// PINSHIM_VERIFY_PAGES records the frames a registration pinned and checks,
// before each copy through it, that the range still maps those frames.
#ifndef PINSHIM_SHIM_OPTIMIZE_PAGE_FRAMES_H_
#define PINSHIM_SHIM_OPTIMIZE_PAGE_FRAMES_H_

#include <cstdint>

namespace pinshim {
namespace optimize {

// A frame number; 0 for a page that is not present (or not readable).
using PageFrame = uint64_t;

class PageFrames {
 public:
  // Opens /proc/self/pagemap and checks that it gives frame numbers (false:
  // verification is impossible here). Idempotent; a fork child reopens.
  static bool Open();
  // The frames of the `pages` pages starting at page-aligned `first`, into
  // out[0, pages). False when the file cannot be read.
  static bool Read(uintptr_t first, uint64_t pages, PageFrame* out);
  // Whether [first, first + pages pages) still maps exactly `expected`.
  static bool Same(uintptr_t first, uint64_t pages, const PageFrame* expected);
  static uint64_t page_bytes();
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PAGE_FRAMES_H_
