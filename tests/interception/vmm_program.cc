// Pinned host memory made without cuMemHostAlloc, through the driver API:
// host-located VMM allocations (cuMemCreate, cuMemAddressReserve, cuMemMap,
// cuMemSetAccess: how NCCL maps its cuMem host buffers), an exported and
// imported one, and allocations from a host memory pool. Built against the
// simulated driver in CI and against the real one in the GPU tier.
//
//   vmm_program vmm|pool|import [steps]   copies, checked; "expect:" lines
//                                         give the counts pinshim must show
//   vmm_program budget                    return codes, for enforce mode
//   vmm_program edges-vmm|edges-pool [G]  unusual but legal uses, copies
//                                         checked, one "expect:" line; with
//                                         G, probes that a budget of G
//                                         granules is whole after each
//   vmm_program edges-budget              their charges: return codes, for
//                                         enforce mode with 20 granules
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

// Maps `handle` at `va` (inside a reservation), then opens it read-write
// for device 0 and for the CPU. The CPU faults on the memory until a
// cuMemSetAccess names a host location (one that names only the device is
// not enough), so nothing touches it before the second call.
void MapAt(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle handle) {
  CHECK(cuMemMap(va, size, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, size, &access, 1));
  access.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CHECK(cuMemSetAccess(va, size, &access, 1));
}

// Reserves address space for `handle` and maps it there (MapAt).
CUdeviceptr MapHost(CUmemGenericAllocationHandle handle, size_t size) {
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
  MapAt(va, size, handle);
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

CUmemGenericAllocationHandle Create(size_t size) {
  CUmemAllocationProp prop = HostProp(false);
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, size, &prop, 0));
  return h;
}

// The counts the edge patterns print, summed into one "expect:" line (the
// GPU tier reads the last one only).
struct Tally {
  int h2d = 0, d2h = 0, allocs = 0, frees = 0, copies = 0;
  void RoundTrips(int n) { h2d += 2 * n, d2h += 2 * n, copies += 4 * n; }
};

// With a budget of `granules` (0: none asked), creates and releases one
// VMM host allocation of that many granules less `held`: granted while
// enforce mode has charged exactly `held` granules, as without pinshim.
void Probe(const char* when, int granules, int held, Tally* t) {
  if (granules == 0) return;
  CUmemAllocationProp prop = HostProp(false);
  CUmemGenericAllocationHandle h;
  const CUresult rc = cuMemCreate(&h, (granules - held) * Granularity(), &prop, 0);
  printf("probe %s: %d\n", when, rc);
  ++t->allocs;
  if (rc == CUDA_SUCCESS) {
    CHECK(cuMemRelease(h));
    ++t->frees;
  }
}

// One handle mapped at two addresses (two reservations): both show the
// same bytes, copies go through either, and it is charged once.
void MappedTwice(CUdeviceptr dev, CUstream s, int probe, Tally* t) {
  const size_t size = 2 * Granularity();
  CUmemGenericAllocationHandle h = Create(size);
  CUdeviceptr a = MapHost(h, size), b = MapHost(h, size);
  RoundTrip(reinterpret_cast<char*>(a), size, dev, s, 1);
  printf("twice: shared=%d\n",
         memcmp(reinterpret_cast<void*>(a), reinterpret_cast<void*>(b), size) == 0);
  RoundTrip(reinterpret_cast<char*>(b), size, dev, s, 2);
  Probe("mapped twice", probe, 2, t);
  UnmapHost(a, size);
  UnmapHost(b, size);
  CHECK(cuMemRelease(h));
  Probe("after mapped twice", probe, 0, t);
  t->RoundTrips(2);
  t->allocs += 3, t->frees += 3;  // the create and two maps; their ends
}

// Two handles side by side in one reservation, as NCCL maps its buffers:
// one copy (each way) crosses from the first into the second.
void SideBySide(CUdeviceptr dev, CUstream s, int probe, Tally* t) {
  const size_t g = Granularity(), size = 2 * g;
  CUmemGenericAllocationHandle h1 = Create(size), h2 = Create(size);
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, 2 * size, 0, 0, 0));
  MapAt(va, size, h1);
  MapAt(va + size, size, h2);
  RoundTrip(reinterpret_cast<char*>(va + g), size, dev, s, 3);  // the last g of h1, the first of h2
  Probe("side by side", probe, 4, t);
  CHECK(cuMemUnmap(va, size));
  CHECK(cuMemUnmap(va + size, size));
  CHECK(cuMemAddressFree(va, 2 * size));
  CHECK(cuMemRelease(h1));
  CHECK(cuMemRelease(h2));
  Probe("after side by side", probe, 0, t);
  t->RoundTrips(1);
  t->allocs += 4, t->frees += 4;
}

