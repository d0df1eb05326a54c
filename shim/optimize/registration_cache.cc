#include "shim/optimize/registration_cache.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstring>

#include <sys/mman.h>
#include <sys/syscall.h>

#include "shim/core/internal_alloc.h"
#include "shim/optimize/cost_model.h"
#include "shim/optimize/page_change.h"
#include "shim/optimize/page_frames.h"
#include "shim/optimize/registration_cache_parts.h"

namespace pinshim {
namespace optimize {

const char* CacheFailureName(CacheFailure failure) {
  switch (failure) {
    case CacheFailure::kAlreadyRegistered: return "already_registered";
    case CacheFailure::kMemlockLimit: return "memlock_limit";
    case CacheFailure::kOutOfMemory: return "out_of_memory";
    case CacheFailure::kDriverError: return "driver_error";
    case CacheFailure::kCap: return "cap";
    case CacheFailure::kTableFull: return "table_full";
    case CacheFailure::kNoContext: return "no_context";
    case CacheFailure::kPagesChanged: return "pages_changed";
    default: return "?";
  }
}

namespace {

// Frame arrays come and go with registrations: mapped straight from the
// kernel (InternalAlloc never gives memory back).
PageFrame* NewFrames(uint64_t n) {
  long r = syscall(SYS_mmap, nullptr, n * sizeof(PageFrame), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return r < 0 && r > -4096 ? nullptr : reinterpret_cast<PageFrame*>(r);
}

void FreeFrames(PageFrame* f, uint64_t n) {
  if (f != nullptr) syscall(SYS_munmap, f, n * sizeof(PageFrame));
}

}  // namespace

bool RegistrationCache::Init(const DriverOps* ops, FenceManager* fences, PinAccount* account,
                             const CacheOptions& options) {
  if (ops == nullptr || fences == nullptr || account == nullptr || !DriverOpsComplete(*ops)) {
    return false;
  }
  options_ = options;
  if (options_.max_entries == 0) options_.max_entries = 1;
  if (options_.max_entries > kMaxEntries) options_.max_entries = kMaxEntries;
  if (options_.decay_ns == 0) options_.decay_ns = 1;
  if (entries_ == nullptr) {
    entries_ = static_cast<Entry*>(InternalAlloc(sizeof(Entry) * kMaxEntries));
    order_ = static_cast<int32_t*>(InternalAllocPresent(sizeof(int32_t) * kMaxEntries));
    // Each new allocation's first copy takes a candidate slot at random:
    // present from the start, no copy pays a page fault for one.
    candidates_ =
        static_cast<Candidate*>(InternalAllocPresent(sizeof(Candidate) * kCandidateSlots));
    if (entries_ == nullptr || order_ == nullptr || candidates_ == nullptr) return false;
  }
  free_entry_ = -1;
  for (int32_t i = static_cast<int32_t>(options_.max_entries) - 1; i >= 0; --i) {
    entries_[i].state = kEntryFree;
    entries_[i].next_free = free_entry_;
    free_entry_ = i;
  }
  norder_ = 0;
  ops_ = ops;
  fences_ = fences;
  account_ = account;
  active_.store(true, std::memory_order_release);
  return true;
}

uint64_t RegistrationCache::Now() const {
  return options_.now_ns != nullptr ? options_.now_ns() : MonotonicNs();
}

RegistrationCache::Candidate* RegistrationCache::FindCandidateLocked(uint64_t alloc_id,
                                                                     uint64_t now, bool create) {
  const uint32_t base = CandidateHome(alloc_id, kCandidateSlots);
  Candidate* victim = nullptr;
  for (int i = 0; i < kCandidateProbes; ++i) {
    Candidate* c = &candidates_[(base + i) & (kCandidateSlots - 1)];
    if (c->alloc_id == alloc_id) return c;
    if (c->busy) continue;
    // Replace an empty slot first, else the one idle longest: ids of freed
    // allocations never come back, so stale entries simply age out.
    if (victim == nullptr ||
        (victim->alloc_id != 0 && (c->alloc_id == 0 || c->last_ns < victim->last_ns))) {
      victim = c;
    }
  }
  if (!create || victim == nullptr) return nullptr;
  memset(victim, 0, sizeof(*victim));
  victim->alloc_id = alloc_id;
  victim->last_ns = now;
  return victim;
}

int32_t RegistrationCache::FindEntryLocked(uintptr_t p) const {
  // Last entry starting at or before p.
  uint32_t lo = 0, hi = norder_;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (entries_[order_[mid]].start <= p) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return -1;
  int32_t idx = order_[lo - 1];
  const Entry& e = entries_[idx];
  return p - e.start < e.bytes ? idx : -1;
}

int32_t RegistrationCache::FirstOverlapLocked(uintptr_t start, uintptr_t end) const {
  uint32_t lo = 0, hi = norder_;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (entries_[order_[mid]].start < start) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  // Entries do not overlap each other, so only the one before `lo` can
  // reach into [start, end) from the left.
  if (lo > 0) {
    const Entry& e = entries_[order_[lo - 1]];
    if (e.start + e.bytes > start) return order_[lo - 1];
  }
  if (lo < norder_ && entries_[order_[lo]].start < end) return order_[lo];
  return -1;
}

int32_t RegistrationCache::NewEntryLocked(uintptr_t start, uint64_t bytes, uint64_t alloc_id) {
  if (free_entry_ < 0) return -1;
  int32_t idx = free_entry_;
  Entry& e = entries_[idx];
  free_entry_ = e.next_free;
  const uint32_t generation = e.generation + 1;
  memset(static_cast<void*>(&e), 0, sizeof(e));
  e.start = start;
  e.bytes = bytes;
  e.alloc_id = alloc_id;
  e.generation = generation;
  e.state = kEntryRegistering;
  uint32_t pos = 0;
  while (pos < norder_ && entries_[order_[pos]].start < start) ++pos;
  memmove(&order_[pos + 1], &order_[pos], (norder_ - pos) * sizeof(int32_t));
  order_[pos] = idx;
  ++norder_;
  live_entries_.fetch_add(1, std::memory_order_release);
  return idx;
}

void RegistrationCache::DropEntryLocked(int32_t idx) {
  for (uint32_t pos = 0; pos < norder_; ++pos) {
    if (order_[pos] == idx) {
      memmove(&order_[pos], &order_[pos + 1], (norder_ - pos - 1) * sizeof(int32_t));
      --norder_;
      break;
    }
  }
  Entry& e = entries_[idx];
  e.state = kEntryFree;
  e.generation++;
  e.next_free = free_entry_;
  free_entry_ = idx;
  if (live_entries_.fetch_sub(1, std::memory_order_release) == 1) bounds_->Clear();
}

CacheFailure RegistrationCache::ClassifyFailure(CUresult r, uint64_t bytes) const {
  if (r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) return CacheFailure::kAlreadyRegistered;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    rlimit lim;
    if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        account_->pinned() + bytes > lim.rlim_cur) {
      return CacheFailure::kMemlockLimit;
    }
    return CacheFailure::kOutOfMemory;
  }
  return CacheFailure::kDriverError;
}

void RegistrationCache::AbortRegistration(int32_t idx, uint64_t alloc_id, CacheFailure why) {
  failures_[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
  const bool remember = why == CacheFailure::kAlreadyRegistered ||
                        why == CacheFailure::kMemlockLimit || why == CacheFailure::kOutOfMemory ||
                        why == CacheFailure::kDriverError;
  MutexLock lock(&mu_);
  if (idx >= 0) DropEntryLocked(idx);
  Candidate* c = FindCandidateLocked(alloc_id, 0, false);
  if (c == nullptr) return;
  c->busy = false;
  if (remember) {
    c->failed = static_cast<uint8_t>(static_cast<int>(why) + 1);
  } else {
    c->accumulated_ns = 0;
    c->copies = 0;
  }
}

void RegistrationCache::ReportRefusal(const Region& alloc, OwnPinReason why, int result) const {
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kCache, why, alloc.start,
               alloc.bytes, alloc.id, result);
}

void RegistrationCache::CountDecline(CacheDecline why) {
  declined_[static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
}

bool RegistrationCache::Declines(const Region& alloc, uintptr_t p, uint64_t bytes) {
  if (alloc.id == 0 || alloc.bytes == 0) {
    CountDecline(CacheDecline::kUntracked);
    return true;
  }
  if (alloc.kind != MemKind::kPageable) return true;
  if ((alloc.flags & kRegionNotPinnable) != 0) {
    CountDecline(CacheDecline::kNotPinnable);
    return true;
  }
  if (alloc.source == kSourceMmap) {
    // One buffer: the copy starts in its first page and covers half of it.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    if (p < alloc.start || p - alloc.start >= page || bytes * 2 < alloc.bytes) {
      CountDecline(CacheDecline::kSubAllocation);
      return true;
    }
  } else if (alloc.source != kSourceMalloc) {
    CountDecline(CacheDecline::kSource);
    return true;
  }
  // A copy that runs past the allocation (into a neighbouring mapping)
  // would fail on a registration of it (see OnCachedCopy).
  if (p < alloc.start || bytes > alloc.bytes - (p - alloc.start)) {
    CountDecline(CacheDecline::kSubAllocation);
    return true;
  }
  if (alloc.bytes > account_->cap()) {
    CountDecline(CacheDecline::kTooLarge);
    return true;
  }
  return false;
}

int32_t RegistrationCache::ReserveEntry(const Region& alloc, double saving, uint64_t now,
                                        bool may_pin, bool* table_full) {
  const double cost = CostModel::PinCycleNs(alloc.bytes);
  MutexLock lock(&mu_);
  Candidate* c = FindCandidateLocked(alloc.id, now, true);
  if (c == nullptr || c->failed != 0 || c->busy) return -1;
  const double dt = now > c->last_ns ? static_cast<double>(now - c->last_ns) : 0.0;
  c->accumulated_ns = c->accumulated_ns * std::exp(-dt / options_.decay_ns) + saving;
  c->copies++;
  c->last_ns = now;
  // An allocation from a hot site is pinned at its first copy: its
  // site's buffers were copied hot before.
  const bool hot_site = (alloc.flags & kRegionFromHotSite) != 0;
  if (!hot_site && !CostModel::PaysOff(c->copies, c->accumulated_ns, cost)) return -1;
  if (!may_pin) {
    CountDecline(CacheDecline::kSlowerThanDriver);
    return -1;
  }
  // Some other range (a registration being released, or a stale one of a
  // region the hooks have since changed) is in the way: try again later.
  if (FirstOverlapLocked(alloc.start, alloc.start + alloc.bytes) >= 0) return -1;
  const int32_t idx = NewEntryLocked(alloc.start, alloc.bytes, alloc.id);
  if (idx < 0) {
    *table_full = true;
    return -1;
  }
  c->busy = true;
  bounds_->Widen(alloc.start, alloc.start + alloc.bytes);
  return idx;
}

bool RegistrationCache::PinEntry(int32_t idx, const Region& alloc, CUcontext* ctx) {
  // The entry is visible to the page-change hooks now: from here on a call
  // replacing these pages waits for this registration and unpins it. One
  // already under way might have looked before: pin nothing then.
  if (PageChangeSlots::AnyOverlapping(alloc.start, alloc.start + alloc.bytes)) {
    AbortRegistration(idx, alloc.id, CacheFailure::kPagesChanged);
    return false;
  }
  if (ops_->ctx_get_current(ctx) != CUDA_SUCCESS || *ctx == nullptr) {
    AbortRegistration(idx, alloc.id, CacheFailure::kNoContext);
    ReportRefusal(alloc, OwnPinReason::kRefusedNoContext, CUDA_SUCCESS);
    return false;
  }
  OwnPinReason refused = OwnPinReason::kNone;
  if (!account_->ChargeWithEviction(PinUse::kCache, alloc.bytes, &refused)) {
    AbortRegistration(idx, alloc.id, CacheFailure::kCap);
    ReportRefusal(alloc, refused, CUDA_SUCCESS);
    return false;
  }
  CUresult r;
  {
    RelaxedCaptureMode relaxed(ops_);
    r = ops_->mem_host_register(reinterpret_cast<void*>(alloc.start), alloc.bytes,
                                options_.register_flags);
  }
  if (r == CUDA_SUCCESS) return true;
  account_->Release(PinUse::kCache, alloc.bytes);
  const CacheFailure failure = ClassifyFailure(r, alloc.bytes);
  AbortRegistration(idx, alloc.id, failure);
  static const OwnPinReason kReasons[] = {
      OwnPinReason::kRefusedAlreadyRegistered, OwnPinReason::kRefusedMemlock,
      OwnPinReason::kRefusedOutOfMemory, OwnPinReason::kRefusedDriverError};
  const int f = static_cast<int>(failure);
  ReportRefusal(alloc, f < 4 ? kReasons[f] : OwnPinReason::kRefusedDriverError, r);
  return false;
}

PageFrame* RegistrationCache::ReadFramesOf(const Region& alloc, uint64_t* nframes) const {
  *nframes = 0;
  if (!options_.verify_pages) return nullptr;
  const uint64_t page = PageFrames::page_bytes();
  const uintptr_t first = alloc.start / page * page;
  const uint64_t n = (alloc.start + alloc.bytes - first + page - 1) / page;
  PageFrame* frames = NewFrames(n);
  if (frames != nullptr && !PageFrames::Read(first, n, frames)) {
    FreeFrames(frames, n);
    frames = nullptr;
  }
  *nframes = frames != nullptr ? n : 0;
  return frames;
}

CacheTicket RegistrationCache::PublishEntry(int32_t idx, const Region& alloc, CUcontext ctx,
                                            double saving, uint64_t now) {
  uint64_t nframes = 0;
  PageFrame* frames = ReadFramesOf(alloc, &nframes);
  if (options_.registrations != nullptr) {
    Region reg;
    reg.start = alloc.start;
    reg.bytes = alloc.bytes;
    reg.id = alloc.id;
    reg.flags = options_.register_flags;
    reg.kind = MemKind::kPinnedByPinshim;
    reg.source = kSourcePinshim;
    reg.site = alloc.site;
    options_.registrations->Insert(reg);
  }
  CacheTicket ticket;
  {
    MutexLock lock(&mu_);
    Entry& e = entries_[idx];
    e.frames = frames;
    e.nframes = nframes;
    e.state = kEntryRegistered;
    e.ctx = ctx;
    e.users = 1;  // this copy
    e.last_use = ++tick_;
    ticket.entry = idx;
    ticket.generation = e.generation;
    Candidate* c = FindCandidateLocked(alloc.id, now, false);
    if (c != nullptr) memset(c, 0, sizeof(*c));
  }
  registrations_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(alloc.bytes, std::memory_order_relaxed);
  saved_ns_.fetch_add(static_cast<uint64_t>(saving), std::memory_order_relaxed);
  if (alloc.site != 0 && alloc.source == kSourceMalloc && options_.on_registered != nullptr) {
    options_.on_registered(options_.on_registered_arg, alloc.site);
  }
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kPinned, OwnPinPart::kCache, OwnPinReason::kNone,
               alloc.start, alloc.bytes, alloc.id, CUDA_SUCCESS);
  return ticket;
}

