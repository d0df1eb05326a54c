// copy-race (error): the CPU reads the destination of an asynchronous
// device-to-host copy, or writes the source of an asynchronous host-to-device
// copy, in pinned or registered memory, before the copy is known done. The
// read may see data the copy has not written yet; the write may reach the
// device, or not, or in part. (Writing a device-to-host destination early is
// reported too: the copy may overwrite what the CPU wrote.)
//
// Accesses come from the memcpy-family hooks, and with PINSHIM_COPY_GUARD=1
// from plain loads and stores caught by protecting the copy's pages (kMisuse
// kCopyRace; the library records the first access to each copy it has not
// seen waited for). Whether the copy could still run at that moment comes
// from the model of the driver's synchronization (sync_model.h): an error
// needs its proof; where completion cannot be told, the finding says so at
// info level. Copies on pageable memory are not races: the driver is done
// with the host side when such a copy returns.
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

const char* ViaName(uint32_t detail) {
  switch (static_cast<trace::WcReadVia>(detail & trace::kCopyAccessViaMask)) {
    case trace::WcReadVia::kMemcpy: return "memcpy";
    case trace::WcReadVia::kMemmove: return "memmove";
    case trace::WcReadVia::kMemcmp: return "memcmp";
    case trace::WcReadVia::kString: return "string function";
    case trace::WcReadVia::kStdio: return "output call";
    case trace::WcReadVia::kPageGuard: return "plain access (copy guard)";
    default: return "memset or other";
  }
}

class CopyRace : public Rule {
 public:
  const char* id() const override { return "copy-race"; }

  void OnMisuse(const Event& e, const PinnedAlloc*) override {
    if (e.misuse != trace::MisuseKind::kCopyRace) return;
    const bool write = (e.detail & trace::kCopyAccessWrite) != 0;
    sync_->ForOverlapping(e.ptr, e.bytes, [&](const InFlightCopy& c) {
      const bool d2h = c.dir == CopyDir::kDeviceToHost;
      if ((!d2h && !write) || reported_.count(c.id) != 0) return;
      std::string why;
      CopyState state = sync_->StateOf(c, &why);
      if (state == CopyState::kDone) return;
      reported_.insert(c.id);
      const Severity severity = state == CopyState::kMayRun ? Severity::kError : Severity::kInfo;
      SiteStats& s = sites_[std::make_tuple(e.stack, severity, write)];
      if (s.times++ == 0) {
        s.copy = c;
        s.stream = sync_->DescribeStream(c.stream);
        s.why = why;
        s.after_ns = e.time_ns - std::min(e.time_ns, c.time_ns);
      }
      s.vias.insert(ViaName(e.detail));
    });
  }

  void Finish(const RuleContext&, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      const Severity severity = std::get<1>(kv.first);
      const bool write = std::get<2>(kv.first);
      const bool proven = severity == Severity::kError;
      const bool d2h = s.copy.dir == CopyDir::kDeviceToHost;
      std::string vias;
      Value via_list = Value::Array();
      for (const std::string& v : s.vias) {
        vias += (vias.empty() ? "" : ", ") + v;
        via_list.Push(Value::String(v));
      }
      const std::string access = std::string(write ? "writes" : "reads") + " the " +
                                 (d2h ? "destination of an asynchronous device-to-host copy"
                                      : "source of an asynchronous host-to-device copy") +
                                 " queued at {site:" + std::to_string(s.copy.stack) + "} on " +
                                 s.stream;
      const std::string times = FormatCount(s.times) + (s.times == 1 ? " copy" : " copies");
      const std::string harm = !write ? "it may read bytes the copy has not written yet"
                               : d2h  ? "the copy may overwrite what the CPU writes"
                                      : "the device may get the old bytes, the new ones, or a mix";
      Finding f;
      f.rule = id();
      f.severity = severity;
      f.stack = std::get<0>(kv.first);
      if (proven) {
        f.explanation = "The CPU " + access + " (via " + vias +
                        ") before the copy is known done: " + s.why + "; " + harm + " (" + times +
                        ").";
      } else {
        f.explanation = "The CPU " + access + " (via " + vias +
                        "); whether the copy had "
                        "finished cannot be told from the trace: " +
                        s.why + " (" + times + ").";
      }
      f.evidence.Set("copies", Value::Int(static_cast<int64_t>(s.times)))
          .Set("access", Value::String(write ? "write" : "read"))
          .Set("via", std::move(via_list))
          .Set("copy_queued_at", Value::SiteOf(s.copy.stack))
          .Set("copy_direction", Value::String(DirectionWords(s.copy.dir)))
          .Set("copy_bytes", Value::Bytes(s.copy.bytes))
          .Set("stream", Value::String(s.stream))
          .Set("graph_copy", Value::Bool(s.copy.from_graph))
          .Set("proven", Value::Bool(proven))
          .Set("why", Value::String(s.why))
          .Set("accessed_after", Value::Seconds(s.after_ns * 1e-9));
      f.fix = std::string("Wait for the copy before the CPU ") + (write ? "writes" : "reads") +
              " its host memory: cudaStreamSynchronize on the stream it was queued on, or "
              "cudaEventSynchronize on an event recorded after it (cudaEventRecord); to overlap "
              "the CPU's work with copies, give each copy in flight its own buffer (double "
              "buffering) and wait for a buffer's copy before reusing it.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint64_t times = 0;
    InFlightCopy copy;
    std::string stream;
    std::string why;
    uint64_t after_ns = 0;
    std::set<std::string> vias;
  };
  std::set<uint64_t> reported_;  // copy ids
  std::map<std::tuple<uint32_t, Severity, bool>, SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewCopyRaceRule() { return std::make_unique<CopyRace>(); }

}  // namespace report
}  // namespace pinshim
