// Misuse: a host-located VMM allocation (cuMemCreate, cuMemMap,
// cuMemSetAccess: how NCCL maps its cuMem host buffers) made, mapped,
// unmapped and released for every batch. And what is not misuse: a host
// memory pool's allocations, taken and given back every batch (reusing the
// pool's memory is the pool's job), and many copies of both kinds, which
// are pinned memory, so that neither pageable-hot nor async-pageable may
// name them, and sync-copy-loop must not ask to pin them. Driver backend
// only: it calls the driver API itself.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/trace/harness/cuda_harness.h"
#include "tests/trace/harness/vmm_host.h"

namespace cuda = pinshim::testing::cuda;

using pinshim::testing::vmm::Check;
using pinshim::testing::vmm::HostPool;
using pinshim::testing::vmm::OpenForBoth;

int main() {
  const size_t kBytes = 1 << 20;
  void* dev = cuda::DeviceAlloc(kBytes);
  cuda::Stream stream = cuda::StreamCreate();
  const CUmemAllocationProp prop = pinshim::testing::vmm::HostProp();
  size_t g = 0;
  Check(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
  for (int batch = 0; batch < 12; ++batch) {
    CUmemGenericAllocationHandle handle;
    Check(cuMemCreate(&handle, g, &prop, 0), "cuMemCreate");
    CUdeviceptr va;
    Check(cuMemAddressReserve(&va, g, 0, 0, 0), "cuMemAddressReserve");
    Check(cuMemMap(va, g, 0, handle, 0), "cuMemMap");  // MISUSE(pinned-churn)
    OpenForBoth(va, g);
    char* host = reinterpret_cast<char*>(va);
    memset(host, batch, kBytes);
    cuda::MemcpyHtoDAsync(dev, host, kBytes, stream);
    cuda::MemcpyDtoHAsync(host, dev, kBytes, stream);
    cuda::StreamSynchronize(stream);
    Check(cuMemUnmap(va, g), "cuMemUnmap");
    Check(cuMemAddressFree(va, g), "cuMemAddressFree");
    Check(cuMemRelease(handle), "cuMemRelease");
  }
  CUmemoryPool pool = HostPool();
  for (int batch = 0; batch < 12; ++batch) {
    CUdeviceptr block;
    Check(cuMemAllocFromPoolAsync(&block, kBytes, pool, static_cast<CUstream>(stream)), "alloc");
    cuda::StreamSynchronize(stream);
    char* host = reinterpret_cast<char*>(block);
    memset(host, batch, kBytes);
    for (int i = 0; i < 4; ++i) {
      cuda::MemcpyHtoDAsync(dev, host, kBytes, stream);
      cuda::MemcpyDtoHAsync(host, dev, kBytes, stream);
    }
    cuda::StreamSynchronize(stream);
    // Synchronous copies in a loop block the thread whatever the memory;
    // the finding must not ask for pinned memory.
    for (int i = 0; i < 6; ++i) {
      cuda::MemcpyHtoD(dev, host, kBytes);  // MISUSE(sync-copy-loop)
    }
    Check(cuMemFreeAsync(block, static_cast<CUstream>(stream)), "cuMemFreeAsync");
  }
  cuda::StreamSynchronize(stream);
  Check(cuMemPoolDestroy(pool), "cuMemPoolDestroy");
  cuda::StreamDestroy(stream);
  cuda::DeviceFree(dev);
  return 0;
}
