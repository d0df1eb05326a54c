// pinned-unused (warning): pinned memory that no copy, or almost none, ever
// used. Pinned pages are taken from what the system can page, for nothing.
// Allocations are grouped by site and weighed by bytes times lifetime; the
// time estimate is what pinning and unpinning them cost. Allocations made
// with the device-map flag are left out: kernels may read them directly,
// which pinshim does not see.
#include <algorithm>
#include <cmath>
#include <memory>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

class PinnedUnused : public Rule {
 public:
  const char* id() const override { return "pinned-unused"; }

  void OnUnpin(const Event& e, const PinnedAlloc* a) override {
    if (a != nullptr) Judge(*a, e.time_ns, e.duration_ns, false);
  }

  void OnEnd(const std::vector<const PinnedAlloc*>& live, uint64_t end_ns) override {
    for (const PinnedAlloc* a : live) Judge(*a, end_ns, 0, true);
  }

  void Finish(const RuleContext&, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      if (s.allocations == 0) continue;
      Finding f;
      f.rule = id();
      f.severity = Severity::kWarning;
      f.stack = kv.first;
      f.seconds_lost = s.call_ns * 1e-9;
      std::string use = s.copies == 0 ? "never used by a copy"
                                      : "used by only " + FormatCount(s.copies) +
                                            (s.copies == 1 ? " copy" : " copies");
      f.explanation =
          FormatCount(s.allocations) + " pinned " +
          (s.allocations == 1 ? "allocation" : "allocations") + " of " + FormatBytes(s.bytes) +
          " made here " + (s.allocations == 1 ? "was " : "were ") + use + " while pinned for " +
          FormatSeconds(s.lifetime_s) + (s.live_at_end ? " (some still pinned at the end)" : "") +
          "; the pinned pages were kept from the rest of the system for nothing.";
      double gib_seconds = std::round(s.byte_seconds / (1024.0 * 1024.0 * 1024.0) * 1000) / 1000;
      f.evidence.Set("allocations", Value::Int(static_cast<int64_t>(s.allocations)))
          .Set("bytes", Value::Bytes(s.bytes))
          .Set("copies", Value::Int(static_cast<int64_t>(s.copies)))
          .Set("pinned_for", Value::Seconds(s.lifetime_s))
          .Set("gib_seconds", Value::Double(gib_seconds))
          .Set("time_pinning", Value::Seconds(s.call_ns * 1e-9));
      f.fix =
          "Do not pin memory that no transfer uses: allocate it with malloc, or pin only the "
          "staging buffer that copies go through. If kernels read it directly (zero-copy), "
          "allocate it with cudaHostAllocMapped so that intent is visible.";
      out->push_back(std::move(f));
    }
  }

 private:
  // Decides about one allocation, released (or seen last) at end_ns.
  void Judge(const PinnedAlloc& a, uint64_t end_ns, uint64_t release_ns, bool at_end) {
    if (a.bytes < options_->unused_min_bytes || (a.flags & trace::kPinFlagDeviceMap)) return;
    double lifetime = (end_ns - std::min(end_ns, a.time_ns)) * 1e-9;
    bool unused = a.copies == 0;
    bool rarely = a.copies <= 2 && lifetime >= options_->rarely_used_min_lifetime_s;
    if (!unused && !rarely) return;
    SiteStats& s = sites_[a.stack];
    ++s.allocations;
    s.bytes += a.bytes;
    s.copies += a.copies;
    s.lifetime_s += lifetime;
    s.byte_seconds += static_cast<double>(a.bytes) * lifetime;
    s.call_ns += a.call_ns + release_ns;
    if (at_end) s.live_at_end = true;
  }

  struct SiteStats {
    uint64_t allocations = 0;
    uint64_t bytes = 0;
    uint64_t copies = 0;
    double lifetime_s = 0;
    double byte_seconds = 0;
    uint64_t call_ns = 0;
    bool live_at_end = false;
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewPinnedUnusedRule() { return std::make_unique<PinnedUnused>(); }

}  // namespace report
}  // namespace pinshim
