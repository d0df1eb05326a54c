// The state every hook shares (state.h): the real functions, the
// registries, the bootstrap pool that serves allocations made while the
// real functions are looked up, and the classification of host pointers.
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL).
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "shim/hooks/state.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "shim/budget/budget.h"
#include "shim/core/log.h"
#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_frames.h"
#include "shim/optimize/site_profile.h"
#include "shim/trace/recorder.h"

namespace pinshim {

RealFunctions g_real;
Config g_config;
std::atomic<bool> g_initialized{false};
uint64_t g_track_threshold = UINT64_MAX;
std::atomic<bool> g_cuda_seen{false};
bool g_enforce = false;
bool g_optimize = false;
std::atomic<int> g_open_captures{0};
bool g_redirect_sites = false;
bool g_capture_sites = false;
bool g_guard_malloc_chunks = false;
Registry g_allocations;
Registry g_registrations;
std::atomic<uint64_t> g_tracked_mallocs{0};

namespace {

std::atomic<uint64_t> g_next_alloc_id{1};

template <typename T>
void Next(T* out, const char* name) {
  *out = reinterpret_cast<T>(dlsym(RTLD_NEXT, name));
}

}  // namespace

// --- bootstrap pool: serves allocations made while resolving g_real ---

namespace {
constexpr size_t kBootBytes = 256 * 1024;
alignas(64) char g_boot[kBootBytes];
std::atomic<size_t> g_boot_used{0};
}  // namespace

bool InBootstrapPool(const void* p) {
  auto c = static_cast<const char*>(p);
  return c >= g_boot && c < g_boot + kBootBytes;
}

void* BootstrapAlloc(size_t bytes) {
  // 16-byte header keeps the size for realloc; blocks stay 16-byte aligned.
  size_t need = ((bytes + 15) & ~size_t{15}) + 16;
  size_t at = g_boot_used.fetch_add(need);
  if (at + need > kBootBytes) return nullptr;
  char* p = g_boot + at;
  *reinterpret_cast<size_t*>(p) = bytes;
  return p + 16;
}

size_t BootstrapSize(const void* p) {
  return *reinterpret_cast<const size_t*>(static_cast<const char*>(p) - 16);
}

bool Resolving() { return Reentered(Reentry::kLibcLookup); }

void ResolveRealFunctions() {
  if (g_real.malloc != nullptr || Reentered(Reentry::kLibcLookup)) return;
  ReentryGuard resolving(Reentry::kLibcLookup);
  RealFunctions r;
  Next(&r.free, "free");
  Next(&r.calloc, "calloc");
  Next(&r.realloc, "realloc");
  Next(&r.posix_memalign, "posix_memalign");
  Next(&r.aligned_alloc, "aligned_alloc");
  Next(&r.memalign, "memalign");
  Next(&r.valloc, "valloc");
  Next(&r.pvalloc, "pvalloc");
  Next(&r.malloc_usable_size, "malloc_usable_size");
  Next(&r.mmap, "mmap");
  Next(&r.munmap, "munmap");
  Next(&r.mremap, "mremap");
  Next(&r.mmap64, "mmap64");
  Next(&r.madvise, "madvise");
  Next(&r.posix_madvise, "posix_madvise");
  Next(&r.process_madvise, "process_madvise");
  Next(&r.shmat, "shmat");
  Next(&r.brk, "brk");
  Next(&r.sbrk, "sbrk");
  Next(&r.fork, "fork");
  r.dlopen =
      reinterpret_cast<void* (*)(const char*, int)>(dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34"));
  if (r.dlopen == nullptr) Next(&r.dlopen, "dlopen");
  r.dlclose = reinterpret_cast<int (*)(void*)>(dlvsym(RTLD_NEXT, "dlclose", "GLIBC_2.34"));
  if (r.dlclose == nullptr) Next(&r.dlclose, "dlclose");
  Next(&r.malloc, "malloc");
  // Publish malloc last: hooks test it to know the table is complete.
  void* (*malloc_fn)(size_t) = r.malloc;
  r.malloc = nullptr;
  g_real = r;
  __atomic_store_n(&g_real.malloc, malloc_fn, __ATOMIC_RELEASE);
}

void NoteCudaSeen() { g_cuda_seen.store(true, std::memory_order_relaxed); }

void DropTraceIfNoCuda() {
  // Tracing starts with the process, so that buffers allocated before CUDA
  // was first touched keep their allocation sites; a process that never
  // touched CUDA has nothing to report and leaves no file behind.
  if (g_cuda_seen.load() || !trace::RecorderActive() || !trace::RecorderOwnedHere()) return;
  char path[kConfigPathMax];
  snprintf(path, sizeof(path), "%s", trace::RecorderTracePath());
  trace::StopRecorder();
  if (path[0] != '\0') unlink(path);
}

uint64_t NextAllocId() { return g_next_alloc_id.fetch_add(1, std::memory_order_relaxed); }

namespace {

// Granules (2 MiB) of host memory the driver said it does not hold pinned,
// one per slot: asked once, remembered until another granule takes the slot.
constexpr int kUnpinnedGranuleShift = 21;
constexpr size_t kUnpinnedSlots = 1024;
std::atomic<uintptr_t> g_driver_unpinned[kUnpinnedSlots];

// Whether the driver holds [p] pinned although pinshim saw no call pin it
// (pinned before pinshim was loaded, or by a library loaded with
// RTLD_DEEPBIND). A yes is remembered as a registration of the range the
// driver names, a no for p's granule; either way the driver is asked once.
bool DriverHoldsPinned(const void* p, uint32_t* flags) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const uintptr_t tag = (addr >> kUnpinnedGranuleShift) + 1;
  std::atomic<uintptr_t>& slot = g_driver_unpinned[tag % kUnpinnedSlots];
  if (p == nullptr || slot.load(std::memory_order_relaxed) == tag) return false;
  using GetAttr = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static std::atomic<void*> get_attr_fn{nullptr};
  auto get_attr = hook::LazyDriverSymbol<GetAttr>(&get_attr_fn, "cuPointerGetAttribute");
  unsigned int type = 0;
  if (get_attr == nullptr ||
      get_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) != CUDA_SUCCESS ||
      type != CU_MEMORYTYPE_HOST) {
    slot.store(tag, std::memory_order_relaxed);
    return false;
  }
  CUdeviceptr start = 0;
  size_t bytes = 0;
  if (get_attr(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, addr) != CUDA_SUCCESS ||
      get_attr(&bytes, CU_POINTER_ATTRIBUTE_RANGE_SIZE, addr) != CUDA_SUCCESS || start > addr ||
      addr - start >= bytes) {
    start = addr;
    bytes = 1;
  }
  using GetFlags = CUresult (*)(unsigned int*, void*);
  static std::atomic<void*> get_flags_fn{nullptr};
  auto get_flags = hook::LazyDriverSymbol<GetFlags>(&get_flags_fn, "cuMemHostGetFlags");
  unsigned int driver_flags = 0;
  if (get_flags == nullptr || get_flags(&driver_flags, const_cast<void*>(p)) != CUDA_SUCCESS) {
    driver_flags = 0;
  }
  Region r;
  r.start = start;
  r.bytes = bytes;
  r.id = NextAllocId();
  r.flags = driver_flags;
  r.kind = MemKind::kPinnedByProgram;
  r.source = kSourceDriver;
  g_registrations.Insert(r);
  *flags = driver_flags;
  return true;
}

}  // namespace

