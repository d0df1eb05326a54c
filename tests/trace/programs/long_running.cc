// Copies from pageable memory every few milliseconds until it is killed; for
// reports of traces that are still being written, or cut off by SIGKILL.
#include <unistd.h>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 4 << 20;
  char* frame = static_cast<char*>(cuda::Malloc(kBytes));
  void* dev = cuda::DeviceAlloc(kBytes);
  for (;;) {
    cuda::MemcpyHtoD(dev, frame, kBytes);  // MISUSE(pageable-hot)
    usleep(2000);
  }
}
