#include "shim/optimize/host_arena.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>

#include "shim/core/internal_alloc.h"
#include "shim/optimize/page_change.h"
#include "shim/optimize/page_frames.h"
#include "shim/optimize/size_classes.h"

namespace pinshim {
namespace optimize {
namespace {

constexpr uint32_t kMagicSmall = 0x70534d41;
constexpr uint32_t kMagicLarge = 0x704c5241;

// Just before every user pointer.
struct Header {
  uint32_t magic;
  uint32_t offset;  // user pointer - block start
  int32_t ext;      // large: the extent holding the pages; small: -1
  uint32_t info;    // small: class; large: pages
};
static_assert(sizeof(Header) == kArenaHeaderBytes, "one header size");

enum ExtentState : uint8_t {
  kExtentFree = 0,
  kExtentRegistering = 1,
  kExtentRegistered = 2,
  kExtentReleasing = 3,
  kExtentRepinning = 4,  // unpinned for a page change; pinned again after it
  kExtentUnpinned = 5,   // not pinned (a page change raced its repinning); usable
  kExtentLost = 6,       // its memory is no longer ours to hand out (page_change.h)
};

constexpr uint64_t kMinSpanBytes = uint64_t{64} << 10;
constexpr uint64_t kMaxSpanBytes = uint64_t{2} << 20;
constexpr int kReapBatch = 32;

// Raw system calls: pinshim interposes mmap and friends, and the arena's
// own mappings are not the program's to track.
void* SysMmap(size_t len, int prot, int flags) {
  long r = syscall(SYS_mmap, nullptr, len, prot, flags, -1, 0);
  return (r < 0 && r > -4096) ? nullptr : reinterpret_cast<void*>(r);
}
int SysMprotect(uintptr_t addr, size_t len, int prot) {
  return static_cast<int>(syscall(SYS_mprotect, addr, len, prot));
}
int SysMadvise(uintptr_t addr, size_t len, int advice) {
  return static_cast<int>(syscall(SYS_madvise, addr, len, advice));
}
void* SysMmapFixed(uintptr_t addr, size_t len, int prot, int flags) {
  long r = syscall(SYS_mmap, addr, len, prot, flags | MAP_FIXED, -1, 0);
  return (r < 0 && r > -4096) ? nullptr : reinterpret_cast<void*>(r);
}

// Frame arrays of verified extents (page_frames.h), mapped and unmapped
// with their registrations.
PageFrame* NewFrames(uint64_t n) {
  long r = syscall(SYS_mmap, nullptr, n * sizeof(PageFrame), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return (r < 0 && r > -4096) ? nullptr : reinterpret_cast<PageFrame*>(r);
}
void FreeFrames(PageFrame* f, uint64_t n) {
  if (f != nullptr) syscall(SYS_munmap, f, n * sizeof(PageFrame));
}

inline uintptr_t AlignUp(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }

inline Header* HeaderOf(const void* p) {
  return reinterpret_cast<Header*>(reinterpret_cast<uintptr_t>(p) - sizeof(Header));
}

}  // namespace

struct HostArena::Extent {
  uint64_t start;  // page index
  uint64_t pages;
  uint64_t live_pages;
  uint64_t idle_since_ns;
  CUcontext ctx;
  uint8_t state;
  int32_t next_free;
  PageFrame* frames;  // PINSHIM_VERIFY_PAGES: what the registration pinned
};

struct HostArena::SmallClass {
  uintptr_t free_head;  // freed blocks, linked through their first word
  uintptr_t cursor;     // next unused block of the current span
  uintptr_t end;
  bool refilling;
};

struct HostArena::Pending {
  uintptr_t start;  // 0: unused
  uintptr_t end;
  FenceSet fences;
};

bool HostArena::Init(const DriverOps* ops, FenceManager* fences, PinAccount* account,
                     const ArenaOptions& options) {
  if (ops == nullptr || fences == nullptr || account == nullptr || !DriverOpsComplete(*ops)) {
    return false;
  }
  if (size_ != 0) return false;  // once
  options_ = options;
  long page = sysconf(_SC_PAGESIZE);
  page_ = page > 0 ? static_cast<uint64_t>(page) : 4096;
  if (options_.small_max_bytes > kMaxSpanBytes / 8) options_.small_max_bytes = kMaxSpanBytes / 8;
  nclasses_ = ArenaClassOfBytes(options_.small_max_bytes) + 1;
  if (nclasses_ > kMaxSmallClasses) return false;
  runs_ = static_cast<Run*>(InternalAlloc(sizeof(Run) * kMaxRuns));
  extents_ = static_cast<Extent*>(InternalAlloc(sizeof(Extent) * kMaxExtents));
  classes_ = static_cast<SmallClass*>(InternalAlloc(sizeof(SmallClass) * kMaxSmallClasses));
  pending_ = static_cast<Pending*>(InternalAlloc(sizeof(Pending) * kMaxPending));
  deferred_ = static_cast<uintptr_t*>(InternalAlloc(sizeof(uintptr_t) * kMaxPending));
  if (runs_ == nullptr || extents_ == nullptr || classes_ == nullptr || pending_ == nullptr ||
      deferred_ == nullptr) {
    return false;
  }
  free_extent_ = -1;
  for (int32_t i = kMaxExtents - 1; i >= 0; --i) {
    extents_[i].state = kExtentFree;
    extents_[i].next_free = free_extent_;
    free_extent_ = i;
  }
  uint64_t want = options_.reserve_bytes;
  void* base = nullptr;
  for (uint64_t sz : {want, want / 4, want / 16, want / 64}) {
    sz = sz / kMaxSpanBytes * kMaxSpanBytes;
    if (sz == 0) continue;
    base = SysMmap(sz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    if (base != nullptr) {
      want = sz;
      break;
    }
  }
  if (base == nullptr) return false;
  ops_ = ops;
  fences_ = fences;
  account_ = account;
  base_ = reinterpret_cast<uintptr_t>(base);
  npages_ = want / page_;
  size_ = want;
  bounds_->Widen(base_, base_ + size_);
  active_.store(true, std::memory_order_release);
  return true;
}

uint64_t HostArena::Now() const {
  return options_.now_ns != nullptr ? options_.now_ns() : MonotonicNs();
}

// --- page runs ------------------------------------------------------------

int32_t HostArena::FindRunLocked(uint64_t pages, bool registered) const {
  int32_t best = -1;
  for (uint32_t i = 0; i < nruns_; ++i) {
    const Run& r = runs_[i];
    if (r.pages < pages || (r.ext >= 0) != registered) continue;
    if (!registered) return static_cast<int32_t>(i);  // first fit, lowest address
    if (best < 0 || r.pages < runs_[best].pages) best = static_cast<int32_t>(i);  // best fit
  }
  return best;
}

uint64_t HostArena::TakeFromRunLocked(int32_t i, uint64_t pages) {
  Run& r = runs_[i];
  uint64_t start = r.start;
  r.start += pages;
  r.pages -= pages;
  if (r.pages == 0) {
    memmove(&runs_[i], &runs_[i + 1], (nruns_ - i - 1) * sizeof(Run));
    --nruns_;
  }
  return start;
}

bool HostArena::InsertRunLocked(uint64_t start, uint64_t pages, int32_t ext) {
  uint32_t lo = 0, hi = nruns_;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (runs_[mid].start < start) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const uint32_t pos = lo;
  // Runs merge only within one registration (or both unregistered), so a
  // block carved from a run always lies inside a single registration.
  const bool merge_prev =
      pos > 0 && runs_[pos - 1].start + runs_[pos - 1].pages == start && runs_[pos - 1].ext == ext;
  const bool merge_next =
      pos < nruns_ && start + pages == runs_[pos].start && runs_[pos].ext == ext;
  if (merge_prev && merge_next) {
    runs_[pos - 1].pages += pages + runs_[pos].pages;
    memmove(&runs_[pos], &runs_[pos + 1], (nruns_ - pos - 1) * sizeof(Run));
    --nruns_;
  } else if (merge_prev) {
    runs_[pos - 1].pages += pages;
  } else if (merge_next) {
    runs_[pos].start = start;
    runs_[pos].pages += pages;
  } else {
    if (nruns_ == kMaxRuns) return false;
    memmove(&runs_[pos + 1], &runs_[pos], (nruns_ - pos) * sizeof(Run));
    runs_[pos] = {start, pages, ext};
    ++nruns_;
  }
  return true;
}

void HostArena::FreePagesLocked(uint64_t start, uint64_t pages, int32_t ext) {
  Extent& e = extents_[ext];
  // A full run table leaks the pages (they stay pinned and unused) rather
  // than losing track of them. A lost extent's pages are never handed out
  // again.
  if (e.state != kExtentLost) InsertRunLocked(start, pages, ext);
  e.live_pages -= pages;
  if (e.live_pages == 0) e.idle_since_ns = Now();
}

bool HostArena::AllocatePages(uint64_t pages, uint64_t* start, int32_t* ext) {
  int32_t idx;
  {
    MutexLock lock(&mu_);
    int32_t i = FindRunLocked(pages, true);
    if (i >= 0) {
      *ext = runs_[i].ext;
      *start = TakeFromRunLocked(i, pages);
      extents_[*ext].live_pages += pages;
      return true;
    }
    if (free_extent_ < 0) return false;
    i = FindRunLocked(pages, false);
    if (i >= 0) {
      *start = TakeFromRunLocked(i, pages);
    } else if (top_ + pages <= npages_) {
      *start = top_;
      top_ += pages;
    } else {
      return false;
    }
    idx = free_extent_;
    Extent& e = extents_[idx];
    free_extent_ = e.next_free;
    e.start = *start;
    e.pages = pages;
    e.live_pages = pages;
    e.state = kExtentRegistering;
    e.ctx = nullptr;
  }
  // Fresh pages: commit and register them, outside the lock.
  const uintptr_t addr = PageAddr(*start);
  const uint64_t bytes = pages * page_;
  CUcontext cur = nullptr;
  if (ops_->ctx_get_current(&cur) != CUDA_SUCCESS) cur = nullptr;
  CUcontext ctx = cur != nullptr ? cur : home_ctx_.load(std::memory_order_acquire);
  OwnPinReason refused = ctx == nullptr ? OwnPinReason::kRefusedNoContext : OwnPinReason::kNone;
  bool ok = ctx != nullptr && SysMprotect(addr, bytes, PROT_READ | PROT_WRITE) == 0;
  if (ctx != nullptr && !ok) refused = OwnPinReason::kRefusedOutOfMemory;
  CUresult r = CUDA_SUCCESS;
  if (ok) {
    r = PinExtent(idx, addr, bytes, ctx, &refused);
    ok = r == CUDA_SUCCESS && refused == OwnPinReason::kNone;
  }
  if (!ok) {
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kArena, refused, addr,
                 bytes, 0, r);
    SysMprotect(addr, bytes, PROT_NONE);
    MutexLock lock(&mu_);
    InsertRunLocked(*start, pages, -1);
    extents_[idx].state = kExtentFree;
    extents_[idx].next_free = free_extent_;
    free_extent_ = idx;
    return false;
  }
  registrations_.fetch_add(1, std::memory_order_relaxed);
  extents_live_.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  extents_[idx].state = kExtentRegistered;
  *ext = idx;
  return true;
}

CUresult HostArena::PinExtent(int32_t idx, uintptr_t addr, uint64_t bytes, CUcontext ctx,
                              OwnPinReason* refused) {
  *refused = OwnPinReason::kNone;
  // A page change under way over these pages may have looked at the arena
  // before this extent was marked registering: pin nothing now. (The
  // caller's own change, when it is one, is its own business.)
  if (PageChangeSlots::AnyOverlapping(addr, addr + bytes, /*ignore_own=*/true)) {
    *refused = OwnPinReason::kRefusedPageChange;
    return CUDA_SUCCESS;
  }
  if (!account_->ChargeWithEviction(PinUse::kArena, bytes, refused)) return CUDA_SUCCESS;
  CUresult r;
  {
    CUcontext cur = nullptr;
    if (ops_->ctx_get_current(&cur) != CUDA_SUCCESS) cur = nullptr;
    ScopedContext scope(ops_, cur == nullptr ? ctx : nullptr);
    RelaxedCaptureMode relaxed(ops_);
    r = ops_->mem_host_register(reinterpret_cast<void*>(addr), bytes, options_.register_flags);
  }
  if (r != CUDA_SUCCESS) {
    *refused = DriverRefusalReason(r, account_->pinned() - bytes, bytes);
    account_->Release(PinUse::kArena, bytes);
    return r;
  }
  PageFrame* frames = nullptr;
  if (options_.verify_pages) {
    frames = NewFrames(bytes / page_);
    if (frames != nullptr && !PageFrames::Read(addr, bytes / page_, frames)) {
      FreeFrames(frames, bytes / page_);
      frames = nullptr;
    }
  }
  if (options_.dofork_after_register) SysMadvise(addr, bytes, MADV_DOFORK);
  if (options_.registrations != nullptr) {
    Region reg;
    reg.start = addr;
    reg.bytes = bytes;
    reg.id = static_cast<uint64_t>(idx) + 1;
    reg.flags = options_.register_flags;
    reg.kind = MemKind::kPinnedByPinshim;
    reg.source = kSourcePinshim;
    options_.registrations->Insert(reg);
  }
  registered_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kPinned, OwnPinPart::kArena, OwnPinReason::kNone,
               addr, bytes, 0, CUDA_SUCCESS);
  MutexLock lock(&mu_);
  extents_[idx].ctx = ctx;
  extents_[idx].frames = frames;
  return CUDA_SUCCESS;
}

void HostArena::UnpinExtent(const Extent& e, OwnPinReason why, uint32_t detail) {
  const uintptr_t addr = PageAddr(e.start);
  const uint64_t bytes = e.pages * page_;
  if (options_.registrations != nullptr) {
    Region reg;
    if (options_.registrations->Lookup(addr, &reg) && reg.start == addr &&
        reg.kind == MemKind::kPinnedByPinshim) {
      options_.registrations->Remove(addr, nullptr);
    }
  }
  CUresult r;
  {
    ScopedContext scope(ops_, e.ctx);
    RelaxedCaptureMode relaxed(ops_);
    r = ops_->mem_host_unregister(reinterpret_cast<void*>(addr));
  }
  FreeFrames(e.frames, e.pages);
  account_->Release(PinUse::kArena, bytes);
  registered_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kUnpinned, OwnPinPart::kArena, why, addr, bytes,
               0, r, detail);
}

// --- blocks ---------------------------------------------------------------

void* HostArena::AllocateSmall(uint32_t cls, size_t align) {
  const uint64_t cb = ArenaClassBytes(cls);
  SmallClass& c = classes_[cls];
  for (;;) {
    uintptr_t block = 0;
    bool refill = false;
    {
      MutexLock lock(&mu_);
      if (c.free_head != 0) {
        block = c.free_head;
        c.free_head = *reinterpret_cast<uintptr_t*>(block);
      } else if (c.cursor != 0 && c.cursor + cb <= c.end) {
        block = c.cursor;
        c.cursor += cb;
      } else if (!c.refilling) {
        c.refilling = true;
        refill = true;
      }
    }
    if (block != 0) {
      const uintptr_t user = AlignUp(block + sizeof(Header), align);
      Header* h = HeaderOf(reinterpret_cast<void*>(user));
      h->magic = kMagicSmall;
      h->offset = static_cast<uint32_t>(user - block);
      h->ext = -1;
      h->info = cls;
      return reinterpret_cast<void*>(user);
    }
    if (!refill) {
      Backoff();  // another thread is getting this class a span
      continue;
    }
    uint64_t span = cb * 16;
    if (span < kMinSpanBytes) span = kMinSpanBytes;
    if (span > kMaxSpanBytes) span = kMaxSpanBytes;
    const uint64_t pages = (span + page_ - 1) / page_;
    uint64_t start;
    int32_t ext;
    const bool ok = AllocatePages(pages, &start, &ext);
    MutexLock lock(&mu_);
    c.refilling = false;
    if (!ok) return nullptr;
    c.cursor = PageAddr(start);
    c.end = c.cursor + (pages * page_) / cb * cb;
  }
}

void* HostArena::AllocateLarge(size_t bytes, size_t align) {
  const uint64_t need = bytes + sizeof(Header) + (align > 16 ? align - 16 : 0);
  const uint64_t pages = (need + page_ - 1) / page_;
  if (pages > npages_ || pages > UINT32_MAX) return nullptr;
  uint64_t start;
  int32_t ext;
  if (!AllocatePages(pages, &start, &ext)) return nullptr;
  const uintptr_t block = PageAddr(start);
  const uintptr_t user = AlignUp(block + sizeof(Header), align);
  Header* h = HeaderOf(reinterpret_cast<void*>(user));
  h->magic = kMagicLarge;
  h->offset = static_cast<uint32_t>(user - block);
  h->ext = ext;
  h->info = static_cast<uint32_t>(pages);
  return reinterpret_cast<void*>(user);
}

void* HostArena::AllocateBlock(size_t bytes, size_t align) {
  if (!active() || bytes > (size_t{1} << 60) || align > (size_t{1} << 30)) {
    declined_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (ndeferred_.load(std::memory_order_relaxed) != 0) ReapDeferred();
  const uint64_t need = bytes + sizeof(Header) + (align > 16 ? align - 16 : 0);
  void* p = need <= options_.small_max_bytes ? AllocateSmall(ArenaClassOfBytes(need), align)
                                             : AllocateLarge(bytes, align);
  if (p == nullptr) {
    declined_.fetch_add(1, std::memory_order_relaxed);
  } else {
    allocs_.fetch_add(1, std::memory_order_relaxed);
  }
  return p;
}

void* HostArena::Malloc(size_t bytes) { return AllocateBlock(bytes, 16); }

void* HostArena::Calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) return nullptr;
  void* p = AllocateBlock(total, 16);
  if (p != nullptr) memset(p, 0, total);
  return p;
}

