// Which allocation sites optimize mode redirects into the host arena.
//
// A site (site.h) becomes hot when the registration cache pinned a buffer
// allocated there (its copies paid for pinning), or when the loaded profile
// lists it. Later allocations at or above the tracking threshold from a hot
// site come from the arena, pinned from birth.
//
// The table maps site keys to cold/hot, lock-free: a site's first allocation
// decides it (profile or cold); a cold site may turn hot later, a hot one
// stays hot. Bounded; when full, new sites stay undecided (never redirected).
#ifndef PINSHIM_SHIM_OPTIMIZE_HOT_SITES_H_
#define PINSHIM_SHIM_OPTIMIZE_HOT_SITES_H_

#include <atomic>
#include <cstdint>

#include "shim/optimize/site.h"

namespace pinshim {
namespace optimize {

class HotSites {
 public:
  static constexpr uint32_t kSlots = 4096;  // a power of two
  enum State : uint8_t { kUnknown = 0, kCold = 1, kHot = 2 };

  constexpr HotSites() = default;
  HotSites(const HotSites&) = delete;
  HotSites& operator=(const HotSites&) = delete;

  // The profile's answer for a site seen for the first time (null: none).
  void SetProfile(bool (*contains)(const SiteFrames&)) {
    profile_.store(contains, std::memory_order_release);
  }

  // Whether allocations from this site go to the arena. The first call for
  // a site asks the profile; later calls cost one table probe.
  bool IsHot(uint64_t key, const SiteFrames& frames);

  // A buffer from this site was pinned because it was copied hot.
  void MarkHot(uint64_t key);

  State Get(uint64_t key) const;
  uint64_t hot_sites() const { return hot_.load(std::memory_order_relaxed); }
  uint64_t from_profile() const { return from_profile_.load(std::memory_order_relaxed); }
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

 private:
  // The slot holding key, claiming an empty one when create; -1 if none.
  int64_t Find(uint64_t key, bool create);

  std::atomic<uint64_t> keys_[kSlots] = {};
  std::atomic<uint8_t> states_[kSlots] = {};
  std::atomic<bool (*)(const SiteFrames&)> profile_{nullptr};
  std::atomic<uint64_t> hot_{0}, from_profile_{0}, overflows_{0};
};

// Fills *frames with the calling thread's allocation site: the first
// kSiteFrames return addresses outside this library (InitSiteCapture),
// innermost first. n = 0 when the stack could not be unwound.
void CaptureSite(SiteFrames* frames);

// Finds this library's own address range (frames there are skipped).
// Call once before CaptureSite; without it no frame is skipped.
void InitSiteCapture();

// Tests: treat [lo, hi) as this library's span.
void SetSelfRangeForTest(uintptr_t lo, uintptr_t hi);

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_HOT_SITES_H_
