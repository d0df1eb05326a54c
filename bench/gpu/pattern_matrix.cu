// Host<->device copy patterns as programs written elsewhere make them, one
// cell per argument, each timed with a host clock around the calls a user
// would time. Built with nvcc on the GPU machine and run with and without
// pinshim by bench/gpu/matrix.sh, which interleaves the variants and reduces
// the rounds to medians of per-round ratios.
//
// Usage: pattern_matrix CELL...
//   fresh:BYTES:sync|async    per step: malloc, fill every byte, upload, free;
//                             malloc, download, free (async: on a stream of
//                             the program's, then synchronized)
//   reuse:BYTES:TIMES         one malloc'd buffer, TIMES steps of a write,
//                             an upload and a download, then freed
//   pinned:BYTES:TIMES        the same with a cudaHostAlloc'd buffer
//   cold:BYTES                the fresh:BYTES:sync step 8 times with no
//                             warm-up: a program's first copies (run it as
//                             the first cell of a process); rates are the
//                             total bytes over the total time, not medians,
//                             and h2d_each_us lists every upload's time
//   bw:BYTES                  bandwidthTest-style: one malloc'd buffer,
//                             copied each way ITERS times back to back
//   bwpinned:BYTES            the same with a cudaHostAlloc'd buffer
//   threads:BYTES:N           N threads, each the fresh:BYTES:sync step
//   busy:K                    K threads spinning on the CPU for the cells
//                             that follow (busy:0 stops them); those cells
//                             print their names with ":busyK" added
// Each cell prints one line:
//   cell=NAME h2d_gbps=X d2h_gbps=Y step_us=Z h2d_call_us=A d2h_call_us=B checksum=C
// h2d_gbps/d2h_gbps: bytes over the time of the copy calls (and the
// synchronization that completes them); step_us: the whole step, allocation
// and fill included, median over the steps. checksum: what the device
// received and what came back, the same with and without pinshim.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A folding hash of the device buffer's 64-bit words, by a kernel.
__global__ void HashKernel(const uint64_t* p, size_t words, unsigned long long* out) {
  uint64_t h = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += size_t{gridDim.x} * blockDim.x) {
    h ^= (p[i] + i) * 0x9E3779B97F4A7C15ull;
  }
  atomicXor(out, h);
}

uint64_t DeviceHash(const void* dev, size_t bytes) {
  static unsigned long long* out = nullptr;
  if (out == nullptr) CHECK(cudaMalloc(&out, sizeof(*out)));
  CHECK(cudaMemset(out, 0, sizeof(*out)));
  HashKernel<<<256, 256>>>(static_cast<const uint64_t*>(dev), bytes / 8, out);
  CHECK(cudaGetLastError());
  unsigned long long h = 0;
  CHECK(cudaMemcpy(&h, out, sizeof(h), cudaMemcpyDeviceToHost));
  return h;
}

uint64_t HostHash(const void* p, size_t bytes) {
  const auto* w = static_cast<const uint64_t*>(p);
  uint64_t h = 0;
  for (size_t i = 0; i < bytes / 8; ++i) h += w[i] * (2 * i + 1);
  return h;
}

// Fills every byte: a pattern that changes with the step.
void Fill(void* p, size_t bytes, uint64_t step) {
  auto* w = static_cast<uint64_t*>(p);
  const uint64_t base = step * 0x100000001B3ull + 7;
  for (size_t i = 0; i < bytes / 8; ++i) w[i] = base + i;
  memset(static_cast<char*>(p) + bytes / 8 * 8, int(step), bytes % 8);
}

struct Result {
  std::vector<double> h2d_us, d2h_us, step_us;
  uint64_t checksum = 0;
  uint64_t bytes = 0;
};

// Spinning threads started by a busy:K cell (0: none).
int g_busy = 0;

// A cell's printed name: as given, with ":busyK" while K threads spin, so a
// cell run again under busy cores is a row of its own.
std::string Tagged(const std::string& name) {
  return g_busy > 0 ? name + ":busy" + std::to_string(g_busy) : name;
}

void Print(const std::string& name, const Result& r) {
  const double h2d = Median(r.h2d_us), d2h = Median(r.d2h_us);
  printf(
      "cell=%s h2d_gbps=%.3f d2h_gbps=%.3f step_us=%.1f h2d_call_us=%.1f d2h_call_us=%.1f "
      "checksum=%016llx\n",
      Tagged(name).c_str(), h2d > 0 ? r.bytes / h2d / 1e3 : 0.0,
      d2h > 0 ? r.bytes / d2h / 1e3 : 0.0, Median(r.step_us), h2d, d2h,
      static_cast<unsigned long long>(r.checksum));
  fflush(stdout);
}

int StepsFor(size_t bytes) {
  if (bytes >= (size_t{512} << 20)) return 2;
  if (bytes >= (size_t{256} << 20)) return 2;
  if (bytes >= (size_t{64} << 20)) return 8;
  if (bytes >= (size_t{4} << 20)) return 24;
  return 64;
}

