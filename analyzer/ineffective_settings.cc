#include "analyzer/ineffective_settings.h"

namespace pinshim {
namespace {

struct Requirement {
  Needs needs;
  const char* without;  // "without enforce mode (--mode enforce)"
};

const Requirement kRequirements[] = {
    {Needs::kEnforce, "without enforce mode (--mode enforce)"},
    {Needs::kNodeLedger, "without a node budget (--node-budget) in enforce mode"},
    {Needs::kOptimize, "without optimize mode (--mode optimize)"},
    {Needs::kTrace, "without a trace (--trace-dir)"},
};

bool Met(Needs needs, const Config& config) {
  const bool enforce = (config.mode & kModeEnforce) != 0;
  switch (needs) {
    case Needs::kNothing: return true;
    case Needs::kOptimize: return (config.mode & kModeOptimize) != 0;
    case Needs::kEnforce: return enforce;
    case Needs::kTrace: return config.trace_dir[0] != '\0';
    case Needs::kNodeLedger: return enforce && config.has_node_budget;
  }
  return true;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

Needs NeedsOf(ConfigKey key) {
  switch (key) {
    case ConfigKey::kBudget:
    case ConfigKey::kNodeBudget:
    case ConfigKey::kPolicy: return Needs::kEnforce;
    case ConfigKey::kLedgerShared:
    case ConfigKey::kLedgerPath: return Needs::kNodeLedger;
    case ConfigKey::kPinCap:
    case ConfigKey::kIdleTrimS:
    case ConfigKey::kProfile:
    case ConfigKey::kPinInPlace:
    case ConfigKey::kVerifyPages:
    case ConfigKey::kStage:
    case ConfigKey::kStageWorkers:
    case ConfigKey::kStageChunk:
    case ConfigKey::kStageSlots:
    case ConfigKey::kStageOrdered:
    case ConfigKey::kSelfCheck: return Needs::kOptimize;
    case ConfigKey::kSampleMs:
    case ConfigKey::kTraceMax:
    case ConfigKey::kWcGuard:
    case ConfigKey::kPythonFrames:
    case ConfigKey::kCopyGuard: return Needs::kTrace;
    default: return Needs::kNothing;
  }
}

std::vector<std::string> IneffectiveSettings(const Config& config,
                                             const std::function<std::string(ConfigKey)>& name_of) {
  std::vector<std::string> lines;
  for (const Requirement& r : kRequirements) {
    if (Met(r.needs, config)) continue;
    std::vector<std::string> names;
    for (int k = 0; k < kConfigKeyCount; ++k) {
      const ConfigKey key = static_cast<ConfigKey>(k);
      if (NeedsOf(key) != r.needs) continue;
      std::string name = name_of(key);
      if (!name.empty()) names.push_back(name);
    }
    if (names.empty()) continue;
    lines.push_back(JoinNames(names) + (names.size() == 1 ? " has" : " have") + " no effect " +
                    r.without + "; ignored");
  }
  return lines;
}

}  // namespace pinshim
