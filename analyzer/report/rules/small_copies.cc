// small-copies (info): many copies under 64 KiB from one site. Below that
// size a transfer is dominated by its fixed cost (on the H200, pinned or not:
// bench/RESULTS.md, "The cost model's table"), so batching them is what
// helps. The estimate: the time spent in the calls, less one copy of all
// their bytes at the pinned bandwidth of that total size.
#include <algorithm>
#include <memory>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

class SmallCopies : public Rule {
 public:
  const char* id() const override { return "small-copies"; }

  void OnCopy(const Event& e, const PinnedAlloc*, const HostAlloc*) override {
    if (!e.IsHostDeviceCopy() || e.bytes >= options_->small_copy_bytes) return;
    SiteStats& s = sites_[e.stack];
    ++s.copies;
    s.bytes += e.bytes;
    s.call_ns += e.duration_ns;
    ++s.by_dir[e.dir == CopyDir::kDeviceToHost ? 1 : 0];
  }

  void OnCopyTotals(const trace::SiteCellFields& c) override {
    const CopyDir dir = static_cast<CopyDir>(c.bits & trace::kCopyDirMask);
    if ((dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) || c.copies == 0 ||
        c.bytes / c.copies >= options_->small_copy_bytes) {
      return;
    }
    SiteStats& s = sites_[static_cast<uint32_t>(c.stack)];
    s.copies += c.copies;
    s.bytes += c.bytes;
    s.call_ns += c.call_ns;
    s.by_dir[dir == CopyDir::kDeviceToHost ? 1 : 0] += c.copies;
  }
  bool UsesSiteTotals() const override { return true; }

  void Finish(const RuleContext& ctx, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      if (s.copies < ctx.options->small_copies_min) continue;
      CopyDir dir = s.by_dir[1] > s.by_dir[0] ? CopyDir::kDeviceToHost : CopyDir::kHostToDevice;
      uint64_t batch = std::min<uint64_t>(s.bytes, 16ull << 20);
      double batched = static_cast<double>(s.bytes) / ctx.model->BytesPerSecond(dir, true, batch);
      double lost = s.call_ns * 1e-9 - batched;
      Finding f;
      f.rule = id();
      f.severity = Severity::kInfo;
      f.stack = kv.first;
      f.loss_in_copies = true;
      f.seconds_lost = lost > 0 ? lost : 0;
      f.explanation = FormatCount(s.copies) + " copies smaller than " +
                      FormatBytes(ctx.options->small_copy_bytes) + " (" +
                      FormatBytes(s.bytes / s.copies) + " on average) go " + DirectionWords(dir) +
                      " from this site; each pays the fixed cost of a transfer, " +
                      FormatSeconds(s.call_ns * 1e-9) + " for " + FormatBytes(s.bytes) + " in all.";
      f.evidence.Set("copies", Value::Int(static_cast<int64_t>(s.copies)))
          .Set("bytes", Value::Bytes(s.bytes))
          .Set("average_copy", Value::Bytes(s.bytes / s.copies))
          .Set("time_in_calls", Value::Seconds(s.call_ns * 1e-9))
          .Set("time_if_batched", Value::Seconds(batched));
      f.fix =
          "Gather the pieces into one contiguous (pinned) buffer and copy it once per step, "
          "or submit them together with cudaMemcpyBatchAsync (cudaMemcpy2DAsync for evenly "
          "strided pieces).";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint64_t copies = 0;
    uint64_t bytes = 0;
    uint64_t call_ns = 0;
    uint64_t by_dir[2] = {0, 0};
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewSmallCopiesRule() { return std::make_unique<SmallCopies>(); }

}  // namespace report
}  // namespace pinshim
