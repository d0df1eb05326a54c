// The rules' thresholds and edge cases, on traces built in memory (the
// end-to-end tests in tests/trace check sites through real programs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "analyzer/report/analysis.h"
#include "analyzer/report/trace_reader.h"
#include "tests/trace/trace_builder.h"

namespace pinshim {
namespace report {
namespace {

using testing::BuilderProcess;
using testing::TraceBuilder;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kT0 = 5000000000ull;

class Trace {
 public:
  explicit Trace(BuilderProcess p = BuilderProcess{}) {
    b_.Process(p);
    b_.Stack(1, 0, {0x1000});
    b_.Stack(2, 0, {0x2000});
    b_.Stack(3, 0, {0x3000});
    // Per-thread default stream variants are known by their names.
    b_.ApiNames({{0, "cuMemcpyHtoDAsync_v2"},
                 {1, "cuMemcpyHtoDAsync_v2_ptsz"},
                 {2, "cuStreamSynchronize_ptsz"},
                 {3, "cuEventRecord_ptsz"}});
  }

  void Copy(uint64_t t, CopyDir dir, MemKind host, uint64_t bytes, uint64_t ptr, bool async,
            uint32_t stack = 1, int device = 0, uint64_t dur = 1000, uint64_t stream = 0x77,
            ApiId api = 0) {
    CopyEvent e{};
    e.api = api;
    e.dir = dir;
    e.src_kind = dir == CopyDir::kHostToDevice ? host : MemKind::kDevice;
    e.dst_kind = dir == CopyDir::kHostToDevice ? MemKind::kDevice : host;
    e.bytes = bytes;
    e.host_ptr = reinterpret_cast<void*>(ptr);
    e.async = async;
    e.stream = reinterpret_cast<void*>(stream);
    e.start_ns = t;
    e.end_ns = t + dur;
    b_.MakeRoom(1);
    b_.batch().AppendCopy(e, stack, device);
  }

  void Pin(uint64_t t, PinOp op, uint64_t ptr, uint64_t bytes, uint32_t flags = 0,
           uint32_t stack = 2, int device = 0) {
    PinEvent e{};
    e.op = op;
    e.ptr = reinterpret_cast<void*>(ptr);
    e.bytes = bytes;
    e.flags = flags;
    e.start_ns = t;
    e.end_ns = t + 100000;
    b_.MakeRoom(1);
    b_.batch().AppendPin(e, stack, device);
  }

  void Sample(uint64_t t, uint64_t pinned, uint64_t swap_ins) {
    trace::SampleEvent s{t, pinned, 0, 0, 0, swap_ins, 0, 0};
    b_.MakeRoom(1);
    b_.batch().AppendSample(s);
  }

  void Sync(uint64_t t, trace::SyncKind kind, uint64_t stream, uint64_t event = 0,
            uint64_t dur = 10, ApiId api = 0) {
    trace::SyncEvent s{};
    s.api = api;
    s.kind = kind;
    s.stream = reinterpret_cast<void*>(stream);
    s.event = reinterpret_cast<void*>(event);
    s.start_ns = t;
    s.end_ns = t + dur;
    s.device = 0;
    b_.MakeRoom(1);
    b_.batch().AppendSync(s);
  }

  // A stream created with `flags` (CU_STREAM_NON_BLOCKING is 1).
  void StreamCreate(uint64_t t, uint64_t stream, uint32_t flags, int device = 0) {
    trace::StreamEvent e{};
    e.stream = reinterpret_cast<void*>(stream);
    e.flags = flags;
    e.start_ns = t;
    e.end_ns = t + 10;
    e.device = device;
    b_.MakeRoom(1);
    b_.batch().AppendStream(e);
  }

  void Graph(uint64_t t, trace::GraphOp op, uint64_t stream, uint64_t graph = 0) {
    trace::GraphEvent e{};
    e.op = op;
    e.stream = reinterpret_cast<void*>(stream);
    e.graph = reinterpret_cast<void*>(graph);
    e.start_ns = t;
    e.end_ns = t + 10;
    e.device = 0;
    b_.MakeRoom(1);
    b_.batch().AppendGraph(e);
  }

  // A CPU access the copy watch recorded (kCopyRace).
  void Access(uint64_t t, uint64_t ptr, uint64_t bytes, bool write, uint32_t stack = 3) {
    b_.MakeRoom(1);
    b_.batch().AppendMisuse(
        trace::MisuseKind::kCopyRace, reinterpret_cast<void*>(ptr), bytes, t, stack,
        static_cast<uint32_t>(trace::WcReadVia::kMemcpy) | (write ? trace::kCopyAccessWrite : 0));
  }

  // Events of another thread go into their own batch.
  void SwitchThread(uint32_t from_tid) { b_.Flush(from_tid); }

