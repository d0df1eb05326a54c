#include "shim/optimize/pinned_pool.h"

#include <unistd.h>

#include <cstring>
#include <initializer_list>

#include "shim/core/internal_alloc.h"
#include "shim/optimize/cost_model.h"
#include "shim/optimize/size_classes.h"

namespace pinshim {
namespace optimize {
namespace {

enum BlockState : uint8_t {
  kBlockFree = 0,     // listed, may carry fences
  kBlockLive = 1,     // the program's
  kBlockFreeing = 2,  // between the program's free and the list
  kBlockGone = 3,     // its slab is being given back
  kBlockBatched = 4,  // freed; on a batch list until the batch's fence completed
  kBlockRetired = 5,  // free, but its slab is retired: on no list, never reused
};

enum SlabState : uint8_t {
  kSlabActive = 0,
  kSlabReleasing = 1,  // detached; its memory is on its way back to the driver
  kSlabSpare = 2,      // the struct is unused
};

constexpr unsigned int kKnownFlags =
    CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;

// Enough classes for kMaxPooledLimit at 4 KiB pages (2^18 pages).
constexpr uint32_t kMaxPoolClasses = kPoolExactClasses + 14 * kPoolClassesPerDoubling + 1;
constexpr uint32_t kDedicatedClass = UINT32_MAX;
constexpr uint64_t kMaxRequest = uint64_t{1} << 46;  // 64 TiB

}  // namespace

struct PinnedPool::Block {
  uintptr_t base;
  uint64_t bytes;
  uint64_t requested;
  uint64_t alloc_id;
  Slab* slab;
  Block* prev;
  Block* next;
  unsigned int flags;
  uint8_t state;
  FenceSet fences;
};

struct PinnedPool::Slab {
  uintptr_t base;
  uint64_t bytes;
  uint64_t block_bytes;
  CUcontext ctx;
  SubPool* sub;
  uint32_t cls;
  uint32_t nblocks;
  uint32_t nlive;     // blocks live, being freed, or batched
  uint32_t nbatched;  // of those, freed and waiting for their batch's fence
  uint64_t idle_since_ns;
  uint64_t charged;
  PinUse use;
  uint8_t state;
  bool dedicated;
  bool keep_on_free;  // dedicated blocks above max_pooled_bytes are kept for reuse
  bool retired;       // the program changed its pages: no block of it is reused
  Slab* prev;
  Slab* next;
  Block blocks[kMaxBlocksPerSlab];
};

struct PinnedPool::SubPool {
  bool used;
  unsigned int flags;
  CUcontext ctx;
  Slab* slabs;
  BlockList large;
  BlockList free[kMaxPoolClasses];
};

void PinnedPool::ListPush(BlockList* l, Block* b) {
  b->next = nullptr;
  b->prev = l->tail;
  if (l->tail != nullptr) {
    l->tail->next = b;
  } else {
    l->head = b;
  }
  l->tail = b;
}

void PinnedPool::ListPushFront(BlockList* l, Block* b) {
  b->prev = nullptr;
  b->next = l->head;
  if (l->head != nullptr) {
    l->head->prev = b;
  } else {
    l->tail = b;
  }
  l->head = b;
}

void PinnedPool::ListRemove(BlockList* l, Block* b) {
  if (b->prev != nullptr) {
    b->prev->next = b->next;
  } else {
    l->head = b->next;
  }
  if (b->next != nullptr) {
    b->next->prev = b->prev;
  } else {
    l->tail = b->prev;
  }
  b->prev = b->next = nullptr;
}

bool PinnedPool::Init(const DriverOps* ops, FenceManager* fences, PinAccount* account,
                      const PoolOptions& options) {
  if (ops == nullptr || fences == nullptr || account == nullptr || !DriverOpsComplete(*ops)) {
    return false;
  }
  long page = sysconf(_SC_PAGESIZE);
  page_ = page > 0 ? static_cast<uint64_t>(page) : 4096;
  options_ = options;
  if (options_.max_pooled_bytes < page_) options_.max_pooled_bytes = page_;
  if (options_.max_pooled_bytes > kMaxPooledLimit) options_.max_pooled_bytes = kMaxPooledLimit;
  if (options_.max_blocks_per_slab == 0) options_.max_blocks_per_slab = 1;
  if (options_.max_blocks_per_slab > kMaxBlocksPerSlab) {
    options_.max_blocks_per_slab = kMaxBlocksPerSlab;
  }
  uint64_t max_pages = (options_.max_pooled_bytes + page_ - 1) / page_;
  num_classes_ = PoolClassOfPages(max_pages) + 1;
  if (num_classes_ > kMaxPoolClasses) return false;
  if (subs_ == nullptr) {
    subs_ = static_cast<SubPool*>(InternalAlloc(sizeof(SubPool) * kMaxSubPools));
    if (subs_ == nullptr) return false;
  }
  if (batches_ == nullptr) {
    batches_ = static_cast<Batch*>(InternalAlloc(sizeof(Batch) * kMaxBatches));
    if (batches_ == nullptr) return false;
    memset(static_cast<void*>(batches_), 0, sizeof(Batch) * kMaxBatches);
  }
  if (options_.free_batch_blocks == 0) options_.free_batch_blocks = 1;
  ops_ = ops;
  fences_ = fences;
  account_ = account;
  active_.store(true, std::memory_order_release);
  return true;
}

uint64_t PinnedPool::Now() const {
  return options_.now_ns != nullptr ? options_.now_ns() : MonotonicNs();
}

PinnedPool::SubPool* PinnedPool::FindSubPoolLocked(unsigned int flags, CUcontext ctx, bool create) {
  SubPool* empty = nullptr;
  for (int i = 0; i < kMaxSubPools; ++i) {
    SubPool& s = subs_[i];
    if (s.used && s.flags == flags && s.ctx == ctx) return &s;
    if (!s.used && empty == nullptr) empty = &s;
  }
  if (!create || empty == nullptr) return nullptr;
  memset(empty, 0, sizeof(SubPool));
  empty->used = true;
  empty->flags = flags;
  empty->ctx = ctx;
  return empty;
}

PinnedPool::Block* PinnedPool::TakeFreeLocked(SubPool* sub, bool large, uint32_t cls,
                                              uint64_t bytes, Candidate* cands, int* ncands) {
  BlockList* list = large ? &sub->large : &sub->free[cls];
  int scanned = 0;
  for (Block* b = list->head; b != nullptr && scanned < 64; b = b->next, ++scanned) {
    // A kept large block serves a request it exceeds by at most 1/8.
    if (large && !(b->bytes >= bytes && b->bytes - bytes <= b->bytes / 8)) continue;
    if (b->fences.empty()) {
      ListRemove(list, b);
      b->state = kBlockLive;
      b->slab->nlive++;
      return b;
    }
    deferred_.fetch_add(1, std::memory_order_relaxed);
    Fence fs[FenceSet::kSlots];
    int k = b->fences.Copy(fs);
    for (int i = 0; i < k && *ncands < kMaxCandidates; ++i) cands[(*ncands)++] = {b, fs[i]};
  }
  return nullptr;
}

int PinnedPool::ApplyCompletions(Candidate* cands, int n) {
  // One query per stream when its newest fence completed (stream order):
  // blocks released by a batch carry their copies' fences, often dozens on
  // one stream, and a query per fence made the allocation that looked at
  // them wait tens of microseconds (bench/RESULTS.md, alloc_loop detail).
  Fence fs[kMaxCandidates];
  for (int i = 0; i < n; ++i) fs[i] = cands[i].fence;
  bool done[kMaxCandidates];
  fence_queries_.fetch_add(static_cast<uint64_t>(fences_->AreDone(fs, n, done)),
                           std::memory_order_relaxed);
  Fence removed[kMaxCandidates];
  int nremoved = 0;
  {
    MutexLock lock(&mu_);
    for (int i = 0; i < n; ++i) {
      Fence f;
      // By id: the block may have been handed out and fenced again meanwhile.
      Block* b = cands[i].block;
      if (done[i] && b->fences.Remove(cands[i].fence.id, &f)) {
        removed[nremoved++] = f;
        if (b->fences.empty() && b->state == kBlockFree) fenced_bytes_ -= b->bytes;
      }
    }
  }
  for (int i = 0; i < nremoved; ++i) fences_->Recycle(removed[i]);
  return nremoved;
}

PinnedPool::Slab* PinnedPool::NewSlabStructLocked() {
  Slab* s = spare_slabs_;
  if (s != nullptr) {
    spare_slabs_ = s->next;
  } else {
    s = static_cast<Slab*>(InternalAlloc(sizeof(Slab)));
    if (s == nullptr) return nullptr;
  }
  memset(static_cast<void*>(s), 0, sizeof(Slab));
  return s;
}

CUresult PinnedPool::NewSlab(unsigned int flags, CUcontext ctx, uint32_t cls, uint64_t block_bytes,
                             uint32_t nblocks, bool dedicated, PinUse use, uint64_t charge,
                             Block** out) {
  *out = nullptr;
  const uint64_t bytes = block_bytes * nblocks;
  void* base = nullptr;
  // In the program's capture mode: the slab serves the program's own
  // allocation call, which the driver would refuse where that mode does.
  CUresult r = ops_->mem_host_alloc(&base, bytes, flags);
  if (r != CUDA_SUCCESS) {
    account_->Release(use, charge);
    return r;
  }
  Slab* s;
  {
    MutexLock lock(&mu_);
    s = NewSlabStructLocked();
  }
  if (s == nullptr) {
    ops_->mem_free_host(base);
    account_->Release(use, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s->base = reinterpret_cast<uintptr_t>(base);
  s->bytes = bytes;
  s->block_bytes = block_bytes;
  s->ctx = ctx;
  s->cls = cls;
  s->nblocks = nblocks;
  s->nlive = 1;  // block 0 goes to the caller
  s->charged = charge;
  s->use = use;
  s->state = kSlabActive;
  s->dedicated = dedicated;
  s->keep_on_free = dedicated && bytes > options_.max_pooled_bytes;
  s->retired = false;
  for (uint32_t i = 0; i < nblocks; ++i) {
    Block& b = s->blocks[i];
    b.base = s->base + i * block_bytes;
    b.bytes = block_bytes;
    b.slab = s;
    b.state = kBlockFree;
  }
  Region reg;
  reg.start = s->base;
  reg.bytes = bytes == 0 ? 1 : bytes;
  reg.id = reinterpret_cast<uint64_t>(s);
  reg.flags = flags;
  reg.kind = MemKind::kPinnedByPinshim;
  reg.source = kSourcePinshim;
  slabs_.Insert(reg);
  // Widened before the slab is handed out, so a page-change hook that can
  // see the block can see the bounds.
  bounds_->Widen(s->base, s->base + bytes);
  {
    MutexLock lock(&mu_);
    SubPool* sub = FindSubPoolLocked(flags, ctx, true);
    s->sub = sub;
    if (sub != nullptr) {
      s->next = sub->slabs;
      if (sub->slabs != nullptr) sub->slabs->prev = s;
      sub->slabs = s;
      for (uint32_t i = 1; i < nblocks; ++i) ListPush(&sub->free[cls], &s->blocks[i]);
    } else {
      // No pool slot left: the slab serves its one block and goes back on free.
      s->dedicated = true;
      s->keep_on_free = false;
    }
    s->blocks[0].state = kBlockLive;
  }
  slabs_created_.fetch_add(1, std::memory_order_relaxed);
  slab_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (dedicated) dedicated_.fetch_add(1, std::memory_order_relaxed);
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kPinned, PartOf(use), OwnPinReason::kNone,
               s->base, bytes, 0, CUDA_SUCCESS);
  *out = &s->blocks[0];
  return CUDA_SUCCESS;
}

void PinnedPool::ReportSlab(OwnPinAction action, const Slab* s, OwnPinReason why,
                            int result) const {
  // A dedicated allocation served one program allocation: name it.
  ReportOwnPin(options_.on_own_pin, action, PartOf(s->use), why, s->base, s->bytes,
               s->dedicated ? s->blocks[0].alloc_id : 0, result);
}

CUresult PinnedPool::NewBlock(SubPool* sub, unsigned int flags, CUcontext ctx, uint64_t bytes,
                              uint32_t min_blocks, Block** out) {
  if (sub != nullptr && bytes <= options_.max_pooled_bytes) {
    const uint64_t pages = bytes == 0 ? 1 : (bytes + page_ - 1) / page_;
    const uint32_t cls = PoolClassOfPages(pages);
    const uint64_t block_bytes = PoolClassPages(cls) * page_;
    uint64_t n = options_.slab_target_bytes / block_bytes;
    if (n < min_blocks) n = min_blocks;
    if (n < 1) n = 1;
    if (n > options_.max_blocks_per_slab) n = options_.max_blocks_per_slab;
    OwnPinReason why = OwnPinReason::kNone;
    CUresult r = CUDA_SUCCESS;
    for (uint32_t nblocks = static_cast<uint32_t>(n);; nblocks = 1) {
      const uint64_t slab_bytes = block_bytes * nblocks;
      if (account_->ChargeWithEviction(PinUse::kPoolSlab, slab_bytes, &why)) {
        r = NewSlab(flags, ctx, cls, block_bytes, nblocks, false, PinUse::kPoolSlab, slab_bytes,
                    out);
        if (r == CUDA_SUCCESS) return CUDA_SUCCESS;
        why = DriverRefusalReason(r, account_->pinned(), slab_bytes);
      } else {
        r = CUDA_SUCCESS;  // no driver call was made
      }
      if (nblocks == 1) break;
    }
    // Recorded once, for the last attempt; the request goes on below.
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kPoolSlab, why, 0,
                 block_bytes, 0, r);
  }
  // Its own allocation of exactly what the program asked for: what the
  // driver answers for it is what the program would have seen.
  OwnPinReason why = OwnPinReason::kNone;
  if (!account_->ChargeUncapped(PinUse::kPoolDedicated, bytes, &why)) {
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kPoolDedicated, why, 0,
                 bytes, 0, CUDA_SUCCESS);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult r =
      NewSlab(flags, ctx, kDedicatedClass, bytes, 1, true, PinUse::kPoolDedicated, bytes, out);
  if (r != CUDA_SUCCESS) {
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kPoolDedicated,
                 DriverRefusalReason(r, account_->pinned(), bytes), 0, bytes, 0, r);
  }
  return r;
}

void PinnedPool::FinishAllocation(Block* b, uint64_t requested) {
  live_blocks_.fetch_add(1, std::memory_order_relaxed);
  live_requested_.fetch_add(requested, std::memory_order_relaxed);
  live_block_bytes_.fetch_add(b->bytes, std::memory_order_relaxed);
}

CUresult PinnedPool::Allocate(void** pp, size_t bytes, unsigned int flags) {
  // Absurd sizes: only the driver can say what it answers to those.
  if (!active() || pp == nullptr || (flags & ~kKnownFlags) != 0 || bytes > kMaxRequest) {
    return ops_ != nullptr ? ops_->mem_host_alloc(pp, bytes, flags) : CUDA_ERROR_NOT_INITIALIZED;
  }
  CUcontext ctx = nullptr;
  if (ops_->ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return ops_->mem_host_alloc(pp, bytes, flags);  // the driver's own error
  }
  const bool large = bytes > options_.max_pooled_bytes;
  const uint64_t pages = bytes == 0 ? 1 : (bytes + page_ - 1) / page_;
  const uint32_t cls = large ? 0 : PoolClassOfPages(pages);
  Block* b = nullptr;
  SubPool* sub = nullptr;
  // Waiting for batched frees to come back is worth up to an eighth of what
  // a new slab costs the driver; a fence on an idle device completes within
  // microseconds. But waits that keep coming mean the pool is too small for
  // its batches to complete before their blocks are wanted: once at least
  // kWaitsBeforeGrowth allocations waited and the time spent waiting adds up
  // to a sixteenth of a slab's cost (rent or buy), the pool grows instead,
  // by a slab that holds a whole batch. A program that allocates a handful
  // of times never gets there.
  uint64_t poll_until = 0;
  uint64_t poll_start = 0;
  uint32_t grow_blocks = 0;
  for (int round = 0;; ++round) {
    Candidate cands[kMaxCandidates];
    int ncands = 0;
    bool over = false;
    bool batched = false;
    bool sealed = false;
    {
      MutexLock lock(&mu_);
      sub = FindSubPoolLocked(flags, ctx, true);
      if (sub != nullptr) b = TakeFreeLocked(sub, large, cls, bytes, cands, &ncands);
      if (b != nullptr) {
        b->requested = bytes;
        b->flags = flags;
        b->alloc_id = options_.next_alloc_id != nullptr
                          ? options_.next_alloc_id()
                          : next_id_.fetch_add(1, std::memory_order_relaxed);
      }
      batched = HasBatchesLocked();
      sealed = nbatches_ != 0;
      over = fenced_bytes_ + batched_bytes_ >= options_.max_fenced_bytes;
    }
    if (b != nullptr || (ncands == 0 && !batched)) break;
    // Only fenced (or batched) blocks are free. Fences usually complete
    // within microseconds: poll a little before paying for a new slab, and
    // past max_fenced_bytes wait rather than grow without bound.
    if (round == 0 && batched) {
      const uint64_t slab_ns = static_cast<uint64_t>(CostModel::HostAllocNs(bytes));
      if (!over && !large && poll_waits_.load(std::memory_order_relaxed) >= kWaitsBeforeGrowth &&
          poll_debt_ns_.load(std::memory_order_relaxed) >= slab_ns / 16) {
        poll_debt_ns_.store(0, std::memory_order_relaxed);
        poll_waits_.store(0, std::memory_order_relaxed);
        batch_growths_.fetch_add(1, std::memory_order_relaxed);
        const uint64_t block_bytes = PoolClassPages(cls) * page_;
        uint64_t per_batch = options_.free_batch_bytes / block_bytes;
        if (per_batch > options_.free_batch_blocks) per_batch = options_.free_batch_blocks;
        grow_blocks = static_cast<uint32_t>(per_batch);
        break;
      }
      poll_start = MonotonicNs();
      poll_until = poll_start + slab_ns / 8;
    }
    const bool polling = round < 3 || (batched && MonotonicNs() < poll_until);
    if (!polling) {
      if (!over) break;
      fence_waits_.fetch_add(1, std::memory_order_relaxed);
      if (batched) {
        SealBatch(true);
        ReapBatches(true);
      } else {
        fences_->Wait(cands[0].fence);
      }
    } else if (round >= 1) {
      Backoff();
    }
    if (batched) {
      // The open batch gets its fence now unless sealed ones are still out
      // (those come back first; a fence per allocation would cost more).
      if (round == 0 && !sealed) SealBatch(false);
      ReapBatches(false);
    }
    ApplyCompletions(cands, ncands);
  }
  if (poll_start != 0) {
    poll_debt_ns_.fetch_add(MonotonicNs() - poll_start, std::memory_order_relaxed);
    poll_waits_.fetch_add(1, std::memory_order_relaxed);
  }
  if (b != nullptr) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    saved_ns_.fetch_add(
        static_cast<uint64_t>(CostModel::HostAllocNs(bytes) + CostModel::FreeHostNs(bytes)),
        std::memory_order_relaxed);
  } else {
    misses_.fetch_add(1, std::memory_order_relaxed);
    CUresult r = NewBlock(sub, flags, ctx, bytes, grow_blocks, &b);
    if (r != CUDA_SUCCESS) return r;
    MutexLock lock(&mu_);
    b->requested = bytes;
    b->flags = flags;
    b->alloc_id = options_.next_alloc_id != nullptr
                      ? options_.next_alloc_id()
                      : next_id_.fetch_add(1, std::memory_order_relaxed);
  }
  FinishAllocation(b, bytes);
  *pp = reinterpret_cast<void*>(b->base);
  return CUDA_SUCCESS;
}

