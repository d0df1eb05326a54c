// The fork guard of shim/core/phdr.h with a fork handler registered before
// it: that handler's child (and parent) part runs while the guard still
// holds fork off, and one that iterates the modules must not wait for the
// guard. (pinshim's own fork handlers are registered after the guard, but a
// program's or another library's may come first.) Its own binary: the
// guard registers once per process, and this needs it registered second.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "shim/core/phdr.h"

namespace pinshim {
namespace {

int g_modules = 0;

int CountModule(struct dl_phdr_info*, size_t, void* data) {
  ++*static_cast<int*>(data);
  return 0;
}

void Iterate() {
  g_modules = 0;
  IteratePhdr(CountModule, &g_modules);
}

TEST(PhdrForkOrder, AHandlerRegisteredBeforeTheGuardMayIterate) {
  pthread_atfork(Iterate, Iterate, Iterate);
  InstallPhdrForkGuard();
  alarm(10);  // a handler that waits for the guard hangs the fork
  pid_t child = fork();
  if (child == 0) _exit(g_modules > 0 ? 0 : 3);
  alarm(0);
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_GT(g_modules, 0);  // the parent's handler iterated too
}

}  // namespace
}  // namespace pinshim
