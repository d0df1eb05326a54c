#include "shim/optimize/host_arena.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shim/core/registry.h"
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

class ArenaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = MakeContextCurrent();
    ASSERT_NE(ctx_, nullptr);
    ops_ = FakeDriverOps();
    ASSERT_TRUE(fences_.Init(&ops_));
    baseline_ = fakecuda_live_registrations();
  }

  void Start(uint64_t cap = PinAccount::kNoCap, ArenaOptions options = ArenaOptions()) {
    account_.Init(cap, PinAccountHooks());
    options.reserve_bytes = uint64_t{4} << 30;
    options.registrations = &registrations_;
    options.now_ns = &ManualClock::Now;
    ASSERT_TRUE(arena_->Init(&ops_, &fences_, &account_, options));
    arena_->SetHomeContext(ctx_);
  }

  void TearDown() override {
    fakecuda_set_copy_delay_us(0);
    ExpectInvariants(account_);
  }

  CUcontext ctx_ = nullptr;
  DriverOps ops_;
  FenceManager fences_;
  PinAccount account_;
  Registry registrations_;
  Checked<HostArena> arena_;  // every call walks the arena's invariants
  size_t baseline_ = 0;
};

TEST_F(ArenaTest, MallocAlignsUsableAndOwns) {
  Start();
  std::mt19937_64 rng(1);
  std::vector<std::pair<char*, size_t>> blocks;
  for (int i = 0; i < 2000; ++i) {
    size_t n = (i % 10 == 0) ? rng() % (4 * kMiB) : rng() % 5000;
    char* p = static_cast<char*>(arena_->Malloc(n));
    ASSERT_NE(p, nullptr) << n;
    EXPECT_TRUE(arena_->Owns(p));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    EXPECT_GE(arena_->UsableSize(p), n);
    memset(p, i & 0xff, n);
    blocks.push_back({p, n});
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto [p, n] = blocks[i];
    for (size_t j = 0; j < n; j += 97) ASSERT_EQ(static_cast<uint8_t>(p[j]), i & 0xff);
    arena_->Free(p);
  }
  int local;
  EXPECT_FALSE(arena_->Owns(&local));
  EXPECT_FALSE(arena_->Owns(nullptr));
  EXPECT_EQ(arena_->Stats().frees, 2000u);
}

// Waste: a small block is under 25% larger than request + header, a large
// one wastes under a page (+ header).
TEST_F(ArenaTest, WasteBoundOverRandomSizes) {
  Start();
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> log_size(0, std::log2(8.0 * kMiB));
  double worst_small = 0;
  for (int i = 0; i < 3000; ++i) {
    size_t n = static_cast<size_t>(std::exp2(log_size(rng)));
    void* p = arena_->Malloc(n);
    ASSERT_NE(p, nullptr);
    size_t usable = arena_->UsableSize(p);
    ASSERT_GE(usable, n);
    if (n + 16 <= 64) {
      ASSERT_LT(usable - n, 16u) << n;  // 16-byte steps
    } else if (n + 16 <= 256 * kKiB) {
      // usable + header is the class size.
      double ratio = static_cast<double>(usable + 16) / (n + 16);
      ASSERT_LT(ratio, 1.25) << n;
      worst_small = std::max(worst_small, ratio);
    } else {
      ASSERT_LT(usable - n, 4096u) << n;
    }
    arena_->Free(p);
  }
  RecordProperty("worst_small_block_over_request_pct", std::to_string((worst_small - 1) * 100));
}

TEST_F(ArenaTest, MemalignHonoursEveryPowerOfTwo) {
  Start();
  for (size_t align = 1; align <= 4 * kMiB; align *= 2) {
    for (size_t n : {size_t{1}, size_t{100}, size_t{5000}, size_t{300 * kKiB}}) {
      void* p = arena_->Memalign(align, n);
      ASSERT_NE(p, nullptr) << align << " " << n;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % std::max<size_t>(align, 16), 0u) << align;
      EXPECT_GE(arena_->UsableSize(p), n);
      memset(p, 0x5a, n);
      arena_->Free(p);
    }
  }
  EXPECT_EQ(arena_->Memalign(24, 100), nullptr);
  EXPECT_EQ(arena_->Memalign(0, 100), nullptr);
}

