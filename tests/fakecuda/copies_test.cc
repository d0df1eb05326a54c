// Copies of every form: the bytes they move and the errors they report.
#include <cudaTypedefs.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

class CopiesTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_EQ(cuMemAlloc(&dev_a_, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc(&dev_b_, kSize), CUDA_SUCCESS);
    ASSERT_EQ(cuMemHostAlloc(&pinned_, kSize, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&stream_, 0), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuStreamDestroy(stream_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(dev_a_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFree(dev_b_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemFreeHost(pinned_), CUDA_SUCCESS);
    DriverTest::TearDown();
  }
  unsigned char* pinned() { return static_cast<unsigned char*>(pinned_); }
  CUdeviceptr pinned_ptr() { return reinterpret_cast<CUdeviceptr>(pinned_); }

  static constexpr size_t kSize = 4096;
  CUdeviceptr dev_a_ = 0;
  CUdeviceptr dev_b_ = 0;
  void* pinned_ = nullptr;
  CUstream stream_ = nullptr;
};

TEST_F(CopiesTest, LinearCopiesMoveBytes) {
  const auto data = Pattern(kSize, 1);
  ASSERT_EQ(cuMemcpyHtoD(dev_a_, data.data(), kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(dev_b_ + 100, dev_a_, 1000), CUDA_SUCCESS);
  std::vector<unsigned char> out(1000);
  ASSERT_EQ(cuMemcpyDtoH(out.data(), dev_b_ + 100, 1000), CUDA_SUCCESS);
  EXPECT_EQ(out, std::vector<unsigned char>(data.begin(), data.begin() + 1000));

  // Unified addressing: cuMemcpy works out each side's kind.
  const auto other = Pattern(kSize, 50);
  std::vector<unsigned char> back(kSize);
  ASSERT_EQ(cuMemcpy(dev_a_, reinterpret_cast<CUdeviceptr>(other.data()), kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpy(dev_b_, dev_a_, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpy(pinned_ptr(), dev_b_, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpy(reinterpret_cast<CUdeviceptr>(back.data()), pinned_ptr(), kSize),
            CUDA_SUCCESS);
  EXPECT_EQ(back, other);

  // Page-locked memory is device-accessible: it may be named as device memory.
  ASSERT_EQ(cuMemcpyHtoD(pinned_ptr(), data.data(), 64), CUDA_SUCCESS);
  EXPECT_EQ(0, std::memcmp(pinned(), data.data(), 64));

  // Managed memory may be named as host memory.
  CUdeviceptr managed;
  ASSERT_EQ(cuMemAllocManaged(&managed, 64, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(reinterpret_cast<void*>(managed), dev_a_, 64), CUDA_SUCCESS);
  EXPECT_EQ(0, std::memcmp(reinterpret_cast<void*>(managed), other.data(), 64));
  EXPECT_EQ(cuMemFree(managed), CUDA_SUCCESS);
}

TEST_F(CopiesTest, LinearCopyErrors) {
  std::vector<unsigned char> host(kSize + 1);
  EXPECT_EQ(cuMemcpyHtoD(dev_a_, nullptr, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(nullptr, dev_a_, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(0, host.data(), 16), CUDA_ERROR_INVALID_VALUE);
  // Past the end of the allocation, by one byte.
  EXPECT_EQ(cuMemcpyHtoD(dev_a_, host.data(), kSize + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(dev_a_ + 1, host.data(), kSize), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(host.data(), dev_a_ + kSize - 8, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoD(dev_b_, dev_a_ + 8, kSize), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy(dev_b_, dev_a_, kSize + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned(), kSize + 1, stream_), CUDA_ERROR_INVALID_VALUE);
  // Freed memory.
  CUdeviceptr gone;
  ASSERT_EQ(cuMemAlloc(&gone, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree(gone), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD(gone, host.data(), 16), CUDA_ERROR_INVALID_VALUE);
  // A bad stream.
  EXPECT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned(), 16, reinterpret_cast<CUstream>(host.data())),
            CUDA_ERROR_INVALID_HANDLE);
  // Nothing to copy is fine.
  EXPECT_EQ(cuMemcpyHtoD(dev_a_, host.data(), 0), CUDA_SUCCESS);
}

TEST_F(CopiesTest, AsyncCopiesMoveBytes) {
  const auto data = Pattern(kSize, 3);
  std::memcpy(pinned(), data.data(), kSize);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_a_, pinned(), kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoDAsync(dev_b_, dev_a_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);  // Before the source changes.
  std::memset(pinned(), 0, kSize);
  ASSERT_EQ(cuMemsetD8(dev_a_, 0, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync(pinned(), dev_b_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(0, std::memcmp(pinned(), data.data(), kSize));
  ASSERT_EQ(cuMemcpyAsync(dev_a_, dev_b_, kSize, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_a_, kSize), data);
}

// Measured on the H200 (bench/RESULTS.md, page_facts sync_h2d_return): a
// synchronous upload from pageable memory returns once its source was read,
// its DMA still queued; one from pinned memory returns complete.
TEST_F(CopiesTest, SyncPageableUploadReturnsOnceItsSourceWasRead) {
  std::vector<unsigned char> host = Pattern(kSize, 7), back(kSize);
  fakecuda_set_copy_delay_us(300000);  // each copy starts 300 ms late
  ASSERT_EQ(cuMemcpyHtoD(dev_a_, host.data(), kSize), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  host.assign(kSize, 0);  // read already
  fakecuda_set_copy_delay_us(0);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), dev_a_, kSize), CUDA_SUCCESS);
  EXPECT_EQ(back, Pattern(kSize, 7));
  std::memcpy(pinned(), Pattern(kSize, 8).data(), kSize);
  fakecuda_set_copy_delay_us(100000);
  ASSERT_EQ(cuMemcpyHtoD(dev_b_, pinned_, kSize), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(0);
}

// ... but after the work queued before it ("a stream sync is performed
// before the copy is initiated"): the legacy stream's, and so the blocking
// streams' too.
TEST_F(CopiesTest, SyncPageableUploadWaitsForEarlierWork) {
  std::vector<unsigned char> host = Pattern(kSize, 9);
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);  // a blocking stream
  ASSERT_EQ(cuMemcpyHtoDAsync(dev_b_, pinned_, kSize, stream_), CUDA_SUCCESS);
  std::atomic<bool> returned{false};
  std::thread copier([&] {
    cuCtxSetCurrent(ctx_);
    EXPECT_EQ(cuMemcpyHtoD(dev_a_, host.data(), kSize), CUDA_SUCCESS);
    returned.store(true);
  });
  usleep(100000);
  EXPECT_FALSE(returned.load());
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  copier.join();
  EXPECT_TRUE(returned.load());
}

TEST_F(CopiesTest, PerThreadVariantsMoveBytes) {
  void* fn = nullptr;
  constexpr auto kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  ASSERT_EQ(cuGetProcAddress("cuMemcpyHtoD", &fn, 7000, kPerThread, nullptr), CUDA_SUCCESS);
  auto htod = reinterpret_cast<PFN_cuMemcpyHtoD_v7000_ptds>(fn);
  ASSERT_EQ(cuGetProcAddress("cuMemcpyDtoHAsync", &fn, 7000, kPerThread, nullptr), CUDA_SUCCESS);
  auto dtoh_async = reinterpret_cast<PFN_cuMemcpyDtoHAsync_v7000_ptsz>(fn);
  ASSERT_EQ(cuGetProcAddress("cuMemcpy2D", &fn, 7000, kPerThread, nullptr), CUDA_SUCCESS);
  auto copy2d = reinterpret_cast<PFN_cuMemcpy2D_v7000_ptds>(fn);
  ASSERT_EQ(cuGetProcAddress("cuStreamSynchronize", &fn, 7000, kPerThread, nullptr), CUDA_SUCCESS);
  auto sync = reinterpret_cast<PFN_cuStreamSynchronize_v7000_ptsz>(fn);

  const auto data = Pattern(256, 9);
  ASSERT_EQ(htod(dev_a_, data.data(), 256), CUDA_SUCCESS);
  CUDA_MEMCPY2D copy = {};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = dev_a_;
  copy.srcPitch = 16;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = dev_b_;
  copy.dstPitch = 16;
  copy.WidthInBytes = 16;
  copy.Height = 16;
  ASSERT_EQ(copy2d(&copy), CUDA_SUCCESS);
  ASSERT_EQ(dtoh_async(pinned(), dev_b_, 256, nullptr), CUDA_SUCCESS);  // Per-thread stream.
  ASSERT_EQ(sync(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(0, std::memcmp(pinned(), data.data(), 256));
}

TEST_F(CopiesTest, Copy2DWithOffsetsAndPitches) {
  // Host image: 10 rows of pitch 40; copy an 8x5 block at (x=3, y=2) into a
  // pitched device allocation at (x=5, y=1), then back to (x=0, y=0).
  constexpr size_t kHostPitch = 40, kWidth = 8, kRows = 5;
  const auto image = Pattern(kHostPitch * 10, 11);
  CUdeviceptr pitched;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch(&pitched, &pitch, 64, 8, 4), CUDA_SUCCESS);

  CUDA_MEMCPY2D up = {};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = image.data();
  up.srcXInBytes = 3;
  up.srcY = 2;
  up.srcPitch = kHostPitch;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = pitched;
  up.dstXInBytes = 5;
  up.dstY = 1;
  up.dstPitch = pitch;
  up.WidthInBytes = kWidth;
  up.Height = kRows;
  ASSERT_EQ(cuMemcpy2D(&up), CUDA_SUCCESS);

  std::vector<unsigned char> out(kWidth * kRows, 0);
  CUDA_MEMCPY2D down = {};
  down.srcMemoryType = CU_MEMORYTYPE_UNIFIED;  // A device pointer, classified.
  down.srcDevice = pitched;
  down.srcXInBytes = 5;
  down.srcY = 1;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_UNIFIED;  // A host pointer, classified.
  down.dstDevice = reinterpret_cast<CUdeviceptr>(out.data());
  down.dstPitch = kWidth;
  down.WidthInBytes = kWidth;
  down.Height = kRows;
  ASSERT_EQ(cuMemcpy2DUnaligned(&down), CUDA_SUCCESS);
  for (size_t y = 0; y < kRows; ++y) {
    for (size_t x = 0; x < kWidth; ++x) {
      EXPECT_EQ(out[y * kWidth + x], image[(y + 2) * kHostPitch + x + 3]) << y << "," << x;
    }
  }

  // The same through the asynchronous form.
  std::fill(out.begin(), out.end(), 0);
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = out.data();
  ASSERT_EQ(cuMemcpy2DAsync(&down, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(out[0], image[2 * kHostPitch + 3]);
  EXPECT_EQ(out.back(), image[6 * kHostPitch + 10]);

  // Errors: rows wider than the pitch, arrays, past the allocation, no descriptor.
  CUDA_MEMCPY2D bad = up;
  bad.srcPitch = 8;  // 3 + 8 > 8.
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.dstY = 5;  // Rows 5..9 of an 8-row allocation.
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.srcHost = nullptr;
  EXPECT_EQ(cuMemcpy2D(&bad), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy2D(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(pitched), CUDA_SUCCESS);
}

TEST_F(CopiesTest, Copy3DMovesASubVolume) {
  // Host volume: 4 slices of 6 rows of pitch 16. Copy a 5x3x2 box at
  // (x=2, y=1, z=1) to device (packed 5x3x2), then back into a zeroed volume.
  constexpr size_t kPitch = 16, kHeight = 6, kDepth = 4;
  const auto volume = Pattern(kPitch * kHeight * kDepth, 21);
  CUDA_MEMCPY3D up = {};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = volume.data();
  up.srcXInBytes = 2;
  up.srcY = 1;
  up.srcZ = 1;
  up.srcPitch = kPitch;
  up.srcHeight = kHeight;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = dev_a_;
  up.dstPitch = 5;
  up.dstHeight = 3;
  up.WidthInBytes = 5;
  up.Height = 3;
  up.Depth = 2;
  ASSERT_EQ(cuMemcpy3D(&up), CUDA_SUCCESS);
  const auto packed = ReadDevice(dev_a_, 30);
  for (size_t z = 0; z < 2; ++z) {
    for (size_t y = 0; y < 3; ++y) {
      for (size_t x = 0; x < 5; ++x) {
        EXPECT_EQ(packed[z * 15 + y * 5 + x],
                  volume[(z + 1) * kPitch * kHeight + (y + 1) * kPitch + x + 2]);
      }
    }
  }

  std::vector<unsigned char> back(volume.size(), 0);
  CUDA_MEMCPY3D down = {};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = dev_a_;
  down.srcPitch = 5;
  down.srcHeight = 3;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = back.data();
  down.dstXInBytes = 2;
  down.dstY = 1;
  down.dstZ = 1;
  down.dstPitch = kPitch;
  down.dstHeight = kHeight;
  down.WidthInBytes = 5;
  down.Height = 3;
  down.Depth = 2;
  ASSERT_EQ(cuMemcpy3DAsync(&down, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  size_t moved = 0;
  for (size_t i = 0; i < back.size(); ++i) {
    if (back[i] != 0) {
      EXPECT_EQ(back[i], volume[i]);
      ++moved;
    }
  }
  EXPECT_GE(moved, 28u);  // 30 bytes, a pattern byte may be 0.

  CUDA_MEMCPY3D bad = up;
  bad.reserved0 = &bad;
  EXPECT_EQ(cuMemcpy3D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.srcHeight = 3;  // y=1 plus 3 rows do not fit a 3-row slice.
  EXPECT_EQ(cuMemcpy3D(&bad), CUDA_ERROR_INVALID_VALUE);
  bad = up;
  bad.dstDevice = dev_a_ + kSize - 16;
  EXPECT_EQ(cuMemcpy3D(&bad), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CopiesTest, BatchCopiesOfBothAbis) {
  const auto data = Pattern(kSize, 31);
  std::memcpy(pinned(), data.data(), kSize);
  std::vector<unsigned char> out(512, 0);
  CUdeviceptr dsts[3] = {dev_a_, dev_b_, reinterpret_cast<CUdeviceptr>(pinned() + 2048)};
  CUdeviceptr srcs[3] = {pinned_ptr(), pinned_ptr() + 512, pinned_ptr()};
  size_t sizes[3] = {512, 256, 128};
  CUmemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attrs[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
  size_t attr_idxs[2] = {0, 2};
  size_t fail = 77;

  // The CUDA 12.8 ABI, with failIdx, per-thread variant: NULL is the calling
  // thread's default stream, where a batch may go.
  void* fn = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuMemcpyBatchAsync", &fn, 12080,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, nullptr),
            CUDA_SUCCESS);
  auto batch_12080 = reinterpret_cast<PFN_cuMemcpyBatchAsync_v12080_ptsz>(fn);
  ASSERT_EQ(batch_12080(dsts, srcs, sizes, 3, attrs, attr_idxs, 2, &fail, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fail, 77u);  // Untouched on success.
  ASSERT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attrs, attr_idxs, 2, stream_),
            CUDA_SUCCESS);  // The CUDA 13.0 ABI.
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_a_, 512), std::vector<unsigned char>(data.begin(), data.begin() + 512));
  EXPECT_EQ(ReadDevice(dev_b_, 256),
            std::vector<unsigned char>(data.begin() + 512, data.begin() + 768));
  EXPECT_EQ(0, std::memcmp(pinned() + 2048, data.data(), 128));

  // A bad copy names its index; a bad batch names none.
  CUdeviceptr bad_dsts[3] = {dev_a_, dev_b_ + kSize - 8, dev_a_};
  EXPECT_EQ(batch_12080(bad_dsts, srcs, sizes, 3, attrs, attr_idxs, 2, &fail, stream_),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fail, 1u);
  CUmemcpyAttributes unordered[1] = {};
  size_t zero[1] = {0};
  EXPECT_EQ(batch_12080(dsts, srcs, sizes, 3, unordered, zero, 1, &fail, stream_),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fail, SIZE_MAX);
  size_t unsorted[2] = {0, 0};
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attrs, unsorted, 2, stream_),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 0, attrs, attr_idxs, 2, stream_),
            CUDA_ERROR_INVALID_VALUE);
  // Not on the legacy NULL stream; the per-thread one is fine.
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attrs, attr_idxs, 2, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attrs, attr_idxs, 2, CU_STREAM_LEGACY),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 3, attrs, attr_idxs, 2, CU_STREAM_PER_THREAD),
            CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
}

TEST_F(CopiesTest, BatchSourceAccessOrder) {
  CUdeviceptr dsts[2] = {dev_a_, dev_b_};
  CUdeviceptr srcs[2] = {pinned_ptr(), pinned_ptr() + 1};
  size_t sizes[2] = {1, 1};
  CUmemcpyAttributes attrs[2] = {};
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  attrs[1].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t attr_idxs[2] = {0, 1};
  pinned()[0] = 1;
  pinned()[1] = 1;
  ASSERT_EQ(fakecuda_hold_stream(stream_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, attrs, attr_idxs, 2, stream_), CUDA_SUCCESS);
  pinned()[0] = 2;
  pinned()[1] = 2;
  ASSERT_EQ(fakecuda_hold_stream(stream_, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev_a_, 1)[0], 1);  // Read during the call.
  EXPECT_EQ(ReadDevice(dev_b_, 1)[0], 2);  // Read in stream order.
}

TEST_F(CopiesTest, MemsetD8) {
  ASSERT_EQ(cuMemsetD8(dev_a_, 0xAB, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8(dev_a_ + 10, 0x01, 5), CUDA_SUCCESS);
  const auto bytes = ReadDevice(dev_a_, 20);
  EXPECT_EQ(bytes[9], 0xAB);
  EXPECT_EQ(bytes[10], 0x01);
  EXPECT_EQ(bytes[14], 0x01);
  EXPECT_EQ(bytes[15], 0xAB);
  EXPECT_EQ(cuMemsetD8(dev_a_ + 1, 0, kSize), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemsetD8(pinned_ptr(), 0x5A, 8), CUDA_SUCCESS);  // Synchronous on host memory.
  EXPECT_EQ(pinned()[7], 0x5A);
}

}  // namespace
}  // namespace fakecuda_test
