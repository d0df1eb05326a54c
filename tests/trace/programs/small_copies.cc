// Misuse: a matrix sent to the device one 4 KiB row at a time.
#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kRow = 4096;
  const int kRows = 256;
  char* rows = static_cast<char*>(cuda::HostAlloc(kRow * kRows));
  char* dev = static_cast<char*>(cuda::DeviceAlloc(kRow * kRows));
  cuda::Stream stream = cuda::StreamCreate();
  for (int r = 0; r < kRows; ++r) {
    cuda::MemcpyHtoDAsync(dev + r * kRow, rows + r * kRow, kRow, stream);  // MISUSE(small-copies)
  }
  cuda::StreamSynchronize(stream);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  cuda::FreeHost(rows);
  return 0;
}
