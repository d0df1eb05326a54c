#include "shim/core/stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

namespace pinshim {
namespace {

const char* Name(ApiId api) { return api == 1 ? "cuMemcpyHtoD_v2" : "cuMemHostAlloc"; }

std::string Summary() {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  WriteSummary(fds[1], 42, "prog", "observe", Name);
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fds[0]);
  return out;
}

TEST(StatsTest, SummaryCountsCallsBytesAndFailures) {
  ResetStats();
  CountCopy(1, CopyDir::kHostToDevice, MemKind::kPageable, MemKind::kDevice, 0, 100, false);
  CountCopy(1, CopyDir::kHostToDevice, MemKind::kPageable, MemKind::kDevice, 0, 50, true);
  CountPin(2, PinOp::kAlloc, 4, 4096, false);
  std::string s = Summary();
  EXPECT_NE(s.find("pinshim: summary pid=42 program=prog mode=observe\n"), std::string::npos);
  EXPECT_NE(s.find("pinshim: copy api=cuMemcpyHtoD_v2 dir=H2D src=pageable dst=device flags=0x0 "
                   "calls=2 bytes=150 failed=1\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("pinshim: pin api=cuMemHostAlloc op=alloc flags=0x4 calls=1 bytes=4096 "
                   "failed=0\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("pinshim: totals copies=2 copy_bytes=150 pin_calls=1\n"), std::string::npos);
}

TEST(StatsTest, ConcurrentCountsAreExact) {
  ResetStats();
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 10000; ++i) {
        CountCopy(1, CopyDir::kDeviceToHost, MemKind::kDevice,
                  t % 2 ? MemKind::kPageable : MemKind::kPinnedByProgram, 0, 3, false);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string s = Summary();
  EXPECT_NE(s.find("pinshim: totals copies=160000 copy_bytes=480000 pin_calls=0"),
            std::string::npos)
      << s;
}

// Each entry point's last slot is kept as a hint: keys that change under
// one entry point, and entry points that share a hint (API ids 512 apart),
// still count under their own keys.
TEST(StatsTest, HintedSlotsCountUnderTheirOwnKeys) {
  ResetStats();
  for (int i = 0; i < 100; ++i) {
    CountCopy(1, CopyDir::kHostToDevice, MemKind::kPageable, MemKind::kDevice, 0, 1, false);
    CountCopy(1, CopyDir::kHostToDevice, MemKind::kPinnedByProgram, MemKind::kDevice, 0, 2, i % 2);
    CountCopy(513, CopyDir::kHostToDevice, MemKind::kPageable, MemKind::kDevice, 0, 4, false);
    CountCopy(1, CopyDir::kHostToDevice, MemKind::kPageable, MemKind::kDevice, 0x4, 8, false);
  }
  std::string s = Summary();
  EXPECT_NE(s.find("pinshim: copy api=cuMemcpyHtoD_v2 dir=H2D src=pageable dst=device flags=0x0 "
                   "calls=100 bytes=100 failed=0\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("src=pinned dst=device flags=0x0 calls=100 bytes=200 failed=50\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("dst=device flags=0x4 calls=100 bytes=800 failed=0\n"), std::string::npos) << s;
  EXPECT_NE(s.find("pinshim: totals copies=400 copy_bytes=1500 pin_calls=0"), std::string::npos)
      << s;
}

}  // namespace
}  // namespace pinshim

namespace pinshim {
namespace {

// VMM host handles and host-pool allocations have live totals of their own;
// mapping a handle pins nothing more; failed calls move nothing.
TEST(StatsTest, LivePinnedTotalsByKind) {
  ResetLiveCounters();
  CountPin(1, PinOp::kAlloc, 0, 4096, false);
  CountPin(2, PinOp::kRegister, 0, 8192, false);
  CountPin(3, PinOp::kAlloc, 0, 2 << 20, false, LivePin::kVmmHost);
  CountPin(4, PinOp::kAlloc, 0, 2 << 20, false, LivePin::kNone);  // its mapping
  CountPin(5, PinOp::kAlloc, 0, 1 << 20, false, LivePin::kHostPool);
  CountPin(5, PinOp::kAlloc, 0, 1 << 20, true, LivePin::kHostPool);  // failed
  LiveSnapshot s;
  TakeLiveSnapshot(&s);
  EXPECT_EQ(s.program_pinned, 4096u);
  EXPECT_EQ(s.program_registered, 8192u);
  EXPECT_EQ(s.program_vmm, uint64_t{2} << 20);
  EXPECT_EQ(s.program_pool, uint64_t{1} << 20);
  CountPin(6, PinOp::kFree, 0, 2 << 20, false, LivePin::kVmmHost);
  CountPin(7, PinOp::kFree, 0, 1 << 20, false, LivePin::kHostPool);
  TakeLiveSnapshot(&s);
  EXPECT_EQ(s.program_vmm, 0u);
  EXPECT_EQ(s.program_pool, 0u);
  ResetLiveCounters();
}

}  // namespace
}  // namespace pinshim
