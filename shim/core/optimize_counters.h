// A snapshot of optimize mode's counters for the trace, one member per TRACE
// line of optimize_counters.inc (Optimizer::Counters() holds more; see
// optimize::CountersForTrace). Plain integers, in the trace's order.
#ifndef PINSHIM_SHIM_CORE_OPTIMIZE_COUNTERS_H_
#define PINSHIM_SHIM_CORE_OPTIMIZE_COUNTERS_H_

#include <cstdint>

namespace pinshim {

struct OptimizeCountersEvent {
#define TRACE(name, layout, source, summary_key) uint64_t name;
#define SUMMARY(source, summary_key)
#include "shim/core/optimize_counters.inc"
#undef TRACE
#undef SUMMARY
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_OPTIMIZE_COUNTERS_H_
