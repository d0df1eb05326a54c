// The wrapped copy entry points: 1D, 2D, 3D, arrays, peers and batches.
// Each one works out what the copy touches (direction, memory kinds, bytes)
// before the call, lets optimize mode pin, pool or stage it, calls the real
// driver function and counts the call once. Arguments pass through
// untouched and every return code is the driver's own (or, where a copy
// would have run past pinned memory the driver checks, the error the driver
// gives for that: optimize/stager.h, INVARIANTS.md).
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
#include "shim/hooks/page_change_scope.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace {

using hook::CurrentDevice;
using hook::NowNs;
using hook::StartTime;

inline bool IsDeviceSide(MemKind k) { return k == MemKind::kDevice || k == MemKind::kManaged; }

// What a copy touches, worked out before the call (the call may free nothing,
// but the program's view of its memory is the one at the time of the call).
struct CopyShape {
  MemKind src = MemKind::kDevice;
  MemKind dst = MemKind::kDevice;
  uint32_t host_flags = 0;
  uint64_t host_alloc = 0;
  uint64_t bytes = 0;
  const void* host_ptr = nullptr;  // the host side, when there is one
  uint64_t host_span = 0;          // bytes from host_ptr the copy may touch; 0: `bytes`
  // The other host side of a host-to-host copy (the same span at most).
  const void* other_host = nullptr;
};

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

inline CopyDir DirOf(const CopyShape& s) {
  bool src_dev = IsDeviceSide(s.src), dst_dev = IsDeviceSide(s.dst);
  if (!src_dev && dst_dev) return CopyDir::kHostToDevice;
  if (src_dev && !dst_dev) return CopyDir::kDeviceToHost;
  if (!src_dev && !dst_dev) return CopyDir::kHostToHost;
  return CopyDir::kDeviceToDevice;
}

