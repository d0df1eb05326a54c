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
// check the hooks make before the call. --paired=N times each call through
// the hooks and straight into libc back to back instead (RunPaired);
// --paired=N --controls adds two controls that need no library (Framed*,
// Raw*).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <time.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "shim/hooks/raw_syscall.h"

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

// --paired's controls (--controls): libc's calls one frame deeper, from a
// function that does something after the call returns, as a hook does; and
// the system calls made directly, without libc's wrappers. Against libc
// straight they say what a hook's frame around the call costs by itself,
// whatever the hook computes.
template <typename T>
inline T After(T r) {
  asm volatile("" : "+r"(r));  // work after the call: no tail call
  return r;
}
__attribute__((noinline)) int FramedMadvise(void* a, size_t n, int advice) {
  return After(g_libc.madvise(a, n, advice));
}
__attribute__((noinline)) void* FramedMmap(void* a, size_t n, int prot, int flags, int fd,
                                           off_t off) {
  return After(g_libc.mmap(a, n, prot, flags, fd, off));
}
__attribute__((noinline)) int FramedMunmap(void* a, size_t n) { return After(g_libc.munmap(a, n)); }
Calls g_framed = {&FramedMadvise, &FramedMmap, &FramedMunmap};

// The hooks' own inline system calls (shim/hooks/raw_syscall.h).
Calls g_raw = {&pinshim::RawMadvise, &pinshim::RawMmap, &pinshim::RawMunmap};

void MadviseDontneedUnpinned(const Calls* c) {
  int r = c->madvise(g_page + 1, 4096, MADV_DONTNEED);
  benchmark::DoNotOptimize(r);
}

void MadviseHint(const Calls* c) {
  int r = c->madvise(g_page + 1, 4096, MADV_WILLNEED);
  benchmark::DoNotOptimize(r);
}

void MmapMunmap(const Calls* c) {
  void* p = c->mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  benchmark::DoNotOptimize(p);
  c->munmap(p, 4096);
}

// mmap alone: the mapping is taken back straight through libc (the
// program's munmap would count that hook too).
void MmapAlone(const Calls* c) {
  void* p = c->mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  benchmark::DoNotOptimize(p);
  g_libc.munmap(p, 4096);
}

void MmapFixedUnpinned(const Calls* c) {
  void* p =
      c->mmap(g_page, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  benchmark::DoNotOptimize(p);
}

void MmapFixedRefused(const Calls* c) {
  void* p = c->mmap(g_page + 1, 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  benchmark::DoNotOptimize(p);
}

void MunmapRefused(const Calls* c) {
  int r = c->munmap(g_page + 1, 4096);
  benchmark::DoNotOptimize(r);
}

// The same next to a tracked allocation (in its 2 MiB of address space):
// the allocation registry's summary counts a range there, so the hooks
// search the registry itself (bench/RESULTS.md has both figures).
char* g_near = nullptr;

void MunmapRefusedNearTracked(const Calls* c) {
  int r = c->munmap(g_near + 1, 4096);
  benchmark::DoNotOptimize(r);
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

using Once = void (*)(const Calls*);

void Loop(benchmark::State& state, Once once, const Calls* c) {
  for (auto _ : state) once(c);
}

void RegisterBoth(const char* name, Once once) {
  benchmark::RegisterBenchmark(name, Loop, once, &g_program);
  benchmark::RegisterBenchmark((std::string(name) + "/libc").c_str(), Loop, once, &g_libc);
}

// --paired=N: each call made through the program's symbol and straight into
// libc, back to back, N times, the order alternating, each timed with the
// time-stamp counter; the median of the N differences is the hook's cost
// with the kernel's run-to-run drift (hundreds of nanoseconds for a mapping
// call) paired away. Without the library both sides are libc's, and the
// median says what the method itself adds (near 0).
inline uint64_t Ticks() {
  _mm_lfence();
  const uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void Paired(const char* name, Once once, long pairs, double ns_per_tick,
            const Calls* timed = &g_program) {
  std::vector<double> diff, hooked, libc;
  diff.reserve(pairs);
  for (long i = -1000; i < pairs; ++i) {  // 1000 pairs of warm-up
    const bool hooked_first = (i & 1) == 0;
    const uint64_t t0 = Ticks();
    once(hooked_first ? timed : &g_libc);
    const uint64_t t1 = Ticks();
    once(hooked_first ? &g_libc : timed);
    const uint64_t t2 = Ticks();
    if (i < 0) continue;
    const double first = (t1 - t0) * ns_per_tick, second = (t2 - t1) * ns_per_tick;
    hooked.push_back(hooked_first ? first : second);
    libc.push_back(hooked_first ? second : first);
    diff.push_back(hooked.back() - libc.back());
  }
  auto at = [](std::vector<double>* v, double q) {
    std::sort(v->begin(), v->end());
    return (*v)[static_cast<size_t>(q * (v->size() - 1))];
  };
  printf("%-28s %10.1f %8.1f %8.1f %10.1f %10.1f\n", name, at(&diff, 0.5), at(&diff, 0.25),
         at(&diff, 0.75), at(&hooked, 0.5), at(&libc, 0.5));
}

int RunPaired(long pairs, const std::vector<std::pair<const char*, Once>>& cases, bool controls) {
  // The counter's rate, against the monotonic clock over 100 ms.
  const uint64_t n0 = NowNs(), t0 = Ticks();
  while (NowNs() - n0 < 100000000) {
  }
  const double ns_per_tick = static_cast<double>(NowNs() - n0) / static_cast<double>(Ticks() - t0);
  printf("paired: %ld pairs a call, order alternating; ns (time-stamp counter at %.3f GHz)\n",
         pairs, 1 / ns_per_tick);
  printf("%-28s %10s %8s %8s %10s %10s\n", "call", "added", "p25", "p75", "hooked", "libc");
  for (const auto& [name, once] : cases) Paired(name, once, pairs, ns_per_tick);
  if (!controls) return 0;
  printf("controls: libc one frame deeper (framed), system calls without libc (raw)\n");
  for (const auto& [name, once] : cases) {
    Paired((std::string("framed ") + (name + 3)).c_str(), once, pairs, ns_per_tick, &g_framed);
    Paired((std::string("raw ") + (name + 3)).c_str(), once, pairs, ns_per_tick, &g_raw);
  }
  return 0;
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
  const std::vector<std::pair<const char*, Once>> cases = {
      {"BM_MadviseDontneedUnpinned", MadviseDontneedUnpinned},
      {"BM_MadviseHint", MadviseHint},
      {"BM_MmapMunmap", MmapMunmap},
      {"BM_MmapAlone", MmapAlone},
      {"BM_MmapFixedUnpinned", MmapFixedUnpinned},
      {"BM_MmapFixedRefused", MmapFixedRefused},
      {"BM_MunmapRefused", MunmapRefused},
      {"BM_MunmapRefusedNearTracked", MunmapRefusedNearTracked}};
  const bool controls = argc == 3 && strcmp(argv[2], "--controls") == 0;
  if ((argc == 2 || controls) && strncmp(argv[1], "--paired=", 9) == 0) {
    char* end;
    const long pairs = strtol(argv[1] + 9, &end, 10);
    if (*end != '\0' || pairs < 1) {
      fprintf(stderr, "page_call_bench: --paired=N wants a count of pairs, got '%s'\n",
              argv[1] + 9);
      return 2;
    }
    return RunPaired(pairs, cases, controls);
  }
  for (const auto& [name, once] : cases) RegisterBoth(name, once);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
