// What the driver answers for the pinned host memory of the virtual memory
// management API and of host memory pools, where the documentation leaves it
// open (tests/fakecuda/driver_behavior.h follows these answers), and the
// copy speed of every kind of pinned host memory against pageable memory.
// One "key=value" line per fact:
//   granularity location=host|host_numa|host_numa_current min=B recommended=B (rc=N on error)
//   misuse what=... rc=N
//   access cpu_before_set_access=ok|fault
//   attr kind=vmm|pool what=... rc=N value=V
//   pool what=... reserved=B used=B
//   copy kind=vmm|pool api=... rc=N
//   bw kind=pageable|host_alloc|registered|vmm|pool dir=H2D|D2H gbps=G
//   vmm_host_probe [sections: facts bw]   (default both)
#include <cuda.h>
#include <setjmp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define DCHECK(x)                                                          \
  do {                                                                     \
    CUresult r_ = (x);                                                     \
    if (r_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d %s: error %d\n", __FILE__, __LINE__, #x, r_); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

namespace {

sigjmp_buf g_fault_jump;
void OnFault(int) { siglongjmp(g_fault_jump, 1); }

CUmemAllocationProp Prop(CUmemLocationType type, bool exportable) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = type;
  p.location.id = 0;
  if (exportable) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

void Granularities() {
  const std::pair<const char*, CUmemLocationType> locs[] = {
      {"host", CU_MEM_LOCATION_TYPE_HOST},
      {"host_numa", CU_MEM_LOCATION_TYPE_HOST_NUMA},
      {"host_numa_current", CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT}};
  for (auto& [name, type] : locs) {
    CUmemAllocationProp p = Prop(type, false);
    size_t lo = 0, rec = 0;
    CUresult a = cuMemGetAllocationGranularity(&lo, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CUresult b = cuMemGetAllocationGranularity(&rec, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    printf("granularity location=%s min=%zu recommended=%zu rc_min=%d rc_rec=%d\n", name, lo, rec,
           a, b);
  }
}

size_t HostGranularity() {
  CUmemAllocationProp p = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  size_t g = 0;
  DCHECK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  return g;
}

void SetAccess(CUdeviceptr va, size_t n) {
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DCHECK(cuMemSetAccess(va, n, &a, 1));
}

void Misuse() {
  const size_t g = HostGranularity();
  CUmemAllocationProp p = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  CUmemGenericAllocationHandle h;
  printf("misuse what=create_not_multiple rc=%d\n", cuMemCreate(&h, g + 4096, &p, 0));
  DCHECK(cuMemCreate(&h, 2 * g, &p, 0));
  CUdeviceptr va;
  DCHECK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
  printf("misuse what=map_size_not_multiple rc=%d\n", cuMemMap(va, g + 4096, 0, h, 0));
  printf("misuse what=map_offset_not_multiple rc=%d\n", cuMemMap(va, g, 4096, h, 0));
  printf("misuse what=map_address_not_multiple rc=%d\n", cuMemMap(va + 4096, g, 0, h, 0));
  printf("misuse what=map_past_allocation rc=%d\n", cuMemMap(va, 2 * g, g, h, 0));
  printf("misuse what=map_outside_reservation rc=%d\n", cuMemMap(va + 3 * g, 2 * g, 0, h, 0));
  printf("misuse what=unmap_unmapped rc=%d\n", cuMemUnmap(va, 2 * g));
  DCHECK(cuMemMap(va, 2 * g, 0, h, 0));
  printf("misuse what=map_onto_mapped rc=%d\n", cuMemMap(va, 2 * g, 0, h, 0));
  // The CPU's access between cuMemMap and cuMemSetAccess: a fault returns
  // here through the handler.
  struct sigaction sa {
  }, old{};
  sa.sa_handler = OnFault;
  sigaction(SIGSEGV, &sa, &old);
  sigaction(SIGBUS, &sa, nullptr);
  bool ok = sigsetjmp(g_fault_jump, 1) == 0;
  if (ok) *reinterpret_cast<volatile char*>(va) = 1;
  sigaction(SIGSEGV, &old, nullptr);
  signal(SIGBUS, SIG_DFL);
  printf("access cpu_before_set_access=%s\n", ok ? "ok" : "fault");
  SetAccess(va, 2 * g);
  printf("misuse what=unmap_part rc=%d\n", cuMemUnmap(va, g));
  printf("misuse what=address_free_while_mapped rc=%d\n", cuMemAddressFree(va, 4 * g));
  printf("misuse what=release_while_mapped rc=%d\n", cuMemRelease(h));
  int fd = -1;
  CUmemGenericAllocationHandle h2;
  DCHECK(cuMemCreate(&h2, g, &p, 0));
  printf("misuse what=export_type_not_requested rc=%d\n",
         cuMemExportToShareableHandle(&fd, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  printf("misuse what=register_vmm_host rc=%d\n",
         cuMemHostRegister(reinterpret_cast<void*>(va), g, 0));
  printf("misuse what=unmap_after_release rc=%d\n", cuMemUnmap(va, 2 * g));
  printf("misuse what=release_twice rc=%d\n", cuMemRelease(h));
  DCHECK(cuMemRelease(h2));
  DCHECK(cuMemAddressFree(va, 4 * g));
}

void Attributes(const char* kind, CUdeviceptr p) {
  unsigned type = 0;
  CUresult r = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  printf("attr kind=%s what=memory_type rc=%d value=%u\n", kind, r, type);
  CUdeviceptr start = 0;
  size_t size = 0;
  r = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 64);
  printf("attr kind=%s what=range_start_is_base rc=%d value=%d\n", kind, r, start == p);
  r = cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 64);
  printf("attr kind=%s what=range_size rc=%d value=%zu\n", kind, r, size);
  CUmemoryPool pool = nullptr;
  r = cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p);
  printf("attr kind=%s what=mempool_handle_set rc=%d value=%d\n", kind, r, pool != nullptr);
  unsigned flags = 0;
  r = cuMemHostGetFlags(&flags, reinterpret_cast<void*>(p));
  printf("attr kind=%s what=host_get_flags rc=%d value=%u\n", kind, r, flags);
}

void CopyKinds(const char* kind, CUdeviceptr host, CUdeviceptr dev, size_t n) {
  printf("copy kind=%s api=cuMemcpyHtoD rc=%d\n", kind,
         cuMemcpyHtoD(dev, reinterpret_cast<void*>(host), n));
  printf("copy kind=%s api=cuMemcpyDtoH rc=%d\n", kind,
         cuMemcpyDtoH(reinterpret_cast<void*>(host), dev, n));
  printf("copy kind=%s api=cuMemcpy_to_device rc=%d\n", kind, cuMemcpy(dev, host, n));
}

CUmemoryPool HostPool() {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  props.location.id = 0;
  CUmemoryPool pool;
  DCHECK(cuMemPoolCreate(&pool, &props));
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DCHECK(cuMemPoolSetAccess(pool, &a, 1));
  return pool;
}

void PoolLine(CUmemoryPool pool, const char* what) {
  cuuint64_t reserved = 0, used = 0;
  cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  printf("pool what=%s reserved=%llu used=%llu\n", what, (unsigned long long)reserved,
         (unsigned long long)used);
}

void Facts(CUstream s) {
  Granularities();
  Misuse();
  const size_t g = HostGranularity();
  CUmemAllocationProp p = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  CUmemGenericAllocationHandle h;
  DCHECK(cuMemCreate(&h, g, &p, 0));
  CUdeviceptr va, dev;
  DCHECK(cuMemAddressReserve(&va, g, 0, 0, 0));
  DCHECK(cuMemMap(va, g, 0, h, 0));
  SetAccess(va, g);
  DCHECK(cuMemAlloc(&dev, g));
  Attributes("vmm", va);
  CopyKinds("vmm", va, dev, g);
  CUmemoryPool pool = HostPool();
  PoolLine(pool, "created");
  CUdeviceptr a, b;
  DCHECK(cuMemAllocFromPoolAsync(&a, 1 << 20, pool, s));
  PoolLine(pool, "after_1MiB");
  DCHECK(cuMemAllocFromPoolAsync(&b, 5 << 20, pool, s));
  PoolLine(pool, "after_5MiB_more");
  DCHECK(cuStreamSynchronize(s));
  Attributes("pool", a);
  CopyKinds("pool", a, dev, 1 << 20);
  DCHECK(cuMemFreeAsync(b, s));
  PoolLine(pool, "after_free_5MiB");
  DCHECK(cuStreamSynchronize(s));
  PoolLine(pool, "after_free_and_sync");
  DCHECK(cuMemPoolTrimTo(pool, 0));
  PoolLine(pool, "after_trim_0");
  DCHECK(cuMemFreeAsync(a, s));
  DCHECK(cuStreamSynchronize(s));
  DCHECK(cuMemPoolTrimTo(pool, 0));
  PoolLine(pool, "after_all_freed_trim_0");
  DCHECK(cuMemPoolDestroy(pool));
  DCHECK(cuMemUnmap(va, g));
  DCHECK(cuMemRelease(h));
  DCHECK(cuMemAddressFree(va, g));
  DCHECK(cuMemFree(dev));
}

// Median GB/s of `reps` synchronous copies each way.
void Bandwidth(const char* kind, void* host, CUdeviceptr dev, size_t n, int reps) {
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<double> gbps;
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (dir == 0) {
        DCHECK(cuMemcpyHtoD(dev, host, n));
      } else {
        DCHECK(cuMemcpyDtoH(host, dev, n));
      }
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      gbps.push_back(n / s / 1e9);
    }
    std::sort(gbps.begin(), gbps.end());
    printf("bw kind=%s dir=%s gbps=%.2f\n", kind, dir == 0 ? "H2D" : "D2H", gbps[gbps.size() / 2]);
  }
}

void Bandwidths(CUstream s) {
  const size_t g = HostGranularity();
  const size_t n = (size_t{256} << 20) / g * g;
  const int reps = 7;
  CUdeviceptr dev;
  DCHECK(cuMemAlloc(&dev, n));
  char* pageable = static_cast<char*>(malloc(n));
  memset(pageable, 1, n);
  Bandwidth("pageable", pageable, dev, n, reps);
  void* host_alloc;
  DCHECK(cuMemHostAlloc(&host_alloc, n, 0));
  memset(host_alloc, 1, n);
  Bandwidth("host_alloc", host_alloc, dev, n, reps);
  DCHECK(cuMemFreeHost(host_alloc));
  DCHECK(cuMemHostRegister(pageable, n, 0));
  Bandwidth("registered", pageable, dev, n, reps);
  DCHECK(cuMemHostUnregister(pageable));
  CUmemAllocationProp p = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  CUmemGenericAllocationHandle h;
  CUdeviceptr va;
  DCHECK(cuMemCreate(&h, n, &p, 0));
  DCHECK(cuMemAddressReserve(&va, n, 0, 0, 0));
  DCHECK(cuMemMap(va, n, 0, h, 0));
  SetAccess(va, n);
  memset(reinterpret_cast<void*>(va), 1, n);
  Bandwidth("vmm", reinterpret_cast<void*>(va), dev, n, reps);
  DCHECK(cuMemUnmap(va, n));
  DCHECK(cuMemRelease(h));
  DCHECK(cuMemAddressFree(va, n));
  CUmemoryPool pool = HostPool();
  CUdeviceptr block;
  DCHECK(cuMemAllocFromPoolAsync(&block, n, pool, s));
  DCHECK(cuStreamSynchronize(s));
  memset(reinterpret_cast<void*>(block), 1, n);
  Bandwidth("pool", reinterpret_cast<void*>(block), dev, n, reps);
  DCHECK(cuMemFreeAsync(block, s));
  DCHECK(cuStreamSynchronize(s));
  DCHECK(cuMemPoolDestroy(pool));
  free(pageable);
  DCHECK(cuMemFree(dev));
}

}  // namespace

int main(int argc, char** argv) {
  std::string sections = argc > 1 ? argv[1] : "facts bw";
  DCHECK(cuInit(0));
  CUdevice d;
  CUcontext ctx;
  DCHECK(cuDeviceGet(&d, 0));
  DCHECK(cuDevicePrimaryCtxRetain(&ctx, d));
  DCHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  DCHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (sections.find("facts") != std::string::npos) Facts(s);
  if (sections.find("bw") != std::string::npos) Bandwidths(s);
  return 0;
}
