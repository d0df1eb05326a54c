// What the copy probes (handoff_probe, rewrite_probe) share: pinning a
// thread to a core, a monotonic clock and the median of their timings.
#ifndef PINSHIM_BENCH_COPY_PROBE_UTIL_H_
#define PINSHIM_BENCH_COPY_PROBE_UTIL_H_

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace pinshim {
namespace probe {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Pins the calling thread to `cpu` (modulo the machine's cores).
inline void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % static_cast<int>(std::thread::hardware_concurrency()), &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// The middle value (the upper one of an even count); 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace probe
}  // namespace pinshim

#endif  // PINSHIM_BENCH_COPY_PROBE_UTIL_H_
