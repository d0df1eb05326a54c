// Cross-stream dependencies through events (cudaStreamWaitEvent), as
// frameworks chain a copy stream and a compute stream: the upload runs on a
// copy stream, the compute stream waits for it, the download stream waits
// for the compute stream, and the host waits for an event on the last
// stream only. Every stream is non-blocking.
#include <initializer_list>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 512 << 10;
  CUstream copy_in, compute, copy_out;
  CHECK(cuStreamCreate(&copy_in, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&compute, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&copy_out, CU_STREAM_NON_BLOCKING));
  CUevent uploaded, computed, downloaded;
  CHECK(cuEventCreate(&uploaded, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventCreate(&computed, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventCreate(&downloaded, CU_EVENT_DISABLE_TIMING));
  void* in;
  void* out;
  CHECK(cuMemHostAlloc(&in, kBytes, 0));
  CHECK(cuMemHostAlloc(&out, kBytes, 0));
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, kBytes));
  CHECK(cuMemAlloc(&b, kBytes));
  bool ok = true;
  for (int step = 0; step < 5; ++step) {
    corpus::Fill(in, kBytes, step);
    CHECK(cuMemcpyHtoDAsync(a, in, kBytes, copy_in));
    CHECK(cuEventRecord(uploaded, copy_in));
    CHECK(cuStreamWaitEvent(compute, uploaded, 0));
    CHECK(cuMemcpyDtoDAsync(b, a, kBytes, compute));
    CHECK(cuEventRecord(computed, compute));
    CHECK(cuStreamWaitEvent(copy_out, computed, 0));
    CHECK(cuMemcpyDtoHAsync(out, b, kBytes, copy_out));
    CHECK(cuEventRecord(downloaded, copy_out));
    CHECK(cuEventSynchronize(downloaded));
    // The upload's source is free again too: the chain ends after it.
    ok = ok && corpus::Holds(out, kBytes, step);
  }
  for (CUevent e : {uploaded, computed, downloaded}) CHECK(cuEventDestroy(e));
  for (CUstream s : {copy_in, compute, copy_out}) CHECK(cuStreamDestroy(s));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuMemFreeHost(in));
  CHECK(cuMemFreeHost(out));
  return corpus::Finish(ok, "wait_event_chain");
}
