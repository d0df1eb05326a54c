// Copy bandwidth by size and host memory kind on the GPU this runs on:
// pageable (malloc) against pinned (cudaHostAlloc), both directions, median
// of repeated timed copies (CUDA events around each copy, after warm-up).
// Used to choose pinshim's tracking threshold: below the size where pinned
// stops beating pageable, tracking a buffer buys nothing.
//
// Usage: copy_bandwidth [max_bytes]   prints one table row per size
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"

static double MedianGBps(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  int reps = n <= (1 << 20) ? 200 : (n <= (16 << 20) ? 40 : 10);
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpy(dst, src, n, kind));
  std::vector<double> gbps;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(a));
    CHECK(cudaMemcpy(dst, src, n, kind));
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    gbps.push_back(n / (ms * 1e-3) / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return gbps[gbps.size() / 2];
}

int main(int argc, char** argv) {
  size_t max_bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (256u << 20);
  void* dev;
  CHECK(cudaMalloc(&dev, max_bytes));
  char* pageable = static_cast<char*>(malloc(max_bytes));
  memset(pageable, 1, max_bytes);
  void* pinned;
  CHECK(cudaHostAlloc(&pinned, max_bytes, cudaHostAllocDefault));
  memset(pinned, 1, max_bytes);
  printf("%-10s %10s %10s %10s %10s\n", "bytes", "H2D pag", "H2D pin", "D2H pag", "D2H pin");
  for (size_t n = 4096; n <= max_bytes; n *= 2) {
    double hp = MedianGBps(dev, pageable, n, cudaMemcpyHostToDevice);
    double hn = MedianGBps(dev, pinned, n, cudaMemcpyHostToDevice);
    double dp = MedianGBps(pageable, dev, n, cudaMemcpyDeviceToHost);
    double dn = MedianGBps(pinned, dev, n, cudaMemcpyDeviceToHost);
    printf("%-10zu %10.2f %10.2f %10.2f %10.2f\n", n, hp, hn, dp, dn);
  }
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(dev));
  free(pageable);
  return 0;
}
