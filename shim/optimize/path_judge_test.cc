#include "shim/optimize/path_judge.h"

#include <gtest/gtest.h>

#include <vector>

namespace pinshim {
namespace optimize {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr CopyDir kH2D = CopyDir::kHostToDevice;
constexpr CopyDir kD2H = CopyDir::kDeviceToHost;

// Runs n copies of `bytes` through the judge, the path costing path_ns and
// the driver driver_ns each; returns the total time the copies took.
struct SimRun {
  uint64_t total_ns = 0, on_path = 0, on_driver = 0;
};
SimRun Simulate(PathJudge* j, CopyPath path, int n, uint64_t bytes, uint64_t path_ns,
                uint64_t driver_ns, CopyDir dir = kH2D, bool sync = true) {
  SimRun r;
  for (int i = 0; i < n; ++i) {
    if (j->Take(path, dir, bytes, sync)) {
      j->Record(path, dir, bytes, sync, path_ns);
      r.total_ns += path_ns;
      r.on_path++;
    } else {
      j->Record(CopyPath::kDriver, dir, bytes, sync, driver_ns);
      r.total_ns += driver_ns;
      r.on_driver++;
    }
  }
  return r;
}

TEST(PathJudgeTest, SizeClassesArePowersOfFourFrom256KiB) {
  EXPECT_EQ(PathJudge::ClassOf(0), 0);
  EXPECT_EQ(PathJudge::ClassOf(256 * 1024 - 1), 0);
  EXPECT_EQ(PathJudge::ClassOf(256 * 1024), 1);
  EXPECT_EQ(PathJudge::ClassOf(kMiB - 1), 1);
  EXPECT_EQ(PathJudge::ClassOf(kMiB), 2);
  EXPECT_EQ(PathJudge::ClassOf(4 * kMiB - 1), 2);
  EXPECT_EQ(PathJudge::ClassOf(4 * kMiB), 3);
  EXPECT_EQ(PathJudge::ClassOf(64 * kMiB), 5);
  EXPECT_EQ(PathJudge::ClassOf(1024 * kMiB), 7);
  EXPECT_EQ(PathJudge::ClassOf(uint64_t{1} << 40), 7);
  EXPECT_STREQ(PathJudge::ClassName(3), "4M");
}

TEST(PathJudgeTest, FirstCopyOfACellGoesToTheDriverUnlessTheModelExpectsAFarWin) {
  PathJudge j;
  EXPECT_FALSE(j.Take(CopyPath::kStaged, kH2D, kMiB, true, 2.0));
  EXPECT_TRUE(j.Take(CopyPath::kStaged, kH2D, 256 * kMiB, true, 6.0));
  // Other cells are their own: another direction, another kind of call.
  j.Record(CopyPath::kDriver, kH2D, kMiB, true, 100000);
  EXPECT_TRUE(j.Take(CopyPath::kStaged, kH2D, kMiB, true, 2.0));
  EXPECT_FALSE(j.Take(CopyPath::kStaged, kD2H, kMiB, true, 2.0));
  EXPECT_FALSE(j.Take(CopyPath::kStaged, kH2D, kMiB, false, 2.0));
}

TEST(PathJudgeTest, ASlowerPathStopsAndCostsLittle) {
  PathJudge j;
  // The path at a fifth of the driver's speed (a driver made slow on
  // purpose for it, as the simulated driver's tests do end to end).
  const SimRun r = Simulate(&j, CopyPath::kStaged, 20000, 4 * kMiB, 2500000, 500000);
  const double all_driver = 20000.0 * 500000;
  EXPECT_LT(r.total_ns, all_driver * 1.02) << "path copies: " << r.on_path;
  EXPECT_GT(r.on_path, 0u);  // it was tried, and retried
  PathCellReport cells[8];
  ASSERT_EQ(j.Report(cells, 8), 1);
  EXPECT_EQ(cells[0].verdict, PathVerdict::kLoses);
  EXPECT_EQ(cells[0].path, CopyPath::kStaged);
  EXPECT_EQ(cells[0].size_class, PathJudge::ClassOf(4 * kMiB));
  EXPECT_GT(cells[0].path_ns_per_mib, cells[0].driver_ns_per_mib);
  EXPECT_GT(j.path_retries(), 0u);
}

TEST(PathJudgeTest, AFasterPathStaysWithRareDriverProbes) {
  PathJudge j;
  const SimRun r = Simulate(&j, CopyPath::kStaged, 20000, 16 * kMiB, 400000, 2000000);
  // Probes every 8, then 16, ... at most every 256 copies.
  EXPECT_LT(r.on_driver, 20000u / 256 + 20);
  EXPECT_GT(r.on_driver, 20000u / 256 - 20);
  EXPECT_LT(r.total_ns, 20000.0 * 400000 * 1.5);
  EXPECT_GT(j.driver_probes(), 0u);
}

TEST(PathJudgeTest, OneSlowCopyDoesNotStopAWinningPath) {
  PathJudge j;
  Simulate(&j, CopyPath::kStaged, 50, 16 * kMiB, 400000, 2000000);
  j.Record(CopyPath::kStaged, kH2D, 16 * kMiB, true, 20000000);  // one outlier, 50x
  PathCellReport cells[8];
  ASSERT_EQ(j.Report(cells, 8), 1);
  EXPECT_EQ(cells[0].verdict, PathVerdict::kWins);
}

TEST(PathJudgeTest, ALosingPathThatBecomesFastIsTakenAgain) {
  PathJudge j;
  Simulate(&j, CopyPath::kStaged, 200, 4 * kMiB, 2500000, 500000);
  PathCellReport cells[8];
  ASSERT_EQ(j.Report(cells, 8), 1);
  ASSERT_EQ(cells[0].verdict, PathVerdict::kLoses);
  // Cores freed up, say: the path now runs at twice the driver's speed.
  const SimRun r = Simulate(&j, CopyPath::kStaged, 5000, 4 * kMiB, 250000, 500000);
  ASSERT_EQ(j.Report(cells, 8), 1);
  EXPECT_EQ(cells[0].verdict, PathVerdict::kWins);
  EXPECT_GT(r.on_path, 4000u);
}

TEST(PathJudgeTest, CallbackSeesEachChangeOfVerdict) {
  static std::vector<PathCellReport> seen;
  seen.clear();
  PathJudge j;
  j.set_callback([](const PathCellReport& c) { seen.push_back(c); });
  Simulate(&j, CopyPath::kStaged, 100, kMiB, 400000, 100000, kD2H, false);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].verdict, PathVerdict::kLoses);
  EXPECT_EQ(seen[0].dir, kD2H);
  EXPECT_FALSE(seen[0].sync);
  EXPECT_EQ(seen[0].losses, 1u);
  EXPECT_GT(seen[0].driver_copies, 0u);
}

