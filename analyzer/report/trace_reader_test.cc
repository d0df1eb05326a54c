#include "analyzer/report/trace_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shim/trace/site_totals.h"
#include "tests/trace/trace_builder.h"

namespace pinshim {
namespace report {
namespace {

using testing::TraceBuilder;

struct Collect : EventVisitor {
  std::vector<Event> events;
  void OnEvent(const Event& e) override { events.push_back(e); }
};

CopyEvent Copy(uint64_t start, uint64_t bytes, const void* ptr, uint64_t alloc) {
  CopyEvent e{};
  e.api = 3;
  e.dir = CopyDir::kHostToDevice;
  e.src_kind = MemKind::kPageable;
  e.dst_kind = MemKind::kDevice;
  e.bytes = bytes;
  e.host_ptr = ptr;
  e.host_alloc_id = alloc;
  e.start_ns = start;
  e.end_ns = start + 500;
  return e;
}

// Two threads, each flushed as two batches, interleaved in time.
std::string TwoThreadTrace() {
  TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  b.ApiNames({{3, "cuMemcpyHtoD_v2"}});
  b.Modules(1, "/usr/bin/app", 0x400000, 0x1000);
  b.Stack(1, 1, {0x400100, 0x400200});
  for (int batch = 0; batch < 2; ++batch) {
    for (uint32_t tid : {10u, 20u}) {
      for (int i = 0; i < 5; ++i) {
        uint64_t t = 2000000000ull + batch * 100000 + i * 1000 + (tid == 20 ? 500 : 0);
        b.batch().AppendCopy(Copy(t, 1 << 20, reinterpret_cast<void*>(0x7000), 9), 1,
                             tid == 20 ? 1 : 0);
      }
      b.Flush(tid);
    }
  }
  b.End(3000000000ull);
  return b.bytes();
}

TraceReader* OpenString(const std::string& bytes, std::string* error) {
  auto* r = new TraceReader;
  if (!r->OpenBuffer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), error)) {
    delete r;
    return nullptr;
  }
  return r;
}

// The copy record on the field tables writes the bytes the format has
// always had (trace_format.h's kCopy): fields in order, the optional ones
// as the presence bits say; and reads them back.
TEST(TraceReader, CopyRecordBytesAreTheFormats) {
  trace::BatchEncoder enc;
  uint8_t buf[1024];
  enc.Init(buf, sizeof(buf));
  CopyEvent e{};
  e.api = 3;
  e.dir = CopyDir::kDeviceToHost;
  e.src_kind = MemKind::kDevice;
  e.dst_kind = MemKind::kPageable;
  e.async = true;
  e.bytes = 300;
  e.stream = reinterpret_cast<void*>(0x10);
  e.host_ptr = reinterpret_cast<void*>(0x20);
  e.host_alloc_id = 2;
  e.host_flags = 5;
  e.result = -1;
  e.staged_workers = 4;
  e.staged_chunk_bytes = 128;
  e.start_ns = 1000;
  e.end_ns = 1100;
  enc.AppendCopy(e, 7, 1);
  const uint8_t bits = 1 | trace::kCopyAsync | trace::kCopyHasFlags | trace::kCopyHasResult |
                       trace::kCopyHasDevice | trace::kCopyStaged;
  const uint8_t expected[] = {
      1,    17,  // kCopy, payload length
      0,         // time delta
      100,  3,    bits, 5,
      0xac, 0x02, 7,     // duration, api, bits, kinds (device, pageable), bytes 300, stack
      0x20, 0x40, 4,     // stream, host pointer, allocation id (zigzag)
      5,    1,    2,     // flags, result -1, device 1 (zigzag)
      4,    0x80, 0x01,  // staged workers, chunk bytes 128
  };
  ASSERT_EQ(enc.size(), sizeof(expected));
  EXPECT_EQ(memcmp(buf, expected, sizeof(expected)), 0);
  // The same device again is not written; nor are absent optional fields.
  CopyEvent plain{};
  plain.dir = CopyDir::kHostToDevice;
  plain.bytes = 1;
  plain.start_ns = plain.end_ns = 1000;
  const size_t before = enc.size();
  enc.AppendCopy(plain, 7, 1);
  EXPECT_EQ(enc.size() - before, 2u + 10u);

  TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  b.batch().AppendCopy(e, 7, 1);
  b.batch().AppendCopy(plain, 7, 1);
  b.Flush(10);
  b.End(5000);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  ASSERT_NE(r, nullptr) << error;
  Collect c;
  r->ForEachEvent(&c);
  ASSERT_EQ(c.events.size(), 2u);
  const Event& got = c.events[0];
  EXPECT_EQ(got.dir, CopyDir::kDeviceToHost);
  EXPECT_TRUE(got.async);
  EXPECT_EQ(got.dst, MemKind::kPageable);
  EXPECT_EQ(got.bytes, 300u);
  EXPECT_EQ(got.stream, 0x10u);
  EXPECT_EQ(got.host_ptr, 0x20u);
  EXPECT_EQ(got.alloc_id, 2u);
  EXPECT_EQ(got.host_flags, 5u);
  EXPECT_EQ(got.result, -1);
  EXPECT_EQ(got.device, 1);
  EXPECT_EQ(got.staged_workers, 4u);
  EXPECT_EQ(got.staged_chunk_bytes, 128u);
  EXPECT_EQ(c.events[1].device, 1);  // carried from the previous copy
  EXPECT_EQ(c.events[1].staged_workers, 0u);
  EXPECT_EQ(r->damage().bad_events, 0u);
}

// kSiteTotals: the frame of the highest sequence is the one read, cells
// and counts intact.
TEST(TraceReader, SiteTotalsHighestSequenceWins) {
  static trace::SiteTotals totals;
  trace::SiteCopy copy{};
  copy.stack = 5;
  copy.dir = CopyDir::kHostToDevice;
  copy.src = MemKind::kPageable;
  copy.dst = MemKind::kDevice;
  copy.bytes = 4096;
  copy.call_ns = 10;
  copy.overlap_ns = 3;
  static uint8_t buf[trace::kMaxSiteTotalsBytes];
  TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  for (uint64_t sequence : {1, 3, 2}) {
    totals.Add(copy);
    trace::SiteTotalsFields h;
    h.version = trace::kSiteTotalsVersion;
    h.sequence = sequence;
    h.detail_end_ns = 77;
    h.detail_bytes = 1 << 20;
    const size_t n = totals.Encode(h, buf, sizeof(buf));
    b.Frame(trace::FrameType::kSiteTotals, std::string(reinterpret_cast<char*>(buf), n));
  }
  b.End(5000);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  ASSERT_NE(r, nullptr) << error;
  const SiteTotals* t = r->site_totals();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->header.sequence, 3u);
  EXPECT_EQ(t->header.copies, 2u);  // the frame written second
  EXPECT_EQ(t->header.detail_end_ns, 77u);
  ASSERT_EQ(t->cells.size(), 1u);
  EXPECT_EQ(t->cells[0].stack, 5u);
  EXPECT_EQ(t->cells[0].copies, 2u);
  EXPECT_EQ(t->cells[0].bytes, 8192u);
  EXPECT_EQ(t->cells[0].size_class, 12u);
  EXPECT_EQ(t->cells[0].overlap_ns, 6u);
  EXPECT_EQ(r->damage().bad_events, 0u);
}

