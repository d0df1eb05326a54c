#include "shim/trace/budget_decisions.h"

#include "shim/trace/recorder.h"

namespace pinshim {
namespace trace {

void RecordBudgetDecisionRecord(const budget::DecisionRecord* r) {
  BudgetDecisionEvent e{};
#define BUDGET(name, record_type, event_type, layout) e.name = static_cast<event_type>(r->name);
#define RECORDER(name, layout)
#include "shim/core/budget_decision.inc"
#undef BUDGET
#undef RECORDER
  e.time_ns = 0;
  RecordBudgetDecision(e);
}

}  // namespace trace
}  // namespace pinshim
