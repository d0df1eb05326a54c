// Device, managed and page-locked host memory, pointer classification and
// pointer attributes.
//
// Device memory lives in its own reserved address range that the host can
// never touch: the bytes of a device allocation sit at the same offset in a
// second, hidden range, so dereferencing a device pointer on the host faults
// as it does with a real GPU. Managed memory is mapped at its device address
// (the host may use it). Page-locked host memory comes straight from mmap
// (shared anonymous memory, as the driver's is), and its pages, like those of
// registered memory, are pinned (pinning.h): copies move the bytes of the
// pages that were pinned, not of whatever the address maps later.
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"
#include "tests/fakecuda/pinning.h"

namespace fakecuda {
namespace {

namespace behavior = ::fakecuda::behavior;

constexpr int kAnonymous = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

// Rounds up; false on overflow.
bool RoundUp(size_t n, size_t align, size_t* out) {
  if (n > SIZE_MAX - (align - 1)) return false;
  *out = (n + align - 1) / align * align;
  return true;
}

bool InArena(const State& s, uintptr_t p) {
  return s.arena_size != 0 && p >= s.dev_base && p - s.dev_base < s.arena_size;
}

// The entry of `ranges` whose [base, base + max(size, 1)) holds p.
template <typename Map>
typename Map::mapped_type* FindContaining(Map& ranges, uintptr_t p) {
  auto it = ranges.upper_bound(p);
  if (it == ranges.begin()) return nullptr;
  --it;
  size_t size = it->second.size == 0 ? 1 : it->second.size;
  return p - it->first < size ? &it->second : nullptr;
}

}  // namespace

bool StillHeldLocked(const HeldPages* held, uintptr_t p) {
  State& s = S();
  const HostRange* range = FindContaining(s.registrations, p);
  if (range == nullptr) range = FindContaining(s.host_allocs, p);
  return range != nullptr && range->held.get() == held;
}

namespace {

// Whether [p, p + len) ends within the range starting at `base` of `size`.
bool Fits(uintptr_t base, size_t size, uintptr_t p, size_t len) { return len <= size - (p - base); }

bool Overlaps(const std::map<uintptr_t, HostRange>& ranges, uintptr_t lo, uintptr_t hi) {
  auto it = ranges.upper_bound(lo);
  if (it != ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > lo) return true;
  }
  return it != ranges.end() && it->first < hi;
}

// First fit in the device arena; lengths are page multiples.
bool ArenaTake(State& s, size_t len, size_t* offset) {
  for (auto it = s.arena_free.begin(); it != s.arena_free.end(); ++it) {
    if (it->second < len) continue;
    *offset = it->first;
    size_t rest = it->second - len;
    s.arena_free.erase(it);
    if (rest != 0) s.arena_free[*offset + len] = rest;
    return true;
  }
  return false;
}

void ArenaGive(State& s, size_t offset, size_t len) {
  auto next = s.arena_free.lower_bound(offset);
  if (next != s.arena_free.end() && offset + len == next->first) {
    len += next->second;
    next = s.arena_free.erase(next);
  }
  if (next != s.arena_free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += len;
      return;
    }
  }
  s.arena_free[offset] = len;
}

