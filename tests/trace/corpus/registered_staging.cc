// Registering the program's own buffers for each batch (as I/O libraries
// do for memory they did not allocate): register, copy asynchronously,
// synchronize, read with memcpy, unregister, free; mmap'd memory too.
#include <sys/mman.h>

#include <cstdlib>
#include <vector>

#include "tests/trace/corpus/corpus.h"

int main() {
  corpus::Init();
  constexpr size_t kBytes = 1 << 20;
  CUstream s;
  CHECK(cuStreamCreate(&s, 0));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes));
  std::vector<unsigned char> check(kBytes);
  bool ok = true;
  for (int batch = 0; batch < 4; ++batch) {
    const bool mapped = batch % 2 == 1;
    void* buf =
        mapped ? mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
               : aligned_alloc(4096, kBytes);
    if (buf == nullptr || buf == MAP_FAILED) return 2;
    CHECK(cuMemHostRegister(buf, kBytes, CU_MEMHOSTREGISTER_PORTABLE));
    corpus::Fill(buf, kBytes, batch);
    CHECK(cuMemcpyHtoDAsync(dev, buf, kBytes, s));
    CHECK(cuStreamSynchronize(s));
    memset(buf, 0, kBytes);
    CHECK(cuMemcpyDtoHAsync(buf, dev, kBytes, s));
    CHECK(cuStreamSynchronize(s));
    memcpy(check.data(), buf, kBytes);
    ok = ok && corpus::Holds(check.data(), kBytes, batch);
    CHECK(cuMemHostUnregister(buf));
    if (mapped) {
      munmap(buf, kBytes);
    } else {
      free(buf);
    }
  }
  CHECK(cuMemFree(dev));
  CHECK(cuStreamDestroy(s));
  return corpus::Finish(ok, "registered_staging");
}