TEST_F(ArenaTest, CallocZeroesReusedMemory) {
  Start();
  for (size_t n : {size_t{64}, size_t{4000}, size_t{100 * kKiB}, size_t{3 * kMiB}}) {
    char* p = static_cast<char*>(arena_->Malloc(n));
    ASSERT_NE(p, nullptr);
    memset(p, 0xff, n);
    arena_->Free(p);
    char* q = static_cast<char*>(arena_->Calloc(1, n));
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q, p);  // the same block came back, and it is zero
    EXPECT_TRUE(std::all_of(q, q + n, [](char c) { return c == 0; })) << n;
    arena_->Free(q);
  }
  EXPECT_EQ(arena_->Calloc(SIZE_MAX / 2, 4), nullptr);
}

TEST_F(ArenaTest, ReallocPreservesContentInPlaceOrMoved) {
  Start();
  // Small: growing past the class moves.
  char* p = static_cast<char*>(arena_->Malloc(100));
  Fill(p, 100, 1);
  char* q = static_cast<char*>(arena_->Realloc(p, 5000, nullptr));
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p);
  EXPECT_TRUE(HasPattern(q, 100, 1));
  // Shrinking a little stays in place.
  EXPECT_EQ(arena_->Realloc(q, 4000, nullptr), q);
  EXPECT_TRUE(HasPattern(q, 100, 1));
  // Large: grows in place into free pages after it in its registration
  // (an 8 MiB registration, freed, then reused by a 2 MiB block).
  arena_->Free(arena_->Malloc(8 * kMiB));
  char* big = static_cast<char*>(arena_->Malloc(2 * kMiB));
  Fill(big, 2 * kMiB, 2);
  char* grown = static_cast<char*>(arena_->Realloc(big, 3 * kMiB, nullptr));
  EXPECT_EQ(grown, big);
  EXPECT_TRUE(HasPattern(grown, 2 * kMiB, 2));
  EXPECT_GE(arena_->UsableSize(grown), 3 * kMiB);
  // Shrinks in place, giving pages back.
  EXPECT_EQ(arena_->Realloc(grown, 1 * kMiB, nullptr), grown);
  EXPECT_LT(arena_->UsableSize(grown), 1 * kMiB + 4096);
  EXPECT_TRUE(HasPattern(grown, 1 * kMiB, 2));
  // Growing where a live block is in the way moves.
  char* blocker = static_cast<char*>(arena_->Malloc(1 * kMiB));
  char* moved = static_cast<char*>(arena_->Realloc(grown, 8 * kMiB, nullptr));
  ASSERT_NE(moved, nullptr);
  EXPECT_TRUE(HasPattern(moved, 1 * kMiB, 2));
  // Moving out of the arena when it cannot serve.
  static char outside[64 * 1024];
  char* out = static_cast<char*>(
      arena_->Realloc(q, size_t{1} << 61, [](size_t) -> void* { return outside; }));
  EXPECT_EQ(out, outside);
  EXPECT_TRUE(HasPattern(outside, 64, 1));
  // realloc(p, 0) frees.
  const uint64_t frees = arena_->Stats().frees;
  EXPECT_EQ(arena_->Realloc(moved, 0, nullptr), nullptr);
  EXPECT_EQ(arena_->Stats().frees, frees + 1);
  arena_->Free(blocker);
}

