// RegistrationCache's invariant walker and its corruption helper (debug
// builds only, invariants.h); the invariants themselves are listed, C1 to
// C10, at CheckInvariants in registration_cache.h.
#include "shim/optimize/registration_cache.h"

#ifdef PINSHIM_DEBUG_INVARIANTS

#include "shim/optimize/registration_cache_parts.h"

namespace pinshim {
namespace optimize {

// One walk of the cache under its lock: each step checks its invariants
// into the report; the order walk notes which entries it listed for the
// free list's check.
class RegistrationCacheWalker {
 public:
  RegistrationCacheWalker(const RegistrationCache& cache, InvariantReport* report)
      : c_(cache), r_(*report) {}

  // C1, C2, C4, C5 and C7 to C9: the entries in order of start.
  void WalkOrder();
  // C3 and C6: the free list and the cache's byte counts.
  void CheckFreeListAndBytes();
  // C10: the candidate slots.
  void WalkCandidates();

 private:
  using Entry = RegistrationCache::Entry;
  using Candidate = RegistrationCache::Candidate;
  static constexpr uint32_t kMaxEntries = RegistrationCache::kMaxEntries;

  // C2, C4, C5 and C7 to C9 for entry idx, which follows *prev in order.
  void CheckEntry(int32_t idx, const Entry& e, const Entry* prev);
  // C10 for the candidate in slot i, which holds an id.
  void CheckCandidate(uint32_t i, const Candidate& c);

