// Misuse: registered host memory released by the allocator while still
// registered, with the asynchronous copies that use it not waited for: the
// allocator may hand it out again at once. (cuMemHostUnregister waits for
// the device's queued work, measured on the H200: unregistering first, as
// the first buffer does, is right.)
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 1 << 20;
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();
  char* buf = static_cast<char*>(cuda::Malloc(kBytes));
  cuda::HostRegister(buf, kBytes);
  cuda::MemcpyHtoDAsync(dev, buf, kBytes, stream);
  cuda::HostUnregister(buf);  // waits for the copy: no finding
  cuda::StreamSynchronize(stream);

  // Below glibc's mmap threshold, so the freed block stays mapped and the copy
  // still in flight reads stale data rather than faulting.
  const size_t kSmall = 96 << 10;
  char* other = static_cast<char*>(cuda::Malloc(kSmall));
  cuda::HostRegister(other, kSmall);
  cuda::MemcpyHtoDAsync(dev, other, kSmall, stream);
  cuda::Free(other);  // MISUSE(free-in-flight)
  cuda::StreamSynchronize(stream);

  // Pages unmapped while registered, under a device-to-host copy.
  char* pages = static_cast<char*>(cuda::MapPages(kBytes));
  cuda::HostRegister(pages, kBytes);
  cuda::MemcpyDtoHAsync(pages, dev, kBytes, stream);
  cuda::UnmapPages(pages, kBytes);  // MISUSE(free-in-flight)
  cuda::StreamSynchronize(stream);

  cuda::Free(buf);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  return 0;
}
