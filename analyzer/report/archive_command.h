// `pinshim archive DIR...`: makes trace directories self-contained in place
// (symbol_archive.h). RunArchiveCommand is the entry point the pinshim tool
// calls; argv[0] is the command's name.
#ifndef PINSHIM_ANALYZER_REPORT_ARCHIVE_COMMAND_H_
#define PINSHIM_ANALYZER_REPORT_ARCHIVE_COMMAND_H_

namespace pinshim {
namespace report {

int RunArchiveCommand(int argc, char** argv);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_ARCHIVE_COMMAND_H_
