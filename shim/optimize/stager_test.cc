// Staged copies on the simulated driver: every size and direction arrives
// whole, the semantics of pageable copies hold (host-to-device calls return
// once their source was read, synchronous ones after the stream's earlier
// work; stream order kept; device-to-host copies complete), bad device
// ranges are left to the driver, and lanes are shared by threads and
// contexts.
#include "shim/optimize/stager.h"

#include <cpuid.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "shim/optimize/test_util.h"
#include "tests/fakecuda/fakecuda_control.h"

namespace pinshim {
namespace optimize {
namespace {

using testing::Checked;
using testing::ExpectInvariants;
using testing::FakeDriverOps;
using testing::Fill;
using testing::HasPattern;
using testing::MakeContextCurrent;
using testing::Rewrite;
using testing::RewriteSource;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kSecond = 1000000000;

// The driver's cuMemHostRegister (how a ring is pinned) behind a gate the
// test holds shut: a ring a worker pins stays in flight as long as the test
// wants.
std::atomic<bool> g_hold_ring_pin{false};
std::atomic<int> g_ring_pins_held{0};
CUresult HeldHostRegister(void* p, size_t bytes, unsigned int flags) {
  g_ring_pins_held++;
  while (g_hold_ring_pin.load()) usleep(100);
  g_ring_pins_held--;
  return cuMemHostRegister(p, bytes, flags);
}

// Waits until a ring's registration is held at the gate; false after 10 s.
bool RingPinHeld() {
  for (int i = 0; i < 100000 && g_ring_pins_held.load() == 0; ++i) usleep(100);
  return g_ring_pins_held.load() != 0;
}

// The simulated driver's second device: its primary context, made current.
void MakeSecondDeviceCurrent(CUdevice* dev, CUcontext* ctx) {
  ASSERT_EQ(cuDeviceGet(dev, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(ctx, *dev), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(*ctx), CUDA_SUCCESS);
}

// Every stager the tests made, kept (and reachable, for LeakSanitizer):
// see StagerTest::stager_.
Checked<Stager>& NewStager() {
  static auto* all = new std::vector<Checked<Stager>*>();
  all->push_back(new Checked<Stager>());
  return *all->back();
}

class StagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(MakeContextCurrent(), nullptr);
    ops_ = FakeDriverOps();
    ops_.mem_host_register = &HeldHostRegister;
    account_.Init(PinAccount::kNoCap, PinAccountHooks());
    StagerOptions o = TestOptions(3);
    // The copy that needs a ring pins it: each test's first copy is staged.
    // BackgroundRingTest has the library's default.
    o.background_rings = BackgroundRings();
    o.ordered_reads = OrderedReads();
    if (PageableAccess()) ops_.device_get_attribute = &AnswersPageableAccess;
    ASSERT_TRUE(stager_->Init(&ops_, &account_, o));
    ASSERT_EQ(cuMemAlloc(&dev_, kDevBytes), CUDA_SUCCESS);
  }
  virtual bool BackgroundRings() const { return false; }
  virtual bool OrderedReads() const { return false; }
  virtual bool PageableAccess() const { return false; }
  virtual uint64_t ChunkBytes() const { return kMiB; }

  // cuDeviceGetAttribute of a system whose devices touch pageable memory.
  static CUresult AnswersPageableAccess(int* value, CUdevice_attribute a, CUdevice dev) {
    if (a != CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS) return cuDeviceGetAttribute(value, a, dev);
    *value = 1;
    return CUDA_SUCCESS;
  }

  // An asynchronous upload of n bytes of `src` on stream s behind earlier
  // work that cannot write `src` (a pinned upload elsewhere on the held
  // stream), after which the test rewrites `src` with Fill(new_seed).
  // *returned, *device: as StageWhileHeld's.
  void UploadBehindHeldWork(CUstream s, uint8_t* src, uint64_t n, uint8_t new_seed,
                            bool await_return, bool* returned, std::vector<uint8_t>* device) {
    void* pinned = nullptr;
    ASSERT_EQ(cuMemHostAlloc(&pinned, kMiB, 0), CUDA_SUCCESS);
    memset(pinned, 0x5a, kMiB);
    ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuMemcpyHtoDAsync(dev_ + 48 * kMiB, pinned, kMiB, s), CUDA_SUCCESS);
    // What the program may do once the call returned: reuse its buffer.
    StageWhileHeld(s, src, n, false, await_return, returned, device,
                   [&] { Fill(src, n, new_seed); });
    EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
  }

  // A staged upload of n bytes of `src` to the device's start on stream s,
  // held with its earlier work queued, made on a thread of its own.
  // *returned: whether the call returned while the stream was held (looked
  // at after up to 2 s with `await_return`, else after 100 ms); if it did,
  // `after_return` runs then. The stream is let go; *device: the device's
  // bytes once all is done.
  void StageWhileHeld(CUstream s, uint8_t* src, uint64_t n, bool sync, bool await_return,
                      bool* returned, std::vector<uint8_t>* device,
                      const std::function<void()>& after_return = nullptr) {
    std::atomic<bool> done{false}, calling{false};
    CUresult r = CUDA_ERROR_UNKNOWN;
    bool staged = false;
    std::thread copier([&] {
      MakeContextCurrent();
      StagedInfo info;
      calling.store(true);
      staged = stager_->Stage(CopyDir::kHostToDevice, src, dev_, n, s, sync, &r, &info);
      done.store(true);
    });
    // The stream is held until the copy has been called (on a loaded
    // machine the copier thread can start later than any fixed wait).
    while (!calling.load()) usleep(100);
    for (int i = 0; i < 2000 && await_return && !done.load(); ++i) usleep(1000);
    if (!await_return) usleep(100000);
    *returned = done.load();
    if (*returned && after_return) after_return();
    EXPECT_EQ(fakecuda_hold_stream(s, 0), CUDA_SUCCESS);
    copier.join();
    ASSERT_TRUE(staged);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    device->assign(n, 0);
    ASSERT_EQ(cuMemcpyDtoH(device->data(), dev_, n), CUDA_SUCCESS);
  }

  // The tests' stager: `workers` threads used whatever the machine's load,
  // rings of 4 slots of 1 MiB, copies from 64 KiB staged, the shared gate.
  StagerOptions TestOptions(uint32_t workers) {
    StagerOptions o;
    o.workers = workers;
    o.load_aware = false;  // a test machine's load must not decide
    o.chunk_bytes = ChunkBytes();
    o.slots = 4;
    o.min_h2d_bytes = 64 << 10;
    o.min_d2h_bytes = 64 << 10;
    o.teardown_gate = &gate_;
    return o;
  }

  void TearDown() override {
    g_hold_ring_pin.store(false);
    EXPECT_TRUE(stager_.raw().WaitForRings(10 * kSecond));
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(dev_), CUDA_SUCCESS);
    fakecuda_set_copy_delay_us(0);
    ExpectInvariants(account_);
  }

