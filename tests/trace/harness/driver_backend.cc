// The harness on the CUDA driver API: the same calls as recorder_backend.cc,
// made for real (tests/fakecuda's libcuda.so.1 without a GPU, the real one on
// the H200), so that the programs run under LD_PRELOAD=libpinshim.so and the
// hooks, not the harness, record the trace. Failures abort: a test program
// that cannot make its calls has nothing to show.
#include <cuda.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "tests/trace/harness/cuda_harness.h"

namespace pinshim {
namespace testing {
namespace cuda {
namespace {

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  fprintf(stderr, "harness: %s failed: %s\n", what, name ? name : "unknown error");
  abort();
}

// Every thread starts on device 0's primary context.
void EnsureContext() {
  static std::once_flag once;
  std::call_once(once, [] { Check(cuInit(0), "cuInit"); });
  CUcontext current = nullptr;
  Check(cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current == nullptr) SetDevice(0);
}

CUdeviceptr Dev(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

}  // namespace

void SetDevice(int device) {
  static std::once_flag once;
  std::call_once(once, [] { Check(cuInit(0), "cuInit"); });
  CUdevice dev;
  Check(cuDeviceGet(&dev, device), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

int DeviceCount() {
  static std::once_flag once;
  std::call_once(once, [] { Check(cuInit(0), "cuInit"); });
  int n = 0;
  Check(cuDeviceGetCount(&n), "cuDeviceGetCount");
  return n;
}

void* DeviceAlloc(size_t bytes) {
  EnsureContext();
  CUdeviceptr p;
  Check(cuMemAlloc(&p, bytes), "cuMemAlloc");
  return reinterpret_cast<void*>(p);
}

void DeviceFree(void* p) { Check(cuMemFree(Dev(p)), "cuMemFree"); }

void* Malloc(size_t bytes) { return malloc(bytes); }
void Free(void* p) { free(p); }

void* MapPages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "harness: mmap failed\n");
    abort();
  }
  return p;
}
void UnmapPages(void* p, size_t bytes) { munmap(p, bytes); }

// Enforce mode's deny policy answers over-budget pinning with the driver's
// out-of-memory error: the program then goes on without the pinned memory,
// as the recorder backend's emulation does.
void* HostAlloc(size_t bytes, unsigned flags) {
  EnsureContext();
  void* p = nullptr;
  CUresult r = cuMemHostAlloc(&p, bytes, flags);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  Check(r, "cuMemHostAlloc");
  return p;
}

void FreeHost(void* p) { Check(cuMemFreeHost(p), "cuMemFreeHost"); }

std::mutex g_refused_mu;
std::set<void*> g_refused;  // registrations the budget denied

void HostRegister(void* p, size_t bytes, unsigned flags) {
  EnsureContext();
  CUresult r = cuMemHostRegister(p, bytes, flags);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    std::lock_guard<std::mutex> lock(g_refused_mu);
    g_refused.insert(p);
    return;
  }
  Check(r, "cuMemHostRegister");
}

void HostUnregister(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_refused_mu);
    if (g_refused.erase(p) != 0) return;  // never registered
  }
  Check(cuMemHostUnregister(p), "cuMemHostUnregister");
}

void MemcpyHtoD(void* d, const void* s, size_t n) {
  EnsureContext();
  Check(cuMemcpyHtoD(Dev(d), s, n), "cuMemcpyHtoD");
}
void MemcpyDtoH(void* d, const void* s, size_t n) {
  EnsureContext();
  Check(cuMemcpyDtoH(d, Dev(s), n), "cuMemcpyDtoH");
}
void MemcpyHtoDAsync(void* d, const void* s, size_t n, Stream stream) {
  Check(cuMemcpyHtoDAsync(Dev(d), s, n, static_cast<CUstream>(stream)), "cuMemcpyHtoDAsync");
}
void MemcpyDtoHAsync(void* d, const void* s, size_t n, Stream stream) {
  Check(cuMemcpyDtoHAsync(d, Dev(s), n, static_cast<CUstream>(stream)), "cuMemcpyDtoHAsync");
}

Stream StreamCreate() {
  EnsureContext();
  CUstream s;
  Check(cuStreamCreate(&s, CU_STREAM_DEFAULT), "cuStreamCreate");
  return s;
}
void StreamDestroy(Stream s) {
  Check(cuStreamDestroy(static_cast<CUstream>(s)), "cuStreamDestroy");
}
void StreamSynchronize(Stream s) {
  Check(cuStreamSynchronize(static_cast<CUstream>(s)), "cuStreamSynchronize");
}
void CtxSynchronize() { Check(cuCtxSynchronize(), "cuCtxSynchronize"); }
Event EventCreate() {
  EnsureContext();
  CUevent e;
  Check(cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
  return e;
}
void EventRecord(Event e, Stream s) {
  Check(cuEventRecord(static_cast<CUevent>(e), static_cast<CUstream>(s)), "cuEventRecord");
}
void EventSynchronize(Event e) {
  Check(cuEventSynchronize(static_cast<CUevent>(e)), "cuEventSynchronize");
}

long GuardedReadsSoFar() { return -1; }

}  // namespace cuda
}  // namespace testing
}  // namespace pinshim
