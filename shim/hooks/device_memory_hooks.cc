// Device and managed allocations, recorded so a copy can tell a device
// pointer from a host one; cuMemFree, which waits for the device, is a
// completion point of the trace.
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <cstdint>

#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/state.h"

namespace pinshim {
namespace {

void RecordDeviceAlloc(CUdeviceptr* dptr, uint64_t n, MemKind kind, CUresult r) {
  if (r != CUDA_SUCCESS || dptr == nullptr || *dptr == 0) return;
  Region reg;
  reg.start = *dptr;
  reg.bytes = n;
  reg.id = NextAllocId();
  reg.kind = kind;
  reg.source = kSourceDriver;
  g_allocations.Insert(reg);
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"
using pinshim::hook::StartTime;

extern "C" {

// --- device and managed allocations ------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t n) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t);
  PINSHIM_HOOK_ENTER(kApi_cuMemAlloc_v2, Fn, dptr, n);
  CUresult r = real_fn(dptr, n);
  RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);
  return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int elem) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  PINSHIM_HOOK_ENTER(kApi_cuMemAllocPitch_v2, Fn, dptr, pitch, width, height, elem);
  CUresult r = real_fn(dptr, pitch, width, height, elem);
  if (r == CUDA_SUCCESS && pitch != nullptr) {
    RecordDeviceAlloc(dptr, uint64_t{*pitch} * height, MemKind::kDevice, r);
  }
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t n, unsigned int flags) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
  PINSHIM_HOOK_ENTER(kApi_cuMemAllocManaged, Fn, dptr, n, flags);
  CUresult r = real_fn(dptr, n, flags);
  RecordDeviceAlloc(dptr, n, MemKind::kManaged, r);
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr d) {
  using Fn = CUresult (*)(CUdeviceptr);
  PINSHIM_HOOK_ENTER(kApi_cuMemFree_v2, Fn, d);
  const uint64_t start_ns = StartTime();
  CUresult r = real_fn(d);
  if (r == CUDA_SUCCESS) g_allocations.Remove(d, nullptr);
  // The driver waited for the device's queued work first (measured): a
  // completion point for the trace.
  hook::RecordDriverWait(kApi_cuMemFree_v2, start_ns, r);
  return r;
}

#define DEFINE_ALLOC_ASYNC(name)                             \
  CUresult name(CUdeviceptr* dptr, size_t n, CUstream st) {  \
    using Fn = CUresult (*)(CUdeviceptr*, size_t, CUstream); \
    PINSHIM_HOOK_ENTER(kApi_##name, Fn, dptr, n, st);        \
    CUresult r = real_fn(dptr, n, st);                       \
    RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);         \
    return r;                                                \
  }
#define DEFINE_ALLOC_POOL_ASYNC(name)                                          \
  CUresult name(CUdeviceptr* dptr, size_t n, CUmemoryPool pool, CUstream st) { \
    using Fn = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);     \
    PINSHIM_HOOK_ENTER(kApi_##name, Fn, dptr, n, pool, st);                    \
    CUresult r = real_fn(dptr, n, pool, st);                                   \
    RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);                           \
    return r;                                                                  \
  }
#define DEFINE_FREE_ASYNC(name)                              \
  CUresult name(CUdeviceptr d, CUstream st) {                \
    using Fn = CUresult (*)(CUdeviceptr, CUstream);          \
    PINSHIM_HOOK_ENTER(kApi_##name, Fn, d, st);              \
    CUresult r = real_fn(d, st);                             \
    if (r == CUDA_SUCCESS) g_allocations.Remove(d, nullptr); \
    return r;                                                \
  }
DEFINE_ALLOC_ASYNC(cuMemAllocAsync)
DEFINE_ALLOC_ASYNC(cuMemAllocAsync_ptsz)
DEFINE_ALLOC_POOL_ASYNC(cuMemAllocFromPoolAsync)
DEFINE_ALLOC_POOL_ASYNC(cuMemAllocFromPoolAsync_ptsz)
DEFINE_FREE_ASYNC(cuMemFreeAsync)
DEFINE_FREE_ASYNC(cuMemFreeAsync_ptsz)

}  // extern "C"