// Every field of the process header lands in ProcessInfo (the writer's
// tags, shim/trace/trace_format.h), and fields of a newer writer, tag
// numbers past a byte included, are skipped without damage.
TEST(TraceReader, ReadsEveryProcessField) {
  auto varint = [](uint64_t v) {
    std::string s;
    do {
      s.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
      v >>= 7;
    } while (v != 0);
    return s;
  };
  std::string header;
  auto add = [&](uint64_t tag, const std::string& value) {
    header += varint(tag) + varint(value.size()) + value;
  };
  using trace::ProcessTag;
  add(static_cast<uint64_t>(ProcessTag::kPid), varint(101));
  add(static_cast<uint64_t>(ProcessTag::kParentPid), varint(102));
  add(static_cast<uint64_t>(ProcessTag::kProgram), "/bin/prog");
  add(static_cast<uint64_t>(ProcessTag::kCommandLine), std::string("/bin/prog\0-x", 12));
  add(static_cast<uint64_t>(ProcessTag::kHostname), "host7");
  add(static_cast<uint64_t>(ProcessTag::kRank), varint(trace::ZigZag(3)));
  add(static_cast<uint64_t>(ProcessTag::kStartMonotonicNs), varint(107));
  add(static_cast<uint64_t>(ProcessTag::kStartRealtimeNs), varint(108));
  add(static_cast<uint64_t>(ProcessTag::kPageSize), varint(65536));
  add(static_cast<uint64_t>(ProcessTag::kPhysicalBytes), varint(110));
  add(static_cast<uint64_t>(ProcessTag::kMemlockLimit), varint(111));
  add(static_cast<uint64_t>(ProcessTag::kSwapTotalBytes), varint(112));
  add(static_cast<uint64_t>(ProcessTag::kSampleMs), varint(113));
  add(static_cast<uint64_t>(ProcessTag::kStackDepth), varint(114));
  add(static_cast<uint64_t>(ProcessTag::kBudgetBytes), varint(115));
  add(static_cast<uint64_t>(ProcessTag::kMode), "observe,optimize");
  add(static_cast<uint64_t>(ProcessTag::kVersion), "9.9");
  add(static_cast<uint64_t>(ProcessTag::kForkedFrom), varint(118));
  add(static_cast<uint64_t>(ProcessTag::kWcGuard), varint(1));
  add(static_cast<uint64_t>(ProcessTag::kPython), "3.12.3");
  add(static_cast<uint64_t>(ProcessTag::kPythonFrames), varint(1));
  add(static_cast<uint64_t>(ProcessTag::kCopyGuard), varint(1));
  add(200, varint(5));        // a newer writer's field
  add(256 + 1, varint(999));  // would read as kPid if cut to a byte
  TraceBuilder b;
  b.Frame(trace::FrameType::kProcess, header);
  b.End(1000);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  ASSERT_NE(r, nullptr) << error;
  const ProcessInfo& p = r->process();
  EXPECT_EQ(p.pid, 101u);
  EXPECT_EQ(p.parent_pid, 102u);
  EXPECT_EQ(p.program, "/bin/prog");
  ASSERT_EQ(p.command_line.size(), 2u);
  EXPECT_EQ(p.command_line[1], "-x");
  EXPECT_EQ(p.hostname, "host7");
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.start_monotonic_ns, 107u);
  EXPECT_EQ(p.start_realtime_ns, 108u);
  EXPECT_EQ(p.page_size, 65536u);
  EXPECT_EQ(p.physical_bytes, 110u);
  EXPECT_EQ(p.memlock_limit, 111u);
  EXPECT_EQ(p.swap_total_bytes, 112u);
  EXPECT_EQ(p.sample_ms, 113u);
  EXPECT_EQ(p.stack_depth, 114u);
  EXPECT_EQ(p.budget_bytes, 115u);
  EXPECT_EQ(p.mode, "observe,optimize");
  EXPECT_EQ(p.version, "9.9");
  EXPECT_EQ(p.forked_from, 118u);
  EXPECT_TRUE(p.wc_guard);
  EXPECT_EQ(p.python, "3.12.3");
  EXPECT_TRUE(p.python_frames);
  EXPECT_TRUE(p.copy_guard);
  EXPECT_EQ(r->damage().bad_events, 0u);
}

