// wc-read (error): the CPU reads write-combined memory. Such memory is not
// cached for reads; on bare metal a read runs an order of magnitude slower
// than from ordinary memory (on the H200 virtual machine it did not, which is
// why detection never relies on timing). Reads come from the memcpy-family
// and output hooks, and from the opt-in page guard's samples.
#include <memory>
#include <set>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

// Read bandwidths assumed for the estimate: ordinary cached memory, and
// write-combined memory on bare metal (about ten times slower).
constexpr double kCachedReadBps = 6e9;
constexpr double kWcReadBps = 0.6e9;

const char* ViaName(uint32_t via) {
  switch (static_cast<trace::WcReadVia>(via)) {
    case trace::WcReadVia::kMemcpy: return "memcpy";
    case trace::WcReadVia::kMemmove: return "memmove";
    case trace::WcReadVia::kMemcmp: return "memcmp";
    case trace::WcReadVia::kString: return "string function";
    case trace::WcReadVia::kStdio: return "output call";
    case trace::WcReadVia::kPageGuard: return "plain load (page guard sample)";
    default: return "other";
  }
}

class WcRead : public Rule {
 public:
  const char* id() const override { return "wc-read"; }

  void OnMisuse(const Event& e, const PinnedAlloc* owner) override {
    if (e.misuse != trace::MisuseKind::kWcRead) return;
    SiteStats& s = sites_[e.stack];
    ++s.reads;
    if (e.detail == static_cast<uint32_t>(trace::WcReadVia::kPageGuard)) {
      ++s.guard_samples;
    } else {
      s.bytes += e.bytes;
    }
    s.vias.insert(ViaName(e.detail));
    if (owner != nullptr && s.alloc_stack == 0) {
      s.alloc_stack = owner->stack;
      s.alloc_bytes = owner->bytes;
    }
  }

  void Finish(const RuleContext&, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      std::string vias;
      Value via_list = Value::Array();
      for (const std::string& v : s.vias) {
        vias += (vias.empty() ? "" : ", ") + v;
        via_list.Push(Value::String(v));
      }
      Finding f;
      f.rule = id();
      f.severity = Severity::kError;
      f.stack = kv.first;
      double b = static_cast<double>(s.bytes);
      f.seconds_lost = b / kWcReadBps - b / kCachedReadBps;
      f.explanation = "The CPU reads write-combined pinned memory here (" + FormatCount(s.reads) +
                      (s.reads == 1 ? " read" : " reads") + " via " + vias +
                      (s.bytes ? ", " + FormatBytes(s.bytes) : std::string()) +
                      "); write-combined memory is uncached for reads, typically an order of "
                      "magnitude slower to read than ordinary memory.";
      f.evidence.Set("reads", Value::Int(static_cast<int64_t>(s.reads)))
          .Set("bytes_read", Value::Bytes(s.bytes))
          .Set("page_guard_samples", Value::Int(static_cast<int64_t>(s.guard_samples)))
          .Set("via", std::move(via_list));
      std::string where = "the buffer";
      if (s.alloc_stack != 0) {
        f.evidence.Set("allocated_at", Value::SiteOf(s.alloc_stack))
            .Set("allocation_size", Value::Bytes(s.alloc_bytes));
        where = "the buffer allocated at {site:" + std::to_string(s.alloc_stack) + "}";
      }
      f.fix = "Allocate " + where +
              " without cudaHostAllocWriteCombined (use cudaHostAllocDefault) since the CPU "
              "reads it, or keep a separate ordinary copy for the CPU; write-combined memory "
              "suits buffers the CPU only writes.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint64_t reads = 0;
    uint64_t bytes = 0;
    uint64_t guard_samples = 0;
    std::set<std::string> vias;
    uint32_t alloc_stack = 0;
    uint64_t alloc_bytes = 0;
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewWcReadRule() { return std::make_unique<WcRead>(); }

}  // namespace report
}  // namespace pinshim
