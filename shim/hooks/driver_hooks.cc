// The wrapped driver entry points. Each one translates its arguments into
// the core's vocabulary (direction, memory kinds, bytes), calls the real
// driver function and counts the call once. Nothing here changes what the
// program sees: arguments pass through untouched and every return code is
// the driver's own.
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <time.h>

#include <cstring>

#include "shim/budget/budget.h"
#include "shim/core/stats.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/pointer_attributes.h"
#include "shim/hooks/state.h"

namespace pinshim {
namespace {

template <typename Fn>
inline Fn Real(Api api) {
  return reinterpret_cast<Fn>(RealDriverFunction(api));
}

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
};

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
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
      if (s->host_ptr == nullptr) s->host_ptr = reinterpret_cast<const void*>(p);
    }
    return;
  }
  using GetAttr = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static std::atomic<GetAttr> get_attr_fn{nullptr};
  GetAttr get_attr = get_attr_fn.load(std::memory_order_acquire);
  if (get_attr == nullptr) {
    get_attr = reinterpret_cast<GetAttr>(DriverLibrarySymbol("cuPointerGetAttribute"));
    get_attr_fn.store(get_attr, std::memory_order_release);
  }
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
  return s;
}

CopyShape Shape3D(const CUDA_MEMCPY3D* c) {
  CopyShape s;
  if (c == nullptr) return s;
  MemoryTypeSide(c->srcMemoryType, c->srcHost, c->srcDevice, &s.src, &s);
  MemoryTypeSide(c->dstMemoryType, c->dstHost, c->dstDevice, &s.dst, &s);
  s.bytes = uint64_t{c->WidthInBytes} * c->Height * c->Depth;
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
  }
  return s;
}

// The device of the calling thread's current context, -1 when there is none
// (recorded with each traced copy: the non-portable rule needs it).
int CurrentDevice() {
  using GetDevice = CUresult (*)(CUdevice*);
  static std::atomic<GetDevice> get_device{nullptr};
  GetDevice fn = get_device.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<GetDevice>(DriverLibrarySymbol("cuCtxGetDevice"));
    if (fn == nullptr) return -1;
    get_device.store(fn, std::memory_order_release);
  }
  CUdevice dev = -1;
  return fn(&dev) == CUDA_SUCCESS ? static_cast<int>(dev) : -1;
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

// The optimize-mode engine when it is running, else null.
inline optimize::Optimizer* ActiveOptimizer() {
  if (PINSHIM_LIKELY(!g_optimize)) return nullptr;
  optimize::Optimizer& opt = optimize::Optimizer::Process();
  return opt.active() ? &opt : nullptr;
}

// Optimize mode and context teardown. The pool keys its slabs by the context
// that was current when they were allocated, and the driver frees them with
// that context; a later context may get the same handle. So from the moment
// a teardown wrapper starts until it has told the optimizer, no pooled
// allocation runs: the ones in flight are waited for, new ones go to the
// driver (what the program gets is a dedicated allocation, which frees
// correctly), and no slab can be made in the dying context or reused under
// a recycled handle. One word holds both counts, so the two sides see each
// other in one order.
class ContextGate {
 public:
  // Around a pooled allocation; false: a teardown runs, use the driver.
  bool EnterAlloc() {
    if (PINSHIM_LIKELY((state_.fetch_add(1, std::memory_order_acq_rel) >> 32) == 0)) return true;
    state_.fetch_sub(1, std::memory_order_release);
    return false;
  }
  void ExitAlloc() { state_.fetch_sub(1, std::memory_order_release); }

  // Closes the gate and waits for the pooled allocations already inside.
  // They never wait for a teardown, so this ends. (A signal handler cannot
  // get here from inside one: the depth guard makes it forward.)
  void BeginTeardown() {
    state_.fetch_add(kTeardown, std::memory_order_acq_rel);
    while ((state_.load(std::memory_order_acquire) & (kTeardown - 1)) != 0) sched_yield();
  }
  void EndTeardown() { state_.fetch_sub(kTeardown, std::memory_order_release); }

 private:
  static constexpr uint64_t kTeardown = uint64_t{1} << 32;
  std::atomic<uint64_t> state_{0};  // teardowns << 32 | pooled allocations in flight
};
ContextGate g_context_gate;

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

inline void AfterCopy(Api api, const optimize::CopyTicket& t, CUresult r, bool async,
                      CUstream stream) {
  if (PINSHIM_LIKELY(!g_optimize) || t.kind == optimize::CopyTicket::kNone) return;
  optimize::Optimizer::Process().AfterHostCopy(t, r, async, stream,
                                               kDriverEntries[api].per_thread);
}

// Runs a stageable copy through optimize mode's rings; false: the driver.
inline bool StageCopy(Api api, const optimize::CopyTicket& t, const void* host, CUdeviceptr dev,
                      bool async, CUstream stream, CUresult* r, optimize::StagedInfo* info) {
  return optimize::Optimizer::Process().Stage(t, const_cast<void*>(host), dev, stream,
                                              kDriverEntries[api].per_thread, !async, r, info);
}

// Timestamps are taken only while a trace is written.
inline uint64_t StartTime() { return trace::RecorderActive() ? NowNs() : 0; }

