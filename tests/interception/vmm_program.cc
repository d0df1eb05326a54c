// Pinned host memory made without cuMemHostAlloc, through the driver API:
// host-located VMM allocations (cuMemCreate, cuMemAddressReserve, cuMemMap,
// cuMemSetAccess: how NCCL maps its cuMem host buffers), an exported and
// imported one, and allocations from a host memory pool. Built against the
// simulated driver in CI and against the real one in the GPU tier.
//
//   vmm_program vmm|pool|import [steps]   copies, checked; "expect:" lines
//                                         give the counts pinshim must show
//   vmm_program budget                    return codes, for enforce mode
#include <cuda.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                         \
  do {                                                                      \
    CUresult rc_ = (call);                                                  \
    if (rc_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, rc_); \
      exit(3);                                                              \
    }                                                                       \
  } while (0)

namespace {

CUmemAllocationProp HostProp(bool exportable) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = 0;
  if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

size_t Granularity() {
  CUmemAllocationProp prop = HostProp(false);
  size_t g = 0;
  CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return g;
}

// Reserves and maps `handle`, then opens it read-write for device 0 and for
// the CPU; returns the address. The CPU faults on the memory until a
// cuMemSetAccess names a host location (one that names only the device is
// not enough), so nothing touches it before the second call.
CUdeviceptr MapHost(CUmemGenericAllocationHandle handle, size_t size) {
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
  CHECK(cuMemMap(va, size, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, size, &access, 1));
  access.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  access.location.id = 0;
  CHECK(cuMemSetAccess(va, size, &access, 1));
  return va;
}

void UnmapHost(CUdeviceptr va, size_t size) {
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemAddressFree(va, size));
}

// Up and back through the device, synchronously and on a stream; the bytes
// must come back. Four copies: two H2D, two D2H.
void RoundTrip(char* host, size_t n, CUdeviceptr dev, CUstream s, int seed) {
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<char>(i * 13 + seed);
  CHECK(cuMemcpyHtoD(dev, host, n));
  memset(host, 0, n);
  CHECK(cuMemcpyDtoH(host, dev, n));
  CHECK(cuMemcpyHtoDAsync(dev, host, n, s));
  CHECK(cuMemcpyDtoHAsync(host, dev, n, s));
  CHECK(cuStreamSynchronize(s));
  for (size_t i = 0; i < n; ++i) {
    if (host[i] != static_cast<char>(i * 13 + seed)) {
      fprintf(stderr, "byte %zu differs\n", i);
      exit(4);
    }
  }
}

int Vmm(int steps, CUstream s) {
  const size_t size = 2 * Granularity();
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, size));
  for (int step = 0; step < steps; ++step) {
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp prop = HostProp(false);
    CHECK(cuMemCreate(&handle, size, &prop, 0));
    CUdeviceptr va = MapHost(handle, size);
    RoundTrip(reinterpret_cast<char*>(va), size, dev, s, step);
    UnmapHost(va, size);
    CHECK(cuMemRelease(handle));
  }
  CHECK(cuMemFree(dev));
  printf("vmm: %d steps of %zu bytes: ok\n", steps, size);
  printf("expect: h2d=%d d2h=%d pin_allocs=%d pin_frees=%d host_vmm-host=%d\n", 2 * steps,
         2 * steps, 2 * steps, 2 * steps, 4 * steps);
  return 0;
}

int Import(CUstream s) {
  const size_t size = Granularity();
  CUmemGenericAllocationHandle handle, imported;
  CUmemAllocationProp prop = HostProp(true);
  CHECK(cuMemCreate(&handle, size, &prop, 0));
  int fd = -1;
  CHECK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CHECK(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(uintptr_t(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUdeviceptr va = MapHost(handle, size), va2 = MapHost(imported, size);
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, size));
  RoundTrip(reinterpret_cast<char*>(va2), size, dev, s, 5);
  printf("import: shared=%d\n",
         memcmp(reinterpret_cast<void*>(va), reinterpret_cast<void*>(va2), size) == 0);
  UnmapHost(va2, size);
  UnmapHost(va, size);
  CHECK(cuMemRelease(imported));
  CHECK(cuMemRelease(handle));
  close(fd);
  CHECK(cuMemFree(dev));
  // One create and its release, two maps and unmaps.
  printf("expect: h2d=2 d2h=2 pin_allocs=3 pin_frees=3 host_vmm-host=4\n");
  return 0;
}

CUmemoryPool HostPool() {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  props.location.id = 0;
  CUmemoryPool pool;
  CHECK(cuMemPoolCreate(&pool, &props));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemPoolSetAccess(pool, &access, 1));
  return pool;
}

