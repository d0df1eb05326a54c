// A driver-API program linked against libcuda.so.1 (DT_NEEDED): it calls the
// driver's exported symbols by name, so pinshim sees it through its own
// exported driver symbols rather than through dlsym or cuGetProcAddress.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                         \
  do {                                                                      \
    CUresult rc_ = (call);                                                  \
    if (rc_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, rc_); \
      return 3;                                                             \
    }                                                                       \
  } while (0)

int main() {
  const size_t n = 1 << 20;
  CHECK(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUdeviceptr d;
  CHECK(cuMemAlloc(&d, n));
  char* pageable = static_cast<char*>(malloc(n));
  for (size_t i = 0; i < n; ++i) pageable[i] = static_cast<char>(i * 7);
  void* pinned = nullptr;
  CHECK(cuMemHostAlloc(&pinned, n, CU_MEMHOSTALLOC_PORTABLE));
  CHECK(cuMemcpyHtoD(d, pageable, n));
  CHECK(cuMemcpyDtoH(pinned, d, n));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemcpyHtoDAsync(d, pinned, n, s));
  CHECK(cuMemcpyDtoHAsync(pageable, d, n, s));
  CHECK(cuStreamSynchronize(s));
  printf("linked: equal=%d\n", memcmp(pageable, pinned, n) == 0);
  // Pointer attributes through the exported symbols: the pinned allocation
  // describes itself; the pageable buffer is unknown to the driver.
  const auto at = reinterpret_cast<CUdeviceptr>(pinned) + 100;
  CUdeviceptr start = 0;
  size_t size = 0;
  CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, at));
  CHECK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, at));
  printf("linked pinned: start-is-base=%d size=%zu\n",
         start == reinterpret_cast<CUdeviceptr>(pinned), size);
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[2] = {&start, &size};
  start = 0;
  size = 0;
  CHECK(cuPointerGetAttributes(2, attrs, data, at));
  printf("linked pinned all: start-is-base=%d size=%zu\n",
         start == reinterpret_cast<CUdeviceptr>(pinned), size);
  unsigned type = 0;
  printf("linked pageable type: rc %d\n",
         cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                               reinterpret_cast<CUdeviceptr>(pageable)));
  printf("freehost of malloc: %d\n", cuMemFreeHost(pageable));
  CHECK(cuMemFreeHost(pinned));
  CHECK(cuStreamDestroy(s));
  CHECK(cuMemFree(d));
  free(pageable);
  printf(
      "expect: copies=4 h2d=2 d2h=2 h2h=0 d2d=0 pin_allocs=1 pin_frees=2 registers=0 "
      "unregisters=0\n");
  return 0;
}
