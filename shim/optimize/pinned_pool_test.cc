#include "shim/optimize/pinned_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shim/core/registry.h"
#include "shim/optimize/size_classes.h"
#include "shim/optimize/test_util.h"

namespace pinshim {
namespace optimize {
namespace {

using testing::Checked;
using testing::ExpectInvariants;
using testing::FakeDriverOps;
using testing::Fill;
using testing::HasPattern;
using testing::MakeContextCurrent;
using testing::ManualClock;

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;
constexpr unsigned kAllFlags =
    CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = MakeContextCurrent();
    ASSERT_NE(ctx_, nullptr);
    ops_ = FakeDriverOps();
    ASSERT_TRUE(fences_.Init(&ops_));
    account_.Init(PinAccount::kNoCap, PinAccountHooks());
    baseline_allocs_ = fakecuda_live_host_allocations();
  }

  void StartPool(PoolOptions options = PoolOptions()) {
    options.now_ns = &ManualClock::Now;
    ASSERT_TRUE(pool_->Init(&ops_, &fences_, &account_, options));
  }

  void TearDown() override {
    fakecuda_set_copy_delay_us(0);
    cuCtxSynchronize();
    pool_->ReleaseAllForTesting();
    EXPECT_EQ(pool_->Stats().slab_bytes, 0u);
    EXPECT_EQ(fakecuda_live_host_allocations(), baseline_allocs_);
    ExpectInvariants(account_);
  }

  void* Alloc(size_t n, unsigned flags = 0) {
    void* p = nullptr;
    EXPECT_EQ(pool_->Allocate(&p, n, flags), CUDA_SUCCESS);
    return p;
  }

  CUresult FreeResult(void* p) {
    CUresult r = CUDA_ERROR_UNKNOWN;
    EXPECT_TRUE(pool_->Free(p, &r));
    return r;
  }