int PoolCopies(int steps, CUstream s) {
  const size_t n = 1 << 20;
  CUmemoryPool pool = HostPool();
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, n));
  for (int step = 0; step < steps; ++step) {
    CUdeviceptr block;
    CHECK(cuMemAllocFromPoolAsync(&block, n, pool, s));
    CHECK(cuStreamSynchronize(s));
    RoundTrip(reinterpret_cast<char*>(block), n, dev, s, step);
    // A generic copy of unified addresses: host pool to device.
    CHECK(cuMemcpy(dev, block, n));
    CHECK(cuMemFreeAsync(block, s));
    CHECK(cuStreamSynchronize(s));
  }
  CHECK(cuMemPoolTrimTo(pool, 0));
  CHECK(cuMemPoolDestroy(pool));
  CHECK(cuMemFree(dev));
  printf("pool: %d steps: ok\n", steps);
  printf("expect: h2d=%d d2h=%d pin_allocs=%d pin_frees=%d host_host-pool=%d\n", 3 * steps,
         2 * steps, steps, steps, 5 * steps);
  return 0;
}

// Return codes only: enforce mode's budget decides them. Sized for a process
// budget of 36 granules and a host pool that reserves 16 granules at its
// first allocation and grows by as much when full, as on the GPU host
// (driver_behavior.h): each line's answer is the one written after it.
int Budget(CUstream s) {
  const size_t g = Granularity();
  CUmemAllocationProp prop = HostProp(false);
  CUmemGenericAllocationHandle a, b;
  printf("create 8g: %d\n", cuMemCreate(&a, 8 * g, &prop, 0));  // granted: 8g pinned
  CUresult second = cuMemCreate(&b, 32 * g, &prop, 0);          // over by 4g: denied
  printf("create 32g more: %d\n", second);
  if (second == CUDA_SUCCESS) cuMemRelease(b);
  printf("release: %d\n", cuMemRelease(a));
  printf("create 8g after release: %d\n", cuMemCreate(&b, 8 * g, &prop, 0));
  CUmemoryPool pool = HostPool();
  CUdeviceptr small, mid, big;
  // The pool reserves 16g: 24g pinned.
  printf("pool 1 MiB: %d\n", cuMemAllocFromPoolAsync(&small, 1 << 20, pool, s));
  // Served from that reservation, not charged again.
  CUresult served = cuMemAllocFromPoolAsync(&mid, 4 * g, pool, s);
  printf("pool 4g from its reservation: %d\n", served);
  // Does not fit: the pool would grow by 16g, to 40g pinned. Denied.
  printf("pool 12g more: %d\n", cuMemAllocFromPoolAsync(&big, 12 * g, pool, s));
  // Denied before the driver reserved anything more: 16g.
  cuuint64_t reserved = 0;
  cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  printf("pool reserved: %llug\n", static_cast<unsigned long long>(reserved / g));
  printf("release b: %d\n", cuMemRelease(b));
  // The same growth now fits: 32g pinned.
  CUresult again = cuMemAllocFromPoolAsync(&big, 12 * g, pool, s);
  printf("pool 12g after release: %d\n", again);
  if (again == CUDA_SUCCESS) cuMemFreeAsync(big, s);
  if (served == CUDA_SUCCESS) cuMemFreeAsync(mid, s);
  cuMemFreeAsync(small, s);
  cuStreamSynchronize(s);
  cuMemPoolTrimTo(pool, 0);
  printf("destroy: %d\n", cuMemPoolDestroy(pool));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "vmm";
  const int steps = argc > 2 ? atoi(argv[2]) : 3;
  CHECK(cuInit(0));
  CUdevice device;
  CUcontext ctx;
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, device));
  CHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  int rc = 2;
  if (strcmp(what, "vmm") == 0) rc = Vmm(steps, s);
  if (strcmp(what, "pool") == 0) rc = PoolCopies(steps, s);
  if (strcmp(what, "import") == 0) rc = Import(s);
  if (strcmp(what, "budget") == 0) rc = Budget(s);
  CHECK(cuStreamDestroy(s));
  return rc;
}
