// A loop of cudaMemcpy calls from one reused host buffer, timed with a host
// clock around the whole loop: the program pinshim's overhead and optimize
// mode are measured on, unmodified, with and without the library.
//
// Usage: copy_loop BYTES ITERATIONS [pageable|pinned|hand-pinned] [h2d|d2h]
//   pageable     malloc'd buffer (what optimize mode should speed up)
//   hand-pinned  the same buffer pinned by hand with cudaHostRegister (the
//                upper bound for optimize mode)
//   pinned       cudaHostAlloc'd buffer
// Prints: "copy_loop bytes=N iters=N kind=K dir=D seconds=S GBps=G checksum=C"
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s BYTES ITERATIONS [pageable|pinned|hand-pinned] [h2d|d2h]\n",
            argv[0]);
    return 2;
  }
  const size_t bytes = strtoull(argv[1], nullptr, 0);
  const int iters = atoi(argv[2]);
  const char* kind = argc > 3 ? argv[3] : "pageable";
  const bool h2d = argc <= 4 || strcmp(argv[4], "d2h") != 0;
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  char* host;
  if (strcmp(kind, "pinned") == 0) {
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocDefault));
  } else {
    host = static_cast<char*>(malloc(bytes));
    if (strcmp(kind, "hand-pinned") == 0) CHECK(cudaHostRegister(host, bytes, 0));
  }
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<char>(i * 31 + i / 4096);
  // Warm-up: the first copies pay for context set-up (and, under optimize
  // mode, for the decision to pin); the timed loop starts after them.
  for (int i = 0; i < 3; ++i) {
    CHECK(h2d ? cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice)
              : cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    CHECK(h2d ? cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice)
              : cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsigned long sum = 0;
  // A prime stride, so the sample is not a multiple of the fill pattern.
  for (size_t i = 0; i < bytes; i += 4093) sum = sum * 31 + static_cast<unsigned char>(host[i]);
  printf("copy_loop bytes=%zu iters=%d kind=%s dir=%s seconds=%.6f GBps=%.3f checksum=%lu\n", bytes,
         iters, kind, h2d ? "h2d" : "d2h", s, double(bytes) * iters / s / 1e9, sum);
  if (strcmp(kind, "hand-pinned") == 0) CHECK(cudaHostUnregister(host));
  if (strcmp(kind, "pinned") == 0)
    CHECK(cudaFreeHost(host));
  else
    free(host);
  CHECK(cudaFree(dev));
  return 0;
}