CacheTicket RegistrationCache::OnPageableCopy(const Region& alloc, const void* host_ptr,
                                              uint64_t bytes, CopyDir dir, bool may_pin) {
  if (!active()) return CacheTicket();
  if (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) return CacheTicket();
  if (Declines(alloc, reinterpret_cast<uintptr_t>(host_ptr), bytes)) return CacheTicket();
  return PinIfWorth(alloc, bytes, dir, may_pin);
}

CacheTicket RegistrationCache::PinIfWorth(const Region& alloc, uint64_t bytes, CopyDir dir,
                                          bool may_pin) {
  const double saving = CostModel::SavingNs(bytes, dir);
  if (saving <= 0) return CacheTicket();
  const uint64_t now = Now();
  bool table_full = false;
  const int32_t idx = ReserveEntry(alloc, saving, now, may_pin, &table_full);
  if (table_full) {
    failures_[static_cast<int>(CacheFailure::kTableFull)].fetch_add(1, std::memory_order_relaxed);
    ReportRefusal(alloc, OwnPinReason::kRefusedTableFull, CUDA_SUCCESS);
    Evict(1, OwnPinReason::kEvictedForTable);  // makes room for the next hot copy
    return CacheTicket();
  }
  CUcontext ctx = nullptr;
  if (idx < 0 || !PinEntry(idx, alloc, &ctx)) return CacheTicket();
  return PublishEntry(idx, alloc, ctx, saving, now);
}

