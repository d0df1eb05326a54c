// The copy and pinning costs optimize mode's cost model and the report's
// bandwidth model start from: one table of `cudaMemcpy` medians and pinning
// calls measured on the H200 (bench/RESULTS.md, "The cost model's table").
// Each model reads the columns it needs; a calibration replaces the report's.
// Header-only, constexpr, no dependencies: the preloaded library may use it
// before anything is initialised.
#ifndef PINSHIM_SHIM_CORE_BANDWIDTH_DEFAULTS_H_
#define PINSHIM_SHIM_CORE_BANDWIDTH_DEFAULTS_H_

namespace pinshim {

// One copy size of one direction, GB/s (10^9 bytes per second).
struct CopyBandwidthRow {
  double bytes;
  double pageable_gbps;    // malloc'd memory
  double pinned_gbps;      // cudaHostAlloc'd memory
  double registered_gbps;  // malloc'd memory after cudaHostRegister
};

// The rows of each direction; sizes ascend and are the same in both.
constexpr int kCopyBandwidthRows = 5;

constexpr double kDefaultsKiB = 1024.0;
constexpr double kDefaultsMiB = 1024.0 * 1024.0;

constexpr CopyBandwidthRow kHostToDeviceDefaults[kCopyBandwidthRows] = {
    {4 * kDefaultsKiB, 0.60, 0.52, 0.51},     {64 * kDefaultsKiB, 2.63, 7.35, 7.32},
    {1 * kDefaultsMiB, 11.87, 39.06, 38.80},  {16 * kDefaultsMiB, 11.55, 53.45, 53.65},
    {256 * kDefaultsMiB, 5.80, 55.24, 55.14},
};

// Device-to-host was measured from 1 MiB up; below it the host-to-device
// rows stand in.
constexpr CopyBandwidthRow kDeviceToHostDefaults[kCopyBandwidthRows] = {
    kHostToDeviceDefaults[0],
    kHostToDeviceDefaults[1],
    {1 * kDefaultsMiB, 7.41, 40.78, 40.26},
    {16 * kDefaultsMiB, 8.61, 53.38, 54.23},
    {256 * kDefaultsMiB, 10.36, 54.78, 55.19},
};

// The pinning calls at one size, microseconds.
struct PinCallCostRow {
  double bytes;
  double host_alloc_us;  // cudaHostAlloc
  double free_host_us;   // cudaFreeHost
  double register_us;    // cudaHostRegister
  double unregister_us;  // cudaHostUnregister
};

constexpr int kPinCallCostRows = 4;

constexpr PinCallCostRow kPinCallCostDefaults[kPinCallCostRows] = {
    {4 * kDefaultsKiB, 572, 239, 74, 36},
    {1 * kDefaultsMiB, 596, 238, 107, 52},
    {16 * kDefaultsMiB, 6661, 1543, 770, 322},
    {256 * kDefaultsMiB, 99233, 24660, 11611, 4691},
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_BANDWIDTH_DEFAULTS_H_