// One fresh step: malloc, fill, upload, free; malloc, download, free.
void FreshStep(size_t bytes, bool async, cudaStream_t stream, void* dev, uint64_t step, Result* r) {
  const auto t0 = Clock::now();
  void* up = malloc(bytes);
  Fill(up, bytes, step);
  const auto t1 = Clock::now();
  if (async) {
    CHECK(cudaMemcpyAsync(dev, up, bytes, cudaMemcpyHostToDevice, stream));
    CHECK(cudaStreamSynchronize(stream));
  } else {
    CHECK(cudaMemcpy(dev, up, bytes, cudaMemcpyHostToDevice));
  }
  const auto t2 = Clock::now();
  free(up);
  void* down = malloc(bytes);
  const auto t3 = Clock::now();
  if (async) {
    CHECK(cudaMemcpyAsync(down, dev, bytes, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
  } else {
    // The issue's shape: an async download on the legacy stream, synchronized.
    CHECK(cudaMemcpyAsync(down, dev, bytes, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
  }
  const auto t4 = Clock::now();
  r->checksum = r->checksum * 31 + HostHash(down, bytes);
  free(down);
  const auto t5 = Clock::now();
  r->h2d_us.push_back(Us(t1, t2));
  r->d2h_us.push_back(Us(t3, t4));
  r->step_us.push_back(Us(t0, t5));
}

// A program's first copies: no warm-up, totals rather than medians.
void Cold(size_t bytes) {
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  Result r;
  r.bytes = bytes;
  for (int s = 0; s < 8; ++s) FreshStep(bytes, false, 0, dev, s, &r);
  r.checksum = r.checksum * 31 + DeviceHash(dev, bytes);
  double h2d = 0, d2h = 0, step = 0;
  for (int s = 0; s < 8; ++s) {
    h2d += r.h2d_us[s];
    d2h += r.d2h_us[s];
    step += r.step_us[s];
  }
  // Each upload's time in turn: where in the first copies the time goes.
  std::string each;
  for (int s = 0; s < 8; ++s) each += (s ? "," : "") + std::to_string(std::lround(r.h2d_us[s]));
  printf(
      "cell=cold:%zu h2d_gbps=%.3f d2h_gbps=%.3f step_us=%.1f h2d_call_us=%.1f d2h_call_us=%.1f "
      "first_h2d_us=%.1f first_d2h_us=%.1f h2d_each_us=%s checksum=%016llx\n",
      bytes, 8.0 * bytes / h2d / 1e3, 8.0 * bytes / d2h / 1e3, step / 8, h2d / 8, d2h / 8,
      r.h2d_us[0], r.d2h_us[0], each.c_str(), static_cast<unsigned long long>(r.checksum));
  fflush(stdout);
  CHECK(cudaFree(dev));
}

void Fresh(size_t bytes, bool async) {
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  Result warm, r;
  r.bytes = bytes;
  FreshStep(bytes, async, stream, dev, 0, &warm);
  const int steps = StepsFor(bytes);
  for (int s = 1; s <= steps; ++s) FreshStep(bytes, async, stream, dev, s, &r);
  r.checksum = r.checksum * 31 + DeviceHash(dev, bytes);
  Print("fresh:" + std::to_string(bytes) + (async ? ":async" : ":sync"), r);
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dev));
}

// TIMES steps over one host buffer: write a word per page, upload, download.
void Reuse(size_t bytes, int times, bool pinned) {
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  const auto t0 = Clock::now();
  void* host;
  if (pinned) {
    CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  } else {
    host = malloc(bytes);
  }
  Fill(host, bytes, 1);
  Result r;
  r.bytes = bytes;
  for (int s = 0; s < times; ++s) {
    for (size_t off = 0; off + 8 <= bytes; off += 4096) {
      *reinterpret_cast<uint64_t*>(static_cast<char*>(host) + off) += s;
    }
    const auto a = Clock::now();
    CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    const auto b = Clock::now();
    CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    const auto c = Clock::now();
    r.h2d_us.push_back(Us(a, b));
    r.d2h_us.push_back(Us(b, c));
  }
  r.checksum = HostHash(host, bytes) * 31 + DeviceHash(dev, bytes);
  if (pinned) {
    CHECK(cudaFreeHost(host));
  } else {
    free(host);
  }
  // The whole loop, allocation and release included, as one "step".
  r.step_us.push_back(Us(t0, Clock::now()));
  Print(std::string(pinned ? "pinned:" : "reuse:") + std::to_string(bytes) + ":" +
            std::to_string(times),
        r);
  CHECK(cudaFree(dev));
}

// bandwidthTest's pageable loop: one buffer, ITERS copies each way timed as
// one batch (events there; a host clock around the batch here).
void Bandwidth(size_t bytes, bool pinned) {
  const int iters = bytes >= (size_t{64} << 20) ? 10 : 50;
  void* dev;
  CHECK(cudaMalloc(&dev, bytes));
  void* host;
  if (pinned) {
    CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  } else {
    host = malloc(bytes);
  }
  Fill(host, bytes, 3);
  CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));  // warm-up
  Result r;
  r.bytes = bytes;
  for (int rep = 0; rep < 3; ++rep) {
    const auto a = Clock::now();
    for (int i = 0; i < iters; ++i) {
      CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, 0));
    }
    CHECK(cudaDeviceSynchronize());
    const auto b = Clock::now();
    for (int i = 0; i < iters; ++i) {
      CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, 0));
    }
    CHECK(cudaDeviceSynchronize());
    const auto c = Clock::now();
    r.h2d_us.push_back(Us(a, b) / iters);
    r.d2h_us.push_back(Us(b, c) / iters);
    r.step_us.push_back(Us(a, c));
  }
  r.checksum = HostHash(host, bytes) * 31 + DeviceHash(dev, bytes);
  if (pinned) {
    CHECK(cudaFreeHost(host));
  } else {
    free(host);
  }
  CHECK(cudaFree(dev));
  Print((pinned ? "bwpinned:" : "bw:") + std::to_string(bytes), r);
}