TEST_F(ArenaTest, MemoryIsRegisteredAndInTheRegistry) {
  Start();
  void* p = arena_->Malloc(1 * kMiB);
  ASSERT_NE(p, nullptr);
  unsigned type = 0;
  ASSERT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(p)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_HOST));
  Region r;
  ASSERT_TRUE(registrations_.Lookup(reinterpret_cast<uintptr_t>(p) + 100, &r));
  EXPECT_EQ(r.kind, MemKind::kPinnedByPinshim);
  EXPECT_LE(r.start, reinterpret_cast<uintptr_t>(p));
  EXPECT_GE(r.start + r.bytes, reinterpret_cast<uintptr_t>(p) + 1 * kMiB);
  EXPECT_GT(fakecuda_live_registrations(), baseline_);
  EXPECT_EQ(account_.pinned_for(PinUse::kArena), arena_->Stats().registered_bytes);
  // A pinned copy is asynchronous: with the stream held it stays queued.
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, 1 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, p, 1 * kMiB, stream), CUDA_SUCCESS);
  EXPECT_GT(fakecuda_pending_ops(), 0u);
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  arena_->Free(p);
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

TEST_F(ArenaTest, IdleExtentsAreTrimmedAndReusedAfterwards) {
  Start();
  void* p = arena_->Malloc(6 * kMiB);
  ASSERT_NE(p, nullptr);
  const size_t regs = fakecuda_live_registrations();
  arena_->Free(p);
  EXPECT_EQ(arena_->TrimIdle(), 0u);
  ManualClock::Advance(11ull * 1000000000);
  EXPECT_GE(arena_->TrimIdle(), 6 * kMiB);
  EXPECT_EQ(fakecuda_live_registrations(), regs - 1);
  Region r;
  EXPECT_FALSE(registrations_.Lookup(reinterpret_cast<uintptr_t>(p), &r));
  // The address range is reusable: registered afresh.
  char* q = static_cast<char*>(arena_->Malloc(6 * kMiB));
  ASSERT_NE(q, nullptr);
  memset(q, 1, 6 * kMiB);
  EXPECT_EQ(fakecuda_live_registrations(), regs);
  arena_->Free(q);
  EXPECT_GE(arena_->Trim(UINT64_MAX), 6 * kMiB);
}

// A block freed while a copy noted on it is queued is not reused until
// the copy ran; the device receives the bytes the block held.
TEST_F(ArenaTest, FreeWaitsForNotedCopies) {
  Start();
  const size_t n = 512 * kKiB;
  CUstream stream;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  char* a = static_cast<char*>(arena_->Malloc(n));
  Fill(a, n, 3);
  ASSERT_EQ(fakecuda_hold_stream(stream, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, a + 4096, n - 4096, stream), CUDA_SUCCESS);
  arena_->NoteAsyncUse(a + 4096, n - 4096, stream);
  arena_->Free(a);
  EXPECT_EQ(arena_->Stats().deferred_frees, 1u);
  std::vector<void*> others;
  for (int i = 0; i < 10; ++i) {
    char* b = static_cast<char*>(arena_->Malloc(n));
    ASSERT_NE(b, a);
    Fill(b, n, 4);
    others.push_back(b);
  }
  ASSERT_EQ(fakecuda_hold_stream(stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  std::vector<char> back(n - 4096);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev, n - 4096), CUDA_SUCCESS);
  std::vector<char> expect(n);
  Fill(expect.data(), n, 3);
  EXPECT_EQ(memcmp(back.data(), expect.data() + 4096, n - 4096), 0);
  // Now it comes back.
  bool reused = false;
  for (int i = 0; i < 4 && !reused; ++i) {
    void* b = arena_->Malloc(n);
    others.push_back(b);
    reused = b == a;
  }
  EXPECT_TRUE(reused);
  for (void* b : others) arena_->Free(b);
  cuMemFree(dev);
  cuStreamDestroy(stream);
}

TEST_F(ArenaTest, ThreadsWithoutContextUseTheHomeContext) {
  Start();
  void* p = nullptr;
  std::thread([&] { p = arena_->Malloc(3 * kMiB); }).join();
  ASSERT_NE(p, nullptr);
  arena_->Free(p);
}