CUresult AllocateDevice(size_t size, bool managed, CUdeviceptr* out) {
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  if (out == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t mapped;
  if (!RoundUp(size, s.page, &mapped) || mapped > SIZE_MAX - s.page) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  size_t& used = s.device_used[ctx->device];
  if (!managed && size > behavior::kDeviceTotalMem - used) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t arena_len = mapped + s.page;  // A guard page after each allocation.
  size_t offset;
  if (!ArenaTake(s, arena_len, &offset)) return CUDA_ERROR_OUT_OF_MEMORY;
  const uintptr_t base = s.dev_base + offset;
  void* backing = reinterpret_cast<void*>(managed ? base : s.shadow_base + offset);
  if (mmap(backing, mapped, PROT_READ | PROT_WRITE, kAnonymous | MAP_FIXED, -1, 0) == MAP_FAILED) {
    ArenaGive(s, offset, arena_len);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  DeviceAlloc& alloc = s.device_allocs[base];
  alloc.base = base;
  alloc.size = size;
  alloc.mapped = mapped;
  alloc.arena_len = arena_len;
  alloc.view = static_cast<char*>(backing);
  alloc.ctx = ctx;
  alloc.managed = managed;
  alloc.id = s.next_buffer_id++;
  if (!managed) used += size;
  *out = base;
  return CUDA_SUCCESS;
}

// Unmaps and forgets one device allocation. State::mu held.
void ReleaseDeviceLocked(State& s, std::map<uintptr_t, DeviceAlloc>::iterator it) {
  const DeviceAlloc& alloc = it->second;
  mmap(alloc.view, alloc.mapped, PROT_NONE, kAnonymous | MAP_FIXED, -1, 0);
  ArenaGive(s, alloc.base - s.dev_base, alloc.arena_len);
  if (!alloc.managed) s.device_used[alloc.ctx->device] -= alloc.size;
  s.device_allocs.erase(it);
}

CUresult FreeDevice(CUdeviceptr dptr) {
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  if (dptr == 0) return behavior::kFreeNull;
  State& s = S();
  bool device;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    device = s.device_allocs.count(dptr) != 0;
  }
  // A pool's allocation is freed without waiting (documented).
  if (!device) return FreePoolBlock(dptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  // cuMemFree synchronizes: work still using the memory finishes first.
  WaitAllStreamsIdle();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.device_allocs.find(dptr);
  if (it == s.device_allocs.end()) return CUDA_ERROR_INVALID_VALUE;  // Lost a race.
  ReleaseDeviceLocked(s, it);
  return CUDA_SUCCESS;
}

CUresult AllocateHost(void** pp, size_t bytesize, unsigned flags) {
  if (CUresult err = RefuseDuringCapture()) return err;
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  constexpr unsigned kKnown =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == nullptr || (flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytesize == 0 && !behavior::kHostAllocZeroSizeSucceeds) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  size_t mapped;
  if (!RoundUp(bytesize == 0 ? 1 : bytesize, s.page, &mapped)) return CUDA_ERROR_OUT_OF_MEMORY;
  const int sharing = behavior::kHostAllocIsSharedMemory ? MAP_SHARED : MAP_PRIVATE;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, sharing | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::shared_ptr<HeldPages> held = HoldPages(reinterpret_cast<uintptr_t>(p), mapped);
  std::lock_guard<std::mutex> lock(s.mu);
  const auto base = reinterpret_cast<uintptr_t>(p);
  // A registration left behind on memory the program unmapped cannot be told
  // from this new mapping; the allocation wins.
  s.registrations.erase(s.registrations.lower_bound(base),
                        s.registrations.lower_bound(base + mapped));
  HostRange& range = s.host_allocs[base];
  range.base = base;
  range.size = bytesize;
  range.mapped = mapped;
  range.flags = flags;
  range.ctx = ctx;
  range.id = s.next_buffer_id++;
  range.held = std::move(held);
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult RegisterHost(void* p, size_t bytesize, unsigned flags) {
  if (CUresult err = RefuseDuringCapture()) return err;
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  constexpr unsigned kKnown = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                              CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == nullptr || bytesize == 0 || (flags & ~kKnown) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CU_MEMHOSTREGISTER_IOMEMORY) return behavior::kRegisterIoMemory;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p);
  if (bytesize > UINTPTR_MAX - lo) return CUDA_ERROR_INVALID_VALUE;
  const uintptr_t hi = lo + bytesize;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.arena_size != 0 && lo < s.dev_base + s.arena_size && hi > s.dev_base) {
    return CUDA_ERROR_INVALID_VALUE;  // Device addresses are not host memory.
  }
  // Host-pool memory (not measured) is taken to answer as VMM host memory.
  if (Overlaps(s.vmm_host, lo, hi)) return behavior::kRegisterVmmHost;
  if (Overlaps(s.registrations, lo, hi) || Overlaps(s.host_allocs, lo, hi)) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  // The pages must exist; msync fails with ENOMEM on any unmapped page.
  const uintptr_t first = lo / s.page * s.page;
  const uintptr_t last = (hi + s.page - 1) / s.page * s.page;
  if (msync(reinterpret_cast<void*>(first), last - first, MS_ASYNC) != 0 && errno == ENOMEM) {
    return behavior::kRegisterUnmapped;
  }
  // The driver pins the pages that back the range now; later copies through
  // the registration move those pages' bytes.
  std::shared_ptr<HeldPages> held = HoldPages(lo, bytesize);
  HostRange& range = s.registrations[lo];
  range.base = lo;
  range.size = bytesize;
  range.flags = flags;
  range.ctx = ctx;
  range.id = s.next_buffer_id++;
  range.held = std::move(held);
  return CUDA_SUCCESS;
}

// What the driver knows about the allocation holding `p`.
struct PointerInfo {
  bool known = false;
  bool device = false;  // Device or managed allocation (vs page-locked host).
  bool managed = false;
  uintptr_t base = 0;
  size_t size = 0;
  Context* ctx = nullptr;
  uint64_t id = 0;
  // Host-pool allocations: the pool, and the allocation's own start and size
  // (base and size are its pool's reservation).
  CUmemoryPool pool = nullptr;
  uintptr_t block = 0;
  size_t block_size = 0;
};

