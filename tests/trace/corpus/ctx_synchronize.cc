// Many streams, one barrier: copies fanned out over blocking and
// non-blocking streams, then cuCtxSynchronize (cudaDeviceSynchronize), then
// every result read with memcmp.
#include <vector>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr int kStreams = 6;
  constexpr size_t kBytes = 128 << 10;
  std::vector<CUstream> streams(kStreams);
  std::vector<void*> host(kStreams);
  std::vector<CUdeviceptr> dev(kStreams);
  std::vector<std::vector<unsigned char>> expect(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    CHECK(cuStreamCreate(&streams[i], i % 2 ? CU_STREAM_NON_BLOCKING : 0));
    CHECK(cuMemHostAlloc(&host[i], kBytes, 0));
    CHECK(cuMemAlloc(&dev[i], kBytes));
    expect[i].resize(kBytes);
    corpus::Fill(expect[i].data(), kBytes, i);
  }
  bool ok = true;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kStreams; ++i) {
      memcpy(host[i], expect[i].data(), kBytes);
      CHECK(cuMemcpyHtoDAsync(dev[i], host[i], kBytes, streams[i]));
      CHECK(cuMemcpyDtoHAsync(host[i], dev[i], kBytes, streams[i]));
    }
    CHECK(cuCtxSynchronize());
    for (int i = 0; i < kStreams; ++i) ok = ok && memcmp(host[i], expect[i].data(), kBytes) == 0;
  }
  for (int i = 0; i < kStreams; ++i) {
    CHECK(cuStreamDestroy(streams[i]));
    CHECK(cuMemFreeHost(host[i]));
    CHECK(cuMemFree(dev[i]));
  }
  return corpus::Finish(ok, "ctx_synchronize");
}
