// CaptureSite: the first kSiteFrames return addresses outside this
// library's span, whatever the depth of the stack around them, and whether
// the library's own frames fit in its first, short walk or not.
//
// The test binary is not libpinshim.so: CaptureSite's own return address
// (its first frame, which in the library lies in the library's span) is
// outside the span the test sets, so it is the site's first frame here.
#include "shim/optimize/hot_sites.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "shim/core/backtrace.h"

// Functions in a section of their own stand in for the library's frames:
// the linker gives its bounds.
extern "C" char __start_pinshim_site_self[];
extern "C" char __stop_pinshim_site_self[];

namespace pinshim {
namespace optimize {
namespace {

#define SELF_FRAME __attribute__((noinline, section("pinshim_site_self")))

struct Captured {
  SiteFrames site;
  SiteFrames reference;  // the same filter over a walk of the whole stack
};

bool InSelf(uintptr_t a) {
  return a >= reinterpret_cast<uintptr_t>(__start_pinshim_site_self) &&
         a < reinterpret_cast<uintptr_t>(__stop_pinshim_site_self);
}

// The reference: every frame walked, the same ones skipped.
SELF_FRAME void FullWalk(SiteFrames* out) {
  void* ips[256];
  const int n = Backtrace(ips, 256);
  out->n = 0;
  for (int i = 0; i < n && out->n < kSiteFrames; ++i) {
    const auto a = reinterpret_cast<uintptr_t>(ips[i]);
    if (!InSelf(a)) out->ips[out->n++] = a;
  }
}

// `self` frames of the library's stand-in above the capture.
SELF_FRAME int InLibrary(int self, Captured* c) {
  if (self > 1) {
    const int r = InLibrary(self - 1, c);
    asm volatile("" ::: "memory");  // not a tail call: the frame stays
    return r;
  }
  CaptureSite(&c->site);
  FullWalk(&c->reference);
  return 0;
}

// `depth` frames of the program's below them.
__attribute__((noinline)) int InProgram(int depth, int self, Captured* c) {
  if (depth > 0) {
    const int r = InProgram(depth - 1, self, c);
    asm volatile("" ::: "memory");
    return r;
  }
  return InLibrary(self, c);
}

// Whether a return address lies in CaptureSite (the nearest symbol below it).
bool InCaptureSite(uintptr_t a) {
  Dl_info at, fn;
  if (dladdr(reinterpret_cast<void*>(a), &at) == 0 ||
      dladdr(reinterpret_cast<void*>(&CaptureSite), &fn) == 0) {
    return false;
  }
  return at.dli_saddr != nullptr && at.dli_saddr == fn.dli_saddr;
}

class CaptureSiteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetSelfRangeForTest(reinterpret_cast<uintptr_t>(__start_pinshim_site_self),
                        reinterpret_cast<uintptr_t>(__stop_pinshim_site_self));
  }
  void TearDown() override { SetSelfRangeForTest(0, 0); }
};

TEST_F(CaptureSiteTest, GivesTheFramesOfAWholeWalkAtEveryDepth) {
  // Library frames from 1 (the first walk has room to spare) to 12 (the
  // site lies past it), under stacks from shallow to far deeper than a walk.
  for (int self : {1, 2, 3, 4, 5, 8, 12}) {
    for (int depth : {0, 1, 2, 3, 6, 20, 60}) {
      Captured c;
      InProgram(depth, self, &c);
      ASSERT_EQ(c.site.n, kSiteFrames) << "self " << self << " depth " << depth;
      ASSERT_EQ(c.reference.n, kSiteFrames);
      EXPECT_TRUE(InCaptureSite(c.site.ips[0]));
      for (int i = 1; i < kSiteFrames; ++i) {
        EXPECT_EQ(c.site.ips[i], c.reference.ips[i - 1])
            << "frame " << i << ", self " << self << " depth " << depth;
        EXPECT_FALSE(InSelf(c.site.ips[i]));
      }
    }
  }
}

TEST_F(CaptureSiteTest, AStackShorterThanASiteGivesWhatThereIs) {
  // More library frames than the deeper walk holds: no frame of the
  // program's is reached, and none of the library's is taken for one (the
  // one frame is CaptureSite's own, see the top).
  Captured c;
  InProgram(0, 40, &c);
  ASSERT_EQ(c.site.n, 1);
  EXPECT_TRUE(InCaptureSite(c.site.ips[0]));
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
