// The host arena's own records (an extent, a small class, a pending copy
// range) and the extents' states: for host_arena.cc and its invariant
// walker (host_arena_invariants.cc) only.
#ifndef PINSHIM_SHIM_OPTIMIZE_HOST_ARENA_PARTS_H_
#define PINSHIM_SHIM_OPTIMIZE_HOST_ARENA_PARTS_H_

#include <cstdint>

#include "shim/optimize/host_arena.h"
#include "shim/optimize/page_frames.h"

namespace pinshim {
namespace optimize {

enum ExtentState : uint8_t {
  kExtentFree = 0,
  kExtentRegistering = 1,
  kExtentRegistered = 2,
  kExtentReleasing = 3,
  kExtentRepinning = 4,  // unpinned for a page change; pinned again after it
  kExtentUnpinned = 5,   // not pinned (a page change raced its repinning); usable
  kExtentLost = 6,       // its memory is no longer ours to hand out (page_change.h)
};

struct HostArena::Extent {
  uint64_t start;  // page index
  uint64_t pages;
  uint64_t live_pages;
  uint64_t idle_since_ns;
  CUcontext ctx;
  uint8_t state;
  int32_t next_free;
  PageFrame* frames;  // PINSHIM_VERIFY_PAGES: what the registration pinned
};

struct HostArena::SmallClass {
  uintptr_t free_head;  // freed blocks, linked through their first word
  uintptr_t cursor;     // next unused block of the current span
  uintptr_t end;
  bool refilling;
};

struct HostArena::Pending {
  uintptr_t start;  // 0: unused
  uintptr_t end;
  FenceSet fences;
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_HOST_ARENA_PARTS_H_