inline void HostSide(const void* p, MemKind* kind, CopyShape* s) {
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

inline void Finish(Api api, const CopyShape& s, CUresult r, bool async, CUstream stream,
                   uint64_t start_ns, const optimize::StagedInfo* staged = nullptr) {
  const CopyDir dir = DirOf(s);
  CountCopy(api, dir, s.src, s.dst, s.host_flags, s.bytes, r != CUDA_SUCCESS);
  if (start_ns != 0) {
    CopyEvent e;
    e.api = api;
    e.dir = dir;
    e.src_kind = s.src;
    e.dst_kind = s.dst;
    e.async = async;
    e.bytes = s.bytes;
    e.host_ptr = s.host_ptr;
    e.host_alloc_id = s.host_alloc;
    e.host_flags = s.host_flags;
    e.stream = stream;
    e.start_ns = start_ns;
    e.end_ns = NowNs();
    e.result = r;
    if (staged != nullptr) {
      e.staged_workers = staged->workers;
      e.staged_chunk_bytes = staged->chunk_bytes;
    }
    trace::RecordCopy(e, CurrentDevice());
  }
}

// Optimize mode: before a copy with a host side, the engine may pin a hot
// buffer (so this copy already runs pinned); after it, it may have to wait
// for an async copy that pinning made truly asynchronous (results must be
// those of the pageable copy the program made). A no-op in other modes.
// A buffer pinned just now runs this copy pinned, and is recorded so.
inline optimize::CopyTicket BeforeCopy(CopyShape& s) {
  if (PINSHIM_LIKELY(!g_optimize) || s.host_ptr == nullptr || !EnsureOptimizerStarted()) {
    return optimize::CopyTicket();
  }
  const CopyDir dir = DirOf(s);
  if (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) return optimize::CopyTicket();
  MemKind& host_kind = dir == CopyDir::kHostToDevice ? s.src : s.dst;
  optimize::CopyTicket t =
      optimize::Optimizer::Process().BeforeHostCopy(s.host_ptr, s.bytes, dir, host_kind);
  if (t.kind == optimize::CopyTicket::kCache && host_kind == MemKind::kPageable) {
    host_kind = MemKind::kPinnedByPinshim;
    s.host_flags = optimize::Optimizer::Process().cache().register_flags();
  }
  return t;
}

// Optimize mode, while the program has a stream capture open: whether this
// copy goes into a capture (its stream captures, or the driver cannot say,
// as for the legacy stream while a blocking stream captures). One load when
// no capture is open.
inline bool IntoCapture(Api api, const CopyShape& s, CUstream stream) {
  if (PINSHIM_LIKELY(g_open_captures.load(std::memory_order_relaxed) == 0) ||
      s.host_ptr == nullptr || !EnsureOptimizerStarted()) {
    return false;
  }
  return optimize::Optimizer::Process().StreamCaptures(
      optimize::RecordableStream(stream, kDriverEntries[api].per_thread));
}

// A copy into a capture is the driver's, on the program's memory as the
// program made it: what pinshim pinned in place under its host side
// (registration cache, arena) is unpinned for the call (the arena's pinned
// again after it), so the driver captures pageable memory as without
// pinshim; it is neither staged nor pinned now. A graph that held pinshim's
// pinning would fault its context at a launch after pinshim unpinned it (on
// the H200: bench/RESULTS.md). Pool blocks are the program's pinned memory,
// and stay so.
constexpr optimize::PageChange kCopyIntoCapture(OwnPinReason::kCopyIntoCapture, 0,
                                                optimize::PageChange::kReplacesPrivate |
                                                    optimize::PageChange::kStaysAnonymous);

// The page-change machinery's marked call (WithPageChange's work, without
// its re-entry test: the hook guard is held here), for one host side.
template <typename Fn>
inline CUresult UnpinnedFor(const void* host, uint64_t len, Fn fn) {
  const auto start = reinterpret_cast<uintptr_t>(host);
  const uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;
  if (host == nullptr || end <= start) return fn();
  return page_change_internal::CallMarked(start, end, kCopyIntoCapture, false, fn);
}

// A side classified as pinned by pinshim that is no pool block is cache or
// arena memory, which the call unpinned: the driver saw pageable memory, and
// the trace records that.
inline void SeenPageable(MemKind* kind, const void* host, uint32_t* flags) {
  optimize::PoolBlockInfo block;
  if (*kind == MemKind::kPinnedByPinshim &&
      !optimize::Optimizer::Process().PoolBlock(host, &block)) {
    *kind = MemKind::kPageable;
    *flags = 0;
  }
}

// Both host sides of a host-to-host copy (its source is host_ptr, its
// destination other_host), nested.
template <typename Fn>
inline CUresult CopyIntoCapture(CopyShape& s, Fn fn) {
  const uint64_t len = s.host_span != 0 ? s.host_span : s.bytes;
  const CUresult r =
      UnpinnedFor(s.host_ptr, len, [&] { return UnpinnedFor(s.other_host, len, fn); });
  SeenPageable(&s.src, s.host_ptr, &s.host_flags);
  SeenPageable(&s.dst, s.other_host != nullptr ? s.other_host : s.host_ptr, &s.host_flags);
  return r;
}

inline void AfterCopy(Api api, const optimize::CopyTicket& t, CUresult r, bool async,
                      CUstream stream) {
  if (PINSHIM_LIKELY(!g_optimize) || t.kind == optimize::CopyTicket::kNone) return;
  optimize::Optimizer::Process().AfterHostCopy(t, r, async, stream, kDriverEntries[api].per_thread);
}

// Runs a stageable copy through optimize mode's rings; false: the driver.
inline bool StageCopy(Api api, const optimize::CopyTicket& t, const void* host, CUdeviceptr dev,
                      bool async, CUstream stream, CUresult* r, optimize::StagedInfo* info) {
  return optimize::Optimizer::Process().Stage(t, const_cast<void*>(host), dev, stream,
                                              kDriverEntries[api].per_thread, !async, r, info);
}

// An asynchronous upload of memory pinned in place, whose stream has work
// queued: its first bytes are read now, as the driver reads pageable
// memory's (Optimizer::UploadEagerHead). *in_flight: whether DMA from the
// pinned memory is still queued when it returns. False: the driver call.
inline bool UploadEagerHead(Api api, const optimize::CopyTicket& t, const void* host,
                            CUdeviceptr dev, CUstream stream, CUresult* r, bool* in_flight) {
  if (t.kind != optimize::CopyTicket::kCache && t.kind != optimize::CopyTicket::kArena) {
    return false;
  }
  return optimize::Optimizer::Process().UploadEagerHead(
      t, host, dev, stream, kDriverEntries[api].per_thread, r, in_flight);
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"
using pinshim::hook::ActiveOptimizer;

// What every copy wrapper does before optimize mode decides anything: the
// shape computed by `shape_expr`, guarded pages opened for the driver, the
// start time, and a copy into a stream capture made by the driver on the
// program's own memory (CopyIntoCapture), which returns here.
#define PINSHIM_COPY_BEGIN(api, type, shape_expr, async, stream, ...)          \
  PINSHIM_HOOK_ENTER(api, type, __VA_ARGS__);                                  \
  CopyShape shape = shape_expr;                                                \
  OpenGuardedPagesForDriver(shape);                                            \
  const uint64_t start_ns = StartTime();                                       \
  if (PINSHIM_UNLIKELY(IntoCapture(api, shape, stream))) {                     \
    CUresult r = CopyIntoCapture(shape, [&] { return real_fn(__VA_ARGS__); }); \
    Finish(api, shape, r, async, stream, start_ns);                            \
    return r;                                                                  \
  }
// A copy whose shape is computed by `shape_expr` before the call; `async`
// and `stream` say how it was queued (the stream is null for sync copies).
#define PINSHIM_COPY_ON(api, type, shape_expr, async, stream, ...)              \
  PINSHIM_COPY_BEGIN(api, type, shape_expr, async, stream, __VA_ARGS__)         \
  optimize::CopyTicket ticket = BeforeCopy(shape);                              \
  CUresult r = ticket.refuse ? CUDA_ERROR_INVALID_VALUE : real_fn(__VA_ARGS__); \
  AfterCopy(api, ticket, r, async, stream);                                     \
  Finish(api, shape, r, async, stream, start_ns);                               \
  return r
// A 1D copy between one host range and device memory, which optimize mode
// may run through its staging rings (optimize/stager.h) when the host side
// is pageable memory it does not pin: `host` and `dev` are the two sides.
#define PINSHIM_COPY_STAGEABLE(api, type, shape_expr, async, stream, host, dev, ...)       \
  PINSHIM_COPY_BEGIN(api, type, shape_expr, async, stream, __VA_ARGS__)                    \
  optimize::CopyTicket ticket = BeforeCopy(shape);                                         \
  CUresult r;                                                                              \
  optimize::StagedInfo staged;                                                             \
  bool in_flight = async;                                                                  \
  const bool was_staged =                                                                  \
      ticket.stage && StageCopy(api, ticket, host, dev, async, stream, &r, &staged);       \
  if (was_staged) {                                                                        \
    /* done */                                                                             \
  } else if (ticket.refuse) {                                                              \
    r = CUDA_ERROR_INVALID_VALUE;                                                          \
  } else if (!async || !UploadEagerHead(api, ticket, host, dev, stream, &r, &in_flight)) { \
    r = real_fn(__VA_ARGS__);                                                              \
  }                                                                                        \
  AfterCopy(api, ticket, r, in_flight, stream);                                            \
  Finish(api, shape, r, async, stream, start_ns, was_staged ? &staged : nullptr);          \
  return r
// Batches: their host operands are many ranges, not one. In optimize mode
// the call is waited for when it succeeded, so no operand pinshim pinned or
// pooled is still in use when it returns (as with pageable operands).
#define PINSHIM_BATCH(api, type, shape_expr, stream, ...)                                    \
  PINSHIM_HOOK_ENTER(api, type, __VA_ARGS__);                                                \
  CopyShape shape = shape_expr;                                                              \
  const uint64_t start_ns = StartTime();                                                     \
  CUresult r = real_fn(__VA_ARGS__);                                                         \
  if (r == CUDA_SUCCESS && ActiveOptimizer() != nullptr) {                                   \
    ActiveOptimizer()->AfterAsyncCopyOnCachedMemory(stream, kDriverEntries[api].per_thread); \
  }                                                                                          \
  Finish(api, shape, r, true, stream, start_ns);                                             \
  return r
#define PINSHIM_COPY(api, type, shape_expr, ...) \
  PINSHIM_COPY_ON(api, type, shape_expr, false, nullptr, __VA_ARGS__)
#define PINSHIM_COPY_ASYNC(api, type, shape_expr, stream, ...) \
  PINSHIM_COPY_ON(api, type, shape_expr, true, stream, __VA_ARGS__)

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
inline CopyShape Generic(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CopyShape s;
  AnySide(src, &s.src, &s);
  AnySide(dst, &s.dst, &s);
  s.bytes = n;
  return s;
}
}  // namespace

extern "C" {

// --- 1D copies ---------------------------------------------------------------

// Unified addresses: the host side is whichever the shape says it is.
#define PINSHIM_GENERIC_HOST(shape, dst, src)                                  \
  (DirOf(shape) == CopyDir::kHostToDevice ? reinterpret_cast<const void*>(src) \
                                          : reinterpret_cast<const void*>(dst))
#define PINSHIM_GENERIC_DEV(shape, dst, src) \
  (DirOf(shape) == CopyDir::kHostToDevice ? (dst) : (src))
#define DEFINE_GENERIC(name)                                                      \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n) {                     \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);                    \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, Generic(dst, src, n), false, nullptr, \
                           PINSHIM_GENERIC_HOST(shape, dst, src),                 \
                           PINSHIM_GENERIC_DEV(shape, dst, src), dst, src, n);    \
  }