TEST(TraceReader, RoundTripsAndMergesThreadsInTimeOrder) {
  std::string bytes = TwoThreadTrace();
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(bytes, &error));
  ASSERT_NE(r, nullptr) << error;
  EXPECT_EQ(r->process().pid, 4242u);
  EXPECT_EQ(r->process().program, "/usr/bin/app");
  ASSERT_EQ(r->process().command_line.size(), 2u);
  EXPECT_EQ(r->process().command_line[1], "--flag");
  EXPECT_EQ(r->ApiName(3), "cuMemcpyHtoD_v2");
  ASSERT_EQ(r->module_maps().size(), 1u);
  ASSERT_NE(r->FindStack(1), nullptr);
  EXPECT_EQ(r->FindStack(1)->ips[1], 0x400200u);
  EXPECT_TRUE(r->damage().has_end);
  EXPECT_FALSE(r->damage().Any());
  EXPECT_EQ(r->DescribeDamage(), "");
  Collect c;
  r->ForEachEvent(&c);
  ASSERT_EQ(c.events.size(), 20u);
  for (size_t i = 1; i < c.events.size(); ++i) {
    EXPECT_LE(c.events[i - 1].time_ns, c.events[i].time_ns) << i;
  }
  const Event& e = c.events[1];
  EXPECT_EQ(e.type, trace::EventType::kCopy);
  EXPECT_EQ(e.tid, 20u);
  EXPECT_EQ(e.device, 1);
  EXPECT_EQ(e.bytes, 1u << 20);
  EXPECT_EQ(e.host_ptr, 0x7000u);
  EXPECT_EQ(e.alloc_id, 9u);
  EXPECT_EQ(e.duration_ns, 500u);
  EXPECT_EQ(e.stack, 1u);
  EXPECT_EQ(e.HostKind(), MemKind::kPageable);
  EXPECT_EQ(c.events[0].tid, 10u);
  EXPECT_EQ(c.events[0].device, 0);
}