  // A staged upload of n bytes of `src` to the device's start on stream s,
  // behind a host function, queued on the held stream first, that rewrites
  // `src` with Fill(new_seed). *returned: whether the call returned while
  // the stream was held, *device: as StageWhileHeld's.
  void UploadBehindARewrite(CUstream s, uint8_t* src, uint64_t n, bool sync, uint8_t new_seed,
                            bool await_return, bool* returned, std::vector<uint8_t>* device) {
    Rewrite w{src, n, new_seed};
    ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
    stager_->NoteHostWorkQueued();  // as the cuLaunchHostFunc hook does
    ASSERT_EQ(cuLaunchHostFunc(s, RewriteSource, &w), CUDA_SUCCESS);
    StageWhileHeld(s, src, n, sync, await_return, returned, device);
  }

  // A staged round trip of n bytes through device offset `at`.
  void RoundTrip(uint64_t n, uint64_t at, CUstream stream, bool sync, uint8_t seed) {
    std::vector<uint8_t> src(n), back(n, 0);
    Fill(src.data(), n, seed);
    CUresult r = CUDA_ERROR_UNKNOWN;
    StagedInfo info;
    ASSERT_TRUE(
        stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_ + at, n, stream, sync, &r, &info));
    ASSERT_EQ(r, CUDA_SUCCESS);
    EXPECT_GE(info.workers, 1u);
    ASSERT_TRUE(
        stager_->Stage(CopyDir::kDeviceToHost, back.data(), dev_ + at, n, stream, sync, &r, &info));
    ASSERT_EQ(r, CUDA_SUCCESS);
    EXPECT_TRUE(HasPattern(back.data(), n, seed)) << n << " bytes at " << at;
  }

  static constexpr uint64_t kDevBytes = 64 * kMiB;
  DriverOps ops_;
  PinAccount account_;
  // Shared, and never destroyed: a worker leaves the gate just after its
  // ring is seen made (WaitForRings), as it does the library's (static) one.
  static ContextGate& SharedGate() {
    static ContextGate* gate = new ContextGate();
    return *gate;
  }
  ContextGate& gate_ = SharedGate();
  // Every call walks the stager's invariants. Never destroyed: its workers
  // are detached and keep looking at it for as long as the process lives,
  // as they do at the library's (static) stager.
  Checked<Stager>& stager_ = NewStager();
  CUdeviceptr dev_ = 0;
};

TEST_F(StagerTest, EverySizeArrivesWhole) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  for (uint64_t n : {uint64_t{64} << 10, uint64_t{100000}, kMiB - 1, kMiB, kMiB + 1, 3 * kMiB + 7,
                     4 * kMiB, 13 * kMiB + 4095, 40 * kMiB}) {
    RoundTrip(n, 0, s, false, static_cast<uint8_t>(n));
    RoundTrip(n, 4096 + 3, nullptr, true, static_cast<uint8_t>(n + 1));
  }
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_GE(stager_->Stats().copies, 36u);
}

// More chunks than one pass holds (kMaxChunks): the copy takes several.
TEST_F(StagerTest, CopiesLargerThanOnePass) {
  CUdeviceptr big;
  const uint64_t n = 600 * kMiB;  // 600 chunks of 1 MiB
  ASSERT_EQ(cuMemAlloc(&big, n), CUDA_SUCCESS);
  std::vector<uint8_t> src(n), back(n);
  Fill(src.data(), n, 9);
  CUresult r;
  StagedInfo info;
  ASSERT_TRUE(stager_->Stage(CopyDir::kHostToDevice, src.data(), big, n, nullptr, true, &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  ASSERT_TRUE(
      stager_->Stage(CopyDir::kDeviceToHost, back.data(), big, n, nullptr, true, &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), n, 9));
  EXPECT_EQ(cuMemFree(big), CUDA_SUCCESS);
}

// Rings of 2 MiB chunks: a download into fresh memory takes one piece per
// huge page.
class HugeChunkStagerTest : public StagerTest {
 protected:
  uint64_t ChunkBytes() const override { return 2 * kMiB; }
};

// Downloads into memory never written, starting on a page, 16 bytes past
// one and on a huge-page boundary, arrive whole; where the kernel gives huge
// pages (its mode "madvise" or "always"), each was copied out in huge-page
// pieces after its head.
TEST_F(HugeChunkStagerTest, FreshDestinationsArriveWholeInHugePagePieces) {
  const uint64_t huge = 2 * kMiB, span = 40 * kMiB;
  std::vector<uint8_t> src(24 * kMiB + 7);
  for (uint64_t start : {uint64_t{4096}, uint64_t{4096 + 16}, huge}) {
    for (uint64_t n : {24 * kMiB + 7, 10 * kMiB}) {
      const uint8_t seed = static_cast<uint8_t>(start + n);
      Fill(src.data(), n, seed);
      CUresult r = CUDA_ERROR_UNKNOWN;
      StagedInfo info;
      ASSERT_TRUE(
          stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, n, nullptr, true, &r, &info));
      ASSERT_EQ(r, CUDA_SUCCESS);
      void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(m, MAP_FAILED);
      // The destination: `start` bytes past a huge-page boundary of the map.
      const uintptr_t aligned = (reinterpret_cast<uintptr_t>(m) + huge - 1) / huge * huge;
      auto* dst = reinterpret_cast<uint8_t*>(aligned + start % huge);
      const uint64_t advised = stager_->Stats().huge_advised;
      ASSERT_TRUE(stager_->Stage(CopyDir::kDeviceToHost, dst, dev_, n, nullptr, true, &r, &info));
      ASSERT_EQ(r, CUDA_SUCCESS);
      EXPECT_TRUE(HasPattern(dst, n, seed)) << n << " bytes at +" << start;
      const HugePageMode mode = KernelHugePageMode();
      if (mode == HugePageMode::kAdvised || mode == HugePageMode::kAlways) {
        EXPECT_EQ(stager_->Stats().huge_advised, advised + 1) << n << " bytes at +" << start;
      }
      // Written again, the same memory is no longer fresh.
      ASSERT_TRUE(stager_->Stage(CopyDir::kDeviceToHost, dst, dev_, n, nullptr, true, &r, &info));
      EXPECT_TRUE(HasPattern(dst, n, seed));
      EXPECT_EQ(stager_->Stats().huge_advised,
                advised + (mode == HugePageMode::kAdvised || mode == HugePageMode::kAlways));
      munmap(m, span);
    }
  }
}