void* HostArena::Memalign(size_t align, size_t bytes) {
  if (align == 0 || (align & (align - 1)) != 0) return nullptr;
  return AllocateBlock(bytes, align < 16 ? 16 : align);
}

size_t HostArena::UsableSize(const void* p) const {
  if (p == nullptr || !Owns(p)) return 0;
  const Header* h = HeaderOf(p);
  const uintptr_t user = reinterpret_cast<uintptr_t>(p);
  const uintptr_t block = user - h->offset;
  if (h->magic == kMagicSmall) return block + ArenaClassBytes(h->info) - user;
  if (h->magic == kMagicLarge) return block + uint64_t{h->info} * page_ - user;
  return 0;
}

void HostArena::FreeNow(void* p) {
  Header* h = HeaderOf(p);
  const uintptr_t block = reinterpret_cast<uintptr_t>(p) - h->offset;
  if (h->magic == kMagicSmall) {
    const uint32_t cls = h->info;
    h->magic = 0;
    MutexLock lock(&mu_);
    if (nlost_ == 0 || !InLostExtentLocked(block)) {
      *reinterpret_cast<uintptr_t*>(block) = classes_[cls].free_head;
      classes_[cls].free_head = block;
    }
  } else {
    const uint64_t pages = h->info;
    const int32_t ext = h->ext;
    h->magic = 0;
    MutexLock lock(&mu_);
    FreePagesLocked((block - base_) / page_, pages, ext);
  }
  frees_.fetch_add(1, std::memory_order_relaxed);
}