// A call that began before the batch's first event and is recorded after it
// (a sync stamped with its start) has a negative delta; every event of the
// batch, and those after it, still read at the times they were written with.
TEST(TraceReader, AnEventStampedBeforeTheBatchsFirstKeepsEveryTime) {
  TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  b.ApiNames({{3, "cuMemcpyHtoD_v2"}});
  const uint64_t t0 = 2000000000ull;
  b.batch().AppendCopy(Copy(t0, 4096, reinterpret_cast<void*>(0x7000), 1), 0, 0);  // at t0
  trace::SyncEvent early{};
  early.api = 3;
  early.kind = trace::SyncKind::kStreamSynchronize;
  early.start_ns = t0 - 15000000;  // began 15 ms before the first event
  early.end_ns = t0 + 1000;
  b.batch().AppendSync(early);
  OptimizeCountersEvent counters{};
  counters.pinned_bytes_now = 7;
  b.batch().AppendOptimizeCounters(counters, t0 + 30000000);
  b.Flush(10);
  b.End(t0 + 40000000);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  ASSERT_NE(r, nullptr) << error;
  Collect c;
  r->ForEachEvent(&c);
  ASSERT_EQ(c.events.size(), 3u);
  std::vector<uint64_t> times;
  for (const Event& e : c.events) times.push_back(e.time_ns);
  std::sort(times.begin(), times.end());
  EXPECT_EQ(times[0], early.start_ns);
  EXPECT_EQ(times[1], t0);
  EXPECT_EQ(times[2], t0 + 30000000);
}

TEST(TraceReader, TornTailKeepsWhatCameBefore) {
  std::string bytes = TwoThreadTrace();
  // Cut into the last batch: lose the end record and part of that batch.
  std::string cut = bytes.substr(0, bytes.size() - 40);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(cut, &error));
  ASSERT_NE(r, nullptr) << error;
  Collect c;
  r->ForEachEvent(&c);
  EXPECT_EQ(c.events.size(), 15u);
  EXPECT_GT(r->damage().torn_tail_bytes, 0u);
  EXPECT_FALSE(r->damage().has_end);
  std::string d = r->DescribeDamage();
  EXPECT_NE(d.find("unfinished record"), std::string::npos) << d;
  EXPECT_NE(d.find("no end record"), std::string::npos) << d;
}

TEST(TraceReader, CorruptFrameInTheMiddleCostsOnlyThatFrame) {
  std::string bytes = TwoThreadTrace();
  // The second kEvents frame: find the frames by walking them.
  size_t pos = trace::kFileHeaderBytes;
  int batches = 0;
  size_t target = 0;
  while (pos + trace::kFrameHeaderBytes <= bytes.size()) {
    uint32_t len = trace::LoadU32(reinterpret_cast<const uint8_t*>(bytes.data()) + pos + 4);
    if (static_cast<uint8_t>(bytes[pos + 8]) == static_cast<uint8_t>(trace::FrameType::kEvents) &&
        ++batches == 2) {
      target = pos + trace::kFrameHeaderBytes + 10;
    }
    pos += trace::kFrameHeaderBytes + len;
  }
  ASSERT_NE(target, 0u);
  bytes[target] ^= 0x55;
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(bytes, &error));
  ASSERT_NE(r, nullptr) << error;
  Collect c;
  r->ForEachEvent(&c);
  EXPECT_EQ(c.events.size(), 15u);
  EXPECT_EQ(r->damage().skipped_regions, 1u);
  EXPECT_EQ(r->damage().torn_tail_bytes, 0u);
  EXPECT_TRUE(r->damage().has_end);
  EXPECT_NE(r->DescribeDamage().find("skipped"), std::string::npos);
}

TEST(TraceReader, RejectsWhatIsNoTrace) {
  std::string error;
  EXPECT_EQ(OpenString("", &error), nullptr);
  EXPECT_NE(error.find("empty file"), std::string::npos) << error;
  EXPECT_EQ(OpenString("#!/bin/sh\necho hello\n", &error), nullptr);
  EXPECT_NE(error.find("not a pinshim trace"), std::string::npos) << error;
  EXPECT_EQ(OpenString("PINSHIMT\x01", &error), nullptr);
  EXPECT_NE(error.find("truncated in its header"), std::string::npos) << error;
  std::string future = TwoThreadTrace();
  future[8] = 9;
  EXPECT_EQ(OpenString(future, &error), nullptr);
  EXPECT_NE(error.find("version 9"), std::string::npos) << error;
}

