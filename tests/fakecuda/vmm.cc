// The virtual memory management API and stream-ordered memory pools, for
// host locations: what NCCL's cuMem host buffers and CUDA 12.6+ pinned
// pools are made of.
//
// A host-located allocation (cuMemCreate with a HOST or HOST_NUMA location)
// is shared memory of its size, a memfd where it may be exported: its pages
// stay put whatever the mappings do, as page-locked memory's do.
// cuMemAddressReserve reserves address space without access; cuMemMap maps
// the same pages there, cuMemUnmap puts the reservation back. The CPU's access is what
// cuMemSetAccess grants a host location (none until then); this library's copies go through a
// mapping of its own (HostRange::view), as the driver's DMA does not depend
// on the CPU's protections. Each reservation has a shadow of its own size
// where those views lie at the mappings' offsets, so that mappings side by
// side in a reservation have views side by side, and one copy crosses from
// one into the next (driver_behavior.h). A handle counts its references
// (cuMemCreate or an import, each cuMemRetainAllocationHandle) and its
// mappings; its memory goes when both are gone. An exported handle is a duplicate of the memfd, so
// an importer maps the same pages. A host pool reserves shared anonymous
// memory as it grows (driver_behavior.h says by how much) and carves
// allocations from the top of its free extents. Mapped allocations and
// the pools' memory are listed in State::vmm_host, which the copies and the
// pointer queries of memory.cc consult. Device locations are not simulated.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <unordered_map>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"

