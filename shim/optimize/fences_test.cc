// FenceManager::QueuedWork: whether an operation queued now on a stream
// would run after work that has yet to complete, with the legacy stream's
// implicit synchronization (blocking streams wait for it; it waits for
// them), on the simulated driver.
#include "shim/optimize/fences.h"

#include <gtest/gtest.h>

#include "shim/optimize/test_util.h"

namespace pinshim {
namespace optimize {
namespace {

using testing::FakeDriverOps;
using testing::MakeContextCurrent;
using Work = FenceManager::Work;

class QueuedWorkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(MakeContextCurrent(), nullptr);
    ops_ = FakeDriverOps();
    ASSERT_TRUE(fences_.Init(&ops_));
    ASSERT_EQ(cuStreamCreate(&blocking_, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&non_blocking_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAlloc(&dev_, 8192), CUDA_SUCCESS);
  }
  void TearDown() override {
    for (CUstream s : {blocking_, non_blocking_, CU_STREAM_LEGACY}) fakecuda_hold_stream(s, 0);
    cuCtxSynchronize();
    cuMemFree(dev_);
    cuStreamDestroy(blocking_);
    cuStreamDestroy(non_blocking_);
  }
  // Queues one operation on a held stream: it stays pending until released.
  void QueueHeld(CUstream s) {
    ASSERT_EQ(fakecuda_hold_stream(s, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuMemcpyDtoDAsync(dev_ + 4096, dev_, 4096, s), CUDA_SUCCESS);
  }
  void Release(CUstream s) {
    ASSERT_EQ(fakecuda_hold_stream(s, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  }

  DriverOps ops_;
  FenceManager fences_;
  CUstream blocking_ = nullptr, non_blocking_ = nullptr;
  CUdeviceptr dev_ = 0;
};

TEST_F(QueuedWorkTest, IdleStreamsHaveNone) {
  for (CUstream s : {blocking_, non_blocking_, static_cast<CUstream>(nullptr), CU_STREAM_LEGACY,
                     CU_STREAM_PER_THREAD}) {
    EXPECT_EQ(fences_.QueuedWork(s), Work::kNone) << s;
  }
}

TEST_F(QueuedWorkTest, AStreamsOwnWork) {
  for (CUstream s : {blocking_, non_blocking_, CU_STREAM_LEGACY}) {
    QueueHeld(s);
    EXPECT_EQ(fences_.QueuedWork(s), Work::kQueued) << s;
    Release(s);
    EXPECT_EQ(fences_.QueuedWork(s), Work::kNone) << s;
  }
}

// Work on the legacy stream is waited for by blocking streams and by the
// per-thread default stream, not by non-blocking ones.
TEST_F(QueuedWorkTest, LegacyWorkBlocksBlockingStreams) {
  QueueHeld(CU_STREAM_LEGACY);
  EXPECT_EQ(fences_.QueuedWork(blocking_), Work::kQueued);
  EXPECT_EQ(fences_.QueuedWork(CU_STREAM_PER_THREAD), Work::kQueued);
  EXPECT_EQ(fences_.QueuedWork(non_blocking_), Work::kNone);
  Release(CU_STREAM_LEGACY);
}

// The legacy stream waits for every blocking stream's work (which no query
// of the legacy stream itself tells), not for a non-blocking stream's.
TEST_F(QueuedWorkTest, TheLegacyStreamWaitsForBlockingStreams) {
  QueueHeld(blocking_);
  EXPECT_EQ(fences_.QueuedWork(nullptr), Work::kQueued);
  EXPECT_EQ(fences_.QueuedWork(CU_STREAM_LEGACY), Work::kQueued);
  EXPECT_EQ(fences_.QueuedWork(non_blocking_), Work::kNone);
  Release(blocking_);
  QueueHeld(non_blocking_);
  EXPECT_EQ(fences_.QueuedWork(nullptr), Work::kNone);
  Release(non_blocking_);
  EXPECT_EQ(fences_.QueuedWork(nullptr), Work::kNone);
}

// A stream the driver cannot answer for (capturing, here): unknown, and
// the capture goes on undisturbed.
TEST_F(QueuedWorkTest, ACapturingStreamIsUnknown) {
  ASSERT_EQ(cuStreamBeginCapture_v2(non_blocking_, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(fences_.QueuedWork(non_blocking_), Work::kUnknown);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_EQ(cuStreamIsCapturing(non_blocking_, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(non_blocking_, &graph), CUDA_SUCCESS);
  cuGraphDestroy(graph);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
