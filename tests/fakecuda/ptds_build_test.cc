// A program built with CUDA_API_PER_THREAD_DEFAULT_STREAM: cuda.h maps the
// stream-taking calls to their _ptds/_ptsz exports, which must all link, and
// the NULL stream is then the calling thread's default stream.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "build with -DCUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include <cstring>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

using PerThreadBuildTest = DriverTest;

TEST_F(PerThreadBuildTest, NullStreamIsThePerThreadStream) {
  constexpr size_t kSize = 256;
  CUdeviceptr a, b;
  void* pinned;
  ASSERT_EQ(cuMemAlloc(&a, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, kSize), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostAlloc(&pinned, kSize, 0), CUDA_SUCCESS);
  const auto data = Pattern(kSize, 4);
  std::memcpy(pinned, data.data(), kSize);

  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_PER_THREAD, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(a, pinned, kSize, nullptr), CUDA_SUCCESS);  // _v2_ptsz
  CUevent ev;
  ASSERT_EQ(cuEventCreate(&ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(ev, nullptr), CUDA_SUCCESS);      // _ptsz
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);  // _ptsz
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_SUCCESS);
  ASSERT_EQ(fakecuda_hold_stream(CU_STREAM_PER_THREAD, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(nullptr, ev, 0), CUDA_SUCCESS);  // _ptsz
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);       // _ptsz

  // Every other per-thread export the header maps to.
  std::vector<unsigned char> back(kSize, 0);
  ASSERT_EQ(cuMemcpyDtoD(b, a, kSize), CUDA_SUCCESS);                // _v2_ptds
  ASSERT_EQ(cuMemcpy(b, a, kSize), CUDA_SUCCESS);                    // _ptds
  ASSERT_EQ(cuMemcpyAsync(b, a, kSize, nullptr), CUDA_SUCCESS);      // _ptsz
  ASSERT_EQ(cuMemcpyDtoDAsync(b, a, kSize, nullptr), CUDA_SUCCESS);  // _v2_ptsz
  ASSERT_EQ(cuMemsetD8(a, 0, 1), CUDA_SUCCESS);                      // _v2_ptds
  ASSERT_EQ(cuMemcpyHtoD(a, data.data(), 1), CUDA_SUCCESS);          // _v2_ptds
  CUDA_MEMCPY2D copy2d = {};
  copy2d.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy2d.srcDevice = b;
  copy2d.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy2d.dstHost = back.data();
  copy2d.WidthInBytes = kSize;
  copy2d.Height = 1;
  ASSERT_EQ(cuMemcpy2D(&copy2d), CUDA_SUCCESS);                // _v2_ptds
  ASSERT_EQ(cuMemcpy2DUnaligned(&copy2d), CUDA_SUCCESS);       // _v2_ptds
  ASSERT_EQ(cuMemcpy2DAsync(&copy2d, nullptr), CUDA_SUCCESS);  // _v2_ptsz
  CUDA_MEMCPY3D copy3d = {};
  copy3d.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy3d.srcDevice = b;
  copy3d.dstMemoryType = CU_MEMORYTYPE_HOST;
  copy3d.dstHost = back.data();
  copy3d.WidthInBytes = kSize;
  copy3d.Height = 1;
  copy3d.Depth = 1;
  ASSERT_EQ(cuMemcpy3D(&copy3d), CUDA_SUCCESS);                // _v2_ptds
  ASSERT_EQ(cuMemcpy3DAsync(&copy3d, nullptr), CUDA_SUCCESS);  // _v2_ptsz
  CUdeviceptr dsts[1] = {b};
  CUdeviceptr srcs[1] = {a};
  size_t sizes[1] = {kSize};
  CUmemcpyAttributes attrs[1] = {};
  attrs[0].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t idxs[1] = {0};
  ASSERT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, attrs, idxs, 1, nullptr),
            CUDA_SUCCESS);  // _v2_ptsz: NULL is allowed, being per-thread.
  ASSERT_EQ(cuMemcpyDtoHAsync(back.data(), b, kSize, nullptr), CUDA_SUCCESS);  // _v2_ptsz
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(back, data);
  ASSERT_EQ(cuMemcpyDtoH(back.data(), b, kSize), CUDA_SUCCESS);  // _v2_ptds
  EXPECT_EQ(back, data);

  EXPECT_EQ(cuEventDestroy(ev), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(b), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
}

}  // namespace
}  // namespace fakecuda_test