  CUcontext ctx_ = nullptr;
  DriverOps ops_;
  FenceManager fences_;
  PinAccount account_;
  Checked<PinnedPool> pool_;  // every call walks the pool's invariants
  size_t baseline_allocs_ = 0;
};

uint64_t PageRounded(uint64_t n, uint64_t page) {
  return n == 0 ? page : (n + page - 1) / page * page;
}

// The waste bound, measured: over random sizes (log-uniform, 1 byte to the
// pooling limit) a block is under 12.5% larger than the page-rounded request.
TEST_F(PoolTest, WasteStaysUnderOneEighthOverRandomSizes) {
  StartPool();
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> log_size(0, std::log2(32.0 * kMiB));
  const uint64_t page = pool_->page_bytes();
  double worst = 0, total_req = 0, total_block = 0;
  std::vector<void*> live;
  for (int i = 0; i < 3000; ++i) {
    uint64_t n = static_cast<uint64_t>(std::exp2(log_size(rng)));
    void* p = Alloc(n);
    ASSERT_NE(p, nullptr);
    PoolBlockInfo info;
    ASSERT_TRUE(pool_->Lookup(p, &info));
    EXPECT_EQ(info.base, reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(info.requested, n);
    const double ratio = static_cast<double>(info.block_bytes) / PageRounded(n, page);
    ASSERT_GE(ratio, 1.0);
    ASSERT_LT(ratio, 1.125) << n;
    worst = std::max(worst, ratio);
    total_req += PageRounded(n, page);
    total_block += info.block_bytes;
    live.push_back(p);
    if (live.size() > 32) {
      size_t k = rng() % live.size();
      EXPECT_EQ(FreeResult(live[k]), CUDA_SUCCESS);
      live.erase(live.begin() + k);
    }
  }
  for (void* p : live) EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
  RecordProperty("worst_block_over_request_pct", std::to_string((worst - 1) * 100));
  RecordProperty("mean_block_over_request_pct",
                 std::to_string((total_block / total_req - 1) * 100));
  EXPECT_LT(total_block / total_req, 1.125);
}

TEST_F(PoolTest, BlocksArePageAlignedDisjointAndReused) {
  StartPool();
  std::vector<void*> blocks;
  for (int i = 0; i < 40; ++i) {
    void* p = Alloc(10 * kKiB);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % pool_->page_bytes(), 0u);
    Fill(p, 10 * kKiB, static_cast<uint8_t>(i));
    blocks.push_back(p);
  }
  for (int i = 0; i < 40; ++i)
    EXPECT_TRUE(HasPattern(blocks[i], 10 * kKiB, static_cast<uint8_t>(i)));
  // One slab served them all: a single driver allocation.
  EXPECT_EQ(fakecuda_live_host_allocations(), baseline_allocs_ + 1);
  for (void* p : blocks) EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
  // The frees wait in a batch for their shared fence; Trim settles them
  // (and, asked for 0 bytes, gives nothing back).
  EXPECT_EQ(pool_->Trim(0), 0u);
  const PoolStats before = pool_->Stats();
  for (int i = 0; i < 40; ++i) blocks[i] = Alloc(10 * kKiB);
  EXPECT_EQ(pool_->Stats().hits - before.hits, 40u);
  EXPECT_EQ(fakecuda_live_host_allocations(), baseline_allocs_ + 1);
  for (void* p : blocks) EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
}

// Invariant 6: every flag combination gets its own slabs, and the answers
// of cuMemHostGetFlags / cuMemHostGetDevicePointer for a block are those
// the driver gives for a dedicated allocation with the same flags.
TEST_F(PoolTest, FlagsAndDevicePointersMatchDedicatedAllocations) {
  StartPool();
  const size_t n = 3 * kKiB + 17;
  for (unsigned flags = 0; flags <= kAllFlags; ++flags) {
    if (flags & ~kAllFlags) continue;
    SCOPED_TRACE(flags);
    void* blk = Alloc(n, flags);
    void* other = Alloc(n, flags);
    void* ded = nullptr;
    ASSERT_EQ(cuMemHostAlloc(&ded, n, flags), CUDA_SUCCESS);
    for (size_t off : {size_t{0}, size_t{1}, n / 2, n - 1, n, n + 4096}) {
      unsigned pf = 0xdead, df = 0xdead;
      char* bp = static_cast<char*>(blk) + off;
      char* dp = static_cast<char*>(ded) + off;
      // Past the dedicated allocation the driver may find a neighbour of it
      // (the address layout decides: under ASan one was there): its answer
      // is then about that other allocation, and the dedicated allocation's
      // own is the one for memory the driver does not know.
      CUdeviceptr range = 0;
      if (cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                reinterpret_cast<CUdeviceptr>(dp)) == CUDA_SUCCESS &&
          range != 0 && range != reinterpret_cast<CUdeviceptr>(ded)) {
        CUdeviceptr pd = 1;
        EXPECT_EQ(pool_->GetFlags(&pf, bp), CUDA_ERROR_INVALID_VALUE) << off;
        EXPECT_EQ(pf, 0xdeadu) << off;
        EXPECT_EQ(pool_->GetDevicePointer(&pd, bp, 0), CUDA_ERROR_INVALID_VALUE) << off;
        continue;
      }
      EXPECT_EQ(pool_->GetFlags(&pf, bp), cuMemHostGetFlags(&df, dp)) << off;
      EXPECT_EQ(pf, df) << off;
      CUdeviceptr pd = 1, dd = 1;
      CUresult pr = pool_->GetDevicePointer(&pd, bp, 0);
      CUresult dr = cuMemHostGetDevicePointer(&dd, dp, 0);
      EXPECT_EQ(pr, dr) << off;
      if (pr == CUDA_SUCCESS) {
        // Same relation to the host pointer as the dedicated allocation's.
        EXPECT_EQ(pd - reinterpret_cast<CUdeviceptr>(bp), dd - reinterpret_cast<CUdeviceptr>(dp));
      }
      EXPECT_EQ(pool_->GetDevicePointer(&pd, bp, 1), cuMemHostGetDevicePointer(&dd, dp, 1));
    }
    unsigned expected = 0;
    ASSERT_EQ(cuMemHostGetFlags(&expected, ded), CUDA_SUCCESS);
    EXPECT_EQ(expected & kAllFlags, flags | CU_MEMHOSTALLOC_DEVICEMAP);
    EXPECT_EQ(pool_->GetFlags(nullptr, blk), cuMemHostGetFlags(nullptr, ded));
    // Frees: interior pointer, then the block, then a double free.
    EXPECT_EQ(FreeResult(static_cast<char*>(blk) + 8), cuMemFreeHost(static_cast<char*>(ded) + 8));
    EXPECT_EQ(FreeResult(blk), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFreeHost(ded), CUDA_SUCCESS);
    EXPECT_EQ(FreeResult(blk), cuMemFreeHost(ded));
    unsigned pf = 0, df = 0;
    EXPECT_EQ(pool_->GetFlags(&pf, blk), cuMemHostGetFlags(&df, ded));
    EXPECT_EQ(FreeResult(other), CUDA_SUCCESS);
  }
  // Blocks of different flags never share a slab.
  void* a = Alloc(4 * kKiB, 0);
  void* b = Alloc(4 * kKiB, CU_MEMHOSTALLOC_WRITECOMBINED);
  unsigned fa = 0, fb = 0;
  ASSERT_EQ(pool_->GetFlags(&fa, a), CUDA_SUCCESS);
  ASSERT_EQ(pool_->GetFlags(&fb, b), CUDA_SUCCESS);
  EXPECT_NE(fa, fb);
  EXPECT_EQ(FreeResult(a), CUDA_SUCCESS);
  EXPECT_EQ(FreeResult(b), CUDA_SUCCESS);
}