CacheTicket RegistrationCache::OnCachedCopy(const void* host_ptr, uint64_t bytes, CopyDir dir) {
  CacheTicket ticket;
  if (!active() || !MaybeCached()) return ticket;
  const auto p = reinterpret_cast<uintptr_t>(host_ptr);
  bool overrun = false;
  uintptr_t start = 0;
  uint64_t len = 0;
  {
    MutexLock lock(&mu_);
    int32_t idx = FindEntryLocked(p);
    if (idx < 0) return ticket;
    Entry& e = entries_[idx];
    if (e.state != kEntryRegistered) return ticket;
    if (bytes > e.bytes - (p - e.start)) {
      // The driver refuses a copy that starts in a registration and runs
      // past its end (measured on the H200: CUDA_ERROR_INVALID_VALUE), where
      // the same copy of pageable memory succeeds: the registration goes
      // before the copy, and the buffer is not pinned in place again.
      overrun = true;
      start = e.start;
      len = e.bytes;
    } else {
      e.users++;
      e.last_use = ++tick_;
      ticket.entry = idx;
      ticket.generation = e.generation;
    }
  }
  if (overrun) {
    ReleaseRange(start, start + len, OwnPinReason::kCopyPastRegistration, 0, /*forget=*/true);
    return CacheTicket();
  }
  if (options_.verify_pages && !FramesStillPinned(ticket.entry, p, bytes)) {
    // Other pages than the pinned ones (a change no hook saw): unpin, and
    // the copy runs on the program's current pages, as pageable memory.
    {
      MutexLock lock(&mu_);
      Entry& e = entries_[ticket.entry];
      if (e.generation == ticket.generation && e.users > 0) e.users--;
      start = e.start;
      len = e.bytes;
    }
    ReleaseRange(start, start + len, OwnPinReason::kPagesVerifiedChanged, 0, /*forget=*/true);
    return CacheTicket();
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  saved_ns_.fetch_add(static_cast<uint64_t>(CostModel::SavingNs(bytes, dir)),
                      std::memory_order_relaxed);
  return ticket;
}

void RegistrationCache::AfterCopy(const CacheTicket& ticket, CUresult result, bool async,
                                  CUstream stream) {
  if (!ticket.pinned()) return;
  if (async && result == CUDA_SUCCESS) {
    // Pageable semantics: the call returns once the copy is done.
    fences_->WaitForStream(stream);
    async_waits_.fetch_add(1, std::memory_order_relaxed);
  }
  MutexLock lock(&mu_);
  Entry& e = entries_[ticket.entry];
  if (e.generation == ticket.generation && e.users > 0) e.users--;
}

void RegistrationCache::NoteAsyncUse(const void* p, CUstream stream) {
  if (!active() || !MaybeCached()) return;
  FenceAttachment attach(fences_, stream);
  if (!attach.recorded()) return;
  {
    MutexLock lock(&mu_);
    int32_t idx = FindEntryLocked(reinterpret_cast<uintptr_t>(p));
    if (idx >= 0 && entries_[idx].state == kEntryRegistered) {
      attach.AddTo(&entries_[idx].fences);
    }
  }
  attach.Finish();
}

void RegistrationCache::Unpin(int32_t idx, const Fence* fences, int nfences, OwnPinReason why,
                              uint32_t detail) {
  uintptr_t start;
  uint64_t bytes;
  uint64_t alloc_id;
  CUcontext ctx;
  PageFrame* frames;
  uint64_t nframes;
  {
    MutexLock lock(&mu_);
    start = entries_[idx].start;
    bytes = entries_[idx].bytes;
    alloc_id = entries_[idx].alloc_id;
    ctx = entries_[idx].ctx;
    frames = entries_[idx].frames;
    nframes = entries_[idx].nframes;
    entries_[idx].frames = nullptr;
    entries_[idx].nframes = 0;
  }
  FreeFrames(frames, nframes);
  if (options_.registrations != nullptr) {
    Region reg;
    if (options_.registrations->Lookup(start, &reg) && reg.start == start &&
        reg.kind == MemKind::kPinnedByPinshim && reg.source == kSourcePinshim) {
      options_.registrations->Remove(start, nullptr);
    }
  }
  for (int i = 0; i < nfences; ++i) {
    fences_->Wait(fences[i]);
    fences_->Recycle(fences[i]);
  }
  CUresult r;
  {
    ScopedContext scope(ops_, ctx);
    RelaxedCaptureMode relaxed(ops_);
    r = ops_->mem_host_unregister(reinterpret_cast<void*>(start));
  }
  account_->Release(PinUse::kCache, bytes);
  bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kUnpinned, OwnPinPart::kCache, why, start, bytes,
               alloc_id, r, detail);
  MutexLock lock(&mu_);
  if (IsPageChange(why) || why == OwnPinReason::kCopyPastRegistration) {
    if (IsPageChange(why)) page_change_unpins_.fetch_add(1, std::memory_order_relaxed);
    // Not pinned in place again: what changed its pages once may again.
    Candidate* c = FindCandidateLocked(alloc_id, Now(), true);
    if (c != nullptr)
      c->failed = static_cast<uint8_t>(static_cast<int>(CacheFailure::kPagesChanged) + 1);
  }
  DropEntryLocked(idx);
}

