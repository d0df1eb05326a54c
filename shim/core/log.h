// The library's only way to speak: one line on stderr, prefixed "pinshim: ".
// Used for configuration problems at start-up, never on a hot path.
#ifndef PINSHIM_SHIM_CORE_LOG_H_
#define PINSHIM_SHIM_CORE_LOG_H_

namespace pinshim {

// Formats into a stack buffer and writes it with one write(2); no allocation.
void LogLine(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_LOG_H_
