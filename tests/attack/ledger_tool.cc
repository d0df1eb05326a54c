// What another user who can write a node ledger (a member of a shared
// ledger's group) can do to it, for tests/attack:
//
//   ledger_tool hold PATH          takes the lock, prints "locked", stops
//                                  itself (SIGSTOP) still holding it
//   ledger_tool forge-tid PATH TID writes TID into the lock word, as if that
//                                  thread held the lock
//   ledger_tool damage PATH        writes totals no run of pinshim writes,
//                                  and a slot whose command holds escapes
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim/budget/ledger.h"
#include "shim/budget/proc.h"

using pinshim::budget::Ledger;
using pinshim::budget::LedgerOpen;
using pinshim::budget::LedgerOpenOptions;

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: ledger_tool hold|forge-tid|damage PATH [TID]\n");
    return 2;
  }
  LedgerOpenOptions options;
  options.path = argv[2];
  options.shared = true;  // whoever owns it
  options.uid = geteuid();
  Ledger ledger;
  char message[640];
  if (ledger.Open(options, message, sizeof(message)) != LedgerOpen::kOk) {
    fprintf(stderr, "ledger_tool: %s\n", message);
    return 1;
  }
  const char* what = argv[1];
  if (strcmp(what, "hold") == 0) {
    if (!ledger.Lock()) return 1;
    printf("locked\n");
    fflush(stdout);
    raise(SIGSTOP);
    return 0;
  }
  if (strcmp(what, "forge-tid") == 0 && argc == 4) {
    __atomic_store_n(&ledger.header().mutex.__data.__lock, atoi(argv[3]), __ATOMIC_SEQ_CST);
    return 0;
  }
  if (strcmp(what, "damage") == 0) {
    if (!ledger.Lock()) return 1;
    pinshim::budget::ProcessIdentity id;
    pinshim::budget::ReadSelfIdentity(&id);
    snprintf(id.comm, sizeof(id.comm), "\x1b[2J\nFAKE");
    const int slot = ledger.ClaimSlotLocked(id, 0, 0);
    ledger.header().reserved.store(uint64_t{1} << 60);
    ledger.header().pinned.store(uint64_t{1} << 60);
    ledger.Unlock();
    return slot >= 0 ? 0 : 1;
  }
  fprintf(stderr, "ledger_tool: unknown command %s\n", what);
  return 2;
}
