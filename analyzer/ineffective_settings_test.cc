#include "analyzer/ineffective_settings.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace pinshim {
namespace {

class IneffectiveSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override { SetConfigDefaults(uint64_t{64} << 30, &config_); }

  // Sets `key` as the user would, remembering the name it was given by.
  void Give(ConfigKey key, const char* value, const std::string& name) {
    char err[kConfigErrorLen];
    ASSERT_TRUE(ParseConfigValue(key, value, &config_, err, sizeof(err))) << err;
    given_[key] = name;
  }

  std::vector<std::string> Lines() {
    return IneffectiveSettings(config_, [&](ConfigKey key) {
      auto it = given_.find(key);
      return it == given_.end() ? std::string() : it->second;
    });
  }

  Config config_;
  std::map<ConfigKey, std::string> given_;
};

TEST_F(IneffectiveSettingsTest, BudgetAndPolicyWithoutEnforceAreOneLine) {
  Give(ConfigKey::kBudget, "1G", "--budget");
  Give(ConfigKey::kPolicy, "fallback", "--policy");
  EXPECT_EQ(Lines(),
            std::vector<std::string>{"--budget and --policy have no effect without enforce mode "
                                     "(--mode enforce); ignored"});
  Give(ConfigKey::kMode, "enforce", "--mode");
  EXPECT_TRUE(Lines().empty());
}

TEST_F(IneffectiveSettingsTest, NamesTheVariableWhenItCameFromTheEnvironment) {
  Give(ConfigKey::kMode, "enforce", "--mode");
  Give(ConfigKey::kPinCap, "1G", "PINSHIM_PIN_CAP");
  Give(ConfigKey::kStageSlots, "4", "PINSHIM_STAGE_SLOTS");
  Give(ConfigKey::kProfile, "/tmp/p", "--profile");
  EXPECT_EQ(Lines(), std::vector<std::string>{
                         "PINSHIM_PIN_CAP, --profile and PINSHIM_STAGE_SLOTS have no effect "
                         "without optimize mode (--mode optimize); ignored"});
  Give(ConfigKey::kMode, "optimize,enforce", "--mode");
  EXPECT_TRUE(Lines().empty());
}

TEST_F(IneffectiveSettingsTest, TraceOptionsWithoutATrace) {
  Give(ConfigKey::kCopyGuard, "1", "--copy-guard");
  EXPECT_EQ(Lines(), std::vector<std::string>{
                         "--copy-guard has no effect without a trace (--trace-dir); ignored"});
  Give(ConfigKey::kTraceDir, "/tmp/t", "--trace-dir");
  EXPECT_TRUE(Lines().empty());
}

TEST_F(IneffectiveSettingsTest, SharedLedgerNeedsANodeBudgetInEnforceMode) {
  Give(ConfigKey::kMode, "enforce", "--mode");
  Give(ConfigKey::kLedgerShared, "1", "--ledger-shared");
  EXPECT_EQ(Lines(), std::vector<std::string>{
                         "--ledger-shared has no effect without a node budget (--node-budget) "
                         "in enforce mode; ignored"});
  Give(ConfigKey::kNodeBudget, "10G", "--node-budget");
  EXPECT_TRUE(Lines().empty());
}

TEST_F(IneffectiveSettingsTest, SettingsTheUserDidNotGiveAreNotReported) {
  // Defaults and config-file values: name_of answers "" for them.
  char err[kConfigErrorLen];
  ASSERT_TRUE(ParseConfigValue(ConfigKey::kBudget, "1G", &config_, err, sizeof(err)));
  EXPECT_TRUE(Lines().empty());
}

TEST_F(IneffectiveSettingsTest, SettingsThatActInEveryModeAreNeverReported) {
  Give(ConfigKey::kSummary, "1", "--summary");
  Give(ConfigKey::kTrackThreshold, "1M", "--track-threshold");
  EXPECT_TRUE(Lines().empty());
}

// The table agrees with each setting's own description (config.cc), which
// help and docs print: "Optimize mode only", "(enforce mode)", "needs a
// trace" and "the trace" say what the setting needs.
TEST(NeedsOfTest, AgreesWithTheSettingsDescriptions) {
  for (const ConfigKeyInfo& info : kConfigKeys) {
    const std::string meaning = info.meaning;
    Needs described = Needs::kNothing;
    if (meaning.find("ptimize mode") != std::string::npos) described = Needs::kOptimize;
    if (meaning.find("nforce mode") != std::string::npos) described = Needs::kEnforce;
    if (meaning.find("needs a trace") != std::string::npos ||
        meaning.find("the trace samples") != std::string::npos ||
        meaning.find("with every call site") != std::string::npos) {
      described = Needs::kTrace;
    }
    if (meaning.find("budget ledger") != std::string::npos) described = Needs::kNodeLedger;
    if (info.key == ConfigKey::kMode) described = Needs::kNothing;
    EXPECT_EQ(static_cast<int>(NeedsOf(info.key)), static_cast<int>(described)) << info.variable;
  }
}

}  // namespace
}  // namespace pinshim
