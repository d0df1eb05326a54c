// Pinned host memory made without cuMemHostAlloc: host-located allocations
// of the virtual memory management API (cuMemCreate, cuMemMap, ...: how
// NCCL maps its cuMem host buffers) and host memory pools (cuMemPoolCreate
// with a host location, then cuMemAllocFromPoolAsync: CUDA 12.6+ pinned
// pools). The registry sees a VMM host allocation where cuMemMap maps it
// (MemKind::kVmmHost, until cuMemUnmap) and a pool's allocation where it
// lies (MemKind::kPoolHost, until cuMemFreeAsync), so copies of either are
// counted as pinned and optimize mode leaves them to the driver. Enforce
// mode charges a VMM host allocation at cuMemCreate, until its memory goes:
// at the cuMemRelease of its last reference (cuMemRetainAllocationHandle
// adds one) or, released while mapped, at its last cuMemUnmap. It charges
// a host pool's reservation as it grows, which is by much more than the
// allocation that makes it grow (resynchronized with the driver's count,
// RESERVED_MEM_CURRENT, at each pool call pinshim sees), until a trim gives
// it back or the pool is destroyed and its last allocation freed.
//
// Every call here runs the driver behind the re-entry guard, so the
// mappings the driver makes inside it never enter the registry as the
// program's (the guard is why cuMemAddressReserve, cuMemAddressFree and
// cuMemSetAccess are wrapped at all).
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "shim/budget/budget.h"
#include "shim/core/log.h"
#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/state.h"
#include "shim/hooks/vmm_tables.h"
#include "shim/trace/recorder.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace {

using budget::Budget;
using budget::Decision;
using budget::Owner;
using hook::StartTime;

VmmHandleTable g_handles;  // host-located physical allocations
VmmHandleTable g_maps;     // their mappings, by address; bytes: the handle mapped
VmmHandleTable g_pools;    // host memory pools; bytes: what is charged for each
VmmHandleTable g_blocks;   // host pools' live allocations, by address; bytes: the pool

// What a host pool is expected to grow by when a request does not fit what
// it reserved: what the driver reserved at a pool's first allocation on the
// GPU host (bench/RESULTS.md, "2026-12-06: VMM host memory and host pools on
// the GPU host"). Charged before the call, so that a growth over budget is
// denied before the driver reserves anything; the charge then follows what
// the driver reports.
constexpr uint64_t kPoolGrowthEstimate = uint64_t{32} << 20;

void RecordVmmPin(Api api, PinOp op, uintptr_t p, uint64_t bytes, uint64_t start_ns, CUresult r,
                  uint32_t flags = 0) {
  if (start_ns == 0) return;
  PinEvent e;
  e.api = api;
  e.op = op;
  e.ptr = reinterpret_cast<void*>(p);
  e.bytes = bytes;
  e.flags = flags;
  e.start_ns = start_ns;
  e.end_ns = MonotonicNs();
  e.result = r;
  trace::RecordPin(e, hook::CurrentDevice());
}

bool HostLocation(const CUmemLocation& l) {
  return l.type == CU_MEM_LOCATION_TYPE_HOST || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

bool HostAllocationProp(const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         HostLocation(prop->location);
}

// Whether a handle pinshim did not see made (imported, or made before it
// was loaded) is of host memory: the driver's own answer.
bool DriverSaysHostHandle(CUmemGenericAllocationHandle handle) {
  using Fn = CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle);
  static std::atomic<void*> fn_cache{nullptr};
  auto fn = hook::LazyDriverSymbol<Fn>(&fn_cache, "cuMemGetAllocationPropertiesFromHandle");
  CUmemAllocationProp prop{};
  return fn != nullptr && fn(&prop, handle) == CUDA_SUCCESS && HostAllocationProp(&prop);
}

// Enforce mode's fallback policy serves pageable memory in place of pinned,
// which a physical handle or a pool cannot be: it refuses instead, and says
// so once.
Decision RefuseFallback(Decision d) {
  if (d != Decision::kFallback) return d;
  static std::atomic<bool> said{false};
  if (!said.exchange(true, std::memory_order_relaxed)) {
    LogLine(
        "enforce: the fallback policy cannot serve pageable memory for VMM host "
        "allocations or host memory pools; over budget they are denied "
        "(CUDA_ERROR_OUT_OF_MEMORY)");
  }
  return Decision::kDenied;
}

budget::Budget* EnforceBudget(bool valid) {
  return g_enforce && valid ? &Budget::Process() : nullptr;
}

// A pool's statistic, asked of the driver directly; 0 if it cannot answer.
uint64_t PoolAttribute(CUmemoryPool pool, CUmemPool_attribute attr) {
  using Fn = CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*);
  static std::atomic<void*> fn_cache{nullptr};
  auto fn = hook::LazyDriverSymbol<Fn>(&fn_cache, "cuMemPoolGetAttribute");
  cuuint64_t value = 0;
  if (fn == nullptr || fn(pool, attr, &value) != CUDA_SUCCESS) return 0;
  return value;
}