PinnedPool::Block* PinnedPool::BlockAtLocked(const void* p, Slab** slab) const {
  Region reg;
  const auto a = reinterpret_cast<uintptr_t>(p);
  // Slab structs are never unmapped, so a stale id is safe to read; the
  // checks below reject one that now describes other memory.
  if (!slabs_.Lookup(a, &reg)) return nullptr;
  Slab* s = reinterpret_cast<Slab*>(reg.id);
  if (s == nullptr || s->state != kSlabActive || a < s->base) return nullptr;
  const uint64_t span = s->bytes == 0 ? 1 : s->bytes;
  if (a - s->base >= span) return nullptr;
  uint64_t idx = (s->dedicated || s->block_bytes == 0) ? 0 : (a - s->base) / s->block_bytes;
  if (idx >= s->nblocks) return nullptr;
  *slab = s;
  return &s->blocks[idx];
}

void PinnedPool::ReleaseSlabMemory(Slab* s, OwnPinReason why) {
  slabs_.Remove(s->base, nullptr);
  CUresult r;
  {
    ScopedContext scope(ops_, s->ctx);
    RelaxedCaptureMode relaxed(ops_);
    r = ops_->mem_free_host(reinterpret_cast<void*>(s->base));
  }
  account_->Release(s->use, s->charged);
  ReportSlab(OwnPinAction::kUnpinned, s, why, r);
  slab_bytes_.fetch_sub(s->bytes, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  s->state = kSlabSpare;
  s->next = spare_slabs_;
  spare_slabs_ = s;
}

bool PinnedPool::Free(void* p, CUresult* result, PoolBlockInfo* freed) {
  if (!active() || slabs_.size() == 0) return false;
  Region reg;
  if (!slabs_.Lookup(reinterpret_cast<uintptr_t>(p), &reg)) return false;
  CUcontext cur = nullptr;
  CUresult cr = ops_->ctx_get_current(&cur);
  if (cr != CUDA_SUCCESS || cur == nullptr) {
    // What the driver answers a free without a current context.
    *result = cr != CUDA_SUCCESS ? cr : CUDA_ERROR_INVALID_CONTEXT;
    return true;
  }
  Slab* s = nullptr;
  Block* b;
  bool give_back;
  uint64_t requested, bytes, base;
  Fence dropped[FenceSet::kSlots];
  int ndropped = 0;
  {
    MutexLock lock(&mu_);
    b = BlockAtLocked(p, &s);
    if (b == nullptr || b->state != kBlockLive || b->base != reinterpret_cast<uintptr_t>(p)) {
      invalid_frees_.fetch_add(1, std::memory_order_relaxed);
      *result = CUDA_ERROR_INVALID_VALUE;
      return true;
    }
    requested = b->requested;
    bytes = b->bytes;
    base = b->base;
    if (freed != nullptr) {
      memset(freed, 0, sizeof(*freed));
      freed->base = base;
      freed->requested = requested;
      freed->block_bytes = bytes;
      freed->flags = b->flags;
      freed->alloc_id = b->alloc_id;
    }
    give_back = s->dedicated && !s->keep_on_free;
    if (give_back) {
      b->state = kBlockGone;
      s->nlive = 0;
      s->state = kSlabReleasing;
      if (s->sub != nullptr) {
        if (s->prev != nullptr)
          s->prev->next = s->next;
        else
          s->sub->slabs = s->next;
        if (s->next != nullptr) s->next->prev = s->prev;
      }
      ndropped = b->fences.TakeAll(dropped);
    } else {
      b->state = kBlockFreeing;
    }
  }
  live_blocks_.fetch_sub(1, std::memory_order_relaxed);
  live_requested_.fetch_sub(requested, std::memory_order_relaxed);
  live_block_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  if (give_back) {
    // The driver's own free waits for the device, as it would have.
    slabs_.Remove(s->base, nullptr);
    CUresult r;
    {
      ScopedContext scope(ops_, s->ctx);
      r = ops_->mem_free_host(reinterpret_cast<void*>(s->base));
    }
    account_->Release(s->use, s->charged);
    ReportSlab(OwnPinAction::kUnpinned, s, OwnPinReason::kProgramReleased, r);
    slab_bytes_.fetch_sub(s->bytes, std::memory_order_relaxed);
    for (int i = 0; i < ndropped; ++i) fences_->Recycle(dropped[i]);
    {
      MutexLock lock(&mu_);
      s->state = kSlabSpare;
      s->next = spare_slabs_;
      spare_slabs_ = s;
    }
    *result = r;
    return true;
  }
  if (options_.fence_on_free) {
    // Into the open batch; its shared fence is recorded once it is full.
    bool seal;
    {
      MutexLock lock(&mu_);
      b->state = kBlockBatched;
      s->nbatched++;
      ListPush(&open_.blocks, b);
      open_.bytes += b->bytes;
      ++open_count_;
      batched_bytes_ += b->bytes;
      seal = open_count_ >= options_.free_batch_blocks || open_.bytes >= options_.free_batch_bytes;
    }
    batched_blocks_.fetch_add(1, std::memory_order_relaxed);
    if (seal) SealBatch(false);
  } else {
    MutexLock lock(&mu_);
    BlockList one = {b, b};
    b->prev = b->next = nullptr;
    ReleaseBatchBlocksLocked(&one, Now());
  }
  *result = CUDA_SUCCESS;
  MaybeTrimIdle();
  return true;
}

int PinnedPool::ReleaseBatchBlocksLocked(BlockList* blocks, uint64_t freed_ns) {
  int n = 0;
  Block* next;
  for (Block* b = blocks->head; b != nullptr; b = next) {
    next = b->next;
    Slab* s = b->slab;
    if (b->state == kBlockBatched) s->nbatched--;
    if (s->retired) {
      b->state = kBlockRetired;
      b->prev = b->next = nullptr;
      if (--s->nlive == 0) s->idle_since_ns = freed_ns;
      ++n;
      continue;
    }
    b->state = kBlockFree;
    if (!b->fences.empty()) fenced_bytes_ += b->bytes;
    // Last freed, first reused: the memory most likely still in cache, and
    // the least used slabs left idle for the trim.
    if (s->sub != nullptr) {
      ListPushFront(s->dedicated ? &s->sub->large : &s->sub->free[s->cls], b);
    } else {
      b->prev = b->next = nullptr;
    }
    if (--s->nlive == 0) s->idle_since_ns = freed_ns;
    ++n;
  }
  blocks->head = blocks->tail = nullptr;
  return n;
}

void PinnedPool::SealBatch(bool wait) {
  // At most kMaxBatches fences are outstanding: make room first.
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (open_.blocks.head == nullptr) return;
      if (nbatches_ < kMaxBatches) break;
    }
    if (ReapBatches(wait) == 0 && !wait) return;
  }
  // The blocks are taken before the fence is recorded, so every one of
  // them was freed before the work the fence covers was queued.
  Batch taken;
  {
    MutexLock lock(&mu_);
    taken = open_;
    open_ = Batch{};
    open_count_ = 0;
  }
  if (taken.blocks.head == nullptr) return;
  taken.sealed_ns = Now();
  Fence f;
  const bool recorded = fences_->Record(nullptr, &f);
  free_batches_.fetch_add(1, std::memory_order_relaxed);
  bool stored = false;
  if (recorded) {
    MutexLock lock(&mu_);
    for (int i = 0; i < kMaxBatches; ++i) {
      if (batches_[i].fence.id != 0) continue;
      batches_[i] = taken;
      batches_[i].fence = f;
      ++nbatches_;
      stored = true;
      break;
    }
  }
  if (!stored) {
    // Not recorded: Record waited for the device instead. No room (another
    // thread filled it meanwhile): wait here.
    if (recorded) {
      fences_->Wait(f);
      fences_->Recycle(f);
    }
    int n;
    {
      MutexLock lock(&mu_);
      batched_bytes_ -= taken.bytes;
      n = ReleaseBatchBlocksLocked(&taken.blocks, taken.sealed_ns);
    }
    batched_blocks_.fetch_sub(static_cast<uint64_t>(n), std::memory_order_relaxed);
  }
}

