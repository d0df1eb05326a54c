#include "shim/optimize/optimizer.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <initializer_list>

#include "shim/core/internal_alloc.h"
#include "shim/core/reentry.h"
#include "shim/optimize/cost_model.h"

namespace pinshim {
namespace optimize {
namespace {

enum State : int { kNew = 0, kConfigured = 1, kAttaching = 2, kAttached = 3 };

constexpr unsigned int kKnownRegisterFlags =
    CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
    CU_MEMHOSTREGISTER_READ_ONLY;

uint64_t EvictPool(void* arg, uint64_t want, OwnPinReason why) {
  return static_cast<PinnedPool*>(arg)->Trim(want, why);
}
uint64_t EvictArena(void* arg, uint64_t want, OwnPinReason why) {
  return static_cast<HostArena*>(arg)->Trim(want, why);
}
uint64_t EvictCache(void* arg, uint64_t want, OwnPinReason why) {
  return static_cast<RegistrationCache*>(arg)->Evict(want, why);
}
uint64_t EvictStager(void* arg, uint64_t, OwnPinReason) {
  return static_cast<Stager*>(arg)->TrimIdle(/*all=*/true);
}
uint64_t IdlePool(void* arg) { return static_cast<PinnedPool*>(arg)->IdleBytes(); }
uint64_t IdleStager(void* arg) { return static_cast<Stager*>(arg)->IdleBytes(); }
uint64_t IdleArena(void* arg) { return static_cast<HostArena*>(arg)->IdleBytes(); }
uint64_t IdleCache(void* arg) { return static_cast<RegistrationCache*>(arg)->EvictableBytes(); }

void MarkSiteHot(void* arg, uint64_t site) { static_cast<HotSites*>(arg)->MarkHot(site); }

}  // namespace

Optimizer g_process_optimizer;

void Optimizer::Configure(const OptimizerOptions& options) {
  int expected = kNew;
  if (!state_.compare_exchange_strong(expected, kAttaching)) return;
  options_ = options;
  judge_.set_callback(options.on_verdict);
  // Registering for expedited membarriers waits for an RCU grace period
  // once the process has a second thread; here, at start-up before the
  // program's threads, it does not. Made at the first copy instead, it cost
  // that copy milliseconds (bench/RESULTS.md, "2026-12-03, second part").
  PageChangeSlots::Setup();
  state_.store(kConfigured, std::memory_order_release);
}

// A process's first copies under optimize mode took page faults of the
// engine's own: its state's pages, written for the first time, and the
// math library's code the cost model runs (bench/RESULTS.md, "2026-12-06,
// eighth part"). The attach, part of making a context, takes them instead.
void Optimizer::TouchWhatFirstCopiesUse() {
  MakePresent(this, sizeof(*this));
  for (CopyDir dir : {CopyDir::kHostToDevice, CopyDir::kDeviceToHost}) {
    volatile double saving = CostModel::SavingNs(uint64_t{1} << 20, dir);
    (void)saving;
  }
  volatile double cycle = CostModel::PinCycleNs(uint64_t{1} << 20);
  volatile double x = -1.0;
  volatile double decay = std::exp(x);  // the cache's decay
  (void)cycle;
  (void)decay;
}

bool Optimizer::AttachDriver(const DriverOps& ops) {
  int expected = kConfigured;
  if (!state_.compare_exchange_strong(expected, kAttaching)) {
    while (state_.load(std::memory_order_acquire) == kAttaching) Backoff();
    return active();
  }
  bool ok = DriverOpsComplete(ops);
  if (ok) {
    ops_ = ops;
    ok = fences_.Init(&ops_);
  }
  if (ok && emulated_ == nullptr) {
    emulated_ = static_cast<EmulatedRegistration*>(
        InternalAlloc(sizeof(EmulatedRegistration) * kMaxEmulated));
    ok = emulated_ != nullptr;
  }
  if (ok) {
    account_.Init(options_.pin_cap_bytes, options_.pin_hooks);
    if (options_.enable_pool) {
      PoolOptions po = options_.pool;
      // Pool blocks are not entered into the allocation registry (an insert
      // and a remove per pair cost about as much as the rest of the pool):
      // the pool answers for its own memory (Optimizer::PoolBlock), which
      // the hooks' classification asks when the registries know nothing.
      po.next_alloc_id = options_.next_alloc_id;
      if (options_.on_own_pin != nullptr) po.on_own_pin = options_.on_own_pin;
      pool_on_.store(pool_.Init(&ops_, &fences_, &account_, po));
    }
    if (options_.enable_arena) {
      ArenaOptions ao = options_.arena;
      ao.registrations = options_.registrations;
      ao.verify_pages = ao.verify_pages || options_.verify_pages;
      if (options_.on_own_pin != nullptr) ao.on_own_pin = options_.on_own_pin;
      arena_on_.store(arena_.Init(&ops_, &fences_, &account_, ao));
    }
    if (options_.enable_cache) {
      CacheOptions co = options_.cache;
      co.registrations = options_.registrations;
      co.on_registered = &MarkSiteHot;
      co.on_registered_arg = &hot_sites_;
      co.verify_pages = co.verify_pages || options_.verify_pages;
      if (options_.on_own_pin != nullptr) co.on_own_pin = options_.on_own_pin;
      cache_on_.store(cache_.Init(&ops_, &fences_, &account_, co));
    }
    if (options_.enable_staging) {
      StagerOptions so = options_.stager;
      if (options_.on_own_pin != nullptr) so.on_own_pin = options_.on_own_pin;
      if (so.allocations == nullptr) so.allocations = options_.allocations;
      so.judge = &judge_;
      stager_on_.store(stager_.Init(&ops_, &account_, so));
    }
    // Idle pool slabs and arena extents go first: nobody is using them.
    if (pool_on_.load()) account_.AddEvictor(&EvictPool, &pool_, &IdlePool);
    if (arena_on_.load()) account_.AddEvictor(&EvictArena, &arena_, &IdleArena);
    if (cache_on_.load()) account_.AddEvictor(&EvictCache, &cache_, &IdleCache);
    if (stager_on_.load()) account_.AddEvictor(&EvictStager, &stager_, &IdleStager);
    TouchWhatFirstCopiesUse();
    active_.store(true, std::memory_order_release);
  }
  state_.store(kAttached, std::memory_order_release);
  return ok;
}

void Optimizer::NoteHomeContext() {
  if (home_set_.load(std::memory_order_relaxed) || !arena_on_.load(std::memory_order_relaxed)) {
    return;
  }
  CUcontext ctx = nullptr;
  if (ops_.ctx_get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr) {
    arena_.SetHomeContext(ctx);
    home_set_.store(true, std::memory_order_relaxed);
  }
}

CopyTicket Optimizer::BeforeHostCopy(const void* host_ptr, uint64_t bytes, CopyDir dir,
                                     MemKind host_kind, bool sync, bool stageable) {
  CopyTicket t;
  if (!active() || host_ptr == nullptr) return t;
  t.host = host_ptr;
  t.bytes = bytes;
  t.dir = dir;
  if (host_kind == MemKind::kPinnedByPinshim) {
    if (arena_on_.load(std::memory_order_relaxed) && arena_.Owns(host_ptr)) {
      arena_.BeforeCopy(host_ptr, bytes);
      t.kind = CopyTicket::kArena;
      arena_copies_.fetch_add(1, std::memory_order_relaxed);
      saved_arena_ns_.fetch_add(static_cast<uint64_t>(CostModel::SavingNs(bytes, dir)),
                                std::memory_order_relaxed);
    } else if (pool_on_.load(std::memory_order_relaxed) && pool_.Owns(host_ptr)) {
      t.kind = CopyTicket::kPool;
      // Measured on the H200: a copy from or to a cudaHostAlloc allocation
      // that runs past its requested size fails (CUDA_ERROR_INVALID_VALUE),
      // even inside the allocation's last page; a block's slab would take it.
      PoolBlockInfo block;
      const auto a = reinterpret_cast<uintptr_t>(host_ptr);
      if (pool_.Lookup(host_ptr, &block) && bytes > block.requested - (a - block.base)) {
        t.refuse = true;
      }
    } else if (cache_on_.load(std::memory_order_relaxed)) {
      t.cache = cache_.OnCachedCopy(host_ptr, bytes, dir);
      if (t.cache.pinned()) t.kind = CopyTicket::kCache;
    }
    return t;
  }
  // Arena memory that is not pinned now (its pages changed) stays unpinned:
  // the arena, not the cache, owns it.
  if (host_kind == MemKind::kPageable && cache_on_.load(std::memory_order_relaxed) &&
      !(arena_on_.load(std::memory_order_relaxed) && arena_.Owns(host_ptr))) {
    NoteHomeContext();
    Region alloc;
    if (options_.allocations == nullptr ||
        !options_.allocations->Lookup(reinterpret_cast<uintptr_t>(host_ptr), &alloc)) {
      alloc = Region();  // untracked: the cache declines and counts it
    }
    const bool may_pin = judge_.Take(CopyPath::kPinnedInPlace, dir, bytes, sync);
    t.cache = cache_.OnPageableCopy(alloc, host_ptr, bytes, dir, may_pin);
    if (t.cache.pinned()) t.kind = CopyTicket::kCache;
  }
  if (host_kind == MemKind::kPageable && t.kind == CopyTicket::kNone && stageable &&
      stager_on_.load(std::memory_order_relaxed) && stager_.Wants(dir, bytes) &&
      judge_.Take(CopyPath::kStaged, dir, bytes, sync, Stager::ExpectedWin(dir, bytes))) {
    t.stage = true;
  }
  return t;
}

bool Optimizer::StreamCaptures(CUstream stream) const {
  return active() && optimize::StreamCaptures(ops_, stream);
}

bool Optimizer::Stage(const CopyTicket& t, void* host, CUdeviceptr dev, CUstream stream,
                      bool per_thread_api, bool sync, CUresult* result, StagedInfo* info) {
  if (!t.stage || !active()) return false;
  return stager_.Stage(t.dir, host, dev, t.bytes, RecordableStream(stream, per_thread_api), sync,
                       result, info);
}

void Optimizer::AfterHostCopy(const CopyTicket& t, CUresult result, bool async, CUstream stream,
                              bool per_thread_api) {
  const CUstream s = RecordableStream(stream, per_thread_api);
  switch (t.kind) {
    case CopyTicket::kPool:
      // Real pinned memory: the program expects the asynchrony; the pool
      // only has to know not to reuse the block early.
      if (async && result == CUDA_SUCCESS) {
        pool_.NoteAsyncUse(t.host, s);
        pool_async_notes_.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    case CopyTicket::kArena:
      // The program believes this is malloc memory: pageable semantics.
      if (async && result == CUDA_SUCCESS) {
        fences_.WaitForStream(s);
        arena_async_waits_.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    case CopyTicket::kCache: cache_.AfterCopy(t.cache, result, async, s); break;
    case CopyTicket::kNone: break;
  }
}

bool Optimizer::UploadEagerHead(const CopyTicket& t, const void* host, CUdeviceptr dev,
                                CUstream stream, bool per_thread_api, CUresult* result,
                                bool* pinned_in_flight) {
  if (!active() || t.dir != CopyDir::kHostToDevice || t.bytes == 0 || host == nullptr ||
      (t.kind != CopyTicket::kCache && t.kind != CopyTicket::kArena) ||
      options_.stager.ordered_reads) {
    return false;
  }
  const CUstream s = RecordableStream(stream, per_thread_api);
  // pinshim's own calls: never refused for, nor disturbing, a capture the
  // program runs in global mode on another thread.
  RelaxedCaptureMode relaxed(&ops_);
  // An idle stream: the DMA reads the source now, as the driver would. One
  // the driver cannot answer for: the driver's call, as without this.
  if (fences_.QueuedWork(s) != FenceManager::Work::kQueued) return false;
  // The driver refuses a bad range before it moves a byte; so must the
  // parts, and the whole call is then the driver's.
  if (!DeviceRangeOk(ops_, options_.allocations, dev, t.bytes)) return false;
  const uint64_t head = t.bytes < Stager::kDriverEagerBytes ? t.bytes : Stager::kDriverEagerBytes;
  CUresult r = CUDA_SUCCESS;
  StagedInfo info;
  if (!stager_on_.load(std::memory_order_relaxed) ||
      !stager_.StageEagerHead(const_cast<void*>(host), dev, head, s, &r, &info)) {
    r = BounceUpload(host, dev, head, s);
    eager_bounces_.fetch_add(1, std::memory_order_relaxed);
  }
  eager_heads_.fetch_add(1, std::memory_order_relaxed);
  *pinned_in_flight = false;
  if (r == CUDA_SUCCESS && t.bytes > head) {
    r = ops_.memcpy_htod_async(dev + head, static_cast<const char*>(host) + head, t.bytes - head,
                               s);
    *pinned_in_flight = r == CUDA_SUCCESS;
  }
  *result = r;
  return true;
}

CUresult Optimizer::BounceUpload(const void* host, CUdeviceptr dev, uint64_t bytes,
                                 CUstream stream) {
  // The driver reads an asynchronous upload of at most kDriverEagerBytes of
  // pageable memory before it returns, so the buffer is free again then.
  // Another call holding it: one mapped for this call.
  void* buf = nullptr;
  const bool own = !bounce_busy_.exchange(true, std::memory_order_acquire);
  if (own) buf = bounce_.load(std::memory_order_relaxed);
  if (buf == nullptr) {
    const long m = syscall(SYS_mmap, nullptr, Stager::kDriverEagerBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m < 0 && m > -4096) {
      if (own) bounce_busy_.store(false, std::memory_order_release);
      // No memory for it: the driver's own upload of the whole head, from
      // the pinned memory, is all that is left.
      return ops_.memcpy_htod_async(dev, host, bytes, stream);
    }
    buf = reinterpret_cast<void*>(m);
    if (own) bounce_.store(buf, std::memory_order_relaxed);
  }
  memcpy(buf, host, bytes);
  const CUresult r = ops_.memcpy_htod_async(dev, buf, bytes, stream);
  if (own) {
    bounce_busy_.store(false, std::memory_order_release);
  } else {
    syscall(SYS_munmap, buf, Stager::kDriverEagerBytes);
  }
  return r;
}

void Optimizer::AfterAsyncCopyOnCachedMemory(CUstream stream, bool per_thread_api) {
  if (!active()) return;
  fences_.WaitForStream(RecordableStream(stream, per_thread_api));
  arena_async_waits_.fetch_add(1, std::memory_order_relaxed);
}

void Optimizer::NotePoolAsyncUse(const void* p, CUstream stream, bool per_thread_api) {
  if (!active() || !pool_on_.load(std::memory_order_relaxed)) return;
  pool_.NoteAsyncUse(p, RecordableStream(stream, per_thread_api));
  pool_async_notes_.fetch_add(1, std::memory_order_relaxed);
}

bool Optimizer::HostAlloc(void** pp, size_t bytes, unsigned int flags, CUresult* result) {
  if (!active() || !pool_on_.load(std::memory_order_relaxed)) return false;
  NoteHomeContext();
  *result = pool_.Allocate(pp, bytes, flags);
  return true;
}

bool Optimizer::FreeHost(void* p, CUresult* result, PoolBlockInfo* freed) {
  if (!active() || !pool_on_.load(std::memory_order_relaxed)) return false;
  return pool_.Free(p, result, freed);
}

bool Optimizer::HostGetFlags(unsigned int* flags, void* p, CUresult* result) {
  if (!active()) return false;
  if (pool_on_.load(std::memory_order_relaxed) && pool_.Owns(p)) {
    *result = pool_.GetFlags(flags, p);
    return true;
  }
  if (HidesPinning(p)) {
    *result = CUDA_ERROR_INVALID_VALUE;  // what pageable memory gets
    return true;
  }
  return false;
}

bool Optimizer::HostGetDevicePointer(CUdeviceptr* dptr, void* p, unsigned int flags,
                                     CUresult* result) {
  if (!active()) return false;
  if (pool_on_.load(std::memory_order_relaxed) && pool_.Owns(p)) {
    *result = pool_.GetDevicePointer(dptr, p, flags);
    return true;
  }
  if (HidesPinning(p)) {
    *result = CUDA_ERROR_INVALID_VALUE;  // what pageable memory gets
    return true;
  }
  return false;
}

bool Optimizer::ProgramRegister(void* p, size_t bytes, unsigned int flags, CUresult* result) {
  if (!active()) return false;
  if (arena_on_.load(std::memory_order_relaxed) && arena_.Owns(p)) {
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY) return false;  // the driver's answer
    if (bytes == 0 || (flags & ~kKnownRegisterFlags) != 0) {
      *result = CUDA_ERROR_INVALID_VALUE;
      return true;
    }
    // Already pinned (PORTABLE, device-accessible): a registration of the
    // program's own is emulated, overlap rules included.
    const auto start = reinterpret_cast<uintptr_t>(p);
    MutexLock lock(&emulated_mu_);
    EmulatedRegistration* slot = nullptr;
    for (int i = 0; i < kMaxEmulated; ++i) {
      EmulatedRegistration& e = emulated_[i];
      if (e.start == 0) {
        if (slot == nullptr) slot = &e;
        continue;
      }
      if (e.start < start + bytes && start < e.start + e.bytes) {
        *result = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        return true;
      }
    }
    if (slot == nullptr) return false;  // no room: let the driver answer
    slot->start = start;
    slot->bytes = bytes;
    *result = CUDA_SUCCESS;
    return true;
  }
  // The program's registration must find the memory as it left it.
  if (cache_on_.load(std::memory_order_relaxed)) {
    cache_.OnRelease(p, bytes, OwnPinReason::kProgramRegistered);
  }
  return false;
}

bool Optimizer::ProgramUnregister(void* p, CUresult* result) {
  if (!active() || p == nullptr) return false;
  if (arena_on_.load(std::memory_order_relaxed) && arena_.Owns(p)) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    MutexLock lock(&emulated_mu_);
    *result = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    for (int i = 0; i < kMaxEmulated; ++i) {
      EmulatedRegistration& e = emulated_[i];
      if (e.start == a) {
        e.start = 0;
        *result = CUDA_SUCCESS;
        break;
      }
      if (e.start != 0 && a - e.start < e.bytes) {
        *result = CUDA_ERROR_INVALID_VALUE;  // inside a registration, not its start
        break;
      }
    }
    return true;
  }
  if (cache_on_.load(std::memory_order_relaxed) && cache_.Contains(p, nullptr, nullptr)) {
    *result = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;  // the program never registered it
    return true;
  }
  return false;
}

bool Optimizer::HidesPinning(const void* p) const {
  if (!active()) return false;
  if (arena_on_.load(std::memory_order_relaxed) && arena_.Owns(p)) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    MutexLock lock(&emulated_mu_);
    for (int i = 0; i < kMaxEmulated; ++i) {
      const EmulatedRegistration& e = emulated_[i];
      if (e.start != 0 && a - e.start < e.bytes) return false;  // the program pinned it
    }
    return true;
  }
  return cache_on_.load(std::memory_order_relaxed) && cache_.Contains(p, nullptr, nullptr);
}

uint64_t Optimizer::Evict(uint64_t bytes_wanted) {
  if (!active()) return 0;
  // Only the budget's evictor calls this (the cap's run from the account).
  const OwnPinReason why = OwnPinReason::kEvictedForBudget;
  uint64_t freed = 0;
  if (pool_on_.load()) {
    freed += pool_.Trim(bytes_wanted, why);
    if (freed < bytes_wanted && ops_.ctx_synchronize != nullptr) {
      // Free blocks whose last copies have not been seen to finish hold
      // their slabs back. Evicting is the alternative to refusing the
      // program, so it is worth waiting for the device once.
      ops_.ctx_synchronize();
      freed += pool_.Trim(bytes_wanted - freed, why);
    }
  }
  if (freed < bytes_wanted && arena_on_.load()) freed += arena_.Trim(bytes_wanted - freed, why);
  if (freed < bytes_wanted && cache_on_.load()) freed += cache_.Evict(bytes_wanted - freed, why);
  if (freed < bytes_wanted && stager_on_.load()) freed += stager_.TrimIdle(/*all=*/true);
  return freed;
}

void Optimizer::Tick() {
  if (!active()) return;
  // Called from pinshim's trim thread: its frees never meet a program's
  // capture (the thread's mode is set once and kept).
  static thread_local bool relaxed = false;
  if (!relaxed) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    relaxed = ops_.thread_exchange_capture_mode(&mode) == CUDA_SUCCESS;
  }
  if (pool_on_.load()) pool_.TrimIdle();
  if (arena_on_.load()) arena_.TrimIdle();
  if (stager_on_.load()) stager_.TrimIdle();
}