TEST_F(PoolTest, BadArgumentsGetTheDriversAnswer) {
  StartPool();
  void* p = nullptr;
  void* q = nullptr;
  EXPECT_EQ(pool_->Allocate(&p, 4096, 0x100), cuMemHostAlloc(&q, 4096, 0x100));
  EXPECT_EQ(pool_->Allocate(nullptr, 4096, 0), cuMemHostAlloc(nullptr, 4096, 0));
  // Zero bytes succeeds, as the driver's does, and is a real block.
  ASSERT_EQ(pool_->Allocate(&p, 0, 0), CUDA_SUCCESS);
  unsigned f = 0;
  EXPECT_EQ(pool_->GetFlags(&f, p), CUDA_SUCCESS);
  EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
  // Pointers the pool never handed out are not its business.
  int local;
  CUresult r;
  EXPECT_FALSE(pool_->Free(&local, &r));
}

TEST_F(PoolTest, NoCurrentContextGetsTheDriversAnswer) {
  StartPool();
  void* p = Alloc(8 * kKiB);
  std::thread([&] {
    void* q = nullptr;
    void* d = nullptr;
    EXPECT_EQ(pool_->Allocate(&q, 4096, 0), cuMemHostAlloc(&d, 4096, 0));
    CUresult r = CUDA_SUCCESS;
    EXPECT_TRUE(pool_->Free(p, &r));
    EXPECT_EQ(r, cuMemFreeHost(p));
  }).join();
  EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
}

// The pool answers for its live blocks itself (Optimizer::PoolBlock asks it
// when the registries know nothing): any pointer inside the requested bytes
// finds its block, and nothing does once the block is freed.
TEST_F(PoolTest, LookupFindsLiveBlocksUntilTheyAreFreed) {
  StartPool();
  void* p = Alloc(100 * kKiB, CU_MEMHOSTALLOC_WRITECOMBINED);
  PoolBlockInfo info;
  ASSERT_TRUE(pool_->Lookup(static_cast<char*>(p) + 50 * kKiB, &info));
  EXPECT_EQ(info.base, reinterpret_cast<uintptr_t>(p));
  EXPECT_EQ(info.requested, 100 * kKiB);
  EXPECT_GE(info.block_bytes, 100 * kKiB);
  EXPECT_EQ(info.flags, static_cast<unsigned>(CU_MEMHOSTALLOC_WRITECOMBINED));
  EXPECT_EQ(info.ctx, ctx_);
  EXPECT_NE(info.alloc_id, 0u);
  EXPECT_FALSE(pool_->Lookup(static_cast<char*>(p) + 100 * kKiB, &info));
  EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
  EXPECT_FALSE(pool_->Lookup(p, &info));
  EXPECT_TRUE(pool_->Owns(p));
}

