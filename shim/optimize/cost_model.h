// What pinning costs and what it saves, from the measurements on the H200
// (bench/RESULTS.md, "The cost model's table": cudaMemcpy bandwidth and
// pinning costs, medians, PCIe gen5 x16, CUDA 13.0, driver 580).
//
// Copy time: t(b, d, kind) = b / BW(b, d, kind), with BW interpolated
// linearly in log2(size) between the measured sizes and held constant beyond
// them. The registration cache turns pageable memory into registered memory,
// so its "pinned" bandwidth is the measured *registered* column.
//
//   size     H2D pageable  H2D registered  D2H pageable  D2H registered  (GB/s)
//   4 KiB    0.60          0.51            0.60*         0.51*
//   64 KiB   2.63          7.32            2.63*         7.32*
//   1 MiB    11.87         38.80           7.41          40.26
//   16 MiB   11.55         53.65           8.61          54.23
//   256 MiB  5.80          55.14           10.36         55.19
//   (*) D2H was measured from 1 MiB up; below, the H2D figures stand in.
//
// Saving per copy: s(b, d) = max(0, t(b, d, pageable) - t(b, d, registered)).
// At 4 KiB registered is slower than pageable, so s = 0 there: pinning small
// buffers never pays, as measured.
//
// Pinning cost of an allocation of S bytes: C(S) = register(S) +
// unregister(S), interpolated linearly in log-log between
//   4 KiB: 74 + 36 us, 1 MiB: 107 + 52 us, 16 MiB: 770 + 322 us,
//   256 MiB: 11611 + 4691 us,
// constant below 4 KiB and proportional to S above 256 MiB.
//
// Worked examples (H2D, copy = whole allocation): 16 MiB saves 1138 us per
// copy against C = 1092 us; 1 MiB saves 61.5 us against C = 159 us (3
// copies); 64 KiB saves 16 us against C ~ 132 us (9 copies). These match the
// measured "pays for itself after about 1 transfer at 16 MiB and about 3 at
// 1 MiB".
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

  // cudaHostAlloc / cudaFreeHost of `bytes`, in ns (what a pool hit saves):
  // 4 KiB: 572 + 239 us, 1 MiB: 596 + 238 us, 16 MiB: 6661 + 1543 us,
  // 256 MiB: 99233 + 24660 us, interpolated as the pinning costs are.
  static double HostAllocNs(uint64_t bytes);
  static double FreeHostNs(uint64_t bytes);

  // Registering and later unregistering an allocation of `bytes`, in ns.
  // (RegisterNs + UnregisterNs; this and SavingNs keep their last answer
  // per thread.)
  static double PinCycleNs(uint64_t bytes);

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
