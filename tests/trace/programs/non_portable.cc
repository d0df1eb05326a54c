// Misuse: pinned memory allocated under device 0 without the portable flag,
// then copied under device 1.
#include <cstdio>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  if (cuda::DeviceCount() < 2) {
    fprintf(stderr, "not run: needs two devices, this machine has %d\n", cuda::DeviceCount());
    return cuda::kNotRun;
  }
  const size_t kBytes = 1 << 20;
  cuda::SetDevice(0);
  char* shared = static_cast<char*>(cuda::HostAlloc(kBytes));  // MISUSE(non-portable)
  cuda::SetDevice(1);
  void* dev1 = cuda::DeviceAlloc(kBytes);
  cuda::MemcpyHtoD(dev1, shared, kBytes);
  cuda::DeviceFree(dev1);
  cuda::SetDevice(0);
  cuda::FreeHost(shared);
  return 0;
}