void RecordPinOp(Api api, PinOp op, void* p, uint64_t bytes, uint32_t flags, uint64_t start_ns,
                 CUresult r) {
  if (start_ns == 0) return;
  PinEvent e;
  e.api = api;
  e.op = op;
  e.ptr = p;
  e.bytes = bytes;
  e.flags = flags;
  e.start_ns = start_ns;
  e.end_ns = NowNs();
  e.result = r;
  trace::RecordPin(e, CurrentDevice());
}

inline CUresult NoDriver() { return CUDA_ERROR_NOT_INITIALIZED; }

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"

// Forwards when nested (count once) or when pinshim is not set up yet.
#define PINSHIM_FORWARD_IF_NESTED(api, type, ...)                     \
  auto real_fn = Real<type>(api);                                     \
  if (real_fn == nullptr) return NoDriver();                          \
  if (t_depth > 0 || !g_initialized.load(std::memory_order_relaxed))  \
    return real_fn(__VA_ARGS__);                                      \
  if (PINSHIM_UNLIKELY(!g_cuda_seen.load(std::memory_order_relaxed))) \
    NoteCudaSeen();                                                   \
  DepthGuard depth_guard

// A copy whose shape is computed by `shape_expr` before the call; `async`
// and `stream` say how it was queued (the stream is null for sync copies).
#define PINSHIM_COPY_ON(api, type, shape_expr, async, stream, ...)  \
  PINSHIM_FORWARD_IF_NESTED(api, type, __VA_ARGS__);                \
  CopyShape shape = shape_expr;                                     \
  const uint64_t start_ns = StartTime();                            \
  optimize::CopyTicket ticket = BeforeCopy(shape);                  \
  CUresult r = ticket.refuse ? CUDA_ERROR_INVALID_VALUE             \
                             : real_fn(__VA_ARGS__);                \
  AfterCopy(api, ticket, r, async, stream);                         \
  Finish(api, shape, r, async, stream, start_ns);                   \
  return r
// A 1D copy between one host range and device memory, which optimize mode
// may run through its staging rings (optimize/stager.h) when the host side
// is pageable memory it does not pin: `host` and `dev` are the two sides.
#define PINSHIM_COPY_STAGEABLE(api, type, shape_expr, async, stream, host, dev, ...)    \
  PINSHIM_FORWARD_IF_NESTED(api, type, __VA_ARGS__);                                    \
  CopyShape shape = shape_expr;                                                         \
  const uint64_t start_ns = StartTime();                                                \
  optimize::CopyTicket ticket = BeforeCopy(shape);                                      \
  CUresult r;                                                                           \
  optimize::StagedInfo staged;                                                          \
  const bool was_staged =                                                               \
      ticket.stage && StageCopy(api, ticket, host, dev, async, stream, &r, &staged);    \
  if (!was_staged) r = ticket.refuse ? CUDA_ERROR_INVALID_VALUE : real_fn(__VA_ARGS__); \
  AfterCopy(api, ticket, r, async, stream);                                             \
  Finish(api, shape, r, async, stream, start_ns, was_staged ? &staged : nullptr);       \
  return r
// Batches: their host operands are many ranges, not one. In optimize mode
// the call is waited for when it succeeded, so no operand pinshim pinned or
// pooled is still in use when it returns (as with pageable operands).
#define PINSHIM_BATCH(api, type, shape_expr, stream, ...)                            \
  PINSHIM_FORWARD_IF_NESTED(api, type, __VA_ARGS__);                                 \
  CopyShape shape = shape_expr;                                                      \
  const uint64_t start_ns = StartTime();                                             \
  CUresult r = real_fn(__VA_ARGS__);                                                 \
  if (r == CUDA_SUCCESS && ActiveOptimizer() != nullptr) {                          \
    ActiveOptimizer()->AfterAsyncCopyOnCachedMemory(stream,                           \
                                                    kDriverEntries[api].per_thread); \
  }                                                                                  \
  Finish(api, shape, r, true, stream, start_ns);                                     \
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
#define DEFINE_GENERIC(name)                                                                 \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n) {                                \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);                               \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, Generic(dst, src, n), false, nullptr,            \
                           PINSHIM_GENERIC_HOST(shape, dst, src),                            \
                           PINSHIM_GENERIC_DEV(shape, dst, src), dst, src, n);               \
  }
#define DEFINE_GENERIC_ASYNC(name)                                                           \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {                   \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);                     \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, Generic(dst, src, n), true, st,                  \
                           PINSHIM_GENERIC_HOST(shape, dst, src),                            \
                           PINSHIM_GENERIC_DEV(shape, dst, src), dst, src, n, st);           \
  }
DEFINE_GENERIC(cuMemcpy)
DEFINE_GENERIC(cuMemcpy_ptds)
DEFINE_GENERIC_ASYNC(cuMemcpyAsync)
DEFINE_GENERIC_ASYNC(cuMemcpyAsync_ptsz)

#define DEFINE_HTOD(name)                                                                    \
  CUresult name(CUdeviceptr dst, const void* src, size_t n) {                                \
    using Fn = CUresult (*)(CUdeviceptr, const void*, size_t);                               \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, HtoD(src, n), false, nullptr, src, dst, dst, src, \
                           n);                                                               \
  }
