// The engine as the hooks drive it: copies classified through the
// registries, the program's pinned-memory calls, releases, fork.
#include "shim/optimize/optimizer.h"
#include "shim/optimize/copy_path.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "shim/core/registry.h"
#include "shim/optimize/test_util.h"

namespace pinshim {
namespace optimize {
namespace {

using testing::ExpectInvariants;
using testing::FakeDriverOps;
using testing::Fill;
using testing::HasPattern;
using testing::MakeContextCurrent;
using testing::Rewrite;
using testing::RewriteSource;

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

std::atomic<uint64_t> g_ids{1};
uint64_t NextId() { return g_ids.fetch_add(1); }

class OptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = MakeContextCurrent();
    ASSERT_NE(ctx_, nullptr);
    opt_ = std::make_unique<Optimizer>();
    OptimizerOptions o;
    o.allocations = &allocations_;
    o.registrations = &registrations_;
    o.next_alloc_id = &NextId;
    o.pin_cap_bytes = 512 * kMiB;
    o.arena.reserve_bytes = uint64_t{4} << 30;
    opt_->Configure(o);
    ASSERT_TRUE(opt_->AttachDriver(FakeDriverOps()));
    ASSERT_EQ(cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
  }

  // A new engine in place of SetUp's, with the same registries.
  void Restart(OptimizerOptions o) {
    ExpectEngineInvariants();
    opt_ = std::make_unique<Optimizer>();
    o.allocations = &allocations_;
    o.registrations = &registrations_;
    o.next_alloc_id = &NextId;
    o.pin_cap_bytes = 512 * kMiB;
    opt_->Configure(o);
    ASSERT_TRUE(opt_->AttachDriver(FakeDriverOps()));
  }

  void TearDown() override {
    fakecuda_set_copy_delay_us(0);
    cuStreamSynchronize(stream_);
    cuStreamDestroy(stream_);
    ExpectEngineInvariants();
  }

  // Every structure of the engine walked (invariants.h); no call in flight.
  void ExpectEngineInvariants() {
    ExpectInvariants(opt_->pool(), " (pool)");
    ExpectInvariants(opt_->cache(), " (registration cache)");
    ExpectInvariants(opt_->arena(), " (arena)");
    ExpectInvariants(opt_->stager(), " (stager)");
    ExpectInvariants(opt_->account(), " (pin account)");
  }

  // What ClassifyHost answers: registrations first, then allocations.
  // As the hooks classify: the registries, then the pool for its blocks.
  MemKind Classify(const void* p) {
    Region r;
    if (registrations_.Lookup(reinterpret_cast<uintptr_t>(p), &r)) return r.kind;
    if (allocations_.Lookup(reinterpret_cast<uintptr_t>(p), &r)) return r.kind;
    if (opt_->PoolBlock(p, nullptr)) return MemKind::kPinnedByPinshim;
    return MemKind::kPageable;
  }

  // A copy hook: before, the real call (an upload of memory pinned in place
  // may read its first bytes at the call), after.
  CUresult HtoDAsync(CUdeviceptr dev, const void* src, size_t n) {
    CopyTicket t = opt_->BeforeHostCopy(src, n, CopyDir::kHostToDevice, Classify(src), false, true);
    CUresult r;
    bool in_flight = true;
    if (!opt_->UploadEagerHead(t, src, dev, stream_, false, &r, &in_flight)) {
      r = cuMemcpyHtoDAsync(dev, src, n, stream_);
    }
    opt_->AfterHostCopy(t, r, in_flight, stream_, false);
    return r;
  }
  CUresult DtoHAsync(void* dst, CUdeviceptr dev, size_t n) {
    CopyTicket t = opt_->BeforeHostCopy(dst, n, CopyDir::kDeviceToHost, Classify(dst), false, true);
    CUresult r = cuMemcpyDtoHAsync(dst, dev, n, stream_);
    opt_->AfterHostCopy(t, r, true, stream_, false);
    return r;
  }

