// Many copies, for capped traces (PINSHIM_TRACE_MAX): a pageable buffer
// uploaded again and again (pageable-hot), small asynchronous downloads to
// pageable memory (async-pageable), and a pinned allocation and stream
// synchronizations between them, so that detail ends in the middle of each.
// argv[1]: rounds (default 4000).
#include <cstdlib>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

static void Upload(void* dev, const char* host, size_t bytes) {
  cuda::MemcpyHtoD(dev, host, bytes);  // MISUSE(pageable-hot)
}

static void Download(char* host, const void* dev, size_t bytes, cuda::Stream stream) {
  cuda::MemcpyDtoHAsync(host, dev, bytes, stream);  // MISUSE(async-pageable)
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 4000;
  const size_t kBig = 64 << 10, kSmall = 4 << 10;
  char* big = static_cast<char*>(cuda::Malloc(kBig));
  char* small = static_cast<char*>(cuda::Malloc(kSmall));
  char* dev = static_cast<char*>(cuda::DeviceAlloc(kBig));
  cuda::Stream stream = cuda::StreamCreate();
  for (int r = 0; r < rounds; ++r) {
    Upload(dev, big, kBig);
    Download(small, dev, kSmall, stream);
    if (r % 100 == 0) cuda::StreamSynchronize(stream);
    if (r == rounds / 2) cuda::FreeHost(cuda::HostAlloc(1 << 20));
  }
  cuda::StreamSynchronize(stream);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  cuda::Free(small);
  cuda::Free(big);
  return 0;
}
