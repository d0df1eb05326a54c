#include "shim/optimize/cost_model.h"

#include <cmath>

#include "shim/core/bandwidth_defaults.h"
#include "shim/core/macros.h"

namespace pinshim {
namespace optimize {
namespace {

// The columns of shim/core/bandwidth_defaults.h this model reads: a copy
// through memory pinned in place runs at the registered figure.
using BandwidthRow = CopyBandwidthRow;
constexpr int kRows = kCopyBandwidthRows;
constexpr int kPinRows = kPinCallCostRows;

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

// One pinning call's cost: `alloc` picks cudaHostAlloc and cudaFreeHost,
// else cudaHostRegister and cudaHostUnregister; `second`, the release call
// of the pair. Linear in log-log between rows; constant below the first,
// proportional to size above the last.
double CostUs(bool alloc, double bytes, bool second) {
  const PinCallCostRow* rows = kPinCallCostDefaults;
  auto pick = [alloc, second](const PinCallCostRow& r) {
    if (alloc) return second ? r.free_host_us : r.host_alloc_us;
    return second ? r.unregister_us : r.register_us;
  };
  if (bytes <= rows[0].bytes) return pick(rows[0]);
  for (int i = 1; i < kPinRows; ++i) {
    if (bytes <= rows[i].bytes) {
      double lx0 = std::log(rows[i - 1].bytes), lx1 = std::log(rows[i].bytes);
      double ly0 = std::log(pick(rows[i - 1])), ly1 = std::log(pick(rows[i]));
      double f = (std::log(bytes) - lx0) / (lx1 - lx0);
      return std::exp(ly0 + f * (ly1 - ly0));
    }
  }
  const PinCallCostRow& last = rows[kPinRows - 1];
  return pick(last) * bytes / last.bytes;
}

// The last answer of a function of one size on this thread: a program's
// copies and buffers mostly repeat their sizes, and each answer costs a
// dozen logarithms. Per thread, so a hit is the answer that thread's own
// arithmetic gave, without a lock.
struct Memo {
  uint64_t key = UINT64_MAX;
  double value = 0;
};
PINSHIM_TLS Memo t_saving_memo[2];  // by direction
PINSHIM_TLS Memo t_pin_cycle_memo;

}  // namespace

double CostModel::CopyNs(uint64_t bytes, CopyDir dir, bool registered) {
  if (bytes == 0) return 0;
  const BandwidthRow* rows;
  if (dir == CopyDir::kHostToDevice) {
    rows = kHostToDeviceDefaults;
  } else if (dir == CopyDir::kDeviceToHost) {
    rows = kDeviceToHostDefaults;
  } else {
    return 0;
  }
  double b = static_cast<double>(bytes);
  return b / Bandwidth(rows, b, registered);  // GB/s == bytes per ns
}

double CostModel::SavingNs(uint64_t bytes, CopyDir dir) {
  if (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) return 0;
  Memo& memo = t_saving_memo[dir == CopyDir::kDeviceToHost ? 1 : 0];
  if (memo.key == bytes) return memo.value;
  const double s = CopyNs(bytes, dir, false) - CopyNs(bytes, dir, true);
  memo.key = bytes;
  memo.value = s > 0 ? s : 0;
  return memo.value;
}

double CostModel::PinCycleNs(uint64_t bytes) {
  Memo& memo = t_pin_cycle_memo;
  if (memo.key == bytes) return memo.value;
  memo.value = RegisterNs(bytes) + UnregisterNs(bytes);
  memo.key = bytes;
  return memo.value;
}

double CostModel::HostAllocNs(uint64_t bytes) {
  return CostUs(true, static_cast<double>(bytes), false) * 1000.0;
}

double CostModel::FreeHostNs(uint64_t bytes) {
  return CostUs(true, static_cast<double>(bytes), true) * 1000.0;
}

double CostModel::RegisterNs(uint64_t bytes) {
  return CostUs(false, static_cast<double>(bytes), false) * 1000.0;
}

double CostModel::UnregisterNs(uint64_t bytes) {
  return CostUs(false, static_cast<double>(bytes), true) * 1000.0;
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