  // malloc as the libc hooks see it: tracked, released through OnRelease.
  char* TrackedMalloc(size_t n) {
    char* p = static_cast<char*>(malloc(n));
    Region r;
    r.start = reinterpret_cast<uintptr_t>(p);
    r.bytes = n;
    r.id = NextId();
    r.source = kSourceMalloc;
    allocations_.Insert(r);
    return p;
  }
  void TrackedFree(char* p, size_t n) {
    opt_->OnRelease(p, n);
    allocations_.Remove(reinterpret_cast<uintptr_t>(p), nullptr);
    free(p);
  }

  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  Registry allocations_;
  Registry registrations_;
  std::unique_ptr<Optimizer> opt_;
};

TEST_F(OptimizerTest, ProgramPinnedAllocationsComeFromThePool) {
  void* p = nullptr;
  CUresult r;
  ASSERT_TRUE(opt_->HostAlloc(&p, 100 * kKiB, CU_MEMHOSTALLOC_PORTABLE, &r));
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(Classify(p), MemKind::kPinnedByPinshim);
  unsigned flags = 0;
  ASSERT_TRUE(opt_->HostGetFlags(&flags, p, &r));
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr d = 0;
  ASSERT_TRUE(opt_->HostGetDevicePointer(&d, static_cast<char*>(p) + 10, 0, &r));
  EXPECT_EQ(d, reinterpret_cast<CUdeviceptr>(p) + 10);
  // An async copy from it stays asynchronous (real pinned memory) and is fenced.
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, 100 * kKiB), CUDA_SUCCESS);
  Fill(p, 100 * kKiB, 1);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
  ASSERT_EQ(HtoDAsync(dev, p, 100 * kKiB), CUDA_SUCCESS);
  EXPECT_GT(fakecuda_pending_ops(), 0u);
  ASSERT_TRUE(opt_->FreeHost(p, &r));
  EXPECT_EQ(r, CUDA_SUCCESS);
  void* q = nullptr;
  ASSERT_TRUE(opt_->HostAlloc(&q, 100 * kKiB, CU_MEMHOSTALLOC_PORTABLE, &r));
  EXPECT_NE(q, p);
  Fill(q, 100 * kKiB, 2);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  std::vector<char> back(100 * kKiB);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev, back.size()), CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), back.size(), 1));
  ASSERT_TRUE(opt_->FreeHost(q, &r));
  int local;
  EXPECT_FALSE(opt_->FreeHost(&local, &r));  // not the pool's: forwarded
  const OptimizeCounters c = opt_->Counters();
  EXPECT_EQ(c.pool_async_notes, 1u);
  EXPECT_GT(c.pinned_by_use[static_cast<int>(PinUse::kPoolSlab)], 0u);
  cuMemFree(dev);
}

// The program overwrites its pageable buffer right after each async H2D
// and reads its buffer right after each async D2H, as pageable semantics
// allow. With copies slowed down, every result must still be exact while
// the cache turns the buffer pinned underneath.
TEST_F(OptimizerTest, HotPageableBufferKeepsPageableSemanticsOncePinned) {
  const size_t n = 2 * kMiB;
  char* buf = TrackedMalloc(n);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(2000);
  for (int i = 0; i < 8; ++i) {
    Fill(buf, n, static_cast<uint8_t>(i));
    ASSERT_EQ(HtoDAsync(dev, buf, n), CUDA_SUCCESS);
    memset(buf, 0, n);
    ASSERT_EQ(DtoHAsync(buf, dev, n), CUDA_SUCCESS);
    ASSERT_TRUE(HasPattern(buf, n, static_cast<uint8_t>(i))) << i;
  }
  EXPECT_EQ(Classify(buf), MemKind::kPinnedByPinshim);
  const OptimizeCounters c = opt_->Counters();
  EXPECT_EQ(c.cache.registrations, 1u);
  EXPECT_GT(c.cache.hits, 0u);
  EXPECT_GT(c.cache.async_waits, 0u);
  EXPECT_GT(c.saved_copy_ns, 0u);
  EXPECT_TRUE(opt_->HidesPinning(buf + 100));
  // Asked about its pinning, the buffer answers as pageable memory does.
  std::vector<char> plain(64);
  CUresult r, expected;
  unsigned flags;
  CUdeviceptr d;
  ASSERT_TRUE(opt_->HostGetFlags(&flags, buf, &r));
  expected = cuMemHostGetFlags(&flags, plain.data());
  EXPECT_EQ(r, expected);
  ASSERT_TRUE(opt_->HostGetDevicePointer(&d, buf, 0, &r));
  expected = cuMemHostGetDevicePointer(&d, plain.data(), 0);
  EXPECT_EQ(r, expected);
  const size_t regs = fakecuda_live_registrations();
  TrackedFree(buf, n);
  EXPECT_EQ(fakecuda_live_registrations(), regs - 1);
  EXPECT_EQ(opt_->Counters().pinned_by_use[static_cast<int>(PinUse::kCache)], 0u);
  cuMemFree(dev);
}