TEST(TraceReader, SkipsUnknownFramesEventsAndTrailingFields) {
  TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  b.Frame(static_cast<trace::FrameType>(200), "a frame from a newer writer");
  // An event of unknown type 99 (time delta 0, then 3 bytes), built by hand,
  // and a copy with two extra trailing bytes.
  std::string batch;
  batch += '\x05';                                  // tid
  batch += std::string("\x80\x94\xeb\xdc\x03", 5);  // first time 1e9
  batch += std::string("\x80\x94\xeb\xdc\x03", 5);  // last time
  batch += '\x02';                                  // two events
  batch += std::string("\x63\x04\x00\x01\x02\x03", 6);
  // kCopy: dt 0, dur 1, api 2, bits 0, kinds (0 | 5<<3), bytes 64, stack 0,
  // stream 0, ptr 0, alloc 0, then trailing 7, 7.
  batch += std::string("\x01\x0c\x00\x01\x02\x00\x28\x40\x00\x00\x00\x00\x07\x07", 14);
  b.Frame(trace::FrameType::kEvents, batch);
  b.End(2000000000ull);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  ASSERT_NE(r, nullptr) << error;
  Collect c;
  r->ForEachEvent(&c);
  ASSERT_EQ(c.events.size(), 1u);
  EXPECT_EQ(c.events[0].bytes, 64u);
  EXPECT_EQ(c.events[0].dst, MemKind::kDevice);
  EXPECT_EQ(r->damage().unknown_frames, 1u);
  EXPECT_EQ(r->damage().unknown_events, 1u);
  EXPECT_EQ(r->damage().bad_events, 0u);
}

// Python programs: code objects and the Python section of stacks; stacks
// without one (older writers, native processes) read as before, and a
// damaged section costs the Python frames only.
TEST(TraceReader, PythonCodeAndStackFrames) {
  TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  b.Modules(1, "/usr/bin/python3.12", 0x400000, 0x1000);
  b.PythonCode(1, "/app/train.py", "train_step", 40);
  b.PythonCode(2, "/app/train.py", "<module>", 1);
  b.PythonStack(1, 1, {0x400100, 0x400200}, trace::PythonStatus::kFrames, {{1, 42}, {2, 90}}, 3);
  b.PythonStack(2, 1, {0x400100}, trace::PythonStatus::kNoThreadState, {});
  b.Stack(3, 1, {0x400300});
  // A section cut short: the native frames stay.
  std::string cut;
  cut += "\x04\x01\x01\x00";  // id 4, generation 1, depth 1, mask 0
  cut += "\x80\x82\x10";      // ip 0x40100
  cut += "\x01\x02\x01";      // kFrames, 2 frames, only half of one
  b.Frame(trace::FrameType::kStack, cut);
  b.PythonCode(0, "bad.py", "zero id", 1);  // refused
  b.End(3000000000ull);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  ASSERT_NE(r, nullptr) << error;
  ASSERT_EQ(r->python_code_count(), 2u);
  const PythonCode* code = r->FindPythonCode(1);
  ASSERT_NE(code, nullptr);
  EXPECT_EQ(code->file, "/app/train.py");
  EXPECT_EQ(code->function, "train_step");
  EXPECT_EQ(code->first_line, 40u);
  EXPECT_EQ(r->FindPythonCode(3), nullptr);
  const Stack* s1 = r->FindStack(1);
  ASSERT_NE(s1, nullptr);
  EXPECT_EQ(s1->ips.size(), 2u);
  EXPECT_EQ(s1->python_status, trace::PythonStatus::kFrames);
  ASSERT_EQ(s1->python.size(), 2u);
  EXPECT_EQ(s1->python[0].code, 1u);
  EXPECT_EQ(s1->python[0].line, 42u);
  EXPECT_EQ(s1->python[1].line, 90u);
  EXPECT_EQ(s1->python_omitted, 3u);
  EXPECT_EQ(r->FindStack(2)->python_status, trace::PythonStatus::kNoThreadState);
  EXPECT_TRUE(r->FindStack(2)->python.empty());
  EXPECT_EQ(r->FindStack(3)->python_status, trace::PythonStatus::kNone);
  const Stack* s4 = r->FindStack(4);
  ASSERT_NE(s4, nullptr);
  EXPECT_EQ(s4->ips.size(), 1u);
  EXPECT_EQ(s4->python_status, trace::PythonStatus::kNone);
  EXPECT_EQ(r->damage().bad_events, 2u);  // the cut section and the zero id
  EXPECT_EQ(r->damage().unknown_frames, 0u);
}

