// Streams made with priorities (as inference servers make a high-priority
// stream for latency-critical requests), one blocking and one non-blocking;
// events recorded with cuEventRecordWithFlags; the host waits for each
// request's event before reading its reply.
#include <initializer_list>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 64 << 10;
  CUstream urgent, bulk;
  CHECK(cuStreamCreateWithPriority(&urgent, CU_STREAM_NON_BLOCKING, -1));
  CHECK(cuStreamCreateWithPriority(&bulk, CU_STREAM_DEFAULT, 0));
  CUevent replied[2];
  for (CUevent& e : replied) CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  void* req[2];
  void* rep[2];
  CUdeviceptr dev[2];
  for (int i = 0; i < 2; ++i) {
    CHECK(cuMemHostAlloc(&req[i], kBytes, 0));
    CHECK(cuMemHostAlloc(&rep[i], kBytes, 0));
    CHECK(cuMemAlloc(&dev[i], kBytes));
  }
  bool ok = true;
  for (int n = 0; n < 10; ++n) {
    CUstream s = n % 2 ? urgent : bulk;
    int i = n % 2;
    if (n >= 2) {
      CHECK(cuEventSynchronize(replied[i]));
      ok = ok && corpus::Holds(rep[i], kBytes, n - 2);
    }
    corpus::Fill(req[i], kBytes, n);
    CHECK(cuMemcpyHtoDAsync(dev[i], req[i], kBytes, s));
    CHECK(cuMemcpyDtoHAsync(rep[i], dev[i], kBytes, s));
    CHECK(cuEventRecordWithFlags(replied[i], s, 0));
  }
  for (int i = 0; i < 2; ++i) {
    CHECK(cuEventSynchronize(replied[i]));
    ok = ok && corpus::Holds(rep[i], kBytes, 8 + i);
    CHECK(cuEventDestroy(replied[i]));
    CHECK(cuMemFreeHost(req[i]));
    CHECK(cuMemFreeHost(rep[i]));
    CHECK(cuMemFree(dev[i]));
  }
  CHECK(cuStreamDestroy(urgent));
  CHECK(cuStreamDestroy(bulk));
  return corpus::Finish(ok, "priority_streams");
}
