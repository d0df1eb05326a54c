// A multi-stream pipeline over one pinned buffer, as the CUDA samples'
// simpleStreams does: the buffer is cut into one chunk per stream, each
// chunk goes up, through a device-side step and back down on its own
// stream, and each stream is synchronized before its chunk is read.
#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr int kStreams = 4;
  constexpr size_t kChunk = 256 << 10;
  void* host;
  CHECK(cuMemHostAlloc(&host, kStreams * kChunk, 0));
  char* h = static_cast<char*>(host);
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, kStreams * kChunk));
  CHECK(cuMemAlloc(&b, kStreams * kChunk));
  CUstream s[kStreams];
  for (auto& st : s) CHECK(cuStreamCreate(&st, CU_STREAM_DEFAULT));
  bool ok = true;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kStreams; ++i) corpus::Fill(h + i * kChunk, kChunk, round * 10 + i);
    for (int i = 0; i < kStreams; ++i) {
      CHECK(cuMemcpyHtoDAsync(a + i * kChunk, h + i * kChunk, kChunk, s[i]));
      CHECK(cuMemcpyDtoDAsync(b + i * kChunk, a + i * kChunk, kChunk, s[i]));
      CHECK(cuMemcpyDtoHAsync(h + i * kChunk, b + i * kChunk, kChunk, s[i]));
    }
    for (int i = 0; i < kStreams; ++i) {
      CHECK(cuStreamSynchronize(s[i]));
      ok = ok && corpus::Holds(h + i * kChunk, kChunk, round * 10 + i);
    }
  }
  for (auto& st : s) CHECK(cuStreamDestroy(st));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuMemFreeHost(host));
  return corpus::Finish(ok, "multi_stream_pipeline");
}
