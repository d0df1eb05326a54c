// The wrapped copy entry points: 1D, 2D, 3D, arrays, peers and batches.
// Each wrapper is mechanical: it describes the call (what it touches,
// worked out before the call: optimize::CopyCall), hands it with the
// driver call it would make to optimize::RunCopy (shim/optimize/
// copy_path.h), which owns every decision optimize mode makes about a
// copy, and counts and records what happened once. Arguments pass through
// untouched and every return code is the driver's own (or, where a copy
// would have run past pinned memory the driver checks, the error the
// driver gives for that: shim/INVARIANTS.md).
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/state.h"
#include "shim/optimize/copy_path.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace {

using hook::CopyStartTime;
using hook::CurrentDevice;

using optimize::CopyCall;
using optimize::CopyForm;
using optimize::CopyShape;
using optimize::DirOf;
using optimize::IsDeviceSide;

// The recorder's contract (trace/recorder.h): no page its write-combined
// read guard protects may meet the driver. One load when none is guarded.
inline void OpenGuardedPagesForDriver(const CopyShape& s) {
  if (s.host_ptr != nullptr) {
    trace::DisarmWcGuardFor(s.host_ptr, s.host_span != 0 ? s.host_span : s.bytes);
  }
}

// The span of a pitched host side: every row, at the wider pitch.
inline uint64_t PitchedSpan(size_t src_pitch, size_t dst_pitch, size_t width, uint64_t rows) {
  const uint64_t pitch = src_pitch > dst_pitch ? src_pitch : dst_pitch;
  return pitch * rows + width;
}

// Inline in every wrapper: its classification is nearly always a few loads.
__attribute__((always_inline)) inline void HostSide(const void* p, MemKind* kind, CopyShape* s) {
  uint32_t flags;
  uint64_t id;
  *kind = ClassifyHost(p, &flags, &id);
  if (s->host_ptr != nullptr && s->host_ptr != p) s->other_host = p;
  if (s->host_ptr == nullptr) s->host_ptr = p;
  if (s->host_alloc == 0) s->host_alloc = id;
  if (s->host_flags == 0) s->host_flags = flags;
}

// A pointer of unified addressing: pinshim's registries first (host memory
// and the device allocations it saw), then the driver's own answer.
void AnySide(CUdeviceptr p, MemKind* kind, CopyShape* s) {
  Region r;
  if (g_registrations.size() != 0 && g_registrations.Lookup(p, &r)) {
    *kind = r.kind;
    if (s->host_flags == 0) s->host_flags = r.flags;
    return;
  }
  if (g_allocations.Lookup(p, &r)) {
    *kind = r.kind;
    if (!IsDeviceSide(r.kind)) {
      if (s->host_alloc == 0) s->host_alloc = r.id;
      if (s->host_flags == 0) s->host_flags = r.flags;
      if (s->host_ptr != nullptr && s->host_ptr != reinterpret_cast<const void*>(p)) {
        s->other_host = reinterpret_cast<const void*>(p);
      }
      if (s->host_ptr == nullptr) s->host_ptr = reinterpret_cast<const void*>(p);
    }
    return;
  }
  using GetAttr = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static std::atomic<void*> get_attr_fn{nullptr};
  auto get_attr = hook::LazyDriverSymbol<GetAttr>(&get_attr_fn, "cuPointerGetAttribute");
  *kind = MemKind::kPageable;
  if (s->host_ptr == nullptr) s->host_ptr = reinterpret_cast<const void*>(p);
  if (get_attr == nullptr) return;
  unsigned int type = 0;
  if (get_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS) return;
  if (type == CU_MEMORYTYPE_HOST) {
    *kind = MemKind::kPinnedByProgram;  // pinned where pinshim did not see it
  } else if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_ARRAY) {
    unsigned int managed = 0;
    get_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
    *kind = managed ? MemKind::kManaged : MemKind::kDevice;
  }
}

