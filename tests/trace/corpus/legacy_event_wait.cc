// The pattern of a public CUDA sample that pinshim once reported 400 times:
// registered memory, copies queued on streams made with the default flags,
// an event recorded on the legacy default stream and waited for (the legacy
// stream waits for every blocking stream), then the results read and the
// memory unregistered.
#include <cstdlib>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr int kStreams = 4;
  constexpr size_t kChunk = 128 << 10;
  const size_t bytes = kStreams * kChunk;
  char* host = static_cast<char*>(aligned_alloc(4096, bytes));
  CHECK(cuMemHostRegister(host, bytes, 0));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, bytes));
  CUstream s[kStreams];
  for (auto& st : s) CHECK(cuStreamCreate(&st, 0));
  CUevent all_done;
  CHECK(cuEventCreate(&all_done, 0));
  bool ok = true;
  for (int iter = 0; iter < 50; ++iter) {
    corpus::Fill(host, bytes, iter);
    for (int i = 0; i < kStreams; ++i) {
      CHECK(cuMemcpyHtoDAsync(dev + i * kChunk, host + i * kChunk, kChunk, s[i]));
      CHECK(cuMemcpyDtoHAsync(host + i * kChunk, dev + i * kChunk, kChunk, s[i]));
    }
    CHECK(cuEventRecord(all_done, 0));
    CHECK(cuEventSynchronize(all_done));
    ok = ok && corpus::Holds(host, bytes, iter);
  }
  CHECK(cuMemHostUnregister(host));
  free(host);
  CHECK(cuEventDestroy(all_done));
  for (auto& st : s) CHECK(cuStreamDestroy(st));
  CHECK(cuMemFree(dev));
  return corpus::Finish(ok, "legacy_event_wait");
}