TEST_F(ArenaTest, DeclinesWhatItCannotPin) {
  Start(1 * kMiB);
  EXPECT_EQ(arena_->Malloc(4 * kMiB), nullptr);  // over the cap
  EXPECT_GT(arena_->Stats().declined, 0u);
  void* small = arena_->Malloc(100);  // a 64 KiB span fits
  EXPECT_NE(small, nullptr);
  arena_->Free(small);
}

std::vector<OwnPinEvent> g_arena_events;
void CollectArenaEvent(const OwnPinEvent& e) { g_arena_events.push_back(e); }

// Every extent registered, refused and given back is reported, with why.
TEST_F(ArenaTest, ReportsItsOwnPinning) {
  g_arena_events.clear();
  ArenaOptions options;
  options.on_own_pin = &CollectArenaEvent;
  Start(8 * kMiB, options);
  void* p = arena_->Malloc(6 * kMiB);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(arena_->Malloc(4 * kMiB), nullptr);  // 6 + 4 > 8, and p is in use
  arena_->Free(p);
  ManualClock::Advance(11ull * 1000000000);
  EXPECT_GE(arena_->TrimIdle(), 6 * kMiB);
  ASSERT_EQ(g_arena_events.size(), 3u);
  const OwnPinEvent& pinned = g_arena_events[0];
  EXPECT_EQ(pinned.action, OwnPinAction::kPinned);
  EXPECT_EQ(pinned.part, OwnPinPart::kArena);
  EXPECT_EQ(pinned.reason, OwnPinReason::kNone);
  EXPECT_GE(pinned.bytes, 6 * kMiB);
  EXPECT_TRUE(arena_->Owns(pinned.ptr));
  const OwnPinEvent& refused = g_arena_events[1];
  EXPECT_EQ(refused.action, OwnPinAction::kRefused);
  EXPECT_EQ(refused.reason, OwnPinReason::kRefusedCap);
  EXPECT_GE(refused.bytes, 4 * kMiB);
  const OwnPinEvent& trimmed = g_arena_events[2];
  EXPECT_EQ(trimmed.action, OwnPinAction::kUnpinned);
  EXPECT_EQ(trimmed.reason, OwnPinReason::kIdleTrim);
  EXPECT_EQ(trimmed.ptr, pinned.ptr);
  EXPECT_EQ(trimmed.bytes, pinned.bytes);
  EXPECT_EQ(trimmed.result, CUDA_SUCCESS);
}

