// The cost of recording, per event, on the recording path the hooks call:
// capture the stack (cached unwind or a full one), deduplicate it, encode,
// and write batches out; the same from Python code, Python frames included.
// Also the bytes each copy event takes in the trace.
//
//   bazel run -c opt //bench/trace:recorder_bench
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "shim/trace/call_site.h"
#include "shim/trace/event_encoder.h"
#include "shim/trace/python_frames.h"
#include "shim/trace/recorder.h"
#include "shim/trace/wc_ranges.h"

namespace {

using pinshim::CopyDir;
using pinshim::CopyEvent;
using pinshim::MemKind;
namespace trace = pinshim::trace;

uint64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string g_trace_path;

void StartOnce() {
  static bool started = [] {
    std::string dir = std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") +
                      "/pinshim_recorder_bench." + std::to_string(getpid());
    trace::RecorderOptions o;
    o.trace_dir = dir.c_str();
    o.sample_ms = 0;
    char err[256];
    if (!trace::StartRecorder(o, err, sizeof(err))) abort();
    g_trace_path = trace::RecorderTracePath();
    return true;
  }();
  (void)started;
}

CopyEvent MakeCopy(const void* host, uint64_t t) {
  CopyEvent e{};
  e.api = 3;
  e.dir = CopyDir::kHostToDevice;
  e.src_kind = MemKind::kPageable;
  e.dst_kind = MemKind::kDevice;
  e.bytes = 1 << 20;
  e.host_ptr = host;
  e.host_alloc_id = 17;
  e.start_ns = t;
  e.end_ns = t + 85000;  // a 1 MiB pageable copy takes about 85 us
  return e;
}

// Recurses `depth` frames before recording, so the stack has that many
// frames above the benchmark loop (capture keeps at most 32 by default).
__attribute__((noinline)) void RecordAtDepth(int depth, const CopyEvent& e) {
  if (depth > 0) {
    RecordAtDepth(depth - 1, e);
    asm volatile("" ::: "memory");  // not a tail call: every level keeps its frame
    return;
  }
  trace::RecordCopy(e, 0);
}

// The whole recording path for one copy, stack unchanged (the unwind cache
// answers): what a loop of copies costs.
void BM_RecordCopy(benchmark::State& state) {
  StartOnce();
  static char buffer[64];
  uint64_t t = Now();
  int depth = static_cast<int>(state.range(0));
  for (auto _ : state) {
    t += 100000;
    RecordAtDepth(depth, MakeCopy(buffer, t));
  }
  trace::RecorderStats s = trace::GetRecorderStats();
  state.counters["cache_hit_rate"] =
      static_cast<double>(s.unwind_cache_hits) /
      static_cast<double>(s.unwind_cache_hits + s.unwind_cache_misses + 1);
}
BENCHMARK(BM_RecordCopy)->Arg(0)->Arg(8)->Arg(24);

// One of several places of a program that record through the same path at
// the same depth (the allocation hooks' case): the same frame and return
// address at the capture, different callers above it.
template <int kPlace>
__attribute__((noinline)) void RecordFrom(const CopyEvent& e) {
  trace::RecordCopy(e, 0);
  asm volatile("" ::: "memory");  // not a tail call
}

// N such places recording in turn (1, 4, 8 or 12): their stacks share one
// set of the cache (8 entries), and the ones past 8 move to other sets.
void BM_RecordCopyPlacesInTurn(benchmark::State& state) {
  StartOnce();
  static char buffer[64];
  void (*const places[])(const CopyEvent&) = {&RecordFrom<0>, &RecordFrom<1>,  &RecordFrom<2>,
                                              &RecordFrom<3>, &RecordFrom<4>,  &RecordFrom<5>,
                                              &RecordFrom<6>, &RecordFrom<7>,  &RecordFrom<8>,
                                              &RecordFrom<9>, &RecordFrom<10>, &RecordFrom<11>};
  const int n = static_cast<int>(state.range(0));
  const trace::RecorderStats before = trace::GetRecorderStats();
  uint64_t t = Now();
  int i = 0;
  for (auto _ : state) {
    t += 100000;
    places[i](MakeCopy(buffer, t));
    i = i + 1 == n ? 0 : i + 1;
  }
  const trace::RecorderStats s = trace::GetRecorderStats();
  const double hits = static_cast<double>(s.unwind_cache_hits - before.unwind_cache_hits);
  const double misses = static_cast<double>(s.unwind_cache_misses - before.unwind_cache_misses);
  state.counters["cache_hit_rate"] = hits / (hits + misses + 1);
}
BENCHMARK(BM_RecordCopyPlacesInTurn)->Arg(1)->Arg(4)->Arg(8)->Arg(12);

// Unwinding without the cache: the cost of the first copy from a new site.
void BM_UnwindUncached(benchmark::State& state) {
  static trace::StackTable table;
  static bool init = table.Init(12, 1 << 16);
  (void)init;
  auto* cache = new trace::UnwindCache();
  cache->stack_top = trace::CurrentThreadStackTop();  // finds the slots, as on a real miss
  trace::CapturedStack scratch;
  uint32_t epoch = 1;
  for (auto _ : state) {
    // Emptied every time; the stack table finds the stack after the first.
    for (auto& e : cache->entries) e.epoch = 0;
    bool is_new;
    benchmark::DoNotOptimize(
        trace::CaptureCallSite(cache, trace::kDefaultStackDepth, epoch, &table, &scratch, &is_new));
  }
  state.counters["frames"] = scratch.depth;
  delete cache;
}
BENCHMARK(BM_UnwindUncached);

// Encoding alone.
void BM_EncodeCopy(benchmark::State& state) {
  std::vector<uint8_t> buf(64 * 1024);
  trace::BatchEncoder enc;
  enc.Init(buf.data(), buf.size());
  static char buffer[64];
  uint64_t t = Now();
  uint64_t bytes = 0, events = 0;
  for (auto _ : state) {
    if (!enc.HasRoom()) {
      bytes += enc.size();
      events += enc.count();
      enc.Reset();
    }
    t += 100000;
    enc.AppendCopy(MakeCopy(buffer, t), 5, 0);
  }
  bytes += enc.size();
  events += enc.count();
  state.counters["bytes_per_copy"] = static_cast<double>(bytes) / static_cast<double>(events);
}
BENCHMARK(BM_EncodeCopy);

// --- Recording from Python ----------------------------------------------------
//
// The same recording path reached from Python code `state.range(0)` frames
// deep, through ctypes (which releases the GIL, as frameworks do around
// their copies): the extra cost of reading the calling thread's Python
// frames. libpython is loaded at the benchmark's first run (its path from
// PINSHIM_BENCH_LIBPYTHON, else the usual names); without one the benchmark
// says so and skips.
namespace python {

using InitFn = void (*)();
using RunFn = int (*)(const char*);
benchmark::State* g_state = nullptr;
char g_buffer[64];

extern "C" void PinshimBenchLoop() {
  uint64_t t = Now();
  for (auto _ : *g_state) {
    t += 100000;
    RecordAtDepth(0, MakeCopy(g_buffer, t));
  }
}

RunFn Load() {
  static RunFn run = []() -> RunFn {
    const char* env = getenv("PINSHIM_BENCH_LIBPYTHON");
    const char* names[] = {env,
                           "libpython3.so",
                           "libpython3.13.so.1.0",
                           "libpython3.12.so.1.0",
                           "libpython3.11.so.1.0",
                           "libpython3.10.so.1.0"};
    for (const char* name : names) {
      if (name == nullptr) continue;
      void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
      if (h == nullptr) continue;
      auto init = reinterpret_cast<InitFn>(dlsym(h, "Py_Initialize"));
      auto r = reinterpret_cast<RunFn>(dlsym(h, "PyRun_SimpleString"));
      if (init == nullptr || r == nullptr) continue;
      init();
      trace::DetectPythonRuntime();
      return r;
    }
    return nullptr;
  }();
  return run;
}

void BM_RecordCopyFromPython(benchmark::State& state) {
  StartOnce();
  RunFn run = Load();
  if (run == nullptr) {
    state.SkipWithError("no libpython found (set PINSHIM_BENCH_LIBPYTHON)");
    return;
  }
  const trace::PythonRuntime* rt = trace::ActivePythonRuntime();
  if (rt == nullptr || rt->fixed != trace::PythonStatus::kFrames) {
    state.SkipWithError("this Python's frames are not read");
    return;
  }
  g_state = &state;
  char code[1024];
  snprintf(code, sizeof(code),
           "import ctypes\n"
           "loop = ctypes.CFUNCTYPE(None)(%llu)\n"
           "def deep(n):\n"
           "    if n == 0:\n"
           "        loop()\n"
           "    else:\n"
           "        deep(n - 1)\n"
           "deep(%d)\n",
           static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&PinshimBenchLoop)),
           static_cast<int>(state.range(0)));
  if (run(code) != 0) state.SkipWithError("the Python loop failed");
  state.SetLabel(rt->description);
}
BENCHMARK(BM_RecordCopyFromPython)->Arg(0)->Arg(8)->Arg(40);

}  // namespace python

// What every memcpy pays for the wc-read check when the process has no
// write-combined memory, and when it has some elsewhere.
void BM_CheckWcRead(benchmark::State& state) {
  StartOnce();
  trace::ClearWcRanges();
  static char wc[4096], other[4096];
  for (int i = 0; i < state.range(0); ++i) trace::AddWcRange(wc + i, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(trace::CheckWcRead(other, sizeof(other), trace::WcReadVia::kMemcpy));
  }
  trace::ClearWcRanges();
}
BENCHMARK(BM_CheckWcRead)->Arg(0)->Arg(4);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  trace::StopRecorder();
  if (!g_trace_path.empty()) {
    FILE* f = fopen(g_trace_path.c_str(), "rb");
    if (f != nullptr) {
      fseek(f, 0, SEEK_END);
      long size = ftell(f);
      fclose(f);
      printf("trace file: %s, %ld bytes\n", g_trace_path.c_str(), size);
    }
    if (getenv("PINSHIM_BENCH_KEEP_TRACE") == nullptr) unlink(g_trace_path.c_str());
  }
  return 0;
}
