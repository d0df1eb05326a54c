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
void* g_small = nullptr;
void* g_pinned = nullptr;
CUstream g_stream = nullptr;

constexpr size_t kBytes = 64;
// Async copies are drained this often so the stream's queue stays short; the
// synchronisation is part of the measured time, with and without pinshim.
constexpr int kAsyncBatch = 64;

// Asks for `name` at `version`, the version that introduced the ABI of Fn (as
// the CUDA runtime does; a newer version may hand back another signature).
template <typename Fn>
bool Lookup(GetProcAddressFn get, const char* name, int version, Fn* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  if (get(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
      fn == nullptr) {
    std::fprintf(stderr, "copy_call_bench: cuGetProcAddress(%s) failed\n", name);
    return false;
  }
  *out = reinterpret_cast<Fn>(fn);
  return true;
}

bool Check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return true;
  std::fprintf(stderr, "copy_call_bench: %s returned %d\n", what, static_cast<int>(rc));
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
  auto get_v2 = reinterpret_cast<GetProcAddressFn>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_v2 == nullptr) {
    std::fprintf(stderr, "copy_call_bench: no cuGetProcAddress_v2\n");
    return false;
  }
  GetProcAddressFn get = nullptr;
  if (!Lookup(get_v2, "cuInit", 2000, &g_driver.init) || !Check(g_driver.init(0), "cuInit") ||
      !Lookup(get_v2, "cuGetProcAddress", 12000, &get)) {
    return false;
  }
  Driver& d = g_driver;
  if (!Lookup(get, "cuDeviceGet", 2000, &d.device_get) ||
      !Lookup(get, "cuDevicePrimaryCtxRetain", 7000, &d.primary_ctx_retain) ||
      !Lookup(get, "cuCtxSetCurrent", 4000, &d.ctx_set_current) ||
      !Lookup(get, "cuMemAlloc", 3020, &d.mem_alloc) ||
      !Lookup(get, "cuMemHostAlloc", 2020, &d.mem_host_alloc) ||
      !Lookup(get, "cuMemcpyHtoD", 3020, &d.memcpy_htod) ||
      !Lookup(get, "cuMemcpyHtoDAsync", 3020, &d.memcpy_htod_async) ||
      !Lookup(get, "cuStreamCreate", 2000, &d.stream_create) ||
      !Lookup(get, "cuStreamSynchronize", 2000, &d.stream_synchronize)) {
    return false;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (!Check(d.device_get(&dev, 0), "cuDeviceGet") ||
      !Check(d.primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
      !Check(d.ctx_set_current(ctx), "cuCtxSetCurrent") ||
      !Check(d.mem_alloc(&g_device, 1 << 20), "cuMemAlloc") ||
      !Check(d.mem_host_alloc(&g_pinned, 1 << 20, 0), "cuMemHostAlloc") ||
      !Check(d.stream_create(&g_stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    return false;
  }
  // Large enough to be tracked by pinshim's allocation hooks; the small one
  // is likely below its tracking threshold, so pinshim must classify it
  // some other way (the driver's pointer attributes).
  g_pageable = std::malloc(1 << 20);
  std::memset(g_pageable, 1, 1 << 20);
  g_small = std::malloc(256);
  std::memset(g_small, 3, 256);
  std::memset(g_pinned, 2, 1 << 20);
  return true;
}

// Source of the copy, by benchmark argument: 0 a 1 MiB malloc block,
// 1 cuMemHostAlloc memory, 2 a 256-byte malloc block.
void* HostBuffer(const benchmark::State& state) {
  switch (state.range(0)) {
    case 0: return g_pageable;
    case 1: return g_pinned;
    default: return g_small;
  }
}

void SetHostLabel(benchmark::State& state) {
  static const char* const kLabels[] = {"pageable", "pinned", "small-pageable"};
  state.SetLabel(kLabels[state.range(0)]);
}

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
BENCHMARK(BM_MemcpyHtoD)->Arg(0)->Arg(1)->Arg(2);

void BM_MemcpyHtoDAsync(benchmark::State& state) {
  const void* src = HostBuffer(state);
  int queued = 0;
  for (auto _ : state) {
    if (g_driver.memcpy_htod_async(g_device, src, kBytes, g_stream) != CUDA_SUCCESS) {
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
BENCHMARK(BM_MemcpyHtoDAsync)->Arg(0)->Arg(1)->Arg(2);

// A fresh buffer per copy, as a data pipeline's batches are: malloc'd,
// written, copied once and freed (outside the timing); arg: its size. The
// copy itself is 64 bytes, so what is timed is the per-call work pinshim
// does for a copy of a buffer it has not seen copied before.
void BM_FreshHtoD(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    void* b = std::malloc(n);
    std::memset(b, 1, n);
    state.ResumeTiming();
    if (g_driver.memcpy_htod(g_device, b, kBytes) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemcpyHtoD failed");
      break;
    }
    state.PauseTiming();
    std::free(b);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_FreshHtoD)->Arg(256 << 10)->Arg(1 << 20);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!SetUpDriver()) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
