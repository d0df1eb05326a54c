// Streams, events, captures, graph launches and host functions: the calls
// that say when queued work runs and when the host knows it finished. While
// a trace is written each one is recorded (kSync, kStream, kGraph) for the
// analyzer's model of the driver's synchronization
// (analyzer/report/sync_model.h); without a trace they forward untouched.
// They count nothing in the summary, and every return code is the driver's.
//
// Host functions (cuLaunchHostFunc, cuStreamAddCallback) are the one place
// where a wrapper changes an argument: while a trace is written the driver
// is handed a trampoline that records the moment the function starts (the
// work queued before it on its stream has then finished), then calls the
// program's function with the program's argument, on the same driver
// thread. The trampolines' arguments live in a fixed table; when it is full
// the program's function is passed through as it was, and the trace says so.
// Optimize mode's stager hears of every host function, callback and graph
// launch before it is queued (Optimizer::NoteHostWorkQueued): from then on an
// asynchronous upload reads its source as the driver does.
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>

#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/state.h"
#include "shim/optimize/fences.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace hook {

int CurrentDevice() {
  using GetDevice = CUresult (*)(CUdevice*);
  static std::atomic<void*> get_device{nullptr};
  auto fn = LazyDriverSymbol<GetDevice>(&get_device, "cuCtxGetDevice");
  if (fn == nullptr) return -1;
  CUdevice dev = -1;
  return fn(&dev) == CUDA_SUCCESS ? static_cast<int>(dev) : -1;
}

