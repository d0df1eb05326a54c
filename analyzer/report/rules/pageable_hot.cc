// pageable-hot (warning): pageable memory copied repeatedly between host and
// device, by site and by buffer, with the time lost against pinned memory
// estimated from the bandwidth model.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <unordered_map>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

class PageableHot : public Rule {
 public:
  const char* id() const override { return "pageable-hot"; }

  void OnCopy(const Event& e, const PinnedAlloc*, const HostAlloc* host) override {
    if (!e.IsHostDeviceCopy() || e.HostKind() != MemKind::kPageable) return;
    SiteStats& s = sites_[e.stack];
    ++s.copies;
    s.bytes += e.bytes;
    s.lost += Loss(e.dir, e.bytes);
    s.call_ns += e.duration_ns;
    ++s.by_dir[e.dir == CopyDir::kDeviceToHost ? 1 : 0];
    // Buffers: the tracked allocation, else the address itself.
    uint64_t key = host != nullptr ? host->id : (e.host_ptr | (1ull << 63));
    if (s.last_buffer == nullptr || s.last_key != key) {
      s.last_key = key;
      s.last_buffer = &s.buffers[key];
      if (host != nullptr && s.last_buffer->copies == 0) {
        s.last_buffer->alloc_id = host->id;
        s.last_buffer->alloc_stack = host->stack;
        s.last_buffer->alloc_bytes = host->bytes;
      }
    }
    ++s.last_buffer->copies;
    s.last_buffer->bytes += e.bytes;
  }

  // Totals of one size class: their loss at their average size.
  void OnCopyTotals(const trace::SiteCellFields& c) override {
    const CopyDir dir = static_cast<CopyDir>(c.bits & trace::kCopyDirMask);
    const MemKind host =
        static_cast<MemKind>(dir == CopyDir::kDeviceToHost ? (c.kinds >> 3) & 7 : c.kinds & 7);
    if ((dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) ||
        host != MemKind::kPageable || c.copies == 0) {
      return;
    }
    SiteStats& s = sites_[static_cast<uint32_t>(c.stack)];
    s.copies += c.copies;
    s.bytes += c.bytes;
    s.lost += static_cast<double>(c.copies) * Loss(dir, c.bytes / c.copies);
    s.call_ns += c.call_ns;
    s.by_dir[dir == CopyDir::kDeviceToHost ? 1 : 0] += c.copies;
  }
  bool UsesSiteTotals() const override { return true; }

