// Writes the fuzzer's seed corpus: small valid traces that exercise every
// frame and event type, so mutations start from meaningful input.
#include <cstdio>
#include <string>

#include "shim/trace/site_totals.h"
#include "tests/trace/trace_builder.h"

namespace {

using pinshim::CopyDir;
using pinshim::CopyEvent;
using pinshim::HostAllocEvent;
using pinshim::MemKind;
using pinshim::OptimizeCountersEvent;
using pinshim::OwnPinAction;
using pinshim::OwnPinEvent;
using pinshim::OwnPinPart;
using pinshim::OwnPinReason;
using pinshim::PinEvent;
using pinshim::PinOp;
using pinshim::testing::TraceBuilder;
namespace trace = pinshim::trace;

// Two kSiteTotals frames, a later one and an earlier one (which the reader
// must ignore), with copies of every kind, a failed one and a spilled one.
void SiteTotalsFrames(TraceBuilder* b, uint64_t t) {
  static trace::SiteTotals totals;
  static uint8_t buf[trace::kMaxSiteTotalsBytes];
  trace::SiteCopy c{};
  c.stack = 1;
  c.api = 1;
  c.dir = CopyDir::kHostToDevice;
  c.src = MemKind::kPageable;
  c.dst = MemKind::kDevice;
  c.bytes = 4096;
  c.call_ns = 2000;
  totals.Add(c);
  c.async = true;
  c.failed = true;
  totals.Add(c);
  c.dir = CopyDir::kDeviceToHost;
  c.src = MemKind::kDevice;
  c.dst = MemKind::kPinnedByProgram;
  c.failed = false;
  c.bytes = 1 << 20;
  c.overlap_ns = 500;
  totals.Add(c);
  totals.CountNotDetailed(trace::NotDetailed::kSync);
  totals.NoteTime(t);
  for (uint64_t sequence : {2, 1}) {
    trace::SiteTotalsFields h;
    h.version = trace::kSiteTotalsVersion;
    h.sequence = sequence;
    h.detail_end_ns = t - 1000;
    h.detail_bytes = 1 << 16;
    const size_t n = totals.Encode(h, buf, sizeof(buf));
    b->Frame(trace::FrameType::kSiteTotals, std::string(reinterpret_cast<char*>(buf), n));
  }
}

CopyEvent Copy(uint64_t t, uint64_t bytes, bool async, MemKind host, uint64_t ptr) {
  CopyEvent e{};
  e.api = 1;
  e.dir = CopyDir::kHostToDevice;
  e.src_kind = host;
  e.dst_kind = MemKind::kDevice;
  e.async = async;
  e.bytes = bytes;
  e.host_ptr = reinterpret_cast<void*>(ptr);
  e.host_alloc_id = host == MemKind::kPageable ? 1 : 0;
  e.stream = reinterpret_cast<void*>(0x50);
  e.start_ns = t;
  e.end_ns = t + 1000;
  return e;
}

PinEvent Pin(uint64_t t, PinOp op, uint64_t ptr, uint64_t bytes, uint32_t flags) {
  PinEvent e{};
  e.op = op;
  e.ptr = reinterpret_cast<void*>(ptr);
  e.bytes = bytes;
  e.flags = flags;
  e.start_ns = t;
  e.end_ns = t + 500;
  return e;
}

std::string Everything() {
  TraceBuilder b;
  pinshim::testing::BuilderProcess p;
  p.budget_bytes = 1 << 20;
  p.physical_bytes = 8 << 20;
  p.mode = "observe,optimize";
  b.Process(p);
  b.ApiNames({{1, "cuMemcpyHtoD_v2"}, {2, "cuMemHostAlloc"}});
  b.Modules(1, "/nonexistent/app", 0x400000, 0x10000);
  b.Stack(1, 1, {0x400100, 0x400200, 0x400300});
  b.Stack(2, 1, {0x400500});
  // A Python program's stack and the code objects it names.
  b.PythonCode(1, "/app/train.py", "step", 10);
  b.PythonCode(2, "/app/train.py", "<module>", 1);
  b.PythonStack(3, 1, {0x400100, 0x400200}, pinshim::trace::PythonStatus::kFrames,
                {{1, 12}, {2, 40}}, 1);
  uint64_t t = 2000000000;
  auto& e = b.batch();
  HostAllocEvent h{1, reinterpret_cast<void*>(0x10000), 1 << 20, false, 0};
  e.AppendHostAlloc(h, t, 2);
  e.AppendPin(Pin(t + 10, PinOp::kAlloc, 0x900000, 4 << 20, trace::kPinFlagWriteCombined), 2, 0);
  for (int i = 0; i < 8; ++i) {
    e.AppendCopy(Copy(t + 100 + i * 2000, 1 << 20, i % 2, MemKind::kPageable, 0x10000), 1, 0);
    e.AppendCopy(Copy(t + 200 + i * 2000, 4096, true, MemKind::kPinnedByProgram, 0x900000), 1, 1);
  }
  e.AppendMisuse(trace::MisuseKind::kWcRead, reinterpret_cast<void*>(0x900010), 64, t + 30000, 1,
                 static_cast<uint32_t>(trace::WcReadVia::kMemcpy));
  trace::SampleEvent s{t + 40000, 4 << 20, 0, 0, 1 << 20, 10, 20, 1 << 20};
  e.AppendSample(s);
  s.time_ns += 10000;
  s.swap_ins = 30;
  e.AppendSample(s);
  trace::SyncEvent sync{};
  sync.kind = trace::SyncKind::kEventRecord;
  sync.stream = reinterpret_cast<void*>(0x50);
  sync.event = reinterpret_cast<void*>(0x60);
  sync.start_ns = t + 50000;
  sync.end_ns = t + 50010;
  e.AppendSync(sync);
  // Streams, captures, launches, host functions and CPU accesses under a
  // queued copy: what the synchronization model and copy-race read.
  trace::StreamEvent created{};
  created.stream = reinterpret_cast<void*>(0x50);
  created.flags = 1;
  created.start_ns = t + 50020;
  created.end_ns = t + 50030;
  e.AppendStream(created);
  trace::GraphEvent graph{};
  graph.op = trace::GraphOp::kCaptureBegin;
  graph.stream = reinterpret_cast<void*>(0x50);
  graph.start_ns = t + 50040;
  graph.end_ns = t + 50050;
  e.AppendGraph(graph);
  graph.op = trace::GraphOp::kCaptureEnd;
  graph.graph = reinterpret_cast<void*>(0x70);
  e.AppendGraph(graph);
  graph.op = trace::GraphOp::kLaunch;
  graph.graph = reinterpret_cast<void*>(0x80);
  e.AppendGraph(graph);
  sync.kind = trace::SyncKind::kHostFuncQueued;
  sync.event = reinterpret_cast<void*>(7);
  sync.device = 0;
  e.AppendSync(sync);
  sync.kind = trace::SyncKind::kHostFuncRun;
  e.AppendSync(sync);
  e.AppendMisuse(trace::MisuseKind::kCopyRace, reinterpret_cast<void*>(0x900010), 64, t + 50100, 1,
                 static_cast<uint32_t>(trace::WcReadVia::kMemcpy) | trace::kCopyAccessWrite);
  HostAllocEvent f{1, reinterpret_cast<void*>(0x10000), 1 << 20, true, 0};
  e.AppendHostAlloc(f, t + 60000, 2);
  e.AppendPin(Pin(t + 70000, PinOp::kFree, 0x900000, 4 << 20, 0), 2, 0);
  trace::BudgetDecisionEvent budget{};
  budget.decision = static_cast<uint8_t>(trace::BudgetDecision::kDenied);
  budget.limiter = static_cast<uint8_t>(trace::BudgetLimiter::kProcess);
  budget.bytes = 8 << 20;
  budget.process_pinned = 4 << 20;
  budget.process_budget = 8 << 20;
  e.AppendBudgetDecision(budget, t + 75000, 2);
  OwnPinEvent own{};
  own.action = OwnPinAction::kPinned;
  own.part = OwnPinPart::kCache;
  own.ptr = reinterpret_cast<void*>(0x10000);
  own.bytes = 1 << 20;
  own.alloc_id = 1;
  e.AppendOwnPin(own, t + 76000);
  own.action = OwnPinAction::kUnpinned;
  own.reason = OwnPinReason::kProgramReleased;
  e.AppendOwnPin(own, t + 77000);
  own.action = OwnPinAction::kRefused;
  own.part = OwnPinPart::kPoolSlab;
  own.reason = OwnPinReason::kRefusedCap;
  own.result = 2;
  e.AppendOwnPin(own, t + 78000);
  OptimizeCountersEvent counters{};
  counters.pinned_bytes_peak = 1 << 20;
  counters.pin_cap_bytes = 4 << 20;
  counters.pool_hits = 3;
  counters.cache_registrations = 1;
  e.AppendOptimizeCounters(counters, t + 79000);
  e.AppendDropped(3, t + 80000);
  b.Flush(7);
  SiteTotalsFrames(&b, t + 85000);
  b.End(t + 90000);
  return b.bytes();
}

// Bytes in which every other offset looks like a frame header of a large
// frame whose checksum fails: the resynchronising scan's worst case.
std::string ResyncPattern(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out.push_back(i % 2 == 1 ? '\0' : static_cast<char>(1 + i % 31));
  return out;
}

bool Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::string path = dir + "/" + name;
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  std::string all = Everything();
  bool ok = Write(dir, "everything.pstrace", all) &&
            Write(dir, "header_only.pstrace", all.substr(0, 32)) &&
            Write(dir, "torn.pstrace", all.substr(0, all.size() * 2 / 3)) &&
            Write(dir, "resync_pattern.pstrace", all.substr(0, 32) + ResyncPattern(32768));
  return ok ? 0 : 1;
}
