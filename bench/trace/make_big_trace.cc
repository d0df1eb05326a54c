// Writes a large trace through the real recorder (real stacks, real module
// map), for timing `pinshim report` on it:
//
//   make_big_trace DIR MEGABYTES
//
// Two threads copy from twelve call sites with varied sizes, memory kinds and
// streams, with pinned allocations and synchronizations mixed in, until the
// trace file reaches MEGABYTES.
#include <sys/stat.h>
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "shim/trace/recorder.h"

namespace {

using namespace pinshim;

uint64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

char g_host[16][4096];

__attribute__((noinline)) void Copy(int site, uint64_t i, uint64_t t) {
  static const uint64_t kSizes[] = {4096, 65536, 1 << 20, 16 << 20};
  CopyEvent e{};
  e.api = static_cast<ApiId>(site % 4);
  e.dir = site % 3 == 0 ? CopyDir::kDeviceToHost : CopyDir::kHostToDevice;
  MemKind host = site % 2 ? MemKind::kPageable : MemKind::kPinnedByProgram;
  e.src_kind = e.dir == CopyDir::kHostToDevice ? host : MemKind::kDevice;
  e.dst_kind = e.dir == CopyDir::kHostToDevice ? MemKind::kDevice : host;
  e.async = site % 4 >= 2;
  e.bytes = kSizes[(i + site) % 4];
  e.host_ptr = g_host[(i / 7 + site) % 16];
  e.host_alloc_id = host == MemKind::kPageable ? 1 + (i / 7 + site) % 16 : 0;
  e.stream = reinterpret_cast<void*>(0x100 + site % 3);
  e.start_ns = t;
  e.end_ns = t + 3000 + (i % 97) * 400;
  trace::RecordCopy(e, 0);
}

// Twelve distinct call sites (each its own line).
__attribute__((noinline)) void Sites(uint64_t i, uint64_t t) {
  switch (i % 12) {
    case 0: Copy(0, i, t); break;
    case 1: Copy(1, i, t); break;
    case 2: Copy(2, i, t); break;
    case 3: Copy(3, i, t); break;
    case 4: Copy(4, i, t); break;
    case 5: Copy(5, i, t); break;
    case 6: Copy(6, i, t); break;
    case 7: Copy(7, i, t); break;
    case 8: Copy(8, i, t); break;
    case 9: Copy(9, i, t); break;
    case 10: Copy(10, i, t); break;
    default: Copy(11, i, t); break;
  }
}

void Worker(int id, std::atomic<bool>* stop, std::atomic<uint64_t>* events) {
  uint64_t t = Now();
  uint64_t n = 0;
  for (uint64_t i = 0; !stop->load(std::memory_order_relaxed); ++i) {
    t += 5000 + (i % 13) * 300;  // synthetic time: microseconds apart
    Sites(i, t);
    ++n;
    if (i % 1000 == 999) {
      PinEvent p{};
      p.op = (i / 1000) % 2 ? PinOp::kFree : PinOp::kAlloc;
      p.ptr = g_host[id];
      p.bytes = 4096;
      p.start_ns = t;
      p.end_ns = t + 400000;
      trace::RecordPin(p, 0);
      trace::SyncEvent s{};
      s.kind = trace::SyncKind::kStreamSynchronize;
      s.stream = reinterpret_cast<void*>(0x100);
      s.start_ns = t + 1;
      s.end_ns = t + 100;
      trace::RecordSync(s);
      n += 2;
    }
  }
  events->fetch_add(n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: make_big_trace DIR MEGABYTES\n");
    return 2;
  }
  uint64_t target = strtoull(argv[2], nullptr, 10) << 20;
  trace::RecorderOptions o;
  o.trace_dir = argv[1];
  o.sample_ms = 10;
  char err[256];
  if (!trace::StartRecorder(o, err, sizeof(err))) {
    fprintf(stderr, "make_big_trace: %s\n", err);
    return 1;
  }
  std::string path = trace::RecorderTracePath();
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> events{0};
  uint64_t start = Now();
  std::thread a(Worker, 0, &stop, &events), b(Worker, 1, &stop, &events);
  for (;;) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) >= target) break;
    timespec ts = {0, 20000000};
    nanosleep(&ts, nullptr);
  }
  stop.store(true);
  a.join();
  b.join();
  trace::StopRecorder();
  double secs = (Now() - start) * 1e-9;
  struct stat st;
  stat(path.c_str(), &st);
  printf(
      "%s: %llu events, %lld bytes (%.2f bytes/event), recorded in %.2f s (%.0f ns/event/thread)\n",
      path.c_str(), static_cast<unsigned long long>(events.load()),
      static_cast<long long>(st.st_size), static_cast<double>(st.st_size) / events.load(), secs,
      secs * 2e9 / events.load());
  return 0;
}
