// How fast `pinshim report` gets through events, symbolization excluded:
// decoding alone, and decoding plus every rule. A synthetic trace in memory,
// four threads' batches interleaved, with a realistic mix: copies of every
// kind and size from a few dozen sites, pinned allocations and frees,
// synchronizations and samples.
//
//   bazel run -c opt //bench/trace:analyzer_bench
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "analyzer/report/analysis.h"
#include "analyzer/report/trace_reader.h"
#include "tests/trace/trace_builder.h"

namespace {

using namespace pinshim;
using report::AnalysisOptions;
using report::TraceReader;

const std::string& SyntheticTrace(int64_t events) {
  static std::string* cached = nullptr;
  static int64_t cached_events = 0;
  if (cached != nullptr && cached_events == events) return *cached;
  testing::TraceBuilder b;
  b.Process(testing::BuilderProcess{});
  for (uint32_t s = 1; s <= 48; ++s) b.Stack(s, 0, {0x400000u + s * 64, 0x401000, 0x402000});
  std::mt19937_64 rng(42);
  uint64_t t[4] = {1000000000, 1000000000, 1000000000, 1000000000};
  const uint64_t kSizes[] = {4096, 65536, 1 << 20, 16 << 20};
  int64_t made = 0;
  while (made < events) {
    for (uint32_t tid = 0; tid < 4 && made < events; ++tid) {
      // One batch per thread in turn, as flushes interleave in a real file.
      while (b.batch().HasRoom() && made < events) {
        uint64_t r = rng();
        t[tid] += 2000 + (r % 5000);
        if (r % 100 < 94) {
          CopyEvent e{};
          e.dir = (r >> 8) % 3 == 0 ? CopyDir::kDeviceToHost : CopyDir::kHostToDevice;
          MemKind host = (r >> 12) % 2 ? MemKind::kPageable : MemKind::kPinnedByProgram;
          e.src_kind = e.dir == CopyDir::kHostToDevice ? host : MemKind::kDevice;
          e.dst_kind = e.dir == CopyDir::kHostToDevice ? MemKind::kDevice : host;
          e.async = (r >> 16) % 2;
          e.bytes = kSizes[(r >> 20) % 4];
          e.host_ptr = reinterpret_cast<void*>(0x10000000 + ((r >> 24) % 16) * (16 << 20));
          e.host_alloc_id = host == MemKind::kPageable ? 1 + (r >> 24) % 16 : 0;
          e.stream = reinterpret_cast<void*>(0x100 + tid);
          e.start_ns = t[tid];
          e.end_ns = t[tid] + 1000 + (r >> 40) % 50000;
          b.batch().AppendCopy(e, 1 + static_cast<uint32_t>((r >> 32) % 48), 0);
        } else if (r % 100 < 97) {
          PinEvent p{};
          p.op = (r >> 8) % 2 ? PinOp::kAlloc : PinOp::kFree;
          p.ptr = reinterpret_cast<void*>(0x90000000 + ((r >> 12) % 64) * (1 << 20));
          p.bytes = 1 << 20;
          p.start_ns = t[tid];
          p.end_ns = t[tid] + 500000;
          b.batch().AppendPin(p, 1 + static_cast<uint32_t>((r >> 32) % 48), 0);
        } else if (r % 100 < 99) {
          trace::SyncEvent s{};
          s.kind = trace::SyncKind::kStreamSynchronize;
          s.stream = reinterpret_cast<void*>(0x100 + tid);
          s.start_ns = t[tid];
          s.end_ns = t[tid] + 100;
          b.batch().AppendSync(s);
        } else {
          trace::SampleEvent s{t[tid], 1 << 30, 0, 0, 8ull << 30, 0, 0, 0};
          b.batch().AppendSample(s);
        }
        ++made;
      }
      b.Flush(tid + 1);
    }
  }
  b.End(t[0]);
  delete cached;
  cached = new std::string(b.bytes());
  cached_events = events;
  return *cached;
}

struct Count : report::EventVisitor {
  uint64_t n = 0;
  void OnEvent(const report::Event&) override { ++n; }
};

void BM_DecodeEvents(benchmark::State& state) {
  const std::string& bytes = SyntheticTrace(state.range(0));
  TraceReader r;
  std::string error;
  if (!r.OpenBuffer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &error)) abort();
  uint64_t events = 0;
  for (auto _ : state) {
    Count c;
    r.ForEachEvent(&c);
    events += c.n;
  }
  state.counters["events_per_second"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["bytes_per_event"] =
      static_cast<double>(bytes.size()) / static_cast<double>(state.range(0));
}
BENCHMARK(BM_DecodeEvents)->Arg(2000000)->Unit(benchmark::kMillisecond);

// Open (scan and checksums) + decode + every rule: what the report costs
// before symbolization.
void BM_AnalyzeEvents(benchmark::State& state) {
  const std::string& bytes = SyntheticTrace(state.range(0));
  AnalysisOptions o;
  o.symbolize = false;
  uint64_t events = 0;
  for (auto _ : state) {
    TraceReader r;
    std::string error;
    if (!r.OpenBuffer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &error))
      abort();
    report::ProcessReport rep = report::AnalyzeTrace(r, o);
    benchmark::DoNotOptimize(rep.findings.size());
    events += rep.events;
  }
  state.counters["events_per_second"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AnalyzeEvents)->Arg(2000000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
