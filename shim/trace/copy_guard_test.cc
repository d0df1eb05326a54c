// The copy guard with its signal handlers in place: plain loads and stores
// next to a queued copy's bytes, on the pages it shares with them, run as
// without the guard and are not reported; the copy's own bytes, to the
// last one, are.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "shim/trace/copy_watch.h"
#include "shim/trace/wc_guard.h"

namespace pinshim {
namespace trace {
namespace {

std::atomic<int> g_records{0};
std::atomic<uintptr_t> g_last_address{0};
std::atomic<int> g_program_traps{0};

void OnAccess(void*, uintptr_t address, bool) {
  g_records.fetch_add(1);
  g_last_address.store(address);
}

void ProgramTrap(int) { g_program_traps.fetch_add(1); }

// The program's own SIGTRAP handler comes first, as it would in a program
// that has one; the guard's handlers go on top.
class GuardEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
#if !defined(__x86_64__)
    return;  // the guard needs x86-64 (wc_guard.h)
#endif
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ProgramTrap;
    ASSERT_EQ(sigaction(SIGTRAP, &sa, nullptr), 0);
    char err[256];
    ASSERT_TRUE(StartCopyGuard(OnAccess, err, sizeof(err))) << err;
    ASSERT_EQ(CopyGuardPagesNow(), GuardPages::kAll);
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new GuardEnvironment);

const void* S(uintptr_t v) { return reinterpret_cast<const void*>(v); }

size_t Page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Pages standing for one of the program's cuMemHostAlloc blocks (the end
// pages of ranges inside it are guarded).
char* MapPages(size_t pages) {
  void* p =
      mmap(nullptr, pages * Page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  CopyWatchAddBlock(p, pages * Page());
  return static_cast<char*>(p);
}

void UnmapPages(char* p, size_t pages) {
  CopyWatchRemoveBlock(p);
  munmap(p, pages * Page());
}

class CopyGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(__x86_64__)
    GTEST_SKIP() << "the guard needs x86-64";
#endif
    g_records.store(0);
  }
  void TearDown() override { CopyWatchReset(); }
};

// A region as a malloc'd block lays it out: a header and a struct of
// someone else's before the range, another after it, on its end pages.
struct Layout {
  char* mem;
  volatile long* before;  // on the range's first page
  char* begin;
  char* end;
  volatile long* after;  // on its last page
};

Layout MakeLayout(char* mem) {
  Layout l;
  l.mem = mem;
  l.before = reinterpret_cast<volatile long*>(mem + 64);
  l.begin = mem + 256;
  l.end = mem + 2 * Page() + 1000;
  l.after = reinterpret_cast<volatile long*>(l.end + 24);
  return l;
}

TEST_F(CopyGuardTest, NeighboursOnTheEndPagesRunUnreportedAndTheRangeIsCaught) {
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  Layout l = MakeLayout(mem);
  *l.before = 41;
  *l.after = 7;
  WatchCopy(l.begin, l.end - l.begin, /*device_to_host=*/true, S(0x10), GuardPages::kAll);
  const uint64_t steps = CopyGuardSteps();
  *l.before += 1;  // a load and a store, stepped over
  *l.after *= 3;
  EXPECT_EQ(*l.before, 42);
  EXPECT_EQ(*l.after, 21);
  EXPECT_GE(CopyGuardSteps() - steps, 4u);
  EXPECT_EQ(g_records.load(), 0);
  EXPECT_TRUE(CopyWatchAny());
  // The first byte of the range, on the page it shares: caught.
  volatile char* first = l.begin;
  (void)*first;
  EXPECT_EQ(g_records.load(), 1);
  EXPECT_EQ(g_last_address.load(), reinterpret_cast<uintptr_t>(l.begin));
  EXPECT_FALSE(CopyWatchAny());
  *l.before += 1;  // open now
  UnmapPages(mem, 4);
}

TEST_F(CopyGuardTest, TheLastByteIsCaughtAfterANeighbourOnItsPage) {
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  Layout l = MakeLayout(mem);
  WatchCopy(l.begin, l.end - l.begin, /*device_to_host=*/true, S(0x10), GuardPages::kAll);
  *l.after = 5;  // stepped over: the guard stays on for the range
  EXPECT_EQ(g_records.load(), 0);
  volatile char* last = l.end - 1;
  *last = 1;
  EXPECT_EQ(g_records.load(), 1);
  EXPECT_EQ(g_last_address.load(), reinterpret_cast<uintptr_t>(l.end - 1));
  UnmapPages(mem, 4);
}

TEST_F(CopyGuardTest, AnUploadSourceIsCaughtOnlyWhenWritten) {
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  Layout l = MakeLayout(mem);
  WatchCopy(l.begin, l.end - l.begin, /*device_to_host=*/false, S(0x10), GuardPages::kAll);
  volatile char* first = l.begin;
  (void)*first;   // reading a source: no fault at all
  *l.before = 3;  // a store next to it: stepped over
  EXPECT_EQ(g_records.load(), 0);
  *first = 2;
  EXPECT_EQ(g_records.load(), 1);
  UnmapPages(mem, 4);
}

// One load across two guarded pages, next to both copies' bytes: it faults
// on each page inside one step, and completes with the right value.
TEST_F(CopyGuardTest, AnAccessAcrossTwoGuardedPagesIsOneStep) {
  char* mem = MapPages(2);
  ASSERT_NE(mem, nullptr);
  const size_t page = Page();
  for (size_t i = 0; i < 16; ++i) mem[page - 8 + i] = static_cast<char>(i + 1);
  WatchCopy(mem + 8, 8, true, S(0x10), GuardPages::kAll);
  WatchCopy(mem + page + 64, 8, true, S(0x20), GuardPages::kAll);
  uint64_t value;
  const volatile char* across = mem + page - 4;
  memcpy(&value, const_cast<const char*>(across), sizeof(value));
  uint64_t expected;
  const char bytes[8] = {5, 6, 7, 8, 9, 10, 11, 12};
  memcpy(&expected, bytes, sizeof(expected));
  EXPECT_EQ(value, expected);
  EXPECT_EQ(g_records.load(), 0);
  EXPECT_TRUE(CopyWatchAny());
  UnmapPages(mem, 2);
}

TEST_F(CopyGuardTest, TrapsThatAreNotTheGuardsReachTheProgramsHandler) {
  const int before = g_program_traps.load();
  raise(SIGTRAP);
  EXPECT_EQ(g_program_traps.load(), before + 1);
}

// Threads hammer the data next to a range while the range is guarded and
// released over and over: no crash, no report, no lost update.
TEST_F(CopyGuardTest, NeighboursUnderStressAreNeverHarmedNorReported) {
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  Layout l = MakeLayout(mem);
  constexpr int kThreads = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  long counts[kThreads] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      volatile long* mine = (t % 2 == 0 ? l.before : l.after) + t;
      *mine = 0;
      started.fetch_add(1);
      long n = 0;
      while (!stop.load(std::memory_order_relaxed) || n < 1000) {
        *mine = *mine + 1;
        ++n;
      }
      counts[t] = n;
    });
  }
  while (started.load() < kThreads) std::this_thread::yield();
  const uint64_t steps = CopyGuardSteps();
  // At least 2000 rounds, and on until a neighbour's access met a guard (on
  // a loaded machine the threads may not run during the first 2000), for at
  // most 10 s.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (int i = 0;
       i < 2000 || (CopyGuardSteps() == steps && std::chrono::steady_clock::now() < give_up); ++i) {
    WatchCopy(l.begin, l.end - l.begin, i % 2 == 0, S(0x10), GuardPages::kAll);
    CopyWatchStreamDone(S(0x10));
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(((t % 2 == 0 ? l.before : l.after) + t)[0], counts[t]) << t;
  }
  EXPECT_EQ(g_records.load(), 0);
  EXPECT_GT(CopyGuardSteps(), steps)
      << "no neighbour access met a guard: the stress proves nothing";
  UnmapPages(mem, 4);
}

