// Optimize mode as the hooks see it: one object holding the pinned pool,
// the registration cache, the host arena and what they share, with one
// call per hook event. The hooks own the decisions about *when* to call
// (mode, call sites); this decides what to do.
//
// Lifecycle: Configure once (from Init, when the mode includes optimize),
// AttachDriver once the real driver functions are known; until then every
// call declines and the hooks simply forward. Fork: PrepareFork in the
// prepare handler before the registries are locked; AfterForkParent and
// AfterForkChild after they are unlocked. In a child optimize mode is off
// (CUDA does not survive fork); memory the program holds stays valid.
//
// Where the hooks call in (each call is cheap when there is nothing to do):
//   copy wrappers (1D H2D/D2H, sync and async, array and 2D variants with
//   the host range they touch):
//       CopyTicket t = BeforeHostCopy(host_ptr, bytes, dir, host_kind);
//       CUresult r = real_fn(...);
//       AfterHostCopy(t, r, is_async_entry_point, stream, is_ptsz_entry_point);
//   batches: AfterAsyncCopyOnCachedMemory / NotePoolAsyncUse per operand
//   cuMemHostAlloc / cuMemAllocHost:  HostAlloc, else forward
//   cuMemFreeHost:                    FreeHost, else forward
//   cuMemHostGetFlags / GetDevicePointer: HostGetFlags / HostGetDevicePointer
//   cuMemHostRegister / Unregister:   ProgramRegister / ProgramUnregister
//   cuPointerGetAttribute(s):         HidesPinning, PoolBlock
//   free / realloc / munmap / mremap: OnRelease BEFORE the real call
//   redirected malloc sites:          arena() (test arena().Owns(p) before
//                                     handing p to glibc in free, realloc,
//                                     malloc_usable_size)
//   cuCtxDestroy / primary context reset: OnContextDestroyed
//   budget evictor:                   Evict;  sampler thread: Tick
#ifndef PINSHIM_SHIM_OPTIMIZE_OPTIMIZER_H_
#define PINSHIM_SHIM_OPTIMIZE_OPTIMIZER_H_

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/core/macros.h"
#include "shim/core/registry.h"
#include "shim/optimize/driver_ops.h"
#include "shim/optimize/fences.h"
#include "shim/optimize/host_arena.h"
#include "shim/optimize/hot_sites.h"
#include "shim/optimize/lock.h"
#include "shim/optimize/page_change.h"
#include "shim/optimize/path_judge.h"
#include "shim/optimize/pin_account.h"
#include "shim/optimize/pin_bounds.h"
#include "shim/optimize/pinned_pool.h"
#include "shim/optimize/registration_cache.h"
#include "shim/optimize/stager.h"

