// A do-nothing CUDA driver (libcuda.so.1) with just the entry points
// copy_call_bench and pinshim's copy path use. A copy is a memcpy into one
// static "device" buffer: no threads, no locks, no queues, so a call costs
// tens of nanoseconds and what pinshim adds to it is visible. The simulated
// driver (tests/fakecuda) runs every copy on a stream worker thread, which
// costs microseconds and hides a 50 ns difference in scheduling noise.
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#define NULL_DRIVER_API extern "C" __attribute__((visibility("default")))

namespace {

// Device addresses handed out: [kDeviceBase, kDeviceBase + kDeviceBytes),
// backed by g_device. Nothing else is device memory.
constexpr CUdeviceptr kDeviceBase = 0x700000000000ull;
constexpr size_t kDeviceBytes = 8 << 20;
alignas(64) unsigned char g_device[kDeviceBytes];
size_t g_device_used = 0;

// Page-locked host allocations, for cuPointerGetAttribute.
constexpr int kMaxHostAllocs = 64;
struct HostAlloc {
  uintptr_t base;
  size_t size;
};
HostAlloc g_host[kMaxHostAllocs];

bool g_initialized = false;
int g_context_token = 0;
int g_stream_token = 0;

unsigned char* DeviceBytes(CUdeviceptr p, size_t n) {
  if (p < kDeviceBase || p - kDeviceBase > kDeviceBytes || n > kDeviceBytes - (p - kDeviceBase)) {
    return nullptr;
  }
  return g_device + (p - kDeviceBase);
}

bool IsPinned(uintptr_t p) {
  for (const HostAlloc& h : g_host) {
    if (h.size != 0 && p >= h.base && p - h.base < h.size) return true;
  }
  return false;
}

}  // namespace

NULL_DRIVER_API CUresult cuInit(unsigned int) {
  g_initialized = true;
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuGetErrorName(CUresult, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *name = "CUDA_ERROR_NULL_DRIVER";
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuDeviceGet(CUdevice* dev, int ordinal) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev == nullptr || ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
  *dev = 0;
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(&g_context_token);
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }

NULL_DRIVER_API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  const size_t rounded = (n + 255) & ~size_t{255};
  if (p == nullptr || rounded > kDeviceBytes - g_device_used) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *p = kDeviceBase + g_device_used;
  g_device_used += rounded;
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuMemHostAlloc(void** p, size_t n, unsigned int) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (HostAlloc& h : g_host) {
    if (h.size != 0) continue;
    void* mem = std::aligned_alloc(4096, (n + 4095) & ~size_t{4095});
    if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    h = {reinterpret_cast<uintptr_t>(mem), n};
    *p = mem;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

NULL_DRIVER_API CUresult cuMemFreeHost(void* p) {
  for (HostAlloc& h : g_host) {
    if (h.size != 0 && h.base == reinterpret_cast<uintptr_t>(p)) {
      std::free(p);
      h = {0, 0};
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

NULL_DRIVER_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                               CUdeviceptr p) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool device = DeviceBytes(p, 0) != nullptr;
  if (!device && !IsPinned(p)) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned int*>(data) = 0;
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

NULL_DRIVER_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  unsigned char* d = DeviceBytes(dst, n);
  if (d == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::memcpy(d, src, n);
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n,
                                              CUstream) {
  return cuMemcpyHtoD_v2(dst, src, n);
}

NULL_DRIVER_API CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *stream = reinterpret_cast<CUstream>(&g_stream_token);
  return CUDA_SUCCESS;
}

NULL_DRIVER_API CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }

// One ABI per name, whatever version or stream flags are asked for.
NULL_DRIVER_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t,
                                             CUdriverProcAddressQueryResult* status) {
  static const struct {
    const char* name;
    void* fn;
  } kTable[] = {
      {"cuInit", reinterpret_cast<void*>(&cuInit)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&cuDriverGetVersion)},
      {"cuGetErrorName", reinterpret_cast<void*>(&cuGetErrorName)},
      {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
      {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&cuDevicePrimaryCtxRetain)},
      {"cuCtxSetCurrent", reinterpret_cast<void*>(&cuCtxSetCurrent)},
      {"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuMemHostAlloc", reinterpret_cast<void*>(&cuMemHostAlloc)},
      {"cuMemFreeHost", reinterpret_cast<void*>(&cuMemFreeHost)},
      {"cuPointerGetAttribute", reinterpret_cast<void*>(&cuPointerGetAttribute)},
      {"cuMemcpyHtoD", reinterpret_cast<void*>(&cuMemcpyHtoD_v2)},
      {"cuMemcpyHtoDAsync", reinterpret_cast<void*>(&cuMemcpyHtoDAsync_v2)},
      {"cuStreamCreate", reinterpret_cast<void*>(&cuStreamCreate)},
      {"cuStreamSynchronize", reinterpret_cast<void*>(&cuStreamSynchronize)},
  };
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& entry : kTable) {
    if (std::strcmp(symbol, entry.name) == 0) {
      *pfn = entry.fn;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