  void HostFree(uint64_t t, uint64_t id, uint64_t ptr, uint64_t bytes, uint32_t stack = 3) {
    HostAllocEvent e{id, reinterpret_cast<void*>(ptr), bytes, true, 0};
    b_.MakeRoom(1);
    b_.batch().AppendHostAlloc(e, t, stack);
  }

  void Budget(uint64_t t, trace::BudgetOwner owner, trace::BudgetDecision decision, uint64_t bytes,
              uint32_t stack, bool evicted = false) {
    trace::BudgetDecisionEvent e{};
    e.owner = static_cast<uint8_t>(owner);
    e.decision = static_cast<uint8_t>(decision);
    e.limiter = static_cast<uint8_t>(decision == trace::BudgetDecision::kGranted
                                         ? trace::BudgetLimiter::kNone
                                         : trace::BudgetLimiter::kNode);
    e.evictor_called = evicted;
    e.evicted_bytes = evicted ? 2 * kMiB : 0;
    e.bytes = bytes;
    e.process_pinned = 3 * kGiB;
    e.node_pinned = 60 * kGiB;
    e.node_budget = 64 * kGiB;
    b_.MakeRoom(1);
    b_.batch().AppendBudgetDecision(e, t, stack);
  }

  // Runs every rule; returns the findings of `rule`.
  std::vector<Finding> Findings(const std::string& rule, const AnalysisOptions* opts = nullptr,
                                uint32_t last_tid = 1) {
    b_.Flush(last_tid);
    b_.End(kT0 + 100 * 1000000000ull);
    bytes_ = b_.bytes();
    TraceReader r;
    std::string error;
    EXPECT_TRUE(
        r.OpenBuffer(reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size(), &error))
        << error;
    AnalysisOptions o;
    o.symbolize = false;
    ProcessReport rep = AnalyzeTrace(r, opts ? *opts : o);
    summary_ = rep.summary;
    std::vector<Finding> out;
    for (Finding& f : rep.findings) {
      if (f.rule == rule) out.push_back(f);
    }
    return out;
  }

  // Of the last Findings() call.
  const ProcessSummary& summary() const { return summary_; }

