// pinshim calibrate: measures host<->device copy bandwidth on this machine's
// GPU through the CUDA driver API (pageable and pinned host memory, both
// directions, sizes from 4 KiB up) and writes the calibration file that
// pinshim report --calibration reads (docs/calibration.md). On pinshim's
// simulated driver it still writes one, marked as meaningless.
#ifndef PINSHIM_ANALYZER_CALIBRATE_COMMAND_H_
#define PINSHIM_ANALYZER_CALIBRATE_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pinshim {

// One measured point: a direction ("H2D" or "D2H"), a host memory kind
// ("pageable" or "pinned"), a copy size and its median bandwidth.
struct CalibrationPoint {
  const char* direction;
  const char* kind;
  uint64_t bytes;
  double gbps;
};

// The copy sizes measured: 4 KiB, then each 16 times larger, up to
// max_bytes (at least the first).
std::vector<uint64_t> CalibrationSizes(uint64_t max_bytes);

// The calibration file's text: a comment header with `header_lines` (each
// prefixed "# "), then one "DIRECTION KIND SIZE GBPS" line per point.
std::string FormatCalibration(const std::vector<std::string>& header_lines,
                              const std::vector<CalibrationPoint>& points);

int RunCalibrateCommand(int argc, char** argv);

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_CALIBRATE_COMMAND_H_
