// pinshim run: runs a program with libpinshim.so preloaded.
#ifndef PINSHIM_ANALYZER_RUN_COMMAND_H_
#define PINSHIM_ANALYZER_RUN_COMMAND_H_

namespace pinshim {

// Exit statuses of pinshim run itself; otherwise the status is the command's.
constexpr int kExitUsage = 2;            // bad option, value or setup
constexpr int kExitCannotExecute = 126;  // found but not executable
constexpr int kExitNotFound = 127;       // no such command

// Validates the options in argv[1..] (argv[0] is "run"), sets the PINSHIM_
// variables and LD_PRELOAD and replaces this process with the command. Returns
// only when it could not: 0 after --help, else one of the kExit* statuses
// after printing one line per problem to stderr.
int RunRunCommand(int argc, char** argv);

// Writes the help of pinshim run.
void PrintRunHelp(bool to_stdout);

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_RUN_COMMAND_H_
