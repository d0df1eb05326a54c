// The "pinshim's own pinning" section, from a trace built in memory: the
// numbers, the buffers and why each was pinned or left alone, in the
// summary, the text report and the JSON report.
#include "analyzer/report/own_pinning.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analyzer/report/analysis.h"
#include "analyzer/report/json_report.h"
#include "analyzer/report/merge.h"
#include "analyzer/report/text_report.h"
#include "tests/trace/trace_builder.h"

namespace pinshim {
namespace report {
namespace {

using testing::BuilderProcess;
using testing::TraceBuilder;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kT0 = 5000000000ull;

// Allocation ids and addresses of the program's buffers.
constexpr uint64_t kHot = 10, kHotAt = 0x10000000;        // pinned by the cache
constexpr uint64_t kBig = 11, kBigAt = 0x20000000;        // refused for the cap
constexpr uint64_t kRegion = 12, kRegionAt = 0x30000000;  // an mmap region cut into pieces
constexpr uint64_t kRare = 13, kRareAt = 0x38000000;      // not copied hot
constexpr uint64_t kCold = 14, kColdAt = 0x3a000000;      // the cost model said no
constexpr uint64_t kHuge = 15, kHugeAt = 0x40000000;      // larger than the cap
constexpr uint64_t kPooled = 99, kSlabAt = 0x50000000;    // the program's pinned buffer
constexpr uint64_t kArenaAt = 0x60000000;
constexpr uint64_t kUntrackedAt = 0x70000000;

class OwnTrace {
 public:
  explicit OwnTrace(const std::string& mode) {
    BuilderProcess p;
    p.mode = mode;
    b_.Process(p);
    for (uint32_t s = 1; s <= 6; ++s) b_.Stack(s, 0, {0x1000ull * s});
  }

  void HostAlloc(uint64_t id, uint64_t ptr, uint64_t bytes, uint8_t source, uint32_t stack) {
    HostAllocEvent e{id, reinterpret_cast<void*>(ptr), bytes, false, source};
    b_.MakeRoom(1);
    b_.batch().AppendHostAlloc(e, Tick(), stack);
  }

  void Copies(int n, MemKind host, uint64_t ptr, uint64_t bytes, uint64_t alloc_id) {
    for (int i = 0; i < n; ++i) {
      CopyEvent e{};
      e.dir = CopyDir::kHostToDevice;
      e.src_kind = host;
      e.dst_kind = MemKind::kDevice;
      e.bytes = bytes;
      e.host_ptr = reinterpret_cast<void*>(ptr);
      e.host_alloc_id = alloc_id;
      e.start_ns = Tick();
      e.end_ns = e.start_ns + 100;
      b_.MakeRoom(1);
      b_.batch().AppendCopy(e, 1, 0);
    }
  }

  void ProgramPin(uint64_t ptr, uint64_t bytes, PinOp op = PinOp::kAlloc, uint64_t ns = 100,
                  int result = 0) {
    PinEvent e{};
    e.op = op;
    e.ptr = reinterpret_cast<void*>(ptr);
    e.bytes = bytes;
    e.result = result;
    e.start_ns = Tick();
    e.end_ns = e.start_ns + ns;
    b_.MakeRoom(1);
    b_.batch().AppendPin(e, 6, 0);
  }

  // A pinned allocation during which the pool pinned a slab at `slab` (its
  // record comes first, as the recorder writes the call's at its end).
  void ProgramAllocGrowingThePool(uint64_t ptr, uint64_t bytes, uint64_t slab, uint64_t ns) {
    PinEvent e{};
    e.op = PinOp::kAlloc;
    e.ptr = reinterpret_cast<void*>(ptr);
    e.bytes = bytes;
    e.start_ns = Tick();
    Own(OwnPinAction::kPinned, OwnPinPart::kPoolSlab, OwnPinReason::kNone, slab, 2 << 20);
    e.end_ns = e.start_ns + ns;
    b_.MakeRoom(1);
    b_.batch().AppendPin(e, 6, 0);
    t_ = e.end_ns;  // one thread's calls follow each other
  }

