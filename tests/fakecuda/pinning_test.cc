// Page-locked memory behaves as the H200 showed it does (bench/RESULTS.md,
// "pages that change under pinned memory"): copies move the bytes of the
// pages pinned at registration or allocation, not of whatever the program's
// addresses map later, and DMA ignores CPU page protections.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

constexpr size_t kBytes = size_t{1} << 20;

class PinningTest : public DriverTest {
 protected:
  void SetUp() override {
    DriverTest::SetUp();
    ASSERT_EQ(fakecuda_pins_pages(), 1)
        << "this kernel cannot pin pages (io_uring fixed buffers): the simulated driver "
           "would copy through the program's addresses and hide stale-page corruption";
    ASSERT_EQ(cuMemAlloc(&dev_, kBytes), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuMemFree(dev_), CUDA_SUCCESS);
    DriverTest::TearDown();
  }
  // The first byte of each page the device holds after copying n bytes from host.
  unsigned char DeviceGets(const void* host, size_t n, unsigned char* last = nullptr) {
    EXPECT_EQ(cuMemcpyHtoD(dev_, host, n), CUDA_SUCCESS);
    std::vector<unsigned char> back = ReadDevice(dev_, n);
    if (last != nullptr) *last = back[n - 1];
    return back[0];
  }
  static unsigned char* Anonymous(size_t n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<unsigned char*>(p);
  }
  CUdeviceptr dev_ = 0;
};