MemKind ClassifyHost(const void* p, uint32_t* flags, uint64_t* alloc_id) {
  *flags = 0;
  *alloc_id = 0;
  Region r;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  MemKind kind = MemKind::kPageable;
  // Private anonymous memory pinshim tracks was pinned only by calls it saw;
  // the driver is asked about the rest (untracked memory, and shared
  // mappings, such as the driver's own of memory it pinned unseen).
  bool ask_driver = true;
  if (g_allocations.Lookup(addr, &r)) {
    *alloc_id = r.id;
    *flags = r.flags;
    kind = r.kind;
    ask_driver = (r.flags & kRegionNotPinnable) != 0;
  }
  if (g_registrations.size() != 0 && g_registrations.Lookup(addr, &r)) {
    *flags = r.flags;
    kind = r.kind;
  }
  // Optimize mode's pool answers for its own blocks (they are not in the
  // registries: see Optimizer::AttachDriver).
  if (kind == MemKind::kPageable && g_optimize) {
    optimize::PoolBlockInfo block;
    const optimize::Optimizer& opt = optimize::Optimizer::Process();
    if (opt.active() && opt.PoolBlock(p, &block)) {
      *flags = block.flags;
      *alloc_id = block.alloc_id;
      kind = MemKind::kPinnedByPinshim;
    }
  }
  if (kind == MemKind::kPageable && ask_driver && DriverHoldsPinned(p, flags)) {
    kind = MemKind::kPinnedByProgram;
  }
  return kind;
}

}  // namespace pinshim
