// The trace's budget enums (trace_format.h) carry shim/budget's values, so
// that the hooks' recorder callback converts a DecisionRecord by casting.
#include <gtest/gtest.h>

#include "analyzer/report/format.h"
#include "shim/budget/budget.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace {

template <typename A, typename B>
constexpr bool Same(A a, B b) {
  return static_cast<int>(a) == static_cast<int>(b);
}

static_assert(Same(trace::BudgetOwner::kProgramAlloc, budget::Owner::kProgramAlloc), "");
static_assert(Same(trace::BudgetOwner::kProgramRegister, budget::Owner::kProgramRegister), "");
static_assert(Same(trace::BudgetOwner::kPinshimPool, budget::Owner::kPinshimPool), "");
static_assert(Same(trace::BudgetOwner::kPinshimCache, budget::Owner::kPinshimCache), "");
static_assert(Same(trace::BudgetOwner::kProgramVmm, budget::Owner::kProgramVmm), "");
static_assert(Same(trace::BudgetOwner::kProgramPool, budget::Owner::kProgramPool), "");
static_assert(budget::kOwnerCount == 6, "a new owner needs a trace value");
static_assert(Same(trace::BudgetDecision::kGranted, budget::Decision::kGranted), "");
static_assert(Same(trace::BudgetDecision::kDenied, budget::Decision::kDenied), "");
static_assert(Same(trace::BudgetDecision::kFallback, budget::Decision::kFallback), "");
static_assert(Same(trace::BudgetLimiter::kNone, budget::Limiter::kNone), "");
static_assert(Same(trace::BudgetLimiter::kProcess, budget::Limiter::kProcess), "");
static_assert(Same(trace::BudgetLimiter::kNode, budget::Limiter::kNode), "");
static_assert(Same(trace::BudgetLimiter::kLedger, budget::Limiter::kLedger), "");

TEST(BudgetValues, TheReportNamesThemAsTheBudgetDoes) {
  for (int i = 0; i < budget::kOwnerCount; ++i) {
    EXPECT_STREQ(report::BudgetOwnerName(static_cast<trace::BudgetOwner>(i)),
                 budget::OwnerName(static_cast<budget::Owner>(i)));
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_STREQ(report::BudgetDecisionName(static_cast<trace::BudgetDecision>(i)),
                 budget::DecisionName(static_cast<budget::Decision>(i)));
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_STREQ(report::BudgetLimiterName(static_cast<trace::BudgetLimiter>(i)),
                 budget::LimiterName(static_cast<budget::Limiter>(i)));
  }
}

}  // namespace
}  // namespace pinshim