// Invariant 4, deterministically: the stream is held, so the copy that read
// the block is still queued when the program frees it. No allocation may
// return that block until the copy ran; the device must receive the bytes
// the block held when the copy was queued.
TEST_F(PoolTest, FreedBlockWaitsForQueuedCopy) {
  StartPool();
  const size_t n = 64 * kKiB;
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  void* a = Alloc(n);
  Fill(a, n, 1);
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, a, n, stream), CUDA_SUCCESS);
  pool_->NoteAsyncUse(a, stream);
  ASSERT_EQ(FreeResult(a), CUDA_SUCCESS);
  ASSERT_GT(fakecuda_pending_ops(), 0u);
  std::vector<void*> others;
  for (int i = 0; i < 40; ++i) {
    void* b = Alloc(n);
    ASSERT_NE(b, a) << i;
    Fill(b, n, 2);
    others.push_back(b);
  }
  // Held back either on the free list by its own fence, or in the batch of
  // frees whose shared fence the allocations had to record and poll.
  EXPECT_GT(pool_->Stats().deferred_reuse + pool_->Stats().free_batches, 0u);
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  std::vector<char> back(n);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev, n), CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), n, 1));
  // Once the copy is done the block is reused (after the free blocks ahead
  // of it on the list: the waits above may have grown the pool).
  EXPECT_EQ(pool_->Trim(0), 0u);  // settles the batched frees
  bool reused = false;
  for (int i = 0; i < 1024 && !reused; ++i) {
    void* b = Alloc(n);
    others.push_back(b);
    reused = b == a;
  }
  EXPECT_TRUE(reused);
  for (void* b : others) EXPECT_EQ(FreeResult(b), CUDA_SUCCESS);
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

// Frees share one legacy-stream fence per batch: nothing is recorded until
// the batch is full, one fence is recorded then, and no block of the batch
// is reused while work queued before those frees (here a copy the pool was
// not told about, as a kernel reading mapped memory would be) is pending.
TEST_F(PoolTest, FreesShareOneFencePerBatch) {
  PoolOptions options;
  options.free_batch_blocks = 4;
  StartPool(options);
  const size_t n = 64 * kKiB;
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);  // blocking: the legacy stream waits for it
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  std::vector<void*> freed;
  for (int i = 0; i < 4; ++i) freed.push_back(Alloc(n));
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, freed[0], n, stream), CUDA_SUCCESS);
  const uint64_t records_before = fences_.records();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(FreeResult(freed[i]), CUDA_SUCCESS);
  EXPECT_EQ(fences_.records(), records_before);
  EXPECT_EQ(pool_->Stats().batched_blocks, 3u);
  ASSERT_EQ(FreeResult(freed[3]), CUDA_SUCCESS);
  EXPECT_EQ(fences_.records(), records_before + 1);
  EXPECT_EQ(pool_->Stats().free_batches, 1u);
  std::vector<void*> others;
  for (int i = 0; i < 40; ++i) {
    void* b = Alloc(n);
    for (void* f : freed) ASSERT_NE(b, f) << i;
    others.push_back(b);
  }
  EXPECT_EQ(pool_->Stats().batched_blocks, 4u);
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  for (void* b : others) ASSERT_EQ(FreeResult(b), CUDA_SUCCESS);
  // The copy is done: the batch's blocks come back.
  int reused = 0;
  others.clear();
  for (int i = 0; i < 128; ++i) {
    void* b = Alloc(n);
    others.push_back(b);
    for (void* f : freed) reused += b == f;
  }
  EXPECT_EQ(reused, 4);
  for (void* b : others) EXPECT_EQ(FreeResult(b), CUDA_SUCCESS);
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

