#include "shim/optimize/pinned_pool.h"

#include <unistd.h>

#include <cstring>
#include <initializer_list>

#include "shim/core/internal_alloc.h"
#include "shim/optimize/cost_model.h"
#include "shim/optimize/pinned_pool_parts.h"
#include "shim/optimize/size_classes.h"

namespace pinshim {
namespace optimize {
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
  // one stream, and a query per fence made the allocation that looked at them
  // wait tens of microseconds (bench/RESULTS.md, "2026-12-02, second part",
  // the pool's fence queries).
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

void PinnedPool::StampBlockLocked(Block* b, uint64_t bytes, unsigned int flags) {
  b->requested = bytes;
  b->flags = flags;
  b->alloc_id = options_.next_alloc_id != nullptr
                    ? options_.next_alloc_id()
                    : next_id_.fetch_add(1, std::memory_order_relaxed);
}

void PinnedPool::LookForFree(unsigned int flags, CUcontext ctx, bool large, uint32_t cls,
                             uint64_t bytes, FreeLook* look) {
  look->block = nullptr;
  look->ncands = 0;
  MutexLock lock(&mu_);
  look->sub = FindSubPoolLocked(flags, ctx, true);
  if (look->sub != nullptr) {
    look->block = TakeFreeLocked(look->sub, large, cls, bytes, look->cands, &look->ncands);
  }
  if (look->block != nullptr) StampBlockLocked(look->block, bytes, flags);
  look->batched = HasBatchesLocked();
  look->sealed = nbatches_ != 0;
  look->over = fenced_bytes_ + batched_bytes_ >= options_.max_fenced_bytes;
}

bool PinnedPool::GrowInsteadOfWaiting(uint64_t slab_ns, uint32_t cls, uint32_t* grow_blocks) {
  if (poll_waits_.load(std::memory_order_relaxed) < kWaitsBeforeGrowth ||
      poll_debt_ns_.load(std::memory_order_relaxed) < slab_ns / 16) {
    return false;
  }
  poll_debt_ns_.store(0, std::memory_order_relaxed);
  poll_waits_.store(0, std::memory_order_relaxed);
  batch_growths_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t block_bytes = PoolClassPages(cls) * page_;
  uint64_t per_batch = options_.free_batch_bytes / block_bytes;
  if (per_batch > options_.free_batch_blocks) per_batch = options_.free_batch_blocks;
  *grow_blocks = static_cast<uint32_t>(per_batch);
  return true;
}

bool PinnedPool::WaitStep(int round, FreeLook* look, uint64_t poll_until) {
  // Fences usually complete within microseconds: poll a little before
  // paying for a new slab, and past max_fenced_bytes wait rather than grow
  // without bound.
  const bool polling = round < 3 || (look->batched && MonotonicNs() < poll_until);
  if (!polling) {
    if (!look->over) return false;
    fence_waits_.fetch_add(1, std::memory_order_relaxed);
    if (look->batched) {
      SealBatch(true);
      ReapBatches(true);
    } else {
      fences_->Wait(look->cands[0].fence);
    }
  } else if (round >= 1) {
    Backoff();
  }
  if (look->batched) {
    // The open batch gets its fence now unless sealed ones are still out
    // (those come back first; a fence per allocation would cost more).
    if (round == 0 && !look->sealed) SealBatch(false);
    ReapBatches(false);
  }
  ApplyCompletions(look->cands, look->ncands);
  return true;
}

// Waiting for batched frees to come back is worth up to an eighth of what a
// new slab costs the driver; a fence on an idle device completes within
// microseconds. But waits that keep coming mean the pool is too small for
// its batches to complete before their blocks are wanted: once at least
// kWaitsBeforeGrowth allocations waited and the time spent waiting adds up
// to a sixteenth of a slab's cost (rent or buy), the pool grows instead, by
// a slab that holds a whole batch. A program that allocates a handful of
// times never gets there.
PinnedPool::Block* PinnedPool::TakeOrWait(unsigned int flags, CUcontext ctx, bool large,
                                          uint32_t cls, uint64_t bytes, SubPool** sub,
                                          uint32_t* grow_blocks) {
  uint64_t poll_until = 0;
  uint64_t poll_start = 0;
  Block* b = nullptr;
  for (int round = 0;; ++round) {
    FreeLook look;
    LookForFree(flags, ctx, large, cls, bytes, &look);
    *sub = look.sub;
    b = look.block;
    // Done: a block, or none free even behind a fence.
    if (b != nullptr || (look.ncands == 0 && !look.batched)) break;
    if (round == 0 && look.batched) {
      const uint64_t slab_ns = static_cast<uint64_t>(CostModel::HostAllocNs(bytes));
      if (!look.over && !large && GrowInsteadOfWaiting(slab_ns, cls, grow_blocks)) break;
      poll_start = MonotonicNs();
      poll_until = poll_start + slab_ns / 8;
    }
    if (!WaitStep(round, &look, poll_until)) break;
  }
  if (poll_start != 0) {
    poll_debt_ns_.fetch_add(MonotonicNs() - poll_start, std::memory_order_relaxed);
    poll_waits_.fetch_add(1, std::memory_order_relaxed);
  }
  return b;
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
  SubPool* sub = nullptr;
  uint32_t grow_blocks = 0;
  Block* b = TakeOrWait(flags, ctx, large, cls, bytes, &sub, &grow_blocks);
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
    StampBlockLocked(b, bytes, flags);
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

bool PinnedPool::TakeBackLocked(Block* b, Slab* s, PoolBlockInfo* freed, Fence* dropped,
                                int* ndropped) {
  if (freed != nullptr) {
    memset(freed, 0, sizeof(*freed));
    freed->base = b->base;
    freed->requested = b->requested;
    freed->block_bytes = b->bytes;
    freed->flags = b->flags;
    freed->alloc_id = b->alloc_id;
  }
  if (!s->dedicated || s->keep_on_free) {
    b->state = kBlockFreeing;
    return false;
  }
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
  *ndropped = b->fences.TakeAll(dropped);
  return true;
}

CUresult PinnedPool::GiveBackDedicated(Slab* s, const Fence* dropped, int ndropped) {
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
  MutexLock lock(&mu_);
  s->state = kSlabSpare;
  s->next = spare_slabs_;
  spare_slabs_ = s;
  return r;
}

void PinnedPool::ListFreedBlock(Block* b, Slab* s) {
  if (!options_.fence_on_free) {
    MutexLock lock(&mu_);
    BlockList one = {b, b};
    b->prev = b->next = nullptr;
    ReleaseBatchBlocksLocked(&one, Now());
    return;
  }
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
  uint64_t requested, bytes;
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
    give_back = TakeBackLocked(b, s, freed, dropped, &ndropped);
  }
  live_blocks_.fetch_sub(1, std::memory_order_relaxed);
  live_requested_.fetch_sub(requested, std::memory_order_relaxed);
  live_block_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  if (give_back) {
    *result = GiveBackDedicated(s, dropped, ndropped);
    return true;
  }
  ListFreedBlock(b, s);
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

void PinnedPool::SettleBatches(bool wait) {
  // Freed blocks waiting in batches keep their slabs busy: settle them
  // (an eviction waits for their fences; the idle trim only asks).
  SealBatch(wait);
  if (!wait) {
    ReapBatches(false);
    return;
  }
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (nbatches_ == 0) break;
    }
    ReapBatches(true);
  }
}

bool PinnedPool::DetachIfCleanLocked(SubPool* sub, Slab* s, Candidate* cands, int* ncands) {
  bool clean = true;
  for (uint32_t j = 0; j < s->nblocks; ++j) {
    Block& b = s->blocks[j];
    if (b.fences.empty()) continue;
    clean = false;
    Fence fs[FenceSet::kSlots];
    int k = b.fences.Copy(fs);
    for (int m = 0; m < k && *ncands < kMaxCandidates; ++m) cands[(*ncands)++] = {&b, fs[m]};
  }
  if (!clean) return false;
  for (uint32_t j = 0; j < s->nblocks; ++j) {
    Block& b = s->blocks[j];
    if (b.state != kBlockRetired) ListRemove(s->dedicated ? &sub->large : &sub->free[s->cls], &b);
    b.state = kBlockGone;
  }
  if (s->prev != nullptr)
    s->prev->next = s->next;
  else
    sub->slabs = s->next;
  if (s->next != nullptr) s->next->prev = s->prev;
  s->state = kSlabReleasing;
  return true;
}

uint64_t PinnedPool::TrimImpl(uint64_t bytes_wanted, bool idle_only, OwnPinReason why) {
  if (!active()) return 0;
  SettleBatches(!idle_only);
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
          if (!DetachIfCleanLocked(&sub, s, cands, &ncands)) continue;
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

}  // namespace optimize
}  // namespace pinshim
