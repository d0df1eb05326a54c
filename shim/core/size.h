// Byte sizes as people write them in configuration: "4096", "512K", "1.5GiB",
// "25%". Pure functions with no allocation and no output, usable from the
// preloaded library at start-up as well as from the pinshim tool.
//
// Accepted forms (leading, trailing and unit-separating blanks allowed):
//   N or N.F           a count of bytes, integer or decimal
//   N[.F] UNIT         UNIT is one of B, K, KB, KiB, M, MB, MiB, G, GB, GiB,
//                      T, TB, TiB in any case; every unit is binary (1K = 1024,
//                      1KB = 1KiB). Fractions of a byte are rounded down.
//   P%                 P percent of physical memory, 0 < P <= 100, integer or
//                      decimal; only where the caller allows percentages.
// Rejected, each with its own message: empty text, a sign, text that is not a
// number, an unknown unit, a percentage of 0 or over 100, a percentage where
// none is allowed, and values over 2^64 - 1 bytes.
#ifndef PINSHIM_SHIM_CORE_SIZE_H_
#define PINSHIM_SHIM_CORE_SIZE_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {

// Parses "text" into *out. physical_bytes is what a percentage is taken of;
// 0 means percentages are not accepted here. On failure returns false and
// writes a one-line reason followed by the accepted forms into err (which may
// be null); *out is left unchanged.
bool ParseSize(const char* text, uint64_t physical_bytes, uint64_t* out, char* err, size_t err_len);

// The accepted forms as one clause, for messages and help texts.
const char* SizeFormsText(bool percent_allowed);

// Physical memory of this machine in bytes (sysconf), 0 if unknown.
uint64_t PhysicalMemoryBytes();

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_SIZE_H_
