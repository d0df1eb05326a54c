// The recorder writing a real trace file, read back with the analyzer's
// reader: events, call sites, module maps, size per copy, fork.
#include "shim/trace/recorder.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace {

using report::Event;
using report::TraceReader;

struct Collect : report::EventVisitor {
  std::vector<Event> events;
  void OnEvent(const Event& e) override { events.push_back(e); }
};

std::string MakeDir(const char* name) {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name + "." + std::to_string(getpid());
  return dir;
}

std::vector<std::string> TracesIn(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 8 && n.substr(n.size() - 8) == ".pstrace") out.push_back(dir + "/" + n);
  }
  closedir(d);
  return out;
}

uint64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

__attribute__((noinline)) void CopyOnce(void* buf, uint64_t bytes, uint64_t alloc_id) {
  CopyEvent e{};
  e.api = 7;
  e.dir = CopyDir::kHostToDevice;
  e.src_kind = MemKind::kPageable;
  e.dst_kind = MemKind::kDevice;
  e.bytes = bytes;
  e.host_ptr = buf;
  e.host_alloc_id = alloc_id;
  e.start_ns = Now();
  e.end_ns = e.start_ns + 80000;
  trace::RecordCopy(e, 0);
}

const char* ApiName(ApiId id) { return id == 7 ? "cuMemcpyHtoD_v2" : nullptr; }

TEST(Recorder, WritesAReadableTraceWithCompactCopies) {
  std::string dir = MakeDir("recorder_test");
  trace::RecorderOptions o;
  o.trace_dir = dir.c_str();
  o.sample_ms = 5;
  o.api_name = ApiName;
  o.api_count = 16;
  char err[256];
  ASSERT_TRUE(trace::StartRecorder(o, err, sizeof(err))) << err;
  ASSERT_TRUE(trace::RecorderActive());
  static char buffer[1 << 20];
  HostAllocEvent alloc{11, buffer, sizeof(buffer), false, 0};
  trace::RecordHostAlloc(alloc);
  constexpr int kCopies = 200000;
  for (int i = 0; i < kCopies; ++i) CopyOnce(buffer, sizeof(buffer), 11);
  trace::RecorderStats st = trace::GetRecorderStats();
  EXPECT_GE(st.unwind_cache_hits, static_cast<uint64_t>(kCopies - 1));
  std::thread other([] {
    for (int i = 0; i < 1000; ++i) CopyOnce(buffer, 4096, 11);
  });
  other.join();
  PinEvent pin{};
  pin.api = 1;
  pin.op = PinOp::kAlloc;
  pin.ptr = buffer;
  pin.bytes = 4096;
  pin.flags = trace::kPinFlagWriteCombined;
  pin.start_ns = Now();
  pin.end_ns = pin.start_ns + 1000;
  trace::RecordPin(pin, 0);
  EXPECT_TRUE(trace::CheckWcRead(buffer + 10, 16, trace::WcReadVia::kMemcpy));
  EXPECT_FALSE(trace::CheckWcRead(buffer + 8192, 16, trace::WcReadVia::kMemcpy));
  // The sampler runs every 5 ms; wait for it, however loaded the machine.
  for (int i = 0; i < 2000 && trace::GetRecorderStats().samples_taken == 0; ++i) usleep(5000);
  trace::SyncEvent sync{};
  sync.kind = trace::SyncKind::kContextSynchronize;
  sync.start_ns = Now();
  sync.end_ns = sync.start_ns + 10;
  trace::RecordSync(sync);
  std::string path = trace::RecorderTracePath();
  trace::StopRecorder();
  EXPECT_FALSE(trace::RecorderActive());

  TraceReader r;
  std::string error;
  ASSERT_TRUE(r.Open(path, &error)) << error;
  EXPECT_TRUE(r.damage().has_end);
  EXPECT_EQ(r.damage().skipped_bytes, 0u);
  EXPECT_EQ(r.process().pid, static_cast<uint64_t>(getpid()));
  EXPECT_EQ(r.ApiName(7), "cuMemcpyHtoD_v2");
  ASSERT_FALSE(r.module_maps().empty());
  bool main_found = false;
  for (const auto& m : r.module_maps()[0].modules) {
    if (m.flags & trace::kModuleMainProgram) {
      main_found = true;
      EXPECT_NE(m.path.find("recorder_test"), std::string::npos) << m.path;
      EXPECT_FALSE(m.build_id.empty());
    }
  }
  EXPECT_TRUE(main_found);
  Collect c;
  r.ForEachEvent(&c);
  uint64_t copies = 0, samples = 0, pins = 0, misuse = 0, syncs = 0, allocs = 0;
  uint32_t loop_stack = 0;
  for (const Event& e : c.events) {
    switch (e.type) {
      case trace::EventType::kCopy:
        if (copies == 0) loop_stack = e.stack;
        if (copies < static_cast<uint64_t>(kCopies)) {
          EXPECT_EQ(e.stack, loop_stack);
          EXPECT_EQ(e.host_ptr, reinterpret_cast<uint64_t>(buffer));
          EXPECT_EQ(e.alloc_id, 11u);
          EXPECT_EQ(e.duration_ns, 80000u);
        }
        ++copies;
        break;
      case trace::EventType::kSample: ++samples; break;
      case trace::EventType::kPin:
        ++pins;
        EXPECT_EQ(e.flags, trace::kPinFlagWriteCombined);
        break;
      case trace::EventType::kMisuse:
        ++misuse;
        EXPECT_EQ(e.ptr, reinterpret_cast<uint64_t>(buffer + 10));
        EXPECT_EQ(e.detail, static_cast<uint32_t>(trace::WcReadVia::kMemcpy));
        break;
      case trace::EventType::kSync: ++syncs; break;
      case trace::EventType::kHostAlloc: ++allocs; break;
      default: break;
    }
  }
  EXPECT_EQ(copies, static_cast<uint64_t>(kCopies + 1000));
  EXPECT_EQ(pins, 1u);
  EXPECT_EQ(misuse, 1u);
  EXPECT_EQ(syncs, 1u);
  EXPECT_EQ(allocs, 1u);
  EXPECT_GE(samples, 1u);
  ASSERT_NE(loop_stack, 0u);
  const report::Stack* s = r.FindStack(loop_stack);
  ASSERT_NE(s, nullptr);
  EXPECT_GE(s->ips.size(), 3u);
  // Distinct stacks: the loop, the other thread, the pin, the wc read, the
  // allocation; a handful, not one per event.
  EXPECT_LE(r.stack_count(), 8u);
  // Size: everything but the copies is small and fixed; the copies share it.
  double per_copy = static_cast<double>(r.damage().file_bytes) / static_cast<double>(copies);
  EXPECT_LE(per_copy, 32.0);
  RecordProperty("bytes_per_copy", std::to_string(per_copy));
  printf("trace bytes per copy event: %.2f (%llu bytes, %llu copies)\n", per_copy,
         static_cast<unsigned long long>(r.damage().file_bytes),
         static_cast<unsigned long long>(copies));
}

