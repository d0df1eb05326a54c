// Helpers shared by the budget tests.
#ifndef PINSHIM_SHIM_BUDGET_TEST_UTIL_H_
#define PINSHIM_SHIM_BUDGET_TEST_UTIL_H_

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "shim/budget/ledger.h"

namespace pinshim {
namespace budget {

// A ledger path no other test, test run or real pinshim process uses.
inline std::string UniqueLedgerPath(const std::string& tag) {
  const char* dir = getenv("TEST_TMPDIR");
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/pinshim-ledger-test-" + tag +
                     "-" + std::to_string(getpid());
  unlink(path.c_str());
  return path;
}

// Opens the ledger at path as the current user, creating it if asked.
inline ::testing::AssertionResult OpenLedger(const std::string& path, Ledger* ledger,
                                             bool create = false) {
  LedgerOpenOptions options;
  options.path = path.c_str();
  options.create = create;
  options.uid = geteuid();
  char message[512];
  if (ledger->Open(options, message, sizeof(message)) == LedgerOpen::kOk) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << message;
}

// Runs fn in a child process; returns its wait status. fn's return value is
// the child's exit code; the child never returns into the test framework.
template <typename Fn>
int RunInChild(Fn fn) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace budget
}  // namespace pinshim

#endif  // PINSHIM_SHIM_BUDGET_TEST_UTIL_H_
