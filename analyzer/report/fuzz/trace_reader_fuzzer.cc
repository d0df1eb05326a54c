// libFuzzer target: any bytes as a trace, through the reader, every rule and
// both report formats. Symbolization is left out (it would open whatever
// paths the input names). Built by tests/trace/fuzz/run_fuzzer.sh; the same
// entry point runs the kept inputs in fuzz_regression_test.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/report/analysis.h"
#include "analyzer/report/json_report.h"
#include "analyzer/report/merge.h"
#include "analyzer/report/text_report.h"
#include "analyzer/report/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pinshim::report;
  TraceReader reader;
  std::string error;
  if (!reader.OpenBuffer(data, size, &error)) return 0;
  static const AnalysisOptions* options = [] {
    auto* o = new AnalysisOptions;
    o->symbolize = false;
    return o;
  }();
  std::vector<ProcessReport> reports;
  reports.push_back(AnalyzeTrace(reader, *options));
  MergedReport merged = Merge(std::move(reports));
  std::string out;
  WriteTextReport(merged, &out);
  WriteJsonReport(merged, &out);
  return 0;
}
