// Misuse: more pinned memory asked for than enforce mode's budget allows.
// Run with PINSHIM_MODE=enforce and a 4 MiB PINSHIM_BUDGET: four 1 MiB
// staging buffers fit, the fifth and the 2 MiB registration do not. Under
// PINSHIM_POLICY=deny they fail; under fallback they get pageable memory.
#include <cstdlib>
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 1 << 20;
  const int kBuffers = 5;
  void* dev = cuda::DeviceAlloc(2 * kBytes);
  void* staging[kBuffers] = {};
  for (int i = 0; i < kBuffers; ++i) {
    staging[i] = cuda::HostAlloc(kBytes);  // MISUSE(budget-refused)
    if (staging[i] == nullptr) continue;   // denied: the program goes on without it
    memset(staging[i], i, kBytes);
    cuda::MemcpyHtoD(dev, staging[i], kBytes);
  }
  char* frame = static_cast<char*>(malloc(2 * kBytes));
  memset(frame, 1, 2 * kBytes);
  cuda::HostRegister(frame, 2 * kBytes);  // MISUSE(budget-refused)
  cuda::MemcpyHtoD(dev, frame, 2 * kBytes);
  cuda::HostUnregister(frame);
  free(frame);
  for (void* p : staging) {
    if (p != nullptr) cuda::FreeHost(p);
  }
  cuda::DeviceFree(dev);
  return 0;
}
