// Host-located VMM memory and host memory pools for the trace programs that
// call the driver API themselves (the driver backend only): the steps the
// programs share, none of them a site a finding names.
#ifndef PINSHIM_TESTS_TRACE_HARNESS_VMM_HOST_H_
#define PINSHIM_TESTS_TRACE_HARNESS_VMM_HOST_H_

#include <cuda.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

namespace pinshim {
namespace testing {
namespace vmm {

// Ends the program when a driver call fails.
inline void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  fprintf(stderr, "%s failed: %d\n", what, r);
  abort();
}

// Pinned memory on the host's NUMA node 0.
inline CUmemAllocationProp HostProp() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  return prop;
}

// Read-write for device 0 and the CPU (which faults until a host location
// is granted access).
inline void OpenForBoth(CUdeviceptr va, size_t n) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Check(cuMemSetAccess(va, n, &access, 1), "cuMemSetAccess (device)");
  access.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  Check(cuMemSetAccess(va, n, &access, 1), "cuMemSetAccess (host)");
}

// A host memory pool opened for device 0.
inline CUmemoryPool HostPool() {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CUmemoryPool pool;
  Check(cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Check(cuMemPoolSetAccess(pool, &access, 1), "cuMemPoolSetAccess");
  return pool;
}

}  // namespace vmm
}  // namespace testing
}  // namespace pinshim

#endif  // PINSHIM_TESTS_TRACE_HARNESS_VMM_HOST_H_
