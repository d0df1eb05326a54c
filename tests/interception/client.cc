// A driver-API program that reaches the driver exactly as the CUDA runtime
// does: dlopen("libcuda.so.1"), one dlsym of "cuGetProcAddress_v2", then
// cuGetProcAddress_v2 for "cuGetProcAddress" itself and every other lookup
// through that. It knows every call it makes and prints them on an
// "expect:" line, and prints checksums and return codes so runs with and
// without pinshim can be compared byte for byte.
//
// Usage: interception_client SCENARIO   (see main() for the scenarios)
#include <cuda.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Driver {
  CUresult (*Init)(unsigned int);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*CtxCreate)(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*DevicePrimaryCtxReset)(CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxDestroy)(CUcontext);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*Memcpy2D)(const CUDA_MEMCPY2D*);
  CUresult (*Memcpy3D)(const CUDA_MEMCPY3D*);
  CUresult (*MemcpyBatchAsync)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*,
                               size_t*, size_t, CUstream);
  CUresult (*MemHostAlloc)(void**, size_t, unsigned int);
  CUresult (*MemAllocHost)(void**, size_t);
  CUresult (*MemFreeHost)(void*);
  CUresult (*MemHostRegister)(void*, size_t, unsigned int);
  CUresult (*MemHostUnregister)(void*);
  CUresult (*MemHostGetFlags)(unsigned int*, void*);
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned int);
  CUresult (*StreamCreate)(CUstream*, unsigned int);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*CtxSynchronize)();
  CUresult (*CtxGetCurrent)(CUcontext*);
  // Host memory of the VMM API and of host memory pools.
  CUresult (*MemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*,
                                          CUmemAllocationGranularity_flags);
  CUresult (*MemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                        unsigned long long);
  CUresult (*MemRelease)(CUmemGenericAllocationHandle);
  CUresult (*MemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*MemAddressFree)(CUdeviceptr, size_t);
  CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*MemUnmap)(CUdeviceptr, size_t);
  CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*MemPoolCreate)(CUmemoryPool*, const CUmemPoolProps*);
  CUresult (*MemPoolSetAccess)(CUmemoryPool, const CUmemAccessDesc*, size_t);
  CUresult (*MemPoolDestroy)(CUmemoryPool);
  CUresult (*MemAllocFromPoolAsync)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
};

struct Expect {
  std::atomic<long> h2d{0}, d2h{0}, h2h{0}, d2d{0}, allocs{0}, frees{0}, regs{0}, unregs{0};
  void Print() const {
    printf(
        "expect: copies=%ld h2d=%ld d2h=%ld h2h=%ld d2d=%ld pin_allocs=%ld pin_frees=%ld "
        "registers=%ld unregisters=%ld\n",
        h2d + d2h + h2h + d2d, h2d.load(), d2h.load(), h2h.load(), d2d.load(), allocs.load(),
        frees.load(), regs.load(), unregs.load());
  }
};

Expect g_expect;
Driver d;
void* g_libcuda = nullptr;  // the driver library, as the program opened it
GetProc g_get = nullptr;    // the cuGetProcAddress the runtime would use

#define CHECK(call)                                                         \
  do {                                                                      \
    CUresult rc_ = (call);                                                  \
    if (rc_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, rc_); \
      exit(3);                                                              \
    }                                                                       \
  } while (0)

template <typename T>
void Lookup(GetProc get, const char* name, int version, cuuint64_t flags, T* out) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  CUresult rc = get(name, &fn, version, flags, &status);
  if (rc != CUDA_SUCCESS || fn == nullptr) {
    fprintf(stderr, "lookup of %s failed: %d\n", name, rc);
    exit(4);
  }
  *out = reinterpret_cast<T>(fn);
}

void LoadDriver(cuuint64_t flags) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
    exit(2);
  }
  auto first = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (first == nullptr) exit(2);
  // The runtime's sequence: cuInit through the first pointer, then the
  // getter itself, then everything else through the getter it got back.
  Lookup(first, "cuInit", 2000, 0, &d.Init);
  CHECK(d.Init(0));
  GetProc get = nullptr;
  Lookup(first, "cuGetProcAddress", 12000, 0, &get);
  g_libcuda = lib;
  g_get = get;
  Lookup(get, "cuDeviceGet", 2000, 0, &d.DeviceGet);
  Lookup(get, "cuDevicePrimaryCtxRetain", 7000, 0, &d.DevicePrimaryCtxRetain);
  Lookup(get, "cuCtxSetCurrent", 4000, 0, &d.CtxSetCurrent);
  Lookup(get, "cuMemAlloc", 3020, 0, &d.MemAlloc);
  Lookup(get, "cuMemFree", 3020, 0, &d.MemFree);
  Lookup(get, "cuMemcpyHtoD", flags ? 7000 : 3020, flags, &d.MemcpyHtoD);
  Lookup(get, "cuMemcpyDtoH", flags ? 7000 : 3020, flags, &d.MemcpyDtoH);
  Lookup(get, "cuMemcpyHtoDAsync", flags ? 7000 : 3020, flags, &d.MemcpyHtoDAsync);
  Lookup(get, "cuMemcpyDtoHAsync", flags ? 7000 : 3020, flags, &d.MemcpyDtoHAsync);
  Lookup(get, "cuMemcpy", flags ? 7000 : 4000, flags, &d.Memcpy);
  Lookup(get, "cuMemcpyDtoD", flags ? 7000 : 3020, flags, &d.MemcpyDtoD);
  Lookup(get, "cuMemcpyAsync", flags ? 7000 : 4000, flags, &d.MemcpyAsync);
  Lookup(get, "cuMemcpy2D", flags ? 7000 : 3020, flags, &d.Memcpy2D);
  Lookup(get, "cuMemcpy3D", flags ? 7000 : 3020, flags, &d.Memcpy3D);
  Lookup(get, "cuMemcpyBatchAsync", 13000, flags, &d.MemcpyBatchAsync);
  Lookup(get, "cuMemHostAlloc", 2020, 0, &d.MemHostAlloc);
  Lookup(get, "cuMemAllocHost", 3020, 0, &d.MemAllocHost);
  Lookup(get, "cuMemFreeHost", 2000, 0, &d.MemFreeHost);
  Lookup(get, "cuMemHostRegister", 6050, 0, &d.MemHostRegister);
  Lookup(get, "cuMemHostUnregister", 4000, 0, &d.MemHostUnregister);
  Lookup(get, "cuMemHostGetFlags", 2030, 0, &d.MemHostGetFlags);
  Lookup(get, "cuMemHostGetDevicePointer", 3020, 0, &d.MemHostGetDevicePointer);
  Lookup(get, "cuStreamCreate", 2000, 0, &d.StreamCreate);
  Lookup(get, "cuStreamSynchronize", flags ? 7000 : 2000, flags, &d.StreamSynchronize);
  Lookup(get, "cuStreamDestroy", 4000, 0, &d.StreamDestroy);
  Lookup(get, "cuCtxSynchronize", 2000, 0, &d.CtxSynchronize);
  Lookup(get, "cuMemGetAllocationGranularity", 10020, 0, &d.MemGetAllocationGranularity);
  Lookup(get, "cuMemCreate", 10020, 0, &d.MemCreate);
  Lookup(get, "cuMemRelease", 10020, 0, &d.MemRelease);
  Lookup(get, "cuMemAddressReserve", 10020, 0, &d.MemAddressReserve);
  Lookup(get, "cuMemAddressFree", 10020, 0, &d.MemAddressFree);
  Lookup(get, "cuMemMap", 10020, 0, &d.MemMap);
  Lookup(get, "cuMemUnmap", 10020, 0, &d.MemUnmap);
  Lookup(get, "cuMemSetAccess", 10020, 0, &d.MemSetAccess);
  Lookup(get, "cuMemPoolCreate", 11020, 0, &d.MemPoolCreate);
  Lookup(get, "cuMemPoolSetAccess", 11020, 0, &d.MemPoolSetAccess);
  Lookup(get, "cuMemPoolDestroy", 11020, 0, &d.MemPoolDestroy);
  Lookup(get, "cuMemAllocFromPoolAsync", 11020, flags, &d.MemAllocFromPoolAsync);
  Lookup(get, "cuMemFreeAsync", 11020, flags, &d.MemFreeAsync);
  CUdevice dev;
  CUcontext ctx;
  CHECK(d.DeviceGet(&dev, 0));
  CHECK(d.DevicePrimaryCtxRetain(&ctx, dev));
  CHECK(d.CtxSetCurrent(ctx));
}

