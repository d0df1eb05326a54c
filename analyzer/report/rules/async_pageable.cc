// async-pageable (warning): an asynchronous copy to or from pageable memory.
// The driver performs it synchronously (measured on the H200: a large
// pageable cudaMemcpyAsync returns after the whole copy, a pinned one at
// once; bench/RESULTS.md, "Synchronization and asynchronous pageable
// copies"), so the caller's intended overlap does not happen.
#include <memory>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

// What a truly asynchronous (pinned) copy call costs the caller.
constexpr double kAsyncCallSeconds = 16e-6;

class AsyncPageable : public Rule {
 public:
  const char* id() const override { return "async-pageable"; }

  void OnCopy(const Event& e, const PinnedAlloc*, const HostAlloc*) override {
    if (!e.async || !e.IsHostDeviceCopy() || e.HostKind() != MemKind::kPageable) return;
    SiteStats& s = sites_[e.stack];
    if (s.calls == 0) {
      s.api = e.api;
      s.dir = e.dir;
    }
    ++s.calls;
    s.bytes += e.bytes;
    s.call_ns += e.duration_ns;
    double blocked = e.duration_ns * 1e-9 - kAsyncCallSeconds;
    if (blocked > 0) s.lost += blocked;
  }

  // The time blocked, per size class: the calls' time less the cost of
  // truly asynchronous calls, as a whole.
  void OnCopyTotals(const trace::SiteCellFields& c) override {
    const CopyDir dir = static_cast<CopyDir>(c.bits & trace::kCopyDirMask);
    const MemKind host =
        static_cast<MemKind>(dir == CopyDir::kDeviceToHost ? (c.kinds >> 3) & 7 : c.kinds & 7);
    if (!(c.bits & trace::kCopyAsync) || host != MemKind::kPageable ||
        (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost)) {
      return;
    }
    SiteStats& s = sites_[static_cast<uint32_t>(c.stack)];
    if (s.calls == 0) {
      s.api = static_cast<uint32_t>(c.api);
      s.dir = dir;
    }
    s.calls += c.copies;
    s.bytes += c.bytes;
    s.call_ns += c.call_ns;
    const double blocked = c.call_ns * 1e-9 - static_cast<double>(c.copies) * kAsyncCallSeconds;
    if (blocked > 0) s.lost += blocked;
  }
  bool UsesSiteTotals() const override { return true; }

  void Finish(const RuleContext& ctx, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      std::string api = ctx.trace->ApiName(s.api);
      if (api.empty()) api = "an asynchronous copy";
      Finding f;
      f.rule = id();
      f.severity = Severity::kWarning;
      f.stack = kv.first;
      f.loss_in_copies = true;
      f.seconds_lost = s.lost;
      f.explanation = api + " (" + DirectionWords(s.dir) + ", " + FormatCount(s.calls) +
                      (s.calls == 1 ? " call" : " calls") +
                      ") uses pageable memory, so the driver runs it synchronously: the calling "
                      "thread waited " +
                      FormatSeconds(s.call_ns * 1e-9) +
                      " in it instead of overlapping the transfer with other work.";
      f.evidence.Set("api", Value::String(api))
          .Set("direction", Value::String(CopyDirName(s.dir)))
          .Set("calls", Value::Int(static_cast<int64_t>(s.calls)))
          .Set("bytes", Value::Bytes(s.bytes))
          .Set("time_in_calls", Value::Seconds(s.call_ns * 1e-9));
      f.fix =
          "Make the host buffer pinned (cudaMallocHost/cudaHostAlloc, or cudaHostRegister "
          "once) so the copy is really asynchronous and returns at once; if no overlap is "
          "intended, call the synchronous cudaMemcpy and say so.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint32_t api = 0;
    CopyDir dir = CopyDir::kHostToDevice;
    uint64_t calls = 0;
    uint64_t bytes = 0;
    uint64_t call_ns = 0;
    double lost = 0;
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewAsyncPageableRule() { return std::make_unique<AsyncPageable>(); }

}  // namespace report
}  // namespace pinshim
