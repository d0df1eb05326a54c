// `pinshim report`: the command-line entry point.
//
//   pinshim report [--format text|json|perfetto] [--fail-on info|warning|error]
//                  [--calibration FILE] PATH...
//
// PATH is a trace file or a directory of them (*.pstrace). Output goes to
// stdout; each input that cannot be read gets one line on stderr, and the
// report covers the rest. Exit status: 0, or 1 when --fail-on found a
// finding of at least that severity, or 2 for bad usage or when no input
// could be read at all.
#ifndef PINSHIM_ANALYZER_REPORT_REPORT_COMMAND_H_
#define PINSHIM_ANALYZER_REPORT_REPORT_COMMAND_H_

namespace pinshim {
namespace report {

// argv[0] is the command's own name ("report") and is not parsed.
int RunReportCommand(int argc, char** argv);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_REPORT_COMMAND_H_