int PinnedPool::ReapBatches(bool wait) {
  Fence fs[kMaxBatches];
  int n = 0;
  {
    MutexLock lock(&mu_);
    if (nbatches_ == 0) return 0;
    for (int i = 0; i < kMaxBatches; ++i) {
      if (batches_[i].fence.id != 0) fs[n++] = batches_[i].fence;
    }
  }
  // Oldest first (ids grow with time); fences on one stream complete in
  // order, so the first one still pending ends the queries.
  for (int i = 1; i < n; ++i) {
    Fence f = fs[i];
    int j = i;
    for (; j > 0 && fs[j - 1].id > f.id; --j) fs[j] = fs[j - 1];
    fs[j] = f;
  }
  int done = 0;
  if (wait && n > 0) {
    fences_->Wait(fs[0]);
    done = 1;
  }
  while (done < n && fences_->IsDone(fs[done])) ++done;
  int released = 0;
  int recycled = 0;
  Fence to_recycle[kMaxBatches];
  {
    MutexLock lock(&mu_);
    for (int k = 0; k < done; ++k) {
      for (int i = 0; i < kMaxBatches; ++i) {
        Batch& bt = batches_[i];
        if (bt.fence.id != fs[k].id) continue;
        batched_bytes_ -= bt.bytes;
        released += ReleaseBatchBlocksLocked(&bt.blocks, bt.sealed_ns);
        to_recycle[recycled++] = bt.fence;
        bt = Batch{};
        --nbatches_;
        break;
      }
    }
  }
  batched_blocks_.fetch_sub(static_cast<uint64_t>(released), std::memory_order_relaxed);
  for (int i = 0; i < recycled; ++i) fences_->Recycle(to_recycle[i]);
  return released;
}

