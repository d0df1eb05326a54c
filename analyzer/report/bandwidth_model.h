// Copy bandwidth by size, direction and host memory kind: how the rules
// estimate the time a pageable copy lost against a pinned one. Defaults are
// the H200 measurements (PCIe gen5 x16, CUDA 13.0; bench/RESULTS.md, "The
// cost model's table"); a
// calibration file measured on the target machine replaces any of them.
//
// Calibration file: one point per line, "DIR KIND SIZE GBPS", where DIR is
// H2D or D2H, KIND is pageable or pinned, SIZE is bytes with an optional
// K/M/G suffix (binary), GBPS is 10^9 bytes per second. '#' starts a comment.
// The points of a (DIR, KIND) pair in the file replace all of its defaults.
//     H2D pageable 1M  11.87
//     H2D pinned   1M  39.06
#ifndef PINSHIM_ANALYZER_REPORT_BANDWIDTH_MODEL_H_
#define PINSHIM_ANALYZER_REPORT_BANDWIDTH_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "shim/core/events.h"

namespace pinshim {
namespace report {

class BandwidthModel {
 public:
  // The H200 defaults.
  BandwidthModel();

  // Replaces points from a calibration file. Returns false with a one-line
  // message naming the file and line when it cannot be used.
  bool LoadCalibration(const std::string& path, std::string* error);

  // Bytes per second for one copy of `bytes` in `dir` (H2D or D2H) from or to
  // memory of the given kind: interpolated on log(size) between measured
  // sizes, flat beyond them. Registered and pinshim-pinned memory count as
  // pinned.
  double BytesPerSecond(CopyDir dir, bool pinned, uint64_t bytes) const;

  // Seconds a pageable copy of `bytes` loses against a pinned one (>= 0).
  double PageableLoss(CopyDir dir, uint64_t bytes) const;

  // Seconds to register and later unregister `bytes` in place
  // (cudaHostRegister + cudaHostUnregister; H200 defaults).
  double RegisterSeconds(uint64_t bytes) const;

  // Human-readable source of the numbers: "H200 defaults" or the file.
  const std::string& source() const { return source_; }

 private:
  struct Point {
    double log_size;
    double gbps;
  };
  // [dir 0..1][pinned 0..1], sorted by size.
  std::vector<Point> curves_[2][2];
  std::string source_;
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_BANDWIDTH_MODEL_H_
