#include "shim/optimize/registration_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shim/core/registry.h"
#include "shim/optimize/cost_model.h"
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

// A page-aligned heap buffer posing as a tracked malloc allocation.
struct Buffer {
  explicit Buffer(uint64_t n, uint64_t id) : bytes(n) {
    data = static_cast<char*>(aligned_alloc(4096, (n + 4095) / 4096 * 4096));
    region.start = reinterpret_cast<uintptr_t>(data);
    region.bytes = n;
    region.id = id;
    region.kind = MemKind::kPageable;
    region.source = kSourceMalloc;
  }
  ~Buffer() { free(data); }
  char* data;
  uint64_t bytes;
  Region region;
};

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = MakeContextCurrent();
    ASSERT_NE(ctx_, nullptr);
    ops_ = FakeDriverOps();
    ASSERT_TRUE(fences_.Init(&ops_));
    baseline_ = fakecuda_live_registrations();
  }

  void Start(uint64_t cap = PinAccount::kNoCap, CacheOptions options = CacheOptions()) {
    account_.Init(cap, PinAccountHooks());
    account_.AddEvictor(
        [](void* arg, uint64_t want, OwnPinReason why) {
          return static_cast<RegistrationCache*>(arg)->Evict(want, why);
        },
        &cache_.raw());  // the account calls it inside an operation: no walk there
    options.registrations = &registrations_;
    options.now_ns = &ManualClock::Now;
    ASSERT_TRUE(cache_->Init(&ops_, &fences_, &account_, options));
  }

  void TearDown() override {
    fakecuda_set_copy_delay_us(0);
    cache_->Evict(UINT64_MAX);
    EXPECT_EQ(fakecuda_live_registrations(), baseline_);
    EXPECT_EQ(account_.pinned(), 0u);
    ExpectInvariants(account_);
  }

  // One synchronous copy as a hook makes it: before, the copy, after.
  CacheTicket Copy(Buffer& b, uint64_t bytes, CopyDir dir) {
    Region r;
    CacheTicket t;
    if (registrations_.Lookup(b.region.start, &r)) {
      t = cache_->OnCachedCopy(b.data, bytes, dir);
    } else {
      t = cache_->OnPageableCopy(b.region, b.data, bytes, dir);
    }
    cache_->AfterCopy(t, CUDA_SUCCESS, false, nullptr);
    return t;
  }

  bool Registered(const Buffer& b) {
    Region r;
    return registrations_.Lookup(b.region.start, &r) && r.kind == MemKind::kPinnedByPinshim &&
           cache_->Contains(b.data, nullptr, nullptr);
  }

  CUcontext ctx_ = nullptr;
  DriverOps ops_;
  FenceManager fences_;
  PinAccount account_;
  Registry registrations_;
  Checked<RegistrationCache> cache_;  // every call walks the cache's invariants
  size_t baseline_ = 0;
};

TEST_F(CacheTest, ColdBufferIsNotRegistered) {
  Start();
  Buffer b(16 * kMiB, 1);
  EXPECT_FALSE(Copy(b, b.bytes, CopyDir::kHostToDevice).pinned());
  EXPECT_FALSE(Registered(b));
  EXPECT_EQ(fakecuda_live_registrations(), baseline_);
  EXPECT_EQ(cache_->Stats().registrations, 0u);
}

// The copy that gets the allocation registered is the one the cost model
// names: copies before it run pageable, it and all after run pinned.
TEST_F(CacheTest, HotBufferIsRegisteredAfterTheModelsCount) {
  Start();
  struct Case {
    uint64_t alloc, copy;
    CopyDir dir;
  } cases[] = {
      {64 * kKiB, 64 * kKiB, CopyDir::kHostToDevice},
      {1 * kMiB, 1 * kMiB, CopyDir::kHostToDevice},
      {1 * kMiB, 1 * kMiB, CopyDir::kDeviceToHost},
      {16 * kMiB, 16 * kMiB, CopyDir::kHostToDevice},
      {16 * kMiB, 2 * kMiB, CopyDir::kDeviceToHost},
  };
  uint64_t id = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.alloc);
    Buffer b(c.alloc, ++id);
    const uint32_t k = CostModel::BreakEvenCopies(c.alloc, c.copy, c.dir);
    ASSERT_GE(k, 2u);
    ASSERT_LT(k, 1000u);
    for (uint32_t i = 1; i < k; ++i) {
      EXPECT_FALSE(Copy(b, c.copy, c.dir).pinned()) << i;
      EXPECT_FALSE(Registered(b)) << i;
    }
    EXPECT_TRUE(Copy(b, c.copy, c.dir).pinned());
    EXPECT_TRUE(Registered(b));
    EXPECT_TRUE(Copy(b, c.copy, c.dir).pinned());  // and stays
    cache_->OnRelease(b.data, b.bytes);
    EXPECT_FALSE(Registered(b));
  }
  EXPECT_EQ(cache_->Stats().registrations, 5u);
  EXPECT_EQ(cache_->Stats().releases, 5u);
}