// N threads, each with its own device buffer and the fresh sync step.
void Threads(size_t bytes, int n) {
  const int steps = std::max(8, StepsFor(bytes) / 2);
  std::vector<Result> results(n);
  std::vector<void*> devs(n);
  for (int t = 0; t < n; ++t) CHECK(cudaMalloc(&devs[t], bytes));
  std::atomic<int> ready{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < n) {
      }
      for (int s = 0; s < steps; ++s) FreshStep(bytes, false, 0, devs[t], s * n + t, &results[t]);
    });
  }
  for (auto& th : threads) th.join();
  const double wall = Us(start, Clock::now());
  Result all;
  all.bytes = bytes;
  for (int t = 0; t < n; ++t) {
    all.checksum = all.checksum * 31 + results[t].checksum + DeviceHash(devs[t], bytes);
    CHECK(cudaFree(devs[t]));
  }
  // Aggregate rates: every thread's bytes each way over the whole run's
  // wall time split by each direction's share of the summed call time.
  double h2d = 0, d2h = 0;
  for (auto& r : results) {
    for (double v : r.h2d_us) h2d += v;
    for (double v : r.d2h_us) d2h += v;
  }
  const double total = double(bytes) * steps * n;
  const double h2d_wall = wall * h2d / (h2d + d2h), d2h_wall = wall * d2h / (h2d + d2h);
  printf(
      "cell=%s h2d_gbps=%.3f d2h_gbps=%.3f step_us=%.1f h2d_call_us=%.1f "
      "d2h_call_us=%.1f checksum=%016llx\n",
      Tagged("threads:" + std::to_string(bytes) + ":" + std::to_string(n)).c_str(),
      total / h2d_wall / 1e3, total / d2h_wall / 1e3, wall / steps, h2d / n / steps,
      d2h / n / steps, static_cast<unsigned long long>(all.checksum));
  fflush(stdout);
}

std::atomic<bool> g_spin_stop{false};
std::vector<std::thread> g_spinners;

void Busy(int k) {
  g_busy = k;
  g_spin_stop.store(true);
  for (auto& t : g_spinners) t.join();
  g_spinners.clear();
  g_spin_stop.store(false);
  for (int i = 0; i < k; ++i) {
    g_spinners.emplace_back([] {
      volatile uint64_t x = 0;
      while (!g_spin_stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  for (;;) {
    size_t j = s.find(':', i);
    out.push_back(s.substr(i, j - i));
    if (j == std::string::npos) return out;
    i = j + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CELL...  (see the source's header)\n", argv[0]);
    return 2;
  }
  CHECK(cudaFree(nullptr));  // the context, before anything is timed
  for (int i = 1; i < argc; ++i) {
    const std::vector<std::string> f = Split(argv[i]);
    const size_t bytes = f.size() > 1 ? strtoull(f[1].c_str(), nullptr, 0) : 0;
    if (f[0] == "fresh" && f.size() == 3) {
      Fresh(bytes, f[2] == "async");
    } else if ((f[0] == "reuse" || f[0] == "pinned") && f.size() == 3) {
      Reuse(bytes, atoi(f[2].c_str()), f[0] == "pinned");
    } else if (f[0] == "cold" && f.size() == 2) {
      Cold(bytes);
    } else if ((f[0] == "bw" || f[0] == "bwpinned") && f.size() == 2) {
      Bandwidth(bytes, f[0] == "bwpinned");
    } else if (f[0] == "threads" && f.size() == 3) {
      Threads(bytes, atoi(f[2].c_str()));
    } else if (f[0] == "busy" && f.size() == 2) {
      Busy(atoi(f[1].c_str()));
    } else {
      fprintf(stderr, "pattern_matrix: bad cell '%s'\n", argv[i]);
      return 2;
    }
  }
  Busy(0);
  return 0;
}