// Fences on one stream complete in order: AreDone asks the driver about
// the newest of a stream first, and when it completed the older ones are
// known without a query; while it is pending, the oldest next. A stream
// created between two fences may have the first one's handle: no inference
// across it.
TEST_F(PoolTest, FenceQueriesFollowStreamOrder) {
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  Fence fs[16];
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(fences_.Record(stream, &fs[i]));
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  bool done[16];
  EXPECT_EQ(fences_.AreDone(fs, 10, done), 1);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(done[i]) << i;
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  for (int i = 10; i < 13; ++i) ASSERT_TRUE(fences_.Record(stream, &fs[i]));
  // Newest pending, the oldest done, then halving the 11 between (a fence
  // at a time would take 13 queries, as on the first ask by the pool).
  EXPECT_LE(fences_.AreDone(fs, 13, done), 6);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(done[i], i < 10) << i;
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  FenceManager::NoteStreamCreated();
  ASSERT_TRUE(fences_.Record(stream, &fs[13]));
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  Fence pair[2] = {fs[0], fs[13]};
  EXPECT_FALSE(ImpliesDone(fs[13], fs[0]));
  EXPECT_TRUE(ImpliesDone(fs[12], fs[0]));
  EXPECT_FALSE(ImpliesDone(fs[0], fs[12]));
  EXPECT_EQ(fences_.AreDone(pair, 2, done), 2);
  EXPECT_TRUE(done[0] && done[1]);
  for (int i = 0; i < 14; ++i) fences_.Recycle(fs[i]);
  EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
}

// The per-thread default stream's handle is every thread's own stream: a
// fence another thread recorded on it later says nothing about this one's.
TEST_F(PoolTest, NoFenceInferenceAcrossPerThreadStreams) {
  Fence mine, theirs;
  ASSERT_TRUE(fences_.Record(CU_STREAM_PER_THREAD, &mine));
  std::thread other([&] {
    MakeContextCurrent();
    EXPECT_TRUE(fences_.Record(CU_STREAM_PER_THREAD, &theirs));
  });
  other.join();
  ASSERT_EQ(mine.stream, theirs.stream);
  EXPECT_FALSE(ImpliesDone(theirs, mine));
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  Fence both[2] = {mine, theirs};
  bool done[2];
  EXPECT_EQ(fences_.AreDone(both, 2, done), 2);
  EXPECT_TRUE(done[0] && done[1]);
  fences_.Recycle(mine);
  fences_.Recycle(theirs);
}

