#include "shim/budget/proc.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace pinshim {
namespace budget {
namespace {

TEST(ProcStatTest, ParsesAroundACommWithSpacesAndParentheses) {
  const char* line =
      "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 7 0 "
      "98765 1000 50 "
      "18446744073709551615\n";
  ProcStat st;
  ASSERT_TRUE(ParseProcStat(line, &st));
  EXPECT_EQ(st.state, 'S');
  EXPECT_EQ(st.num_threads, 7u);
  EXPECT_EQ(st.start_time, 98765u);
}

TEST(ProcStatTest, RejectsMalformedLines) {
  ProcStat st;
  EXPECT_FALSE(ParseProcStat("", &st));
  EXPECT_FALSE(ParseProcStat("12 (x", &st));
  EXPECT_FALSE(ParseProcStat("12 (x) S 1 2 3", &st));  // too short
  EXPECT_FALSE(ParseProcStat("12 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 x 18 19", &st));
}

TEST(ProcessTest, SelfIsAliveAndKnown) {
  ProcessIdentity self;
  ReadSelfIdentity(&self);
  EXPECT_EQ(self.pid, static_cast<uint32_t>(getpid()));
  EXPECT_GT(self.start_time, 0u);
  EXPECT_NE(self.pid_ns, 0u);
  EXPECT_GT(strlen(self.comm), 0u);
  EXPECT_EQ(CheckProcess(self.pid, self.start_time), Liveness::kAlive);
  // The same pid with another start time is a different process.
  EXPECT_EQ(CheckProcess(self.pid, self.start_time + 1), Liveness::kDead);
  EXPECT_EQ(CheckProcess(0, 0), Liveness::kDead);
}

TEST(ProcessTest, ZombiesAndReapedChildrenAreDead) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  // Until reaped the child is a zombie: it holds no memory any more.
  Liveness seen = Liveness::kAlive;
  for (int i = 0; i < 2000 && seen == Liveness::kAlive; ++i) {
    seen = CheckProcess(static_cast<uint32_t>(child), 0);
    if (seen == Liveness::kAlive) usleep(1000);
  }
  EXPECT_EQ(seen, Liveness::kDead);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(CheckProcess(static_cast<uint32_t>(child), 0), Liveness::kDead);
}

TEST(ProcessTest, StoppedChildIsAlive) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  EXPECT_EQ(CheckProcess(static_cast<uint32_t>(child), 0), Liveness::kAlive);
  char comm[kCommBytes];
  EXPECT_TRUE(ReadComm(static_cast<uint32_t>(child), comm));
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
}

}  // namespace
}  // namespace budget
}  // namespace pinshim
