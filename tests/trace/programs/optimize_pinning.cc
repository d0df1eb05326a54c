// Optimize mode's own pinning, end to end (run with PINSHIM_MODE=optimize
// and PINSHIM_PIN_CAP=8M): a pinned buffer held throughout and pinned
// buffers allocated and freed in a loop (the pool), a hot malloc buffer (the
// registration cache pins it), a larger hot buffer the cap cannot take (its
// registration is refused), a second hot buffer that fits once the first is
// evicted, and two hot buffers pinshim must leave alone: static data and a
// piece of an mmap region. BUFFER(kind) marks where each buffer the test
// looks for is allocated.
#include <sys/mman.h>

#include <cstdio>
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

constexpr size_t kMiB = 1 << 20;
static char g_static_data[2 * kMiB];  // BUFFER(untracked)

static void Upload(void* dev, const void* host, size_t bytes, int times) {
  for (int i = 0; i < times; ++i) cuda::MemcpyHtoD(dev, host, bytes);
}

int main() {
  void* dev = cuda::DeviceAlloc(8 * kMiB);

  // Pool: one slab holds this block and serves the loop's.
  void* held = cuda::HostAlloc(1 * kMiB);
  for (int i = 0; i < 10; ++i) {
    void* p = cuda::HostAlloc(1 * kMiB);
    memset(p, i, 1 * kMiB);
    cuda::MemcpyHtoD(dev, p, 1 * kMiB);
    cuda::FreeHost(p);
  }

  // Registration cache: pinned after its first copies (4 MiB + the 2 MiB
  // slab fit the 8 MiB cap).
  char* hot = static_cast<char*>(cuda::Malloc(4 * kMiB));  // BUFFER(cache)
  memset(hot, 1, 4 * kMiB);
  Upload(dev, hot, 4 * kMiB, 10);

  // 7 MiB more cannot fit beside the slab even if `hot` were evicted:
  // refused, and `hot` stays pinned.
  char* big = static_cast<char*>(cuda::Malloc(7 * kMiB));  // BUFFER(refused)
  memset(big, 2, 7 * kMiB);
  Upload(dev, big, 7 * kMiB, 10);

  // Fits once `hot`, the least recently used registration, is evicted.
  char* next = static_cast<char*>(cuda::Malloc(4 * kMiB));  // BUFFER(evicts)
  memset(next, 4, 4 * kMiB);
  Upload(dev, next, 4 * kMiB, 10);

  // Not a tracked allocation.
  Upload(dev, g_static_data, 2 * kMiB, 20);

  // A custom allocator's arena: pieces of one mmap region.
  const int rw = PROT_READ | PROT_WRITE, anon = MAP_PRIVATE | MAP_ANONYMOUS;
  void* region = mmap(nullptr, 8 * kMiB, rw, anon, -1, 0);  // BUFFER(mmap_region)
  if (region == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(region, 3, 8 * kMiB);
  Upload(dev, static_cast<char*>(region) + 4 * kMiB, 2 * kMiB, 20);

  munmap(region, 8 * kMiB);
  cuda::Free(next);
  cuda::Free(big);
  cuda::Free(hot);
  cuda::FreeHost(held);
  cuda::DeviceFree(dev);
  return 0;
}
