// Pinned allocation churn: cudaHostAlloc + cudaFreeHost pairs of one size,
// timed with a host clock after WARMUP untimed pairs. Each block is written by the CPU
// (one byte) before it is freed. With "copy", an async copy from each block
// is queued before its free, so reuse must also respect stream order. With
// "copyonly", one block is allocated before the loop and each step is the
// copy alone: the pace the stream keeps for such copies ("copyevent": each
// copy followed by an event record on its stream, as optimize mode's copy
// fences do; "copylegacy": on the legacy stream, as the pool's free-time
// fences do, which the blocking stream's next copy waits for;
// "copylegacywait": that, then cudaEventQuery until the event completed, so
// the copy's time in "detail" is how long such a fence takes to complete).
// Prints the time per pair. With "detail", each timed call is also timed on
// its own: percentiles of the allocation, the copy call and the free.
// Usage: alloc_loop BYTES PAIRS [pair|copy|copyonly|copyevent|copylegacy|copylegacywait]
//        [WARMUP (default 8)] [detail]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BYTES PAIRS [pair|copy] [WARMUP]\n", argv[0]);
    return 2;
  }
  const size_t bytes = strtoull(argv[1], nullptr, 0);
  const int pairs = atoi(argv[2]);
  const bool legacy_wait = argc > 3 && strcmp(argv[3], "copylegacywait") == 0;
  const bool copy_legacy = legacy_wait || (argc > 3 && strcmp(argv[3], "copylegacy") == 0);
  const bool copy_event = copy_legacy || (argc > 3 && strcmp(argv[3], "copyevent") == 0);
  const bool copy_only = copy_event || (argc > 3 && strcmp(argv[3], "copyonly") == 0);
  const bool copy = copy_only || (argc > 3 && strcmp(argv[3], "copy") == 0);
  const int warmup = argc > 4 ? atoi(argv[4]) : 8;
  const bool detail = argc > 5 && strcmp(argv[5], "detail") == 0;
  using Clock = std::chrono::steady_clock;
  std::vector<double> t_alloc, t_copy, t_free;  // us, with "detail"
  bool timing = false;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  };
  void* dev;
  CHECK(cudaMalloc(&dev, 4096));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  void* kept = nullptr;
  if (copy_only) CHECK(cudaHostAlloc(&kept, bytes, cudaHostAllocDefault));
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto pair = [&](int i) {
    void* p = kept;
    const bool timed = detail && timing;
    Clock::time_point t = timed ? Clock::now() : Clock::time_point();
    if (!copy_only) CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    if (timed && !copy_only) t_alloc.push_back(since(t));
    static_cast<char*>(p)[0] = static_cast<char>(i);
    if (timed) t = Clock::now();
    if (copy)
      CHECK(cudaMemcpyAsync(dev, p, 4096 < bytes ? 4096 : bytes, cudaMemcpyHostToDevice, s));
    if (copy_event) CHECK(cudaEventRecord(ev, copy_legacy ? cudaStreamLegacy : s));
    if (legacy_wait) {
      cudaError_t q;
      while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) {
      }
      CHECK(q);
    }
    if (timed) t_copy.push_back(since(t));
    if (timed) t = Clock::now();
    if (!copy_only) CHECK(cudaFreeHost(p));
    if (timed && !copy_only) t_free.push_back(since(t));
  };
  // Warm-up: context set-up, and (with the library) the pool growing to the
  // size its batches of frees need (a few slabs, once).
  for (int i = 0; i < warmup; ++i) pair(i);
  CHECK(cudaStreamSynchronize(s));
  if (detail) {
    t_alloc.reserve(pairs);
    t_copy.reserve(pairs);
    t_free.reserve(pairs);
  }
  timing = true;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) pair(i);
  CHECK(cudaStreamSynchronize(s));
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  printf("alloc_loop bytes=%zu pairs=%d warmup=%d copy=%d us_per_pair=%.3f\n", bytes, pairs, warmup,
         copy_only ? 2
         : copy    ? 1
                   : 0,
         us / pairs);
  auto show = [](const char* what, std::vector<double> v) {
    if (v.empty()) return;
    double sum = 0, over10 = 0;
    for (double x : v) {
      sum += x;
      if (x > 10) over10 += x;
    }
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[static_cast<size_t>(q * (v.size() - 1))]; };
    printf(
        "  %-5s us: mean %.3f p50 %.3f p90 %.3f p99 %.3f max %.1f; calls over 10 us: %zu, %.1f%% "
        "of the time\n",
        what, sum / v.size(), at(0.5), at(0.9), at(0.99), v.back(),
        static_cast<size_t>(v.end() - std::upper_bound(v.begin(), v.end(), 10.0)),
        sum > 0 ? 100 * over10 / sum : 0.0);
  };
  show("alloc", t_alloc);
  show("copy", t_copy);
  show("free", t_free);
  return 0;
}
