// pinned-churn (warning): pinned memory allocated and freed (or registered and
// unregistered) again and again at one site: pinned anew after an earlier
// buffer from the same site was released. Pinning is expensive (on the
// H200, milliseconds for cudaHostAlloc + cudaFreeHost of 16 MiB:
// bench/RESULTS.md, "The cost model's table"), and paying it in a loop is
// avoidable. The estimate is the time spent in those calls, less one
// allocation that a reused buffer would still need. VMM host memory mapped
// and unmapped again and again (cuMemMap, cuMemUnmap) is churn too; a host
// pool's stream-ordered allocations are not: reusing its memory is what the
// pool does.
#include <memory>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

class PinnedChurn : public Rule {
 public:
  const char* id() const override { return "pinned-churn"; }

  // Churn is pinning again after unpinning: a site that pins many buffers
  // and frees them all at the end had nothing to reuse.
  void OnPin(const Event& e, const PinnedAlloc& a) override {
    SiteStats& s = sites_[a.stack];
    s.api = e.api;
    if (s.released > 0) ++s.repins;
  }

  void OnUnpin(const Event& e, const PinnedAlloc* a) override {
    if (a == nullptr || (e.flags & trace::kPinFlagStreamOrdered) != 0) return;
    SiteStats& s = sites_[a->stack];
    ++s.released;
    ++s.cycles;
    s.bytes += a->bytes;
    s.call_ns += a->call_ns + e.duration_ns;
    s.registered = a->registered;
    if (s.release_stack == 0) s.release_stack = e.stack;
  }

  void Finish(const RuleContext& ctx, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      if (s.repins + 1 < ctx.options->churn_min_cycles ||
          s.cycles < ctx.options->churn_min_cycles || kv.first == 0) {
        continue;
      }
      double total = s.call_ns * 1e-9;
      const bool vmm = ctx.trace->ApiName(s.api).rfind("cuMemMap", 0) == 0;
      const char* pair = vmm            ? "mapped and unmapped"
                         : s.registered ? "registered and unregistered"
                                        : "allocated and freed";
      const char* calls = vmm            ? "cuMemMap/cuMemUnmap"
                          : s.registered ? "cudaHostRegister/cudaHostUnregister"
                                         : "cudaHostAlloc/cudaFreeHost";
      Finding f;
      f.rule = id();
      f.severity = Severity::kWarning;
      f.stack = kv.first;
      f.seconds_lost = total * static_cast<double>(s.cycles - 1) / static_cast<double>(s.cycles);
      f.explanation = "Pinned memory is " + std::string(pair) + " " + FormatCount(s.cycles) +
                      " times from this site (" + FormatBytes(s.bytes / s.cycles) +
                      " each), spending " + FormatSeconds(total) + " in " + calls + ".";
      f.evidence.Set("cycles", Value::Int(static_cast<int64_t>(s.cycles)))
          .Set("typical_size", Value::Bytes(s.bytes / s.cycles))
          .Set("time_in_calls", Value::Seconds(total))
          .Set("released_at", Value::SiteOf(s.release_stack));
      f.fix = vmm ? "Create and map the VMM host allocation once, outside the loop, and keep it "
                    "mapped while it is reused (optimize mode leaves the VMM API's memory to "
                    "the driver and cannot do this for the program)."
              : s.registered
                  ? "Register the buffer once and keep it registered while it is reused, instead "
                    "of registering it for every transfer."
              : OptimizeModeWasOn(ctx)
                  ? "Allocate the pinned buffer once, outside the loop, and reuse it (or "
                    "keep a small pool of them). In this run optimize mode served these "
                    "allocations from its pool; the time above is what the calls took "
                    "with it (see \"pinshim's own pinning\" for the pool's hits)."
                  : "Allocate the pinned buffer once, outside the loop, and reuse it (or "
                    "keep a small pool of them); pinshim's optimize mode "
                    "(pinshim run --mode optimize, or PINSHIM_MODE=optimize) serves repeated "
                    "pinned allocations from a "
                    "pool without code changes.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint64_t released = 0;
    uint64_t repins = 0;  // pinned after an earlier release at this site
    uint64_t cycles = 0;
    uint64_t bytes = 0;
    uint64_t call_ns = 0;
    bool registered = false;
    uint32_t release_stack = 0;
    uint32_t api = 0;  // the pinning call's
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewPinnedChurnRule() { return std::make_unique<PinnedChurn>(); }

}  // namespace report
}  // namespace pinshim