unsigned long Checksum(const void* p, size_t n) {
  auto b = static_cast<const unsigned char*>(p);
  unsigned long h = 1469598103934665603ul;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ul;
  return h;
}

void Fill(void* p, size_t n, unsigned seed) {
  auto b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * 131 + seed);
}

// Every copy form and every kind of host memory, once or a few times each.
void Basic() {
  const size_t kMiB = 1 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, 16 * kMiB));
  CUstream stream;
  CHECK(d.StreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  // Pageable: a tracked malloc buffer, copied there and back three times.
  char* pageable = static_cast<char*>(malloc(kMiB));
  char* back = static_cast<char*>(malloc(kMiB));
  for (int i = 0; i < 3; ++i) {
    Fill(pageable, kMiB, i);
    CHECK(d.MemcpyHtoD(dev, pageable, kMiB));
    g_expect.h2d++;
    memset(back, 0, kMiB);
    CHECK(d.MemcpyDtoH(back, dev, kMiB));
    g_expect.d2h++;
    printf("pageable round %d: %lx\n", i, Checksum(back, kMiB));
  }

  // Pinned by the program, each flag combination, async on a stream.
  const unsigned kFlags[] = {0, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_DEVICEMAP,
                             CU_MEMHOSTALLOC_WRITECOMBINED};
  for (unsigned flags : kFlags) {
    void* pinned = nullptr;
    CHECK(d.MemHostAlloc(&pinned, kMiB, flags));
    g_expect.allocs++;
    unsigned got = 0;
    CHECK(d.MemHostGetFlags(&got, pinned));
    CUdeviceptr mapped = 0;
    CUresult mrc = d.MemHostGetDevicePointer(&mapped, pinned, 0);
    printf("pinned flags %u -> getflags %u, devptr rc %d same=%d\n", flags, got, mrc,
           mapped == reinterpret_cast<CUdeviceptr>(pinned));
    Fill(pinned, kMiB, flags);
    CHECK(d.MemcpyHtoDAsync(dev, pinned, kMiB, stream));
    g_expect.h2d++;
    CHECK(d.StreamSynchronize(stream));
    CHECK(d.MemcpyDtoHAsync(back, dev, kMiB, stream));
    g_expect.d2h++;
    CHECK(d.StreamSynchronize(stream));
    printf("pinned %u: %lx\n", flags, Checksum(back, kMiB));
    CHECK(d.MemFreeHost(pinned));
    g_expect.frees++;
  }
  void* host2 = nullptr;
  CHECK(d.MemAllocHost(&host2, 2 * kMiB));
  g_expect.allocs++;

  // Registered by the program.
  char* reg = static_cast<char*>(aligned_alloc(4096, 4 * kMiB));
  Fill(reg, 4 * kMiB, 7);
  CHECK(d.MemHostRegister(reg, 4 * kMiB, CU_MEMHOSTREGISTER_PORTABLE));
  g_expect.regs++;
  CHECK(d.MemcpyHtoD(dev, reg, 4 * kMiB));
  g_expect.h2d++;
  CHECK(d.MemHostUnregister(reg));
  g_expect.unregs++;

  // Generic copies in every direction (unified addressing).
  CHECK(d.Memcpy(dev, reinterpret_cast<CUdeviceptr>(pageable), kMiB));
  g_expect.h2d++;
  CHECK(d.Memcpy(reinterpret_cast<CUdeviceptr>(host2), dev, kMiB));
  g_expect.d2h++;
  CHECK(d.Memcpy(reinterpret_cast<CUdeviceptr>(back), reinterpret_cast<CUdeviceptr>(host2), kMiB));
  g_expect.h2h++;
  CHECK(d.Memcpy(dev + 8 * kMiB, dev, kMiB));
  g_expect.d2d++;
  CHECK(d.MemcpyDtoD(dev + 4 * kMiB, dev, kMiB));
  g_expect.d2d++;
  CHECK(d.MemcpyAsync(dev, reinterpret_cast<CUdeviceptr>(host2), kMiB, stream));
  g_expect.h2d++;
  CHECK(d.StreamSynchronize(stream));
  printf("generic: %lx\n", Checksum(back, kMiB));

  // 2D and 3D.
  CUDA_MEMCPY2D c2{};
  c2.srcMemoryType = CU_MEMORYTYPE_HOST;
  c2.srcHost = pageable;
  c2.srcPitch = 1024;
  c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.dstDevice = dev;
  c2.dstPitch = 2048;
  c2.WidthInBytes = 1000;
  c2.Height = 256;
  CHECK(d.Memcpy2D(&c2));
  g_expect.h2d++;
  CUDA_MEMCPY3D c3{};
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.srcDevice = dev;
  c3.srcPitch = 2048;
  c3.srcHeight = 16;
  c3.dstMemoryType = CU_MEMORYTYPE_HOST;
  c3.dstHost = back;
  c3.dstPitch = 1024;
  c3.dstHeight = 16;
  c3.WidthInBytes = 1000;
  c3.Height = 16;
  c3.Depth = 8;
  memset(back, 0, kMiB);
  CHECK(d.Memcpy3D(&c3));
  g_expect.d2h++;
  printf("3d: %lx\n", Checksum(back, kMiB));

  // A batch of host-to-device copies counts as one call.
  CUdeviceptr dsts[2] = {dev, dev + kMiB};
  CUdeviceptr srcs[2] = {reinterpret_cast<CUdeviceptr>(host2),
                         reinterpret_cast<CUdeviceptr>(host2) + kMiB};
  size_t sizes[2] = {kMiB, kMiB};
  CUmemcpyAttributes attr{};
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t attr_idx = 0;
  CHECK(d.MemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &attr_idx, 1, stream));
  g_expect.h2d++;
  CHECK(d.StreamSynchronize(stream));

  CHECK(d.MemFreeHost(host2));
  g_expect.frees++;
  free(reg);
  free(pageable);
  free(back);
  CHECK(d.StreamDestroy(stream));
  CHECK(d.MemFree(dev));
}

// Invalid calls: their return codes must be the driver's own.
void Invalid() {
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, 4096));
  char* p = static_cast<char*>(malloc(1 << 20));
  void* pinned = nullptr;
  printf("htod null src: %d\n", d.MemcpyHtoD(dev, nullptr, 16));
  g_expect.h2d++;
  printf("htod past end: %d\n", d.MemcpyHtoD(dev, p, 8192));
  g_expect.h2d++;
  printf("freehost of malloc: %d\n", d.MemFreeHost(p));
  g_expect.frees++;
  printf("unregister unregistered: %d\n", d.MemHostUnregister(p));
  g_expect.unregs++;
  printf("register: %d\n", d.MemHostRegister(p, 1 << 20, 0));
  g_expect.regs++;
  printf("register twice: %d\n", d.MemHostRegister(p, 1 << 20, 0));
  g_expect.regs++;
  printf("unregister: %d\n", d.MemHostUnregister(p));
  g_expect.unregs++;
  printf("hostalloc null out: %d\n", d.MemHostAlloc(nullptr, 4096, 0));
  g_expect.allocs++;
  printf("hostalloc: %d\n", d.MemHostAlloc(&pinned, 4096, 0));
  g_expect.allocs++;
  printf("freehost: %d\n", d.MemFreeHost(pinned));
  g_expect.frees++;
  printf("freehost twice: %d\n", d.MemFreeHost(pinned));
  g_expect.frees++;
  unsigned flags = 0;
  printf("getflags of malloc: %d\n", d.MemHostGetFlags(&flags, p));
  free(p);
  CHECK(d.MemFree(dev));
}