#define DEFINE_HTOD_ASYNC(name)                                                              \
  CUresult name(CUdeviceptr dst, const void* src, size_t n, CUstream st) {                   \
    using Fn = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);                     \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, HtoD(src, n), true, st, src, dst, dst, src, n,   \
                           st);                                                              \
  }
#define DEFINE_DTOH(name)                                                                    \
  CUresult name(void* dst, CUdeviceptr src, size_t n) {                                      \
    using Fn = CUresult (*)(void*, CUdeviceptr, size_t);                                     \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, DtoH(dst, n), false, nullptr, dst, src, dst, src, \
                           n);                                                               \
  }
#define DEFINE_DTOH_ASYNC(name)                                                              \
  CUresult name(void* dst, CUdeviceptr src, size_t n, CUstream st) {                         \
    using Fn = CUresult (*)(void*, CUdeviceptr, size_t, CUstream);                           \
    PINSHIM_COPY_STAGEABLE(kApi_##name, Fn, DtoH(dst, n), true, st, dst, src, dst, src, n,   \
                           st);                                                              \
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

#define DEFINE_DTOD(name)                                                          \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n) {                      \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);                     \
    PINSHIM_COPY(kApi_##name, Fn, DtoD(n), dst, src, n);                           \
  }
#define DEFINE_DTOD_ASYNC(name)                                                    \
  CUresult name(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {         \
    using Fn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);           \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, DtoD(n), st, dst, src, n, st);                       \
  }
#define DEFINE_PEER(name)                                                                     \
  CUresult name(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) { \
    using Fn = CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t);          \
    PINSHIM_COPY(kApi_##name, Fn, DtoD(n), dst, dctx, src, sctx, n);                          \
  }
#define DEFINE_PEER_ASYNC(name)                                                        \
  CUresult name(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,      \
                size_t n, CUstream st) {                                               \
    using Fn = CUresult (*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t,    \
                            CUstream);                                                 \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, DtoD(n), st, dst, dctx, src, sctx, n, st);               \
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

#define DEFINE_HTOA(name)                                                            \
  CUresult name(CUarray a, size_t off, const void* src, size_t n) {                  \
    using Fn = CUresult (*)(CUarray, size_t, const void*, size_t);                   \
    PINSHIM_COPY(kApi_##name, Fn, HtoD(src, n), a, off, src, n);                     \
  }
#define DEFINE_HTOA_ASYNC(name)                                                      \
  CUresult name(CUarray a, size_t off, const void* src, size_t n, CUstream st) {     \
    using Fn = CUresult (*)(CUarray, size_t, const void*, size_t, CUstream);         \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, HtoD(src, n), st, a, off, src, n, st);                 \
  }
#define DEFINE_ATOH(name)                                                            \
  CUresult name(void* dst, CUarray a, size_t off, size_t n) {                        \
    using Fn = CUresult (*)(void*, CUarray, size_t, size_t);                         \
    PINSHIM_COPY(kApi_##name, Fn, DtoH(dst, n), dst, a, off, n);                     \
  }
#define DEFINE_ATOH_ASYNC(name)                                                      \
  CUresult name(void* dst, CUarray a, size_t off, size_t n, CUstream st) {           \
    using Fn = CUresult (*)(void*, CUarray, size_t, size_t, CUstream);               \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, DtoH(dst, n), st, dst, a, off, n, st);                 \
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
    using Fn = CUresult (*)(const CUDA_MEMCPY2D*);                          \
    PINSHIM_COPY(kApi_##name, Fn, Shape2D(c), c);                           \
  }
#define DEFINE_2D_ASYNC(name)                                               \
  CUresult name(const CUDA_MEMCPY2D* c, CUstream st) {                      \
    using Fn = CUresult (*)(const CUDA_MEMCPY2D*, CUstream);                \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, Shape2D(c), st, c, st);                       \
  }
