// Device and managed allocations, recorded so a copy can tell a device
// pointer from a host one (an allocation from a host memory pool is host
// memory: vmm_hooks.cc); cuMemFree, which waits for the device, is a
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
#include "shim/hooks/vmm_tables.h"

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

// The stream-ordered allocations and frees, by argument list; `api` names
// the ABI variant (legacy or per-thread stream).
CUresult AllocAsync(Api api, CUdeviceptr* dptr, size_t n, CUstream st) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
  const Fn real_fn = hook::RealFn<Fn>(api);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, dptr, n, st);
  const hook::HookScope scope;
  CUresult r = real_fn(dptr, n, st);
  RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);
  return r;
}

using FreeAsyncFn = CUresult (*)(CUdeviceptr, CUstream);

// An allocation from a pool: device memory, or pinned host memory when the
// pool has a host location (vmm_hooks.cc charges and records those; a pool
// that grew past enforce mode's budget gives the allocation back through
// `free_api`).
CUresult AllocFromPoolAsync(Api api, CUdeviceptr* dptr, size_t n, CUmemoryPool pool, CUstream st,
                            Api free_api) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  const Fn real_fn = hook::RealFn<Fn>(api);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, dptr, n, pool, st);
  const hook::HookScope scope;
  if (!IsHostPool(pool)) {
    CUresult r = real_fn(dptr, n, pool, st);
    RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);
    return r;
  }
  return HostPoolAlloc(
      api, dptr, n, pool, [&] { return real_fn(dptr, n, pool, st); },
      [&] {
        const FreeAsyncFn free_fn = hook::RealFn<FreeAsyncFn>(free_api);
        if (free_fn != nullptr) free_fn(*dptr, st);
      });
}

// Whether d is the start of a host pool's allocation (its region in *reg).
bool HostPoolBlock(CUdeviceptr d, Region* reg) {
  return g_allocations.Lookup(d, reg) && reg->start == d && reg->kind == MemKind::kPoolHost;
}

CUresult FreeAsync(Api api, CUdeviceptr d, CUstream st) {
  const FreeAsyncFn real_fn = hook::RealFn<FreeAsyncFn>(api);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, d, st);
  const hook::HookScope scope;
  const uint64_t start_ns = hook::StartTime();
  Region reg;
  const bool host_pool = HostPoolBlock(d, &reg);
  CUresult r = real_fn(d, st);
  if (r == CUDA_SUCCESS) g_allocations.Remove(d, nullptr);
  if (host_pool) HostPoolFree(api, reg, start_ns, r, /*stream_ordered=*/true);
  return r;
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"
using pinshim::hook::StartTime;

extern "C" {

// --- device and managed allocations ------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t n) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemAlloc_v2);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, dptr, n);
  const hook::HookScope scope;
  CUresult r = real_fn(dptr, n);
  RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);
  return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int elem) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemAllocPitch_v2);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, dptr, pitch, width, height, elem);
  const hook::HookScope scope;
  CUresult r = real_fn(dptr, pitch, width, height, elem);
  if (r == CUDA_SUCCESS && pitch != nullptr) {
    RecordDeviceAlloc(dptr, uint64_t{*pitch} * height, MemKind::kDevice, r);
  }
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t n, unsigned int flags) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemAllocManaged);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, dptr, n, flags);
  const hook::HookScope scope;
  CUresult r = real_fn(dptr, n, flags);
  RecordDeviceAlloc(dptr, n, MemKind::kManaged, r);
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr d) {
  using Fn = CUresult (*)(CUdeviceptr);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemFree_v2);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, d);
  const hook::HookScope scope;
  const uint64_t start_ns = StartTime();
  Region reg;
  const bool host_pool = HostPoolBlock(d, &reg);
  CUresult r = real_fn(d);
  if (r == CUDA_SUCCESS) g_allocations.Remove(d, nullptr);
  // A host pool's allocation (legal here too) is freed without waiting for
  // the device (documented): counted as the pool's free, and no completion
  // point.
  if (host_pool) {
    HostPoolFree(kApi_cuMemFree_v2, reg, start_ns, r, /*stream_ordered=*/false);
    return r;
  }
  // The driver waited for the device's queued work first (measured): a
  // completion point for the trace.
  hook::RecordDriverWait(kApi_cuMemFree_v2, start_ns, r);
  return r;
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t n, CUstream st) {
  return AllocAsync(kApi_cuMemAllocAsync, dptr, n, st);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t n, CUstream st) {
  return AllocAsync(kApi_cuMemAllocAsync_ptsz, dptr, n, st);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t n, CUmemoryPool pool, CUstream st) {
  return AllocFromPoolAsync(kApi_cuMemAllocFromPoolAsync, dptr, n, pool, st, kApi_cuMemFreeAsync);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t n, CUmemoryPool pool, CUstream st) {
  return AllocFromPoolAsync(kApi_cuMemAllocFromPoolAsync_ptsz, dptr, n, pool, st,
                            kApi_cuMemFreeAsync_ptsz);
}
CUresult cuMemFreeAsync(CUdeviceptr d, CUstream st) {
  return FreeAsync(kApi_cuMemFreeAsync, d, st);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream st) {
  return FreeAsync(kApi_cuMemFreeAsync_ptsz, d, st);
}

}  // extern "C"