// 16 threads copying and allocating at once.
void Threads() {
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([t] {
      CUdevice dev;
      CUcontext ctx;
      CHECK(d.DeviceGet(&dev, 0));
      CHECK(d.DevicePrimaryCtxRetain(&ctx, dev));
      CHECK(d.CtxSetCurrent(ctx));
      CUdeviceptr buf;
      CHECK(d.MemAlloc(&buf, 256 * 1024));
      for (int i = 0; i < 50; ++i) {
        size_t n = (64 + (t * 7 + i) % 192) * 1024;
        char* h = static_cast<char*>(malloc(n));
        Fill(h, n, t + i);
        CHECK(d.MemcpyHtoD(buf, h, n));
        g_expect.h2d++;
        void* pinned;
        CHECK(d.MemHostAlloc(&pinned, n, 0));
        g_expect.allocs++;
        CHECK(d.MemcpyDtoH(pinned, buf, n));
        g_expect.d2h++;
        if (memcmp(pinned, h, n) != 0) {
          fprintf(stderr, "thread %d: data mismatch\n", t);
          exit(5);
        }
        CHECK(d.MemFreeHost(pinned));
        g_expect.frees++;
        free(h);
      }
      CHECK(d.MemFree(buf));
    });
  }
  for (auto& t : threads) t.join();
  printf("threads done\n");
}

void RoundTrip(const char* label, size_t n = 1 << 20) {
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  char* h = static_cast<char*>(malloc(n));
  Fill(h, n, 3);
  CHECK(d.MemcpyHtoD(dev, h, n));
  g_expect.h2d++;
  memset(h, 0, n);
  CHECK(d.MemcpyDtoH(h, dev, n));
  g_expect.d2h++;
  printf("%s: %lx\n", label, Checksum(h, n));
  free(h);
  CHECK(d.MemFree(dev));
}

// One mapping of the kind named, copied hot both ways (optimize mode would
// pin a private anonymous one in place; the others never): private, shared
// (anonymous), memfd (a shared file mapping), memfd_validate (the same with
// MAP_SHARED_VALIDATE, whose type field has MAP_PRIVATE's bit set; the
// kernel takes it for files only), file_private (a private file mapping),
// readonly (a private anonymous one mapped read-only first).
void Mapping(const char* kind) {
  const size_t n = 4 << 20;
  int fd = -1;
  int flags = MAP_ANONYMOUS | MAP_PRIVATE;
  int prot = PROT_READ | PROT_WRITE;
  if (strcmp(kind, "shared") == 0) {
    flags = MAP_ANONYMOUS | MAP_SHARED;
  } else if (strncmp(kind, "memfd", 5) == 0 || strcmp(kind, "file_private") == 0) {
    fd = memfd_create("pinshim-client", 0);
    if (fd < 0 || ftruncate(fd, n) != 0) exit(4);
    flags = strcmp(kind, "memfd") == 0            ? MAP_SHARED
            : strcmp(kind, "memfd_validate") == 0 ? MAP_SHARED_VALIDATE
                                                  : MAP_PRIVATE;
  } else if (strcmp(kind, "readonly") == 0) {
    prot = PROT_READ;
  } else if (strcmp(kind, "private") != 0) {
    exit(4);
  }
  char* buf = static_cast<char*>(mmap(nullptr, n, prot, flags, fd, 0));
  if (buf == MAP_FAILED) exit(4);
  if (prot == PROT_READ && mprotect(buf, n, PROT_READ | PROT_WRITE) != 0) exit(4);
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  std::vector<char> back(n);
  for (int i = 0; i < 8; ++i) {
    Fill(buf, n, 40 + i);
    CHECK(d.MemcpyHtoD(dev, buf, n));
    g_expect.h2d++;
    memset(buf, 0, n);
    CHECK(d.MemcpyDtoH(buf, dev, n));
    g_expect.d2h++;
    printf("%s %d: %lx\n", kind, i, Checksum(buf, n));
  }
  CHECK(d.MemFree(dev));
  munmap(buf, n);
  if (fd >= 0) close(fd);
}

// One allocation site, for the capture scenario's "site" buffers: its first
// buffers are copied hot, so optimize mode serves the later ones from its
// pinned arena.
__attribute__((noinline)) char* CaptureSiteAlloc(size_t n) {
  char* p = static_cast<char*>(malloc(n));
  asm volatile("" ::: "memory");  // a distinct return address
  return p;
}

// Copies p to dev and back six times, new bytes each time: what makes a
// buffer hot (the registration cache pins it; its allocation site turns hot).
void CopyHot(CUdeviceptr dev, char* p, size_t n) {
  for (int i = 0; i < 6; ++i) {
    Fill(p, n, i);
    CHECK(d.MemcpyHtoD(dev, p, n));
    g_expect.h2d++;
    CHECK(d.MemcpyDtoH(p, dev, n));
    g_expect.d2h++;
  }
}

// The capture and graph calls the capture scenarios make, from the driver.
struct GraphCalls {
  CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*begin)(CUstream, CUstreamCaptureMode);
  CUresult (*end)(CUstream, CUgraph*);
  CUresult (*instantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*launch)(CUgraphExec, CUstream);
};

GraphCalls LoadGraphCalls() {
  auto sym = [](const char* name) {
    void* f = dlsym(g_libcuda, name);
    if (f == nullptr) exit(4);
    return f;
  };
  GraphCalls g;
  g.memset_d8 = reinterpret_cast<decltype(g.memset_d8)>(sym("cuMemsetD8_v2"));
  g.begin = reinterpret_cast<decltype(g.begin)>(sym("cuStreamBeginCapture_v2"));
  g.end = reinterpret_cast<decltype(g.end)>(sym("cuStreamEndCapture"));
  g.instantiate = reinterpret_cast<decltype(g.instantiate)>(sym("cuGraphInstantiateWithFlags"));
  g.launch = reinterpret_cast<decltype(g.launch)>(sym("cuGraphLaunch"));
  return g;
}

