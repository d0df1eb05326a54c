// Per-thread default streams mixed with the legacy stream: copies on the
// per-thread stream (CU_STREAM_PER_THREAD), then an event recorded on the
// legacy stream (CU_STREAM_LEGACY) and waited for. The per-thread stream is
// a blocking stream, so the legacy stream's event comes after its copies.
#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 384 << 10;
  void* host;
  CHECK(cuMemHostAlloc(&host, kBytes, CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes));
  CUevent legacy_done;
  CHECK(cuEventCreate(&legacy_done, 0));
  bool ok = true;
  for (int i = 0; i < 4; ++i) {
    corpus::Fill(host, kBytes, i);
    CHECK(cuMemcpyHtoDAsync(dev, host, kBytes, CU_STREAM_PER_THREAD));
    CHECK(cuMemcpyDtoHAsync(host, dev, kBytes, CU_STREAM_PER_THREAD));
    CHECK(cuEventRecord(legacy_done, CU_STREAM_LEGACY));
    CHECK(cuEventSynchronize(legacy_done));
    ok = ok && corpus::Holds(host, kBytes, i);
  }
  CHECK(cuEventDestroy(legacy_done));
  CHECK(cuMemFree(dev));
  CHECK(cuMemFreeHost(host));
  return corpus::Finish(ok, "ptds_legacy_mix");
}