void MemoryTypeSide(CUmemorytype type, const void* host, CUdeviceptr device, MemKind* kind,
                    CopyShape* s) {
  switch (type) {
    case CU_MEMORYTYPE_HOST: HostSide(host, kind, s); break;
    case CU_MEMORYTYPE_UNIFIED: AnySide(device, kind, s); break;
    default: *kind = MemKind::kDevice; break;  // device memory or an array
  }
}

CopyShape Shape2D(const CUDA_MEMCPY2D* c) {
  CopyShape s;
  if (c == nullptr) return s;
  MemoryTypeSide(c->srcMemoryType, c->srcHost, c->srcDevice, &s.src, &s);
  MemoryTypeSide(c->dstMemoryType, c->dstHost, c->dstDevice, &s.dst, &s);
  s.bytes = uint64_t{c->WidthInBytes} * c->Height;
  s.host_span = PitchedSpan(c->srcPitch, c->dstPitch, c->WidthInBytes, c->Height);
  return s;
}

CopyShape Shape3D(const CUDA_MEMCPY3D* c) {
  CopyShape s;
  if (c == nullptr) return s;
  MemoryTypeSide(c->srcMemoryType, c->srcHost, c->srcDevice, &s.src, &s);
  MemoryTypeSide(c->dstMemoryType, c->dstHost, c->dstDevice, &s.dst, &s);
  s.bytes = uint64_t{c->WidthInBytes} * c->Height * c->Depth;
  s.host_span =
      PitchedSpan(c->srcPitch, c->dstPitch, c->WidthInBytes, uint64_t{c->Height} * c->Depth);
  return s;
}

CopyShape ShapeBatch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count) {
  CopyShape s;
  if (dsts == nullptr || srcs == nullptr || sizes == nullptr) return s;
  for (size_t i = 0; i < count; ++i) {
    // The batch is one call; its direction and kinds are those of its first copy.
    if (i == 0) {
      AnySide(srcs[0], &s.src, &s);
      AnySide(dsts[0], &s.dst, &s);
    }
    s.bytes += sizes[i];
    // Every operand, not only the first: device addresses never hold a
    // guarded page, so both sides are simply offered.
    trace::DisarmWcGuardFor(reinterpret_cast<const void*>(srcs[i]), sizes[i]);
    trace::DisarmWcGuardFor(reinterpret_cast<const void*>(dsts[i]), sizes[i]);
  }
  return s;
}

void OperandSide(const CUmemcpy3DOperand& op, MemKind* kind, CopyShape* s) {
  if (op.type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
    AnySide(op.op.ptr.ptr, kind, s);
  } else {
    *kind = MemKind::kDevice;
  }
}

// A pointer operand of a 3D batch, as OpenGuardedPagesForDriver does for a
// host side: its rows and layers at the widest element (16 bytes), since
// offering more than the copy touches only opens a page early.
void OpenOperandForDriver(const CUmemcpy3DOperand& op, const CUextent3D& extent) {
  if (op.type != CU_MEMCPY_OPERAND_TYPE_POINTER) return;
  const uint64_t row = op.op.ptr.rowLength != 0 ? op.op.ptr.rowLength : extent.width;
  const uint64_t rows = op.op.ptr.layerHeight != 0 ? op.op.ptr.layerHeight : extent.height;
  trace::DisarmWcGuardFor(reinterpret_cast<const void*>(op.op.ptr.ptr),
                          16 * row * rows * (extent.depth != 0 ? extent.depth : 1));
}

CopyShape Shape3DBatch(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops) {
  CopyShape s;
  if (ops == nullptr) return s;
  for (size_t i = 0; i < n; ++i) {
    if (i == 0) {
      OperandSide(ops[0].src, &s.src, &s);
      OperandSide(ops[0].dst, &s.dst, &s);
    }
    // Elements; bytes when both operands are pointers.
    s.bytes += uint64_t{ops[i].extent.width} * ops[i].extent.height * ops[i].extent.depth;
    OpenOperandForDriver(ops[i].src, ops[i].extent);
    OpenOperandForDriver(ops[i].dst, ops[i].extent);
  }
  return s;
}

