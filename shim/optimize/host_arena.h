// The host arena: pinned memory with malloc semantics, for allocation sites
// the hooks redirect in optimize mode (sites whose buffers are copied hot),
// so those buffers are pinned from birth and never pay a registration per
// buffer.
//
// Layout: one reserved address range (PROT_NONE, nothing committed), so
// Owns(p) is two comparisons. Memory is committed and registered with the
// real cuMemHostRegister in extents (one registration each) and recycled:
//   - small blocks (up to small_max_bytes, header included): size classes,
//     4 per power of two (size_classes.h), carved from spans of
//     clamp(16 x class, 64 KiB, 2 MiB) and kept on per-class free lists.
//     A block wastes less than 25% of request + 16-byte header;
//   - large blocks: page runs, best kept inside one registration (a copy
//     from a block always lies inside one registration, so the driver sees
//     it pinned). Fresh runs are registered at their exact page size, so a
//     block wastes less than one page + header; a freed run is reused by a
//     later block that fits (the rest stays free).
// Every block has a 16-byte header just before the user pointer.
// Alignment: 16 for Malloc/Calloc/Realloc; any power of two for Memalign.
//
// Registered extents whose pages are all free are given back after
// idle_trim_ns (unregistered, decommitted); spans of small blocks stay.
//
// Asynchronous copies: arena memory is the program's "malloc" memory, so
// its asynchronous copies must keep their pageable semantics: the hooks
// wait for them (RegistrationCache::AfterCopy explains why; the Optimizer's
// AfterHostCopy does it for the arena). A copy the hooks do not wait for is
// reported with NoteAsyncUse; a block freed while such a copy is pending is
// recycled only after it completed.
//
// A null return means "not served here" (no context to register in, the pin
// cap, address space exhausted): the caller serves the request from the real
// allocator. Threads: one lock for bookkeeping; registration, unregistration
// and system calls run outside it.
#ifndef PINSHIM_SHIM_OPTIMIZE_HOST_ARENA_H_
#define PINSHIM_SHIM_OPTIMIZE_HOST_ARENA_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/core/registry.h"
#include "shim/optimize/driver_ops.h"
#include "shim/optimize/fences.h"
#include "shim/optimize/invariants.h"
#include "shim/optimize/lock.h"
#include "shim/optimize/pin_account.h"
#include "shim/optimize/pin_bounds.h"

namespace pinshim {
namespace optimize {

struct ArenaOptions {
  uint64_t reserve_bytes = uint64_t{64} << 30;  // address space; less is tried if refused
  uint64_t small_max_bytes = uint64_t{256} << 10;
  unsigned int register_flags = CU_MEMHOSTREGISTER_PORTABLE;
  uint64_t idle_trim_ns = uint64_t{10} * 1000000000;  // 0: only on request
  // madvise(MADV_DOFORK) each extent after registering it, undoing a
  // MADV_DONTFORK the driver may set, so a forked child keeps the program's
  // "malloc" memory. Safe only where the kernel copies pinned pages at fork
  // (Linux >= 5.9 with pin_user_pages); see bench/optimize/fork_check.
  bool dofork_after_register = false;
  // When set, registered extents are entered as kPinnedByPinshim (source
  // kSourcePinshim) so copies see arena memory as pinned.
  Registry* registrations = nullptr;
  uint64_t (*now_ns)() = nullptr;  // null: MonotonicNs
  // Told about every extent registered, unregistered or refused.
  OwnPinCallback on_own_pin = nullptr;
  // PINSHIM_VERIFY_PAGES: record the page frames each extent pinned and
  // check them before copies (VerifyBeforeCopy).
  bool verify_pages = false;
};

// The extents a page change unpinned (BeginPageChange), for EndPageChange.
struct ArenaChangeTicket {
  static constexpr int kMax = 64;
  int32_t ext[kMax];
  int n = 0;
};

struct ArenaStats {
  uint64_t allocs;
  uint64_t frees;
  uint64_t declined;        // requests returned null (served elsewhere)
  uint64_t deferred_frees;  // frees held back by a pending copy
  uint64_t extents;         // registrations now
  uint64_t registered_bytes;
  uint64_t registrations;  // made so far
  uint64_t trimmed_bytes;
  uint64_t bad_frees;           // pointers inside the arena without a valid header
  uint64_t page_change_unpins;  // extents unpinned because the program changed their pages
  uint64_t repinned;            // extents pinned again after their pages changed
  uint64_t lost;                // extents that could not be: their memory is never reused
};

class HostArena {
 public:
  static constexpr uint32_t kMaxRuns = 65536;
  static constexpr uint32_t kMaxExtents = 16384;
  static constexpr uint32_t kMaxPending = 256;
  static constexpr uint32_t kMaxSmallClasses = 64;

