// What the driver answers for the pinned host memory of the virtual memory
// management API and of host memory pools, where the documentation leaves it
// open (tests/fakecuda/driver_behavior.h follows these answers), and the
// copy speed of every kind of pinned host memory against pageable memory.
// One "key=value" line per fact:
//   granularity location=host|host_numa|host_numa_current min=B recommended=B (rc=N on error)
//   misuse what=... rc=N
//   access cpu_before_set_access=ok|fault
//   access cpu_after_device_access=ok|fault   (cuMemSetAccess naming the device only)
//   access cpu_after_host_access=ok|fault     (then one naming a host location)
//   attr kind=vmm|pool what=... rc=N value=V
//   pool what=... reserved=B used=B
//   copy kind=vmm|pool api=... rc=N
//   bw kind=pageable|host_alloc|registered|vmm|pool dir=H2D|D2H gbps=G
//   vmm_host_probe [sections: facts bw]   (default both)
// Each fact stands alone: an error ends that fact's step with an "error"
// line (what, line, code) and the next step runs; the speed step ("bw")
// always runs after the facts.
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

#include "cuda_check.h"  // DCHECK: only for the set-up in main(), without which nothing can run

namespace {

sigjmp_buf g_fault_jump;
void OnFault(int) { siglongjmp(g_fault_jump, 1); }

// Non-fatal: prints "error what=... line=... rc=..." and answers false, so
// the caller ends its fact and the probe goes on to the next.
bool Ok(CUresult r, const char* what, int line) {
  if (r == CUDA_SUCCESS) return true;
  printf("error what=%s line=%d rc=%d\n", what, line, r);
  fflush(stdout);
  return false;
}
#define OK(x) Ok((x), #x, __LINE__)

// Whether a CPU write to p faults (caught, and the program goes on).
bool CpuWriteFaults(CUdeviceptr p) {
  struct sigaction sa {
  }, old_segv{}, old_bus{};
  sa.sa_handler = OnFault;
  sigaction(SIGSEGV, &sa, &old_segv);
  sigaction(SIGBUS, &sa, &old_bus);
  bool ok = sigsetjmp(g_fault_jump, 1) == 0;
  if (ok) *reinterpret_cast<volatile char*>(p) = 1;
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  return !ok;
}

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
  if (!OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM))) {
    g = size_t{2} << 20;  // the steps still run, at the granularity the GPU host reported
  }
  return g;
}

CUresult SetAccess(CUdeviceptr va, size_t n, CUmemLocationType where) {
  CUmemAccessDesc a{};
  a.location.type = where;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return cuMemSetAccess(va, n, &a, 1);
}

// Device and CPU read-write: the device's access, then the host's (the CPU
// faults until a host location is named).
bool OpenForBoth(CUdeviceptr va, size_t n) {
  return OK(SetAccess(va, n, CU_MEM_LOCATION_TYPE_DEVICE)) &&
         OK(SetAccess(va, n, CU_MEM_LOCATION_TYPE_HOST_NUMA));
}

