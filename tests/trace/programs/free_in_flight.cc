// Misuse: a registered buffer unregistered (and a pinned copy's source freed)
// while the asynchronous copy that reads it has not been waited for.
#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 1 << 20;
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();
  char* buf = static_cast<char*>(cuda::Malloc(kBytes));
  cuda::HostRegister(buf, kBytes);
  cuda::MemcpyHtoDAsync(dev, buf, kBytes, stream);
  cuda::HostUnregister(buf);  // MISUSE(free-in-flight)
  cuda::StreamSynchronize(stream);

  // Below glibc's mmap threshold, so the freed block stays mapped and the copy
  // still in flight reads stale data rather than faulting.
  const size_t kSmall = 96 << 10;
  char* other = static_cast<char*>(cuda::Malloc(kSmall));
  cuda::HostRegister(other, kSmall); cuda::MemcpyHtoDAsync(dev, other, kSmall, stream);
  cuda::Free(other);  // MISUSE(free-in-flight)
  cuda::StreamSynchronize(stream);

  cuda::Free(buf);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  return 0;
}
