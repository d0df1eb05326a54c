// over-pinning (error): more memory pinned than the machine can spare. Any of:
// pinned bytes above the process's budget or above a share of physical memory
// (default 25%); a single pinned allocation above that share; pinned bytes
// near RLIMIT_MEMLOCK; swap activity while much memory was pinned (pinned
// pages cannot be paged out, so everything else pages harder).
//
// RLIMIT_MEMLOCK counts only when someone configured it (1 GiB or more): the
// small system defaults (64 KiB, 8 MiB) are not charged for CUDA's own
// pinning, while a configured limit is what RDMA registration of the same
// memory runs into.
#include <algorithm>
#include <memory>
#include <unordered_map>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

std::string Percent(double part, double whole) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.0f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

class OverPinning : public Rule {
 public:
  const char* id() const override { return "over-pinning"; }

  void Begin(const ProcessInfo& p) override {
    // Without the machine's size, swapping cannot be weighed against pinning.
    swap_threshold_ = p.physical_bytes == 0
                          ? UINT64_MAX
                          : static_cast<uint64_t>(options_->swap_pinned_share *
                                                  static_cast<double>(p.physical_bytes));
  }

  void OnPin(const Event& e, const PinnedAlloc& a) override {
    // A range pinned again without a release in the trace replaces the old one.
    auto old = live_.find(a.ptr);
    if (old != live_.end()) Forget(old);
    live_[a.ptr] = Live{a.bytes, a.stack, 1};
    Live& site = by_site_[a.stack];
    site.bytes += a.bytes;
    site.stack = a.stack;
    ++site.count;
    pinned_ += a.bytes;
    if (a.bytes > largest_bytes_) {
      largest_bytes_ = a.bytes;
      largest_stack_ = a.stack;
    }
    if (pinned_ > peak_) {
      peak_ = pinned_;
      peak_ns_ = e.time_ns;
      // Which sites hold the memory: taken again only when the peak has grown
      // by a percent, so a trace that pins ever more stays linear.
      if (pinned_ > snapshot_peak_ + snapshot_peak_ / 100 || top_at_peak_.empty()) {
        snapshot_peak_ = pinned_;
        SnapshotTop();
      }
    }
  }

  void OnUnpin(const Event&, const PinnedAlloc* a) override {
    if (a == nullptr) return;
    auto it = live_.find(a->ptr);
    if (it != live_.end()) Forget(it);
  }

  void OnSample(const Event& e) override {
    uint64_t pinned = e.pinned_program + e.registered_program + e.pinned_pinshim;
    if (pinned > sampled_peak_) sampled_peak_ = pinned;
    if (e.budget_bytes != 0) budget_ = e.budget_bytes;
    if (have_sample_ && (e.swap_ins > last_swap_in_ || e.swap_outs > last_swap_out_)) {
      uint64_t pages = (e.swap_ins - std::min(e.swap_ins, last_swap_in_)) +
                       (e.swap_outs - std::min(e.swap_outs, last_swap_out_));
      if (pinned >= swap_threshold_) {
        swap_pages_ += pages;
        if (pinned > swap_pinned_) swap_pinned_ = pinned;
        if (swap_first_ns_ == 0) swap_first_ns_ = e.time_ns;
      }
    }
    have_sample_ = true;
    last_swap_in_ = e.swap_ins;
    last_swap_out_ = e.swap_outs;
  }