  const RegistrationCache& c_;
  InvariantReport& r_;
  const uint32_t n_ = c_.options_.max_entries;
  const uintptr_t lo_ = c_.bounds_->lo.load(std::memory_order_relaxed);
  const uintptr_t hi_ = c_.bounds_->hi.load(std::memory_order_relaxed);
  bool listed_[kMaxEntries] = {};
  uint64_t registered_ = 0;
};

void RegistrationCacheWalker::WalkOrder() {
  const uint64_t live = c_.live_entries_.load(std::memory_order_relaxed);
  r_.Expect(c_.norder_ <= n_ && c_.norder_ == live, "C1 norder_ is live_entries_", c_.norder_,
            live);
  const Entry* prev = nullptr;
  for (uint32_t pos = 0; pos < c_.norder_ && pos < kMaxEntries; ++pos) {
    const int32_t idx = c_.order_[pos];
    const bool valid = idx >= 0 && static_cast<uint32_t>(idx) < n_;
    r_.Expect(valid && !listed_[idx] && c_.entries_[idx].state != kEntryFree,
              "C1 order_ holds distinct indices of entries in use", pos, valid ? idx : 0);
    if (!valid || listed_[idx]) continue;
    listed_[idx] = true;
    CheckEntry(idx, c_.entries_[idx], prev);
    prev = &c_.entries_[idx];
  }
  if (c_.norder_ == 0) {
    r_.Expect(lo_ == UINTPTR_MAX && hi_ == 0, "C4 with no entry, the bounds are empty", lo_, hi_);
  }
}

void RegistrationCacheWalker::CheckEntry(int32_t idx, const Entry& e, const Entry* prev) {
  r_.Expect(e.bytes > 0, "C2 an entry holds bytes", idx);
  if (prev != nullptr) {
    r_.Expect(prev->start < e.start && prev->start + prev->bytes <= e.start,
              "C2 entries are sorted by start and do not overlap", prev->start, e.start);
  }
  r_.Expect(e.start >= lo_ && e.start + e.bytes <= hi_, "C4 every entry lies inside the bounds",
            e.start, lo_);
  r_.Expect(e.state == kEntryRegistered, "C5 no entry is registering or releasing", idx, e.state);
  r_.Expect((e.frames != nullptr) == (e.nframes != 0),
            "C8 an entry holds frames exactly when it records some", idx, e.nframes);
  r_.Expect(e.fences.WellFormed(), "C9 an entry's fence set is well formed", idx);
  if (e.state != kEntryRegistered) return;
  r_.Expect(e.ctx != nullptr && e.users >= 0,
            "C5 a registered entry has a context and no negative user count", idx);
  registered_ += e.bytes;
  if (c_.options_.registrations == nullptr) return;
  Region reg;
  const bool found = c_.options_.registrations->Lookup(e.start, &reg);
  r_.Expect(found && reg.start == e.start && reg.bytes == e.bytes &&
                reg.kind == MemKind::kPinnedByPinshim && reg.source == kSourcePinshim &&
                reg.id == e.alloc_id,
            "C7 a registered entry is in the registrations registry as pinshim's pinning", e.start,
            e.bytes);
}

void RegistrationCacheWalker::CheckFreeListAndBytes() {
  uint32_t free_count = 0;
  for (int32_t f = c_.free_entry_; f >= 0;) {
    if (++free_count > n_ || static_cast<uint32_t>(f) >= n_) {
      r_.Fail("C3 the free list runs in a circle or out of the table", free_count, f);
      break;
    }
    r_.Expect(c_.entries_[f].state == kEntryFree && !listed_[f],
              "C3 the free list holds free entries", f, c_.entries_[f].state);
    f = c_.entries_[f].next_free;
  }
  r_.Expect(free_count + c_.norder_ == n_, "C3 the free list holds exactly the free entries",
            free_count, n_ - c_.norder_);
  const uint64_t bytes = c_.bytes_.load(std::memory_order_relaxed);
  r_.Expect(bytes == registered_, "C6 bytes_ is the registered entries' bytes", bytes, registered_);
  r_.Expect(c_.account_->pinned_for(PinUse::kCache) == registered_,
            "C6 the account's cache bytes are the registered entries'",
            c_.account_->pinned_for(PinUse::kCache), registered_);
}

void RegistrationCacheWalker::WalkCandidates() {
  for (uint32_t i = 0; i < RegistrationCache::kCandidateSlots; ++i) {
    const Candidate& c = c_.candidates_[i];
    if (c.alloc_id != 0) {
      CheckCandidate(i, c);
      continue;
    }
    r_.Expect(c.last_ns == 0 && c.accumulated_ns == 0 && c.copies == 0 && c.failed == 0 && !c.busy,
              "C10 an empty candidate slot is all zero", i);
  }
}

void RegistrationCacheWalker::CheckCandidate(uint32_t i, const Candidate& c) {
  constexpr uint32_t kSlots = RegistrationCache::kCandidateSlots;
  const uint32_t home = CandidateHome(c.alloc_id, kSlots);
  const uint32_t dist = (i - home) & (kSlots - 1);
  r_.Expect(dist < static_cast<uint32_t>(kCandidateProbes),
            "C10 a candidate lies within its id's probe window", i, dist);
  for (int k = 0; k < kCandidateProbes; ++k) {
    const uint32_t j = (home + k) & (kSlots - 1);
    r_.Expect(j == i || c_.candidates_[j].alloc_id != c.alloc_id,
              "C10 no other slot of a candidate's window holds its id", i, j);
  }
  r_.Expect(!c.busy, "C10 no candidate is busy (a registration under way)", i);
  r_.Expect(c.failed <= kCacheFailureCount, "C10 a remembered failure is a CacheFailure", i,
            c.failed);
}

PINSHIM_INVARIANT_WALKER InvariantReport RegistrationCache::CheckInvariants() const {
  InvariantReport r;
  if (!active()) return r;  // off (not started, or a fork child): nothing is cached
  MutexLock lock(&mu_);
  RegistrationCacheWalker walk(*this, &r);
  walk.WalkOrder();
  walk.CheckFreeListAndBytes();
  walk.WalkCandidates();
  return r;
}

bool RegistrationCache::CorruptForTesting(Corruption what) {
  if (!active()) return false;
  MutexLock lock(&mu_);
  switch (what) {
    case Corruption::kOrder: {
      if (norder_ < 2) return false;
      const int32_t first = order_[0];
      order_[0] = order_[1];
      order_[1] = first;
      return true;
    }
    case Corruption::kBounds:
      // Above every user-space address: entries fall below lo.
      bounds_->lo.fetch_xor(uintptr_t{1} << 47, std::memory_order_relaxed);
      return true;
    case Corruption::kBytes: bytes_.fetch_xor(4096, std::memory_order_relaxed); return true;
  }
  return false;
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_DEBUG_INVARIANTS
