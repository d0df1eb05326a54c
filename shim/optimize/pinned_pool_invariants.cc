// PinnedPool's invariant walker and its corruption helper (debug builds
// only, invariants.h); the invariants themselves are listed, P1 to P18, at
// CheckInvariants in pinned_pool.h.
#include "shim/optimize/pinned_pool.h"

#ifdef PINSHIM_DEBUG_INVARIANTS

#include <initializer_list>

#include "shim/optimize/pinned_pool_parts.h"
#include "shim/optimize/size_classes.h"

namespace pinshim {
namespace optimize {
namespace {
// Walks longer than these mean a list runs in a circle.
constexpr uint64_t kMaxListWalk = uint64_t{1} << 24;
}  // namespace

// One walk of the pool under its lock: each step checks its invariants into
// the report and adds what it saw to the totals the last steps compare.
class PinnedPoolWalker {
 public:
  PinnedPoolWalker(const PinnedPool& pool, InvariantReport* report) : p_(pool), r_(*report) {}

  // P1 to P10 for each used sub-pool; notes whether every slot is used.
  void WalkSubPools();
  // P11 and P12: the open batch and the sealed ones.
  void WalkBatches();
  // P13, P16 and P17: the pool's counters against the totals walked.
  void CheckCounters();
  // P18: the spare slab structs.
  void WalkSpares();

 private:
  using Block = PinnedPool::Block;
  using Slab = PinnedPool::Slab;
  using SubPool = PinnedPool::SubPool;
  using BlockList = PinnedPool::BlockList;
  using Batch = PinnedPool::Batch;

  // P1: a used sub-pool's flags, context, and no twin.
  void CheckSubPool(int i, const SubPool& sub);
  // P2 to P9, P14 and P15 for one slab of `sub`; counts its free blocks.
  void WalkSlab(const SubPool& sub, const Slab* s, const Slab* prev, uint64_t* free_blocks);
  // P3, P4 and P6: a slab's shape, kind and place.
  void CheckSlabShape(const Slab* s);
  // P7, P9, P14 and P15 for block j of slab s; adds it to the totals.
  void WalkBlock(const Slab* s, uint32_t j, uint32_t* nlive, uint32_t* nbatched,
                 uint64_t* free_blocks);
  // P10: one free list (a class's, or the large one); returns its length.
  uint64_t WalkFreeList(const SubPool& sub, const BlockList& l, bool large, uint32_t cls);
  // P11: one batch's list; returns its length.
  uint64_t WalkBatch(const Batch& bt);
  // A counter against its walked total: equal, or at least it where a slab
  // may serve its one block on no list (every sub-pool slot taken).
  bool Same(uint64_t counter, uint64_t walked) const {
    return all_used_ ? counter >= walked : counter == walked;
  }