TEST(PathJudgeTest, PinnedInPlaceIsNeverProbedAgainstTheDriver) {
  PathJudge j;
  // Without a driver figure it is allowed (nothing to compare with).
  EXPECT_TRUE(j.Take(CopyPath::kPinnedInPlace, kH2D, kMiB, true));
  j.Record(CopyPath::kDriver, kH2D, kMiB, true, 100000);
  int taken = 0;
  for (int i = 0; i < 1000; ++i) {
    if (j.Take(CopyPath::kPinnedInPlace, kH2D, kMiB, true)) {
      ++taken;
      j.Record(CopyPath::kPinnedInPlace, kH2D, kMiB, true, 30000);
    }
  }
  EXPECT_EQ(taken, 1000);
  // Slower than the driver's copies of other buffers: no more pinning there.
  for (int i = 0; i < 4; ++i) j.Record(CopyPath::kPinnedInPlace, kH2D, kMiB, true, 900000);
  EXPECT_TRUE(j.LosesAnywhere(CopyPath::kPinnedInPlace, PathJudge::ClassOf(kMiB)));
  EXPECT_FALSE(j.LosesAnywhere(CopyPath::kPinnedInPlace, PathJudge::ClassOf(64 * kMiB)));
  EXPECT_FALSE(j.Take(CopyPath::kPinnedInPlace, kH2D, kMiB, true));
}