 private:
  TraceBuilder b_;
  std::string bytes_;
  ProcessSummary summary_;
};

std::string Reasons(const std::vector<Finding>& f) { return f.empty() ? "" : f[0].explanation; }

TEST(OverPinning, ShareOfPhysicalMemoryAndSingleAllocation) {
  BuilderProcess p;
  p.physical_bytes = 8 * kGiB;
  Trace t(p);
  t.Pin(kT0, PinOp::kAlloc, 0x100000000, 3 * kGiB);
  auto f = t.Findings("over-pinning");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kError);
  EXPECT_NE(Reasons(f).find("38% of physical memory"), std::string::npos) << Reasons(f);
  EXPECT_NE(Reasons(f).find("a single pinned allocation"), std::string::npos) << Reasons(f);
  EXPECT_EQ(f[0].stack, 2u);
}

TEST(OverPinning, ManySmallAllocationsOverTheShareButNoneAlone) {
  BuilderProcess p;
  p.physical_bytes = 8 * kGiB;
  Trace t(p);
  for (int i = 0; i < 5; ++i) t.Pin(kT0 + i, PinOp::kAlloc, 0x100000000 + i * kGiB, 512 * kMiB);
  auto f = t.Findings("over-pinning");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(Reasons(f).find("31% of physical memory"), std::string::npos) << Reasons(f);
  EXPECT_EQ(Reasons(f).find("single"), std::string::npos) << Reasons(f);
}

TEST(OverPinning, FreedMemoryDoesNotCount) {
  BuilderProcess p;
  p.physical_bytes = 8 * kGiB;
  Trace t(p);
  for (int i = 0; i < 10; ++i) {
    t.Pin(kT0 + 2 * i, PinOp::kAlloc, 0x100000000, 1 * kGiB);
    t.Pin(kT0 + 2 * i + 1, PinOp::kFree, 0x100000000, 1 * kGiB);
  }
  EXPECT_TRUE(t.Findings("over-pinning").empty());
}

TEST(OverPinning, ConfiguredMemlockLimitOnly) {
  BuilderProcess p;
  p.memlock_limit = 2 * kGiB;
  Trace t(p);
  t.Pin(kT0, PinOp::kAlloc, 0x100000000, 1900 * kMiB);
  auto f = t.Findings("over-pinning");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(Reasons(f).find("RLIMIT_MEMLOCK"), std::string::npos);

  BuilderProcess small;
  small.memlock_limit = 8 * kMiB;  // a system default, not a configuration
  Trace u(small);
  u.Pin(kT0, PinOp::kAlloc, 0x100000000, 8 * kMiB);
  EXPECT_TRUE(u.Findings("over-pinning").empty());
}

TEST(OverPinning, SwapWhileMuchIsPinned) {
  BuilderProcess p;
  p.physical_bytes = 16 * kGiB;
  Trace t(p);
  t.Sample(kT0, 2 * kGiB, 100);
  t.Sample(kT0 + 10000000, 2 * kGiB, 164);
  auto f = t.Findings("over-pinning");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(Reasons(f).find("swapped 64 pages"), std::string::npos) << Reasons(f);

  Trace quiet(p);  // swapping, but little pinned: not pinning's fault
  quiet.Sample(kT0, 100 * kMiB, 100);
  quiet.Sample(kT0 + 10000000, 100 * kMiB, 164);
  EXPECT_TRUE(quiet.Findings("over-pinning").empty());
}

TEST(PinnedUnused, NeverUsedRarelyUsedStillPinnedAndMapped) {
  Trace t;
  t.Pin(kT0, PinOp::kAlloc, 0x10000000, 4 * kMiB, 0, 1);  // never used, never freed
  t.Pin(kT0, PinOp::kAlloc, 0x20000000, 4 * kMiB, 0, 2);  // used once over 3 s
  t.Pin(kT0, PinOp::kAlloc, 0x30000000, 4 * kMiB, trace::kPinFlagDeviceMap, 3);  // zero-copy
  t.Copy(kT0 + 1000000, CopyDir::kHostToDevice, MemKind::kPinnedByProgram, kMiB, 0x20000000, true);
  t.Pin(kT0 + 3000000000ull, PinOp::kFree, 0x20000000, 4 * kMiB, 0, 2);
  auto f = t.Findings("pinned-unused");
  ASSERT_EQ(f.size(), 2u);
  for (const Finding& x : f) {
    EXPECT_NE(x.stack, 3u);
    if (x.stack == 1) {
      EXPECT_NE(x.explanation.find("never used"), std::string::npos) << x.explanation;
      EXPECT_NE(x.explanation.find("still pinned at the end"), std::string::npos);
    } else {
      EXPECT_NE(x.explanation.find("only 1 copy"), std::string::npos) << x.explanation;
    }
  }
}

TEST(PinnedUnused, BusyBufferIsFine) {
  Trace t;
  t.Pin(kT0, PinOp::kAlloc, 0x10000000, 4 * kMiB);
  for (int i = 0; i < 10; ++i) {
    t.Copy(kT0 + 1000 * i, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB,
           0x10000000 + kMiB, true);
  }
  t.Pin(kT0 + 3000000000ull, PinOp::kFree, 0x10000000, 4 * kMiB);
  EXPECT_TRUE(t.Findings("pinned-unused").empty());
}

// In a trace of optimize mode the fixes do not suggest turning it on.
TEST(PinnedChurn, FixTextFollowsTheMode) {
  for (const char* mode : {"observe", "observe,optimize"}) {
    SCOPED_TRACE(mode);
    BuilderProcess p;
    p.mode = mode;
    Trace t(p);
    for (int i = 0; i < 20; ++i) {
      t.Pin(kT0 + 2000000 * i, PinOp::kAlloc, 0x10000000, kMiB);
      t.Pin(kT0 + 2000000 * i + 1000000, PinOp::kFree, 0x10000000, kMiB);
    }
    auto f = t.Findings("pinned-churn");
    ASSERT_EQ(f.size(), 1u);
    const bool optimize = std::string(mode).find("optimize") != std::string::npos;
    EXPECT_EQ(f[0].fix.find("serves repeated pinned allocations") != std::string::npos, !optimize)
        << f[0].fix;
    EXPECT_EQ(f[0].fix.find("In this run optimize mode served") != std::string::npos, optimize)
        << f[0].fix;
  }
}

TEST(PinnedChurn, AllocateAllThenFreeAllIsNotChurn) {
  Trace t;
  for (int i = 0; i < 8; ++i) t.Pin(kT0 + i, PinOp::kAlloc, 0x10000000 + i * kMiB, kMiB);
  for (int i = 0; i < 8; ++i) t.Pin(kT0 + 100 + i, PinOp::kFree, 0x10000000 + i * kMiB, kMiB);
  EXPECT_TRUE(t.Findings("pinned-churn").empty());
  Trace u;
  for (int i = 0; i < 8; ++i) {
    u.Pin(kT0 + 2 * i, PinOp::kRegister, 0x10000000, kMiB);
    u.Pin(kT0 + 2 * i + 1, PinOp::kUnregister, 0x10000000, kMiB);
  }
  auto f = u.Findings("pinned-churn");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].explanation.find("registered and unregistered 8 times"), std::string::npos)
      << f[0].explanation;
  // 16 calls of 100 us each; one cycle (200 us) would remain.
  EXPECT_NEAR(f[0].seconds_lost, 1.4e-3, 1e-9);
}

