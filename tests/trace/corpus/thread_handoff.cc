// A producer thread downloads into pinned buffers and synchronizes its
// stream, then hands each buffer to a consumer thread through a queue (the
// consumer reads it with memcpy and hands it back): the wait happened on
// another thread, before the handoff.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 256 << 10;
  constexpr int kItems = 8;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, void*>> full, empty;
  for (int i = 0; i < 2; ++i) {
    void* p;
    CHECK(cuMemHostAlloc(&p, kBytes, 0));
    empty.push_back({-1, p});
  }
  bool ok = true;
  std::thread consumer([&] {
    std::vector<unsigned char> copy(kBytes);
    for (int n = 0; n < kItems; ++n) {
      std::pair<int, void*> item;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !full.empty(); });
        item = full.front();
        full.pop_front();
      }
      memcpy(copy.data(), item.second, kBytes);
      bool good = corpus::Holds(copy.data(), kBytes, item.first);
      std::lock_guard<std::mutex> lock(mu);
      ok = ok && good;
      empty.push_back({-1, item.second});
      cv.notify_all();
    }
  });
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes));
  std::vector<unsigned char> src(kBytes);
  for (int n = 0; n < kItems; ++n) {
    void* buf;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !empty.empty(); });
      buf = empty.front().second;
      empty.pop_front();
    }
    corpus::Fill(src.data(), kBytes, n);
    // On the stream the download uses: a synchronous upload from pageable
    // memory goes on the legacy stream and may return before its DMA
    // reached the device (the CUDA documentation says so), and a
    // non-blocking stream does not wait for the legacy one (the H200 gave
    // this program wrong results when the upload was made that way).
    CHECK(cuMemcpyHtoDAsync(dev, src.data(), kBytes, s));
    CHECK(cuMemcpyDtoHAsync(buf, dev, kBytes, s));
    CHECK(cuStreamSynchronize(s));
    std::lock_guard<std::mutex> lock(mu);
    full.push_back({n, buf});
    cv.notify_all();
  }
  consumer.join();
  for (auto& e : empty) CHECK(cuMemFreeHost(e.second));
  CHECK(cuMemFree(dev));
  CHECK(cuStreamDestroy(s));
  return corpus::Finish(ok, "thread_handoff");
}