// An asynchronous host-to-device copy returns once its source was read: the
// program may overwrite it at once; its last DMAs run later, in stream order.
TEST_F(StagerTest, AsyncHostToDeviceReadsItsSourceBeforeReturning) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  // The stream starts nothing until released: every DMA is still queued
  // when the call returns, however slowly this build runs.
  ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
  // What the driver reads at once (UploadsReadTheirSourceWhenTheDriverWould):
  // returns before the DMAs ran.
  const uint64_t n = 2 * kMiB;
  std::vector<uint8_t> src(n), back(n);
  Fill(src.data(), n, 41);
  CUresult r;
  StagedInfo info;
  ASSERT_TRUE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, n, s, false, &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_GT(fakecuda_pending_ops(), 0u);  // really still queued
  Fill(src.data(), n, 42);                // the program reuses its buffer
  ASSERT_EQ(fakecuda_hold_stream(s, 0), CUDA_SUCCESS);
  // The next copy on the stream sees the first one's data.
  ASSERT_EQ(cuMemcpyDtoHAsync(back.data(), dev_, n, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), n, 41));
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// A synchronous host-to-device copy returns as the driver's pageable one
// does on the H200: once its source was read, its own DMAs possibly still
// queued (bench/RESULTS.md, page_facts sync_h2d_return).
TEST_F(StagerTest, SyncHostToDeviceReturnsBeforeItsDmasRan) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  const uint64_t n = 3 * kMiB;  // fits in the ring
  std::vector<uint8_t> src(n), back(n);
  Fill(src.data(), n, 51);
  fakecuda_set_copy_delay_us(300000);  // each DMA starts 300 ms late
  CUresult r;
  StagedInfo info;
  ASSERT_TRUE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, n, s, true, &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_GT(fakecuda_pending_ops(), 0u);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  Fill(src.data(), n, 52);  // read already
  fakecuda_set_copy_delay_us(0);
  ASSERT_EQ(cuMemcpyDtoHAsync(back.data(), dev_, n, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), n, 51));
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// The phase counters: a synchronous download whose DMAs start 50 ms late
// spends that in its copy phase (its chunks are copied out as the DMAs
// land), a synchronous upload queued behind 50 ms of earlier work spends it
// in its tail (waiting for that work); every pass is counted.
TEST_F(StagerTest, PhasesSayWhereTheTimeWent) {
  const uint64_t n = 2 * kMiB;
  std::vector<uint8_t> buf(n);
  Fill(buf.data(), n, 7);
  CUresult r;
  StagedInfo info;
  const StagerStats s0 = stager_->Stats();
  fakecuda_set_copy_delay_us(50000);
  ASSERT_TRUE(
      stager_->Stage(CopyDir::kDeviceToHost, buf.data(), dev_, n, nullptr, true, &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  const StagerStats s1 = stager_->Stats();
  EXPECT_EQ(s1.passes - s0.passes, 1u);
  EXPECT_GE(s1.copy_ns - s0.copy_ns, 50000000u);
  EXPECT_LT(s1.tail_ns - s0.tail_ns, 50000000u);
  // Earlier work on a stream held for 50 ms, then a synchronous upload.
  fakecuda_set_copy_delay_us(0);
  CUstream held;
  ASSERT_EQ(cuStreamCreate(&held, 0), CUDA_SUCCESS);
  void* pinned = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&pinned, 4096, 0), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(held, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_ + 8 * kMiB, pinned, 4096, held), CUDA_SUCCESS);
  // Released 50 ms after the upload began waiting for the stream's earlier
  // work (an event synchronization): on a loaded machine the calling thread
  // can reach that wait later than any fixed delay after this thread starts.
  const uint64_t waits = fakecuda_call_count("cuEventSynchronize");
  std::thread release([held, waits] {
    for (int i = 0; i < 10000 && fakecuda_call_count("cuEventSynchronize") == waits; ++i) {
      usleep(1000);
    }
    usleep(50000);
    EXPECT_EQ(fakecuda_hold_stream(held, 0), CUDA_SUCCESS);
  });
  const bool staged =
      stager_->Stage(CopyDir::kHostToDevice, buf.data(), dev_, n, held, true, &r, &info);
  release.join();
  ASSERT_TRUE(staged);
  ASSERT_EQ(r, CUDA_SUCCESS);
  const StagerStats s2 = stager_->Stats();
  EXPECT_EQ(s2.passes - s1.passes, 1u);
  // The earlier work is waited for before any byte is read: in the setup.
  EXPECT_GE(s2.setup_ns - s1.setup_ns, 50000000u);
  EXPECT_LE(s2.joined_passes, s2.passes);
  // Three workers, 2 MiB in 64 KiB pieces: in each pass a worker copied,
  // or none joined in time and the calling thread began alone.
  EXPECT_GE(s2.helpers - s0.helpers + (s2.alone - s0.alone), 2u);
  EXPECT_LE(s2.helpers - s0.helpers, 6u);
  // Every piece of the two 2 MiB passes was copied once, by a worker or by
  // the calling thread (pieces of 64 to 256 KiB).
  const uint64_t pieces = s2.pieces - s0.pieces + (s2.own_pieces - s0.own_pieces);
  EXPECT_GE(pieces, 16u);
  EXPECT_LE(pieces, 64u);
  EXPECT_EQ(cuStreamSynchronize(held), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(held), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
}

// Workers demote the source lines of an upload they read, where the CPU
// can (CLDEMOTE), and only then: the calling thread's pieces and every
// download's stay as they are.
TEST_F(StagerTest, WorkersDemoteTheUploadSourceTheyReadWhereTheCpuCan) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool cldemote = __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (c & (1u << 25)) != 0;
  const uint64_t n = 8 * kMiB;
  std::vector<uint8_t> buf(n), back(n);
  Fill(buf.data(), n, 3);
  const StagerStats s0 = stager_->Stats();
  CUresult r;
  StagedInfo info;
  uint64_t uploaded = 0;
  StagerStats s1 = s0;
  // Until a worker copied a piece (the calling thread may copy alone).
  for (int i = 0; i < 50 && s1.pieces == s0.pieces; ++i) {
    ASSERT_TRUE(
        stager_->Stage(CopyDir::kHostToDevice, buf.data(), dev_, n, nullptr, true, &r, &info));
    ASSERT_EQ(r, CUDA_SUCCESS);
    uploaded += n;
    s1 = stager_->Stats();
  }
  ASSERT_GT(s1.pieces, s0.pieces) << "no worker copied a piece in 50 uploads";
  const uint64_t demoted = s1.demoted_bytes - s0.demoted_bytes;
  if (cldemote) {
    EXPECT_GT(demoted, 0u);
    EXPECT_LE(demoted, uploaded);
  } else {
    EXPECT_EQ(demoted, 0u);
  }
  ASSERT_TRUE(
      stager_->Stage(CopyDir::kDeviceToHost, back.data(), dev_, n, nullptr, true, &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(back, buf);
  EXPECT_EQ(stager_->Stats().demoted_bytes, s1.demoted_bytes);
}

// ... but not before the work queued ahead of it on its stream completed
// (the documentation's "a stream sync is performed before the copy"): a
// program may take a synchronous copy's return for that.
TEST_F(StagerTest, SyncHostToDeviceWaitsForTheStreamsEarlierWork) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  const uint64_t n = 3 * kMiB;  // fits in the ring: only the earlier work can hold it
  std::vector<uint8_t> src(n), back(n);
  Fill(src.data(), n, 53);
  void* pinned = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&pinned, n, 0), CUDA_SUCCESS);
  memset(pinned, 0x66, n);
  ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_ + 8 * kMiB, pinned, n, s), CUDA_SUCCESS);  // earlier work
  std::atomic<bool> returned{false};
  CUresult r = CUDA_ERROR_UNKNOWN;
  bool staged = false;
  std::thread copier([&] {
    MakeContextCurrent();
    StagedInfo info;
    staged = stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, n, s, true, &r, &info);
    returned.store(true);
  });
  usleep(100000);
  EXPECT_FALSE(returned.load()) << "returned while the stream's earlier work was held";
  ASSERT_EQ(fakecuda_hold_stream(s, 0), CUDA_SUCCESS);
  copier.join();
  ASSERT_TRUE(staged);
  ASSERT_EQ(r, CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev_, n), CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), n, 53));
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
}