// The same count of copies, spread out over a long time, never pays: the
// reuse rate is too low for the saving to cover the pinning cost.
TEST_F(CacheTest, RarelyCopiedBufferIsNeverRegistered) {
  Start();
  Buffer b(1 * kMiB, 7);
  for (int i = 0; i < 50; ++i) {
    EXPECT_FALSE(Copy(b, b.bytes, CopyDir::kHostToDevice).pinned());
    ManualClock::Advance(20ull * 1000000000);
  }
  EXPECT_FALSE(Registered(b));
}

TEST_F(CacheTest, SmallCopiesNeverPay) {
  Start();
  Buffer b(64 * kKiB, 8);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(Copy(b, 4 * kKiB, CopyDir::kHostToDevice).pinned());
  EXPECT_FALSE(Registered(b));
}

TEST_F(CacheTest, UntrackedAndSubAllocatedMemoryIsDeclined) {
  Start();
  Buffer b(16 * kMiB, 9);
  Region untracked = b.region;
  untracked.id = 0;
  Region mmapped = b.region;
  mmapped.source = kSourceMmap;
  Region driver = b.region;
  driver.source = kSourceDriver;
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(
        cache_->OnPageableCopy(untracked, b.data, b.bytes, CopyDir::kHostToDevice).pinned());
    // A slice deep inside an mmap region: a custom allocator's sub-allocation.
    EXPECT_FALSE(
        cache_->OnPageableCopy(mmapped, b.data + 8 * kMiB, 1 * kMiB, CopyDir::kHostToDevice)
            .pinned());
    EXPECT_FALSE(cache_->OnPageableCopy(driver, b.data, b.bytes, CopyDir::kHostToDevice).pinned());
  }
  const CacheStats s = cache_->Stats();
  EXPECT_EQ(s.declined[static_cast<int>(CacheDecline::kUntracked)], 10u);
  EXPECT_EQ(s.declined[static_cast<int>(CacheDecline::kSubAllocation)], 10u);
  EXPECT_EQ(s.declined[static_cast<int>(CacheDecline::kSource)], 10u);
  EXPECT_EQ(fakecuda_live_registrations(), baseline_);
  // An mmap region used as one buffer is cached.
  bool pinned = false;
  for (int i = 0; i < 3 && !pinned; ++i) {
    CacheTicket t = cache_->OnPageableCopy(mmapped, b.data, b.bytes, CopyDir::kHostToDevice);
    cache_->AfterCopy(t, CUDA_SUCCESS, false, nullptr);
    pinned = t.pinned();
  }
  EXPECT_TRUE(pinned);
  cache_->OnRelease(b.data, b.bytes);
}

// Once cached, an asynchronous copy really is asynchronous in the driver;
// AfterCopy makes the call return only after it completed, as the pageable
// call did, so the program may overwrite its buffer at once.
TEST_F(CacheTest, AsyncCopyOnCachedMemoryIsWaitedFor) {
  Start();
  Buffer b(4 * kMiB, 11);
  while (!Copy(b, b.bytes, CopyDir::kHostToDevice).pinned()) {
  }
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, b.bytes), CUDA_SUCCESS);
  Fill(b.data, b.bytes, 3);
  fakecuda_set_copy_delay_us(50000);
  CacheTicket t = cache_->OnCachedCopy(b.data, b.bytes, CopyDir::kHostToDevice);
  ASSERT_TRUE(t.pinned());
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, b.data, b.bytes, stream), CUDA_SUCCESS);
  cache_->AfterCopy(t, CUDA_SUCCESS, true, RecordableStream(stream, false));
  EXPECT_EQ(fakecuda_pending_ops(), 0u);
  memset(b.data, 0, b.bytes);  // the program reuses its buffer at once
  fakecuda_set_copy_delay_us(0);
  std::vector<char> back(b.bytes);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev, b.bytes), CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), b.bytes, 3));
  EXPECT_EQ(cache_->Stats().async_waits, 1u);
  cache_->OnRelease(b.data, b.bytes);
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