void Optimizer::OnContextDestroyed(CUcontext ctx) {
  if (!active()) return;
  if (pool_on_.load()) pool_.OnContextDestroyed(ctx);
  if (stager_on_.load()) stager_.OnContextDestroyed(ctx);
  fences_.OnContextDestroyed(ctx);
  // The arena registers in its home context when the allocating thread has
  // none: a destroyed one is forgotten and the next copy names a new one.
  // (Registrations made in it are gone with it; the memory stays the
  // program's, and copies from it stay correct, only no longer pinned.)
  if (arena_on_.load() && arena_.home_context() == ctx) {
    arena_.SetHomeContext(nullptr);
    home_set_.store(false, std::memory_order_relaxed);
  }
}

void Optimizer::PrepareFork() {
  emulated_mu_.PrepareFork();
  fences_.PrepareFork();
  pool_.PrepareFork();
  cache_.PrepareFork();
  arena_.PrepareFork();
}

void Optimizer::AfterForkParent() {
  arena_.AfterForkParent();
  cache_.AfterForkParent();
  pool_.AfterForkParent();
  fences_.AfterForkParent();
  emulated_mu_.AfterFork();
}

void Optimizer::AfterForkChild() {
  PageChangeSlots::AfterForkChild();
  judge_.Reset();
  stager_.AfterForkChild();
  active_.store(false, std::memory_order_release);
  arena_.AfterForkChild();
  cache_.AfterForkChild();
  pool_.AfterForkChild();
  fences_.AfterForkChild();
  emulated_mu_.AfterFork();
  account_.ResetInChild();
}

