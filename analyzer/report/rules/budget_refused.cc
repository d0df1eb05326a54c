// budget-refused (warning): enforce mode refused pinned memory the program
// asked for. Each call site where a pinned allocation or registration was
// denied (the call failed with out-of-memory) or given pageable memory
// instead (fallback) is one finding. The program goes on either way, but a
// denial is an error path it may not handle, and a fallback quietly turns
// its copies from that buffer into pageable ones.
//
// Only the program's own pinning is reported: refusals of pinshim's pool and
// registration cache change nothing the program can see (that memory simply
// stays unpinned), so they count in the process header only.
//
// No time estimate: what a refusal costs depends on what the program does
// with the memory afterwards, which the decision alone does not say.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

std::string LimiterWords(trace::BudgetLimiter limiter) {
  switch (limiter) {
    case trace::BudgetLimiter::kProcess: return "the process budget";
    case trace::BudgetLimiter::kNode: return "the node budget";
    case trace::BudgetLimiter::kLedger: return "the node ledger (it could not be consulted)";
    default: return "the budget";
  }
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return FormatCount(n) + " " + (n == 1 ? one : many);
}

class BudgetRefused : public Rule {
 public:
  const char* id() const override { return "budget-refused"; }

  void OnBudgetDecision(const Event& e) override {
    bool program = e.budget_owner != trace::BudgetOwner::kPinshimPool &&
                   e.budget_owner != trace::BudgetOwner::kPinshimCache;
    bool denied = e.budget_decision == trace::BudgetDecision::kDenied;
    bool fallback = e.budget_decision == trace::BudgetDecision::kFallback;
    if (!program || (!denied && !fallback)) return;
    SiteStats& s = sites_[e.stack];
    if (denied) ++s.denied;
    if (fallback) ++s.fallback;
    s.bytes += e.bytes;
    s.largest = std::max(s.largest, e.bytes);
    // VMM host allocations and host-pool growth are allocations too.
    if (e.budget_owner == trace::BudgetOwner::kProgramRegister) {
      ++s.registrations;
    } else {
      ++s.allocations;
    }
    s.limiters.insert(e.budget_limiter);
    if (e.evictor_called) {
      ++s.evictions;
      s.evicted_bytes += e.evicted_bytes;
    }
    if (e.process_budget != 0) s.process_budget = e.process_budget;
    if (e.node_budget != 0) s.node_budget = e.node_budget;
    s.process_pinned = std::max(s.process_pinned, e.process_pinned);
    s.node_pinned = std::max(s.node_pinned, e.node_pinned);
  }

  void Finish(const RuleContext&, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      uint64_t refused = s.denied + s.fallback;
      std::string what;
      if (s.allocations != 0)
        what = Plural(s.allocations, "pinned allocation", "pinned allocations");
      if (s.registrations != 0) {
        what += (what.empty() ? "" : " and ") +
                Plural(s.registrations, "registration", "registrations");
      }
      std::string by;
      Value limiters = Value::Array();
      for (trace::BudgetLimiter l : s.limiters) {
        if (l != trace::BudgetLimiter::kNone) {
          by += (by.empty() ? "" : " and ") + LimiterWords(l);
        }
        limiters.Push(Value::String(BudgetLimiterName(l)));
      }
      if (by.empty()) by = "the budget";
      std::string outcome;
      Value outcomes = Value::Array();
      if (s.denied != 0) {
        outcome = FormatCount(s.denied) + " denied (the call failed with out-of-memory)";
        outcomes.Push(Value::String("denied"));
      }
      if (s.fallback != 0) {
        outcome += (outcome.empty() ? "" : ", ") + FormatCount(s.fallback) +
                   " not pinned (pageable memory instead: copies from it run at pageable speed)";
        outcomes.Push(Value::String("fallback"));
      }
      Finding f;
      f.rule = id();
      f.severity = Severity::kWarning;
      f.stack = kv.first;
      f.explanation = "Enforce mode refused " + what + " here (" + FormatBytes(s.bytes) +
                      " in all) because of " + by + ": " + outcome + ".";
      f.evidence.Set("refused", Value::Int(static_cast<int64_t>(refused)))
          .Set("denied", Value::Int(static_cast<int64_t>(s.denied)))
          .Set("fallback", Value::Int(static_cast<int64_t>(s.fallback)))
          .Set("bytes", Value::Bytes(s.bytes))
          .Set("largest_request", Value::Bytes(s.largest))
          .Set("outcome", std::move(outcomes))
          .Set("limiter", std::move(limiters));
      // Budgets that were not set are left out rather than shown as zero.
      if (s.process_budget != 0) f.evidence.Set("process_budget", Value::Bytes(s.process_budget));
      f.evidence.Set("process_pinned", Value::Bytes(s.process_pinned));
      if (s.node_budget != 0) {
        f.evidence.Set("node_budget", Value::Bytes(s.node_budget))
            .Set("node_pinned", Value::Bytes(s.node_pinned));
      }
      if (s.evictions != 0) {
        f.evidence.Set("evictions", Value::Int(static_cast<int64_t>(s.evictions)))
            .Set("evicted_bytes", Value::Bytes(s.evicted_bytes));
      }
      f.fix =
          "Raise --budget/--node-budget (PINSHIM_BUDGET/PINSHIM_NODE_BUDGET) if the machine can "
          "spare the memory, "
          "or pin less: reuse pinned buffers (a bounded set of staging buffers) instead of "
          "pinning per batch, and free or unregister pinned memory as soon as it is done.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint64_t denied = 0;
    uint64_t fallback = 0;
    uint64_t bytes = 0;
    uint64_t largest = 0;
    uint64_t allocations = 0;
    uint64_t registrations = 0;
    uint64_t evictions = 0;
    uint64_t evicted_bytes = 0;
    uint64_t process_budget = 0;
    uint64_t node_budget = 0;
    uint64_t process_pinned = 0;  // the most seen at a refusal
    uint64_t node_pinned = 0;
    std::set<trace::BudgetLimiter> limiters;
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewBudgetRefusedRule() { return std::make_unique<BudgetRefused>(); }

}  // namespace report
}  // namespace pinshim