uint64_t PoolReserved(CUmemoryPool pool) {
  return PoolAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}

// Makes the pool's charge what the driver says it reserves now, where that
// is less (a trim, a destroy, or memory the driver gave back at a
// synchronization). Growth is charged before the call that grows it.
void ReleasePoolSurplus(CUmemoryPool pool, uint64_t reserved) {
  const uint64_t key = reinterpret_cast<uintptr_t>(pool);
  uint64_t charged;
  if (!g_pools.Find(key, &charged) || reserved >= charged) return;
  g_pools.SetBytes(key, reserved);
  if (g_enforce) Budget::Process().Release(Owner::kProgramPool, charged - reserved);
}

// Forgets a handle or pool whose memory went (counts both 0); returns what
// was charged for it, for the caller to release.
uint64_t EndIfUnused(VmmHandleTable& table, uint64_t key, const VmmHandleTable::Counts& c,
                     bool charged) {
  if (!c.Unused()) return 0;
  table.Erase(key);
  return charged && g_enforce ? c.bytes : 0;
}

void ReleaseCharge(Owner owner, uint64_t bytes) {
  if (bytes != 0) Budget::Process().Release(owner, bytes);
}

// What one cuMemUnmap took away.
struct Unmapped {
  int mappings = 0;
  uint64_t uncharge = 0;  // the charges of handles whose memory went with it
};

// One mapping of a host handle went: counted, and the handle's memory goes
// with its last mapping once its references are released. Runs under the
// registry's lock (RemoveSpan's callback): lock-free tables and counters
// only; the budget is told afterwards.
void UnmappedPart(void* arg, const Region& part) {
  if (part.kind != MemKind::kVmmHost) return;
  Unmapped* u = static_cast<Unmapped*>(arg);
  ++u->mappings;
  CountPin(kApi_cuMemUnmap, PinOp::kFree, 0, part.bytes, false, LivePin::kNone);
  uint64_t handle;
  if (!g_maps.Find(part.start, &handle)) return;
  g_maps.Erase(part.start);
  VmmHandleTable::Counts c;
  if (g_handles.Adjust(handle, 0, -1, &c))
    u->uncharge += EndIfUnused(g_handles, handle, c, c.charged);
}

}  // namespace

bool IsHostPool(CUmemoryPool pool) {
  uint64_t charged;
  return pool != nullptr && g_pools.Find(reinterpret_cast<uintptr_t>(pool), &charged);
}

}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"

extern "C" {

// --- VMM host allocations ----------------------------------------------------

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  using Fn = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                          unsigned long long);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemCreate);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, handle, size, prop, flags);
  const hook::HookScope scope;
  if (!HostAllocationProp(prop)) return real_fn(handle, size, prop, flags);
  const bool valid = handle != nullptr && size != 0 && flags == 0;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  const Decision d =
      RefuseFallback(budget::ChargeAndPin(EnforceBudget(valid), Owner::kProgramVmm, size, [&] {
        r = real_fn(handle, size, prop, flags);
        return r == CUDA_SUCCESS;
      }));
  if (d == Decision::kDenied) r = CUDA_ERROR_OUT_OF_MEMORY;
  // A handle the full table cannot hold is released from the budget now
  // rather than never.
  if (r == CUDA_SUCCESS && !g_handles.Insert(*handle, size, g_enforce && valid) && g_enforce &&
      valid) {
    Budget::Process().Release(Owner::kProgramVmm, size);
  }
  CountPin(kApi_cuMemCreate, PinOp::kAlloc, 0, size, r != CUDA_SUCCESS, LivePin::kVmmHost);
  return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  using Fn = CUresult (*)(CUmemGenericAllocationHandle);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemRelease);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, handle);
  const hook::HookScope scope;
  uint64_t bytes = 0;
  const bool known = g_handles.Find(handle, &bytes);
  CUresult r = real_fn(handle);
  if (known && r != CUDA_SUCCESS && bytes != 0) {
    CountPin(kApi_cuMemRelease, PinOp::kFree, 0, bytes, true, LivePin::kVmmHost);
  }
  VmmHandleTable::Counts c;
  if (!known || r != CUDA_SUCCESS || !g_handles.Adjust(handle, -1, 0, &c)) return r;
  // The release of its last reference ends the handle, once (an imported
  // one, bytes 0, was not counted as pinned here); its memory goes now or
  // with its last mapping.
  if (c.holds == 0 && bytes != 0 && g_handles.EndOnce(handle)) {
    CountPin(kApi_cuMemRelease, PinOp::kFree, 0, bytes, false, LivePin::kVmmHost);
  }
  ReleaseCharge(Owner::kProgramVmm, EndIfUnused(g_handles, handle, c, c.charged));
  return r;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  using Fn = CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemImportFromShareableHandle);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, handle, os_handle, type);
  const hook::HookScope scope;
  CUresult r = real_fn(handle, os_handle, type);
  // The exporter pinned it (and, under enforce, was charged for it): the
  // importer knows it as pinned, uncharged. Its size is learnt at cuMemMap.
  if (r == CUDA_SUCCESS && handle != nullptr && DriverSaysHostHandle(*handle)) {
    g_handles.Insert(*handle, 0, false);
  }
  return r;
}

