// A CUDA driver-API program for the GPU tier, in two builds:
//   default:                  reaches the driver the way the CUDA runtime does:
//                             dlopen("libcuda.so.1"), one dlsym of
//                             "cuGetProcAddress_v2", through it cuInit and
//                             "cuGetProcAddress" itself, and every other entry
//                             point through the pointer that came back,
//                             including the per-thread-default-stream variants.
//   -DDRIVER_PROGRAM_LINKED:  links libcuda (-lcuda) and calls the exported ABI
//                             symbols by name (cuMemcpyHtoD_v2,
//                             cuMemcpyHtoD_v2_ptds, ...).
// Like copy_program.cu it prints a checksum of every result buffer, the
// return code of every invalid call and an "expect:" line of what it did.
// Entry points the driver does not have (a simulated driver may lack some)
// are reported as unavailable and their section is skipped, so the program
// runs against both the real and the simulated driver.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "call_ledger.h"

// The per-thread-default-stream ABI symbols; cuda.h only names them when a
// translation unit asks for per-thread default streams globally.
extern "C" {
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH_v2_ptds(void*, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void*, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void*, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpy_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D*);
CUresult cuStreamSynchronize_ptsz(CUstream);
}

// field, name asked of cuGetProcAddress, ABI symbol, the version asked for
// (the one that introduced that ABI, as the CUDA runtime asks: a newer
// version may hand back a newer ABI with another signature, e.g.
// cuCtxSynchronize at 13000), per-thread-default-stream variant.
#define DRIVER_ENTRY_POINTS(X)                                                                  \
  X(DeviceGet, "cuDeviceGet", cuDeviceGet, 2000, false)                                         \
  X(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000, false)        \
  X(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000, false) \
  X(CtxSetCurrent, "cuCtxSetCurrent", cuCtxSetCurrent, 4000, false)                             \
  X(CtxSynchronize, "cuCtxSynchronize", cuCtxSynchronize, 2000, false)                          \
  X(GetErrorName, "cuGetErrorName", cuGetErrorName, 6000, false)                                \
  X(MemAlloc, "cuMemAlloc", cuMemAlloc_v2, 3020, false)                                         \
  X(MemFree, "cuMemFree", cuMemFree_v2, 3020, false)                                            \
  X(MemHostAlloc, "cuMemHostAlloc", cuMemHostAlloc, 2020, false)                                \
  X(MemAllocHost, "cuMemAllocHost", cuMemAllocHost_v2, 3020, false)                             \
  X(MemFreeHost, "cuMemFreeHost", cuMemFreeHost, 2000, false)                                   \
  X(MemHostRegister, "cuMemHostRegister", cuMemHostRegister_v2, 6050, false)                    \
  X(MemHostUnregister, "cuMemHostUnregister", cuMemHostUnregister, 4000, false)                 \
  X(MemHostGetDevicePointer, "cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2, 3020,   \
    false)                                                                                      \
  X(MemHostGetFlags, "cuMemHostGetFlags", cuMemHostGetFlags, 2030, false)                       \
  X(MemcpyHtoD, "cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020, false)                                   \
  X(MemcpyDtoH, "cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020, false)                                   \
  X(MemcpyDtoD, "cuMemcpyDtoD", cuMemcpyDtoD_v2, 3020, false)                                   \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, 3020, false)                    \
  X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, 3020, false)                    \
  X(Memcpy, "cuMemcpy", cuMemcpy, 4000, false)                                                  \
  X(MemcpyAsync, "cuMemcpyAsync", cuMemcpyAsync, 4000, false)                                   \
  X(Memcpy2D, "cuMemcpy2D", cuMemcpy2D_v2, 3020, false)                                         \
  X(StreamCreate, "cuStreamCreate", cuStreamCreate, 2000, false)                                \
  X(StreamSynchronize, "cuStreamSynchronize", cuStreamSynchronize, 2000, false)                 \
  X(StreamDestroy, "cuStreamDestroy", cuStreamDestroy_v2, 4000, false)                          \
  X(MemcpyHtoDPtds, "cuMemcpyHtoD", cuMemcpyHtoD_v2_ptds, 7000, true)                           \
  X(MemcpyDtoHPtds, "cuMemcpyDtoH", cuMemcpyDtoH_v2_ptds, 7000, true)                           \
  X(MemcpyDtoDPtds, "cuMemcpyDtoD", cuMemcpyDtoD_v2_ptds, 7000, true)                           \
  X(MemcpyHtoDAsyncPtsz, "cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2_ptsz, 7000, true)            \
  X(MemcpyDtoHAsyncPtsz, "cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2_ptsz, 7000, true)            \
  X(MemcpyPtds, "cuMemcpy", cuMemcpy_ptds, 7000, true)                                          \
  X(MemcpyAsyncPtsz, "cuMemcpyAsync", cuMemcpyAsync_ptsz, 7000, true)                           \
  X(Memcpy2DPtds, "cuMemcpy2D", cuMemcpy2D_v2_ptds, 7000, true)                                 \
  X(StreamSynchronizePtsz, "cuStreamSynchronize", cuStreamSynchronize_ptsz, 7000, true)

#ifdef DRIVER_PROGRAM_LINKED
// Weak, so a driver without one of them (the simulated one) leaves a null
// pointer instead of failing to load; cuInit stays a strong reference.
#define DECLARE_WEAK(field, name, symbol, version, per_thread) \
  extern "C" decltype(symbol) symbol __attribute__((weak));
DRIVER_ENTRY_POINTS(DECLARE_WEAK)
#undef DECLARE_WEAK
#endif

namespace {

using pinshim_gpu_tier::CallLedger;
using pinshim_gpu_tier::Dir;
using pinshim_gpu_tier::Fill;
using pinshim_gpu_tier::Host;
using pinshim_gpu_tier::PrintChecksum;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kSizes[] = {4 * kKiB, 64 * kKiB, 1 * kMiB, 16 * kMiB};
constexpr size_t kBig = 16 * kMiB;

struct Api {
#define DECLARE_FIELD(field, name, symbol, version, per_thread) decltype(&symbol) field = nullptr;
  DRIVER_ENTRY_POINTS(DECLARE_FIELD)
#undef DECLARE_FIELD
};

Api g_api;
CallLedger g_ledger;

const char* ErrorName(CUresult rc) {
  const char* name = nullptr;
  if (g_api.GetErrorName == nullptr || g_api.GetErrorName(rc, &name) != 0 || name == nullptr) {
    return "?";
  }
  return name;
}

void Must(CUresult rc, const char* what, int line) {
  if (rc == CUDA_SUCCESS) return;
  std::printf("FATAL line %d: %s returned %d %s\n", line, what, static_cast<int>(rc),
              ErrorName(rc));
  std::fflush(stdout);
  std::exit(2);
}
#define MUST(call) Must((call), #call, __LINE__)

void PrintRc(const char* label, CUresult rc) {
  std::printf("rc %s=%d %s\n", label, static_cast<int>(rc), ErrorName(rc));
}

const char* Label(const char* fmt, size_t a, size_t b = 0) {
  static char buf[128];
  std::snprintf(buf, sizeof(buf), fmt, a, b);
  return buf;
}

unsigned char* Bytes(void* p) { return static_cast<unsigned char*>(p); }
CUdeviceptr Addr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);

// Resolves the driver like the CUDA runtime: returns cuInit.
decltype(&cuInit) Resolve() {
#ifdef DRIVER_PROGRAM_LINKED
  std::printf("driver_program build=linked\n");
#define ASSIGN(field, name, symbol, version, per_thread) g_api.field = &symbol;
  DRIVER_ENTRY_POINTS(ASSIGN)
#undef ASSIGN
  return &cuInit;
#else
  std::printf("driver_program build=dlopen\n");
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    std::printf("FATAL dlopen libcuda.so.1 failed\n");
    std::exit(3);
  }
  auto get_v2 = reinterpret_cast<GetProcAddressFn>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_v2 == nullptr) {
    std::printf("FATAL no cuGetProcAddress_v2\n");
    std::exit(3);
  }
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  void* init = nullptr;
  CUresult rc = get_v2("cuInit", &init, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  std::printf("lookup cuInit via cuGetProcAddress_v2 rc=%d status=%d\n", static_cast<int>(rc),
              static_cast<int>(status));
  if (rc != CUDA_SUCCESS || init == nullptr) std::exit(3);
  void* get = nullptr;
  rc = get_v2("cuGetProcAddress", &get, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  std::printf("lookup cuGetProcAddress rc=%d status=%d\n", static_cast<int>(rc),
              static_cast<int>(status));
  if (rc != CUDA_SUCCESS || get == nullptr) std::exit(3);
  auto get_proc = reinterpret_cast<GetProcAddressFn>(get);
#define LOOKUP(field, name, symbol, version, per_thread)                                           \
  {                                                                                                \
    void* fn = nullptr;                                                                            \
    status = CU_GET_PROC_ADDRESS_SUCCESS;                                                          \
    CUresult lrc = get_proc(name, &fn, version,                                                    \
                            (per_thread) ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM           \
                                         : CU_GET_PROC_ADDRESS_DEFAULT,                            \
                            &status);                                                              \
    if (lrc == CUDA_SUCCESS && fn != nullptr) {                                                    \
      g_api.field = reinterpret_cast<decltype(&symbol)>(fn);                                       \
    } else {                                                                                       \
      std::printf("lookup %s per_thread=%d rc=%d status=%d\n", name, static_cast<int>(per_thread), \
                  static_cast<int>(lrc), static_cast<int>(status));                                \
    }                                                                                              \
  }
  DRIVER_ENTRY_POINTS(LOOKUP)
#undef LOOKUP
  return reinterpret_cast<decltype(&cuInit)>(init);
#endif
}

// True if every pointer is set; otherwise prints which section is skipped.
bool Have(const char* section, std::initializer_list<const void*> fns) {
  for (const void* f : fns) {
    if (f == nullptr) {
      std::printf("section %s skipped: entry point unavailable\n", section);
      return false;
    }
  }
  return true;
}
#define FN(f) reinterpret_cast<const void*>(g_api.f)

struct Buffers {
  CUdeviceptr a = 0, b = 0, small = 0;
  unsigned char* src = nullptr;
  unsigned char* dst = nullptr;
  CUstream stream = nullptr;
};

// H2D, a rotation done with two device-to-device copies, D2H.
void SyncSection(const Buffers& m) {
  const bool d2d = g_api.MemcpyDtoD != nullptr;
  for (size_t i = 0; i < 4; ++i) {
    const size_t n = kSizes[i];
    Fill(m.src, n, 1000 + i);
    MUST(g_api.MemcpyHtoD(m.a, m.src, n));
    g_ledger.Copy(Dir::kH2D, Host::kPageable, n);
    CUdeviceptr result = m.a;
    if (d2d) {
      MUST(g_api.MemcpyDtoD(m.b, m.a + n / 2, n / 2));
      MUST(g_api.MemcpyDtoD(m.b + n / 2, m.a, n / 2));
      g_ledger.Copy(Dir::kD2D, Host::kNone, n / 2);
      g_ledger.Copy(Dir::kD2D, Host::kNone, n / 2);
      result = m.b;
    }
    std::memset(m.dst, 0, n);
    MUST(g_api.MemcpyDtoH(m.dst, result, n));
    g_ledger.Copy(Dir::kD2H, Host::kPageable, n);
    PrintChecksum(Label("sync/%zu", n), m.dst, n);
  }
}

void AsyncSection(const Buffers& m) {
  if (!Have("async", {FN(MemcpyHtoDAsync), FN(MemcpyDtoHAsync), FN(StreamSynchronize)})) {
    return;
  }
  for (size_t i = 0; i < 4; ++i) {
    const size_t n = kSizes[i];
    Fill(m.src, n, 1100 + i);
    std::memset(m.dst, 0, n);
    MUST(g_api.MemcpyHtoDAsync(m.a, m.src, n, m.stream));
    MUST(g_api.MemcpyDtoHAsync(m.dst, m.a, n, m.stream));
    MUST(g_api.StreamSynchronize(m.stream));
    g_ledger.Copy(Dir::kH2D, Host::kPageable, n);
    g_ledger.Copy(Dir::kD2H, Host::kPageable, n);
    PrintChecksum(Label("async-stream/%zu", n), m.dst, n);
  }
}

void PerThreadSection(const Buffers& m) {
  if (Have("per-thread-sync", {FN(MemcpyHtoDPtds), FN(MemcpyDtoHPtds)})) {
    Fill(m.src, kMiB, 1200);
    std::memset(m.dst, 0, kMiB);
    MUST(g_api.MemcpyHtoDPtds(m.b, m.src, kMiB));
    CUdeviceptr from = m.b;
    if (g_api.MemcpyDtoDPtds != nullptr) {
      MUST(g_api.MemcpyDtoDPtds(m.a + 4096, m.b, kMiB));
      g_ledger.Copy(Dir::kD2D, Host::kNone, kMiB);
      from = m.a + 4096;
    }
    MUST(g_api.MemcpyDtoHPtds(m.dst, from, kMiB));
    g_ledger.Copy(Dir::kH2D, Host::kPageable, kMiB);
    g_ledger.Copy(Dir::kD2H, Host::kPageable, kMiB);
    PrintChecksum("ptds-sync/1048576", m.dst, kMiB);
  }
  if (Have("per-thread-async",
           {FN(MemcpyHtoDAsyncPtsz), FN(MemcpyDtoHAsyncPtsz), FN(StreamSynchronizePtsz)})) {
    Fill(m.src, 64 * kKiB, 1210);
    std::memset(m.dst, 0, 64 * kKiB);
    // Stream 0 of a per-thread entry point is this thread's default stream.
    MUST(g_api.MemcpyHtoDAsyncPtsz(m.a, m.src, 64 * kKiB, nullptr));
    MUST(g_api.MemcpyDtoHAsyncPtsz(m.dst, m.a, 64 * kKiB, nullptr));
    MUST(g_api.StreamSynchronizePtsz(nullptr));
    g_ledger.Copy(Dir::kH2D, Host::kPageable, 64 * kKiB);
    g_ledger.Copy(Dir::kD2H, Host::kPageable, 64 * kKiB);
    PrintChecksum("ptsz-async/65536", m.dst, 64 * kKiB);
  }
}

// cuMemcpy / cuMemcpyAsync: unified addressing, direction from the pointers.
void UnifiedSection(const Buffers& m) {
  if (Have("unified", {FN(Memcpy), FN(MemcpyAsync), FN(StreamSynchronize)})) {
    Fill(m.src, kMiB, 1300);
    std::memset(m.dst, 0, kMiB);
    MUST(g_api.Memcpy(m.a, Addr(m.src), kMiB));
    MUST(g_api.MemcpyAsync(Addr(m.dst), m.a, kMiB, m.stream));
    MUST(g_api.StreamSynchronize(m.stream));
    g_ledger.Copy(Dir::kH2D, Host::kPageable, kMiB);
    g_ledger.Copy(Dir::kD2H, Host::kPageable, kMiB);
    PrintChecksum("unified/1048576", m.dst, kMiB);
  }
  if (Have("unified-per-thread",
           {FN(MemcpyPtds), FN(MemcpyAsyncPtsz), FN(StreamSynchronizePtsz)})) {
    Fill(m.src, 4 * kKiB, 1310);
    std::memset(m.dst, 0, 4 * kKiB);
    MUST(g_api.MemcpyPtds(m.b, Addr(m.src), 4 * kKiB));
    MUST(g_api.MemcpyAsyncPtsz(Addr(m.dst), m.b, 4 * kKiB, nullptr));
    MUST(g_api.StreamSynchronizePtsz(nullptr));
    g_ledger.Copy(Dir::kH2D, Host::kPageable, 4 * kKiB);
    g_ledger.Copy(Dir::kD2H, Host::kPageable, 4 * kKiB);
    PrintChecksum("unified-per-thread/4096", m.dst, 4 * kKiB);
  }
}

void HostAllocSection(const Buffers& m) {
  if (!Have("hostalloc", {FN(MemHostAlloc), FN(MemFreeHost), FN(MemcpyHtoDAsync),
                          FN(MemcpyDtoHAsync), FN(StreamSynchronize)})) {
    return;
  }
  for (unsigned flags = 0; flags < 8; ++flags) {
    // CU_MEMHOSTALLOC_PORTABLE 1, _DEVICEMAP 2, _WRITECOMBINED 4.
    const size_t n = kSizes[flags % 4];
    void* p = nullptr;
    MUST(g_api.MemHostAlloc(&p, n, flags));
    g_ledger.PinAlloc(n);
    if (g_api.MemHostGetFlags != nullptr) {
      unsigned got = 0;
      CUresult rc = g_api.MemHostGetFlags(&got, p);
      std::printf("hostalloc flags=0x%x getflags_rc=%d got=0x%x\n", flags, static_cast<int>(rc),
                  rc == CUDA_SUCCESS ? got : 0u);
    }
    if (g_api.MemHostGetDevicePointer != nullptr) {
      CUdeviceptr dp = 0;
      CUresult rc = g_api.MemHostGetDevicePointer(&dp, p, 0);
      std::printf("hostalloc flags=0x%x devptr_rc=%d devptr_is_hostptr=%d\n", flags,
                  static_cast<int>(rc), rc == CUDA_SUCCESS ? static_cast<int>(dp == Addr(p)) : -1);
    }
    const Host kind = (flags & CU_MEMHOSTALLOC_WRITECOMBINED) ? Host::kPinnedWc : Host::kPinned;
    Fill(p, n, 1400 + flags);
    MUST(g_api.MemcpyHtoDAsync(m.a, p, n, m.stream));
    MUST(g_api.MemcpyDtoHAsync(p, m.a + n / 2, n / 2, m.stream));
    MUST(g_api.StreamSynchronize(m.stream));
    g_ledger.Copy(Dir::kH2D, kind, n);
    g_ledger.Copy(Dir::kD2H, kind, n / 2);
    PrintChecksum(Label("hostalloc/0x%zx/%zu", flags, n), p, n);
    MUST(g_api.MemFreeHost(p));
    g_ledger.PinFree();
  }
}

void AllocHostAnd2DSection(const Buffers& m) {
  if (!Have("allochost", {FN(MemAllocHost), FN(MemFreeHost)})) return;
  void* p = nullptr;
  MUST(g_api.MemAllocHost(&p, kMiB));
  g_ledger.PinAlloc(kMiB);
  Fill(p, kMiB, 1500);
  MUST(g_api.MemcpyHtoD(m.a, p, kMiB));
  MUST(g_api.MemcpyDtoH(Bytes(p) + kMiB / 2, m.a, kMiB / 4));
  g_ledger.Copy(Dir::kH2D, Host::kPinned, kMiB);
  g_ledger.Copy(Dir::kD2H, Host::kPinned, kMiB / 4);
  PrintChecksum("allochost/1048576", p, kMiB);

  if (Have("2d", {FN(Memcpy2D)})) {
    // 1000 x 64 bytes: pinned (pitch 1024) -> device (pitch 1536) -> pageable
    // (pitch 1100).
    const size_t width = 1000, height = 64;
    CUDA_MEMCPY2D c;
    std::memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = p;
    c.srcPitch = 1024;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = m.b;
    c.dstPitch = 1536;
    c.WidthInBytes = width;
    c.Height = height;
    MUST(g_api.Memcpy2D(&c));
    g_ledger.Copy(Dir::kH2D, Host::kPinned, width * height);
    std::memset(m.dst, 0, 1100 * height);
    std::memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = m.b;
    c.srcPitch = 1536;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = m.dst;
    c.dstPitch = 1100;
    c.WidthInBytes = width;
    c.Height = height;
    auto copy_2d = g_api.Memcpy2DPtds != nullptr ? g_api.Memcpy2DPtds : g_api.Memcpy2D;
    MUST(copy_2d(&c));
    g_ledger.Copy(Dir::kD2H, Host::kPageable, width * height);
    PrintChecksum("2d/1000x64", m.dst, 1100 * height);
  }
  MUST(g_api.MemFreeHost(p));
  g_ledger.PinFree();
}

void RegisterSection(const Buffers& m) {
  if (!Have("register", {FN(MemHostRegister), FN(MemHostUnregister)})) return;
  const size_t n = 4 * kMiB;
  void* reg = std::aligned_alloc(4096, n);
  MUST(g_api.MemHostRegister(reg, n, 0));
  g_ledger.Register(n);
  Fill(reg, n, 1600);
  MUST(g_api.MemcpyHtoD(m.a, Bytes(reg) + 8192, kMiB));
  MUST(g_api.MemcpyDtoH(Bytes(reg) + 2 * kMiB, m.a, kMiB));
  g_ledger.Copy(Dir::kH2D, Host::kRegistered, kMiB);
  g_ledger.Copy(Dir::kD2H, Host::kRegistered, kMiB);
  PrintChecksum("registered/4194304", reg, n);

  CUresult rc = g_api.MemHostRegister(reg, n, 0);
  PrintRc("register_twice", rc);
  if (rc != CUDA_SUCCESS) {
    g_ledger.FailedPin(n, /*reaches_driver=*/true);
  } else {
    g_ledger.Register(n);
    MUST(g_api.MemHostUnregister(reg));
    g_ledger.Unregister();
  }
  MUST(g_api.MemHostUnregister(reg));
  g_ledger.Unregister();
  rc = g_api.MemHostUnregister(reg);
  PrintRc("unregister_unregistered", rc);
  if (rc != CUDA_SUCCESS) {
    g_ledger.FailedPin(0, /*reaches_driver=*/true);
  } else {
    g_ledger.Unregister();
  }
  // Pageable again.
  Fill(reg, 64 * kKiB, 1610);
  MUST(g_api.MemcpyHtoD(m.a, reg, 64 * kKiB));
  MUST(g_api.MemcpyDtoH(Bytes(reg) + kMiB, m.a, 64 * kKiB));
  g_ledger.Copy(Dir::kH2D, Host::kPageable, 64 * kKiB);
  g_ledger.Copy(Dir::kD2H, Host::kPageable, 64 * kKiB);
  PrintChecksum("unregistered/65536", Bytes(reg) + kMiB, 64 * kKiB);
  std::free(reg);
}

void InvalidCallsSection(const Buffers& m) {
  CUresult rc = g_api.MemcpyHtoD(m.a, nullptr, 4 * kKiB);
  PrintRc("memcpy_null_source", rc);
  if (rc != CUDA_SUCCESS) {
    g_ledger.FailedCopy(4 * kKiB, /*reaches_driver=*/true);
  } else {
    g_ledger.Copy(Dir::kH2D, Host::kPageable, 4 * kKiB);
  }
  // Past the end of a 4 KiB device allocation, into a large host buffer.
  rc = g_api.MemcpyDtoH(m.dst, m.small, 64 * kKiB);
  PrintRc("memcpy_past_end", rc);
  if (rc != CUDA_SUCCESS) {
    g_ledger.FailedCopy(64 * kKiB, /*reaches_driver=*/true);
  } else {
    g_ledger.Copy(Dir::kD2H, Host::kPageable, 64 * kKiB);
  }
  if (g_api.MemFreeHost != nullptr) {
    void* not_pinned = std::malloc(64 * kKiB);
    rc = g_api.MemFreeHost(not_pinned);
    PrintRc("freehost_of_malloc", rc);
    if (rc != CUDA_SUCCESS) {
      g_ledger.FailedPin(0, /*reaches_driver=*/true);
      std::free(not_pinned);
    } else {
      g_ledger.PinFree();
    }
  }
}

}  // namespace