// By default an upload reads its source when the driver reads it (H200,
// driver 580: page_facts hostfunc_order, bench/RESULTS.md), here against a
// host function queued before it that rewrites that source: a synchronous
// upload only once that work completed (the device gets the new bytes); an
// asynchronous one its first 2 MiB at once (old bytes) and the rest after
// it, returning at once only when nothing is left to read after it.
TEST_F(StagerTest, UploadsReadTheirSourceWhenTheDriverWould) {
  constexpr uint64_t kEager = 2 * kMiB;
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  for (const uint64_t n : {kMiB, 3 * kMiB, 9 * kMiB + 4096}) {  // the test ring holds 4 MiB
    for (const bool sync : {false, true}) {
      std::vector<uint8_t> src(n), back, fresh(n), expect(n);
      Fill(src.data(), n, 71);
      Fill(fresh.data(), n, 72);
      const uint64_t old_bytes = sync ? 0 : std::min(n, kEager);
      memcpy(expect.data(), src.data(), old_bytes);
      memcpy(expect.data() + old_bytes, fresh.data() + old_bytes, n - old_bytes);
      const bool at_once = !sync && n <= kEager;
      bool returned = false;
      UploadBehindARewrite(s, src.data(), n, sync, 72, at_once, &returned, &back);
      if (HasFatalFailure()) return;
      EXPECT_EQ(returned, at_once) << n << (sync ? " sync" : " async");
      EXPECT_EQ(memcmp(back.data(), expect.data(), n), 0) << n << (sync ? " sync" : " async");
    }
  }
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// Where the work queued before an asynchronous upload cannot write its
// source (no host function, callback or graph was queued, and no device
// touches pageable memory), an upload over 2 MiB that the ring holds reads
// all of it at the call and returns while that work is still held: the
// device gets the bytes of the call, not the ones the program wrote after
// it returned. One the ring does not hold whole returns once the ring has
// come round, after that work; its bytes are the call's too.
TEST_F(StagerTest, AsyncUploadsReadWholeAtTheCallWhenNoQueuedWorkCanWriteThem) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  for (const uint64_t n : {3 * kMiB, 9 * kMiB + 4096}) {  // the test ring holds 4 MiB
    std::vector<uint8_t> src(n), back;
    Fill(src.data(), n, 81);
    const uint64_t before = stager_->Stats().read_at_call;
    const bool fits = n <= 4 * kMiB;
    bool returned = false;
    UploadBehindHeldWork(s, src.data(), n, 82, fits, &returned, &back);
    if (HasFatalFailure()) return;
    EXPECT_EQ(returned, fits) << n;
    EXPECT_TRUE(HasPattern(back.data(), n, 81)) << n;
    EXPECT_EQ(stager_->Stats().read_at_call, before + 1) << n;
  }
  // Once a host function was queued, uploads read as the driver does again
  // (UploadsReadTheirSourceWhenTheDriverWould).
  stager_->NoteHostWorkQueued();
  std::vector<uint8_t> src(3 * kMiB), back;
  Fill(src.data(), src.size(), 83);
  bool returned = true;
  UploadBehindHeldWork(s, src.data(), src.size(), 84, false, &returned, &back);
  EXPECT_FALSE(returned) << "returned while the earlier work was held after a host function";
  EXPECT_TRUE(HasPattern(back.data(), src.size(), 83));
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// A device that touches pageable memory (CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)
// could write the source from a kernel queued earlier: uploads read after
// that work, as the driver's do.
class PageableAccessStagerTest : public StagerTest {
 protected:
  bool PageableAccess() const override { return true; }
};

TEST_F(PageableAccessStagerTest, AsyncUploadsWaitForTheEarlierWorkBeforeReadingTheRest) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  std::vector<uint8_t> src(3 * kMiB), back;
  Fill(src.data(), src.size(), 85);
  bool returned = true;
  UploadBehindHeldWork(s, src.data(), src.size(), 86, false, &returned, &back);
  EXPECT_FALSE(returned) << "returned while the earlier work was held";
  EXPECT_TRUE(HasPattern(back.data(), src.size(), 85));
  EXPECT_EQ(stager_->Stats().read_at_call, 0u);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// PINSHIM_STAGE_ORDERED=1: an upload reads its source only once the work
// queued before it on its stream completed, here a host function that
// rewrites that source: the call waits for it, and the device gets what
// the host function wrote, for a copy the ring holds whole and one it does
// not, asynchronous and synchronous.
class OrderedStagerTest : public StagerTest {
 protected:
  bool OrderedReads() const override { return true; }
};

TEST_F(OrderedStagerTest, UploadsReadTheirSourceAfterTheStreamsEarlierWork) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  for (const uint64_t n : {3 * kMiB, 9 * kMiB + 4096}) {  // the test ring holds 4 MiB
    for (const bool sync : {false, true}) {
      std::vector<uint8_t> src(n), back;
      Fill(src.data(), n, 61);
      bool returned = false;
      UploadBehindARewrite(s, src.data(), n, sync, 62, false, &returned, &back);
      if (HasFatalFailure()) return;
      EXPECT_FALSE(returned) << n << (sync ? " sync" : " async")
                             << ": returned while the earlier work was held";
      EXPECT_TRUE(HasPattern(back.data(), n, 62)) << n << (sync ? " sync" : " async");
    }
  }
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// An error of the earlier work (or a stream the driver refuses) is the
// driver's to answer: the ordered upload declines.
TEST_F(OrderedStagerTest, AStreamItCannotWaitForGoesToTheDriver) {
  std::vector<uint8_t> src(2 * kMiB);
  Fill(src.data(), src.size(), 63);
  CUresult r = CUDA_SUCCESS;
  StagedInfo info;
  const uint64_t declined = stager_->Stats().declined;
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(),
                              reinterpret_cast<CUstream>(0x5eed), false, &r, &info));
  EXPECT_EQ(stager_->Stats().declined, declined + 1);
}

