// Makes page calls on memory pinshim did not pin, in optimize mode with the
// engine started (a copy), so that pinshim's page hooks take their fast
// paths, and prints how many of them reached the counting library preloaded
// after pinshim (page_call_counter.c): every one must, with or without
// pinshim.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(x)                                                     \
  do {                                                               \
    if ((x) != CUDA_SUCCESS) {                                       \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); \
      exit(1);                                                       \
    }                                                                \
  } while (0)

int main() {
  using Counts = void (*)(long*, long*, long*);
  auto counts = reinterpret_cast<Counts>(dlsym(RTLD_DEFAULT, "page_call_counts"));
  if (counts == nullptr) {
    fprintf(stderr, "page_call_client: the counting library is not preloaded\n");
    return 2;
  }
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  const size_t n = size_t{1} << 20;
  CUdeviceptr d;
  CHECK(cuMemAlloc(&d, n));
  char* host = static_cast<char*>(malloc(n));
  memset(host, 1, n);
  CHECK(cuMemcpyHtoD(d, host, n));  // starts optimize mode's engine
  long m0, u0, a0;
  counts(&m0, &u0, &a0);
  const int kRounds = 100;
  int failures = 0;
  for (int i = 0; i < kRounds; ++i) {
    char* p = static_cast<char*>(
        mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    p[4096] = 1;
    if (mmap(p + 4096, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) != p + 4096 ||
        p[4096] != 0) {
      ++failures;
    }
    p[8192] = 2;
    if (madvise(p + 8192, 4096, MADV_DONTNEED) != 0 || p[8192] != 0) ++failures;
    if (munmap(p, 4 * 4096) != 0) ++failures;
  }
  long m1, u1, a1;
  counts(&m1, &u1, &a1);
  printf("mmap=%ld munmap=%ld madvise=%ld failures=%d\n", m1 - m0, u1 - u0, a1 - a0, failures);
  free(host);
  CHECK(cuMemFree(d));
  return 0;
}