// Every answer is printed, whatever came before; the clean-up at the end
// unmaps what the answers mapped (a map past the reservation's end included)
// and says what it could not free.
void Misuse() {
  const size_t g = HostGranularity();
  CUmemAllocationProp p = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  CUmemGenericAllocationHandle h, h2;
  printf("misuse what=create_not_multiple rc=%d\n", cuMemCreate(&h, g + 4096, &p, 0));
  if (!OK(cuMemCreate(&h, 2 * g, &p, 0))) return;
  CUdeviceptr va;
  if (!OK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0))) return;
  printf("misuse what=map_size_not_multiple rc=%d\n", cuMemMap(va, g + 4096, 0, h, 0));
  printf("misuse what=map_offset_not_multiple rc=%d\n", cuMemMap(va, g, 4096, h, 0));
  printf("misuse what=map_address_not_multiple rc=%d\n", cuMemMap(va + 4096, g, 0, h, 0));
  printf("misuse what=map_past_allocation rc=%d\n", cuMemMap(va, 2 * g, g, h, 0));
  const CUresult outside = cuMemMap(va + 3 * g, 2 * g, 0, h, 0);
  printf("misuse what=map_outside_reservation rc=%d\n", outside);
  printf("misuse what=unmap_unmapped rc=%d\n", cuMemUnmap(va, 2 * g));
  const bool mapped = OK(cuMemMap(va, 2 * g, 0, h, 0));
  if (mapped) {
    printf("misuse what=map_onto_mapped rc=%d\n", cuMemMap(va, 2 * g, 0, h, 0));
    printf("access cpu_before_set_access=%s\n", CpuWriteFaults(va) ? "fault" : "ok");
    if (OK(SetAccess(va, 2 * g, CU_MEM_LOCATION_TYPE_DEVICE))) {
      printf("access cpu_after_device_access=%s\n", CpuWriteFaults(va) ? "fault" : "ok");
    }
    if (OK(SetAccess(va, 2 * g, CU_MEM_LOCATION_TYPE_HOST_NUMA))) {
      printf("access cpu_after_host_access=%s\n", CpuWriteFaults(va) ? "fault" : "ok");
    }
    printf("misuse what=unmap_part rc=%d\n", cuMemUnmap(va, g));
    printf("misuse what=address_free_while_mapped rc=%d\n", cuMemAddressFree(va, 4 * g));
  }
  printf("misuse what=release_while_mapped rc=%d\n", cuMemRelease(h));
  int fd = -1;
  if (OK(cuMemCreate(&h2, g, &p, 0))) {
    printf("misuse what=export_type_not_requested rc=%d\n",
           cuMemExportToShareableHandle(&fd, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    OK(cuMemRelease(h2));
  }
  if (mapped) {
    printf("misuse what=register_vmm_host rc=%d\n",
           cuMemHostRegister(reinterpret_cast<void*>(va), g, 0));
    printf("misuse what=unmap_after_release rc=%d\n", cuMemUnmap(va, 2 * g));
  }
  printf("misuse what=release_twice rc=%d\n", cuMemRelease(h));
  if (outside == CUDA_SUCCESS) {
    printf("misuse what=unmap_past_reservation_end rc=%d\n", cuMemUnmap(va + 3 * g, 2 * g));
  }
  printf("misuse what=address_free_at_end rc=%d\n", cuMemAddressFree(va, 4 * g));
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

// A host pool the device may use; null (and an error line) if the driver
// refuses one.
CUmemoryPool HostPool() {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  props.location.id = 0;
  CUmemoryPool pool;
  if (!OK(cuMemPoolCreate(&pool, &props))) return nullptr;
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (!OK(cuMemPoolSetAccess(pool, &a, 1))) {
    OK(cuMemPoolDestroy(pool));
    return nullptr;
  }
  return pool;
}

void PoolLine(CUmemoryPool pool, const char* what) {
  cuuint64_t reserved = 0, used = 0;
  cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  printf("pool what=%s reserved=%llu used=%llu\n", what, (unsigned long long)reserved,
         (unsigned long long)used);
}

// Pointer attributes and copies of one mapped VMM host granule.
void VmmAttributes(CUdeviceptr dev, size_t g) {
  CUmemAllocationProp p = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  CUmemGenericAllocationHandle h;
  if (!OK(cuMemCreate(&h, g, &p, 0))) return;
  CUdeviceptr va;
  if (OK(cuMemAddressReserve(&va, g, 0, 0, 0))) {
    if (OK(cuMemMap(va, g, 0, h, 0))) {
      if (OpenForBoth(va, g)) {
        Attributes("vmm", va);
        CopyKinds("vmm", va, dev, g);
      }
      OK(cuMemUnmap(va, g));
    }
    OK(cuMemAddressFree(va, g));
  }
  OK(cuMemRelease(h));
}

// A host pool's growth and trimming, its allocations' attributes and copies.
void PoolFacts(CUstream s, CUdeviceptr dev) {
  CUmemoryPool pool = HostPool();
  if (pool == nullptr) return;
  PoolLine(pool, "created");
  CUdeviceptr a, b;
  if (OK(cuMemAllocFromPoolAsync(&a, 1 << 20, pool, s))) {
    PoolLine(pool, "after_1MiB");
    if (OK(cuMemAllocFromPoolAsync(&b, 5 << 20, pool, s))) {
      PoolLine(pool, "after_5MiB_more");
      OK(cuStreamSynchronize(s));
      Attributes("pool", a);
      CopyKinds("pool", a, dev, 1 << 20);
      OK(cuMemFreeAsync(b, s));
      PoolLine(pool, "after_free_5MiB");
      OK(cuStreamSynchronize(s));
      PoolLine(pool, "after_free_and_sync");
      OK(cuMemPoolTrimTo(pool, 0));
      PoolLine(pool, "after_trim_0");
    }
    OK(cuMemFreeAsync(a, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemPoolTrimTo(pool, 0));
    PoolLine(pool, "after_all_freed_trim_0");
  }
  OK(cuMemPoolDestroy(pool));
}

void Facts(CUstream s) {
  Granularities();
  Misuse();
  const size_t g = HostGranularity();
  CUdeviceptr dev;
  if (!OK(cuMemAlloc(&dev, g))) return;
  VmmAttributes(dev, g);
  PoolFacts(s, dev);
  OK(cuMemFree(dev));
}

// Median GB/s of `reps` synchronous copies each way.
void Bandwidth(const char* kind, void* host, CUdeviceptr dev, size_t n, int reps) {
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<double> gbps;
    for (int i = 0; i < reps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      const CUresult r = dir == 0 ? cuMemcpyHtoD(dev, host, n) : cuMemcpyDtoH(host, dev, n);
      if (!OK(r)) break;
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      gbps.push_back(n / s / 1e9);
    }
    if (gbps.empty()) continue;
    std::sort(gbps.begin(), gbps.end());
    printf("bw kind=%s dir=%s gbps=%.2f\n", kind, dir == 0 ? "H2D" : "D2H", gbps[gbps.size() / 2]);
    fflush(stdout);
  }
}

void VmmBandwidth(CUdeviceptr dev, size_t n, int reps) {
  CUmemAllocationProp p = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, false);
  CUmemGenericAllocationHandle h;
  if (!OK(cuMemCreate(&h, n, &p, 0))) return;
  CUdeviceptr va;
  if (OK(cuMemAddressReserve(&va, n, 0, 0, 0))) {
    if (OK(cuMemMap(va, n, 0, h, 0))) {
      if (OpenForBoth(va, n)) {
        memset(reinterpret_cast<void*>(va), 1, n);
        Bandwidth("vmm", reinterpret_cast<void*>(va), dev, n, reps);
      }
      OK(cuMemUnmap(va, n));
    }
    OK(cuMemAddressFree(va, n));
  }
  OK(cuMemRelease(h));
}

void PoolBandwidth(CUstream s, CUdeviceptr dev, size_t n, int reps) {
  CUmemoryPool pool = HostPool();
  if (pool == nullptr) return;
  CUdeviceptr block;
  if (OK(cuMemAllocFromPoolAsync(&block, n, pool, s)) && OK(cuStreamSynchronize(s))) {
    memset(reinterpret_cast<void*>(block), 1, n);
    Bandwidth("pool", reinterpret_cast<void*>(block), dev, n, reps);
    OK(cuMemFreeAsync(block, s));
    OK(cuStreamSynchronize(s));
  }
  OK(cuMemPoolDestroy(pool));
}

// Every kind's H2D and D2H speed; a kind whose set-up fails prints an error
// line and the others still run.
void Bandwidths(CUstream s) {
  const size_t g = HostGranularity();
  const char* mib = getenv("VMM_PROBE_MIB");  // for a quick run; 256 by default
  const size_t want = (mib != nullptr && atoi(mib) > 0 ? size_t(atoi(mib)) : 256) << 20;
  const size_t n = (want + g - 1) / g * g;
  const int reps = 7;
  CUdeviceptr dev;
  if (!OK(cuMemAlloc(&dev, n))) return;
  char* pageable = static_cast<char*>(malloc(n));
  memset(pageable, 1, n);
  Bandwidth("pageable", pageable, dev, n, reps);
  void* host_alloc;
  if (OK(cuMemHostAlloc(&host_alloc, n, 0))) {
    memset(host_alloc, 1, n);
    Bandwidth("host_alloc", host_alloc, dev, n, reps);
    OK(cuMemFreeHost(host_alloc));
  }
  if (OK(cuMemHostRegister(pageable, n, 0))) {
    Bandwidth("registered", pageable, dev, n, reps);
    OK(cuMemHostUnregister(pageable));
  }
  VmmBandwidth(dev, n, reps);
  PoolBandwidth(s, dev, n, reps);
  free(pageable);
  OK(cuMemFree(dev));
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
  fflush(stdout);
  if (sections.find("bw") != std::string::npos) Bandwidths(s);
  return 0;
}
