// Hot allocation sites: a 4 MiB buffer from malloc copied to the device 40
// times (its allocation site belongs in a profile), another copied once and
// a third never copied (theirs do not). Each buffer has its own allocating
// function, so the sites differ in their first frame (noipa keeps the three
// identical functions from being folded into one; BUILD keeps their calls
// from becoming jumps).
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

__attribute__((noipa)) char* AllocateStaging(size_t bytes) {
  char* p = static_cast<char*>(cuda::Malloc(bytes));  // HOT_SITE
  return p;
}

__attribute__((noipa)) char* AllocateScratch(size_t bytes) {
  char* p = static_cast<char*>(cuda::Malloc(bytes));  // COLD_SITE
  return p;
}

__attribute__((noipa)) char* AllocateSpare(size_t bytes) {
  char* p = static_cast<char*>(cuda::Malloc(bytes));  // COLD_SITE
  return p;
}

int main() {
  const size_t kBytes = 4 << 20;
  char* staging = AllocateStaging(kBytes);
  char* scratch = AllocateScratch(kBytes);
  char* spare = AllocateSpare(kBytes);
  void* dev = cuda::DeviceAlloc(kBytes);
  for (int step = 0; step < 40; ++step) {
    memset(staging, step, kBytes);
    cuda::MemcpyHtoD(dev, staging, kBytes);
  }
  memset(scratch, 1, kBytes);
  cuda::MemcpyHtoD(dev, scratch, kBytes);
  memset(spare, 2, kBytes);
  cuda::DeviceFree(dev);
  cuda::Free(spare);
  cuda::Free(scratch);
  cuda::Free(staging);
  return 0;
}
