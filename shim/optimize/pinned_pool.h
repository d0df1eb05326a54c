// The pinned pool: serves the program's cuMemHostAlloc / cuMemAllocHost /
// cuMemFreeHost in optimize mode from slabs of pinned memory, so the 0.5-100
// ms the driver takes per allocation (and the device synchronization its
// free implies) is paid once per slab instead of once per request.
//
// Pools: one per (flag combination, context). Each flag changes behaviour
// (PORTABLE: pinned for every context; DEVICEMAP: mapped; WRITECOMBINED:
// uncached host reads), and non-portable memory is pinned only for the
// context that allocated it, so a block always comes from a slab the driver
// allocated with exactly the request's flags in the request's context.
//
// Blocks: page-aligned, as the driver's own allocations are. Requests up to
// max_pooled_bytes are rounded to a size class (size_classes.h: less than
// 12.5% above the page-rounded request) and carved from slabs of about
// slab_target_bytes. Larger requests get their own exact-size allocation;
// when freed it is kept for a later request it fits within 12.5%.
//
// Stream-ordered reuse (invariant 4): the copy hooks call NoteAsyncUse for
// every asynchronous copy that touched a block, which records a fence on
// that stream. Freed blocks are also covered by a fence on the legacy stream
// (fence_on_free), which covers kernels that read mapped memory directly, as
// the driver's own synchronizing cuMemFreeHost would. That fence is shared:
// freed blocks wait in an open batch, and one fence, recorded after the last
// of them was freed, covers the whole batch once it holds free_batch_blocks
// blocks or free_batch_bytes bytes (or an allocation finds nothing else to
// reuse, or the sampler's idle trim runs). Recording a fence costs about as
// much as the rest of an allocation and free together; sharing it is what
// keeps a pair in the hundreds of nanoseconds. A fence recorded later than
// a free covers at least the work queued before that free, so sharing never
// weakens the guarantee. A freed block is handed out again only after all
// its fences completed (cuEventQuery), never earlier. When only fenced
// blocks are free, an allocation polls them briefly, then grows the pool,
// or, once max_fenced_bytes are held back, waits for the oldest fence.
//
// Answers for the program: GetFlags and GetDevicePointer ask the driver about
// the block's slab (allocated with the same flags) and add the block's
// offset, so they match what a dedicated allocation would answer, errors
// included.
//
// Trimming: slabs whose blocks are all free, with no pending fences, are
// given back after idle_trim_ns (checked on Free, or by TrimIdle), or on
// demand by Trim (budget eviction).
//
// Threads: one lock, held only for bookkeeping; every driver and registry
// call happens outside it. Fork: see PrepareFork. In the child the pool is
// off: CUDA does not carry pinned memory into a child, so every call goes
// straight to the driver.
#ifndef PINSHIM_SHIM_OPTIMIZE_PINNED_POOL_H_
#define PINSHIM_SHIM_OPTIMIZE_PINNED_POOL_H_

#include <atomic>
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

struct PoolOptions {
  uint64_t max_pooled_bytes = uint64_t{32} << 20;  // larger: exact-size allocation
  uint64_t slab_target_bytes = uint64_t{2} << 20;
  uint32_t max_blocks_per_slab = 64;                  // at most kMaxBlocksPerSlab
  uint64_t idle_trim_ns = uint64_t{10} * 1000000000;  // 0: only on request
  bool fence_on_free = true;
  // One free-time fence covers a batch of at most this many blocks / bytes.
  uint32_t free_batch_blocks = 64;
  uint64_t free_batch_bytes = uint64_t{16} << 20;
  // Free blocks held back only by pending fences may add up to this much;
  // beyond it an allocation that finds no ready block waits for the oldest
  // fence instead of growing the pool (the driver's own cuMemFreeHost would
  // have waited for the device at every free).
  uint64_t max_fenced_bytes = uint64_t{64} << 20;
  bool trim_on_free = true;  // run the idle trim from Free, at most every idle_trim_ns / 2
  uint64_t (*next_alloc_id)() = nullptr;  // ids for live blocks; null: the pool's own
  uint64_t (*now_ns)() = nullptr;         // null: MonotonicNs
  // Told about every slab and dedicated allocation pinned, unpinned or
  // refused (cap, budget, driver error: the request then falls back to a
  // dedicated allocation, or gets the driver's own answer).
  OwnPinCallback on_own_pin = nullptr;
};

