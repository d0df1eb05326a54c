// Stream ordering: asynchronous work completes later, pageable downloads
// are synchronous and uploads read their source as the H200's driver does,
// the legacy stream synchronizes with blocking streams, events.
// fakecuda_hold_stream keeps queued work pending, so "not yet" is asserted
// deterministically, never by timing.
#include <cudaTypedefs.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

class StreamsTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_EQ(cuMemAlloc(&dev_a_, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc(&dev_b_, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemHostAlloc(&pinned_, kSize, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&non_blocking_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuStreamDestroy(stream_), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(non_blocking_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(dev_a_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(dev_b_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeHost(pinned_), CUDA_SUCCESS);
    DriverTest::TearDown();
  }
  unsigned char* pinned() { return static_cast<unsigned char*>(pinned_); }
  void FillPinned(unsigned seed) {
    const auto bytes = Pattern(kSize, seed);
    std::memcpy(pinned_, bytes.data(), kSize);
  }

  static constexpr size_t kSize = 1024;
  CUdeviceptr dev_a_ = 0;
  CUdeviceptr dev_b_ = 0;
  void* pinned_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream non_blocking_ = nullptr;
};

TEST_F(StreamsTest, PinnedAsyncCopyCompletesLaterAndReadsTheSourceThen) {
  FillPinned(1);
  CUevent done;
  ASSERT_EQ(cuEventCreate(&done, 0), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(done, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(done), CUDA_ERROR_NOT_READY);
  EXPECT_GE(fakecuda_pending_ops(), 2u);
  FillPinned(2);  // Changed after the call: the copy sees this.
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(done), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(done), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_a_, kSize), Pattern(kSize, 2));
  EXPECT_EQ(cuEventDestroy(done), CUDA_SUCCESS);
}

// An asynchronous upload from pageable memory reads its first 2 MiB at the
// call (driver_behavior.h, kAsyncPageableUploadEagerBytes): the program may
// overwrite its buffer at once; a download lands before the call returns.
TEST_F(StreamsTest, PageableAsyncUploadsReadTheirSourceAtTheCall) {
  std::vector<unsigned char> pageable = Pattern(kSize, 3);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pageable.data(), kSize, stream_), CUDA_SUCCESS);
  pageable.assign(kSize, 0);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_a_, kSize), Pattern(kSize, 3));
  std::vector<unsigned char> back(kSize, 0);
  ASSERT_EQ(cuMemcpyDtoHAsync(back.data(), dev_a_, kSize, stream_), CUDA_SUCCESS);
  EXPECT_EQ(back, Pattern(kSize, 3));  // Landed before the call returned.
}

// Behind held work on its stream: an upload of at most 2 MiB returns at once
// with its source read (the device gets what the buffer held at the call,
// though the program rewrites it before the stream runs); a larger one
// reads the rest after that work and returns only then (the device gets 2
// MiB of the old bytes and the new ones after them), as on the H200.
TEST_F(StreamsTest, PageableAsyncUploadReadsPast2MiBAfterEarlierWork) {
  FillPinned(4);
  std::vector<unsigned char> small = Pattern(kSize, 5);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_b_, small.data(), kSize, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);  // returned while held
  small.assign(kSize, 0);
  const size_t big_size = (size_t{3} << 20) + 4096;
  CUdeviceptr big;
  ASSERT_EQ(cuMemAlloc(&big, big_size), CUDA_SUCCESS);
  std::vector<unsigned char> big_src = Pattern(big_size, 6);
  std::atomic<bool> returned{false};
  CUresult after_return = CUDA_ERROR_UNKNOWN;
  const size_t pending = fakecuda_pending_ops();
  std::thread caller([&] {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyHtoDAsync(big, big_src.data(), big_size, stream_), CUDA_SUCCESS);
    after_return = cuStreamQuery(stream_);  // Every copy is done by now.
    returned = true;
  });
  // Queued (its first 2 MiB read at the call) however slowly the caller
  // got there on a loaded machine; then waiting.
  for (int i = 0; i < 10000 && fakecuda_pending_ops() == pending; ++i) usleep(1000);
  EXPECT_GT(fakecuda_pending_ops(), pending);
  usleep(50000);
  EXPECT_FALSE(returned.load());  // Cannot return while the earlier copies are held.
  const auto fresh = Pattern(big_size, 7);
  std::memcpy(big_src.data(), fresh.data(), big_size);  // rewritten before the stream runs
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  caller.join();
  EXPECT_EQ(after_return, CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_a_, kSize), Pattern(kSize, 4));
  EXPECT_EQ(ReadDevice(dev_b_, kSize), Pattern(kSize, 5));
  std::vector<unsigned char> expect = Pattern(big_size, 6);
  std::memcpy(expect.data() + (size_t{2} << 20), fresh.data() + (size_t{2} << 20),
              big_size - (size_t{2} << 20));
  EXPECT_TRUE(ReadDevice(big, big_size) == expect);
  EXPECT_EQ(cuMemFree(big), CUDA_SUCCESS);
}