// A copy timed (start_ns, not 0): the live metrics and the trace.
// `host_before`: the host side's kind before the copy path ran (which may
// pin it in place). Out of line: most copies are not timed.
__attribute__((noinline)) void FinishTimed(Api api, const CopyCall& c, CUresult r,
                                           uint64_t start_ns, MemKind host_before) {
  const CopyShape& s = c.shape;
  const CopyDir dir = DirOf(s);
  const uint64_t end_ns = MonotonicNs();
  const MemKind host_after = dir == CopyDir::kDeviceToHost ? s.dst : s.src;
  if (LiveCountersEnabled()) {
    CountLiveCopy(LiveCopy{
        dir, s.src, s.dst, c.async, r != CUDA_SUCCESS, c.staged,
        host_before == MemKind::kPageable && host_after == MemKind::kPinnedByPinshim && !c.staged,
        s.bytes, start_ns, end_ns - start_ns});
  }
  if (!trace::RecorderActive()) return;
  CopyEvent e;
  e.api = api;
  e.dir = dir;
  e.src_kind = s.src;
  e.dst_kind = s.dst;
  e.async = c.async;
  e.bytes = s.bytes;
  e.host_ptr = s.host_ptr;
  e.host_alloc_id = s.host_alloc;
  e.host_flags = s.host_flags;
  e.stream = c.stream;
  e.start_ns = start_ns;
  e.end_ns = end_ns;
  e.result = r;
  if (c.staged) {
    e.staged_workers = c.staged_info.workers;
    e.staged_chunk_bytes = c.staged_info.chunk_bytes;
  }
  trace::RecordCopy(e, CurrentDevice());
}

// Every copy is counted; a timed one (start_ns not 0) is also recorded.
inline void Finish(Api api, const CopyCall& c, CUresult r, uint64_t start_ns, MemKind host_before) {
  const CopyShape& s = c.shape;
  CountCopy(api, DirOf(s), s.src, s.dst, s.host_flags, s.bytes, r != CUDA_SUCCESS);
  if (PINSHIM_UNLIKELY(start_ns != 0)) FinishTimed(api, c, r, start_ns, host_before);
}

// The engine for a copy, in optimize mode: for one with a host side it is
// started at the first such copy; a batch uses it only once it runs (a
// batch that succeeded is waited for when any operand may be pinshim's).
inline optimize::Optimizer* EngineFor(const CopyCall& c) {
  if (PINSHIM_LIKELY(!g_optimize)) return nullptr;
  if (c.form == CopyForm::kBatch) return hook::ActiveOptimizer();
  if (c.shape.host_ptr == nullptr) return nullptr;
  optimize::Optimizer& engine = optimize::Optimizer::Process();
  return PINSHIM_LIKELY(engine.active()) || EnsureOptimizerStarted() ? &engine : nullptr;
}

// Every copy wrapper: `describe` works out what the call touches; the
// copy path runs it (the driver's call is `real` with the wrapper's own
// arguments); the result is counted and recorded.
template <typename Fn, typename Describe, typename... Args>
CUresult CopyHook(Api api, bool async, CUstream stream, Describe describe, Args... args) {
  const Fn real = hook::RealFn<Fn>(api);
  if (!hook::Handles(real)) return hook::Forward(real, args...);
  const hook::HookScope scope;
  CopyCall call = describe();
  call.async = async;
  call.stream = stream;
  call.per_thread = kDriverEntries[api].per_thread;
  call.capture_open = g_open_captures.load(std::memory_order_relaxed) != 0;
  if (call.form != CopyForm::kBatch) OpenGuardedPagesForDriver(call.shape);
  const uint64_t start_ns = CopyStartTime();
  const MemKind host_before =
      DirOf(call.shape) == CopyDir::kDeviceToHost ? call.shape.dst : call.shape.src;
  // Without an engine RunCopy is the driver's call: made here directly.
  optimize::Optimizer* engine = EngineFor(call);
  CUresult r;
  if (engine == nullptr) {
    r = real(args...);
  } else {
    auto driver = [&] { return real(args...); };
    r = optimize::RunCopy(engine, &call, driver);
  }
  Finish(api, call, r, start_ns, host_before);
  return r;
}

