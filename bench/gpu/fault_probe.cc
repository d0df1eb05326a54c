// How fast the host can make fresh memory writable: the cost that a
// download into a newly allocated buffer pays, on the machine that runs
// it. For each method, 5 repeats of: map BYTES of fresh anonymous memory,
// make every page present and written, unmap; the figure is the median
// rate over the repeats.
//
//   fault_probe [BYTES]    (default 64 MiB)
//
// Methods: memset by 1, 4 and 8 threads (a page fault per page);
// madvise(MADV_POPULATE_WRITE) by 1, 4 and 8 threads, then memset (the
// faults taken in one call per thread); madvise(MADV_HUGEPAGE) first, then
// memset by 8 threads; and memset of memory already present (the copy
// alone). Then the copy-out of a download: memcpy from a present source
// into fresh memory by 8, 12 and 16 threads that take pieces in turn from
// a shared counter (as staging's workers do), in 4 KiB pages (256 KiB
// pieces) and in 2 MiB pages (advised first; 256 KiB pieces, which put
// several threads on one huge page, and 2 MiB pieces aligned to the huge
// pages, one thread each), and into present memory. The destination starts
// 16 bytes past a page, as a large malloc's does.
// Built with: g++ -O2 -pthread bench/gpu/fault_probe.cc
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

using Clock = std::chrono::steady_clock;

enum class Method { kTouch, kPopulate, kHuge, kPresent };

// Runs fn(lo, hi) on `threads` threads over equal page-aligned parts.
template <typename Fn>
void Parts(char* base, size_t bytes, int threads, Fn fn) {
  std::vector<std::thread> ts;
  const size_t part = (bytes / threads + 4095) / 4096 * 4096;
  for (int t = 0; t < threads; ++t) {
    const size_t lo = std::min(bytes, part * t), hi = std::min(bytes, part * (t + 1));
    ts.emplace_back([=] { fn(base + lo, hi - lo); });
  }
  for (auto& t : ts) t.join();
}

// GB/s of one repeat, or -1 where the method failed.
double Once(size_t bytes, Method m, int threads) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  char* base = static_cast<char*>(p);
  if (m == Method::kPresent) memset(base, 1, bytes);
  bool ok = true;
  const auto t0 = Clock::now();
  if (m == Method::kHuge && madvise(base, bytes, MADV_HUGEPAGE) != 0) ok = false;
  if (m == Method::kPopulate) {
    bool* okp = &ok;
    Parts(base, bytes, threads, [okp](char* lo, size_t len) {
      if (madvise(lo, len, MADV_POPULATE_WRITE) != 0) *okp = false;
    });
  }
  Parts(base, bytes, threads, [](char* lo, size_t len) { memset(lo, 2, len); });
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  munmap(p, bytes);
  return ok ? bytes / s / 1e9 : -1;
}

enum class Dest { kFresh, kHuge, kPresent };

// GB/s of one copy of `bytes` from present memory into a destination of
// kind `d`, by `threads` threads taking `piece`-byte pieces in turn; with
// `align`, the pieces after the first end on 2 MiB boundaries.
double CopyOnce(size_t bytes, Dest d, int threads, size_t piece, bool align) {
  const size_t huge = size_t{2} << 20, span = bytes + 2 * huge;
  void* s = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED || p == MAP_FAILED) return -1;
  memset(s, 3, bytes);
  char* dst = static_cast<char*>(p) + 4096 + 16;
  if (d == Dest::kPresent) memset(dst, 1, bytes);
  const auto t0 = Clock::now();
  bool ok = d != Dest::kHuge || madvise(p, span, MADV_HUGEPAGE) == 0;
  const uintptr_t a = reinterpret_cast<uintptr_t>(dst);
  const size_t head = align ? std::min(bytes, (huge - a % huge) % huge) : 0;
  const size_t first = head != 0 ? 1 : 0;  // the head is piece 0
  const size_t n = first + (bytes - head + piece - 1) / piece;
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (size_t k; (k = next.fetch_add(1)) < n;) {
        const size_t lo = k < first ? 0 : head + (k - first) * piece;
        const size_t len = k < first ? head : std::min(piece, bytes - lo);
        memcpy(dst + lo, static_cast<char*>(s) + lo, len);
      }
    });
  }
  for (auto& t : ts) t.join();
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  munmap(p, span);
  munmap(s, bytes);
  return ok ? bytes / sec / 1e9 : -1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t{64} << 20);
  struct Row {
    const char* name;
    Method m;
    int threads;
  } rows[] = {
      {"touch_t1", Method::kTouch, 1},       {"touch_t4", Method::kTouch, 4},
      {"touch_t8", Method::kTouch, 8},       {"populate_t1", Method::kPopulate, 1},
      {"populate_t4", Method::kPopulate, 4}, {"populate_t8", Method::kPopulate, 8},
      {"huge_t8", Method::kHuge, 8},         {"present_t1", Method::kPresent, 1},
      {"present_t8", Method::kPresent, 8},
  };
  for (const Row& r : rows) {
    std::vector<double> v;
    for (int i = 0; i < 5; ++i) v.push_back(Once(bytes, r.m, r.threads));
    printf("fault_probe bytes=%zu method=%s gbps=%.2f min=%.2f max=%.2f\n", bytes, r.name,
           Median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  }
  struct CopyRow {
    const char* name;
    Dest d;
    size_t piece;
    bool align;
  } copies[] = {
      {"copy_fresh_256k", Dest::kFresh, 256 << 10, false},
      {"copy_huge_256k", Dest::kHuge, 256 << 10, false},
      {"copy_huge_2m_aligned", Dest::kHuge, 2 << 20, true},
      {"copy_present_256k", Dest::kPresent, 256 << 10, false},
  };
  for (int threads : {8, 12, 16}) {
    for (const CopyRow& r : copies) {
      std::vector<double> v;
      for (int i = 0; i < 5; ++i) v.push_back(CopyOnce(bytes, r.d, threads, r.piece, r.align));
      printf("fault_probe bytes=%zu method=%s_t%d gbps=%.2f min=%.2f max=%.2f\n", bytes, r.name,
             threads, Median(v), *std::min_element(v.begin(), v.end()),
             *std::max_element(v.begin(), v.end()));
    }
  }
  return 0;
}
