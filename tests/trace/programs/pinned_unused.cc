// Misuse: pinned memory that no copy ever uses.
#include <unistd.h>

#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  char* spare = static_cast<char*>(cuda::HostAlloc(8 << 20));  // MISUSE(pinned-unused)
  memset(spare, 1, 8 << 20);
  usleep(20000);
  cuda::FreeHost(spare);
  return 0;
}
