// Misuse: pinning a whole dataset, chunk by chunk, past the process's budget
// (the test runs it with PINSHIM_BUDGET=64 MiB).
#include <vector>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kChunk = 32 << 20;
  std::vector<void*> chunks;
  void* dev = cuda::DeviceAlloc(4096);
  for (int i = 0; i < 4; ++i) {
    void* chunk = cuda::HostAlloc(kChunk);  // MISUSE(over-pinning)
    cuda::MemcpyHtoD(dev, chunk, 4096);
    chunks.push_back(chunk);
  }
  for (void* c : chunks) cuda::FreeHost(c);
  cuda::DeviceFree(dev);
  return 0;
}
