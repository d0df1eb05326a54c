// Loads libcuda.so.1 with dlopen, fills a DriverOps table from it and makes
// the primary context of device 0 current: what the benchmarks share.
#ifndef PINSHIM_BENCH_OPTIMIZE_DRIVER_LOADER_H_
#define PINSHIM_BENCH_OPTIMIZE_DRIVER_LOADER_H_

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>

#include "shim/optimize/driver_ops.h"

namespace pinshim {
namespace bench {

struct LoadedDriver {
  void* handle = nullptr;
  optimize::DriverOps ops = {};
  CUcontext ctx = nullptr;
  bool simulated = false;  // tests/fakecuda (it exports fakecuda_* knobs)
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned int) = nullptr;
};

inline void* LookupInHandle(const char* name, void* handle) { return dlsym(handle, name); }

// Loads the driver and makes a context current; false (with a line on
// stderr) when anything is missing.
inline bool LoadDriver(LoadedDriver* d) {
  d->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d->handle == nullptr) {
    fprintf(stderr, "cannot load libcuda.so.1: %s\n", dlerror());
    return false;
  }
  if (!optimize::LoadDriverOps(&LookupInHandle, d->handle, &d->ops)) {
    fprintf(stderr, "libcuda.so.1 lacks an entry point the engine needs\n");
    return false;
  }
  d->simulated = dlsym(d->handle, "fakecuda_call_count") != nullptr;
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(d->handle, "cuInit"));
  auto get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(dlsym(d->handle, "cuDeviceGet"));
  auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(
      dlsym(d->handle, "cuDevicePrimaryCtxRetain"));
  d->mem_alloc = reinterpret_cast<decltype(d->mem_alloc)>(dlsym(d->handle, "cuMemAlloc_v2"));
  d->memcpy_htod_async =
      reinterpret_cast<decltype(d->memcpy_htod_async)>(dlsym(d->handle, "cuMemcpyHtoDAsync_v2"));
  d->memcpy_dtoh = reinterpret_cast<decltype(d->memcpy_dtoh)>(dlsym(d->handle, "cuMemcpyDtoH_v2"));
  d->stream_create =
      reinterpret_cast<decltype(d->stream_create)>(dlsym(d->handle, "cuStreamCreate"));
  CUdevice dev;
  if (init == nullptr || get == nullptr || retain == nullptr || init(0) != CUDA_SUCCESS ||
      get(&dev, 0) != CUDA_SUCCESS || retain(&d->ctx, dev) != CUDA_SUCCESS ||
      d->ops.ctx_set_current(d->ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "no CUDA device or context\n");
    return false;
  }
  return true;
}

}  // namespace bench
}  // namespace pinshim

#endif  // PINSHIM_BENCH_OPTIMIZE_DRIVER_LOADER_H_
