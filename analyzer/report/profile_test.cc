// Hot allocation sites and profiles on traces built in memory: which copies
// count, how stacks are cut into sites, what cannot be written, and that the
// file is what the library's parser reads (tests/trace/profile_test.py runs
// a real program end to end).
#include "analyzer/report/profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "analyzer/report/analysis.h"
#include "analyzer/report/trace_reader.h"
#include "shim/optimize/site_profile.h"
#include "tests/trace/trace_builder.h"

namespace pinshim {
namespace report {
namespace {

using testing::BuilderModule;
using testing::BuilderProcess;
using testing::TraceBuilder;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kT0 = 5000000000ull;

// The modules every trace here lists: the program, pinshim, libc, and a
// library without a build id; each with one 4 KiB executable segment.
const std::vector<BuilderModule> kModules = {
    {"/opt/app/bin/app", "\xaa\x01\x02", 0x10000, 0x11000, 0x1000},
    {"/opt/pinshim/lib/libpinshim.so", "\x99\x98", 0x20000, 0x21000, 0x1000},
    {"/lib/x86_64-linux-gnu/libc.so.6", "\xcc\xdd", 0x30000, 0x31000, 0x1000},
    {"/opt/app/lib/libnoid.so", "", 0x40000, 0x41000, 0x1000},
};
const char kApp[] = "aa0102";
const char kLibc[] = "ccdd";

class Trace {
 public:
  Trace() {
    b_.Process(BuilderProcess{});
    b_.Modules(0, kModules);
    b_.Stack(1, 0, {0x21050, 0x11500});  // where the copies are made
  }

  void Stack(uint32_t id, const std::vector<uint64_t>& ips) { b_.Stack(id, 0, ips); }

  // A tracked allocation `id` at stack `stack`, then `copies` copies of it.
  void Buffer(uint64_t id, uint32_t stack, int copies, MemKind kind = MemKind::kPageable,
              uint64_t bytes = 16 * kMiB, uint8_t source = kHostAllocMalloc,
              CopyDir dir = CopyDir::kHostToDevice) {
    const uint64_t ptr = 0x7f0000000000 + id * (1ull << 32);
    HostAllocEvent a{id, reinterpret_cast<void*>(ptr), bytes, false, source};
    b_.MakeRoom(1);
    b_.batch().AppendHostAlloc(a, t_++, stack);
    for (int i = 0; i < copies; ++i) Copy(id, ptr, kind, bytes, dir);
  }

  void Copy(uint64_t id, uint64_t ptr, MemKind kind, uint64_t bytes,
            CopyDir dir = CopyDir::kHostToDevice) {
    CopyEvent e{};
    e.dir = dir;
    e.src_kind = dir == CopyDir::kHostToDevice ? kind : MemKind::kDevice;
    e.dst_kind = dir == CopyDir::kHostToDevice ? MemKind::kDevice : kind;
    e.bytes = bytes;
    e.host_ptr = reinterpret_cast<void*>(ptr);
    e.host_alloc_id = id;
    e.start_ns = t_;
    e.end_ns = t_ + 1000;
    t_ += 2000;
    b_.MakeRoom(1);
    b_.batch().AppendCopy(e, 1, 0);
  }

  HotSites Analyze() {
    b_.Flush(1);
    b_.End(t_ + 1000);
    bytes_ = b_.bytes();
    TraceReader r;
    std::string error;
    EXPECT_TRUE(
        r.OpenBuffer(reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size(), &error))
        << error;
    AnalysisOptions o;
    o.symbolize = false;
    o.hot_sites = true;
    return AnalyzeTrace(r, o).hot_sites;
  }

