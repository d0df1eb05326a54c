// The write-combined ranges of the process, kept from pinned allocations
// made with CU_MEMHOSTALLOC_WRITECOMBINED, so that the memcpy-family hooks can
// ask "does the CPU read write-combined memory here?" on every call.
// Lock-free, allocation-free and async-signal-safe; a process with no
// write-combined memory pays one relaxed load per question.
#ifndef PINSHIM_SHIM_TRACE_WC_RANGES_H_
#define PINSHIM_SHIM_TRACE_WC_RANGES_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {
namespace trace {

constexpr size_t kMaxWcRanges = 1024;

struct WcRange {
  uintptr_t begin;
  uintptr_t end;
};

// Adds [ptr, ptr + bytes). Returns false when the table is full (the range
// then goes unwatched).
bool AddWcRange(const void* ptr, uint64_t bytes);

// Removes the range that starts at `ptr`; false when there is none.
bool RemoveWcRange(const void* ptr);

// Returns true when [ptr, ptr + len) overlaps a write-combined range.
bool OverlapsWc(const void* ptr, size_t len);

// Copies up to `max` ranges into `out` and returns how many.
size_t SnapshotWcRanges(WcRange* out, size_t max);

// Forgets every range (tests).
void ClearWcRanges();

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_WC_RANGES_H_
