// Per call site tables of one process, for `pinshim export`: the copies made
// at each stack by direction and host memory kind, the pinned allocations
// made there, and the process's pinned memory over time in a bounded number
// of buckets. Filled during the analysis's replay (analysis.cc), keyed by
// stack id; SiteKey names a site the same way in every process and host.
#ifndef PINSHIM_ANALYZER_REPORT_SITE_TABLE_H_
#define PINSHIM_ANALYZER_REPORT_SITE_TABLE_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/report/finding.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

constexpr int kCopyDirs = 4;
constexpr int kMemKinds = static_cast<int>(MemKind::kCount);

struct CopyCell {
  uint64_t copies = 0;  // failed ones included
  uint64_t failed = 0;
  uint64_t bytes = 0;  // of the copies that succeeded
  uint64_t async_copies = 0;
  uint64_t call_ns = 0;  // time in the copy calls
};

struct PinCell {
  uint64_t allocations = 0;  // cuMemHostAlloc and the like
  uint64_t registrations = 0;
  uint64_t failed = 0;
  uint64_t bytes = 0;  // allocated and registered, succeeded
  uint64_t largest = 0;
  uint64_t call_ns = 0;
};

struct CallSiteStats {
  CopyCell copy[kCopyDirs][kMemKinds];  // [CopyDir][host kind; device for D2D]
  PinCell pin;
  Site site;             // filled by Resolve
  std::string key;       // SiteKey of `site`, "" for an unknown site
  std::string build_id;  // hex, of the site frame's module; "" none
};

class CallSiteTable {
 public:
  // A copy event, failed or not.
  void OnCopy(const Event& e);
  // An allocation or registration of page-locked memory, failed or not.
  void OnPin(const Event& e);
  // A stack a finding names, so that it gets a key even without copies or
  // pinnings of its own.
  void Mention(uint32_t stack) { stacks_[stack]; }
  // Counts recorded in aggregate rather than event by event (a trace past
  // its size cap): added to the cell of `stack`, `dir` and `kind`.
  void AddCopies(uint32_t stack, CopyDir dir, MemKind kind, const CopyCell& counts);

  // Symbolizes every stack in the table and gives each its key. `resolve`
  // maps a stack id to its site.
  template <typename F>
  void Resolve(const TraceReader& trace, F resolve);

  const std::unordered_map<uint32_t, CallSiteStats>& stacks() const { return stacks_; }

 private:
  std::unordered_map<uint32_t, CallSiteStats> stacks_;
};

// A site's identity across processes and hosts: "n" and 16 hex digits of
// the hash of the site frame's module build id and offset (a native frame;
// its file and line join in for an inlined frame, which shares the
// address), "y" and the hash of file:line for a Python frame, "m" and the
// hash of module name and offset for a module without a build id; "" for
// an unknown site. `build_id_hex` is the module's, "" when none.
std::string SiteKey(const Site& site, const std::string& build_id_hex);

// A prefix letter and 16 hex digits of the SHA-256 of `text`: the form of
// every key in the export's tables.
std::string ShortHash(char kind, const std::string& text);

// The build id (hex) of the module holding the site frame of `site`, whose
// stack is `stack` in `trace`; "" when unknown.
std::string SiteBuildId(const TraceReader& trace, uint32_t stack, const Site& site);

// Pinned bytes over a process's life, sampled: each bucket keeps the
// largest value seen in it, and when there would be more than kMaxBuckets
// neighbours are merged and the width doubles, so memory stays bounded
// whatever the trace's length.
class PinnedSeries {
 public:
  static constexpr size_t kMaxBuckets = 64;

  // `origin_ns`: the process's start (monotonic).
  void Begin(uint64_t origin_ns) { origin_ = origin_ns; }
  void Note(uint64_t time_ns, uint64_t bytes);

  // (start of the bucket in ns since the origin, largest bytes), in time order.
  std::vector<std::pair<uint64_t, uint64_t>> Points() const;
  uint64_t width_ns() const { return width_; }

 private:
  uint64_t origin_ = 0;
  uint64_t width_ = 1000000;   // 1 ms, doubled as needed
  std::vector<uint64_t> max_;  // per bucket; 0 is also "nothing seen"
  std::vector<bool> seen_;
};

template <typename F>
void CallSiteTable::Resolve(const TraceReader& trace, F resolve) {
  for (auto& kv : stacks_) {
    if (kv.first == 0) continue;
    kv.second.site = resolve(kv.first);
    kv.second.build_id = SiteBuildId(trace, kv.first, kv.second.site);
    kv.second.key = SiteKey(kv.second.site, kv.second.build_id);
  }
}

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_SITE_TABLE_H_
