// Misuse: plain loads from write-combined memory, which only the page guard
// (PINSHIM_WC_GUARD=1) can see.
#include <time.h>

#include <cstdint>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

static uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

__attribute__((noinline)) static uint64_t SumPage(const volatile uint64_t* p) {
  uint64_t sum = 0;
  for (int i = 0; i < 512; i += 8) sum += p[i];  // MISUSE(wc-read)
  return sum;
}

int main() {
  const size_t kBytes = 16 * 4096;
  uint64_t* wc = static_cast<uint64_t*>(
      cuda::HostAlloc(kBytes, cuda::kHostAllocWriteCombined));  // TOLERATE(pinned-unused)
  for (size_t i = 0; i < kBytes / 8; ++i) wc[i] = i;  // writes fault too, and are not reported
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::MemcpyHtoD(dev, wc, kBytes);
  // Read until the guard has caught a few reads (it arms a page every 20 ms),
  // or for 10 s where the backend cannot tell.
  uint64_t sum = 0;
  uint64_t start = NowMs();
  for (;;) {
    for (size_t page = 0; page < kBytes / 4096; ++page) sum += SumPage(wc + page * 512);
    long caught = cuda::GuardedReadsSoFar();
    uint64_t elapsed = NowMs() - start;
    // A backend that cannot count caught reads (-1) reads for 2 s: the guard
    // arms a page every 20 ms, so it has had about a hundred chances.
    if ((caught >= 3 && elapsed >= 100) || (caught < 0 && elapsed >= 2000) || elapsed >= 10000) {
      break;
    }
  }
  cuda::DeviceFree(dev);
  cuda::FreeHost(wc);
  return sum == 0 ? 1 : 0;
}