void RegistrationCache::OnRelease(const void* start, uint64_t bytes, OwnPinReason why) {
  if (!active() || !MaybeCached() || bytes == 0) return;
  const auto s = reinterpret_cast<uintptr_t>(start);
  const uintptr_t end = bytes > UINTPTR_MAX - s ? UINTPTR_MAX : s + bytes;
  ReleaseRange(s, end, why, 0, /*forget=*/false);
}

void RegistrationCache::OnPageChange(uintptr_t start, uint64_t bytes, OwnPinReason why,
                                     uint32_t detail) {
  if (!active() || !MayOverlap(start, bytes) || bytes == 0) return;
  const uintptr_t end = bytes > UINTPTR_MAX - start ? UINTPTR_MAX : start + bytes;
  ReleaseRange(start, end, why, detail, /*forget=*/true);
}

void RegistrationCache::ReleaseRange(uintptr_t s, uintptr_t end, OwnPinReason why, uint32_t detail,
                                     bool forget) {
  for (;;) {
    Fence fences[FenceSet::kSlots];
    int nfences;
    int32_t idx;
    bool covered;
    {
      MutexLock lock(&mu_);
      idx = FirstOverlapLocked(s, end);
      if (idx < 0) return;
      Entry& e = entries_[idx];
      covered = e.start >= s && e.start + e.bytes <= end;
      if (e.state == kEntryRegistered && e.users == 0) {
        e.state = kEntryReleasing;
        nfences = e.fences.TakeAll(fences);
      } else {
        idx = -1;  // a registration, unpinning or copy under way: wait for it
      }
    }
    if (idx < 0) {
      Backoff();
      continue;
    }
    // A whole buffer unmapped is released, not a page change of it.
    OwnPinReason reason = why;
    bool mark = forget;
    if (why == OwnPinReason::kPageChangeMunmap && covered) {
      reason = OwnPinReason::kProgramReleased;
      mark = false;
    }
    Unpin(idx, fences, nfences, reason, mark ? detail : 0);
    releases_.fetch_add(1, std::memory_order_relaxed);
  }
}