// A copy (h2d or d2h, 8 MiB) on a stream that captures, from host memory
// of one kind: "plain" (a fresh pageable buffer, which staging would take),
// "hot" (a malloc'd buffer copied hot first: the registration cache pins it)
// or "site" (from an allocation site copied hot first: the arena serves it).
// Prints the driver's answer, the capture's end and, if a graph came out,
// what its launch copies.
void Capture(bool h2d, const char* kind) {
  const size_t n = 8 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  CUstream s;
  CHECK(d.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  char* host = nullptr;
  if (strcmp(kind, "hot") == 0) {
    host = static_cast<char*>(malloc(n));
    CopyHot(dev, host, n);
  } else if (strcmp(kind, "site") == 0) {
    // One call site for all (its frames are the site): the last is kept.
    for (int round = 0; round < 4; ++round) {
      char* p = CaptureSiteAlloc(n);
      if (round == 3) {
        host = p;
        break;
      }
      CopyHot(dev, p, n);
      free(p);
    }
  } else {
    std::vector<char> warm(n, 1);
    CopyHot(dev, warm.data(), n);  // staging's ring, made
    host = static_cast<char*>(malloc(n));
  }
  memset(host, 2, n);
  const GraphCalls g = LoadGraphCalls();
  CHECK(g.memset_d8(dev, 3, n));
  CHECK(d.CtxSynchronize());
  CHECK(g.begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const CUresult r = h2d ? d.MemcpyHtoDAsync(dev, host, n, s) : d.MemcpyDtoHAsync(host, dev, n, s);
  (h2d ? g_expect.h2d : g_expect.d2h)++;
  CUgraph graph = nullptr;
  const CUresult e = g.end(s, &graph);
  printf("capture %s %s: copy=%d end=%d graph=%d\n", h2d ? "h2d" : "d2h", kind, r, e,
         graph != nullptr);
  if (graph != nullptr) {
    CUgraphExec exec = nullptr;
    CHECK(g.instantiate(&exec, graph, 0));
    memset(host, 4, n);  // what a launch copies now
    CHECK(g.memset_d8(dev, 5, n));
    CHECK(d.CtxSynchronize());  // the memset's legacy stream, which s does not wait for
    CHECK(g.launch(exec, s));
    CHECK(d.StreamSynchronize(s));
    std::vector<char> dev_back(n);
    CHECK(d.MemcpyDtoH(dev_back.data(), dev, n));
    g_expect.d2h++;
    printf("after launch: device %d host %d\n", dev_back[0], host[0]);
  }
  // The buffer goes on being used as before.
  CopyHot(dev, host, n);
  printf("after capture: %lx\n", Checksum(host, n));
  free(host);
  CHECK(d.MemFree(dev));
}

// While the main thread captures a stream in global mode, a second thread
// (in global mode, every thread's default) does what needs no driver call
// without pinshim, but makes optimize mode call the driver: it takes a
// buffer from a hot allocation site (the arena serves it), frees a buffer
// the registration cache pinned, drops the pages of another (madvise) and
// unmaps a third. On the H200 a thread in global mode that registers,
// unregisters, allocates or frees pinned memory during another thread's
// global-mode capture invalidates it (bench/RESULTS.md). Prints the
// capture's end and what the graph's launch copied.
void CaptureNeighbour() {
  const size_t n = 8 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  CUstream s;
  CHECK(d.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto map = [&] {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(5);
    return static_cast<char*>(p);
  };
  char* freed = static_cast<char*>(malloc(n));
  CopyHot(dev, freed, n);
  char* advised = map();
  CopyHot(dev, advised, n);
  char* unmapped = map();
  CopyHot(dev, unmapped, n);
  for (int round = 0; round < 3; ++round) {
    char* p = CaptureSiteAlloc(n);
    CopyHot(dev, p, n);
    free(p);
  }
  void* pinned;
  CHECK(d.MemHostAlloc(&pinned, n, 0));
  g_expect.allocs++;
  memset(pinned, 6, n);
  const GraphCalls g = LoadGraphCalls();
  CHECK(g.begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK(d.MemcpyHtoDAsync(dev, pinned, n, s));
  g_expect.h2d++;
  unsigned long site_sum = 0;
  std::thread neighbour([&] {
    char* a = CaptureSiteAlloc(n);
    Fill(a, n, 7);
    site_sum = Checksum(a, n);
    free(a);
    free(freed);
    madvise(advised, n, MADV_DONTNEED);
    munmap(unmapped, n);
  });
  neighbour.join();
  CUgraph graph = nullptr;
  const CUresult e = g.end(s, &graph);
  printf("capture neighbour: end=%d graph=%d site=%lx\n", e, graph != nullptr, site_sum);
  if (graph != nullptr) {
    CUgraphExec exec = nullptr;
    CHECK(g.instantiate(&exec, graph, 0));
    CHECK(g.launch(exec, s));
    CHECK(d.StreamSynchronize(s));
    std::vector<char> back(n);
    CHECK(d.MemcpyDtoH(back.data(), dev, n));
    g_expect.d2h++;
    printf("after launch: device %d\n", back[n - 1]);
  }
  printf("advised: %lx\n", Checksum(advised, n));
  munmap(advised, n);
  CHECK(d.MemFreeHost(pinned));
  g_expect.frees++;
  CHECK(d.MemFree(dev));
}

// Pins past a budget (run with PINSHIM_MODE=enforce PINSHIM_BUDGET=2M):
// prints each call's result, and whether memory handed out still copies.
void Budget() {
  const size_t kMiB = 1 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, 8 * kMiB));
  void* small = nullptr;
  printf("alloc 1M: %d\n", d.MemHostAlloc(&small, kMiB, 0));
  g_expect.allocs++;
  void* big = nullptr;
  CUresult rc = d.MemHostAlloc(&big, 4 * kMiB, CU_MEMHOSTALLOC_PORTABLE);
  g_expect.allocs++;
  printf("alloc 4M: %d\n", rc);
  if (rc == CUDA_SUCCESS) {
    Fill(big, 4 * kMiB, 9);
    unsigned long before = Checksum(big, 4 * kMiB);
    CHECK(d.MemcpyHtoD(dev, big, 4 * kMiB));
    g_expect.h2d++;
    memset(big, 0, 4 * kMiB);
    CHECK(d.MemcpyDtoH(big, dev, 4 * kMiB));
    g_expect.d2h++;
    printf("4M round trip intact: %d\n", Checksum(big, 4 * kMiB) == before);
    unsigned flags = 0;
    CUdeviceptr mapped = 0;
    printf("4M getflags: %d\n", d.MemHostGetFlags(&flags, big));
    printf("4M devptr: %d\n", d.MemHostGetDevicePointer(&mapped, big, 0));
    printf("free 4M: %d\n", d.MemFreeHost(big));
    g_expect.frees++;
  }
  char* pageable = static_cast<char*>(aligned_alloc(4096, 4 * kMiB));
  rc = d.MemHostRegister(pageable, 4 * kMiB, 0);
  g_expect.regs++;
  printf("register 4M: %d\n", rc);
  if (rc == CUDA_SUCCESS) {
    Fill(pageable, 4 * kMiB, 5);
    CHECK(d.MemcpyHtoD(dev, pageable, 4 * kMiB));
    g_expect.h2d++;
    printf("unregister 4M: %d\n", d.MemHostUnregister(pageable));
    g_expect.unregs++;
  }
  printf("free 1M: %d\n", d.MemFreeHost(small));
  g_expect.frees++;
  // With the 1M freed, 2M fits again.
  void* again = nullptr;
  printf("alloc 2M after free: %d\n", d.MemHostAlloc(&again, 2 * kMiB, 0));
  g_expect.allocs++;
  if (again != nullptr) {
    CHECK(d.MemFreeHost(again));
    g_expect.frees++;
  }
  free(pageable);
  CHECK(d.MemFree(dev));
}

// A reused pageable buffer (what optimize mode pins in place), freed and
// allocated again at the same size, and async copies on it: the contents
// must be what the pageable copies would have produced.
// A new buffer per step, as programs move their batches: malloc, fill,
// upload, free; malloc, download on a stream, free. For optimize mode's
// self-check (the test makes one path slow on purpose).
void Fresh() {
  const size_t n = 4 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  // A blocking stream: its download waits for the upload's DMA, which a
  // synchronous pageable upload may leave queued on the legacy stream.
  CUstream stream;
  CHECK(d.StreamCreate(&stream, 0));
  unsigned long sum = 0;
  for (int step = 0; step < 200; ++step) {
    char* up = static_cast<char*>(malloc(n));
    Fill(up, n, step);
    CHECK(d.MemcpyHtoD(dev, up, n));
    g_expect.h2d++;
    free(up);
    char* down = static_cast<char*>(malloc(n));
    CHECK(d.MemcpyDtoHAsync(down, dev, n, stream));
    CHECK(d.StreamSynchronize(stream));
    g_expect.d2h++;
    sum = sum * 31 + Checksum(down, n);
    free(down);
    if (step % 50 == 49) printf("fresh %d: %lx\n", step, sum);
  }
  CHECK(d.StreamDestroy(stream));
  CHECK(d.MemFree(dev));
}

void Hot() {
  const size_t n = 16 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  CUstream stream;
  CHECK(d.StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int round = 0; round < 3; ++round) {
    char* buf = static_cast<char*>(malloc(n));
    char* back = static_cast<char*>(malloc(n));
    for (int i = 0; i < 8; ++i) {
      Fill(buf, n, round * 16 + i);
      CHECK(d.MemcpyHtoD(dev, buf, n));
      g_expect.h2d++;
      // Overwritten right after an async copy returns: legal with pageable
      // memory, whose async copies are synchronous.
      CHECK(d.MemcpyHtoDAsync(dev, buf, n, stream));
      g_expect.h2d++;
      memset(buf, 0xAB, n);
      CHECK(d.MemcpyDtoHAsync(back, dev, n, stream));
      g_expect.d2h++;
      // Read right after the async copy returns, without synchronizing.
      printf("hot %d.%d: %lx\n", round, i, Checksum(back, 4096));
    }
    free(back);
    free(buf);
  }
  // Pinned allocations served from the pool: flags and device pointers answer
  // as for a dedicated allocation, and memory is reused only when safe.
  for (int i = 0; i < 20; ++i) {
    void* p = nullptr;
    CHECK(d.MemHostAlloc(&p, (i % 4 + 1) << 20, i % 2 ? CU_MEMHOSTALLOC_PORTABLE : 0));
    g_expect.allocs++;
    unsigned flags = 0;
    CHECK(d.MemHostGetFlags(&flags, p));
    CUdeviceptr mapped = 0;
    CHECK(d.MemHostGetDevicePointer(&mapped, p, 0));
    Fill(p, 1 << 20, i);
    CHECK(d.MemcpyHtoDAsync(dev, p, 1 << 20, stream));
    g_expect.h2d++;
    CHECK(d.MemFreeHost(p));
    g_expect.frees++;
    CHECK(d.StreamSynchronize(stream));
    void* check = malloc(1 << 20);
    CHECK(d.MemcpyDtoH(check, dev, 1 << 20));
    g_expect.d2h++;
    printf("pool %d: flags %u mapped-same %d data %lx\n", i, flags,
           mapped == reinterpret_cast<CUdeviceptr>(p), Checksum(check, 1 << 20));
    free(check);
  }
  CHECK(d.StreamDestroy(stream));
  CHECK(d.MemFree(dev));
}

// Pins, frees (optimize mode's pool keeps the memory pinned), then asks
// for more than the budget allows next to what the pool still holds: the
// evict policy gives the pool's idle memory back; deny refuses.
void Evict() {
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    void* p = nullptr;
    CHECK(d.MemHostAlloc(&p, 4 << 20, 0));
    g_expect.allocs++;
    blocks.push_back(p);
  }
  for (void* p : blocks) {
    CHECK(d.MemFreeHost(p));
    g_expect.frees++;
  }
  void* big = nullptr;
  CUresult rc = d.MemHostAlloc(&big, 16 << 20, 0);
  g_expect.allocs++;
  printf("alloc 16M after freeing 32M: %d\n", rc);
  if (rc == CUDA_SUCCESS) {
    CHECK(d.MemFreeHost(big));
    g_expect.frees++;
  }
}

// Reads write-combined pinned memory from the CPU (the wc-read misuse): the
// results land in WC memory by a copy from the device, then the CPU reads them.
void WcRead() {
  const size_t n = 1 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  char* src = static_cast<char*>(malloc(n));
  Fill(src, n, 11);
  CHECK(d.MemcpyHtoD(dev, src, n));
  g_expect.h2d++;
  void* wc = nullptr;
  CHECK(d.MemHostAlloc(&wc, n, CU_MEMHOSTALLOC_WRITECOMBINED));
  g_expect.allocs++;
  CHECK(d.MemcpyDtoH(wc, dev, n));
  g_expect.d2h++;
  char* sink = static_cast<char*>(malloc(n));
  memcpy(sink, wc, n);  // the misuse: a CPU read of WC memory
  printf("wc read: %lx\n", Checksum(sink, n));
  CHECK(d.MemFreeHost(wc));
  g_expect.frees++;
  free(sink);
  free(src);
  CHECK(d.MemFree(dev));
}

// One pinned allocation in the current context: written, read, copied to
// the device and back, freed.
void PinnedRoundTrip(const char* label, int i) {
  const size_t n = 256 << 10;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  void* p = nullptr;
  CHECK(d.MemHostAlloc(&p, n, 0));
  g_expect.allocs++;
  Fill(p, n, static_cast<unsigned>(i + 1));
  const unsigned long written = Checksum(p, n);
  CHECK(d.MemcpyHtoD(dev, p, n));
  g_expect.h2d++;
  memset(p, 0, n);
  CHECK(d.MemcpyDtoH(p, dev, n));
  g_expect.d2h++;
  printf("%s %d: %lx back intact %d\n", label, i, written, Checksum(p, n) == written);
  CHECK(d.MemFreeHost(p));
  g_expect.frees++;
  CHECK(d.MemFree(dev));
}

// Contexts destroyed while optimize mode's pool holds slabs pinned in them:
// the primary context reset (what cudaDeviceReset does), the release of its
// last reference, and created contexts destroyed. The driver frees their
// pinned memory with them, and a later context may get the same handle;
// pinned memory allocated afterwards must still be memory the program may
// use. Each context gets two round trips (the second may reuse the first's
// pool slab).
void ContextTeardown() {
  Lookup(g_get, "cuDevicePrimaryCtxReset", 11000, 0, &d.DevicePrimaryCtxReset);
  Lookup(g_get, "cuDevicePrimaryCtxRelease", 11000, 0, &d.DevicePrimaryCtxRelease);
  Lookup(g_get, "cuCtxCreate", 12050, 0, &d.CtxCreate);
  Lookup(g_get, "cuCtxDestroy", 4000, 0, &d.CtxDestroy);
  auto rounds = [](const char* label) {
    for (int i = 0; i < 2; ++i) PinnedRoundTrip(label, i);
  };
  CUdevice dev;
  CUcontext ctx;
  CHECK(d.DeviceGet(&dev, 0));
  rounds("primary");
  CHECK(d.DevicePrimaryCtxReset(dev));
  CHECK(d.DevicePrimaryCtxRetain(&ctx, dev));
  CHECK(d.CtxSetCurrent(ctx));
  rounds("after reset");
  // A reset does not release: two references now, and the second release
  // destroys the context.
  CHECK(d.DevicePrimaryCtxRelease(dev));
  CHECK(d.DevicePrimaryCtxRelease(dev));
  CHECK(d.DevicePrimaryCtxRetain(&ctx, dev));
  CHECK(d.CtxSetCurrent(ctx));
  rounds("after release");
  for (int i = 0; i < 2; ++i) {
    CUcontext created;
    CHECK(d.CtxCreate(&created, nullptr, 0, dev));  // pushed: current
    rounds("created");
    CHECK(d.CtxDestroy(created));  // popped: the primary context is current again
  }
  rounds("primary again");
}

// Optimize mode's allocation-site redirection: buffers allocated at one
// site and copied hot make the site hot; later allocations there come from
// pinshim's arena, which must keep malloc's semantics (calloc zeroing,
// realloc content, malloc_usable_size, alignment, free from any thread).
// Everything printed must be the same with and without the library.
char* AllocBuffer(size_t n) { return static_cast<char*>(malloc(n)); }
void* AllocAligned(size_t align, size_t n) {
  void* p = nullptr;
  int r = posix_memalign(&p, align, n);
  return r == 0 ? p : nullptr;
}

void Sites() {
  const size_t n = 4 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, 2 * n));
  CUstream stream;
  CHECK(d.StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int round = 0; round < 6; ++round) {
    char* buf = AllocBuffer(n);
    char* back = static_cast<char*>(calloc(1, n));
    printf("sites %d: calloc zero %d usable %d\n", round,
           Checksum(back, n) == Checksum(back + n / 2, n / 2) && back[0] == 0 && back[n - 1] == 0,
           malloc_usable_size(buf) >= n);
    void* aligned = AllocAligned(4096, 256 << 10);
    printf("sites %d: aligned %d\n", round,
           aligned != nullptr && reinterpret_cast<uintptr_t>(aligned) % 4096 == 0);
    for (int i = 0; i < 8; ++i) {
      Fill(buf, n, round * 16 + i);
      Fill(aligned, 256 << 10, round * 16 + i + 1);
      CHECK(d.MemcpyHtoD(dev, buf, n));
      g_expect.h2d++;
      CHECK(d.MemcpyHtoD(dev + n, aligned, 256 << 10));
      g_expect.h2d++;
      CHECK(d.MemcpyHtoDAsync(dev, buf, n, stream));
      g_expect.h2d++;
      memset(buf, 0xCD, n);  // legal at once: the async copy was from "pageable" memory
      CHECK(d.MemcpyDtoHAsync(back, dev, n, stream));
      g_expect.d2h++;
      printf("sites %d.%d: %lx\n", round, i, Checksum(back, n));
    }
    // Grow: the content up to the old size is kept.
    Fill(buf, n, 99 + round);
    const unsigned long before = Checksum(buf, n);
    buf = static_cast<char*>(realloc(buf, 2 * n));
    printf("sites %d: realloc kept %d usable %d\n", round,
           buf != nullptr && Checksum(buf, n) == before,
           buf != nullptr && malloc_usable_size(buf) >= 2 * n);
    CHECK(d.MemcpyHtoD(dev, buf, 2 * n));
    g_expect.h2d++;
    // Freed on another thread.
    std::thread t([buf] { free(buf); });
    t.join();
    free(back);
    free(aligned);
  }
  void* bad = reinterpret_cast<void*>(1);
  printf("sites: bad alignment %d\n", posix_memalign(&bad, 24, 1 << 20));
  // A forked child reads (and frees) a buffer from the hot site.
  char* kept = AllocBuffer(n);
  Fill(kept, n, 77);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    printf("sites: child sees %lx\n", Checksum(kept, n));
    free(kept);
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("sites: child exit %d, parent sees %lx\n", status, Checksum(kept, n));
  free(kept);
  CHECK(d.StreamSynchronize(stream));
  d.MemFree(dev);
}