// Optimize mode's own pinning and counters, as the encoder writes them; a
// counters record a newer writer extended keeps its known fields, and a
// truncated one is damage, not a crash.
TEST(TraceReader, OwnPinningAndCountersRecords) {
  TraceBuilder b;
  testing::BuilderProcess p;
  p.mode = "observe,optimize";
  b.Process(p);
  OwnPinEvent pin{};
  pin.action = OwnPinAction::kUnpinned;
  pin.part = OwnPinPart::kArena;
  pin.reason = OwnPinReason::kIdleTrim;
  pin.ptr = reinterpret_cast<const void*>(0x7f1234560000ull);
  pin.bytes = 3ull << 20;
  pin.alloc_id = 0;
  pin.result = 700;
  b.batch().AppendOwnPin(pin, 1000000100ull);
  OptimizeCountersEvent c{};
  c.pinned_bytes_now = 5;
  c.pin_cap_bytes = UINT64_MAX;
  c.cache_hits = 77;
  c.saved_alloc_ns = 1ull << 40;
  b.batch().AppendOptimizeCounters(c, 1000000200ull);
  b.Flush(3);
  // By hand: a counters record with one field more than this reader knows
  // (kept), then one cut short (bad).
  std::string batch;
  batch += '\x03';                                  // tid
  batch += std::string("\x80\x94\xeb\xdc\x03", 5);  // first time 1e9
  batch += std::string("\x80\x94\xeb\xdc\x03", 5);  // last time
  batch += '\x02';                                  // two events
  std::string longer(1, '\x00');                    // time delta 0
  for (size_t i = 0; i < trace::kOptimizeCounterFields + 1; ++i) longer += static_cast<char>(i);
  batch += '\x32';
  batch += static_cast<char>(longer.size());
  batch += longer;
  std::string shorter(1, '\x00');
  for (size_t i = 0; i < 4; ++i) shorter += '\x01';
  batch += '\x32';
  batch += static_cast<char>(shorter.size());
  batch += shorter;
  b.Frame(trace::FrameType::kEvents, batch);
  b.End(2000000000ull);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  ASSERT_NE(r, nullptr) << error;
  EXPECT_EQ(r->process().mode, "observe,optimize");
  Collect col;
  r->ForEachEvent(&col);
  ASSERT_EQ(col.events.size(), 3u);
  const Event& first = col.events[0];  // the hand-made one, at 1e9
  ASSERT_EQ(first.type, trace::EventType::kOptimizeCounters);
  EXPECT_EQ(first.counters.pinned_bytes_now, 0u);
  EXPECT_EQ(first.counters.pinned_bytes_peak, 1u);
  // Field i holds i: saved_alloc_ns is the last of the first layout, the
  // self-check's counters come after it.
  EXPECT_EQ(first.counters.saved_alloc_ns, 19u);
  EXPECT_EQ(first.counters.cache_declined_slower, trace::kOptimizeCounterFields - 1);
  const Event& own = col.events[1];
  ASSERT_EQ(own.type, trace::EventType::kOwnPin);
  EXPECT_EQ(own.time_ns, 1000000100u);
  EXPECT_EQ(own.own_action, OwnPinAction::kUnpinned);
  EXPECT_EQ(own.own_part, OwnPinPart::kArena);
  EXPECT_EQ(own.own_reason, OwnPinReason::kIdleTrim);
  EXPECT_EQ(own.ptr, 0x7f1234560000ull);
  EXPECT_EQ(own.bytes, 3ull << 20);
  EXPECT_EQ(own.result, 700);
  const Event& counters = col.events[2];
  ASSERT_EQ(counters.type, trace::EventType::kOptimizeCounters);
  EXPECT_EQ(counters.time_ns, 1000000200u);
  EXPECT_EQ(memcmp(&counters.counters, &c, sizeof(c)), 0);
  EXPECT_EQ(r->damage().bad_events, 1u);
  EXPECT_EQ(r->damage().unknown_events, 0u);
}

