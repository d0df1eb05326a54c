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
#include "shim/trace/crc32c.h"
#include "shim/trace/trace_format.h"

namespace {

using namespace pinshim::report;
namespace trace = pinshim::trace;

// Most mutations break a checksum, and the reader then only resynchronises.
// Fixing the checksums of every frame, as its length field delimits it,
// lets the mutations reach the payload decoders too.
std::string WithGoodChecksums(const uint8_t* data, size_t size) {
  std::string s(reinterpret_cast<const char*>(data), size);
  uint8_t* p = reinterpret_cast<uint8_t*>(&s[0]);
  size_t pos = trace::kFileHeaderBytes;
  while (pos + trace::kFrameHeaderBytes <= size) {
    uint32_t len = trace::LoadU32(p + pos + 4);
    if (len > size - pos - trace::kFrameHeaderBytes) break;
    uint32_t crc = trace::Crc32cExtend(0, p + pos + 8, 1 + static_cast<size_t>(len));
    trace::StoreU32(p + pos, trace::MaskCrc(crc));
    pos += trace::kFrameHeaderBytes + len;
  }
  return s;
}

void Run(const uint8_t* data, size_t size) {
  TraceReader reader;
  std::string error;
  if (!reader.OpenBuffer(data, size, &error)) return;
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
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Run(data, size);
  std::string fixed = WithGoodChecksums(data, size);
  Run(reinterpret_cast<const uint8_t*>(fixed.data()), fixed.size());
  return 0;
}