namespace fakecuda {

namespace behavior = ::fakecuda::behavior;

// A physical allocation: the handle cuMemCreate or an import gave.
struct Physical {
  int fd = -1;           // a memfd where it may be exported or was imported
  char* anon = nullptr;  // else shared anonymous memory (no file size limit)
  size_t size = 0;
  CUmemAllocationProp prop{};
  int refs = 1;  // references not yet released; at 0, freed with its last mapping
  int mappings = 0;
};

struct Mapping {
  size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  char* view = nullptr;  // this library's own mapping of the same pages
};

// Address space from cuMemAddressReserve: `size` bytes the program asked for,
// then as many more held for maps that run past the end (driver_behavior.h).
struct Reservation {
  size_t size = 0;
  size_t span = 0;
  char* shadow = nullptr;  // span bytes of this library's, where the views lie
};

// A host pool: chunks of reserved memory, each with its free extents.
struct PoolChunk {
  size_t size = 0;
  char* view = nullptr;           // this library's own mapping of the chunk's pages
  std::map<size_t, size_t> free;  // offset -> length
  size_t blocks = 0;              // allocations carved from it and not freed
};

// An allocation carved from a pool's chunk.
struct PoolBlock {
  size_t len = 0;
  uintptr_t chunk = 0;
  bool freed = false;  // cuMemFreeAsync called; back in the chunk once its stream gets there
};

struct Pool {
  CUmemPoolProps props{};
  bool destroyed = false;  // cuMemPoolDestroy called; gone, all of it, with its last block
  cuuint64_t reserved = 0, used = 0, reserved_high = 0, used_high = 0, threshold = 0;
  std::map<uintptr_t, PoolChunk> chunks;
  std::map<uintptr_t, PoolBlock> blocks;  // pointer -> block
};

struct VmmState {
  CUmemGenericAllocationHandle next_handle = 0x1000;
  std::map<CUmemGenericAllocationHandle, Physical> handles;
  std::map<uintptr_t, Reservation> reservations;  // base -> reservation
  std::map<uintptr_t, Mapping> mappings;          // base -> mapping
  std::unordered_map<Pool*, std::unique_ptr<Pool>> pools;
};

namespace {

constexpr size_t kPoolAlign = 256;

VmmState& V(State& s) {
  if (s.vmm == nullptr) s.vmm = std::make_shared<VmmState>();
  return *s.vmm;
}

bool HostLocation(const CUmemLocation& l) {
  return l.type == CU_MEM_LOCATION_TYPE_HOST || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

bool Multiple(size_t n, size_t g) { return n % g == 0; }

// The CPU's protection for a host location's access flags.
int CpuProtection(CUmemAccess_flags flags) {
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return PROT_READ | PROT_WRITE;
  if (flags == CU_MEM_ACCESS_FLAGS_PROT_READ) return PROT_READ;
  return PROT_NONE;
}

// The range [lo, lo + len) starts in a reservation and ends within the
// address space held for it.
bool InReservation(const VmmState& v, uintptr_t lo, size_t len) {
  auto it = v.reservations.upper_bound(lo);
  if (it == v.reservations.begin()) return false;
  --it;
  const size_t at = lo - it->first;
  if (at >= it->second.size) return false;
  const size_t room =
      behavior::kVmmMapPastReservationEndSucceeds ? it->second.span : it->second.size;
  return len <= room - at;
}

// The reservation holding address p, or end().
std::map<uintptr_t, Reservation>::const_iterator ReservationOf(const VmmState& v, uintptr_t p) {
  auto it = v.reservations.upper_bound(p);
  if (it == v.reservations.begin()) return v.reservations.end();
  --it;
  return p - it->first < it->second.span ? it : v.reservations.end();
}

// The mapping holding address p, or end().
std::map<uintptr_t, Mapping>::const_iterator MappingAt(const VmmState& v, uintptr_t p) {
  auto it = v.mappings.upper_bound(p);
  if (it == v.mappings.begin()) return v.mappings.end();
  --it;
  return p - it->first < it->second.size ? it : v.mappings.end();
}

bool AnyMapping(const VmmState& v, uintptr_t lo, size_t len) {
  auto it = v.mappings.upper_bound(lo);
  if (it != v.mappings.begin() && std::prev(it)->first + std::prev(it)->second.size > lo) {
    return true;
  }
  return it != v.mappings.end() && it->first < lo + len;
}

// The userfaultfd that makes dropped pages fault (driver_behavior.h,
// kDroppedDriverPagesFault): minor faults of shared memory, delivered as
// SIGBUS to the access that made them, user-mode accesses only. -1 where
// the kernel has none to give.
int DropFaultFd() {
  static const int fd = [] {
    if (!behavior::kDroppedDriverPagesFault) return -1;
    int f =
        static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (f < 0) return -1;
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MINOR_SHMEM;
    if (ioctl(f, UFFDIO_API, &api) != 0) {
      close(f);
      return -1;
    }
    return f;
  }();
  return fd;
}

std::atomic<int> g_drops_fault{-1};  // -1 not tried yet, 0 no, 1 yes

// The program's mapping [p, p + size) of memory the driver maps, which the
// CPU may now access with `prot`: its pages are filled in, and a page the
// program drops from it afterwards faults with SIGBUS at its next access.
void DroppedPagesFault(void* p, size_t size, int prot) {
  if (prot == PROT_NONE || size == 0) return;
  const int fd = DropFaultFd();
  bool ok =
      fd >= 0 &&
      madvise(p, size, (prot & PROT_WRITE) != 0 ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0;
  if (ok) {
    uffdio_register reg{};
    reg.range.start = reinterpret_cast<uintptr_t>(p);
    reg.range.len = size;
    reg.mode = UFFDIO_REGISTER_MODE_MINOR;
    ok = ioctl(fd, UFFDIO_REGISTER, &reg) == 0;
  }
  // Once a mapping could not be made to fault, the answer stays no.
  int unknown = -1;
  if (!ok) {
    g_drops_fault.store(0);
  } else {
    g_drops_fault.compare_exchange_strong(unknown, 1);
  }
}

// Maps [offset, offset + size) of phys with `prot`: at `at` (replacing
// what is there) or, with at null, where the kernel picks. A second mapping
// of shared anonymous memory is made by mremap with an old size of 0, which
// maps the same pages again. MAP_FAILED on failure.
void* MapPhysical(const Physical& phys, size_t offset, size_t size, void* at, int prot) {
  if (phys.fd >= 0) {
    return mmap(at, size, prot, MAP_SHARED | (at != nullptr ? MAP_FIXED : 0), phys.fd,
                static_cast<off_t>(offset));
  }
  void* m = at != nullptr ? mremap(phys.anon + offset, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, at)
                          : mremap(phys.anon + offset, 0, size, MREMAP_MAYMOVE);
  if (m != MAP_FAILED && prot != (PROT_READ | PROT_WRITE) && mprotect(m, size, prot) != 0) {
    munmap(m, size);
    return MAP_FAILED;
  }
  return m;
}

// Puts a view's part of its reservation's shadow back to reserved address space.
void UnmapView(char* view, size_t size) {
  mmap(view, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

void DropPhysicalIfUnusedLocked(VmmState& v, CUmemGenericAllocationHandle h) {
  auto it = v.handles.find(h);
  if (it == v.handles.end() || it->second.refs != 0 || it->second.mappings != 0) return;
  if (it->second.fd >= 0) close(it->second.fd);
  if (it->second.anon != nullptr) munmap(it->second.anon, it->second.size);
  v.handles.erase(it);
}

HostRange VmmRange(uintptr_t base, size_t size, State& s, char* view = nullptr) {
  HostRange r;
  r.base = base;
  r.size = size;
  r.mapped = size;
  r.view = view;
  Context* ctx = nullptr;
  if (CurrentContext(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  r.ctx = ctx;
  r.id = s.next_buffer_id++;
  return r;
}

CUresult CheckProp(const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!HostLocation(prop->location)) {
    return NotSimulated("cuMemCreate", "only host locations are simulated");
  }
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id != 0) {
    return CUDA_ERROR_INVALID_VALUE;  // one NUMA node here
  }
  return CUDA_SUCCESS;
}

// Takes len bytes from the top of the chunk's first free extent that holds
// them (driver_behavior.h: so that no allocation starts where its
// reservation does); false if none does.
bool CarveLocked(Pool* pool, uintptr_t base, PoolChunk& chunk, size_t len, uintptr_t* out) {
  for (auto it = chunk.free.begin(); it != chunk.free.end(); ++it) {
    if (it->second < len) continue;
    const size_t rest = it->second - len;
    *out = base + it->first + rest;
    if (rest != 0) {
      it->second = rest;
    } else {
      chunk.free.erase(it);
    }
    ++chunk.blocks;
    pool->blocks[*out] = PoolBlock{len, base, false};
    return true;
  }
  return false;
}

// Carves n bytes from the pool, growing it by a chunk when nothing fits.
CUresult PoolTakeLocked(State& s, Pool* pool, CUmemoryPool handle, size_t n, uintptr_t* out) {
  const size_t len = (n + kPoolAlign - 1) / kPoolAlign * kPoolAlign;
  for (auto& [base, chunk] : pool->chunks) {
    if (CarveLocked(pool, base, chunk, len, out)) return CUDA_SUCCESS;
  }
  const size_t g = behavior::kHostPoolGrowth;
  const size_t grow = (len + g - 1) / g * g;
  void* p = mmap(nullptr, grow, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  // This library's copies go through a mapping of their own, as the
  // driver's DMA does not depend on the program's.
  void* view = mremap(p, 0, grow, MREMAP_MAYMOVE);
  if (view == MAP_FAILED) {
    munmap(p, grow);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  DroppedPagesFault(p, grow, PROT_READ | PROT_WRITE);
  const auto base = reinterpret_cast<uintptr_t>(p);
  PoolChunk& chunk = pool->chunks[base];
  chunk.size = grow;
  chunk.view = static_cast<char*>(view);
  chunk.free[0] = grow;
  pool->reserved += grow;
  if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
  HostRange range = VmmRange(base, grow, s, chunk.view);
  range.pool = handle;
  s.vmm_host[base] = range;
  CarveLocked(pool, base, chunk, len, out);
  return CUDA_SUCCESS;
}

void ReleaseChunkLocked(State& s, Pool* pool, std::map<uintptr_t, PoolChunk>::iterator it) {
  munmap(reinterpret_cast<void*>(it->first), it->second.size);
  munmap(it->second.view, it->second.size);
  s.vmm_host.erase(it->first);
  pool->reserved -= it->second.size;
  pool->chunks.erase(it);
}

// Gives back empty chunks until the pool holds at most `keep` bytes.
void TrimLocked(State& s, Pool* pool, size_t keep) {
  for (auto it = pool->chunks.begin(); it != pool->chunks.end() && pool->reserved > keep;) {
    auto next = std::next(it);
    if (it->second.blocks == 0) ReleaseChunkLocked(s, pool, it);
    it = next;
  }
}

// Counts block p as no longer in use (driver_behavior.h: at the free call).
void PoolDropUseLocked(Pool* pool, PoolBlock& block) {
  if (block.freed) return;
  block.freed = true;
  pool->used -= block.len;
}

void PoolGiveLocked(State& s, Pool* pool, uintptr_t p) {
  auto b = pool->blocks.find(p);
  if (b == pool->blocks.end()) return;
  PoolDropUseLocked(pool, b->second);
  const size_t len = b->second.len;
  PoolChunk& chunk = pool->chunks[b->second.chunk];
  const size_t off = p - b->second.chunk;
  pool->blocks.erase(b);
  --chunk.blocks;
  auto next = chunk.free.lower_bound(off);
  size_t start = off, total = len;
  if (next != chunk.free.end() && next->first == off + len) {
    total += next->second;
    next = chunk.free.erase(next);
  }
  if (next != chunk.free.begin() && std::prev(next)->first + std::prev(next)->second == off) {
    start = std::prev(next)->first;
    total += std::prev(next)->second;
    chunk.free.erase(std::prev(next));
  }
  chunk.free[start] = total;
  if (pool->destroyed && pool->blocks.empty()) TrimLocked(s, pool, 0);
}

// The pool holding allocation p, if any.
Pool* PoolOfLocked(VmmState& v, uintptr_t p) {
  for (auto& [handle, pool] : v.pools) {
    if (pool->blocks.count(p) != 0) return pool.get();
  }
  return nullptr;
}

Pool* LivePoolLocked(VmmState& v, CUmemoryPool handle) {
  auto it = v.pools.find(reinterpret_cast<Pool*>(handle));
  return it == v.pools.end() || it->second->destroyed ? nullptr : it->second.get();
}

CUresult AllocFromPool(CUdeviceptr* dptr, size_t n, CUmemoryPool handle, CUstream stream,
                       bool per_thread) {
  std::shared_ptr<Stream> st;
  if (CUresult err = ResolveStream(stream, per_thread, &st)) return err;
  if (dptr == nullptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Pool* pool = LivePoolLocked(V(s), handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t p;
  if (CUresult err = PoolTakeLocked(s, pool, handle, n, &p)) return err;
  pool->used += pool->blocks[p].len;
  if (pool->used > pool->used_high) pool->used_high = pool->used;
  *dptr = p;
  return CUDA_SUCCESS;
}

// The block leaves the pool's used memory now and goes back to its free
// memory when the work queued before it is done (driver_behavior.h).
CUresult FreeAsync(CUdeviceptr p, CUstream stream, bool per_thread) {
  std::shared_ptr<Stream> st;
  if (CUresult err = ResolveStream(stream, per_thread, &st)) return err;
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Pool* pool = p == 0 ? nullptr : PoolOfLocked(V(s), p);
    // Not measured: a second free of the same block is refused.
    if (pool == nullptr || pool->blocks[p].freed) return CUDA_ERROR_INVALID_VALUE;
    if (behavior::kPoolUsedDropsAtFreeCall) PoolDropUseLocked(pool, pool->blocks[p]);
  }
  return Submit(
      st,
      [p] {
        State& s = S();
        std::lock_guard<std::mutex> lock(s.mu);
        if (Pool* pool = PoolOfLocked(V(s), p)) PoolGiveLocked(s, pool, p);
      },
      /*wait=*/false);
}

}  // namespace

bool FreePoolBlock(CUdeviceptr p) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Pool* pool = PoolOfLocked(V(s), p);
  if (pool == nullptr) return false;
  // Documented: no implicit synchronization; the caller made sure the
  // memory's work is done. A block already freed stream-ordered is no
  // allocation any more.
  if (pool->blocks[p].freed) return false;
  PoolGiveLocked(s, pool, p);
  return true;
}

bool VmmRunCoversLocked(State& s, const HostRange& r, uintptr_t a, size_t len) {
  if (r.view == nullptr || r.pool != nullptr || !behavior::kVmmCopyCrossesAdjacentMappings) {
    return false;
  }
  uintptr_t end = r.base + r.size;
  while (len > end - a) {
    auto next = s.vmm_host.find(end);
    if (next == s.vmm_host.end() || next->second.pool != nullptr ||
        next->second.view != r.view + (end - r.base)) {
      return false;
    }
    end += next->second.size;
  }
  return true;
}

bool PoolBlockLocked(State& s, CUmemoryPool handle, uintptr_t p, uintptr_t* start, size_t* len) {
  auto it = V(s).pools.find(reinterpret_cast<Pool*>(handle));
  if (it == V(s).pools.end()) return false;
  const auto& blocks = it->second->blocks;
  auto b = blocks.upper_bound(p);
  if (b == blocks.begin()) return false;
  --b;
  if (p - b->first >= b->second.len || b->second.freed) return false;
  *start = b->first;
  *len = b->second.len;
  return true;
}

}  // namespace fakecuda

using fakecuda::Mapping;
using fakecuda::Physical;
using fakecuda::Pool;
using fakecuda::S;
using fakecuda::State;
using fakecuda::V;
using fakecuda::VmmState;
namespace behavior = fakecuda::behavior;

extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  FAKECUDA_ENTER("cuMemGetAllocationGranularity");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = fakecuda::CheckProp(prop)) return err;
  if (option == CU_MEM_ALLOC_GRANULARITY_MINIMUM) {
    *granularity = behavior::kVmmHostGranularityMinimum;
  } else if (option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    *granularity = behavior::kVmmHostGranularityRecommended;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  FAKECUDA_ENTER("cuMemCreate");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = fakecuda::CheckProp(prop)) return err;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!fakecuda::Multiple(size, behavior::kVmmHostGranularityMinimum)) {
    return behavior::kVmmCreateNotMultiple;
  }
  // Memory that may be exported needs a file; other memory is shared
  // anonymous memory, which a process's file size limit does not touch (the
  // real driver's memory is no file of the program's either).
  int fd = -1;
  void* anon = nullptr;
  if ((prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0) {
    fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  } else {
    anon = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (anon == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  const CUmemGenericAllocationHandle h = v.next_handle++;
  Physical& phys = v.handles[h];
  phys.fd = fd;
  phys.anon = static_cast<char*>(anon);
  phys.size = size;
  phys.prop = *prop;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  FAKECUDA_ENTER("cuMemRelease");
  if (CUresult err = fakecuda::RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  auto it = v.handles.find(handle);
  if (it == v.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.refs == 0) return behavior::kVmmReleaseTwice;
  if (it->second.mappings != 0 && !behavior::kVmmReleaseWhileMappedSucceeds) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  --it->second.refs;
  fakecuda::DropPhysicalIfUnusedLocked(v, handle);
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  FAKECUDA_ENTER("cuMemAddressReserve");
  if (CUresult err = fakecuda::RequireInit()) return err;
  const size_t g = behavior::kVmmHostGranularityMinimum;
  if (ptr == nullptr || size == 0 || flags != 0 || !fakecuda::Multiple(size, g) ||
      (alignment != 0 && (alignment & (alignment - 1)) != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t align = alignment > g ? alignment : g;
  // addr is a hint; the reservation is placed where the system has room.
  (void)addr;
  const size_t span = behavior::kVmmMapPastReservationEndSucceeds ? 2 * size : size;
  void* raw =
      mmap(nullptr, span + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto lo = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t base = (lo + align - 1) / align * align;
  if (base > lo) munmap(raw, base - lo);
  const uintptr_t tail = base + span;
  if (lo + span + align > tail) munmap(reinterpret_cast<void*>(tail), lo + span + align - tail);
  void* shadow = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (shadow == MAP_FAILED) {
    munmap(reinterpret_cast<void*>(base), span);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  V(s).reservations[base] = fakecuda::Reservation{size, span, static_cast<char*>(shadow)};
  *ptr = base;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  FAKECUDA_ENTER("cuMemAddressFree");
  if (CUresult err = fakecuda::RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  auto it = v.reservations.find(ptr);
  if (it == v.reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  if (fakecuda::AnyMapping(v, ptr, size)) return behavior::kVmmFreeMappedReservation;
  munmap(reinterpret_cast<void*>(ptr), it->second.span);
  munmap(it->second.shadow, it->second.span);
  v.reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  FAKECUDA_ENTER("cuMemMap");
  if (CUresult err = fakecuda::RequireInit()) return err;
  const size_t g = behavior::kVmmHostGranularityMinimum;
  if (flags != 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  auto h = v.handles.find(handle);
  if (h == v.handles.end() || h->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  Physical& phys = h->second;
  if (!fakecuda::Multiple(ptr, g) || !fakecuda::Multiple(size, g) ||
      !fakecuda::Multiple(offset, g) || offset > phys.size || size > phys.size - offset) {
    return behavior::kVmmMapMisaligned;
  }
  if (!fakecuda::InReservation(v, ptr, size)) return behavior::kVmmMapOutsideReservations;
  if (fakecuda::AnyMapping(v, ptr, size)) return behavior::kVmmMapOntoMapped;
  const int prot = behavior::kVmmHostCpuAccessAtMap ? PROT_READ | PROT_WRITE : PROT_NONE;
  auto res = fakecuda::ReservationOf(v, ptr);
  char* view_at = res->second.shadow + (ptr - res->first);
  void* view = fakecuda::MapPhysical(phys, offset, size, view_at, PROT_READ | PROT_WRITE);
  if (view == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  if (fakecuda::MapPhysical(phys, offset, size, reinterpret_cast<void*>(ptr), prot) == MAP_FAILED) {
    fakecuda::UnmapView(view_at, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  ++phys.mappings;
  v.mappings[ptr] = Mapping{size, handle, static_cast<char*>(view)};
  s.vmm_host[ptr] = fakecuda::VmmRange(ptr, size, s, static_cast<char*>(view));
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  FAKECUDA_ENTER("cuMemUnmap");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (size == 0 || size > UINTPTR_MAX - ptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  // Whole mappings only; gaps between them are passed over.
  auto first = v.mappings.upper_bound(ptr);
  if (first != v.mappings.begin() &&
      std::prev(first)->first + std::prev(first)->second.size > ptr) {
    --first;
  }
  auto last = first;
  for (; last != v.mappings.end() && last->first < ptr + size; ++last) {
    if (last->first < ptr || last->second.size > ptr + size - last->first) {
      return behavior::kVmmUnmapPart;
    }
  }
  if (first == last) return behavior::kVmmUnmapUnmapped;
  for (auto m = first; m != last;) {
    const uintptr_t at = m->first;
    const Mapping map = m->second;
    m = v.mappings.erase(m);
    s.vmm_host.erase(at);
    fakecuda::UnmapView(map.view, map.size);
    mmap(reinterpret_cast<void*>(at), map.size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    auto h = v.handles.find(map.handle);
    if (h != v.handles.end()) --h->second.mappings;
    fakecuda::DropPhysicalIfUnusedLocked(v, map.handle);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  FAKECUDA_ENTER("cuMemSetAccess");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  for (uintptr_t at = ptr; at < ptr + size;) {
    auto m = v.mappings.find(at);
    if (m == v.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    at += m->second.size;
  }
  int cpu_prot = -1;  // unchanged unless a host location is named
  for (size_t i = 0; i < count; ++i) {
    const CUmemLocation& l = desc[i].location;
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE && (l.id < 0 || l.id >= s.device_count)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    if (desc[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return CUDA_ERROR_INVALID_VALUE;
    if (fakecuda::HostLocation(l)) cpu_prot = fakecuda::CpuProtection(desc[i].flags);
  }
  if (cpu_prot >= 0 && mprotect(reinterpret_cast<void*>(ptr), size, cpu_prot) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (cpu_prot >= 0) fakecuda::DroppedPagesFault(reinterpret_cast<void*>(ptr), size, cpu_prot);
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  FAKECUDA_ENTER("cuMemExportToShareableHandle");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (shareable == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return fakecuda::NotSimulated("cuMemExportToShareableHandle", "only POSIX file descriptors");
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  auto h = v.handles.find(handle);
  if (h == v.handles.end() || h->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  if ((h->second.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return behavior::kExportTypeNotRequested;
  }
  const int fd = h->second.fd >= 0 ? dup(h->second.fd) : -1;
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  FAKECUDA_ENTER("cuMemImportFromShareableHandle");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return fakecuda::NotSimulated("cuMemImportFromShareableHandle", "only POSIX file descriptors");
  }
  // The file descriptor travels in the pointer's bits.
  const int given = static_cast<int>(reinterpret_cast<uintptr_t>(os_handle));
  struct stat st;
  if (fstat(given, &st) != 0 || st.st_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  const int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  const CUmemGenericAllocationHandle h = v.next_handle++;
  Physical& phys = v.handles[h];
  phys.fd = fd;
  phys.size = static_cast<size_t>(st.st_size);
  phys.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  phys.prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  phys.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  FAKECUDA_ENTER("cuMemRetainAllocationHandle");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  // Documented: any address of a mapping names its handle; an address no
  // mapping holds is refused.
  const auto m = fakecuda::MappingAt(v, reinterpret_cast<uintptr_t>(addr));
  if (m == v.mappings.end()) return behavior::kVmmRetainUnmapped;
  auto h = v.handles.find(m->second.handle);
  if (h == v.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  ++h->second.refs;
  *handle = h->first;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  FAKECUDA_ENTER("cuMemGetAllocationPropertiesFromHandle");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  VmmState& v = V(s);
  auto h = v.handles.find(handle);
  if (h == v.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = h->second.prop;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  FAKECUDA_ENTER("cuMemPoolCreate");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (pool == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!fakecuda::HostLocation(props->location)) {
    return fakecuda::NotSimulated("cuMemPoolCreate", "only host locations are simulated");
  }
  if (props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && props->location.id != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto made = std::make_unique<Pool>();
  made->props = *props;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Pool* p = made.get();
  V(s).pools[p] = std::move(made);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  FAKECUDA_ENTER("cuMemPoolDestroy");
  if (CUresult err = fakecuda::RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Pool* p = fakecuda::LivePoolLocked(V(s), pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Documented: with allocations outstanding, the pool's memory goes once
  // the last of them is freed (driver_behavior.h: all of it, then).
  p->destroyed = true;
  if (p->blocks.empty() || !behavior::kDestroyedPoolKeepsAllUntilLastFree) {
    fakecuda::TrimLocked(s, p, 0);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  FAKECUDA_ENTER("cuMemPoolSetAccess");
  if (CUresult err = fakecuda::RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (fakecuda::LivePoolLocked(V(s), pool) == nullptr || (map == nullptr && count != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < count; ++i) {
    const CUmemLocation& l = map[i].location;
    if (l.type == CU_MEM_LOCATION_TYPE_DEVICE && (l.id < 0 || l.id >= s.device_count)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  FAKECUDA_ENTER("cuMemPoolTrimTo");
  if (CUresult err = fakecuda::RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Pool* p = fakecuda::LivePoolLocked(V(s), pool);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fakecuda::TrimLocked(s, p, keep);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  FAKECUDA_ENTER("cuMemPoolGetAttribute");
  if (CUresult err = fakecuda::RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Pool* p = fakecuda::LivePoolLocked(V(s), pool);
  if (p == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *out = p->threshold; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *out = p->reserved; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *out = p->reserved_high; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *out = p->used; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *out = p->used_high; return CUDA_SUCCESS;
    default: return fakecuda::NotSimulated("cuMemPoolGetAttribute", "that attribute");
  }
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t n, CUmemoryPool pool, CUstream st) {
  FAKECUDA_ENTER("cuMemAllocFromPoolAsync");
  return fakecuda::AllocFromPool(dptr, n, pool, st, /*per_thread=*/false);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t n, CUmemoryPool pool, CUstream st) {
  FAKECUDA_ENTER("cuMemAllocFromPoolAsync");
  return fakecuda::AllocFromPool(dptr, n, pool, st, /*per_thread=*/true);
}

CUresult cuMemFreeAsync(CUdeviceptr p, CUstream st) {
  FAKECUDA_ENTER("cuMemFreeAsync");
  return fakecuda::FreeAsync(p, st, /*per_thread=*/false);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream st) {
  FAKECUDA_ENTER("cuMemFreeAsync");
  return fakecuda::FreeAsync(p, st, /*per_thread=*/true);
}

}  // extern "C"

extern "C" int fakecuda_drops_fault(void) { return fakecuda::g_drops_fault.load() == 1 ? 1 : 0; }
