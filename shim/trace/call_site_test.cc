#include "shim/trace/call_site.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace pinshim {
namespace trace {
namespace {

struct Fixture {
  StackTable table;
  UnwindCache cache{};
  CapturedStack scratch;
  Fixture() {
    EXPECT_TRUE(table.Init(10, 1 << 16));
    cache.stack_top = CurrentThreadStackTop();
  }
};

__attribute__((noinline)) uint32_t SiteA(Fixture* f, bool* is_new) {
  uint32_t id = CaptureCallSite(&f->cache, 16, 1, &f->table, &f->scratch, is_new);
  asm volatile("" ::: "memory");  // keep the call from being a tail call
  return id;
}

__attribute__((noinline)) uint32_t SiteB(Fixture* f, bool* is_new) {
  uint32_t id = CaptureCallSite(&f->cache, 16, 1, &f->table, &f->scratch, is_new);
  asm volatile("" ::: "memory");
  return id;
}

__attribute__((noinline)) uint32_t SiteD(Fixture* f, bool* is_new) {
  uint32_t id = CaptureCallSite(&f->cache, 16, 1, &f->table, &f->scratch, is_new);
  asm volatile("" ::: "memory");
  return id;
}

__attribute__((noinline)) uint32_t ViaC(Fixture* f, bool* is_new) {
  uint32_t id = SiteA(f, is_new);
  asm volatile("" ::: "memory");
  return id;
}

bool InFunction(uintptr_t ip, void* fn) {
  Dl_info a, b;
  if (!dladdr(reinterpret_cast<void*>(ip - 1), &a) || !dladdr(fn, &b)) return false;
  return a.dli_saddr == b.dli_saddr;
}

TEST(CallSite, SameSiteSameIdAndCached) {
  Fixture f;
  uint32_t ids[101];
  bool news[101];
  for (int i = 0; i < 101; ++i) ids[i] = SiteA(&f, &news[i]);  // one call site
  ASSERT_NE(ids[0], 0u);
  EXPECT_TRUE(news[0]);
  ASSERT_GE(f.scratch.depth, 2);
  // Frame 0 is the capturing function's caller: SiteA.
  EXPECT_TRUE(InFunction(f.scratch.ips[0], reinterpret_cast<void*>(&SiteA)));
  for (int i = 1; i < 101; ++i) {
    EXPECT_EQ(ids[i], ids[0]);
    EXPECT_FALSE(news[i]);
  }
  EXPECT_EQ(f.cache.misses, 1u);
  EXPECT_EQ(f.cache.hits, 100u);
}

TEST(CallSite, DifferentSitesOrCallersDiffer) {
  Fixture f;
  bool is_new;
  uint32_t a = SiteA(&f, &is_new);
  uint32_t b = SiteB(&f, &is_new);
  uint32_t c = ViaC(&f, &is_new);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(b, c);
  EXPECT_TRUE(InFunction(f.scratch.ips[1], reinterpret_cast<void*>(&ViaC)));
  // A new epoch (modules unloaded) gives the same stack a new id.
  bool n2;
  uint32_t again = CaptureCallSite(&f.cache, 16, 2, &f.table, &f.scratch, &n2);
  EXPECT_TRUE(n2);
  EXPECT_NE(again, 0u);
}

// One capturing function reached from several callers at the same depth:
// the same frame and return address at every capture, told apart only by
// the callers' words further up the stack.
__attribute__((noinline)) uint32_t Shared(Fixture* f, bool* is_new) {
  uint32_t id = CaptureCallSite(&f->cache, 16, 1, &f->table, &f->scratch, is_new);
  asm volatile("" ::: "memory");
  return id;
}

template <int kCaller>
__attribute__((noinline)) uint32_t CallShared(Fixture* f, bool* is_new) {
  uint32_t id = Shared(f, is_new);
  asm volatile("" ::: "memory");
  return id;
}

// Runs `sites` in turn for 50 rounds; every stack keeps its id, and after
// two rounds no capture misses (in the first two a slot the cache found can
// be a dead copy of a return address that the next calls overwrite).
void ExpectCachedInTurn(const std::vector<uint32_t (*)(Fixture*, bool*)>& sites) {
  Fixture f;
  std::vector<uint32_t> first(sites.size());
  bool is_new;
  volatile int rounds = 50;
  uint64_t misses_after_two = 0, hits_after_two = 0;
  for (int r = 0; r < rounds; ++r) {
    if (r == 2) {
      misses_after_two = f.cache.misses;
      hits_after_two = f.cache.hits;
    }
    for (size_t s = 0; s < sites.size(); ++s) {
      const uint32_t id = sites[s](&f, &is_new);
      if (r == 0) first[s] = id;
      EXPECT_EQ(id, first[s]) << "site " << s << ", round " << r;
    }
  }
  for (size_t s = 1; s < sites.size(); ++s) EXPECT_NE(first[s], first[0]);
  EXPECT_EQ(f.cache.misses, misses_after_two);
  EXPECT_EQ(f.cache.hits - hits_after_two, sites.size() * (rounds - 2));
}

// A program's steps reach pinshim from a few places in turn (allocate, copy,
// free): each stays cached, whatever their frames and return addresses.
TEST(CallSite, SitesTakingTurnsStayCached) { ExpectCachedInTurn({&SiteA, &SiteB, &SiteD, &ViaC}); }

// The hooks' own path is the same for every allocation and free: twelve
// places of a program reaching it at the same depth (more than a set holds)
// stay cached.
TEST(CallSite, TwelveCallersOfOneCaptureStayCached) {
  ExpectCachedInTurn({&CallShared<0>, &CallShared<1>, &CallShared<2>, &CallShared<3>,
                      &CallShared<4>, &CallShared<5>, &CallShared<6>, &CallShared<7>,
                      &CallShared<8>, &CallShared<9>, &CallShared<10>, &CallShared<11>});
}

__attribute__((noinline)) uint32_t SharedAtDepth(Fixture* f, int depth, bool* is_new) {
  if (depth == 0) return Shared(f, is_new);
  const uint32_t id = SharedAtDepth(f, depth - 1, is_new);
  asm volatile("" ::: "memory");  // not a tail call: every level keeps its frame
  return id;
}

// More captures in turn than the cache holds, each from a frame of its own
// (one per depth, 80): entries are replaced, and every capture still gets
// the id its first one got from the unwind. (Past the capture's 16 frames
// the deeper ones are the same stack.)
TEST(CallSite, MoreFramesThanEntriesKeepTheirIds) {
  Fixture f;
  constexpr int kFrames = kUnwindCacheEntries + 16;
  uint32_t first[kFrames];
  bool is_new;
  for (int r = 0; r < 3; ++r) {
    for (int d = 0; d < kFrames; ++d) {
      const uint32_t id = SharedAtDepth(&f, d, &is_new);
      ASSERT_NE(id, 0u);
      if (r == 0) first[d] = id;
      EXPECT_EQ(id, first[d]) << "depth " << d << ", round " << r;
      if (r > 0) EXPECT_FALSE(is_new) << "depth " << d << ", round " << r;
    }
  }
  for (int d = 1; d < 8; ++d) EXPECT_NE(first[d], first[d - 1]);
  EXPECT_EQ(f.cache.hits + f.cache.misses, 3u * kFrames);
  EXPECT_GE(f.cache.misses, static_cast<uint64_t>(kFrames));
}

TEST(CallSite, OtherThreadsCacheToo) {
  std::thread t([] {
    Fixture f;
    uint32_t ids[10];
    bool news[10];
    for (int i = 0; i < 10; ++i) ids[i] = SiteB(&f, &news[i]);
    EXPECT_NE(ids[0], 0u);
    for (int i = 1; i < 10; ++i) EXPECT_EQ(ids[i], ids[0]);
    EXPECT_EQ(f.cache.misses, 1u);
  });
  t.join();
}

TEST(CallSite, NoStackTopNoCaching) {
  Fixture f;
  f.cache.stack_top = 0;
  uint32_t ids[2];
  bool is_new;
  volatile int n = 2;  // a loop the compiler cannot unroll into two call sites
  for (int i = 0; i < n; ++i) ids[i] = SiteA(&f, &is_new);
  EXPECT_EQ(ids[0], ids[1]);
  EXPECT_EQ(f.cache.hits, 0u);
  EXPECT_EQ(f.cache.misses, 2u);
}

TEST(CallSite, DepthIsBounded) {
  Fixture f;
  bool is_new;
  uint32_t id = CaptureCallSite(&f.cache, 2, 1, &f.table, &f.scratch, &is_new);
  EXPECT_NE(id, 0u);
  EXPECT_EQ(f.scratch.depth, 2);
}

TEST(CallSite, EncodesStack) {
  CapturedStack s;
  s.depth = 3;
  s.exact_mask = 1;
  s.ips[0] = 0x400000;
  s.ips[1] = 0x400100;
  s.ips[2] = 0x7f0000001000;
  uint8_t out[kMaxStackPayload];
  size_t n = EncodeStack(7, 2, s, out);
  const uint8_t* p = out;
  uint64_t v;
  ASSERT_TRUE(GetVarint(&p, out + n, &v));
  EXPECT_EQ(v, 7u);
  ASSERT_TRUE(GetVarint(&p, out + n, &v));
  EXPECT_EQ(v, 2u);
  ASSERT_TRUE(GetVarint(&p, out + n, &v));
  EXPECT_EQ(v, 3u);
  ASSERT_TRUE(GetVarint(&p, out + n, &v));
  EXPECT_EQ(v, 1u);
  ASSERT_TRUE(GetVarint(&p, out + n, &v));
  EXPECT_EQ(v, 0x400000u);
  int64_t d;
  ASSERT_TRUE(GetSigned(&p, out + n, &d));
  EXPECT_EQ(d, 0x100);
}

__attribute__((noinline)) uint32_t SiteWithPython(Fixture* f, const PythonStack* py, bool* is_new) {
  uint32_t id = CaptureCallSite(&f->cache, 16, 1, &f->table, &f->scratch, is_new, py);
  asm volatile("" ::: "memory");
  return id;
}

PythonStack PythonAt(uint32_t code, uint32_t line) {
  PythonStack py;
  py.status = PythonStatus::kFrames;
  py.depth = 2;
  py.omitted = 0;
  py.frames[0] = (uint64_t{code} << 32) | line;
  py.frames[1] = (uint64_t{1} << 32) | 100;
  return py;
}

TEST(CallSite, PythonFramesAreThePartOfTheStack) {
  // One native call site reached from two Python lines (and from a native
  // thread, and with no Python section at all): a stack each, found again
  // with the native part from the unwind cache.
  Fixture f;
  PythonStack line10 = PythonAt(2, 10), line20 = PythonAt(2, 20);
  PythonStack native_thread;
  native_thread.status = PythonStatus::kNoThreadState;
  native_thread.depth = 0;
  native_thread.omitted = 0;
  const PythonStack* variants[] = {&line10, &line20, &native_thread, nullptr};
  uint32_t ids[2][4];
  bool news[2][4];
  volatile int rounds = 2;  // one call site: the loop is not unrolled
  for (int i = 0; i < rounds * 4; ++i) {
    ids[i / 4][i % 4] = SiteWithPython(&f, variants[i % 4], &news[i / 4][i % 4]);
  }
  for (int v = 0; v < 4; ++v) {
    EXPECT_NE(ids[0][v], 0u);
    EXPECT_TRUE(news[0][v]) << v;
    EXPECT_FALSE(news[1][v]) << v;
    EXPECT_EQ(ids[1][v], ids[0][v]) << v;
    for (int w = 0; w < v; ++w) EXPECT_NE(ids[0][v], ids[0][w]) << v << " " << w;
  }
  // One unwind for the eight captures, and at most one more: the slot first
  // found for a return address can be a dead copy of it in a caller's frame,
  // which the next calls overwrite (seen in AddressSanitizer's frames).
  EXPECT_GE(f.cache.misses, 1u);
  EXPECT_LE(f.cache.misses, 2u);
  EXPECT_EQ(f.cache.hits + f.cache.misses, 8u);
  // The scratch holds the whole stack for the writer: the last one had no
  // Python section.
  EXPECT_EQ(f.scratch.python.status, PythonStatus::kNone);
  SiteWithPython(&f, &line20, &news[0][0]);
  EXPECT_EQ(f.scratch.python.status, PythonStatus::kFrames);
  EXPECT_EQ(f.scratch.python.depth, 2);
  EXPECT_EQ(f.scratch.python.frames[0] & 0xffffffffu, 20u);
}

TEST(CallSite, EncodesThePythonSection) {
  CapturedStack s;
  s.depth = 1;
  s.exact_mask = 0;
  s.ips[0] = 0x400000;
  s.python = PythonAt(300, 7);
  s.python.omitted = 5;
  uint8_t out[kMaxStackPayload];
  size_t n = EncodeStack(3, 1, s, out);
  const uint8_t* p = out;
  const uint8_t* end = out + n;
  uint64_t v;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(GetVarint(&p, end, &v));  // id .. ip[0]
  size_t native_bytes = static_cast<size_t>(p - out);
  std::vector<uint64_t> rest;
  while (p < end) {
    ASSERT_TRUE(GetVarint(&p, end, &v));
    rest.push_back(v);
  }
  // status, count, (code, line) x 2, omitted
  EXPECT_EQ(rest, (std::vector<uint64_t>{1, 2, 300, 7, 1, 100, 5}));
  // Without Python frames nothing is appended.
  s.python.status = PythonStatus::kNone;
  EXPECT_EQ(EncodeStack(3, 1, s, out), native_bytes);
}

TEST(StackTable, FullTableReturnsZero) {
  StackTable t;
  ASSERT_TRUE(t.Init(2, 8));  // 4 slots, 8 frames
  CapturedStack s{};
  s.depth = 2;
  int stored = 0;
  for (int i = 0; i < 10; ++i) {
    s.ips[0] = 0x1000 + i;
    bool is_new;
    if (t.Intern(s, 1, &is_new) != 0) ++stored;
  }
  EXPECT_EQ(stored, 4);
  EXPECT_GT(t.overflows(), 0u);
  t.Reset();
  bool is_new;
  EXPECT_EQ(t.Intern(s, 1, &is_new), 1u);
}

}  // namespace
}  // namespace trace
}  // namespace pinshim
