// Host functions, streams made with a priority, stream capture and graph
// launch, the per-thread default stream's place among blocking streams, and
// the device's DMA ignoring CPU page protections. Held streams keep work
// pending, so "not yet" is asserted deterministically, never by timing.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

constexpr size_t kSize = 8192;

class GraphsTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_EQ(cuMemAlloc(&dev_, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemHostAlloc(&pinned_, kSize, 0), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuMemFree(dev_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeHost(pinned_), CUDA_SUCCESS);
    DriverTest::TearDown();
  }
  CUdeviceptr dev_ = 0;
  void* pinned_ = nullptr;
};

void CUDA_CB CountCall(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }

struct CallbackSeen {
  std::atomic<int> calls{0};
  CUstream stream = nullptr;
  CUresult status = CUDA_ERROR_UNKNOWN;
};

void CUDA_CB NoteCallback(CUstream stream, CUresult status, void* arg) {
  auto* seen = static_cast<CallbackSeen*>(arg);
  seen->stream = stream;
  seen->status = status;
  seen->calls.fetch_add(1);
}

TEST_F(GraphsTest, HostFunctionsRunAfterEarlierWorkInStreamOrder) {
  CUstream s;
  ASSERT_EQ(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1), CUDA_SUCCESS);
  std::atomic<int> calls{0};
  CallbackSeen seen;
  ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(s, CountCall, &calls), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamAddCallback(s, NoteCallback, &seen, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(calls.load(), 0);
  ASSERT_EQ(fakecuda_hold_stream(s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(seen.calls.load(), 1);
  EXPECT_EQ(seen.stream, s);
  EXPECT_EQ(seen.status, CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchHostFunc(s, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamAddCallback(s, NoteCallback, &seen, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreateWithPriority(&s, 4, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

TEST_F(GraphsTest, CapturedCopiesRunOnlyWhenTheGraphIsLaunched) {
  CUstream s, other;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent fork, join;
  ASSERT_EQ(cuEventCreate(&fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&join, 0), CUDA_SUCCESS);
  std::memcpy(pinned_, Pattern(kSize, 1).data(), kSize);
  std::atomic<int> calls{0};
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus status;
  ASSERT_EQ(cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_, pinned_, kSize, s), CUDA_SUCCESS);
  // A second stream joins the capture through an event, and rejoins.
  ASSERT_EQ(cuEventRecord(fork, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(other, fork, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamIsCapturing(other, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_EQ(cuLaunchHostFunc(other, CountCall, &calls), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(join, other), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s, join, 0), CUDA_SUCCESS);
  // What must finish before it returns cannot be captured.
  std::vector<unsigned char> pageable(kSize);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph graph;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamIsCapturing(other, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  // Nothing ran yet.
  EXPECT_EQ(calls.load(), 0);
  EXPECT_NE(ReadDevice(dev_, kSize), Pattern(kSize, 1));
  CUgraphExec exec;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  // Each launch copies what the source holds when it runs.
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_, kSize), Pattern(kSize, 1));
  std::memcpy(pinned_, Pattern(kSize, 2).data(), kSize);
  ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_, kSize), Pattern(kSize, 2));
  EXPECT_EQ(calls.load(), 2);
  // The graph's event record node recorded `join`.
  EXPECT_EQ(cuEventQuery(join), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(cuEventDestroy(fork), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(join), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(other), CUDA_SUCCESS);
}

// Measured on the H200 (bench/gpu/page_facts.cu, capture_*_pageable): an
// asynchronous copy of pageable memory into a capture is captured, and each
// launch moves what the memory holds then.
TEST_F(GraphsTest, AnAsyncPageableCopyIsCapturedAndMovesTheMemoryAtLaunch) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr dev2;
  ASSERT_EQ(cuMemAlloc(&dev2, kSize), CUDA_SUCCESS);
  std::vector<unsigned char> up = Pattern(kSize, 1), down(kSize, 0);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_, up.data(), kSize, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync(down.data(), dev2, kSize, s), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);
  EXPECT_NE(ReadDevice(dev_, kSize), Pattern(kSize, 1));  // nothing ran yet
  CUgraphExec exec;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  std::memcpy(up.data(), Pattern(kSize, 2).data(), kSize);  // the same memory, new bytes
  std::memcpy(pinned_, Pattern(kSize, 3).data(), kSize);
  ASSERT_EQ(cuMemcpyHtoD(dev2, pinned_, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_, kSize), Pattern(kSize, 2));
  EXPECT_EQ(down, Pattern(kSize, 3));
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(dev2), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

// Measured on the H200 (page_facts.cu, capture_then_register_*): a copy
// captured from pageable memory is not bound to a registration made after
// the capture; launches before and after its unregistration both move the
// memory as it is then, and nothing faults.
TEST_F(GraphsTest, ACopyCapturedFromPageableMemoryIgnoresALaterRegistration) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (bool h2d : {true, false}) {
    SCOPED_TRACE(h2d ? "h2d" : "d2h");
    CUstream s;
    ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    unsigned char* host = static_cast<unsigned char*>(mem);
    ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    ASSERT_EQ(h2d ? cuMemcpyHtoDAsync(dev_, host, 2 * page, s)
                  : cuMemcpyDtoHAsync(host, dev_, 2 * page, s),
              CUDA_SUCCESS);
    CUgraph graph = nullptr;
    ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
    CUgraphExec exec;
    ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemHostRegister(host, 2 * page, 0), CUDA_SUCCESS);
    for (int round = 0; round < 2; ++round) {
      if (round == 1) ASSERT_EQ(cuMemHostUnregister(host), CUDA_SUCCESS);
      const unsigned char seed = static_cast<unsigned char>(20 + round);
      if (h2d) {
        std::memcpy(host, Pattern(2 * page, seed).data(), 2 * page);
      } else {
        std::memcpy(pinned_, Pattern(2 * page, seed).data(), 2 * page);
        ASSERT_EQ(cuMemcpyHtoD(dev_, pinned_, 2 * page), CUDA_SUCCESS);
      }
      ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
      ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
      if (h2d) {
        EXPECT_EQ(ReadDevice(dev_, 2 * page), Pattern(2 * page, seed));
      } else {
        EXPECT_EQ(std::vector<unsigned char>(host, host + 2 * page), Pattern(2 * page, seed));
      }
    }
    EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
    munmap(mem, 2 * page);
  }
}

// Measured on the H200 (page_facts.cu, capture_unregistered_*): a graph
// whose copy was captured from registered memory that was unregistered
// before the launch faults the context: the launch returns success, the
// synchronization "unspecified launch failure", and so does every later call
// in that context until it is destroyed. Nothing reaches the memory.
TEST_F(GraphsTest, AGraphCopyThroughARegistrationGoneSinceItsCaptureFaultsTheContext) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  CUcontext outer;
  ASSERT_EQ(cuCtxGetCurrent(&outer), CUDA_SUCCESS);
  CUdevice device;
  ASSERT_EQ(cuDeviceGet(&device, 0), CUDA_SUCCESS);
  for (bool h2d : {true, false}) {
    SCOPED_TRACE(h2d ? "h2d" : "d2h");
    CUcontext ctx;
    ASSERT_EQ(cuCtxCreate(&ctx, nullptr, 0, device), CUDA_SUCCESS);
    CUdeviceptr dev;
    ASSERT_EQ(cuMemAlloc(&dev, page), CUDA_SUCCESS);
    auto* buf = static_cast<unsigned char*>(
        mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf, MAP_FAILED);
    std::memset(buf, 1, page);
    ASSERT_EQ(cuMemHostRegister(buf, page, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemsetD8(dev, 2, page), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CUstream s;
    ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    ASSERT_EQ(h2d ? cuMemcpyHtoDAsync(dev, buf, page, s) : cuMemcpyDtoHAsync(buf, dev, page, s),
              CUDA_SUCCESS);
    CUgraph graph = nullptr;
    ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
    CUgraphExec exec;
    ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
    std::memset(buf, 3, page);
    EXPECT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_LAUNCH_FAILED);
    EXPECT_EQ(buf[0], 3);  // a download wrote nothing
    CUdeviceptr more;
    EXPECT_EQ(cuMemAlloc(&more, 64), CUDA_ERROR_LAUNCH_FAILED);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_LAUNCH_FAILED);
    EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_LAUNCH_FAILED);
    EXPECT_EQ(cuCtxDestroy(ctx), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(outer), CUDA_SUCCESS);
    munmap(buf, page);
  }
  // Other contexts, and a new one, are unaffected.
  CUcontext fresh;
  ASSERT_EQ(cuCtxCreate(&fresh, nullptr, 0, device), CUDA_SUCCESS);
  CUdeviceptr dev;
  EXPECT_EQ(cuMemAlloc(&dev, 64), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(fresh), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(outer), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
}

// Measured on the H200 (page_facts.cu, capture_neighbour_*): while the main
// thread captures in global mode, a thread in global mode has these calls
// refused and the capture invalidated; in relaxed mode they succeed and the
// capture survives. A thread in thread-local mode is prohibited only by a
// capture of its own (the documentation's rule).
class CaptureNeighbourTest : public GraphsTest,
                             public ::testing::WithParamInterface<CUstreamCaptureMode> {};

TEST_P(CaptureNeighbourTest, UnsafeCallsOnAnotherThreadFollowItsCaptureMode) {
  const CUstreamCaptureMode mode = GetParam();
  const bool refused = mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  CUcontext ctx;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  // Each call on the other thread, with what it must return there.
  enum Call { kRegister, kUnregister, kHostAlloc, kFreeHost, kEventSync, kAsyncPageable };
  for (int call = kRegister; call <= kAsyncPageable; ++call) {
    SCOPED_TRACE(call);
    void* buf = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(buf, MAP_FAILED);
    if (call == kUnregister) {
      ASSERT_EQ(cuMemHostRegister(buf, page, 0), CUDA_SUCCESS);
    }
    void* block = nullptr;
    if (call == kFreeHost) {
      ASSERT_EQ(cuMemHostAlloc(&block, page, 0), CUDA_SUCCESS);
    }
    CUevent ev;
    ASSERT_EQ(cuEventCreate(&ev, 0), CUDA_SUCCESS);
    CUstream cap, other;
    ASSERT_EQ(cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(ev, other), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    ASSERT_EQ(cuMemcpyHtoDAsync(dev_, pinned_, 64, cap), CUDA_SUCCESS);
    CUresult got = CUDA_ERROR_UNKNOWN;
    std::thread t([&] {
      cuCtxSetCurrent(ctx);
      CUstreamCaptureMode m = mode;
      cuThreadExchangeStreamCaptureMode(&m);
      void* p = nullptr;
      switch (call) {
        case kRegister: got = cuMemHostRegister(buf, page, 0); break;
        case kUnregister: got = cuMemHostUnregister(buf); break;
        case kHostAlloc:
          got = cuMemHostAlloc(&p, page, 0);
          if (got == CUDA_SUCCESS) cuMemFreeHost(p);
          break;
        case kFreeHost:
          got = cuMemFreeHost(block);
          if (got == CUDA_SUCCESS) block = nullptr;
          break;
        case kEventSync: got = cuEventSynchronize(ev); break;
        case kAsyncPageable:
          got = cuMemcpyHtoDAsync(dev_, buf, 64, other);
          cuStreamSynchronize(other);
          break;
      }
    });
    t.join();
    CUgraph graph = nullptr;
    const CUresult end = cuStreamEndCapture(cap, &graph);
    // The copy on a stream that does not capture runs either way.
    EXPECT_EQ(got, refused && call != kAsyncPageable ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                                                     : CUDA_SUCCESS);
    EXPECT_EQ(end, refused ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS);
    if (graph != nullptr) {
      EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
    }
    if (call == kRegister && got == CUDA_SUCCESS) {
      EXPECT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
    }
    if (call == kUnregister && got != CUDA_SUCCESS) {
      EXPECT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
    }
    if (block != nullptr) {
      EXPECT_EQ(cuMemFreeHost(block), CUDA_SUCCESS);
    }
    EXPECT_EQ(cuEventDestroy(ev), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(cap), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(other), CUDA_SUCCESS);
    munmap(buf, page);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CaptureNeighbourTest,
                         ::testing::Values(CU_STREAM_CAPTURE_MODE_GLOBAL,
                                           CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                           CU_STREAM_CAPTURE_MODE_RELAXED));

// A capture whose stream was destroyed before its end prohibits nothing.
TEST_F(GraphsTest, AnAbandonedCaptureProhibitsNothing) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* buf = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(buf, MAP_FAILED);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  CUcontext ctx;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  CUresult got = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    cuCtxSetCurrent(ctx);
    got = cuMemHostRegister(buf, page, 0);
  });
  t.join();
  EXPECT_EQ(got, CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
  munmap(buf, page);
}

// The capturing thread itself is prohibited unless its capture was begun in
// relaxed mode or the thread is in relaxed mode (the documentation's rule).
TEST_F(GraphsTest, TheCapturingThreadIsProhibitedUnlessRelaxed) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* buf = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(buf, MAP_FAILED);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(buf, page, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(buf, page, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
  EXPECT_EQ(m, CU_STREAM_CAPTURE_MODE_RELAXED);
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(buf, page, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(buf), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  munmap(buf, page);
}

// The per-thread default stream is a blocking stream: the legacy stream's
// work waits for it, and it waits for the legacy stream's.
TEST_F(GraphsTest, PerThreadDefaultStreamSynchronizesWithTheLegacyStream) {
  std::memcpy(pinned_, Pattern(kSize, 3).data(), kSize);
  CUevent legacy_done;
  ASSERT_EQ(cuEventCreate(&legacy_done, 0), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_PER_THREAD, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_, pinned_, kSize, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(legacy_done, CU_STREAM_LEGACY), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(legacy_done), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_PER_THREAD, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(legacy_done), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_, kSize), Pattern(kSize, 3));
  // A non-blocking stream's work is not waited for.
  CUstream nb;
  ASSERT_EQ(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(nb, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_, pinned_, kSize, nb), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(legacy_done, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(legacy_done), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nb), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(nb, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(nb), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(legacy_done), CUDA_SUCCESS);
}

// As the hardware's DMA, copies reach page-locked memory whatever its CPU
// page protection (pinshim's copy guard protects such pages).
TEST_F(GraphsTest, DmaIgnoresCpuPageProtections) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* host = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(host, MAP_FAILED);
  ASSERT_EQ(cuMemHostRegister(host, 2 * page, 0), CUDA_SUCCESS);
  const auto bytes = Pattern(2 * page, 5);
  ASSERT_EQ(cuMemcpyHtoD(dev_, bytes.data(), 2 * page), CUDA_SUCCESS);
  ASSERT_EQ(mprotect(host, 2 * page, PROT_NONE), 0);
  ASSERT_EQ(cuMemcpyDtoH(host, dev_, 2 * page), CUDA_SUCCESS);  // written through
  ASSERT_EQ(cuMemsetD8(dev_, 0, 2 * page), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(dev_, host, 2 * page), CUDA_SUCCESS);  // and read
  ASSERT_EQ(mprotect(host, 2 * page, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(std::memcmp(host, bytes.data(), 2 * page), 0);
  EXPECT_EQ(ReadDevice(dev_, 2 * page), bytes);
  ASSERT_EQ(cuMemHostUnregister(host), CUDA_SUCCESS);
  munmap(host, 2 * page);
}

}  // namespace
}  // namespace fakecuda_test
