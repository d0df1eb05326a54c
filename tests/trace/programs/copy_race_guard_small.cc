// Misuse, with PINSHIM_COPY_GUARD=1 and PINSHIM_TRACK_THRESHOLD=4K: a
// registered malloc'd buffer of 24 KiB, which glibc would carve from its
// heap next to other blocks, is mapped by glibc for itself with the guard
// on and the tracking threshold below its size; the first and the last byte
// read during queued downloads into it are caught at their lines. A block
// allocated just before it, in use throughout, is unharmed. The program
// prints the same with the guard as without pinshim.
#include <stdint.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

int main() {
  cuda::Stream stream = cuda::StreamCreate();
  const size_t n = (24 << 10) + 100;  // its end in the middle of a page
  char* before = static_cast<char*>(malloc(200));
  char* buf = static_cast<char*>(malloc(n));
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<char>(i * 5 + 3);
  void* dev = cuda::DeviceAlloc(n);
  cuda::MemcpyHtoD(dev, buf, n);
  memset(buf, 0, n);
  cuda::HostRegister(buf, n);
  snprintf(before, 200, "before");

  volatile char* read = buf;  // each read made where it stands
  cuda::MemcpyDtoHAsync(buf, dev, n, stream);
  int seen = read[0];  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);
  cuda::MemcpyDtoHAsync(buf, dev, n, stream);
  seen += read[n - 1];  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);

  bool ok = strcmp(before, "before") == 0;
  for (size_t i = 0; i < n; ++i) ok = ok && buf[i] == static_cast<char>(i * 5 + 3);
  cuda::HostUnregister(buf);
  free(buf);
  free(before);
  cuda::DeviceFree(dev);
  cuda::StreamDestroy(stream);
  printf("small buffer %s\n", ok ? "ok" : "wrong");
  return seen > 100000 ? 1 : 0;
}