// Event payloads built by hand, field by field.
class Fields {
 public:
  Fields& U(uint64_t v) {
    uint8_t b[trace::kMaxVarint];
    bytes_.append(reinterpret_cast<const char*>(b),
                  static_cast<size_t>(trace::PutVarint(b, v) - b));
    return *this;
  }
  Fields& S(int64_t v) { return U(trace::ZigZag(v)); }
  Fields& Raw(const uint8_t* begin, const uint8_t* end) {
    bytes_.append(reinterpret_cast<const char*>(begin), static_cast<size_t>(end - begin));
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

constexpr uint64_t kHandTime = 1000000000;

// The payload of a kEvents frame of thread `tid` holding `events` (type and
// fields after the time delta), every one at kHandTime.
std::string HandBatch(uint32_t tid,
                      const std::vector<std::pair<trace::EventType, Fields>>& events) {
  std::string out = Fields().U(tid).U(kHandTime).U(kHandTime).U(events.size()).bytes();
  for (const auto& ev : events) {
    const std::string payload = Fields().S(0).bytes() + ev.second.bytes();
    out += static_cast<char>(ev.first);
    out += Fields().U(payload.size()).bytes();
    out += payload;
  }
  return out;
}

std::vector<Event> ReadHandBatch(const std::string& batch, Damage* damage) {
  TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  b.Frame(trace::FrameType::kEvents, batch);
  b.End(2000000000ull);
  std::string error;
  std::unique_ptr<TraceReader> r(OpenString(b.bytes(), &error));
  EXPECT_NE(r, nullptr) << error;
  if (r == nullptr) return {};
  Collect c;
  r->ForEachEvent(&c);
  *damage = r->damage();
  return c.events;
}

// A record of a writer older than its appended fields ends before them: they
// read as absent (0, or -1 for an unknown device), not as what the previous
// event of the batch left, and the fields before them are where they were.
// A record that ends inside its first layout is damage.
TEST(TraceReader, OlderRecordsReadTheFieldsAppendedSinceAsAbsent) {
  std::vector<std::pair<trace::EventType, Fields>> events;
  // kOwnPin as written today, then as before its stack and detail existed.
  events.push_back(
      {trace::EventType::kOwnPin, Fields().U(1).U(2).U(11).U(0x7000).U(4096).U(9).S(0).U(3).U(4)});
  events.push_back(
      {trace::EventType::kOwnPin, Fields().U(1).U(2).U(1).U(0x9000).U(8192).U(5).S(-2)});
  // kSync as written today, then as before its device existed.
  events.push_back({trace::EventType::kSync, Fields().U(100).U(5).U(1).S(0x10).U(0).S(0).S(2)});
  events.push_back({trace::EventType::kSync, Fields().U(200).U(6).U(2).S(0x10).U(0x77).S(1)});
  // kOwnPin without its result: no writer ever ended there.
  events.push_back({trace::EventType::kOwnPin, Fields().U(1).U(2).U(1).U(0x9000).U(8192).U(5)});
  Damage damage;
  std::vector<Event> got = ReadHandBatch(HandBatch(3, events), &damage);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].stack, 3u);
  EXPECT_EQ(got[0].own_detail, 4u);
  const Event& own = got[1];
  ASSERT_EQ(own.type, trace::EventType::kOwnPin);
  EXPECT_EQ(own.own_action, OwnPinAction::kUnpinned);
  EXPECT_EQ(own.own_part, OwnPinPart::kCache);
  EXPECT_EQ(own.own_reason, OwnPinReason::kProgramReleased);
  EXPECT_EQ(own.ptr, 0x9000u);
  EXPECT_EQ(own.bytes, 8192u);
  EXPECT_EQ(own.alloc_id, 5u);
  EXPECT_EQ(own.result, -2);
  EXPECT_EQ(own.stack, 0u);
  EXPECT_EQ(own.own_detail, 0u);
  EXPECT_EQ(got[2].device, 2);
  const Event& sync = got[3];
  ASSERT_EQ(sync.type, trace::EventType::kSync);
  EXPECT_EQ(sync.duration_ns, 200u);
  EXPECT_EQ(sync.api, 6u);
  EXPECT_EQ(sync.sync, trace::SyncKind::kContextSynchronize);
  EXPECT_EQ(sync.stream, 0x20u);  // deltas add up
  EXPECT_EQ(sync.event_handle, 0x77u);
  EXPECT_EQ(sync.result, 1);
  EXPECT_EQ(sync.device, -1);
  EXPECT_EQ(damage.bad_events, 1u);
  EXPECT_EQ(damage.unknown_events, 0u);
}

// A newer writer's fields after those this reader knows are skipped: the
// known ones read as they are, and so do the events after them.
TEST(TraceReader, NewerRecordsSkipTheFieldsTheyAppended) {
  std::vector<std::pair<trace::EventType, Fields>> events;
  events.push_back(
      {trace::EventType::kBudgetDecision,
       Fields().U(1).U(2).U(2).U(1).U(4096).U(8192).U(11).U(12).U(13).U(14).U(0).U(77).U(uint64_t{1}
                                                                                         << 40)});
  events.push_back({trace::EventType::kSample, Fields().U(1).U(2).U(3).U(4).U(5).U(6).U(7).U(8)});
  events.push_back(
      {trace::EventType::kSync, Fields().U(100).U(5).U(1).S(0x10).U(0).S(0).S(2).S(-3)});
  events.push_back({trace::EventType::kOwnPin,
                    Fields().U(0).U(3).U(0).U(0x7000).U(4096).U(0).S(0).U(0).U(0).U(1)});
  events.push_back({trace::EventType::kDropped, Fields().U(6).U(9)});
  events.push_back({trace::EventType::kHostAlloc, Fields().U(4).U(0x5000).U(65536).U(3).U(0)});
  Damage damage;
  std::vector<Event> got = ReadHandBatch(HandBatch(3, events), &damage);
  ASSERT_EQ(got.size(), 6u);
  const Event& d = got[0];
  ASSERT_EQ(d.type, trace::EventType::kBudgetDecision);
  EXPECT_EQ(d.budget_owner, trace::BudgetOwner::kProgramRegister);
  EXPECT_EQ(d.budget_decision, trace::BudgetDecision::kFallback);
  EXPECT_EQ(d.budget_limiter, trace::BudgetLimiter::kNode);
  EXPECT_TRUE(d.evictor_called);
  EXPECT_EQ(d.bytes, 4096u);
  EXPECT_EQ(d.evicted_bytes, 8192u);
  EXPECT_EQ(d.process_pinned, 11u);
  EXPECT_EQ(d.process_budget, 12u);
  EXPECT_EQ(d.node_pinned, 13u);
  EXPECT_EQ(d.node_budget, 14u);
  EXPECT_EQ(got[1].pinned_program, 1u);
  EXPECT_EQ(got[1].budget_bytes, 7u);
  EXPECT_EQ(got[2].device, 2);
  EXPECT_EQ(got[3].own_part, OwnPinPart::kArena);
  EXPECT_EQ(got[4].dropped, 6u);
  const Event& alloc = got[5];
  ASSERT_EQ(alloc.type, trace::EventType::kHostAlloc);
  EXPECT_EQ(alloc.alloc_id, 4u);
  EXPECT_EQ(alloc.bytes, 65536u);
  EXPECT_TRUE(alloc.is_free);
  EXPECT_EQ(alloc.source, 1u);
  EXPECT_EQ(damage.bad_events, 0u);
  EXPECT_EQ(damage.unknown_events, 0u);
  EXPECT_EQ(damage.dropped_events, 6u);
}