namespace pinshim {
namespace optimize {

struct OptimizerOptions {
  Registry* allocations = nullptr;    // g_allocations: pool blocks go here
  Registry* registrations = nullptr;  // g_registrations: cache and arena ranges go here
  uint64_t (*next_alloc_id)() = nullptr;
  uint64_t pin_cap_bytes = PinAccount::kNoCap;  // Config::pin_cap_bytes
  PinAccountHooks pin_hooks;                    // e.g. the enforce-mode budget
  bool enable_pool = true;
  bool enable_cache = true;
  bool enable_arena = true;
  bool enable_staging = true;
  PoolOptions pool;
  CacheOptions cache;
  ArenaOptions arena;
  StagerOptions stager;
  // Told about each change of the self-check's verdict on a path
  // (path_judge.h). Null: nobody listens.
  PathVerdictCallback on_verdict = nullptr;
  // Told about every pinning action of pinshim's own: what the pool, the
  // cache and the arena pinned, unpinned (and why) and were refused (and
  // why). Called on the thread that acted, outside every engine lock; never
  // for a copy that pins nothing. Null: nobody listens. Overrides the
  // parts' own on_own_pin.
  OwnPinCallback on_own_pin = nullptr;
  // PINSHIM_VERIFY_PAGES: the cache and the arena check, before every copy
  // through memory they pinned in place, that it still maps the pinned
  // pages (added to the parts' own verify_pages).
  bool verify_pages = false;
};

// What the hook's "before" call hands to its "after" call.
struct CopyTicket {
  enum Kind : uint8_t { kNone = 0, kPool = 1, kCache = 2, kArena = 3 };
  Kind kind = kNone;
  CacheTicket cache;
  const void* host = nullptr;
  uint64_t bytes = 0;
  CopyDir dir = CopyDir::kHostToDevice;
  bool stage = false;  // pageable and not pinned: a copy staging would take
  // The driver would refuse the copy for its own allocation (a pool block's
  // copy running past the block's requested size): the hook returns
  // CUDA_ERROR_INVALID_VALUE instead of calling it.
  bool refuse = false;
};

// Every counter. Those that leave the engine, for the summary line and the
// trace, are listed in shim/core/optimize_counters.inc. Plain data.
struct OptimizeCounters {
  uint64_t pinned_bytes_now;  // by pinshim: pool slabs and allocations, cache, arena
  uint64_t pinned_bytes_peak;
  uint64_t pin_cap_bytes;
  uint64_t pinned_by_use[kPinUseCount];
  uint64_t pin_refusals;
  uint64_t evicted_bytes;
  PoolStats pool;
  CacheStats cache;
  ArenaStats arena;
  uint64_t pool_async_notes;  // async copies on pool blocks fenced
  uint64_t arena_copies;
  uint64_t arena_async_waits;  // async copies on arena memory waited for
  uint64_t fence_records;
  uint64_t fence_record_failures;  // streams waited for instead
  uint64_t fence_waits;
  // Estimated time saved, ns (cost_model.h): copies on cached and arena
  // memory at registered instead of pageable speed, and pool hits that
  // skipped cudaHostAlloc + cudaFreeHost.
  uint64_t saved_copy_ns;
  uint64_t saved_alloc_ns;
  uint64_t hot_sites;               // allocation sites redirected into the arena
  uint64_t hot_sites_from_profile;  // of those, listed by the profile
  // Drops because the program changed the pages behind pinshim's pinning:
  // cache registrations and arena extents unpinned, pool slabs retired.
  uint64_t page_change_drops;
  // Asynchronous uploads of memory pinned in place whose first bytes were
  // read at the call (UploadEagerHead), and of those the ones read through
  // the bounce buffer (no ring free). The ring's are counted in
  // stager.copies too.
  uint64_t eager_heads;
  uint64_t eager_bounces;
  StagerStats stager;
  // The self-check (path_judge.h).
  uint64_t judge_losing_cells;
  uint64_t judge_driver_probes;
  uint64_t judge_path_retries;
};

// The subset of the counters the trace records (kOptimizeCounters): the
// TRACE lines of optimize_counters.inc.
OptimizeCountersEvent CountersForTrace(const OptimizeCounters& c);

class Optimizer {
 public:
  constexpr Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // The instance the hooks use.
  static Optimizer& Process();

  // Takes the options (no driver call). Call before AttachDriver.
  void Configure(const OptimizerOptions& options);

  // Starts the engine with the real driver functions (copied). Idempotent;
  // false when the table is incomplete or setup failed (the engine stays off).
  bool AttachDriver(const DriverOps& ops);

  bool active() const { return active_.load(std::memory_order_acquire); }

  // --- copy path (copy_path.h): around every host<->device copy ---------
  // host_kind: ClassifyHost's answer for host_ptr. Registers hot pageable
  // allocations (so this copy may already run pinned). sync: a synchronous
  // entry point; stageable: a 1D copy that staging could take. Each path
  // is offered only where the self-check (judge()) lets it.
  CopyTicket BeforeHostCopy(const void* host_ptr, uint64_t bytes, CopyDir dir, MemKind host_kind,
                            bool sync, bool stageable);
  // After the real call; async: an *Async entry point; per_thread_api: a
  // _ptsz/_ptds entry point. May wait for the copy (see registration_cache.h).
  // Does nothing for a ticket of kind kNone: callers may skip the call.
  void AfterHostCopy(const CopyTicket& ticket, CUresult result, bool async, CUstream stream,
                     bool per_thread_api);

  // Whether `stream` (RecordableStream form) captures, or the driver cannot
  // say (StreamCaptures, driver_ops.h); false while the engine is off.
  bool StreamCaptures(CUstream stream) const;
  // For a ticket with stage set: runs the copy through the staging rings
  // (host [host, host + bytes), device [dev, ...)); false: the caller makes
  // the driver call. `sync`: a synchronous entry point. The stream as the
  // call named it, with per_thread_api for _ptsz/_ptds entry points.
  bool Stage(const CopyTicket& t, void* host, CUdeviceptr dev, CUstream stream, bool per_thread_api,
             bool sync, CUresult* result, StagedInfo* info);