TEST(FreeInFlight, CompletionByEventStreamContextAndLegacyStream) {
  Trace t;
  t.Pin(kT0, PinOp::kRegister, 0x10000000, kMiB);
  t.StreamCreate(kT0 + 1, 0x77, 0);
  // Event recorded after the copy and waited for: fine.
  t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true);
  t.Sync(kT0 + 20, trace::SyncKind::kEventRecord, 0x77, 0xe1);
  t.Sync(kT0 + 30, trace::SyncKind::kEventSynchronize, 0, 0xe1);
  // Another copy, completed by a synchronous copy on the legacy stream.
  t.Copy(kT0 + 40, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true);
  t.Copy(kT0 + 50, CopyDir::kDeviceToHost, MemKind::kPageable, 64, 0x5000, false, 1, 0, 10, 0);
  // An event recorded before a third copy says nothing about it.
  t.Sync(kT0 + 55, trace::SyncKind::kEventRecord, 0x77, 0xe2);
  t.Copy(kT0 + 60, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true);
  t.Sync(kT0 + 65, trace::SyncKind::kEventSynchronize, 0, 0xe2);
  // Freed while still registered, before the wait above returned.
  t.HostFree(kT0 + 70, 5, 0x10000000, kMiB);
  auto f = t.Findings("free-in-flight");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kError);
  EXPECT_EQ(f[0].stack, 3u);
  EXPECT_EQ(f[0].evidence.Find("times")->int_value(), 1);
  EXPECT_EQ(f[0].evidence.Find("copy_queued_at")->stack(), 1u);
}

TEST(FreeInFlight, SilentWithoutAnySynchronizationEvents) {
  Trace t;
  t.Pin(kT0, PinOp::kRegister, 0x10000000, kMiB);
  t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true);
  t.HostFree(kT0 + 20, 5, 0x10000000, kMiB);
  EXPECT_TRUE(t.Findings("free-in-flight").empty());
}

// The driver waits for queued work before it unregisters or frees pinned
// memory (measured on the H200): releasing through it is no race.
TEST(FreeInFlight, DriverReleasesWaitAndAreNotFindings) {
  Trace t;
  t.StreamCreate(kT0, 0x77, 0);
  t.Pin(kT0 + 1, PinOp::kRegister, 0x10000000, kMiB);
  t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true);
  t.Pin(kT0 + 20, PinOp::kUnregister, 0x10000000, kMiB, 0, 3);
  // Unregistered, then freed: the unregister waited for the copy.
  t.HostFree(kT0 + 200000, 5, 0x10000000, kMiB);
  t.Pin(kT0 + 300000, PinOp::kAlloc, 0x20000000, kMiB);
  t.Copy(kT0 + 300010, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x20000000, true);
  t.Pin(kT0 + 300020, PinOp::kFree, 0x20000000, kMiB, 0, 3);
  t.Sync(kT0 + 400000, trace::SyncKind::kStreamSynchronize, 0x77);
  EXPECT_TRUE(t.Findings("free-in-flight").empty());
}

// The public sample's pattern: copies on blocking streams, an event
// recorded on the legacy stream and waited for, then the memory released.
TEST(FreeInFlight, LegacyStreamEventCoversBlockingStreamsButNotNonBlocking) {
  for (uint32_t flags : {0u, 1u}) {
    Trace t;
    t.StreamCreate(kT0, 0x71, flags);
    t.StreamCreate(kT0 + 1, 0x72, flags);
    t.Pin(kT0 + 2, PinOp::kRegister, 0x10000000, 2 * kMiB);
    t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true,
           1, 0, 5, 0x71);
    t.Copy(kT0 + 20, CopyDir::kDeviceToHost, MemKind::kRegisteredByProgram, kMiB, 0x10000000 + kMiB,
           true, 1, 0, 5, 0x72);
    t.Sync(kT0 + 30, trace::SyncKind::kEventRecord, 0, 0xe1);
    t.Sync(kT0 + 40, trace::SyncKind::kEventSynchronize, 0, 0xe1);
    t.HostFree(kT0 + 100, 5, 0x10000000, 2 * kMiB);
    auto f = t.Findings("free-in-flight");
    if (flags == 0) {
      EXPECT_TRUE(f.empty()) << Reasons(f);
    } else {
      ASSERT_EQ(f.size(), 1u);
      EXPECT_EQ(f[0].severity, Severity::kError);
      EXPECT_EQ(f[0].evidence.Find("times")->int_value(), 2);
    }
  }
}