__attribute__((noinline)) void DecideOnce(uint8_t decision, uint64_t bytes, uint64_t time_ns) {
  trace::BudgetDecisionEvent e{};
  e.owner = static_cast<uint8_t>(trace::BudgetOwner::kProgramRegister);
  e.decision = decision;
  e.limiter = static_cast<uint8_t>(decision == 0 ? trace::BudgetLimiter::kNone
                                                 : trace::BudgetLimiter::kNode);
  e.evictor_called = decision != 0;
  e.bytes = bytes;
  e.evicted_bytes = decision != 0 ? 3 << 20 : 0;
  e.process_pinned = 5ull << 30;
  e.process_budget = 8ull << 30;
  e.node_pinned = 300ull << 30;
  e.node_budget = 320ull << 30;
  e.time_ns = time_ns;
  trace::RecordBudgetDecision(e);
}

TEST(Recorder, BudgetDecisionsRoundTrip) {
  std::string dir = MakeDir("recorder_budget");
  trace::RecorderOptions o;
  o.trace_dir = dir.c_str();
  o.sample_ms = 0;
  char err[256];
  ASSERT_TRUE(trace::StartRecorder(o, err, sizeof(err))) << err;
  uint64_t t0 = Now();
  const uint64_t kBytes[] = {4096, 64ull << 30, 1 << 20};
  // The last one leaves the time to the recorder.
  const uint64_t kTimes[] = {t0, t0 + 10, 0};
  // One call site: kept a loop (unrolled, as an instrumented build did, it
  // would be three).
#pragma GCC unroll 1
  for (int i = 0; i < 3; ++i) DecideOnce(static_cast<uint8_t>(i), kBytes[i], kTimes[i]);
  std::string path = trace::RecorderTracePath();
  trace::StopRecorder();

  TraceReader r;
  std::string error;
  ASSERT_TRUE(r.Open(path, &error)) << error;
  EXPECT_EQ(r.damage().bad_events, 0u);
  Collect c;
  r.ForEachEvent(&c);
  EXPECT_EQ(r.damage().unknown_events, 0u);
  ASSERT_EQ(c.events.size(), 3u);
  const trace::BudgetDecision kDecisions[] = {trace::BudgetDecision::kGranted,
                                              trace::BudgetDecision::kDenied,
                                              trace::BudgetDecision::kFallback};
  for (int i = 0; i < 3; ++i) {
    const Event& e = c.events[i];
    ASSERT_EQ(e.type, trace::EventType::kBudgetDecision);
    EXPECT_EQ(e.budget_owner, trace::BudgetOwner::kProgramRegister);
    EXPECT_EQ(e.budget_decision, kDecisions[i]);
    EXPECT_EQ(e.budget_limiter, i == 0 ? trace::BudgetLimiter::kNone : trace::BudgetLimiter::kNode);
    EXPECT_EQ(e.evictor_called, i != 0);
    EXPECT_EQ(e.bytes, kBytes[i]);
    EXPECT_EQ(e.evicted_bytes, i != 0 ? 3u << 20 : 0u);
    EXPECT_EQ(e.process_pinned, 5ull << 30);
    EXPECT_EQ(e.process_budget, 8ull << 30);
    EXPECT_EQ(e.node_pinned, 300ull << 30);
    EXPECT_EQ(e.node_budget, 320ull << 30);
    // One call site (the loop), stored once.
    EXPECT_EQ(e.stack, c.events[0].stack);
  }
  EXPECT_EQ(c.events[0].time_ns, t0);
  EXPECT_EQ(c.events[1].time_ns, t0 + 10);
  EXPECT_GE(c.events[2].time_ns, t0);
  ASSERT_NE(c.events[0].stack, 0u);
  const report::Stack* s = r.FindStack(c.events[0].stack);
  ASSERT_NE(s, nullptr);
  EXPECT_GE(s->ips.size(), 2u);
}

