// The one monotonic clock of the library and the tool. Header-only and
// allocation-free: hooks, the engine, the budget and the recorder read it.
#ifndef PINSHIM_SHIM_CORE_CLOCK_H_
#define PINSHIM_SHIM_CORE_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace pinshim {

// CLOCK_MONOTONIC in nanoseconds: the time every trace record, deadline
// and idle period is measured in.
inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_CLOCK_H_