// A stream the trace never saw created may or may not be blocking: an
// event on the legacy stream may have covered its copy, so no error, but
// an info finding saying why.
TEST(FreeInFlight, UnknownStreamFlagsGiveInfoNotError) {
  Trace t;
  t.Pin(kT0, PinOp::kRegister, 0x10000000, kMiB);
  t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true, 1,
         0, 5, 0x99);
  t.Sync(kT0 + 30, trace::SyncKind::kEventRecord, 0, 0xe1);
  t.Sync(kT0 + 40, trace::SyncKind::kEventSynchronize, 0, 0xe1);
  t.HostFree(kT0 + 100, 5, 0x10000000, kMiB);
  auto f = t.Findings("free-in-flight");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
  EXPECT_NE(f[0].explanation.find("cannot be told"), std::string::npos) << f[0].explanation;
}

// cuStreamWaitEvent chains: A's copy, an event on A that B waits for, an
// event on B waited for by the host: A's copy is done.
TEST(FreeInFlight, StreamWaitEventChainsCompose) {
  Trace t;
  t.StreamCreate(kT0, 0xa, 1);
  t.StreamCreate(kT0 + 1, 0xb, 1);
  t.Pin(kT0 + 2, PinOp::kRegister, 0x10000000, kMiB);
  t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true, 1,
         0, 5, 0xa);
  t.Sync(kT0 + 20, trace::SyncKind::kEventRecord, 0xa, 0xe1);
  t.Sync(kT0 + 30, trace::SyncKind::kStreamWaitEvent, 0xb, 0xe1);
  t.Sync(kT0 + 40, trace::SyncKind::kEventRecord, 0xb, 0xe2);
  t.Sync(kT0 + 50, trace::SyncKind::kEventSynchronize, 0, 0xe2);
  t.HostFree(kT0 + 100, 5, 0x10000000, kMiB);
  auto f = t.Findings("free-in-flight");
  EXPECT_TRUE(f.empty()) << Reasons(f);
}

// A wait counts once it returned: a free made on another thread while the
// synchronize is still blocked is a race.
TEST(FreeInFlight, AWaitCountsWhenItReturns) {
  Trace t;
  t.StreamCreate(kT0, 0x77, 1);
  t.Pin(kT0 + 1, PinOp::kRegister, 0x10000000, kMiB);
  t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kRegisteredByProgram, kMiB, 0x10000000, true);
  t.Sync(kT0 + 20, trace::SyncKind::kStreamSynchronize, 0x77, 0, 1000000);
  t.SwitchThread(1);
  t.HostFree(kT0 + 500, 5, 0x10000000, kMiB);
  auto f = t.Findings("free-in-flight", nullptr, 2);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kError);
}

// A per-thread default stream is blocking: the legacy stream's event covers
// it. Its own synchronize covers it only from its own thread.
TEST(CopyRace, PerThreadDefaultStreams) {
  {
    Trace t;
    t.Pin(kT0, PinOp::kAlloc, 0x10000000, kMiB);
    t.Copy(kT0 + 10, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x10000000, true, 1,
           0, 5, 0, /*api=*/1);
    t.Sync(kT0 + 20, trace::SyncKind::kEventRecord, 0, 0xe1);  // legacy stream
    t.Sync(kT0 + 30, trace::SyncKind::kEventSynchronize, 0, 0xe1);
    t.Access(kT0 + 100, 0x10000000, 64, false);
    EXPECT_TRUE(t.Findings("copy-race").empty());
  }
  {
    Trace t;
    t.Pin(kT0, PinOp::kAlloc, 0x10000000, kMiB);
    t.Copy(kT0 + 10, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x10000000, true, 1,
           0, 5, 0, /*api=*/1);
    t.SwitchThread(1);
    // Another thread synchronizes its own per-thread stream: that covers
    // this one's copy only through legacy-stream work the trace does not
    // show (both are blocking), so it cannot be told.
    t.Sync(kT0 + 20, trace::SyncKind::kStreamSynchronize, 0, 0, 10, /*api=*/2);
    t.SwitchThread(2);
    t.Access(kT0 + 100, 0x10000000, 64, false);
    auto f = t.Findings("copy-race");
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].severity, Severity::kInfo);
  }
  {
    // A non-blocking stream's synchronize says nothing about it at all.
    Trace t;
    t.StreamCreate(kT0, 0x77, 1);
    t.Pin(kT0 + 1, PinOp::kAlloc, 0x10000000, kMiB);
    t.Copy(kT0 + 10, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x10000000, true, 1,
           0, 5, 0, /*api=*/1);
    t.Sync(kT0 + 20, trace::SyncKind::kStreamSynchronize, 0x77);
    t.Access(kT0 + 100, 0x10000000, 64, false);
    auto f = t.Findings("copy-race");
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].severity, Severity::kError);
  }
}

