// Polling instead of blocking (as CPU-side schedulers do): the host works
// while a download runs and checks cuEventQuery until the event recorded
// behind it completes; only then is the destination read.
#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 1 << 20;
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* in;
  void* out;
  CHECK(cuMemAllocHost(&in, kBytes));
  CHECK(cuMemAllocHost(&out, kBytes));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes));
  CUevent done;
  CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  corpus::Fill(in, kBytes, 5);
  CHECK(cuMemcpyHtoDAsync(dev, in, kBytes, s));
  CHECK(cuMemcpyDtoHAsync(out, dev, kBytes, s));
  CHECK(cuEventRecord(done, s));
  unsigned long polls = 0;
  for (;;) {
    CUresult r = cuEventQuery(done);
    if (r == CUDA_SUCCESS) break;
    if (r != CUDA_ERROR_NOT_READY) CHECK(r);
    ++polls;  // other work would go here
  }
  bool ok = corpus::Holds(out, kBytes, 5);
  // The same with the stream itself.
  corpus::Fill(in, kBytes, 6);
  CHECK(cuMemcpyHtoDAsync(dev, in, kBytes, s));
  CHECK(cuMemcpyDtoHAsync(out, dev, kBytes, s));
  while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY) ++polls;
  ok = ok && corpus::Holds(out, kBytes, 6);
  CHECK(cuEventDestroy(done));
  CHECK(cuMemFree(dev));
  CHECK(cuMemFreeHost(in));
  CHECK(cuMemFreeHost(out));
  CHECK(cuStreamDestroy(s));
  (void)polls;
  return corpus::Finish(ok, "event_query_poll");
}