// What the pool knows about a pointer inside a live block.
struct PoolBlockInfo {
  uintptr_t base;
  uint64_t requested;    // bytes the program asked for
  uint64_t block_bytes;  // bytes the block occupies
  unsigned int flags;    // as the program gave them
  CUcontext ctx;         // the context that was current at allocation
  uint64_t alloc_id;     // unique per allocation (also a buffer id)
  bool dedicated;        // its own driver allocation
};

struct PoolStats {
  uint64_t hits;            // served from a free block
  uint64_t misses;          // needed a new slab or allocation
  uint64_t dedicated;       // exact-size allocations made
  uint64_t deferred_reuse;  // free blocks passed over because a fence was pending
  uint64_t fence_waits;     // allocations that waited for a fence (max_fenced_bytes)
  uint64_t fence_queries;   // driver queries of free blocks' fences (ApplyCompletions)
  uint64_t slabs_created;
  uint64_t slabs_trimmed;
  uint64_t bytes_trimmed;
  uint64_t slab_bytes;  // pinned by the pool now
  uint64_t live_blocks;
  uint64_t live_requested_bytes;
  uint64_t live_block_bytes;
  uint64_t invalid_frees;   // frees the pool answered with an error
  uint64_t saved_ns;        // cudaHostAlloc + cudaFreeHost time hits skipped (cost model)
  uint64_t free_batches;    // free-time fences recorded (each covers a batch of frees)
  uint64_t batched_blocks;  // freed blocks waiting for their batch's fence now
  uint64_t batch_growths;   // slabs added because allocations kept waiting for batches
  uint64_t retired_slabs;   // slabs retired because the program changed their pages
};

class PinnedPool {
 public:
  static constexpr uint32_t kMaxBlocksPerSlab = 64;
  static constexpr int kMaxSubPools = 64;
  static constexpr uint64_t kMaxPooledLimit = uint64_t{1} << 30;
  // Allocations that must have waited for batched frees before the pool
  // grows instead of waiting (see Allocate).
  static constexpr uint64_t kWaitsBeforeGrowth = 32;

  constexpr PinnedPool() = default;
  // Keeps its bounds in *bounds (an Optimizer's PageHookLine).
  constexpr explicit PinnedPool(PinBounds* bounds) : bounds_(bounds) {}
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // ops, fences and account must outlive the pool. False (and the pool
  // stays off, forwarding everything) when internal memory ran out.
  bool Init(const DriverOps* ops, FenceManager* fences, PinAccount* account,
            const PoolOptions& options);

  // Serves cuMemHostAlloc(pp, bytes, flags) (cuMemAllocHost: flags 0) and
  // returns what the program sees. Requests the pool cannot serve as the
  // driver would (bad arguments, unknown flags, no current context) go to
  // the driver unchanged.
  CUresult Allocate(void** pp, size_t bytes, unsigned int flags);

  // Serves cuMemFreeHost(p) when p lies in pool memory: returns true and
  // the program's result in *result (CUDA_ERROR_INVALID_VALUE for a pointer
  // that is not a live block's start, as the driver answers). Returns false
  // for any other pointer: the caller forwards it to the driver.
  // When the block was freed, *freed (if non-null) gets its requested bytes
  // and flags (other fields 0).
  bool Free(void* p, CUresult* result, PoolBlockInfo* freed = nullptr);

  // An asynchronous copy on `stream` (RecordableStream form) used the block
  // holding p: the block is not reused before that copy finished.
  void NoteAsyncUse(const void* p, CUstream stream);

  // Whether p lies in memory the pool manages (live or not). Lock-free.
  bool Owns(const void* p) const;
  // False only where Owns(p) is false, from the slabs' summary alone (a
  // load or two): for hooks that ask about nearly every host pointer.
  bool MayOwn(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return slabs_.MayHoldAny(a, a);
  }

  // Fills *info when p lies inside a live block's requested bytes.
  bool Lookup(const void* p, PoolBlockInfo* info) const;

  // cuMemHostGetFlags / cuMemHostGetDevicePointer for p where Owns(p): the
  // driver's answer for the slab, the block's offset added.
  CUresult GetFlags(unsigned int* flags, void* p) const;
  CUresult GetDevicePointer(CUdeviceptr* dptr, void* p, unsigned int flags) const;

