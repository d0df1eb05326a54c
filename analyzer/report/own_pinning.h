// pinshim's own pinning in optimize mode, for the reports' "pinshim's own
// pinning" section: what the pool, the registration cache and the arena
// pinned, reused, dropped and were refused (kOwnPin and kOptimizeCounters
// events), and what became of each buffer the program copied hot: pinned
// by pinshim, or left alone and why.
#ifndef PINSHIM_ANALYZER_REPORT_OWN_PINNING_H_
#define PINSHIM_ANALYZER_REPORT_OWN_PINNING_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "analyzer/report/bandwidth_model.h"
#include "analyzer/report/finding.h"
#include "analyzer/report/rules/rule.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

// One buffer the program copied hot.
struct OwnPinningBuffer {
  uint64_t alloc_id = 0;  // tracked (or pooled) allocation; 0: untracked memory
  uint64_t address = 0;   // the allocation's start, or the copied address when untracked
  uint64_t size = 0;      // the allocation's size; 0 when unknown
  uint64_t copies = 0;    // host<->device copies of it (pageable or pinned by pinshim)
  uint64_t bytes_copied = 0;
  uint64_t copies_pinned = 0;  // those that ran on memory pinshim pinned
  uint64_t refusals = 0;       // pinnings of it refused
  uint32_t alloc_stack = 0;
  uint32_t copy_stack = 0;  // the site that copied the most bytes of it
  Site allocated_at;        // filled by symbolization
  Site copied_at;
  bool pinned = false;  // pinned by pinshim; else left alone
  // Pinned: "cache", "pool" or "arena". Left alone: "refused",
  // "untracked", "mmap_region", "larger_than_cap" or "cost_model".
  std::string by;
  std::string reason;    // refused: the last refusal's reason ("cap", ...)
  std::string unpinned;  // pinned by the cache: why it was last unpinned, "" if never
  std::string detail;    // one sentence for the reader
};

// Drops of pinshim's pinning caused by the program changing the pages behind
// it, grouped by the call, the part of optimize mode and the call site.
struct PageChangeDrop {
  std::string call;     // OwnPinReasonName: "page_change_madvise", ...
  std::string part;     // "pool", "cache", "arena"
  std::string action;   // "unpinned" (cache, arena) or "retired" (pool slabs)
  uint32_t detail = 0;  // the advice or the call's flags (first seen)
  uint64_t times = 0;
  uint64_t bytes = 0;
  uint32_t stack = 0;
  Site site;  // filled by symbolization
};

// Optimize mode's self-check (shim/optimize/path_judge.h): its last verdict
// on one path in one cell (direction, synchronous or not, size class).
struct PathVerdictRow {
  std::string dir;  // "H2D" or "D2H"
  bool sync = false;
  uint32_t size_class = 0;
  std::string size_from;  // the class's lower bound: "0", "256 KiB", ...
  std::string path;       // "staged" or "pinned in place"
  bool slower = false;    // slower than the driver: no longer taken there
  uint64_t path_copies = 0, driver_copies = 0, losses = 0;
  double path_gbps = 0, driver_gbps = 0;  // 0: no figure
};

struct OwnPinningSummary {
  bool optimize_mode = false;        // the trace was recorded in optimize mode
  bool has_counters = false;         // it has a kOptimizeCounters record
  OptimizeCountersEvent counters{};  // the last one
  uint64_t peak_bytes = 0;           // pinned by pinshim
  uint64_t final_bytes = 0;          // at the end of the trace
  bool cap_known = false;
  uint64_t cap_bytes = UINT64_MAX;        // UINT64_MAX: no cap
  uint64_t cache_buffers_registered = 0;  // distinct allocations the cache pinned
  uint64_t cache_copies_pinned = 0;       // copies of tracked pageable buffers run on cached memory
  uint64_t cache_copies_pageable = 0;     // ... run on pageable memory
  // part ("pool", "cache", "arena") -> refusal reason -> times
  std::map<std::string, std::map<std::string, uint64_t>> refusals;
  std::map<std::string, uint64_t> dropped_bytes;  // unpinning reason -> bytes
  std::vector<PageChangeDrop> page_changes;       // most frequent first
  // Copies of pageable memory run through the staging rings.
  uint64_t staged_copies = 0;
  uint64_t staged_bytes = 0;
  uint64_t staged_ns = 0;  // their calls' durations
  uint64_t staged_workers_max = 0;
  // The program's pinned allocations (cuMemHostAlloc and the calls built on
  // it) freed again, as the trace timed the calls: the allocation's, the
  // free's, and the two together per pair (optimize mode: what the pool
  // costs the program). The mean is the time per pair over the run (a
  // fence or a slab now and then included); medians within 1%. All 0 when
  // no pair was seen.
  struct CallTimes {
    uint64_t mean_ns = 0;
    uint64_t median_ns = 0;
  };
  uint64_t pinned_pairs = 0;
  CallTimes pair_ns, pair_alloc_ns, pair_free_ns;
  // The same pairs split: those whose allocation pinned a new pool slab or
  // dedicated allocation (an own-pin record of the pool on its thread during
  // the call), and the others, served from what the pool held.
  uint64_t growth_pairs = 0;
  uint64_t growth_pair_ns = 0;  // their durations, summed
  uint64_t held_pairs = 0;
  CallTimes held_pair_ns;
  std::vector<PathVerdictRow> verdicts;   // the self-check's, by cell
  uint64_t hot_buffers = 0;               // all of them
  std::vector<OwnPinningBuffer> buffers;  // the largest, by bytes copied