// An asynchronous upload of a buffer the cache pinned in place, queued
// behind a host function on its stream that rewrites the buffer. The
// driver's upload of that pageable memory reads its first 2 MiB at the call
// and the rest after the host function (bench/RESULTS.md, hostfunc_order);
// a DMA from the pinned buffer would read it all after. So the first 2 MiB
// are read at the call, through a ring, or through the bounce buffer
// without staging; one of at most 2 MiB returns before the stream ran, as
// the driver's does, a larger one after.
TEST_F(OptimizerTest, AsyncUploadOfMemoryPinnedInPlaceReadsItsFirst2MiBAtTheCall) {
  for (bool staging : {true, false}) {
    OptimizerOptions o;
    o.enable_staging = staging;
    o.stager.background_rings = false;  // the first upload pins its ring
    o.stager.workers = 2;
    o.stager.load_aware = false;
    Restart(o);
    for (size_t n : {size_t{1} * kMiB, size_t{2} * kMiB, size_t{6} * kMiB}) {
      char* buf = TrackedMalloc(n);
      CUdeviceptr dev;
      ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
      for (int i = 0; i < 4; ++i) {  // hot: pinned in place
        Fill(buf, n, 1);
        ASSERT_EQ(HtoDAsync(dev, buf, n), CUDA_SUCCESS);
      }
      ASSERT_EQ(Classify(buf), MemKind::kPinnedByPinshim);
      ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
      const OptimizeCounters before = opt_->Counters();
      Fill(buf, n, 2);
      Rewrite w{buf, n, 3};
      ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
      ASSERT_EQ(cuLaunchHostFunc(stream_, RewriteSource, &w), CUDA_SUCCESS);
      std::atomic<bool> done{false};
      CUresult r = CUDA_ERROR_UNKNOWN;
      std::thread copier([&] {
        MakeContextCurrent();
        r = HtoDAsync(dev, buf, n);
        done.store(true);
      });
      for (int i = 0; i < 2000 && !done.load(); ++i) usleep(1000);
      const bool returned = done.load();
      ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
      copier.join();
      ASSERT_EQ(r, CUDA_SUCCESS);
      EXPECT_EQ(returned, n <= 2 * kMiB) << n << (staging ? " staging" : " bounce");
      ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
      std::vector<char> back(n), want(n);
      ASSERT_EQ(cuMemcpyDtoH(back.data(), dev, n), CUDA_SUCCESS);
      const size_t head = n < 2 * kMiB ? n : 2 * kMiB;
      Fill(want.data(), n, 2);  // what the call read
      std::vector<char> later(n);
      Fill(later.data(), n, 3);  // what the host function wrote
      memcpy(want.data() + head, later.data() + head, n - head);
      EXPECT_EQ(memcmp(back.data(), want.data(), n), 0) << n << (staging ? " staging" : " bounce");
      const OptimizeCounters c = opt_->Counters();
      EXPECT_EQ(c.eager_heads - before.eager_heads, 1u);
      EXPECT_EQ(c.eager_bounces - before.eager_bounces, staging ? 0u : 1u);
      // An idle stream: the DMA reads the source now, as the driver would.
      ASSERT_EQ(HtoDAsync(dev, buf, n), CUDA_SUCCESS);
      EXPECT_EQ(opt_->Counters().eager_heads, c.eager_heads);
      TrackedFree(buf, n);
      cuMemFree(dev);
    }
  }
}

