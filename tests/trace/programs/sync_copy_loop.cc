// Misuse: one synchronous copy per loop iteration, with host work between
// them that could have overlapped the transfers.
#include <cstdint>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

static uint64_t HostWork(const char* p, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i += 64) sum += static_cast<unsigned char>(p[i]);
  return sum;
}

int main() {
  const size_t kBytes = 256 << 10;
  char* results = static_cast<char*>(cuda::HostAlloc(kBytes));
  void* dev = cuda::DeviceAlloc(kBytes);
  uint64_t sum = 0;
  for (int step = 0; step < 100; ++step) {
    cuda::MemcpyDtoH(results, dev, kBytes);  // MISUSE(sync-copy-loop)
    sum += HostWork(results, kBytes);
  }
  cuda::DeviceFree(dev);
  cuda::FreeHost(results);
  return static_cast<int>(sum & 1) * 0;
}
