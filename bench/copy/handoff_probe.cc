// Why a staged 1 MiB upload copies at about 20 GB/s with 4, 8 or 12 workers
// (bench/RESULTS.md, 2026-12-02): either the buffer, just written by the
// calling thread and still in its core's cache, is read by other cores at a
// shared rate, or each worker pays a fixed start before its first piece (a
// 256-bit unit powering up after a spin, say). This probe copies a buffer
// in 64 KiB pieces, the stager's way (spinning workers take pieces from a
// shared counter and copy them with non-temporal stores into a buffer they
// do not read back), and times each piece, under four source states and
// three copy routines (the stager's own two, shim/optimize/stream_copy.h,
// and libc's memcpy):
//   fresh  the calling thread wrote the buffer just before (the staged case);
//   cold   written, then flushed from every cache (clflush);
//   warm   written, then read by the copying cores in an earlier round;
//   idle   as fresh, after the workers spun 3 ms without copying (a
//          256-bit unit powers down after a while unused).
//   sse2 / avx2: 16- or 32-byte streaming stores; memcpy: libc's.
// A worker's first piece against its later ones separates a start cost
// from a shared rate; the calling thread copying alone (workers 0) shows
// what one core does with its own cache.
//
//   handoff_probe [BYTES [WORKERS_LIST [ROUNDS]]]   (defaults 1048576 "0 1 4 8 12" 200)
//
// Prints, per source state, routine and worker count: the median time from
// the start signal to the last piece's end (us), the rate that gives
// (GB/s), and the median time of workers' first pieces and of their later
// pieces (us).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/copy/probe_util.h"
#include "shim/optimize/stream_copy.h"

