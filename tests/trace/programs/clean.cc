// Doing it right: one pinned buffer allocated up front, reused for large
// asynchronous copies on a stream, waited for before it is freed.
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 4 << 20;
  char* staging = static_cast<char*>(cuda::HostAlloc(kBytes));
  char* results = static_cast<char*>(cuda::HostAlloc(kBytes));
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();
  cuda::Event done = cuda::EventCreate();
  for (int step = 0; step < 20; ++step) {
    memset(staging, step, kBytes);
    cuda::MemcpyHtoDAsync(dev, staging, kBytes, stream);
    cuda::MemcpyDtoHAsync(results, dev, kBytes, stream);
    cuda::EventRecord(done, stream);
    cuda::EventSynchronize(done);
  }
  cuda::StreamSynchronize(stream);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  cuda::FreeHost(results);
  cuda::FreeHost(staging);
  return 0;
}
