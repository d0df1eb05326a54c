// `pinshim report`: the command-line entry point.
//
//   pinshim report [--format text|json|perfetto] [--fail-on info|warning|error]
//                  [--calibration FILE] [--profile-out FILE] PATH...
//
// PATH is a trace file or a directory of them (*.pstrace). Output goes to
// stdout; each input that cannot be read gets one line on stderr, and the
// report covers the rest. --profile-out also writes the hot allocation
// sites of all inputs as a profile (analyzer/report/profile.h) and says so
// in one line on stderr. Exit status: 0, or 1 when --fail-on found a
// finding of at least that severity, or 2 for bad usage, when no input
// could be read at all, or when the profile could not be written.
#ifndef PINSHIM_ANALYZER_REPORT_REPORT_COMMAND_H_
#define PINSHIM_ANALYZER_REPORT_REPORT_COMMAND_H_

namespace pinshim {
namespace report {

// argv[0] is the command's own name ("report") and is not parsed.
int RunReportCommand(int argc, char** argv);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_REPORT_COMMAND_H_
