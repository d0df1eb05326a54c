// The address registry: for a host pointer, what memory it is and who owns it.
//
// A registry holds non-overlapping half-open ranges [start, start + bytes).
// pinshim keeps two: allocations (malloc, mmap, pinned and device allocations)
// and registrations (cuMemHostRegister and pinshim's own pinning in place),
// because a registration lies inside an allocation.
//
// Lookups are optimistic (a sequence counter; readers retry when a writer was
// active) and fall back to the writers' mutex after a bounded number of tries.
// Before searching, a lookup or overlap probe reads a summary of the address
// space (how many ranges touch each 2 MiB of it): where it counts none, the
// answer is "none" in a load or two. Most probes are of memory no range
// holds (the munmap and madvise of the program's small mappings, copies from
// its stack and small heap blocks).
// Writers serialize on that mutex, which fork handlers take, so a child never
// inherits it held.
#ifndef PINSHIM_SHIM_CORE_REGISTRY_H_
#define PINSHIM_SHIM_CORE_REGISTRY_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/core/mutex.h"

namespace pinshim {

struct Region {
  uintptr_t start = 0;
  uint64_t bytes = 0;
  uint64_t id = 0;     // unique per allocation, 0 = none
  uint32_t flags = 0;  // pinning flags (CU_MEMHOSTALLOC_* / CU_MEMHOSTREGISTER_*)
  MemKind kind = MemKind::kPageable;
  uint8_t source = 0;  // who created it: see RegionSource
  uint64_t site = 0;   // call-site id where known, 0 otherwise
};

// Region::flags bit of a pageable malloc-family allocation made at a hot
// site (optimize mode) that the arena could not serve: the registration
// cache pins it at its first copy instead of waiting for reuse.
constexpr uint32_t kRegionFromHotSite = 1u << 31;

// Region::flags bit of an mmap region that is not private anonymous memory
// (shared, or backed by a file): never pinned in place, because truncating
// or punching the file, or another process, can change its pages without a
// call pinshim sees (bench/RESULTS.md, "pages that change under pinned
// memory").
constexpr uint32_t kRegionNotPinnable = 1u << 30;

enum RegionSource : uint8_t {
  kSourceMalloc = 0,
  kSourceMmap = 1,
  kSourceDriver = 2,  // cuMemHostAlloc, cuMemAlloc, cuMemHostRegister, ...
  kSourcePinshim = 3,
  kSourceFallback = 4,  // pageable memory handed out in place of pinned (enforce)
};

class Registry {
 public:
  constexpr Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Adds `r`. Any existing ranges it overlaps are removed first (the program
  // can only reuse an address after it was released, so they are stale).
  // Returns false only when pinshim's own memory ran out.
  bool Insert(const Region& r);

  // Removes the range starting exactly at `start`; copies it to `*out` if
  // non-null. Returns false when no range starts there.
  bool Remove(uintptr_t start, Region* out);

  // Removes every part of [start, start + bytes): ranges inside are dropped,
  // ranges that stick out are trimmed (keeping id, kind and flags). Calls
  // `on_removed(arg, removed_part)` for each part taken away, under the lock.
  // Returns how many ranges were touched.
  size_t RemoveSpan(uintptr_t start, uint64_t bytes,
                    void (*on_removed)(void* arg, const Region& part) = nullptr,
                    void* arg = nullptr);

  // Finds the range containing `addr`. Lock-free.
  bool Lookup(uintptr_t addr, Region* out) const {
    if (SummarySaysNone(addr, addr)) return false;
    return SearchLookup(addr, out);
  }

  // Whether any range overlaps [start, start + bytes). Lock-free; what a
  // writer does at the same time may or may not be seen (as with Lookup).
  // Lets a caller skip RemoveSpan, and its writer lock, when nothing is there.
  bool AnyOverlapping(uintptr_t start, uint64_t bytes) const {
    if (bytes == 0) return false;
    // A range past the top of the address space wraps its last byte below
    // its start, which the summary refuses to answer for.
    if (SummarySaysNone(start, start + (bytes - 1))) return false;
    return SearchOverlap(start, bytes > UINTPTR_MAX - start ? UINTPTR_MAX : start + bytes);
  }

  // Whether [start, last] (last >= start: the range's last byte) may hold a
  // range, from the summary alone: for hooks whose ranges are nearly always
  // empty, which go on to AnyOverlapping when this says yes. It reads the
  // two ends' counts, and says yes for anything wider than two granules,
  // past the summary's reach, or while it is not mapped with ranges held.
  bool MayHoldAny(uintptr_t start, uintptr_t last) const {
    const uint8_t* s = summary_.load(std::memory_order_acquire);
    if (s == nullptr) return count_.load(std::memory_order_relaxed) != 0;
    const uintptr_t first_g = start >> kGranuleShift, last_g = last >> kGranuleShift;
    if (last_g >= kSummaryGranules || last_g - first_g > 1) return true;
    return (__atomic_load_n(&s[first_g], __ATOMIC_RELAXED) |
            __atomic_load_n(&s[last_g], __ATOMIC_RELAXED)) != 0;
  }

  // Number of ranges held.
  size_t size() const { return count_.load(std::memory_order_relaxed); }

  // Removes everything (tests, and the child after fork when state is reset).
  void Clear();

  // Fork support: hold the writer lock across fork so neither side inherits
  // a half-written table. Held from the prepare handler to the after-fork
  // ones, across functions the analysis cannot follow.
  void LockForFork() NO_THREAD_SAFETY_ANALYSIS;
  void UnlockAfterFork() NO_THREAD_SAFETY_ANALYSIS;

 private:
  struct Chunk;
  struct Index;

  // The summary: one count per 2 MiB granule below 2^47, of the ranges
  // overlapping it, saturating at 255 (which then stays). Written under mu_,
  // increments before decrements within one write (a granule some range
  // covers before and after a write never reads 0 meanwhile); read with
  // relaxed loads. Mapped at the first insert; null until then, or when the
  // kernel refuses the mapping (the searches then answer alone).
  static constexpr int kGranuleShift = 21;
  static constexpr uintptr_t kSummaryLimit = uintptr_t{1} << 47;
  static constexpr uintptr_t kSummaryGranules = kSummaryLimit >> kGranuleShift;
  // The most granules a probe reads before it searches instead.
  static constexpr uintptr_t kSummaryProbe = 8;
  // A range larger than this (2 TiB: a million granules) turns the summary
  // off for good rather than be counted.
  static constexpr uint64_t kSummaryMaxRange = uint64_t{1} << 41;

  // Whether the summary shows no range in the granules from start's to
  // last's (last: the range's last byte). False when it cannot tell: not
  // mapped, past its reach, wider than a probe, or last below start. Both
  // ends' counts are read at once; the loop runs only for ranges over three
  // granules.
  bool SummarySaysNone(uintptr_t start, uintptr_t last) const {
    const uint8_t* s = summary_.load(std::memory_order_acquire);
    const uintptr_t first_g = start >> kGranuleShift, last_g = last >> kGranuleShift;
    if (s == nullptr || last < start || last_g >= kSummaryGranules ||
        last_g - first_g >= kSummaryProbe) {
      return false;
    }
    unsigned any = __atomic_load_n(&s[first_g], __ATOMIC_RELAXED) |
                   __atomic_load_n(&s[last_g], __ATOMIC_RELAXED);
    for (uintptr_t g = first_g + 1; g < last_g; ++g)
      any |= __atomic_load_n(&s[g], __ATOMIC_RELAXED);
    return any == 0;
  }
  void SummaryAdd(const Region& r) REQUIRES(mu_);
  void SummarySub(const Region& r) REQUIRES(mu_);
  // Adds delta (+1 or -1) to the count of each granule r overlaps.
  static void SummaryCount(uint8_t* s, const Region& r, int delta);
  bool SearchLookup(uintptr_t addr, Region* out) const;
  bool SearchOverlap(uintptr_t start, uintptr_t end) const;

  // All of these run with mu_ held and seq_ odd.
  Chunk* NewChunk() REQUIRES(mu_);
  bool InsertLocked(const Region& r) REQUIRES(mu_);
  bool RemoveAtLocked(size_t chunk_pos, size_t slot, Region* out) REQUIRES(mu_);
  size_t FindChunkLocked(uintptr_t addr) const REQUIRES(mu_);
  // Lock-free readers: correct under mu_, or inside a seq_ check.
  bool SearchUnsynchronized(uintptr_t addr, Region* out) const;
  bool OverlapUnsynchronized(uintptr_t start, uintptr_t end) const;
  size_t RemoveSpanLocked(uintptr_t start, uint64_t bytes, void (*on_removed)(void*, const Region&),
                          void* arg) REQUIRES(mu_);
  bool GrowIndexLocked() REQUIRES(mu_);
  void BeginWrite() REQUIRES(mu_);
  void EndWrite() REQUIRES(mu_);

  mutable std::atomic<uint64_t> seq_{0};
  std::atomic<uint8_t*> summary_{nullptr};
  // The kernel refused the summary's mapping once: not asked again.
  bool summary_refused_ GUARDED_BY(mu_) = false;
  std::atomic<Index*> index_{nullptr};
  std::atomic<size_t> count_{0};
  // The index and the chunks are written under mu_ and read without it
  // (seq_ tells a reader that raced a write), so only what no reader sees
  // is GUARDED_BY.
  Chunk* free_chunks_ GUARDED_BY(mu_) = nullptr;
  mutable Mutex mu_;
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_REGISTRY_H_
