#include "shim/core/size.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "shim/core/fixed_text.h"

namespace pinshim {
namespace {

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;
constexpr uint64_t kPhysical = 64 * kGiB;

struct Accepted {
  const char* text;
  uint64_t bytes;
};

TEST(ParseSizeTest, AcceptsEveryForm) {
  const Accepted cases[] = {
      {"0", 0},
      {"1", 1},
      {"4096", 4096},
      {"18446744073709551615", UINT64_MAX},
      {"7B", 7},
      {"7b", 7},
      {"1K", kKiB},
      {"1k", kKiB},
      {"1KB", kKiB},
      {"1kb", kKiB},
      {"1KiB", kKiB},
      {"1kib", kKiB},
      {"1KIB", kKiB},
      {"64K", 64 * kKiB},
      {"3M", 3 * kMiB},
      {"3MB", 3 * kMiB},
      {"3MiB", 3 * kMiB},
      {"3mib", 3 * kMiB},
      {"2G", 2 * kGiB},
      {"2GB", 2 * kGiB},
      {"2GiB", 2 * kGiB},
      {"2g", 2 * kGiB},
      {"5T", 5 * kTiB},
      {"5TB", 5 * kTiB},
      {"5TiB", 5 * kTiB},
      {"1.5K", 1536},
      {"1.5GiB", 3 * kGiB / 2},
      {"0.5M", kMiB / 2},
      {".5K", 512},
      {"2.K", 2 * kKiB},
      {"0.3K", 307},  // 307.2 rounded down
      {"1.5", 1},     // fractions of a byte rounded down
      {"  16M  ", 16 * kMiB},
      {"16 M", 16 * kMiB},
      {"\t8K\t", 8 * kKiB},
      {"16777215T", 16777215 * kTiB},
      {"1.000000000000000000000001K", kKiB},  // extra digits are ignored
      {"25%", kPhysical / 4},
      {"100%", kPhysical},
      {"12.5%", kPhysical / 8},
      {"0.001%", kPhysical / 100000},
      {"50 %", kPhysical / 2},
  };
  for (const Accepted& c : cases) {
    uint64_t out = 12345;
    char err[512] = "untouched";
    EXPECT_TRUE(ParseSize(c.text, kPhysical, &out, err, sizeof(err))) << c.text << ": " << err;
    EXPECT_EQ(out, c.bytes) << c.text;
    EXPECT_STREQ(err, "") << c.text;
  }
}

struct Rejected {
  const char* text;
  const char* reason;  // the start of the message
};

TEST(ParseSizeTest, RejectsEveryErrorFormWithItsReason) {
  const Rejected cases[] = {
      {"", "empty;"},
      {"   ", "empty;"},
      {"-1", "negative;"},
      {"-5G", "negative;"},
      {"+5", "not a number;"},
      {"abc", "not a number;"},
      {"K", "not a number;"},
      {".", "not a number;"},
      {"%", "not a number;"},
      {"12X", "unknown unit \"X\";"},
      {"12PB", "unknown unit \"PB\";"},
      {"1KBs", "unknown unit \"KBs\";"},
      {"1Kib2", "unexpected text \"2\";"},
      {"1.2.3", "unexpected text \".3\";"},
      {"4G B", "unexpected text \"B\";"},
      {"0%", "percentage must be above 0 and at most 100;"},
      {"0.0%", "percentage must be above 0 and at most 100;"},
      {"100.5%", "percentage must be above 0 and at most 100;"},
      {"250%", "percentage must be above 0 and at most 100;"},
      {"99999999999999999999999%", "percentage must be above 0 and at most 100;"},
      {"18446744073709551616", "too large (over 2^64 - 1 bytes);"},
      {"16777216T", "too large (over 2^64 - 1 bytes);"},
      {"99999999999999999999999999G", "too large (over 2^64 - 1 bytes);"},
  };
  for (const Rejected& c : cases) {
    uint64_t out = 12345;
    char err[512] = "";
    EXPECT_FALSE(ParseSize(c.text, kPhysical, &out, err, sizeof(err))) << c.text;
    EXPECT_EQ(out, 12345u) << c.text;
    EXPECT_EQ(std::string(err).rfind(c.reason, 0), 0u) << c.text << " gave: " << err;
    // Every message ends with the accepted forms, on one line.
    EXPECT_NE(std::string(err).find("; accepted: an integer or decimal"), std::string::npos) << err;
    EXPECT_NE(std::string(err).find("25%"), std::string::npos) << err;
    EXPECT_EQ(std::string(err).find('\n'), std::string::npos) << err;
  }
}

TEST(ParseSizeTest, PercentageRejectedWhereNotAllowed) {
  uint64_t out = 0;
  char err[512];
  EXPECT_FALSE(ParseSize("25%", 0, &out, err, sizeof(err)));
  EXPECT_EQ(std::string(err).rfind("a percentage is not accepted here;", 0), 0u) << err;
  // The accepted forms then do not offer a percentage.
  EXPECT_EQ(std::string(err).find('%'), std::string::npos) << err;
  EXPECT_TRUE(ParseSize("64K", 0, &out, err, sizeof(err)));
  EXPECT_EQ(out, 64 * kKiB);
}

TEST(ParseSizeTest, NullAndShortErrorBuffersAreSafe) {
  uint64_t out = 0;
  EXPECT_FALSE(ParseSize("12X", kPhysical, &out, nullptr, 0));
  EXPECT_FALSE(ParseSize(nullptr, kPhysical, &out, nullptr, 0));
  char tiny[8];
  std::memset(tiny, 'z', sizeof(tiny));
  EXPECT_FALSE(ParseSize("12X", kPhysical, &out, tiny, sizeof(tiny)));
  EXPECT_STREQ(tiny, "unknown");
}

TEST(PhysicalMemoryTest, ReportsThisMachine) {
  // Any Linux machine that runs the test has at least a few MiB.
  EXPECT_GT(PhysicalMemoryBytes(), 16 * kMiB);
}

TEST(FixedTextTest, CutsAndQuotes) {
  char buf[16];
  FixedText text(buf, sizeof(buf));
  text.Append("n=").AppendUint(0).Append(" ").AppendUint(18446744073709551615ull);
  EXPECT_STREQ(buf, "n=0 18446744073");  // 15 characters and the NUL
  char quoted[64];
  FixedText(quoted, sizeof(quoted)).AppendQuoted("abcdef\nxyz", 4);
  EXPECT_STREQ(quoted, "\"abcd...\"");
  FixedText(quoted, sizeof(quoted)).AppendQuoted("a\tb", 10);
  EXPECT_STREQ(quoted, "\"a?b\"");
}

}  // namespace
}  // namespace pinshim
