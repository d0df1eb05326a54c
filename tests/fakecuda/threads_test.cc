// Many threads at once, and fork: a child starts over with cuInit.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/fakecuda/test_support.h"

namespace fakecuda_test {
namespace {

using ThreadsTest = DriverTest;

// One thread's round of allocations and copies; false if a byte is wrong.
// With `reuse`, its copies go to that stream instead of a new one.
bool CopyRound(unsigned seed, size_t n, unsigned host_flags, unsigned stream_flags,
               CUstream reuse = nullptr) {
  const auto data = Pattern(n, seed);
  std::vector<unsigned char> registered(n, 0), back(n, 0);
  CUdeviceptr dev = 0;
  void* pinned = nullptr;
  CUstream stream = nullptr;
  EXPECT_EQ(cuMemAlloc(&dev, n), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostAlloc(&pinned, n, host_flags), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(registered.data(), n, 0), CUDA_SUCCESS);
  if (reuse != nullptr) {
    stream = reuse;
  } else {
    EXPECT_EQ(cuStreamCreate(&stream, stream_flags), CUDA_SUCCESS);
  }
  if (dev == 0 || pinned == nullptr || stream == nullptr) return false;
  std::memcpy(pinned, data.data(), n);
  EXPECT_EQ(cuMemcpyHtoDAsync(dev, pinned, n, stream), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoHAsync(registered.data(), dev, n, stream), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  bool ok = registered == data;
  EXPECT_EQ(cuMemsetD8(dev, 0, n), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD(dev, data.data(), n), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyDtoH(back.data(), dev, n), CUDA_SUCCESS);
  ok = ok && back == data;
  if (reuse == nullptr) EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(registered.data()), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFreeHost(pinned), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
  return ok;
}

TEST_F(ThreadsTest, SixteenThreadsCopyAndAllocate) {
  const size_t devices = fakecuda_live_device_allocations();
  const size_t hosts = fakecuda_live_host_allocations();
  const size_t registrations = fakecuda_live_registrations();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
      for (unsigned i = 0; i < 40; ++i) {
        const size_t n = 100 + 37 * (t * 40 + i);
        if (!CopyRound(t * 1000 + i, n, i % 8, i % 2 ? CU_STREAM_NON_BLOCKING : 0)) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fakecuda_live_device_allocations(), devices);
  EXPECT_EQ(fakecuda_live_host_allocations(), hosts);
  EXPECT_EQ(fakecuda_live_registrations(), registrations);
  EXPECT_EQ(fakecuda_pending_ops(), 0u);
}

// What a forked child checks; its exit code names the first failure.
int ChildStartsOver() {
  alarm(60);  // A hang fails the test instead of stalling it.
  CUdeviceptr dev;
  CUcontext ctx;
  if (cuMemAlloc(&dev, 16) != CUDA_ERROR_NOT_INITIALIZED) return 10;
  if (cuCtxGetCurrent(&ctx) != CUDA_ERROR_NOT_INITIALIZED) return 11;
  if (fakecuda_live_device_allocations() != 0) return 12;
  if (cuInit(0) != CUDA_SUCCESS) return 13;
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) return 14;
  if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return 15;
  if (!CopyRound(77, 5000, CU_MEMHOSTALLOC_PORTABLE, 0)) return 16;
  if (cuCtxSynchronize() != CUDA_SUCCESS) return 17;
  return 0;
}

// The child's exit code; -2 when it hung for two minutes (its alarm cannot
// end a child stuck with every signal blocked: it is killed).
int ForkAndWait() {
  pid_t pid = fork();
  if (pid == 0) _exit(ChildStartsOver());
  int status = 0;
  for (int waited_ms = 0;; waited_ms += 10) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done != 0) return -1;
    if (waited_ms >= 120000) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -2;
    }
    usleep(10000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(ThreadsTest, ForkedChildStartsOver) {
  CUdeviceptr dev;
  ASSERT_EQ(cuMemAlloc(&dev, 64), CUDA_SUCCESS);
  EXPECT_EQ(ForkAndWait(), 0);
  // The parent is untouched.
  const auto data = Pattern(64, 5);
  ASSERT_EQ(cuMemcpyHtoD(dev, data.data(), 64), CUDA_SUCCESS);
  EXPECT_EQ(ReadDevice(dev, 64), data);
  EXPECT_EQ(cuMemFree(dev), CUDA_SUCCESS);
}

// The copying threads keep one stream each, made (with its worker thread)
// before the forks: a thread created while another forks can leave the
// child's thread creation locked under AddressSanitizer, whose runtime holds
// its thread list's lock across pthread_create.
TEST_F(ThreadsTest, ForkWhileOtherThreadsCopy) {
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      CUstream stream = nullptr;
      const bool set =
          cuCtxSetCurrent(ctx_) == CUDA_SUCCESS && cuStreamCreate(&stream, 0) == CUDA_SUCCESS;
      EXPECT_TRUE(set);
      if (!set) ready.fetch_add(1);
      for (unsigned i = 0; set && !stop.load(); ++i) {
        if (!CopyRound(t + i, 4096 + i % 5000, 0, 0, stream)) ++wrong;
        if (i == 0) ready.fetch_add(1);
      }
      if (set) EXPECT_EQ(cuStreamDestroy(stream), CUDA_SUCCESS);
    });
  }
  while (ready.load() < 4) std::this_thread::yield();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ForkAndWait(), 0) << "fork " << i;
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace fakecuda_test
