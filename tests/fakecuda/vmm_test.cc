// The virtual memory management API with host locations: the answers the
// real driver gave on the GPU host (driver_behavior.h), the CPU's access
// from cuMemMap to cuMemSetAccess, and copies through VMM host memory.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>
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
  // A granule of host memory, mapped at *va and opened for the device and
  // the CPU (read-write).
  void MapOneGranule(CUmemGenericAllocationHandle* h, CUdeviceptr* va) {
    CUmemAllocationProp prop = HostProp();
    ASSERT_EQ(cuMemCreate(h, g_, &prop, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAddressReserve(va, g_, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(*va, g_, 0, *h, 0), CUDA_SUCCESS);
    OpenForBoth(*va, g_);
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

// A page the program drops from its mapping of VMM host memory faults with
// SIGBUS at the CPU's next access, as on the GPU host (driver_behavior.h,
// kDroppedDriverPagesFault); the pages it kept stay readable. (A fork's
// child keeps no userfaultfd registration, so the death test's child makes
// the mapping itself: the threadsafe style runs the test again in it.)
TEST_F(VmmTest, DroppedPagesFaultWithSigbus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CUmemGenericAllocationHandle h;
  CUdeviceptr va;
  MapOneGranule(&h, &va);
  if (HasFatalFailure()) return;
  const int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
  if (uffd < 0) GTEST_SKIP() << "this kernel offers no userfaultfd for it";
  close(uffd);
  ASSERT_EQ(fakecuda_drops_fault(), 1);
  auto* p = reinterpret_cast<volatile unsigned char*>(va);
  std::memset(const_cast<unsigned char*>(p), 5, g_);
  const long page = sysconf(_SC_PAGESIZE);
  ASSERT_EQ(madvise(reinterpret_cast<void*>(va), page, MADV_DONTNEED), 0);
  EXPECT_EQ(p[page], 5);  // a page not dropped
  EXPECT_EXIT(
      {
        signal(SIGBUS, SIG_DFL);
        (void)p[0];
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
}

// A handle released while mapped lives until its last unmap; the bytes stay.
TEST_F(VmmTest, ReleaseWhileMappedKeepsTheMemoryUntilUnmapped) {
  CUmemGenericAllocationHandle h;
  CUdeviceptr va;
  MapOneGranule(&h, &va);
  if (HasFatalFailure()) return;
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

// cuMemHostGetFlags answers for mapped VMM host memory, anywhere in it, as
// the real driver did.
TEST_F(VmmTest, HostGetFlagsAnswersForMappedVmmHostMemory) {
  CUmemAllocationProp prop = HostProp();
  CUmemGenericAllocationHandle h;
  ASSERT_EQ(cuMemCreate(&h, g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va;
  ASSERT_EQ(cuMemAddressReserve(&va, g_, 0, 0, 0), CUDA_SUCCESS);
  unsigned flags = 0;
  EXPECT_EQ(cuMemHostGetFlags(&flags, reinterpret_cast<void*>(va)), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemMap(va, g_, 0, h, 0), CUDA_SUCCESS);
  for (CUdeviceptr p : {va, va + g_ - 1}) {
    flags = 0;
    EXPECT_EQ(cuMemHostGetFlags(&flags, reinterpret_cast<void*>(p)), CUDA_SUCCESS);
    EXPECT_EQ(flags, unsigned{CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP});
  }
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostGetFlags(&flags, reinterpret_cast<void*>(va)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, g_), CUDA_SUCCESS);
}

// A retained handle is the one mapped there, from any address of the
// mapping, and one more reference: the memory outlives the first release.
TEST_F(VmmTest, RetainedHandleNeedsItsOwnRelease) {
  CUmemAllocationProp prop = HostProp();
  CUmemGenericAllocationHandle h, again = 0;
  ASSERT_EQ(cuMemCreate(&h, 2 * g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va;
  ASSERT_EQ(cuMemAddressReserve(&va, 3 * g_, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va)),
            CUDA_ERROR_INVALID_VALUE);  // nothing mapped yet
  ASSERT_EQ(cuMemMap(va, 2 * g_, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + g_ + 7)),
            CUDA_SUCCESS);
  EXPECT_EQ(again, h);
  EXPECT_EQ(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + 2 * g_)),
            CUDA_ERROR_INVALID_VALUE);  // past the mapping
  CUmemAllocationProp got{};
  EXPECT_EQ(cuMemGetAllocationPropertiesFromHandle(&got, again), CUDA_SUCCESS);
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(again), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);  // no reference left
  EXPECT_EQ(cuMemUnmap(va, 2 * g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, 3 * g_), CUDA_SUCCESS);
}

// Two handles side by side in one reservation: one copy crosses from the
// first into the second, both ways; past the second it is refused.
TEST_F(VmmTest, OneCopyCrossesMappingsSideBySide) {
  CUmemAllocationProp prop = HostProp();
  CUmemGenericAllocationHandle a, b;
  ASSERT_EQ(cuMemCreate(&a, g_, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemCreate(&b, g_, &prop, 0), CUDA_SUCCESS);
  CUdeviceptr va;
  ASSERT_EQ(cuMemAddressReserve(&va, 3 * g_, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g_, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va + g_, g_, 0, b, 0), CUDA_SUCCESS);
  OpenForBoth(va, 2 * g_);
  char* host = reinterpret_cast<char*>(va);
  const size_t n = g_, at = g_ / 2;  // the second half of a, the first of b
  for (size_t i = 0; i < n; ++i) host[at + i] = static_cast<char>(i * 7 + 1);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(dev, host + at, n), CUDA_SUCCESS);
  std::memset(host, 0, 2 * g_);
  ASSERT_EQ(cuMemcpyDtoH(host + at, dev, n), CUDA_SUCCESS);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(host[at + i], static_cast<char>(i * 7 + 1)) << i;
  EXPECT_EQ(cuMemcpyHtoD(dev, host + g_ + at, n), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemUnmap(va + g_, g_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, 3 * g_), CUDA_SUCCESS);
}

class HostPoolTest : public VmmTest {
 protected:
  void SetUp() override {
    VmmTest::SetUp();
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    ASSERT_EQ(cuMemPoolCreate(&pool_, &props), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
    EXPECT_EQ(cuMemPoolDestroy(pool_), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamDestroy(s_), CUDA_SUCCESS);
    VmmTest::TearDown();
  }
  cuuint64_t Reserved() {
    cuuint64_t v = 0;
    EXPECT_EQ(cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v), CUDA_SUCCESS);
    return v;
  }
  cuuint64_t Used() {
    cuuint64_t v = 0;
    EXPECT_EQ(cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v), CUDA_SUCCESS);
    return v;
  }
  CUmemoryPool pool_ = nullptr;
  CUstream s_ = nullptr;
};

constexpr cuuint64_t kMiB = 1 << 20;

// The probe's pool sequence (bench/gpu/vmm_host_probe.cu), line by line: a
// whole growth reserved at the first allocation, later ones served from it,
// used memory dropping at the free call, a trim keeping a reservation in use.
TEST_F(HostPoolTest, GrowsAndTrimsAsTheRealDriverDid) {
  EXPECT_EQ(Reserved(), 0u);
  CUdeviceptr a, b;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, kMiB, pool_, s_), CUDA_SUCCESS);
  EXPECT_EQ(Reserved(), 32 * kMiB);
  EXPECT_EQ(Used(), kMiB);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&b, 5 * kMiB, pool_, s_), CUDA_SUCCESS);
  EXPECT_EQ(Reserved(), 32 * kMiB);
  EXPECT_EQ(Used(), 6 * kMiB);
  EXPECT_EQ(cuMemFreeAsync(b, s_), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kMiB);
  EXPECT_EQ(cuMemFreeAsync(b, s_), CUDA_ERROR_INVALID_VALUE);  // once only
  ASSERT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kMiB);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);
  EXPECT_EQ(Reserved(), 32 * kMiB);
  ASSERT_EQ(cuMemFreeAsync(a, s_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);
  EXPECT_EQ(Reserved(), 0u);
  EXPECT_EQ(Used(), 0u);
}

