#include "shim/optimize/host_arena.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>

#include "shim/core/internal_alloc.h"
#include "shim/optimize/host_arena_parts.h"
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

}  // namespace optimize
}  // namespace pinshim
