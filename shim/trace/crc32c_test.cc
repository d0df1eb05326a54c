#include "shim/trace/crc32c.h"

#include <gtest/gtest.h>

#include <string>

#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {
namespace {

TEST(Crc32c, KnownValues) {
  // Check values from RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s = "the quick brown fox jumps over the lazy dog, twice over";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t part = Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut, s.size() - cut);
    EXPECT_EQ(part, Crc32c(s.data(), s.size())) << cut;
  }
}

TEST(Crc32c, MaskRoundTripsAndDiffers) {
  for (uint32_t v : {0u, 1u, 0xe3069283u, 0xffffffffu}) {
    EXPECT_EQ(UnmaskCrc(MaskCrc(v)), v);
    EXPECT_NE(MaskCrc(v), v);
  }
}

TEST(Varint, RoundTripsAndRejectsTruncation) {
  uint8_t buf[kMaxVarint];
  for (uint64_t v : {0ull, 1ull, 127ull, 128ull, 300ull, 1ull << 35, ~0ull}) {
    uint8_t* end = PutVarint(buf, v);
    const uint8_t* p = buf;
    uint64_t out = 0;
    ASSERT_TRUE(GetVarint(&p, end, &out));
    EXPECT_EQ(out, v);
    EXPECT_EQ(p, end);
    if (end - buf > 1) {
      p = buf;
      EXPECT_FALSE(GetVarint(&p, end - 1, &out));
      EXPECT_EQ(p, buf);
    }
  }
  for (int64_t v : {0ll, -1ll, 1ll, -300ll, 1ll << 40, -(1ll << 62)}) {
    uint8_t* end = PutSigned(buf, v);
    const uint8_t* p = buf;
    int64_t out = 0;
    ASSERT_TRUE(GetSigned(&p, end, &out));
    EXPECT_EQ(out, v);
  }
}

}  // namespace
}  // namespace trace
}  // namespace pinshim
