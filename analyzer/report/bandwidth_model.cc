#include "analyzer/report/bandwidth_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "analyzer/report/format.h"
#include "shim/core/bandwidth_defaults.h"

namespace pinshim {
namespace report {
namespace {

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

int DirIndex(CopyDir dir) { return dir == CopyDir::kDeviceToHost ? 1 : 0; }

bool ParseSize(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  double v = strtod(s.c_str(), &end);
  if (end == s.c_str() || v <= 0) return false;
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(toupper(c));
  if (unit == "" || unit == "B")
    *out = v;
  else if (unit == "K" || unit == "KB" || unit == "KIB")
    *out = v * kKiB;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    *out = v * kMiB;
  else if (unit == "G" || unit == "GB" || unit == "GIB")
    *out = v * kMiB * 1024.0;
  else
    return false;
  return true;
}

}  // namespace

BandwidthModel::BandwidthModel() : source_("H200 defaults") {
  // The pinned column (cudaHostAlloc'd memory) stands for every pinned kind.
  for (int i = 0; i < kCopyBandwidthRows; ++i) {
    const CopyBandwidthRow& h2d = kHostToDeviceDefaults[i];
    const CopyBandwidthRow& d2h = kDeviceToHostDefaults[i];
    curves_[0][0].push_back({std::log(h2d.bytes), h2d.pageable_gbps});
    curves_[0][1].push_back({std::log(h2d.bytes), h2d.pinned_gbps});
    curves_[1][0].push_back({std::log(d2h.bytes), d2h.pageable_gbps});
    curves_[1][1].push_back({std::log(d2h.bytes), d2h.pinned_gbps});
  }
}

constexpr uint64_t kMaxCalibrationBytes = uint64_t{1} << 20;

bool BandwidthModel::LoadCalibration(const std::string& path, std::string* error) {
  // A calibration is a few dozen lines; a FIFO or a device is refused.
  std::string text;
  std::string why;
  if (!ReadWholeFile(path, kMaxCalibrationBytes, &text, &why)) {
    *error = "calibration file " + path + ": cannot open: " + why;
    return false;
  }
  std::istringstream in(text);
  std::vector<Point> fresh[2][2];
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string dir, kind, size, gbps, extra;
    if (!(fields >> dir)) continue;
    auto fail = [&](const std::string& why) {
      *error = "calibration file " + path + " line " + std::to_string(lineno) + ": " + why +
               " (expected: H2D|D2H pageable|pinned SIZE GBPS)";
      return false;
    };
    if (!(fields >> kind >> size >> gbps) || (fields >> extra)) return fail("wrong field count");
    int d = dir == "H2D" ? 0 : dir == "D2H" ? 1 : -1;
    int k = kind == "pageable" ? 0 : kind == "pinned" ? 1 : -1;
    if (d < 0) return fail("unknown direction '" + dir + "'");
    if (k < 0) return fail("unknown memory kind '" + kind + "'");
    double bytes;
    if (!ParseSize(size, &bytes)) return fail("bad size '" + size + "'");
    char* end = nullptr;
    double g = strtod(gbps.c_str(), &end);
    if (end == gbps.c_str() || *end != '\0' || !(g > 0))
      return fail("bad bandwidth '" + gbps + "'");
    fresh[d][k].push_back({std::log(bytes), g});
  }
  bool any = false;
  for (int d = 0; d < 2; ++d) {
    for (int k = 0; k < 2; ++k) {
      if (fresh[d][k].empty()) continue;
      any = true;
      std::sort(fresh[d][k].begin(), fresh[d][k].end(),
                [](const Point& a, const Point& b) { return a.log_size < b.log_size; });
      curves_[d][k] = fresh[d][k];
    }
  }
  if (!any) {
    *error = "calibration file " + path + ": no points";
    return false;
  }
  source_ = path;
  return true;
}

double BandwidthModel::BytesPerSecond(CopyDir dir, bool pinned, uint64_t bytes) const {
  const std::vector<Point>& c = curves_[DirIndex(dir)][pinned ? 1 : 0];
  double l = std::log(static_cast<double>(bytes < 1 ? 1 : bytes));
  double gbps;
  if (l <= c.front().log_size) {
    gbps = c.front().gbps;
  } else if (l >= c.back().log_size) {
    gbps = c.back().gbps;
  } else {
    size_t i = 1;
    while (c[i].log_size < l) ++i;
    double t = (l - c[i - 1].log_size) / (c[i].log_size - c[i - 1].log_size);
    gbps = c[i - 1].gbps + t * (c[i].gbps - c[i - 1].gbps);
  }
  return gbps * 1e9;
}

double BandwidthModel::PageableLoss(CopyDir dir, uint64_t bytes) const {
  double b = static_cast<double>(bytes);
  double loss = b / BytesPerSecond(dir, false, bytes) - b / BytesPerSecond(dir, true, bytes);
  return loss > 0 ? loss : 0;
}

double BandwidthModel::RegisterSeconds(uint64_t bytes) const {
  // cudaHostRegister + cudaHostUnregister, microseconds: linear between
  // rows, constant below the first, proportional to size above the last.
  auto us = [](const PinCallCostRow& r) { return r.register_us + r.unregister_us; };
  const PinCallCostRow* rows = kPinCallCostDefaults;
  double b = static_cast<double>(bytes < 1 ? 1 : bytes);
  if (b <= rows[0].bytes) return us(rows[0]) * 1e-6;
  for (int i = 1; i < kPinCallCostRows; ++i) {
    if (b <= rows[i].bytes) {
      double t = (b - rows[i - 1].bytes) / (rows[i].bytes - rows[i - 1].bytes);
      return (us(rows[i - 1]) + t * (us(rows[i]) - us(rows[i - 1]))) * 1e-6;
    }
  }
  const PinCallCostRow& last = rows[kPinCallCostRows - 1];
  return us(last) * 1e-6 * (b / last.bytes);
}

}  // namespace report
}  // namespace pinshim
