#include "shim/trace/wc_ranges.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace pinshim {
namespace trace {
namespace {

TEST(WcRanges, AnswersOverlap) {
  ClearWcRanges();
  static char buf[8192];
  EXPECT_FALSE(OverlapsWc(buf, sizeof(buf)));
  ASSERT_TRUE(AddWcRange(buf + 1024, 4096));
  EXPECT_TRUE(OverlapsWc(buf + 1024, 1));
  EXPECT_TRUE(OverlapsWc(buf + 1000, 100));  // straddles the start
  EXPECT_TRUE(OverlapsWc(buf + 5119, 10));   // last byte
  EXPECT_FALSE(OverlapsWc(buf + 5120, 10));  // just past the end
  EXPECT_FALSE(OverlapsWc(buf, 1024));       // just before
  WcRange snap[4];
  ASSERT_EQ(SnapshotWcRanges(snap, 4), 1u);
  EXPECT_EQ(snap[0].begin, reinterpret_cast<uintptr_t>(buf + 1024));
  EXPECT_TRUE(RemoveWcRange(buf + 1024));
  EXPECT_FALSE(RemoveWcRange(buf + 1024));
  EXPECT_FALSE(OverlapsWc(buf + 1024, 1));
}

TEST(WcRanges, FullTableRefusesAndConcurrentUseIsSafe) {
  ClearWcRanges();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 2000; ++i) {
        uintptr_t base =
            0x100000000ull * static_cast<uintptr_t>(t + 1) + static_cast<uintptr_t>(i) * 8192;
        void* p = reinterpret_cast<void*>(base);
        if (AddWcRange(p, 4096)) {
          EXPECT_TRUE(OverlapsWc(p, 8));
          EXPECT_TRUE(RemoveWcRange(p));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  WcRange snap[1];
  EXPECT_EQ(SnapshotWcRanges(snap, 1), 0u);
  for (size_t i = 0; i < kMaxWcRanges; ++i) {
    ASSERT_TRUE(AddWcRange(reinterpret_cast<void*>(0x10000 + i * 0x10000), 16));
  }
  EXPECT_FALSE(AddWcRange(reinterpret_cast<void*>(0x7000000000ull), 16));
  ClearWcRanges();
}

}  // namespace
}  // namespace trace
}  // namespace pinshim