// Invariant 3 with a copy in flight: release waits for it, then unpins.
TEST_F(CacheTest, ReleaseWaitsForInFlightCopy) {
  Start();
  Buffer b(2 * kMiB, 12);
  while (!Copy(b, b.bytes, CopyDir::kHostToDevice).pinned()) {
  }
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, b.bytes), CUDA_SUCCESS);
  Fill(b.data, b.bytes, 4);
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, b.data, b.bytes, stream), CUDA_SUCCESS);
  cache_->NoteAsyncUse(b.data, stream);
  std::atomic<bool> released{false};
  std::thread releaser([&] {
    cache_->OnRelease(b.data, b.bytes);
    released = true;
    memset(b.data, 0xee, b.bytes);  // the allocator reuses the memory
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(released.load());  // still waiting for the held copy
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  releaser.join();
  EXPECT_TRUE(released.load());
  EXPECT_FALSE(Registered(b));
  EXPECT_EQ(fakecuda_live_registrations(), baseline_);
  std::vector<char> back(b.bytes);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev, b.bytes), CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), b.bytes, 4));
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

TEST_F(CacheTest, ReleaseOfAnyPartUnpinsTheWholeRegistration) {
  Start();
  Buffer b(8 * kMiB, 13);
  while (!Copy(b, b.bytes, CopyDir::kDeviceToHost).pinned()) {
  }
  cache_->OnRelease(b.data + 5 * kMiB, 4096);  // munmap of one page inside
  EXPECT_FALSE(Registered(b));
  EXPECT_EQ(fakecuda_live_registrations(), baseline_);
  cache_->OnRelease(b.data, b.bytes);  // nothing left: harmless
}

// Memory the program registered itself is left alone, and not retried.
TEST_F(CacheTest, ProgramRegisteredMemoryIsLeftAlone) {
  Start();
  Buffer b(4 * kMiB, 14);
  ASSERT_EQ(cuMemHostRegister(b.data + 4096, 4096, 0), CUDA_SUCCESS);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(Copy(b, b.bytes, CopyDir::kHostToDevice).pinned());
  const uint64_t calls = fakecuda_call_count("cuMemHostRegister");
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(Copy(b, b.bytes, CopyDir::kHostToDevice).pinned());
  EXPECT_EQ(fakecuda_call_count("cuMemHostRegister"), calls);
  const CacheStats s = cache_->Stats();
  EXPECT_EQ(s.failures[static_cast<int>(CacheFailure::kAlreadyRegistered)], 1u);
  EXPECT_EQ(account_.pinned(), 0u);
  EXPECT_EQ(cuMemHostUnregister(b.data + 4096), CUDA_SUCCESS);  // still the program's
}

TEST_F(CacheTest, DriverOutOfMemoryIsRememberedAndCounted) {
  Start();
  Buffer b(4 * kMiB, 15);
  fakecuda_fail_next("cuMemHostRegister", CUDA_ERROR_OUT_OF_MEMORY);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(Copy(b, b.bytes, CopyDir::kHostToDevice).pinned());
  const CacheStats s = cache_->Stats();
  EXPECT_EQ(s.failures[static_cast<int>(CacheFailure::kOutOfMemory)] +
                s.failures[static_cast<int>(CacheFailure::kMemlockLimit)],
            1u);
  EXPECT_EQ(s.registrations, 0u);
}

std::vector<OwnPinEvent> g_cache_events;
void CollectCacheEvent(const OwnPinEvent& e) { g_cache_events.push_back(e); }

// A driver that refuses: the buffer stays pageable, the copy runs as the
// program made it, and the refusal is reported with the driver's result and
// the reason.
TEST_F(CacheTest, DriverRefusalsAreReportedWithTheirReason) {
  g_cache_events.clear();
  CacheOptions options;
  options.on_own_pin = &CollectCacheEvent;
  Start(PinAccount::kNoCap, options);
  Buffer a(4 * kMiB, 31), b(4 * kMiB, 32), c(4 * kMiB, 33);
  const CUresult kErrors[] = {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CUDA_ERROR_OUT_OF_MEMORY,
                              CUDA_ERROR_INVALID_VALUE};
  Buffer* buffers[] = {&a, &b, &c};
  for (int i = 0; i < 3; ++i) {
    fakecuda_fail_next("cuMemHostRegister", kErrors[i]);
    for (int k = 0; k < 4; ++k) {
      EXPECT_FALSE(Copy(*buffers[i], buffers[i]->bytes, CopyDir::kHostToDevice).pinned());
    }
  }
  ASSERT_EQ(g_cache_events.size(), 3u);  // each remembered: tried once
  rlimit lim;
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &lim), 0);
  const bool memlock = lim.rlim_cur != RLIM_INFINITY && 4 * kMiB > lim.rlim_cur;
  const OwnPinReason kReasons[] = {
      OwnPinReason::kRefusedAlreadyRegistered,
      memlock ? OwnPinReason::kRefusedMemlock : OwnPinReason::kRefusedOutOfMemory,
      OwnPinReason::kRefusedDriverError};
  for (int i = 0; i < 3; ++i) {
    const OwnPinEvent& e = g_cache_events[i];
    EXPECT_EQ(e.action, OwnPinAction::kRefused) << i;
    EXPECT_EQ(e.part, OwnPinPart::kCache) << i;
    EXPECT_EQ(e.reason, kReasons[i]) << i;
    EXPECT_EQ(e.result, kErrors[i]) << i;
    EXPECT_EQ(e.ptr, buffers[i]->data) << i;
    EXPECT_EQ(e.bytes, 4 * kMiB) << i;
    EXPECT_EQ(e.alloc_id, buffers[i]->region.id) << i;
  }
  EXPECT_EQ(account_.pinned(), 0u);
}

