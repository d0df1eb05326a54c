// sync-copy-loop (info): many synchronous copies from one site. Each blocks
// the calling thread for the whole transfer, so none overlaps with the host
// work between them. The estimate is what overlap could hide: for each copy,
// the smaller of its duration and the host time until the thread's next copy
// from the same site.
#include <memory>
#include <unordered_map>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

class SyncCopyLoop : public Rule {
 public:
  const char* id() const override { return "sync-copy-loop"; }

  void OnCopy(const Event& e, const PinnedAlloc*, const HostAlloc*) override {
    if (e.async || !e.IsHostDeviceCopy()) return;
    SiteStats& s = sites_[e.stack];
    ++s.copies;
    s.bytes += e.bytes;
    s.call_ns += e.duration_ns;
    ++s.by_dir[e.dir == CopyDir::kDeviceToHost ? 1 : 0];
    if (e.HostKind() == MemKind::kPageable) ++s.pageable;
    Thread& t = s.last_tid == e.tid && s.last_thread != nullptr ? *s.last_thread : s.threads[e.tid];
    s.last_tid = e.tid;
    s.last_thread = &t;
    if (t.seen && e.time_ns >= t.last_end) {
      uint64_t gap = e.time_ns - t.last_end;
      s.hideable_ns += gap < t.last_duration ? gap : t.last_duration;
    }
    t.seen = true;
    t.last_end = e.time_ns + e.duration_ns;
    t.last_duration = e.duration_ns;
  }

  // The writer summed each copy's overlappable time as OnCopy does.
  void OnCopyTotals(const trace::SiteCellFields& c) override {
    const CopyDir dir = static_cast<CopyDir>(c.bits & trace::kCopyDirMask);
    if ((c.bits & trace::kCopyAsync) ||
        (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost)) {
      return;
    }
    const MemKind host =
        static_cast<MemKind>(dir == CopyDir::kDeviceToHost ? (c.kinds >> 3) & 7 : c.kinds & 7);
    SiteStats& s = sites_[static_cast<uint32_t>(c.stack)];
    s.copies += c.copies;
    s.bytes += c.bytes;
    s.call_ns += c.call_ns;
    s.hideable_ns += c.overlap_ns;
    if (host == MemKind::kPageable) s.pageable += c.copies;
    s.by_dir[dir == CopyDir::kDeviceToHost ? 1 : 0] += c.copies;
  }
  bool UsesSiteTotals() const override { return true; }

  void Finish(const RuleContext& ctx, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      if (s.copies < ctx.options->sync_loop_min_copies) continue;
      CopyDir dir = s.by_dir[1] > s.by_dir[0] ? CopyDir::kDeviceToHost : CopyDir::kHostToDevice;
      Finding f;
      f.rule = id();
      f.severity = Severity::kInfo;
      f.stack = kv.first;
      f.loss_in_copies = true;
      f.seconds_lost = s.hideable_ns * 1e-9;
      f.explanation = FormatCount(s.copies) + " synchronous copies (" +
                      (s.by_dir[0] && s.by_dir[1] ? "both directions" : DirectionWords(dir)) +
                      ") from this site each block the calling thread until the transfer ends (" +
                      FormatSeconds(s.call_ns * 1e-9) +
                      " in total), so none overlaps with host work or other transfers.";
      f.evidence.Set("copies", Value::Int(static_cast<int64_t>(s.copies)))
          .Set("bytes", Value::Bytes(s.bytes))
          .Set("time_in_calls", Value::Seconds(s.call_ns * 1e-9))
          .Set("overlappable_time", Value::Seconds(s.hideable_ns * 1e-9))
          .Set("threads", Value::Int(static_cast<int64_t>(s.threads.size())));
      f.fix = std::string("Queue the copies with cudaMemcpyAsync on a stream, ") +
              (s.pageable != 0 ? "from pinned buffers, and "
                               : "(their memory is pinned already) and ") +
              "synchronize once (cudaStreamSynchronize or an event) where the data is needed; "
              "up to " +
              FormatSeconds(s.hideable_ns * 1e-9) +
              " of the host work between them could then run during the transfers.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct Thread {
    bool seen = false;
    uint64_t last_end = 0;
    uint64_t last_duration = 0;
  };
  struct SiteStats {
    uint64_t copies = 0;
    uint64_t bytes = 0;
    uint64_t call_ns = 0;
    uint64_t hideable_ns = 0;
    uint64_t by_dir[2] = {0, 0};
    uint64_t pageable = 0;  // copies of pageable memory: pinning it is part of the fix
    std::unordered_map<uint32_t, Thread> threads;
    uint32_t last_tid = 0;
    Thread* last_thread = nullptr;
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewSyncCopyLoopRule() { return std::make_unique<SyncCopyLoop>(); }

}  // namespace report
}  // namespace pinshim
