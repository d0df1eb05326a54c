// Misuse, with PINSHIM_COPY_GUARD=1: plain accesses to the first and the
// last byte of a queued download into a malloc'd buffer that glibc mapped
// for itself, registered with cuMemHostRegister. Its first page holds only
// the chunk's header besides the range, its last only the chunk's padding:
// both are guarded, and both accesses are caught at their lines. Reading
// the padding and malloc_usable_size on those pages meanwhile is neither
// reported nor harmed, nor is freeing the buffer once its downloads are
// done.
//
// A buffer smaller than one freed just before would come from glibc's heap
// (freeing a mapped block raises glibc's mapping threshold to its size);
// with the guard on, that threshold stays at the tracking threshold, glibc
// maps the buffer for itself, and its first byte is caught too.
//
// A buffer below the tracking threshold comes from the heap and shares its
// first page with other blocks, which any thread may touch: that page stays
// open. A thread that blocks every signal (as the driver's do) updates a
// block on it during downloads, and the buffer's first byte is read during
// one, unreported; a byte on an inner page is caught. The program prints the
// same with the guard as without pinshim.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

constexpr uintptr_t kPage = 4096;

uintptr_t PageOf(const volatile void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kPage - 1); }

void Fill(char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>(i * 7 + 1);
}

bool Holds(const volatile char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != static_cast<char>(i * 7 + 1)) return false;
  }
  return true;
}

// The size field of the malloc chunk whose buffer is p (glibc's header).
size_t ChunkSizeField(const void* p) {
  return *reinterpret_cast<const volatile size_t*>(reinterpret_cast<uintptr_t>(p) - sizeof(size_t));
}

// Exits when the layout the program tests is not what glibc gave: then the
// program would prove nothing.
void Require(bool layout, const char* what) {
  if (layout) return;
  fprintf(stderr, "copy_race_guard_malloc: %s\n", what);
  exit(2);
}

// Puts the pattern on the device from buf (n bytes), clears buf and
// registers it, ready for downloads; returns the device buffer.
void* ReadyForDownloads(char* buf, size_t n) {
  Fill(buf, n);
  void* dev = cuda::DeviceAlloc(n);
  cuda::MemcpyHtoD(dev, buf, n);
  memset(buf, 0, n);
  cuda::HostRegister(buf, n);
  return dev;
}

// The buffer glibc mapped for itself: first and last byte caught.
int MappedBuffer(cuda::Stream stream) {
  const size_t n = (8u << 20) + 1000;  // its end in the middle of a page
  char* buf = static_cast<char*>(malloc(n));
  Require((ChunkSizeField(buf) & 2) != 0, "the buffer is not mapped by glibc");
  Require(PageOf(buf) != reinterpret_cast<uintptr_t>(buf), "the buffer starts a page");
  const size_t usable = malloc_usable_size(buf);
  Require(usable > n && PageOf(buf + usable - 1) == PageOf(buf + n - 1), "no padding after it");
  void* dev = ReadyForDownloads(buf, n);

  cuda::MemcpyDtoHAsync(buf, dev, n, stream);
  volatile char* padding = buf + usable - 1;
  int seen = *padding;  // the chunk's padding, on the last page: no finding
  seen += buf[0];       // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);

  cuda::MemcpyDtoHAsync(buf, dev, n, stream);
  const size_t again = malloc_usable_size(buf);  // the header: no finding
  seen += buf[n - 1];                            // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);
  const bool ok = Holds(buf, n) && again == usable;

  cuda::HostUnregister(buf);
  free(buf);  // its downloads done: nothing to report, nothing harmed
  cuda::DeviceFree(dev);
  printf("mapped buffer %s\n", ok ? "ok" : "wrong");
  return seen;
}

// A buffer smaller than one just freed: its first byte caught.
int ReusedBuffer(cuda::Stream stream) {
  const size_t n = (1u << 20) + 1000;
  // Without the guard, glibc serves the next one from its heap. (Through a
  // volatile pointer: the compiler may drop a block that is never used.)
  void* volatile larger = malloc(4 * n);
  free(larger);
  char* buf = static_cast<char*>(malloc(n));
  Require(PageOf(buf) != reinterpret_cast<uintptr_t>(buf), "the buffer starts a page");
  void* dev = ReadyForDownloads(buf, n);
  cuda::MemcpyDtoHAsync(buf, dev, n, stream);
  int seen = buf[0];  // MISUSE(copy-race)
  cuda::StreamSynchronize(stream);
  const bool ok = Holds(buf, n);
  cuda::HostUnregister(buf);
  free(buf);
  cuda::DeviceFree(dev);
  printf("reused buffer %s\n", ok ? "ok" : "wrong");
  return seen;
}

struct Neighbour {
  long counter;
  char pad[24];
};

// The heap buffer: its first page, shared with `nb`, stays open.
int HeapBuffer(cuda::Stream stream) {
  const size_t n = 48 << 10;  // under the tracking threshold: glibc's heap
  // The heap a real driver's start-up leaves may serve the two from holes
  // apart: pairs are taken until one lies as this case needs (the others
  // are kept until the end, so no pair comes back).
  constexpr int kTries = 64;
  void* kept[2 * kTries];
  int nkept = 0;
  volatile Neighbour* nb = nullptr;
  char* buf = nullptr;
  for (int i = 0; i < kTries && buf == nullptr; ++i) {
    auto* a = static_cast<volatile Neighbour*>(malloc(sizeof(Neighbour)));
    auto* b = static_cast<char*>(malloc(n));
    if (PageOf(a) == PageOf(b) && PageOf(b) != reinterpret_cast<uintptr_t>(b)) {
      nb = a;
      buf = b;
    } else {
      kept[nkept++] = const_cast<Neighbour*>(a);
      kept[nkept++] = b;
    }
  }
  Require(buf != nullptr, "the neighbour is not on the buffer's first page");
  Require((ChunkSizeField(buf) & 2) == 0, "the small buffer is mapped by glibc");
  Fill(buf, n);
  void* dev = cuda::DeviceAlloc(n);
  cuda::MemcpyHtoD(dev, buf, n);
  cuda::HostRegister(buf, n);
  nb->counter = 0;

  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  long done = 0;
  std::thread t([&] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);  // as the driver's threads do
    started.store(true);
    long k = 0;
    while (!stop.load(std::memory_order_relaxed) || k < 1000) {
      nb->counter = nb->counter + 1;
      ++k;
    }
    done = k;
  });
  while (!started.load()) std::this_thread::yield();
  int seen = 0;
  for (int i = 0; i < 50; ++i) {
    cuda::MemcpyDtoHAsync(buf, dev, n, stream);
    if (i == 10) seen += buf[0];          // the shared first page is open: not seen
    if (i == 20) seen += buf[2 * kPage];  // MISUSE(copy-race)
    cuda::StreamSynchronize(stream);
  }
  stop.store(true);
  t.join();
  const bool ok = Holds(buf, n) && nb->counter == done;
  cuda::HostUnregister(buf);
  free(buf);
  free(const_cast<Neighbour*>(nb));
  for (int i = 0; i < nkept; ++i) free(kept[i]);
  cuda::DeviceFree(dev);
  printf("heap buffer %s\n", ok ? "ok" : "wrong");
  return seen;
}

int main() {
  cuda::Stream stream = cuda::StreamCreate();
  int seen = HeapBuffer(stream);
  seen += ReusedBuffer(stream);
  seen += MappedBuffer(stream);
  cuda::StreamDestroy(stream);
  return seen > 100000 ? 1 : 0;
}
