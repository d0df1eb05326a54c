// Where the simulated driver had to pick an answer the CUDA documentation does
// not pin down, the pick is written here, once. Each entry says where it comes
// from; correct it here if the real driver (CUDA 13.0, driver 580) is measured
// to differ, and the tests that pin it down will point at what else changes.
#ifndef PINSHIM_TESTS_FAKECUDA_DRIVER_BEHAVIOR_H_
#define PINSHIM_TESTS_FAKECUDA_DRIVER_BEHAVIOR_H_

#include <cuda.h>

#include <cstddef>

namespace fakecuda {
namespace behavior {

// cuDriverGetVersion and the newest ABI the proc-address table knows.
constexpr int kDriverVersion = 13000;

// Devices when FAKECUDA_DEVICES is unset; FAKECUDA_DEVICES=0 makes cuInit
// return CUDA_ERROR_NO_DEVICE, as on a machine without a GPU.
constexpr int kDefaultDeviceCount = 2;
constexpr int kMaxDeviceCount = 16;

// An H200: 143771 MiB, compute capability 9.0.
constexpr size_t kDeviceTotalMem = 143771ull << 20;

// Unified addressing maps every page-locked allocation into the device address
// space, so cuMemHostGetFlags on cuMemHostAlloc/cuMemAllocHost memory reports
// the flags given plus DEVICEMAP (reported measured on driver 590:
// cuMemHostAlloc(flags=0) reads back 0x2).
constexpr unsigned kImpliedHostAllocFlags = CU_MEMHOSTALLOC_DEVICEMAP;

// Documented: cuMemHostGetFlags fails unless the pointer lies in memory from
// cuMemAllocHost/cuMemHostAlloc, so registered memory reads back an error.
constexpr bool kHostGetFlagsOnRegistered = false;

// CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 1 on every device here, so the
// device pointer of any page-locked memory (write-combined included) is the
// host address itself.
constexpr bool kDevicePointerIsHostPointer = true;

// Measured on the H200 (driver 580, bench/gpu/page_facts.cu): cuMemHostAlloc
// memory is a shared mapping of /dev/zero (shared anonymous memory): a fork
// child shares its pages with the parent (the child's writes show in the
// parent), madvise(MADV_DONTNEED) keeps its content, MADV_REMOVE punches it
// out (the device then still gets the old pages).
constexpr bool kHostAllocIsSharedMemory = true;

// Measured on the H200 (driver 580, bench/gpu/page_facts.cu
// "copy_partly_registered"): a copy whose host range starts in page-locked
// memory and runs past its end fails with CUDA_ERROR_INVALID_VALUE (H2D, D2H,
// async alike); one that starts in pageable memory and runs into page-locked
// memory succeeds, as pageable.
constexpr CUresult kCopyPastPageLockedEnd = CUDA_ERROR_INVALID_VALUE;

// Reported measured on driver 590: cuMemHostAlloc with size 0 succeeds. The
// pointer it returns here is a real (one page) allocation, freed as usual.
constexpr bool kHostAllocZeroSizeSucceeds = true;

// Reported measured on driver 590: cuMemHostRegister accepts ranges that are
// not page aligned; overlap is judged on the exact byte ranges, so two buffers
// sharing a page register independently.
constexpr bool kRegisterByExactByteRange = true;

// Reported measured on driver 590: cuMemHostUnregister on a pointer inside a
// registration (not its start) or on cuMemHostAlloc memory returns
// CUDA_ERROR_INVALID_VALUE; on memory never registered, NOT_REGISTERED.
constexpr CUresult kUnregisterInteriorPointer = CUDA_ERROR_INVALID_VALUE;
constexpr CUresult kUnregisterHostAlloc = CUDA_ERROR_INVALID_VALUE;
constexpr CUresult kUnregisterUnknown = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;

// Not measured: registering a range that is not mapped in the process, or
// registering with CU_MEMHOSTREGISTER_IOMEMORY (no I/O memory here).
constexpr CUresult kRegisterUnmapped = CUDA_ERROR_INVALID_VALUE;
constexpr CUresult kRegisterIoMemory = CUDA_ERROR_NOT_SUPPORTED;

// Not measured: freeing a null pointer. cuMemFree(0) and cuMemFreeHost(NULL)
// are treated as "not allocated by this driver".
constexpr CUresult kFreeNull = CUDA_ERROR_INVALID_VALUE;

// Not measured: managed memory reads back as CU_MEMORYTYPE_DEVICE with
// IS_MANAGED set (the runtime turns that pair into cudaMemoryTypeManaged).
constexpr CUmemorytype kManagedMemoryType = CU_MEMORYTYPE_DEVICE;

// Boolean pointer attributes (IS_MANAGED, MAPPED, ...) are written as a 4-byte
// unsigned int, the width callers commonly pass.
using PointerAttrBool = unsigned int;

// Documented: cuMemAllocPitch takes element sizes 4, 8 or 16; the pitch is the
// width rounded up to this (what current GPUs return).
constexpr size_t kPitchAlignment = 512;

// Measured on the H200 (driver 580, page_facts sync_h2d_return): a
// synchronous copy from pageable memory to the device returns once the
// stream's earlier work completed and its source was read; its DMA is
// usually still in flight (39 or 40 of 40 at 64 KiB to 64 MiB). From pinned
// memory it returns complete. Documented too ("the DMA to final destination
// may not have completed"). Not measured for 2D/3D copies, which complete.
constexpr bool kSyncPageableUploadReturnsBeforeItsDma = true;

// Measured on the H200 (driver 580; page_facts hostfunc_order): an
// asynchronous upload from pageable memory reads its first 2 MiB when it is
// called and the rest only once the work queued before it on its stream
// completed. With a host function that rewrites the source queued ahead of
// it (behind a 50 ms kernel), copies of 64 KiB and 1 MiB delivered the old
// bytes and returned at once; copies of 4 to 64 MiB delivered 2 MiB of old
// bytes, the rest new, and returned after the kernel. A synchronous upload
// reads nothing before that work completed (new bytes throughout).
constexpr size_t kAsyncPageableUploadEagerBytes = size_t{2} << 20;

// Not measured: a batch (cuMemcpyBatchAsync) that touches pageable host memory
// completes before the call returns, like every other asynchronous copy of
// pageable memory, whatever the source access order says.
constexpr bool kBatchWithPageableIsSynchronous = true;

// cuGetProcAddress: a symbol that is unknown or has no ABI at the requested
// version sets *pfn to NULL and returns CUDA_ERROR_NOT_FOUND (what current
// drivers return; older documentation says CUDA_SUCCESS). Versions newer than
// kDriverVersion are not rejected.
constexpr CUresult kProcAddressNotFound = CUDA_ERROR_NOT_FOUND;

// Not measured: destroying a primary context with cuCtxDestroy, or a context
// handle that is unknown or already destroyed.
constexpr CUresult kBadContextHandle = CUDA_ERROR_INVALID_CONTEXT;

// Documented: destroying a context (cuCtxDestroy, cuDevicePrimaryCtxReset, or
// the last cuDevicePrimaryCtxRelease) frees its memory, page-locked host
// allocations (cuMemHostAlloc, cuMemAllocHost) included, whatever their flags.
// The driver unmaps those pages; here they stay reserved without access, so a
// stale pointer faults instead of reaching whatever is mapped there later.
constexpr bool kFreedContextHostPagesStayReserved = true;

// Measured (bench/RESULTS.md, "2026-12-06, seventh part"): a range
// registered with cuMemHostRegister, even CU_MEMHOSTREGISTER_PORTABLE, is
// unregistered when the context that registered it is destroyed (a primary
// context reset): cuMemHostGetFlags on it then answers
// CUDA_ERROR_INVALID_VALUE, and registering it again succeeds. Its pages
// stay the program's, mapped as they were.
constexpr bool kDestroyedContextDropsRegistrations = true;

// Documented: cuDevicePrimaryCtxReset destroys the primary context's resources
// and leaves it inactive, but does not release it: references taken before
// the reset stay counted, so the releases that match them still succeed (and
// destroy nothing while the context is inactive). Resetting an inactive
// primary context succeeds and does nothing.
constexpr CUresult kResetInactivePrimary = CUDA_SUCCESS;

// Not measured: a context handle is an address the driver may hand out again
// after the context is destroyed. Here a primary context keeps one handle
// across resets and releases (retaining it again brings that handle back),
// and cuCtxCreate reuses the most recently destroyed created context's
// handle, so anything keyed by a context handle meets the reuse every time.
constexpr bool kReuseDestroyedContextHandles = true;

// Not measured: cuStreamDestroy on the NULL/legacy/per-thread handles.
constexpr CUresult kDestroySpecialStream = CUDA_ERROR_INVALID_HANDLE;

// ---- The virtual memory management API and memory pools (vmm.cc) ----------
// Entries marked "Measured" come from bench/gpu/vmm_host_probe.cu on the GPU
// host (bench/RESULTS.md, "2026-12-06, second part", "VMM host memory, the
// driver's answers"); the others are picks, to be checked the same way.

// Measured on the GPU host (driver 580, bench/gpu/vmm_host_probe.cu): the
// minimum and recommended granularity are these, for host, host-NUMA and
// host-NUMA-current locations alike. cuMemCreate of a size that is not a
// multiple fails with CUDA_ERROR_INVALID_VALUE.
constexpr size_t kVmmHostGranularityMinimum = size_t{2} << 20;
constexpr size_t kVmmHostGranularityRecommended = size_t{2} << 20;
constexpr CUresult kVmmCreateNotMultiple = CUDA_ERROR_INVALID_VALUE;

// Measured on the GPU host (driver 580, bench/gpu/vmm_host_probe.cu):
// cuMemMap with a size, offset or address that is not a granularity
// multiple, or with offset + size past the allocation, fails with
// CUDA_ERROR_NOT_SUPPORTED; onto addresses already mapped, with
// CUDA_ERROR_INVALID_VALUE.
constexpr CUresult kVmmMapMisaligned = CUDA_ERROR_NOT_SUPPORTED;
constexpr CUresult kVmmMapOntoMapped = CUDA_ERROR_INVALID_VALUE;

// Measured on the GPU host (driver 580, bench/gpu/vmm_host_probe.cu): a map
// that starts in a reservation and runs past its end succeeds (the driver
// takes its addresses from a larger range of its own). Here each reservation
// is followed by as much address space again, held for it, so such a map
// lands there and not on the program's memory; a map that starts outside
// every reservation, or runs past that slack, is refused (not measured).
constexpr bool kVmmMapPastReservationEndSucceeds = true;
constexpr CUresult kVmmMapOutsideReservations = CUDA_ERROR_INVALID_VALUE;

// Measured on the GPU host (driver 580, bench/gpu/vmm_host_probe.cu):
// cuMemUnmap of a range that holds no mapping succeeds and does nothing; of
// part of a mapping, fails with CUDA_ERROR_INVALID_VALUE. Not measured: a
// range that holds whole mappings and gaps (here: the mappings go).
constexpr CUresult kVmmUnmapUnmapped = CUDA_SUCCESS;
constexpr CUresult kVmmUnmapPart = CUDA_ERROR_INVALID_VALUE;

// Measured on the GPU host (driver 580, bench/gpu/vmm_host_probe.cu):
// cuMemAddressFree of a reservation that still holds a mapping fails with
// CUDA_ERROR_INVALID_VALUE; cuMemRelease of a handle that is still mapped
// succeeds (the memory goes with its last mapping); a second cuMemRelease
// of the same handle fails with CUDA_ERROR_INVALID_VALUE.
constexpr CUresult kVmmFreeMappedReservation = CUDA_ERROR_INVALID_VALUE;
constexpr bool kVmmReleaseWhileMappedSucceeds = true;
constexpr CUresult kVmmReleaseTwice = CUDA_ERROR_INVALID_VALUE;

// Measured on the GPU host (driver 580, bench/gpu/vmm_host_probe.cu, and the
// GPU tier's vmm_host program): the CPU faults (SIGSEGV) on host-located
// memory from cuMemMap until a cuMemSetAccess with a host location grants it
// access; one that names only the device leaves the CPU faulting. Here the
// mapping is PROT_NONE until then, and takes the protection the host
// location's flags give (read, read-write, none). The driver's copies reach
// the memory whatever the CPU may do.
constexpr bool kVmmHostCpuAccessAtMap = false;

// Measured on the GPU host (driver 580, the hazard suite's cases on memory
// the driver maps; bench/RESULTS.md, "2026-12-06, fifth part"): a page of
// VMM host memory or of a host pool's allocation that the program drops
// from its mapping (madvise MADV_DONTNEED, through libc or a raw system
// call) does not come back: the CPU's next access to it ends the process
// with SIGBUS. Here the program's mappings of such memory are filled in when
// the CPU is granted access and registered with userfaultfd for minor
// faults with UFFD_FEATURE_SIGBUS: a page dropped from them faults again
// with its bytes still in the shared memory, which delivers SIGBUS to the
// user-mode access, while this library's copies use mappings of their own.
// Where the kernel offers no such userfaultfd (before Linux 5.14, or
// refused), dropped pages come back as before
// (fakecuda_drops_fault() says which).
constexpr bool kDroppedDriverPagesFault = true;

// Measured on the GPU host (driver 580, bench/gpu/vmm_host_probe.cu):
// cuMemHostRegister of VMM host memory fails with CUDA_ERROR_INVALID_VALUE.
constexpr CUresult kRegisterVmmHost = CUDA_ERROR_INVALID_VALUE;

// Measured on the GPU host (bench/gpu/vmm_host_probe.cu; bench/RESULTS.md,
// "2026-12-06: VMM host memory and host pools on the GPU host"):
// CU_POINTER_ATTRIBUTE_MEMORY_TYPE reads CU_MEMORYTYPE_HOST for VMM host
// memory and host-pool allocations alike. cuMemHostGetFlags on mapped VMM
// host memory succeeds with PORTABLE | DEVICEMAP, as if it were
// cuMemHostAlloc memory; on a host-pool allocation it fails with
// CUDA_ERROR_INVALID_VALUE.
constexpr unsigned kVmmHostMemoryType = CU_MEMORYTYPE_HOST;
constexpr unsigned kVmmHostGetFlags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
constexpr CUresult kPoolHostGetFlags = CUDA_ERROR_INVALID_VALUE;

// Measured on the GPU host (bench/gpu/vmm_host_probe.cu; bench/RESULTS.md,
// "2026-12-06: VMM host memory and host pools on the GPU host"): a host
// memory pool reserves this much at its first allocation and serves later
// ones from it (RESERVED_MEM_CURRENT reads it after a small allocation and
// still after a second one). Not measured: how it grows once that is full,
// or for one request larger than it; here by the request rounded up to a
// multiple of this. A pool keeps a reservation that holds a live allocation
// through cuMemPoolTrimTo (measured: trimming to nothing with an
// allocation live kept all of it) and gives back wholly free ones
// (measured: all of it once everything was freed). Not simulated: the driver may also give memory
// above the release threshold back at a synchronization.
constexpr size_t kHostPoolGrowth = size_t{32} << 20;

// Measured on the GPU host (bench/gpu/vmm_host_probe.cu; bench/RESULTS.md,
// "2026-12-06: VMM host memory and host pools on the GPU host"): a pool's
// USED_MEM_CURRENT drops at the cuMemFreeAsync call, before the stream
// reaches the free; the memory serves another allocation only once the
// stream did (documented).
constexpr bool kPoolUsedDropsAtFreeCall = true;

// Measured on the GPU host (bench/gpu/vmm_host_probe.cu; bench/RESULTS.md,
// "2026-12-06: VMM host memory and host pools on the GPU host"): for a
// pointer inside a host-pool allocation, RANGE_SIZE is that allocation's own
// size, MEMPOOL_HANDLE is its pool, and RANGE_START_ADDR is not the
// allocation's start. Not measured: what RANGE_START_ADDR is; the pick is
// the start of the pool's reservation holding it, and the pool carves
// allocations from the top of its free memory, so the first one does not
// start there either. [RANGE_START_ADDR, + RANGE_SIZE) then need not
// contain the pointer: a caller must not read the pair as the allocation.
constexpr bool kPoolRangeStartIsReservation = true;

// Not measured (tests/interception/vmm_program.cc "edges-vmm" in the GPU
// tier checks it): one copy over VMM host mappings that lie side by side in
// a reservation (two handles, as NCCL maps them) reaches both, as a copy of
// device memory mapped so does. A copy that runs past a mapping into
// address space without one is refused as any copy past page-locked memory.
constexpr bool kVmmCopyCrossesAdjacentMappings = true;

// Documented: cuMemRetainAllocationHandle of any address inside a mapping
// gives the handle mapped there and one more reference to it, which needs a
// cuMemRelease of its own. Not measured: the answer for an address no
// mapping holds (documented only as a failure).
constexpr CUresult kVmmRetainUnmapped = CUDA_ERROR_INVALID_VALUE;

// Documented: cuMemPoolDestroy of a pool with allocations outstanding
// returns at once, and the pool's memory goes once they are all freed. Not
// measured: whether any of it (wholly free reservations) goes sooner; the
// pick is none, so that a destroyed pool holds its whole reservation until
// its last allocation is freed (cuMemFreeAsync, or cuMemFree, which frees a
// pool's allocation at once and without synchronizing: documented).
constexpr bool kDestroyedPoolKeepsAllUntilLastFree = true;

// Documented: cuMemExportToShareableHandle needs the handle type among the
// allocation's requestedHandleTypes. Measured on the GPU host (driver 580,
// bench/gpu/vmm_host_probe.cu): otherwise CUDA_ERROR_INVALID_VALUE.
constexpr CUresult kExportTypeNotRequested = CUDA_ERROR_INVALID_VALUE;

}  // namespace behavior
}  // namespace fakecuda

#endif  // PINSHIM_TESTS_FAKECUDA_DRIVER_BEHAVIOR_H_