  constexpr HostArena() = default;
  // Publishes its reservation's bounds in *bounds (an Optimizer's
  // PageHookLine) instead of its own.
  constexpr explicit HostArena(PinBounds* bounds) : bounds_(bounds) {}
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // Reserves the address range. ops, fences and account must outlive the
  // arena. False when nothing could be reserved (the arena stays off).
  // Called before the arena is active, when no other thread uses it: it
  // fills the guarded state unlocked.
  bool Init(const DriverOps* ops, FenceManager* fences, PinAccount* account,
            const ArenaOptions& options) NO_THREAD_SAFETY_ANALYSIS;

  // The context registrations are made in when the allocating thread has
  // none current (registrations are PORTABLE, so any context will do).
  void SetHomeContext(CUcontext ctx) { home_ctx_.store(ctx, std::memory_order_release); }
  CUcontext home_context() const { return home_ctx_.load(std::memory_order_acquire); }

  // Whether p lies in the arena's address range.
  bool Owns(const void* p) const { return reinterpret_cast<uintptr_t>(p) - base_ < size_; }

  // malloc / calloc / memalign (align: a power of two) semantics; null when
  // not served here (see above). Memalign of a bad alignment returns null.
  void* Malloc(size_t bytes);
  void* Calloc(size_t count, size_t size);
  void* Memalign(size_t align, size_t bytes);

  // For p with Owns(p): free, and malloc_usable_size.
  void Free(void* p);
  size_t UsableSize(const void* p) const;

  // realloc for p with Owns(p). bytes == 0 frees p and returns null, as
  // glibc does. Otherwise: in place when the block can hold bytes without
  // wasting more than half of it (large blocks also grow into free pages
  // after them), else moved (within the arena, or to fallback(bytes) when
  // the arena cannot serve it), content preserved. Null when nothing could
  // hold bytes; p is then untouched.
  void* Realloc(void* p, size_t bytes, void* (*fallback)(size_t));

  // An asynchronous copy on `stream` (RecordableStream form) used
  // [p, p + bytes) of arena memory and is not waited for by the hook.
  void NoteAsyncUse(const void* p, uint64_t bytes, CUstream stream);

  // Gives back registered extents whose pages are all free: those idle for
  // idle_trim_ns (TrimIdle), or any, until about bytes_wanted (Trim).
  // `why`: what the unpinning is recorded as.
  uint64_t TrimIdle();
  uint64_t Trim(uint64_t bytes_wanted, OwnPinReason why = OwnPinReason::kEvictedForCap);
  // Bytes of registered extents whose pages are all free: what Trim could free.
  uint64_t IdleBytes() const;

