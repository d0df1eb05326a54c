// Releases with work still queued: cuMemHostUnregister, cuMemFreeHost and
// cuMemFree each wait for the device's queued work before they return
// (measured on the H200, driver 580, blocking and non-blocking streams
// alike), so releasing through the driver right after queuing copies is
// correct, if slow. The registered buffer is freed after its unregister.
#include <cstdlib>
#include <vector>

#include <initializer_list>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 1 << 20;
  CUstream blocking, non_blocking;
  CHECK(cuStreamCreate(&blocking, 0));
  CHECK(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes));
  std::vector<unsigned char> expect(kBytes);
  corpus::Fill(expect.data(), kBytes, 9);
  CHECK(cuMemcpyHtoD(dev, expect.data(), kBytes));
  for (CUstream s : {blocking, non_blocking}) {
    char* reg = static_cast<char*>(malloc(kBytes));
    CHECK(cuMemHostRegister(reg, kBytes, 0));
    CHECK(cuMemcpyDtoHAsync(reg, dev, kBytes, s));
    CHECK(cuMemHostUnregister(reg));  // waits for the download
    free(reg);
    void* pinned;
    CHECK(cuMemHostAlloc(&pinned, kBytes, 0));
    CHECK(cuMemcpyHtoDAsync(dev, pinned, kBytes, s));
    CHECK(cuMemcpyHtoDAsync(dev, expect.data(), kBytes, s));
    CHECK(cuMemFreeHost(pinned));  // waits for both uploads
    CUdeviceptr scratch;
    CHECK(cuMemAlloc(&scratch, kBytes));
    void* out;
    CHECK(cuMemHostAlloc(&out, kBytes, 0));
    CHECK(cuMemcpyDtoDAsync(scratch, dev, kBytes, s));
    CHECK(cuMemcpyDtoHAsync(out, scratch, kBytes, s));
    CHECK(cuMemFree(scratch));  // waits for the queued work too
    bool ok = corpus::Holds(out, kBytes, 9);
    CHECK(cuMemFreeHost(out));
    if (!ok) return corpus::Finish(false, "release_with_work_queued");
  }
  CHECK(cuStreamDestroy(blocking));
  CHECK(cuStreamDestroy(non_blocking));
  CHECK(cuMemFree(dev));
  return corpus::Finish(true, "release_with_work_queued");
}
