#include "analyzer/report/range_crc.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "shim/trace/crc32c.h"

namespace pinshim {
namespace report {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(RangeCrcTest, CombineAgreesWithOneChecksum) {
  const std::vector<uint8_t> data = RandomBytes(100000, 1);
  for (size_t split : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{70000}}) {
    const uint32_t a = trace::Crc32c(data.data(), split);
    const uint32_t b = trace::Crc32c(data.data() + split, data.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - split), trace::Crc32c(data.data(), data.size()))
        << split;
    EXPECT_EQ(Crc32cCombinePortable(a, b, data.size() - split),
              trace::Crc32c(data.data(), data.size()))
        << split;
  }
}

// Every range a scan could ask for, in the scan's order: begins never go
// back, ends anywhere within the longest range.
TEST(RangeCrcTest, EveryRangeOfAScanMatchesTheDirectChecksum) {
  const std::vector<uint8_t> data = RandomBytes(300000, 2);
  RangeCrc crc(data.data(), data.size());
  std::mt19937 rng(3);
  for (uint64_t begin = 0; begin < data.size(); begin += 1 + rng() % 97) {
    const uint64_t room = data.size() - begin;
    for (int i = 0; i < 3; ++i) {
      const uint64_t len = rng() % (room + 1);
      ASSERT_EQ(crc.Crc(begin, begin + len), trace::Crc32c(data.data() + begin, len))
          << begin << "+" << len;
    }
  }
}

TEST(RangeCrcTest, RangesOutsideTheContractAreStillRight) {
  const std::vector<uint8_t> data = RandomBytes(RangeCrc::kMaxRange + 5000, 4);
  RangeCrc crc(data.data(), data.size());
  EXPECT_EQ(crc.Crc(4000, data.size()), trace::Crc32c(data.data() + 4000, data.size() - 4000));
  EXPECT_EQ(crc.Crc(0, data.size()), trace::Crc32c(data.data(), data.size()));  // too long
  EXPECT_EQ(crc.Crc(100, 50), 0u);
}

}  // namespace
}  // namespace report
}  // namespace pinshim
