// What a tracked allocation costs the program: malloc(BYTES), one write,
// free, 20,000 times, at DEPTH frames of recursion below the loop (a
// program's stack, such as a Python program's, is often deep), best of 5
// runs, in ns per pair. No GPU: run it without the library and with it
// preloaded in each mode, e.g.
//   LD_PRELOAD=bazel-bin/shim/libpinshim.so PINSHIM_MODE=optimize \
//     bazel-bin/bench/optimize/tracked_alloc_cost 30 65536
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace {

double NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

__attribute__((noinline)) double Loop(int n, size_t bytes) {
  const double t0 = NowNs();
  for (int i = 0; i < n; ++i) {
    volatile char* p = static_cast<volatile char*>(malloc(bytes));
    p[0] = 1;
    free(const_cast<char*>(p));
  }
  return (NowNs() - t0) / n;
}

__attribute__((noinline)) double AtDepth(int depth, int n, size_t bytes) {
  if (depth <= 0) return Loop(n, bytes);
  const double r = AtDepth(depth - 1, n, bytes);
  asm volatile("" ::: "memory");  // not a tail call: the frame stays
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int depth = argc > 1 ? atoi(argv[1]) : 0;
  const size_t bytes = argc > 2 ? strtoull(argv[2], nullptr, 0) : size_t{1} << 16;
  AtDepth(depth, 1000, bytes);  // warm
  double best = 1e18;
  for (int k = 0; k < 5; ++k) {
    const double ns = AtDepth(depth, 20000, bytes);
    if (ns < best) best = ns;
  }
  printf("depth %d bytes %zu: %.0f ns per malloc+free\n", depth, bytes, best);
  return 0;
}
