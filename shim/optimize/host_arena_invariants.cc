// HostArena's invariant walker and its corruption helper (debug builds
// only, invariants.h); the invariants themselves are listed, A1 to A15, at
// CheckInvariants in host_arena.h.
#include "shim/optimize/host_arena.h"

#ifdef PINSHIM_DEBUG_INVARIANTS

#include <algorithm>

#include "shim/optimize/host_arena_parts.h"
#include "shim/optimize/size_classes.h"

namespace pinshim {
namespace optimize {

// One walk of the arena under its lock: each step checks its invariants
// into the report; the first two build the sorted index of the extents in
// use that the later ones look pages up in.
class HostArenaWalker {
 public:
  HostArenaWalker(const HostArena& arena, InvariantReport* report) : a_(arena), r_(*report) {}

  // A9, A11 and A12 for every extent; indexes the extents in use.
  void WalkExtents();
  // A1 and A5: the extents in use, in address order.
  void CheckExtentsInUse();
  // A1 to A4, A6 and A7: the free runs against the extents.
  void WalkRuns();
  // A8 and A10: the extent free list and the arena's counters.
  void CheckFreeListAndCounters();
  // A13: the small classes' spans and free lists.
  void WalkSmallClasses();
  // A14 and A15: the pending copy ranges and the deferred frees.
  void CheckPendingAndDeferred();

 private:
  using Extent = HostArena::Extent;
  using Run = HostArena::Run;
  using SmallClass = HostArena::SmallClass;
  using Pending = HostArena::Pending;
  static constexpr uint32_t kMaxExtents = HostArena::kMaxExtents;

  // A11 and A12 for extent i, by whether it is registered.
  void CheckRegistration(int32_t i, const Extent& x);
  // A1 to A3 for free run k; adds its pages to its extent's or the
  // unregistered total.
  void CheckRun(uint32_t k);
  // A4: an unregistered run overlaps no extent in use.
  void CheckUnregisteredRun(const Run& run);
  // The extent in use holding page p, or -1.
  int32_t Holding(uint64_t p) const;
  // Whether address a lies in an extent in use and not lost.
  bool Usable(uintptr_t a) const;