namespace {

void RecordSyncPoint(ApiId api, trace::SyncKind kind, const void* stream, const void* event,
                     uint64_t start_ns, CUresult r) {
  if (start_ns == 0) return;
  trace::SyncEvent e;
  e.api = api;
  e.kind = kind;
  e.stream = stream;
  e.event = event;
  e.start_ns = start_ns;
  e.end_ns = MonotonicNs();
  e.result = r;
  e.device = CurrentDevice();
  trace::RecordSync(e);
}

// Optimize mode counts the captures open: one begins when a begin call
// succeeds, and ends when an end call returns a graph or reports the
// capture invalidated (which ends it too). Never below zero.
void CountCapture(trace::GraphOp op, CUresult r) {
  if (PINSHIM_LIKELY(!g_optimize)) return;
  if (op == trace::GraphOp::kCaptureBegin && r == CUDA_SUCCESS) {
    g_open_captures.fetch_add(1, std::memory_order_relaxed);
  } else if (op == trace::GraphOp::kCaptureEnd &&
             (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)) {
    int n = g_open_captures.load(std::memory_order_relaxed);
    while (n > 0 && !g_open_captures.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
  }
}

void RecordGraphOp(ApiId api, trace::GraphOp op, const void* stream, const void* graph,
                   uint64_t start_ns, CUresult r) {
  CountCapture(op, r);
  if (start_ns == 0) return;
  trace::GraphEvent e;
  e.api = api;
  e.op = op;
  e.stream = stream;
  e.graph = graph;
  e.start_ns = start_ns;
  e.end_ns = MonotonicNs();
  e.result = r;
  e.device = CurrentDevice();
  trace::RecordGraph(e);
}

void RecordStreamCreated(ApiId api, CUstream* out, unsigned flags, int priority, uint64_t start_ns,
                         CUresult r) {
  if (start_ns == 0) return;
  trace::StreamEvent e;
  e.api = api;
  e.stream = r == CUDA_SUCCESS && out != nullptr ? *out : nullptr;
  e.flags = flags;
  e.priority = priority;
  e.start_ns = start_ns;
  e.end_ns = MonotonicNs();
  e.result = r;
  e.device = CurrentDevice();
  trace::RecordStream(e);
}

// --- host function trampolines ---------------------------------------------

constexpr size_t kHostFnSlots = 4096;

struct HostFnSlot {
  std::atomic<uint32_t> busy{0};
  CUhostFn fn = nullptr;
  CUstreamCallback callback = nullptr;
  void* data = nullptr;
  uint64_t token = 0;
};
HostFnSlot g_host_fns[kHostFnSlots];
std::atomic<uint64_t> g_next_token{1};
std::atomic<size_t> g_slot_hint{0};

HostFnSlot* ClaimSlot() {
  const size_t start = g_slot_hint.fetch_add(1, std::memory_order_relaxed);
  for (size_t k = 0; k < kHostFnSlots; ++k) {
    HostFnSlot& s = g_host_fns[(start + k) % kHostFnSlots];
    uint32_t expected = 0;
    if (s.busy.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return &s;
  }
  return nullptr;
}

// The host function starts: recorded first, then the program's own runs.
void RecordRun(uint64_t token) {
  trace::SyncEvent e;
  e.api = kApi_cuLaunchHostFunc;
  e.kind = trace::SyncKind::kHostFuncRun;
  e.stream = nullptr;
  e.event = reinterpret_cast<const void*>(static_cast<uintptr_t>(token));
  e.start_ns = e.end_ns = MonotonicNs();
  e.result = CUDA_SUCCESS;
  e.device = -1;
  trace::RecordSync(e);
}

// A slot serves one call: it is emptied before it is given back, so that a
// second call through it (which MayBeCapturing exists to prevent) finds
// nothing rather than another function's argument.
void CUDA_CB RunHostFn(void* arg) {
  HostFnSlot* s = static_cast<HostFnSlot*>(arg);
  CUhostFn fn = s->fn;
  void* data = s->data;
  const uint64_t token = s->token;
  s->fn = nullptr;
  s->busy.store(0, std::memory_order_release);
  if (fn == nullptr) return;
  RecordRun(token);
  fn(data);
}

void CUDA_CB RunStreamCallback(CUstream stream, CUresult status, void* arg) {
  HostFnSlot* s = static_cast<HostFnSlot*>(arg);
  CUstreamCallback callback = s->callback;
  void* data = s->data;
  const uint64_t token = s->token;
  s->callback = nullptr;
  s->busy.store(0, std::memory_order_release);
  if (callback == nullptr) return;
  RecordRun(token);
  callback(stream, status, data);
}

// Whether `stream` may be capturing: a host function queued there becomes a
// graph node the driver calls at every launch, with the argument it was
// given, so it must not be a trampoline slot that is freed after one call.
// Asked of the driver itself; a driver without captures never captures,
// and a query that fails counts as capturing.
bool MayBeCapturing(CUstream stream, bool per_thread) {
  using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  static std::atomic<void*> legacy_fn{nullptr}, per_thread_fn{nullptr};
  auto fn = per_thread ? LazyDriverSymbol<IsCapturing>(&per_thread_fn, "cuStreamIsCapturing_ptsz")
                       : LazyDriverSymbol<IsCapturing>(&legacy_fn, "cuStreamIsCapturing");
  if (fn == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (fn(stream, &status) != CUDA_SUCCESS) return true;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Queues a host function through `launch(trampoline_arg)` (or unwrapped,
// `launch(nullptr)`, without a trace, on a capturing stream or without a
// free slot) and records it. The queueing is recorded before the driver
// call: the function may start before the call returns.
template <typename Launch>
CUresult QueueHostFn(ApiId api, CUstream stream, CUhostFn fn, CUstreamCallback callback, void* data,
                     Launch launch) {
  const uint64_t start_ns = StartTime();
  HostFnSlot* slot = start_ns != 0 && (fn != nullptr || callback != nullptr) &&
                             !MayBeCapturing(stream, kDriverEntries[api].per_thread)
                         ? ClaimSlot()
                         : nullptr;
  if (slot == nullptr) {
    CUresult r = launch(nullptr);
    RecordSyncPoint(api, trace::SyncKind::kHostFuncQueued, stream, nullptr, start_ns, r);
    return r;
  }
  slot->fn = fn;
  slot->callback = callback;
  slot->data = data;
  slot->token = g_next_token.fetch_add(1, std::memory_order_relaxed);
  const void* token = reinterpret_cast<const void*>(static_cast<uintptr_t>(slot->token));
  RecordSyncPoint(api, trace::SyncKind::kHostFuncQueued, stream, token, start_ns, CUDA_SUCCESS);
  CUresult r = launch(slot);
  if (r != CUDA_SUCCESS) {
    slot->busy.store(0, std::memory_order_release);
    // The same token, failed: the analyzer forgets it.
    RecordSyncPoint(api, trace::SyncKind::kHostFuncQueued, stream, token, start_ns, r);
  }
  return r;
}

// --- the wrappers' bodies, by kind of call ----------------------------------

// Whether a call's completion point is recorded whatever it returned, or only
// when it found the work done (a query that found it busy says nothing).
enum class RecordWhen { kAlways, kDone };

// A call whose completion meaning is `kind`, recorded after it returned.
template <typename Fn, typename... Args>
CUresult SyncCall(Api api, trace::SyncKind kind, RecordWhen when, const void* stream,
                  const void* event, Args... args) {
  const Fn real = RealFn<Fn>(api);
  if (!Handles(real)) return Forward(real, args...);
  const HookScope scope;
  const uint64_t start_ns = StartTime();
  const CUresult r = real(args...);
  if (when == RecordWhen::kAlways || r == CUDA_SUCCESS) {
    RecordSyncPoint(api, kind, stream, event, start_ns, r);
  }
  return r;
}

// A capture or graph launch on `stream`, recorded after it returned.
template <typename Fn, typename... Args>
CUresult GraphCall(Api api, trace::GraphOp op, const void* stream, const void* graph,
                   Args... args) {
  const Fn real = RealFn<Fn>(api);
  if (!Handles(real)) return Forward(real, args...);
  const HookScope scope;
  const uint64_t start_ns = StartTime();
  const CUresult r = real(args...);
  RecordGraphOp(api, op, stream, graph, start_ns, r);
  return r;
}

// The end of a capture, recorded with the graph it returned.
CUresult EndCapture(Api api, CUstream st, CUgraph* graph) {
  using Fn = CUresult (*)(CUstream, CUgraph*);
  const Fn real = RealFn<Fn>(api);
  if (!Handles(real)) return Forward(real, st, graph);
  const HookScope scope;
  const uint64_t start_ns = StartTime();
  const CUresult r = real(st, graph);
  RecordGraphOp(api, trace::GraphOp::kCaptureEnd, st,
                r == CUDA_SUCCESS && graph != nullptr ? *graph : nullptr, start_ns, r);
  return r;
}

// A stream created: traced with its flags and priority (0 without one).
// The fence manager hears of it first, in every case: any new stream may
// reuse a destroyed one's handle.
template <typename Fn, typename... Args>
CUresult StreamCreate(Api api, CUstream* out, unsigned flags, int priority, Args... args) {
  optimize::FenceManager::NoteStreamCreated();
  const Fn real = RealFn<Fn>(api);
  if (!Handles(real)) return Forward(real, args...);
  const HookScope scope;
  const uint64_t start_ns = StartTime();
  const CUresult r = real(args...);
  RecordStreamCreated(api, out, flags, priority, start_ns, r);
  return r;
}

// cuLaunchHostFunc: the program's function queued through a trampoline.
CUresult LaunchHostFunc(Api api, CUstream st, CUhostFn fn, void* data) {
  optimize::Optimizer::Process().NoteHostWorkQueued();
  using Fn = CUresult (*)(CUstream, CUhostFn, void*);
  const Fn real = RealFn<Fn>(api);
  if (!Handles(real)) return Forward(real, st, fn, data);
  const HookScope scope;
  return QueueHostFn(api, st, fn, nullptr, data, [=](HostFnSlot* slot) {
    return slot != nullptr ? real(st, RunHostFn, slot) : real(st, fn, data);
  });
}

// cuStreamAddCallback: the program's callback queued through a trampoline.
CUresult AddCallback(Api api, CUstream st, CUstreamCallback cb, void* data, unsigned int flags) {
  optimize::Optimizer::Process().NoteHostWorkQueued();
  using Fn = CUresult (*)(CUstream, CUstreamCallback, void*, unsigned int);
  const Fn real = RealFn<Fn>(api);
  if (!Handles(real)) return Forward(real, st, cb, data, flags);
  const HookScope scope;
  return QueueHostFn(api, st, nullptr, cb, data, [=](HostFnSlot* slot) {
    return slot != nullptr ? real(st, RunStreamCallback, slot, flags) : real(st, cb, data, flags);
  });
}

}  // namespace

void RecordDriverWait(ApiId api, uint64_t start_ns, int result) {
  RecordSyncPoint(api, trace::SyncKind::kDeviceFree, nullptr, nullptr, start_ns,
                  static_cast<CUresult>(result));
}

}  // namespace hook
}  // namespace pinshim

using namespace pinshim;        // NOLINT: the wrappers below are extern "C"
using namespace pinshim::hook;  // NOLINT

// Each wrapper below is one call of a body above, with its entry point and
// its arguments as the driver takes them. The macros only spell out the
// signatures of an entry point's ABI variants (_ptsz, _ptds).
extern "C" {

// --- synchronization and events ------------------------------------------------

#define DEFINE_STREAM_SYNC(name)                                                              \
  CUresult name(CUstream st) {                                                                \
    return SyncCall<CUresult (*)(CUstream)>(kApi_##name, trace::SyncKind::kStreamSynchronize, \
                                            RecordWhen::kAlways, st, nullptr, st);            \
  }
#define DEFINE_STREAM_QUERY(name)                                                           \
  CUresult name(CUstream st) {                                                              \
    return SyncCall<CUresult (*)(CUstream)>(kApi_##name, trace::SyncKind::kStreamQueryDone, \
                                            RecordWhen::kDone, st, nullptr, st);            \
  }
#define DEFINE_EVENT_RECORD(name)                                                                \
  CUresult name(CUevent ev, CUstream st) {                                                       \
    return SyncCall<CUresult (*)(CUevent, CUstream)>(kApi_##name, trace::SyncKind::kEventRecord, \
                                                     RecordWhen::kAlways, st, ev, ev, st);       \
  }
#define DEFINE_EVENT_RECORD_FLAGS(name)                                                          \
  CUresult name(CUevent ev, CUstream st, unsigned int flags) {                                   \
    return SyncCall<CUresult (*)(CUevent, CUstream, unsigned int)>(                              \
        kApi_##name, trace::SyncKind::kEventRecord, RecordWhen::kAlways, st, ev, ev, st, flags); \
  }
#define DEFINE_STREAM_WAIT(name)                                                             \
  CUresult name(CUstream st, CUevent ev, unsigned int flags) {                               \
    return SyncCall<CUresult (*)(CUstream, CUevent, unsigned int)>(                          \
        kApi_##name, trace::SyncKind::kStreamWaitEvent, RecordWhen::kAlways, st, ev, st, ev, \
        flags);                                                                              \
  }
DEFINE_STREAM_SYNC(cuStreamSynchronize)
DEFINE_STREAM_SYNC(cuStreamSynchronize_ptsz)
DEFINE_STREAM_QUERY(cuStreamQuery)
DEFINE_STREAM_QUERY(cuStreamQuery_ptsz)
DEFINE_EVENT_RECORD(cuEventRecord)
DEFINE_EVENT_RECORD(cuEventRecord_ptsz)
DEFINE_EVENT_RECORD_FLAGS(cuEventRecordWithFlags)
DEFINE_EVENT_RECORD_FLAGS(cuEventRecordWithFlags_ptsz)
DEFINE_STREAM_WAIT(cuStreamWaitEvent)
DEFINE_STREAM_WAIT(cuStreamWaitEvent_ptsz)

CUresult cuCtxSynchronize() {
  return SyncCall<CUresult (*)()>(kApi_cuCtxSynchronize, trace::SyncKind::kContextSynchronize,
                                  RecordWhen::kAlways, nullptr, nullptr);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  return SyncCall<CUresult (*)(CUcontext)>(kApi_cuCtxSynchronize_v2,
                                           trace::SyncKind::kContextSynchronize,
                                           RecordWhen::kAlways, nullptr, nullptr, ctx);
}

CUresult cuEventSynchronize(CUevent ev) {
  return SyncCall<CUresult (*)(CUevent)>(kApi_cuEventSynchronize,
                                         trace::SyncKind::kEventSynchronize, RecordWhen::kAlways,
                                         nullptr, ev, ev);
}

CUresult cuEventQuery(CUevent ev) {
  return SyncCall<CUresult (*)(CUevent)>(kApi_cuEventQuery, trace::SyncKind::kEventQueryDone,
                                         RecordWhen::kDone, nullptr, ev, ev);
}

// --- stream creation: the flags say whether the legacy stream waits for it -----

CUresult cuStreamCreate(CUstream* out, unsigned int flags) {
  return StreamCreate<CUresult (*)(CUstream*, unsigned int)>(kApi_cuStreamCreate, out, flags, 0,
                                                             out, flags);
}

CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  return StreamCreate<CUresult (*)(CUstream*, unsigned int, int)>(
      kApi_cuStreamCreateWithPriority, out, flags, priority, out, flags, priority);
}

// Not traced (the analyzer has no green contexts), but its handle may be a
// destroyed stream's, as any new stream's.
CUresult cuGreenCtxStreamCreate(CUstream* out, CUgreenCtx green, unsigned int flags, int priority) {
  using Fn = CUresult (*)(CUstream*, CUgreenCtx, unsigned int, int);
  // First, in every case: any new stream may reuse a destroyed one's handle.
  optimize::FenceManager::NoteStreamCreated();
  const Fn real = RealFn<Fn>(kApi_cuGreenCtxStreamCreate);
  if (!Handles(real)) return Forward(real, out, green, flags, priority);
  const HookScope scope;
  return real(out, green, flags, priority);
}

// --- stream capture and graph launches ----------------------------------------

CUresult cuStreamBeginCapture(CUstream st) {
  return GraphCall<CUresult (*)(CUstream)>(kApi_cuStreamBeginCapture, trace::GraphOp::kCaptureBegin,
                                           st, nullptr, st);
}

CUresult cuStreamBeginCapture_ptsz(CUstream st) {
  return GraphCall<CUresult (*)(CUstream)>(kApi_cuStreamBeginCapture_ptsz,
                                           trace::GraphOp::kCaptureBegin, st, nullptr, st);
}

CUresult cuStreamBeginCapture_v2(CUstream st, CUstreamCaptureMode mode) {
  return GraphCall<CUresult (*)(CUstream, CUstreamCaptureMode)>(
      kApi_cuStreamBeginCapture_v2, trace::GraphOp::kCaptureBegin, st, nullptr, st, mode);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream st, CUstreamCaptureMode mode) {
  return GraphCall<CUresult (*)(CUstream, CUstreamCaptureMode)>(
      kApi_cuStreamBeginCapture_v2_ptsz, trace::GraphOp::kCaptureBegin, st, nullptr, st, mode);
}

#define DEFINE_CAPTURE_TO_GRAPH(name)                                                              \
  CUresult name(CUstream st, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges, \
                size_t n, CUstreamCaptureMode mode) {                                              \
    using Fn = CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t, \
                            CUstreamCaptureMode);                                                  \
    return GraphCall<Fn>(kApi_##name, trace::GraphOp::kCaptureBegin, st, nullptr, st, graph, deps, \
                         edges, n, mode);                                                          \
  }
DEFINE_CAPTURE_TO_GRAPH(cuStreamBeginCaptureToGraph)
DEFINE_CAPTURE_TO_GRAPH(cuStreamBeginCaptureToGraph_ptsz)

CUresult cuStreamEndCapture(CUstream st, CUgraph* graph) {
  return EndCapture(kApi_cuStreamEndCapture, st, graph);
}
CUresult cuStreamEndCapture_ptsz(CUstream st, CUgraph* graph) {
  return EndCapture(kApi_cuStreamEndCapture_ptsz, st, graph);
}

// A graph may hold host nodes, which may write pageable memory when they run
// (Optimizer::NoteHostWorkQueued).
#define DEFINE_GRAPH_LAUNCH(name)                                                               \
  CUresult name(CUgraphExec exec, CUstream st) {                                                \
    optimize::Optimizer::Process().NoteHostWorkQueued();                                        \
    return GraphCall<CUresult (*)(CUgraphExec, CUstream)>(kApi_##name, trace::GraphOp::kLaunch, \
                                                          st, exec, exec, st);                  \
  }
DEFINE_GRAPH_LAUNCH(cuGraphLaunch)
DEFINE_GRAPH_LAUNCH(cuGraphLaunch_ptsz)

// --- host functions -----------------------------------------------------------------

CUresult cuLaunchHostFunc(CUstream st, CUhostFn fn, void* data) {
  return LaunchHostFunc(kApi_cuLaunchHostFunc, st, fn, data);
}
CUresult cuLaunchHostFunc_ptsz(CUstream st, CUhostFn fn, void* data) {
  return LaunchHostFunc(kApi_cuLaunchHostFunc_ptsz, st, fn, data);
}

CUresult cuStreamAddCallback(CUstream st, CUstreamCallback cb, void* data, unsigned int flags) {
  return AddCallback(kApi_cuStreamAddCallback, st, cb, data, flags);
}
CUresult cuStreamAddCallback_ptsz(CUstream st, CUstreamCallback cb, void* data,
                                  unsigned int flags) {
  return AddCallback(kApi_cuStreamAddCallback_ptsz, st, cb, data, flags);
}

}  // extern "C"