bool RegistrationCache::FramesStillPinned(int32_t idx, uintptr_t p, uint64_t bytes) {
  PageFrame* frames;
  uint64_t nframes;
  uintptr_t start;
  {
    MutexLock lock(&mu_);
    frames = entries_[idx].frames;
    nframes = entries_[idx].nframes;
    start = entries_[idx].start;
  }
  if (frames == nullptr || bytes == 0) return true;  // nothing recorded to compare
  // The entry is in use by this copy (users > 0), so its frames stay.
  const uint64_t page = PageFrames::page_bytes();
  const uintptr_t first = start / page * page;
  const uint64_t from = (p - first) / page;
  uint64_t to = (p + bytes - first + page - 1) / page;
  if (to > nframes) to = nframes;
  if (from >= to) return true;
  return PageFrames::Same(first + from * page, to - from, frames + from);
}

bool RegistrationCache::Contains(const void* p, uintptr_t* start, uint64_t* bytes) const {
  if (!active() || !MaybeCached()) return false;
  MutexLock lock(&mu_);
  int32_t idx = FindEntryLocked(reinterpret_cast<uintptr_t>(p));
  if (idx < 0) return false;
  if (start != nullptr) *start = entries_[idx].start;
  if (bytes != nullptr) *bytes = entries_[idx].bytes;
  return true;
}

