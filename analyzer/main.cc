// pinshim: runs programs under libpinshim.so and analyzes what it recorded.
//
// Each command is a function taking its own argc/argv (argv[0] is the
// command's name) and returning the exit status; adding one is one line in
// kCommands plus its library in BUILD.
#include <cstdio>
#include <cstring>
#include <string>

#include "analyzer/calibrate_command.h"
#include "analyzer/fleet_command.h"
#include "analyzer/help.h"
#include "analyzer/report/archive_command.h"
#include "analyzer/report/export_command.h"
#include "analyzer/report/report_command.h"
#include "analyzer/run_command.h"
#include "analyzer/status/status_command.h"
#include "analyzer/version.h"

namespace pinshim {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

const Command kCommands[] = {
    {"run", "run a program with libpinshim.so preloaded", RunRunCommand},
    {"report", "turn traces into findings: text, JSON, HTML or a Perfetto timeline",
     report::RunReportCommand},
    {"export", "write the analysis of traces as tables (JSON Lines) for fleet tools",
     report::RunExportCommand},
    {"fleet", "analyze every trace under some directories on a Dask cluster", RunFleetCommand},
    {"archive", "make a trace directory self-contained: its symbols kept beside it",
     report::RunArchiveCommand},
    {"status", "show the node's pinned-memory ledger (enforce mode)", RunStatusCommand},
    {"calibrate", "measure this machine's copy bandwidths for report --calibration",
     RunCalibrateCommand},
};

void PrintHelp(FILE* out) {
  std::fprintf(out,
               "pinshim %s: host<->device copy problems in unmodified CUDA "
               "programs\n\n"
               "usage: pinshim COMMAND [OPTIONS] [ARGS...]\n\n"
               "Commands:\n",
               kPinshimVersion);
  for (const Command& command : kCommands) {
    std::fprintf(out, "  %-10s %s\n", command.name, command.summary);
  }
  std::fprintf(out, "  %-10s %s\n", "help", "this help; help COMMAND: a command's options");
  std::fprintf(out, "  %-10s %s\n\n", "", "help settings: every setting, with its variable");
  std::fprintf(out,
               "Example:\n"
               "  pinshim run --trace-dir traces -- ./train    # run under pinshim\n"
               "  pinshim report traces                        # what went wrong, where\n\n"
               "Options: -h, --help; --version. Documentation: man pinshim, and docs/\n"
               "in the source tree (docs/install.md, docs/configuration.md).\n");
}

const Command* FindCommand(const char* name) {
  for (const Command& command : kCommands) {
    if (std::strcmp(name, command.name) == 0) return &command;
  }
  return nullptr;
}

int UnknownCommand(const char* name) {
  std::string names;
  for (const Command& command : kCommands) {
    names += std::string(names.empty() ? "" : ", ") + command.name;
  }
  std::fprintf(stderr,
               "pinshim: unknown command \"%s\"; commands: %s, help (see "
               "pinshim --help)\n",
               name, names.c_str());
  return 2;
}

// "pinshim help COMMAND" is "pinshim COMMAND --help".
int ShowCommandHelp(const char* name) {
  const Command* command = FindCommand(name);
  if (command == nullptr) return UnknownCommand(name);
  char help_flag[] = "--help";
  char* args[] = {const_cast<char*>(command->name), help_flag, nullptr};
  return command->run(2, args);
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    PrintHelp(stderr);
    return 2;
  }
  const char* first = argv[1];
  if (std::strcmp(first, "--help") == 0 || std::strcmp(first, "-h") == 0 ||
      std::strcmp(first, "help") == 0) {
    if (argc >= 3 && std::strcmp(argv[2], "settings") == 0) {
      PrintVariables(stdout);
      return 0;
    }
    if (argc >= 3) return ShowCommandHelp(argv[2]);
    PrintHelp(stdout);
    return 0;
  }
  if (std::strcmp(first, "--version") == 0) {
    std::printf("pinshim %s\n", kPinshimVersion);
    return 0;
  }
  if (first[0] == '-') {
    std::fprintf(stderr,
                 "pinshim: unknown option \"%s\"; accepted before a command: "
                 "--help, --version\n",
                 first);
    return 2;
  }
  const Command* command = FindCommand(first);
  if (command == nullptr) return UnknownCommand(first);
  return command->run(argc - 1, argv + 1);
}

}  // namespace
}  // namespace pinshim

int main(int argc, char** argv) { return pinshim::Main(argc, argv); }
