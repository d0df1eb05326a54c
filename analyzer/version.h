// The version pinshim reports; the trace format carries its own version.
#ifndef PINSHIM_ANALYZER_VERSION_H_
#define PINSHIM_ANALYZER_VERSION_H_

namespace pinshim {

constexpr const char kPinshimVersion[] = "0.1.0";

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_VERSION_H_