std::atomic<int> g_counters_phase{0};

// What optimize mode's counters look like in each phase of the test.
OptimizeCountersEvent CountersOf(int phase) {
  OptimizeCountersEvent c{};
  c.pinned_bytes_now = 6u << 20;
  c.pinned_bytes_peak = 10u << 20;
  c.pin_cap_bytes = UINT64_MAX;  // none: the longest encoding
  c.pool_hits = phase == 1 ? 9 : 40;
  c.pool_misses = 1;
  c.cache_registrations = 2;
  c.cache_declined_sub_allocation = 7;
  c.arena_allocs = 3;
  c.saved_copy_ns = 123456789;
  c.saved_alloc_ns = UINT64_MAX - 1;
  return c;
}

bool SnapshotCounters(OptimizeCountersEvent* out) {
  int phase = g_counters_phase.load();
  if (phase == 0) return false;  // optimize mode not started
  *out = CountersOf(phase);
  return true;
}

OwnPinEvent OwnPin(OwnPinAction action, OwnPinPart part, OwnPinReason reason, uintptr_t ptr,
                   uint64_t bytes, uint64_t alloc_id, int result) {
  OwnPinEvent e{};
  e.action = action;
  e.part = part;
  e.reason = reason;
  e.ptr = reinterpret_cast<const void*>(ptr);
  e.bytes = bytes;
  e.alloc_id = alloc_id;
  e.result = result;
  return e;
}

// Waits until the sampler has completed two more ticks.
void WaitForSamples() {
  uint64_t start = trace::GetRecorderStats().samples_taken;
  for (int i = 0; i < 4000 && trace::GetRecorderStats().samples_taken < start + 2; ++i) {
    usleep(1000);
  }
}

