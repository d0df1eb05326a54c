#include "analyzer/report/sha256.h"

#include <gtest/gtest.h>

namespace pinshim {
namespace report {
namespace {

std::string Hex(const std::array<uint8_t, 32>& d) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// The test vectors of FIPS 180-4's examples.
TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Hex(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(Sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, Base64) {
  const std::string s = "foobar";
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  EXPECT_EQ(Base64(p, 0), "");
  EXPECT_EQ(Base64(p, 1), "Zg==");
  EXPECT_EQ(Base64(p, 2), "Zm8=");
  EXPECT_EQ(Base64(p, 3), "Zm9v");
  EXPECT_EQ(Base64(p, 6), "Zm9vYmFy");
}

}  // namespace
}  // namespace report
}  // namespace pinshim