// Differential run: a seeded random sequence of allocations (malloc,
// calloc, posix_memalign, pinned cuMemHostAlloc, VMM host memory and a host
// pool's, each from its own call site), fills, copies (sync and async, both
// directions, three streams), reallocs and frees, with addresses reused.
// The program is valid under the driver's rules for pageable and pinned
// memory; everything it reads back is hashed and printed, and must not
// change under pinshim in any mode.
char* RandomMalloc(size_t n) { return static_cast<char*>(malloc(n)); }
char* RandomCalloc(size_t n) { return static_cast<char*>(calloc(1, n)); }
char* RandomAligned(size_t n) {
  void* p = nullptr;
  return posix_memalign(&p, 4096, n) == 0 ? static_cast<char*>(p) : nullptr;
}

// Host-located VMM memory of at least n bytes (whole granules), mapped and
// opened read-write for device 0 and the CPU; *handle and *mapped say what
// RandomVmmFree gives back.
char* RandomVmmAlloc(size_t n, CUmemGenericAllocationHandle* handle, size_t* mapped) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  size_t g = 0;
  CHECK(d.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  *mapped = (n + g - 1) / g * g;
  CHECK(d.MemCreate(handle, *mapped, &prop, 0));
  CUdeviceptr va;
  CHECK(d.MemAddressReserve(&va, *mapped, 0, 0, 0));
  CHECK(d.MemMap(va, *mapped, 0, *handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(d.MemSetAccess(va, *mapped, &access, 1));
  access.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CHECK(d.MemSetAccess(va, *mapped, &access, 1));
  g_expect.allocs += 2;  // cuMemCreate, cuMemMap
  return reinterpret_cast<char*>(va);
}

void RandomVmmFree(char* p, CUmemGenericAllocationHandle handle, size_t mapped) {
  CHECK(d.MemUnmap(reinterpret_cast<CUdeviceptr>(p), mapped));
  CHECK(d.MemAddressFree(reinterpret_cast<CUdeviceptr>(p), mapped));
  CHECK(d.MemRelease(handle));
  g_expect.frees += 2;  // cuMemUnmap, cuMemRelease
}

CUmemoryPool RandomHostPool() {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CUmemoryPool pool;
  CHECK(d.MemPoolCreate(&pool, &props));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(d.MemPoolSetAccess(pool, &access, 1));
  return pool;
}

void RandomSequence() {
  constexpr int kSlots = 12;
  constexpr size_t kMax = 2 << 20;
  // Kinds: 0 malloc, 1 calloc, 2 aligned, 3 pinned, 4 VMM host, 5 host pool;
  // from 3 on, page-locked (an async copy's buffer waits for its stream).
  constexpr int kKinds = 6;
  struct Slot {
    char* host = nullptr;
    size_t n = 0;
    int kind = 0;
    CUdeviceptr dev = 0;
    CUmemGenericAllocationHandle handle = 0;  // kind 4
    size_t mapped = 0;                        // kind 4
  };
  auto locked = [](const Slot& s) { return s.kind >= 3; };
  const CUmemoryPool pool = RandomHostPool();
  Slot slots[kSlots];
  // Blocking streams: a synchronous upload (legacy stream) may return before
  // its DMA landed, as on the H200, so a later copy of the same device
  // memory on a non-blocking stream would race with it.
  CUstream streams[3];
  for (CUstream& st : streams) CHECK(d.StreamCreate(&st, CU_STREAM_DEFAULT));
  unsigned long long rng = 0x9e3779b97f4a7c15ull;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  unsigned long hash = 0;
  auto absorb = [&hash](const char* p, size_t n) { hash = hash * 1000003 + Checksum(p, n); };
  auto stream_of = [&](int i) { return streams[i % 3]; };
  auto release = [&](Slot& s, int i) {
    if (s.host == nullptr) return;
    if (locked(s)) CHECK(d.StreamSynchronize(stream_of(i)));
    if (s.kind == 3) {
      CHECK(d.MemFreeHost(s.host));
      g_expect.frees++;
    } else if (s.kind == 4) {
      RandomVmmFree(s.host, s.handle, s.mapped);
    } else if (s.kind == 5) {
      CHECK(d.MemFreeAsync(reinterpret_cast<CUdeviceptr>(s.host), stream_of(i)));
      g_expect.frees++;
    } else {
      free(s.host);
    }
    s.host = nullptr;
  };
  for (int i = 0; i < kSlots; ++i) CHECK(d.MemAlloc(&slots[i].dev, kMax));
  for (int step = 0; step < 1500; ++step) {
    const int i = static_cast<int>(next() % kSlots);
    Slot& s = slots[i];
    CUstream st = stream_of(i);
    const unsigned op = s.host == nullptr ? 0 : static_cast<unsigned>(next() % 8);
    const size_t off = s.n > 0 ? next() % (s.n / 2) : 0;
    const size_t len = s.n > 0 ? 1 + next() % (s.n - off) : 0;
    switch (op) {
      case 0: {  // (re)allocate
        release(s, i);
        s.n = 64 * 1024 + next() % (kMax - 64 * 1024);
        s.kind = static_cast<int>(next() % kKinds);
        if (s.kind == 0) s.host = RandomMalloc(s.n);
        if (s.kind == 1) s.host = RandomCalloc(s.n);
        if (s.kind == 2) s.host = RandomAligned(s.n);
        if (s.kind == 3) {
          void* p = nullptr;
          CHECK(d.MemHostAlloc(&p, s.n, 0));
          g_expect.allocs++;
          s.host = static_cast<char*>(p);
        }
        if (s.kind == 4) s.host = RandomVmmAlloc(s.n, &s.handle, &s.mapped);
        if (s.kind == 5) {
          CUdeviceptr p;
          CHECK(d.MemAllocFromPoolAsync(&p, s.n, pool, st));
          CHECK(d.StreamSynchronize(st));
          g_expect.allocs++;
          s.host = reinterpret_cast<char*>(p);
        }
        if (s.kind == 1) absorb(s.host, s.n);  // zeroed
        Fill(s.host, s.n, static_cast<unsigned>(step));
        break;
      }
      case 1: {  // realloc (pageable kinds): the common prefix is kept
        if (locked(s)) break;
        const size_t n2 = 64 * 1024 + next() % (kMax - 64 * 1024);
        char* q = static_cast<char*>(realloc(s.host, n2));
        if (q == nullptr) break;
        s.host = q;
        absorb(s.host, n2 < s.n ? n2 : s.n);
        if (n2 > s.n) memset(s.host + s.n, step & 0xff, n2 - s.n);
        s.n = n2;
        if (s.kind == 2) s.kind = 0;  // realloc keeps only malloc's alignment
        break;
      }
      case 2:
        CHECK(d.MemcpyHtoD(s.dev + off, s.host + off, len));
        g_expect.h2d++;
        break;
      case 3:
        CHECK(d.MemcpyHtoDAsync(s.dev + off, s.host + off, len, st));
        g_expect.h2d++;
        // Pageable: the source may be reused at once; pinned: only after a sync.
        if (locked(s)) CHECK(d.StreamSynchronize(st));
        memset(s.host + off, (step * 7) & 0xff, len);
        break;
      case 4:
        CHECK(d.MemcpyDtoH(s.host + off, s.dev + off, len));
        g_expect.d2h++;
        absorb(s.host + off, len);
        break;
      case 5:
        CHECK(d.MemcpyDtoHAsync(s.host + off, s.dev + off, len, st));
        g_expect.d2h++;
        if (locked(s)) CHECK(d.StreamSynchronize(st));
        absorb(s.host + off, len);
        break;
      case 6: Fill(s.host + off, len, static_cast<unsigned>(step * 3)); break;
      default: release(s, i); break;
    }
  }
  for (CUstream st : streams) CHECK(d.StreamSynchronize(st));
  std::vector<char> back(kMax);
  for (int i = 0; i < kSlots; ++i) {
    if (slots[i].host != nullptr) absorb(slots[i].host, slots[i].n);
    CHECK(d.MemcpyDtoH(back.data(), slots[i].dev, kMax));
    g_expect.d2h++;
    absorb(back.data(), kMax);
    release(slots[i], i);
    CHECK(d.MemFree(slots[i].dev));
  }
  for (CUstream st : streams) CHECK(d.StreamSynchronize(st));
  CHECK(d.MemPoolDestroy(pool));
  printf("random: %lx\n", hash);
}

// Nothing to report: pinned once, reused for async copies, synchronized.
void Clean() {
  const size_t n = 4 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  void* pinned = nullptr;
  CHECK(d.MemHostAlloc(&pinned, n, 0));
  g_expect.allocs++;
  CUstream stream;
  CHECK(d.StreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 2; ++i) {
    Fill(pinned, n, i);
    CHECK(d.MemcpyHtoDAsync(dev, pinned, n, stream));
    g_expect.h2d++;
    CHECK(d.MemcpyDtoHAsync(pinned, dev, n, stream));
    g_expect.d2h++;
    CHECK(d.StreamSynchronize(stream));
  }
  printf("clean: %lx\n", Checksum(pinned, n));
  CHECK(d.StreamDestroy(stream));
  CHECK(d.MemFreeHost(pinned));
  g_expect.frees++;
  CHECK(d.MemFree(dev));
}

// Pointer attribute queries through every way a program reaches them.
using GetAttr = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
using GetAttrs = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

struct AttrSource {
  const char* label;
  GetAttr one;
  GetAttrs all;
};

std::vector<AttrSource> AttrSources() {
  std::vector<AttrSource> sources(3);
  // The runtime's lookups (legacy and per-thread default stream flags), and
  // dlsym by name as PyTorch and CuPy do for some driver symbols.
  sources[0].label = "getproc";
  Lookup(g_get, "cuPointerGetAttribute", 4000, 0, &sources[0].one);
  Lookup(g_get, "cuPointerGetAttributes", 7000, 0, &sources[0].all);
  sources[1].label = "getproc_pt";
  Lookup(g_get, "cuPointerGetAttribute", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         &sources[1].one);
  Lookup(g_get, "cuPointerGetAttributes", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         &sources[1].all);
  sources[2].label = "dlsym";
  sources[2].one = reinterpret_cast<GetAttr>(dlsym(g_libcuda, "cuPointerGetAttribute"));
  sources[2].all = reinterpret_cast<GetAttrs>(dlsym(g_libcuda, "cuPointerGetAttributes"));
  if (sources[2].one == nullptr || sources[2].all == nullptr) exit(4);
  Lookup(g_get, "cuCtxGetCurrent", 4000, 0, &d.CtxGetCurrent);
  return sources;
}

// Room for one attribute's value.
struct AttrValue {
  unsigned char bytes[16];
};

// An address-like value as it relates to the pointer asked about, its
// allocation's start and the current context (these differ from run to run).
const char* Relation(uintptr_t v, uintptr_t ptr, uintptr_t base, uintptr_t ctx) {
  if (v == 0) return "null";
  if (v == ptr) return "ptr";
  if (v == base) return "base";
  if (v == ctx) return "ctx";
  return "other";
}

void PrintAttr(CUpointer_attribute a, const AttrValue& v, uintptr_t ptr, uintptr_t base) {
  CUcontext ctx = nullptr;
  uintptr_t word;
  memcpy(&word, v.bytes, sizeof(word));
  unsigned small;
  memcpy(&small, v.bytes, sizeof(small));
  switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      d.CtxGetCurrent(&ctx);
      printf(" %d=%s", a, Relation(word, ptr, base, reinterpret_cast<uintptr_t>(ctx)));
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: printf(" %d=%s", a, word == 0 ? "0" : "id"); break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      printf(" %d=%lu", a, static_cast<unsigned long>(word));
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: printf(" %d=%d", a, static_cast<int>(small)); break;
    default: printf(" %d=%u", a, small);
  }
}

const CUpointer_attribute kAskedAttrs[] = {
    CU_POINTER_ATTRIBUTE_CONTEXT,        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
    CU_POINTER_ATTRIBUTE_BUFFER_ID,      CU_POINTER_ATTRIBUTE_IS_MANAGED,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE,     CU_POINTER_ATTRIBUTE_MAPPED,
};
constexpr unsigned kAskedCount = sizeof(kAskedAttrs) / sizeof(kAskedAttrs[0]);

// Every asked attribute of `p` (inside the allocation at `base`) through
// each source, one attribute at a time and all in one call. Returns the
// BUFFER_ID the last source reported in the one call.
unsigned long long DescribePointer(const char* label, const void* p, const void* base,
                                   const std::vector<AttrSource>& sources) {
  const auto ptr = reinterpret_cast<uintptr_t>(p);
  const auto start = reinterpret_cast<uintptr_t>(base);
  unsigned long long id = 0;
  for (const AttrSource& s : sources) {
    printf("%s %s one:", label, s.label);
    for (CUpointer_attribute a : kAskedAttrs) {
      AttrValue v;
      memset(&v, 0, sizeof(v));
      CUresult rc = s.one(v.bytes, a, ptr);
      if (rc == CUDA_SUCCESS) {
        PrintAttr(a, v, ptr, start);
      } else {
        printf(" %d:rc%d", a, rc);
      }
    }
    printf("\n");
    AttrValue values[kAskedCount];
    void* data[kAskedCount];
    CUpointer_attribute attrs[kAskedCount];
    for (unsigned i = 0; i < kAskedCount; ++i) {
      memset(&values[i], 0xEE, sizeof(values[i]));  // what the driver writes shows
      data[i] = values[i].bytes;
      attrs[i] = kAskedAttrs[i];
    }
    CUresult rc = s.all(kAskedCount, attrs, data, ptr);
    printf("%s %s all: rc%d", label, s.label, rc);
    for (unsigned i = 0; i < kAskedCount; ++i) {
      PrintAttr(kAskedAttrs[i], values[i], ptr, start);
      if (kAskedAttrs[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID) {
        memcpy(&id, values[i].bytes, sizeof(id));
      }
    }
    // How many bytes of each value were written (the rest kept the fill).
    printf(" widths");
    for (unsigned i = 0; i < kAskedCount; ++i) {
      int width = sizeof(values[i].bytes);
      while (width > 0 && values[i].bytes[width - 1] == 0xEE) --width;
      printf("%c%d", i == 0 ? '=' : ',', width);
    }
    printf("\n");
  }
  return id;
}

// Writes the simulated driver's live page-locked allocations and
// registrations to `probe` (when there is one).
void Probe(FILE* probe, const char* label) {
  if (probe == nullptr) return;
  using Count = size_t (*)();
  auto hosts = reinterpret_cast<Count>(dlsym(g_libcuda, "fakecuda_live_host_allocations"));
  auto regs = reinterpret_cast<Count>(dlsym(g_libcuda, "fakecuda_live_registrations"));
  fprintf(probe, "%s: host_allocations=%zu registrations=%zu\n", label, hosts ? hosts() : 0,
          regs ? regs() : 0);
}

// Pointer attribute queries, as cudaPointerGetAttributes and PyTorch's
// is_pinned() make them, on a hot pageable buffer (which optimize mode pins
// in place) and on two small pinned allocations (which it serves from one
// slab of its pool). Values that differ from run to run (addresses, ids) are
// printed as relations, so the output is the same with and without pinshim.
// When `probe_path` is given, the simulated driver's own counts at the time
// of the queries go there (they show what pinshim pinned; not part of the
// output that is compared).
void PointerAttributes(const char* probe_path) {
  FILE* probe = probe_path != nullptr ? fopen(probe_path, "w") : nullptr;
  const size_t n = 16 << 20;
  CUdeviceptr dev;
  CHECK(d.MemAlloc(&dev, n));
  std::vector<AttrSource> sources = AttrSources();

  // A pageable buffer copied again and again: worth pinning in place.
  char* hot = static_cast<char*>(malloc(n));
  for (int i = 0; i < 8; ++i) {
    Fill(hot, n, i);
    CHECK(d.MemcpyHtoD(dev, hot, n));
    g_expect.h2d++;
  }
  DescribePointer("hot", hot, hot, sources);
  DescribePointer("hot+1M", hot + (1 << 20), hot, sources);
  Probe(probe, "hot");

  // Two small pinned allocations: each must describe itself, not what holds it.
  const size_t small = 100000;
  char* a = nullptr;
  char* b = nullptr;
  CHECK(d.MemHostAlloc(reinterpret_cast<void**>(&a), small, 0));
  g_expect.allocs++;
  CHECK(d.MemHostAlloc(reinterpret_cast<void**>(&b), small, 0));
  g_expect.allocs++;
  unsigned long long id_a = DescribePointer("pinned-a", a + 10, a, sources);
  unsigned long long id_b = DescribePointer("pinned-b", b + small - 1, b, sources);
  DescribePointer("pinned-a-start", a, a, sources);
  printf("pinned ids differ=%d\n", id_a != id_b && id_a != 0 && id_b != 0);
  // Past the requested bytes: outside the allocation.
  DescribePointer("pinned-a-past-end", a + small + 64, a, sources);

  Probe(probe, "pinned");
  if (probe != nullptr) fclose(probe);

  CHECK(d.MemFreeHost(a));
  g_expect.frees++;
  CHECK(d.MemFreeHost(b));
  g_expect.frees++;
  free(hot);
  CHECK(d.MemFree(dev));
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* scenario = argc > 1 ? argv[1] : "basic";
  if (strcmp(scenario, "basic") == 0 || strcmp(scenario, "basic_ptds") == 0) {
    LoadDriver(strcmp(scenario, "basic_ptds") == 0 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                                   : 0);
    Basic();
  } else if (strcmp(scenario, "invalid") == 0) {
    LoadDriver(0);
    Invalid();
  } else if (strcmp(scenario, "budget") == 0) {
    LoadDriver(0);
    Budget();
  } else if (strcmp(scenario, "evict") == 0) {
    LoadDriver(0);
    Evict();
  } else if (strcmp(scenario, "hot") == 0) {
    LoadDriver(0);
    Hot();
  } else if (strcmp(scenario, "fresh") == 0) {
    LoadDriver(0);
    Fresh();
  } else if (strcmp(scenario, "idle") == 0) {
    // Pinned memory allocated, freed, then left alone for 3.5 seconds.
    LoadDriver(0);
    void* p = nullptr;
    CHECK(d.MemHostAlloc(&p, 1 << 20, 0));
    g_expect.allocs++;
    Fill(p, 1 << 20, 5);
    printf("idle: %lx\n", Checksum(p, 1 << 20));
    CHECK(d.MemFreeHost(p));
    g_expect.frees++;
    usleep(3500 * 1000);
  } else if (strcmp(scenario, "random") == 0) {
    LoadDriver(0);
    RandomSequence();
  } else if (strcmp(scenario, "mapping") == 0 && argc > 2) {
    LoadDriver(0);
    Mapping(argv[2]);
  } else if (strcmp(scenario, "sites") == 0) {
    LoadDriver(0);
    Sites();
  } else if (strcmp(scenario, "ptrattr") == 0) {
    LoadDriver(0);
    PointerAttributes(argc > 2 ? argv[2] : nullptr);
  } else if (strcmp(scenario, "ctx_teardown") == 0) {
    LoadDriver(0);
    ContextTeardown();
  } else if (strcmp(scenario, "clean") == 0) {
    LoadDriver(0);
    Clean();
  } else if (strcmp(scenario, "wc_read") == 0) {
    LoadDriver(0);
    WcRead();
  } else if (strcmp(scenario, "threads") == 0) {
    LoadDriver(0);
    Threads();
  } else if (strcmp(scenario, "late_dlopen") == 0) {
    // Allocate and map before the driver is loaded at all.
    std::vector<void*> blocks;
    for (int i = 0; i < 100; ++i) blocks.push_back(malloc(100000 + i));
    void* m = mmap(nullptr, 1 << 22, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (void* b : blocks) free(b);
    LoadDriver(0);
    RoundTrip("late");
    munmap(m, 1 << 22);
  } else if (strcmp(scenario, "fork") == 0) {
    // One child uses CUDA (the parent has not initialized it yet), one doesn't.
    pid_t cuda_child = fork();
    if (cuda_child == 0) {
      LoadDriver(0);
      RoundTrip("child");
      g_expect.Print();
      fflush(stdout);
      exit(0);
    }
    waitpid(cuda_child, nullptr, 0);
    pid_t plain_child = fork();
    if (plain_child == 0) {
      void* p = malloc(1 << 20);
      memset(p, 1, 1 << 20);
      free(p);
      printf("plain child ok\n");
      fflush(stdout);
      _exit(0);
    }
    waitpid(plain_child, nullptr, 0);
    LoadDriver(0);
    RoundTrip("parent");
  } else if (strcmp(scenario, "fork_stage") == 0) {
    // A child forked before the parent touched CUDA uses CUDA itself: its
    // large pageable copies (128 MiB, which wait for their staging ring)
    // are staged by the child's own workers. The parent then does the same.
    pid_t child = fork();
    if (child == 0) {
      LoadDriver(0);
      RoundTrip("child staged", size_t{128} << 20);
      g_expect.Print();
      fflush(stdout);
      exit(0);
    }
    waitpid(child, nullptr, 0);
    LoadDriver(0);
    RoundTrip("parent staged", size_t{128} << 20);
  } else if (strcmp(scenario, "capture") == 0 && argc > 3) {
    LoadDriver(0);
    Capture(strcmp(argv[2], "h2d") == 0, argv[3]);
  } else if (strcmp(scenario, "capture_neighbour") == 0) {
    LoadDriver(0);
    CaptureNeighbour();
  } else if (strcmp(scenario, "exit_inflight") == 0) {
    // Exit with async copies still queued: neither side may hang or crash.
    LoadDriver(0);
    CUdeviceptr dev;
    CHECK(d.MemAlloc(&dev, 16 << 20));
    void* pinned;
    CHECK(d.MemHostAlloc(&pinned, 16 << 20, 0));
    g_expect.allocs++;
    CUstream s;
    CHECK(d.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 32; ++i) {
      CHECK(d.MemcpyHtoDAsync(dev, pinned, 16 << 20, s));
      g_expect.h2d++;
    }
    g_expect.Print();
    exit(0);
  } else if (strcmp(scenario, "deepbind") == 0) {
    // A library loaded with RTLD_DEEPBIND (libm stands in) is noted.
    void* h = dlopen("libm.so.6", RTLD_NOW | RTLD_DEEPBIND);
    printf("deepbind load: %s\n", h ? "ok" : "failed");
    LoadDriver(0);
    RoundTrip("deepbind");
  } else {
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  g_expect.Print();
  return 0;
}
