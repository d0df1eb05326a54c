// Per-site totals of the copies a capped trace no longer records one by one
// (kSiteTotals in trace_format.h). Fixed-size, lock-free and allocation-free:
// adding a copy is a probe and four relaxed atomic adds. Sites past the
// table's limit are counted under site 0 (spilled); copies that find no room
// at all are counted as lost. Never silently dropped.
#ifndef PINSHIM_SHIM_TRACE_SITE_TOTALS_H_
#define PINSHIM_SHIM_TRACE_SITE_TOTALS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {

// One copy as the totals count it.
struct SiteCopy {
  uint32_t stack;
  ApiId api;
  CopyDir dir;
  bool async;
  bool failed;
  MemKind src;
  MemKind dst;
  uint64_t bytes;
  uint64_t call_ns;
  uint64_t overlap_ns;
};

// Events of other types that were not written, by kind.
enum class NotDetailed : uint8_t { kPin, kHostAlloc, kSync, kMisuse, kOther, kCount };

// Floor of log2(bytes); 0 for 0 and 1.
inline uint32_t SizeClass(uint64_t bytes) {
  return bytes <= 1 ? 0 : 63 - static_cast<uint32_t>(__builtin_clzll(bytes));
}

class SiteTotals {
 public:
  constexpr SiteTotals() = default;

  // Counts one copy. Async-signal-safe.
  void Add(const SiteCopy& c);
  void CountNotDetailed(NotDetailed kind) {
    not_detailed_[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
  }
  // The latest event time seen (for the header's last_ns).
  void NoteTime(uint64_t ns);

  // Encodes the kSiteTotals payload into out[0, cap) (cap >= kMaxSiteTotalsBytes)
  // and returns its length. `header` supplies version, sequence, detail_end_ns
  // and detail_bytes; the counts are filled here.
  size_t Encode(SiteTotalsFields header, uint8_t* out, size_t cap) const;

  // Whether anything was counted since the last call.
  bool TakeChanged() { return changed_.exchange(false, std::memory_order_relaxed); }

  // Forgets everything (a fork child's trace starts anew).
  void Reset();

 private:
  static constexpr size_t kSlots = kMaxSiteCells;  // a power of two
  // Sites beyond this many cells go to site 0, which keeps the rest.
  static constexpr size_t kSiteCellLimit = kSlots * 3 / 4;

  struct Cell {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> copies{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> call_ns{0};
    std::atomic<uint64_t> overlap_ns{0};
  };

  Cell* Find(uint64_t key, bool may_claim);

  Cell cells_[kSlots];
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> copies_{0};
  std::atomic<uint64_t> spilled_{0};
  std::atomic<uint64_t> lost_{0};
  std::atomic<uint64_t> last_ns_{0};
  std::atomic<uint64_t> not_detailed_[static_cast<int>(NotDetailed::kCount)] = {};
  std::atomic<bool> changed_{false};
};

// Remembers, per thread, the last synchronous copy of a few sites, to give
// each copy its overlap_ns. One thread at a time.
class SiteGaps {
 public:
  // The overlap of a synchronous copy [start, start + duration) from `stack`.
  uint64_t Overlap(uint32_t stack, uint64_t start_ns, uint64_t duration_ns);
  void Reset() {
    for (Entry& e : entries_) e = Entry{};
  }

 private:
  struct Entry {
    uint32_t stack = 0;
    bool seen = false;
    uint64_t last_end = 0;
    uint64_t last_duration = 0;
  };
  static constexpr size_t kEntries = 8;
  Entry entries_[kEntries];
};

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_SITE_TOTALS_H_
