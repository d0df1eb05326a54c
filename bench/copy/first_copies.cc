// A program's first copies through the driver API, for seeing what pinshim
// does inside each call: 8 steps of malloc, write, cuMemcpyHtoD, free;
// malloc, cuMemcpyDtoHAsync on the legacy stream, cuStreamSynchronize, free
// (the pattern matrix's cold cell). Each copy call is bracketed by two
// one-byte writes to an unopened descriptor (-1), which fail and do nothing
// but mark the call in a system call trace: first_copy_syscalls.sh counts
// the calling thread's system calls between them.
//
// Usage: first_copies [BYTES] [--faults] (default 1 MiB). --faults: after
// the steps, one line per copy call with the page faults the calling thread
// took inside it (minor, major) and its CPU time in it (us). Links
// libcuda.so.1 (the simulated driver in CI, or a real one).
#include <cuda.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// The calling thread's page faults and CPU time so far.
struct Sample {
  long minor = 0, major = 0;
  double cpu_us = 0;
};

Sample Now() {
  rusage u;
  getrusage(RUSAGE_THREAD, &u);
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return {u.ru_minflt, u.ru_majflt, t.tv_sec * 1e6 + t.tv_nsec / 1e3};
}

Sample g_at;

// Not inlined: a profiler can cut its profile at each call
// (valgrind --tool=callgrind --dump-after='*MarkCopyCall*').
__attribute__((noinline)) void MarkCopyCall() {
  const char c = 0;
  (void)!write(-1, &c, 1);
}

void Begin() {
  MarkCopyCall();
  g_at = Now();
}

// What the thread spent since Begin.
void End(Sample* spent) {
  const Sample now = Now();
  *spent = {now.minor - g_at.minor, now.major - g_at.major, now.cpu_us - g_at.cpu_us};
  MarkCopyCall();
}

bool Ok(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return true;
  fprintf(stderr, "first_copies: %s failed (%d)\n", what, static_cast<int>(r));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? strtoull(argv[1], nullptr, 0) : size_t{1} << 20;
  const bool faults = argc > 2 && strcmp(argv[2], "--faults") == 0;
  Sample spent[16];
  CUdevice d;
  CUcontext c;
  CUdeviceptr dev;
  if (!Ok(cuInit(0), "cuInit") || !Ok(cuDeviceGet(&d, 0), "cuDeviceGet") ||
      !Ok(cuDevicePrimaryCtxRetain(&c, d), "cuDevicePrimaryCtxRetain") ||
      !Ok(cuCtxSetCurrent(c), "cuCtxSetCurrent") || !Ok(cuMemAlloc(&dev, n), "cuMemAlloc")) {
    return 1;
  }
  unsigned long sum = 0;
  for (int i = 0; i < 8; ++i) {
    auto* up = static_cast<unsigned char*>(malloc(n));
    memset(up, i + 1, n);
    Begin();
    const bool up_ok = Ok(cuMemcpyHtoD(dev, up, n), "cuMemcpyHtoD");
    End(&spent[2 * i]);
    free(up);
    auto* down = static_cast<unsigned char*>(malloc(n));
    Begin();
    const bool down_ok = Ok(cuMemcpyDtoHAsync(down, dev, n, nullptr), "cuMemcpyDtoHAsync") &&
                         Ok(cuStreamSynchronize(nullptr), "cuStreamSynchronize");
    End(&spent[2 * i + 1]);
    if (!up_ok || !down_ok) return 1;
    sum += down[0] + down[n - 1];
    free(down);
  }
  printf("first_copies bytes=%zu checksum=%lu\n", n, sum);
  for (int i = 0; faults && i < 16; ++i) {
    printf("%s %d minor=%ld major=%ld cpu_us=%.1f\n", i % 2 == 0 ? "h2d" : "d2h", i / 2 + 1,
           spent[i].minor, spent[i].major, spent[i].cpu_us);
  }
  return 0;
}