// A program that registers memory itself and then drops its pages gets the
// old pages' data on the H200; so it does here.
TEST_F(PinningTest, RegisteredThenDontneedDeliversTheOldPages) {
  unsigned char* b = Anonymous(kBytes);
  memset(b, 0xA1, kBytes);
  ASSERT_EQ(cuMemHostRegister(b, kBytes, 0), CUDA_SUCCESS);
  ASSERT_EQ(madvise(b, kBytes, MADV_DONTNEED), 0);
  memset(b, 0xB2, kBytes);
  EXPECT_EQ(DeviceGets(b, kBytes), 0xA1);
  // And what the device writes back lands in the old pages, not in the new.
  EXPECT_EQ(cuMemsetD8(dev_, 0xC3, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH(b, dev_, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(b[0], 0xB2);
  EXPECT_EQ(cuMemHostUnregister(b), CUDA_SUCCESS);
  munmap(b, kBytes);
}

TEST_F(PinningTest, RegisteredThenMapFixedOverHalf) {
  unsigned char* b = Anonymous(kBytes);
  memset(b, 0xA1, kBytes);
  ASSERT_EQ(cuMemHostRegister(b, kBytes, 0), CUDA_SUCCESS);
  ASSERT_NE(
      mmap(b, kBytes / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      MAP_FAILED);
  memset(b, 0xB2, kBytes);
  unsigned char last = 0;
  EXPECT_EQ(DeviceGets(b, kBytes, &last), 0xA1);  // the replaced half: old pages
  EXPECT_EQ(last, 0xB2);                          // the rest: the same pages
  EXPECT_EQ(cuMemHostUnregister(b), CUDA_SUCCESS);
  munmap(b, kBytes);
}

// The device writes into memory the program unmapped while it was
// registered: the held pages take the bytes, nothing faults.
TEST_F(PinningTest, DmaIntoUnmappedRegisteredMemoryDoesNotCrash) {
  unsigned char* b = Anonymous(kBytes);
  ASSERT_EQ(cuMemHostRegister(b, kBytes, 0), CUDA_SUCCESS);
  ASSERT_EQ(munmap(b, kBytes), 0);
  EXPECT_EQ(cuMemsetD8(dev_, 0x5A, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH(b, dev_, kBytes), CUDA_SUCCESS);
  std::vector<unsigned char> src(kBytes, 0x11);
  EXPECT_EQ(cuMemcpyHtoD(dev_, src.data(), kBytes), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH(src.data(), dev_, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD(dev_, b, kBytes), CUDA_SUCCESS);  // reads the held pages
  EXPECT_EQ(ReadDevice(dev_, 1)[0], 0x5A);
  EXPECT_EQ(cuMemHostUnregister(b), CUDA_SUCCESS);
}

// DMA does not go through the CPU's page tables' protections.
TEST_F(PinningTest, DmaIgnoresPageProtection) {
  unsigned char* b = Anonymous(kBytes);
  memset(b, 0x21, kBytes);
  ASSERT_EQ(cuMemHostRegister(b, kBytes, 0), CUDA_SUCCESS);
  ASSERT_EQ(mprotect(b, kBytes, PROT_NONE), 0);
  EXPECT_EQ(DeviceGets(b, kBytes), 0x21);
  EXPECT_EQ(cuMemsetD8(dev_, 0x42, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH(b, dev_, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(mprotect(b, kBytes, PROT_READ), 0);
  EXPECT_EQ(b[kBytes - 1], 0x42);
  EXPECT_EQ(cuMemHostUnregister(b), CUDA_SUCCESS);
  munmap(b, kBytes);
}

// The kernel copies pinned pages for a fork child, so the parent keeps the
// pinned pages and its writes reach the device (measured on the H200).
TEST_F(PinningTest, ForkKeepsTheParentsPinnedPages) {
  unsigned char* b = Anonymous(kBytes);
  memset(b, 0xA1, kBytes);
  ASSERT_EQ(cuMemHostRegister(b, kBytes, 0), CUDA_SUCCESS);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    memset(b, 0xC3, kBytes);  // the child's own copy
    char c = 'w';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    usleep(50000);
    _exit(b[0] == 0xC3 ? 0 : 1);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  memset(b, 0xB2, kBytes);
  EXPECT_EQ(DeviceGets(b, kBytes), 0xB2);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(cuMemHostUnregister(b), CUDA_SUCCESS);
  munmap(b, kBytes);
  close(ready[0]);
  close(ready[1]);
}

// Measured on the H200: a copy starting in a registration and running past
// its end is refused; one starting before it and running into it is not.
TEST_F(PinningTest, CopyPastARegistrationsEndIsRefused) {
  unsigned char* b = Anonymous(kBytes);
  ASSERT_EQ(cuMemHostRegister(b, kBytes / 2, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD(dev_, b, kBytes), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyDtoH(b, dev_, kBytes), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD(dev_, b, kBytes / 2), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(b), CUDA_SUCCESS);
  ASSERT_EQ(cuMemHostRegister(b + kBytes / 2, kBytes / 2, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD(dev_, b, kBytes), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(b + kBytes / 2), CUDA_SUCCESS);
  munmap(b, kBytes);
}

// cuMemHostAlloc memory is shared with a fork child, as the driver's is.
TEST_F(PinningTest, HostAllocMemoryIsSharedWithForkChildren) {
  void* p = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&p, kBytes, 0), CUDA_SUCCESS);
  auto* b = static_cast<unsigned char*>(p);
  b[0] = 1;
  pid_t pid = fork();
  if (pid == 0) {
    b[0] = 9;
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(b[0], 9);
  // MADV_DONTNEED keeps shared memory's content; MADV_REMOVE punches it out
  // while the device keeps the old pages.
  memset(b, 0xA1, kBytes);
  ASSERT_EQ(madvise(b, kBytes, MADV_DONTNEED), 0);
  EXPECT_EQ(b[0], 0xA1);
  ASSERT_EQ(madvise(b, kBytes, MADV_REMOVE), 0);
  EXPECT_EQ(b[0], 0);
  memset(b, 0xB2, kBytes);
  EXPECT_EQ(DeviceGets(b, kBytes), 0xA1);
  EXPECT_EQ(cuMemFreeHost(p), CUDA_SUCCESS);
}

}  // namespace
}  // namespace fakecuda_test
