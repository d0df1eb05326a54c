// The timeline: Chrome trace-event JSON, which ui.perfetto.dev (and
// chrome://tracing) open. Per process: copies, pinned-memory calls and
// synchronizations as slices on per-thread tracks; pinned bytes (by owner),
// the budget and resident memory as counter tracks; misuse as instant events;
// each finding as a slice on a track of its own, from the first to the last
// event at its call site. Events with a call site name it (args.site) and
// point at their symbolized stack in the file's stack table (sf,
// stackFrames).
#ifndef PINSHIM_ANALYZER_REPORT_PERFETTO_REPORT_H_
#define PINSHIM_ANALYZER_REPORT_PERFETTO_REPORT_H_

#include <cstdio>
#include <vector>

#include "analyzer/report/merge.h"
#include "analyzer/report/symbol_archive.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

// Streams the timeline to `out`; `traces[i]` belongs to report.processes[i],
// and so does `archives[i]` (its symbol archive, or null; a shorter vector
// means none for the rest). Returns false when writing failed.
bool WritePerfettoTrace(const MergedReport& report, const std::vector<const TraceReader*>& traces,
                        const std::vector<const SymbolArchive*>& archives, FILE* out);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_PERFETTO_REPORT_H_