TEST(Recorder, OwnPinningAndOptimizeCountersRoundTrip) {
  std::string dir = MakeDir("recorder_own");
  trace::RecorderOptions o;
  o.trace_dir = dir.c_str();
  o.mode = "observe,optimize";
  o.sample_ms = 1;
  o.optimize_counters = &SnapshotCounters;
  char err[256];
  g_counters_phase.store(0);
  ASSERT_TRUE(trace::StartRecorder(o, err, sizeof(err))) << err;
  WaitForSamples();  // nothing to record yet
  g_counters_phase.store(1);
  WaitForSamples();  // recorded once
  WaitForSamples();  // unchanged: not again
  const OwnPinEvent kEvents[] = {
      OwnPin(OwnPinAction::kPinned, OwnPinPart::kCache, OwnPinReason::kNone, 0x7f0000001000,
             4u << 20, 17, 0),
      OwnPin(OwnPinAction::kRefused, OwnPinPart::kCache, OwnPinReason::kRefusedCap, 0x7f0000800000,
             7u << 20, 18, 0),
      OwnPin(OwnPinAction::kUnpinned, OwnPinPart::kPoolDedicated, OwnPinReason::kEvictedForBudget,
             0x7e0000000000, 64ull << 30, 19, 201),
      // A reason this reader does not know (a newer writer's) is kept.
      OwnPin(OwnPinAction::kRefused, OwnPinPart::kArena, static_cast<OwnPinReason>(99), 0, 4096, 0,
             -5),
  };
  for (const OwnPinEvent& e : kEvents) trace::RecordOwnPin(e);
  g_counters_phase.store(2);
  WaitForSamples();  // recorded once more
  std::string path = trace::RecorderTracePath();
  trace::StopRecorder();  // and a last time, unchanged or not

  TraceReader r;
  std::string error;
  ASSERT_TRUE(r.Open(path, &error)) << error;
  EXPECT_EQ(r.process().mode, "observe,optimize");
  Collect c;
  r.ForEachEvent(&c);
  EXPECT_EQ(r.damage().bad_events, 0u);
  EXPECT_EQ(r.damage().unknown_events, 0u);
  std::vector<Event> own, counters;
  for (const Event& e : c.events) {
    if (e.type == trace::EventType::kOwnPin) own.push_back(e);
    if (e.type == trace::EventType::kOptimizeCounters) counters.push_back(e);
  }
  ASSERT_EQ(own.size(), 4u);
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_EQ(own[i].own_action, kEvents[i].action) << i;
    EXPECT_EQ(own[i].own_part, kEvents[i].part) << i;
    EXPECT_EQ(own[i].own_reason, kEvents[i].reason) << i;
    EXPECT_EQ(own[i].ptr, reinterpret_cast<uint64_t>(kEvents[i].ptr)) << i;
    EXPECT_EQ(own[i].bytes, kEvents[i].bytes) << i;
    EXPECT_EQ(own[i].alloc_id, kEvents[i].alloc_id) << i;
    EXPECT_EQ(own[i].result, kEvents[i].result) << i;
    EXPECT_EQ(own[i].stack, 0u) << i;
  }
  EXPECT_STREQ(OwnPinReasonName(own[1].own_reason), "cap");
  EXPECT_STREQ(OwnPinReasonName(own[3].own_reason), "unknown");
  // Phase 1 once, phase 2 once, and the end.
  ASSERT_EQ(counters.size(), 3u);
  const int kPhases[] = {1, 2, 2};
  for (size_t i = 0; i < counters.size(); ++i) {
    const OptimizeCountersEvent want = CountersOf(kPhases[i]);
    EXPECT_EQ(memcmp(&counters[i].counters, &want, sizeof(want)), 0) << i;
  }
  EXPECT_EQ(counters[0].counters.pool_hits, 9u);
  EXPECT_EQ(counters[2].counters.pin_cap_bytes, UINT64_MAX);
  EXPECT_EQ(counters[2].counters.saved_alloc_ns, UINT64_MAX - 1);
  EXPECT_LE(counters[1].time_ns, counters[2].time_ns);
}

TEST(Recorder, ForkChildWritesItsOwnTrace) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start threads in the child of a multi-threaded "
                  "fork (\"dup thread with used id\"), and the recorder starts its own there";
#endif
  std::string dir = MakeDir("recorder_fork");
  trace::RecorderOptions o;
  o.trace_dir = dir.c_str();
  char err[256];
  ASSERT_TRUE(trace::StartRecorder(o, err, sizeof(err))) << err;
  static char buffer[4096];
  CopyOnce(buffer, 100, 0);  // buffered in the parent, not yet written
  pid_t pid = fork();
  if (pid == 0) {
    trace::RecorderAfterForkInChild();
    for (int i = 0; i < 3; ++i) CopyOnce(buffer, 200, 0);
    trace::StopRecorder();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  CopyOnce(buffer, 100, 0);
  trace::StopRecorder();
  std::vector<std::string> traces = TracesIn(dir);
  ASSERT_EQ(traces.size(), 2u);
  int parents = 0, children = 0;
  for (const std::string& t : traces) {
    TraceReader r;
    std::string error;
    ASSERT_TRUE(r.Open(t, &error)) << error;
    EXPECT_TRUE(r.damage().has_end) << t;
    Collect c;
    r.ForEachEvent(&c);
    // The copies: the sampler adds its samples (every 10 ms) to a test that
    // runs slowly, under a sanitizer or on a loaded machine.
    std::vector<Event> copies;
    for (const Event& e : c.events) {
      if (e.type == trace::EventType::kCopy) copies.push_back(e);
    }
    if (r.process().pid == static_cast<uint64_t>(pid)) {
      ++children;
      EXPECT_EQ(r.process().forked_from, static_cast<uint64_t>(getpid()));
      ASSERT_EQ(copies.size(), 3u);  // the parent's buffered copy is not here
      for (const Event& e : copies) EXPECT_EQ(e.bytes, 200u);
      EXPECT_NE(r.FindStack(copies[0].stack), nullptr);  // stacks defined anew
    } else {
      ++parents;
      EXPECT_EQ(copies.size(), 2u);
    }
  }
  EXPECT_EQ(parents, 1);
  EXPECT_EQ(children, 1);
}

}  // namespace
}  // namespace pinshim
