// The inputs of the commands that read traces (report, export): PATH
// arguments expanded into trace files, the symbol archives beside them, and
// every trace opened and analyzed a few at a time.
#ifndef PINSHIM_ANALYZER_REPORT_INPUTS_H_
#define PINSHIM_ANALYZER_REPORT_INPUTS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "analyzer/report/analysis.h"
#include "analyzer/report/symbol_archive.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

// Expands PATH arguments (a trace file, or a directory of *.pstrace files)
// into trace files, sorted within each directory; problems get one line each.
std::vector<std::string> CollectInputs(const std::vector<std::string>& paths,
                                       std::vector<std::string>* problems);

struct Input {
  std::string path;
  std::unique_ptr<TraceReader> reader;  // null when the trace could not be opened
  std::string error;                    // why, in one line
  ProcessReport report;
};

using ArchiveMap = std::map<std::string, std::unique_ptr<SymbolArchive>>;

// The symbol archives (pinshim archive) of the inputs' directories, by
// directory; a directory without one maps to null. A damaged archive is one
// problem, and the analysis symbolizes from the files instead.
ArchiveMap LoadArchives(const std::vector<Input>& inputs, std::vector<std::string>* problems);

// The archive of the directory holding `path`, or null.
const SymbolArchive* ArchiveFor(const ArchiveMap& archives, const std::string& path);

// Opens and analyzes every input on up to one thread per core.
void AnalyzeAll(std::vector<Input>* inputs, const AnalysisOptions& shared,
                const ArchiveMap& archives);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_INPUTS_H_