  // An asynchronous upload of memory pinned in place (a ticket of kind kCache
  // or kArena, host to device) reads its source by DMA in stream order; the
  // driver's upload of the same pageable memory reads its first
  // Stager::kDriverEagerBytes at the call, the rest in stream order (H200:
  // bench/RESULTS.md, "2026-12-02, fourth part"). When the stream has work
  // queued (which may rewrite the source: a host function), this reads those
  // first bytes now, through a ring (Stager::StageEagerHead) or else a
  // pageable bounce buffer the driver reads at the call, and queues the rest
  // as DMA from the pinned memory. False, having done nothing, for any other
  // copy, an idle stream, a device range the driver would refuse (it
  // answers), or with ordered reads (StagerOptions::ordered_reads: the DMA's
  // order is the one wanted). Else *result is the call's result and
  // *pinned_in_flight whether DMA from the pinned memory was queued
  // (AfterHostCopy must wait for it as for any async copy of such memory;
  // when false, nothing of it is in flight and the call returns at once, as
  // the driver's does).
  bool UploadEagerHead(const CopyTicket& t, const void* host, CUdeviceptr dev, CUstream stream,
                       bool per_thread_api, CUresult* result, bool* pinned_in_flight);

  // For asynchronous calls whose operands are not one host range (batches,
  // 3D batches): when HidesPinning(p) holds for any host operand p, call
  // this after the call succeeded: it returns once the copy completed, as
  // the call would have with pageable memory.
  void AfterAsyncCopyOnCachedMemory(CUstream stream, bool per_thread_api);
  // ... and for each host operand lying in a pool block (PoolBlock(p)).
  void NotePoolAsyncUse(const void* p, CUstream stream, bool per_thread_api);

  // --- libc hooks -------------------------------------------------------
  // BEFORE free/realloc hand [start, start + bytes) back.
  void OnRelease(const void* start, uint64_t bytes) {
    if (cache_.MaybeCached()) cache_.OnRelease(start, bytes, OwnPinReason::kProgramReleased);
  }
  // Around every call that may change which pages back [start, end)
  // (page_change_protocol.h: ChangePages, which marks the range in
  // PageChangeSlots first). MayHoldPinning: whether the range may hold
  // what pinshim pinned that `what` affects (bounds only, whether or not
  // each part is on: empty where nothing is pinned). Inline: nearly every
  // such call touches nothing pinshim pinned, and costs a few loads.
  // Where it may: DropPinningForPageChange BEFORE the call, which drops or
  // retires what pinshim pinned there, and RepinAfterPageChange after it
  // (whatever its result) when *arena came back non-empty, which pins the
  // arena's memory again. Both take the hook guard.
  bool MayHoldPinning(uintptr_t start, uintptr_t end, PageChange what) const {
    return (what.replaces_private() &&
            (page_line_.cache.MayOverlap(start, end) || page_line_.arena.MayOverlap(start, end))) ||
           (what.replaces_shared() && page_line_.pool.MayOverlap(start, end));
  }
  // The line every page hook's fast path reads: the bounds above, which
  // the pool, cache and arena keep there, and the hooks' settings.
  PageHookLine& page_line() { return page_line_; }
  void DropPinningForPageChange(uintptr_t start, uintptr_t end, PageChange what,
                                ArenaChangeTicket* arena);
  void RepinAfterPageChange(const ArenaChangeTicket& arena, bool stays_anonymous);
  // Redirected allocation sites: the arena, and which sites go there.
  HostArena& arena() { return arena_; }
  bool arena_on() const { return arena_on_.load(std::memory_order_acquire); }
  HotSites& hot_sites() { return hot_sites_; }
  // Whether an allocation of `bytes` at `site` comes from the arena: its
  // site is hot, and memory pinned in place has not lost to the driver in
  // that size class (path_judge.h).
  bool ArenaServes(uint64_t site, const SiteFrames& frames, uint64_t bytes) {
    return hot_sites_.IsHot(site, frames) &&
           !judge_.LosesAnywhere(CopyPath::kPinnedInPlace, PathJudge::ClassOf(bytes));
  }