// Freed memory serves another allocation only once the stream reached the
// free, although it left the used count at the call.
TEST_F(HostPoolTest, FreedMemoryWaitsForItsStream) {
  CUdeviceptr a, b, c, dev;
  ASSERT_EQ(cuMemAlloc(&dev, kMiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, kMiB, pool_, s_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&b, 5 * kMiB, pool_, s_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
  fakecuda_set_copy_delay_us(200000);
  ASSERT_EQ(cuMemcpyHtoDAsync(dev, reinterpret_cast<void*>(a), kMiB, s_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(b, s_), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kMiB);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&c, 5 * kMiB, pool_, s_), CUDA_SUCCESS);
  EXPECT_NE(c, b);  // b's memory is still the stream's
  fakecuda_set_copy_delay_us(0);
  ASSERT_EQ(cuMemFreeAsync(c, s_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
  CUdeviceptr d;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&d, 5 * kMiB, pool_, s_), CUDA_SUCCESS);
  EXPECT_EQ(d, b);  // now it serves again
  EXPECT_EQ(Reserved(), 32 * kMiB);
  for (CUdeviceptr p : {a, d}) EXPECT_EQ(cuMemFreeAsync(p, s_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
}

// A pool allocation's pointer attributes as the real driver gave them: its
// own size, its pool, a range start that is not its start (the reservation's,
// which the pool does not carve from first); cuMemHostGetFlags refuses it.
TEST_F(HostPoolTest, AllocationAttributesAreTheMeasuredOnes) {
  CUdeviceptr a, b;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, kMiB, pool_, s_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&b, 5 * kMiB, pool_, s_), CUDA_SUCCESS);
  for (auto [p, size] : {std::pair<CUdeviceptr, size_t>{a, kMiB}, {b, 5 * kMiB}}) {
    unsigned type = 0;
    EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 64), CUDA_SUCCESS);
    EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
    CUdeviceptr start = 0;
    EXPECT_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 64),
              CUDA_SUCCESS);
    EXPECT_NE(start, p);
    size_t got = 0;
    EXPECT_EQ(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 64), CUDA_SUCCESS);
    EXPECT_EQ(got, size);
    CUmemoryPool owner = nullptr;
    EXPECT_EQ(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p + 64),
              CUDA_SUCCESS);
    EXPECT_EQ(owner, pool_);
    unsigned flags = 0;
    EXPECT_EQ(cuMemHostGetFlags(&flags, reinterpret_cast<void*>(p)), CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_EQ(cuMemFreeAsync(a, s_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeAsync(b, s_), CUDA_SUCCESS);
}

// cuMemFree frees a pool's allocation at once, without waiting for the
// stream (documented); freeing it again either way is refused.
TEST_F(HostPoolTest, CuMemFreeFreesAPoolAllocationAtOnce) {
  CUdeviceptr a, b;
  ASSERT_EQ(cuMemAllocFromPoolAsync(&a, kMiB, pool_, s_), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemFreeAsync(a, s_), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemAllocFromPoolAsync(&b, kMiB, pool_, s_), CUDA_SUCCESS);
  EXPECT_EQ(b, a);  // back in the pool already
  ASSERT_EQ(cuMemFreeAsync(b, s_), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(b), CUDA_ERROR_INVALID_VALUE);  // freed stream-ordered already
  ASSERT_EQ(cuStreamSynchronize(s_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolTrimTo(pool_, 0), CUDA_SUCCESS);
  EXPECT_EQ(Reserved(), 0u);
}

// A pool destroyed with an allocation outstanding: the allocation stays
// host memory that copies reach until it is freed, by either free.
TEST_F(VmmTest, DestroyedPoolLivesUntilItsLastAllocationIsFreed) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, kMiB), CUDA_SUCCESS);
  for (bool sync_free : {false, true}) {
    CUmemoryPool pool;
    ASSERT_EQ(cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
    CUdeviceptr a, b;
    ASSERT_EQ(cuMemAllocFromPoolAsync(&a, kMiB, pool, s), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAllocFromPoolAsync(&b, kMiB, pool, s), CUDA_SUCCESS);
    ASSERT_EQ(cuMemFreeAsync(b, s), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    ASSERT_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAllocFromPoolAsync(&b, kMiB, pool, s), CUDA_ERROR_INVALID_VALUE);
    unsigned type = 0;
    EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a), CUDA_SUCCESS);
    EXPECT_EQ(type, unsigned{CU_MEMORYTYPE_HOST});
    std::memset(reinterpret_cast<void*>(a), 3, kMiB);
    EXPECT_EQ(cuMemcpyHtoD(dev, reinterpret_cast<void*>(a), kMiB), CUDA_SUCCESS);
    EXPECT_EQ(sync_free ? cuMemFree(a) : cuMemFreeAsync(a, s), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
    EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a),
              CUDA_ERROR_INVALID_VALUE);  // gone with the pool
  }
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_SUCCESS);
}

}  // namespace
}  // namespace fakecuda_test
