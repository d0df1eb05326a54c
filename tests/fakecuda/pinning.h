// Page-locking as the hardware sees it. A GPU driver pins the pages that
// back a range when the range is registered or allocated page-locked, and
// its DMA engines then read and write those pages, whatever the program's
// addresses map later: memory that was madvise(MADV_DONTNEED)ed, mapped over
// with MAP_FIXED or unmapped while registered keeps receiving (and sending)
// the old pages' bytes, and CPU page protections do not apply.
//
// The simulated driver does the same with io_uring fixed buffers, which take
// the kernel's long-term page pins (the pins a GPU driver takes, so fork,
// reclaim, migration and THP treat the pages as they treat a GPU driver's),
// and moves bytes with IORING_OP_READ_FIXED / WRITE_FIXED, which address the
// pinned pages, never the program's current mapping.
#ifndef PINSHIM_TESTS_FAKECUDA_PINNING_H_
#define PINSHIM_TESTS_FAKECUDA_PINNING_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace fakecuda {

// The pages that backed [lo, hi) when HoldPages ran, held until destroyed.
class HeldPages;

// Pins the pages backing [p, p + len) (rounded out to whole pages). Null when
// they cannot be pinned (io_uring unavailable, memory not anonymous or
// shared memory, not mapped, or writable-only mappings): copies then go
// through the program's addresses, as before.
std::shared_ptr<HeldPages> HoldPages(uintptr_t p, size_t len);

// DMA: copies n bytes between the held pages at address `addr` (inside the
// held range) and ordinary memory `plain`. False when the kernel refused.
bool DmaFromHeld(const HeldPages& held, uintptr_t addr, void* plain, size_t n);
bool DmaToHeld(const HeldPages& held, uintptr_t addr, const void* plain, size_t n);

// Whether pinning works in this process (io_uring with sparse fixed buffers,
// Linux 5.19 or later, not disabled by kernel.io_uring_disabled).
bool PinningAvailable();

}  // namespace fakecuda

#endif  // PINSHIM_TESTS_FAKECUDA_PINNING_H_