// Back-to-back uploads the ring holds whole write ring bytes the DMAs
// before them do not read: each returns once its source was read while
// those DMAs are still held. One that needs bytes under a held DMA (the
// ring come round) waits for it. Every upload arrives whole.
TEST_F(StagerTest, BackToBackUploadsOverlapTheDmasBefore) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  const uint64_t n = kMiB;  // the test ring holds 4
  struct Upload {
    uint64_t at, bytes;
    uint8_t seed;
  };
  const Upload ups[] = {{0, n, 60},         {n, n, 61},      {2 * n, n, 62},
                        {3 * n, n, 63},     {4 * n, n, 64},  {5 * n, 5 * n / 2, 65},
                        {8 * n, 6 * n, 66}, {14 * n, n, 67}, {15 * n, 3 * n / 2, 68}};
  constexpr int kUploads = sizeof(ups) / sizeof(ups[0]);
  std::vector<std::vector<uint8_t>> src(kUploads);
  for (int i = 0; i < kUploads; ++i) {
    src[i].resize(ups[i].bytes);
    Fill(src[i].data(), ups[i].bytes, ups[i].seed);
  }
  std::atomic<int> returned{0};
  std::atomic<bool> all_ok{true};
  // Uploads [from, to) on their own thread, each source overwritten once
  // the call returned (it was read by then).
  auto upload = [&](int from, int to) {
    return std::thread([&, from, to] {
      MakeContextCurrent();
      for (int i = from; i < to; ++i) {
        CUresult r = CUDA_ERROR_UNKNOWN;
        StagedInfo info;
        if (!stager_->Stage(CopyDir::kHostToDevice, src[i].data(), dev_ + ups[i].at, ups[i].bytes,
                            s, false, &r, &info) ||
            r != CUDA_SUCCESS) {
          all_ok.store(false);
        }
        memset(src[i].data(), 0x90, ups[i].bytes);
        returned.fetch_add(1);
      }
    });
  };
  ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
  std::thread first = upload(0, 4);
  for (int i = 0; i < 100000 && returned.load() < 4; ++i) usleep(100);
  EXPECT_EQ(returned.load(), 4)
      << "an upload waited for a held DMA whose ring bytes it does not write";
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  // The fifth needs the first one's ring bytes, whose DMA is held.
  std::thread fifth = upload(4, 5);
  usleep(100000);
  EXPECT_LT(returned.load(), 5) << "wrote ring bytes a held DMA had still to read";
  EXPECT_EQ(fakecuda_hold_stream(s, 0), CUDA_SUCCESS);
  first.join();
  fifth.join();
  // Then a mix: whole uploads of other sizes around one larger than the
  // ring (which waits for everything before it and starts at the ring's start).
  upload(5, kUploads).join();
  EXPECT_TRUE(all_ok.load());
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  for (const Upload& u : ups) {
    std::vector<uint8_t> back(u.bytes);
    ASSERT_EQ(cuMemcpyDtoH(back.data(), dev_ + u.at, u.bytes), CUDA_SUCCESS);
    EXPECT_TRUE(HasPattern(back.data(), u.bytes, u.seed)) << u.bytes << " bytes at " << u.at;
  }
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// Work queued before the copy on its stream runs first.
TEST_F(StagerTest, KeepsStreamOrder) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const uint64_t n = 8 * kMiB;
  std::vector<uint8_t> a(n), b(n), back(n);
  Fill(a.data(), n, 1);
  Fill(b.data(), n, 2);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
  // Queued first, held: the staged copy of b must land after it.
  void* pinned = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&pinned, n, 0), CUDA_SUCCESS);
  memset(pinned, 0x77, n);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_, pinned, n, s), CUDA_SUCCESS);
  std::thread release([&] {
    usleep(20000);
    fakecuda_hold_stream(s, 0);
  });
  CUresult r;
  StagedInfo info;
  ASSERT_TRUE(stager_->Stage(CopyDir::kHostToDevice, b.data(), dev_, n, s, false, &r, &info));
  release.join();
  ASSERT_EQ(r, CUDA_SUCCESS);
  ASSERT_TRUE(stager_->Stage(CopyDir::kDeviceToHost, back.data(), dev_, n, s, false, &r, &info));
  EXPECT_TRUE(HasPattern(back.data(), n, 2));
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
}

// A device range the driver would refuse is left to the driver (which then
// answers with its own error): nothing is copied halfway.
TEST_F(StagerTest, DeclinesBadDeviceRanges) {
  std::vector<uint8_t> src(4 * kMiB, 1);
  CUresult r = CUDA_SUCCESS;
  StagedInfo info;
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_ + kDevBytes - kMiB,
                              src.size(), nullptr, true, &r, &info));
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), 0x1000, src.size(), nullptr, true,
                              &r, &info));
  // Host memory that is not mapped: the driver answers.
  void* gone = mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(gone, 4 * kMiB);
  EXPECT_FALSE(
      stager_->Stage(CopyDir::kHostToDevice, gone, dev_, 4 * kMiB, nullptr, true, &r, &info));
  // Below the direction's threshold.
  EXPECT_FALSE(
      stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, 1000, nullptr, true, &r, &info));
}

// A stream that captures is left to the driver: staged, the ring's DMAs
// would be recorded into the program's graph, and every launch would copy
// the ring instead of the program's buffer.
TEST_F(StagerTest, DeclinesAStreamThatCaptures) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const uint64_t n = 4 * kMiB;
  ASSERT_EQ(cuMemsetD8(dev_, 0xAA, n), CUDA_SUCCESS);
  std::vector<uint8_t> src(n), back(n);
  Fill(src.data(), n, 31);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUresult r = CUDA_SUCCESS;
  StagedInfo info;
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, n, s, false, &r, &info));
  EXPECT_FALSE(stager_->Stage(CopyDir::kDeviceToHost, back.data(), dev_, n, s, false, &r, &info));
  EXPECT_EQ(stager_->Stats().capturing, 2u);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  Fill(src.data(), n, 32);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev_, n), CUDA_SUCCESS);
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t b) { return b == 0xAA; }));
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  // Once the capture ended the stream stages again.
  RoundTrip(n, 0, s, false, 33);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(StagerTest, ManyThreadsAtOnce) {
  // The threads stage at once: the walk waits until they joined.
  Stager& stager = stager_.raw();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      MakeContextCurrent();
      CUstream s;
      if (cuStreamCreate(&s, 0) != CUDA_SUCCESS) {
        wrong++;
        return;
      }
      const uint64_t n = 2 * kMiB + t * 4096;
      std::vector<uint8_t> src(n), back(n);
      for (int round = 0; round < 8; ++round) {
        const uint8_t seed = static_cast<uint8_t>(t * 16 + round);
        Fill(src.data(), n, seed);
        CUresult r = CUDA_SUCCESS;
        StagedInfo info;
        const CUdeviceptr at = dev_ + uint64_t(t) * 4 * kMiB;
        bool staged = stager.Stage(CopyDir::kHostToDevice, src.data(), at, n, s, false, &r, &info);
        if (!staged) r = cuMemcpyHtoDAsync(at, src.data(), n, s);  // every lane busy
        staged = stager.Stage(CopyDir::kDeviceToHost, back.data(), at, n, s, false, &r, &info);
        if (!staged) r = cuMemcpyDtoH(back.data(), at, n);
        if (r != CUDA_SUCCESS || !HasPattern(back.data(), n, seed)) wrong++;
      }
      cuStreamDestroy(s);
    });
  }
  for (auto& th : threads) th.join();
  ExpectInvariants(stager);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(stager_->Stats().ring_bytes, uint64_t{Stager::kMaxLanes} * 4 * kMiB);
}