// Descriptions by form.
inline CopyCall Plain(const CopyShape& shape) {
  CopyCall c;
  c.shape = shape;
  return c;
}
inline CopyCall Batch(const CopyShape& shape) {
  CopyCall c;
  c.shape = shape;
  c.form = CopyForm::kBatch;
  return c;
}
// A 1D copy between one host range and device memory: staging may take it.
inline CopyCall OneRange(const CopyShape& shape, const void* host, CUdeviceptr dev) {
  CopyCall c;
  c.shape = shape;
  c.form = CopyForm::kStageable;
  c.host = const_cast<void*>(host);
  c.dev = dev;
  return c;
}
}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"

namespace pinshim {
namespace {
inline CopyShape HtoD(const void* src, size_t n) {
  CopyShape s;
  HostSide(src, &s.src, &s);
  s.dst = MemKind::kDevice;
  s.bytes = n;
  return s;
}
inline CopyShape DtoH(void* dst, size_t n) {
  CopyShape s;
  s.src = MemKind::kDevice;
  HostSide(dst, &s.dst, &s);
  s.bytes = n;
  return s;
}
inline CopyShape DtoD(size_t n) {
  CopyShape s;
  s.bytes = n;  // both sides default to device
  return s;
}
inline CopyShape Generic(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CopyShape s;
  AnySide(src, &s.src, &s);
  AnySide(dst, &s.dst, &s);
  s.bytes = n;
  return s;
}
// cuMemcpy/cuMemcpyAsync between unified addresses: the host side is
// whichever the shape says it is.
inline CopyCall Unified(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  const CopyShape s = Generic(dst, src, n);
  const bool up = DirOf(s) == CopyDir::kHostToDevice;
  return OneRange(s, reinterpret_cast<const void*>(up ? src : dst), up ? dst : src);
}

// The driver's types of the wrapped entry points, by argument list.
using Copy1D = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);
using Copy1DAsync = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
using CopyHtoD = CUresult (*)(CUdeviceptr, const void*, size_t);
using CopyHtoDAsync = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
using CopyDtoH = CUresult (*)(void*, CUdeviceptr, size_t);
using CopyDtoHAsync = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);
using CopyPeer = CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);
using CopyPeerAsync = CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t,
                                   CUstream);
using CopyHtoA = CUresult (*)(CUarray, size_t, const void*, size_t);
using CopyHtoAAsync = CUresult (*)(CUarray, size_t, const void*, size_t, CUstream);
using CopyAtoH = CUresult (*)(void*, CUarray, size_t, size_t);
using CopyAtoHAsync = CUresult (*)(void*, CUarray, size_t, size_t, CUstream);
using Copy2D = CUresult (*)(const CUDA_MEMCPY2D*);
using Copy2DAsync = CUresult (*)(const CUDA_MEMCPY2D*, CUstream);
using Copy3D = CUresult (*)(const CUDA_MEMCPY3D*);
using Copy3DAsync = CUresult (*)(const CUDA_MEMCPY3D*, CUstream);
using CopyBatch12080 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t,
                                    CUmemcpyAttributes*, size_t*, size_t, size_t*, CUstream);
using CopyBatch13000 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t,
                                    CUmemcpyAttributes*, size_t*, size_t, CUstream);
using Copy3DBatch12080 = CUresult (*)(size_t, CUDA_MEMCPY3D_BATCH_OP*, size_t*, unsigned long long,
                                      CUstream);