  double PoolHitRate() const;   // -1 when the pool served nothing
  double CacheHitRate() const;  // -1 when no tracked pageable buffer was copied
};

// Gathers the section while the analysis replays a process's events.
class OwnPinningTracker {
 public:
  static constexpr size_t kMaxBuffers = 20;

  OwnPinningTracker(const BandwidthModel* model, const RuleOptions* options)
      : model_(model), options_(options) {}

  void Begin(const ProcessInfo& process);
  // A successful copy; `pinned`: the live pinned allocation holding its
  // host side, as the analysis knows it (the program's pool blocks).
  void OnCopy(const Event& e, const PinnedAlloc* pinned);
  void OnHostAlloc(const Event& e);
  // A successful free or unregister of the program's (kPin event);
  // `pinned`: the live allocation or registration it ends, as the analysis
  // knows it (null: made before the trace began).
  void OnUnpin(const Event& e, const PinnedAlloc* pinned);
  // A successful allocation of the program's pinned memory (kPin kAlloc).
  void OnPinnedAlloc(const Event& e);
  void OnOwnPin(const Event& e);
  void OnCounters(const Event& e);
  void OnPathVerdict(const Event& e);

  // The section (sites not yet symbolized).
  OwnPinningSummary Finish();

 private:
  uint64_t counters_time_ns_ = 0;  // of the snapshot in s_.counters
  // The latest verdict per (dir, sync, size class, path), with its time.
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>, std::pair<uint64_t, PathVerdictRow>>
      verdicts_;

  // Which pinned allocations grew the pool: the pool's pinning is recorded
  // during the allocation's call, before the call's own record, on the
  // same thread. Both orders are matched by time.
  struct ThreadPins {
    uint64_t slab_ns = 0;    // the thread's last pool pinning (0: none)
    uint64_t alloc_ptr = 0;  // its last pinned allocation, and the call's span
    uint64_t alloc_start_ns = 0, alloc_end_ns = 0;
  };
  std::unordered_map<uint32_t, ThreadPins> thread_pins_;
  std::unordered_set<uint64_t> grown_;  // live allocations (by address) that grew the pool

  struct Range {
    uint64_t end;
    OwnPinPart part;
    uint64_t alloc_id;
  };
  struct Alloc {
    uint64_t ptr = 0;
    uint64_t bytes = 0;
    uint8_t source = 0;
    uint32_t stack = 0;
  };
  struct Buffer {
    OwnPinningBuffer out;
    double loss = 0;  // what the copies would lose on pageable memory
    uint64_t by_part[static_cast<int>(OwnPinPart::kCount)] = {};
    bool sub_allocation = false;  // copies inside an mmap region not used as one buffer
    std::unordered_map<uint32_t, uint64_t> bytes_by_stack;
  };
  struct IdState {
    bool cached = false;
    uint64_t refusals = 0;
    OwnPinReason last_refusal = OwnPinReason::kNone;
    OwnPinReason last_unpin = OwnPinReason::kNone;
  };

  // Durations in ns, counted in buckets 1/64 of a power of two wide (exact
  // below 128 ns): a median within 1% in 30 KiB, however many calls.
  class Durations {
   public:
    void Add(uint64_t ns);
    uint64_t Median() const;  // 0 when empty
    uint64_t Mean() const { return count_ == 0 ? 0 : sum_ / count_; }
    uint64_t count() const { return count_; }

   private:
    static constexpr int kSub = 64;
    static int Bucket(uint64_t ns);
    static uint64_t Low(int bucket);  // the smallest value of a bucket
    uint64_t count_ = 0;
    uint64_t sum_ = 0;
    uint64_t buckets_[kSub * 2 + kSub * 57] = {};
  };

  const Range* RangeAt(uint64_t addr) const;
  void NotePageChange(const Event& e, const char* action);
  void Classify(Buffer* b) const;

  const BandwidthModel* model_;
  const RuleOptions* options_;
  OwnPinningSummary s_;
  uint64_t page_size_ = 4096;
  uint64_t pinned_now_ = 0;                     // from the events
  std::map<uint64_t, Range> ranges_;            // live pinnings of pinshim's own, by start
  std::unordered_map<uint64_t, Alloc> allocs_;  // tracked host allocations, freed ones kept
  std::unordered_map<uint64_t, Buffer> buffers_;
  std::unordered_map<uint64_t, IdState> ids_;  // cache actions by allocation id
  std::map<std::tuple<std::string, std::string, uint32_t>, PageChangeDrop> page_changes_;
  Durations pair_ns_, pair_alloc_ns_, pair_free_ns_, held_pair_ns_;
};

// Words for the reasons: "evicted for the cap", "the pin cap was full", ...
std::string OwnDropWords(const std::string& reason);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_OWN_PINNING_H_