  // --- the program's pinned-memory calls --------------------------------
  // cuMemHostAlloc / cuMemAllocHost (flags 0): true when handled (the
  // program's result in *result), false: forward to the driver.
  bool HostAlloc(void** pp, size_t bytes, unsigned int flags, CUresult* result);
  // cuMemFreeHost: true when handled (result in *result), false: forward.
  // *freed (if non-null) gets the freed pool block's requested bytes and flags.
  bool FreeHost(void* p, CUresult* result, PoolBlockInfo* freed = nullptr);
  // cuMemHostGetFlags / cuMemHostGetDevicePointer: true when handled (pool
  // blocks: the dedicated allocation's answer; memory pinshim pinned behind
  // the program's back: what pageable memory gets).
  bool HostGetFlags(unsigned int* flags, void* p, CUresult* result);
  bool HostGetDevicePointer(CUdeviceptr* dptr, void* p, unsigned int flags, CUresult* result);
  // cuMemHostRegister by the program: true when handled (arena memory,
  // already pinned: emulated). Otherwise pinshim's own registration of the
  // range is dropped first and the caller forwards the call.
  bool ProgramRegister(void* p, size_t bytes, unsigned int flags, CUresult* result);
  // cuMemHostUnregister by the program: true when handled (arena memory,
  // or a cache registration the program never made).
  bool ProgramUnregister(void* p, CUresult* result);
  // Whether pointer attribute queries about p must answer as for pageable
  // memory (memory pinshim pinned behind the program's back).
  bool HidesPinning(const void* p) const;
  // The pool block holding p: for classifying copies (pool blocks are not
  // in the allocation registry) and for range/buffer-id attribute answers.
  bool PoolBlock(const void* p, PoolBlockInfo* info) const {
    return pool_on_.load(std::memory_order_relaxed) && pool_.Owns(p) && pool_.Lookup(p, info);
  }
  // False only where PoolBlock(p) is false, in a load or three.
  bool MayBePoolBlock(const void* p) const {
    return pool_on_.load(std::memory_order_relaxed) && pool_.MayOwn(p);
  }

  // --- budget, time, contexts -------------------------------------------
  // For enforce mode's budget (recorded as evicted_budget): unpins
  // pinshim's own idle pinning (pool slabs, arena extents, LRU cache
  // registrations) until about bytes_wanted are free; returns bytes freed.
  uint64_t Evict(uint64_t bytes_wanted);
  // From pinshim's trim thread only (which it puts in relaxed capture mode):
  // gives back idle slabs, extents and rings.
  void Tick();
  // cuCtxDestroy / cuDevicePrimaryCtxReset: the driver freed its memory.
  void OnContextDestroyed(CUcontext ctx);

  // The components' locks are held from PrepareFork to AfterFork*, across
  // the fork and across functions, which the analysis cannot follow; each
  // component's own fork functions say which lock they take and release.
  void PrepareFork() NO_THREAD_SAFETY_ANALYSIS;
  void AfterForkParent() NO_THREAD_SAFETY_ANALYSIS;
  void AfterForkChild() NO_THREAD_SAFETY_ANALYSIS;

  OptimizeCounters Counters() const;

  PinnedPool& pool() { return pool_; }
  PathJudge& judge() { return judge_; }
  const PathJudge& judge() const { return judge_; }
  Stager& stager() { return stager_; }
  // The program is about to queue a host function, a stream callback or a
  // graph launch (Stager::NoteHostWorkQueued). Any mode, any state.
  void NoteHostWorkQueued() { stager_.NoteHostWorkQueued(); }
  RegistrationCache& cache() { return cache_; }
  FenceManager& fences() { return fences_; }
  PinAccount& account() { return account_; }

 private:
  struct EmulatedRegistration {
    uintptr_t start;  // 0: unused
    uint64_t bytes;
  };
  static constexpr int kMaxEmulated = 1024;

  void NoteHomeContext();
  // At the attach: makes present what a process's first copies would touch
  // for the first time.
  void TouchWhatFirstCopiesUse();

  OptimizerOptions options_;
  DriverOps ops_ = {};
  std::atomic<int> state_{0};  // 0 new, 1 configured, 2 attaching, 3 attached
  std::atomic<bool> active_{false};
  std::atomic<bool> pool_on_{false}, cache_on_{false}, arena_on_{false};
  std::atomic<bool> home_set_{false};
  FenceManager fences_;
  PinAccount account_;
  PageHookLine page_line_;
  PinnedPool pool_{&page_line_.pool};
  RegistrationCache cache_{&page_line_.cache};
  HostArena arena_{&page_line_.arena};
  Stager stager_;
  std::atomic<bool> stager_on_{false};
  HotSites hot_sites_;
  PathJudge judge_;
  mutable Mutex emulated_mu_;
  EmulatedRegistration* emulated_ PT_GUARDED_BY(emulated_mu_) = nullptr;  // kMaxEmulated
  std::atomic<uint64_t> pool_async_notes_{0}, arena_copies_{0}, arena_async_waits_{0};
  std::atomic<uint64_t> saved_arena_ns_{0};
  std::atomic<uint64_t> eager_heads_{0}, eager_bounces_{0};
  // UploadEagerHead's bounce buffer (kDriverEagerBytes, mapped at first
  // use, never given back) and whether a call holds it.
  std::atomic<void*> bounce_{nullptr};
  std::atomic<bool> bounce_busy_{false};

  CUresult BounceUpload(const void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream);
};

// The engine Process() returns (defined in optimizer.cc).
extern Optimizer g_process_optimizer;

inline Optimizer& Optimizer::Process() { return g_process_optimizer; }

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_OPTIMIZER_H_
