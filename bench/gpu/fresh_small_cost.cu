// The cost per copy call of small fresh buffers (small_copy_cost.sh): the
// pattern matrix's fresh cells as a CUDA runtime loop. Each step: malloc,
// write, cudaMemcpy to the device, free; malloc, cudaMemcpyAsync back on the
// legacy stream, cudaStreamSynchronize, free. The time inside the copy calls
// (and the synchronize, for downloads) is summed per direction.
//
// Usage: fresh_small_cost STEPS BYTES...
// Prints one line per size: "fresh_small bytes=B steps=S h2d_ns=X d2h_ns=Y step_ns=Z"
// (nanoseconds per call or step, averaged over the steps after a warm-up).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ns(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}

void Run(long steps, size_t bytes) {
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  double h2d = 0, d2h = 0;
  const long warm = steps / 10;
  Clock::time_point begin = Clock::now();
  for (long s = 0; s < warm + steps; ++s) {
    if (s == warm) {
      h2d = d2h = 0;
      begin = Clock::now();
    }
    char* p = static_cast<char*>(malloc(bytes));
    memset(p, static_cast<int>(s), bytes);
    const Clock::time_point t0 = Clock::now();
    CHECK(cudaMemcpy(dev, p, bytes, cudaMemcpyHostToDevice));
    const Clock::time_point t1 = Clock::now();
    free(p);
    char* q = static_cast<char*>(malloc(bytes));
    const Clock::time_point t2 = Clock::now();
    CHECK(cudaMemcpyAsync(q, dev, bytes, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
    const Clock::time_point t3 = Clock::now();
    free(q);
    h2d += Ns(t0, t1);
    d2h += Ns(t2, t3);
  }
  const double total = Ns(begin, Clock::now());
  printf("fresh_small bytes=%zu steps=%ld h2d_ns=%.1f d2h_ns=%.1f step_ns=%.1f\n", bytes, steps,
         h2d / steps, d2h / steps, total / steps);
  CHECK(cudaFree(dev));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s STEPS BYTES...\n", argv[0]);
    return 2;
  }
  const long steps = atol(argv[1]);
  CHECK(cudaFree(nullptr));  // the context, before any timing
  for (int i = 2; i < argc; ++i) Run(steps, strtoull(argv[i], nullptr, 0));
  return 0;
}
