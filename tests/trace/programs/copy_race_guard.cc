// Misuse, with PINSHIM_COPY_GUARD=1: plain loads and stores, which no hook
// sees, of page-locked memory under queued asynchronous copies. The guard
// protects the copies' pages until they are waited for; the first access
// faults and is recorded where it happened.
#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 1 << 20;
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();
  volatile char* in = static_cast<volatile char*>(cuda::HostAlloc(kBytes));
  volatile char* out = static_cast<volatile char*>(cuda::HostAlloc(kBytes));
  for (size_t i = 0; i < kBytes; i += 4096) in[i] = 1;
  cuda::MemcpyHtoD(dev, const_cast<char*>(in), kBytes);

  cuda::MemcpyDtoHAsync(const_cast<char*>(out), dev, kBytes, stream);
  int seen = out[8192];  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);

  cuda::MemcpyHtoDAsync(dev, const_cast<char*>(in), kBytes, stream);
  in[4096 * 3] = 2;  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);

  // After a wait: no finding.
  cuda::MemcpyDtoHAsync(const_cast<char*>(out), dev, kBytes, stream);
  cuda::StreamSynchronize(stream);
  seen += out[8192];
  in[4096 * 3] = 3;

  cuda::FreeHost(const_cast<char*>(in));
  cuda::FreeHost(const_cast<char*>(out));
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  return seen > 1000 ? 1 : 0;
}