TEST(PathJudgeTest, SetupIsWorthItOnceTheDriverCostThatMuchInThatDirection) {
  PathJudge j;
  EXPECT_FALSE(j.WorthSetup(kH2D, 6.6e6));
  for (int i = 0; i < 60; ++i) j.Record(CopyPath::kDriver, kH2D, kMiB, true, 100000);
  EXPECT_FALSE(j.WorthSetup(kH2D, 6.6e6));
  for (int i = 0; i < 10; ++i) j.Record(CopyPath::kDriver, kH2D, kMiB, true, 100000);
  EXPECT_TRUE(j.WorthSetup(kH2D, 6.6e6));
  EXPECT_FALSE(j.WorthSetup(kD2H, 6.6e6));
  j.Reset();
  EXPECT_FALSE(j.WorthSetup(kH2D, 6.6e6));
}

// Copies that ran while another thread's copy did are no samples.
TEST(PathJudgeTest, TellsCopiesThatOverlapAnother) {
  PathJudge j;
  const uint64_t a = j.BeginCopy();
  EXPECT_FALSE(j.EndCopy(a));  // alone
  const uint64_t b = j.BeginCopy();
  const uint64_t c = j.BeginCopy();  // begins while b runs
  EXPECT_TRUE(j.EndCopy(c));
  EXPECT_TRUE(j.EndCopy(b));  // c began during it
  const uint64_t d = j.BeginCopy();
  const uint64_t e = j.BeginCopy();
  EXPECT_TRUE(j.EndCopy(d));  // e began during it, and still runs
  EXPECT_TRUE(j.EndCopy(e));
  EXPECT_FALSE(j.EndCopy(j.BeginCopy()));  // alone again
}

// A cell whose driver copies always overlap others gets no driver figure:
// after kMinSamples such copies it stops sending copies to the driver for
// one and takes the path, probing the driver now and then.
TEST(PathJudgeTest, OverlappedDriverCopiesMakeNoFigure) {
  PathJudge j;
  for (uint32_t i = 0; i < PathJudge::kMinSamples; ++i) {
    EXPECT_FALSE(j.Take(CopyPath::kStaged, kD2H, 4 * kMiB, false, 2.0));
    j.Overlapped(CopyPath::kDriver, kD2H, 4 * kMiB, false, 1000000);
  }
  int on_path = 0, to_driver = 0;
  for (int i = 0; i < 64; ++i) {
    if (j.Take(CopyPath::kStaged, kD2H, 4 * kMiB, false, 2.0)) {
      ++on_path;
      j.Overlapped(CopyPath::kStaged, kD2H, 4 * kMiB, false, 1000000);
    } else {
      ++to_driver;
      j.Overlapped(CopyPath::kDriver, kD2H, 4 * kMiB, false, 1000000);
    }
  }
  EXPECT_GE(on_path, 56);
  EXPECT_GE(to_driver, 1);  // probes
  // Their time was spent in the driver's copies all the same.
  EXPECT_TRUE(j.WorthSetup(kD2H, 1e6 * (to_driver + PathJudge::kMinSamples)));
  EXPECT_FALSE(j.WorthSetup(kD2H, 1e6 * (to_driver + PathJudge::kMinSamples) + 1));
  PathCellReport cells[4];
  EXPECT_EQ(j.Report(cells, 4), 0);  // no verdict: no samples
  // Other cells are untouched: their first copy still goes to the driver.
  EXPECT_FALSE(j.Take(CopyPath::kStaged, kH2D, 4 * kMiB, false, 2.0));
  // Once a clean driver copy (a probe) gives a figure, samples decide
  // again: here the path is four times slower, and loses.
  SimRun r = Simulate(&j, CopyPath::kStaged, 200, 4 * kMiB, 4000000, 1000000, kD2H, false);
  EXPECT_GE(r.on_driver, 120u);
  EXPECT_EQ(j.Report(cells, 4), 1);
  EXPECT_EQ(cells[0].verdict, PathVerdict::kLoses);
}

TEST(PathJudgeTest, DisabledJudgeTakesEveryPath) {
  PathJudge j;
  j.set_enabled(false);
  EXPECT_TRUE(j.Take(CopyPath::kStaged, kH2D, kMiB, true));
  EXPECT_TRUE(j.WorthSetup(kH2D, 1e12));
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
