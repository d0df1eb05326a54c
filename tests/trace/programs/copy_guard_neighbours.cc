// No misuse, with PINSHIM_COPY_GUARD=1: threads update data that shares the
// end pages of a range (before it and after it, in one pinned block)
// while downloads into the range are queued and waited for over and over.
// The guard must report nothing, lose no update and harm nothing: the
// program prints the same with the guard as without pinshim.
#include <stdint.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  constexpr size_t kPage = 4096;
  constexpr size_t kBytes = 17 * kPage;  // above small-copies' size
  constexpr int kThreads = 4;
  char* block = static_cast<char*>(cuda::HostAlloc(kBytes + 4 * kPage));
  // The range starts and ends in the middle of pages, 512 bytes in.
  const uintptr_t first = (reinterpret_cast<uintptr_t>(block) + kPage) & ~uintptr_t{kPage - 1};
  char* buf = reinterpret_cast<char*>(first + 512);
  volatile long* before = reinterpret_cast<volatile long*>(buf - 256);
  volatile long* after = reinterpret_cast<volatile long*>(buf + kBytes + 64);
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();

  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<long> done(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      volatile long* mine = (t % 2 == 0 ? before : after) + t;
      *mine = 0;
      started.fetch_add(1);
      long n = 0;
      while (!stop.load(std::memory_order_relaxed) || n < 1000) {
        *mine = *mine + 1;
        ++n;
      }
      done[t] = n;
    });
  }
  while (started.load() < kThreads) std::this_thread::yield();
  for (int i = 0; i < 300; ++i) {
    if (i % 2 == 0) {
      cuda::MemcpyDtoHAsync(buf, dev, kBytes, stream);
    } else {
      cuda::MemcpyHtoDAsync(dev, buf, kBytes, stream);
    }
    cuda::StreamSynchronize(stream);
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  bool ok = true;
  for (int t = 0; t < kThreads; ++t) ok = ok && ((t % 2 == 0 ? before : after) + t)[0] == done[t];
  printf("neighbours %s\n", ok ? "ok" : "lost updates");
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  cuda::FreeHost(block);
  return ok ? 0 : 1;
}