namespace {

using pinshim::probe::Median;
using pinshim::probe::NowNs;
using pinshim::probe::PinTo;

constexpr size_t kPiece = 64 << 10;

void CopyLibc(char* dst, const char* src, size_t n) { memcpy(dst, src, n); }

using CopyFn = void (*)(char*, const char*, size_t);

struct Round {
  std::atomic<uint64_t> generation{0};
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  CopyFn copy = nullptr;
  char* dst = nullptr;
  const char* src = nullptr;
  size_t pieces = 0;
  uint64_t start_ns = 0;
  std::atomic<bool> quit{false};
};

struct PieceTime {
  uint64_t end_ns;
  double us;
  bool first;
};

// Takes pieces until none is left; records each piece's time.
void TakePieces(Round* r, std::vector<PieceTime>* out) {
  bool first = true;
  for (;;) {
    const size_t i = r->next.fetch_add(1, std::memory_order_relaxed);
    if (i >= r->pieces) break;
    const uint64_t t0 = NowNs();
    r->copy(r->dst + i * kPiece, r->src + i * kPiece, kPiece);
    const uint64_t t1 = NowNs();
    out->push_back({t1, (t1 - t0) / 1e3, first});
    first = false;
  }
}

void Worker(Round* r, int cpu, std::vector<PieceTime>* out) {
  PinTo(cpu);
  uint64_t seen = 0;
  for (;;) {
    uint64_t g;
    while ((g = r->generation.load(std::memory_order_acquire)) == seen) {
      if (r->quit.load(std::memory_order_relaxed)) return;
      _mm_pause();
    }
    seen = g;
    TakePieces(r, out);
    r->done.fetch_add(1, std::memory_order_release);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (1 << 20);
  const std::string list = argc > 2 ? argv[2] : "0 1 4 8 12";
  const int rounds = argc > 3 ? atoi(argv[3]) : 200;
  if (bytes < kPiece || bytes % kPiece != 0 || rounds <= 0) {
    fprintf(stderr,
            "usage: handoff_probe [BYTES (a multiple of 64 KiB)] [\"WORKERS ...\"] [ROUNDS]\n");
    return 2;
  }
  std::vector<int> worker_counts;
  for (const char* p = list.c_str(); *p != '\0';) {
    char* end;
    const long w = strtol(p, &end, 10);
    if (end == p) break;
    worker_counts.push_back(static_cast<int>(w));
    p = end;
  }
  char* src = static_cast<char*>(aligned_alloc(4096, bytes));
  char* dst = static_cast<char*>(aligned_alloc(4096, bytes));
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  PinTo(0);
  const unsigned cpus = std::thread::hardware_concurrency();
  printf("handoff_probe: %zu bytes in 64 KiB pieces, %d rounds a row, %u CPUs\n", bytes, rounds,
         cpus);
  printf("%-6s %-7s %7s %9s %7s %12s %12s\n", "source", "copy", "workers", "total_us", "GB/s",
         "first_us", "later_us");
  const struct {
    const char* name;
    CopyFn fn;
  } routines[] = {{"sse2", pinshim::optimize::CopyStreaming},
                  {"avx2", pinshim::optimize::CopyStreamingAvx2},
                  {"memcpy", CopyLibc}};
  const char* states[] = {"fresh", "cold", "warm", "idle"};
  for (const char* state : states) {
    for (const auto& routine : routines) {
      if (routine.fn == pinshim::optimize::CopyStreamingAvx2 && !__builtin_cpu_supports("avx2"))
        continue;
      for (int workers : worker_counts) {
        if (workers >= static_cast<int>(cpus)) continue;
        Round r;
        r.copy = routine.fn;
        r.dst = dst;
        r.src = src;
        r.pieces = bytes / kPiece;
        std::vector<std::vector<PieceTime>> times(workers);
        std::vector<std::thread> threads;
        for (int w = 0; w < workers; ++w) threads.emplace_back(Worker, &r, 1 + w, &times[w]);
        std::vector<double> totals, firsts, laters;
        std::vector<PieceTime> own;
        for (int round = 0; round < rounds + 5; ++round) {
          const int value = round & 0x7f;
          if (strcmp(state, "idle") == 0) {
            const uint64_t until = NowNs() + 3000000;
            while (NowNs() < until) _mm_pause();
          }
          memset(src, value, bytes);  // the calling thread writes the buffer
          if (strcmp(state, "cold") == 0) {
            for (size_t i = 0; i < bytes; i += 64) _mm_clflush(src + i);
            _mm_mfence();
          }
          for (auto& t : times) t.clear();
          own.clear();
          r.next.store(0, std::memory_order_relaxed);
          r.done.store(0, std::memory_order_relaxed);
          if (strcmp(state, "warm") == 0 && workers > 0) {
            // The copying cores read the buffer once first (the same
            // pieces, the same way), so it is in their caches, not only ours.
            r.generation.fetch_add(1, std::memory_order_release);
            while (r.done.load(std::memory_order_acquire) != workers) _mm_pause();
            for (auto& t : times) t.clear();
            r.next.store(0, std::memory_order_relaxed);
            r.done.store(0, std::memory_order_relaxed);
          }
          const uint64_t t0 = NowNs();
          r.start_ns = t0;
          if (workers == 0) {
            TakePieces(&r, &own);
          } else {
            r.generation.fetch_add(1, std::memory_order_release);
            while (r.done.load(std::memory_order_acquire) != workers) _mm_pause();
          }
          if (round < 5) continue;  // warm-up rounds
          uint64_t last = t0;
          auto take = [&](const std::vector<PieceTime>& v) {
            for (const PieceTime& p : v) {
              last = std::max(last, p.end_ns);
              (p.first ? firsts : laters).push_back(p.us);
            }
          };
          take(own);
          for (const auto& t : times) take(t);
          totals.push_back((last - t0) / 1e3);
        }
        r.quit.store(true);
        for (auto& t : threads) t.join();
        const double total = Median(totals);
        printf("%-6s %-7s %7d %9.1f %7.2f %12.1f %12.1f\n", state, routine.name, workers, total,
               bytes / (total * 1e3), Median(firsts), Median(laters));
        fflush(stdout);
      }
    }
  }
  free(src);
  free(dst);
  return 0;
}
