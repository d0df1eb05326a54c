// One pinned input and one pinned output buffer per stream (the pattern of
// data loaders with a worker per stream): a stream's buffers are refilled
// and read only after that stream was synchronized; the other streams'
// copies keep running meanwhile.
#include <vector>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr int kStreams = 3;
  constexpr size_t kBytes = 192 << 10;
  struct Lane {
    CUstream stream;
    void* in;
    void* out;
    CUdeviceptr dev;
  };
  std::vector<Lane> lanes(kStreams);
  for (Lane& l : lanes) {
    CHECK(cuStreamCreate(&l.stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemHostAlloc(&l.in, kBytes, 0));
    CHECK(cuMemAllocHost(&l.out, kBytes));
    CHECK(cuMemAlloc(&l.dev, kBytes));
  }
  bool ok = true;
  for (int step = 0; step < 6; ++step) {
    Lane& l = lanes[step % kStreams];
    if (step >= kStreams) {
      CHECK(cuStreamSynchronize(l.stream));
      ok = ok && corpus::Holds(l.out, kBytes, step - kStreams);
    }
    corpus::Fill(l.in, kBytes, step);
    CHECK(cuMemcpyHtoDAsync(l.dev, l.in, kBytes, l.stream));
    CHECK(cuMemcpyDtoHAsync(l.out, l.dev, kBytes, l.stream));
  }
  for (int i = 0; i < kStreams; ++i) {
    Lane& l = lanes[(6 + i) % kStreams];
    CHECK(cuStreamSynchronize(l.stream));
    ok = ok && corpus::Holds(l.out, kBytes, 6 - kStreams + i);
  }
  for (Lane& l : lanes) {
    CHECK(cuMemFreeHost(l.in));
    CHECK(cuMemFreeHost(l.out));
    CHECK(cuMemFree(l.dev));
    CHECK(cuStreamDestroy(l.stream));
  }
  return corpus::Finish(ok, "buffer_per_stream");
}
