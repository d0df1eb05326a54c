// Enforce mode's decisions into the trace: the budget's recorder callback
// (budget::Budget::SetRecorder) that the library installs at start-up and
// the test harness installs on its own budget, so both record a decision
// the same way.
#ifndef PINSHIM_SHIM_TRACE_BUDGET_DECISIONS_H_
#define PINSHIM_SHIM_TRACE_BUDGET_DECISIONS_H_

#include "shim/budget/budget.h"

namespace pinshim {
namespace trace {

// Records one decision (a no-op without a trace). Stamped when recorded.
void RecordBudgetDecisionRecord(const budget::DecisionRecord* record);

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_BUDGET_DECISIONS_H_
