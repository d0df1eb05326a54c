// A build with the per-thread default stream (nvcc --default-stream
// per-thread defines the same macro): worker threads copy on their own
// default stream, each synchronizes its own stream, then reads its results.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <thread>
#include <vector>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr int kThreads = 4;
  constexpr size_t kBytes = 256 << 10;
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([t, &ok] {
      corpus::Init();
      void* host;
      CHECK(cuMemHostAlloc(&host, kBytes, 0));
      CUdeviceptr dev;
      CHECK(cuMemAlloc(&dev, kBytes));
      bool good = true;
      for (int i = 0; i < 4; ++i) {
        corpus::Fill(host, kBytes, t * 10 + i);
        CHECK(cuMemcpyHtoDAsync(dev, host, kBytes, 0));  // this thread's default stream
        CHECK(cuMemcpyDtoHAsync(host, dev, kBytes, 0));
        CHECK(cuStreamSynchronize(0));
        good = good && corpus::Holds(host, kBytes, t * 10 + i);
      }
      CHECK(cuMemFree(dev));
      CHECK(cuMemFreeHost(host));
      ok[t] = good ? 1 : 0;
    });
  }
  for (auto& w : workers) w.join();
  bool all = true;
  for (int v : ok) all = all && v == 1;
  return corpus::Finish(all, "ptds_threads");
}
