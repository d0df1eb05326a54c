// Whether other cores reading a buffer slow its owner's next write of it
// (bench/RESULTS.md, "2026-12-06, eighth part"). Under optimize mode a
// staged upload's pieces are read by staging's workers on other cores; the
// driver reads a pageable buffer on the calling thread's core. The program
// then writes that memory again (the next batch, or the kernel zeroing a
// page the allocator gave back and took again). The main thread writes a
// buffer, has it read (copied with the stager's streaming stores into a
// buffer nobody reads back) in one of four ways, then writes it again, and
// the second write is timed:
//   same       read by the main thread itself (the driver's case);
//   others     read by WORKERS other threads, each a part (staging's case);
//   flushed    as others, each reader then flushing its part from every
//              cache (clflushopt, or clflush without it) before the write;
//   flushlate  as flushed, the flush after the main thread may write;
//   demoted    as others, each reader then demoting its part's lines to
//              the shared cache (cldemote: a hint, a no-op on CPUs without
//              it; the probe says whether this one has it).
//
//   rewrite_probe [BYTES [WORKERS [ROUNDS]]]   (defaults 3 MiB, 1, 200)
//
// Prints per way the median time of the second write and of a reader's
// copy and flush or demotion (us). Threads are pinned to cores 0 (main) and 1..WORKERS.
#include <cpuid.h>
#include <immintrin.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "bench/copy/probe_util.h"
#include "shim/optimize/stream_copy.h"

namespace {

enum Way { kSame, kOthers, kFlushed, kFlushLate, kDemoted };
const char* const kWayNames[] = {"same", "others", "flushed", "flushlate", "demoted"};

using pinshim::probe::Median;
using pinshim::probe::PinTo;

double NowUs() { return static_cast<double>(pinshim::probe::NowNs()) / 1e3; }

bool HasClflushopt() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (b & (1u << 23)) != 0;
}

bool HasCldemote() {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (c & (1u << 25)) != 0;
}

__attribute__((target("cldemote"))) void Demote(const char* p, size_t n) {
  for (size_t i = 0; i < n; i += 64) _cldemote(const_cast<char*>(p + i));
}

__attribute__((target("clflushopt"))) void FlushOpt(const char* p, size_t n) {
  for (size_t i = 0; i < n; i += 64) _mm_clflushopt(const_cast<char*>(p + i));
  _mm_sfence();
}

void Flush(const char* p, size_t n) {
  static const bool opt = HasClflushopt();
  if (opt) {
    FlushOpt(p, n);
    return;
  }
  for (size_t i = 0; i < n; i += 64) _mm_clflush(p + i);
  _mm_mfence();
}

struct Shared {
  char* buf = nullptr;
  char* sink = nullptr;
  size_t part = 0;
  int way = kSame;
  std::atomic<int> round{0};
  std::atomic<int> done{0};               // readers past their copy (and flush, unless late)
  std::atomic<int> finished{0};           // readers through the round, times recorded
  std::vector<double> copy_us, flush_us;  // reader 0's
};

void Reader(Shared* s, int id) {
  PinTo(id + 1);
  int seen = 0;
  for (;;) {
    int r;
    while ((r = s->round.load(std::memory_order_acquire)) == seen) _mm_pause();
    seen = r;
    if (r < 0) return;
    const size_t off = static_cast<size_t>(id) * s->part;
    const double a = NowUs();
    pinshim::optimize::CopyStreaming(s->sink + off, s->buf + off, s->part);
    const double b = NowUs();
    if (s->way == kFlushLate) s->done.fetch_add(1, std::memory_order_acq_rel);
    if (s->way == kFlushed || s->way == kFlushLate) Flush(s->buf + off, s->part);
    if (s->way == kDemoted) Demote(s->buf + off, s->part);
    const double c = NowUs();
    if (s->way != kFlushLate) s->done.fetch_add(1, std::memory_order_acq_rel);
    if (id == 0) {
      s->copy_us.push_back(b - a);
      s->flush_us.push_back(c - b);
    }
    s->finished.fetch_add(1, std::memory_order_acq_rel);
  }
}

// One way's rounds; the medians of the second write and reader 0's parts.
void RunWay(Shared* s, int way, int workers, size_t bytes, int rounds) {
  s->way = way;
  s->copy_us.clear();
  s->flush_us.clear();
  std::vector<double> write_us;
  for (int i = 0; i < rounds; ++i) {
    memset(s->buf, i, bytes);
    if (way == kSame) {
      pinshim::optimize::CopyStreaming(s->sink, s->buf, bytes);
    } else {
      s->done.store(0, std::memory_order_release);
      s->round.fetch_add(1, std::memory_order_acq_rel);
      while (s->done.load(std::memory_order_acquire) != workers) _mm_pause();
    }
    const double t0 = NowUs();
    memset(s->buf, i + 1, bytes);
    write_us.push_back(NowUs() - t0);
    // The readers' late flushes end before the next round (and their
    // times are in) before the buffer is written again.
    if (way != kSame) {
      while (s->finished.load(std::memory_order_acquire) != workers) _mm_pause();
      s->finished.store(0, std::memory_order_release);
    }
  }
  printf("%-9s write %8.1f us   reader copy %8.1f us   flush or demotion %8.1f us\n",
         kWayNames[way], Median(write_us), Median(s->copy_us), Median(s->flush_us));
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : size_t{3} << 20;
  const int workers = argc > 2 ? atoi(argv[2]) : 1;
  const int rounds = argc > 3 ? atoi(argv[3]) : 200;
  if (bytes < 4096 || workers < 1 || rounds < 1 || bytes % (64 * static_cast<size_t>(workers))) {
    fprintf(stderr,
            "usage: rewrite_probe [BYTES [WORKERS [ROUNDS]]] (BYTES a multiple of 64 x WORKERS)\n");
    return 2;
  }
  Shared s;
  s.buf = static_cast<char*>(aligned_alloc(4096, bytes));
  s.sink = static_cast<char*>(aligned_alloc(4096, bytes));
  if (s.buf == nullptr || s.sink == nullptr) return 1;
  memset(s.sink, 0, bytes);
  s.part = bytes / workers;
  PinTo(0);
  std::vector<std::thread> readers;
  for (int i = 0; i < workers; ++i) readers.emplace_back(Reader, &s, i);
  printf("%zu KiB, %d reader(s), %d rounds, %s, %s\n", bytes >> 10, workers, rounds,
         HasClflushopt() ? "clflushopt" : "clflush", HasCldemote() ? "cldemote" : "no cldemote");
  for (int pass = 0; pass < 2; ++pass) {
    for (int way : {kSame, kOthers, kFlushed, kFlushLate, kDemoted}) {
      RunWay(&s, way, workers, bytes, rounds);
    }
  }
  s.round.store(-1, std::memory_order_release);
  for (auto& t : readers) t.join();
  free(s.buf);
  free(s.sink);
  return 0;
}