void PinnedPool::NoteAsyncUse(const void* p, CUstream stream) {
  if (!active() || slabs_.size() == 0 || !slabs_.Lookup(reinterpret_cast<uintptr_t>(p), nullptr)) {
    return;
  }
  FenceAttachment attach(fences_, stream);
  if (!attach.recorded()) return;
  {
    MutexLock lock(&mu_);
    Slab* s;
    Block* b = BlockAtLocked(p, &s);
    if (b != nullptr && b->state != kBlockGone) {
      if (b->state == kBlockFree && b->fences.empty()) fenced_bytes_ += b->bytes;
      attach.AddTo(&b->fences);
    }
  }
  attach.Finish();
}

bool PinnedPool::Owns(const void* p) const {
  return active() && slabs_.size() != 0 && slabs_.Lookup(reinterpret_cast<uintptr_t>(p), nullptr);
}

bool PinnedPool::Lookup(const void* p, PoolBlockInfo* info) const {
  if (!active() || slabs_.size() == 0) return false;
  MutexLock lock(&mu_);
  Slab* s;
  Block* b = BlockAtLocked(p, &s);
  if (b == nullptr || b->state != kBlockLive) return false;
  const uint64_t span = b->requested == 0 ? 1 : b->requested;
  if (reinterpret_cast<uintptr_t>(p) - b->base >= span) return false;
  if (info != nullptr) {
    info->base = b->base;
    info->requested = b->requested;
    info->block_bytes = b->bytes;
    info->flags = b->flags;
    info->ctx = s->ctx;
    info->alloc_id = b->alloc_id;
    info->dedicated = s->dedicated;
  }
  return true;
}

