// Human-readable numbers for reports and finding texts.
#ifndef PINSHIM_ANALYZER_REPORT_FORMAT_H_
#define PINSHIM_ANALYZER_REPORT_FORMAT_H_

#include <cstdint>
#include <string>

#include "shim/core/events.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace report {

// "512 B", "4.0 KiB", "1.5 GiB".
std::string FormatBytes(uint64_t bytes);
// "850 ns", "12.3 us", "4.56 ms", "1.23 s", "2 min 5 s".
std::string FormatSeconds(double seconds);
// "1,234,567".
std::string FormatCount(uint64_t n);
// "host-to-device", "device-to-host", ...
const char* DirectionWords(CopyDir dir);
// "%.1f" with a unit: "11.9 GB/s".
std::string FormatGbps(double bytes_per_second);
// Budget decisions, named as shim/budget names them: "program_alloc",
// "program_register", "pinshim_pool", "pinshim_cache"; "granted", "denied",
// "fallback"; "none", "process", "node", "ledger". "unknown" otherwise.
const char* BudgetOwnerName(trace::BudgetOwner owner);
const char* BudgetDecisionName(trace::BudgetDecision decision);
const char* BudgetLimiterName(trace::BudgetLimiter limiter);

// Raw bytes as lower-case hex, two digits each: "01ab" (build ids).
std::string HexBytes(const std::string& raw);
// A number as C writes it in hex: "0x7f12" (handles, addresses).
std::string HexNumber(uint64_t v);

// Whether s begins (ends) with the given text.
bool StartsWith(const std::string& s, const char* prefix);
bool EndsWith(const std::string& s, const char* suffix);

// What follows the last '/' of path; path itself when it has none.
std::string Basename(const std::string& path);

// s for a terminal: control bytes (C0, DEL, and C1 as UTF-8 encodes them),
// newlines included, written as \n, \r, \t or \xNN, so that a name from a
// trace or a ledger (a program's, a Python function's) cannot move the
// cursor, retitle the window or start a line that reads like the report's.
std::string Printable(const std::string& s);

// Reads a whole file of at most max_bytes, opened without blocking (a FIFO
// or a device is refused: shim/core/safe_file.h). False with *error the
// reason ("not a regular file", the errno's text), and *missing set when
// nothing is there.
bool ReadWholeFile(const std::string& path, uint64_t max_bytes, std::string* out,
                   std::string* error, bool* missing = nullptr);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_FORMAT_H_
