// The registration cache's own records (an entry, a candidate), the
// entries' states and where a candidate may sit: for registration_cache.cc
// and its invariant walker (registration_cache_invariants.cc) only.
#ifndef PINSHIM_SHIM_OPTIMIZE_REGISTRATION_CACHE_PARTS_H_
#define PINSHIM_SHIM_OPTIMIZE_REGISTRATION_CACHE_PARTS_H_

#include <cstdint>

#include "shim/optimize/page_frames.h"
#include "shim/optimize/registration_cache.h"

namespace pinshim {
namespace optimize {

enum EntryState : uint8_t {
  kEntryFree = 0,
  kEntryRegistering = 1,  // the driver call is under way, outside the lock
  kEntryRegistered = 2,
  kEntryReleasing = 3,  // being unpinned, outside the lock
};

constexpr int kCandidateProbes = 8;

// The first slot an allocation's candidate may take (the probes follow it).
inline uint32_t CandidateHome(uint64_t alloc_id, uint32_t slots) {
  uint64_t h = alloc_id * 0x9E3779B97F4A7C15ull;
  return static_cast<uint32_t>(h >> 40) & (slots - 1);
}

struct RegistrationCache::Entry {
  uintptr_t start;
  uint64_t bytes;
  uint64_t alloc_id;
  CUcontext ctx;
  uint64_t last_use;
  int32_t users;  // copies between OnXxxCopy and AfterCopy
  uint32_t generation;
  uint8_t state;
  int32_t next_free;
  FenceSet fences;
  // PINSHIM_VERIFY_PAGES: the frames the registration pinned, one per page
  // from the page holding `start` (own mapping, given back on unpin).
  PageFrame* frames;
  uint64_t nframes;
};

struct RegistrationCache::Candidate {
  uint64_t alloc_id;  // 0: empty
  uint64_t last_ns;
  double accumulated_ns;
  uint32_t copies;
  uint8_t failed;  // CacheFailure + 1 when remembered, else 0
  bool busy;       // a registration for it is under way
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_REGISTRATION_CACHE_PARTS_H_