// The self-check weighs a path's speed, not its setup: the copy that
// registers a buffer in place is not counted as a pinned-in-place copy
// (the cost model weighs the registration); the copies after it are.
TEST_F(OptimizerTest, SelfCheckLeavesOutTheCopyThatPinned) {
  const size_t n = 4 * kMiB;
  char* host = TrackedMalloc(n);
  Fill(host, n, 3);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  int pinned_copies = 0, registered = 0;
  for (int i = 0; i < 10; ++i) {
    CopyCall c;
    c.form = CopyForm::kStageable;
    c.shape.src = Classify(host);
    c.shape.dst = MemKind::kDevice;
    c.shape.host_ptr = host;
    c.shape.bytes = n;
    c.host = host;
    c.dev = dev;
    const MemKind before = c.shape.src;
    auto driver = [&] { return cuMemcpyHtoD(dev, host, n); };
    ASSERT_EQ(RunCopy(opt_.get(), &c, driver), CUDA_SUCCESS);
    if (before == MemKind::kPinnedByPinshim) ++pinned_copies;
    if (before == MemKind::kPageable && c.shape.src == MemKind::kPinnedByPinshim) ++registered;
  }
  ASSERT_EQ(registered, 1);
  ASSERT_GE(pinned_copies, 2);
  PathCellReport cells[16];
  const int k = opt_->judge().Report(cells, 16);
  uint64_t judged = 0;
  for (int i = 0; i < k && i < 16; ++i) {
    if (cells[i].path == CopyPath::kPinnedInPlace) judged += cells[i].path_copies;
  }
  EXPECT_EQ(judged, static_cast<uint64_t>(pinned_copies));
  cuMemFree(dev);
  TrackedFree(host, n);
}

// A process's first copies of fresh buffers: each new allocation takes a
// candidate slot of the registration cache at random. Those slots, and
// the rest of what the copy path reaches, are present from the attach on,
// so none of these copies takes a page fault in the engine.
TEST_F(OptimizerTest, FirstCopiesOfFreshBuffersTakeNoPageFault) {
  constexpr int kBuffers = 64;
  constexpr uint64_t kBytes = kMiB;
  // Address space only: the engine never reads a buffer it does not pin.
  std::vector<char*> buffers;
  for (int i = 0; i < kBuffers; ++i) buffers.push_back(TrackedMalloc(kBytes));
  auto minor_faults = [] {
    rusage u;
    getrusage(RUSAGE_THREAD, &u);
    return u.ru_minflt;
  };
  const long before = minor_faults();
  for (int i = 0; i < kBuffers; ++i) {
    const CopyDir dir = i % 2 == 0 ? CopyDir::kHostToDevice : CopyDir::kDeviceToHost;
    CopyTicket t = opt_->BeforeHostCopy(buffers[i], kBytes, dir, MemKind::kPageable,
                                        /*sync=*/true, /*stageable=*/false);
    EXPECT_EQ(t.kind, CopyTicket::kNone);  // one copy each: not worth pinning
    opt_->AfterHostCopy(t, CUDA_SUCCESS, false, stream_, false);
  }
  // Without the attach's touch these copies took 31 faults here (one per
  // page of the candidate table they reached first); a sanitizer's own
  // shadow memory may take one or two.
  EXPECT_LE(minor_faults() - before, 3);
  for (char* p : buffers) TrackedFree(p, kBytes);
}

TEST_F(OptimizerTest, UntrackedMemoryIsNeverPinned) {
  static char data[4 * kMiB];
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, sizeof(data)), CUDA_SUCCESS);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(HtoDAsync(dev, data, sizeof(data)), CUDA_SUCCESS);
  EXPECT_EQ(opt_->Counters().cache.registrations, 0u);
  EXPECT_EQ(opt_->Counters().cache.declined[static_cast<int>(CacheDecline::kUntracked)], 10u);
  cuMemFree(dev);
}

TEST_F(OptimizerTest, ArenaMemoryKeepsPageableSemantics) {
  const size_t n = 1 * kMiB;
  char* buf = static_cast<char*>(opt_->arena().Malloc(n));
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(Classify(buf), MemKind::kPinnedByPinshim);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(2000);
  for (int i = 0; i < 4; ++i) {
    Fill(buf, n, static_cast<uint8_t>(40 + i));
    ASSERT_EQ(HtoDAsync(dev, buf, n), CUDA_SUCCESS);
    memset(buf, 0, n);
    ASSERT_EQ(DtoHAsync(buf, dev, n), CUDA_SUCCESS);
    ASSERT_TRUE(HasPattern(buf, n, static_cast<uint8_t>(40 + i))) << i;
  }
  EXPECT_EQ(opt_->Counters().arena_async_waits, 8u);
  EXPECT_TRUE(opt_->HidesPinning(buf));
  // The helper for calls without a ticket (batches) waits the same way.
  Fill(buf, n, 50);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, buf, n, stream_), CUDA_SUCCESS);
  opt_->AfterAsyncCopyOnCachedMemory(stream_, false);
  EXPECT_EQ(fakecuda_pending_ops(), 0u);
  opt_->arena().Free(buf);
  cuMemFree(dev);
}