#define DEFINE_GENERIC_ASYNC(name)                                                 \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {         \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);           \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, Generic(dst, src, n), true, st,        \
                           PINSHIM_GENERIC_HOST(shape, dst, src),                  \
                           PINSHIM_GENERIC_DEV(shape, dst, src), dst, src, n, st); \
  }
DEFINE_GENERIC(cuMemcpy)
DEFINE_GENERIC(cuMemcpy_ptds)
DEFINE_GENERIC_ASYNC(cuMemcpyAsync)
DEFINE_GENERIC_ASYNC(cuMemcpyAsync_ptsz)

#define DEFINE_HTOD(name)                                                                         \
  CUresult name(CUdeviceptr dst, const void* src, size_t n) {                                     \
    using Fn = CUresult (*)(CUdeviceptr, const void*, size_t);                                    \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, HtoD(src, n), false, nullptr, src, dst, dst, src, n); \
  }
#define DEFINE_HTOD_ASYNC(name)                                                                 \
  CUresult name(CUdeviceptr dst, const void* src, size_t n, CUstream st) {                      \
    using Fn = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);                        \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, HtoD(src, n), true, st, src, dst, dst, src, n, st); \
  }
#define DEFINE_DTOH(name)                                                                         \
  CUresult name(void* dst, CUdeviceptr src, size_t n) {                                           \
    using Fn = CUresult (*)(void*, CUdeviceptr, size_t);                                          \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, DtoH(dst, n), false, nullptr, dst, src, dst, src, n); \
  }
