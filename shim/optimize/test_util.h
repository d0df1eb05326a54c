// Test helpers: the simulated driver (tests/fakecuda) behind a DriverOps
// table, a current context, and device buffers to copy through.
#ifndef PINSHIM_SHIM_OPTIMIZE_TEST_UTIL_H_
#define PINSHIM_SHIM_OPTIMIZE_TEST_UTIL_H_

#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "shim/optimize/driver_ops.h"
#include "tests/fakecuda/fakecuda_control.h"

namespace pinshim {
namespace optimize {
namespace testing {

// The simulated driver's entry points, as the hooks would hand them over.
inline DriverOps FakeDriverOps() {
  DriverOps ops;
  ops.mem_host_alloc = &cuMemHostAlloc;
  ops.mem_free_host = &cuMemFreeHost;
  ops.mem_host_register = &cuMemHostRegister;
  ops.mem_host_unregister = &cuMemHostUnregister;
  ops.mem_host_get_device_pointer = &cuMemHostGetDevicePointer;
  ops.mem_host_get_flags = &cuMemHostGetFlags;
  ops.event_create = &cuEventCreate;
  ops.event_record = &cuEventRecord;
  ops.event_query = &cuEventQuery;
  ops.event_synchronize = &cuEventSynchronize;
  ops.event_destroy = &cuEventDestroy;
  ops.stream_synchronize = &cuStreamSynchronize;
  ops.ctx_get_current = &cuCtxGetCurrent;
  ops.ctx_set_current = &cuCtxSetCurrent;
  ops.ctx_synchronize = &cuCtxSynchronize;
  ops.memcpy_htod_async = &cuMemcpyHtoDAsync;
  ops.memcpy_dtoh_async = &cuMemcpyDtoHAsync;
  ops.pointer_get_attribute = &cuPointerGetAttribute;
  return ops;
}

// cuInit and the primary context of device 0, made current on this thread.
inline CUcontext MakeContextCurrent() {
  static CUcontext ctx = [] {
    CUcontext c = nullptr;
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS) {
      return static_cast<CUcontext>(nullptr);
    }
    return c;
  }();
  cuCtxSetCurrent(ctx);
  return ctx;
}

// A clock the test moves by hand.
struct ManualClock {
  static std::atomic<uint64_t>& Value() {
    static std::atomic<uint64_t> v{1000000000};
    return v;
  }
  static uint64_t Now() { return Value().load(); }
  static void Advance(uint64_t ns) { Value().fetch_add(ns); }
};

// Fills n bytes at p with a pattern derived from seed.
inline void Fill(void* p, size_t n, uint8_t seed) {
  auto* c = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) c[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

// Whether n bytes at p hold Fill's pattern for seed.
inline bool HasPattern(const void* p, size_t n, uint8_t seed) {
  auto* c = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (c[i] != static_cast<uint8_t>(seed + i * 7 + (i >> 8))) return false;
  }
  return true;
}

}  // namespace testing
}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_TEST_UTIL_H_
