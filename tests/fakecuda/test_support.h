// A fixture and small utilities for tests linked directly against the
// simulated driver.
#ifndef PINSHIM_TESTS_FAKECUDA_TEST_SUPPORT_H_
#define PINSHIM_TESTS_FAKECUDA_TEST_SUPPORT_H_

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "tests/fakecuda/fakecuda_control.h"

namespace fakecuda_test {

// cuInit plus device 0's primary context, current on the test's thread.
class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  void TearDown() override {
    fakecuda_set_copy_delay_us(0);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  }

  CUcontext ctx_ = nullptr;
};

// `n` bytes counting up from `seed`.
inline std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(seed + i * 7);
  return bytes;
}

// The `n` bytes at device pointer `p`, read back synchronously.
inline std::vector<unsigned char> ReadDevice(CUdeviceptr p, size_t n) {
  std::vector<unsigned char> bytes(n);
  EXPECT_EQ(cuMemcpyDtoH(bytes.data(), p, n), CUDA_SUCCESS);
  return bytes;
}

}  // namespace fakecuda_test

#endif  // PINSHIM_TESTS_FAKECUDA_TEST_SUPPORT_H_