// The handle released while mapped (legal: the memory lives until it is
// unmapped), then copies, then the unmap.
void ReleasedBeforeUnmap(CUdeviceptr dev, CUstream s, int probe, Tally* t) {
  const size_t size = 2 * Granularity();
  CUmemGenericAllocationHandle h = Create(size);
  CUdeviceptr va = MapHost(h, size);
  CHECK(cuMemRelease(h));
  RoundTrip(reinterpret_cast<char*>(va), size, dev, s, 4);
  Probe("released, mapped", probe, 2, t);
  UnmapHost(va, size);
  Probe("after released, unmapped", probe, 0, t);
  t->RoundTrips(1);
  t->allocs += 2, t->frees += 2;
}

// cuMemRetainAllocationHandle of an address inside the mapping gives the
// handle mapped there, as one more reference with a release of its own.
void Retained(CUdeviceptr dev, CUstream s, int probe, Tally* t) {
  const size_t g = Granularity(), size = 2 * g;
  CUmemGenericAllocationHandle h = Create(size), again = 0;
  CUdeviceptr va = MapHost(h, size);
  CHECK(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + g + 64)));
  CUmemAllocationProp prop{};
  CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, again));
  printf("retained: same=%d pinned=%d host_numa=%d\n", again == h,
         prop.type == CU_MEM_ALLOCATION_TYPE_PINNED,
         prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA);
  CHECK(cuMemRelease(again));
  RoundTrip(reinterpret_cast<char*>(va), size, dev, s, 5);
  Probe("retained and released", probe, 2, t);
  CHECK(cuMemRelease(h));
  Probe("released twice, mapped", probe, 2, t);
  UnmapHost(va, size);
  Probe("after retained", probe, 0, t);
  t->RoundTrips(1);
  t->allocs += 2, t->frees += 2;  // the create and map; the last release and unmap
}

int EdgesVmm(CUstream s, int probe) {
  const size_t size = 4 * Granularity();
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, size));
  Tally t;
  MappedTwice(dev, s, probe, &t);
  SideBySide(dev, s, probe, &t);
  ReleasedBeforeUnmap(dev, s, probe, &t);
  Retained(dev, s, probe, &t);
  CHECK(cuMemFree(dev));
  printf("edges-vmm: ok\n");
  printf("expect: h2d=%d d2h=%d pin_allocs=%d pin_frees=%d host_vmm-host=%d\n", t.h2d, t.d2h,
         t.allocs, t.frees, t.copies);
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

