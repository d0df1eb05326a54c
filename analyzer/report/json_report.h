// The JSON report (schema: analyzer/report/SCHEMA.md, "version": 1).
#ifndef PINSHIM_ANALYZER_REPORT_JSON_REPORT_H_
#define PINSHIM_ANALYZER_REPORT_JSON_REPORT_H_

#include <string>

#include "analyzer/report/json_writer.h"
#include "analyzer/report/merge.h"

namespace pinshim {
namespace report {

constexpr int kJsonReportVersion = 1;

// Appends the report to *out.
void WriteJsonReport(const MergedReport& report, std::string* out);

// Writes a finding's evidence as the report does (sites as objects).
void WriteEvidenceJson(const Value& evidence, JsonWriter* w);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_JSON_REPORT_H_
