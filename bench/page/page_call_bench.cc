// Cost of the page-changing calls pinshim interposes (madvise, mmap with and
// without MAP_FIXED, munmap) when they touch no memory pinshim pinned: the
// case of nearly every such call. Meant to run in optimize mode, with the
// engine started and a registration in the cache elsewhere (main() makes
// one), so every check the hooks make is made. Target: at most 10 ns added
// to madvise and mmap. bench/run_cpu_benches.sh and bench/gpu/page_bench.sh
// run it with and without the library; each call is also timed straight
// into libc in the same process (the "/libc" rows), which measures the
// hooks' cost without the drift between processes.
//
// The madvise benchmarks give the kernel an unaligned address, which it
// refuses at once (EINVAL): what is timed is the hook, not page reclaim.
// The mapping calls are timed twice: for real (the kernel's work on a page
// varies by a microsecond from run to run, which hides nanoseconds), and
// refused by the kernel for an unaligned address, which still runs every
// check the hooks make before the call.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

char* g_page = nullptr;

// The calls timed, twice over: as the program makes them (through the
// library's hooks when it is preloaded), and straight into libc, in the same
// process ("/libc" rows). The two rows of one run differ by the hook alone,
// with no process-to-process drift between them: bench/side_by_side.py
// reports that difference next to the with/without one.
struct Calls {
  int (*madvise)(void*, size_t, int);
  void* (*mmap)(void*, size_t, int, int, int, off_t);
  int (*munmap)(void*, size_t);
};
Calls g_program = {&madvise, &mmap, &munmap};
Calls g_libc = {};

bool LoadLibcCalls() {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) return false;
  g_libc.madvise = reinterpret_cast<int (*)(void*, size_t, int)>(dlsym(libc, "madvise"));
  g_libc.mmap =
      reinterpret_cast<void* (*)(void*, size_t, int, int, int, off_t)>(dlsym(libc, "mmap"));
  g_libc.munmap = reinterpret_cast<int (*)(void*, size_t)>(dlsym(libc, "munmap"));
  return g_libc.madvise != nullptr && g_libc.mmap != nullptr && g_libc.munmap != nullptr;
}

void MadviseDontneedUnpinned(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    int r = c->madvise(g_page + 1, 4096, MADV_DONTNEED);
    benchmark::DoNotOptimize(r);
  }
}

void MadviseHint(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    int r = c->madvise(g_page + 1, 4096, MADV_WILLNEED);
    benchmark::DoNotOptimize(r);
  }
}

void MmapMunmap(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    void* p = c->mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    benchmark::DoNotOptimize(p);
    c->munmap(p, 4096);
  }
}

// mmap alone: the mapping is taken back straight through libc (the
// program's munmap would count that hook too).
void MmapAlone(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    void* p = c->mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    benchmark::DoNotOptimize(p);
    g_libc.munmap(p, 4096);
  }
}

void MmapFixedUnpinned(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    void* p = c->mmap(g_page, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                      -1, 0);
    benchmark::DoNotOptimize(p);
  }
}

void MmapFixedRefused(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    void* p = c->mmap(g_page + 1, 4096, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    benchmark::DoNotOptimize(p);
  }
}

void MunmapRefused(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    int r = c->munmap(g_page + 1, 4096);
    benchmark::DoNotOptimize(r);
  }
}

// The same next to a tracked allocation (in its 2 MiB of address space):
// the allocation registry's summary counts a range there, so the hooks
// search the registry itself (bench/RESULTS.md has both figures).
char* g_near = nullptr;

void MunmapRefusedNearTracked(benchmark::State& state, const Calls* c) {
  for (auto _ : state) {
    int r = c->munmap(g_near + 1, 4096);
    benchmark::DoNotOptimize(r);
  }
}

// A 2 MiB-aligned reservation whose first 1 MiB is a mapping the library
// tracks (private, read-write, above the tracking threshold); g_near is a
// reserved page after it.
void MakeNearPage() {
  const size_t granule = size_t{2} << 20;
  char* span =
      static_cast<char*>(mmap(nullptr, 2 * granule, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(span) + granule - 1) &
                                       ~(uintptr_t{granule} - 1));
  mmap(base, size_t{1} << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
       0);
  g_near = base + (size_t{1} << 20) + 4096;
}

void RegisterBoth(const char* name, void (*fn)(benchmark::State&, const Calls*)) {
  benchmark::RegisterBenchmark(name, fn, &g_program);
  benchmark::RegisterBenchmark((std::string(name) + "/libc").c_str(), fn, &g_libc);
}

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
  if (!LoadLibcCalls()) {
    fprintf(stderr, "page_call_bench: libc's own madvise/mmap/munmap not found: %s\n", dlerror());
    return 1;
  }
  MakeRegistration();
  MakeNearPage();
  RegisterBoth("BM_MadviseDontneedUnpinned", MadviseDontneedUnpinned);
  RegisterBoth("BM_MadviseHint", MadviseHint);
  RegisterBoth("BM_MmapMunmap", MmapMunmap);
  RegisterBoth("BM_MmapAlone", MmapAlone);
  RegisterBoth("BM_MmapFixedUnpinned", MmapFixedUnpinned);
  RegisterBoth("BM_MmapFixedRefused", MmapFixedRefused);
  RegisterBoth("BM_MunmapRefused", MunmapRefused);
  RegisterBoth("BM_MunmapRefusedNearTracked", MunmapRefusedNearTracked);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
