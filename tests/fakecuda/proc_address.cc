// cuGetProcAddress: every entry point of a CUDA 13.0 driver by base name, ABI
// version and stream variant (driver_abis.inc, from the toolkit's typedef
// headers), answered as that driver answers. An ABI this library implements
// resolves to its function; any other resolves to a stub that says, when
// called, that the entry point is not simulated, and returns
// CUDA_ERROR_NOT_SUPPORTED.
#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

// One ABI of an entry point.
struct Abi {
  const char* name;  // Base name, as cuGetProcAddress takes it.
  int version;       // CUDA version that introduced this ABI.
  bool per_thread;   // The _ptds/_ptsz variant.
};

constexpr Abi kAbis[] = {
#include "tests/fakecuda/driver_abis.inc"
};
constexpr size_t kAbiCount = sizeof(kAbis) / sizeof(kAbis[0]);

// The ABIs implemented here; each must be one of kAbis.
struct Entry {
  const char* name;
  int version;
  bool per_thread;
  void* fn;
};

#define LEGACY(name, version, fn) \
  { name, version, false, reinterpret_cast<void*>(&fn) }
#define PER_THREAD(name, version, fn) \
  { name, version, true, reinterpret_cast<void*>(&fn) }

const Entry kEntries[] = {
    LEGACY("cuGetProcAddress", 11030, cuGetProcAddress),
    LEGACY("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    LEGACY("cuInit", 2000, cuInit),
    LEGACY("cuDriverGetVersion", 2020, cuDriverGetVersion),
    LEGACY("cuGetExportTable", 3000, cuGetExportTable),
    LEGACY("cuGetErrorName", 6000, cuGetErrorName),
    LEGACY("cuGetErrorString", 6000, cuGetErrorString),
    LEGACY("cuDeviceGet", 2000, cuDeviceGet),
    LEGACY("cuDeviceGetCount", 2000, cuDeviceGetCount),
    LEGACY("cuDeviceGetName", 2000, cuDeviceGetName),
    LEGACY("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    LEGACY("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    LEGACY("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    LEGACY("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    LEGACY("cuModuleGetLoadingMode", 11070, cuModuleGetLoadingMode),
    LEGACY("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    LEGACY("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    LEGACY("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    LEGACY("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    LEGACY("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    LEGACY("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    LEGACY("cuCtxCreate", 3020, cuCtxCreate_v2),
    LEGACY("cuCtxCreate", 11040, cuCtxCreate_v3),
    LEGACY("cuCtxCreate", 12050, cuCtxCreate_v4),
    LEGACY("cuCtxDestroy", 2000, cuCtxDestroy),
    LEGACY("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    LEGACY("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    LEGACY("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    LEGACY("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    LEGACY("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    LEGACY("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    LEGACY("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    LEGACY("cuCtxGetDevice", 2000, cuCtxGetDevice),
    LEGACY("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    LEGACY("cuCtxSynchronize", 2000, cuCtxSynchronize),
    LEGACY("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),

    LEGACY("cuMemAlloc", 3020, cuMemAlloc_v2),
    LEGACY("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    LEGACY("cuMemFree", 3020, cuMemFree_v2),
    LEGACY("cuMemAllocManaged", 6000, cuMemAllocManaged),
    LEGACY("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    LEGACY("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    LEGACY("cuMemHostAlloc", 2020, cuMemHostAlloc),
    LEGACY("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    LEGACY("cuMemFreeHost", 2000, cuMemFreeHost),
    LEGACY("cuMemHostRegister", 4000, cuMemHostRegister),
    LEGACY("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    LEGACY("cuMemHostUnregister", 4000, cuMemHostUnregister),
    LEGACY("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    LEGACY("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    LEGACY("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    LEGACY("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    LEGACY("cuMemCreate", 10020, cuMemCreate),
    LEGACY("cuMemRelease", 10020, cuMemRelease),
    LEGACY("cuMemAddressReserve", 10020, cuMemAddressReserve),
    LEGACY("cuMemAddressFree", 10020, cuMemAddressFree),
    LEGACY("cuMemMap", 10020, cuMemMap),
    LEGACY("cuMemUnmap", 10020, cuMemUnmap),
    LEGACY("cuMemSetAccess", 10020, cuMemSetAccess),
    LEGACY("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    LEGACY("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    LEGACY("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    LEGACY("cuMemRetainAllocationHandle", 10020, cuMemRetainAllocationHandle),
    LEGACY("cuMemPoolCreate", 11020, cuMemPoolCreate),
    LEGACY("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    LEGACY("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    LEGACY("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    LEGACY("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    LEGACY("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    PER_THREAD("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    LEGACY("cuMemFreeAsync", 11020, cuMemFreeAsync),
    PER_THREAD("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    LEGACY("cuPointerGetAttributes", 7000, cuPointerGetAttributes),

    LEGACY("cuMemcpy", 4000, cuMemcpy),
    PER_THREAD("cuMemcpy", 7000, cuMemcpy_ptds),
    LEGACY("cuMemcpyAsync", 4000, cuMemcpyAsync),
    PER_THREAD("cuMemcpyAsync", 7000, cuMemcpyAsync_ptsz),
    LEGACY("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    PER_THREAD("cuMemcpyHtoD", 7000, cuMemcpyHtoD_v2_ptds),
    LEGACY("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    PER_THREAD("cuMemcpyDtoH", 7000, cuMemcpyDtoH_v2_ptds),
    LEGACY("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    PER_THREAD("cuMemcpyDtoD", 7000, cuMemcpyDtoD_v2_ptds),
    LEGACY("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    PER_THREAD("cuMemcpyHtoDAsync", 7000, cuMemcpyHtoDAsync_v2_ptsz),
    LEGACY("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
    PER_THREAD("cuMemcpyDtoHAsync", 7000, cuMemcpyDtoHAsync_v2_ptsz),
    LEGACY("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
    PER_THREAD("cuMemcpyDtoDAsync", 7000, cuMemcpyDtoDAsync_v2_ptsz),
    LEGACY("cuMemcpy2D", 3020, cuMemcpy2D_v2),
    PER_THREAD("cuMemcpy2D", 7000, cuMemcpy2D_v2_ptds),
    LEGACY("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2),
    PER_THREAD("cuMemcpy2DUnaligned", 7000, cuMemcpy2DUnaligned_v2_ptds),
    LEGACY("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2),
    PER_THREAD("cuMemcpy2DAsync", 7000, cuMemcpy2DAsync_v2_ptsz),
    LEGACY("cuMemcpy3D", 3020, cuMemcpy3D_v2),
    PER_THREAD("cuMemcpy3D", 7000, cuMemcpy3D_v2_ptds),
    LEGACY("cuMemcpy3DAsync", 3020, cuMemcpy3DAsync_v2),
    PER_THREAD("cuMemcpy3DAsync", 7000, cuMemcpy3DAsync_v2_ptsz),
    LEGACY("cuMemcpyBatchAsync", 12080, cuMemcpyBatchAsync),
    PER_THREAD("cuMemcpyBatchAsync", 12080, cuMemcpyBatchAsync_ptsz),
    LEGACY("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2),
    PER_THREAD("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2_ptsz),
    LEGACY("cuMemsetD8", 3020, cuMemsetD8_v2),
    PER_THREAD("cuMemsetD8", 7000, cuMemsetD8_v2_ptds),

    LEGACY("cuStreamCreate", 2000, cuStreamCreate),
    LEGACY("cuStreamDestroy", 2000, cuStreamDestroy),
    LEGACY("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    LEGACY("cuStreamSynchronize", 2000, cuStreamSynchronize),
    PER_THREAD("cuStreamSynchronize", 7000, cuStreamSynchronize_ptsz),
    LEGACY("cuStreamQuery", 2000, cuStreamQuery),
    PER_THREAD("cuStreamQuery", 7000, cuStreamQuery_ptsz),
    LEGACY("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    PER_THREAD("cuStreamWaitEvent", 7000, cuStreamWaitEvent_ptsz),
    LEGACY("cuEventCreate", 2000, cuEventCreate),
    LEGACY("cuEventRecord", 2000, cuEventRecord),
    PER_THREAD("cuEventRecord", 7000, cuEventRecord_ptsz),
    LEGACY("cuEventQuery", 2000, cuEventQuery),
    LEGACY("cuEventSynchronize", 2000, cuEventSynchronize),
    LEGACY("cuEventDestroy", 2000, cuEventDestroy),
    LEGACY("cuEventDestroy", 4000, cuEventDestroy_v2),
    LEGACY("cuEventElapsedTime", 2000, cuEventElapsedTime),
    LEGACY("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    LEGACY("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
    PER_THREAD("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags_ptsz),
    LEGACY("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    LEGACY("cuStreamGetFlags", 5050, cuStreamGetFlags),
    PER_THREAD("cuStreamGetFlags", 7000, cuStreamGetFlags_ptsz),
    LEGACY("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
    PER_THREAD("cuLaunchHostFunc", 10000, cuLaunchHostFunc_ptsz),
    LEGACY("cuStreamAddCallback", 5000, cuStreamAddCallback),
    PER_THREAD("cuStreamAddCallback", 7000, cuStreamAddCallback_ptsz),

    LEGACY("cuStreamBeginCapture", 10000, cuStreamBeginCapture),
    PER_THREAD("cuStreamBeginCapture", 10000, cuStreamBeginCapture_ptsz),
    LEGACY("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    PER_THREAD("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2_ptsz),
    LEGACY("cuStreamEndCapture", 10000, cuStreamEndCapture),
    PER_THREAD("cuStreamEndCapture", 10000, cuStreamEndCapture_ptsz),
    LEGACY("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    LEGACY("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    PER_THREAD("cuStreamIsCapturing", 10000, cuStreamIsCapturing_ptsz),
    LEGACY("cuGraphInstantiate", 10000, cuGraphInstantiate_v2),
    LEGACY("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
    LEGACY("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    LEGACY("cuGraphLaunch", 10000, cuGraphLaunch),
    PER_THREAD("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
    LEGACY("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    LEGACY("cuGraphDestroy", 10000, cuGraphDestroy),
};

#undef LEGACY
#undef PER_THREAD

// The stub kAbis[I] resolves to when nothing here implements it. Callers pass
// that ABI's arguments; a function that takes none ignores them (in the
// x86-64 calling convention the caller owns its arguments).
template <size_t I>
CUresult Unsimulated() {
  return NotSimulated(kAbis[I].name);
}

using Stub = CUresult (*)();

template <size_t... I>
constexpr std::array<Stub, sizeof...(I)> StubTable(std::index_sequence<I...>) {
  return {{&Unsimulated<I>...}};
}

constexpr std::array<Stub, kAbiCount> kStubs = StubTable(std::make_index_sequence<kAbiCount>());

void* Implementation(const Abi& abi, size_t index) {
  for (const Entry& entry : kEntries) {
    if (entry.version == abi.version && entry.per_thread == abi.per_thread &&
        std::strcmp(entry.name, abi.name) == 0) {
      return entry.fn;
    }
  }
  return reinterpret_cast<void*>(kStubs[index]);
}

}  // namespace

CUresult LookupProc(const char* symbol, int version, cuuint64_t flags, void** pfn,
                    CUdriverProcAddressQueryResult* status) {
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (symbol == nullptr || pfn == nullptr || (flags & ~kKnownFlags) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Per-thread lookups prefer the newest per-thread variant and fall back to
  // the legacy one when the symbol has none at this version.
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool known = false;
  size_t legacy = kAbiCount;
  size_t threaded = kAbiCount;
  for (size_t i = 0; i < kAbiCount; ++i) {
    const Abi& abi = kAbis[i];
    if (std::strcmp(abi.name, symbol) != 0) continue;
    known = true;
    if (abi.version > version) continue;
    size_t& best = abi.per_thread ? threaded : legacy;
    if (best == kAbiCount || abi.version > kAbis[best].version) best = i;
  }
  const size_t pick = per_thread && threaded != kAbiCount ? threaded : legacy;
  if (pick == kAbiCount) {
    *pfn = nullptr;
    if (status != nullptr) {
      *status =
          known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    DebugLog("cuGetProcAddress(%s, %d, %llu): not found", symbol, version,
             static_cast<unsigned long long>(flags));
    return behavior::kProcAddressNotFound;
  }
  *pfn = Implementation(kAbis[pick], pick);
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  DebugLog("cuGetProcAddress(%s, %d, %llu): ABI %d%s%s", symbol, version,
           static_cast<unsigned long long>(flags), kAbis[pick].version,
           kAbis[pick].per_thread ? " per-thread" : "",
           *pfn == reinterpret_cast<void*>(kStubs[pick]) ? ", not simulated" : "");
  return CUDA_SUCCESS;
}

}  // namespace fakecuda

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  FAKECUDA_ENTER("cuGetProcAddress");
  return fakecuda::LookupProc(symbol, cudaVersion, flags, pfn, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  FAKECUDA_ENTER("cuGetProcAddress");
  return fakecuda::LookupProc(symbol, cudaVersion, flags, pfn, symbolStatus);
}

}  // extern "C"