  void Finish(const RuleContext& ctx, std::vector<Finding>* out) override {
    const BandwidthModel& m = *ctx.model;
    for (auto& kv : sites_) {
      SiteStats& s = kv.second;
      if (s.copies < ctx.options->pageable_hot_min_copies ||
          s.lost < ctx.options->pageable_hot_min_seconds) {
        continue;
      }
      CopyDir dir = s.by_dir[1] > s.by_dir[0] ? CopyDir::kDeviceToHost : CopyDir::kHostToDevice;
      uint64_t typical = s.bytes / s.copies;
      double pageable_bw = m.BytesPerSecond(dir, false, typical);
      double pinned_bw = m.BytesPerSecond(dir, true, typical);
      double gain_per_copy = m.PageableLoss(dir, typical);
      double payoff = gain_per_copy > 0 ? m.RegisterSeconds(typical) / gain_per_copy : 0;

      std::vector<Buffer*> buffers;
      for (auto& b : s.buffers) buffers.push_back(&b.second);
      std::sort(buffers.begin(), buffers.end(), [](const Buffer* a, const Buffer* b) {
        return a->bytes != b->bytes ? a->bytes > b->bytes : a->alloc_id < b->alloc_id;
      });
      Finding f;
      f.rule = id();
      f.severity = Severity::kWarning;
      f.stack = kv.first;
      f.loss_in_copies = true;
      f.seconds_lost = s.lost;
      const char* words =
          s.by_dir[0] && s.by_dir[1] ? "between host and device" : DirectionWords(dir);
      f.explanation = "Pageable memory is copied " + std::string(words) + " " +
                      FormatCount(s.copies) + " times (" + FormatBytes(s.bytes) +
                      ") from this site, at about " + FormatGbps(pageable_bw) +
                      " where pinned memory reaches " + FormatGbps(pinned_bw) + ".";
      Value list = Value::Array();
      const Buffer* top_tracked = nullptr;
      for (size_t i = 0; i < buffers.size() && i < 5; ++i) {
        const Buffer& b = *buffers[i];
        Value v = Value::Object();
        if (b.alloc_id != 0) {
          v.Set("allocation", Value::Int(static_cast<int64_t>(b.alloc_id)));
          v.Set("size", Value::Bytes(b.alloc_bytes));
          v.Set("allocated_at", Value::SiteOf(b.alloc_stack));
          if (top_tracked == nullptr) top_tracked = &b;
        } else {
          v.Set("allocation", Value::String("untracked"));
        }
        v.Set("copies", Value::Int(static_cast<int64_t>(b.copies)));
        v.Set("bytes_copied", Value::Bytes(b.bytes));
        list.Push(std::move(v));
      }
      f.evidence
          .Set("direction",
               Value::String(s.by_dir[0] && s.by_dir[1] ? "H2D+D2H" : CopyDirName(dir)))
          .Set("copies", Value::Int(static_cast<int64_t>(s.copies)))
          .Set("bytes", Value::Bytes(s.bytes))
          .Set("typical_copy", Value::Bytes(typical))
          .Set("time_in_calls", Value::Seconds(s.call_ns * 1e-9))
          .Set("model_pageable_bandwidth", Value::String(FormatGbps(pageable_bw)))
          .Set("model_pinned_bandwidth", Value::String(FormatGbps(pinned_bw)))
          .Set("model", Value::String(m.source()))
          .Set("distinct_buffers", Value::Int(static_cast<int64_t>(s.buffers.size())))
          .Set("buffers", std::move(list));
      std::string where =
          top_tracked != nullptr && top_tracked->alloc_stack != 0
              ? "the buffer allocated at {site:" + std::to_string(top_tracked->alloc_stack) + "}"
              : "this buffer";
      char payoff_text[64];
      snprintf(payoff_text, sizeof(payoff_text), "%.0f", std::ceil(payoff < 1 ? 1 : payoff));
      f.fix = "Allocate " + where +
              " as pinned memory (cudaMallocHost/cudaHostAlloc instead of malloc or new), or "
              "pin it in place once with cudaHostRegister, which at " +
              FormatBytes(typical) + " per copy pays for itself after about " + payoff_text +
              (OptimizeModeWasOn(ctx)
                   ? " copies. Optimize mode was on in this run and left these copies pageable: "
                     "\"pinshim's own pinning\" says why (not tracked, refused, or an mmap "
                     "region not used as one buffer)."
                   : " copies; without code changes, run under pinshim's optimize mode "
                     "(pinshim run --mode optimize, or PINSHIM_MODE=optimize).");
      out->push_back(std::move(f));
    }
  }

 private:
  struct Buffer {
    uint64_t alloc_id = 0;
    uint32_t alloc_stack = 0;
    uint64_t alloc_bytes = 0;
    uint64_t copies = 0;
    uint64_t bytes = 0;
  };
  struct SiteStats {
    uint64_t copies = 0;
    uint64_t bytes = 0;
    double lost = 0;
    uint64_t call_ns = 0;
    uint64_t by_dir[2] = {0, 0};
    std::unordered_map<uint64_t, Buffer> buffers;
    uint64_t last_key = 0;
    Buffer* last_buffer = nullptr;
  };

  // The model interpolates on log(size); programs copy a handful of sizes,
  // so the answers are remembered (direct-mapped).
  double Loss(CopyDir dir, uint64_t bytes) {
    uint64_t key = bytes * 2 + (dir == CopyDir::kDeviceToHost ? 1 : 0);
    LossEntry& c = loss_cache_[(key ^ (key >> 17)) % kLossCacheSize];
    if (c.key != key) {
      c.key = key;
      c.loss = model_->PageableLoss(dir, bytes);
    }
    return c.loss;
  }

  static constexpr size_t kLossCacheSize = 64;
  struct LossEntry {
    uint64_t key = ~0ull;
    double loss = 0;
  };
  SiteTable<SiteStats> sites_;
  LossEntry loss_cache_[kLossCacheSize];
};

}  // namespace

std::unique_ptr<Rule> NewPageableHotRule() { return std::make_unique<PageableHot>(); }

}  // namespace report
}  // namespace pinshim