  void Own(OwnPinAction action, OwnPinPart part, OwnPinReason reason, uint64_t ptr, uint64_t bytes,
           uint64_t alloc_id = 0) {
    OwnPinEvent e{};
    e.action = action;
    e.part = part;
    e.reason = reason;
    e.ptr = reinterpret_cast<const void*>(ptr);
    e.bytes = bytes;
    e.alloc_id = alloc_id;
    b_.MakeRoom(1);
    b_.batch().AppendOwnPin(e, Tick());
  }

  void Counters(const OptimizeCountersEvent& c) {
    b_.MakeRoom(1);
    b_.batch().AppendOptimizeCounters(c, Tick());
  }

  ProcessReport Analyze() {
    b_.Flush(1);
    b_.End(Tick());
    bytes_ = b_.bytes();
    TraceReader r;
    std::string error;
    EXPECT_TRUE(
        r.OpenBuffer(reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size(), &error))
        << error;
    AnalysisOptions o;
    o.symbolize = false;
    return AnalyzeTrace(r, o);
  }

 private:
  uint64_t Tick() { return t_ += 1000; }

  TraceBuilder b_;
  std::string bytes_;
  uint64_t t_ = kT0;
};

// One of every case the section tells apart.
ProcessReport AnalyzeExample(const std::string& mode) {
  OwnTrace t(mode);
  t.HostAlloc(kHot, kHotAt, 4 * kMiB, 0, 2);
  t.HostAlloc(kBig, kBigAt, 8 * kMiB, 0, 3);
  t.HostAlloc(kRegion, kRegionAt, 16 * kMiB, 1, 4);
  t.HostAlloc(kRare, kRareAt, 1 * kMiB, 0, 5);
  t.HostAlloc(kCold, kColdAt, 2 * kMiB, 0, 5);
  t.HostAlloc(kHuge, kHugeAt, 64 * kMiB, 0, 5);
  t.Own(OwnPinAction::kPinned, OwnPinPart::kPoolSlab, OwnPinReason::kNone, kSlabAt, 2 * kMiB);
  t.ProgramPin(kSlabAt, 1 * kMiB);
  // The hot buffer: two pageable copies, registered, eight pinned, evicted.
  t.Copies(2, MemKind::kPageable, kHotAt, 4 * kMiB, kHot);
  t.Own(OwnPinAction::kPinned, OwnPinPart::kCache, OwnPinReason::kNone, kHotAt, 4 * kMiB, kHot);
  t.Copies(8, MemKind::kPinnedByPinshim, kHotAt, 4 * kMiB, kHot);
  t.Own(OwnPinAction::kUnpinned, OwnPinPart::kCache, OwnPinReason::kEvictedForCap, kHotAt, 4 * kMiB,
        kHot);
  t.Copies(10, MemKind::kPageable, kBigAt, 8 * kMiB, kBig);
  for (int i = 0; i < 3; ++i) {
    t.Own(OwnPinAction::kRefused, OwnPinPart::kCache, OwnPinReason::kRefusedCap, kBigAt, 8 * kMiB,
          kBig);
  }
  t.Copies(10, MemKind::kPageable, kUntrackedAt, 2 * kMiB, 0);
  t.Copies(10, MemKind::kPageable, kRegionAt + 4 * kMiB, 5 * kMiB / 2, kRegion);
  t.Copies(3, MemKind::kPageable, kRareAt, 1 * kMiB, kRare);
  t.Copies(20, MemKind::kPageable, kColdAt, 3 * kMiB / 2, kCold);
  t.Copies(6, MemKind::kPageable, kHugeAt, 16 * kMiB, kHuge);
  t.Copies(24, MemKind::kPinnedByPinshim, kSlabAt, 1 * kMiB, kPooled);
  t.Own(OwnPinAction::kRefused, OwnPinPart::kPoolSlab, OwnPinReason::kRefusedCap, 0, 4 * kMiB);
  t.Own(OwnPinAction::kPinned, OwnPinPart::kArena, OwnPinReason::kNone, kArenaAt, 1 * kMiB);
  t.Own(OwnPinAction::kUnpinned, OwnPinPart::kArena, OwnPinReason::kIdleTrim, kArenaAt, 1 * kMiB);
  OptimizeCountersEvent c{};
  c.pinned_bytes_now = 2 * kMiB;
  c.pinned_bytes_peak = 6 * kMiB;
  c.pin_cap_bytes = 32 * kMiB;
  c.pin_refusals = 4;
  c.evicted_bytes = 4 * kMiB;
  c.pool_hits = 9;
  c.pool_misses = 1;
  c.cache_registrations = 1;
  c.cache_hits = 8;
  c.cache_evictions = 1;
  c.cache_declined_untracked = 10;
  c.cache_declined_sub_allocation = 10;
  c.cache_declined_too_large = 6;
  c.arena_allocs = 3;
  c.saved_copy_ns = 2500000;
  c.saved_alloc_ns = 5000000;
  t.Counters(c);
  return t.Analyze();
}

// The JSON report without its layout, for substring checks.
std::string CompactJson(const MergedReport& m) {
  std::string json;
  WriteJsonReport(m, &json);
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    char ch = json[i];
    if (ch == '"' && (i == 0 || json[i - 1] != '\\')) in_string = !in_string;
    if (!in_string && (ch == ' ' || ch == '\n')) continue;
    out += ch;
  }
  return out;
}

TEST(OwnPinning, SummaryCountsWhatPinshimDid) {
  ProcessReport p = AnalyzeExample("observe,optimize");
  const OwnPinningSummary& o = p.own;
  ASSERT_TRUE(o.optimize_mode);
  EXPECT_TRUE(o.has_counters);
  EXPECT_EQ(o.peak_bytes, 6 * kMiB);
  EXPECT_EQ(o.final_bytes, 2 * kMiB);
  EXPECT_TRUE(o.cap_known);
  EXPECT_EQ(o.cap_bytes, 32 * kMiB);
  EXPECT_DOUBLE_EQ(o.PoolHitRate(), 0.9);
  EXPECT_EQ(o.cache_buffers_registered, 1u);
  EXPECT_EQ(o.cache_copies_pinned, 8u);
  // Pageable copies of tracked buffers: 2 + 10 + 10 + 3 + 20 + 6.
  EXPECT_EQ(o.cache_copies_pageable, 51u);
  EXPECT_DOUBLE_EQ(o.CacheHitRate(), 8.0 / 59.0);
  ASSERT_EQ(o.refusals.size(), 2u);
  EXPECT_EQ(o.refusals.at("cache").at("cap"), 3u);
  EXPECT_EQ(o.refusals.at("pool").at("cap"), 1u);
  ASSERT_EQ(o.dropped_bytes.size(), 2u);
  EXPECT_EQ(o.dropped_bytes.at("evicted_cap"), 4 * kMiB);
  EXPECT_EQ(o.dropped_bytes.at("idle_trim"), 1 * kMiB);

  // Hot buffers by bytes copied; the one copied three times is not hot.
  ASSERT_EQ(o.hot_buffers, 7u);
  ASSERT_EQ(o.buffers.size(), 7u);
  struct Want {
    uint64_t alloc_id;
    uint64_t bytes_copied;
    bool pinned;
    const char* by;
    const char* reason;
  };
  const Want kWant[] = {
      {kHuge, 96 * kMiB, false, "larger_than_cap", ""},
      {kBig, 80 * kMiB, false, "refused", "cap"},
      {kHot, 40 * kMiB, true, "cache", ""},
      {kCold, 30 * kMiB, false, "cost_model", ""},
      {kRegion, 25 * kMiB, false, "mmap_region", ""},
      {kPooled, 24 * kMiB, true, "pool", ""},
      {0, 20 * kMiB, false, "untracked", ""},
  };
  for (size_t i = 0; i < 7; ++i) {
    const OwnPinningBuffer& b = o.buffers[i];
    EXPECT_EQ(b.alloc_id, kWant[i].alloc_id) << i;
    EXPECT_EQ(b.bytes_copied, kWant[i].bytes_copied) << i;
    EXPECT_EQ(b.pinned, kWant[i].pinned) << i;
    EXPECT_EQ(b.by, kWant[i].by) << i;
    EXPECT_EQ(b.reason, kWant[i].reason) << i;
    EXPECT_FALSE(b.detail.empty()) << i;
  }
  EXPECT_EQ(o.buffers[0].size, 64 * kMiB);
  EXPECT_EQ(o.buffers[1].refusals, 3u);
  EXPECT_EQ(o.buffers[1].alloc_stack, 3u);
  EXPECT_EQ(o.buffers[2].copies, 10u);
  EXPECT_EQ(o.buffers[2].copies_pinned, 8u);
  EXPECT_EQ(o.buffers[2].unpinned, "evicted_cap");
  EXPECT_EQ(o.buffers[2].alloc_stack, 2u);
  EXPECT_EQ(o.buffers[2].copy_stack, 1u);
  EXPECT_EQ(o.buffers[4].size, 16 * kMiB);
  EXPECT_EQ(o.buffers[5].size, 1 * kMiB);  // the program's pinned allocation
  EXPECT_EQ(o.buffers[5].alloc_stack, 6u);
  EXPECT_EQ(o.buffers[6].address, kUntrackedAt);
}

TEST(OwnPinning, TextReportHasTheSection) {
  std::vector<ProcessReport> ps;
  ps.push_back(AnalyzeExample("observe,optimize"));
  MergedReport m = Merge(std::move(ps));
  std::string text;
  WriteTextReport(m, &text);
  const char* kLines[] = {
      "    pinshim's own pinning (optimize mode):\n",
      "      pinned by pinshim: peak 6.00 MiB, at the end 2.00 MiB; cap 32.0 MiB\n",
      "      pool: 9 hits, 1 miss (90% hit rate), 0 dedicated allocations; refused 1 time "
      "(cap 1)\n",
      "      registration cache: 1 buffer registered (1 registration); 8 of 59 copies of "
      "tracked pageable buffers served pinned (14%); refused 3 times (cap 3)\n",
      "      arena: 3 allocations served\n",
      "      dropped: 4.00 MiB evicted for the pin cap, 1.00 MiB given back when idle\n",
      "      estimated time saved: 2.50 ms in copies, 5.00 ms in allocations\n",
      "      buffers copied hot, by bytes copied:\n",
      "        - 96.0 MiB in 6 copies of the 64.0 MiB allocation at an unknown site",
      "          left alone (larger than the cap): larger than pinshim's pin cap (32.0 MiB)",
      "        - 80.0 MiB in 10 copies of the 8.00 MiB allocation",
      "          left alone (refused: cap): pinshim's pin cap (32.0 MiB) was full",
      "          pinned by pinshim (registration cache): pinned in place by the registration "
      "cache; 8 of 10 copies ran pinned; last unpinned: evicted for the pin cap\n",
      "          left alone (not worth pinning): ",
      "          left alone (mmap region): lies inside an mmap region",
      "          pinned by pinshim (pool): the program's own pinned allocation",
      "        - 20.0 MiB in 10 copies of untracked memory, copied at an unknown site\n",
      "          left alone (untracked memory): not a tracked allocation",
  };
  for (const char* line : kLines) EXPECT_NE(text.find(line), std::string::npos) << line << text;
  // Sorted by bytes copied.
  EXPECT_LT(text.find("96.0 MiB in 6"), text.find("80.0 MiB in 10"));
  EXPECT_LT(text.find("80.0 MiB in 10"), text.find("40.0 MiB in 10"));
  EXPECT_LT(text.find("25.0 MiB in 10"), text.find("24.0 MiB in 24"));
}

TEST(OwnPinning, JsonReportHasTheSection) {
  std::vector<ProcessReport> ps;
  ps.push_back(AnalyzeExample("observe,optimize"));
  std::string json = CompactJson(Merge(std::move(ps)));
  const char* kParts[] = {
      "\"optimize\":{\"counters_recorded\":true,"
      "\"pinned_bytes\":{\"peak\":6291456,\"final\":2097152,\"cap\":33554432},",
      "\"pool\":{\"hits\":9,\"misses\":1,\"hit_rate\":0.9,\"dedicated\":0,\"pairs\":0,"
      "\"pair_us\":null,\"alloc_us\":null,\"free_us\":null,"
      "\"growth_pairs\":0,\"growth_ms\":0,\"held_pairs\":0,\"held_pair_us\":null,"
      "\"refusals\":{\"cap\":1}},",
      "\"cache\":{\"buffers_registered\":1,\"registrations\":1,\"copies_served_pinned\":8,"
      "\"copies_pageable\":51,\"hit_rate\":0.13559322,\"hits\":8,\"evictions\":1,"
      "\"releases\":0,\"refusals\":{\"cap\":3},\"declined\":{\"untracked\":10,\"source\":0,"
      "\"sub_allocation\":10,\"too_large\":6}},",
      "\"arena\":{\"allocations\":3,\"copies\":0,\"refusals\":{}},",
      "\"dropped_bytes\":{\"evicted_cap\":4194304,\"idle_trim\":1048576},",
      "\"estimated_seconds_saved\":{\"copies\":0.0025,\"allocations\":0.005},",
      "\"hot_buffers\":7,",
      "{\"allocation\":11,\"address\":536870912,\"size\":8388608,\"allocated_at\":null,"
      "\"copied_at\":null,\"copies\":10,\"bytes_copied\":83886080,\"copies_pinned\":0,"
      "\"handled\":\"left_alone\",\"by\":\"refused\",\"reason\":\"cap\",\"unpinned\":null,"
      "\"refusals\":3,",
      "{\"allocation\":10,\"address\":268435456,\"size\":4194304,\"allocated_at\":null,"
      "\"copied_at\":null,\"copies\":10,\"bytes_copied\":41943040,\"copies_pinned\":8,"
      "\"handled\":\"pinned\",\"by\":\"cache\",\"reason\":null,\"unpinned\":\"evicted_cap\","
      "\"refusals\":0,",
      "{\"allocation\":null,\"address\":1879048192,\"size\":null,",
      "\"handled\":\"left_alone\",\"by\":\"untracked\",",
  };
  for (const char* part : kParts) EXPECT_NE(json.find(part), std::string::npos) << part << json;
}

// The program's pinned allocation + free pairs as the trace timed them:
// only allocations made and freed within the trace count (not a failed
// call, not a free of memory allocated before), each pair the two calls'
// durations together.
TEST(OwnPinning, PinnedPairsAreTimedFromTheCalls) {
  OwnTrace t("observe,optimize");
  t.ProgramPin(0x9000, 4096, PinOp::kFree, 7777);                 // allocated before the trace
  t.ProgramPin(0xa000, 4096, PinOp::kAlloc, 9999, /*result=*/2);  // refused
  t.ProgramPin(0xa000, 4096, PinOp::kFree, 9999, /*result=*/1);
  for (uint64_t i = 0; i <= 100; ++i) {
    const uint64_t at = 0x100000 + i * 0x1000;
    t.ProgramPin(at, 4096, PinOp::kAlloc, 500 + i);
    t.ProgramPin(at, 4096, PinOp::kFree, 1000 + 2 * i);
  }
  // Slower pairs, still within 1% at microseconds: 51 of 2 ms + 1 ms.
  for (uint64_t i = 0; i <= 50; ++i) {
    t.ProgramPin(0x900000, 1 << 20, PinOp::kAlloc, 2000000);
    t.ProgramPin(0x900000, 1 << 20, PinOp::kFree, 1000000);
  }
  t.ProgramPin(0x800000, 4096, PinOp::kAlloc, 300);  // never freed
  std::vector<ProcessReport> ps;
  ps.push_back(t.Analyze());
  const OwnPinningSummary& o = ps[0].own;
  EXPECT_EQ(o.pinned_pairs, 152u);
  // 101 fast pairs of 1500 + 3i ns and 51 slow ones: the median (76th) is
  // the fast one of i = 75; its calls' medians are 500 + 75 and 1000 + 150.
  EXPECT_NEAR(static_cast<double>(o.pair_ns.median_ns), 1725.0, 17.0);
  EXPECT_NEAR(static_cast<double>(o.pair_alloc_ns.median_ns), 575.0, 6.0);
  EXPECT_NEAR(static_cast<double>(o.pair_free_ns.median_ns), 1150.0, 12.0);
  // Means, exact: (101 x 550 + 51 x 2 ms) / 152 and (101 x 1100 + 51 x 1 ms) / 152.
  EXPECT_EQ(o.pair_alloc_ns.mean_ns, (101 * 550 + 51 * 2000000) / 152);
  EXPECT_EQ(o.pair_free_ns.mean_ns, (101 * 1100 + 51 * 1000000) / 152);
  EXPECT_EQ(o.pair_ns.mean_ns, (101 * 1650 + 51 * 3000000) / 152);
  MergedReport m = Merge(std::move(ps));
  std::string text;
  WriteTextReport(m, &text);
  EXPECT_NE(text.find("        allocation + free: 1.01 ms a pair on average (allocation 671.4 us, "
                      "free 336.3 us), median 1.7 us, over 152 pairs\n"),
            std::string::npos)
      << text;
  EXPECT_NE(CompactJson(m).find("\"pairs\":152,\"pair_us\":{\"mean\":1007.67"), std::string::npos)
      << CompactJson(m);
}

// Pairs whose allocation grew the pool (the pool's own pinning of a slab
// recorded on the thread during the call) are told apart from those the
// pool served from what it held, in the text and the JSON.
TEST(OwnPinning, PairsThatGrewThePoolAreCountedApart) {
  OwnTrace t("observe,optimize");
  for (uint64_t i = 0; i < 3; ++i) {
    t.ProgramAllocGrowingThePool(0x200000 + i * 0x1000, 4096, 0x40000000 + i * (2 << 20), 5000000);
    t.ProgramPin(0x200000 + i * 0x1000, 4096, PinOp::kFree, 1000000);
  }
  for (uint64_t i = 0; i < 20; ++i) {
    t.ProgramPin(0x300000, 4096, PinOp::kAlloc, 600);
    t.ProgramPin(0x300000, 4096, PinOp::kFree, 400);
  }
  // A slab pinned outside any allocation's call (a growth the trace saw
  // apart from the program's calls) marks none.
  t.Own(OwnPinAction::kPinned, OwnPinPart::kPoolSlab, OwnPinReason::kNone, 0x50000000, 2 << 20);
  t.ProgramPin(0x400000, 4096, PinOp::kAlloc, 600);
  t.ProgramPin(0x400000, 4096, PinOp::kFree, 400);
  std::vector<ProcessReport> ps;
  ps.push_back(t.Analyze());
  const OwnPinningSummary& o = ps[0].own;
  EXPECT_EQ(o.pinned_pairs, 24u);
  EXPECT_EQ(o.growth_pairs, 3u);
  EXPECT_EQ(o.growth_pair_ns, 3u * 6000000);
  EXPECT_EQ(o.held_pairs, 21u);
  EXPECT_EQ(o.held_pair_ns.mean_ns, 1000u);
  MergedReport m = Merge(std::move(ps));
  std::string text;
  WriteTextReport(m, &text);
  EXPECT_NE(
      text.find("        of which 3 pairs grew the pool (18.00 ms in all); the 21 served from "
                "it: 1.0 us a pair on average, median 1.0 us\n"),
      std::string::npos)
      << text;
  EXPECT_NE(CompactJson(m).find("\"growth_pairs\":3,\"growth_ms\":18,\"held_pairs\":21,"
                                "\"held_pair_us\":{\"mean\":1,\"median\":1.004}"),
            std::string::npos)
      << CompactJson(m);
}

// The medians hold at every scale: nanoseconds to seconds.
TEST(OwnPinning, PairMediansAreWithinOnePercentAtEveryScale) {
  for (uint64_t ns : {uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{1000}, uint64_t{65537},
                      uint64_t{3000000}, uint64_t{7000000000}}) {
    OwnTrace t("observe,optimize");
    t.ProgramPin(0x100000, 4096, PinOp::kAlloc, ns);
    t.ProgramPin(0x100000, 4096, PinOp::kFree, ns);
    std::vector<ProcessReport> ps;
    ps.push_back(t.Analyze());
    const double want = 2.0 * static_cast<double>(ns);
    EXPECT_NEAR(static_cast<double>(ps[0].own.pair_ns.median_ns), want, want / 100) << ns;
    EXPECT_NEAR(static_cast<double>(ps[0].own.pair_alloc_ns.median_ns), want / 2, want / 200) << ns;
    EXPECT_EQ(ps[0].own.pair_ns.mean_ns, 2 * ns);
  }
}

TEST(OwnPinning, NoSectionOutsideOptimizeMode) {
  std::vector<ProcessReport> ps;
  ps.push_back(AnalyzeExample("observe"));
  EXPECT_FALSE(ps[0].own.optimize_mode);
  EXPECT_TRUE(ps[0].own.buffers.empty());
  MergedReport m = Merge(std::move(ps));
  std::string text;
  WriteTextReport(m, &text);
  EXPECT_EQ(text.find("pinshim's own pinning"), std::string::npos);
  EXPECT_NE(CompactJson(m).find("\"optimize\":null"), std::string::npos);
}

// Optimize mode that recorded nothing of its own (it never started, or the
// process was killed before its counters were written).
TEST(OwnPinning, OptimizeModeWithoutRecordsSaysSo) {
  OwnTrace t("observe,optimize");
  t.HostAlloc(kHot, kHotAt, 4 * kMiB, 0, 2);
  t.Copies(10, MemKind::kPageable, kHotAt, 4 * kMiB, kHot);
  std::vector<ProcessReport> ps;
  ps.push_back(t.Analyze());
  const OwnPinningSummary& o = ps[0].own;
  EXPECT_FALSE(o.has_counters);
  EXPECT_FALSE(o.cap_known);
  EXPECT_DOUBLE_EQ(o.PoolHitRate(), -1);
  ASSERT_EQ(o.buffers.size(), 1u);
  EXPECT_EQ(o.buffers[0].by, "cost_model");
  MergedReport m = Merge(std::move(ps));
  std::string text;
  WriteTextReport(m, &text);
  EXPECT_NE(text.find("cap unknown"), std::string::npos) << text;
  EXPECT_NE(text.find("(no counters record:"), std::string::npos) << text;
  std::string json = CompactJson(m);
  EXPECT_NE(json.find("\"counters_recorded\":false"), std::string::npos);
  EXPECT_NE(json.find("\"cap\":null"), std::string::npos);
  EXPECT_NE(json.find("\"hit_rate\":null"), std::string::npos);
}

}  // namespace
}  // namespace report
}  // namespace pinshim
