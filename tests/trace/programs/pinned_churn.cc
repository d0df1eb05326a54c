// Misuse: a pinned staging buffer allocated and freed for every batch.
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 1 << 20;
  void* dev = cuda::DeviceAlloc(kBytes);
  for (int batch = 0; batch < 12; ++batch) {
    char* staging = static_cast<char*>(cuda::HostAlloc(kBytes));  // MISUSE(pinned-churn)
    memset(staging, batch, kBytes);
    cuda::MemcpyHtoD(dev, staging, kBytes);
    cuda::FreeHost(staging);
  }
  cuda::DeviceFree(dev);
  return 0;
}
