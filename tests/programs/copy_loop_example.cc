// The bundled example: a data-loader-shaped loop an ML job might run. Each
// step fills a reused pageable batch, copies it to the GPU, copies results
// back, and (a common mistake) allocates and frees a pinned staging buffer.
// It reaches the driver as the CUDA runtime does (dlopen + cuGetProcAddress_v2),
// so it runs unchanged on a real GPU or on pinshim's simulated driver.
#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
GetProc g_get = nullptr;

template <typename T>
T Fn(const char* name, int version) {
  void* p = nullptr;
  if (g_get(name, &p, version, 0, nullptr) != CUDA_SUCCESS || p == nullptr) {
    fprintf(stderr, "example: the driver has no %s\n", name);
    exit(2);
  }
  return reinterpret_cast<T>(p);
}

void Check(CUresult rc, const char* what) {
  if (rc != CUDA_SUCCESS) {
    fprintf(stderr, "example: %s failed with CUDA error %d\n", what, rc);
    exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? atoi(argv[1]) : 20;
  const size_t batch = 8u << 20, result = 1u << 20;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    fprintf(stderr, "example: cannot load libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  g_get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (g_get == nullptr) return 2;
  Check(Fn<CUresult (*)(unsigned)>("cuInit", 2000)(0), "cuInit");
  CUdevice dev;
  CUcontext ctx;
  Check(Fn<CUresult (*)(CUdevice*, int)>("cuDeviceGet", 2000)(&dev, 0), "cuDeviceGet");
  Check(Fn<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain", 7000)(&ctx, dev),
        "cuDevicePrimaryCtxRetain");
  Check(Fn<CUresult (*)(CUcontext)>("cuCtxSetCurrent", 4000)(ctx), "cuCtxSetCurrent");
  auto mem_alloc = Fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc", 3020);
  auto htod_async =
      Fn<CUresult (*)(CUdeviceptr, const void*, size_t, CUstream)>("cuMemcpyHtoDAsync", 3020);
  auto dtoh = Fn<CUresult (*)(void*, CUdeviceptr, size_t)>("cuMemcpyDtoH", 3020);
  auto host_alloc = Fn<CUresult (*)(void**, size_t, unsigned)>("cuMemHostAlloc", 2020);
  auto free_host = Fn<CUresult (*)(void*)>("cuMemFreeHost", 2000);

  CUdeviceptr d_batch, d_result;
  Check(mem_alloc(&d_batch, batch), "cuMemAlloc");
  Check(mem_alloc(&d_result, result), "cuMemAlloc");
  char* h_batch = static_cast<char*>(malloc(batch));    // pageable, reused every step
  char* h_result = static_cast<char*>(malloc(result));  // pageable, reused every step
  unsigned long checksum = 0;
  auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    memset(h_batch, step, batch);
    // "Async" from pageable memory: the driver performs it synchronously.
    Check(htod_async(d_batch, h_batch, batch, nullptr), "cuMemcpyHtoDAsync");
    void* staging = nullptr;  // pinned, allocated and freed every step
    Check(host_alloc(&staging, result, 0), "cuMemHostAlloc");
    Check(dtoh(staging, d_batch, result), "cuMemcpyDtoH");
    memcpy(h_result, staging, result);
    Check(free_host(staging), "cuMemFreeHost");
    checksum += static_cast<unsigned char>(h_result[step % result]);
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  printf("example: %d steps of an 8 MiB batch in %.1f ms (checksum %lu)\n", steps, ms, checksum);
  free(h_batch);
  free(h_result);
  return 0;
}
