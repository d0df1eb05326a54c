// The copy watch on its own: which accesses are taken, what the waits
// prune, and that the guard protects and reopens a copy's pages (checked
// with write(2), which reports EFAULT for an inaccessible buffer instead of
// faulting).
#include "shim/trace/copy_watch.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <thread>
#include <vector>

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
  WatchCopy(buf, 128, /*device_to_host=*/false, S(0x10), GuardPages::kNone);
  WatchCopy(buf + 128, 128, /*device_to_host=*/true, S(0x10), GuardPages::kNone);
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
  WatchCopy(buf[0], 64, true, S(0x10), GuardPages::kNone);
  WatchCopy(buf[1], 64, true, S(0x20), GuardPages::kNone);
  CopyWatchStreamDone(S(0x10));
  EXPECT_FALSE(TakeCopyAccess(buf[0], 1, false));
  EXPECT_TRUE(TakeCopyAccess(buf[1], 1, false));
  // A mark covers the copies queued on its stream before it, not after.
  WatchCopy(buf[2], 64, true, S(0x30), GuardPages::kNone);
  CopyWatchMark(0xe1, S(0x30));
  WatchCopy(buf[3], 64, true, S(0x30), GuardPages::kNone);
  CopyWatchMarkDone(0xe1);
  EXPECT_FALSE(TakeCopyAccess(buf[2], 1, false));
  EXPECT_TRUE(TakeCopyAccess(buf[3], 1, false));
  WatchCopy(buf[0], 64, true, S(0x10), GuardPages::kNone);
  WatchCopy(buf[1], 64, false, S(0x20), GuardPages::kNone);
  CopyWatchAllDone();
  EXPECT_FALSE(CopyWatchAny());
  // A released range is forgotten.
  WatchCopy(buf[0], 64, true, S(0x10), GuardPages::kNone);
  CopyWatchForgetRange(buf[0] + 8, 8, true);
  EXPECT_FALSE(CopyWatchAny());
}

// Whether the kernel can read `p` (write(2) answers EFAULT where it
// cannot, instead of faulting).
bool Readable(const void* p) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  bool ok = write(fds[1], p, 1) == 1;
  close(fds[0]);
  close(fds[1]);
  return ok;
}

char* MapPages(size_t pages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

uintptr_t U(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST_F(CopyWatchTest, WholePageGuardLeavesTheEndPagesOpen) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  // A download into pages 1..2 (and a little of 0 and 3, which stay open).
  WatchCopy(mem + page - 8, 2 * page + 16, true, S(0x10), GuardPages::kWhole);
  EXPECT_TRUE(Readable(mem + page - 8));  // page 0: open
  EXPECT_FALSE(Readable(mem + page));     // page 1: guarded
  EXPECT_EQ(CopyGuardFault(U(mem + page + 5), false), GuardFault::kRecord);
  EXPECT_TRUE(Readable(mem + page));  // opened by the fault
  EXPECT_EQ(CopyGuardFaults(), 1u);
  // A fault the guard has nothing to do with is not its.
  EXPECT_EQ(CopyGuardFault(U(mem + 3 * page + 100), false), GuardFault::kNotGuard);
  // An upload's source is only write-protected, and a wait opens it.
  WatchCopy(mem, 4 * page, false, S(0x20), GuardPages::kWhole);
  EXPECT_TRUE(Readable(mem + 2 * page));
  CopyWatchStreamDone(S(0x20));
  mem[2 * page] = 1;  // writable again
  CopyWatchRemoveBlock(mem);
  munmap(mem, 4 * page);
}

TEST_F(CopyWatchTest, FullGuardCoversTheEndPagesAndStepsOverTheirNeighbours) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  CopyWatchAddBlock(mem, 4 * page);  // the program's cuMemHostAlloc block
  char* begin = mem + page - 8;
  char* end = mem + 3 * page + 16;
  WatchCopy(begin, end - begin, true, S(0x10), GuardPages::kAll);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(Readable(mem + i * page)) << i;
  // Bytes next to the range, on its end pages: stepped over, not taken.
  EXPECT_EQ(CopyGuardFault(U(mem), false), GuardFault::kStep);
  EXPECT_EQ(CopyGuardFault(U(begin - 1), true), GuardFault::kStep);
  EXPECT_EQ(CopyGuardFault(U(end), false), GuardFault::kStep);
  // The step opens the page for one instruction, then closes it again.
  CopyGuardOpenPage(U(mem));
  EXPECT_TRUE(Readable(mem));
  CopyGuardRestorePage(U(mem));
  EXPECT_FALSE(Readable(mem));
  EXPECT_TRUE(CopyWatchAny());
  // The last byte of the range, on its last page, is an access.
  EXPECT_EQ(CopyGuardFault(U(end - 1), false), GuardFault::kRecord);
  EXPECT_FALSE(CopyWatchAny());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(Readable(mem + i * page)) << i;
  // An upload's source: reading it is no race (a store is).
  WatchCopy(begin, end - begin, false, S(0x20), GuardPages::kAll);
  EXPECT_TRUE(Readable(mem));
  EXPECT_EQ(CopyGuardFault(U(mem), true), GuardFault::kStep);
  EXPECT_EQ(CopyGuardFault(U(begin), true), GuardFault::kRecord);
  CopyWatchRemoveBlock(mem);
  munmap(mem, 4 * page);
}

