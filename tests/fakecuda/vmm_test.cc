// The virtual memory management API with host locations: the answers the
// real driver gave on the GPU host (driver_behavior.h), the CPU's access
// from cuMemMap to cuMemSetAccess, and copies through VMM host memory.
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

CUmemAllocationProp HostProp(CUmemLocationType type = CU_MEM_LOCATION_TYPE_HOST_NUMA) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = 0;
  return prop;
}

CUmemAccessDesc Access(CUmemLocationType type, CUmemAccess_flags flags) {
  CUmemAccessDesc a{};
  a.location.type = type;
  a.location.id = 0;
  a.flags = flags;
  return a;
}

// Device and CPU read-write, as NCCL opens its cuMem host buffers.
void OpenForBoth(CUdeviceptr va, size_t n) {
  const CUmemAccessDesc both[] = {
      Access(CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
      Access(CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)};
  ASSERT_EQ(cuMemSetAccess(va, n, both, 2), CUDA_SUCCESS);
}

// Whether a CPU write to `p` faults, tried in a child process.
void ExpectCpuWriteFaults(CUdeviceptr p) {
  EXPECT_EXIT(
      {
        signal(SIGSEGV, SIG_DFL);
        *reinterpret_cast<volatile char*>(p) = 1;
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

class VmmTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    CUmemAllocationProp prop = HostProp();
    ASSERT_EQ(cuMemGetAllocationGranularity(&g_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
  }
  size_t g_ = 0;
};

TEST_F(VmmTest, GranularityIsTheMeasuredOneForEveryHostLocation) {
  for (CUmemLocationType type : {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
                                 CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT}) {
    CUmemAllocationProp prop = HostProp(type);
    size_t lo = 0, rec = 0;
    EXPECT_EQ(cuMemGetAllocationGranularity(&lo, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    EXPECT_EQ(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
              CUDA_SUCCESS);
    EXPECT_EQ(lo, size_t{2} << 20);
    EXPECT_EQ(rec, size_t{2} << 20);
  }
}

// The probe's misuse sequence (bench/gpu/vmm_host_probe.cu), answer by answer.
TEST_F(VmmTest, MisuseGetsTheMeasuredAnswers) {
  CUmemAllocationProp prop = HostProp();
  CUmemGenericAllocationHandle h, h2;
  EXPECT_EQ(cuMemCreate(&h, g_ + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemCreate(&h, 2 * g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va;
  ASSERT_EQ(cuMemAddressReserve(&va, 4 * g_, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, g_ + 4096, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemMap(va, g_, 4096, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemMap(va + 4096, g_, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemMap(va, 2 * g_, g_, h, 0), CUDA_ERROR_NOT_SUPPORTED);  // past the allocation
  // Runs a granule past the reservation's end: accepted, as measured.
  EXPECT_EQ(cuMemMap(va + 3 * g_, 2 * g_, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va, 2 * g_), CUDA_SUCCESS);  // nothing mapped there
  ASSERT_EQ(cuMemMap(va, 2 * g_, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, 2 * g_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // onto a mapping
  ExpectCpuWriteFaults(va);
  OpenForBoth(va, 2 * g_);
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  EXPECT_EQ(cuMemAddressFree(va, 4 * g_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);  // still mapped
  ASSERT_EQ(cuMemCreate(&h2, g_, &prop, 0), CUDA_SUCCESS);
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostRegister(reinterpret_cast<void*>(va), g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(va, 2 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // twice
  EXPECT_EQ(cuMemRelease(h2), CUDA_SUCCESS);
  // The map past the end still holds the reservation, as on the GPU host.
  EXPECT_EQ(cuMemAddressFree(va, 4 * g_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemUnmap(va + 3 * g_, 2 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, 4 * g_), CUDA_SUCCESS);
}

// The CPU faults until a cuMemSetAccess names a host location; one that
// names only the device leaves it faulting. The device's copies work either
// way, through the driver's own mapping.
TEST_F(VmmTest, CpuAccessComesOnlyFromAHostLocation) {
  CUmemAllocationProp prop = HostProp();
  CUmemGenericAllocationHandle h;
  ASSERT_EQ(cuMemCreate(&h, g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va, dev;
  ASSERT_EQ(cuMemAddressReserve(&va, g_, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_SUCCESS);
  ExpectCpuWriteFaults(va);
  const CUmemAccessDesc device =
      Access(CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(cuMemSetAccess(va, g_, &device, 1), CUDA_SUCCESS);
  ExpectCpuWriteFaults(va);
  ASSERT_EQ(cuMemAlloc(&dev, g_), CUDA_SUCCESS);
  const std::vector<unsigned char> pattern = Pattern(g_, 3);
  ASSERT_EQ(cuMemcpyHtoD(dev, pattern.data(), g_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(va, dev, g_), CUDA_SUCCESS);  // into memory the CPU cannot touch
  const CUmemAccessDesc read =
      Access(CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_EQ(cuMemSetAccess(va, g_, &read, 1), CUDA_SUCCESS);
  EXPECT_EQ(std::memcmp(reinterpret_cast<void*>(va), pattern.data(), g_), 0);
  ExpectCpuWriteFaults(va);  // read-only
  OpenForBoth(va, g_);
  std::memset(reinterpret_cast<void*>(va), 9, g_);
  ASSERT_EQ(cuMemcpyHtoD(dev, reinterpret_cast<void*>(va), g_), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev, g_), std::vector<unsigned char>(g_, 9));
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
}

// A handle released while mapped lives until its last unmap; the bytes stay.
TEST_F(VmmTest, ReleaseWhileMappedKeepsTheMemoryUntilUnmapped) {
  CUmemAllocationProp prop = HostProp();
  CUmemGenericAllocationHandle h;
  ASSERT_EQ(cuMemCreate(&h, g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va;
  ASSERT_EQ(cuMemAddressReserve(&va, g_, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_SUCCESS);
  OpenForBoth(va, g_);
  std::memset(reinterpret_cast<void*>(va), 5, g_);
  ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<volatile char*>(va)[g_ - 1], 5);
  EXPECT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // released: no new maps
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  ExpectCpuWriteFaults(va);  // back to reserved address space
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
}

// An unmap over whole mappings and the gap between them takes the mappings;
// a map that starts outside every reservation is refused.
TEST_F(VmmTest, UnmapTakesWholeMappingsAcrossGaps) {
  CUmemAllocationProp prop = HostProp();
  CUmemGenericAllocationHandle h;
  ASSERT_EQ(cuMemCreate(&h, g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va;
  ASSERT_EQ(cuMemAddressReserve(&va, 3 * g_, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va + 2 * g_, g_, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va, 3 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, 3 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
}

}  // namespace
}  // namespace fakecuda_test