using Copy3DBatch13000 = CUresult (*)(size_t, CUDA_MEMCPY3D_BATCH_OP*, unsigned long long,
                                      CUstream);

}  // namespace
}  // namespace pinshim

// Each wrapper below is one call of CopyHook: its entry point, whether it is
// asynchronous and on which stream, the description of the call, and its
// arguments as the driver takes them. The macros only spell out the
// signatures of an entry point's ABI variants (_v2, _ptds, _ptsz).
extern "C" {

// --- 1D copies ---------------------------------------------------------------

#define DEFINE_GENERIC(name)                                                             \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n) {                            \
    return CopyHook<Copy1D>(                                                             \
        kApi_##name, false, nullptr, [&] { return Unified(dst, src, n); }, dst, src, n); \
  }
#define DEFINE_GENERIC_ASYNC(name)                                                     \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {             \
    return CopyHook<Copy1DAsync>(                                                      \
        kApi_##name, true, st, [&] { return Unified(dst, src, n); }, dst, src, n, st); \
  }
DEFINE_GENERIC(cuMemcpy)
DEFINE_GENERIC(cuMemcpy_ptds)
DEFINE_GENERIC_ASYNC(cuMemcpyAsync)
DEFINE_GENERIC_ASYNC(cuMemcpyAsync_ptsz)

#define DEFINE_HTOD(name)                                                                        \
  CUresult name(CUdeviceptr dst, const void* src, size_t n) {                                    \
    return CopyHook<CopyHtoD>(                                                                   \
        kApi_##name, false, nullptr, [&] { return OneRange(HtoD(src, n), src, dst); }, dst, src, \
        n);                                                                                      \
  }
#define DEFINE_HTOD_ASYNC(name)                                                                    \
  CUresult name(CUdeviceptr dst, const void* src, size_t n, CUstream st) {                         \
    return CopyHook<CopyHtoDAsync>(                                                                \
        kApi_##name, true, st, [&] { return OneRange(HtoD(src, n), src, dst); }, dst, src, n, st); \
  }
#define DEFINE_DTOH(name)                                                                        \
  CUresult name(void* dst, CUdeviceptr src, size_t n) {                                          \
    return CopyHook<CopyDtoH>(                                                                   \
        kApi_##name, false, nullptr, [&] { return OneRange(DtoH(dst, n), dst, src); }, dst, src, \
        n);                                                                                      \
  }
#define DEFINE_DTOH_ASYNC(name)                                                                    \
  CUresult name(void* dst, CUdeviceptr src, size_t n, CUstream st) {                               \
    return CopyHook<CopyDtoHAsync>(                                                                \
        kApi_##name, true, st, [&] { return OneRange(DtoH(dst, n), dst, src); }, dst, src, n, st); \
  }
DEFINE_HTOD(cuMemcpyHtoD_v2)
DEFINE_HTOD(cuMemcpyHtoD_v2_ptds)
DEFINE_HTOD_ASYNC(cuMemcpyHtoDAsync_v2)
DEFINE_HTOD_ASYNC(cuMemcpyHtoDAsync_v2_ptsz)
DEFINE_DTOH(cuMemcpyDtoH_v2)
DEFINE_DTOH(cuMemcpyDtoH_v2_ptds)
DEFINE_DTOH_ASYNC(cuMemcpyDtoHAsync_v2)
DEFINE_DTOH_ASYNC(cuMemcpyDtoHAsync_v2_ptsz)

// --- device <-> device ---------------------------------------------------------

#define DEFINE_DTOD(name)                                                          \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n) {                      \
    return CopyHook<Copy1D>(                                                       \
        kApi_##name, false, nullptr, [&] { return Plain(DtoD(n)); }, dst, src, n); \
  }
#define DEFINE_DTOD_ASYNC(name)                                                  \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {       \
    return CopyHook<Copy1DAsync>(                                                \
        kApi_##name, true, st, [&] { return Plain(DtoD(n)); }, dst, src, n, st); \
  }
#define DEFINE_PEER(name)                                                                      \
  CUresult name(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {  \
    return CopyHook<CopyPeer>(                                                                 \
        kApi_##name, false, nullptr, [&] { return Plain(DtoD(n)); }, dst, dctx, src, sctx, n); \
  }
#define DEFINE_PEER_ASYNC(name)                                                              \
  CUresult name(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,  \
                CUstream st) {                                                               \
    return CopyHook<CopyPeerAsync>(                                                          \
        kApi_##name, true, st, [&] { return Plain(DtoD(n)); }, dst, dctx, src, sctx, n, st); \
  }
DEFINE_DTOD(cuMemcpyDtoD_v2)
DEFINE_DTOD(cuMemcpyDtoD_v2_ptds)
DEFINE_DTOD_ASYNC(cuMemcpyDtoDAsync_v2)
DEFINE_DTOD_ASYNC(cuMemcpyDtoDAsync_v2_ptsz)
DEFINE_PEER(cuMemcpyPeer)
DEFINE_PEER(cuMemcpyPeer_ptds)
DEFINE_PEER_ASYNC(cuMemcpyPeerAsync)
DEFINE_PEER_ASYNC(cuMemcpyPeerAsync_ptsz)

// --- host <-> array ----------------------------------------------------------

#define DEFINE_HTOA(name)                                                                  \
  CUresult name(CUarray a, size_t off, const void* src, size_t n) {                        \
    return CopyHook<CopyHtoA>(                                                             \
        kApi_##name, false, nullptr, [&] { return Plain(HtoD(src, n)); }, a, off, src, n); \
  }
#define DEFINE_HTOA_ASYNC(name)                                                          \
  CUresult name(CUarray a, size_t off, const void* src, size_t n, CUstream st) {         \
    return CopyHook<CopyHtoAAsync>(                                                      \
        kApi_##name, true, st, [&] { return Plain(HtoD(src, n)); }, a, off, src, n, st); \
  }
#define DEFINE_ATOH(name)                                                                  \
  CUresult name(void* dst, CUarray a, size_t off, size_t n) {                              \
    return CopyHook<CopyAtoH>(                                                             \
        kApi_##name, false, nullptr, [&] { return Plain(DtoH(dst, n)); }, dst, a, off, n); \
  }
#define DEFINE_ATOH_ASYNC(name)                                                          \
  CUresult name(void* dst, CUarray a, size_t off, size_t n, CUstream st) {               \
    return CopyHook<CopyAtoHAsync>(                                                      \
        kApi_##name, true, st, [&] { return Plain(DtoH(dst, n)); }, dst, a, off, n, st); \
  }
DEFINE_HTOA(cuMemcpyHtoA_v2)
DEFINE_HTOA(cuMemcpyHtoA_v2_ptds)
DEFINE_HTOA_ASYNC(cuMemcpyHtoAAsync_v2)
DEFINE_HTOA_ASYNC(cuMemcpyHtoAAsync_v2_ptsz)
DEFINE_ATOH(cuMemcpyAtoH_v2)
DEFINE_ATOH(cuMemcpyAtoH_v2_ptds)
DEFINE_ATOH_ASYNC(cuMemcpyAtoHAsync_v2)
DEFINE_ATOH_ASYNC(cuMemcpyAtoHAsync_v2_ptsz)

// --- 2D and 3D ---------------------------------------------------------------

#define DEFINE_2D(name)                                                     \
  CUresult name(const CUDA_MEMCPY2D* c) {                                   \
    return CopyHook<Copy2D>(                                                \
        kApi_##name, false, nullptr, [&] { return Plain(Shape2D(c)); }, c); \
  }
#define DEFINE_2D_ASYNC(name)                                             \
  CUresult name(const CUDA_MEMCPY2D* c, CUstream st) {                    \
    return CopyHook<Copy2DAsync>(                                         \
        kApi_##name, true, st, [&] { return Plain(Shape2D(c)); }, c, st); \
  }
#define DEFINE_3D(name)                                                     \
  CUresult name(const CUDA_MEMCPY3D* c) {                                   \
    return CopyHook<Copy3D>(                                                \
        kApi_##name, false, nullptr, [&] { return Plain(Shape3D(c)); }, c); \
  }
#define DEFINE_3D_ASYNC(name)                                             \
  CUresult name(const CUDA_MEMCPY3D* c, CUstream st) {                    \
    return CopyHook<Copy3DAsync>(                                         \
        kApi_##name, true, st, [&] { return Plain(Shape3D(c)); }, c, st); \
  }
DEFINE_2D(cuMemcpy2D_v2)
DEFINE_2D(cuMemcpy2D_v2_ptds)
DEFINE_2D(cuMemcpy2DUnaligned_v2)
DEFINE_2D(cuMemcpy2DUnaligned_v2_ptds)
DEFINE_2D_ASYNC(cuMemcpy2DAsync_v2)
DEFINE_2D_ASYNC(cuMemcpy2DAsync_v2_ptsz)
DEFINE_3D(cuMemcpy3D_v2)
DEFINE_3D(cuMemcpy3D_v2_ptds)
DEFINE_3D_ASYNC(cuMemcpy3DAsync_v2)
DEFINE_3D_ASYNC(cuMemcpy3DAsync_v2_ptsz)

// --- batches -----------------------------------------------------------------

#define DEFINE_BATCH_12080(name)                                                                  \
  CUresult name(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,                \
                CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs, size_t* fail_idx, \
                CUstream st) {                                                                    \
    return CopyHook<CopyBatch12080>(                                                              \
        kApi_##name, true, st, [&] { return Batch(ShapeBatch(dsts, srcs, sizes, count)); }, dsts, \
        srcs, sizes, count, attrs, attr_idxs, num_attrs, fail_idx, st);                           \
  }
#define DEFINE_BATCH_13000(name)                                                                  \
  CUresult name(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,                \
                CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs, CUstream st) {    \
    return CopyHook<CopyBatch13000>(                                                              \
        kApi_##name, true, st, [&] { return Batch(ShapeBatch(dsts, srcs, sizes, count)); }, dsts, \
        srcs, sizes, count, attrs, attr_idxs, num_attrs, st);                                     \
  }
DEFINE_BATCH_12080(cuMemcpyBatchAsync)
DEFINE_BATCH_12080(cuMemcpyBatchAsync_ptsz)
DEFINE_BATCH_13000(cuMemcpyBatchAsync_v2)
DEFINE_BATCH_13000(cuMemcpyBatchAsync_v2_ptsz)

#define DEFINE_3DBATCH_12080(name)                                                                 \
  CUresult name(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx, unsigned long long flags, \
                CUstream st) {                                                                     \
    return CopyHook<Copy3DBatch12080>(                                                             \
        kApi_##name, true, st, [&] { return Batch(Shape3DBatch(n, ops)); }, n, ops, fail_idx,      \
        flags, st);                                                                                \
  }
#define DEFINE_3DBATCH_13000(name)                                                              \
  CUresult name(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags, CUstream st) { \
    return CopyHook<Copy3DBatch13000>(                                                          \
        kApi_##name, true, st, [&] { return Batch(Shape3DBatch(n, ops)); }, n, ops, flags, st); \
  }
DEFINE_3DBATCH_12080(cuMemcpy3DBatchAsync)
DEFINE_3DBATCH_12080(cuMemcpy3DBatchAsync_ptsz)
DEFINE_3DBATCH_13000(cuMemcpy3DBatchAsync_v2)
DEFINE_3DBATCH_13000(cuMemcpy3DBatchAsync_v2_ptsz)

}  // extern "C"
