#include "analyzer/report/merge.h"

#include <algorithm>
#include <map>

namespace pinshim {
namespace report {

MergedReport Merge(std::vector<ProcessReport> processes) {
  MergedReport m;
  m.processes = std::move(processes);
  std::map<std::string, size_t> index;  // rule + site -> position in m.findings
  for (size_t p = 0; p < m.processes.size(); ++p) {
    for (const Finding& f : m.processes[p].findings) {
      std::string key = f.rule + "\n" + f.site.Key();
      if (!f.site.known) key += "\n" + std::to_string(p) + "\n" + f.explanation;
      auto it = index.find(key);
      if (it == index.end()) {
        index[key] = m.findings.size();
        Finding copy = f;
        copy.processes = {static_cast<int>(p)};
        copy.seconds_lost_by_process = {f.seconds_lost};
        m.findings.push_back(std::move(copy));
        continue;
      }
      Finding& into = m.findings[it->second];
      std::vector<int> procs = into.processes;
      std::vector<double> losses = into.seconds_lost_by_process;
      double largest_before = *std::max_element(losses.begin(), losses.end());
      procs.push_back(static_cast<int>(p));
      losses.push_back(f.seconds_lost);
      double total = into.seconds_lost + f.seconds_lost;
      Severity worst = std::max(into.severity, f.severity);
      // The process that lost the most provides the text and evidence.
      if (f.seconds_lost > largest_before) into = f;
      into.severity = worst;
      into.seconds_lost = total;
      into.processes = std::move(procs);
      into.seconds_lost_by_process = std::move(losses);
    }
  }
  SortFindings(&m.findings);
  return m;
}

double TotalSecondsLost(const MergedReport& r) {
  double total = 0;
  std::map<std::string, double> copies;  // process + call site -> the largest loss
  for (const Finding& f : r.findings) {
    for (size_t k = 0; k < f.processes.size(); ++k) {
      const double lost = k < f.seconds_lost_by_process.size() ? f.seconds_lost_by_process[k] : 0;
      if (!f.loss_in_copies) {
        total += lost;
        continue;
      }
      // An unknown site is told apart by its stack id, which is the
      // process's own for a finding merged from unknown sites.
      std::string key = std::to_string(f.processes[k]) + "\n" +
                        (f.site.known ? f.site.Key() : "#" + std::to_string(f.stack));
      double& largest = copies[key];
      if (lost > largest) largest = lost;
    }
  }
  for (const auto& kv : copies) total += kv.second;
  return total;
}

bool HasFindingAtLeast(const MergedReport& r, Severity s) {
  for (const Finding& f : r.findings) {
    if (f.severity >= s) return true;
  }
  return false;
}

}  // namespace report
}  // namespace pinshim
