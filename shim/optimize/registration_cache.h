// The registration cache: pins hot pageable buffers in place
// (cuMemHostRegister), so the program's copies of them run at pinned speed.
//
// Decision (cost_model.h has the numbers): every pageable copy of a tracked
// allocation adds the time registering would save on that copy, s(b, d), to
// the allocation's account, which decays with time constant decay_ns:
//     A <- A * exp(-dt / decay_ns) + s(b, d)
// The allocation (all of it, [start, start + bytes)) is registered once
//     A >= register(S) + unregister(S)   and at least 2 copies were seen.
// In steady state A ~ s * rate * decay_ns: the rule registers when the
// saving expected over the next decay_ns at the observed reuse rate pays for
// pinning and unpinning; a buffer copied once, or rarely, is never pinned.
// (Accumulating until the would-have-saved total reaches the cost is the
// classic rent-or-buy rule: never worse than twice the best choice made
// with hindsight.)
//
// What is cached: allocations the libc hooks track and whose release they
// see: malloc-family blocks, and mmap regions used as one buffer (the copy
// starts in the first page and covers at least half of it). Memory of
// unknown origin (stack, static data) is not tracked, and a copy from inside
// a big mmap region that is not used as one buffer is a custom allocator's
// sub-allocation whose reuse pinshim cannot see; neither is cached (a
// missed release is silent data corruption).
//
// Asynchronous copies (the program's view must not change, invariant 1): a
// cuMemcpy*Async from pageable memory returns only after the driver staged
// or delivered the data, so the program may reuse or read the buffer at
// once. Once registered, the same call is truly asynchronous. AfterCopy
// therefore waits for an asynchronous copy that ran on cached memory
// (records an event on its stream and synchronizes on it) before the hook
// returns. The copy still runs at pinned speed; only the return is as late
// as it always was.
//
// Release (invariant 3): the libc hooks call OnRelease BEFORE free, realloc,
// munmap or mremap hand the memory back. It waits for in-flight copies
// (fences, and copies between BeforeCopy and AfterCopy), unregisters, and
// only then returns.
//
// Cap: registrations are charged to the PinAccount; when the cap is reached
// the least recently used registrations are evicted.
//
// Failures (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED because the program
// registered the memory itself, RLIMIT_MEMLOCK, out of memory, other driver
// errors): nothing is pinned, the allocation is remembered and not tried
// again, and the reason is counted. Transient refusals (cap, full table, no
// context) are counted and the allocation starts accumulating afresh.
//
// Threads: one lock, held only for bookkeeping; registration and
// unregistration run outside it, with the entry marked so that a concurrent
// release waits for them.
#ifndef PINSHIM_SHIM_OPTIMIZE_REGISTRATION_CACHE_H_
#define PINSHIM_SHIM_OPTIMIZE_REGISTRATION_CACHE_H_

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/core/registry.h"
#include "shim/optimize/driver_ops.h"
#include "shim/optimize/fences.h"
#include "shim/optimize/invariants.h"
#include "shim/optimize/lock.h"
#include "shim/optimize/page_frames.h"
#include "shim/optimize/pin_account.h"
#include "shim/optimize/pin_bounds.h"

