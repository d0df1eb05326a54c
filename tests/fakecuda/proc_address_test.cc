// cuGetProcAddress, reached as the CUDA runtime reaches it: the library is
// dlopen()ed by path (never linked), one dlsym("cuGetProcAddress_v2"), then
// lookups by base name, version and flags; entry points that are not
// simulated, and cuGetExportTable, which says so when called. Also: loading
// by the plain name libcuda.so.1 through LD_LIBRARY_PATH, with no output
// unless FAKECUDA_DEBUG asks for a trace.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "tests/fakecuda/library_path.h"

namespace fakecuda_test {
namespace {

constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

class ProcAddressTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    handle_ = dlopen(DriverLibraryPath().c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      get_proc_ =
          reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle_, "cuGetProcAddress_v2"));
    }
  }
  void SetUp() override {
    ASSERT_NE(handle_, nullptr) << dlerror();
    ASSERT_NE(get_proc_, nullptr);
  }
  static void* Export(const char* name) { return dlsym(handle_, name); }

  static void* handle_;
  static PFN_cuGetProcAddress_v12000 get_proc_;
};

void* ProcAddressTest::handle_ = nullptr;
PFN_cuGetProcAddress_v12000 ProcAddressTest::get_proc_ = nullptr;

TEST_F(ProcAddressTest, AsksForItselfLikeTheRuntime) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  ASSERT_EQ(get_proc_("cuGetProcAddress", &fn, 12000, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(fn, Export("cuGetProcAddress_v2"));
  ASSERT_EQ(get_proc_("cuGetProcAddress", &fn, 11030, 0, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, Export("cuGetProcAddress"));
  ASSERT_EQ(get_proc_("cuGetProcAddress", &fn, 12000, kPerThread, &status), CUDA_SUCCESS);
  EXPECT_EQ(fn, Export("cuGetProcAddress_v2"));  // No per-thread variant: the legacy one.
  ASSERT_EQ(get_proc_("cuGetProcAddress", &fn, 10000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

  // The 11.3 ABI answers the same way, without a status.
  auto old_abi = reinterpret_cast<PFN_cuGetProcAddress_v11030>(Export("cuGetProcAddress"));
  ASSERT_EQ(old_abi("cuMemcpyHtoD", &fn, 7000, kPerThread), CUDA_SUCCESS);
  EXPECT_EQ(fn, Export("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(old_abi("cuNoSuchEntryPoint", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
}

struct Case {
  const char* symbol;
  int version;
  cuuint64_t flags;
  const char* expected;  // The export it resolves to.
};

TEST_F(ProcAddressTest, NewestAbiAtTheVersionAndTheStreamVariantAsked) {
  const Case cases[] = {
      {"cuInit", 2000, 0, "cuInit"},
      {"cuInit", 13000, kPerThread, "cuInit"},
      {"cuMemcpyHtoD", 3020, 0, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 7000, kPerThread, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyHtoD", 6050, kPerThread, "cuMemcpyHtoD_v2"},  // No per-thread one yet.
      {"cuMemcpyDtoH", 7000, kPerThread, "cuMemcpyDtoH_v2_ptds"},
      {"cuMemcpyDtoD", 7000, kPerThread, "cuMemcpyDtoD_v2_ptds"},
      {"cuMemcpyHtoDAsync", 3020, 0, "cuMemcpyHtoDAsync_v2"},
      {"cuMemcpyHtoDAsync", 7000, kPerThread, "cuMemcpyHtoDAsync_v2_ptsz"},
      {"cuMemcpyDtoHAsync", 7000, kPerThread, "cuMemcpyDtoHAsync_v2_ptsz"},
      {"cuMemcpyDtoDAsync", 7000, kPerThread, "cuMemcpyDtoDAsync_v2_ptsz"},
      {"cuMemcpy", 4000, 0, "cuMemcpy"},
      {"cuMemcpy", 7000, kPerThread, "cuMemcpy_ptds"},
      {"cuMemcpyAsync", 4000, 0, "cuMemcpyAsync"},
      {"cuMemcpyAsync", 7000, kPerThread, "cuMemcpyAsync_ptsz"},
      {"cuMemcpy2D", 3020, 0, "cuMemcpy2D_v2"},
      {"cuMemcpy2D", 7000, kPerThread, "cuMemcpy2D_v2_ptds"},
      {"cuMemcpy2DUnaligned", 7000, kPerThread, "cuMemcpy2DUnaligned_v2_ptds"},
      {"cuMemcpy2DAsync", 7000, kPerThread, "cuMemcpy2DAsync_v2_ptsz"},
      {"cuMemcpy3D", 3020, 0, "cuMemcpy3D_v2"},
      {"cuMemcpy3D", 7000, kPerThread, "cuMemcpy3D_v2_ptds"},
      {"cuMemcpy3DAsync", 7000, kPerThread, "cuMemcpy3DAsync_v2_ptsz"},
      {"cuMemcpyBatchAsync", 12080, 0, "cuMemcpyBatchAsync"},
      {"cuMemcpyBatchAsync", 12080, kPerThread, "cuMemcpyBatchAsync_ptsz"},
      {"cuMemcpyBatchAsync", 12090, 0, "cuMemcpyBatchAsync"},
      {"cuMemcpyBatchAsync", 13000, 0, "cuMemcpyBatchAsync_v2"},
      {"cuMemcpyBatchAsync", 13000, kPerThread, "cuMemcpyBatchAsync_v2_ptsz"},
      {"cuMemsetD8", 3020, 0, "cuMemsetD8_v2"},
      {"cuMemsetD8", 7000, kPerThread, "cuMemsetD8_v2_ptds"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemAllocHost", 3020, 0, "cuMemAllocHost_v2"},
      {"cuMemHostAlloc", 2020, 0, "cuMemHostAlloc"},
      {"cuMemHostRegister", 4000, 0, "cuMemHostRegister"},
      {"cuMemHostRegister", 6050, 0, "cuMemHostRegister_v2"},
      {"cuMemHostGetDevicePointer", 3020, 0, "cuMemHostGetDevicePointer_v2"},
      {"cuMemHostGetFlags", 2030, 0, "cuMemHostGetFlags"},
      {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
      {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
      {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
      {"cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2"},
      {"cuCtxGetDevice", 12090, 0, "cuCtxGetDevice"},
      {"cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"},
      {"cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"},
      {"cuDevicePrimaryCtxRelease", 7000, 0, "cuDevicePrimaryCtxRelease"},
      {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuDevicePrimaryCtxReset", 7000, 0, "cuDevicePrimaryCtxReset"},
      {"cuDevicePrimaryCtxReset", 10020, 0, "cuDevicePrimaryCtxReset"},
      {"cuDevicePrimaryCtxReset", 13000, 0, "cuDevicePrimaryCtxReset_v2"},
      {"cuDevicePrimaryCtxGetState", 7000, 0, "cuDevicePrimaryCtxGetState"},
      {"cuDevicePrimaryCtxGetState", 13000, kPerThread, "cuDevicePrimaryCtxGetState"},
      {"cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2"},
      {"cuStreamDestroy", 4000, 0, "cuStreamDestroy_v2"},
      {"cuStreamSynchronize", 2000, 0, "cuStreamSynchronize"},
      {"cuStreamSynchronize", 7000, kPerThread, "cuStreamSynchronize_ptsz"},
      {"cuStreamQuery", 7000, kPerThread, "cuStreamQuery_ptsz"},
      {"cuStreamWaitEvent", 7000, kPerThread, "cuStreamWaitEvent_ptsz"},
      {"cuStreamGetFlags", 5050, 0, "cuStreamGetFlags"},
      {"cuStreamGetFlags", 7000, kPerThread, "cuStreamGetFlags_ptsz"},
      {"cuEventRecord", 7000, kPerThread, "cuEventRecord_ptsz"},
      {"cuEventDestroy", 4000, 0, "cuEventDestroy_v2"},
      {"cuEventElapsedTime", 2000, 0, "cuEventElapsedTime"},
      {"cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2"},
  };
  for (const Case& c : cases) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(get_proc_(c.symbol, &fn, c.version, c.flags, &status), CUDA_SUCCESS) << c.symbol;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << c.symbol;
    ASSERT_NE(Export(c.expected), nullptr) << c.expected;
    EXPECT_EQ(fn, Export(c.expected))
        << c.symbol << " at " << c.version << " flags " << c.flags << " should be " << c.expected;
  }
}

TEST_F(ProcAddressTest, NotFoundAndBadArguments) {
  struct Missing {
    const char* symbol;
    int version;
    CUdriverProcAddressQueryResult status;
  };
  const Missing missing[] = {
      {"cuMemcpyHtoD", 1000, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
      {"cuMemcpyBatchAsync", 12060, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
      {"cuNoSuchEntryPoint", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
      {"cuMemcpyHtoD_v2", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},  // Not a base name.
      {"cumemcpyhtod", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
  };
  for (const Missing& m : missing) {
    void* fn = reinterpret_cast<void*>(1);
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    EXPECT_EQ(get_proc_(m.symbol, &fn, m.version, 0, &status), CUDA_ERROR_NOT_FOUND) << m.symbol;
    EXPECT_EQ(fn, nullptr) << m.symbol;
    EXPECT_EQ(status, m.status) << m.symbol;
  }
  void* fn = nullptr;
  EXPECT_EQ(get_proc_(nullptr, &fn, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(get_proc_("cuInit", nullptr, 13000, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(get_proc_("cuInit", &fn, 13000, 4, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(get_proc_("cuInit", &fn, 13000, 0, nullptr), CUDA_SUCCESS);  // Status is optional.
}

// Runs `body` in a forked child whose stderr is captured; returns what it
// wrote there, and body's return value (or -1 if it died) in *code.
std::string InChildCapturingStderr(const std::function<int()>& body, int* code) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    _exit(body());
  }
  close(fds[1]);
  std::string output;
  char buffer[256];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) output.append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

// Every ABI a CUDA 13.0 driver has (the toolkit's typedef headers list them)
// resolves, as on that driver; one not simulated here resolves to a stub that
// fails with CUDA_ERROR_NOT_SUPPORTED and names itself on stderr, once.
TEST_F(ProcAddressTest, EntryPointsNotSimulatedResolveToStubsThatSaySo) {
  const Case cases[] = {
      {"cuLaunchKernel", 13000, 0, nullptr},
      {"cuLaunchKernel", 13000, kPerThread, nullptr},
      {"cuModuleLoadData", 2000, 0, nullptr},
      {"cuMemcpyHtoD", 3010, 0, nullptr},  // The 32-bit ABI of CUDA 2.0.
      {"cuGraphicsGLRegisterBuffer", 13000, 0, nullptr},
      {"cuVDPAUGetDevice", 13000, 0, nullptr},
      {"cuEGLStreamConsumerConnect", 13000, 0, nullptr},
      {"cuProfilerStart", 13000, 0, nullptr},
  };
  std::vector<void*> stubs;
  for (const Case& c : cases) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(get_proc_(c.symbol, &fn, c.version, c.flags, &status), CUDA_SUCCESS) << c.symbol;
    EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS) << c.symbol;
    EXPECT_NE(fn, nullptr) << c.symbol;
    stubs.push_back(fn);
  }
  EXPECT_NE(stubs[0], stubs[1]);  // The per-thread ABI is an entry point of its own.
  EXPECT_NE(stubs[3], Export("cuMemcpyHtoD"));
  EXPECT_NE(stubs[3], Export("cuMemcpyHtoD_v2"));

  using Launch = PFN_cuLaunchKernel_v4000;
  int code = -1;
  const std::string output = InChildCapturingStderr(
      [&] {
        auto launch = reinterpret_cast<Launch>(stubs[0]);
        auto load = reinterpret_cast<PFN_cuModuleLoadData_v2000>(stubs[2]);
        auto htod = reinterpret_cast<CUresult (*)(unsigned, const void*, unsigned)>(stubs[3]);
        CUmodule module;
        char byte = 0;
        for (int i = 0; i < 2; ++i) {
          if (launch(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) !=
              CUDA_ERROR_NOT_SUPPORTED) {
            return 1;
          }
        }
        if (load(&module, &byte) != CUDA_ERROR_NOT_SUPPORTED) return 2;
        if (htod(0, &byte, 1) != CUDA_ERROR_NOT_SUPPORTED) return 3;
        return 0;
      },
      &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(output,
            "fakecuda: cuLaunchKernel is not simulated\n"
            "fakecuda: cuModuleLoadData is not simulated\n"
            "fakecuda: cuMemcpyHtoD is not simulated\n");
}

// The CUDA runtime's private tables are not simulated: every UUID is refused,
// and the first request says so.
TEST_F(ProcAddressTest, ExportTablesRefusedAndNamedOnce) {
  void* fn = nullptr;
  ASSERT_EQ(get_proc_("cuGetExportTable", &fn, 3000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(fn, Export("cuGetExportTable"));
  auto get_table = reinterpret_cast<PFN_cuGetExportTable_v3000>(fn);
  int code = -1;
  const std::string output = InChildCapturingStderr(
      [&] {
        CUuuid first, second;
        std::memset(first.bytes, 0x6b, sizeof(first.bytes));
        std::memset(second.bytes, 0xd4, sizeof(second.bytes));
        const void* table = &code;
        if (get_table(&table, &first) != CUDA_ERROR_NOT_SUPPORTED || table != nullptr) return 1;
        if (get_table(&table, &second) != CUDA_ERROR_NOT_SUPPORTED) return 2;
        if (get_table(nullptr, &first) != CUDA_ERROR_INVALID_VALUE) return 3;
        if (get_table(&table, nullptr) != CUDA_ERROR_INVALID_VALUE) return 4;
        return 0;
      },
      &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(output,
            "fakecuda: cuGetExportTable is not simulated: the CUDA runtime's private tables; "
            "programs built with cudart stop here\n");
}

TEST_F(ProcAddressTest, WorksEndToEndThroughLookedUpPointers) {
  auto lookup = [](const char* name, int version, cuuint64_t flags = 0) {
    void* fn = nullptr;
    EXPECT_EQ(get_proc_(name, &fn, version, flags, nullptr), CUDA_SUCCESS) << name;
    return fn;
  };
  auto init = reinterpret_cast<PFN_cuInit_v2000>(lookup("cuInit", 2000));
  auto retain = reinterpret_cast<PFN_cuDevicePrimaryCtxRetain_v7000>(
      lookup("cuDevicePrimaryCtxRetain", 7000));
  auto set_current = reinterpret_cast<PFN_cuCtxSetCurrent_v4000>(lookup("cuCtxSetCurrent", 4000));
  auto alloc = reinterpret_cast<PFN_cuMemAlloc_v3020>(lookup("cuMemAlloc", 3020));
  auto htod =
      reinterpret_cast<PFN_cuMemcpyHtoD_v7000_ptds>(lookup("cuMemcpyHtoD", 7000, kPerThread));
  auto dtoh = reinterpret_cast<PFN_cuMemcpyDtoH_v3020>(lookup("cuMemcpyDtoH", 3020));
  auto free_dev = reinterpret_cast<PFN_cuMemFree_v3020>(lookup("cuMemFree", 3020));
  auto call_count = reinterpret_cast<uint64_t (*)(const char*)>(Export("fakecuda_call_count"));
  ASSERT_NE(call_count, nullptr);

  CUcontext ctx;
  ASSERT_EQ(init(0), CUDA_SUCCESS);
  ASSERT_EQ(retain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(set_current(ctx), CUDA_SUCCESS);
  CUdeviceptr dev;
  ASSERT_EQ(alloc(&dev, 64), CUDA_SUCCESS);
  const uint64_t before = call_count("cuMemcpyHtoD");
  std::vector<char> data(64, 'x'), back(64, 0);
  ASSERT_EQ(htod(dev, data.data(), 64), CUDA_SUCCESS);
  ASSERT_EQ(dtoh(back.data(), dev, 64), CUDA_SUCCESS);
  EXPECT_EQ(back, data);
  EXPECT_EQ(call_count("cuMemcpyHtoD"), before + 1);  // The _ptds variant counts as cuMemcpyHtoD.
  EXPECT_EQ(free_dev(dev), CUDA_SUCCESS);
}

// Runs `argv` with `env_entries` added; returns its exit code and what it printed.
int RunCaptured(const std::vector<std::string>& argv, const std::vector<std::string>& env_entries,
                std::string* output) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    for (const auto& entry : env_entries) putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  char buffer[256];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) output->append(buffer, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(LoadByNameTest, FoundThroughLdLibraryPathAndSilent) {
  std::string output;
  const int code = RunCaptured({RunfilesPath("tests/fakecuda/driver_client"), DriverLibraryDir()},
                               {"LD_LIBRARY_PATH=" + DriverLibraryDir()}, &output);
  EXPECT_EQ(code, 0) << "driver_client failed at step " << code;
  EXPECT_EQ(output, "");
  output.clear();
  EXPECT_EQ(RunCaptured({RunfilesPath("tests/fakecuda/driver_client"), DriverLibraryDir()},
                        {"LD_LIBRARY_PATH=" + DriverLibraryDir(), "FAKECUDA_DEBUG=0"}, &output),
            0);
  EXPECT_EQ(output, "");
}

// FAKECUDA_DEBUG: every lookup with the ABI it found, and every call.
TEST(LoadByNameTest, DebugTraceNamesLookupsAndCalls) {
  std::string output;
  const int code =
      RunCaptured({RunfilesPath("tests/fakecuda/driver_client"), DriverLibraryDir()},
                  {"LD_LIBRARY_PATH=" + DriverLibraryDir(), "FAKECUDA_DEBUG=1"}, &output);
  EXPECT_EQ(code, 0) << "driver_client failed at step " << code;
  const char* expected[] = {
      "fakecuda: cuGetProcAddress(cuGetProcAddress, 12000, 0): ABI 12000\n",
      "fakecuda: cuGetProcAddress(cuMemcpyDtoH, 7000, 2): ABI 7000 per-thread\n",
      "fakecuda: cuGetProcAddress(cuNoSuchEntryPoint, 13000, 0): not found\n",
      "fakecuda: cuInit\n",
      "fakecuda: cuMemcpyHtoD\n",
  };
  for (const char* line : expected) EXPECT_NE(output.find(line), std::string::npos) << line;
}

}  // namespace
}  // namespace fakecuda_test