#define DEFINE_3D(name)                                                     \
  CUresult name(const CUDA_MEMCPY3D* c) {                                   \
    using Fn = CUresult (*)(const CUDA_MEMCPY3D*);                          \
    PINSHIM_COPY(kApi_##name, Fn, Shape3D(c), c);                           \
  }
#define DEFINE_3D_ASYNC(name)                                               \
  CUresult name(const CUDA_MEMCPY3D* c, CUstream st) {                      \
    using Fn = CUresult (*)(const CUDA_MEMCPY3D*, CUstream);                \
    PINSHIM_COPY_ASYNC(kApi_##name, Fn, Shape3D(c), st, c, st);                       \
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

#define DEFINE_BATCH_12080(name)                                                        \
  CUresult name(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,      \
                CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs,         \
                size_t* fail_idx, CUstream st) {                                        \
    using Fn = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t,                \
                            CUmemcpyAttributes*, size_t*, size_t, size_t*, CUstream);   \
    PINSHIM_BATCH(kApi_##name, Fn, ShapeBatch(dsts, srcs, sizes, count), st, dsts, srcs,     \
                 sizes, count, attrs, attr_idxs, num_attrs, fail_idx, st);              \
  }
#define DEFINE_BATCH_13000(name)                                                        \
  CUresult name(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,      \
                CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs,         \
                CUstream st) {                                                          \
    using Fn = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t,                \
                            CUmemcpyAttributes*, size_t*, size_t, CUstream);            \
    PINSHIM_BATCH(kApi_##name, Fn, ShapeBatch(dsts, srcs, sizes, count), st, dsts, srcs,     \
                 sizes, count, attrs, attr_idxs, num_attrs, st);                        \
  }
DEFINE_BATCH_12080(cuMemcpyBatchAsync)
DEFINE_BATCH_12080(cuMemcpyBatchAsync_ptsz)
DEFINE_BATCH_13000(cuMemcpyBatchAsync_v2)
DEFINE_BATCH_13000(cuMemcpyBatchAsync_v2_ptsz)

#define DEFINE_3DBATCH_12080(name)                                                      \
  CUresult name(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx,                \
                unsigned long long flags, CUstream st) {                                \
    using Fn = CUresult (*)(size_t, CUDA_MEMCPY3D_BATCH_OP*, size_t*,                   \
                            unsigned long long, CUstream);                              \
    PINSHIM_BATCH(kApi_##name, Fn, Shape3DBatch(n, ops), st, n, ops, fail_idx, flags, st);   \
  }
#define DEFINE_3DBATCH_13000(name)                                                      \
  CUresult name(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags,        \
                CUstream st) {                                                          \
    using Fn = CUresult (*)(size_t, CUDA_MEMCPY3D_BATCH_OP*, unsigned long long,        \
                            CUstream);                                                  \
    PINSHIM_BATCH(kApi_##name, Fn, Shape3DBatch(n, ops), st, n, ops, flags, st);             \
  }
DEFINE_3DBATCH_12080(cuMemcpy3DBatchAsync)
DEFINE_3DBATCH_12080(cuMemcpy3DBatchAsync_ptsz)
DEFINE_3DBATCH_13000(cuMemcpy3DBatchAsync_v2)
DEFINE_3DBATCH_13000(cuMemcpy3DBatchAsync_v2_ptsz)

// --- pinned host memory ------------------------------------------------------
//
// In enforce mode every pinning is charged to the budget first. Over budget,
// the policy decides: deny returns the driver's out-of-memory error; fallback
// serves pageable memory that copies and frees correctly (calls that need
// real pinning, such as cuMemHostGetDevicePointer, get the driver's own answer
// for unpinned memory).

namespace {

using budget::Budget;
using budget::Decision;
using budget::Owner;

void InsertRegion(Registry* reg, void* p, uint64_t n, unsigned int flags, MemKind kind,
                  RegionSource source) {
  Region r;
  r.start = reinterpret_cast<uintptr_t>(p);
  r.bytes = n;
  r.id = NextAllocId();
  r.flags = flags;
  r.kind = kind;
  r.source = source;
  reg->Insert(r);
}

// The region pinshim handed out instead of pinning, if `p` starts one.
bool FindFallback(Registry* reg, void* p, Region* out) {
  return p != nullptr && reg->Lookup(reinterpret_cast<uintptr_t>(p), out) &&
         out->start == reinterpret_cast<uintptr_t>(p) && out->source == kSourceFallback;
}

void RecordDeviceAlloc(CUdeviceptr* dptr, uint64_t n, MemKind kind, CUresult r) {
  if (r != CUDA_SUCCESS || dptr == nullptr || *dptr == 0) return;
  Region reg;
  reg.start = *dptr;
  reg.bytes = n;
  reg.id = NextAllocId();
  reg.kind = kind;
  reg.source = kSourceDriver;
  g_allocations.Insert(reg);
}

extern "C++" template <typename Call>
CUresult HostAlloc(Api api, void** pp, size_t n, unsigned int flags, Call real_call) {
  // Arguments the driver rejects go to the driver, which pins nothing.
  const bool valid = pp != nullptr && n != 0;
  const uint64_t start_ns = StartTime();
  CUresult pooled;
  bool served = false;
  if (g_optimize && EnsureOptimizerStarted() && g_context_gate.EnterAlloc()) {
    served = optimize::Optimizer::Process().HostAlloc(pp, n, flags, &pooled);
    g_context_gate.ExitAlloc();
  }
  if (served) {
    // Served from pinshim's pool (its slabs are charged to the budget).
    CountPin(api, PinOp::kAlloc, flags, n, pooled != CUDA_SUCCESS);
    RecordPinOp(api, PinOp::kAlloc, pooled == CUDA_SUCCESS ? *pp : nullptr, n, flags, start_ns,
                pooled);
    return pooled;
  }
  Decision decision = Decision::kGranted;
  if (g_enforce && valid) decision = Budget::Process().Charge(Owner::kProgramAlloc, n);
  CUresult r;
  if (decision == Decision::kDenied) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else if (decision == Decision::kFallback) {
    void* p = g_real.mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      *pp = p;
      InsertRegion(&g_allocations, p, n, flags, MemKind::kPageable, kSourceFallback);
      r = CUDA_SUCCESS;
    }
  } else {
    r = real_call();
    if (r == CUDA_SUCCESS && pp != nullptr && *pp != nullptr) {
      InsertRegion(&g_allocations, *pp, n, flags, MemKind::kPinnedByProgram, kSourceDriver);
    } else if (g_enforce && valid) {
      Budget::Process().Release(Owner::kProgramAlloc, n);
    }
  }
  CountPin(api, PinOp::kAlloc, flags, n, r != CUDA_SUCCESS);
  // Pageable memory handed out instead is not pinned memory: the trace has
  // the budget's decision, not a pinned allocation.
  if (decision != Decision::kFallback) {
    RecordPinOp(api, PinOp::kAlloc, r == CUDA_SUCCESS ? *pp : nullptr, n, flags, start_ns, r);
  }
  return r;
}

}  // namespace

CUresult cuMemHostAlloc(void** pp, size_t n, unsigned int flags) {
  using Fn = CUresult (*)(void**, size_t, unsigned int);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemHostAlloc, Fn, pp, n, flags);
  return HostAlloc(kApi_cuMemHostAlloc, pp, n, flags, [&] { return real_fn(pp, n, flags); });
}

CUresult cuMemAllocHost_v2(void** pp, size_t n) {
  using Fn = CUresult (*)(void**, size_t);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemAllocHost_v2, Fn, pp, n);
  return HostAlloc(kApi_cuMemAllocHost_v2, pp, n, 0, [&] { return real_fn(pp, n); });
}

