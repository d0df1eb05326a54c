#include "shim/optimize/size_classes.h"

#include <gtest/gtest.h>

namespace pinshim {
namespace optimize {
namespace {

TEST(PoolClasses, RoundUpWithinOneEighth) {
  uint32_t prev = 0;
  for (uint64_t p = 1; p <= (uint64_t{1} << 18); ++p) {
    uint32_t c = PoolClassOfPages(p);
    uint64_t pages = PoolClassPages(c);
    ASSERT_GE(pages, p) << p;
    ASSERT_LT((pages - p) * 8, p + (p <= kPoolExactClasses ? 1 : 0)) << p;
    ASSERT_GE(c, prev) << p;
    prev = c;
    ASSERT_EQ(PoolClassOfPages(pages), c) << p;
  }
}

TEST(PoolClasses, ExactUpToSixteenPages) {
  for (uint64_t p = 1; p <= 16; ++p) EXPECT_EQ(PoolClassPages(PoolClassOfPages(p)), p);
  EXPECT_EQ(PoolClassPages(PoolClassOfPages(17)), 18u);
  EXPECT_EQ(PoolClassPages(PoolClassOfPages(33)), 36u);
  EXPECT_EQ(PoolClassPages(PoolClassOfPages(1000)), 1024u);
}

TEST(ArenaClasses, RoundUpWithinOneQuarter) {
  uint32_t prev = 0;
  for (uint64_t b = 1; b <= (uint64_t{1} << 20); ++b) {
    uint32_t c = ArenaClassOfBytes(b);
    uint64_t bytes = ArenaClassBytes(c);
    ASSERT_GE(bytes, b) << b;
    if (b > 64) {
      ASSERT_LT((bytes - b) * 4, b) << b;
    } else {
      ASSERT_LT(bytes - b, 16u) << b;
    }
    ASSERT_EQ(bytes % 16, 0u) << b;
    ASSERT_GE(c, prev) << b;
    prev = c;
    ASSERT_EQ(ArenaClassOfBytes(bytes), c) << b;
  }
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