namespace pinshim {
namespace optimize {

enum class CacheFailure : uint8_t {
  kAlreadyRegistered = 0,  // remembered: the memory is (partly) registered already
  kMemlockLimit = 1,       // remembered: RLIMIT_MEMLOCK would be exceeded
  kOutOfMemory = 2,        // remembered: the driver ran out of memory
  kDriverError = 3,        // remembered: any other driver error
  kCap = 4,                // transient: the pin cap (or the budget) refused
  kTableFull = 5,          // transient: no entry free, none evictable
  kNoContext = 6,          // transient: no current context on the copying thread
  kPagesChanged = 7,       // remembered: the pages behind it changed once (page_change.h)
  kCount = 8,
};
constexpr int kCacheFailureCount = static_cast<int>(CacheFailure::kCount);
const char* CacheFailureName(CacheFailure failure);

enum class CacheDecline : uint8_t {
  kUntracked = 0,         // no tracked allocation owns the memory
  kSource = 1,            // owned by the driver or pinshim, not by malloc/mmap
  kSubAllocation = 2,     // inside an mmap region not used as one buffer
  kTooLarge = 3,          // larger than the cap allows
  kNotPinnable = 4,       // shared or file-backed memory: never pinned in place
  kSlowerThanDriver = 5,  // the self-check measured pinned-in-place copies losing here
  kCount = 6,
};
constexpr int kCacheDeclineCount = static_cast<int>(CacheDecline::kCount);

struct CacheOptions {
  // When set, registrations are entered as kPinnedByPinshim, source
  // kSourcePinshim, id = the allocation's id, so copies see them as pinned.
  Registry* registrations = nullptr;
  unsigned int register_flags = CU_MEMHOSTREGISTER_PORTABLE;
  uint32_t max_entries = 1024;  // at most kMaxEntries
  uint64_t decay_ns = uint64_t{10} * 1000000000;
  uint64_t (*now_ns)() = nullptr;  // null: MonotonicNs
  // Called (outside the cache's lock) after a tracked allocation with a
  // known site (Region::site != 0) was registered: its site is hot.
  void (*on_registered)(void* arg, uint64_t site) = nullptr;
  void* on_registered_arg = nullptr;
  // Told about every registration made, dropped or refused (declined
  // copies, which happen per copy, are only counted).
  OwnPinCallback on_own_pin = nullptr;
  // PINSHIM_VERIFY_PAGES: record the page frames each registration pinned
  // and check them before every copy through it (page_frames.h).
  bool verify_pages = false;
};

// Handed from the hook's "before the copy" call to its "after" call.
struct CacheTicket {
  int32_t entry = -1;
  uint32_t generation = 0;
  bool pinned() const { return entry >= 0; }
};

struct CacheStats {
  uint64_t registrations;
  uint64_t hits;       // copies that ran on cached memory (registration copy excluded)
  uint64_t evictions;  // unpinned for the cap or the budget
  uint64_t releases;   // unpinned because the program released the memory
  uint64_t failures[kCacheFailureCount];
  uint64_t declined[kCacheDeclineCount];
  uint64_t async_waits;         // asynchronous copies on cached memory waited for
  uint64_t page_change_unpins;  // unpinned because the program changed the pages
  uint64_t entries;
  uint64_t bytes;     // pinned by the cache now
  uint64_t saved_ns;  // estimated copy time saved (cost model)
};

class RegistrationCache {
 public:
  static constexpr uint32_t kMaxEntries = 4096;
  static constexpr uint32_t kCandidateSlots = 4096;  // power of two

  constexpr RegistrationCache() = default;
  // Keeps its bounds in *bounds (an Optimizer's PageHookLine) instead of
  // its own.
  constexpr explicit RegistrationCache(PinBounds* bounds) : bounds_(bounds) {}
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // ops, fences and account must outlive the cache. False when internal
  // memory ran out (the cache then stays off). Called before the cache is
  // active, when no other thread uses it: it fills the guarded state unlocked.
  bool Init(const DriverOps* ops, FenceManager* fences, PinAccount* account,
            const CacheOptions& options) NO_THREAD_SAFETY_ANALYSIS;

  // Before a copy whose host side [host_ptr, host_ptr + bytes) is pageable
  // memory of the tracked allocation `alloc` (from the allocations
  // registry): accounts for the copy and registers the allocation when that
  // pays off and may_pin (the self-check's leave) holds. A pinned() ticket
  // means the copy now runs on cached memory.
  CacheTicket OnPageableCopy(const Region& alloc, const void* host_ptr, uint64_t bytes, CopyDir dir,
                             bool may_pin = true);

  // Before a copy whose host side lies in memory the registry says pinshim
  // pinned: a pinned() ticket when it is this cache's registration.
  CacheTicket OnCachedCopy(const void* host_ptr, uint64_t bytes, CopyDir dir);

  // After the copy, for every ticket from the two calls above. `async`: the
  // call was one of the *Async entry points; stream in RecordableStream form.
  // Waits for a successful asynchronous copy on cached memory to complete.
  void AfterCopy(const CacheTicket& ticket, CUresult result, bool async, CUstream stream);

  // An asynchronous copy on `stream` used cached memory at p and is not
  // waited for: release and eviction wait for it.
  void NoteAsyncUse(const void* p, CUstream stream);

