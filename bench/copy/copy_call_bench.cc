// Cost of one tiny (64-byte) host-to-device copy call as a CUDA program makes
// it: the driver is reached as the CUDA runtime reaches it (dlopen of
// libcuda.so.1, one dlsym of cuGetProcAddress_v2, then cuGetProcAddress for
// everything else), so with pinshim preloaded each call goes through the
// wrapper pinshim handed back. Run with and without the library, the
// difference is pinshim's per-call overhead (target: at most 50 ns added,
// median, in observe mode). Against the simulated driver the copy itself is a
// 64-byte memcpy, so the fixed costs dominate, which is what is measured.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);

struct Driver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&cuMemAlloc_v2) mem_alloc = nullptr;
  decltype(&cuMemHostAlloc) mem_host_alloc = nullptr;
  decltype(&cuMemcpyHtoD_v2) memcpy_htod = nullptr;
  decltype(&cuMemcpyHtoDAsync_v2) memcpy_htod_async = nullptr;
  decltype(&cuStreamCreate) stream_create = nullptr;
  decltype(&cuStreamSynchronize) stream_synchronize = nullptr;
};

Driver g_driver;
CUdeviceptr g_device = 0;
void* g_pageable = nullptr;
void* g_pinned = nullptr;
CUstream g_stream = nullptr;

constexpr size_t kBytes = 64;
// Async copies are drained this often so the stream's queue stays short; the
// synchronisation is part of the measured time, with and without pinshim.
constexpr int kAsyncBatch = 64;

template <typename Fn>
bool Lookup(GetProcAddressFn get, const char* name, Fn* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  if (get(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
          CUDA_SUCCESS ||
      fn == nullptr) {
    std::fprintf(stderr, "copy_call_bench: cuGetProcAddress(%s) failed\n",
                 name);
    return false;
  }
  *out = reinterpret_cast<Fn>(fn);
  return true;
}

bool Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return true;
  std::fprintf(stderr, "copy_call_bench: %s returned %d\n", what,
               static_cast<int>(rc));
  return false;
}

// Opens the driver the way the CUDA runtime does and prepares the buffers.
bool SetUpDriver() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::fprintf(stderr,
                 "copy_call_bench: cannot dlopen libcuda.so.1 (%s); point "
                 "LD_LIBRARY_PATH at bazel-bin/tests/fakecuda\n",
                 dlerror());
    return false;
  }
  auto get_v2 =
      reinterpret_cast<GetProcAddressFn>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_v2 == nullptr) {
    std::fprintf(stderr, "copy_call_bench: no cuGetProcAddress_v2\n");
    return false;
  }
  GetProcAddressFn get = nullptr;
  if (!Lookup(get_v2, "cuInit", &g_driver.init) ||
      !Check(g_driver.init(0), "cuInit") ||
      !Lookup(get_v2, "cuGetProcAddress", &get)) {
    return false;
  }
  Driver& d = g_driver;
  if (!Lookup(get, "cuDeviceGet", &d.device_get) ||
      !Lookup(get, "cuDevicePrimaryCtxRetain", &d.primary_ctx_retain) ||
      !Lookup(get, "cuCtxSetCurrent", &d.ctx_set_current) ||
      !Lookup(get, "cuMemAlloc", &d.mem_alloc) ||
      !Lookup(get, "cuMemHostAlloc", &d.mem_host_alloc) ||
      !Lookup(get, "cuMemcpyHtoD", &d.memcpy_htod) ||
      !Lookup(get, "cuMemcpyHtoDAsync", &d.memcpy_htod_async) ||
      !Lookup(get, "cuStreamCreate", &d.stream_create) ||
      !Lookup(get, "cuStreamSynchronize", &d.stream_synchronize)) {
    return false;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (!Check(d.device_get(&dev, 0), "cuDeviceGet") ||
      !Check(d.primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      !Check(d.ctx_set_current(ctx), "cuCtxSetCurrent") ||
      !Check(d.mem_alloc(&g_device, 1 << 20), "cuMemAlloc") ||
      !Check(d.mem_host_alloc(&g_pinned, 1 << 20, 0), "cuMemHostAlloc") ||
      !Check(d.stream_create(&g_stream, CU_STREAM_NON_BLOCKING),
             "cuStreamCreate")) {
    return false;
  }
  // Large enough to be tracked by pinshim's allocation hooks.
  g_pageable = std::malloc(1 << 20);
  std::memset(g_pageable, 1, 1 << 20);
  std::memset(g_pinned, 2, 1 << 20);
  return true;
}

void* HostBuffer(const benchmark::State& state) {
  return state.range(0) == 0 ? g_pageable : g_pinned;
}

void SetHostLabel(benchmark::State& state) {
  state.SetLabel(state.range(0) == 0 ? "pageable" : "pinned");
}

// arg 0: pageable (malloc) source; arg 1: pinned (cuMemHostAlloc) source.
void BM_MemcpyHtoD(benchmark::State& state) {
  const void* src = HostBuffer(state);
  for (auto _ : state) {
    if (g_driver.memcpy_htod(g_device, src, kBytes) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemcpyHtoD failed");
      break;
    }
  }
  SetHostLabel(state);
}
BENCHMARK(BM_MemcpyHtoD)->Arg(0)->Arg(1);

void BM_MemcpyHtoDAsync(benchmark::State& state) {
  const void* src = HostBuffer(state);
  int queued = 0;
  for (auto _ : state) {
    if (g_driver.memcpy_htod_async(g_device, src, kBytes, g_stream) !=
        CUDA_SUCCESS) {
      state.SkipWithError("cuMemcpyHtoDAsync failed");
      break;
    }
    if (++queued == kAsyncBatch) {
      g_driver.stream_synchronize(g_stream);
      queued = 0;
    }
  }
  g_driver.stream_synchronize(g_stream);
  SetHostLabel(state);
}
BENCHMARK(BM_MemcpyHtoDAsync)->Arg(0)->Arg(1);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!SetUpDriver()) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