CUresult cuMemFreeHost(void* p) {
  using Fn = CUresult (*)(void*);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemFreeHost, Fn, p);
  const uint64_t start_ns = StartTime();
  Region reg;
  if (optimize::Optimizer* optp = ActiveOptimizer()) {
    auto& opt = *optp;
    optimize::PoolBlockInfo block{};
    CUresult freed;
    if (opt.FreeHost(p, &freed, &block)) {
      const bool in_pool = freed == CUDA_SUCCESS;
      CountPin(kApi_cuMemFreeHost, PinOp::kFree, in_pool ? block.flags : 0,
               in_pool ? block.requested : 0, freed != CUDA_SUCCESS);
      RecordPinOp(kApi_cuMemFreeHost, PinOp::kFree, p, in_pool ? block.requested : 0,
                  in_pool ? block.flags : 0, start_ns, freed);
      return freed;
    }
  }
  if (FindFallback(&g_allocations, p, &reg)) {
    g_allocations.Remove(reg.start, nullptr);
    g_real.munmap(p, reg.bytes);
    CountPin(kApi_cuMemFreeHost, PinOp::kFree, reg.flags, reg.bytes, false);
    return CUDA_SUCCESS;
  }
  bool known = p != nullptr && g_allocations.Lookup(reinterpret_cast<uintptr_t>(p), &reg) &&
               reg.start == reinterpret_cast<uintptr_t>(p) && reg.kind == MemKind::kPinnedByProgram;
  CUresult r = real_fn(p);
  if (r == CUDA_SUCCESS && known) {
    g_allocations.Remove(reg.start, nullptr);
    if (g_enforce) Budget::Process().Release(Owner::kProgramAlloc, reg.bytes);
  }
  CountPin(kApi_cuMemFreeHost, PinOp::kFree, known ? reg.flags : 0, known ? reg.bytes : 0,
           r != CUDA_SUCCESS);
  RecordPinOp(kApi_cuMemFreeHost, PinOp::kFree, p, known ? reg.bytes : 0, known ? reg.flags : 0,
              start_ns, r);
  return r;
}

namespace {
CUresult HostRegister(Api api, void* p, size_t n, unsigned int flags) {
  using Fn = CUresult (*)(void*, size_t, unsigned int);
  PINSHIM_FORWARD_IF_NESTED(api, Fn, p, n, flags);
  const bool valid = p != nullptr && n != 0;
  const uint64_t start_ns = StartTime();
  CUresult emulated;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->ProgramRegister(p, n, flags, &emulated)) {
    CountPin(api, PinOp::kRegister, flags, n, emulated != CUDA_SUCCESS);
    RecordPinOp(api, PinOp::kRegister, p, n, flags, start_ns, emulated);
    return emulated;
  }
  Decision decision = Decision::kGranted;
  if (g_enforce && valid) decision = Budget::Process().Charge(Owner::kProgramRegister, n);
  CUresult r;
  if (decision == Decision::kDenied) {
    r = CUDA_ERROR_OUT_OF_MEMORY;
  } else if (decision == Decision::kFallback) {
    // Left pageable: copies still work, at pageable speed.
    InsertRegion(&g_registrations, p, n, flags, MemKind::kPageable, kSourceFallback);
    r = CUDA_SUCCESS;
  } else {
    r = real_fn(p, n, flags);
    if (r == CUDA_SUCCESS) {
      InsertRegion(&g_registrations, p, n, flags, MemKind::kRegisteredByProgram, kSourceDriver);
    } else if (g_enforce && valid) {
      Budget::Process().Release(Owner::kProgramRegister, n);
    }
  }
  CountPin(api, PinOp::kRegister, flags, n, r != CUDA_SUCCESS);
  if (decision != Decision::kFallback) RecordPinOp(api, PinOp::kRegister, p, n, flags, start_ns, r);
  return r;
}
}  // namespace

