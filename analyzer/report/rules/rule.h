// A misuse rule: one unit per file in this folder. The analysis replays a
// process's events in time order; it keeps the live pinned and host
// allocations and hands each rule every event together with what the event
// refers to. At the end each rule turns what it gathered into findings.
#ifndef PINSHIM_ANALYZER_REPORT_RULES_RULE_H_
#define PINSHIM_ANALYZER_REPORT_RULES_RULE_H_

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "analyzer/report/bandwidth_model.h"
#include "analyzer/report/finding.h"
#include "analyzer/report/sync_model.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

// Thresholds of the rules; defaults are what the report uses.
struct RuleOptions {
  uint32_t pageable_hot_min_copies = 4;      // copies from one site
  double pageable_hot_min_seconds = 1e-3;    // estimated loss at one site
  uint32_t sync_loop_min_copies = 64;        // synchronous copies from one site
  uint64_t small_copy_bytes = 64 * 1024;     // "small" is below this
  uint32_t small_copies_min = 100;           // small copies from one site
  double pinned_share_of_memory = 0.25;      // of physical memory
  double memlock_near = 0.9;                 // share of RLIMIT_MEMLOCK
  uint64_t memlock_configured = 1ull << 30;  // smaller limits are unconfigured defaults
  double swap_pinned_share = 0.10;           // pinned share that makes swapping suspect
  uint32_t churn_min_cycles = 4;             // allocate+free at one site
  uint64_t unused_min_bytes = 64 * 1024;     // smaller pinned buffers are ignored
  double rarely_used_min_lifetime_s = 1.0;   // "rarely": <= 2 copies over at least this
};

// A live pinned allocation or registration.
struct PinnedAlloc {
  uint64_t seq = 0;  // order of creation in the trace
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  uint32_t flags = 0;
  bool registered = false;  // cuMemHostRegister rather than an allocation
  uint32_t stack = 0;
  int32_t device = -1;
  uint64_t time_ns = 0;
  uint64_t call_ns = 0;  // time spent in the allocating call
  uint64_t copies = 0;   // copies whose host side lies inside
  uint64_t copy_bytes = 0;
  bool WriteCombined() const { return !registered && (flags & trace::kPinFlagWriteCombined); }
};

// HostAlloc::source, as kHostAlloc events record it.
constexpr uint8_t kHostAllocMalloc = 0;  // the malloc family
constexpr uint8_t kHostAllocMmap = 1;

// A live tracked host allocation (malloc family or mmap).
struct HostAlloc {
  uint64_t id = 0;
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  uint32_t stack = 0;
  uint64_t time_ns = 0;
  uint8_t source = kHostAllocMalloc;
};

// Enforce mode's budget decisions in one process (kBudgetDecision events).
struct BudgetSummary {
  uint64_t decisions = 0;  // 0: enforce mode recorded none
  uint64_t granted = 0;
  uint64_t denied = 0;
  uint64_t fallback = 0;
  uint64_t evictions = 0;  // decisions that ran the evictor
  uint64_t evicted_bytes = 0;
  uint64_t refused_bytes = 0;  // asked for by denied and fallback decisions
  // The budgets as the last decision saw them (0: none).
  uint64_t process_budget = 0;
  uint64_t node_budget = 0;
};

// Per process totals, for headers and for rules that need the whole picture.
struct ProcessSummary {
  uint64_t copies = 0;
  uint64_t failed_copies = 0;
  // [CopyDir][MemKind of the host side; device for D2D]
  uint64_t bytes[4][static_cast<int>(MemKind::kCount)] = {};
  uint64_t copy_count[4][static_cast<int>(MemKind::kCount)] = {};
  uint64_t pinned_now = 0;   // program allocations + registrations, from pin events
  uint64_t peak_pinned = 0;  // the larger of that and sampled totals (pinshim's included)
  uint64_t peak_pinned_ns = 0;
  uint64_t peak_rss = 0;
  uint64_t pin_calls = 0;
  uint64_t pin_call_ns = 0;
  uint64_t samples = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
  uint32_t threads = 0;
  BudgetSummary budget;
};

struct RuleContext;

// Whether the process ran with optimize mode on (its trace header's mode).
bool OptimizeModeWasOn(const RuleContext& ctx);

struct RuleContext {
  const ProcessInfo* process;
  const BandwidthModel* model;
  const RuleOptions* options;
  const ProcessSummary* summary;
  const TraceReader* trace;
  uint64_t end_ns;  // time of the last event
};

