// Misuse, with PINSHIM_COPY_GUARD=1: plain accesses to the first and the
// last byte of a queued download's range, each on a page the range shares
// with other data. The range starts inside a pinned block (cuMemHostAlloc),
// after a struct of the program's own, and ends before another. Accesses
// to those structs run unreported and unharmed: the program prints the
// same with the guard as without pinshim.
#include <stdint.h>

#include <cstdio>
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

struct Neighbour {
  long counter;
  char name[40];
};

constexpr size_t kPage = 4096;

// The range's offset in the block: past `before`, never page-aligned, so
// that its first page is shared.
size_t RangeOffset(const char* block) {
  size_t offset = 64;
  while ((reinterpret_cast<uintptr_t>(block) + offset) % kPage < 64) offset += 64;
  return offset;
}

// A length that ends the range in the middle of a page, before `after`.
size_t RangeBytes(const char* begin) {
  const size_t in_page = reinterpret_cast<uintptr_t>(begin) % kPage;
  return (24 << 10) + (2048 + kPage - in_page) % kPage;
}

bool Holds(const volatile char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != static_cast<char>(i * 7 + 1)) return false;
  }
  return true;
}

int main() {
  const size_t kMax = (24 << 10) + 2 * kPage;
  char* block = static_cast<char*>(cuda::HostAlloc(kMax + 256));
  const size_t offset = RangeOffset(block);
  volatile char* buf = block + offset;
  const size_t n = RangeBytes(const_cast<char*>(buf));
  auto* before = reinterpret_cast<volatile Neighbour*>(buf - 64);
  auto* after = reinterpret_cast<volatile Neighbour*>(buf + n + 8);
  char* src = static_cast<char*>(cuda::HostAlloc(kMax));
  for (size_t i = 0; i < kMax; ++i) src[i] = static_cast<char>(i * 7 + 1);
  void* dev = cuda::DeviceAlloc(kMax);
  cuda::MemcpyHtoD(dev, src, kMax);
  cuda::Stream stream = cuda::StreamCreate();
  before->counter = 1;
  after->counter = 2;

  // The data next to the range while a download is queued: no finding.
  cuda::MemcpyDtoHAsync(const_cast<char*>(buf), dev, n, stream);
  before->counter += 10;
  after->counter *= 21;
  snprintf(const_cast<char*>(before->name), sizeof(before->name), "before %ld", before->counter);
  cuda::StreamSynchronize(stream);
  bool ok = Holds(buf, n);

  cuda::MemcpyDtoHAsync(const_cast<char*>(buf), dev, n, stream);
  int seen = buf[0];  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);

  cuda::MemcpyDtoHAsync(const_cast<char*>(buf), dev, n, stream);
  after->counter += 1;  // first its neighbour on the last page: no finding
  seen += buf[n - 1];   // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);
  ok = ok && Holds(buf, n);

  printf("%s %ld\nafter %ld\ndata %s\n", const_cast<char*>(before->name), before->counter,
         after->counter, ok ? "ok" : "wrong");
  cuda::FreeHost(block);
  cuda::FreeHost(src);
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  return seen > 1000 ? 1 : 0;
}
