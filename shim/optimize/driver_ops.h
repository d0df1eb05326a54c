// The driver functions the optimize engine calls, as a table of pointers.
//
// The hooks fill it from the REAL driver functions (RealDriverFunction, or
// dlsym on the driver library for entry points pinshim does not wrap), never
// from pinshim's own wrappers: the engine's pinning must not be counted,
// traced or optimized as if the program had done it. Tests fill it from the
// simulated driver.
#ifndef PINSHIM_SHIM_OPTIMIZE_DRIVER_OPS_H_
#define PINSHIM_SHIM_OPTIMIZE_DRIVER_OPS_H_

#include <cuda.h>

#include <cstdint>

#include "shim/core/clock.h"

namespace pinshim {

class Registry;

namespace optimize {

struct DriverOps {
  CUresult (*mem_host_alloc)(void** pp, size_t bytes, unsigned int flags);
  CUresult (*mem_free_host)(void* p);
  CUresult (*mem_host_register)(void* p, size_t bytes, unsigned int flags);
  CUresult (*mem_host_unregister)(void* p);
  CUresult (*mem_host_get_device_pointer)(CUdeviceptr* out, void* p, unsigned int flags);
  CUresult (*mem_host_get_flags)(unsigned int* out, void* p);
  CUresult (*event_create)(CUevent* out, unsigned int flags);
  CUresult (*event_record)(CUevent event, CUstream stream);
  CUresult (*event_query)(CUevent event);
  CUresult (*event_synchronize)(CUevent event);
  CUresult (*event_destroy)(CUevent event);
  CUresult (*stream_synchronize)(CUstream stream);
  CUresult (*stream_query)(CUstream stream);
  CUresult (*stream_get_flags)(CUstream stream, unsigned int* flags);
  CUresult (*ctx_get_current)(CUcontext* out);
  CUresult (*ctx_set_current)(CUcontext ctx);
  CUresult (*ctx_synchronize)();
  // Staged copies: the ring's DMA, and the device range of a copy.
  CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
  CUresult (*memcpy_dtoh_async)(void* dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*pointer_get_attribute)(void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
  // Staged copies never run into a stream capture (the graph would copy the
  // ring); pinshim's own threads make their driver calls in relaxed capture
  // mode, so they never disturb a capture of the program's.
  CUresult (*stream_is_capturing)(CUstream stream, CUstreamCaptureStatus* status);
  CUresult (*thread_exchange_capture_mode)(CUstreamCaptureMode* mode);
  // Whether any device can touch pageable memory (Stager::ReadsAllAtCall).
  CUresult (*device_get_count)(int* count);
  CUresult (*device_get_attribute)(int* value, CUdevice_attribute attribute, CUdevice dev);
};

// One entry of the table: the driver's ABI symbol that fills it.
struct DriverOpSymbol {
  const char* abi_name;  // "cuMemHostRegister_v2"
  size_t offset;         // of the pointer inside DriverOps
};

// The ABI symbols LoadDriverOps asks for, in table order.
extern const DriverOpSymbol kDriverOpSymbols[];
extern const int kDriverOpCount;

// Returns the real driver function exported under abi_name, or null.
using DriverSymbolLookup = void* (*)(const char* abi_name, void* arg);

// Fills *ops through lookup. Returns true when every entry was found; on
// false *ops is zeroed and the engine must stay off.
bool LoadDriverOps(DriverSymbolLookup lookup, void* arg, DriverOps* ops);

// Whether every entry of ops is set.
bool DriverOpsComplete(const DriverOps& ops);

// The stream handle to hand to cuEventRecord / cuStreamSynchronize (which
// are the default-stream ABI) for a copy made on `stream` through an entry
// point of the given variant: a null stream of a _ptsz/_ptds call means the
// calling thread's default stream, CU_STREAM_PER_THREAD.
inline CUstream RecordableStream(CUstream stream, bool per_thread_api) {
  return (stream == nullptr && per_thread_api) ? CU_STREAM_PER_THREAD : stream;
}

// Makes ctx current on this thread for the scope (when it is not already)
// and restores what was current before. Unpinning must run in the context
// that pinned, and free() may run on a thread that never touched CUDA.
class ScopedContext {
 public:
  ScopedContext(const DriverOps* ops, CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const DriverOps* ops_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// Whether [dev, dev + bytes) lies inside one device allocation that is not
// managed memory: looked up in `allocations` (the hooks' kDevice regions;
// may be null) first, else asked of the driver. The driver checks a copy's
// whole device range before it moves a byte; pinshim, when it moves one
// copy in parts, checks it first.
bool DeviceRangeOk(const DriverOps& ops, const Registry* allocations, CUdeviceptr dev,
                   uint64_t bytes);

// Whether `stream` (RecordableStream form) captures, or the driver cannot
// say (an error answer, as for the legacy stream while a blocking stream
// captures): a copy on it must then be the driver's own.
bool StreamCaptures(const DriverOps& ops, CUstream stream);

// Puts this thread in relaxed stream-capture mode for the scope and restores
// its mode after: pinshim's own driver calls (pinning a ring, waiting for
// its DMAs) are then never refused because, or in the middle of, a capture
// the program runs in global mode on another thread, and never invalidate
// it. (The program's own calls keep the program's mode.)
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const DriverOps* ops);
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  const DriverOps* ops_;
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_DRIVER_OPS_H_
