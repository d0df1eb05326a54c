// Misuse with VMM host memory and a host memory pool, pinned memory both:
// host-located VMM allocations mapped past the process's budget (the test
// runs it with PINSHIM_BUDGET=64 MiB), one mapped and never copied, and a
// host pool's allocation never copied. Driver backend only: it calls the
// driver API itself.
#include <cuda.h>
#include <unistd.h>

#include <cstring>

#include "tests/trace/harness/cuda_harness.h"
#include "tests/trace/harness/vmm_host.h"

namespace cuda = pinshim::testing::cuda;
using pinshim::testing::vmm::Check;
using pinshim::testing::vmm::HostProp;
using pinshim::testing::vmm::OpenForBoth;

namespace {

struct Mapping {
  CUmemGenericAllocationHandle handle;
  CUdeviceptr va;
  size_t bytes;
};

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
    OpenForBoth(m.va, m.bytes);
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
  OpenForBoth(spare.va, spare.bytes);
  memset(reinterpret_cast<void*>(spare.va), 2, spare.bytes);
  usleep(20000);
  Release(spare);
  for (const Mapping& m : big) Release(m);
  // A host pool's allocation no copy ever uses.
  CUmemoryPool pool = pinshim::testing::vmm::HostPool();
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
