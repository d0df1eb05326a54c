#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {

bool OptimizeModeWasOn(const RuleContext& ctx) {
  return ctx.process != nullptr && ctx.process->mode.find("optimize") != std::string::npos;
}

std::vector<std::unique_ptr<Rule>> MakeAllRules(const BandwidthModel* model,
                                                const RuleOptions* options) {
  std::vector<std::unique_ptr<Rule>> rules;
  rules.push_back(NewPageableHotRule());
  rules.push_back(NewAsyncPageableRule());
  rules.push_back(NewSyncCopyLoopRule());
  rules.push_back(NewSmallCopiesRule());
  rules.push_back(NewWcReadRule());
  rules.push_back(NewOverPinningRule());
  rules.push_back(NewPinnedChurnRule());
  rules.push_back(NewPinnedUnusedRule());
  rules.push_back(NewFreeInFlightRule());
  rules.push_back(NewCopyRaceRule());
  rules.push_back(NewNonPortableRule());
  rules.push_back(NewBudgetRefusedRule());
  for (auto& r : rules) r->Configure(model, options);
  return rules;
}

}  // namespace report
}  // namespace pinshim
