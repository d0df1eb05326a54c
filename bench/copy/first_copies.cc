// A program's first copies through the driver API, for seeing what pinshim
// does inside each call: 8 steps of malloc, write, cuMemcpyHtoD, free;
// malloc, cuMemcpyDtoHAsync on the legacy stream, cuStreamSynchronize, free
// (the pattern matrix's cold cell). Each copy call is bracketed by two
// one-byte writes to an unopened descriptor (-1), which fail and do nothing
// but mark the call in a system call trace: first_copy_syscalls.sh counts
// the calling thread's system calls between them.
//
// Usage: first_copies [BYTES] (default 1 MiB). Links libcuda.so.1 (the
// simulated driver in CI, or a real one).
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

void Mark() {
  const char c = 0;
  (void)!write(-1, &c, 1);
}

bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  fprintf(stderr, "first_copies: %s failed (%d)\n", what, static_cast<int>(r));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? strtoull(argv[1], nullptr, 0) : size_t{1} << 20;
  CUdevice d;
  CUcontext c;
  CUdeviceptr dev;
  if (!Ok(cuInit(0), "cuInit") || !Ok(cuDeviceGet(&d, 0), "cuDeviceGet") ||
      !Ok(cuDevicePrimaryCtxRetain(&c, d), "cuDevicePrimaryCtxRetain") ||
      !Ok(cuCtxSetCurrent(c), "cuCtxSetCurrent") || !Ok(cuMemAlloc(&dev, n), "cuMemAlloc")) {
    return 1;
  }
  unsigned long sum = 0;
  for (int i = 0; i < 8; ++i) {
    auto* up = static_cast<unsigned char*>(malloc(n));
    memset(up, i + 1, n);
    Mark();
    const bool up_ok = Ok(cuMemcpyHtoD(dev, up, n), "cuMemcpyHtoD");
    Mark();
    free(up);
    auto* down = static_cast<unsigned char*>(malloc(n));
    Mark();
    const bool down_ok = Ok(cuMemcpyDtoHAsync(down, dev, n, nullptr), "cuMemcpyDtoHAsync") &&
                         Ok(cuStreamSynchronize(nullptr), "cuStreamSynchronize");
    Mark();
    if (!up_ok || !down_ok) return 1;
    sum += down[0] + down[n - 1];
    free(down);
  }
  printf("first_copies bytes=%zu checksum=%lu\n", n, sum);
  return 0;
}
