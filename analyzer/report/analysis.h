// Analysis of one process's trace: replays its events in time order through
// every rule, then symbolizes the findings' call sites.
#ifndef PINSHIM_ANALYZER_REPORT_ANALYSIS_H_
#define PINSHIM_ANALYZER_REPORT_ANALYSIS_H_

#include <string>
#include <vector>

#include "analyzer/report/bandwidth_model.h"
#include "analyzer/report/finding.h"
#include "analyzer/report/own_pinning.h"
#include "analyzer/report/profile.h"
#include "analyzer/report/rules/rule.h"
#include "analyzer/report/site_table.h"
#include "analyzer/report/symbol_archive.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

struct AnalysisOptions {
  RuleOptions rules;
  BandwidthModel model;
  bool symbolize = true;   // false: sites stay unresolved (benchmarks)
  bool hot_sites = false;  // also collect hot allocation sites (--profile-out)
  // Also fill ProcessReport::sites and pinned_series (pinshim export).
  bool site_tables = false;
  // Symbols archived beside the trace (pinshim archive), answered first;
  // null when there is none. Must outlive the analysis.
  const SymbolArchive* archive = nullptr;
};

// Where a capped trace's per-event detail ended (PINSHIM_TRACE_MAX), and
// what it kept after that (kSiteTotals).
struct DetailEnd {
  bool ended = false;
  uint64_t end_ns = 0;     // the first event not written one by one
  uint64_t cap_bytes = 0;  // PINSHIM_TRACE_MAX of the writer
  uint64_t copies = 0;     // counted per site after that (in the totals)
  uint64_t spilled = 0;    // of those, counted without their site (table full)
  uint64_t lost = 0;       // copies not counted at all (table full)
  uint64_t pins = 0;       // other events after that: counted, not seen by the rules
  uint64_t host_allocs = 0;
  uint64_t syncs = 0;
  uint64_t misuses = 0;
  uint64_t others = 0;
  // Rules that judged the detail only: what they say covers the process
  // until end_ns.
  std::vector<std::string> rules_detail_only;
};

struct ProcessReport {
  std::string path;
  ProcessInfo info;
  ProcessSummary summary;
  uint64_t events = 0;
  std::string damage;                        // one line, "" when the trace is whole
  bool complete = true;                      // the trace has its end record
  std::vector<std::string> symbol_problems;  // modules that could not be symbolized
  std::vector<Finding> findings;             // sorted by estimated loss
  HotSites hot_sites;                        // when AnalysisOptions::hot_sites
  OwnPinningSummary own;                     // pinshim's own pinning (optimize mode)
  DetailEnd detail;                          // ended: the trace was capped
  CallSiteTable sites;                       // when AnalysisOptions::site_tables
  PinnedSeries pinned_series;                // likewise
};

// A symbolized stack as a call site (Site::known false for an empty one).
Site MakeSite(const SymbolizedStack& s);

// Analyzes `trace` (opened successfully).
ProcessReport AnalyzeTrace(const TraceReader& trace, const AnalysisOptions& options);

// One line saying where a capped trace's detail ended and what that means
// for the report; "" when the trace was not capped.
std::string DetailEndLine(const ProcessReport& p);

// Orders findings by estimated loss, then severity, then rule and site.
void SortFindings(std::vector<Finding>* findings);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_ANALYSIS_H_
