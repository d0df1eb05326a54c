// malloc + free pairs: glibc against the host arena (pinned memory with
// malloc semantics). The driver is touched only when the arena registers a
// new extent, which the warm-up does; the loop measures the allocator.
//
//   LD_LIBRARY_PATH=<bin>/tests/fakecuda <bin>/bench/optimize/arena_bench
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/optimize/driver_loader.h"
#include "shim/optimize/fences.h"
#include "shim/optimize/host_arena.h"
#include "shim/optimize/pin_account.h"

namespace pinshim {
namespace {

optimize::HostArena& Arena() {
  static bench::LoadedDriver d;
  static optimize::FenceManager fences;
  static optimize::PinAccount account;
  static optimize::HostArena arena;
  static bool ok = [] {
    if (!bench::LoadDriver(&d) || !fences.Init(&d.ops)) exit(1);
    optimize::ArenaOptions o;
    o.idle_trim_ns = 0;
    o.reserve_bytes = uint64_t{16} << 30;
    if (!arena.Init(&d.ops, &fences, &account, o)) exit(1);
    arena.SetHomeContext(d.ctx);
    fprintf(stderr, "driver: %s\n", d.simulated ? "simulated (tests/fakecuda)" : "real");
    return true;
  }();
  (void)ok;
  return arena;
}

void BM_GlibcMallocFree(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = malloc(n);
    benchmark::DoNotOptimize(p);
    free(p);
  }
}

void BM_ArenaMallocFree(benchmark::State& state) {
  optimize::HostArena& arena = Arena();
  const size_t n = static_cast<size_t>(state.range(0));
  arena.Free(arena.Malloc(n));  // warm: the span or extent is registered
  for (auto _ : state) {
    void* p = arena.Malloc(n);
    benchmark::DoNotOptimize(p);
    arena.Free(p);
  }
}

// 64 live blocks per thread, freed in a different order than allocated.
template <bool kArena>
void Churn(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  optimize::HostArena* arena = kArena ? &Arena() : nullptr;
  std::vector<void*> live(64, nullptr);
  uint32_t x = 12345 + static_cast<uint32_t>(state.thread_index());
  for (auto _ : state) {
    x = x * 1664525 + 1013904223;
    void*& slot = live[(x >> 8) % live.size()];
    if (slot != nullptr) {
      if (kArena) {
        arena->Free(slot);
      } else {
        free(slot);
      }
    }
    slot = kArena ? arena->Malloc(n) : malloc(n);
    benchmark::DoNotOptimize(slot);
  }
  for (void* p : live) {
    if (kArena) {
      arena->Free(p);
    } else {
      free(p);
    }
  }
}
void BM_GlibcChurn(benchmark::State& state) { Churn<false>(state); }
void BM_ArenaChurn(benchmark::State& state) { Churn<true>(state); }

#define SIZES Arg(64)->Arg(4 << 10)->Arg(64 << 10)->Arg(1 << 20)
BENCHMARK(BM_GlibcMallocFree)->SIZES;
BENCHMARK(BM_ArenaMallocFree)->SIZES;
BENCHMARK(BM_GlibcChurn)->SIZES->Threads(1)->Threads(4);
BENCHMARK(BM_ArenaChurn)->SIZES->Threads(1)->Threads(4);
#undef SIZES

}  // namespace
}  // namespace pinshim

BENCHMARK_MAIN();
