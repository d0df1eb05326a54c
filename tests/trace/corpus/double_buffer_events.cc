// Double buffering with events: two pinned staging buffers; while one
// buffer's upload runs, the CPU fills the other, after waiting for the
// event recorded behind that buffer's previous upload.
#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 512 << 10;
  constexpr int kSteps = 8;
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* stage[2];
  CUevent uploaded[2];
  for (int i = 0; i < 2; ++i) {
    CHECK(cuMemHostAlloc(&stage[i], kBytes, CU_MEMHOSTALLOC_WRITECOMBINED));
    CHECK(cuEventCreate(&uploaded[i], CU_EVENT_DISABLE_TIMING));
  }
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kSteps * kBytes));
  for (int step = 0; step < kSteps; ++step) {
    const int b = step % 2;
    if (step >= 2) CHECK(cuEventSynchronize(uploaded[b]));
    corpus::Fill(stage[b], kBytes, step);
    CHECK(cuMemcpyHtoDAsync(dev + step * kBytes, stage[b], kBytes, s));
    CHECK(cuEventRecord(uploaded[b], s));
  }
  CHECK(cuStreamSynchronize(s));
  bool ok = true;
  void* back;
  CHECK(cuMemAllocHost(&back, kBytes));
  for (int step = 0; step < kSteps; ++step) {
    CHECK(cuMemcpyDtoH(back, dev + step * kBytes, kBytes));
    ok = ok && corpus::Holds(back, kBytes, step);
  }
  CHECK(cuMemFreeHost(back));
  for (int i = 0; i < 2; ++i) {
    CHECK(cuEventDestroy(uploaded[i]));
    CHECK(cuMemFreeHost(stage[i]));
  }
  CHECK(cuMemFree(dev));
  CHECK(cuStreamDestroy(s));
  return corpus::Finish(ok, "double_buffer_events");
}
