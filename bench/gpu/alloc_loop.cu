// Pinned allocation churn: cudaHostAlloc + cudaFreeHost pairs of one size,
// timed with a host clock, with an async copy from each block so reuse must
// respect stream order. Prints the time per pair.
// Usage: alloc_loop BYTES PAIRS
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

int main(int argc, char** argv) {
  const size_t bytes = strtoull(argv[1], nullptr, 0);
  const int pairs = atoi(argv[2]);
  void* dev;
  CHECK(cudaMalloc(&dev, 4096));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) {
    void* p;
    CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    static_cast<char*>(p)[0] = static_cast<char>(i);
    CHECK(cudaMemcpyAsync(dev, p, 4096 < bytes ? 4096 : bytes, cudaMemcpyHostToDevice, s));
    CHECK(cudaFreeHost(p));
  }
  CHECK(cudaStreamSynchronize(s));
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  printf("alloc_loop bytes=%zu pairs=%d us_per_pair=%.3f\n", bytes, pairs, us / pairs);
  return 0;
}
