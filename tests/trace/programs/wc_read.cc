// Misuse: the CPU reads back a write-combined staging buffer with memcpy,
// and writes part of it to a file.
#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  const size_t kBytes = 1 << 20;
  char* staging =
      static_cast<char*>(cuda::HostAlloc(kBytes, cuda::kHostAllocWriteCombined));  // ALLOC(wc-read)
  memset(staging, 7, kBytes);  // writing is what write-combined memory is for
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::MemcpyHtoD(dev, staging, kBytes);
  std::vector<char> check(kBytes);
  size_t n = check.size() - static_cast<size_t>(staging[0] == 8);
  memcpy(check.data(), staging, n);  // MISUSE(wc-read)
  FILE* f = fopen("/dev/null", "w");
  if (f != nullptr) {
    fwrite(staging, 1, 4096, f);  // MISUSE(wc-read)
    fclose(f);
  }
  cuda::DeviceFree(dev);
  cuda::FreeHost(staging);
  return check[10] == 7 ? 0 : 1;
}