// Each context stages through rings and events of its own.
TEST_F(StagerTest, TwoDevices) {
  CUdevice d1;
  CUcontext c1;
  ASSERT_NO_FATAL_FAILURE(MakeSecondDeviceCurrent(&d1, &c1));
  CUdeviceptr dev1;
  ASSERT_EQ(cuMemAlloc(&dev1, 8 * kMiB), CUDA_SUCCESS);
  std::vector<uint8_t> src(8 * kMiB), back(8 * kMiB);
  Fill(src.data(), src.size(), 5);
  CUresult r;
  StagedInfo info;
  ASSERT_TRUE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev1, src.size(), nullptr, true,
                             &r, &info));
  ASSERT_TRUE(stager_->Stage(CopyDir::kDeviceToHost, back.data(), dev1, back.size(), nullptr, true,
                             &r, &info));
  EXPECT_TRUE(HasPattern(back.data(), back.size(), 5));
  EXPECT_EQ(cuMemFree(dev1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(MakeContextCurrent()), CUDA_SUCCESS);
  RoundTrip(8 * kMiB, 0, nullptr, true, 6);
  // The other device's context goes: its ring goes with it.
  const uint64_t before = stager_->Stats().ring_bytes;
  ASSERT_EQ(cuDevicePrimaryCtxReset(d1), CUDA_SUCCESS);
  stager_->OnContextDestroyed(c1);
  EXPECT_LT(stager_->Stats().ring_bytes, before);
  RoundTrip(8 * kMiB, 0, nullptr, true, 7);
}

TEST_F(StagerTest, IdleRingsAreGivenBack) {
  RoundTrip(4 * kMiB, 0, nullptr, true, 3);
  EXPECT_GT(stager_->Stats().ring_bytes, 0u);
  EXPECT_GT(stager_->IdleBytes(), 0u);
  EXPECT_GT(stager_->TrimIdle(/*all=*/true), 0u);
  EXPECT_EQ(stager_->Stats().ring_bytes, 0u);
  EXPECT_EQ(account_.pinned(), 0u);
  RoundTrip(4 * kMiB, 0, nullptr, true, 4);  // and pinned again when needed
}

// This process's threads named pinshim-stage (workers, and a starter while
// it runs).
int StageThreads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name) && name == "pinshim-stage") ++n;
  }
  closedir(d);
  return n;
}

// At the engine's attach the workers are started by a thread of their own,
// before any copy: the first staged copy then creates no thread.
TEST_F(StagerTest, WorkersStartOnAThreadOfTheirOwn) {
  const int before = StageThreads();
  ASSERT_GE(before, 0);
  ASSERT_TRUE(stager_->StartWorkersInBackground());
  int now = before;
  for (int i = 0; i < 5000 && now != before + 3; ++i) {
    usleep(1000);
    now = StageThreads();
  }
  EXPECT_EQ(now, before + 3) << "three workers, the starter gone";
  EXPECT_FALSE(stager_->StartWorkersInBackground()) << "started once";
  RoundTrip(4 * kMiB, 0, nullptr, true, 9);
  EXPECT_EQ(stager_->Stats().copies, 2u);
  EXPECT_EQ(StageThreads(), before + 3) << "the copies created no thread";
}

// The walker proves its power: each corruption breaks one invariant, the
// walk names it, and undoing it makes the stager whole again.
TEST_F(StagerTest, InvariantWalkerReportsEachCorruption) {
  RoundTrip(4 * kMiB, 0, nullptr, true, 8);  // a ring, workers, a finished job
  const testing::Corruption<Stager> cases[] = {
      {Stager::Corruption::kRingBytes, "S3 "},
      {Stager::Corruption::kJobLive, "S5 "},
  };
  testing::ExpectWalkerReportsEach(stager_.raw(), cases);
}

// The library's default: a ring is pinned by a worker while the copies that
// need it go to the driver, unless a copy is so large that waiting for the
// ring pays (StagerOptions::background_rings).
class BackgroundRingTest : public StagerTest {
 protected:
  bool BackgroundRings() const override { return true; }
};

// The first copy does not wait for its ring: with the driver's allocation
// held, a copy that waited would never return (and the test would time out).
TEST_F(BackgroundRingTest, FirstCopiesGoToTheDriverWhileAWorkerPinsTheRing) {
  g_hold_ring_pin.store(true);
  std::vector<uint8_t> src(2 * kMiB);
  Fill(src.data(), src.size(), 21);
  CUresult r = CUDA_ERROR_UNKNOWN;
  StagedInfo info;
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr, true,
                              &r, &info));
  ASSERT_TRUE(RingPinHeld());  // a worker is pinning the ring
  // Copies meanwhile go to the driver too, and ask for no second ring.
  EXPECT_FALSE(stager_->Stage(CopyDir::kDeviceToHost, src.data(), dev_, src.size(), nullptr, true,
                              &r, &info));
  StagerStats s = stager_->Stats();
  EXPECT_EQ(s.ring_pending, 2u);
  EXPECT_EQ(s.copies, 0u);
  EXPECT_EQ(s.ring_bytes, 0u);
  EXPECT_EQ(g_ring_pins_held.load(), 1);
  g_hold_ring_pin.store(false);
  ASSERT_TRUE(stager_.raw().WaitForRings(10 * kSecond));
  s = stager_->Stats();
  EXPECT_EQ(s.background_rings, 1u);
  EXPECT_EQ(s.ring_bytes, 4 * kMiB);
  EXPECT_EQ(account_.pinned_for(PinUse::kStaging), 4 * kMiB);
  RoundTrip(2 * kMiB, 0, nullptr, true, 22);  // staged from now on
  RoundTrip(3 * kMiB, 4096, nullptr, false, 23);
  EXPECT_EQ(stager_->Stats().background_rings, 1u);
}

// A program's first copies, before the driver's copies have cost as much
// as a ring: with the workers started (at the attach) and no ring pinned,
// such a copy goes to the driver before any system or driver call of the
// stager's (a cold process's first copies pay nothing for staging).
class DeferredRingTest : public BackgroundRingTest {
 protected:
  void SetUp() override {
    StagerTest::SetUp();
    ops_.ctx_get_current = &CountedCtxGetCurrent;
    ops_.stream_is_capturing = &CountedStreamIsCapturing;
    ops_.pointer_get_attribute = &CountedPointerGetAttribute;
    StagerOptions o = TestOptions(3);
    o.judge = &judge_;  // no driver copy recorded: no ring is worth it yet
    ASSERT_TRUE(deferring_->Init(&ops_, &account_, o));
  }
  static CUresult CountedCtxGetCurrent(CUcontext* out) {
    calls_.fetch_add(1);
    return cuCtxGetCurrent(out);
  }
  static CUresult CountedStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
    calls_.fetch_add(1);
    return cuStreamIsCapturing(s, status);
  }
  static CUresult CountedPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
    calls_.fetch_add(1);
    return cuPointerGetAttribute(data, a, p);
  }
  PathJudge judge_;
  Checked<Stager>& deferring_ = NewStager();
  static std::atomic<int> calls_;
};
std::atomic<int> DeferredRingTest::calls_{0};