  // Gives idle slabs back to the driver until about bytes_wanted are freed;
  // returns the bytes freed. Never touches a block with a pending fence.
  // First waits for the shared fences of batched frees (recording one for
  // the open batch), so their blocks are free again, even for 0 bytes.
  // `why`: what the unpinning is recorded as.
  uint64_t Trim(uint64_t bytes_wanted, OwnPinReason why = OwnPinReason::kEvictedForCap);

  // Gives back the slabs idle for longer than idle_trim_ns.
  uint64_t TrimIdle();

  // Bytes of slabs with no live block: about what Trim could free now.
  uint64_t IdleBytes() const;

  // A call is about to replace pages of [start, start + bytes) that lie in
  // pool memory (page_change.h): the blocks there behave as the driver's
  // own memory does under it, but their slabs hand out no block again and
  // go back to the driver once every block of theirs is free, so no later
  // allocation gets pages the driver no longer pins. MayOverlap: two loads.
  bool MayOverlap(uintptr_t start, uint64_t bytes) const {
    return MayOverlapRange(start, start + bytes);
  }
  bool MayOverlapRange(uintptr_t start, uintptr_t end) const {
    return bounds_->MayOverlap(start, end);
  }
  void Retire(uintptr_t start, uint64_t bytes, OwnPinReason why, uint32_t detail);

  // ctx was destroyed (cuCtxDestroy, cuDevicePrimaryCtxReset): the driver
  // freed its pinned memory, so its slabs are forgotten without a call.
  void OnContextDestroyed(CUcontext ctx);

  // Fork: call PrepareFork in the prepare handler, before the registries'
  // locks are taken; AfterFork* in the parent and child handlers.
  void PrepareFork() ACQUIRE(mu_);
  void AfterForkParent() RELEASE(mu_);
  void AfterForkChild() RELEASE(mu_);

  PoolStats Stats() const;
  bool active() const { return active_.load(std::memory_order_acquire); }
  uint64_t page_bytes() const { return page_; }

  // Frees every slab (tests; only when no block is in use by the program).
  void ReleaseAllForTesting();

#ifdef PINSHIM_DEBUG_INVARIANTS
  // Debug builds (invariants.h): walks the pool under its lock. Checks, with
  // shim/INVARIANTS.md's numbers in brackets:
  //  P1 a used sub-pool has known flags and a context, and no two share both [6]
  //  P2 a sub-pool's slab list is doubly linked, acyclic, of active slabs naming it
  //  P3 a slab's blocks tile it (block i at base + i * block_bytes, naming it),
  //     1 <= nblocks <= max_blocks_per_slab, base page-aligned
  //  P4 a pooled slab's block size is its class's; a dedicated one has one block,
  //     kept for reuse only above max_pooled_bytes
  //  P5 every active slab is in the slab registry under its own id and range
  //  P6 every slab lies inside *bounds_, the bounds MayOverlap reads [8]
  //  P7 no block of an active slab is gone or being freed (states inside a call)
  //  P8 a slab's nlive counts its live, freeing and batched blocks, nbatched its batched
  //  P9 a retired slab has no free block, one not retired no retired block [8]
  //  P10 the free lists hold exactly the free blocks, each on the list of its
  //      sub-pool and class (dedicated: the large list), lists doubly linked, acyclic
  //  P11 every batched block is on exactly one batch list; a batch's bytes and
  //      the open batch's count are its blocks'; batched_bytes_, nbatches_ and
  //      batched_blocks_ are their sums; an unused batch slot is empty
  //  P12 a sealed batch holds a recorded fence, which its blocks wait for [4]
  //  P13 fenced_bytes_ is the bytes of free blocks that still carry fences
  //  P14 every block's fence set is well formed (FenceSet::WellFormed) [4]
  //  P15 a live block holds what was asked (a kept large block within 1/8) and
  //      has an allocation id
  //  P16 live_blocks_, live_requested_, live_block_bytes_ and slab_bytes_ are
  //      the live blocks' count, requested and block bytes, and the slabs' bytes
  //  P17 the account's pool-slab and dedicated bytes are what the slabs were
  //      charged (the pool is their only charger)
  //  P18 spare slab structs are marked spare, and their list is acyclic
  InvariantReport CheckInvariants() const;