#define DEFINE_DTOH_ASYNC(name)                                                                 \
  CUresult name(void* dst, CUdeviceptr src, size_t n, CUstream st) {                            \
    using Fn = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);                              \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, DtoH(dst, n), true, st, dst, src, dst, src, n, st); \
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

namespace {
inline CopyShape DtoD(size_t n) {
  CopyShape s;
  s.bytes = n;  // both sides default to device
  return s;
}
}  // namespace

#define DEFINE_DTOD(name)                                      \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n) {  \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t); \
    PINSHIM_COPY(kApi_##name, Fn, DtoD(n), dst, src, n);       \
  }
#define DEFINE_DTOD_ASYNC(name)                                            \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) { \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);   \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, DtoD(n), st, dst, src, n, st);     \
  }
#define DEFINE_PEER(name)                                                                     \
  CUresult name(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) { \
    using Fn = CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);          \
    PINSHIM_COPY(kApi_##name, Fn, DtoD(n), dst, dctx, src, sctx, n);                          \
  }
#define DEFINE_PEER_ASYNC(name)                                                                \
  CUresult name(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,    \
                CUstream st) {                                                                 \
    using Fn = CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream); \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, DtoD(n), st, dst, dctx, src, sctx, n, st);             \
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

#define DEFINE_HTOA(name)                                           \
  CUresult name(CUarray a, size_t off, const void* src, size_t n) { \
    using Fn = CUresult (*)(CUarray, size_t, const void*, size_t);  \
    PINSHIM_COPY(kApi_##name, Fn, HtoD(src, n), a, off, src, n);    \
  }
#define DEFINE_HTOA_ASYNC(name)                                                  \
  CUresult name(CUarray a, size_t off, const void* src, size_t n, CUstream st) { \
    using Fn = CUresult (*)(CUarray, size_t, const void*, size_t, CUstream);     \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, HtoD(src, n), st, a, off, src, n, st);   \
  }
