#include "shim/optimize/fresh_pages.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace pinshim {
namespace optimize {
namespace {

HugePageMode Parse(const char* text) { return ParseHugePageMode(text, strlen(text)); }

TEST(FreshPagesTest, ParsesTheBracketedMode) {
  EXPECT_EQ(Parse("always [madvise] never\n"), HugePageMode::kAdvised);
  EXPECT_EQ(Parse("[always] madvise never\n"), HugePageMode::kAlways);
  EXPECT_EQ(Parse("always madvise [never]\n"), HugePageMode::kNever);
  EXPECT_EQ(Parse("always madvise never\n"), HugePageMode::kUnknown);
  EXPECT_EQ(Parse("[madvis"), HugePageMode::kUnknown);
  EXPECT_EQ(Parse("[madvisex] never"), HugePageMode::kUnknown);
}

// The VmFlags line of the mapping that holds addr, from this process's own
// /proc/self/smaps ("hg": advised for huge pages).
std::string VmFlagsAt(const void* addr) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == nullptr) return "";
  char line[512];
  bool inside = false;
  std::string flags;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  while (fgets(line, sizeof(line), f) != nullptr) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = a >= lo && a < hi;
    } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
      flags = line + 8;
      break;
    }
  }
  fclose(f);
  return flags;
}

class MappedTest : public ::testing::Test {
 protected:
  static constexpr size_t kBytes = size_t{16} << 20;
  void SetUp() override {
    base_ = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(base_, MAP_FAILED);
  }
  void TearDown() override { munmap(base_, kBytes); }
  char* at(size_t off) { return static_cast<char*>(base_) + off; }
  void* base_ = nullptr;
};

TEST_F(MappedTest, AdvisesTheWholeBlocksOfAFreshRange) {
  ASSERT_TRUE(AdviseFreshDestination(base_, kBytes, HugePageMode::kAdvised));
  // The middle is advised; bytes before the first 2 MiB boundary are not
  // (unless the mapping began on one).
  const uintptr_t first =
      (reinterpret_cast<uintptr_t>(base_) + (2 << 20) - 1) & ~uintptr_t((2 << 20) - 1);
  EXPECT_NE(VmFlagsAt(reinterpret_cast<void*>(first + (4 << 20))).find(" hg"), std::string::npos);
  if (first != reinterpret_cast<uintptr_t>(base_)) {
    EXPECT_EQ(VmFlagsAt(base_).find(" hg"), std::string::npos);
  }
  // The advice changes no byte.
  memset(base_, 7, kBytes);
  EXPECT_EQ(at(kBytes - 1)[0], 7);
}

TEST_F(MappedTest, LeavesMemoryAlreadyWrittenAlone) {
  memset(base_, 1, kBytes);
  EXPECT_FALSE(AdviseFreshDestination(base_, kBytes, HugePageMode::kAdvised));
  EXPECT_EQ(VmFlagsAt(at(kBytes / 2)).find(" hg"), std::string::npos);
}

TEST(HugePageHeadTest, BytesToTheNextBoundary) {
  EXPECT_EQ(HugePageHead(reinterpret_cast<void*>(uintptr_t{4} << 20)), 0u);
  EXPECT_EQ(HugePageHead(reinterpret_cast<void*>((uintptr_t{4} << 20) + 16)), kHugePageBytes - 16);
  EXPECT_EQ(HugePageHead(reinterpret_cast<void*>((uintptr_t{6} << 20) - 1)), 1u);
}

// In the "always" mode fresh memory gets huge pages unasked: it is
// reported fresh, and not advised.
TEST_F(MappedTest, FreshInTheAlwaysModeWithoutAdvice) {
  EXPECT_TRUE(AdviseFreshDestination(base_, kBytes, HugePageMode::kAlways));
  EXPECT_EQ(VmFlagsAt(at(kBytes / 2)).find(" hg"), std::string::npos);
  memset(base_, 1, kBytes);
  EXPECT_FALSE(AdviseFreshDestination(base_, kBytes, HugePageMode::kAlways));
}

TEST_F(MappedTest, AdvisesOnlyInTheHugePageModesAndLongCopies) {
  EXPECT_FALSE(AdviseFreshDestination(base_, kBytes, HugePageMode::kNever));
  EXPECT_FALSE(AdviseFreshDestination(base_, kBytes, HugePageMode::kUnknown));
  EXPECT_FALSE(AdviseFreshDestination(base_, kAdviseMinBytes - 1, HugePageMode::kAdvised));
  EXPECT_FALSE(AdviseFreshDestination(nullptr, kBytes, HugePageMode::kAdvised));
  EXPECT_EQ(VmFlagsAt(at(kBytes / 2)).find(" hg"), std::string::npos);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
