#include "analyzer/report/merge.h"

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
        m.findings.push_back(std::move(copy));
        continue;
      }
      Finding& into = m.findings[it->second];
      bool bigger = f.seconds_lost > into.seconds_lost;
      double total = into.seconds_lost + f.seconds_lost;
      std::vector<int> procs = into.processes;
      procs.push_back(static_cast<int>(p));
      if (bigger) {
        // The process with the larger loss provides the text and evidence.
        into = f;
      }
      if (f.severity > into.severity) into.severity = f.severity;
      into.seconds_lost = total;
      into.processes = procs;
    }
  }
  SortFindings(&m.findings);
  return m;
}

bool HasFindingAtLeast(const MergedReport& r, Severity s) {
  for (const Finding& f : r.findings) {
    if (f.severity >= s) return true;
  }
  return false;
}

}  // namespace report
}  // namespace pinshim