// The cap holds three 1 MiB registrations; a fourth hot buffer evicts the
// least recently used one.
TEST_F(CacheTest, CapEvictsLeastRecentlyUsed) {
  Start(3 * kMiB);
  Buffer a(1 * kMiB, 21), b(1 * kMiB, 22), c(1 * kMiB, 23), d(1 * kMiB, 24);
  for (Buffer* x : {&a, &b, &c}) {
    while (!Copy(*x, x->bytes, CopyDir::kHostToDevice).pinned()) {
    }
  }
  EXPECT_EQ(account_.pinned(), 3 * kMiB);
  EXPECT_TRUE(Copy(a, a.bytes, CopyDir::kHostToDevice).pinned());  // b is now the oldest
  EXPECT_TRUE(Copy(c, c.bytes, CopyDir::kHostToDevice).pinned());
  while (!Copy(d, d.bytes, CopyDir::kHostToDevice).pinned()) {
  }
  EXPECT_TRUE(Registered(a));
  EXPECT_FALSE(Registered(b));
  EXPECT_TRUE(Registered(c));
  EXPECT_TRUE(Registered(d));
  EXPECT_EQ(cache_->Stats().evictions, 1u);
  EXPECT_LE(account_.pinned(), 3 * kMiB);
  EXPECT_EQ(account_.peak(), 3 * kMiB);
  for (Buffer* x : {&a, &b, &c, &d}) cache_->OnRelease(x->data, x->bytes);
}

TEST_F(CacheTest, AllocationLargerThanTheCapIsDeclined) {
  Start(2 * kMiB);
  Buffer b(4 * kMiB, 31);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(Copy(b, b.bytes, CopyDir::kHostToDevice).pinned());
  EXPECT_EQ(cache_->Stats().declined[static_cast<int>(CacheDecline::kTooLarge)], 5u);
}

TEST_F(CacheTest, SixteenThreadsCopyReleaseAndEvict) {
  Start(24 * kMiB);
  // The threads call the cache at once: the walk waits until they joined.
  RegistrationCache& cache = cache_.raw();
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      cuCtxSetCurrent(ctx_);
      std::mt19937 rng(t);
      for (int round = 0; round < 6; ++round) {
        Buffer b((1 + rng() % 4) * kMiB, 1000 + t * 100 + round);
        Fill(b.data, 4096, static_cast<uint8_t>(t));
        int copies = 3 + static_cast<int>(rng() % 5);
        for (int i = 0; i < copies; ++i) {
          Region r;
          CacheTicket tk =
              registrations_.Lookup(b.region.start, &r)
                  ? cache.OnCachedCopy(b.data, b.bytes, CopyDir::kHostToDevice)
                  : cache.OnPageableCopy(b.region, b.data, b.bytes, CopyDir::kHostToDevice);
          cache.AfterCopy(tk, CUDA_SUCCESS, false, nullptr);
        }
        if (!HasPattern(b.data, 4096, static_cast<uint8_t>(t))) bad++;
        cache.OnRelease(b.data, b.bytes);
        if (cache.Contains(b.data, nullptr, nullptr)) bad++;
      }
    });
  }
  for (auto& th : threads) th.join();
  ExpectInvariants(cache);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(cache_->Stats().entries, 0u);
  EXPECT_EQ(fakecuda_live_registrations(), baseline_);
  EXPECT_LE(account_.peak(), 24 * kMiB);
  EXPECT_GT(cache_->Stats().registrations, 0u);
}

// The walker proves its power: each corruption breaks one invariant, the
// walk names it, and undoing it makes the cache whole again.
TEST_F(CacheTest, InvariantWalkerReportsEachCorruption) {
  Start();
  Buffer a(1 * kMiB, 41), b(1 * kMiB, 42);
  for (Buffer* x : {&a, &b}) {
    while (!Copy(*x, x->bytes, CopyDir::kHostToDevice).pinned()) {
    }
  }
  const testing::Corruption<RegistrationCache> cases[] = {
      {RegistrationCache::Corruption::kOrder, "C2 "},
      {RegistrationCache::Corruption::kBounds, "C4 "},
      {RegistrationCache::Corruption::kBytes, "C6 "},
  };
  testing::ExpectWalkerReportsEach(cache_.raw(), cases);
  for (Buffer* x : {&a, &b}) cache_->OnRelease(x->data, x->bytes);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
