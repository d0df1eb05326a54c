// Copies of fresh pageable buffers, the case optimize mode stages: each copy
// gets a buffer of its own (malloc'd, just written by the CPU, copied once,
// freed), so nothing is pinned in place. Run with and without the library,
// side by side, by bench/gpu/stage_bench.sh.
//
//   stage_bench fresh h2d|d2h REPS SIZE...   per size: median GB/s of the copy call
//   stage_bench rewrite h2d|d2h REPS SIZE... the same with one buffer, rewritten
//                                            before each copy (its pages stay
//                                            mapped; run with PINSHIM_PIN_IN_PLACE=0
//                                            so that optimize mode stages it too)
//   stage_bench busy SECONDS COPY_BYTES      every core busy with arithmetic while
//                                            the main thread copies fresh buffers:
//                                            work done per second, copies made
//   stage_bench burst sync|async REPS COUNT SIZE
//                                            COUNT fresh buffers of SIZE bytes, all
//                                            written first, uploaded back to back
//                                            (cudaMemcpy, or cudaMemcpyAsync on the
//                                            legacy stream and one synchronization),
//                                            as a checkpoint's tensors are: median
//                                            GB/s of the whole burst
// Prints "fresh dir=D bytes=N gbps=G min=G max=G faults=F" lines,
// "busy work_per_s=W copies=C", or "burst mode=M count=C bytes=N gbps=G".
#include <cuda_runtime.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

// Minor page faults of the whole process so far (every thread's).
long MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One allocation site for every buffer, as a data pipeline has.
__attribute__((noinline)) char* NewBuffer(size_t n) { return static_cast<char*>(malloc(n)); }

int Fresh(bool h2d, bool reuse, int reps, int argc, char** argv) {
  size_t max = 0;
  for (int i = 0; i < argc; ++i) max = std::max<size_t>(max, strtoull(argv[i], nullptr, 0));
  char* dev;
  CHECK(cudaMalloc(&dev, max));
  CHECK(cudaMemset(dev, 3, max));
  unsigned long sum = 0;
  char* kept = reuse ? NewBuffer(max) : nullptr;
  for (int i = 0; i < argc; ++i) {
    const size_t n = strtoull(argv[i], nullptr, 0);
    std::vector<double> gbps;
    long faults = 0;  // during the timed copies
    // Short copies vary more: more of them (up to 64 MiB, at most 200).
    int count = reps;
    while (count < 200 && uint64_t(count) * n < (uint64_t{64} << 20)) count *= 2;
    for (int r = 0; r < count + 1; ++r) {
      char* b = reuse ? kept : NewBuffer(n);
      memset(b, r + 1, n);  // just written
      const long f0 = MinorFaults();
      const double t0 = Now();
      CHECK(h2d ? cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice)
                : cudaMemcpy(b, dev, n, cudaMemcpyDeviceToHost));
      const double t = Now() - t0;
      if (r > 0) faults += MinorFaults() - f0;
      sum += static_cast<unsigned char>(b[n / 2]);
      if (!reuse) free(b);
      if (r > 0) gbps.push_back(n / t / 1e9);  // the first is a warm-up
    }
    std::sort(gbps.begin(), gbps.end());
    // gbps: the median; min, max and the page faults taken during the timed
    // copies (by any thread) say whether a slow median is a slow phase.
    printf("%s dir=%s bytes=%zu gbps=%.3f min=%.3f max=%.3f faults=%ld\n",
           reuse ? "rewrite" : "fresh", h2d ? "H2D" : "D2H", n, gbps[gbps.size() / 2], gbps.front(),
           gbps.back(), faults);
    fflush(stdout);
  }
  // Results must agree with and without the library.
  printf("checksum %lu\n", sum);
  free(kept);
  CHECK(cudaFree(dev));
  return 0;
}

int Busy(double seconds, size_t bytes) {
  const unsigned cores = std::thread::hardware_concurrency();
  std::atomic<bool> stop{false};
  std::vector<unsigned long long> work(cores, 0);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < cores; ++t) {
    threads.emplace_back([&, t] {
      unsigned long long x = t + 1, n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 4096; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
        n += 4096;
      }
      work[t] = n + (x & 1);
    });
  }
  char* dev;
  CHECK(cudaMalloc(&dev, bytes));
  int copies = 0;
  const double t0 = Now();
  while (Now() - t0 < seconds) {
    char* b = NewBuffer(bytes);
    memset(b, copies, bytes);
    CHECK(cudaMemcpy(dev, b, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, dev, bytes, cudaMemcpyDeviceToHost));
    free(b);
    ++copies;
    usleep(20000);  // a pipeline's pace: a batch every 20 ms
  }
  const double elapsed = Now() - t0;
  stop = true;
  for (auto& th : threads) th.join();
  unsigned long long total = 0;
  for (auto w : work) total += w;
  printf("busy work_per_s=%.4e copies=%d cores=%u\n", total / elapsed, copies, cores);
  CHECK(cudaFree(dev));
  return 0;
}

int Burst(bool async, int reps, int count, size_t n) {
  char* dev;
  CHECK(cudaMalloc(&dev, n * count));
  unsigned long sum = 0;
  std::vector<double> gbps;
  for (int r = 0; r < reps + 1; ++r) {
    std::vector<char*> bufs;
    for (int i = 0; i < count; ++i) {
      bufs.push_back(NewBuffer(n));
      memset(bufs.back(), r + i + 1, n);
    }
    CHECK(cudaDeviceSynchronize());
    const double t0 = Now();
    for (int i = 0; i < count; ++i) {
      char* d = dev + n * i;
      CHECK(async ? cudaMemcpyAsync(d, bufs[i], n, cudaMemcpyHostToDevice, 0)
                  : cudaMemcpy(d, bufs[i], n, cudaMemcpyHostToDevice));
    }
    CHECK(cudaDeviceSynchronize());
    const double t = Now() - t0;
    if (r > 0) gbps.push_back(double(n) * count / t / 1e9);  // the first is a warm-up
    for (char* b : bufs) free(b);
    unsigned char probe;
    CHECK(cudaMemcpy(&probe, dev + n * (count - 1) + n / 2, 1, cudaMemcpyDeviceToHost));
    sum += probe;
  }
  std::sort(gbps.begin(), gbps.end());
  printf("burst mode=%s count=%d bytes=%zu gbps=%.3f min=%.3f max=%.3f\n", async ? "async" : "sync",
         count, n, gbps[gbps.size() / 2], gbps.front(), gbps.back());
  printf("checksum %lu\n", sum);
  CHECK(cudaFree(dev));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 5 && (strcmp(argv[1], "fresh") == 0 || strcmp(argv[1], "rewrite") == 0)) {
    return Fresh(strcmp(argv[2], "h2d") == 0, strcmp(argv[1], "rewrite") == 0, atoi(argv[3]),
                 argc - 4, argv + 4);
  }
  if (argc >= 4 && strcmp(argv[1], "busy") == 0) {
    return Busy(atof(argv[2]), strtoull(argv[3], nullptr, 0));
  }
  if (argc >= 6 && strcmp(argv[1], "burst") == 0 && atoi(argv[3]) > 0 && atoi(argv[4]) > 0) {
    return Burst(strcmp(argv[2], "async") == 0, atoi(argv[3]), atoi(argv[4]),
                 strtoull(argv[5], nullptr, 0));
  }
  fprintf(stderr,
          "usage: %s fresh|rewrite h2d|d2h REPS SIZE... | busy SECONDS BYTES | "
          "burst sync|async REPS COUNT SIZE\n",
          argv[0]);
  return 2;
}
