// How pinning a staging ring disturbs the program's own copies, through the
// driver API: one thread uploads a fresh-written 1 MiB pageable buffer again
// and again (cuMemcpyHtoD) while another pins 16 MiB, either with
// cuMemHostAlloc or as anonymous memory made present first (MAP_POPULATE)
// and then registered (cuMemHostRegister, portable). Prints, per method and
// round, the pinning call's time and the longest upload that overlapped it,
// against the longest upload of a quiet stretch before. Then what the
// driver does with a registration when its context is reset: the range
// registered again in the new primary context, and unregistered.
//
// Usage: ring_pin_probe [ROUNDS]
#include <cuda.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

double NowUs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

constexpr size_t kRing = size_t{16} << 20;
constexpr size_t kCopy = size_t{1} << 20;

struct Window {
  double begin = 0, end = 0;
};

// Uploads until stop; each upload's start and end.
void Uploader(CUcontext ctx, CUdeviceptr dev, std::atomic<bool>* stop,
              std::vector<std::pair<double, double>>* out) {
  DCHECK(cuCtxSetCurrent(ctx));
  std::vector<char> buf(kCopy);
  for (int i = 0; !stop->load(); ++i) {
    memset(buf.data(), i, kCopy);
    const double a = NowUs();
    DCHECK(cuMemcpyHtoD(dev, buf.data(), kCopy));
    out->emplace_back(a, NowUs());
  }
}

// One pin of 16 MiB by `method` (0 cuMemHostAlloc, 1 populate + register);
// the pinning call's window, and the memory freed again.
Window PinOnce(int method) {
  Window w;
  if (method == 0) {
    void* p = nullptr;
    w.begin = NowUs();
    DCHECK(cuMemHostAlloc(&p, kRing, CU_MEMHOSTALLOC_PORTABLE));
    w.end = NowUs();
    DCHECK(cuMemFreeHost(p));
  } else {
    const double populate = NowUs();
    void* p = mmap(nullptr, kRing, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) exit(1);
    w.begin = NowUs();
    DCHECK(cuMemHostRegister(p, kRing, CU_MEMHOSTREGISTER_PORTABLE));
    w.end = NowUs();
    printf("  populate_us=%.0f", w.begin - populate);
    DCHECK(cuMemHostUnregister(p));
    munmap(p, kRing);
  }
  return w;
}

double LongestIn(const std::vector<std::pair<double, double>>& ups, double lo, double hi) {
  double m = 0;
  for (const auto& u : ups) {
    if (u.second > lo && u.first < hi) m = std::max(m, u.second - u.first);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 5;
  DCHECK(cuInit(0));
  CUdevice d;
  DCHECK(cuDeviceGet(&d, 0));
  CUcontext ctx;
  DCHECK(cuDevicePrimaryCtxRetain(&ctx, d));
  DCHECK(cuCtxSetCurrent(ctx));
  CUdeviceptr dev;
  DCHECK(cuMemAlloc(&dev, kCopy));
  for (int r = 0; r < rounds; ++r) {
    for (int method = 0; method < 2; ++method) {
      std::atomic<bool> stop{false};
      std::vector<std::pair<double, double>> ups;
      ups.reserve(1 << 16);
      std::thread t(Uploader, ctx, dev, &stop, &ups);
      struct timespec wait = {0, 30 * 1000 * 1000};
      nanosleep(&wait, nullptr);
      const double quiet_end = NowUs();
      printf("round=%d method=%s", r, method == 0 ? "hostalloc" : "register");
      const Window w = PinOnce(method);
      nanosleep(&wait, nullptr);
      stop.store(true);
      t.join();
      printf(" pin_us=%.0f longest_upload_during_us=%.0f longest_upload_quiet_us=%.0f\n",
             w.end - w.begin, LongestIn(ups, w.begin, w.end),
             LongestIn(ups, quiet_end - 25000, quiet_end));
    }
  }
  // A registration across a reset of its primary context.
  void* p = mmap(nullptr, kRing, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  DCHECK(cuMemHostRegister(p, kRing, CU_MEMHOSTREGISTER_PORTABLE));
  DCHECK(cuMemFree(dev));
  DCHECK(cuDevicePrimaryCtxReset(d));
  DCHECK(cuDevicePrimaryCtxRetain(&ctx, d));
  DCHECK(cuCtxSetCurrent(ctx));
  unsigned int flags = 0;
  const CUresult flags_r = cuMemHostGetFlags(&flags, p);
  const CUresult again = cuMemHostRegister(p, kRing, CU_MEMHOSTREGISTER_PORTABLE);
  const CUresult unreg = cuMemHostUnregister(p);
  printf("after_reset: get_flags=%d register_again=%d unregister=%d\n", flags_r, again, unreg);
  return 0;
}