CUresult cuMemHostRegister(void* p, size_t n, unsigned int flags) {
  return HostRegister(kApi_cuMemHostRegister, p, n, flags);
}

CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned int flags) {
  return HostRegister(kApi_cuMemHostRegister_v2, p, n, flags);
}

CUresult cuMemHostUnregister(void* p) {
  using Fn = CUresult (*)(void*);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemHostUnregister, Fn, p);
  const uint64_t start_ns = StartTime();
  Region reg;
  CUresult emulated;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->ProgramUnregister(p, &emulated)) {
    CountPin(kApi_cuMemHostUnregister, PinOp::kUnregister, 0, 0, emulated != CUDA_SUCCESS);
    RecordPinOp(kApi_cuMemHostUnregister, PinOp::kUnregister, p, 0, 0, start_ns, emulated);
    return emulated;
  }
  if (FindFallback(&g_registrations, p, &reg)) {
    g_registrations.Remove(reg.start, nullptr);
    CountPin(kApi_cuMemHostUnregister, PinOp::kUnregister, reg.flags, reg.bytes, false);
    return CUDA_SUCCESS;
  }
  CUresult r = real_fn(p);
  bool known = false;
  if (r == CUDA_SUCCESS) known = g_registrations.Remove(reinterpret_cast<uintptr_t>(p), &reg);
  if (known && g_enforce) Budget::Process().Release(Owner::kProgramRegister, reg.bytes);
  CountPin(kApi_cuMemHostUnregister, PinOp::kUnregister, known ? reg.flags : 0,
           known ? reg.bytes : 0, r != CUDA_SUCCESS);
  RecordPinOp(kApi_cuMemHostUnregister, PinOp::kUnregister, p, known ? reg.bytes : 0,
              known ? reg.flags : 0, start_ns, r);
  return r;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* out, void* p, unsigned int flags) {
  using Fn = CUresult (*)(CUdeviceptr*, void*, unsigned int);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemHostGetDevicePointer_v2, Fn, out, p, flags);
  CUresult answer;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->HostGetDevicePointer(out, p, flags, &answer)) {
    return answer;
  }
  return real_fn(out, p, flags);
}

CUresult cuMemHostGetFlags(unsigned int* out, void* p) {
  using Fn = CUresult (*)(unsigned int*, void*);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemHostGetFlags, Fn, out, p);
  CUresult answer;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->HostGetFlags(out, p, &answer)) {
    return answer;
  }
  return real_fn(out, p);
}

// --- pointer attributes -------------------------------------------------------
//
// Optimize mode pins memory the program did not pin (registration cache, host
// arena) and serves the program's pinned allocations from shared slabs (pool).
// Attribute queries must not see either: the first answers as pageable
// memory, a pool block as the dedicated allocation the program asked for
// (shim/hooks/pointer_attributes.h). Any other pointer, and every query
// outside optimize mode, goes to the driver untouched.

namespace {

enum class PointerView : uint8_t { kDriver, kPageable, kPoolBlock };

PointerView ViewOf(optimize::Optimizer& opt, CUdeviceptr ptr, BlockAttributes* block) {
  const void* p = reinterpret_cast<const void*>(ptr);
  if (opt.pool().Owns(p)) {
    optimize::PoolBlockInfo info;
    // Pool memory outside a live block's requested bytes (a freed block, the
    // rounding of a size class) belongs to no allocation of the program's.
    if (!opt.pool().Lookup(p, &info)) return PointerView::kPageable;
    block->base = info.base;
    block->bytes = info.requested;
    block->buffer_id = PoolBufferId(info.alloc_id);
    return PointerView::kPoolBlock;
  }
  return opt.HidesPinning(p) ? PointerView::kPageable : PointerView::kDriver;
}

}  // namespace

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  using Fn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuPointerGetAttribute, Fn, data, attribute, ptr);
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(data, attribute, ptr);
  BlockAttributes block;
  switch (ViewOf(*opt, ptr, &block)) {
    case PointerView::kPageable:
      return PageablePointerGetAttribute(real_fn, data, attribute, ptr);
    case PointerView::kPoolBlock: {
      CUresult r = real_fn(data, attribute, ptr);
      if (r == CUDA_SUCCESS) RewriteForBlock(block, attribute, data);
      return r;
    }
    case PointerView::kDriver:
      break;
  }
  return real_fn(data, attribute, ptr);
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attributes, void** data,
                                CUdeviceptr ptr) {
  using Fn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuPointerGetAttributes, Fn, n, attributes, data, ptr);
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(n, attributes, data, ptr);
  BlockAttributes block;
  switch (ViewOf(*opt, ptr, &block)) {
    case PointerView::kPageable:
      return PageablePointerGetAttributes(real_fn, n, attributes, data, ptr);
    case PointerView::kPoolBlock: {
      CUresult r = real_fn(n, attributes, data, ptr);
      if (r == CUDA_SUCCESS) RewriteForBlock(block, n, attributes, data);
      return r;
    }
    case PointerView::kDriver:
      break;
  }
  return real_fn(n, attributes, data, ptr);
}

