#include "shim/core/reentry.h"

#include <gtest/gtest.h>

#include <thread>

namespace pinshim {
namespace {

TEST(ReentryGuardTest, NestsAndReleasesInOrder) {
  EXPECT_FALSE(Reentered(Reentry::kHook));
  {
    ReentryGuard outer(Reentry::kHook);
    EXPECT_TRUE(Reentered(Reentry::kHook));
    {
      ReentryGuard inner(Reentry::kHook);
      EXPECT_TRUE(inner.held());
    }
    EXPECT_TRUE(Reentered(Reentry::kHook));       // the outer one still holds it
    EXPECT_FALSE(Reentered(Reentry::kRecorder));  // purposes are separate
  }
  EXPECT_FALSE(Reentered(Reentry::kHook));
}

TEST(ReentryGuardTest, FirstEntryIsRefusedWhenAlreadyHeld) {
  ReentryGuard first(Reentry::kLedger, ReentryGuard::kFirstEntry);
  ASSERT_TRUE(first.held());
  {
    ReentryGuard second(Reentry::kLedger, ReentryGuard::kFirstEntry);
    EXPECT_FALSE(second.held());
  }
  // The refused guard released nothing.
  EXPECT_TRUE(Reentered(Reentry::kLedger));
}

TEST(ReentryGuardTest, CountsArePerThread) {
  ReentryGuard held(Reentry::kEvictor);
  bool seen_elsewhere = true;
  std::thread([&] { seen_elsewhere = Reentered(Reentry::kEvictor); }).join();
  EXPECT_FALSE(seen_elsewhere);
  EXPECT_TRUE(Reentered(Reentry::kEvictor));
}

TEST(ReentryGuardTest, ClearAfterForkDropsAStaleCount) {
  std::thread([] {
    ReentryGuard::HoldForever(Reentry::kRecorder);
    EXPECT_TRUE(Reentered(Reentry::kRecorder));
    ReentryGuard::ClearAfterFork(Reentry::kRecorder);
    EXPECT_FALSE(Reentered(Reentry::kRecorder));
  }).join();
}

}  // namespace
}  // namespace pinshim
