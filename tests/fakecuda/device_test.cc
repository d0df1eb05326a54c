// Devices, contexts, error strings and the test knobs, through direct linking.
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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
  EXPECT_EQ(
      cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0),
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

TEST(DeviceTest, UuidOfItsOwnPerDevice) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUuuid first, again, second;
  ASSERT_EQ(cuDeviceGetUuid(&first, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid(&again, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetUuid(&second, 1), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(first.bytes, again.bytes, sizeof(first.bytes)), 0);
  EXPECT_NE(std::memcmp(first.bytes, second.bytes, sizeof(first.bytes)), 0);
  // The 9.2 ABI (cuda.h maps the name to the 11.4 one) answers the same.
  auto v1 =
      reinterpret_cast<CUresult (*)(CUuuid*, CUdevice)>(dlsym(RTLD_DEFAULT, "cuDeviceGetUuid"));
  ASSERT_NE(v1, nullptr);
  ASSERT_EQ(v1(&again, 1), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(second.bytes, again.bytes, sizeof(second.bytes)), 0);
  EXPECT_EQ(cuDeviceGetUuid(&first, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetUuid(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST(DeviceTest, ModuleLoadingModeFollowsTheEnvironment) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
  ASSERT_EQ(unsetenv("CUDA_MODULE_LOADING"), 0);
  ASSERT_EQ(cuModuleGetLoadingMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_MODULE_LAZY_LOADING);
  ASSERT_EQ(setenv("CUDA_MODULE_LOADING", "EAGER", 1), 0);
  ASSERT_EQ(cuModuleGetLoadingMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_MODULE_EAGER_LOADING);
  ASSERT_EQ(unsetenv("CUDA_MODULE_LOADING"), 0);
  EXPECT_EQ(cuModuleGetLoadingMode(nullptr), CUDA_ERROR_INVALID_VALUE);
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

// Whether the host can no longer read `p` (the kernel refuses to copy from it).
bool Unreadable(const void* p) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const ssize_t n = write(fds[1], p, 1);
  const int err = errno;
  close(fds[0]);
  close(fds[1]);
  return n < 0 && err == EFAULT;
}

bool PrimaryActive(CUdevice dev) {
  unsigned flags = 99;
  int active = -1;
  EXPECT_EQ(cuDevicePrimaryCtxGetState(dev, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);  // Never set.
  return active == 1;
}

// The tests of this file leave no primary context retained.
TEST(ContextTest, PrimaryStateFollowsRetainAndTheLastRelease) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  unsigned flags;
  int active;
  EXPECT_EQ(cuDevicePrimaryCtxGetState(0, nullptr, &active), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDevicePrimaryCtxGetState(0, &flags, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDevicePrimaryCtxGetState(2, &flags, &active), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_FALSE(PrimaryActive(0));

  CUcontext a, b;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&a, 0), CUDA_SUCCESS);
  EXPECT_TRUE(PrimaryActive(0));
  EXPECT_FALSE(PrimaryActive(1));  // Per device.
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&b, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(a), CUDA_SUCCESS);
  const size_t hosts = fakecuda_live_host_allocations();
  const size_t devices = fakecuda_live_device_allocations();
  void* host = nullptr;
  CUdeviceptr dptr;
  ASSERT_EQ(cuMemHostAlloc(&host, 8192, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&dptr, 4096), CUDA_SUCCESS);

  // Not the last reference: nothing happens.
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_TRUE(PrimaryActive(0));
  EXPECT_EQ(fakecuda_live_host_allocations(), hosts + 1);
  EXPECT_EQ(cuMemsetD8(dptr, 1, 16), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);  // This thread's stream.

  // The last one resets the context, which stays current but unusable.
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_FALSE(PrimaryActive(0));
  EXPECT_EQ(fakecuda_live_host_allocations(), hosts);  // Pinned memory went with it.
  EXPECT_EQ(fakecuda_live_device_allocations(), devices);
  EXPECT_TRUE(Unreadable(host));
  CUcontext current = nullptr;
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, a);  // Not popped.
  EXPECT_EQ(cuMemAlloc(&dptr, 16), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);

  // Retained again: active, with the same handle, and usable again.
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&b, 0), CUDA_SUCCESS);
  EXPECT_EQ(b, a);
  EXPECT_TRUE(PrimaryActive(0));
  ASSERT_EQ(cuMemHostAlloc(&host, 8192, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&dptr, 8192), CUDA_SUCCESS);
  std::vector<unsigned char> bytes = Pattern(8192, 5);
  std::memcpy(host, bytes.data(), bytes.size());
  EXPECT_EQ(cuMemcpyHtoDAsync(dptr, host, 8192, nullptr), CUDA_SUCCESS);
  // This thread's default stream went with the context; it has a new one.
  EXPECT_EQ(cuMemcpyHtoDAsync(dptr, host, 8192, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dptr, 8192), bytes);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(dptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_FALSE(PrimaryActive(0));
}

// As the real driver does (driver_behavior.h,
// kDestroyedContextDropsRegistrations): a registration, portable or not,
// goes with the context that made it; its memory stays the program's.
TEST(ContextTest, PrimaryResetDropsTheContextsRegistrations) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  const size_t live = fakecuda_live_registrations();
  std::vector<char> portable(3 * 4096, 5), plain(4096, 6);
  ASSERT_EQ(cuMemHostRegister(portable.data(), portable.size(), CU_MEMHOSTREGISTER_PORTABLE),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostRegister(plain.data(), plain.size(), 0), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_registrations(), live + 2);
  EXPECT_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_registrations(), live);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  unsigned int flags = 0;
  EXPECT_EQ(cuMemHostGetFlags(&flags, portable.data()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(portable[4096], 5);  // still the program's memory
  EXPECT_EQ(cuMemHostRegister(portable.data(), portable.size(), CU_MEMHOSTREGISTER_PORTABLE),
            CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(portable.data()), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(plain.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

TEST(ContextTest, PrimaryResetDestroysResourcesButKeepsReferences) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxReset(2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_FALSE(PrimaryActive(0));
  EXPECT_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);  // Inactive: nothing to do.
  EXPECT_FALSE(PrimaryActive(0));

  CUcontext ctx, again;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  const size_t hosts = fakecuda_live_host_allocations();
  const size_t devices = fakecuda_live_device_allocations();
  void* host = nullptr;
  void* legacy_host = nullptr;
  CUdeviceptr dptr;
  CUstream stream;
  ASSERT_EQ(cuMemHostAlloc(&host, 3 << 20, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocHost(&legacy_host, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&dptr, 3 << 20), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  // Queued work finishes before the context goes.
  fakecuda_set_copy_delay_us(20000);
  std::memset(host, 7, 3 << 20);
  ASSERT_EQ(cuMemcpyHtoDAsync(dptr, host, 3 << 20, stream), CUDA_SUCCESS);

  EXPECT_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(0);
  EXPECT_EQ(fakecuda_pending_ops(), 0u);
  EXPECT_FALSE(PrimaryActive(0));
  EXPECT_EQ(fakecuda_live_host_allocations(), hosts);
  EXPECT_EQ(fakecuda_live_device_allocations(), devices);
  EXPECT_TRUE(Unreadable(host));
  EXPECT_TRUE(Unreadable(legacy_host));
  CUcontext current = nullptr;
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);  // Not popped.
  EXPECT_EQ(cuStreamSynchronize(stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_ERROR_INVALID_CONTEXT);

  // The reference taken before the reset still counts: the matching release
  // succeeds and brings nothing back.
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_FALSE(PrimaryActive(0));
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);

  // Retained again: the same handle, a working context, and the freed
  // pointer is no allocation of it.
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, ctx);
  EXPECT_TRUE(PrimaryActive(0));
  EXPECT_EQ(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
  void* fresh = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&fresh, 4096, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(fresh), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_FALSE(PrimaryActive(0));
}

TEST(ContextTest, DestroyFreesPinnedMemoryAndTheHandleIsReused) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  const size_t hosts = fakecuda_live_host_allocations();
  CUcontext first = nullptr;
  ASSERT_EQ(cuCtxCreate(&first, nullptr, 0, 0), CUDA_SUCCESS);
  void* host = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
  std::memset(host, 1, 4096);
  EXPECT_EQ(fakecuda_live_host_allocations(), hosts + 1);
  ASSERT_EQ(cuCtxDestroy(first), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_host_allocations(), hosts);
  EXPECT_TRUE(Unreadable(host));

  // The next context created gets the destroyed one's handle.
  CUcontext second = nullptr;
  ASSERT_EQ(cuCtxCreate(&second, nullptr, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(second, first);
  CUdevice dev = -1;
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
  void* fresh = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&fresh, 4096, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(fresh), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(second), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy(first), CUDA_ERROR_INVALID_CONTEXT);
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
