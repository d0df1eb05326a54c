// Many small copies, for the capped-trace measurement (trace_cap.sh).
//
// Usage: small_copy_loop COPIES pageable|pinned-async
//   pageable      cudaMemcpy of 4 KiB from a malloc'd buffer, synchronous
//   pinned-async  cudaMemcpyAsync of 4 KiB from a cudaHostAlloc'd buffer,
//                 the stream synchronized every 1024 copies
// Prints: "small_copy_loop copies=N kind=K seconds=S"
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s COPIES pageable|pinned-async\n", argv[0]);
    return 2;
  }
  const long copies = atol(argv[1]);
  const bool pinned = strcmp(argv[2], "pinned-async") == 0;
  const size_t bytes = 4096;
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  char* host;
  if (pinned) {
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocDefault));
  } else {
    host = static_cast<char*>(malloc(bytes));
  }
  memset(host, 7, bytes);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < copies; ++i) {
    if (pinned) {
      CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream));
      if ((i & 1023) == 1023) CHECK(cudaStreamSynchronize(stream));
    } else {
      CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    }
  }
  CHECK(cudaStreamSynchronize(stream));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("small_copy_loop copies=%ld kind=%s seconds=%.6f\n", copies, argv[2], s);
  CHECK(cudaStreamDestroy(stream));
  if (pinned) {
    CHECK(cudaFreeHost(host));
  } else {
    free(host);
  }
  CHECK(cudaFree(dev));
  return 0;
}
