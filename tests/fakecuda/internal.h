// Shared internals of the simulated CUDA driver (libcuda.so.1 for CI).
//
// One State holds everything, behind one mutex. The State is never destroyed,
// so stream workers still running when the process exits never touch a dead
// object; a forked child abandons its parent's State and starts a fresh one.
// Exported entry points never call each other: each does its own bookkeeping
// and then uses the functions declared here.
#ifndef PINSHIM_TESTS_FAKECUDA_INTERNAL_H_
#define PINSHIM_TESTS_FAKECUDA_INTERNAL_H_

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace fakecuda {

// ---- Call accounting (core.cc) ---------------------------------------------

// One per exported function; functions sharing a base name share the count.
struct ApiSite {
  explicit ApiSite(const char* base_name);
  const char* name;
  std::atomic<uint64_t> calls{0};
  ApiSite* next = nullptr;
};

// Counts the call; returns the error armed by fakecuda_fail_next, else success.
// With FAKECUDA_DEBUG set, names the call on stderr.
CUresult Enter(ApiSite* site);

// With FAKECUDA_DEBUG set (to anything but "0" or ""), prints "fakecuda: "
// and the formatted line on stderr; prints nothing otherwise.
void DebugLog(const char* format, ...) __attribute__((format(printf, 1, 2)));

// What an entry point that is not simulated does when called: says so on
// stderr, once per name and process ("fakecuda: cuXxx is not simulated",
// then ": " and `detail` if given), and returns CUDA_ERROR_NOT_SUPPORTED.
CUresult NotSimulated(const char* base_name, const char* detail = nullptr);

// First statement of every exported function: counts it and honours
// fakecuda_fail_next for `base_name` (the name cuGetProcAddress takes).
#define FAKECUDA_ENTER(base_name)                                    \
  static ::fakecuda::ApiSite fakecuda_site(base_name);               \
  if (CUresult fakecuda_armed = ::fakecuda::Enter(&fakecuda_site)) { \
    return fakecuda_armed;                                           \
  }

// ---- Objects ------------------------------------------------------------------

struct Stream;
struct Event;

// A monotonic completion counter: stream op sequence numbers, event records.
struct Progress {
  uint64_t done = 0;  // Guarded by State::mu.
};

// "Wait until progress->done >= target."
struct Dep {
  std::shared_ptr<Progress> progress;
  uint64_t target;
};

struct Context {
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
  int primary_refs = 0;  // Guarded by State::mu.
  // Contexts are never freed, so a stale handle reads false here instead of
  // touching freed memory. A destroyed context's object is reused for a later
  // one (driver_behavior.h), and a primary context is the same object across
  // resets, so a handle may come back to life.
  std::atomic<bool> alive{true};
  // The sticky error of a context whose work faulted (a graph's copy through
  // a registration gone since its capture): every later call made in it
  // returns this, until it is destroyed or reset. CUDA_SUCCESS otherwise.
  std::atomic<CUresult> fault{CUDA_SUCCESS};
  // The NULL stream: a new one each time the context is made active.
  // Guarded by State::mu.
  std::shared_ptr<Stream> legacy;
};

// One node of a graph made by stream capture: work as a stream op would do
// it, or an event record. Captured work is linearized in the order it was
// queued, across the streams that joined the capture: a valid (if less
// concurrent) execution of the graph.
struct GraphNode {
  std::function<void()> work;
  bool delayed = false;          // a copy (fakecuda_set_copy_delay_us applies)
  std::shared_ptr<Event> marks;  // an event record node
};

struct Graph {
  std::vector<GraphNode> nodes;  // Guarded by State::mu while capturing.
  bool invalidated = false;      // a capture that met an unsupported call
  bool capturing = true;         // until its capture ends
  // Who began the capture, and in which mode (what it prohibits: graphs.cc,
  // ProhibitedByCapture).
  std::thread::id owner;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
};

// One unit of stream work, run by the stream's worker in order.
struct Op {
  uint64_t seq = 0;
  std::vector<Dep> deps;
  std::function<void()> work;    // Empty for event markers and waits.
  bool delayed = false;          // Subject to fakecuda_set_copy_delay_us.
  std::shared_ptr<Event> marks;  // Event completed by this op, if any.
  uint64_t mark_generation = 0;
};

struct Stream {
  enum class Kind { kUser, kLegacy, kPerThread };
  Context* ctx = nullptr;
  unsigned flags = 0;
  Kind kind = Kind::kUser;
  // All guarded by State::mu.
  std::deque<Op> queue;
  uint64_t enqueued = 0;
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
  bool retired = false;  // Destroyed by the program; drains, then goes away.
  // While capturing: the graph work queued here goes to, and whether this
  // stream began the capture (only it may end it).
  std::shared_ptr<Graph> capture;
  bool capture_origin = false;
  bool worker_running = false;
  bool held = false;  // fakecuda_hold_stream: start no further op.
};

struct Event {
  unsigned flags = 0;
  // All guarded by State::mu.
  uint64_t recorded = 0;               // Generation of the latest cuEventRecord.
  std::shared_ptr<Graph> captured_in;  // recorded last inside this capture
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
  std::chrono::steady_clock::time_point completed_at;
};

enum class MemKind { kPageable, kPinned, kDevice, kManaged };

struct DeviceAlloc {
  CUdeviceptr base = 0;
  size_t size = 0;       // As requested.
  size_t mapped = 0;     // Page-rounded part that is backed.
  size_t arena_len = 0;  // Plus the guard page.
  char* view = nullptr;  // Where the bytes live for this library's copies.
  Context* ctx = nullptr;
  bool managed = false;
  uint64_t id = 0;
};

class HeldPages;  // pinning.h

// A page-locked host range: a cuMemHostAlloc allocation or a registration.
struct HostRange {
  uintptr_t base = 0;
  size_t size = 0;
  size_t mapped = 0;  // Allocations only: the mmap length.
  unsigned flags = 0;
  Context* ctx = nullptr;
  uint64_t id = 0;
  // The pages pinned when the range was allocated or registered; copies
  // through the range move their bytes (null: not pinnable, copies use the
  // program's addresses).
  std::shared_ptr<HeldPages> held;
  // VMM mappings only: this library's own mapping of the same pages, through
  // which copies move bytes, as the CPU may have no access to the program's.
  char* view = nullptr;
  // Host-pool reservations only: the pool whose allocations it holds.
  CUmemoryPool pool = nullptr;
};

// ---- Process state (core.cc) ----------------------------------------------------

struct State {
  std::mutex mu;
  // Signalled on every change a waiter may care about: work queued, op
  // finished, stream retired. One condition keeps the fork handling simple.
  std::condition_variable cv;

  uint64_t epoch = 0;  // Bumped in each forked child; set before any thread reads it.
  std::atomic<bool> initialized{false};
  int device_count = 0;
  size_t page = 4096;

  // Context lifecycles (create, destroy, primary retain, release and reset)
  // run one at a time: a teardown waits for the context's work, and nothing
  // may bring the context back meanwhile. Taken before mu, never while
  // holding it.
  std::mutex lifecycle_mu;
  std::vector<Context*> primary;          // Per device, created on first retain.
  std::unordered_set<Context*> contexts;  // Live (active) contexts.
  std::vector<Context*> spare_contexts;   // Destroyed created contexts, reused last-in first.

  // Device addresses: [dev_base, dev_base + arena_size) stays inaccessible to
  // the host; a device allocation's bytes live at the same offset from
  // shadow_base. Managed memory is mapped at its device address itself.
  uintptr_t dev_base = 0;
  uintptr_t shadow_base = 0;
  size_t arena_size = 0;
  bool arena_ready = false;
  std::map<size_t, size_t> arena_free;  // Offset -> length.
  std::map<uintptr_t, DeviceAlloc> device_allocs;
  std::vector<size_t> device_used;  // Bytes, per device.

  std::map<uintptr_t, HostRange> host_allocs;
  // Page-locked host memory of the virtual memory management API (vmm.cc):
  // host-located allocations where they are mapped, and the memory host
  // pools reserved. Copies reach it through the program's addresses.
  std::map<uintptr_t, HostRange> vmm_host;
  // Handles, reservations, mappings and pools (vmm.cc); made at first use.
  std::shared_ptr<struct VmmState> vmm;
  std::map<uintptr_t, HostRange> registrations;
  uint64_t next_buffer_id = 1;

  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams;  // Incl. retired, until drained.
  std::unordered_map<Event*, std::shared_ptr<Event>> events;
  // Graphs made by capture, and their executable instances (a snapshot of
  // the nodes at instantiation).
  std::unordered_map<Graph*, std::shared_ptr<Graph>> graphs;
  std::unordered_map<Graph*, std::shared_ptr<Graph>> execs;
  // Captures begun and not yet ended, on any stream.
  std::vector<std::shared_ptr<Graph>> open_captures;
};

// The live state. Only a fork child handler ever replaces it.
State& S();

struct ThreadState {
  uint64_t epoch = 0;
  std::vector<Context*> stack;  // Current context on top.
  std::vector<std::pair<Context*, std::shared_ptr<Stream>>> default_streams;
};

// The calling thread's state, reset if it was inherited across fork. At thread
// exit its per-thread default streams are retired (their work still finishes).
ThreadState& T();

// CUDA_ERROR_NOT_INITIALIZED before cuInit, else success.
CUresult RequireInit();

// The calling thread's current context; NOT_INITIALIZED or INVALID_CONTEXT.
CUresult CurrentContext(Context** ctx);

// Microseconds each delayed op waits before running (fakecuda_set_copy_delay_us).
unsigned CopyDelayUs();

// ---- Memory (memory.cc) ---------------------------------------------------------

// What a copy operand resolves to: where its bytes are, and what kind.
// Page-locked host memory with held pages is reached through them (DMA),
// not through `view`.
struct Span {
  char* view = nullptr;
  MemKind kind = MemKind::kPageable;
  std::shared_ptr<HeldPages> held;
};

// Sets up the device address arena; called by cuInit with State::mu held.
CUresult ReserveArena(State& s);

// Frees the device, managed and page-locked host allocations made in `ctx`
// (cuCtxDestroy, a primary context's reset or last release).
void ReleaseContextMemory(Context* ctx);

// Whether `held`, the pages a copy resolved host address p through, are
// still those of the allocation or registration holding p (a graph's copy
// can outlive them). State::mu must be held.
bool StillHeldLocked(const HeldPages* held, uintptr_t p);

// [p, p + len) named as host memory by the API. Device memory is refused
// (the host cannot touch it); managed memory is accepted.
CUresult ResolveHostRange(const void* p, size_t len, Span* out);

// [p, p + len) named as device memory: a device or managed allocation, or
// page-locked host memory (mapped under unified addressing).
CUresult ResolveDeviceRange(CUdeviceptr p, size_t len, Span* out);

// [p, p + len) as a unified address: classified, as CU_MEMORYTYPE_UNIFIED does.
CUresult ResolveUnifiedRange(CUdeviceptr p, size_t len, Span* out);

// ---- The VMM API and memory pools (vmm.cc) ----------------------------------------

// The live allocation of host pool `pool` that holds p: its start and length.
// False if p lies in none (free memory of the pool's reservation). State::mu
// must be held.
bool PoolBlockLocked(State& s, CUmemoryPool pool, uintptr_t p, uintptr_t* start, size_t* len);

// cuMemFree of an allocation from a host pool: given back at once. False if
// p starts no live allocation of any pool. Takes State::mu.
bool FreePoolBlock(CUdeviceptr p);

// Whether [a, a + len), which starts in VMM mapping r and runs past its
// end, lies in mappings that follow r side by side, views included
// (driver_behavior.h). State::mu must be held.
bool VmmRunCoversLocked(State& s, const HostRange& r, uintptr_t a, size_t len);

// ---- DMA (dma.cc) ------------------------------------------------------------------

// Moves n bytes as the device's DMA does: page-locked host memory is reached
// whatever its CPU page protection (see dma.cc). The ranges may overlap.
void DmaMove(void* dst, const void* src, size_t n);

// ---- Streams (streams.cc) -------------------------------------------------------

// Creates and registers a stream of `ctx`. State::mu must be held.
std::shared_ptr<Stream> NewStreamLocked(Context* ctx, unsigned flags, Stream::Kind kind);

// The stream an API call names: NULL means the legacy stream, or the calling
// thread's default stream for the per-thread (_ptds/_ptsz) variants.
CUresult ResolveStream(CUstream handle, bool per_thread_api, std::shared_ptr<Stream>* out);
// Whether the stream the handle names is capturing (false for a handle it
// cannot resolve: the call that follows reports that).
bool StreamCapturing(CUstream handle, bool per_thread_api);

// Queues `work` on `stream` in stream order; with `wait`, returns once it ran.
// On a capturing stream the work becomes a graph node instead, and a call
// that must wait is refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), except
// an asynchronous copy of pageable memory (`async_pageable`), which is
// captured like any: its launch reads or writes the memory then (measured on
// the H200, bench/RESULTS.md). Such a copy on a stream that does not capture
// invalidates the captures that prohibit the calling thread's unsafe calls.
CUresult Submit(const std::shared_ptr<Stream>& stream, std::function<void()> work, bool wait,
                bool async_pageable = false);

// ---- Capture (graphs.cc) ---------------------------------------------------------

// Whether an open capture prohibits the calling thread's potentially unsafe
// calls, by the rules of cuThreadExchangeStreamCaptureMode: in relaxed mode
// none does; otherwise the thread's own capture unless begun relaxed, and in
// global mode also another thread's global-mode capture. Each such capture
// is invalidated. State::mu must be held.
bool ProhibitedByCaptureLocked();

// Ends `graph`'s capture: it takes no more work and prohibits nothing from
// now on. State::mu must be held.
void CloseCaptureLocked(State& s, const std::shared_ptr<Graph>& graph);

// For the calls the H200 refuses on a prohibited thread (cuMemHostRegister,
// cuMemHostUnregister, cuMemHostAlloc, cuMemAllocHost, cuMemFreeHost,
// cuEventSynchronize; bench/RESULTS.md): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// there, the captures invalidated; success elsewhere.
CUresult RefuseDuringCapture();

// Queues a graph's nodes on `stream`, in order (cuGraphLaunch).
CUresult EnqueueGraph(const std::shared_ptr<Stream>& stream, const Graph& graph);

// Waits for all work queued so far on the streams of `ctx`.
void SynchronizeContext(Context* ctx);

// Waits for all work queued so far on every stream (frees do this).
void WaitAllStreamsIdle();

// Retires `stream`: it takes no more work, drains, then goes away.
void RetireStream(const std::shared_ptr<Stream>& stream);

// Retires every stream of `ctx` (when it is destroyed).
void RetireContextStreams(Context* ctx);

// ---- Copies (copies.cc) -----------------------------------------------------------

// libc's own memmove, looked up in libc itself: the real driver's DMA is
// invisible to a library interposing the C library's copy functions, and so
// are the simulated driver's copies.
using MoveFn = void* (*)(void*, const void*, size_t);
MoveFn LibcMemmove();

// ---- Entry point table (proc_address.cc) ----------------------------------------

// What cuGetProcAddress finds for `symbol` at `version` with `flags`.
CUresult LookupProc(const char* symbol, int version, cuuint64_t flags, void** pfn,
                    CUdriverProcAddressQueryResult* status);

}  // namespace fakecuda

#endif  // PINSHIM_TESTS_FAKECUDA_INTERNAL_H_