// The page hooks' fast paths read only the engine's PageHookLine: every
// part's pinning (a pool slab, a registration of the cache, the arena's
// reservation) lies inside that part's bounds there, MayHoldPinning says
// so for the page changes that affect it, and the cache's bounds are
// empty again once it holds nothing.
TEST_F(OptimizerTest, PageHookLineHoldsTheBoundsOfEveryPart) {
  const PageHookLine& line = opt_->page_line();
  const auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  const PageChange private_only(OwnPinReason::kPageChangeMadvise, 0,
                                PageChange::kReplacesPrivate | PageChange::kStaysAnonymous);
  const PageChange shared_only(OwnPinReason::kPageChangeMadvise, 0, PageChange::kReplacesShared);
  // The arena reserved its range at attach.
  char* a = static_cast<char*>(opt_->arena().Malloc(64 * kKiB));
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(line.arena.MayOverlap(at(a), at(a) + 1));
  EXPECT_TRUE(opt_->MayHoldPinning(at(a), at(a) + 1, private_only));
  opt_->arena().Free(a);
  // A pool block.
  void* p = nullptr;
  CUresult r;
  ASSERT_TRUE(opt_->HostAlloc(&p, 100 * kKiB, 0, &r));
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_TRUE(line.pool.MayOverlap(at(p), at(p) + 100 * kKiB));
  EXPECT_TRUE(opt_->MayHoldPinning(at(p), at(p) + 1, shared_only));
  EXPECT_FALSE(line.cache.MayOverlap(at(p), at(p) + 1));
  ASSERT_TRUE(opt_->FreeHost(p, &r));
  // A hot buffer pinned in place.
  EXPECT_FALSE(line.cache.MayOverlap(0, UINTPTR_MAX));  // nothing cached yet
  const size_t n = 2 * kMiB;
  char* buf = TrackedMalloc(n);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(HtoDAsync(dev, buf, n), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  ASSERT_EQ(Classify(buf), MemKind::kPinnedByPinshim);
  EXPECT_TRUE(line.cache.MayOverlap(at(buf), at(buf) + 1));
  EXPECT_TRUE(line.cache.MayOverlap(at(buf) + n - 1, at(buf) + n));
  EXPECT_TRUE(opt_->MayHoldPinning(at(buf), at(buf) + 1, private_only));
  TrackedFree(buf, n);
  EXPECT_FALSE(line.cache.MayOverlap(0, UINTPTR_MAX));
  cuMemFree(dev);
}

// The program registering / unregistering memory pinshim pinned gets the
// answers it would get without pinshim.
TEST_F(OptimizerTest, ProgramRegistrationsSeeTheirOwnWorld) {
  CUresult r;
  char* a = static_cast<char*>(opt_->arena().Malloc(3 * kMiB));
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(opt_->ProgramRegister(a, 1 * kMiB, 0, &r));
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_FALSE(opt_->HidesPinning(a));
  ASSERT_TRUE(opt_->ProgramRegister(a + 4096, 4096, 0, &r));
  EXPECT_EQ(r, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_TRUE(opt_->ProgramUnregister(a + 8, &r));
  EXPECT_EQ(r, CUDA_ERROR_INVALID_VALUE);
  ASSERT_TRUE(opt_->ProgramUnregister(a, &r));
  EXPECT_EQ(r, CUDA_SUCCESS);
  ASSERT_TRUE(opt_->ProgramUnregister(a, &r));
  EXPECT_EQ(r, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_TRUE(opt_->HidesPinning(a));
  opt_->arena().Free(a);

  // A buffer the cache pinned: the program's own register must succeed.
  const size_t n = 16 * kMiB;
  char* buf = TrackedMalloc(n);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(HtoDAsync(dev, buf, n), CUDA_SUCCESS);
  ASSERT_EQ(Classify(buf), MemKind::kPinnedByPinshim);
  ASSERT_TRUE(opt_->ProgramUnregister(buf, &r));  // it never registered it
  EXPECT_EQ(r, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_FALSE(opt_->ProgramRegister(buf, n, 0, &r));  // forwarded, after unpinning
  EXPECT_EQ(cuMemHostRegister(buf, n, 0), CUDA_SUCCESS);
  EXPECT_NE(Classify(buf), MemKind::kPinnedByPinshim);
  EXPECT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
  TrackedFree(buf, n);
  cuMemFree(dev);
}

TEST_F(OptimizerTest, EvictGivesBackEverythingIdle) {
  void* p = nullptr;
  CUresult r;
  ASSERT_TRUE(opt_->HostAlloc(&p, 1 * kMiB, 0, &r));
  ASSERT_TRUE(opt_->FreeHost(p, &r));
  char* a = static_cast<char*>(opt_->arena().Malloc(2 * kMiB));
  opt_->arena().Free(a);
  const size_t n = 16 * kMiB;
  char* buf = TrackedMalloc(n);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(HtoDAsync(dev, buf, n), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  const uint64_t before = opt_->Counters().pinned_bytes_now;
  EXPECT_GE(before, n + 2 * kMiB + 1 * kMiB);
  EXPECT_EQ(opt_->Evict(UINT64_MAX), before);
  EXPECT_EQ(opt_->Counters().pinned_bytes_now, 0u);
  EXPECT_EQ(opt_->Counters().pinned_bytes_peak, before);
  EXPECT_EQ(opt_->Counters().cache.evictions, 1u);
  TrackedFree(buf, n);
  cuMemFree(dev);
}

std::mutex g_events_mu;
std::vector<OwnPinEvent> g_events;
void CollectEvent(const OwnPinEvent& e) {
  std::lock_guard<std::mutex> lock(g_events_mu);
  g_events.push_back(e);
}

// The pin cap under pressure, and what pinshim reports about its own
// pinning: a registration and a pool slab refused for the cap without
// evicting anything (what is idle could not make room; the program's
// request then gets an allocation of its own), a registration that evicts
// the least recently used one to fit, unpinning for the program's own
// registration and free, and eviction for the budget.
TEST(OptimizerOwnPinning, CapEvictsAndRefusesAndEveryActionIsReported) {
  CUcontext ctx = MakeContextCurrent();
  ASSERT_NE(ctx, nullptr);
  g_events.clear();
  Registry allocations, registrations;
  auto opt = std::make_unique<Optimizer>();
  OptimizerOptions o;
  o.allocations = &allocations;
  o.registrations = &registrations;
  o.next_alloc_id = &NextId;
  o.pin_cap_bytes = 8 * kMiB;
  o.enable_arena = false;
  o.on_own_pin = &CollectEvent;
  opt->Configure(o);
  ASSERT_TRUE(opt->AttachDriver(FakeDriverOps()));
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, 8 * kMiB), CUDA_SUCCESS);
  auto track = [&](size_t n) {
    char* p = static_cast<char*>(malloc(n));
    Region r;
    r.start = reinterpret_cast<uintptr_t>(p);
    r.bytes = n;
    r.id = NextId();
    r.source = kSourceMalloc;
    allocations.Insert(r);
    return std::make_pair(p, r.id);
  };
  auto upload = [&](const char* p, size_t n, int times) {
    for (int i = 0; i < times; ++i) {
      Region r;
      MemKind kind =
          registrations.Lookup(reinterpret_cast<uintptr_t>(p), &r) ? r.kind : MemKind::kPageable;
      CopyTicket t = opt->BeforeHostCopy(p, n, CopyDir::kHostToDevice, kind, true, true);
      CUresult res = cuMemcpyHtoD(dev, p, n);
      opt->AfterHostCopy(t, res, false, nullptr, false);
    }
  };
  auto release = [&](std::pair<char*, uint64_t> b, size_t n) {
    opt->OnRelease(b.first, n);
    allocations.Remove(reinterpret_cast<uintptr_t>(b.first), nullptr);
    free(b.first);
  };
  CUresult r;
  void* held = nullptr;
  ASSERT_TRUE(opt->HostAlloc(&held, 1 * kMiB, 0, &r));  // a 2 MiB slab
  ASSERT_EQ(r, CUDA_SUCCESS);
  auto a = track(4 * kMiB);
  upload(a.first, 4 * kMiB, 3);  // registered: 6 MiB of 8
  auto b = track(7 * kMiB);
  upload(b.first, 7 * kMiB, 3);  // even without a it would not fit: refused, a kept
  EXPECT_TRUE(opt->HidesPinning(a.first));
  void* big = nullptr;
  ASSERT_TRUE(opt->HostAlloc(&big, 7 * kMiB, 0, &r));  // no slab fits: its own allocation
  ASSERT_EQ(r, CUDA_SUCCESS);
  ASSERT_TRUE(opt->FreeHost(big, &r));
  auto c = track(4 * kMiB);
  upload(c.first, 4 * kMiB, 3);  // fits once a, the least recently used, is evicted
  EXPECT_FALSE(opt->HidesPinning(a.first));
  EXPECT_FALSE(opt->ProgramRegister(c.first, 4 * kMiB, 0, &r));  // unpinned, then forwarded
  ASSERT_TRUE(opt->FreeHost(held, &r));
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_GE(opt->Evict(UINT64_MAX), 2 * kMiB);  // the idle slab, for the budget
  const auto a_start = reinterpret_cast<uintptr_t>(a.first);
  const auto b_start = reinterpret_cast<uintptr_t>(b.first);
  const auto c_start = reinterpret_cast<uintptr_t>(c.first);
  release(a, 4 * kMiB);
  release(b, 7 * kMiB);
  release(c, 4 * kMiB);

  struct Expect {
    OwnPinAction action;
    OwnPinPart part;
    OwnPinReason reason;
    uint64_t bytes;     // 0: not checked
    uint64_t alloc_id;  // UINT64_MAX: nonzero
  };
  const Expect kExpected[] = {
      {OwnPinAction::kPinned, OwnPinPart::kPoolSlab, OwnPinReason::kNone, 2 * kMiB, 0},
      {OwnPinAction::kPinned, OwnPinPart::kCache, OwnPinReason::kNone, 4 * kMiB, a.second},
      {OwnPinAction::kRefused, OwnPinPart::kCache, OwnPinReason::kRefusedCap, 7 * kMiB, b.second},
      {OwnPinAction::kRefused, OwnPinPart::kPoolSlab, OwnPinReason::kRefusedCap, 0, 0},
      {OwnPinAction::kPinned, OwnPinPart::kPoolDedicated, OwnPinReason::kNone, 7 * kMiB, 0},
      {OwnPinAction::kUnpinned, OwnPinPart::kPoolDedicated, OwnPinReason::kProgramReleased,
       7 * kMiB, UINT64_MAX},
      {OwnPinAction::kUnpinned, OwnPinPart::kCache, OwnPinReason::kEvictedForCap, 4 * kMiB,
       a.second},
      {OwnPinAction::kPinned, OwnPinPart::kCache, OwnPinReason::kNone, 4 * kMiB, c.second},
      {OwnPinAction::kUnpinned, OwnPinPart::kCache, OwnPinReason::kProgramRegistered, 4 * kMiB,
       c.second},
      {OwnPinAction::kUnpinned, OwnPinPart::kPoolSlab, OwnPinReason::kEvictedForBudget, 2 * kMiB,
       0},
  };
  const size_t n = sizeof(kExpected) / sizeof(kExpected[0]);
  ASSERT_EQ(g_events.size(), n);
  for (size_t i = 0; i < n; ++i) {
    const OwnPinEvent& e = g_events[i];
    const Expect& x = kExpected[i];
    EXPECT_EQ(e.action, x.action) << i;
    EXPECT_EQ(e.part, x.part) << i;
    EXPECT_EQ(e.reason, x.reason) << i;
    if (x.bytes != 0) {
      EXPECT_EQ(e.bytes, x.bytes) << i;
    }
    if (x.alloc_id == UINT64_MAX) {
      EXPECT_NE(e.alloc_id, 0u) << i;
    } else {
      EXPECT_EQ(e.alloc_id, x.alloc_id) << i;
    }
    EXPECT_EQ(e.result, CUDA_SUCCESS) << i;
    if (e.action != OwnPinAction::kRefused || e.part == OwnPinPart::kCache) {
      EXPECT_NE(e.ptr, nullptr) << i;
    }
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g_events[1].ptr), a_start);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g_events[2].ptr), b_start);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g_events[7].ptr), c_start);

  const OptimizeCountersEvent k = CountersForTrace(opt->Counters());
  EXPECT_EQ(k.pin_cap_bytes, 8 * kMiB);
  EXPECT_EQ(k.pinned_bytes_now, 0u);
  // The dedicated allocation is not capped: it is what the program asked for.
  EXPECT_EQ(k.pinned_bytes_peak, 2 * kMiB + 4 * kMiB + 7 * kMiB);
  EXPECT_EQ(k.pool_misses, 2u);
  EXPECT_EQ(k.pool_dedicated, 1u);
  EXPECT_EQ(k.cache_registrations, 2u);
  EXPECT_EQ(k.cache_evictions, 1u);
  EXPECT_EQ(k.cache_releases, 1u);
  EXPECT_GE(k.pin_refusals, 2u);
  EXPECT_EQ(k.evicted_bytes, 4 * kMiB);
  EXPECT_GT(k.saved_copy_ns, 0u);
  cuMemFree(dev);
}

