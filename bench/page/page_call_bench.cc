// Cost of the page-changing calls pinshim interposes (madvise, mmap with and
// without MAP_FIXED) when they touch no memory pinshim pinned: the case of
// nearly every such call. Meant to run in optimize mode, with the engine
// started and a registration in the cache elsewhere (main() makes one), so
// every check the hooks make is made. Target: at most 10 ns added
// (bench/run_cpu_benches.sh runs it with and without the library).
//
// The madvise benchmarks give the kernel an unaligned address, which it
// refuses at once (EINVAL): what is timed is the hook, not page reclaim.
// The mapping calls are timed twice: for real (the kernel's work on a page
// varies by a microsecond from run to run, which hides nanoseconds), and
// refused by the kernel for an unaligned address, which still runs every
// check the hooks make before the call.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

char* g_page = nullptr;

void BM_MadviseDontneedUnpinned(benchmark::State& state) {
  for (auto _ : state) {
    int r = madvise(g_page + 1, 4096, MADV_DONTNEED);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_MadviseDontneedUnpinned);

void BM_MadviseHint(benchmark::State& state) {
  for (auto _ : state) {
    int r = madvise(g_page + 1, 4096, MADV_WILLNEED);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_MadviseHint);

void BM_MmapMunmap(benchmark::State& state) {
  for (auto _ : state) {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    benchmark::DoNotOptimize(p);
    munmap(p, 4096);
  }
}
BENCHMARK(BM_MmapMunmap);

void BM_MmapFixedUnpinned(benchmark::State& state) {
  for (auto _ : state) {
    void* p =
        mmap(g_page, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_MmapFixedUnpinned);

void BM_MmapFixedRefused(benchmark::State& state) {
  for (auto _ : state) {
    void* p = mmap(g_page + 1, 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_MmapFixedRefused);

void BM_MunmapRefused(benchmark::State& state) {
  for (auto _ : state) {
    int r = munmap(g_page + 1, 4096);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_MunmapRefused);

// A buffer the program registers itself (so that with and without the
// library the process holds pinned pages: the kernel's own cost of mapping
// calls grows with them), and a hot buffer the registration cache pins in
// optimize mode, both far from the benchmarks' own page.
void MakeRegistration() {
  if (cuInit(0) != CUDA_SUCCESS) return;
  CUcontext ctx;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    return;
  }
  const size_t n = size_t{16} << 20;
  CUdeviceptr dev;
  if (cuMemAlloc(&dev, n) != CUDA_SUCCESS) return;
  char* own = static_cast<char*>(malloc(n));
  memset(own, 1, n);
  cuMemHostRegister(own, n, 0);
  char* host = static_cast<char*>(malloc(n));
  memset(host, 1, n);
  for (int i = 0; i < 8; ++i) cuMemcpyHtoD(dev, host, n);
}

}  // namespace

int main(int argc, char** argv) {
  // The timed page sits between two PROT_NONE pages, so the kernel's work
  // for a mapping call on it (no merge with either neighbour) is the same
  // whatever pinshim or the driver mapped elsewhere.
  char* span =
      static_cast<char*>(mmap(nullptr, 3 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  g_page = span + 4096;
  mprotect(g_page, 4096, PROT_READ | PROT_WRITE);
  MakeRegistration();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