TEST(CopyRace, ReadsOfDestinationsAndWritesOfSourcesBeforeAWait) {
  Trace t;
  t.StreamCreate(kT0, 0x77, 1);
  t.Pin(kT0 + 1, PinOp::kAlloc, 0x10000000, kMiB);
  t.Pin(kT0 + 2, PinOp::kAlloc, 0x20000000, kMiB);
  t.Copy(kT0 + 10, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x10000000, true);
  t.Copy(kT0 + 20, CopyDir::kHostToDevice, MemKind::kPinnedByProgram, kMiB, 0x20000000, true);
  t.Access(kT0 + 30, 0x20000000 + 10, 16, false, 2);  // reading a source is fine
  t.Access(kT0 + 40, 0x10000000 + 10, 16, false, 3);  // reading a destination is not
  t.Access(kT0 + 50, 0x20000000 + 10, 16, true, 3);   // nor writing a source
  t.Sync(kT0 + 60, trace::SyncKind::kStreamSynchronize, 0x77);
  t.Copy(kT0 + 100, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x10000000, true);
  t.Sync(kT0 + 110, trace::SyncKind::kStreamSynchronize, 0x77);
  t.Access(kT0 + 200, 0x10000000, 16, false, 2);  // after the wait
  auto f = t.Findings("copy-race");
  ASSERT_EQ(f.size(), 2u);
  for (const Finding& x : f) {
    EXPECT_EQ(x.severity, Severity::kError);
    EXPECT_EQ(x.stack, 3u);
    EXPECT_EQ(x.evidence.Find("copy_queued_at")->stack(), 1u);
  }
}

// Copies queued while a stream captures do not run then; at a launch they
// may, but which graph holds which copy is not in the trace: info only.
TEST(CopyRace, CapturedCopiesRunAtLaunchesAndAreNeverProven) {
  Trace t;
  t.StreamCreate(kT0, 0x77, 1);
  t.Pin(kT0 + 1, PinOp::kAlloc, 0x10000000, kMiB);
  t.Graph(kT0 + 10, trace::GraphOp::kCaptureBegin, 0x77);
  t.Copy(kT0 + 20, CopyDir::kHostToDevice, MemKind::kPinnedByProgram, kMiB, 0x10000000, true);
  t.Graph(kT0 + 30, trace::GraphOp::kCaptureEnd, 0x77, 0x6000);
  t.Access(kT0 + 40, 0x10000000, 16, true, 2);  // before any launch: fine
  t.Graph(kT0 + 50, trace::GraphOp::kLaunch, 0x77, 0x7000);
  t.Access(kT0 + 60, 0x10000000, 16, true, 3);  // during the launch: cannot tell
  t.Sync(kT0 + 70, trace::SyncKind::kStreamSynchronize, 0x77);
  t.Graph(kT0 + 100, trace::GraphOp::kLaunch, 0x77, 0x7000);
  t.Sync(kT0 + 110, trace::SyncKind::kStreamSynchronize, 0x77);
  t.Access(kT0 + 200, 0x10000000, 16, true, 2);  // after the wait: fine
  auto f = t.Findings("copy-race");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
  EXPECT_EQ(f[0].stack, 3u);
}

// A host function starts after its stream's earlier work finished.
TEST(CopyRace, HostFunctionsAreCompletionPoints) {
  Trace t;
  t.StreamCreate(kT0, 0x77, 1);
  t.Pin(kT0 + 1, PinOp::kAlloc, 0x10000000, kMiB);
  t.Copy(kT0 + 10, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x10000000, true);
  t.Sync(kT0 + 20, trace::SyncKind::kHostFuncQueued, 0x77, 41);
  t.SwitchThread(1);
  t.Sync(kT0 + 30, trace::SyncKind::kHostFuncRun, 0, 41);
  t.Access(kT0 + 40, 0x10000000, 16, false, 3);
  EXPECT_TRUE(t.Findings("copy-race", nullptr, 2).empty());
}

// Streams made by the thousand share one model index past the first 1024:
// a race on one of them is still found while nothing waits, and a wait for
// another of them hides it (never the other way round).
TEST(CopyRace, ManyStreamsStayBoundedAndNeverInventAFinding) {
  for (bool wait_other : {false, true}) {
    Trace t;
    for (uint64_t s = 0; s < 1100; ++s) t.StreamCreate(kT0 + s, 0x100000 + s * 16, 1);
    t.Pin(kT0 + 2000, PinOp::kAlloc, 0x10000000, kMiB);
    t.Copy(kT0 + 2010, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB, 0x10000000, true, 1,
           0, 5, 0x100000 + 1050 * 16);
    if (wait_other) t.Sync(kT0 + 2020, trace::SyncKind::kStreamSynchronize, 0x100000 + 1060 * 16);
    t.Access(kT0 + 3000, 0x10000000, 64, false);
    auto f = t.Findings("copy-race");
    if (wait_other) {
      EXPECT_TRUE(f.empty()) << Reasons(f);
    } else {
      ASSERT_EQ(f.size(), 1u);
      EXPECT_EQ(f[0].severity, Severity::kError);
    }
  }
}