PointerInfo Describe(State& s, uintptr_t p) {
  PointerInfo info;
  if (InArena(s, p)) {
    if (DeviceAlloc* alloc = FindContaining(s.device_allocs, p)) {
      info = {true, true, alloc->managed, alloc->base, alloc->size, alloc->ctx, alloc->id};
    }
    return info;
  }
  HostRange* range = FindContaining(s.host_allocs, p);
  if (range == nullptr) range = FindContaining(s.registrations, p);
  if (range == nullptr) range = FindContaining(s.vmm_host, p);
  if (range != nullptr)
    info = {true, false, false, range->base, range->size, range->ctx, range->id};
  if (range != nullptr && range->pool != nullptr &&
      PoolBlockLocked(s, range->pool, p, &info.block, &info.block_size)) {
    info.pool = range->pool;
  }
  return info;
}

// RANGE_START_ADDR and RANGE_SIZE: a host-pool allocation's are its
// reservation's start and its own size (driver_behavior.h).
uintptr_t RangeStart(const PointerInfo& info) {
  if (info.pool == nullptr || behavior::kPoolRangeStartIsReservation) return info.base;
  return info.block;
}

size_t RangeSize(const PointerInfo& info) {
  return info.pool != nullptr ? info.block_size : info.size;
}

template <typename T>
void Put(void* data, T value) {
  std::memcpy(data, &value, sizeof(value));
}