  // Page changes (page_change.h) of the program's over arena memory, which
  // it took for malloc's. MayOverlap: two comparisons. BeginPageChange,
  // BEFORE the call: unpins every extent overlapping [start, start +
  // bytes). EndPageChange, after it: pins them again where their memory is
  // still private anonymous memory (`stays_anonymous`), so the program's
  // later copies run pinned on its new pages; an extent that cannot be
  // (unmapped, or mapped over by something else) stays the program's as
  // ordinary memory and no part of it is handed out again.
  bool MayOverlap(uintptr_t start, uint64_t bytes) const {
    return MayOverlapRange(start, start + bytes);
  }
  // The same for [start, end), for the page hooks' fast path: the bounds
  // are empty until the range is reserved, so no range overlaps then.
  bool MayOverlapRange(uintptr_t start, uintptr_t end) const {
    return bounds_->MayOverlap(start, end);
  }
  void BeginPageChange(uintptr_t start, uint64_t bytes, OwnPinReason why, uint32_t detail,
                       ArenaChangeTicket* t);
  // repin false: leave them unpinned (still usable as ordinary memory).
  void EndPageChange(const ArenaChangeTicket& t, bool stays_anonymous, bool repin = true);
  // Before a copy from or to arena memory at p: when [p, p + bytes) runs
  // past the registration holding p (beyond the program's block), which
  // the driver would refuse, that extent is unpinned for good first.
  void BeforeCopy(const void* p, uint64_t bytes);
  // PINSHIM_VERIFY_PAGES: before a copy of [p, p + bytes) of arena memory,
  // checks that its extent still maps the pages it pinned, and pins the
  // extent again when not.
  void VerifyBeforeCopy(const void* p, uint64_t bytes);

  // Fork: PrepareFork before the registries' locks are taken. The child
  // keeps using the arena's memory as ordinary memory (the program's blocks
  // stay valid), but allocates nothing new from it.
  void PrepareFork() ACQUIRE(mu_) { mu_.PrepareFork(); }
  void AfterForkParent() RELEASE(mu_) { mu_.AfterFork(); }
  void AfterForkChild() RELEASE(mu_);

  ArenaStats Stats() const;
  bool active() const { return active_.load(std::memory_order_acquire); }

#ifdef PINSHIM_DEBUG_INVARIANTS
  // Debug builds (invariants.h): walks the arena under its lock. Checks,
  // with shim/INVARIANTS.md's numbers in brackets ("in use": not free):
  //  A1 the free runs are sorted, hold pages, do not overlap, lie below
  //     top_ <= npages_, and number at most kMaxRuns
  //  A2 touching runs never share a registration (they would have merged),
  //     so a block carved from a run lies inside one registration [1]
  //  A3 a run of an extent lies inside it, and the extent is registered or
  //     unpinned (free and lost extents have no runs: lost memory is never
  //     handed out again) [8]
  //  A4 an unregistered run overlaps no extent in use
  //  A5 extents in use hold pages, lie below top_, do not overlap, and have
  //     live_pages <= pages
  //  A6 a registered or unpinned extent's free runs and live pages add up
  //     to its pages
  //  A7 the pages below top_ are exactly the unregistered runs and the
  //     extents in use
  //  A8 the extent free list holds exactly the free extents, without a cycle
  //  A9 no extent is registering, releasing or repinning (states inside a call)
  //  A10 extents_live_ counts the registered extents, registered_bytes_ is
  //      their bytes and so are the account's arena bytes; nlost_ counts the
  //      lost extents
  //  A11 a registered extent is in the registrations registry as pinshim's
  //      pinning of its range, under its id; an unpinned or lost one is not [8]
  //  A12 a registered extent has a context; one not registered holds no frames
  //  A13 a small class's cursor lies within its span, a span with room left
  //      in one extent in use and not lost, no refill under way; its free
  //      blocks lie in such extents, the list without a cycle
  //  A14 npending_ counts the pending copy ranges, each a range with fences,
  //      its fence set well formed [4]
  //  A15 ndeferred_ is the deferred frees' count (<= kMaxPending), each a
  //      distinct pointer into the arena
  InvariantReport CheckInvariants() const;

  // Breaks one invariant on purpose, so a test sees the walker report it;
  // the same call again restores it. kRuns needs a free run, kExtentLive a
  // registered extent.
  enum class Corruption { kRuns, kExtentLive, kRegisteredBytes };
  bool CorruptForTesting(Corruption what);
  friend class HostArenaWalker;  // host_arena_invariants.cc
#endif

 private:
  struct Run {
    uint64_t start;  // page index
    uint64_t pages;
    int32_t ext;  // registered extent, -1 when not registered
  };
  struct Extent;
  struct SmallClass;
  struct Pending;

