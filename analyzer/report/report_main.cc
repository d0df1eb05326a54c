// Standalone `pinshim-report`, the same command as `pinshim report`.
#include "analyzer/report/report_command.h"

int main(int argc, char** argv) { return pinshim::report::RunReportCommand(argc, argv); }
