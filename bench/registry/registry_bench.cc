// Registry lookups with many live tracked regions (target: at most 50 ns
// median with 100,000), misses where the summary answers alone, and
// insert+remove, the cost a tracked malloc+free pays.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "shim/core/registry.h"

namespace pinshim {
namespace {

constexpr uintptr_t kBase = uintptr_t{1} << 40;
constexpr uintptr_t kStride = 1 << 20;  // regions of 64 KiB, 1 MiB apart

void Fill(Registry* reg, int n) {
  for (int i = 0; i < n; ++i) {
    Region r;
    r.start = kBase + i * kStride;
    r.bytes = 64 << 10;
    r.id = i + 1;
    reg->Insert(r);
  }
}

void BM_LookupHit(benchmark::State& state) {
  static Registry reg;
  const int n = static_cast<int>(state.range(0));
  reg.Clear();
  Fill(&reg, n);
  std::mt19937_64 rng(1);
  std::vector<uintptr_t> probes(4096);
  for (auto& p : probes) p = kBase + (rng() % n) * kStride + rng() % (64 << 10);
  size_t i = 0;
  Region out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(reg.Lookup(probes[i++ & 4095], &out));
  }
}
BENCHMARK(BM_LookupHit)->Arg(1000)->Arg(100000);

void BM_LookupMiss(benchmark::State& state) {
  static Registry reg;
  const int n = static_cast<int>(state.range(0));
  reg.Clear();
  Fill(&reg, n);
  std::mt19937_64 rng(2);
  std::vector<uintptr_t> probes(4096);
  for (auto& p : probes) p = kBase + (rng() % n) * kStride + (512 << 10);
  size_t i = 0;
  Region out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(reg.Lookup(probes[i++ & 4095], &out));
  }
}
BENCHMARK(BM_LookupMiss)->Arg(100000);

// Misses in 2 MiB of address space no range touches (the program's small
// blocks and its stack): the summary answers without a search.
void BM_LookupMissUntouched(benchmark::State& state) {
  static Registry reg;
  const int n = static_cast<int>(state.range(0));
  reg.Clear();
  Fill(&reg, n);
  std::mt19937_64 rng(3);
  std::vector<uintptr_t> probes(4096);
  const uintptr_t past = kBase + uintptr_t(n) * kStride + (uintptr_t{4} << 20);
  for (auto& p : probes) p = past + (rng() % 1024) * (uintptr_t{2} << 20) + rng() % (2 << 20);
  size_t i = 0;
  Region out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(reg.Lookup(probes[i++ & 4095], &out));
  }
}
BENCHMARK(BM_LookupMissUntouched)->Arg(100000);

// Lookups on 16 threads at once while nothing writes: readers share nothing.
void BM_LookupConcurrent(benchmark::State& state) {
  static Registry reg;
  if (state.thread_index() == 0) {
    reg.Clear();
    Fill(&reg, 100000);
  }
  std::mt19937_64 rng(state.thread_index());
  Region out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(reg.Lookup(kBase + (rng() % 100000) * kStride + 8, &out));
  }
}
BENCHMARK(BM_LookupConcurrent)->Threads(16)->UseRealTime();

void BM_InsertRemove(benchmark::State& state) {
  static Registry reg;
  reg.Clear();
  Fill(&reg, 100000);
  uintptr_t probe = kBase + 500 * kStride + (256 << 10);
  Region r;
  r.start = probe;
  r.bytes = 64 << 10;
  for (auto _ : state) {
    reg.Insert(r);
    reg.Remove(probe, nullptr);
  }
}
BENCHMARK(BM_InsertRemove);

}  // namespace
}  // namespace pinshim

BENCHMARK_MAIN();
