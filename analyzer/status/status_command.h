// pinshim status: what the node ledger holds. Every process that pinshim
// enforces a node budget for, with its command, its pinned bytes by owner and
// its counters, then the node budget, the node total and the headroom. Dead
// processes are reclaimed before anything is shown.
#ifndef PINSHIM_ANALYZER_STATUS_STATUS_COMMAND_H_
#define PINSHIM_ANALYZER_STATUS_STATUS_COMMAND_H_

#include <sys/types.h>

#include <cstdio>
#include <string>

namespace pinshim {

// Runs pinshim status with the options in argv[1..] (argv[0] is "status").
// Exit status: 0 when the ledger was shown, when there is none, or after
// --help; 2 for a bad option or a ledger that cannot be read or is refused
// (another user's, another layout), with one line on stderr.
int RunStatusCommand(int argc, char** argv);

// Writes the help of pinshim status.
void PrintStatusHelp(FILE* out);

// What to show, once the options are parsed.
struct StatusRequest {
  std::string ledger_path;  // empty: the default ledger for shared and uid
  bool shared = false;      // the ledger shared by the users of its group
  bool json = false;
  uid_t uid = 0;  // the user acting; a ledger must be theirs unless shared
};

// Shows the ledger named by request on out, problems on err; returns the
// exit status as RunStatusCommand does.
int ShowStatus(const StatusRequest& request, FILE* out, FILE* err);

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_STATUS_STATUS_COMMAND_H_
