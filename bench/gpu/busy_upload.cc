// An upload loop of a DataLoader's shape through the driver API, for
// bench/gpu/busy_upload.sh: each step writes a fresh malloc'd buffer
// (memset), queues a device-to-device copy of BUSY bytes on a stream (the
// step's device work) and behind it an asynchronous upload of the buffer
// (cuMemcpyHtoDAsync), and frees the previous step's buffer. Prints the
// time a step after 4 untimed ones, the write's and the upload call's
// shares, and how many bytes of the last upload the device got wrong.
//
// Usage: busy_upload BYTES STEPS BUSY [DELAY_US]. DELAY_US: the simulated
// driver's copy delay (fakecuda_set_copy_delay_us), ignored by a real one.
#include <cuda.h>
#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"

namespace {

constexpr int kWarmSteps = 4;

double NowUs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: busy_upload BYTES STEPS BUSY [DELAY_US]\n");
    return 2;
  }
  const size_t n = strtoull(argv[1], nullptr, 0);
  const int steps = atoi(argv[2]);
  const size_t busy = strtoull(argv[3], nullptr, 0);
  if (n == 0 || busy == 0 || steps <= kWarmSteps) {
    fprintf(stderr, "busy_upload: BYTES and BUSY above 0, STEPS above %d\n", kWarmSteps);
    return 2;
  }
  using SetDelay = void (*)(unsigned);
  if (auto set_delay =
          reinterpret_cast<SetDelay>(dlsym(RTLD_DEFAULT, "fakecuda_set_copy_delay_us"))) {
    set_delay(argc > 4 ? static_cast<unsigned>(atoi(argv[4])) : 0);
  }
  CUdevice d;
  CUcontext c;
  CUdeviceptr dev, work;
  CUstream s;
  DCHECK(cuInit(0));
  DCHECK(cuDeviceGet(&d, 0));
  DCHECK(cuDevicePrimaryCtxRetain(&c, d));
  DCHECK(cuCtxSetCurrent(c));
  DCHECK(cuMemAlloc(&dev, n));
  DCHECK(cuMemAlloc(&work, 2 * busy));
  DCHECK(cuStreamCreate(&s, 0));
  unsigned char* prev = nullptr;
  double t0 = 0, write_us = 0, call_us = 0;
  for (int i = 0; i < steps; ++i) {
    if (i == kWarmSteps) {
      DCHECK(cuStreamSynchronize(s));
      t0 = NowUs();
    }
    auto* p = static_cast<unsigned char*>(malloc(n));
    if (p == nullptr) return 1;
    const double a = NowUs();
    memset(p, i & 255, n);
    const double b = NowUs();
    DCHECK(cuMemcpyDtoDAsync(work + busy, work, busy, s));
    DCHECK(cuMemcpyHtoDAsync(dev, p, n, s));
    if (i >= kWarmSteps) {
      write_us += b - a;
      call_us += NowUs() - b;
    }
    free(prev);
    prev = p;
  }
  DCHECK(cuStreamSynchronize(s));
  const double timed = steps - kWarmSteps;
  const double step_us = (NowUs() - t0) / timed;
  free(prev);
  auto* back = static_cast<unsigned char*>(malloc(n));
  if (back == nullptr) return 1;
  DCHECK(cuMemcpyDtoH(back, dev, n));
  size_t bad = 0;
  for (size_t k = 0; k < n; ++k) bad += back[k] != ((steps - 1) & 255);
  free(back);
  printf("bytes=%zu us_per_step=%.1f write_us=%.1f call_us=%.1f bad=%zu\n", n, step_us,
         write_us / timed, call_us / timed, bad);
  return bad == 0 ? 0 : 1;
}