TEST_F(StreamsTest, SynchronousCopiesWaitExceptDeviceToDevice) {
  const auto data = Pattern(kSize, 6);
  ASSERT_EQ(cuMemcpyHtoD(dev_a_, data.data(), kSize), CUDA_SUCCESS);
  // Device to device only queues on the legacy stream.
  ASSERT_EQ(fakecuda_hold_stream(nullptr, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(dev_b_, dev_a_, kSize), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  // A copy to the host waits for it.
  std::atomic<bool> returned{false};
  std::vector<unsigned char> back(kSize, 0);
  std::thread caller([&] {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemcpyDtoH(back.data(), dev_b_, kSize), CUDA_SUCCESS);
    returned = true;
  });
  EXPECT_FALSE(returned.load());
  ASSERT_EQ(fakecuda_hold_stream(nullptr, 0), CUDA_SUCCESS);
  caller.join();
  EXPECT_EQ(back, data);
}

TEST_F(StreamsTest, LegacyStreamWaitsForBlockingStreamsOnly) {
  FillPinned(7);
  // Blocking: legacy work queued after it waits.
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_b_, dev_a_, kSize, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_b_, kSize), Pattern(kSize, 7));

  // Non-blocking: legacy work runs past it.
  ASSERT_EQ(fakecuda_hold_stream(non_blocking_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned_, kSize, non_blocking_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_b_, dev_a_, kSize, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(non_blocking_), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(non_blocking_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(non_blocking_), CUDA_SUCCESS);
}

// The flags a stream was created with; the default streams are blocking.
TEST_F(StreamsTest, StreamFlagsAreTheCreationFlags) {
  unsigned int flags = 99;
  ASSERT_EQ(cuStreamGetFlags(non_blocking_, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  ASSERT_EQ(cuStreamGetFlags(stream_, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_DEFAULT));
  flags = 99;
  ASSERT_EQ(cuStreamGetFlags(nullptr, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_DEFAULT));
  flags = 99;
  ASSERT_EQ(cuStreamGetFlags(CU_STREAM_PER_THREAD, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_DEFAULT));
  EXPECT_EQ(cuStreamGetFlags(stream_, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(StreamsTest, BlockingStreamsWaitForTheLegacyStream) {
  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_LEGACY, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_b_, dev_a_, kSize, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_a_, dev_b_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_a_, dev_b_, kSize, non_blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamSynchronize(non_blocking_), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_LEGACY, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
}

TEST_F(StreamsTest, PerThreadDefaultStream) {
  void* fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuMemcpyHtoDAsync", &fn, 7000,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  auto htod_async = reinterpret_cast<PFN_cuMemcpyHtoDAsync_v7000_ptsz>(fn);
  FillPinned(8);
  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_PER_THREAD, 1), CUDA_SUCCESS);
  ASSERT_EQ(htod_async(dev_a_, pinned_, kSize, nullptr), CUDA_SUCCESS);  // NULL: this thread's.
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);
  // Another thread has its own default stream.
  std::thread([&] {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  }).join();
  // It is a blocking stream: later legacy work waits for it.
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_b_, dev_a_, kSize, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_PER_THREAD, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_b_, kSize), Pattern(kSize, 8));
}

TEST_F(StreamsTest, StreamWaitEventOrdersAcrossStreams) {
  FillPinned(9);
  CUevent ev;
  ASSERT_EQ(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(ev, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(non_blocking_, ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_b_, dev_a_, kSize, non_blocking_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(non_blocking_), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(non_blocking_), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_b_, kSize), Pattern(kSize, 9));
  EXPECT_EQ(cuStreamWaitEvent(non_blocking_, ev, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventDestroy(ev), CUDA_SUCCESS);
}

TEST_F(StreamsTest, EventErrorsAndTiming) {
  CUevent a, b, untimed;
  EXPECT_EQ(cuEventCreate(&a, 0x8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(&a, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuEventCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&b, CU_EVENT_BLOCKING_SYNC), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(cuEventQuery(a), CUDA_SUCCESS);  // Never recorded.
  EXPECT_EQ(cuEventSynchronize(a), CUDA_SUCCESS);
  EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE);

  ASSERT_EQ(cuEventRecord(a, stream_), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(b, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(untimed, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cuEventElapsedTime(&ms, a, untimed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime(nullptr, a, b), CUDA_ERROR_INVALID_VALUE);

  EXPECT_EQ(cuEventDestroy(a), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(nullptr, stream_), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventDestroy(b), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(untimed), CUDA_SUCCESS);
}

TEST_F(StreamsTest, StreamLifecycle) {
  CUstream s;
  EXPECT_EQ(cuStreamCreate(&s, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);

  // Destroying a stream with work queued lets the work finish.
  FillPinned(10);
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(20000);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned_, kSize, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(0);
  EXPECT_EQ(ReadDevice(dev_a_, kSize), Pattern(kSize, 10));
}

TEST_F(StreamsTest, FreeWaitsForQueuedWork) {
  FillPinned(11);
  CUdeviceptr scratch;
  ASSERT_EQ(cuMemAlloc(&scratch, kSize), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(20000);
  ASSERT_EQ(cuMemcpyHtoDAsync(scratch, pinned_, kSize, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(scratch), CUDA_SUCCESS);  // Synchronizes first.
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_SUCCESS);
}

// Queues copies (one held, several running, one delayed) and exits at once.
void ExitWithWorkInFlight() {
  CUcontext ctx;
  CUdeviceptr dev;
  void* pinned;
  CUstream held;
  CUstream busy;
  constexpr size_t kBig = size_t{64} << 20;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&dev, kBig) != CUDA_SUCCESS ||
      cuMemHostAlloc(&pinned, kBig, 0) != CUDA_SUCCESS ||
      cuStreamCreate(&held, 0) != CUDA_SUCCESS || cuStreamCreate(&busy, 0) != CUDA_SUCCESS) {
    std::exit(2);
  }
  fakecuda_hold_stream(held, 1);
  cuMemcpyHtoDAsync(dev, pinned, kBig, held);
  for (int i = 0; i < 8; ++i) cuMemcpyHtoDAsync(dev, pinned, kBig, busy);
  fakecuda_set_copy_delay_us(500000);
  cuMemcpyHtoDAsync(dev, pinned, 16, busy);
  std::exit(0);
}

// Exiting with copies queued, running or held neither hangs nor crashes.
TEST(StreamsExitTest, ExitWithCopiesInFlight) {
  EXPECT_EXIT(ExitWithWorkInFlight(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace fakecuda_test