// End pages outside the program's cuMemHostAlloc blocks may hold anyone's
// data (a registered malloc'd buffer's neighbours): they stay open.
TEST_F(CopyWatchTest, EndPagesOutsideTheProgramsBlocksStayOpen) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  CopyWatchAddBlock(mem + page, page);  // a block of page 1 alone
  WatchCopy(mem + 100, 2 * page, true, S(0x10), GuardPages::kAll);
  EXPECT_TRUE(Readable(mem));             // no block: open
  EXPECT_FALSE(Readable(mem + page));     // inside the range
  EXPECT_TRUE(Readable(mem + 2 * page));  // no block: open
  CopyWatchStreamDone(S(0x10));
  CopyWatchRemoveBlock(mem + page);
  CopyWatchAddBlock(mem, 4 * page);
  CopyWatchRemoveBlock(mem);  // removed: open again
  WatchCopy(mem + 100, 2 * page, true, S(0x10), GuardPages::kAll);
  EXPECT_TRUE(Readable(mem));
  munmap(mem, 4 * page);
}

// A malloc chunk glibc mapped for itself: a range of its buffer has its
// end pages guarded; releasing the chunk (free) opens them at once, before
// the allocator reads the header, and leaves the chunk out for good.
TEST_F(CopyWatchTest, AChunksEndPagesAreGuardedUntilItIsReleased) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  char* buffer = mem + 16;        // after the chunk's header
  CopyWatchReleaseChunk(buffer);  // no chunk yet: nothing happens
  CopyWatchAddChunk(buffer, mem, 4 * page);
  WatchCopy(buffer, 3 * page, true, S(0x10), GuardPages::kAll);
  EXPECT_FALSE(Readable(mem));                                      // the header's page
  EXPECT_FALSE(Readable(mem + 3 * page));                           // the padding's page
  EXPECT_EQ(CopyGuardFault(U(mem + 8), false), GuardFault::kStep);  // the header
  EXPECT_EQ(CopyGuardFault(U(buffer), false), GuardFault::kRecord);
  WatchCopy(buffer, 3 * page, true, S(0x10), GuardPages::kAll);
  CopyWatchReleaseChunk(mem + 32);  // not the chunk's buffer: nothing happens
  EXPECT_FALSE(Readable(mem));
  CopyWatchReleaseChunk(buffer);
  EXPECT_TRUE(Readable(mem));
  EXPECT_TRUE(Readable(mem + 3 * page));
  EXPECT_FALSE(CopyWatchAny());
  WatchCopy(buffer, 3 * page, true, S(0x10), GuardPages::kAll);
  EXPECT_TRUE(Readable(mem));  // released: its end pages stay open
  EXPECT_FALSE(Readable(mem + page));
  CopyWatchStreamDone(S(0x10));
  // A cuMemHostAlloc block's removal leaves a chunk at the same address.
  CopyWatchAddChunk(buffer, mem, 4 * page);
  CopyWatchRemoveBlock(mem);
  WatchCopy(buffer, 3 * page, true, S(0x10), GuardPages::kAll);
  EXPECT_FALSE(Readable(mem));
  CopyWatchReleaseChunk(buffer);
  EXPECT_TRUE(Readable(mem));
  munmap(mem, 4 * page);
}

TEST_F(CopyWatchTest, AnEndPageSharedByTwoCopiesStaysGuardedForTheOther) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  CopyWatchAddBlock(mem, 4 * page);     // the program's cuMemHostAlloc block
  char* middle = mem + 2 * page + 100;  // two downloads meet inside page 2
  WatchCopy(mem + 10, middle - (mem + 10), true, S(0x10), GuardPages::kAll);
  WatchCopy(middle, mem + 4 * page - 10 - middle, true, S(0x20), GuardPages::kAll);
  EXPECT_EQ(CopyGuardFault(U(middle - 1), false), GuardFault::kRecord);
  EXPECT_TRUE(Readable(mem));              // the first copy's own pages open
  EXPECT_FALSE(Readable(mem + 2 * page));  // the shared one still the second's
  EXPECT_EQ(CopyGuardFault(U(middle - 1), false), GuardFault::kStep);
  EXPECT_EQ(CopyGuardFault(U(middle), false), GuardFault::kRecord);
  EXPECT_TRUE(Readable(mem + 2 * page));
  CopyWatchRemoveBlock(mem);
  munmap(mem, 4 * page);
}