  const PinnedPool& p_;
  InvariantReport& r_;
  uintptr_t lo_ = p_.bounds_->lo.load(std::memory_order_relaxed);
  uintptr_t hi_ = p_.bounds_->hi.load(std::memory_order_relaxed);
  uint64_t live_ = 0, live_requested_ = 0, live_bytes_ = 0, slab_bytes_ = 0, fenced_ = 0;
  uint64_t batched_ = 0, in_batches_ = 0, batch_bytes_ = 0;
  uint64_t charged_[kPinUseCount] = {};
  bool all_used_ = true;
};

void PinnedPoolWalker::WalkSubPools() {
  for (int i = 0; i < PinnedPool::kMaxSubPools; ++i) {
    const SubPool& sub = p_.subs_[i];
    if (!sub.used) {
      all_used_ = false;
      continue;
    }
    CheckSubPool(i, sub);
    uint64_t free_blocks = 0, walked = 0;
    const Slab* prev = nullptr;
    for (const Slab* s = sub.slabs; s != nullptr; prev = s, s = s->next) {
      if (++walked > kMaxListWalk) {
        r_.Fail("P2 a slab list runs in a circle");
        break;
      }
      WalkSlab(sub, s, prev, &free_blocks);
    }
    uint64_t listed = 0;
    for (uint32_t c = 0; c < p_.num_classes_; ++c)
      listed += WalkFreeList(sub, sub.free[c], false, c);
    listed += WalkFreeList(sub, sub.large, true, 0);
    r_.Expect(listed == free_blocks, "P10 the free lists hold exactly the free blocks", listed,
              free_blocks);
  }
}

void PinnedPoolWalker::CheckSubPool(int i, const SubPool& sub) {
  r_.Expect((sub.flags & ~kKnownFlags) == 0 && sub.ctx != nullptr,
            "P1 a used sub-pool has known flags and a context", sub.flags);
  for (int j = i + 1; j < PinnedPool::kMaxSubPools; ++j) {
    const SubPool& other = p_.subs_[j];
    r_.Expect(!(other.used && other.flags == sub.flags && other.ctx == sub.ctx),
              "P1 no two sub-pools share flags and context", i, j);
  }
}

void PinnedPoolWalker::WalkSlab(const SubPool& sub, const Slab* s, const Slab* prev,
                                uint64_t* free_blocks) {
  r_.Expect(s->prev == prev, "P2 a slab list is doubly linked");
  r_.Expect(s->state == kSlabActive && s->sub == &sub,
            "P2 a slab on a sub-pool's list is active and names it", s->state);
  CheckSlabShape(s);
  uint32_t nlive = 0, nbatched = 0;
  for (uint32_t j = 0; j < s->nblocks && j < PinnedPool::kMaxBlocksPerSlab; ++j) {
    WalkBlock(s, j, &nlive, &nbatched, free_blocks);
  }
  r_.Expect(s->nlive == nlive, "P8 nlive counts a slab's live, freeing and batched blocks",
            s->nlive, nlive);
  r_.Expect(s->nbatched == nbatched, "P8 nbatched counts a slab's batched blocks", s->nbatched,
            nbatched);
  batched_ += nbatched;
  slab_bytes_ += s->bytes;
  charged_[static_cast<int>(s->use)] += s->charged;
}

void PinnedPoolWalker::CheckSlabShape(const Slab* s) {
  const PoolOptions& options = p_.options_;
  r_.Expect(s->nblocks >= 1 && s->nblocks <= options.max_blocks_per_slab,
            "P3 1 <= nblocks <= max_blocks_per_slab", s->nblocks);
  r_.Expect(s->bytes == s->block_bytes * s->nblocks, "P3 a slab's blocks tile it", s->bytes,
            s->block_bytes * s->nblocks);
  r_.Expect(s->base % p_.page_ == 0, "P3 a slab is page-aligned", s->base);
  if (s->dedicated) {
    r_.Expect(s->cls == kDedicatedClass && s->nblocks == 1 && s->use == PinUse::kPoolDedicated,
              "P4 a dedicated slab is one block of its own", s->nblocks);
    r_.Expect(s->keep_on_free == (s->bytes > options.max_pooled_bytes),
              "P4 a dedicated slab is kept for reuse only above max_pooled_bytes", s->bytes);
  } else {
    r_.Expect(s->cls < p_.num_classes_ && s->block_bytes == PoolClassPages(s->cls) * p_.page_ &&
                  s->use == PinUse::kPoolSlab && !s->keep_on_free,
              "P4 a pooled slab's block size is its class's", s->block_bytes, s->cls);
  }
  const uint64_t span = s->bytes == 0 ? 1 : s->bytes;
  Region first, last;
  const bool found =
      p_.slabs_.Lookup(s->base, &first) && p_.slabs_.Lookup(s->base + span - 1, &last);
  r_.Expect(found && first.id == reinterpret_cast<uint64_t>(s) && first.start == s->base &&
                first.bytes == span && last.id == first.id,
            "P5 an active slab is in the slab registry under its own id and range", s->base);
  r_.Expect(s->base >= lo_ && s->base + span <= hi_, "P6 every slab lies inside the bounds",
            s->base, lo_);
}

void PinnedPoolWalker::WalkBlock(const Slab* s, uint32_t j, uint32_t* nlive, uint32_t* nbatched,
                                 uint64_t* free_blocks) {
  const Block& b = s->blocks[j];
  r_.Expect(b.base == s->base + j * s->block_bytes && b.bytes == s->block_bytes && b.slab == s,
            "P3 block i of a slab starts at base + i * block_bytes and names it", j);
  r_.Expect(b.state <= kBlockRetired && b.state != kBlockGone && b.state != kBlockFreeing,
            "P7 no block of an active slab is gone or being freed", b.state);
  r_.Expect(s->retired ? b.state != kBlockFree : b.state != kBlockRetired,
            "P9 a retired slab has no free block, one not retired no retired block", b.state,
            s->retired);
  r_.Expect(b.fences.WellFormed(), "P14 a block's fence set is well formed", j);
  if (b.state == kBlockLive || b.state == kBlockFreeing || b.state == kBlockBatched) ++*nlive;
  if (b.state == kBlockBatched) ++*nbatched;
  if (b.state == kBlockFree) {
    ++*free_blocks;
    if (!b.fences.empty()) fenced_ += b.bytes;
  }
  if (b.state != kBlockLive) return;
  ++live_;
  live_requested_ += b.requested;
  live_bytes_ += b.bytes;
  const bool fits = !s->dedicated ? b.requested <= b.bytes
                    : s->keep_on_free
                        ? b.requested <= b.bytes && b.bytes - b.requested <= b.bytes / 8
                        : b.requested == b.bytes;
  r_.Expect(fits && b.alloc_id != 0,
            "P15 a live block holds what was asked and has an allocation id", b.requested, b.bytes);
}

uint64_t PinnedPoolWalker::WalkFreeList(const SubPool& sub, const BlockList& l, bool large,
                                        uint32_t cls) {
  const Block* before = nullptr;
  uint64_t n = 0;
  for (const Block* b = l.head; b != nullptr; before = b, b = b->next) {
    if (++n > kMaxListWalk) {
      r_.Fail("P10 a free list runs in a circle");
      break;
    }
    r_.Expect(b->prev == before, "P10 a free list is doubly linked");
    r_.Expect(b->state == kBlockFree, "P10 a block on a free list is free", b->state);
    const Slab* s = b->slab;
    r_.Expect(s->sub == &sub && s->state == kSlabActive &&
                  (large ? s->dedicated && s->keep_on_free : !s->dedicated && s->cls == cls),
              "P10 a free block is on the list of its sub-pool and class", cls);
  }
  r_.Expect(l.tail == before, "P10 a free list's tail is its last block");
  return n;
}

uint64_t PinnedPoolWalker::WalkBatch(const Batch& bt) {
  uint64_t n = 0, bytes = 0;
  const Block* before = nullptr;
  for (const Block* b = bt.blocks.head; b != nullptr; before = b, b = b->next) {
    if (++n > kMaxListWalk) {
      r_.Fail("P11 a batch list runs in a circle");
      break;
    }
    r_.Expect(b->prev == before, "P11 a batch list is doubly linked");
    r_.Expect(b->state == kBlockBatched && b->slab->state == kSlabActive,
              "P11 a block on a batch list is batched, of an active slab", b->state);
    bytes += b->bytes;
  }
  r_.Expect(bt.blocks.tail == before, "P11 a batch list's tail is its last block");
  r_.Expect(bt.bytes == bytes, "P11 a batch's bytes are its blocks'", bt.bytes, bytes);
  in_batches_ += n;
  batch_bytes_ += bt.bytes;
  return n;
}

void PinnedPoolWalker::WalkBatches() {
  r_.Expect(p_.open_.fence.id == 0, "P12 the open batch carries no fence", p_.open_.fence.id);
  const uint64_t open_blocks = WalkBatch(p_.open_);
  r_.Expect(p_.open_count_ == open_blocks, "P11 open_count_ counts the open batch's blocks",
            p_.open_count_, open_blocks);
  int sealed = 0;
  for (int i = 0; i < PinnedPool::kMaxBatches; ++i) {
    const Batch& bt = p_.batches_[i];
    if (bt.fence.id == 0) {
      r_.Expect(bt.blocks.head == nullptr && bt.blocks.tail == nullptr && bt.bytes == 0,
                "P11 an unused batch slot is empty", i);
      continue;
    }
    ++sealed;
    r_.Expect(bt.fence.event != nullptr, "P12 a sealed batch holds a recorded fence", i);
    WalkBatch(bt);
  }
  r_.Expect(sealed == p_.nbatches_, "P11 nbatches_ counts the sealed batches", sealed,
            p_.nbatches_);
  r_.Expect(in_batches_ == batched_, "P11 every batched block is on exactly one batch list",
            in_batches_, batched_);
  r_.Expect(p_.batched_bytes_ == batch_bytes_, "P11 batched_bytes_ is the batches' bytes",
            p_.batched_bytes_, batch_bytes_);
  r_.Expect(p_.batched_blocks_.load(std::memory_order_relaxed) == batched_,
            "P11 batched_blocks_ counts the batched blocks",
            p_.batched_blocks_.load(std::memory_order_relaxed), batched_);
}

void PinnedPoolWalker::CheckCounters() {
  r_.Expect(p_.fenced_bytes_ == fenced_, "P13 fenced_bytes_ is the free blocks' fenced bytes",
            p_.fenced_bytes_, fenced_);
  r_.Expect(Same(p_.live_blocks_.load(std::memory_order_relaxed), live_),
            "P16 live_blocks_ counts the live blocks", p_.live_blocks_.load(), live_);
  r_.Expect(Same(p_.live_requested_.load(std::memory_order_relaxed), live_requested_),
            "P16 live_requested_ is the live blocks' requested bytes", p_.live_requested_.load(),
            live_requested_);
  r_.Expect(Same(p_.live_block_bytes_.load(std::memory_order_relaxed), live_bytes_),
            "P16 live_block_bytes_ is the live blocks' bytes", p_.live_block_bytes_.load(),
            live_bytes_);
  r_.Expect(Same(p_.slab_bytes_.load(std::memory_order_relaxed), slab_bytes_),
            "P16 slab_bytes_ is the slabs' bytes", p_.slab_bytes_.load(), slab_bytes_);
  for (PinUse use : {PinUse::kPoolSlab, PinUse::kPoolDedicated}) {
    const uint64_t held = p_.account_->pinned_for(use);
    r_.Expect(Same(held, charged_[static_cast<int>(use)]),
              "P17 the account holds what the pool's slabs were charged", held,
              charged_[static_cast<int>(use)]);
  }
}

void PinnedPoolWalker::WalkSpares() {
  uint64_t spares = 0;
  for (const Slab* s = p_.spare_slabs_; s != nullptr; s = s->next) {
    if (++spares > kMaxListWalk) {
      r_.Fail("P18 the spare list runs in a circle");
      break;
    }
    r_.Expect(s->state == kSlabSpare, "P18 a spare slab struct is marked spare", s->state);
  }
}

PINSHIM_INVARIANT_WALKER InvariantReport PinnedPool::CheckInvariants() const {
  InvariantReport r;
  if (!active()) return r;  // off (not started, or a fork child): nothing is pooled
  MutexLock lock(&mu_);
  PinnedPoolWalker walk(*this, &r);
  walk.WalkSubPools();
  walk.WalkBatches();
  walk.CheckCounters();
  walk.WalkSpares();
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

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_DEBUG_INVARIANTS
