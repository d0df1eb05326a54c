#include "analyzer/report/merge.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pinshim {
namespace report {
namespace {

Site KnownSite(const std::string& function, int line) {
  Site s;
  s.known = true;
  s.function = function;
  s.file = "train.cc";
  s.line = line;
  return s;
}

Finding Make(const char* rule, Severity severity, double lost, bool in_copies, const Site& site) {
  Finding f;
  f.rule = rule;
  f.severity = severity;
  f.seconds_lost = lost;
  f.loss_in_copies = in_copies;
  f.site = site;
  f.stack = 7;
  return f;
}

std::vector<ProcessReport> TwoProcesses() {
  const Site upload = KnownSite("upload", 12);
  std::vector<ProcessReport> ps(2);
  ps[0].findings = {
      Make("async-pageable", Severity::kWarning, 0.030, true, upload),
      Make("pageable-hot", Severity::kWarning, 0.020, true, upload),
      Make("pinned-churn", Severity::kWarning, 0.010, false, KnownSite("step", 40)),
      Make("free-in-flight", Severity::kError, 0, false, KnownSite("step", 41)),
  };
  ps[1].findings = {Make("pageable-hot", Severity::kWarning, 0.050, true, upload)};
  return ps;
}

TEST(MergeTest, ErrorsComeFirstThenTimeLost) {
  MergedReport m = Merge(TwoProcesses());
  std::vector<std::string> rules;
  for (const Finding& f : m.findings) rules.push_back(f.rule);
  EXPECT_EQ(rules, (std::vector<std::string>{"free-in-flight", "pageable-hot", "async-pageable",
                                             "pinned-churn"}));
}

// Two findings on one site's copies in one process count once (the larger);
// the same site in another process is other copies.
TEST(MergeTest, TotalCountsEachCopyOnce) {
  MergedReport m = Merge(TwoProcesses());
  EXPECT_DOUBLE_EQ(TotalSecondsLost(m), 0.030 + 0.050 + 0.010);
  double summed = 0;
  for (const Finding& f : m.findings) summed += f.seconds_lost;
  EXPECT_DOUBLE_EQ(summed, 0.030 + 0.020 + 0.050 + 0.010);
}

// Findings whose losses are not time in copies add up, even on one site.
TEST(MergeTest, OtherLossesAddUp) {
  std::vector<ProcessReport> ps(1);
  const Site site = KnownSite("step", 3);
  ps[0].findings = {Make("pinned-churn", Severity::kWarning, 0.2, false, site),
                    Make("pinned-unused", Severity::kInfo, 0.1, false, site)};
  EXPECT_DOUBLE_EQ(TotalSecondsLost(Merge(std::move(ps))), 0.3);
}

// Unknown sites are told apart by their stacks, not merged into one.
TEST(MergeTest, UnknownSitesAreToldApartByStack) {
  std::vector<ProcessReport> ps(1);
  Finding a = Make("pageable-hot", Severity::kWarning, 0.2, true, Site());
  Finding b = Make("async-pageable", Severity::kWarning, 0.1, true, Site());
  b.stack = 8;
  ps[0].findings = {a, b};
  EXPECT_DOUBLE_EQ(TotalSecondsLost(Merge(std::move(ps))), 0.3);
}

}  // namespace
}  // namespace report
}  // namespace pinshim