  // Call BEFORE [start, start + bytes) is released or reused (free,
  // realloc, munmap, mremap), and before the program registers memory
  // itself: unpins every cached registration overlapping it, after waiting
  // for the copies that used it. `why`: what the unpinning is recorded as.
  void OnRelease(const void* start, uint64_t bytes,
                 OwnPinReason why = OwnPinReason::kProgramReleased);

  // Cheap pre-check for OnRelease: false when nothing is cached.
  bool MaybeCached() const { return live_entries_.load(std::memory_order_acquire) != 0; }

  // BEFORE a call that replaces the pages of [start, start + bytes) (the
  // hooks have marked the range in PageChangeSlots first): unpins every
  // registration overlapping it, as OnRelease does, and never pins those
  // allocations in place again (a program that changed their pages once
  // may again). `why` and `detail` go to the trace.
  void OnPageChange(uintptr_t start, uint64_t bytes, OwnPinReason why, uint32_t detail);
  // Whether [start, start + bytes) may overlap a registration: two loads.
  bool MayOverlap(uintptr_t start, uint64_t bytes) const {
    return MaybeCached() && MayOverlapRange(start, start + bytes);
  }
  // The same for [start, end) from the bounds alone (reset when the cache
  // empties), for the page hooks' fast path.
  bool MayOverlapRange(uintptr_t start, uintptr_t end) const {
    return bounds_->MayOverlap(start, end);
  }

  // Whether p lies in a registration of this cache; its range if so.
  bool Contains(const void* p, uintptr_t* start, uint64_t* bytes) const;

  // Unpins least-recently-used registrations (none in use by a copy) until
  // about bytes_wanted are freed; returns the bytes unpinned. `why`: what
  // the unpinning is recorded as.
  uint64_t Evict(uint64_t bytes_wanted, OwnPinReason why = OwnPinReason::kEvictedForCap);
  // Bytes of registrations no copy is using: what Evict could free now.
  uint64_t EvictableBytes() const;

  // Fork: PrepareFork before the registries' locks are taken. In the child
  // the cache is off; AfterForkChild also drops its entries from the
  // registrations registry, so call it after that registry is unlocked.
  void PrepareFork() ACQUIRE(mu_) { mu_.PrepareFork(); }
  void AfterForkParent() RELEASE(mu_) { mu_.AfterFork(); }
  // In the child, whose only thread is the caller, it clears the guarded
  // state after releasing the lock.
  void AfterForkChild() RELEASE(mu_) NO_THREAD_SAFETY_ANALYSIS;

  CacheStats Stats() const;
  bool active() const { return active_.load(std::memory_order_acquire); }
  // The flags registrations are made with (as the program sees them in copies).
  unsigned int register_flags() const { return options_.register_flags; }

#ifdef PINSHIM_DEBUG_INVARIANTS
  // Debug builds (invariants.h): walks the cache under its lock. Checks,
  // with shim/INVARIANTS.md's numbers in brackets:
  //  C1 order_ holds norder_ distinct indices of entries in use, and norder_
  //     is live_entries_
  //  C2 those entries are sorted by start, do not overlap, and hold bytes
  //  C3 the free list holds exactly the free entries, without a cycle
  //  C4 every entry lies inside *bounds_, the bounds MayOverlap reads;
  //     with none, they are empty (UINTPTR_MAX, 0) [8]
  //  C5 no entry is registering or releasing (states inside a call); a
  //     registered one has a context and no negative user count
  //  C6 bytes_ is the registered entries' bytes, and the account's cache
  //     bytes equal it (the cache is their only charger) [3]
  //  C7 every registered entry is in the registrations registry as
  //     pinshim's pinning of its range, under its allocation's id [1]
  //  C8 an entry holds a frame array exactly when it records frames
  //  C9 every entry's fence set is well formed (FenceSet::WellFormed) [3]
  //  C10 a candidate slot is empty (all zero) or lies within its id's probe
  //      window, first of that id there; none is busy (a registration under
  //      way); a remembered failure is a CacheFailure
  InvariantReport CheckInvariants() const;

  // Breaks one invariant on purpose, so a test sees the walker report it;
  // the same call again restores it. kOrder needs two entries.
  enum class Corruption { kOrder, kBounds, kBytes };
  bool CorruptForTesting(Corruption what);
  friend class RegistrationCacheWalker;  // registration_cache_invariants.cc
#endif

