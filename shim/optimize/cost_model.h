// What pinning costs and what it saves, from the measurements on the H200
// in shim/core/bandwidth_defaults.h (bench/RESULTS.md, "The cost model's
// table": cudaMemcpy bandwidth and pinning costs, medians; the worked
// examples below it are this model's).
//
// Copy time: t(b, d, kind) = b / BW(b, d, kind), with BW interpolated
// linearly in log2(size) between the measured sizes and held constant beyond
// them. The registration cache turns pageable memory into registered memory,
// so its "pinned" bandwidth is the measured *registered* column. Device to
// host was measured from 1 MiB up; below, the host-to-device figures stand
// in.
//
// Saving per copy: s(b, d) = max(0, t(b, d, pageable) - t(b, d, registered)).
// At the smallest size registered is slower than pageable, so s = 0 there:
// pinning small buffers never pays, as measured.
//
// Pinning cost of an allocation of S bytes: C(S) = register(S) +
// unregister(S), interpolated linearly in log-log between the measured
// sizes, constant below the smallest and proportional to S above the
// largest.
#ifndef PINSHIM_SHIM_OPTIMIZE_COST_MODEL_H_
#define PINSHIM_SHIM_OPTIMIZE_COST_MODEL_H_

#include <cstdint>

#include "shim/core/events.h"

namespace pinshim {
namespace optimize {

class CostModel {
 public:
  // Time of one copy of `bytes` in direction dir from pageable or
  // registered memory, in ns. Directions other than H2D/D2H: 0.
  static double CopyNs(uint64_t bytes, CopyDir dir, bool registered);

  // What one copy saves once its host side is registered (>= 0), in ns.
  static double SavingNs(uint64_t bytes, CopyDir dir);

  // cuMemHostRegister / cuMemHostUnregister of `bytes`, in ns.
  static double RegisterNs(uint64_t bytes);
  static double UnregisterNs(uint64_t bytes);

  // cudaHostAlloc / cudaFreeHost of `bytes`, in ns (what a pool hit saves),
  // from the same table, interpolated as the pinning costs are.
  static double HostAllocNs(uint64_t bytes);
  static double FreeHostNs(uint64_t bytes);

  // Registering and later unregistering an allocation of `bytes`, in ns.
  static double PinCycleNs(uint64_t bytes) { return RegisterNs(bytes) + UnregisterNs(bytes); }

  // Under the registration cache's rule (accumulated savings of the copies
  // seen, at least two of them, must reach PinCycleNs(alloc_bytes)), the
  // number of back-to-back copies of copy_bytes after which an allocation of
  // alloc_bytes is registered. UINT32_MAX when it never is.
  static uint32_t BreakEvenCopies(uint64_t alloc_bytes, uint64_t copy_bytes, CopyDir dir);

  // The rule itself: at least kMinCopies seen and accumulated >= cost.
  static constexpr uint32_t kMinCopies = 2;
  static bool PaysOff(uint32_t copies, double accumulated_ns, double cost_ns) {
    return copies >= kMinCopies && accumulated_ns >= cost_ns;
  }
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_COST_MODEL_H_
