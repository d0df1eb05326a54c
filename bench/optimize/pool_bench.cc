// cuMemHostAlloc + cuMemFreeHost pairs: the driver's own against the pinned
// pool's, as configured (frees share one legacy-stream fence per batch), and
// without any free-time fence (the floor the fence adds to).
//
//   LD_LIBRARY_PATH=<bin>/tests/fakecuda <bin>/bench/optimize/pool_bench
//   <bin>/bench/optimize/pool_bench            # on a machine with a GPU
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "bench/optimize/driver_loader.h"
#include "shim/optimize/fences.h"
#include "shim/optimize/pin_account.h"
#include "shim/optimize/pinned_pool.h"

namespace pinshim {
namespace {

bench::LoadedDriver& Driver() {
  static bench::LoadedDriver d;
  static bool ok = [] {
    if (!bench::LoadDriver(&d)) exit(1);
    fprintf(stderr, "driver: %s\n", d.simulated ? "simulated (tests/fakecuda)" : "real");
    return true;
  }();
  (void)ok;
  d.ops.ctx_set_current(d.ctx);
  return d;
}

void BM_DriverHostAllocFree(benchmark::State& state) {
  auto& d = Driver();
  const size_t n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (d.ops.mem_host_alloc(&p, n, 0) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemHostAlloc failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    d.ops.mem_free_host(p);
  }
  state.SetLabel("driver");
}

void PoolPairs(benchmark::State& state, bool fence_on_free) {
  auto& d = Driver();
  static optimize::FenceManager fences;
  static optimize::PinAccount account;
  static bool fences_ok = fences.Init(&d.ops);
  if (!fences_ok) {
    state.SkipWithError("fences");
    return;
  }
  // One pool per configuration, kept across sizes like a process would.
  static optimize::PinnedPool pools[2];
  optimize::PinnedPool& pool = pools[fence_on_free ? 1 : 0];
  if (!pool.active()) {
    optimize::PoolOptions o;
    o.fence_on_free = fence_on_free;
    o.idle_trim_ns = 0;
    pool.Init(&d.ops, &fences, &account, o);
  }
  const size_t n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (pool.Allocate(&p, n, 0) != CUDA_SUCCESS) {
      state.SkipWithError("pool allocate failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    CUresult r;
    pool.Free(p, &r);
  }
  const optimize::PoolStats s = pool.Stats();
  state.counters["slab_MiB"] = static_cast<double>(s.slab_bytes) / (1 << 20);
  state.SetLabel(fence_on_free ? "pool, batched fence on free" : "pool, no fence on free");
}

void BM_PoolAllocFree(benchmark::State& state) { PoolPairs(state, true); }
void BM_PoolAllocFreeNoFence(benchmark::State& state) { PoolPairs(state, false); }

#define SIZES Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)->Arg(16 << 20)
BENCHMARK(BM_DriverHostAllocFree)->SIZES;
BENCHMARK(BM_PoolAllocFree)->SIZES;
BENCHMARK(BM_PoolAllocFreeNoFence)->SIZES;
#undef SIZES

}  // namespace
}  // namespace pinshim

BENCHMARK_MAIN();
