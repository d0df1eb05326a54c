// Misuse: a 4 MiB buffer from malloc copied to the device again and again.
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

static void Upload(void* dev, const char* batch, size_t bytes) {
  cuda::MemcpyHtoD(dev, batch, bytes);  // MISUSE(pageable-hot)
}

int main() {
  const size_t kBytes = 4 << 20;
  char* batch = static_cast<char*>(cuda::Malloc(kBytes));  // ALLOC(pageable-hot)
  void* dev = cuda::DeviceAlloc(kBytes);
  for (int step = 0; step < 40; ++step) {
    memset(batch, step, kBytes);
    Upload(dev, batch, kBytes);
  }
  cuda::DeviceFree(dev);
  cuda::Free(batch);
  return 0;
}
