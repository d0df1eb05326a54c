// Misuse: cudaMemcpyAsync-style copies from pageable memory, which the
// driver performs synchronously.
#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 1 << 20;
  char* staging = static_cast<char*>(cuda::Malloc(kBytes));
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();
  for (int i = 0; i < 3; ++i) {
    cuda::MemcpyHtoDAsync(dev, staging, kBytes, stream);  // MISUSE(async-pageable)
  }
  cuda::StreamSynchronize(stream);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  cuda::Free(staging);
  return 0;
}
