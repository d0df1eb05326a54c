// The terminal report: a header per process (program, duration, bytes moved
// by memory kind, peak pinned bytes, enforce mode's budget decisions when
// there were any), then findings sorted by estimated time
// lost, each with rule, severity, explanation, call site, evidence, a short
// stack and a fix.
#ifndef PINSHIM_ANALYZER_REPORT_TEXT_REPORT_H_
#define PINSHIM_ANALYZER_REPORT_TEXT_REPORT_H_

#include <string>

#include "analyzer/report/merge.h"

namespace pinshim {
namespace report {

// Appends the report to *out.
void WriteTextReport(const MergedReport& report, std::string* out);

// Seconds from the start of tracing to the last event.
double ProcessDurationSeconds(const ProcessReport& p);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_TEXT_REPORT_H_
