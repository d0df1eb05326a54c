// What a tracked allocation costs the program: malloc(BYTES), one write,
// free, 20,000 times, at DEPTH frames of recursion below the loop (a
// program's stack, such as a Python program's, is often deep), from SITES
// places of the program in turn (1 to 12, default 1: a program's steps
// allocate in several places), best of 5 runs, in ns per pair. No GPU:
// run it without the library and with it preloaded in each mode (call
// sites are recorded only with a trace directory), e.g.
//   LD_PRELOAD=bazel-bin/shim/libpinshim.so PINSHIM_MODE=optimize \
//     bazel-bin/bench/optimize/tracked_alloc_cost 30 65536 [SITES]
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace {

double NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

// One place of the program that allocates, writes and frees.
template <int kPlace>
__attribute__((noinline)) void Pair(size_t bytes) {
  volatile char* p = static_cast<volatile char*>(malloc(bytes));
  p[0] = 1;
  free(const_cast<char*>(p));
  asm volatile("" ::: "memory");  // not a tail call
}

constexpr int kMaxSites = 12;
void (*const kPlaces[kMaxSites])(size_t) = {&Pair<0>, &Pair<1>, &Pair<2>,  &Pair<3>,
                                            &Pair<4>, &Pair<5>, &Pair<6>,  &Pair<7>,
                                            &Pair<8>, &Pair<9>, &Pair<10>, &Pair<11>};

__attribute__((noinline)) double Loop(int n, size_t bytes, int sites) {
  const double t0 = NowNs();
  int s = 0;
  for (int i = 0; i < n; ++i) {
    kPlaces[s](bytes);
    s = s + 1 == sites ? 0 : s + 1;
  }
  return (NowNs() - t0) / n;
}

__attribute__((noinline)) double AtDepth(int depth, int n, size_t bytes, int sites) {
  if (depth <= 0) return Loop(n, bytes, sites);
  const double r = AtDepth(depth - 1, n, bytes, sites);
  asm volatile("" ::: "memory");  // not a tail call: the frame stays
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int depth = argc > 1 ? atoi(argv[1]) : 0;
  const size_t bytes = argc > 2 ? strtoull(argv[2], nullptr, 0) : size_t{1} << 16;
  const int sites = argc > 3 ? atoi(argv[3]) : 1;
  if (sites < 1 || sites > kMaxSites) {
    fprintf(stderr, "tracked_alloc_cost: SITES must be 1 to %d\n", kMaxSites);
    return 2;
  }
  AtDepth(depth, 1000, bytes, sites);  // warm
  double best = 1e18;
  for (int k = 0; k < 5; ++k) {
    const double ns = AtDepth(depth, 20000, bytes, sites);
    if (ns < best) best = ns;
  }
  printf("depth %d bytes %zu sites %d: %.0f ns per malloc+free\n", depth, bytes, sites, best);
  return 0;
}