TEST(NonPortable, PortableFlagOrSameDeviceIsFine) {
  Trace t;
  t.Pin(kT0, PinOp::kAlloc, 0x10000000, kMiB, trace::kPinFlagPortable, 2, 0);
  t.Pin(kT0, PinOp::kAlloc, 0x20000000, kMiB, 0, 3, 0);
  t.Copy(kT0 + 10, CopyDir::kHostToDevice, MemKind::kPinnedByProgram, kMiB, 0x10000000, true, 1, 1);
  t.Copy(kT0 + 20, CopyDir::kHostToDevice, MemKind::kPinnedByProgram, kMiB, 0x20000000, true, 1, 0);
  EXPECT_TRUE(t.Findings("non-portable").empty());
}

TEST(PageableHot, ThresholdsAndCalibration) {
  Trace few;
  for (int i = 0; i < 3; ++i) {
    few.Copy(kT0 + i * 1000000, CopyDir::kHostToDevice, MemKind::kPageable, 64 * kMiB, 0x1000,
             false);
  }
  EXPECT_TRUE(few.Findings("pageable-hot").empty());  // three copies are not "repeatedly"

  Trace small;
  for (int i = 0; i < 100; ++i) {
    small.Copy(kT0 + i * 100000, CopyDir::kHostToDevice, MemKind::kPageable, 4096, 0x1000, false);
  }
  // Pinning does not help at 4 KiB (0.60 GB/s pageable, 0.52 pinned).
  EXPECT_TRUE(small.Findings("pageable-hot").empty());

  auto run = [](const AnalysisOptions* o) {
    Trace t;
    for (int i = 0; i < 10; ++i) {
      t.Copy(kT0 + i * 1000000, CopyDir::kDeviceToHost, MemKind::kPageable, 16 * kMiB, 0x1000,
             false);
    }
    return t.Findings("pageable-hot", o);
  };
  auto f = run(nullptr);
  ASSERT_EQ(f.size(), 1u);
  double b = 16.0 * kMiB;
  EXPECT_NEAR(f[0].seconds_lost, 10 * (b / 8.61e9 - b / 53.38e9), 1e-9);

  char path[] = "/tmp/pinshim_calibration_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const char kText[] = "# measured here\nD2H pageable 16M 10\nD2H pinned 16MiB 20  # x\n";
  ASSERT_EQ(write(fd, kText, sizeof(kText) - 1), static_cast<ssize_t>(sizeof(kText) - 1));
  close(fd);
  AnalysisOptions o;
  o.symbolize = false;
  std::string error;
  ASSERT_TRUE(o.model.LoadCalibration(path, &error)) << error;
  auto g = run(&o);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NEAR(g[0].seconds_lost, 10 * (b / 10e9 - b / 20e9), 1e-9);
  unlink(path);
}

TEST(BandwidthModel, InterpolatesAndRejectsBadCalibration) {
  BandwidthModel m;
  EXPECT_DOUBLE_EQ(m.BytesPerSecond(CopyDir::kHostToDevice, false, kMiB), 11.87e9);
  double mid = m.BytesPerSecond(CopyDir::kHostToDevice, true, 4 * kMiB);  // between 1 and 16 MiB
  EXPECT_GT(mid, 39.06e9);
  EXPECT_LT(mid, 53.45e9);
  EXPECT_DOUBLE_EQ(m.BytesPerSecond(CopyDir::kHostToDevice, true, 1), 0.52e9);  // flat below
  EXPECT_DOUBLE_EQ(m.PageableLoss(CopyDir::kHostToDevice, 4096), 0);
  EXPECT_GT(m.RegisterSeconds(16 * kMiB), m.RegisterSeconds(kMiB));

  char path[] = "/tmp/pinshim_calibration_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const char kBad[] = "H2D pageable 1M 11\nH2D sideways 1M 3\n";
  ASSERT_EQ(write(fd, kBad, sizeof(kBad) - 1), static_cast<ssize_t>(sizeof(kBad) - 1));
  close(fd);
  std::string error;
  EXPECT_FALSE(m.LoadCalibration(path, &error));
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
  EXPECT_NE(error.find("sideways"), std::string::npos) << error;
  EXPECT_FALSE(m.LoadCalibration("/nonexistent/calibration", &error));
  EXPECT_NE(error.find("cannot open"), std::string::npos) << error;
  unlink(path);
}