  // Breaks one invariant on purpose, so a test sees the walker report it;
  // the same call again restores it. Needs the structure it breaks (a slab,
  // a free block) to exist; returns false when it does not.
  enum class Corruption { kSlabLiveCount, kFreeListState, kBounds, kLiveCounter };
  bool CorruptForTesting(Corruption what);
  friend class PinnedPoolWalker;  // pinned_pool_invariants.cc
#endif

 private:
  struct Block;
  struct Slab;
  struct BlockList {
    Block* head;
    Block* tail;
  };
  struct SubPool;
  struct Candidate {
    Block* block;
    Fence fence;
  };
  static constexpr int kMaxCandidates = 64;  // the blocks TakeFreeLocked scans
  static constexpr int kMaxBatches = 64;
  // Freed blocks sharing one free-time fence.
  struct Batch {
    Fence fence;  // id 0: the slot is unused
    BlockList blocks;
    uint64_t bytes;
    uint64_t sealed_ns;  // when the fence was recorded: the blocks were free by then
  };

  uint64_t Now() const;
  SubPool* FindSubPoolLocked(unsigned int flags, CUcontext ctx, bool create) REQUIRES(mu_);
  Block* TakeFreeLocked(SubPool* sub, bool large, uint32_t cls, uint64_t bytes, Candidate* cands,
                        int* ncands) REQUIRES(mu_);
  int ApplyCompletions(Candidate* cands, int n);  // returns fences seen complete
  // min_blocks: at least this many blocks in a new slab (capped as usual).
  CUresult NewBlock(SubPool* sub_hint, unsigned int flags, CUcontext ctx, uint64_t bytes,
                    uint32_t min_blocks, Block** out);
  CUresult NewSlab(unsigned int flags, CUcontext ctx, uint32_t cls, uint64_t block_bytes,
                   uint32_t nblocks, bool dedicated, PinUse use, uint64_t charge, Block** out);
  Slab* NewSlabStructLocked() REQUIRES(mu_);
  // Allocate's steps. What one look at the free lists found: a block
  // (stamped), or the fenced candidates seen and the batches' state.
  struct FreeLook {
    Block* block;
    SubPool* sub;
    Candidate cands[kMaxCandidates];
    int ncands;
    bool over;     // fenced and batched bytes reached max_fenced_bytes
    bool batched;  // batches are out
    bool sealed;   // sealed batches are out
  };
  // A block taken for the program: its size, flags and a new allocation id.
  void StampBlockLocked(Block* b, uint64_t bytes, unsigned int flags) REQUIRES(mu_);
  void LookForFree(unsigned int flags, CUcontext ctx, bool large, uint32_t cls, uint64_t bytes,
                   FreeLook* look);
  // A free block for the request, waiting for fenced or batched ones while
  // that pays; null when a new block must be made (in *sub's sub-pool,
  // with at least *grow_blocks blocks).
  Block* TakeOrWait(unsigned int flags, CUcontext ctx, bool large, uint32_t cls, uint64_t bytes,
                    SubPool** sub, uint32_t* grow_blocks);
  // Whether the pool grows by a batch's worth (*grow_blocks) instead of
  // waiting: waits have cost a sixteenth of a new slab.
  bool GrowInsteadOfWaiting(uint64_t slab_ns, uint32_t cls, uint32_t* grow_blocks);
  // Free's steps. The program's block b (of slab s) leaves the program:
  // *freed describes it; a dedicated slab not kept for reuse is detached
  // to go back to the driver (true, its fences in dropped), else the block
  // is being freed (false).
  bool TakeBackLocked(Block* b, Slab* s, PoolBlockInfo* freed, Fence* dropped, int* ndropped)
      REQUIRES(mu_);
  // The detached dedicated slab's memory back to the driver; its answer.
  CUresult GiveBackDedicated(Slab* s, const Fence* dropped, int ndropped);
  // A freed pooled block into the open batch, or straight onto its list.
  void ListFreedBlock(Block* b, Slab* s);
  // One wait (poll, back off or block) for what *look saw fenced; false
  // when waiting no longer pays.
  bool WaitStep(int round, FreeLook* look, uint64_t poll_until);
  void FinishAllocation(Block* b, uint64_t requested);
  void ReleaseSlabMemory(Slab* s, OwnPinReason why);
  void ReportSlab(OwnPinAction action, const Slab* s, OwnPinReason why, int result) const;
  uint64_t TrimImpl(uint64_t bytes_wanted, bool idle_only, OwnPinReason why);
  // TrimImpl's steps. Seals the open batch and hands completed batches
  // back; with wait, waits until no batch is out.
  void SettleBatches(bool wait);
  // Slab s of *sub, free of live blocks, leaves its lists to be given back
  // (releasing) unless a block still carries fences: those are added to
  // cands instead (false).
  bool DetachIfCleanLocked(SubPool* sub, Slab* s, Candidate* cands, int* ncands) REQUIRES(mu_);
  // Records the shared fence for the open batch (no-op when it is empty).
  // When kMaxBatches are outstanding it waits for the oldest with `wait`,
  // else leaves the open batch open (it is sealed later).
  void SealBatch(bool wait);
  // Hands the blocks of completed batches back to the free lists; with
  // wait, first waits for the oldest batch. Returns blocks handed back.
  int ReapBatches(bool wait);
  // Puts batched blocks on their free lists; a slab left without live
  // blocks counts as idle since freed_ns. Returns how many.
  int ReleaseBatchBlocksLocked(BlockList* blocks, uint64_t freed_ns) REQUIRES(mu_);
  bool HasBatchesLocked() const REQUIRES(mu_) {
    return open_.blocks.head != nullptr || nbatches_ != 0;
  }
  void MaybeTrimIdle();
  Block* BlockAtLocked(const void* p, Slab** slab) const REQUIRES(mu_);
  static void ListPush(BlockList* l, Block* b);
  static void ListPushFront(BlockList* l, Block* b);
  static void ListRemove(BlockList* l, Block* b);