TEST_F(DeferredRingTest, ACopyBeforeARingPaysGoesToTheDriverBeforeAnyCheck) {
  ASSERT_TRUE(deferring_->StartWorkersInBackground());
  for (int i = 0; i < 5000 && !deferring_.raw().WorkersStarted(); ++i) usleep(1000);
  ASSERT_TRUE(deferring_.raw().WorkersStarted());
  std::vector<uint8_t> src(2 * kMiB);
  CUresult r = CUDA_ERROR_UNKNOWN;
  StagedInfo info;
  calls_.store(0);
  EXPECT_FALSE(deferring_->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr,
                                 true, &r, &info));
  EXPECT_FALSE(deferring_->Stage(CopyDir::kDeviceToHost, src.data(), dev_, src.size(), nullptr,
                                 false, &r, &info));
  EXPECT_EQ(calls_.load(), 0) << "no driver call before declining";
  const StagerStats s = deferring_->Stats();
  EXPECT_EQ(s.ring_deferred, 2u);
  EXPECT_EQ(s.declined, 2u);
  EXPECT_EQ(s.ring_bytes, 0u);
  // Once the driver's copies cost as much as a ring, the checks run and a
  // worker pins one.
  for (int i = 0; i < 4000; ++i)
    judge_.Record(CopyPath::kDriver, CopyDir::kHostToDevice, kMiB, true, 1000000);
  EXPECT_FALSE(deferring_->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr,
                                 true, &r, &info));
  EXPECT_GT(calls_.load(), 0);
  EXPECT_EQ(deferring_->Stats().ring_pending, 1u);
  ASSERT_TRUE(deferring_.raw().WaitForRings(10 * kSecond));
  EXPECT_EQ(deferring_->Stats().background_rings, 1u);
}

// The workers' 10 ms look at the load counts only where it sees at least
// two idle cores fewer than the 50 ms sample, and only while it is under
// 20 ms old.
TEST(StagerLoadTest, AShortSampleLowersTheIdleCoresWhileItIsYoung) {
  const uint64_t ms = 1000000;
  EXPECT_EQ(Stager::UsableIdleX16(15 * 16, 3 * 16, 5 * ms), 3u * 16);    // load rose: seen at once
  EXPECT_EQ(Stager::UsableIdleX16(15 * 16, 3 * 16, 19 * ms), 3u * 16);   // still young
  EXPECT_EQ(Stager::UsableIdleX16(15 * 16, 3 * 16, 20 * ms), 15u * 16);  // too old: the 50 ms one
  EXPECT_EQ(Stager::UsableIdleX16(3 * 16, 15 * 16, 1 * ms), 3u * 16);    // load fell: the 50 ms one
  EXPECT_EQ(Stager::UsableIdleX16(8 * 16, UINT32_MAX, 0), 8u * 16);      // none taken yet
  EXPECT_EQ(Stager::UsableIdleX16(8 * 16, 0, 0), 0u);                    // every core busy
  EXPECT_EQ(Stager::UsableIdleX16(15 * 16, 14 * 16, 0), 15u * 16);       // one core: its rounding
  EXPECT_EQ(Stager::UsableIdleX16(15 * 16, 13 * 16, 0), 13u * 16);       // two: the load
}

// The load sample: the stager's own copying (its workers' and the staging
// threads' CPU time) is not load; everything else busy is.
TEST(StagerLoadTest, OwnCopyingIsNotLoad) {
  // 16 cores, half of the interval's ticks busy.
  EXPECT_EQ(Stager::IdleCoresX16(800, 1600, 0, 16), 8u * 16);
  EXPECT_EQ(Stager::IdleCoresX16(800, 1600, 400, 16), 12u * 16);  // a quarter was staging
  EXPECT_EQ(Stager::IdleCoresX16(800, 1600, 800, 16), 16u * 16);  // all of it
  EXPECT_EQ(Stager::IdleCoresX16(800, 1600, 900, 16), 16u * 16);  // clocks apart: clamped
  EXPECT_EQ(Stager::IdleCoresX16(1600, 1600, 0, 16), 0u);         // every core busy
  EXPECT_EQ(Stager::IdleCoresX16(0, 0, 0, 16), 16u * 16);         // nothing seen yet
}

// The measured default: three quarters of the cores, at most 12.
TEST(StagerLoadTest, DefaultWorkers) {
  EXPECT_EQ(Stager::DefaultWorkers(1), 1u);
  EXPECT_EQ(Stager::DefaultWorkers(2), 1u);
  EXPECT_EQ(Stager::DefaultWorkers(8), 6u);
  EXPECT_EQ(Stager::DefaultWorkers(16), 12u);
  EXPECT_EQ(Stager::DefaultWorkers(128), 12u);
}

// The default ring (8 slots of 2 MiB): copies up to 64 MiB go to the
// driver while it is pinned, from 96 MiB on they wait for it (the cost
// model's pageable and pinned speeds, and a ring's populating and
// registration).
TEST(StagerRingTest, WhichCopiesWaitForTheDefaultRing) {
  const uint64_t ring = StagerOptions().chunk_bytes * StagerOptions().slots;
  ASSERT_EQ(ring, 16 * kMiB);
  for (CopyDir dir : {CopyDir::kHostToDevice, CopyDir::kDeviceToHost}) {
    for (uint64_t n : {kMiB, 16 * kMiB, 64 * kMiB}) {
      EXPECT_FALSE(Stager::WaitsForRing(dir, n, ring)) << n;
    }
    for (uint64_t n : {96 * kMiB, 256 * kMiB, 1024 * kMiB}) {
      EXPECT_TRUE(Stager::WaitsForRing(dir, n, ring)) << n;
    }
  }
}

