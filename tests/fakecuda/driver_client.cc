// Reaches the driver as the CUDA runtime does: dlopen("libcuda.so.1") by
// plain name, one dlsym of cuGetProcAddress_v2, everything else through it.
// Exercises working and failing calls; prints nothing; the exit code names the
// first step that went wrong (0: all as expected).
//
// Usage: driver_client EXPECTED_LIBRARY_DIR
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

PFN_cuGetProcAddress_v12000 g_get_proc = nullptr;

template <typename Fn>
Fn Lookup(const char* name, int version, cuuint64_t flags = 0) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  if (g_get_proc(name, &fn, version, flags, &status) != CUDA_SUCCESS) return nullptr;
  return reinterpret_cast<Fn>(fn);
}

std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return "";
  return resolved;
}

int Run(const char* expected_dir) {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return 2;
  auto get_proc =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) return 3;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(get_proc), &info) == 0) return 4;
  // The copy in the expected folder, not some other libcuda.so.1.
  if (RealPath(info.dli_fname) != RealPath(std::string(expected_dir) + "/libcuda.so.1")) return 5;

  // The runtime asks for cuGetProcAddress itself and uses what comes back.
  void* self = nullptr;
  if (get_proc("cuGetProcAddress", &self, 12000, 0, nullptr) != CUDA_SUCCESS) return 6;
  g_get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(self);

  auto init = Lookup<PFN_cuInit_v2000>("cuInit", 2000);
  auto retain = Lookup<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain", 7000);
  auto set_current = Lookup<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent", 4000);
  auto alloc = Lookup<PFN_cuMemAlloc_v3020>("cuMemAlloc", 3020);
  auto free_dev = Lookup<PFN_cuMemFree_v3020>("cuMemFree", 3020);
  auto host_alloc = Lookup<PFN_cuMemHostAlloc_v2020>("cuMemHostAlloc", 2020);
  auto free_host = Lookup<PFN_cuMemFreeHost_v2000>("cuMemFreeHost", 2000);
  auto host_register = Lookup<PFN_cuMemHostRegister_v6050>("cuMemHostRegister", 6050);
  auto host_unregister = Lookup<PFN_cuMemHostUnregister_v4000>("cuMemHostUnregister", 4000);
  auto htod = Lookup<PFN_cuMemcpyHtoD_v3020>("cuMemcpyHtoD", 3020);
  auto dtoh = Lookup<PFN_cuMemcpyDtoH_v7000_ptds>("cuMemcpyDtoH", 7000,
                                                  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  auto htod_async = Lookup<PFN_cuMemcpyHtoDAsync_v7000_ptsz>(
      "cuMemcpyHtoDAsync", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  auto sync = Lookup<PFN_cuStreamSynchronize_v7000_ptsz>(
      "cuStreamSynchronize", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  if (!init || !retain || !set_current || !alloc || !free_dev || !host_alloc || !free_host ||
      !host_register || !host_unregister || !htod || !dtoh || !htod_async || !sync) {
    return 7;
  }

  CUcontext ctx;
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS) {
    return 8;
  }
  constexpr size_t kSize = 4096;
  CUdeviceptr dev;
  void* pinned;
  if (alloc(&dev, kSize) != CUDA_SUCCESS || host_alloc(&pinned, kSize, 0) != CUDA_SUCCESS) return 9;
  std::vector<char> pageable(kSize, 'p'), back(kSize, 0);
  std::memset(pinned, 'q', kSize);
  if (htod(dev, pageable.data(), kSize) != CUDA_SUCCESS) return 10;
  if (dtoh(back.data(), dev, kSize) != CUDA_SUCCESS || back != pageable) return 11;
  if (htod_async(dev, pinned, kSize, nullptr) != CUDA_SUCCESS || sync(nullptr) != CUDA_SUCCESS) {
    return 12;
  }
  if (dtoh(back.data(), dev, kSize) != CUDA_SUCCESS || back[kSize - 1] != 'q') return 13;

  // Failing calls stay quiet too.
  if (htod(dev, pageable.data(), kSize + 1) != CUDA_ERROR_INVALID_VALUE) return 14;
  if (host_register(pageable.data(), kSize, 0) != CUDA_SUCCESS) return 15;
  if (host_register(pageable.data(), kSize, 0) != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    return 16;
  }
  if (host_unregister(pageable.data()) != CUDA_SUCCESS) return 17;
  if (host_unregister(pageable.data()) != CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED) return 18;
  if (free_host(pageable.data()) != CUDA_ERROR_INVALID_VALUE) return 19;
  void* missing = nullptr;
  if (g_get_proc("cuNoSuchEntryPoint", &missing, 13000, 0, nullptr) != CUDA_ERROR_NOT_FOUND) {
    return 20;
  }
  if (free_dev(dev) != CUDA_SUCCESS || free_host(pinned) != CUDA_SUCCESS) return 21;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 1;
  return Run(argv[1]);
}
