// Pinned allocation churn: cudaHostAlloc + cudaFreeHost pairs of one size,
// timed with a host clock after WARMUP untimed pairs. Each block is written by the CPU
// (one byte) before it is freed. With "copy", an async copy from each block
// is queued before its free, so reuse must also respect stream order.
// Prints the time per pair.
// Usage: alloc_loop BYTES PAIRS [pair|copy] [WARMUP (default 8)]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BYTES PAIRS [pair|copy] [WARMUP]\n", argv[0]);
    return 2;
  }
  const size_t bytes = strtoull(argv[1], nullptr, 0);
  const int pairs = atoi(argv[2]);
  const bool copy = argc > 3 && strcmp(argv[3], "copy") == 0;
  const int warmup = argc > 4 ? atoi(argv[4]) : 8;
  void* dev;
  CHECK(cudaMalloc(&dev, 4096));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  auto pair = [&](int i) {
    void* p;
    CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    static_cast<char*>(p)[0] = static_cast<char>(i);
    if (copy)
      CHECK(cudaMemcpyAsync(dev, p, 4096 < bytes ? 4096 : bytes, cudaMemcpyHostToDevice, s));
    CHECK(cudaFreeHost(p));
  };
  // Warm-up: context set-up, and (with the library) the pool growing to the
  // size its batches of frees need (a few slabs, once).
  for (int i = 0; i < warmup; ++i) pair(i);
  CHECK(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) pair(i);
  CHECK(cudaStreamSynchronize(s));
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  printf("alloc_loop bytes=%zu pairs=%d warmup=%d copy=%d us_per_pair=%.3f\n", bytes, pairs, warmup,
         copy ? 1 : 0, us / pairs);
  return 0;
}