  const DriverOps* ops_ = nullptr;
  FenceManager* fences_ = nullptr;
  PinAccount* account_ = nullptr;
  PoolOptions options_;
  uint64_t page_ = 4096;
  uint32_t num_classes_ = 0;
  std::atomic<bool> active_{false};

  mutable Mutex mu_;
  SubPool* subs_ PT_GUARDED_BY(mu_) = nullptr;  // kMaxSubPools
  Slab* spare_slabs_ GUARDED_BY(mu_) = nullptr;
  uint64_t fenced_bytes_ GUARDED_BY(mu_) = 0;  // free blocks that still carry fences
  Batch open_ GUARDED_BY(mu_) = {};            // freed, no fence yet
  uint32_t open_count_ GUARDED_BY(mu_) = 0;
  Batch* batches_ PT_GUARDED_BY(mu_) = nullptr;  // kMaxBatches sealed batches
  int nbatches_ GUARDED_BY(mu_) = 0;
  uint64_t batched_bytes_ GUARDED_BY(mu_) = 0;  // open and sealed batches
  std::atomic<uint64_t> free_batches_{0}, batched_blocks_{0}, batch_growths_{0};
  // Time allocations spent waiting for batched frees since the pool last
  // grew because of it (rent or buy, see Allocate).
  std::atomic<uint64_t> poll_debt_ns_{0};
  std::atomic<uint64_t> poll_waits_{0};  // allocations that waited, since then
  Registry slabs_;                       // slab ranges, id = Slab*; lock-free lookups
  // Every slab ever made lies inside *bounds_ (widened only): own_bounds_,
  // or the Optimizer's PageHookLine.
  PinBounds own_bounds_;
  PinBounds* bounds_ = &own_bounds_;
  std::atomic<uint64_t> retired_{0};

  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> last_trim_ns_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0}, dedicated_{0}, deferred_{0};
  std::atomic<uint64_t> slabs_created_{0}, slabs_trimmed_{0}, bytes_trimmed_{0};
  std::atomic<uint64_t> slab_bytes_{0}, live_blocks_{0}, live_requested_{0}, live_block_bytes_{0};
  std::atomic<uint64_t> invalid_frees_{0}, saved_ns_{0}, fence_waits_{0};
  std::atomic<uint64_t> fence_queries_{0};  // driver queries of free blocks' fences
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PINNED_POOL_H_