bool HostArena::OverlapsPendingLocked(uintptr_t start, uintptr_t end) const {
  for (uint32_t i = 0; i < kMaxPending; ++i) {
    const Pending& e = pending_[i];
    if (e.start != 0 && !e.fences.empty() && e.start < end && start < e.end) return true;
  }
  return false;
}

bool HostArena::DeferIfPending(void* p) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = start + UsableSize(p);
  Fence wait[FenceSet::kSlots * 4];
  int nwait = 0;
  {
    MutexLock lock(&mu_);
    if (!OverlapsPendingLocked(start, end)) return false;
    if (ndeferred_locked_ < kMaxPending) {
      deferred_[ndeferred_locked_++] = start;
      ndeferred_.store(ndeferred_locked_, std::memory_order_relaxed);
      deferred_frees_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    // No room to defer: wait for the copies here instead.
    for (uint32_t i = 0; i < kMaxPending && nwait + FenceSet::kSlots <= 16; ++i) {
      Pending& e = pending_[i];
      if (e.start != 0 && e.start < end && start < e.end) {
        nwait += e.fences.TakeAll(&wait[nwait]);
        e.start = 0;
        npending_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  }
  for (int i = 0; i < nwait; ++i) {
    fences_->Wait(wait[i]);
    fences_->Recycle(wait[i]);
  }
  return DeferIfPending(p);
}

void HostArena::ReapDeferred() {
  struct Probe {
    uint32_t entry;
    Fence fence;
  } probes[kReapBatch];
  int nprobes = 0;
  {
    MutexLock lock(&mu_);
    for (uint32_t i = 0; i < kMaxPending && nprobes < kReapBatch; ++i) {
      Pending& e = pending_[i];
      if (e.start == 0) continue;
      Fence fs[FenceSet::kSlots];
      int k = e.fences.Copy(fs);
      for (int j = 0; j < k && nprobes < kReapBatch; ++j) probes[nprobes++] = {i, fs[j]};
    }
  }
  bool done[kReapBatch];
  for (int i = 0; i < nprobes; ++i) done[i] = fences_->IsDone(probes[i].fence);
  Fence recycle[kReapBatch];
  int nrecycle = 0;
  void* ready[kReapBatch];
  int nready = 0;
  {
    MutexLock lock(&mu_);
    for (int i = 0; i < nprobes; ++i) {
      Pending& e = pending_[probes[i].entry];
      Fence f;
      if (done[i] && e.start != 0 && e.fences.Remove(probes[i].fence.id, &f)) {
        recycle[nrecycle++] = f;
        if (e.fences.empty()) {
          e.start = 0;
          npending_.fetch_sub(1, std::memory_order_relaxed);
        }
      }
    }
    for (uint32_t i = 0; i < ndeferred_locked_ && nready < kReapBatch;) {
      void* p = reinterpret_cast<void*>(deferred_[i]);
      const uintptr_t start = deferred_[i];
      if (!OverlapsPendingLocked(start, start + UsableSize(p))) {
        ready[nready++] = p;
        deferred_[i] = deferred_[--ndeferred_locked_];
      } else {
        ++i;
      }
    }
    ndeferred_.store(ndeferred_locked_, std::memory_order_relaxed);
  }
  for (int i = 0; i < nrecycle; ++i) fences_->Recycle(recycle[i]);
  for (int i = 0; i < nready; ++i) FreeNow(ready[i]);
}

void HostArena::Free(void* p) {
  if (p == nullptr || !Owns(p)) return;
  const Header* h = HeaderOf(p);
  if (h->magic != kMagicSmall && h->magic != kMagicLarge) {
    bad_frees_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!active()) return;  // fork child: the memory stays as it is
  if (npending_.load(std::memory_order_relaxed) != 0 && DeferIfPending(p)) return;
  FreeNow(p);
  if (ndeferred_.load(std::memory_order_relaxed) != 0) ReapDeferred();
  MaybeTrimIdle();
}

void* HostArena::Realloc(void* p, size_t bytes, void* (*fallback)(size_t)) {
  if (bytes == 0) {
    Free(p);
    return nullptr;
  }
  Header* h = HeaderOf(p);
  if (h->magic != kMagicSmall && h->magic != kMagicLarge) return nullptr;
  const size_t old = UsableSize(p);
  const uintptr_t user = reinterpret_cast<uintptr_t>(p);
  bool pending = false;
  if (npending_.load(std::memory_order_relaxed) != 0) {
    MutexLock lock(&mu_);
    pending = OverlapsPendingLocked(user, user + old);
  }
  // In place only while no copy is pending on the block (a shrink would
  // hand its tail to someone else) and the arena is still allocating.
  if (!pending && active()) {
    if (bytes <= old && (bytes >= old / 2 || old <= 64)) return p;
    if (h->magic == kMagicLarge) {
      const uintptr_t block = user - h->offset;
      const uint64_t start = (block - base_) / page_;
      const uint64_t pages = h->info;
      const uint64_t want = (h->offset + bytes + page_ - 1) / page_;
      MutexLock lock(&mu_);
      if (want < pages) {
        FreePagesLocked(start + want, pages - want, h->ext);
        h->info = static_cast<uint32_t>(want);
        return p;
      }
      if (want > pages && want <= UINT32_MAX) {
        // Grow into the free run right after the block, same registration.
        uint32_t lo = 0, hi = nruns_;
        while (lo < hi) {
          uint32_t mid = (lo + hi) / 2;
          if (runs_[mid].start < start + pages) {
            lo = mid + 1;
          } else {
            hi = mid;
          }
        }
        if (lo < nruns_ && runs_[lo].start == start + pages && runs_[lo].ext == h->ext &&
            runs_[lo].pages >= want - pages) {
          TakeFromRunLocked(static_cast<int32_t>(lo), want - pages);
          extents_[h->ext].live_pages += want - pages;
          h->info = static_cast<uint32_t>(want);
          return p;
        }
      }
    }
  }
  void* q = AllocateBlock(bytes, 16);
  if (q == nullptr && fallback != nullptr) q = fallback(bytes);
  if (q == nullptr) return nullptr;
  memcpy(q, p, old < bytes ? old : bytes);
  Free(p);
  return q;
}

void HostArena::NoteAsyncUse(const void* p, uint64_t bytes, CUstream stream) {
  if (!active() || !Owns(p) || bytes == 0) return;
  FenceAttachment attach(fences_, stream);
  if (!attach.recorded()) return;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = start + bytes;
  {
    MutexLock lock(&mu_);
    Pending* slot = nullptr;
    for (uint32_t i = 0; i < kMaxPending; ++i) {
      Pending& e = pending_[i];
      if (e.start == start && e.end == end) {
        slot = &e;
        break;
      }
      if (e.start == 0 && slot == nullptr) slot = &e;
    }
    if (slot != nullptr) {
      if (slot->start == 0) {
        slot->start = start;
        slot->end = end;
        slot->fences = FenceSet();
        npending_.fetch_add(1, std::memory_order_relaxed);
      }
      attach.AddTo(&slot->fences);
    }
  }
  // No room to remember it: Finish waited for it, which is always safe.
  if (!attach.Finish()) ReapDeferred();
}

uint64_t HostArena::TrimImpl(uint64_t bytes_wanted, bool idle_only, OwnPinReason why) {
  if (!active()) return 0;
  uint64_t freed = 0;
  const uint64_t now = Now();
  while (freed < bytes_wanted) {
    int32_t idx = -1;
    Extent e;
    {
      MutexLock lock(&mu_);
      for (int32_t i = 0; i < static_cast<int32_t>(kMaxExtents); ++i) {
        const Extent& x = extents_[i];
        const bool trimmable =
            x.state == kExtentRegistered || x.state == kExtentUnpinned || x.state == kExtentLost;
        if (!trimmable || x.live_pages != 0) continue;
        if (idle_only && x.state != kExtentLost &&
            (options_.idle_trim_ns == 0 || now - x.idle_since_ns < options_.idle_trim_ns)) {
          continue;
        }
        idx = i;
        break;
      }
      if (idx < 0) break;
      // All its pages are free: take its runs out of the table.
      uint32_t w = 0;
      for (uint32_t r = 0; r < nruns_; ++r) {
        if (runs_[r].ext != idx) runs_[w++] = runs_[r];
      }
      nruns_ = w;
      e = extents_[idx];
      if (e.state == kExtentLost) --nlost_;
      extents_[idx].state = kExtentReleasing;
    }
    const uintptr_t addr = PageAddr(e.start);
    const uint64_t bytes = e.pages * page_;
    if (e.state == kExtentRegistered) {
      UnpinExtent(e, why, 0);
      extents_live_.fetch_sub(1, std::memory_order_relaxed);
      trimmed_.fetch_add(bytes, std::memory_order_relaxed);
      freed += bytes;
    }
    if (e.state == kExtentLost) {
      // Whatever the program left mapped there goes: the range is the
      // arena's reservation again (the program freed every block of it).
      SysMmapFixed(addr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
    } else {
      SysMadvise(addr, bytes, MADV_DONTNEED);
      SysMprotect(addr, bytes, PROT_NONE);
    }
    MutexLock lock(&mu_);
    InsertRunLocked(e.start, e.pages, -1);
    extents_[idx].state = kExtentFree;
    extents_[idx].frames = nullptr;
    extents_[idx].next_free = free_extent_;
    free_extent_ = idx;
  }
  return freed;
}

// --- page changes -------------------------------------------------------

bool HostArena::InLostExtentLocked(uintptr_t a) const {
  if (a < base_ || a - base_ >= size_) return false;
  const uint64_t page = (a - base_) / page_;
  for (uint32_t i = 0; i < kMaxExtents; ++i) {
    const Extent& x = extents_[i];
    if (x.state == kExtentLost && page >= x.start && page - x.start < x.pages) return true;
  }
  return false;
}

void HostArena::LoseExtentLocked(int32_t idx) {
  Extent& e = extents_[idx];
  e.state = kExtentLost;
  ++nlost_;
  lost_.fetch_add(1, std::memory_order_relaxed);
  // Its free pages and free small blocks are not handed out again.
  uint32_t w = 0;
  for (uint32_t r = 0; r < nruns_; ++r) {
    if (runs_[r].ext != idx) runs_[w++] = runs_[r];
  }
  nruns_ = w;
  const uintptr_t lo = PageAddr(e.start), hi = PageAddr(e.start + e.pages);
  for (uint32_t c = 0; c < nclasses_; ++c) {
    SmallClass& k = classes_[c];
    if (k.cursor >= lo && k.cursor < hi) k.cursor = k.end = 0;
    uintptr_t* link = &k.free_head;
    while (*link != 0) {
      const uintptr_t block = *link;
      if (block >= lo && block < hi) {
        *link = *reinterpret_cast<uintptr_t*>(block);
      } else {
        link = reinterpret_cast<uintptr_t*>(block);
      }
    }
  }
}

void HostArena::BeginPageChange(uintptr_t start, uint64_t bytes, OwnPinReason why, uint32_t detail,
                                ArenaChangeTicket* t) {
  t->n = 0;
  if (!active() || bytes == 0 || !MayOverlap(start, bytes)) return;
  const uintptr_t end = bytes > UINTPTR_MAX - start ? UINTPTR_MAX : start + bytes;
  auto mine = [t](int32_t i) {
    for (int k = 0; k < t->n; ++k) {
      if (t->ext[k] == i) return true;
    }
    return false;
  };
  for (;;) {
    int32_t idx = -1;
    bool wait = false;
    Extent e;
    {
      MutexLock lock(&mu_);
      for (int32_t i = 0; i < static_cast<int32_t>(kMaxExtents); ++i) {
        const Extent& x = extents_[i];
        if (x.state == kExtentFree || x.state == kExtentLost || x.state == kExtentUnpinned) {
          continue;
        }
        if (!(PageAddr(x.start) < end && start < PageAddr(x.start + x.pages))) continue;
        if (x.state == kExtentRegistered) {
          idx = i;
          break;
        }
        if (!mine(i)) wait = true;  // being pinned, trimmed or repinned elsewhere
      }
      if (idx >= 0) {
        if (t->n < ArenaChangeTicket::kMax) {
          extents_[idx].state = kExtentRepinning;
        } else {
          LoseExtentLocked(idx);  // more than one change can follow: not repinned
        }
        e = extents_[idx];
        extents_[idx].frames = nullptr;
      }
    }
    if (idx < 0) {
      if (!wait) return;
      Backoff();
      continue;
    }
    UnpinExtent(e, why, detail);
    page_change_unpins_.fetch_add(1, std::memory_order_relaxed);
    if (e.state == kExtentRepinning) {
      t->ext[t->n++] = idx;
    } else {
      extents_live_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

void HostArena::EndPageChange(const ArenaChangeTicket& t, bool stays_anonymous, bool repin) {
  for (int k = 0; k < t.n; ++k) {
    const int32_t idx = t.ext[k];
    Extent e;
    {
      MutexLock lock(&mu_);
      e = extents_[idx];
    }
    const uintptr_t addr = PageAddr(e.start);
    const uint64_t bytes = e.pages * page_;
    OwnPinReason refused = OwnPinReason::kRefusedPageChange;
    CUresult r = CUDA_SUCCESS;
    if (stays_anonymous && repin) r = PinExtent(idx, addr, bytes, e.ctx, &refused);
    const bool pinned =
        stays_anonymous && repin && r == CUDA_SUCCESS && refused == OwnPinReason::kNone;
    if (pinned) repinned_.fetch_add(1, std::memory_order_relaxed);
    if (!pinned && stays_anonymous && repin) {
      ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kArena, refused, addr,
                   bytes, 0, r);
    }
    MutexLock lock(&mu_);
    if (pinned) {
      extents_[idx].state = kExtentRegistered;
      continue;
    }
    extents_live_.fetch_sub(1, std::memory_order_relaxed);
    // Still private anonymous memory, only not pinned (a driver refusal, or
    // another change racing): the program's blocks and the free pages stay
    // usable. Anything else: none of it is handed out again.
    if (stays_anonymous) {
      extents_[idx].state = kExtentUnpinned;
    } else {
      LoseExtentLocked(idx);
    }
  }
}

void HostArena::BeforeCopy(const void* p, uint64_t bytes) {
  if (options_.registrations == nullptr || bytes == 0) return;
  Region reg;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (!options_.registrations->Lookup(a, &reg) || reg.kind != MemKind::kPinnedByPinshim ||
      bytes <= reg.bytes - (a - reg.start)) {
    VerifyBeforeCopy(p, bytes);
    return;
  }
  // Measured on the H200: a copy that starts in a registration and runs
  // past its end fails (CUDA_ERROR_INVALID_VALUE); of malloc memory it works.
  ArenaChangeTicket t;
  BeginPageChange(reg.start, reg.bytes, OwnPinReason::kCopyPastRegistration, 0, &t);
  EndPageChange(t, /*stays_anonymous=*/true, /*repin=*/false);
}

void HostArena::VerifyBeforeCopy(const void* p, uint64_t bytes) {
  if (!options_.verify_pages || options_.registrations == nullptr || bytes == 0) return;
  Region reg;
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (!options_.registrations->Lookup(a, &reg) || reg.id == 0 ||
      reg.kind != MemKind::kPinnedByPinshim || reg.id > kMaxExtents) {
    return;
  }
  const int32_t idx = static_cast<int32_t>(reg.id - 1);
  {
    // Compared under the lock: the frames go with the registration, which
    // nothing can drop meanwhile (verification is a debugging setting).
    MutexLock lock(&mu_);
    const Extent& x = extents_[idx];
    if (x.state != kExtentRegistered || x.frames == nullptr || PageAddr(x.start) != reg.start) {
      return;
    }
    const uintptr_t lo = PageAddr(x.start);
    const uint64_t from = (a - lo) / page_;
    uint64_t to = (a + bytes - lo + page_ - 1) / page_;
    if (to > x.pages) to = x.pages;
    if (from >= to || PageFrames::Same(lo + from * page_, to - from, x.frames + from)) return;
  }
  ArenaChangeTicket t;
  BeginPageChange(reg.start, reg.bytes, OwnPinReason::kPagesVerifiedChanged, 0, &t);
  EndPageChange(t, /*stays_anonymous=*/true);
}

uint64_t HostArena::TrimIdle() { return TrimImpl(UINT64_MAX, true, OwnPinReason::kIdleTrim); }

uint64_t HostArena::Trim(uint64_t bytes_wanted, OwnPinReason why) {
  return TrimImpl(bytes_wanted, false, why);
}

uint64_t HostArena::IdleBytes() const {
  if (!active()) return 0;
  uint64_t idle = 0;
  MutexLock lock(&mu_);
  for (uint32_t i = 0; i < kMaxExtents; ++i) {
    const Extent& x = extents_[i];
    if (x.state == kExtentRegistered && x.live_pages == 0) idle += x.pages * page_;
  }
  return idle;
}

void HostArena::MaybeTrimIdle() {
  if (options_.idle_trim_ns == 0) return;
  const uint64_t now = Now();
  uint64_t last = last_trim_ns_.load(std::memory_order_relaxed);
  if (now - last < options_.idle_trim_ns / 2) return;
  if (!last_trim_ns_.compare_exchange_strong(last, now)) return;
  TrimImpl(UINT64_MAX, true, OwnPinReason::kIdleTrim);
}

void HostArena::AfterForkChild() {
  mu_.AfterFork();
  active_.store(false, std::memory_order_release);
}

ArenaStats HostArena::Stats() const {
  ArenaStats s;
  s.allocs = allocs_.load();
  s.frees = frees_.load();
  s.declined = declined_.load();
  s.deferred_frees = deferred_frees_.load();
  s.extents = extents_live_.load();
  s.registered_bytes = registered_bytes_.load();
  s.registrations = registrations_.load();
  s.trimmed_bytes = trimmed_.load();
  s.bad_frees = bad_frees_.load();
  s.repinned = repinned_.load();
  s.page_change_unpins = page_change_unpins_.load();
  s.lost = lost_.load();
  return s;
}

#ifdef PINSHIM_DEBUG_INVARIANTS

PINSHIM_INVARIANT_WALKER InvariantReport HostArena::CheckInvariants() const {
  InvariantReport r;
  if (!active() || size_ == 0) return r;  // off: nothing is served
  MutexLock lock(&mu_);
  // The extents in use, sorted by start: A5, A7 and the lookups below.
  int32_t used[kMaxExtents];
  uint64_t run_pages[kMaxExtents];  // set for the extents in use only
  uint32_t nused = 0, nfree = 0, nregistered = 0, nlost = 0;
  uint64_t registered_bytes = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxExtents); ++i) {
    const Extent& x = extents_[i];
    r.Expect(x.state <= kExtentLost, "A9 an extent's state is one of ExtentState", i, x.state);
    r.Expect(
        x.state != kExtentRegistering && x.state != kExtentReleasing && x.state != kExtentRepinning,
        "A9 no extent is registering, releasing or repinning", i, x.state);
    if (x.state == kExtentFree) {
      ++nfree;
    } else {
      used[nused++] = i;
      run_pages[i] = 0;
    }
    if (x.state == kExtentLost) ++nlost;
    const uintptr_t addr = PageAddr(x.start);
    if (x.state == kExtentRegistered) {
      ++nregistered;
      registered_bytes += x.pages * page_;
      r.Expect(x.ctx != nullptr, "A12 a registered extent has a context", i);
      if (options_.registrations != nullptr) {
        Region reg;
        const bool found = options_.registrations->Lookup(addr, &reg);
        r.Expect(found && reg.start == addr && reg.bytes == x.pages * page_ &&
                     reg.kind == MemKind::kPinnedByPinshim && reg.source == kSourcePinshim &&
                     reg.id == static_cast<uint64_t>(i) + 1,
                 "A11 a registered extent is in the registrations registry as pinshim's pinning", i,
                 addr);
      }
    } else {
      r.Expect(x.frames == nullptr, "A12 an extent not registered holds no frames", i);
      if (options_.registrations != nullptr &&
          (x.state == kExtentUnpinned || x.state == kExtentLost)) {
        Region reg;
        const bool pinned = options_.registrations->Lookup(addr, &reg) && reg.start == addr &&
                            reg.kind == MemKind::kPinnedByPinshim &&
                            reg.id == static_cast<uint64_t>(i) + 1;
        r.Expect(!pinned, "A11 an unpinned or lost extent is not in the registrations registry", i,
                 addr);
      }
    }
  }
  std::sort(used, used + nused,
            [this](int32_t a, int32_t b) { return extents_[a].start < extents_[b].start; });
  // The extent in use holding page p, or -1.
  auto holding = [&](uint64_t p) -> int32_t {
    uint32_t lo = 0, hi = nused;
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      if (extents_[used[mid]].start <= p) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == 0) return -1;
    const Extent& x = extents_[used[lo - 1]];
    return p - x.start < x.pages ? used[lo - 1] : -1;
  };
  r.Expect(top_ <= npages_, "A1 top_ <= npages_", top_, npages_);
  uint64_t in_use_pages = 0;
  for (uint32_t k = 0; k < nused; ++k) {
    const Extent& x = extents_[used[k]];
    r.Expect(x.pages > 0 && x.start + x.pages <= top_ && x.live_pages <= x.pages,
             "A5 an extent in use holds pages below top_, live_pages <= pages", used[k],
             x.live_pages);
    if (k > 0) {
      const Extent& before = extents_[used[k - 1]];
      r.Expect(before.start + before.pages <= x.start, "A5 extents in use do not overlap",
               used[k - 1], used[k]);
    }
    in_use_pages += x.pages;
  }
  r.Expect(nruns_ <= kMaxRuns, "A1 at most kMaxRuns runs", nruns_);
  uint64_t unregistered_pages = 0;
  for (uint32_t k = 0; k < nruns_ && k < kMaxRuns; ++k) {
    const Run& run = runs_[k];
    r.Expect(run.pages > 0 && run.start + run.pages <= top_, "A1 a free run holds pages below top_",
             run.start, run.pages);
    if (k > 0) {
      const Run& before = runs_[k - 1];
      r.Expect(before.start + before.pages <= run.start,
               "A1 free runs are sorted and do not overlap", before.start, run.start);
      r.Expect(before.start + before.pages != run.start || before.ext != run.ext,
               "A2 touching runs never share a registration", run.start, run.ext);
    }
    if (run.ext >= 0) {
      const bool valid = static_cast<uint32_t>(run.ext) < kMaxExtents;
      const Extent* x = valid ? &extents_[run.ext] : nullptr;
      r.Expect(x != nullptr && (x->state == kExtentRegistered || x->state == kExtentUnpinned) &&
                   run.start >= x->start && run.start + run.pages <= x->start + x->pages,
               "A3 a run of an extent lies in it, and it is registered or unpinned", run.start,
               run.ext);
      if (valid && x->state != kExtentFree) run_pages[run.ext] += run.pages;
    } else {
      unregistered_pages += run.pages;
      // The first extent in use ending past the run's start must start past its end.
      uint32_t lo = 0, hi = nused;
      while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        const Extent& x = extents_[used[mid]];
        if (x.start + x.pages <= run.start) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      r.Expect(lo == nused || extents_[used[lo]].start >= run.start + run.pages,
               "A4 an unregistered run overlaps no extent in use", run.start, run.pages);
    }
  }
  for (uint32_t k = 0; k < nused; ++k) {
    const Extent& x = extents_[used[k]];
    if (x.state != kExtentRegistered && x.state != kExtentUnpinned) continue;
    r.Expect(run_pages[used[k]] + x.live_pages == x.pages,
             "A6 an extent's free runs and live pages add up to its pages", used[k],
             run_pages[used[k]] + x.live_pages);
  }
  r.Expect(unregistered_pages + in_use_pages == top_,
           "A7 the pages below top_ are the unregistered runs and the extents in use",
           unregistered_pages + in_use_pages, top_);
  uint32_t listed = 0;
  for (int32_t f = free_extent_; f >= 0;) {
    if (++listed > kMaxExtents || static_cast<uint32_t>(f) >= kMaxExtents) {
      r.Fail("A8 the extent free list runs in a circle or out of the table", listed, f);
      break;
    }
    r.Expect(extents_[f].state == kExtentFree, "A8 the extent free list holds free extents", f,
             extents_[f].state);
    f = extents_[f].next_free;
  }
  r.Expect(listed == nfree, "A8 the extent free list holds exactly the free extents", listed,
           nfree);
  r.Expect(extents_live_.load(std::memory_order_relaxed) == nregistered,
           "A10 extents_live_ counts the registered extents",
           extents_live_.load(std::memory_order_relaxed), nregistered);
  r.Expect(registered_bytes_.load(std::memory_order_relaxed) == registered_bytes,
           "A10 registered_bytes_ is the registered extents' bytes",
           registered_bytes_.load(std::memory_order_relaxed), registered_bytes);
  r.Expect(account_->pinned_for(PinUse::kArena) == registered_bytes,
           "A10 the account's arena bytes are the registered extents'",
           account_->pinned_for(PinUse::kArena), registered_bytes);
  r.Expect(nlost_ == nlost, "A10 nlost_ counts the lost extents", nlost_, nlost);
  // A block of a small class lies in an extent in use and not lost.
  auto usable = [&](uintptr_t a) {
    if (a < base_ || a - base_ >= size_) return false;
    const int32_t e = holding((a - base_) / page_);
    return e >= 0 && extents_[e].state != kExtentLost;
  };
  for (uint32_t c = 0; c < nclasses_; ++c) {
    const SmallClass& k = classes_[c];
    r.Expect(!k.refilling, "A13 no small class is being refilled", c);
    r.Expect(k.cursor <= k.end, "A13 a small class's cursor lies within its span", c, k.cursor);
    if (k.cursor != 0 && k.cursor < k.end) {
      // (A span used up hands out nothing more: where it was matters no longer.)
      const bool one = usable(k.cursor) && usable(k.end - 1) &&
                       holding((k.cursor - base_) / page_) == holding((k.end - 1 - base_) / page_);
      r.Expect(one, "A13 a small class's span lies in one extent in use and not lost", c, k.cursor);
    }
    const uint64_t cb = ArenaClassBytes(c);
    uint64_t n = 0;
    for (uintptr_t b = k.free_head; b != 0; b = *reinterpret_cast<const uintptr_t*>(b)) {
      if (++n > size_ / cb + 1) {
        r.Fail("A13 a small class's free list runs in a circle", c);
        break;
      }
      if (!usable(b)) {
        r.Fail("A13 a free small block lies in an extent in use and not lost", c, b);
        break;  // not followed: its link may be anything
      }
    }
  }
  uint32_t pending = 0;
  for (uint32_t i = 0; i < kMaxPending; ++i) {
    const Pending& p = pending_[i];
    if (p.start == 0) continue;
    ++pending;
    r.Expect(p.start < p.end && !p.fences.empty() && p.fences.WellFormed(),
             "A14 a pending copy range has well-formed fences", p.start, p.end);
  }
  r.Expect(npending_.load(std::memory_order_relaxed) == pending,
           "A14 npending_ counts the pending copy ranges",
           npending_.load(std::memory_order_relaxed), pending);
  r.Expect(ndeferred_locked_ <= kMaxPending &&
               ndeferred_.load(std::memory_order_relaxed) == ndeferred_locked_,
           "A15 ndeferred_ is the deferred frees' count", ndeferred_locked_,
           ndeferred_.load(std::memory_order_relaxed));
  for (uint32_t i = 0; i < ndeferred_locked_ && i < kMaxPending; ++i) {
    r.Expect(Owns(reinterpret_cast<const void*>(deferred_[i])),
             "A15 a deferred free points into the arena", deferred_[i]);
    for (uint32_t j = 0; j < i; ++j) {
      r.Expect(deferred_[j] != deferred_[i], "A15 deferred frees are distinct", i, j);
    }
  }
  return r;
}

bool HostArena::CorruptForTesting(Corruption what) {
  if (!active() || size_ == 0) return false;
  MutexLock lock(&mu_);
  switch (what) {
    case Corruption::kRuns:
      if (nruns_ == 0) return false;
      runs_[0].pages ^= uint64_t{1} << 40;  // far past top_
      return true;
    case Corruption::kExtentLive:
      for (uint32_t i = 0; i < kMaxExtents; ++i) {
        if (extents_[i].state == kExtentRegistered) {
          extents_[i].live_pages ^= 1;
          return true;
        }
      }
      return false;
    case Corruption::kRegisteredBytes:
      registered_bytes_.fetch_xor(page_, std::memory_order_relaxed);
      return true;
  }
  return false;
}

#endif  // PINSHIM_DEBUG_INVARIANTS

}  // namespace optimize
}  // namespace pinshim
