// The copy watch on its own: which accesses are taken, what the waits
// prune, and that the guard protects and reopens a copy's pages (checked
// with write(2), which reports EFAULT for an inaccessible buffer instead of
// faulting).
#include "shim/trace/copy_watch.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace pinshim {
namespace trace {
namespace {

const void* S(uintptr_t v) { return reinterpret_cast<const void*>(v); }

class CopyWatchTest : public ::testing::Test {
 protected:
  void TearDown() override { CopyWatchReset(); }
};

TEST_F(CopyWatchTest, ReadsOfSourcesAreNoRaceAndEachCopyIsTakenOnce) {
  char buf[512] = {};  // copies watch the first 256 bytes
  WatchCopy(buf, 128, /*device_to_host=*/false, S(0x10), false);
  WatchCopy(buf + 128, 128, /*device_to_host=*/true, S(0x10), false);
  EXPECT_TRUE(CopyWatchAny());
  EXPECT_FALSE(TakeCopyAccess(buf, 16, /*write=*/false));  // reading an upload's source
  EXPECT_TRUE(TakeCopyAccess(buf, 16, /*write=*/true));
  EXPECT_FALSE(TakeCopyAccess(buf, 16, /*write=*/true));  // reported once
  EXPECT_FALSE(TakeCopyAccess(buf + 300, 16, false));     // outside
  EXPECT_TRUE(TakeCopyAccess(buf + 200, 1, /*write=*/false));
  EXPECT_FALSE(CopyWatchAny());
}

TEST_F(CopyWatchTest, WaitsPruneByStreamAndByMark) {
  char buf[4][64] = {};
  WatchCopy(buf[0], 64, true, S(0x10), false);
  WatchCopy(buf[1], 64, true, S(0x20), false);
  CopyWatchStreamDone(S(0x10));
  EXPECT_FALSE(TakeCopyAccess(buf[0], 1, false));
  EXPECT_TRUE(TakeCopyAccess(buf[1], 1, false));
  // A mark covers the copies queued on its stream before it, not after.
  WatchCopy(buf[2], 64, true, S(0x30), false);
  CopyWatchMark(0xe1, S(0x30));
  WatchCopy(buf[3], 64, true, S(0x30), false);
  CopyWatchMarkDone(0xe1);
  EXPECT_FALSE(TakeCopyAccess(buf[2], 1, false));
  EXPECT_TRUE(TakeCopyAccess(buf[3], 1, false));
  WatchCopy(buf[0], 64, true, S(0x10), false);
  WatchCopy(buf[1], 64, false, S(0x20), false);
  CopyWatchAllDone();
  EXPECT_FALSE(CopyWatchAny());
  // A released range is forgotten.
  WatchCopy(buf[0], 64, true, S(0x10), false);
  CopyWatchForgetRange(buf[0] + 8, 8, true);
  EXPECT_FALSE(CopyWatchAny());
}

TEST_F(CopyWatchTest, GuardProtectsWholePagesUntilTheCopyIsTaken) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = static_cast<char*>(
      mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // A download into pages 1..2 (and a little of 0 and 3, which stay open).
  WatchCopy(mem + page - 8, 2 * page + 16, true, S(0x10), /*guard=*/true);
  EXPECT_EQ(write(fds[1], mem + page - 8, 1), 1);  // page 0: open
  errno = 0;
  EXPECT_EQ(write(fds[1], mem + page, 1), -1);  // page 1: guarded
  EXPECT_EQ(errno, EFAULT);
  bool record = false;
  EXPECT_TRUE(CopyGuardFault(reinterpret_cast<uintptr_t>(mem + page + 5), false, &record));
  EXPECT_TRUE(record);
  EXPECT_EQ(write(fds[1], mem + page, 1), 1);  // opened by the fault
  EXPECT_EQ(CopyGuardFaults(), 1u);
  // A fault the guard has nothing to do with is not its.
  EXPECT_FALSE(CopyGuardFault(reinterpret_cast<uintptr_t>(mem + 3 * page + 100), false, &record));
  // An upload's source is only write-protected, and a wait opens it.
  WatchCopy(mem, 4 * page, false, S(0x20), true);
  EXPECT_EQ(write(fds[1], mem + 2 * page, 1), 1);  // readable
  CopyWatchStreamDone(S(0x20));
  mem[2 * page] = 1;  // writable again
  close(fds[0]);
  close(fds[1]);
  munmap(mem, 4 * page);
}

}  // namespace
}  // namespace trace
}  // namespace pinshim