// Each retained reference is one more hold on the handle, which its own
// cuMemRelease gives back.
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  using Fn = CUresult (*)(CUmemGenericAllocationHandle*, void*);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemRetainAllocationHandle);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, handle, addr);
  const hook::HookScope scope;
  CUresult r = real_fn(handle, addr);
  VmmHandleTable::Counts c;
  if (r == CUDA_SUCCESS && handle != nullptr) g_handles.Adjust(*handle, 1, 0, &c);
  return r;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemAddressReserve);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, ptr, size, alignment, addr, flags);
  const hook::HookScope scope;
  return real_fn(ptr, size, alignment, addr, flags);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  using Fn = CUresult (*)(CUdeviceptr, size_t);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemAddressFree);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, ptr, size);
  const hook::HookScope scope;
  return real_fn(ptr, size);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  using Fn =
      CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemMap);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, ptr, size, offset, handle, flags);
  const hook::HookScope scope;
  const uint64_t start_ns = StartTime();
  uint64_t bytes;
  bool host = g_handles.Find(handle, &bytes);
  CUresult r = real_fn(ptr, size, offset, handle, flags);
  if (r != CUDA_SUCCESS) {
    if (host) CountPin(kApi_cuMemMap, PinOp::kAlloc, 0, size, true, LivePin::kNone);
    return r;
  }
  if (!host && DriverSaysHostHandle(handle)) {
    host = true;
    g_handles.Insert(handle, 0, false);
  }
  if (!host) return r;
  VmmHandleTable::Counts c;
  if (g_handles.Adjust(handle, 0, 1, &c)) g_maps.Insert(ptr, handle, false, 0);
  Region reg;
  reg.start = ptr;
  reg.bytes = size;
  reg.id = NextAllocId();
  reg.kind = MemKind::kVmmHost;
  reg.source = kSourceDriver;
  g_allocations.Insert(reg);
  CountPin(kApi_cuMemMap, PinOp::kAlloc, 0, size, false, LivePin::kNone);
  RecordVmmPin(kApi_cuMemMap, PinOp::kAlloc, ptr, size, start_ns, r);
  return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  using Fn = CUresult (*)(CUdeviceptr, size_t);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemUnmap);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, ptr, size);
  const hook::HookScope scope;
  const uint64_t start_ns = StartTime();
  // Only the program's VMM host mappings lie in its reservations' address
  // space (the driver's own calls run behind the guard).
  const bool host = size != 0 && g_allocations.AnyOverlapping(ptr, size);
  // The driver unmaps it: no page of it may stay guarded (recorder.h).
  if (host) trace::DisarmWcGuardFor(reinterpret_cast<void*>(ptr), size);
  CUresult r = real_fn(ptr, size);
  if (!host) return r;
  // One range may hold several mappings (side by side, or with gaps): each
  // is counted, and each ends its use of its handle.
  Unmapped gone;
  if (r == CUDA_SUCCESS) g_allocations.RemoveSpan(ptr, size, UnmappedPart, &gone);
  ReleaseCharge(Owner::kProgramVmm, gone.uncharge);
  if (r != CUDA_SUCCESS) CountPin(kApi_cuMemUnmap, PinOp::kFree, 0, size, true, LivePin::kNone);
  if (r != CUDA_SUCCESS || gone.mappings != 0) {
    RecordVmmPin(kApi_cuMemUnmap, PinOp::kFree, ptr, size, start_ns, r);
  }
  return r;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  using Fn = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemSetAccess);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, ptr, size, desc, count);
  const hook::HookScope scope;
  return real_fn(ptr, size, desc, count);
}

