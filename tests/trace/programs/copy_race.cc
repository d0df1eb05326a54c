// Misuse: the CPU touches page-locked memory under asynchronous copies
// before waiting for them: it reads a device-to-host copy's destination,
// overwrites a host-to-device copy's source, and compares a registered
// destination. The same accesses after a wait are fine.
#include <cstring>
#include <vector>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main(int argc, char**) {
  const size_t kBytes = (1 << 20) + static_cast<size_t>(argc - 1);  // not a constant
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();
  char* in = static_cast<char*>(cuda::HostAlloc(kBytes));
  char* out = static_cast<char*>(cuda::HostAlloc(kBytes));
  memset(in, 1, kBytes);
  cuda::MemcpyHtoD(dev, in, kBytes);
  std::vector<char> result(kBytes);

  cuda::MemcpyDtoHAsync(out, dev, kBytes, stream);
  memcpy(result.data(), out, kBytes);  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);

  cuda::MemcpyHtoDAsync(dev, in, kBytes, stream);
  memset(in, 2, kBytes);  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);

  // Waited for first: no finding.
  cuda::MemcpyDtoHAsync(out, dev, kBytes, stream);
  cuda::StreamSynchronize(stream);
  memcpy(result.data(), out, kBytes);
  cuda::Event done = cuda::EventCreate();
  cuda::MemcpyHtoDAsync(dev, in, kBytes, stream);
  cuda::EventRecord(done, stream);
  cuda::EventSynchronize(done);
  memset(in, 3, kBytes);

  char* reg = static_cast<char*>(cuda::Malloc(kBytes));
  cuda::HostRegister(reg, kBytes);
  cuda::MemcpyDtoHAsync(reg, dev, kBytes, stream);
  int same = memcmp(reg, result.data(), kBytes);  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);
  cuda::HostUnregister(reg);

  cuda::Free(reg);
  cuda::FreeHost(in);
  cuda::FreeHost(out);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  return same == 12345 ? 1 : 0;  // the compared bytes decide nothing
}