CUresult PinnedPool::GetFlags(unsigned int* flags, void* p) const {
  PoolBlockInfo info;
  if (!Lookup(p, &info)) return CUDA_ERROR_INVALID_VALUE;
  // The slab was allocated with exactly these flags: its answer (flags the
  // driver adds included) is the dedicated allocation's answer.
  Region reg;
  if (!slabs_.Lookup(info.base, &reg)) return CUDA_ERROR_INVALID_VALUE;
  return ops_->mem_host_get_flags(flags, reinterpret_cast<void*>(reg.start));
}

CUresult PinnedPool::GetDevicePointer(CUdeviceptr* dptr, void* p, unsigned int flags) const {
  PoolBlockInfo info;
  if (!Lookup(p, &info)) return CUDA_ERROR_INVALID_VALUE;
  Region reg;
  if (!slabs_.Lookup(info.base, &reg)) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr d = 0;
  CUresult r = ops_->mem_host_get_device_pointer(dptr != nullptr ? &d : nullptr,
                                                 reinterpret_cast<void*>(reg.start), flags);
  if (r == CUDA_SUCCESS) *dptr = d + (reinterpret_cast<uintptr_t>(p) - reg.start);
  return r;
}

uint64_t PinnedPool::TrimImpl(uint64_t bytes_wanted, bool idle_only, OwnPinReason why) {
  if (!active()) return 0;
  // Freed blocks waiting in batches keep their slabs busy: settle them
  // (an eviction waits for their fences; the idle trim only asks).
  SealBatch(!idle_only);
  if (idle_only) {
    ReapBatches(false);
  } else {
    for (;;) {
      {
        MutexLock lock(&mu_);
        if (nbatches_ == 0) break;
      }
      ReapBatches(true);
    }
  }
  uint64_t freed = 0;
  const uint64_t now = Now();
  // Each round gives back the clean slabs and asks the driver about the
  // fences that kept others back; it stops when a round learns nothing new
  // (every round removes a fence or a slab, so it ends).
  while (freed < bytes_wanted) {
    Slab* victims = nullptr;
    Candidate cands[kMaxCandidates];
    int ncands = 0;
    uint64_t planned = freed;
    {
      MutexLock lock(&mu_);
      for (int i = 0; i < kMaxSubPools && planned < bytes_wanted; ++i) {
        SubPool& sub = subs_[i];
        if (!sub.used) continue;
        Slab* next;
        for (Slab* s = sub.slabs; s != nullptr && planned < bytes_wanted; s = next) {
          next = s->next;
          if (s->nlive != 0 || s->state != kSlabActive) continue;
          // A retired slab goes as soon as it is free.
          if (idle_only && !s->retired &&
              (options_.idle_trim_ns == 0 || now - s->idle_since_ns < options_.idle_trim_ns)) {
            continue;
          }
          bool clean = true;
          for (uint32_t j = 0; j < s->nblocks; ++j) {
            Block& b = s->blocks[j];
            if (b.fences.empty()) continue;
            clean = false;
            Fence fs[FenceSet::kSlots];
            int k = b.fences.Copy(fs);
            for (int m = 0; m < k && ncands < kMaxCandidates; ++m) cands[ncands++] = {&b, fs[m]};
          }
          if (!clean) continue;
          for (uint32_t j = 0; j < s->nblocks; ++j) {
            Block& b = s->blocks[j];
            if (b.state != kBlockRetired)
              ListRemove(s->dedicated ? &sub.large : &sub.free[s->cls], &b);
            b.state = kBlockGone;
          }
          if (s->prev != nullptr)
            s->prev->next = s->next;
          else
            sub.slabs = s->next;
          if (s->next != nullptr) s->next->prev = s->prev;
          s->state = kSlabReleasing;
          s->next = victims;
          victims = s;
          planned += s->bytes;
        }
      }
    }
    Slab* next;
    for (Slab* s = victims; s != nullptr; s = next) {
      next = s->next;
      const uint64_t bytes = s->bytes;
      ReleaseSlabMemory(s, why);
      freed += bytes;
      slabs_trimmed_.fetch_add(1, std::memory_order_relaxed);
      bytes_trimmed_.fetch_add(bytes, std::memory_order_relaxed);
    }
    if (ncands == 0 || freed >= bytes_wanted) break;
    if (ApplyCompletions(cands, ncands) == 0 && victims == nullptr) break;
  }
  return freed;
}

