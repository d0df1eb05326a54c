#include "shim/core/internal_alloc.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace pinshim {
namespace {

size_t Page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// How many of the pages of [p, p + bytes) are resident (p page-aligned).
size_t ResidentPages(void* p, size_t bytes) {
  std::vector<unsigned char> v((bytes + Page() - 1) / Page());
  if (mincore(p, bytes, v.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

// Both are large enough to be mappings of their own, which start
// page-aligned and untouched.
constexpr size_t kTableBytes = 512 << 10;

TEST(InternalAllocTest, PresentTablesAreResidentAndZero) {
  auto* plain = static_cast<unsigned char*>(InternalAlloc(kTableBytes));
  auto* present = static_cast<unsigned char*>(InternalAllocPresent(kTableBytes));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(present, nullptr);
  EXPECT_EQ(ResidentPages(plain, kTableBytes), 0u);
  EXPECT_EQ(ResidentPages(present, kTableBytes), kTableBytes / Page());
  for (size_t i = 0; i < kTableBytes; i += 997) ASSERT_EQ(present[i], 0) << i;
}

TEST(InternalAllocTest, MakePresentKeepsEveryByte) {
  const size_t page = Page();
  const size_t bytes = 16 * page;
  auto* p = static_cast<unsigned char*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  p[3 * page + 5] = 0x5a;
  p[7 * page] = 0xa5;
  // An unaligned range inside the mapping: its pages are made present whole.
  MakePresent(p + 100, bytes - 200);
  EXPECT_EQ(p[3 * page + 5], 0x5a);
  EXPECT_EQ(p[7 * page], 0xa5);
  EXPECT_EQ(p[0], 0);
  // Kernels before 5.14 refuse the advice; pages then stay as they were.
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  const bool kernel_populates = madvise(p, page, MADV_POPULATE_WRITE) == 0;
  EXPECT_EQ(ResidentPages(p, bytes), kernel_populates ? 16u : 2u);
  munmap(p, bytes);
}

TEST(InternalAllocTest, MakePresentOfNothingIsHarmless) {
  MakePresent(nullptr, 4096);
  int x = 7;
  MakePresent(&x, 0);
  EXPECT_EQ(x, 7);
}

}  // namespace
}  // namespace pinshim
