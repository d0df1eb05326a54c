// A caching pinned-host allocator as PyTorch's works: a block freed by the
// program is reused only after the event recorded on each stream that used
// it has completed (cuEventQuery in the allocator's free list scan); the
// program itself reads a block's download after synchronizing its stream.
#include <vector>

#include "tests/trace/corpus/corpus.h"

namespace {

constexpr size_t kBlock = 256 << 10;

struct Block {
  void* ptr = nullptr;
  CUevent last_use = nullptr;
  bool free = false;
  bool event_pending = false;
};

class CachingHostAllocator {
 public:
  void* Allocate() {
    for (Block& b : blocks_) {
      if (!b.free) continue;
      if (b.event_pending) {
        CUresult r = cuEventQuery(b.last_use);
        if (r == CUDA_ERROR_NOT_READY) continue;
        CHECK(r);
        b.event_pending = false;
      }
      b.free = false;
      return b.ptr;
    }
    Block b;
    CHECK(cuMemHostAlloc(&b.ptr, kBlock, 0));
    CHECK(cuEventCreate(&b.last_use, CU_EVENT_DISABLE_TIMING));
    blocks_.push_back(b);
    return b.ptr;
  }
  // The block was used on `stream` (recordStream) and is given back.
  void Free(void* p, CUstream stream) {
    for (Block& b : blocks_) {
      if (b.ptr != p) continue;
      CHECK(cuEventRecord(b.last_use, stream));
      b.event_pending = true;
      b.free = true;
    }
  }
  ~CachingHostAllocator() {
    for (Block& b : blocks_) {
      CHECK(cuEventSynchronize(b.last_use));
      CHECK(cuEventDestroy(b.last_use));
      CHECK(cuMemFreeHost(b.ptr));
    }
  }
  size_t blocks() const { return blocks_.size(); }

 private:
  std::vector<Block> blocks_;
};

}  // namespace

int main() {
  corpus::Init();
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, 16 * kBlock));
  bool ok = true;
  {
    CachingHostAllocator alloc;
    for (int step = 0; step < 16; ++step) {
      void* up = alloc.Allocate();
      corpus::Fill(up, kBlock, step);
      CHECK(cuMemcpyHtoDAsync(dev + step * kBlock, up, kBlock, s));  // tensor.to(non_blocking)
      alloc.Free(up, s);
    }
    for (int step = 0; step < 16; ++step) {
      void* down = alloc.Allocate();
      CHECK(cuMemcpyDtoHAsync(down, dev + step * kBlock, kBlock, s));
      CHECK(cuStreamSynchronize(s));
      ok = ok && corpus::Holds(down, kBlock, step);
      alloc.Free(down, s);
    }
    ok = ok && alloc.blocks() >= 1;
  }
  CHECK(cuMemFree(dev));
  CHECK(cuStreamDestroy(s));
  return corpus::Finish(ok, "caching_host_allocator");
}