 private:
  TraceBuilder b_;
  std::string bytes_;
  uint64_t t_ = kT0;
};

std::string Texts(const HotSites& s) {
  std::string out;
  for (const HotAllocSite& site : s.sites) out += site.FramesText() + "\n";
  return out;
}

TEST(HotSites, CutAfterPinshimFramesToFourFrames) {
  Trace t;
  t.Stack(10, {0x21010, 0x21020, 0x11100, 0x11200, 0x31300, 0x31400, 0x11900});
  t.Buffer(1, 10, 6);
  HotSites s = t.Analyze();
  ASSERT_EQ(s.sites.size(), 1u);
  EXPECT_EQ(s.unwritable, 0u);
  const HotAllocSite& site = s.sites[0];
  EXPECT_EQ(site.FramesText(), std::string(kApp) + "+0x1100 " + kApp + "+0x1200 " + kLibc +
                                   "+0x1300 " + kLibc + "+0x1400");
  EXPECT_EQ(site.copies, 6u);
  EXPECT_EQ(site.bytes, 6 * 16 * kMiB);
  EXPECT_EQ(site.allocations, 1u);
  EXPECT_GT(site.seconds_lost, 6e-3);
  EXPECT_EQ(site.frames[0].build_id, "\xaa\x01\x02");
  EXPECT_EQ(site.frames[0].offset, 0x1100u);
}

TEST(HotSites, ShortStacksGiveShortSites) {
  Trace t;
  t.Stack(11, {0x21010, 0x11110, 0x11200});
  t.Buffer(2, 11, 5);
  EXPECT_EQ(Texts(t.Analyze()), std::string(kApp) + "+0x1110 " + kApp + "+0x1200\n");
}

TEST(HotSites, CopiesOfMemoryPinshimPinnedCount) {
  // One copy before optimize mode pinned the buffer, three after: hot, as
  // the same program's observe-mode trace would say; one after is not.
  Trace t;
  t.Stack(11, {0x21010, 0x11110, 0x11200});
  t.Buffer(2, 11, 2);
  t.Copy(2, 0x7f0000000000 + (2ull << 32), MemKind::kPinnedByPinshim, 16 * kMiB);
  HotSites s = t.Analyze();
  EXPECT_EQ(s.sites.size(), 0u) << "3 copies are not enough";
  Trace u;
  u.Stack(11, {0x21010, 0x11110, 0x11200});
  u.Buffer(2, 11, 1);
  for (int i = 0; i < 3; ++i) {
    u.Copy(2, 0x7f0000000000 + (2ull << 32), MemKind::kPinnedByPinshim, 16 * kMiB);
  }
  s = u.Analyze();
  ASSERT_EQ(s.sites.size(), 1u);
  EXPECT_EQ(s.sites[0].copies, 4u);
}

TEST(HotSites, StacksThatCutToOneSiteAreSummed) {
  // Two call paths that differ only past the fourth frame (and inside
  // pinshim): one site, each path's copies below the threshold alone.
  Trace t;
  t.Stack(12, {0x21010, 0x11120, 0x11200, 0x31300, 0x31400, 0x11a00});
  t.Stack(13, {0x21030, 0x21040, 0x11120, 0x11200, 0x31300, 0x31400, 0x11b00});
  t.Buffer(3, 12, 2);
  t.Buffer(4, 13, 2);
  HotSites s = t.Analyze();
  ASSERT_EQ(s.sites.size(), 1u);
  EXPECT_EQ(s.sites[0].copies, 4u);
  EXPECT_EQ(s.sites[0].allocations, 2u);
}

TEST(HotSites, OnlyHotMallocBuffersCopiedFromPageableOrPinshimMemory) {
  Trace t;
  t.Stack(16, {0x21010, 0x11300});
  t.Buffer(7, 16, 6, MemKind::kPageable, 16 * kMiB, kHostAllocMmap);  // mmap
  t.Stack(18, {0x21010, 0x11400});
  t.Buffer(9, 18, 3);  // too few copies
  t.Stack(19, {0x21010, 0x11500});
  t.Buffer(10, 19, 6, MemKind::kPinnedByProgram);  // the program pinned it
  t.Stack(20, {0x21010, 0x11600});
  t.Buffer(11, 20, 10, MemKind::kPageable, 64 * 1024);  // copies too small to lose 1 ms
  for (int i = 0; i < 6; ++i) t.Copy(0, 0x600000, MemKind::kPageable, 16 * kMiB);  // untracked
  HotSites s = t.Analyze();
  EXPECT_EQ(Texts(s), "");
  EXPECT_EQ(s.unwritable, 0u);
}

TEST(HotSites, FramesWithoutABuildIdOrModuleAreCounted) {
  Trace t;
  t.Stack(14, {0x21010, 0x41100, 0x11200});     // a library without a build id
  t.Stack(15, {0x21010, 0x99999999, 0x11200});  // in no module
  t.Stack(17, {0x21010, 0x21020});              // nothing outside pinshim
  t.Stack(21, {0x21010, 0x11100, 0x11200, 0x31300, 0x31400, 0x41100});  // past 4th: fine
  t.Buffer(5, 14, 5);
  t.Buffer(6, 15, 5);
  t.Buffer(8, 17, 5);
  t.Buffer(12, 21, 5);
  t.Buffer(13, 0, 5);  // the stack is not in the trace
  HotSites s = t.Analyze();
  EXPECT_EQ(s.unwritable, 4u);
  EXPECT_EQ(Texts(s), std::string(kApp) + "+0x1100 " + kApp + "+0x1200 " + kLibc + "+0x1300 " +
                          kLibc + "+0x1400\n");
}

TEST(HotSites, HottestFirstAndDeviceToHostCounts) {
  Trace t;
  t.Stack(30, {0x21010, 0x11100});
  t.Stack(31, {0x21010, 0x11200});
  t.Stack(32, {0x21010, 0x11300});
  t.Buffer(1, 30, 4);
  t.Buffer(2, 31, 6, MemKind::kPageable, 16 * kMiB, kHostAllocMalloc, CopyDir::kDeviceToHost);
  t.Buffer(3, 32, 5);
  HotSites s = t.Analyze();
  EXPECT_EQ(Texts(s), std::string(kApp) + "+0x1200\n" + kApp + "+0x1300\n" + kApp + "+0x1100\n");
}

HotAllocSite Site(const std::string& id, uint64_t offset, uint64_t copies, double lost,
                  const std::string& where = "") {
  HotAllocSite s;
  s.frames.push_back({id, offset});
  s.copies = copies;
  s.bytes = copies * kMiB;
  s.allocations = 1;
  s.seconds_lost = lost;
  s.where = where;
  return s;
}

TEST(HotSites, ProcessesMergeBySite) {
  HotSites a, b;
  a.sites = {Site("\x01", 0x10, 5, 0.004), Site("\x01", 0x20, 5, 0.003, "f (a.cc:1)")};
  a.unwritable = 1;
  b.sites = {Site("\x01", 0x20, 5, 0.003, "f (a.cc:1)"), Site("\x02", 0x30, 9, 0.001)};
  b.unwritable = 2;
  HotSites m = MergeHotSites({&a, &b});
  EXPECT_EQ(m.unwritable, 3u);
  EXPECT_EQ(Texts(m), "01+0x20\n01+0x10\n02+0x30\n");
  EXPECT_EQ(m.sites[0].copies, 10u);
  EXPECT_EQ(m.sites[0].processes, 2);
  EXPECT_EQ(m.sites[0].where, "f (a.cc:1)");
  EXPECT_EQ(m.sites[1].processes, 1);
}

std::string TestDir() {
  const char* tmp = getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Profile, WrittenAsTheLibraryReadsIt) {
  HotSites s;
  HotAllocSite hot = Site("\xaa\x01\x02", 0x1100, 40, 0.0125, "Stage(unsigned long) (app.cc:14)");
  hot.frames.push_back({"\xcc\xdd", 0x1300});
  s.sites = {hot, Site("\x02", 0x30, 9, 0.001)};
  const std::string path = TestDir() + "/written.profile";
  std::string error;
  ASSERT_TRUE(WriteProfile(path, s, 3, &error)) << error;
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  const std::string text = ReadFile(path);
  EXPECT_EQ(text.substr(0, text.find('\n')), optimize::kProfileHeader);
  EXPECT_NE(text.find("# Hot allocation sites from 3 traces, hottest first"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\n# 1. Stage(unsigned long) (app.cc:14): 1 buffer copied 40 times, "
                      "40.0 MiB in all; 12.50 ms lost if pageable\n"
                      "site aa0102+0x1100 ccdd+0x1300\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n# 2. (not symbolized): 1 buffer copied 9 times, 9.00 MiB in all; "
                      "1.00 ms lost if pageable\nsite 02+0x30\n"),
            std::string::npos)
      << text;
  auto profile = std::make_unique<optimize::SiteProfile>();
  char err[optimize::kProfileErrorLen];
  ASSERT_TRUE(profile->Load(path.c_str(), err, sizeof(err))) << err;
  EXPECT_EQ(profile->size(), 2u);

  // No sites: still a profile, which loads empty.
  ASSERT_TRUE(WriteProfile(path, HotSites{}, 1, &error)) << error;
  ASSERT_TRUE(profile->Load(path.c_str(), err, sizeof(err))) << err;
  EXPECT_EQ(profile->size(), 0u);
}

TEST(Profile, WriteFailuresAreExplained) {
  std::string error;
  const std::string missing = TestDir() + "/no/such/dir/p.profile";
  EXPECT_FALSE(WriteProfile(missing, HotSites{}, 1, &error));
  EXPECT_EQ(error, "cannot write the profile " + missing + ": No such file or directory");
}

}  // namespace
}  // namespace report
}  // namespace pinshim