// --- device and managed allocations ------------------------------------------

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t n) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemAlloc_v2, Fn, dptr, n);
  CUresult r = real_fn(dptr, n);
  RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);
  return r;
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                            unsigned int elem) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemAllocPitch_v2, Fn, dptr, pitch, width, height, elem);
  CUresult r = real_fn(dptr, pitch, width, height, elem);
  if (r == CUDA_SUCCESS && pitch != nullptr) {
    RecordDeviceAlloc(dptr, uint64_t{*pitch} * height, MemKind::kDevice, r);
  }
  return r;
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t n, unsigned int flags) {
  using Fn = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemAllocManaged, Fn, dptr, n, flags);
  CUresult r = real_fn(dptr, n, flags);
  RecordDeviceAlloc(dptr, n, MemKind::kManaged, r);
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr d) {
  using Fn = CUresult (*)(CUdeviceptr);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuMemFree_v2, Fn, d);
  const uint64_t start_ns = StartTime();
  CUresult r = real_fn(d);
  if (r == CUDA_SUCCESS) g_allocations.Remove(d, nullptr);
  // The driver waited for the device's queued work first (measured): a
  // completion point for the trace.
  hook::RecordDriverWait(kApi_cuMemFree_v2, start_ns, r);
  return r;
}

#define DEFINE_ALLOC_ASYNC(name)                                          \
  CUresult name(CUdeviceptr* dptr, size_t n, CUstream st) {               \
    using Fn = CUresult (*)(CUdeviceptr*, size_t, CUstream);              \
    PINSHIM_FORWARD_IF_NESTED(kApi_##name, Fn, dptr, n, st);              \
    CUresult r = real_fn(dptr, n, st);                                    \
    RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);                      \
    return r;                                                             \
  }
#define DEFINE_ALLOC_POOL_ASYNC(name)                                             \
  CUresult name(CUdeviceptr* dptr, size_t n, CUmemoryPool pool, CUstream st) {    \
    using Fn = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);        \
    PINSHIM_FORWARD_IF_NESTED(kApi_##name, Fn, dptr, n, pool, st);                \
    CUresult r = real_fn(dptr, n, pool, st);                                      \
    RecordDeviceAlloc(dptr, n, MemKind::kDevice, r);                              \
    return r;                                                                     \
  }