Optimizer* g_fork_optimizer = nullptr;

TEST_F(OptimizerTest, ForkChildStopsOptimizingAndKeepsItsMemory) {
  g_fork_optimizer = opt_.get();
  static bool registered = false;
  if (!registered) {
    pthread_atfork([] { g_fork_optimizer->PrepareFork(); },
                   [] { g_fork_optimizer->AfterForkParent(); },
                   [] { g_fork_optimizer->AfterForkChild(); });
    registered = true;
  }
  char* a = static_cast<char*>(opt_->arena().Malloc(100 * kKiB));
  Fill(a, 100 * kKiB, 9);
  pid_t pid = fork();
  if (pid == 0) {
    void* p;
    CUresult r;
    bool ok = !opt_->active() && !opt_->HostAlloc(&p, 4096, 0, &r) &&
              HasPattern(a, 100 * kKiB, 9) && opt_->arena().Malloc(10) == nullptr;
    opt_->arena().Free(a);  // harmless in the child
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(opt_->active());
  void* p = nullptr;
  CUresult r;
  ASSERT_TRUE(opt_->HostAlloc(&p, 4096, 0, &r));
  EXPECT_EQ(r, CUDA_SUCCESS);
  ASSERT_TRUE(opt_->FreeHost(p, &r));
  opt_->arena().Free(a);
}

TEST_F(OptimizerTest, SixteenThreadsMixEverything) {
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(ctx_);
      CUstream s;
      cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      const size_t n = 256 * kKiB;
      CUdeviceptr dev;
      cuMemAlloc(&dev, n);
      std::mt19937 rng(t);
      char* mine = TrackedMalloc(n);
      for (int i = 0; i < 60; ++i) {
        char* host;
        void* pinned = nullptr;
        CUresult r;
        switch (rng() % 3) {
          case 0:
            opt_->HostAlloc(&pinned, n, 0, &r);
            host = static_cast<char*>(pinned);
            break;
          case 1: host = static_cast<char*>(opt_->arena().Malloc(n)); break;
          default: host = mine; break;
        }
        if (host == nullptr) {
          bad++;
          continue;
        }
        const uint8_t seed = static_cast<uint8_t>(t * 13 + i);
        Fill(host, n, seed);
        CopyTicket tk =
            opt_->BeforeHostCopy(host, n, CopyDir::kHostToDevice, Classify(host), false, true);
        r = cuMemcpyHtoDAsync(dev, host, n, s);
        opt_->AfterHostCopy(tk, r, true, s, false);
        if (pinned != nullptr) {
          cuStreamSynchronize(s);  // the program's own pinned memory: it syncs
        }
        memset(host, 0, n);
        tk = opt_->BeforeHostCopy(host, n, CopyDir::kDeviceToHost, Classify(host), false, true);
        r = cuMemcpyDtoHAsync(host, dev, n, s);
        opt_->AfterHostCopy(tk, r, true, s, false);
        if (pinned != nullptr) cuStreamSynchronize(s);
        if (!HasPattern(host, n, seed)) bad++;
        if (pinned != nullptr) {
          if (!opt_->FreeHost(pinned, &r) || r != CUDA_SUCCESS) bad++;
        } else if (host != mine) {
          opt_->arena().Free(host);
        }
      }
      TrackedFree(mine, n);
      cuMemFree(dev);
      cuStreamDestroy(s);
    });
  }
  for (auto& th : threads) th.join();
  ExpectEngineInvariants();
  EXPECT_EQ(bad.load(), 0);
  const OptimizeCounters c = opt_->Counters();
  EXPECT_EQ(c.pool.live_blocks, 0u);
  EXPECT_EQ(c.cache.entries, 0u);
  EXPECT_EQ(c.arena.allocs, c.arena.frees);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
