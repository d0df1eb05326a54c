#include "shim/optimize/cost_model.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace pinshim {
namespace optimize {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

TEST(CostModel, CopyTimesFollowTheMeasuredBandwidth) {
  // 16 MiB H2D: 11.55 GB/s pageable, 53.65 GB/s registered.
  EXPECT_NEAR(CostModel::CopyNs(16 * kMiB, CopyDir::kHostToDevice, false), 16 * kMiB / 11.55, 1);
  EXPECT_NEAR(CostModel::CopyNs(16 * kMiB, CopyDir::kHostToDevice, true), 16 * kMiB / 53.65, 1);
  EXPECT_NEAR(CostModel::CopyNs(1 * kMiB, CopyDir::kDeviceToHost, false), 1 * kMiB / 7.41, 1);
  EXPECT_EQ(CostModel::CopyNs(1 * kMiB, CopyDir::kHostToHost, false), 0);
}

TEST(CostModel, SmallCopiesSaveNothing) {
  EXPECT_EQ(CostModel::SavingNs(4 * kKiB, CopyDir::kHostToDevice), 0);
  EXPECT_EQ(CostModel::SavingNs(1 * kKiB, CopyDir::kDeviceToHost), 0);
  EXPECT_GT(CostModel::SavingNs(64 * kKiB, CopyDir::kHostToDevice), 0);
  EXPECT_EQ(CostModel::BreakEvenCopies(4 * kKiB, 4 * kKiB, CopyDir::kHostToDevice), UINT32_MAX);
}

TEST(CostModel, PinCostsInterpolateTheMeasurements) {
  EXPECT_NEAR(CostModel::RegisterNs(4 * kKiB), 74000, 1);
  EXPECT_NEAR(CostModel::UnregisterNs(1 * kMiB), 52000, 1);
  EXPECT_NEAR(CostModel::PinCycleNs(16 * kMiB), 1092000, 1);
  EXPECT_NEAR(CostModel::RegisterNs(512 * kMiB), 2 * 11611000.0, 10);
  double prev = 0;
  for (uint64_t b = 4 * kKiB; b <= 1024 * kMiB; b *= 2) {
    double c = CostModel::PinCycleNs(b);
    EXPECT_GT(c, prev) << b;
    prev = c;
  }
}

// bench/RESULTS.md, "The cost model's table": registering pays for itself
// after about 1 transfer at 16 MiB and about 3 at 1 MiB; the cache also
// wants one reuse seen before it pins.
TEST(CostModel, BreakEvenMatchesTheMeasuredRuleOfThumb) {
  EXPECT_EQ(CostModel::BreakEvenCopies(16 * kMiB, 16 * kMiB, CopyDir::kHostToDevice), 2u);
  EXPECT_EQ(CostModel::BreakEvenCopies(1 * kMiB, 1 * kMiB, CopyDir::kHostToDevice), 3u);
  EXPECT_EQ(CostModel::BreakEvenCopies(256 * kMiB, 256 * kMiB, CopyDir::kHostToDevice), 2u);
  // Small copies out of a big allocation take many more.
  EXPECT_GT(CostModel::BreakEvenCopies(256 * kMiB, 1 * kMiB, CopyDir::kHostToDevice), 100u);
}

// SavingNs and PinCycleNs keep their last answer per thread: whatever the
// order of sizes, directions and threads, each answer is the arithmetic's.
TEST(CostModel, KeptAnswersAreTheArithmetics) {
  const uint64_t sizes[] = {0,    1,        4 * kKiB, 64 * kKiB, 64 * kKiB,
                            kMiB, 3 * kMiB, 3 * kMiB, kMiB,      1024 * kMiB};
  const CopyDir dirs[] = {CopyDir::kHostToDevice, CopyDir::kDeviceToHost, CopyDir::kDeviceToDevice,
                          CopyDir::kHostToHost};
  auto check = [&](int salt) {
    int bad = 0;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 10; ++i) {
        const uint64_t b = sizes[(i * 7 + salt + round) % 10];
        const CopyDir d = dirs[(i + salt) % 4];
        const double plain = CostModel::CopyNs(b, d, false) - CostModel::CopyNs(b, d, true);
        bad += CostModel::SavingNs(b, d) != (plain > 0 ? plain : 0);
        bad += CostModel::PinCycleNs(b) != CostModel::RegisterNs(b) + CostModel::UnregisterNs(b);
      }
    }
    return bad;
  };
  EXPECT_EQ(check(0), 0);
  EXPECT_GT(CostModel::SavingNs(kMiB, CopyDir::kHostToDevice), 0);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, -1);
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { bad[t] = check(t + 1); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