uint64_t RegistrationCache::Evict(uint64_t bytes_wanted, OwnPinReason why) {
  if (!active()) return 0;
  uint64_t freed = 0;
  while (freed < bytes_wanted) {
    Fence fences[FenceSet::kSlots];
    int nfences = 0;
    int32_t victim = -1;
    uint64_t bytes = 0;
    {
      MutexLock lock(&mu_);
      uint64_t oldest = UINT64_MAX;
      for (uint32_t pos = 0; pos < norder_; ++pos) {
        const Entry& e = entries_[order_[pos]];
        if (e.state == kEntryRegistered && e.users == 0 && e.last_use < oldest) {
          oldest = e.last_use;
          victim = order_[pos];
        }
      }
      if (victim < 0) break;
      entries_[victim].state = kEntryReleasing;
      bytes = entries_[victim].bytes;
      nfences = entries_[victim].fences.TakeAll(fences);
    }
    Unpin(victim, fences, nfences, why);
    evictions_.fetch_add(1, std::memory_order_relaxed);
    freed += bytes;
  }
  return freed;
}

uint64_t RegistrationCache::EvictableBytes() const {
  if (!active() || !MaybeCached()) return 0;
  uint64_t bytes = 0;
  MutexLock lock(&mu_);
  for (uint32_t pos = 0; pos < norder_; ++pos) {
    const Entry& e = entries_[order_[pos]];
    if (e.state == kEntryRegistered && e.users == 0) bytes += e.bytes;
  }
  return bytes;
}