OptimizeCountersEvent CountersForTrace(const OptimizeCounters& c) {
  OptimizeCountersEvent e;
  memset(&e, 0, sizeof(e));
#define TRACE(name, layout, source, summary_key) e.name = c.source;
#define SUMMARY(source, summary_key)
#include "shim/core/optimize_counters.inc"
#undef TRACE
#undef SUMMARY
  return e;
}

OptimizeCounters Optimizer::Counters() const {
  OptimizeCounters c;
  memset(&c, 0, sizeof(c));
  c.pinned_bytes_now = account_.pinned();
  c.pinned_bytes_peak = account_.peak();
  c.pin_cap_bytes = account_.cap();
  for (int i = 0; i < kPinUseCount; ++i) {
    c.pinned_by_use[i] = account_.pinned_for(static_cast<PinUse>(i));
  }
  c.pin_refusals = account_.refusals();
  c.evicted_bytes = account_.evicted_bytes();
  c.pool = pool_.Stats();
  c.cache = cache_.Stats();
  c.arena = arena_.Stats();
  c.pool_async_notes = pool_async_notes_.load();
  c.arena_copies = arena_copies_.load();
  c.arena_async_waits = arena_async_waits_.load();
  c.fence_records = fences_.records();
  c.fence_record_failures = fences_.record_failures();
  c.fence_waits = fences_.waits();
  c.saved_copy_ns = c.cache.saved_ns + saved_arena_ns_.load();
  c.saved_alloc_ns = c.pool.saved_ns;
  c.hot_sites = hot_sites_.hot_sites();
  c.hot_sites_from_profile = hot_sites_.from_profile();
  c.page_change_drops =
      c.cache.page_change_unpins + c.arena.page_change_unpins + c.pool.retired_slabs;
  c.eager_heads = eager_heads_.load();
  c.eager_bounces = eager_bounces_.load();
  c.stager = stager_.Stats();
  PathCellReport cells[2 * 2 * PathJudge::kClasses * kCopyPathCount];
  const int n = judge_.Report(cells, static_cast<int>(sizeof(cells) / sizeof(cells[0])));
  for (int i = 0; i < n; ++i) c.judge_losing_cells += cells[i].verdict == PathVerdict::kLoses;
  c.judge_driver_probes = judge_.driver_probes();
  c.judge_path_retries = judge_.path_retries();
  return c;
}

}  // namespace optimize
}  // namespace pinshim