int main() {
  auto init = Resolve();
  if (init == nullptr) {
    std::printf("FATAL cuInit unavailable\n");
    return 3;
  }
  MUST(init(0));
  if (!Have("core", {FN(DeviceGet), FN(PrimaryCtxRetain), FN(CtxSetCurrent), FN(MemAlloc),
                     FN(MemFree), FN(MemcpyHtoD), FN(MemcpyDtoH)})) {
    return 3;
  }
  CUdevice dev = 0;
  MUST(g_api.DeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  MUST(g_api.PrimaryCtxRetain(&ctx, dev));
  MUST(g_api.CtxSetCurrent(ctx));

  Buffers m;
  MUST(g_api.MemAlloc(&m.a, kBig));
  MUST(g_api.MemAlloc(&m.b, kBig));
  MUST(g_api.MemAlloc(&m.small, 4 * kKiB));
  m.src = static_cast<unsigned char*>(std::malloc(kBig));
  m.dst = static_cast<unsigned char*>(std::malloc(kBig));
  if (g_api.StreamCreate != nullptr) {
    MUST(g_api.StreamCreate(&m.stream, CU_STREAM_NON_BLOCKING));
  }

  SyncSection(m);
  if (m.stream != nullptr) {
    AsyncSection(m);
    UnifiedSection(m);
    HostAllocSection(m);
  }
  PerThreadSection(m);
  AllocHostAnd2DSection(m);
  RegisterSection(m);
  InvalidCallsSection(m);
  if (g_api.CtxSynchronize != nullptr) MUST(g_api.CtxSynchronize());

  std::printf("%s\n", g_ledger.ExpectLine().c_str());
  if (m.stream != nullptr && g_api.StreamDestroy != nullptr) {
    MUST(g_api.StreamDestroy(m.stream));
  }
  MUST(g_api.MemFree(m.small));
  MUST(g_api.MemFree(m.b));
  MUST(g_api.MemFree(m.a));
  if (g_api.PrimaryCtxRelease != nullptr) MUST(g_api.PrimaryCtxRelease(dev));
  std::free(m.dst);
  std::free(m.src);
  std::printf("driver_program done\n");
  return 0;
}