uint64_t PinnedPool::Trim(uint64_t bytes_wanted, OwnPinReason why) {
  return TrimImpl(bytes_wanted, false, why);
}

uint64_t PinnedPool::TrimIdle() { return TrimImpl(UINT64_MAX, true, OwnPinReason::kIdleTrim); }

void PinnedPool::MaybeTrimIdle() {
  if (!options_.trim_on_free || options_.idle_trim_ns == 0) return;
  const uint64_t now = Now();
  uint64_t last = last_trim_ns_.load(std::memory_order_relaxed);
  if (now - last < options_.idle_trim_ns / 2) return;
  if (!last_trim_ns_.compare_exchange_strong(last, now)) return;  // another thread does it
  TrimImpl(UINT64_MAX, true, OwnPinReason::kIdleTrim);
}

uint64_t PinnedPool::IdleBytes() const {
  if (!active()) return 0;
  uint64_t idle = 0;
  MutexLock lock(&mu_);
  for (int i = 0; i < kMaxSubPools; ++i) {
    if (!subs_[i].used) continue;
    for (const Slab* s = subs_[i].slabs; s != nullptr; s = s->next) {
      // Blocks waiting only for a batch's fence are free once Trim settled it.
      if (s->nlive == s->nbatched && s->state == kSlabActive) idle += s->bytes;
    }
  }
  return idle;
}

void PinnedPool::OnContextDestroyed(CUcontext ctx) {
  if (!active()) return;
  Slab* victims = nullptr;
  {
    MutexLock lock(&mu_);
    // Blocks of the context's slabs leave the batches with their slabs.
    auto drop_from = [&](Batch* bt, uint32_t* count) REQUIRES(mu_) {
      Block* nb;
      for (Block* b = bt->blocks.head; b != nullptr; b = nb) {
        nb = b->next;
        if (b->slab->sub == nullptr || b->slab->sub->ctx != ctx) continue;
        b->slab->nbatched--;
        ListRemove(&bt->blocks, b);
        bt->bytes -= b->bytes;
        batched_bytes_ -= b->bytes;
        if (count != nullptr) --*count;
        batched_blocks_.fetch_sub(1, std::memory_order_relaxed);
      }
    };
    drop_from(&open_, &open_count_);
    for (int i = 0; i < kMaxBatches; ++i) {
      if (batches_[i].fence.id != 0) drop_from(&batches_[i], nullptr);
    }
    for (int i = 0; i < kMaxSubPools; ++i) {
      SubPool& sub = subs_[i];
      if (!sub.used || sub.ctx != ctx) continue;
      Slab* next;
      for (Slab* s = sub.slabs; s != nullptr; s = next) {
        next = s->next;
        for (uint32_t j = 0; j < s->nblocks; ++j) {
          Block& b = s->blocks[j];
          if (b.state == kBlockFree && !b.fences.empty()) fenced_bytes_ -= b.bytes;
        }
        s->state = kSlabReleasing;
        s->next = victims;
        victims = s;
      }
      sub.used = false;
    }
  }
  Slab* next;
  for (Slab* s = victims; s != nullptr; s = next) {
    next = s->next;
    slabs_.Remove(s->base, nullptr);
    for (uint32_t j = 0; j < s->nblocks; ++j) {
      Block& b = s->blocks[j];
      if (b.state == kBlockLive || b.state == kBlockFreeing) {
        live_blocks_.fetch_sub(1, std::memory_order_relaxed);
        live_requested_.fetch_sub(b.requested, std::memory_order_relaxed);
        live_block_bytes_.fetch_sub(b.bytes, std::memory_order_relaxed);
      }
    }
    // The driver already freed the memory with its context.
    account_->Release(s->use, s->charged);
    ReportSlab(OwnPinAction::kUnpinned, s, OwnPinReason::kContextDestroyed, CUDA_SUCCESS);
    slab_bytes_.fetch_sub(s->bytes, std::memory_order_relaxed);
    MutexLock lock(&mu_);
    s->state = kSlabSpare;
    s->next = spare_slabs_;
    spare_slabs_ = s;
  }
}

