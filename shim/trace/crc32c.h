// CRC-32C (Castagnoli), the checksum of trace frames. Uses the SSE4.2
// instruction where the CPU has it and a table elsewhere; both give the same
// values. Allocation-free and async-signal-safe.
#ifndef PINSHIM_SHIM_TRACE_CRC32C_H_
#define PINSHIM_SHIM_TRACE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {
namespace trace {

// Returns the CRC-32C of `data[0, n)` continued from `crc` (0 to start).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_CRC32C_H_
