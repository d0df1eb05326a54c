#include "shim/optimize/cost_model.h"

#include <cmath>

namespace pinshim {
namespace optimize {
namespace {

struct BandwidthRow {
  double bytes;
  double pageable_gbps;
  double registered_gbps;
};

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

constexpr BandwidthRow kHostToDevice[] = {
    {4 * kKiB, 0.60, 0.51},    {64 * kKiB, 2.63, 7.32},   {1 * kMiB, 11.87, 38.80},
    {16 * kMiB, 11.55, 53.65}, {256 * kMiB, 5.80, 55.14},
};
// Below 1 MiB the H2D figures stand in (D2H was measured from 1 MiB up).
constexpr BandwidthRow kDeviceToHost[] = {
    {4 * kKiB, 0.60, 0.51},   {64 * kKiB, 2.63, 7.32},    {1 * kMiB, 7.41, 40.26},
    {16 * kMiB, 8.61, 54.23}, {256 * kMiB, 10.36, 55.19},
};
constexpr int kRows = 5;

struct PinCostRow {
  double bytes;
  double register_us;
  double unregister_us;
};
constexpr PinCostRow kPinCosts[] = {
    {4 * kKiB, 74, 36},
    {1 * kMiB, 107, 52},
    {16 * kMiB, 770, 322},
    {256 * kMiB, 11611, 4691},
};
// The same shape for cudaHostAlloc (first) and cudaFreeHost (second).
constexpr PinCostRow kHostAllocCosts[] = {
    {4 * kKiB, 572, 239},
    {1 * kMiB, 596, 238},
    {16 * kMiB, 6661, 1543},
    {256 * kMiB, 99233, 24660},
};
constexpr int kPinRows = 4;

double Bandwidth(const BandwidthRow* rows, double bytes, bool registered) {
  auto pick = [registered](const BandwidthRow& r) {
    return registered ? r.registered_gbps : r.pageable_gbps;
  };
  if (bytes <= rows[0].bytes) return pick(rows[0]);
  for (int i = 1; i < kRows; ++i) {
    if (bytes <= rows[i].bytes) {
      double f = (std::log2(bytes) - std::log2(rows[i - 1].bytes)) /
                 (std::log2(rows[i].bytes) - std::log2(rows[i - 1].bytes));
      return pick(rows[i - 1]) + f * (pick(rows[i]) - pick(rows[i - 1]));
    }
  }
  return pick(rows[kRows - 1]);
}

// Linear in log-log between rows; constant below the first, proportional
// to size above the last.
double CostUs(const PinCostRow* rows, double bytes, bool second) {
  auto pick = [second](const PinCostRow& r) { return second ? r.unregister_us : r.register_us; };
  if (bytes <= rows[0].bytes) return pick(rows[0]);
  for (int i = 1; i < kPinRows; ++i) {
    if (bytes <= rows[i].bytes) {
      double lx0 = std::log(rows[i - 1].bytes), lx1 = std::log(rows[i].bytes);
      double ly0 = std::log(pick(rows[i - 1])), ly1 = std::log(pick(rows[i]));
      double f = (std::log(bytes) - lx0) / (lx1 - lx0);
      return std::exp(ly0 + f * (ly1 - ly0));
    }
  }
  const PinCostRow& last = rows[kPinRows - 1];
  return pick(last) * bytes / last.bytes;
}

}  // namespace

double CostModel::CopyNs(uint64_t bytes, CopyDir dir, bool registered) {
  if (bytes == 0) return 0;
  const BandwidthRow* rows;
  if (dir == CopyDir::kHostToDevice) {
    rows = kHostToDevice;
  } else if (dir == CopyDir::kDeviceToHost) {
    rows = kDeviceToHost;
  } else {
    return 0;
  }
  double b = static_cast<double>(bytes);
  return b / Bandwidth(rows, b, registered);  // GB/s == bytes per ns
}

double CostModel::SavingNs(uint64_t bytes, CopyDir dir) {
  double s = CopyNs(bytes, dir, false) - CopyNs(bytes, dir, true);
  return s > 0 ? s : 0;
}

double CostModel::HostAllocNs(uint64_t bytes) {
  return CostUs(kHostAllocCosts, static_cast<double>(bytes), false) * 1000.0;
}

double CostModel::FreeHostNs(uint64_t bytes) {
  return CostUs(kHostAllocCosts, static_cast<double>(bytes), true) * 1000.0;
}

double CostModel::RegisterNs(uint64_t bytes) {
  return CostUs(kPinCosts, static_cast<double>(bytes), false) * 1000.0;
}

double CostModel::UnregisterNs(uint64_t bytes) {
  return CostUs(kPinCosts, static_cast<double>(bytes), true) * 1000.0;
}

uint32_t CostModel::BreakEvenCopies(uint64_t alloc_bytes, uint64_t copy_bytes, CopyDir dir) {
  const double s = SavingNs(copy_bytes, dir);
  const double cost = PinCycleNs(alloc_bytes);
  if (s <= 0) return UINT32_MAX;
  // The same arithmetic the cache performs, so the count is exact.
  double acc = 0;
  for (uint32_t n = 1; n < 1000000; ++n) {
    acc = acc * 1.0 + s;
    if (PaysOff(n, acc, cost)) return n;
  }
  return UINT32_MAX;
}

}  // namespace optimize
}  // namespace pinshim