  uint64_t Now() const;
  void* AllocateBlock(size_t bytes, size_t align);
  void* AllocateSmall(uint32_t cls, size_t align);
  void* AllocateLarge(size_t bytes, size_t align);
  bool AllocatePages(uint64_t pages, uint64_t* start, int32_t* ext);
  int32_t FindRunLocked(uint64_t pages, bool registered) const REQUIRES(mu_);
  uint64_t TakeFromRunLocked(int32_t i, uint64_t pages) REQUIRES(mu_);
  bool InsertRunLocked(uint64_t start, uint64_t pages, int32_t ext) REQUIRES(mu_);
  void FreePagesLocked(uint64_t start, uint64_t pages, int32_t ext) REQUIRES(mu_);
  void FreeNow(void* p);
  bool OverlapsPendingLocked(uintptr_t start, uintptr_t end) const REQUIRES(mu_);
  bool DeferIfPending(void* p);
  void ReapDeferred();
  void MaybeTrimIdle();
  uint64_t TrimImpl(uint64_t bytes_wanted, bool idle_only, OwnPinReason why);
  // Registers extent idx's pages (state kExtentRegistering), charging the
  // account; records frames when verifying. Returns the driver's result
  // (refused: *refused says why).
  CUresult PinExtent(int32_t idx, uintptr_t addr, uint64_t bytes, CUcontext ctx,
                     OwnPinReason* refused);
  void UnpinExtent(const Extent& e, OwnPinReason why, uint32_t detail);
  void LoseExtentLocked(int32_t idx) REQUIRES(mu_);
  bool InLostExtentLocked(uintptr_t a) const REQUIRES(mu_);
  uintptr_t PageAddr(uint64_t page) const { return base_ + page * page_; }

  const DriverOps* ops_ = nullptr;
  FenceManager* fences_ = nullptr;
  PinAccount* account_ = nullptr;
  ArenaOptions options_;
  uintptr_t base_ = 0;
  uint64_t size_ = 0;  // 0 until reserved: Owns is then always false
  // [base_, base_ + size_) once reserved (empty until then): own_bounds_,
  // or the Optimizer's PageHookLine.
  PinBounds own_bounds_;
  PinBounds* bounds_ = &own_bounds_;
  uint64_t page_ = 4096;
  uint64_t npages_ = 0;
  uint32_t nclasses_ = 0;
  std::atomic<CUcontext> home_ctx_{nullptr};
  std::atomic<bool> active_{false};

  mutable Mutex mu_;
  Run* runs_ PT_GUARDED_BY(mu_) = nullptr;  // free runs sorted by start
  uint32_t nruns_ GUARDED_BY(mu_) = 0;
  uint64_t top_ GUARDED_BY(mu_) = 0;  // pages below were handed out at least once
  Extent* extents_ PT_GUARDED_BY(mu_) = nullptr;
  int32_t free_extent_ GUARDED_BY(mu_) = -1;
  SmallClass* classes_ PT_GUARDED_BY(mu_) = nullptr;
  Pending* pending_ PT_GUARDED_BY(mu_) = nullptr;     // kMaxPending copy ranges with fences
  uintptr_t* deferred_ PT_GUARDED_BY(mu_) = nullptr;  // kMaxPending blocks whose free waits
  uint32_t ndeferred_locked_ GUARDED_BY(mu_) = 0;
  std::atomic<uint32_t> npending_{0};
  std::atomic<uint32_t> ndeferred_{0};
  std::atomic<uint64_t> last_trim_ns_{0};

  std::atomic<uint64_t> allocs_{0}, frees_{0}, declined_{0}, deferred_frees_{0}, extents_live_{0};
  std::atomic<uint64_t> registered_bytes_{0}, registrations_{0}, trimmed_{0}, bad_frees_{0};
  std::atomic<uint64_t> repinned_{0}, lost_{0}, page_change_unpins_{0};
  uint32_t nlost_ GUARDED_BY(mu_) = 0;  // extents in state lost
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_HOST_ARENA_H_