#define DEFINE_FREE_ASYNC(name)                                           \
  CUresult name(CUdeviceptr d, CUstream st) {                             \
    using Fn = CUresult (*)(CUdeviceptr, CUstream);                       \
    PINSHIM_FORWARD_IF_NESTED(kApi_##name, Fn, d, st);                    \
    CUresult r = real_fn(d, st);                                          \
    if (r == CUDA_SUCCESS) g_allocations.Remove(d, nullptr);              \
    return r;                                                             \
  }
DEFINE_ALLOC_ASYNC(cuMemAllocAsync)
DEFINE_ALLOC_ASYNC(cuMemAllocAsync_ptsz)
DEFINE_ALLOC_POOL_ASYNC(cuMemAllocFromPoolAsync)
DEFINE_ALLOC_POOL_ASYNC(cuMemAllocFromPoolAsync_ptsz)
DEFINE_FREE_ASYNC(cuMemFreeAsync)
DEFINE_FREE_ASYNC(cuMemFreeAsync_ptsz)

// --- context teardown ---------------------------------------------------------
//
// Destroying a context frees its memory, the pool's slabs included (see
// ContextGate). In optimize mode these wrappers tell the optimizer which
// context went, after the driver destroyed it and before returning; in every
// other case they forward untouched. They count nothing.
//
// A primary context is destroyed by cuDevicePrimaryCtxReset, and by the
// cuDevicePrimaryCtxRelease that drops its last reference; its handle is
// found before the call (ActivePrimaryContext). These two and
// cuDevicePrimaryCtxRetain run one at a time (g_primary_mu), so no retain
// can bring the context back between the call and the look at its state,
// and the handle lookup cannot race a destruction. The lock is held across
// the driver call; nothing else takes it, and in a forked child optimize
// mode is off, so nothing waits for it there.

namespace {

pthread_mutex_t g_primary_mu = PTHREAD_MUTEX_INITIALIZER;

// One context teardown by the program, in optimize mode.
class Teardown {
 public:
  explicit Teardown(bool primary) : primary_(primary) {
    if (primary_) pthread_mutex_lock(&g_primary_mu);
    g_context_gate.BeginTeardown();
  }
  ~Teardown() {
    g_context_gate.EndTeardown();
    if (primary_) pthread_mutex_unlock(&g_primary_mu);
  }
  Teardown(const Teardown&) = delete;
  Teardown& operator=(const Teardown&) = delete;

 private:
  bool primary_;
};

extern "C++" template <typename Fn>
Fn DriverFunction(std::atomic<void*>* cache, const char* name, const char* fallback = nullptr) {
  void* fn = cache->load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = DriverLibrarySymbol(name);
    if (fn == nullptr && fallback != nullptr) fn = DriverLibrarySymbol(fallback);
    if (fn != nullptr) cache->store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

// Whether dev's primary context is active: 1 yes, 0 no, -1 unknown.
int PrimaryActive(CUdevice dev) {
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static std::atomic<void*> fn{nullptr};
  auto get_state = DriverFunction<GetState>(&fn, "cuDevicePrimaryCtxGetState");
  unsigned int flags = 0;
  int active = 0;
  if (get_state == nullptr || get_state(dev, &flags, &active) != CUDA_SUCCESS) return -1;
  return active != 0 ? 1 : 0;
}

// The handle of dev's primary context when it is active, else null. Asked
// under g_primary_mu, so it stays active throughout: the retain creates
// nothing, and the release that balances it is never the last.
CUcontext ActivePrimaryContext(CUdevice dev) {
  if (PrimaryActive(dev) != 1) return nullptr;
  using Retain = CUresult (*)(CUcontext*, CUdevice);
  using Release = CUresult (*)(CUdevice);
  static std::atomic<void*> retain_fn{nullptr}, release_fn{nullptr};
  auto retain = DriverFunction<Retain>(&retain_fn, "cuDevicePrimaryCtxRetain");
  auto release = DriverFunction<Release>(&release_fn, "cuDevicePrimaryCtxRelease_v2",
                                         "cuDevicePrimaryCtxRelease");
  if (retain == nullptr || release == nullptr) return nullptr;
  CUcontext ctx = nullptr;
  if (retain(&ctx, dev) != CUDA_SUCCESS) return nullptr;
  release(dev);
  return ctx;
}

CUresult DestroyContextCall(Api api, CUcontext ctx) {
  using Fn = CUresult (*)(CUcontext);
  PINSHIM_FORWARD_IF_NESTED(api, Fn, ctx);
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(ctx);
  Teardown teardown(/*primary=*/false);
  CUresult r = real_fn(ctx);
  if (r == CUDA_SUCCESS && ctx != nullptr) opt->OnContextDestroyed(ctx);
  return r;
}

// cuDevicePrimaryCtxReset (reset) or cuDevicePrimaryCtxRelease.
CUresult EndPrimaryContext(Api api, CUdevice dev, bool reset) {
  using Fn = CUresult (*)(CUdevice);
  PINSHIM_FORWARD_IF_NESTED(api, Fn, dev);
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(dev);
  Teardown teardown(/*primary=*/true);
  CUcontext primary = ActivePrimaryContext(dev);
  CUresult r = real_fn(dev);
  if (r != CUDA_SUCCESS || primary == nullptr) return r;
  // A reset destroys an active primary context by definition; a release
  // only when it dropped the last reference, which leaves it inactive.
  if (reset || PrimaryActive(dev) == 0) opt->OnContextDestroyed(primary);
  return r;
}

}  // namespace

CUresult cuCtxDestroy(CUcontext ctx) { return DestroyContextCall(kApi_cuCtxDestroy, ctx); }

CUresult cuCtxDestroy_v2(CUcontext ctx) { return DestroyContextCall(kApi_cuCtxDestroy_v2, ctx); }

CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxReset, dev, /*reset=*/true);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxReset_v2, dev, /*reset=*/true);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxRelease, dev, /*reset=*/false);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return EndPrimaryContext(kApi_cuDevicePrimaryCtxRelease_v2, dev, /*reset=*/false);
}

// Wrapped only to wait while a primary context teardown runs (see above).
CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  using Fn = CUresult (*)(CUcontext*, CUdevice);
  PINSHIM_FORWARD_IF_NESTED(kApi_cuDevicePrimaryCtxRetain, Fn, pctx, dev);
  if (PINSHIM_LIKELY(ActiveOptimizer() == nullptr)) return real_fn(pctx, dev);
  pthread_mutex_lock(&g_primary_mu);
  CUresult r = real_fn(pctx, dev);
  pthread_mutex_unlock(&g_primary_mu);
  return r;
}

// --- cuGetProcAddress --------------------------------------------------------

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto real_fn = Real<Fn>(kApi_cuGetProcAddress_v2);
  if (real_fn == nullptr) return NoDriver();
  if (!g_initialized.load(std::memory_order_acquire)) Init();
  if (PINSHIM_UNLIKELY(!g_cuda_seen.load(std::memory_order_relaxed))) NoteCudaSeen();
  CUresult r = real_fn(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr && t_depth == 0) {
    *pfn = WrapProcAddressResult(symbol, *pfn, version, flags);
  }
  return r;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto real_fn = Real<Fn>(kApi_cuGetProcAddress);
  if (real_fn == nullptr) return NoDriver();
  if (!g_initialized.load(std::memory_order_acquire)) Init();
  if (PINSHIM_UNLIKELY(!g_cuda_seen.load(std::memory_order_relaxed))) NoteCudaSeen();
  CUresult r = real_fn(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && symbol != nullptr && pfn != nullptr && *pfn != nullptr && t_depth == 0) {
    *pfn = WrapProcAddressResult(symbol, *pfn, version, flags);
  }
  return r;
}

}  // extern "C"

namespace pinshim {

const DriverEntry kDriverEntries[kApiCount] = {
#define X(base, abi, version, per_thread) \
  {#base, #abi, version, per_thread != 0, reinterpret_cast<void*>(&::abi)},
#include "shim/hooks/driver_entry_points.inc"
#undef X
};

}  // namespace pinshim