// The only worker is pinning a ring for another context (its allocation
// held): a copy on a lane that has its ring does not wait for that worker,
// its calling thread copies alone (else this test would never end).
TEST_F(BackgroundRingTest, ACopyDoesNotWaitForAWorkerThatPinsARing) {
  Checked<Stager>& stager = NewStager();
  ASSERT_TRUE(stager->Init(&ops_, &account_, TestOptions(1)));
  std::vector<uint8_t> big(kDevBytes);
  Fill(big.data(), big.size(), 26);
  CUresult r = CUDA_ERROR_UNKNOWN;
  StagedInfo info;
  // This context's ring, pinned by the copy itself (64 MiB waits for it).
  ASSERT_TRUE(stager->Stage(CopyDir::kHostToDevice, big.data(), dev_, big.size(), nullptr, true, &r,
                            &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  // Another context's ring, which the worker pins and holds.
  CUdevice d1;
  CUcontext c1;
  ASSERT_NO_FATAL_FAILURE(MakeSecondDeviceCurrent(&d1, &c1));
  CUdeviceptr dev1;
  ASSERT_EQ(cuMemAlloc(&dev1, 4 * kMiB), CUDA_SUCCESS);
  std::vector<uint8_t> src(2 * kMiB, 7), back(2 * kMiB);
  g_hold_ring_pin.store(true);
  EXPECT_FALSE(stager->Stage(CopyDir::kHostToDevice, src.data(), dev1, src.size(), nullptr, true,
                             &r, &info));
  ASSERT_TRUE(RingPinHeld());
  // Back in the first context: staged, both ways, with the worker held.
  ASSERT_EQ(cuCtxSetCurrent(MakeContextCurrent()), CUDA_SUCCESS);
  const uint64_t alone_before = stager->Stats().alone;
  Fill(src.data(), src.size(), 27);
  ASSERT_TRUE(stager->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr, true, &r,
                            &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  ASSERT_TRUE(stager->Stage(CopyDir::kDeviceToHost, back.data(), dev_, back.size(), nullptr, true,
                            &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_TRUE(HasPattern(back.data(), back.size(), 27));
  EXPECT_EQ(g_ring_pins_held.load(), 1);  // the worker was held all along
  // Both copies began alone (the summary's staged_alone).
  EXPECT_EQ(stager->Stats().alone - alone_before, 2u);
  g_hold_ring_pin.store(false);
  ASSERT_TRUE(stager.raw().WaitForRings(10 * kSecond));
  ASSERT_EQ(cuCtxSetCurrent(c1), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(dev1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(MakeContextCurrent()), CUDA_SUCCESS);
  stager->TrimIdle(/*all=*/true);
}

// A copy for which the driver would take longer than pinning the ring and
// staging (64 MiB against a 4 MiB ring, by the cost model) waits for it.
TEST_F(BackgroundRingTest, ALargeCopyWaitsForItsRing) {
  std::vector<uint8_t> src(kDevBytes), back(kDevBytes);
  Fill(src.data(), src.size(), 24);
  CUresult r = CUDA_ERROR_UNKNOWN;
  StagedInfo info;
  ASSERT_TRUE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr, true,
                             &r, &info));
  ASSERT_EQ(r, CUDA_SUCCESS);
  ASSERT_TRUE(stager_->Stage(CopyDir::kDeviceToHost, back.data(), dev_, back.size(), nullptr, true,
                             &r, &info));
  EXPECT_TRUE(HasPattern(back.data(), back.size(), 24));
  EXPECT_EQ(stager_->Stats().background_rings, 0u);
  EXPECT_EQ(stager_->Stats().ring_pending, 0u);
}

// A context torn down while a worker pins a ring in it: the teardown waits
// at the gate until the ring is made, and the ring then goes with the
// context (the driver frees it): nothing stays charged or points into it.
TEST_F(BackgroundRingTest, TeardownWaitsForARingBeingPinnedInItsContext) {
  CUdevice d1;
  CUcontext c1;
  ASSERT_NO_FATAL_FAILURE(MakeSecondDeviceCurrent(&d1, &c1));
  CUdeviceptr dev1;
  ASSERT_EQ(cuMemAlloc(&dev1, 4 * kMiB), CUDA_SUCCESS);
  std::vector<uint8_t> src(2 * kMiB, 3);
  CUresult r;
  StagedInfo info;
  g_hold_ring_pin.store(true);
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev1, src.size(), nullptr, true,
                              &r, &info));
  ASSERT_TRUE(RingPinHeld());
  EXPECT_EQ(cuMemFree(dev1), CUDA_SUCCESS);
  std::atomic<bool> destroyed{false};
  std::thread teardown([&] {  // as context_hooks.cc tears a context down
    gate_.BeginTeardown();
    EXPECT_EQ(cuDevicePrimaryCtxReset(d1), CUDA_SUCCESS);
    stager_.raw().OnContextDestroyed(c1);
    destroyed.store(true);
    gate_.EndTeardown();
  });
  usleep(20000);
  EXPECT_FALSE(destroyed.load());  // held at the gate behind the pinning
  g_hold_ring_pin.store(false);
  teardown.join();
  ASSERT_TRUE(stager_.raw().WaitForRings(10 * kSecond));
  ExpectInvariants(stager_.raw());
  EXPECT_EQ(stager_->Stats().background_rings, 1u);
  EXPECT_EQ(stager_->Stats().ring_bytes, 0u);
  EXPECT_EQ(account_.pinned_for(PinUse::kStaging), 0u);
  ASSERT_EQ(cuCtxSetCurrent(MakeContextCurrent()), CUDA_SUCCESS);
}

// A teardown already under way when the worker comes: the ring is not made
// in the dying context, and the next copy asks again.
TEST_F(BackgroundRingTest, NoRingIsPinnedWhileATeardownRuns) {
  std::vector<uint8_t> src(2 * kMiB, 4);
  CUresult r;
  StagedInfo info;
  gate_.BeginTeardown();
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr, true,
                              &r, &info));
  ASSERT_TRUE(stager_.raw().WaitForRings(10 * kSecond));
  EXPECT_EQ(stager_->Stats().background_rings, 0u);
  EXPECT_EQ(stager_->Stats().ring_bytes, 0u);
  gate_.EndTeardown();
  EXPECT_FALSE(stager_->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr, true,
                              &r, &info));
  ASSERT_TRUE(stager_.raw().WaitForRings(10 * kSecond));
  EXPECT_EQ(stager_->Stats().background_rings, 1u);
  RoundTrip(2 * kMiB, 0, nullptr, true, 25);
}

// The cap refuses the ring a worker would pin: nothing is charged, and
// copies keep going to the driver.
TEST_F(BackgroundRingTest, ARingTheCapRefusesLeavesCopiesWithTheDriver) {
  PinAccount capped;
  capped.Init(2 * kMiB, PinAccountHooks());  // below the 4 MiB ring
  Checked<Stager>& stager = NewStager();
  ASSERT_TRUE(stager->Init(&ops_, &capped, TestOptions(2)));
  std::vector<uint8_t> src(2 * kMiB, 5);
  CUresult r;
  StagedInfo info;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(stager->Stage(CopyDir::kHostToDevice, src.data(), dev_, src.size(), nullptr, true,
                               &r, &info));
    ASSERT_TRUE(stager.raw().WaitForRings(10 * kSecond));
  }
  EXPECT_EQ(stager->Stats().background_rings, 0u);
  EXPECT_EQ(stager->Stats().ring_bytes, 0u);
  EXPECT_EQ(capped.pinned(), 0u);
  ExpectInvariants(capped);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