// Last: a program that takes SIGTRAP over gets no steps; the guard gives
// up the end page instead, and the access still completes unreported.
TEST_F(CopyGuardTest, WithoutItsTrapHandlerTheGuardGivesUpTheEndPage) {
  char* mem = MapPages(4);
  ASSERT_NE(mem, nullptr);
  Layout l = MakeLayout(mem);
  WatchCopy(l.begin, l.end - l.begin, true, S(0x10), GuardPages::kAll);
  struct sigaction mine, ours;
  memset(&mine, 0, sizeof(mine));
  mine.sa_handler = ProgramTrap;
  ASSERT_EQ(sigaction(SIGTRAP, &mine, &ours), 0);
  EXPECT_EQ(CopyGuardPagesNow(), GuardPages::kWhole);
  const int traps = g_program_traps.load();
  *l.before = 9;
  EXPECT_EQ(*l.before, 9);
  EXPECT_EQ(g_program_traps.load(), traps);
  EXPECT_EQ(g_records.load(), 0);
  volatile char* inner = l.begin + Page();  // a whole page: still guarded
  (void)*inner;
  EXPECT_EQ(g_records.load(), 1);
  ASSERT_EQ(sigaction(SIGTRAP, &ours, nullptr), 0);
  UnmapPages(mem, 4);
}

}  // namespace
}  // namespace trace
}  // namespace pinshim
