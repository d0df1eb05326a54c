// `pinshim export`'s tables: the analysis of each process as JSON Lines
// files, one per table, for tools that reduce many processes at once
// (`pinshim fleet`). The schema, "pinshim-export" version
// kExportSchemaVersion, is documented in analyzer/report/SCHEMA.md.
#ifndef PINSHIM_ANALYZER_REPORT_EXPORT_H_
#define PINSHIM_ANALYZER_REPORT_EXPORT_H_

#include <map>
#include <string>
#include <vector>

#include "analyzer/report/analysis.h"

namespace pinshim {
namespace report {

constexpr int kExportSchemaVersion = 1;

// An input that could not be read: its path ("" when the line is about no
// one trace) and the reason, in one line.
struct ExportProblem {
  std::string trace;
  std::string reason;
};

// The tables' text by file name ("processes.jsonl", ..., "manifest.json").
// The processes must have been analyzed with AnalysisOptions::site_tables.
std::map<std::string, std::string> ExportTables(const std::vector<ProcessReport>& processes,
                                                const std::vector<ExportProblem>& problems,
                                                const std::string& model_source);

// Writes the tables into `dir`, creating it (mode 0755 less the umask) when
// missing; `dir` must be a directory, not a symbolic link, and each file is
// written under a temporary name and renamed (shim/core/safe_file.h).
// Returns false with a one-line reason; files written before a failure stay.
bool WriteExport(const std::string& dir, const std::map<std::string, std::string>& tables,
                 std::string* error);

// The key of a process in the tables: its host, pid and start times hashed,
// so that the same trace read twice gives the same key.
std::string ProcessKey(const ProcessInfo& info);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_EXPORT_H_