// Optimize mode's counters with one appended to optimize_counters.inc, as a
// later version would have them.
struct LaterCounters {
#define TRACE(name, layout, source, summary_key) uint64_t name = 0;
#define SUMMARY(source, summary_key)
#include "shim/core/optimize_counters.inc"
#undef TRACE
#undef SUMMARY
  uint64_t added_later = 0;
};

}  // namespace
}  // namespace report

namespace trace {
template <>
struct FieldTable<report::LaterCounters> {
  using R = report::LaterCounters;
  static constexpr Field<R> kFields[] = {
#define TRACE(name, layout, source, summary_key) PINSHIM_FIELD_ROW(name, uint64_t, layout, 0)
#define SUMMARY(source, summary_key)
#include "shim/core/optimize_counters.inc"
#undef TRACE
#undef SUMMARY
      PINSHIM_FIELD_ROW(added_later, uint64_t, kAppended, 0)};
};
}  // namespace trace

namespace report {
namespace {

// Appending a counter to the list keeps both directions readable: today's
// records read with the appended counter 0, and a record with it reads
// today's counters where they were, by name.
TEST(TraceReader, AnAppendedCounterKeepsOldAndNewTracesReadable) {
  using Today = trace::FieldTable<OptimizeCountersEvent>;
  using Later = trace::FieldTable<LaterCounters>;
  ASSERT_EQ(trace::FieldCount<LaterCounters>(), trace::kOptimizeCounterFields + 1);
  OptimizeCountersEvent today{};
  LaterCounters later;
  for (size_t i = 0; i < trace::kOptimizeCounterFields; ++i) {
    ASSERT_STREQ(Today::kFields[i].name, Later::kFields[i].name);
    today.*Today::kFields[i].u = 1000 + i;
    later.*Later::kFields[i].u = 1000 + i;
  }
  later.added_later = 999;

  // Today's writer, the later reader.
  uint8_t buf[1024];
  trace::BatchEncoder enc;
  enc.Init(buf, sizeof(buf));
  enc.AppendOptimizeCounters(today, kHandTime);
  const uint8_t* p = enc.data() + 1;  // after the type
  uint64_t len;
  int64_t dt;
  ASSERT_TRUE(trace::GetVarint(&p, enc.data() + enc.size(), &len));
  const uint8_t* end = p + len;
  ASSERT_TRUE(trace::GetSigned(&p, end, &dt));
  LaterCounters read;
  ASSERT_TRUE(trace::GetFields(p, end, &read));
  for (size_t i = 0; i < trace::kOptimizeCounterFields; ++i) {
    EXPECT_EQ(read.*Later::kFields[i].u, today.*Today::kFields[i].u) << Today::kFields[i].name;
  }
  EXPECT_EQ(read.added_later, 0u);

  // The later writer, today's reader.
  uint8_t fields[trace::kMaxVarint * (trace::kOptimizeCounterFields + 1)];
  const uint8_t* fields_end = trace::PutFields(fields, later);
  Fields record;
  record.Raw(fields, fields_end);
  Damage damage;
  std::vector<Event> got =
      ReadHandBatch(HandBatch(3, {{trace::EventType::kOptimizeCounters, record}}), &damage);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(memcmp(&got[0].counters, &today, sizeof(today)), 0);
  EXPECT_EQ(damage.bad_events, 0u);
}

}  // namespace
}  // namespace report
}  // namespace pinshim
