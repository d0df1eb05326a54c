// The pinned pool's own records (a block, a slab, a sub-pool) and their
// states: for pinned_pool.cc and its invariant walker
// (pinned_pool_invariants.cc) only.
#ifndef PINSHIM_SHIM_OPTIMIZE_PINNED_POOL_PARTS_H_
#define PINSHIM_SHIM_OPTIMIZE_PINNED_POOL_PARTS_H_

#include <cstdint>

#include "shim/optimize/pinned_pool.h"
#include "shim/optimize/size_classes.h"

namespace pinshim {
namespace optimize {

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

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PINNED_POOL_PARTS_H_
