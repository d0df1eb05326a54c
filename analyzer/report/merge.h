// Many processes (ranks of one job, fork children) in one report: findings
// with the same rule at the same call site are merged, their losses summed,
// and each keeps the list of processes it was found in.
#ifndef PINSHIM_ANALYZER_REPORT_MERGE_H_
#define PINSHIM_ANALYZER_REPORT_MERGE_H_

#include <string>
#include <vector>

#include "analyzer/report/analysis.h"

namespace pinshim {
namespace report {

struct MergedReport {
  std::vector<ProcessReport> processes;
  std::vector<Finding> findings;      // merged, most severe first, then by estimated loss
  std::vector<std::string> problems;  // inputs that could not be read, one line each
  std::string model_source;           // where bandwidth numbers came from
};

// Takes ownership of the per-process reports and merges their findings.
MergedReport Merge(std::vector<ProcessReport> processes);

// The time the findings estimate lost, each copy counted once: for the
// findings on the copies of one call site in one process (loss_in_copies)
// the largest estimate, plus every other finding's.
double TotalSecondsLost(const MergedReport& r);

// True when some finding has at least severity `s`.
bool HasFindingAtLeast(const MergedReport& r, Severity s);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_MERGE_H_
