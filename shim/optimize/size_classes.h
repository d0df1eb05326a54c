// Size classes of the pinned pool and the host arena. Both bound the memory
// a rounded-up request wastes (power-of-two rounding, which wastes up to
// half, is what they avoid).
//
// Pool (units: pages, because pinned allocations are page-granular and
// page-aligned): 1..16 pages are exact classes; above that, each doubling
// (2^k, 2^(k+1)] pages is split into 8 classes of step 2^(k-3) pages. A
// block is therefore less than 12.5% larger than the page-rounded request
// (class - p < step <= p / 8).
//
// Arena small blocks (units: bytes, header included): 16..64 bytes in steps
// of 16; above that each doubling (2^k, 2^(k+1)] is split into 4 classes of
// step 2^(k-2). A block is less than 25% larger than request + header.
#ifndef PINSHIM_SHIM_OPTIMIZE_SIZE_CLASSES_H_
#define PINSHIM_SHIM_OPTIMIZE_SIZE_CLASSES_H_

#include <cstdint>

namespace pinshim {
namespace optimize {

inline int FloorLog2(uint64_t v) { return 63 - __builtin_clzll(v); }

// --- pool ---

constexpr uint32_t kPoolExactClasses = 16;
constexpr uint32_t kPoolClassesPerDoubling = 8;

// The class of a request of `pages` pages (pages >= 1).
inline uint32_t PoolClassOfPages(uint64_t pages) {
  if (pages <= kPoolExactClasses) return static_cast<uint32_t>(pages == 0 ? 0 : pages - 1);
  int k = FloorLog2(pages - 1);  // 2^k < pages <= 2^(k+1), k >= 4
  uint64_t step = uint64_t{1} << (k - 3);
  uint64_t m = (pages + step - 1) / step;  // 9..16
  return kPoolExactClasses + static_cast<uint32_t>(k - 4) * kPoolClassesPerDoubling +
         static_cast<uint32_t>(m - 9);
}

// The block size of class cls, in pages.
inline uint64_t PoolClassPages(uint32_t cls) {
  if (cls < kPoolExactClasses) return cls + 1;
  uint32_t j = cls - kPoolExactClasses;
  int k = 4 + static_cast<int>(j / kPoolClassesPerDoubling);
  uint64_t m = 9 + j % kPoolClassesPerDoubling;
  return m << (k - 3);
}

// --- arena ---

constexpr uint32_t kArenaHeaderBytes = 16;
constexpr uint32_t kArenaTinyClasses = 4;  // 16, 32, 48, 64
constexpr uint32_t kArenaClassesPerDoubling = 4;

// The class of a block of `bytes` bytes, header included (bytes >= 1).
inline uint32_t ArenaClassOfBytes(uint64_t bytes) {
  if (bytes <= 64) return static_cast<uint32_t>(bytes == 0 ? 0 : (bytes - 1) / 16);
  int k = FloorLog2(bytes - 1);  // 2^k < bytes <= 2^(k+1), k >= 6
  uint64_t step = uint64_t{1} << (k - 2);
  uint64_t m = (bytes + step - 1) / step;  // 5..8
  return kArenaTinyClasses + static_cast<uint32_t>(k - 6) * kArenaClassesPerDoubling +
         static_cast<uint32_t>(m - 5);
}

// The block size of arena class cls, in bytes.
inline uint64_t ArenaClassBytes(uint32_t cls) {
  if (cls < kArenaTinyClasses) return 16 * (cls + 1);
  uint32_t j = cls - kArenaTinyClasses;
  int k = 6 + static_cast<int>(j / kArenaClassesPerDoubling);
  uint64_t m = 5 + j % kArenaClassesPerDoubling;
  return m << (k - 2);
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_SIZE_CLASSES_H_