#define DEFINE_ATOH(name)                                        \
  CUresult name(void* dst, CUarray a, size_t off, size_t n) {    \
    using Fn = CUresult (*)(void*, CUarray, size_t, size_t);     \
    PINSHIM_COPY(kApi_##name, Fn, DtoH(dst, n), dst, a, off, n); \
  }
#define DEFINE_ATOH_ASYNC(name)                                                \
  CUresult name(void* dst, CUarray a, size_t off, size_t n, CUstream st) {     \
    using Fn = CUresult (*)(void*, CUarray, size_t, size_t, CUstream);         \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, DtoH(dst, n), st, dst, a, off, n, st); \
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

#define DEFINE_2D(name)                            \
  CUresult name(const CUDA_MEMCPY2D* c) {          \
    using Fn = CUresult (*)(const CUDA_MEMCPY2D*); \
    PINSHIM_COPY(kApi_##name, Fn, Shape2D(c), c);  \
  }
#define DEFINE_2D_ASYNC(name)                                   \
  CUresult name(const CUDA_MEMCPY2D* c, CUstream st) {          \
    using Fn = CUresult (*)(const CUDA_MEMCPY2D*, CUstream);    \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, Shape2D(c), st, c, st); \
  }
#define DEFINE_3D(name)                            \
  CUresult name(const CUDA_MEMCPY3D* c) {          \
    using Fn = CUresult (*)(const CUDA_MEMCPY3D*); \
    PINSHIM_COPY(kApi_##name, Fn, Shape3D(c), c);  \
  }
#define DEFINE_3D_ASYNC(name)                                   \
  CUresult name(const CUDA_MEMCPY3D* c, CUstream st) {          \
    using Fn = CUresult (*)(const CUDA_MEMCPY3D*, CUstream);    \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, Shape3D(c), st, c, st); \
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
    using Fn = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*,     \
                            size_t*, size_t, size_t*, CUstream);                                  \
    PINSHIM_BATCH(kApi_##name, Fn, ShapeBatch(dsts, srcs, sizes, count), st, dsts, srcs, sizes,   \
                  count, attrs, attr_idxs, num_attrs, fail_idx, st);                              \
  }
#define DEFINE_BATCH_13000(name)                                                                \
  CUresult name(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,              \
                CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs, CUstream st) {  \
    using Fn = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*,   \
                            size_t*, size_t, CUstream);                                         \
    PINSHIM_BATCH(kApi_##name, Fn, ShapeBatch(dsts, srcs, sizes, count), st, dsts, srcs, sizes, \
                  count, attrs, attr_idxs, num_attrs, st);                                      \
  }
DEFINE_BATCH_12080(cuMemcpyBatchAsync)
DEFINE_BATCH_12080(cuMemcpyBatchAsync_ptsz)
DEFINE_BATCH_13000(cuMemcpyBatchAsync_v2)
DEFINE_BATCH_13000(cuMemcpyBatchAsync_v2_ptsz)

#define DEFINE_3DBATCH_12080(name)                                                                 \
  CUresult name(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx, unsigned long long flags, \
                CUstream st) {                                                                     \
    using Fn =                                                                                     \
        CUresult (*)(size_t, CUDA_MEMCPY3D_BATCH_OP*, size_t*, unsigned long long, CUstream);      \
    PINSHIM_BATCH(kApi_##name, Fn, Shape3DBatch(n, ops), st, n, ops, fail_idx, flags, st);         \
  }
#define DEFINE_3DBATCH_13000(name)                                                              \
  CUresult name(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags, CUstream st) { \
    using Fn = CUresult (*)(size_t, CUDA_MEMCPY3D_BATCH_OP*, unsigned long long, CUstream);     \
    PINSHIM_BATCH(kApi_##name, Fn, Shape3DBatch(n, ops), st, n, ops, flags, st);                \
  }
DEFINE_3DBATCH_12080(cuMemcpy3DBatchAsync)
DEFINE_3DBATCH_12080(cuMemcpy3DBatchAsync_ptsz)
DEFINE_3DBATCH_13000(cuMemcpy3DBatchAsync_v2)
DEFINE_3DBATCH_13000(cuMemcpy3DBatchAsync_v2_ptsz)

}  // extern "C"
