// `pinshim export`: the analysis of traces as tables (analyzer/report/export.h).
//
//   pinshim export --out DIR [--calibration FILE] [--quiet] PATH...
//
// PATH is a trace file or a directory of them (*.pstrace). Each input that
// cannot be read becomes a row of the problems table and one line on
// stderr, and the tables cover the rest. Exit status: 0 (also when some
// inputs could not be read), or 2 for bad usage, when no input could be
// read at all, or when the tables could not be written.
#ifndef PINSHIM_ANALYZER_REPORT_EXPORT_COMMAND_H_
#define PINSHIM_ANALYZER_REPORT_EXPORT_COMMAND_H_

namespace pinshim {
namespace report {

// argv[0] is the command's own name ("export") and is not parsed.
int RunExportCommand(int argc, char** argv);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_EXPORT_COMMAND_H_