TEST_F(ArenaTest, SixteenThreadsAllocateAndFreeAcrossThreads) {
  Start();
  // The threads call the arena at once: the walk waits until they joined.
  HostArena& arena = arena_.raw();
  constexpr int kThreads = 16;
  std::vector<std::atomic<char*>> handoff(kThreads * 64);
  for (auto& h : handoff) h.store(nullptr);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 3000; ++i) {
        size_t n = (rng() % 50 == 0) ? 300 * kKiB + rng() % (2 * kMiB) : 1 + rng() % 2000;
        char* p;
        switch (rng() % 3) {
          case 0: p = static_cast<char*>(arena.Malloc(n)); break;
          case 1: p = static_cast<char*>(arena.Calloc(1, n)); break;
          default: p = static_cast<char*>(arena.Memalign(64, n)); break;
        }
        if (p == nullptr) {
          bad++;
          continue;
        }
        p[0] = static_cast<char>(t);
        p[n - 1] = static_cast<char>(t);
        // Hand the block to a random slot; whatever was there is checked
        // and freed here, by another thread than the one that made it.
        char* old = handoff[rng() % handoff.size()].exchange(p);
        if (old != nullptr) {
          size_t m = arena.UsableSize(old);
          if (m == 0) bad++;
          arena.Free(old);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ExpectInvariants(arena);
  for (auto& h : handoff) arena_->Free(h.exchange(nullptr));
  EXPECT_EQ(bad.load(), 0);
  const ArenaStats s = arena_->Stats();
  EXPECT_EQ(s.allocs, s.frees);
  EXPECT_EQ(s.bad_frees, 0u);
}

// Differential test: the same random sequence of malloc / realloc / free
// on the arena and on glibc; contents must agree after every step.
TEST_F(ArenaTest, BehavesLikeGlibcOverARandomSequence) {
  Start();
  constexpr int kSlots = 128;
  struct Slot {
    char* arena = nullptr;
    char* libc = nullptr;
    size_t n = 0;
  } slots[kSlots];
  std::mt19937_64 rng(7);
  // A byte pattern that differs per block and per offset, cheap to write.
  auto FillBoth = [](char* a, char* l, size_t from, size_t to, uint64_t seed) {
    for (size_t i = from; i < to; ++i) {
      a[i] = l[i] = static_cast<char>(seed + (i >> 3) * 131 + i);
    }
  };
  auto random_size = [&] {
    switch (rng() % 4) {
      case 0: return static_cast<size_t>(rng() % 64);
      case 1: return static_cast<size_t>(rng() % 4096);
      case 2: return static_cast<size_t>(rng() % (256 * kKiB));
      default: return static_cast<size_t>(rng() % (3 * kMiB));
    }
  };
  for (int step = 0; step < 6000; ++step) {
    Slot& s = slots[rng() % kSlots];
    int op = static_cast<int>(rng() % 3);
    if (s.arena == nullptr || op == 0) {
      if (s.arena != nullptr) {
        arena_->Free(s.arena);
        free(s.libc);
      }
      s.n = random_size();
      s.arena = static_cast<char*>(arena_->Malloc(s.n));
      s.libc = static_cast<char*>(malloc(s.n));
      ASSERT_NE(s.arena, nullptr);
      FillBoth(s.arena, s.libc, 0, s.n, rng());
    } else if (op == 1) {
      size_t n = random_size();
      if (n == 0) n = 1;  // realloc(p, 0) frees: covered elsewhere
      char* a = static_cast<char*>(arena_->Realloc(s.arena, n, nullptr));
      char* l = static_cast<char*>(realloc(s.libc, n));
      ASSERT_NE(a, nullptr);
      ASSERT_EQ(memcmp(a, l, std::min(n, s.n)), 0) << step;
      if (n > s.n) FillBoth(a, l, s.n, n, rng());
      s.arena = a;
      s.libc = l;
      s.n = n;
    } else {
      arena_->Free(s.arena);
      free(s.libc);
      s.arena = s.libc = nullptr;
      continue;
    }
    ASSERT_GE(arena_->UsableSize(s.arena), s.n);
    ASSERT_EQ(memcmp(s.arena, s.libc, s.n), 0) << step;
  }
  for (Slot& s : slots) {
    if (s.arena == nullptr) continue;
    ASSERT_EQ(memcmp(s.arena, s.libc, s.n), 0);
    arena_->Free(s.arena);
    free(s.libc);
  }
  EXPECT_EQ(arena_->Stats().bad_frees, 0u);
}

// The walker proves its power: each corruption breaks one invariant, the
// walk names it, and undoing it makes the arena whole again.
TEST_F(ArenaTest, InvariantWalkerReportsEachCorruption) {
  Start();
  void* big = arena_->Malloc(3 * kMiB);
  void* small = arena_->Malloc(100);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  arena_->Free(arena_->Malloc(1 * kMiB));  // a free run inside a registration
  const testing::Corruption<HostArena> cases[] = {
      {HostArena::Corruption::kRuns, "A1 "},
      {HostArena::Corruption::kExtentLive, "A6 "},
      {HostArena::Corruption::kRegisteredBytes, "A10 "},
  };
  testing::ExpectWalkerReportsEach(arena_.raw(), cases);
  arena_->Free(big);
  arena_->Free(small);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