// The loop a naive pipeline writes (allocate, queue a copy from the block,
// free): blocks come back from their batch carrying their copies' fences,
// all on one stream, and finding them complete takes a query per batch,
// not one per block.
TEST_F(PoolTest, BlocksBackFromABatchNeedFewFenceQueries) {
  StartPool();
  const size_t n = 4 * kKiB;
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  const int steps = 1000;
  for (int i = 0; i < steps; ++i) {
    void* b = Alloc(n);
    ASSERT_NE(b, nullptr);
    static_cast<char*>(b)[0] = static_cast<char>(i);
    ASSERT_EQ(cuMemcpyHtoDAsync(dev, b, n, stream), CUDA_SUCCESS);
    pool_->NoteAsyncUse(b, stream);
    ASSERT_EQ(FreeResult(b), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  const PoolStats st = pool_->Stats();
  EXPECT_GT(st.hits, static_cast<uint64_t>(steps) / 2);
  EXPECT_LT(st.fence_queries, static_cast<uint64_t>(steps) / 8) << "hits " << st.hits;
  cuMemFree(dev);
  EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
}

// Rent or buy: when allocations keep waiting for batched frees (here their
// fence cannot complete: a blocking stream is held, and the legacy stream
// waits for it), the pool stops waiting and grows, by a slab that holds a
// whole batch of frees.
TEST_F(PoolTest, RepeatedWaitsForBatchesGrowThePoolByABatch) {
  PoolOptions options;
  options.slab_target_bytes = 64 * kKiB;  // one block to an ordinary slab
  options.free_batch_blocks = 8;
  options.max_fenced_bytes = uint64_t{1} << 30;
  StartPool(options);
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, 4096), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev + 2048, dev, 2048, stream), CUDA_SUCCESS);
  uint64_t biggest_step = 0;
  int first_growth = -1;
  for (int i = 0; i < 48; ++i) {
    const uint64_t before = pool_->Stats().slab_bytes;
    void* p = Alloc(64 * kKiB);
    const uint64_t step = pool_->Stats().slab_bytes - before;
    if (step > biggest_step) biggest_step = step;
    if (first_growth < 0 && pool_->Stats().batch_growths > 0) first_growth = i;
    ASSERT_EQ(FreeResult(p), CUDA_SUCCESS);
  }
  // Ordinary slabs of one block while the waits were few; then one slab
  // holding a batch (8 blocks), after kWaitsBeforeGrowth waits.
  EXPECT_EQ(biggest_step, 8 * 64 * kKiB);
  EXPECT_GE(first_growth, static_cast<int>(PinnedPool::kWaitsBeforeGrowth));
  EXPECT_GE(pool_->Stats().batch_growths, 1u);
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

