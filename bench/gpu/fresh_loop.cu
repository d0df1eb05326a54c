// A new host buffer per step, from one allocation site: allocated, filled,
// copied to the GPU `copies` times, freed. Optimize mode's arena serves such
// a site pinned from birth once its buffers proved hot; without it each new
// buffer would copy at pageable speed (or pay for its own registration).
// The whole step is timed with a host clock, after a warm-up.
// Usage: fresh_loop BYTES STEPS COPIES [pageable|pinned]
//   pageable  malloc/free per step (the unmodified program)
//   pinned    one cudaHostAlloc'd buffer reused by every step (the upper bound)
// Prints: "fresh_loop bytes=N steps=N copies=N kind=K ms_per_step=M checksum=C"
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"

static char* g_pinned = nullptr;

static char* NewBuffer(size_t n, bool pinned) {
  return pinned ? g_pinned : static_cast<char*>(malloc(n));
}

static void DropBuffer(char* p, bool pinned) {
  if (!pinned) free(p);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s BYTES STEPS COPIES [pageable|pinned]\n", argv[0]);
    return 2;
  }
  const size_t bytes = strtoull(argv[1], nullptr, 0);
  const int steps = atoi(argv[2]);
  const int copies = atoi(argv[3]);
  const bool pinned = argc > 4 && strcmp(argv[4], "pinned") == 0;
  char* dev;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&dev), bytes));
  if (pinned)
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&g_pinned), bytes, cudaHostAllocDefault));
  unsigned long sum = 0;
  auto step = [&](int s) {
    char* b = NewBuffer(bytes, pinned);
    memset(b, s & 0xff, bytes);
    for (int c = 0; c < copies; ++c) {
      b[c] = static_cast<char>(s + c);
      CHECK(cudaMemcpy(dev, b, bytes, cudaMemcpyHostToDevice));
    }
    DropBuffer(b, pinned);
    unsigned char first;
    CHECK(cudaMemcpy(&first, dev, 1, cudaMemcpyDeviceToHost));
    sum = sum * 31 + first;
  };
  for (int s = 0; s < 4; ++s) step(s);  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step(s);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  printf("fresh_loop bytes=%zu steps=%d copies=%d kind=%s ms_per_step=%.3f checksum=%lu\n", bytes,
         steps, copies, pinned ? "pinned" : "pageable", ms / steps, sum);
  if (pinned) CHECK(cudaFreeHost(g_pinned));
  CHECK(cudaFree(dev));
  return 0;
}
