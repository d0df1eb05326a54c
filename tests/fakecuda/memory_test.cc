// Device, managed and page-locked memory: allocation, error codes, flags,
// registration and pointer attributes.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

using MemoryTest = DriverTest;

TEST_F(MemoryTest, DeviceAllocationAndFree) {
  const size_t live = fakecuda_live_device_allocations();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc(&a, 1000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc(&b, 1), CUDA_SUCCESS);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(a % 256, 0u);
  EXPECT_EQ(fakecuda_live_device_allocations(), live + 2);

  CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(cuMemGetAddressRange(&base, &size, a + 999), CUDA_SUCCESS);
  EXPECT_EQ(base, a);
  EXPECT_EQ(size, 1000u);
  EXPECT_EQ(cuMemGetAddressRange(nullptr, &size, a), CUDA_SUCCESS);
  int on_stack = 0;
  EXPECT_EQ(cuMemGetAddressRange(&base, &size, reinterpret_cast<CUdeviceptr>(&on_stack)),
            CUDA_ERROR_NOT_FOUND);

  EXPECT_EQ(cuMemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAlloc(nullptr, 8), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr huge;
  EXPECT_EQ(cuMemAlloc(&huge, size_t{1} << 50), CUDA_ERROR_OUT_OF_MEMORY);

  EXPECT_EQ(cuMemFree(a + 8), CUDA_ERROR_INVALID_VALUE);  // Not the start.
  EXPECT_EQ(cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);  // Twice.
  EXPECT_EQ(cuMemFree(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(reinterpret_cast<CUdeviceptr>(&on_stack)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(b), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_device_allocations(), live);

  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_LE(free_bytes, total);
}

TEST_F(MemoryTest, DeviceMemoryIsNotHostMemory) {
  CUdeviceptr dptr;
  ASSERT_EQ(cuMemAlloc(&dptr, 4096), CUDA_SUCCESS);
  // The host cannot read it, as with a real GPU.
  EXPECT_EXIT(
      {
        // The default action: a sanitizer's handler would turn the fault
        // into a report and an exit status.
        signal(SIGSEGV, SIG_DFL);
        volatile char c = *reinterpret_cast<volatile char*>(dptr);
        (void)c;
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
  // Nor can the API take it for host memory.
  char buffer[16] = {};
  EXPECT_EQ(cuMemcpyHtoD(dptr, reinterpret_cast<void*>(dptr + 64), 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(reinterpret_cast<void*>(dptr), dptr + 64, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostRegister(reinterpret_cast<void*>(dptr), 16, 0), CUDA_ERROR_INVALID_VALUE);
  // And host memory is not device memory.
  EXPECT_EQ(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(buffer), buffer + 8, 8),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(dptr), CUDA_SUCCESS);
}

TEST_F(MemoryTest, PitchAndManagedAllocations) {
  CUdeviceptr dptr;
  size_t pitch = 0;
  ASSERT_EQ(cuMemAllocPitch(&dptr, &pitch, 100, 10, 4), CUDA_SUCCESS);
  EXPECT_GE(pitch, 100u);
  EXPECT_EQ(pitch % 32, 0u);
  size_t size = 0;
  EXPECT_EQ(cuMemGetAddressRange(nullptr, &size, dptr), CUDA_SUCCESS);
  EXPECT_EQ(size, pitch * 10);
  EXPECT_EQ(cuMemFree(dptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAllocPitch(&dptr, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAllocPitch(&dptr, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr managed;
  ASSERT_EQ(cuMemAllocManaged(&managed, 256, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  auto* host_view = reinterpret_cast<unsigned char*>(managed);
  host_view[0] = 42;  // The host may touch managed memory.
  EXPECT_EQ(ReadDevice(managed, 1)[0], 42);
  unsigned is_managed = 0;
  EXPECT_EQ(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, managed),
            CUDA_SUCCESS);
  EXPECT_EQ(is_managed, 1u);
  EXPECT_EQ(cuMemAllocManaged(&managed, 256, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(reinterpret_cast<CUdeviceptr>(host_view)), CUDA_SUCCESS);
}

TEST_F(MemoryTest, HostAllocFlagsRoundTrip) {
  const size_t live = fakecuda_live_host_allocations();
  for (unsigned flags = 0; flags <= 7; ++flags) {
    void* p = nullptr;
    ASSERT_EQ(cuMemHostAlloc(&p, 10000, flags), CUDA_SUCCESS);
    // Straight from mmap: page aligned, usable at once.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % sysconf(_SC_PAGESIZE), 0u);
    static_cast<char*>(p)[9999] = 1;
    unsigned got = 0;
    ASSERT_EQ(cuMemHostGetFlags(&got, p), CUDA_SUCCESS);
    EXPECT_EQ(got, flags | CU_MEMHOSTALLOC_DEVICEMAP) << "flags " << flags;
    ASSERT_EQ(cuMemHostGetFlags(&got, static_cast<char*>(p) + 5000), CUDA_SUCCESS);
    EXPECT_EQ(got, flags | CU_MEMHOSTALLOC_DEVICEMAP);
    CUdeviceptr dptr = 0;
    ASSERT_EQ(cuMemHostGetDevicePointer(&dptr, static_cast<char*>(p) + 16, 0), CUDA_SUCCESS);
    EXPECT_EQ(dptr, reinterpret_cast<CUdeviceptr>(p) + 16);
    EXPECT_EQ(cuMemHostGetDevicePointer(&dptr, p, 1), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(fakecuda_live_host_allocations(), live + 1);
    EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
  }
  EXPECT_EQ(fakecuda_live_host_allocations(), live);

  void* p = nullptr;
  ASSERT_EQ(cuMemAllocHost(&p, 64), CUDA_SUCCESS);
  unsigned got = 0;
  EXPECT_EQ(cuMemHostGetFlags(&got, p), CUDA_SUCCESS);
  EXPECT_EQ(got, unsigned{CU_MEMHOSTALLOC_DEVICEMAP});
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);

  EXPECT_EQ(cuMemHostAlloc(&p, 64, 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostAlloc(nullptr, 64, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemHostAlloc(&p, 0, 0), CUDA_SUCCESS);  // Size 0 succeeds.
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
}

TEST_F(MemoryTest, FreeHostErrors) {
  void* p = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&p, 4096, 0), CUDA_SUCCESS);
  std::vector<char> heap(64);
  EXPECT_EQ(cuMemFreeHost(heap.data()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(static_cast<char*>(p) + 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemHostRegister(heap.data(), heap.size(), 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(heap.data()), CUDA_ERROR_INVALID_VALUE);  // Registered, not allocated.
  EXPECT_EQ(cuMemHostUnregister(heap.data()), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, UnpinnedMemoryHasNoFlagsOrDevicePointer) {
  std::vector<char> heap(64);
  unsigned flags;
  CUdeviceptr dptr;
  EXPECT_EQ(cuMemHostGetFlags(&flags, heap.data()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostGetDevicePointer(&dptr, heap.data(), 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostGetFlags(nullptr, heap.data()), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, RegisterAndUnregister) {
  const size_t live = fakecuda_live_registrations();
  const size_t pinned = fakecuda_pinned_bytes();
  std::vector<char> heap(10000);
  char* p = heap.data() + 3;  // Not page aligned: accepted.
  ASSERT_EQ(cuMemHostRegister(p, 5000, CU_MEMHOSTREGISTER_PORTABLE), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_registrations(), live + 1);
  EXPECT_EQ(fakecuda_pinned_bytes(), pinned + 5000);

  CUdeviceptr dptr = 0;
  EXPECT_EQ(cuMemHostGetDevicePointer(&dptr, p + 100, 0), CUDA_SUCCESS);
  EXPECT_EQ(dptr, reinterpret_cast<CUdeviceptr>(p + 100));
  unsigned flags;
  EXPECT_EQ(cuMemHostGetFlags(&flags, p), CUDA_ERROR_INVALID_VALUE);  // Only allocations.

  // Any overlap is refused: same range, inside, around, straddling either end.
  EXPECT_EQ(cuMemHostRegister(p, 5000, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemHostRegister(p + 100, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemHostRegister(p - 1, 6000, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemHostRegister(p - 2, 3, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemHostRegister(p + 4999, 2, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  // Adjacent bytes, even on the same page, are a separate registration.
  ASSERT_EQ(cuMemHostRegister(p + 5000, 10, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostRegister(p - 3, 3, 0), CUDA_SUCCESS);

  EXPECT_EQ(cuMemHostUnregister(p + 1), CUDA_ERROR_INVALID_VALUE);  // Inside one.
  EXPECT_EQ(cuMemHostUnregister(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(p), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuMemHostUnregister(p + 5000), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(p - 3), CUDA_SUCCESS);
  EXPECT_EQ(fakecuda_live_registrations(), live);
  EXPECT_EQ(fakecuda_pinned_bytes(), pinned);
}

TEST_F(MemoryTest, RegisterErrors) {
  std::vector<char> heap(64);
  EXPECT_EQ(cuMemHostRegister(nullptr, 64, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostRegister(heap.data(), 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostRegister(heap.data(), 64, 0x10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostRegister(heap.data(), 64, CU_MEMHOSTREGISTER_IOMEMORY),
            CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(cuMemHostRegister(heap.data(), 64, CU_MEMHOSTREGISTER_READ_ONLY), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(heap.data()), CUDA_SUCCESS);

  // Pages that do not exist.
  const size_t page = sysconf(_SC_PAGESIZE);
  void* gone = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<char*>(gone) + page, page), 0);
  EXPECT_EQ(cuMemHostRegister(gone, 2 * page, 0), CUDA_ERROR_INVALID_VALUE);
  munmap(gone, page);

  // Page-locked allocations are already registered and cannot be unregistered.
  void* p;
  ASSERT_EQ(cuMemHostAlloc(&p, 4096, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(static_cast<char*>(p) + 8, 8, 0),
            CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(cuMemHostUnregister(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);

  EXPECT_EQ(cuMemHostUnregister(heap.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuMemHostUnregister(nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MemoryTest, PointerAttributes) {
  CUdeviceptr dptr;
  ASSERT_EQ(cuMemAlloc(&dptr, 512), CUDA_SUCCESS);
  void* pinned;
  ASSERT_EQ(cuMemHostAlloc(&pinned, 512, 0), CUDA_SUCCESS);
  std::vector<char> heap(512);

  unsigned type = 0;
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr + 10),
            CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_DEVICE});
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(pinned)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(heap.data())),
            CUDA_ERROR_INVALID_VALUE);

  CUcontext ctx = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, dptr), CUDA_SUCCESS);
  EXPECT_EQ(ctx, ctx_);
  int ordinal = -1;
  EXPECT_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr),
            CUDA_SUCCESS);
  EXPECT_EQ(ordinal, 0);
  CUdeviceptr device_pointer = 0;
  EXPECT_EQ(cuPointerGetAttribute(&device_pointer, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, dptr + 4),
            CUDA_SUCCESS);
  EXPECT_EQ(device_pointer, dptr + 4);
  void* host_pointer = nullptr;
  EXPECT_EQ(cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, dptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                  reinterpret_cast<CUdeviceptr>(pinned)),
            CUDA_SUCCESS);
  EXPECT_EQ(host_pointer, pinned);
  unsigned is_managed = 7;
  EXPECT_EQ(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dptr),
            CUDA_SUCCESS);
  EXPECT_EQ(is_managed, 0u);
  unsigned long long id_a = 0, id_b = 0;
  EXPECT_EQ(cuPointerGetAttribute(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, dptr), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                  reinterpret_cast<CUdeviceptr>(pinned)),
            CUDA_SUCCESS);
  EXPECT_NE(id_a, id_b);
  EXPECT_EQ(cuPointerGetAttribute(nullptr, CU_POINTER_ATTRIBUTE_CONTEXT, dptr),
            CUDA_ERROR_INVALID_VALUE);

  // The plural form reports unknown memory instead of failing.
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned values[2] = {9, 9};
  void* data[2] = {&values[0], &values[1]};
  EXPECT_EQ(cuPointerGetAttributes(2, attrs, data, reinterpret_cast<CUdeviceptr>(heap.data())),
            CUDA_SUCCESS);
  EXPECT_EQ(values[0], 0u);
  EXPECT_EQ(values[1], 0u);
  EXPECT_EQ(cuPointerGetAttributes(2, attrs, data, dptr), CUDA_SUCCESS);
  EXPECT_EQ(values[0], unsigned{CU_MEMORYTYPE_DEVICE});

  // Registered memory is host memory of this context.
  ASSERT_EQ(cuMemHostRegister(heap.data(), heap.size(), 0), CUDA_SUCCESS);
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(heap.data() + 100)),
            CUDA_SUCCESS);
  EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
  EXPECT_EQ(cuMemHostUnregister(heap.data()), CUDA_SUCCESS);

  EXPECT_EQ(cuMemFree(dptr), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
}

}  // namespace
}  // namespace fakecuda_test
