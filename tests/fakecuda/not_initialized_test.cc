// A fresh process, before cuInit: what works and what reports
// CUDA_ERROR_NOT_INITIALIZED; then FAKECUDA_DEVICES at cuInit.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace {

TEST(NotInitializedTest, CallsBeforeCuInitThenDeviceCountFromEnvironment) {
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  const char* name = nullptr;
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &name), CUDA_SUCCESS);
  void* fn = nullptr;
  EXPECT_EQ(cuGetProcAddress("cuInit", &fn, 2000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuInit));

  int count = -1;
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr dptr;
  void* host;
  CUstream stream;
  char byte = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
  unsigned flags = 0;
  int active = -1;
  EXPECT_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuDevicePrimaryCtxReset(0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemAlloc(&dptr, 16), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemHostAlloc(&host, 16, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemHostRegister(&byte, 1, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuMemcpyHtoD(0x1000, &byte, 1), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuStreamCreate(&stream, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_NOT_INITIALIZED);
  CUuuid uuid;
  CUmoduleLoadingMode mode;
  EXPECT_EQ(cuDeviceGetUuid(&uuid, 0), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(cuModuleGetLoadingMode(&mode), CUDA_ERROR_NOT_INITIALIZED);

  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(setenv("FAKECUDA_DEVICES", "0", 1), 0);
  EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);

  ASSERT_EQ(setenv("FAKECUDA_DEVICES", "5", 1), 0);
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 5);
  EXPECT_EQ(cuDeviceGet(&dev, 4), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGet(&dev, 5), CUDA_ERROR_INVALID_DEVICE);
  // Read once: later changes do not matter.
  ASSERT_EQ(setenv("FAKECUDA_DEVICES", "1", 1), 0);
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 5);
}

}  // namespace