void RegistrationCache::AfterForkChild() {
  mu_.AfterFork();
  active_.store(false, std::memory_order_release);
  // Registrations do not carry into a child: forget them, and stop the
  // registry from calling that memory pinned.
  for (uint32_t pos = 0; pos < norder_; ++pos) {
    const Entry& e = entries_[order_[pos]];
    if (options_.registrations != nullptr && e.state != kEntryFree) {
      Region reg;
      if (options_.registrations->Lookup(e.start, &reg) && reg.start == e.start &&
          reg.kind == MemKind::kPinnedByPinshim) {
        options_.registrations->Remove(e.start, nullptr);
      }
    }
  }
  norder_ = 0;
  live_entries_.store(0);
  bytes_.store(0);
}

CacheStats RegistrationCache::Stats() const {
  CacheStats s;
  s.registrations = registrations_.load();
  s.hits = hits_.load();
  s.evictions = evictions_.load();
  s.releases = releases_.load();
  for (int i = 0; i < kCacheFailureCount; ++i) s.failures[i] = failures_[i].load();
  for (int i = 0; i < kCacheDeclineCount; ++i) s.declined[i] = declined_[i].load();
  s.async_waits = async_waits_.load();
  s.page_change_unpins = page_change_unpins_.load();
  s.entries = live_entries_.load();
  s.bytes = bytes_.load();
  s.saved_ns = saved_ns_.load();
  return s;
}

}  // namespace optimize
}  // namespace pinshim