 private:
  struct Entry;
  struct Candidate;

  uint64_t Now() const;
  Candidate* FindCandidateLocked(uint64_t alloc_id, uint64_t now, bool create) REQUIRES(mu_);
  int32_t FindEntryLocked(uintptr_t p) const REQUIRES(mu_);
  int32_t FirstOverlapLocked(uintptr_t start, uintptr_t end) const REQUIRES(mu_);
  int32_t NewEntryLocked(uintptr_t start, uint64_t bytes, uint64_t alloc_id) REQUIRES(mu_);
  void DropEntryLocked(int32_t idx) REQUIRES(mu_);
  void AbortRegistration(int32_t idx, uint64_t alloc_id, CacheFailure why);
  void ReportRefusal(const Region& alloc, OwnPinReason why, int result) const;
  // OnPageableCopy's steps, in order. Declines: whether the copy's buffer
  // is not one the cache pins (counted by reason, CountDecline).
  void CountDecline(CacheDecline why);
  bool Declines(const Region& alloc, uintptr_t p, uint64_t bytes);
  // The rest for a buffer the cache does not decline: pins it once that
  // pays off. Out of line: most copies are declined.
  __attribute__((noinline)) CacheTicket PinIfWorth(const Region& alloc, uint64_t bytes, CopyDir dir,
                                                   bool may_pin);
  // Notes the copy on its buffer's candidate; once pinning it pays off,
  // reserves an entry (registering) and returns its index; else -1, with
  // *table_full set when no entry was free.
  int32_t ReserveEntry(const Region& alloc, double saving, uint64_t now, bool may_pin,
                       bool* table_full);
  // Pins the reserved entry's buffer in the current context (*ctx); false
  // when it aborted the registration instead (reported).
  bool PinEntry(int32_t idx, const Region& alloc, CUcontext* ctx);
  // PINSHIM_VERIFY_PAGES: the frames the registration pinned, else null
  // (*nframes 0).
  PageFrame* ReadFramesOf(const Region& alloc, uint64_t* nframes) const;
  // Makes the pinned entry registered with this copy its first user.
  CacheTicket PublishEntry(int32_t idx, const Region& alloc, CUcontext ctx, double saving,
                           uint64_t now);
  void Unpin(int32_t idx, const Fence* fences, int nfences, OwnPinReason why, uint32_t detail = 0);
  void ReleaseRange(uintptr_t s, uintptr_t end, OwnPinReason why, uint32_t detail, bool forget);
  bool FramesStillPinned(int32_t idx, uintptr_t p, uint64_t bytes);
  CacheFailure ClassifyFailure(CUresult r, uint64_t bytes) const;

  const DriverOps* ops_ = nullptr;
  FenceManager* fences_ = nullptr;
  PinAccount* account_ = nullptr;
  CacheOptions options_;
  std::atomic<bool> active_{false};

  mutable Mutex mu_;
  Entry* entries_ PT_GUARDED_BY(mu_) = nullptr;  // options_.max_entries
  int32_t* order_ PT_GUARDED_BY(mu_) = nullptr;  // entry indices sorted by start
  uint32_t norder_ GUARDED_BY(mu_) = 0;
  int32_t free_entry_ GUARDED_BY(mu_) = -1;
  Candidate* candidates_ PT_GUARDED_BY(mu_) = nullptr;  // kCandidateSlots
  uint64_t tick_ GUARDED_BY(mu_) = 0;

  std::atomic<uint64_t> live_entries_{0};
  // Every live registration lies inside *bounds_ (widened as entries come,
  // cleared when the cache empties): own_bounds_, or the Optimizer's
  // PageHookLine.
  PinBounds own_bounds_;
  PinBounds* bounds_ = &own_bounds_;
  std::atomic<uint64_t> registrations_{0}, hits_{0}, evictions_{0}, releases_{0};
  std::atomic<uint64_t> failures_[kCacheFailureCount] = {};
  std::atomic<uint64_t> declined_[kCacheDeclineCount] = {};
  std::atomic<uint64_t> async_waits_{0}, bytes_{0}, saved_ns_{0}, page_change_unpins_{0};
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_REGISTRATION_CACHE_H_
