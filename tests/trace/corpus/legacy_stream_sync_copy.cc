// Work ordered by the legacy default stream: asynchronous copies on a
// blocking stream, then a synchronous copy on the legacy stream, which
// waits for them first (the legacy stream synchronizes with blocking
// streams, and a synchronous copy returns once it ran); then the results.
#include <vector>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 256 << 10;
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_DEFAULT));
  void* up;
  void* down;
  CHECK(cuMemHostAlloc(&up, kBytes, 0));
  CHECK(cuMemHostAlloc(&down, kBytes, 0));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes));
  std::vector<unsigned char> small(4096);
  bool ok = true;
  for (int i = 0; i < 5; ++i) {
    corpus::Fill(up, kBytes, i);
    CHECK(cuMemcpyHtoDAsync(dev, up, kBytes, s));
    CHECK(cuMemcpyDtoHAsync(down, dev, kBytes, s));
    CHECK(cuMemcpyDtoH(small.data(), dev, small.size()));  // legacy stream, synchronous
    ok = ok && corpus::Holds(down, kBytes, i) && corpus::Holds(small.data(), small.size(), i);
  }
  CHECK(cuMemFree(dev));
  CHECK(cuMemFreeHost(up));
  CHECK(cuMemFreeHost(down));
  CHECK(cuStreamDestroy(s));
  return corpus::Finish(ok, "legacy_stream_sync_copy");
}