  const HostArena& a_;
  InvariantReport& r_;
  // The extents in use, sorted by start once WalkExtents is done.
  int32_t used_[kMaxExtents];
  uint64_t run_pages_[kMaxExtents];  // set for the extents in use only
  uint32_t nused_ = 0, nfree_ = 0, nregistered_ = 0, nlost_ = 0;
  uint64_t registered_bytes_ = 0, in_use_pages_ = 0, unregistered_pages_ = 0;
};

void HostArenaWalker::WalkExtents() {
  for (int32_t i = 0; i < static_cast<int32_t>(kMaxExtents); ++i) {
    const Extent& x = a_.extents_[i];
    r_.Expect(x.state <= kExtentLost, "A9 an extent's state is one of ExtentState", i, x.state);
    r_.Expect(
        x.state != kExtentRegistering && x.state != kExtentReleasing && x.state != kExtentRepinning,
        "A9 no extent is registering, releasing or repinning", i, x.state);
    if (x.state == kExtentFree) {
      ++nfree_;
    } else {
      used_[nused_++] = i;
      run_pages_[i] = 0;
    }
    if (x.state == kExtentLost) ++nlost_;
    CheckRegistration(i, x);
  }
  const Extent* extents = a_.extents_;
  std::sort(used_, used_ + nused_,
            [extents](int32_t a, int32_t b) { return extents[a].start < extents[b].start; });
}

void HostArenaWalker::CheckRegistration(int32_t i, const Extent& x) {
  const uintptr_t addr = a_.PageAddr(x.start);
  const Registry* registrations = a_.options_.registrations;
  Region reg;
  if (x.state == kExtentRegistered) {
    ++nregistered_;
    registered_bytes_ += x.pages * a_.page_;
    r_.Expect(x.ctx != nullptr, "A12 a registered extent has a context", i);
    if (registrations == nullptr) return;
    const bool found = registrations->Lookup(addr, &reg);
    r_.Expect(found && reg.start == addr && reg.bytes == x.pages * a_.page_ &&
                  reg.kind == MemKind::kPinnedByPinshim && reg.source == kSourcePinshim &&
                  reg.id == static_cast<uint64_t>(i) + 1,
              "A11 a registered extent is in the registrations registry as pinshim's pinning", i,
              addr);
    return;
  }
  r_.Expect(x.frames == nullptr, "A12 an extent not registered holds no frames", i);
  if (registrations == nullptr || (x.state != kExtentUnpinned && x.state != kExtentLost)) return;
  const bool pinned = registrations->Lookup(addr, &reg) && reg.start == addr &&
                      reg.kind == MemKind::kPinnedByPinshim &&
                      reg.id == static_cast<uint64_t>(i) + 1;
  r_.Expect(!pinned, "A11 an unpinned or lost extent is not in the registrations registry", i,
            addr);
}

int32_t HostArenaWalker::Holding(uint64_t p) const {
  uint32_t lo = 0, hi = nused_;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (a_.extents_[used_[mid]].start <= p) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return -1;
  const Extent& x = a_.extents_[used_[lo - 1]];
  return p - x.start < x.pages ? used_[lo - 1] : -1;
}

void HostArenaWalker::CheckExtentsInUse() {
  r_.Expect(a_.top_ <= a_.npages_, "A1 top_ <= npages_", a_.top_, a_.npages_);
  for (uint32_t k = 0; k < nused_; ++k) {
    const Extent& x = a_.extents_[used_[k]];
    r_.Expect(x.pages > 0 && x.start + x.pages <= a_.top_ && x.live_pages <= x.pages,
              "A5 an extent in use holds pages below top_, live_pages <= pages", used_[k],
              x.live_pages);
    if (k > 0) {
      const Extent& before = a_.extents_[used_[k - 1]];
      r_.Expect(before.start + before.pages <= x.start, "A5 extents in use do not overlap",
                used_[k - 1], used_[k]);
    }
    in_use_pages_ += x.pages;
  }
}

void HostArenaWalker::WalkRuns() {
  r_.Expect(a_.nruns_ <= HostArena::kMaxRuns, "A1 at most kMaxRuns runs", a_.nruns_);
  for (uint32_t k = 0; k < a_.nruns_ && k < HostArena::kMaxRuns; ++k) CheckRun(k);
  for (uint32_t k = 0; k < nused_; ++k) {
    const Extent& x = a_.extents_[used_[k]];
    if (x.state != kExtentRegistered && x.state != kExtentUnpinned) continue;
    r_.Expect(run_pages_[used_[k]] + x.live_pages == x.pages,
              "A6 an extent's free runs and live pages add up to its pages", used_[k],
              run_pages_[used_[k]] + x.live_pages);
  }
  r_.Expect(unregistered_pages_ + in_use_pages_ == a_.top_,
            "A7 the pages below top_ are the unregistered runs and the extents in use",
            unregistered_pages_ + in_use_pages_, a_.top_);
}

void HostArenaWalker::CheckRun(uint32_t k) {
  const Run& run = a_.runs_[k];
  r_.Expect(run.pages > 0 && run.start + run.pages <= a_.top_,
            "A1 a free run holds pages below top_", run.start, run.pages);
  if (k > 0) {
    const Run& before = a_.runs_[k - 1];
    r_.Expect(before.start + before.pages <= run.start,
              "A1 free runs are sorted and do not overlap", before.start, run.start);
    r_.Expect(before.start + before.pages != run.start || before.ext != run.ext,
              "A2 touching runs never share a registration", run.start, run.ext);
  }
  if (run.ext < 0) {
    unregistered_pages_ += run.pages;
    CheckUnregisteredRun(run);
    return;
  }
  const bool valid = static_cast<uint32_t>(run.ext) < kMaxExtents;
  const Extent* x = valid ? &a_.extents_[run.ext] : nullptr;
  r_.Expect(x != nullptr && (x->state == kExtentRegistered || x->state == kExtentUnpinned) &&
                run.start >= x->start && run.start + run.pages <= x->start + x->pages,
            "A3 a run of an extent lies in it, and it is registered or unpinned", run.start,
            run.ext);
  if (valid && x->state != kExtentFree) run_pages_[run.ext] += run.pages;
}

void HostArenaWalker::CheckUnregisteredRun(const Run& run) {
  // The first extent in use ending past the run's start must start past its end.
  uint32_t lo = 0, hi = nused_;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    const Extent& x = a_.extents_[used_[mid]];
    if (x.start + x.pages <= run.start) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  r_.Expect(lo == nused_ || a_.extents_[used_[lo]].start >= run.start + run.pages,
            "A4 an unregistered run overlaps no extent in use", run.start, run.pages);
}

void HostArenaWalker::CheckFreeListAndCounters() {
  uint32_t listed = 0;
  for (int32_t f = a_.free_extent_; f >= 0;) {
    if (++listed > kMaxExtents || static_cast<uint32_t>(f) >= kMaxExtents) {
      r_.Fail("A8 the extent free list runs in a circle or out of the table", listed, f);
      break;
    }
    r_.Expect(a_.extents_[f].state == kExtentFree, "A8 the extent free list holds free extents", f,
              a_.extents_[f].state);
    f = a_.extents_[f].next_free;
  }
  r_.Expect(listed == nfree_, "A8 the extent free list holds exactly the free extents", listed,
            nfree_);
  r_.Expect(a_.extents_live_.load(std::memory_order_relaxed) == nregistered_,
            "A10 extents_live_ counts the registered extents",
            a_.extents_live_.load(std::memory_order_relaxed), nregistered_);
  r_.Expect(a_.registered_bytes_.load(std::memory_order_relaxed) == registered_bytes_,
            "A10 registered_bytes_ is the registered extents' bytes",
            a_.registered_bytes_.load(std::memory_order_relaxed), registered_bytes_);
  r_.Expect(a_.account_->pinned_for(PinUse::kArena) == registered_bytes_,
            "A10 the account's arena bytes are the registered extents'",
            a_.account_->pinned_for(PinUse::kArena), registered_bytes_);
  r_.Expect(a_.nlost_ == nlost_, "A10 nlost_ counts the lost extents", a_.nlost_, nlost_);
}

bool HostArenaWalker::Usable(uintptr_t a) const {
  if (a < a_.base_ || a - a_.base_ >= a_.size_) return false;
  const int32_t e = Holding((a - a_.base_) / a_.page_);
  return e >= 0 && a_.extents_[e].state != kExtentLost;
}

void HostArenaWalker::WalkSmallClasses() {
  for (uint32_t c = 0; c < a_.nclasses_; ++c) {
    const SmallClass& k = a_.classes_[c];
    r_.Expect(!k.refilling, "A13 no small class is being refilled", c);
    r_.Expect(k.cursor <= k.end, "A13 a small class's cursor lies within its span", c, k.cursor);
    if (k.cursor != 0 && k.cursor < k.end) {
      // (A span used up hands out nothing more: where it was matters no longer.)
      const bool one =
          Usable(k.cursor) && Usable(k.end - 1) &&
          Holding((k.cursor - a_.base_) / a_.page_) == Holding((k.end - 1 - a_.base_) / a_.page_);
      r_.Expect(one, "A13 a small class's span lies in one extent in use and not lost", c,
                k.cursor);
    }
    const uint64_t cb = ArenaClassBytes(c);
    uint64_t n = 0;
    for (uintptr_t b = k.free_head; b != 0; b = *reinterpret_cast<const uintptr_t*>(b)) {
      if (++n > a_.size_ / cb + 1) {
        r_.Fail("A13 a small class's free list runs in a circle", c);
        break;
      }
      if (!Usable(b)) {
        r_.Fail("A13 a free small block lies in an extent in use and not lost", c, b);
        break;  // not followed: its link may be anything
      }
    }
  }
}

void HostArenaWalker::CheckPendingAndDeferred() {
  uint32_t pending = 0;
  for (uint32_t i = 0; i < HostArena::kMaxPending; ++i) {
    const Pending& p = a_.pending_[i];
    if (p.start == 0) continue;
    ++pending;
    r_.Expect(p.start < p.end && !p.fences.empty() && p.fences.WellFormed(),
              "A14 a pending copy range has well-formed fences", p.start, p.end);
  }
  r_.Expect(a_.npending_.load(std::memory_order_relaxed) == pending,
            "A14 npending_ counts the pending copy ranges",
            a_.npending_.load(std::memory_order_relaxed), pending);
  const uint32_t ndeferred = a_.ndeferred_locked_;
  r_.Expect(ndeferred <= HostArena::kMaxPending &&
                a_.ndeferred_.load(std::memory_order_relaxed) == ndeferred,
            "A15 ndeferred_ is the deferred frees' count", ndeferred,
            a_.ndeferred_.load(std::memory_order_relaxed));
  for (uint32_t i = 0; i < ndeferred && i < HostArena::kMaxPending; ++i) {
    r_.Expect(a_.Owns(reinterpret_cast<const void*>(a_.deferred_[i])),
              "A15 a deferred free points into the arena", a_.deferred_[i]);
    for (uint32_t j = 0; j < i; ++j) {
      r_.Expect(a_.deferred_[j] != a_.deferred_[i], "A15 deferred frees are distinct", i, j);
    }
  }
}

PINSHIM_INVARIANT_WALKER InvariantReport HostArena::CheckInvariants() const {
  InvariantReport r;
  if (!active() || size_ == 0) return r;  // off: nothing is served
  MutexLock lock(&mu_);
  HostArenaWalker walk(*this, &r);
  walk.WalkExtents();
  walk.CheckExtentsInUse();
  walk.WalkRuns();
  walk.CheckFreeListAndCounters();
  walk.WalkSmallClasses();
  walk.CheckPendingAndDeferred();
  return r;
}

bool HostArena::CorruptForTesting(Corruption what) {
  if (!active() || size_ == 0) return false;
  MutexLock lock(&mu_);
  switch (what) {
    case Corruption::kRuns:
      if (nruns_ == 0) return false;
      runs_[0].pages ^= uint64_t{1} << 40;  // far past top_
      return true;
    case Corruption::kExtentLive:
      for (uint32_t i = 0; i < kMaxExtents; ++i) {
        if (extents_[i].state == kExtentRegistered) {
          extents_[i].live_pages ^= 1;
          return true;
        }
      }
      return false;
    case Corruption::kRegisteredBytes:
      registered_bytes_.fetch_xor(page_, std::memory_order_relaxed);
      return true;
  }
  return false;
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_DEBUG_INVARIANTS