  void Finish(const RuleContext& ctx, std::vector<Finding>* out) override {
    const ProcessInfo& p = *ctx.process;
    double share = ctx.options->pinned_share_of_memory;
    uint64_t peak = std::max(peak_, sampled_peak_);
    uint64_t budget = p.budget_bytes != 0 ? p.budget_bytes : budget_;
    double phys = static_cast<double>(p.physical_bytes);
    std::vector<std::string> reasons;
    Value evidence = Value::Object();
    evidence.Set("peak_pinned", Value::Bytes(peak));
    if (peak_ns_ != 0 && p.start_monotonic_ns != 0 && peak_ns_ >= p.start_monotonic_ns) {
      evidence.Set("peak_at", Value::Seconds((peak_ns_ - p.start_monotonic_ns) * 1e-9));
    }
    if (p.physical_bytes) evidence.Set("physical_memory", Value::Bytes(p.physical_bytes));
    if (budget != 0 && peak > budget) {
      reasons.push_back("pinned memory peaked at " + FormatBytes(peak) + ", above the budget of " +
                        FormatBytes(budget));
      evidence.Set("budget", Value::Bytes(budget));
    }
    if (phys > 0 && peak > share * phys) {
      reasons.push_back("pinned memory peaked at " + FormatBytes(peak) + ", " +
                        Percent(static_cast<double>(peak), phys) +
                        " of physical memory (more than " + Percent(share, 1) + ")");
    }
    if (phys > 0 && largest_bytes_ > share * phys) {
      reasons.push_back("a single pinned allocation of " + FormatBytes(largest_bytes_) + " is " +
                        Percent(static_cast<double>(largest_bytes_), phys) + " of physical memory");
      evidence.Set("largest_allocation", Value::Bytes(largest_bytes_));
    }
    if (p.memlock_limit != UINT64_MAX && p.memlock_limit >= ctx.options->memlock_configured &&
        peak >= ctx.options->memlock_near * static_cast<double>(p.memlock_limit)) {
      reasons.push_back("pinned memory reached " + FormatBytes(peak) + ", " +
                        Percent(static_cast<double>(peak), static_cast<double>(p.memlock_limit)) +
                        " of RLIMIT_MEMLOCK (" + FormatBytes(p.memlock_limit) + ")");
      evidence.Set("memlock_limit", Value::Bytes(p.memlock_limit));
    }
    if (swap_pages_ > 0) {
      reasons.push_back("the system swapped " + FormatCount(swap_pages_) +
                        " pages while this process had " + FormatBytes(swap_pinned_) + " pinned");
      evidence.Set("swapped_pages", Value::Int(static_cast<int64_t>(swap_pages_)))
          .Set("pinned_while_swapping", Value::Bytes(swap_pinned_));
    }
    if (reasons.empty()) return;
    Value top = Value::Array();
    for (const Live& l : top_at_peak_) {
      top.Push(Value::Object()
                   .Set("allocations", Value::Int(static_cast<int64_t>(l.count)))
                   .Set("bytes", Value::Bytes(l.bytes))
                   .Set("allocated_at", Value::SiteOf(l.stack)));
    }
    evidence.Set("pinned_at_peak_by_site", std::move(top));
    Finding f;
    f.rule = id();
    f.severity = Severity::kError;
    f.stack = !top_at_peak_.empty() ? top_at_peak_[0].stack : largest_stack_;
    std::string text;
    for (size_t i = 0; i < reasons.size(); ++i) text += (i ? "; " : "") + reasons[i];
    f.explanation = "Too much memory is pinned: " + text +
                    ". Pinned pages cannot be paged out, so the rest of the system runs short.";
    f.evidence = std::move(evidence);
    f.fix =
        "Pin less at a time: copy through a bounded set of reused pinned staging buffers "
        "instead of pinning whole datasets, free pinned buffers when done, or cap pinning "
        "with pinshim's enforce mode (pinshim run --mode enforce --budget SIZE, or "
        "PINSHIM_MODE=enforce PINSHIM_BUDGET=SIZE).";
    out->push_back(std::move(f));
  }

 private:
  struct Live {
    uint64_t bytes = 0;
    uint32_t stack = 0;
    uint64_t count = 0;
  };

  void Forget(std::unordered_map<uint64_t, Live>::iterator it) {
    pinned_ -= std::min(pinned_, it->second.bytes);
    auto site = by_site_.find(it->second.stack);
    if (site != by_site_.end()) {
      site->second.bytes -= std::min(site->second.bytes, it->second.bytes);
      if (--site->second.count == 0) by_site_.erase(site);
    }
    live_.erase(it);
  }

  // The sites holding the most pinned memory now, largest first.
  void SnapshotTop() {
    top_at_peak_.clear();
    for (const auto& kv : by_site_) top_at_peak_.push_back(kv.second);
    size_t keep = std::min<size_t>(3, top_at_peak_.size());
    std::partial_sort(top_at_peak_.begin(), top_at_peak_.begin() + keep, top_at_peak_.end(),
                      [](const Live& a, const Live& b) {
                        return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack;
                      });
    top_at_peak_.resize(keep);
  }

  std::unordered_map<uint64_t, Live> live_;     // by address
  std::unordered_map<uint32_t, Live> by_site_;  // live bytes per allocation site
  std::vector<Live> top_at_peak_;
  uint64_t snapshot_peak_ = 0;
  uint64_t pinned_ = 0;
  uint64_t peak_ = 0;
  uint64_t peak_ns_ = 0;
  uint64_t sampled_peak_ = 0;
  uint64_t largest_bytes_ = 0;
  uint32_t largest_stack_ = 0;
  uint64_t budget_ = 0;
  bool have_sample_ = false;
  uint64_t last_swap_in_ = 0;
  uint64_t last_swap_out_ = 0;
  uint64_t swap_threshold_ = UINT64_MAX;
  uint64_t swap_pages_ = 0;
  uint64_t swap_pinned_ = 0;
  uint64_t swap_first_ns_ = 0;
};

}  // namespace

std::unique_ptr<Rule> NewOverPinningRule() { return std::make_unique<OverPinning>(); }

}  // namespace report
}  // namespace pinshim