// Writes one attribute of `info` (all zeros for pointers the driver does not
// know, which is what cuPointerGetAttributes reports for them). `strict`
// (cuPointerGetAttribute) refuses a host pointer for device-only memory.
CUresult WriteAttribute(const PointerInfo& info, CUpointer_attribute attribute, uintptr_t ptr,
                        void* data, bool strict) {
  using Bool = behavior::PointerAttrBool;
  const bool k = info.known;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      Put(data, k ? reinterpret_cast<CUcontext>(info.ctx) : nullptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: {
      unsigned type = 0;
      if (k) {
        type = info.managed ? behavior::kManagedMemoryType
                            : (info.device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
      }
      Put(data, type);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      Put(data, static_cast<CUdeviceptr>(k ? ptr : 0));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (strict && info.device && !info.managed) return CUDA_ERROR_INVALID_VALUE;
      // Measured on the H200 (driver 580): for memory it does not know, the
      // driver's cuPointerGetAttributes answers the pointer itself.
      Put(data, !k || !info.device || info.managed ? reinterpret_cast<void*>(ptr) : nullptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: Put(data, Bool{0}); return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      Put(data, static_cast<unsigned long long>(info.id));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: Put(data, Bool{info.managed}); return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      Put(data, k && info.ctx != nullptr ? info.ctx->device : -2);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      Put(data, Bool{info.device && !info.managed});
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      // Measured on the H200 (driver 580): left unwritten for memory the
      // driver does not know.
      if (k) Put(data, static_cast<CUdeviceptr>(RangeStart(info)));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (k) Put(data, RangeSize(info));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      Put(data, static_cast<CUdeviceptr>(info.base));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: Put(data, info.size); return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: Put(data, Bool{k}); return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: Put(data, 0ull); return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      Put(data, static_cast<unsigned>(k ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                                        : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: Put(data, info.pool); return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

CUresult ReserveArena(State& s) {
  if (s.arena_size == 0) {
    // Large enough never to run out in a test, cheap because nothing in it
    // is committed until allocated. Smaller sizes if the address space is tight.
    for (size_t size : {size_t{1} << 40, size_t{1} << 38, size_t{1} << 36, size_t{1} << 34,
                        size_t{1} << 32, size_t{1} << 30}) {
      void* dev = mmap(nullptr, size, PROT_NONE, kAnonymous, -1, 0);
      if (dev == MAP_FAILED) continue;
      void* shadow = mmap(nullptr, size, PROT_NONE, kAnonymous, -1, 0);
      if (shadow == MAP_FAILED) {
        munmap(dev, size);
        continue;
      }
      s.dev_base = reinterpret_cast<uintptr_t>(dev);
      s.shadow_base = reinterpret_cast<uintptr_t>(shadow);
      s.arena_size = size;
      break;
    }
    if (s.arena_size == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (!s.arena_ready) {
    s.arena_free.clear();
    s.arena_free[0] = s.arena_size;
    s.arena_ready = true;
  }
  return CUDA_SUCCESS;
}

void ReleaseContextMemory(Context* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto it = s.device_allocs.begin(); it != s.device_allocs.end();) {
    auto next = std::next(it);
    if (it->second.ctx == ctx) ReleaseDeviceLocked(s, it);
    it = next;
  }
  for (auto it = s.host_allocs.begin(); it != s.host_allocs.end();) {
    const HostRange& range = it->second;
    if (range.ctx != ctx) {
      ++it;
      continue;
    }
    void* base = reinterpret_cast<void*>(range.base);
    if (behavior::kFreedContextHostPagesStayReserved) {
      mmap(base, range.mapped, PROT_NONE, kAnonymous | MAP_FIXED, -1, 0);
    } else {
      munmap(base, range.mapped);
    }
    it = s.host_allocs.erase(it);
  }
  if (behavior::kDestroyedContextDropsRegistrations) {
    for (auto it = s.registrations.begin(); it != s.registrations.end();) {
      it = it->second.ctx == ctx ? s.registrations.erase(it) : std::next(it);
    }
  }
}

CUresult ResolveHostRange(const void* p, size_t len, Span* out) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (p == nullptr || len > UINTPTR_MAX - a) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (InArena(s, a)) {
    DeviceAlloc* alloc = FindContaining(s.device_allocs, a);
    if (alloc == nullptr || !alloc->managed || !Fits(alloc->base, alloc->size, a, len)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *out = {alloc->view + (a - alloc->base), MemKind::kManaged};
    return CUDA_SUCCESS;
  }
  HostRange* range = FindContaining(s.host_allocs, a);
  if (range == nullptr) range = FindContaining(s.registrations, a);
  if (range == nullptr) range = FindContaining(s.vmm_host, a);
  if (range != nullptr && !Fits(range->base, range->size, a, len) &&
      !VmmRunCoversLocked(s, *range, a, len)) {
    return behavior::kCopyPastPageLockedEnd;
  }
  const bool pinned = range != nullptr;
  char* bytes = pinned && range->view != nullptr ? range->view + (a - range->base)
                                                 : const_cast<char*>(static_cast<const char*>(p));
  *out = {bytes, pinned ? MemKind::kPinned : MemKind::kPageable, pinned ? range->held : nullptr};
  return CUDA_SUCCESS;
}

CUresult ResolveDeviceRange(CUdeviceptr p, size_t len, Span* out) {
  if (p == 0 || len > UINTPTR_MAX - p) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (InArena(s, p)) {
    DeviceAlloc* alloc = FindContaining(s.device_allocs, p);
    if (alloc == nullptr || !Fits(alloc->base, alloc->size, p, len))
      return CUDA_ERROR_INVALID_VALUE;
    *out = {alloc->view + (p - alloc->base), alloc->managed ? MemKind::kManaged : MemKind::kDevice};
    return CUDA_SUCCESS;
  }
  // Unified addressing: page-locked host memory is device-accessible as is.
  HostRange* range = FindContaining(s.host_allocs, p);
  if (range == nullptr) range = FindContaining(s.registrations, p);
  if (range == nullptr) range = FindContaining(s.vmm_host, p);
  if (range == nullptr ||
      (!Fits(range->base, range->size, p, len) && !VmmRunCoversLocked(s, *range, p, len))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  char* bytes =
      range->view != nullptr ? range->view + (p - range->base) : reinterpret_cast<char*>(p);
  *out = {bytes, MemKind::kPinned, range->held};
  return CUDA_SUCCESS;
}

CUresult ResolveUnifiedRange(CUdeviceptr p, size_t len, Span* out) {
  if (p == 0) return CUDA_ERROR_INVALID_VALUE;
  bool device;
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    device = InArena(s, p);
  }
  return device ? ResolveDeviceRange(p, len, out)
                : ResolveHostRange(reinterpret_cast<const void*>(p), len, out);
}

}  // namespace fakecuda

using fakecuda::Context;
using fakecuda::HostRange;
using fakecuda::S;
using fakecuda::State;
namespace behavior = fakecuda::behavior;

extern "C" {

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  FAKECUDA_ENTER("cuMemAlloc");
  return fakecuda::AllocateDevice(bytesize, /*managed=*/false, dptr);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
  FAKECUDA_ENTER("cuMemAllocPitch");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t pitch;
  if (!fakecuda::RoundUp(WidthInBytes, behavior::kPitchAlignment, &pitch) ||
      Height > SIZE_MAX / pitch) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult err = fakecuda::AllocateDevice(pitch * Height, /*managed=*/false, dptr);
  if (err == CUDA_SUCCESS) *pPitch = pitch;
  return err;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  FAKECUDA_ENTER("cuMemAllocManaged");
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
    if (CUresult err = fakecuda::RequireInit()) return err;
    return CUDA_ERROR_INVALID_VALUE;
  }
  return fakecuda::AllocateDevice(bytesize, /*managed=*/true, dptr);
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  FAKECUDA_ENTER("cuMemFree");
  return fakecuda::FreeDevice(dptr);
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  FAKECUDA_ENTER("cuMemGetAddressRange");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  fakecuda::DeviceAlloc* alloc =
      fakecuda::InArena(s, dptr) ? fakecuda::FindContaining(s.device_allocs, dptr) : nullptr;
  if (alloc == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = alloc->base;
  if (psize != nullptr) *psize = alloc->size;
  return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  FAKECUDA_ENTER("cuMemGetInfo");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  *total = behavior::kDeviceTotalMem;
  *free = behavior::kDeviceTotalMem - s.device_used[ctx->device];
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  FAKECUDA_ENTER("cuMemHostAlloc");
  return fakecuda::AllocateHost(pp, bytesize, Flags);
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  FAKECUDA_ENTER("cuMemAllocHost");
  return fakecuda::AllocateHost(pp, bytesize, 0);
}

CUresult cuMemFreeHost(void* p) {
  FAKECUDA_ENTER("cuMemFreeHost");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  if (p == nullptr) return behavior::kFreeNull;
  const auto base = reinterpret_cast<uintptr_t>(p);
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.host_allocs.count(base) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult err = fakecuda::RefuseDuringCapture()) return err;
  fakecuda::WaitAllStreamsIdle();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.host_allocs.find(base);
  if (it == s.host_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, it->second.mapped);
  s.host_allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  FAKECUDA_ENTER("cuMemHostRegister");
  return fakecuda::RegisterHost(p, bytesize, Flags);
}

CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  FAKECUDA_ENTER("cuMemHostRegister");
  return fakecuda::RegisterHost(p, bytesize, Flags);
}

CUresult cuMemHostUnregister(void* p) {
  FAKECUDA_ENTER("cuMemHostUnregister");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto a = reinterpret_cast<uintptr_t>(p);
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.registrations.count(a) == 0) {
      if (fakecuda::FindContaining(s.registrations, a)) return behavior::kUnregisterInteriorPointer;
      if (fakecuda::FindContaining(s.host_allocs, a)) return behavior::kUnregisterHostAlloc;
      return behavior::kUnregisterUnknown;
    }
  }
  if (CUresult err = fakecuda::RefuseDuringCapture()) return err;
  // Copies still queued on the memory finish before it stops being pinned.
  fakecuda::WaitAllStreamsIdle();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.registrations.erase(a) == 0) return behavior::kUnregisterUnknown;
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  FAKECUDA_ENTER("cuMemHostGetDevicePointer");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  if (pdptr == nullptr || p == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const auto a = reinterpret_cast<uintptr_t>(p);
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (fakecuda::FindContaining(s.host_allocs, a) == nullptr &&
      fakecuda::FindContaining(s.registrations, a) == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  static_assert(behavior::kDevicePointerIsHostPointer, "only the unified layout is simulated");
  *pdptr = a;
  return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  FAKECUDA_ENTER("cuMemHostGetFlags");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  if (pFlags == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto a = reinterpret_cast<uintptr_t>(p);
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const HostRange* range = fakecuda::FindContaining(s.host_allocs, a);
  if (range == nullptr && behavior::kHostGetFlagsOnRegistered) {
    range = fakecuda::FindContaining(s.registrations, a);
  }
  if (range == nullptr) {
    // VMM host memory answers; a host pool's memory does not.
    const HostRange* vmm = fakecuda::FindContaining(s.vmm_host, a);
    if (vmm == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (vmm->pool != nullptr) return behavior::kPoolHostGetFlags;
    *pFlags = behavior::kVmmHostGetFlags;
    return CUDA_SUCCESS;
  }
  *pFlags = range->flags | behavior::kImpliedHostAllocFlags;
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  FAKECUDA_ENTER("cuPointerGetAttribute");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER) {
    fakecuda::Context* ctx;
    if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  fakecuda::PointerInfo info = fakecuda::Describe(s, ptr);
  if (!info.known) return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::WriteAttribute(info, attribute, ptr, data, /*strict=*/true);
}

CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                void** data, CUdeviceptr ptr) {
  FAKECUDA_ENTER("cuPointerGetAttributes");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (numAttributes == 0 || attributes == nullptr || data == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  fakecuda::PointerInfo info = fakecuda::Describe(s, ptr);
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult err = fakecuda::WriteAttribute(info, attributes[i], ptr, data[i], false)) {
      return err;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