TEST_F(CopyWatchTest, HandingNeighboursToTheKernelGivesUpOnlyThatEndPage) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  CopyWatchAddBlock(mem, 4 * page);  // the program's cuMemHostAlloc block
  char* begin = mem + 100;
  char* end = mem + 3 * page + 100;
  WatchCopy(begin, end - begin, true, S(0x10), GuardPages::kAll);
  CopyGuardOpenFor(mem, 50);  // next to the range: page 0 given up
  EXPECT_TRUE(Readable(mem));
  EXPECT_FALSE(Readable(mem + page));
  EXPECT_FALSE(Readable(end));
  CopyGuardOpenFor(begin, 50);  // the range itself: an access, for the hooks to take
  EXPECT_FALSE(Readable(mem + page));
  EXPECT_TRUE(CopyWatchAny());
  CopyGuardDropPage(U(mem + 3 * page));
  EXPECT_TRUE(Readable(end));
  EXPECT_FALSE(Readable(mem + 2 * page));
  EXPECT_TRUE(TakeCopyAccess(begin, 1, false));  // still watched
  EXPECT_TRUE(Readable(mem + 2 * page));
  CopyWatchRemoveBlock(mem);
  munmap(mem, 4 * page);
}

TEST_F(CopyWatchTest, LiftingAGuardOpensEveryPageNoOtherGuardWants) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(8);
  ASSERT_NE(mem, nullptr);
  CopyWatchAddBlock(mem, 8 * page);  // the program's cuMemHostAlloc block
  WatchCopy(mem, 8 * page, true, S(0x10), GuardPages::kAll);
  WatchCopy(mem + 7 * page, 100, true, S(0x20), GuardPages::kAll);
  CopyWatchStreamDone(S(0x10));
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(Readable(mem + i * page)) << i;
  EXPECT_FALSE(Readable(mem + 7 * page));
  CopyWatchStreamDone(S(0x20));
  EXPECT_TRUE(Readable(mem + 7 * page));
  CopyWatchRemoveBlock(mem);
  munmap(mem, 8 * page);
}

TEST_F(CopyWatchTest, AStalePageIsHealedNotLeftFaulting) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* mem = MapPages(2);
  ASSERT_NE(mem, nullptr);
  CopyWatchAddBlock(mem, 2 * page);  // the program's cuMemHostAlloc block
  WatchCopy(mem + 100, page, true, S(0x10), GuardPages::kAll);
  CopyWatchStreamDone(S(0x10));
  // As if a lift had lost a race: protected with no guard left.
  ASSERT_EQ(mprotect(mem, 2 * page, PROT_NONE), 0);
  EXPECT_EQ(CopyGuardFault(U(mem + 5), false), GuardFault::kRetry);
  EXPECT_TRUE(Readable(mem + 5));
  CopyWatchRemoveBlock(mem);
  munmap(mem, 2 * page);
}

// Threads arming and lifting overlapping guards on the same pages (the
// same range both ways, as a program that uploads and downloads one buffer
// on per-thread streams does): once every copy is gone, every page must be
// open again. A lift that computed its protection before another lift
// finished used to leave pages protected with no guard to answer a fault.
TEST_F(CopyWatchTest, ConcurrentOverlappingGuardsLeaveNoPageProtected) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  constexpr int kPages = 8;
  char* mem = MapPages(kPages);
  ASSERT_NE(mem, nullptr);
  CopyWatchAddBlock(mem, kPages * page);  // the program's cuMemHostAlloc block
  constexpr int kThreads = 4;
  int stuck = 0;
  for (int round = 0; round < 60 && stuck == 0; ++round) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          char* at = mem + ((t + i) % 3) * 100;
          WatchCopy(at, (kPages - 1) * page, false, S(0x1), GuardPages::kAll);
          WatchCopy(at, (kPages - 1) * page, true, S(0x1), GuardPages::kAll);
          CopyWatchStreamDone(S(0x1));
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_FALSE(CopyWatchAny());
    for (int i = 0; i < kPages; ++i) stuck += Readable(mem + i * page) ? 0 : 1;
  }
  EXPECT_EQ(stuck, 0);
  CopyWatchRemoveBlock(mem);
  munmap(mem, kPages * page);
}

}  // namespace
}  // namespace trace
}  // namespace pinshim