TEST(SmallAndSyncCopies, ThresholdsPerSite) {
  Trace t;
  for (int i = 0; i < 150; ++i) {
    // Site 1: small async copies; site 2: large synchronous ones with host work between.
    t.Copy(kT0 + i * 100000, CopyDir::kHostToDevice, MemKind::kPinnedByProgram, 4096, 0x1000, true,
           1, 0, 5000);
    t.Copy(kT0 + i * 100000 + 20000, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB,
           0x2000, false, 2, 0, 30000);
  }
  auto small = t.Findings("small-copies");
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0].stack, 1u);
  Trace u;
  for (int i = 0; i < 150; ++i) {
    u.Copy(kT0 + i * 100000 + 20000, CopyDir::kDeviceToHost, MemKind::kPinnedByProgram, kMiB,
           0x2000, false, 2, 0, 30000);
  }
  auto sync = u.Findings("sync-copy-loop");
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(sync[0].stack, 2u);
  // 149 gaps of 70 us, each hiding at most the 30 us copy before it.
  EXPECT_NEAR(sync[0].seconds_lost, 149 * 30e-6, 1e-9);
}

TEST(BudgetRefused, OneFindingPerSiteOfTheProgramsOwnPinning) {
  using trace::BudgetDecision;
  using trace::BudgetOwner;
  Trace t;
  t.Budget(kT0, BudgetOwner::kProgramAlloc, BudgetDecision::kGranted, kMiB, 1);
  t.Budget(kT0 + 1, BudgetOwner::kProgramAlloc, BudgetDecision::kDenied, 2 * kMiB, 1, true);
  t.Budget(kT0 + 2, BudgetOwner::kProgramAlloc, BudgetDecision::kDenied, 4 * kMiB, 1);
  t.Budget(kT0 + 3, BudgetOwner::kProgramRegister, BudgetDecision::kFallback, kMiB, 2);
  // pinshim's own pinning refused: counted, but nothing the program did.
  t.Budget(kT0 + 4, BudgetOwner::kPinshimPool, BudgetDecision::kFallback, kMiB, 3);
  auto f = t.Findings("budget-refused");
  ASSERT_EQ(f.size(), 2u);
  const Finding& alloc = f[0].stack == 1 ? f[0] : f[1];
  const Finding& reg = f[0].stack == 1 ? f[1] : f[0];
  EXPECT_EQ(alloc.severity, Severity::kWarning);
  EXPECT_EQ(alloc.seconds_lost, 0);
  EXPECT_EQ(alloc.evidence.Find("denied")->int_value(), 2);
  EXPECT_EQ(alloc.evidence.Find("fallback")->int_value(), 0);
  EXPECT_EQ(alloc.evidence.Find("bytes")->int_value(), static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(alloc.evidence.Find("largest_request")->int_value(), static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(alloc.evidence.Find("node_budget")->int_value(), static_cast<int64_t>(64 * kGiB));
  EXPECT_EQ(alloc.evidence.Find("evictions")->int_value(), 1);
  EXPECT_EQ(alloc.evidence.Find("process_budget"), nullptr);  // none set
  EXPECT_NE(alloc.explanation.find("the node budget"), std::string::npos) << alloc.explanation;
  EXPECT_NE(alloc.fix.find("PINSHIM_NODE_BUDGET"), std::string::npos);
  EXPECT_EQ(reg.evidence.Find("fallback")->int_value(), 1);
  EXPECT_NE(reg.explanation.find("registration"), std::string::npos) << reg.explanation;
  const BudgetSummary& b = t.summary().budget;
  EXPECT_EQ(b.decisions, 5u);
  EXPECT_EQ(b.granted, 1u);
  EXPECT_EQ(b.denied, 2u);
  EXPECT_EQ(b.fallback, 2u);
  EXPECT_EQ(b.evictions, 1u);
  EXPECT_EQ(b.evicted_bytes, 2 * kMiB);
  EXPECT_EQ(b.refused_bytes, 8 * kMiB);
  EXPECT_EQ(b.process_budget, 0u);
  EXPECT_EQ(b.node_budget, 64 * kGiB);
}

TEST(BudgetRefused, GrantedOnlyIsSilent) {
  Trace t;
  t.Budget(kT0, trace::BudgetOwner::kProgramAlloc, trace::BudgetDecision::kGranted, kMiB, 1, true);
  EXPECT_TRUE(t.Findings("budget-refused").empty());
  EXPECT_EQ(t.summary().budget.granted, 1u);
  EXPECT_EQ(t.summary().budget.evictions, 1u);
}

}  // namespace
}  // namespace report
}  // namespace pinshim