class Rule {
 public:
  virtual ~Rule() = default;
  // The rule id, e.g. "pageable-hot".
  virtual const char* id() const = 0;

  // Before Begin: the model of which queued copies have finished, updated
  // with each event before the rules see it ("model" outlives the rule).
  void UseSyncModel(const SyncModel* model) { sync_ = model; }

  // Before the first event.
  virtual void Begin(const ProcessInfo& process) {}
  // A successful copy; `pinned` is the live pinned allocation holding its
  // host side (null if none), `host` the tracked allocation (null if none).
  virtual void OnCopy(const Event& e, const PinnedAlloc* pinned, const HostAlloc* host) {}
  // A pinned allocation or registration succeeded.
  virtual void OnPin(const Event& e, const PinnedAlloc& a) {}
  // A pinned free or unregistration succeeded; `a` is what it released
  // (null when the trace never saw it created), still intact.
  virtual void OnUnpin(const Event& e, const PinnedAlloc* a) {}
  virtual void OnHostAlloc(const Event& e, const HostAlloc& a) {}
  // `a` is the allocation released (null when untracked), still intact.
  virtual void OnHostFree(const Event& e, const HostAlloc* a) {}
  virtual void OnSync(const Event& e) {}
  // `owner`: the pinned allocation holding e.ptr, if any.
  virtual void OnMisuse(const Event& e, const PinnedAlloc* owner) {}
  virtual void OnSample(const Event& e) {}
  // A decision of enforce mode's budget, granted ones included.
  virtual void OnBudgetDecision(const Event& e) {}
  // Copies counted per site after a capped trace's detail ended
  // (kSiteTotals), successful ones only, after every event. Rules that
  // take them return true from UsesSiteTotals; the others judged the
  // detail only, which the report says.
  virtual void OnCopyTotals(const trace::SiteCellFields& cell) {}
  virtual bool UsesSiteTotals() const { return false; }
  // Pinned allocations still live when the trace ends at `end_ns`.
  virtual void OnEnd(const std::vector<const PinnedAlloc*>& still_pinned, uint64_t end_ns) {}

  // Appends this rule's findings.
  virtual void Finish(const RuleContext& ctx, std::vector<Finding>* out) = 0;

  // "model" and "options" must outlive the rule.
  void Configure(const BandwidthModel* model, const RuleOptions* options) {
    model_ = model;
    options_ = options;
  }

 protected:
  const BandwidthModel* model_ = nullptr;
  const RuleOptions* options_ = nullptr;
  const SyncModel* sync_ = nullptr;
};

// One factory per rule (rules/<rule>.cc).
std::unique_ptr<Rule> NewPageableHotRule();
std::unique_ptr<Rule> NewAsyncPageableRule();
std::unique_ptr<Rule> NewSyncCopyLoopRule();
std::unique_ptr<Rule> NewSmallCopiesRule();
std::unique_ptr<Rule> NewWcReadRule();
std::unique_ptr<Rule> NewOverPinningRule();
std::unique_ptr<Rule> NewPinnedChurnRule();
std::unique_ptr<Rule> NewPinnedUnusedRule();
std::unique_ptr<Rule> NewFreeInFlightRule();
std::unique_ptr<Rule> NewCopyRaceRule();
std::unique_ptr<Rule> NewNonPortableRule();
std::unique_ptr<Rule> NewBudgetRefusedRule();

// Every rule, in documentation order, configured. "model" and "options"
// must outlive the rules.
std::vector<std::unique_ptr<Rule>> MakeAllRules(const BandwidthModel* model,
                                                const RuleOptions* options);

// Per-call-site accumulators keyed by stack id; remembers the last key
// because loops hit one site many times in a row.
template <typename T>
class SiteTable {
 public:
  T& operator[](uint32_t stack) {
    if (last_ != nullptr && last_key_ == stack) return *last_;
    T& v = map_[stack];
    last_key_ = stack;
    last_ = &v;
    return v;
  }
  // Iteration order is unspecified; rules sort what they report.
  typename std::unordered_map<uint32_t, T>::iterator begin() { return map_.begin(); }
  typename std::unordered_map<uint32_t, T>::iterator end() { return map_.end(); }
  size_t size() const { return map_.size(); }

 private:
  std::unordered_map<uint32_t, T> map_;
  uint32_t last_key_ = 0;
  T* last_ = nullptr;
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_RULES_RULE_H_