void PinnedPool::Retire(uintptr_t start, uint64_t bytes, OwnPinReason why, uint32_t detail) {
  if (!active() || bytes == 0 || !MayOverlap(start, bytes)) return;
  const uintptr_t end = bytes > UINTPTR_MAX - start ? UINTPTR_MAX : start + bytes;
  struct Retired {
    uintptr_t base;
    uint64_t bytes;
    PinUse use;
  } retired[16];
  int nretired = 0;
  {
    MutexLock lock(&mu_);
    for (int i = 0; i < kMaxSubPools; ++i) {
      SubPool& sub = subs_[i];
      if (!sub.used) continue;
      for (Slab* s = sub.slabs; s != nullptr; s = s->next) {
        const uint64_t span = s->bytes == 0 ? 1 : s->bytes;
        if (s->retired || s->state != kSlabActive || !(s->base < end && start < s->base + span)) {
          continue;
        }
        s->retired = true;
        for (uint32_t j = 0; j < s->nblocks; ++j) {
          Block& b = s->blocks[j];
          if (b.state != kBlockFree) continue;
          if (!b.fences.empty()) fenced_bytes_ -= b.bytes;
          ListRemove(s->dedicated ? &sub.large : &sub.free[s->cls], &b);
          b.state = kBlockRetired;
        }
        if (nretired < 16) retired[nretired++] = {s->base, s->bytes, s->use};
        retired_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  for (int i = 0; i < nretired; ++i) {
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kRetired, PartOf(retired[i].use), why,
                 retired[i].base, retired[i].bytes, 0, CUDA_SUCCESS, detail);
  }
  // An idle retired slab goes at the next trim (the sampler's, or a free's).
}

void PinnedPool::PrepareFork() {
  mu_.PrepareFork();
  slabs_.LockForFork();
}

void PinnedPool::AfterForkParent() {
  slabs_.UnlockAfterFork();
  mu_.AfterFork();
}

void PinnedPool::AfterForkChild() {
  slabs_.UnlockAfterFork();
  mu_.AfterFork();
  active_.store(false, std::memory_order_release);
}

PoolStats PinnedPool::Stats() const {
  PoolStats s;
  s.retired_slabs = retired_.load();
  s.hits = hits_.load();
  s.misses = misses_.load();
  s.dedicated = dedicated_.load();
  s.deferred_reuse = deferred_.load();
  s.slabs_created = slabs_created_.load();
  s.slabs_trimmed = slabs_trimmed_.load();
  s.bytes_trimmed = bytes_trimmed_.load();
  s.slab_bytes = slab_bytes_.load();
  s.live_blocks = live_blocks_.load();
  s.live_requested_bytes = live_requested_.load();
  s.live_block_bytes = live_block_bytes_.load();
  s.invalid_frees = invalid_frees_.load();
  s.saved_ns = saved_ns_.load();
  s.fence_waits = fence_waits_.load();
  s.fence_queries = fence_queries_.load();
  s.free_batches = free_batches_.load();
  s.batched_blocks = batched_blocks_.load();
  s.batch_growths = batch_growths_.load();
  return s;
}

void PinnedPool::ReleaseAllForTesting() {
  TrimImpl(UINT64_MAX, false, OwnPinReason::kEvictedForCap);
}

#ifdef PINSHIM_DEBUG_INVARIANTS

namespace {
// Walks longer than these mean a list runs in a circle.
constexpr uint64_t kMaxListWalk = uint64_t{1} << 24;
}  // namespace

PINSHIM_INVARIANT_WALKER InvariantReport PinnedPool::CheckInvariants() const {
  InvariantReport r;
  if (!active()) return r;  // off (not started, or a fork child): nothing is pooled
  MutexLock lock(&mu_);
  const uintptr_t lo = bounds_->lo.load(std::memory_order_relaxed);
  const uintptr_t hi = bounds_->hi.load(std::memory_order_relaxed);
  uint64_t live = 0, live_requested = 0, live_bytes = 0, slab_bytes = 0, fenced = 0;
  uint64_t batched = 0;
  uint64_t charged[kPinUseCount] = {};
  // With every sub-pool slot taken, a slab may serve its one block on no
  // list (NewSlab): the totals then only bound what the lists show.
  bool all_used = true;
  for (int i = 0; i < kMaxSubPools; ++i) {
    const SubPool& sub = subs_[i];
    if (!sub.used) {
      all_used = false;
      continue;
    }
    r.Expect((sub.flags & ~kKnownFlags) == 0 && sub.ctx != nullptr,
             "P1 a used sub-pool has known flags and a context", sub.flags);
    for (int j = i + 1; j < kMaxSubPools; ++j) {
      r.Expect(!(subs_[j].used && subs_[j].flags == sub.flags && subs_[j].ctx == sub.ctx),
               "P1 no two sub-pools share flags and context", i, j);
    }
    uint64_t free_blocks = 0;
    uint64_t walked = 0;
    const Slab* prev = nullptr;
    for (const Slab* s = sub.slabs; s != nullptr; prev = s, s = s->next) {
      if (++walked > kMaxListWalk) {
        r.Fail("P2 a slab list runs in a circle");
        break;
      }
      r.Expect(s->prev == prev, "P2 a slab list is doubly linked");
      r.Expect(s->state == kSlabActive && s->sub == &sub,
               "P2 a slab on a sub-pool's list is active and names it", s->state);
      r.Expect(s->nblocks >= 1 && s->nblocks <= options_.max_blocks_per_slab,
               "P3 1 <= nblocks <= max_blocks_per_slab", s->nblocks);
      r.Expect(s->bytes == s->block_bytes * s->nblocks, "P3 a slab's blocks tile it", s->bytes,
               s->block_bytes * s->nblocks);
      r.Expect(s->base % page_ == 0, "P3 a slab is page-aligned", s->base);
      if (s->dedicated) {
        r.Expect(s->cls == kDedicatedClass && s->nblocks == 1 && s->use == PinUse::kPoolDedicated,
                 "P4 a dedicated slab is one block of its own", s->nblocks);
        r.Expect(s->keep_on_free == (s->bytes > options_.max_pooled_bytes),
                 "P4 a dedicated slab is kept for reuse only above max_pooled_bytes", s->bytes);
      } else {
        r.Expect(s->cls < num_classes_ && s->block_bytes == PoolClassPages(s->cls) * page_ &&
                     s->use == PinUse::kPoolSlab && !s->keep_on_free,
                 "P4 a pooled slab's block size is its class's", s->block_bytes, s->cls);
      }
      const uint64_t span = s->bytes == 0 ? 1 : s->bytes;
      Region first, last;
      const bool found = slabs_.Lookup(s->base, &first) && slabs_.Lookup(s->base + span - 1, &last);
      r.Expect(found && first.id == reinterpret_cast<uint64_t>(s) && first.start == s->base &&
                   first.bytes == span && last.id == first.id,
               "P5 an active slab is in the slab registry under its own id and range", s->base);
      r.Expect(s->base >= lo && s->base + span <= hi, "P6 every slab lies inside the bounds",
               s->base, lo);
      uint32_t nlive = 0, nbatched = 0;
      for (uint32_t j = 0; j < s->nblocks && j < kMaxBlocksPerSlab; ++j) {
        const Block& b = s->blocks[j];
        r.Expect(b.base == s->base + j * s->block_bytes && b.bytes == s->block_bytes && b.slab == s,
                 "P3 block i of a slab starts at base + i * block_bytes and names it", j);
        r.Expect(b.state <= kBlockRetired && b.state != kBlockGone && b.state != kBlockFreeing,
                 "P7 no block of an active slab is gone or being freed", b.state);
        r.Expect(s->retired ? b.state != kBlockFree : b.state != kBlockRetired,
                 "P9 a retired slab has no free block, one not retired no retired block", b.state,
                 s->retired);
        r.Expect(b.fences.WellFormed(), "P14 a block's fence set is well formed", j);
        if (b.state == kBlockLive || b.state == kBlockFreeing || b.state == kBlockBatched) ++nlive;
        if (b.state == kBlockBatched) ++nbatched;
        if (b.state == kBlockFree) {
          ++free_blocks;
          if (!b.fences.empty()) fenced += b.bytes;
        }
        if (b.state == kBlockLive) {
          ++live;
          live_requested += b.requested;
          live_bytes += b.bytes;
          const bool fits = !s->dedicated ? b.requested <= b.bytes
                            : s->keep_on_free
                                ? b.requested <= b.bytes && b.bytes - b.requested <= b.bytes / 8
                                : b.requested == b.bytes;
          r.Expect(fits && b.alloc_id != 0,
                   "P15 a live block holds what was asked and has an allocation id", b.requested,
                   b.bytes);
        }
      }
      r.Expect(s->nlive == nlive, "P8 nlive counts a slab's live, freeing and batched blocks",
               s->nlive, nlive);
      r.Expect(s->nbatched == nbatched, "P8 nbatched counts a slab's batched blocks", s->nbatched,
               nbatched);
      batched += nbatched;
      slab_bytes += s->bytes;
      charged[static_cast<int>(s->use)] += s->charged;
    }
    uint64_t listed = 0;
    auto walk_free_list = [&](const BlockList& l, bool large, uint32_t cls) {
      const Block* before = nullptr;
      uint64_t n = 0;
      for (const Block* b = l.head; b != nullptr; before = b, b = b->next) {
        if (++n > kMaxListWalk) {
          r.Fail("P10 a free list runs in a circle");
          break;
        }
        r.Expect(b->prev == before, "P10 a free list is doubly linked");
        r.Expect(b->state == kBlockFree, "P10 a block on a free list is free", b->state);
        const Slab* s = b->slab;
        r.Expect(s->sub == &sub && s->state == kSlabActive &&
                     (large ? s->dedicated && s->keep_on_free : !s->dedicated && s->cls == cls),
                 "P10 a free block is on the list of its sub-pool and class", cls);
      }
      r.Expect(l.tail == before, "P10 a free list's tail is its last block");
      listed += n;
    };
    for (uint32_t c = 0; c < num_classes_; ++c) walk_free_list(sub.free[c], false, c);
    walk_free_list(sub.large, true, 0);
    r.Expect(listed == free_blocks, "P10 the free lists hold exactly the free blocks", listed,
             free_blocks);
  }
  // Batches.
  uint64_t in_batches = 0, batch_bytes = 0;
  auto walk_batch = [&](const Batch& bt) {
    uint64_t n = 0, bytes = 0;
    const Block* before = nullptr;
    for (const Block* b = bt.blocks.head; b != nullptr; before = b, b = b->next) {
      if (++n > kMaxListWalk) {
        r.Fail("P11 a batch list runs in a circle");
        break;
      }
      r.Expect(b->prev == before, "P11 a batch list is doubly linked");
      r.Expect(b->state == kBlockBatched && b->slab->state == kSlabActive,
               "P11 a block on a batch list is batched, of an active slab", b->state);
      bytes += b->bytes;
    }
    r.Expect(bt.blocks.tail == before, "P11 a batch list's tail is its last block");
    r.Expect(bt.bytes == bytes, "P11 a batch's bytes are its blocks'", bt.bytes, bytes);
    in_batches += n;
    batch_bytes += bt.bytes;
    return n;
  };
  r.Expect(open_.fence.id == 0, "P12 the open batch carries no fence", open_.fence.id);
  const uint64_t open_blocks = walk_batch(open_);
  r.Expect(open_count_ == open_blocks, "P11 open_count_ counts the open batch's blocks",
           open_count_, open_blocks);
  int sealed = 0;
  for (int i = 0; i < kMaxBatches; ++i) {
    const Batch& bt = batches_[i];
    if (bt.fence.id == 0) {
      r.Expect(bt.blocks.head == nullptr && bt.blocks.tail == nullptr && bt.bytes == 0,
               "P11 an unused batch slot is empty", i);
      continue;
    }
    ++sealed;
    r.Expect(bt.fence.event != nullptr, "P12 a sealed batch holds a recorded fence", i);
    walk_batch(bt);
  }
  r.Expect(sealed == nbatches_, "P11 nbatches_ counts the sealed batches", sealed, nbatches_);
  r.Expect(in_batches == batched, "P11 every batched block is on exactly one batch list",
           in_batches, batched);
  r.Expect(batched_bytes_ == batch_bytes, "P11 batched_bytes_ is the batches' bytes",
           batched_bytes_, batch_bytes);
  r.Expect(batched_blocks_.load(std::memory_order_relaxed) == batched,
           "P11 batched_blocks_ counts the batched blocks",
           batched_blocks_.load(std::memory_order_relaxed), batched);
  r.Expect(fenced_bytes_ == fenced, "P13 fenced_bytes_ is the free blocks' fenced bytes",
           fenced_bytes_, fenced);
  auto same = [all_used](uint64_t counter, uint64_t walked_total) {
    return all_used ? counter >= walked_total : counter == walked_total;
  };
  r.Expect(same(live_blocks_.load(std::memory_order_relaxed), live),
           "P16 live_blocks_ counts the live blocks", live_blocks_.load(), live);
  r.Expect(same(live_requested_.load(std::memory_order_relaxed), live_requested),
           "P16 live_requested_ is the live blocks' requested bytes", live_requested_.load(),
           live_requested);
  r.Expect(same(live_block_bytes_.load(std::memory_order_relaxed), live_bytes),
           "P16 live_block_bytes_ is the live blocks' bytes", live_block_bytes_.load(), live_bytes);
  r.Expect(same(slab_bytes_.load(std::memory_order_relaxed), slab_bytes),
           "P16 slab_bytes_ is the slabs' bytes", slab_bytes_.load(), slab_bytes);
  for (PinUse use : {PinUse::kPoolSlab, PinUse::kPoolDedicated}) {
    const uint64_t held = account_->pinned_for(use);
    r.Expect(same(held, charged[static_cast<int>(use)]),
             "P17 the account holds what the pool's slabs were charged", held,
             charged[static_cast<int>(use)]);
  }
  uint64_t spares = 0;
  for (const Slab* s = spare_slabs_; s != nullptr; s = s->next) {
    if (++spares > kMaxListWalk) {
      r.Fail("P18 the spare list runs in a circle");
      break;
    }
    r.Expect(s->state == kSlabSpare, "P18 a spare slab struct is marked spare", s->state);
  }
  return r;
}

bool PinnedPool::CorruptForTesting(Corruption what) {
  if (!active()) return false;
  MutexLock lock(&mu_);
  switch (what) {
    case Corruption::kBounds:
      // Above every user-space address: slabs fall below lo.
      bounds_->lo.fetch_xor(uintptr_t{1} << 47, std::memory_order_relaxed);
      return true;
    case Corruption::kLiveCounter:
      live_requested_.fetch_xor(1, std::memory_order_relaxed);
      return true;
    case Corruption::kSlabLiveCount:
    case Corruption::kFreeListState: break;
  }
  for (int i = 0; i < kMaxSubPools; ++i) {
    SubPool& sub = subs_[i];
    if (!sub.used) continue;
    if (what == Corruption::kSlabLiveCount && sub.slabs != nullptr) {
      sub.slabs->nlive ^= 1u << 30;
      return true;
    }
    if (what == Corruption::kFreeListState) {
      for (uint32_t c = 0; c < num_classes_; ++c) {
        if (sub.free[c].head != nullptr) {
          // Free <-> live: a block the lists would hand out again.
          sub.free[c].head->state ^= kBlockLive;
          return true;
        }
      }
    }
  }
  return false;
}

#endif  // PINSHIM_DEBUG_INVARIANTS

}  // namespace optimize
}  // namespace pinshim
