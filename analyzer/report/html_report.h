// `pinshim report --format html`: one self-contained page (styles, charts
// as inline SVG and a few lines of script in the page itself; nothing is
// loaded from anywhere):
//   - the findings, worst first, each with its site, explanation, fix
//     (framework-aware), evidence and stack (C++ names shortened, whole in
//     a tooltip);
//   - for each process, charts over time: pinned bytes (the program's
//     pinned and registered memory, pinshim's own) against the budget or
//     the pin cap, resident set size, copy throughput by direction and
//     host memory kind, and optimize mode's own pinning against its cap;
//   - for each process, a table per call site: copies, bytes by direction
//     and memory kind, time in calls, pinned allocations, findings there;
//   - the JSON report, embedded for tools (<script type="application/json"
//     id="pinshim-report-json">).
#ifndef PINSHIM_ANALYZER_REPORT_HTML_REPORT_H_
#define PINSHIM_ANALYZER_REPORT_HTML_REPORT_H_

#include <string>
#include <vector>

#include "analyzer/report/merge.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

// Appends the page to *out. readers[i] is the trace of report.processes[i]
// (it is read again for the charts and the per-site tables).
void WriteHtmlReport(const MergedReport& report, const std::vector<const TraceReader*>& readers,
                     std::string* out);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_HTML_REPORT_H_
