// Misuse with VMM host memory and a host memory pool, pinned memory both:
// host-located VMM allocations mapped past the process's budget (the test
// runs it with PINSHIM_BUDGET=64 MiB), one mapped and never copied, and a
// host pool's allocation never copied. Driver backend only: it calls the
// driver API itself.
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

namespace {

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  fprintf(stderr, "%s failed: %d\n", what, r);
  abort();
}

struct Mapping {
  CUmemGenericAllocationHandle handle;
  CUdeviceptr va;
  size_t bytes;
};

CUmemAllocationProp HostProp() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  return prop;
}

// Opens a mapping to the device, then to the CPU.
void Open(Mapping* m) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Check(cuMemSetAccess(m->va, m->bytes, &access, 1), "cuMemSetAccess (device)");
  access.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  Check(cuMemSetAccess(m->va, m->bytes, &access, 1), "cuMemSetAccess (host)");
}

void Release(const Mapping& m) {
  Check(cuMemUnmap(m.va, m.bytes), "cuMemUnmap");
  Check(cuMemAddressFree(m.va, m.bytes), "cuMemAddressFree");
  Check(cuMemRelease(m.handle), "cuMemRelease");
}

}  // namespace

int main() {
  void* dev = cuda::DeviceAlloc(4096);
  cuda::Stream stream = cuda::StreamCreate();
  const CUmemAllocationProp prop = HostProp();
  // A staging area of four 32 MiB blocks, each used by one small copy.
  Mapping big[4];
  for (Mapping& m : big) {
    m.bytes = size_t{32} << 20;
    Check(cuMemCreate(&m.handle, m.bytes, &prop, 0), "cuMemCreate");
    Check(cuMemAddressReserve(&m.va, m.bytes, 0, 0, 0), "cuMemAddressReserve");
    Check(cuMemMap(m.va, m.bytes, 0, m.handle, 0), "cuMemMap");  // MISUSE(over-pinning)
    Open(&m);
    memset(reinterpret_cast<void*>(m.va), 1, 4096);
    cuda::MemcpyHtoDAsync(dev, reinterpret_cast<void*>(m.va), 4096, stream);
  }
  cuda::StreamSynchronize(stream);
  // A spare block no copy ever uses.
  Mapping spare;
  spare.bytes = size_t{8} << 20;
  Check(cuMemCreate(&spare.handle, spare.bytes, &prop, 0), "cuMemCreate");
  Check(cuMemAddressReserve(&spare.va, spare.bytes, 0, 0, 0), "cuMemAddressReserve");
  Check(cuMemMap(spare.va, spare.bytes, 0, spare.handle, 0), "map");  // MISUSE(pinned-unused)
  Open(&spare);
  memset(reinterpret_cast<void*>(spare.va), 2, spare.bytes);
  usleep(20000);
  Release(spare);
  for (const Mapping& m : big) Release(m);
  // A host pool's allocation no copy ever uses.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CUmemoryPool pool;
  Check(cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
  CUdeviceptr block;
  const CUstream s = static_cast<CUstream>(stream);
  const size_t n = size_t{8} << 20;
  const CUresult r = cuMemAllocFromPoolAsync(&block, n, pool, s);  // MISUSE(pinned-unused)
  Check(r, "cuMemAllocFromPoolAsync");
  cuda::StreamSynchronize(stream);
  memset(reinterpret_cast<void*>(block), 3, n);
  usleep(20000);
  Check(cuMemFreeAsync(block, static_cast<CUstream>(stream)), "cuMemFreeAsync");
  cuda::StreamSynchronize(stream);
  Check(cuMemPoolDestroy(pool), "cuMemPoolDestroy");
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  return 0;
}
