// Misuses pinshim's report must find on a real GPU, in a program built by
// nvcc with its default (static) CUDA runtime. Each misuse line carries a
// MISUSE mark naming its rule; check_findings.py compares the report with them.
#include <cuda_runtime.h>
#include <malloc.h>

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

// Keeps the stream busy, so that copies queued behind it are still queued
// when the CPU touches their memory (the report does not depend on it: it
// reads the synchronization, not the timing).
__global__ void Spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

int main() {
  // A fixed mmap threshold: glibc's moves up to the size of an mmap'ed
  // block once one is freed, and the registered block freed under a queued
  // download below must be unmapped, not returned to the heap, where the
  // download would overwrite the allocator's own records (it did, on the
  // H200: "free(): corrupted unsorted chunks").
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  const size_t kBytes = 8 << 20;
  void* dev;
  CHECK(cudaMalloc(&dev, kBytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  char* batch = static_cast<char*>(malloc(kBytes));
  for (int step = 0; step < 30; ++step) {
    memset(batch, step, kBytes);
    // One line: the marks must sit on the line the call's debug information names.
    // clang-format off
    CHECK(cudaMemcpyAsync(dev, batch, kBytes, cudaMemcpyHostToDevice, stream));  // MISUSE(async-pageable) MISUSE(pageable-hot)
    // clang-format on
    void* staging;
    CHECK(cudaHostAlloc(&staging, 1 << 20, cudaHostAllocDefault));  // MISUSE(pinned-churn)
    CHECK(cudaMemcpy(staging, dev, 1 << 20, cudaMemcpyDeviceToHost));
    CHECK(cudaFreeHost(staging));
  }
  void* wc;
  CHECK(cudaHostAlloc(&wc, 1 << 20, cudaHostAllocWriteCombined));
  CHECK(cudaMemcpy(wc, dev, 1 << 20, cudaMemcpyDeviceToHost));
  char* sink = static_cast<char*>(malloc(1 << 20));
  memcpy(sink, wc, 1 << 20);  // MISUSE(wc-read)
  printf("misuse_program: %d\n", sink[12]);
  CHECK(cudaFreeHost(wc));

  // The CPU reads a download's destination before waiting for it; the same
  // after a wait is right.
  char* result;
  CHECK(cudaMallocHost(&result, 1 << 20));
  Spin<<<1, 1, 0, stream>>>(50000000);
  CHECK(cudaMemcpyAsync(result, dev, 1 << 20, cudaMemcpyDeviceToHost, stream));
  memcpy(sink, result, 1 << 20);  // MISUSE(copy-race)
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemcpyAsync(result, dev, 1 << 20, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  memcpy(sink, result, 1 << 20);
  CHECK(cudaFreeHost(result));

  // Registered memory given back to the allocator, still registered, under a
  // queued download (1 MiB: glibc unmaps it; the driver keeps its pages).
  char* registered = static_cast<char*>(malloc(1 << 20));
  CHECK(cudaHostRegister(registered, 1 << 20, cudaHostRegisterDefault));
  Spin<<<1, 1, 0, stream>>>(50000000);
  CHECK(cudaMemcpyAsync(registered, dev, 1 << 20, cudaMemcpyDeviceToHost, stream));
  free(registered);                      // MISUSE(free-in-flight)
  CHECK(cudaStreamSynchronize(stream));  // the registration is left behind, as the misuse leaves it
  free(sink);
  free(batch);
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dev));
  return 0;
}