// The same with the copy merely slow (copy-delay knob): whatever block comes
// back, writing into it never changes what the queued copy delivers.
TEST_F(PoolTest, SlowCopiesDeliverTheOriginalContent) {
  StartPool();
  const size_t n = 256 * kKiB;
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::vector<CUdeviceptr> devs(8);
  for (auto& d : devs) ASSERT_EQ(cuMemAlloc(&d, n), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(20000);
  for (int i = 0; i < 8; ++i) {
    void* a = Alloc(n);
    Fill(a, n, static_cast<uint8_t>(10 + i));
    ASSERT_EQ(cuMemcpyHtoDAsync(devs[i], a, n, stream), CUDA_SUCCESS);
    pool_->NoteAsyncUse(a, stream);
    ASSERT_EQ(FreeResult(a), CUDA_SUCCESS);
    void* b = Alloc(n);
    Fill(b, n, 200);
    ASSERT_EQ(FreeResult(b), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(0);
  std::vector<char> back(n);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(cuMemcpyDtoH(back.data(), devs[i], n), CUDA_SUCCESS);
    EXPECT_TRUE(HasPattern(back.data(), n, static_cast<uint8_t>(10 + i))) << i;
  }
  for (auto d : devs) cuMemFree(d);
  cuStreamDestroy(stream);
}

// Device-to-host into a block: the program frees it while the copy that
// writes it is queued; a new owner's data must not be overwritten.
TEST_F(PoolTest, QueuedWriteIntoFreedBlockNeverReachesTheNextOwner) {
  StartPool();
  const size_t n = 32 * kKiB;
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  std::vector<char> src(n);
  Fill(src.data(), n, 5);
  ASSERT_EQ(cuMemcpyHtoD(dev, src.data(), n), CUDA_SUCCESS);
  void* a = Alloc(n);
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync(a, dev, n, stream), CUDA_SUCCESS);
  pool_->NoteAsyncUse(a, stream);
  ASSERT_EQ(FreeResult(a), CUDA_SUCCESS);
  std::vector<void*> next;
  for (int i = 0; i < 20; ++i) {
    void* b = Alloc(n);
    Fill(b, n, 9);
    next.push_back(b);
  }
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  for (void* b : next) {
    EXPECT_TRUE(HasPattern(b, n, 9));
    EXPECT_EQ(FreeResult(b), CUDA_SUCCESS);
  }
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

TEST_F(PoolTest, IdleSlabsAreTrimmedAfterTheIdleTime) {
  PoolOptions options;
  options.idle_trim_ns = 5 * 1000000000ull;
  options.trim_on_free = false;
  StartPool(options);
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(Alloc(300 * kKiB));
  EXPECT_GT(pool_->Stats().slab_bytes, 0u);
  EXPECT_GT(fakecuda_live_host_allocations(), baseline_allocs_);
  for (void* p : blocks) EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
  EXPECT_EQ(pool_->Trim(0), 0u);     // waits for the frees' shared fence
  EXPECT_EQ(pool_->TrimIdle(), 0u);  // not idle long enough yet
  ManualClock::Advance(6 * 1000000000ull);
  const uint64_t slab_bytes = pool_->Stats().slab_bytes;
  EXPECT_EQ(pool_->TrimIdle(), slab_bytes);
  EXPECT_EQ(pool_->Stats().slab_bytes, 0u);
  EXPECT_EQ(account_.pinned(), 0u);
  EXPECT_EQ(fakecuda_live_host_allocations(), baseline_allocs_);
}

TEST_F(PoolTest, TrimOnRequestSparesBusySlabs) {
  StartPool();
  void* busy = Alloc(1 * kMiB);  // its slab stays in use
  void* idle = Alloc(5 * kMiB);  // a slab of its own, freed
  EXPECT_EQ(FreeResult(idle), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);  // the free's fence
  EXPECT_EQ(pool_->Trim(UINT64_MAX), 5 * kMiB);
  PoolBlockInfo info;
  EXPECT_TRUE(pool_->Lookup(busy, &info));
  EXPECT_EQ(FreeResult(busy), CUDA_SUCCESS);
}

// A slab whose free block still has a copy queued on it is not given back
// (the stream is held, so the copy cannot have run).
TEST_F(PoolTest, TrimOnRequestWaitsForPendingFences) {
  StartPool();
  void* fenced = Alloc(9 * kMiB);
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, 4096), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, fenced, 4096, stream), CUDA_SUCCESS);
  pool_->NoteAsyncUse(fenced, stream);
  EXPECT_EQ(FreeResult(fenced), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(pool_->Trim(UINT64_MAX), 0u);
  EXPECT_GT(fakecuda_pending_ops(), 0u);
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  EXPECT_EQ(pool_->Trim(UINT64_MAX), 9 * kMiB);
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

TEST_F(PoolTest, LargeRequestsGetExactAllocationsKeptForCloseSizes) {
  StartPool();
  void* p = Alloc(48 * kMiB);
  PoolBlockInfo info;
  ASSERT_TRUE(pool_->Lookup(p, &info));
  EXPECT_TRUE(info.dedicated);
  EXPECT_EQ(info.block_bytes, 48 * kMiB);
  EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
  EXPECT_EQ(pool_->Trim(0), 0u);  // waits for the free's fence
  const uint64_t hits = pool_->Stats().hits;
  void* q = Alloc(44 * kMiB);  // within 1/8 of 48 MiB: reused
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool_->Stats().hits, hits + 1);
  EXPECT_EQ(FreeResult(q), CUDA_SUCCESS);
  void* r = Alloc(40 * kMiB);  // would waste more than 1/8: its own
  EXPECT_NE(r, p);
  ASSERT_TRUE(pool_->Lookup(r, &info));
  EXPECT_EQ(info.block_bytes, 40 * kMiB);
  EXPECT_EQ(FreeResult(r), CUDA_SUCCESS);
}

TEST_F(PoolTest, CapTurnsSlabsIntoExactAllocations) {
  account_.Init(1 * kMiB, PinAccountHooks());
  StartPool();
  std::vector<void*> blocks;
  for (int i = 0; i < 20; ++i) {
    void* p = Alloc(200 * kKiB);
    ASSERT_NE(p, nullptr);
    blocks.push_back(p);
  }
  EXPECT_LE(account_.pinned_for(PinUse::kPoolSlab), 1 * kMiB);
  EXPECT_GT(pool_->Stats().dedicated, 0u);
  for (void* p : blocks) EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
  EXPECT_EQ(account_.pinned_for(PinUse::kPoolDedicated), 0u);
}