// --- host memory pools --------------------------------------------------------

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  using Fn = CUresult (*)(CUmemoryPool*, const CUmemPoolProps*);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemPoolCreate);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, pool, props);
  const hook::HookScope scope;
  CUresult r = real_fn(pool, props);
  if (r == CUDA_SUCCESS && pool != nullptr && props != nullptr && HostLocation(props->location)) {
    g_pools.Insert(reinterpret_cast<uintptr_t>(*pool), 0, false);
  }
  return r;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  using Fn = CUresult (*)(CUmemoryPool);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemPoolDestroy);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, pool);
  const hook::HookScope scope;
  const uint64_t key = reinterpret_cast<uintptr_t>(pool);
  CUresult r = real_fn(pool);
  // The driver gives the pool's memory back once its last allocation is
  // freed (documented): the charge goes then, or now if none is left.
  VmmHandleTable::Counts c;
  if (r == CUDA_SUCCESS && g_pools.Adjust(key, -1, 0, &c)) {
    ReleaseCharge(Owner::kProgramPool, EndIfUnused(g_pools, key, c, true));
  }
  return r;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  using Fn = CUresult (*)(CUmemoryPool, size_t);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemPoolTrimTo);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, pool, keep);
  const hook::HookScope scope;
  CUresult r = real_fn(pool, keep);
  if (r == CUDA_SUCCESS && IsHostPool(pool)) ReleasePoolSurplus(pool, PoolReserved(pool));
  return r;
}

}  // extern "C"

namespace pinshim {

// cuMemAllocFromPoolAsync on a host pool (device_memory_hooks.cc calls it):
// the growth the request needs is charged first (what the pool has free
// serves it without growing; a pool that must grow is expected to grow by
// kPoolGrowthEstimate at least), then the charge is set to what the driver
// reports reserved: the difference charged if the pool grew by more, the
// surplus released if by less.
CUresult HostPoolAlloc(Api api, CUdeviceptr* dptr, size_t n, CUmemoryPool pool,
                       const FunctionRef<CUresult()>& real_call, const FunctionRef<void()>& undo) {
  const uint64_t key = reinterpret_cast<uintptr_t>(pool);
  const uint64_t start_ns = StartTime();
  uint64_t charged = 0;
  g_pools.Find(key, &charged);
  const uint64_t reserved = PoolReserved(pool);
  const uint64_t used = PoolAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  const uint64_t shortfall = used + n > reserved ? used + n - reserved : 0;
  const uint64_t need = shortfall == 0 ? 0 : std::max(shortfall, kPoolGrowthEstimate);
  const bool valid = dptr != nullptr && n != 0;
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  Decision d = RefuseFallback(budget::ChargeAndPin(need != 0 ? EnforceBudget(valid) : nullptr,
                                                   Owner::kProgramPool, need, [&] {
                                                     r = real_call();
                                                     return r == CUDA_SUCCESS;
                                                   }));
  if (d == Decision::kDenied) r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS && g_enforce && need != 0) charged += need;
  if (r == CUDA_SUCCESS && g_enforce) {
    const uint64_t now = PoolReserved(pool);
    if (now > charged) {
      if (RefuseFallback(Budget::Process().Charge(Owner::kProgramPool, now - charged)) ==
          Decision::kGranted) {
        charged = now;
      } else {
        undo();  // the pool grew past the budget: the call fails as a denied one
        r = CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
  }
  g_pools.SetBytes(key, charged);
  if (r == CUDA_SUCCESS && g_enforce) ReleasePoolSurplus(pool, PoolReserved(pool));
  if (r == CUDA_SUCCESS) {
    Region reg;
    reg.start = *dptr;
    reg.bytes = n;
    reg.id = NextAllocId();
    reg.kind = MemKind::kPoolHost;
    reg.source = kSourceDriver;
    g_allocations.Insert(reg);
    VmmHandleTable::Counts c;
    if (g_pools.Adjust(key, 0, 1, &c)) g_blocks.Insert(*dptr, key, false, 0);
  }
  CountPin(api, PinOp::kAlloc, 0, n, r != CUDA_SUCCESS, LivePin::kHostPool);
  RecordVmmPin(api, PinOp::kAlloc, r == CUDA_SUCCESS ? *dptr : 0, n, start_ns, r);
  return r;
}

// cuMemFreeAsync or cuMemFree of a host-pool allocation
// (device_memory_hooks.cc).
void HostPoolFree(Api api, const Region& r, uint64_t start_ns, CUresult result,
                  bool stream_ordered) {
  CountPin(api, PinOp::kFree, 0, r.bytes, result != CUDA_SUCCESS, LivePin::kHostPool);
  RecordVmmPin(api, PinOp::kFree, r.start, r.bytes, start_ns, result,
               stream_ordered ? trace::kPinFlagStreamOrdered : 0);
  uint64_t pool;
  if (result != CUDA_SUCCESS || !g_blocks.Find(r.start, &pool)) return;
  g_blocks.Erase(r.start);
  VmmHandleTable::Counts c;
  if (g_pools.Adjust(pool, 0, -1, &c)) {
    ReleaseCharge(Owner::kProgramPool, EndIfUnused(g_pools, pool, c, true));
  }
}

}  // namespace pinshim
