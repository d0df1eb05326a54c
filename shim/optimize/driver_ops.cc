#include "shim/optimize/driver_ops.h"

#include <time.h>

#include <cstddef>
#include <cstring>

#include "shim/core/registry.h"

namespace pinshim {
namespace optimize {

#define PINSHIM_OP(abi, field) \
  { abi, offsetof(DriverOps, field) }
const DriverOpSymbol kDriverOpSymbols[] = {
    PINSHIM_OP("cuMemHostAlloc", mem_host_alloc),
    PINSHIM_OP("cuMemFreeHost", mem_free_host),
    PINSHIM_OP("cuMemHostRegister_v2", mem_host_register),
    PINSHIM_OP("cuMemHostUnregister", mem_host_unregister),
    PINSHIM_OP("cuMemHostGetDevicePointer_v2", mem_host_get_device_pointer),
    PINSHIM_OP("cuMemHostGetFlags", mem_host_get_flags),
    PINSHIM_OP("cuEventCreate", event_create),
    PINSHIM_OP("cuEventRecord", event_record),
    PINSHIM_OP("cuEventQuery", event_query),
    PINSHIM_OP("cuEventSynchronize", event_synchronize),
    PINSHIM_OP("cuEventDestroy_v2", event_destroy),
    PINSHIM_OP("cuStreamSynchronize", stream_synchronize),
    PINSHIM_OP("cuStreamQuery", stream_query),
    PINSHIM_OP("cuStreamGetFlags", stream_get_flags),
    PINSHIM_OP("cuCtxGetCurrent", ctx_get_current),
    PINSHIM_OP("cuCtxSetCurrent", ctx_set_current),
    PINSHIM_OP("cuCtxSynchronize", ctx_synchronize),
    PINSHIM_OP("cuMemcpyHtoDAsync_v2", memcpy_htod_async),
    PINSHIM_OP("cuMemcpyDtoHAsync_v2", memcpy_dtoh_async),
    PINSHIM_OP("cuPointerGetAttribute", pointer_get_attribute),
    PINSHIM_OP("cuStreamIsCapturing", stream_is_capturing),
    PINSHIM_OP("cuThreadExchangeStreamCaptureMode", thread_exchange_capture_mode),
    PINSHIM_OP("cuDeviceGetCount", device_get_count),
    PINSHIM_OP("cuDeviceGetAttribute", device_get_attribute),
};
#undef PINSHIM_OP
const int kDriverOpCount = sizeof(kDriverOpSymbols) / sizeof(kDriverOpSymbols[0]);

static_assert(sizeof(DriverOps) == sizeof(void*) * 24, "one symbol per DriverOps entry");

bool LoadDriverOps(DriverSymbolLookup lookup, void* arg, DriverOps* ops) {
  memset(ops, 0, sizeof(*ops));
  if (lookup == nullptr) return false;
  for (int i = 0; i < kDriverOpCount; ++i) {
    void* fn = lookup(kDriverOpSymbols[i].abi_name, arg);
    if (fn == nullptr) {
      memset(ops, 0, sizeof(*ops));
      return false;
    }
    memcpy(reinterpret_cast<char*>(ops) + kDriverOpSymbols[i].offset, &fn, sizeof(fn));
  }
  return true;
}

bool DriverOpsComplete(const DriverOps& ops) {
  for (int i = 0; i < kDriverOpCount; ++i) {
    void* fn;
    memcpy(&fn, reinterpret_cast<const char*>(&ops) + kDriverOpSymbols[i].offset, sizeof(fn));
    if (fn == nullptr) return false;
  }
  return true;
}

ScopedContext::ScopedContext(const DriverOps* ops, CUcontext ctx) : ops_(ops) {
  if (ctx == nullptr) return;
  if (ops_->ctx_get_current(&previous_) != CUDA_SUCCESS) return;
  if (previous_ == ctx) return;
  switched_ = ops_->ctx_set_current(ctx) == CUDA_SUCCESS;
}

ScopedContext::~ScopedContext() {
  if (switched_) ops_->ctx_set_current(previous_);
}

bool DeviceRangeOk(const DriverOps& ops, const Registry* allocations, CUdeviceptr dev,
                   uint64_t bytes) {
  Region r;
  if (allocations != nullptr && allocations->Lookup(dev, &r) && r.kind == MemKind::kDevice) {
    return bytes <= r.bytes - (dev - r.start);
  }
  unsigned int type = 0;
  if (ops.pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev) != CUDA_SUCCESS ||
      type != CU_MEMORYTYPE_DEVICE) {
    return false;
  }
  unsigned int managed = 0;
  if (ops.pointer_get_attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, dev) != CUDA_SUCCESS ||
      managed != 0) {
    return false;
  }
  CUdeviceptr start = 0;
  size_t size = 0;
  if (ops.pointer_get_attribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, dev) !=
          CUDA_SUCCESS ||
      ops.pointer_get_attribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dev) != CUDA_SUCCESS) {
    return false;
  }
  return dev >= start && bytes <= size - (dev - start);
}

bool StreamCaptures(const DriverOps& ops, CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return ops.stream_is_capturing(stream, &status) != CUDA_SUCCESS ||
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

RelaxedCaptureMode::RelaxedCaptureMode(const DriverOps* ops) : ops_(ops) {
  exchanged_ = ops_->thread_exchange_capture_mode(&previous_) == CUDA_SUCCESS;
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (exchanged_ && previous_ != CU_STREAM_CAPTURE_MODE_RELAXED) {
    ops_->thread_exchange_capture_mode(&previous_);
  }
}

}  // namespace optimize
}  // namespace pinshim