TEST_F(PoolTest, SixteenThreadsKeepTheirBlocksApart) {
  StartPool();
  // The threads call the pool at once: the walk waits for a quiescent
  // point, after they joined.
  PinnedPool& pool = pool_.raw();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(ctx_);
      std::mt19937 rng(t);
      std::vector<std::pair<void*, size_t>> mine;
      for (int i = 0; i < 400; ++i) {
        if (mine.size() < 8 && (rng() & 1)) {
          size_t n = 1 + rng() % (600 * kKiB);
          unsigned flags = (rng() % 4 == 0) ? CU_MEMHOSTALLOC_PORTABLE : 0;
          void* p = nullptr;
          if (pool.Allocate(&p, n, flags) != CUDA_SUCCESS) {
            failures++;
            continue;
          }
          Fill(p, std::min<size_t>(n - 1, 8192), static_cast<uint8_t>(t * 16 + i));
          reinterpret_cast<uint8_t*>(p)[n - 1] = static_cast<uint8_t>(t);
          mine.push_back({p, n | (static_cast<size_t>(i) << 40)});
        } else if (!mine.empty()) {
          auto [p, packed] = mine.back();
          mine.pop_back();
          size_t n = packed & ((size_t{1} << 40) - 1);
          int i = static_cast<int>(packed >> 40);
          if (!HasPattern(p, std::min<size_t>(n - 1, 8192), static_cast<uint8_t>(t * 16 + i)) ||
              reinterpret_cast<uint8_t*>(p)[n - 1] != static_cast<uint8_t>(t)) {
            failures++;
          }
          CUresult r;
          if (!pool.Free(p, &r) || r != CUDA_SUCCESS) failures++;
        }
      }
      for (auto& [p, packed] : mine) {
        CUresult r;
        if (!pool.Free(p, &r) || r != CUDA_SUCCESS) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  ExpectInvariants(pool);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pool_->Stats().live_blocks, 0u);
}

// The walker proves its power: each corruption breaks one invariant, the
// walk names it, and undoing the corruption makes the pool whole again.
TEST_F(PoolTest, InvariantWalkerReportsEachCorruption) {
  StartPool();
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(Alloc(64 * kKiB));
  ASSERT_EQ(FreeResult(blocks.back()), CUDA_SUCCESS);
  blocks.pop_back();
  EXPECT_EQ(pool_->Trim(0), 0u);  // the freed block is back on its free list
  const testing::Corruption<PinnedPool> cases[] = {
      {PinnedPool::Corruption::kSlabLiveCount, "P8 "},
      {PinnedPool::Corruption::kFreeListState, "P10 "},
      {PinnedPool::Corruption::kBounds, "P6 "},
      {PinnedPool::Corruption::kLiveCounter, "P16 "},
  };
  testing::ExpectWalkerReportsEach(pool_.raw(), cases);
  for (void* p : blocks) EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
}

// The pin account's walker too: its total apart from its parts is reported.
TEST_F(PoolTest, AccountWalkerReportsItsCorruption) {
  StartPool();
  void* p = Alloc(64 * kKiB);
  ASSERT_TRUE(account_.CheckInvariants().ok()) << account_.CheckInvariants().text();
  account_.CorruptForTesting();
  const InvariantReport broken = account_.CheckInvariants();
  EXPECT_NE(strstr(broken.text(), "PA1 "), nullptr) << broken.text();
  account_.CorruptForTesting();  // undone
  EXPECT_TRUE(account_.CheckInvariants().ok()) << account_.CheckInvariants().text();
  EXPECT_EQ(FreeResult(p), CUDA_SUCCESS);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
