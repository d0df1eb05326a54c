// Devices, contexts, error strings and the test knobs, through direct linking.
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <thread>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

TEST(LinkTest, LoadedAsLibcudaSoOne) {
  // Linked by soname: a later dlopen of the plain name finds this very library.
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(handle, nullptr);
  EXPECT_EQ(dlsym(handle, "cuMemcpyHtoD_v2"), reinterpret_cast<void*>(&cuMemcpyHtoD_v2));
  EXPECT_NE(dlsym(handle, "fakecuda_call_count"), nullptr);
  // Internals stay hidden.
  EXPECT_EQ(dlsym(handle, "_ZN8fakecuda1SEv"), nullptr);
  dlclose(handle);
}

TEST(DeviceTest, CountNamesAndAttributes) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);  // FAKECUDA_DEVICES unset.
  EXPECT_EQ(cuDeviceGetCount(nullptr), CUDA_ERROR_INVALID_VALUE);

  CUdevice dev = -1;
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(nullptr, 0), CUDA_ERROR_INVALID_VALUE);

  char name[64];
  ASSERT_EQ(cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
  EXPECT_GT(std::strlen(name), 0u);
  char tiny[4];
  ASSERT_EQ(cuDeviceGetName(tiny, sizeof(tiny), 0), CUDA_SUCCESS);
  EXPECT_EQ(std::strlen(tiny), 3u);
  EXPECT_EQ(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetName(name, sizeof(name), 7), CUDA_ERROR_INVALID_DEVICE);

  int value = -1;
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1), CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
                                 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 9);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_INTEGRATED, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 0);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 9),
            CUDA_ERROR_INVALID_DEVICE);

  size_t total = 0;
  EXPECT_EQ(cuDeviceTotalMem(&total, 0), CUDA_SUCCESS);
  EXPECT_GT(total, size_t{100} << 30);
}

TEST(ContextTest, NoCurrentContextIsInvalidContext) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  // A new thread has no current context.
  std::thread([] {
    CUcontext ctx = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
    EXPECT_EQ(ctx, nullptr);
    CUdeviceptr dptr;
    void* host;
    CUstream stream;
    char byte = 0;
    EXPECT_EQ(cuMemAlloc(&dptr, 16), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuMemHostAlloc(&host, 16, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuMemHostRegister(&byte, 1, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuStreamCreate(&stream, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CUdevice dev;
    EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  }).join();
}

TEST(ContextTest, PrimaryContextIsStableAndPerDevice) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext a, b, other;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&b, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&other, 1), CUDA_SUCCESS);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  ASSERT_EQ(cuCtxSetCurrent(other), CUDA_SUCCESS);
  CUdevice dev = -1;
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cuCtxGetDevice_v2(&dev, a), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  // Not retained: cannot be primary-destroyed.
  EXPECT_EQ(cuCtxDestroy(a), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

TEST(ContextTest, CreatePushPopDestroy) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext created = nullptr;
  ASSERT_EQ(cuCtxCreate(&created, nullptr, 0, 1), CUDA_SUCCESS);
  CUcontext current = nullptr;
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, created);  // Created contexts are pushed.
  EXPECT_EQ(cuCtxCreate(&current, nullptr, 0x100, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxCreate(&current, nullptr, 0, 2), CUDA_ERROR_INVALID_DEVICE);

  CUcontext primary;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent(primary), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  CUcontext popped = nullptr;
  EXPECT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, primary);
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, created);

  // Work in the created context (on device 1), then destroy it.
  const size_t live = fakecuda_live_device_allocations();
  CUdeviceptr dptr;
  ASSERT_EQ(cuMemAlloc(&dptr, 64), CUDA_SUCCESS);
  int ordinal = -1;
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 1);
  EXPECT_EQ(cuCtxDestroy(created), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_device_allocations(), live);  // Freed with the context.
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);  // Popped off the destroying thread's stack.
  EXPECT_EQ(cuCtxDestroy(created), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSetCurrent(created), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxPushCurrent(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

TEST(ErrorTest, NamesAndStrings) {
  const char* text = nullptr;
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_INVALID_VALUE");
  EXPECT_EQ(cuGetErrorName(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED");
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "invalid argument");
  EXPECT_EQ(cuGetErrorString(CUDA_ERROR_TOO_MANY_PEERS, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "too many peers");
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(12345), &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
  EXPECT_EQ(cuGetErrorString(CUDA_SUCCESS, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(KnobTest, CallCountsAndInjectedFailures) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  const uint64_t before = fakecuda_call_count("cuDeviceGetCount");
  int count;
  cuDeviceGetCount(&count);
  cuDeviceGetCount(&count);
  EXPECT_EQ(fakecuda_call_count("cuDeviceGetCount"), before + 2);
  EXPECT_EQ(fakecuda_call_count("cuNoSuchFunction"), 0u);

  fakecuda_fail_next("cuDeviceGetCount", CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_ERROR_UNKNOWN);
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);  // Only the next call.
  fakecuda_fail_next("cuDeviceGetCount", CUDA_ERROR_UNKNOWN);
  fakecuda_fail_next("cuDeviceGetCount", CUDA_SUCCESS);  // Disarmed.
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_call_count("cuDeviceGetCount"), before + 5);
}

}  // namespace
}  // namespace fakecuda_test