// A host pool's allocations freed by cuMemFree (legal: freed at once, the
// caller having waited for their work) and by cuMemFreeAsync, then trimmed;
// and a pool destroyed with allocations outstanding, which stay usable until
// freed, after a trim that keeps what they use.
int EdgesPool(CUstream s, int probe) {
  const size_t n = 1 << 20;
  CUdeviceptr dev, a, b;
  CHECK(cuMemAlloc(&dev, n));
  Tally t;
  CUmemoryPool pool = HostPool();
  CHECK(cuMemAllocFromPoolAsync(&a, n, pool, s));
  CHECK(cuMemAllocFromPoolAsync(&b, n, pool, s));
  CHECK(cuStreamSynchronize(s));
  RoundTrip(reinterpret_cast<char*>(a), n, dev, s, 6);
  RoundTrip(reinterpret_cast<char*>(b), n, dev, s, 9);
  CHECK(cuMemcpy(dev, b, n));
  CHECK(cuMemFree(a));  // RoundTrip waited for its copies
  CHECK(cuMemFreeAsync(b, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemPoolTrimTo(pool, 0));
  cuuint64_t reserved = 1;
  CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  printf("pool trimmed after cuMemFree: reserved=%llu\n",
         static_cast<unsigned long long>(reserved));
  Probe("after cuMemFree and trim", probe, 0, &t);
  CHECK(cuMemPoolDestroy(pool));
  t.RoundTrips(2), t.h2d += 1, t.copies += 1;
  t.allocs += 2, t.frees += 2;

  pool = HostPool();
  CHECK(cuMemAllocFromPoolAsync(&a, n, pool, s));
  CHECK(cuMemAllocFromPoolAsync(&b, n, pool, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemPoolTrimTo(pool, 0));  // both in use: nothing to give back
  CHECK(cuMemPoolDestroy(pool));
  RoundTrip(reinterpret_cast<char*>(a), n, dev, s, 7);
  RoundTrip(reinterpret_cast<char*>(b), n, dev, s, 8);
  CHECK(cuMemFreeAsync(a, s));
  CHECK(cuStreamSynchronize(s));
  CHECK(cuMemFree(b));
  Probe("after the destroyed pool's last free", probe, 0, &t);
  t.RoundTrips(2);
  t.allocs += 2, t.frees += 2;
  CHECK(cuMemFree(dev));
  printf("edges-pool: ok\n");
  printf("expect: h2d=%d d2h=%d pin_allocs=%d pin_frees=%d host_host-pool=%d\n", t.h2d, t.d2h,
         t.allocs, t.frees, t.copies);
  return 0;
}

// The edge patterns' charges, by return codes: with a budget of 20
// granules, each line's answer is the one written after it (all 0 without
// pinshim). A host pool's first growth reserves 16 granules.
int EdgesBudget(CUstream s) {
  const size_t g = Granularity();
  CUmemAllocationProp prop = HostProp(false);
  CUmemGenericAllocationHandle h, other, again;
  auto try_create = [&](const char* what, size_t granules) {
    CUresult rc = cuMemCreate(&other, granules * g, &prop, 0);
    printf("%s: %d\n", what, rc);
    if (rc == CUDA_SUCCESS) cuMemRelease(other);
  };
  CHECK(cuMemCreate(&h, 8 * g, &prop, 0));
  CUdeviceptr a = MapHost(h, 8 * g), b = MapHost(h, 8 * g);
  try_create("12g beside 8g mapped twice", 12);  // charged once: 0
  UnmapHost(a, 8 * g);
  UnmapHost(b, 8 * g);
  cuMemRelease(h);
  CHECK(cuMemCreate(&h, 8 * g, &prop, 0));
  a = MapHost(h, 8 * g);
  cuMemRelease(h);
  try_create("16g beside 8g released, mapped", 16);  // still pinned: 2
  UnmapHost(a, 8 * g);
  try_create("16g after its unmap", 16);  // 0
  CHECK(cuMemCreate(&h, 8 * g, &prop, 0));
  a = MapHost(h, 8 * g);
  CHECK(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(a)));
  cuMemRelease(h);
  try_create("16g beside 8g with a retained reference", 16);  // 2
  cuMemRelease(again);
  UnmapHost(a, 8 * g);
  try_create("16g after the last release and unmap", 16);  // 0
  CUmemoryPool pool = HostPool();
  CUdeviceptr p;
  printf("pool 1 MiB: %d\n", cuMemAllocFromPoolAsync(&p, 1 << 20, pool, s));  // 16g: 0
  cuStreamSynchronize(s);
  printf("destroy with it outstanding: %d\n", cuMemPoolDestroy(pool));
  try_create("8g beside the destroyed pool's allocation", 8);  // 16g still reserved: 2
  printf("cuMemFree: %d\n", cuMemFree(p));
  try_create("20g after the destroyed pool's last free", 20);  // 0
  pool = HostPool();
  cuMemAllocFromPoolAsync(&p, 1 << 20, pool, s);
  cuStreamSynchronize(s);
  printf("cuMemFree from a live pool: %d\n", cuMemFree(p));
  try_create("8g beside its reservation", 8);  // 2
  cuMemPoolTrimTo(pool, 0);
  try_create("20g after the trim", 20);  // 0
  printf("destroy: %d\n", cuMemPoolDestroy(pool));
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
  if (strcmp(what, "edges-vmm") == 0) rc = EdgesVmm(s, argc > 2 ? atoi(argv[2]) : 0);
  if (strcmp(what, "edges-pool") == 0) rc = EdgesPool(s, argc > 2 ? atoi(argv[2]) : 0);
  if (strcmp(what, "edges-budget") == 0) rc = EdgesBudget(s);
  CHECK(cuStreamDestroy(s));
  return rc;
}
