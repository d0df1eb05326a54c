// Cost of small host allocations, the path every program takes most often:
// with pinshim preloaded, each call passes through its malloc-family hooks.
// The 64-byte malloc+free pair carries the target (at most 5 ns added,
// median); the other sizes and operator new show how the cost scales.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <new>

namespace {

void BM_MallocFree(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = std::malloc(bytes);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
// 256 KiB is above the tracking threshold (64 KiB by default): the pair is
// tracked, and its call site captured.
BENCHMARK(BM_MallocFree)->Arg(64)->Arg(4096)->Arg(256 << 10);

void BM_CallocFree(benchmark::State& state) {
  for (auto _ : state) {
    void* p = std::calloc(1, 64);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_CallocFree);

void BM_ReallocGrow(benchmark::State& state) {
  for (auto _ : state) {
    void* p = std::malloc(64);
    benchmark::DoNotOptimize(p);
    p = std::realloc(p, 128);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_ReallocGrow);

void BM_NewDelete(benchmark::State& state) {
  for (auto _ : state) {
    char* p = new char[64];
    benchmark::DoNotOptimize(p);
    delete[] p;
  }
}
BENCHMARK(BM_NewDelete);

// 64 blocks live at once, freed in allocation order: the pattern of a program
// building and dropping small objects, rather than one block reused.
void BM_MallocFreeBatch64(benchmark::State& state) {
  void* blocks[64];
  for (auto _ : state) {
    for (void*& b : blocks) {
      b = std::malloc(64);
      benchmark::DoNotOptimize(b);
    }
    for (void* b : blocks) std::free(b);
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_MallocFreeBatch64);

}  // namespace

BENCHMARK_MAIN();
