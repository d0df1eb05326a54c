// What the host can know, at each moment of a trace, about which queued
// copies have finished: the CUDA driver's synchronization rules, written
// down here once, each with its source. The rules that need to know whether
// a copy could still run (free-in-flight, copy-race) ask this model; none
// of them has rules of its own.
//
// Streams. Work on one stream runs in the order it was queued.
//  S1  The legacy default stream (handle 0 through an API without a
//      _ptsz/_ptds suffix, or CU_STREAM_LEGACY) of a context synchronizes
//      with every blocking stream of that context, both ways: before an
//      operation on it runs, all work queued earlier on blocking streams
//      has finished; work queued later on a blocking stream waits for it.
//      (CUDA Driver API, "Stream synchronization behavior"; measured on the
//      H200 for event records both ways, bench/RESULTS.md, "2026-12-01:
//      driver synchronization facts".)
//  S2  Streams created with CU_STREAM_NON_BLOCKING do neither (same page;
//      measured). The flags come from cuStreamCreate and
//      cuStreamCreateWithPriority (kStream events).
//  S3  A per-thread default stream (handle 0 through a _ptsz/_ptds API, or
//      CU_STREAM_PER_THREAD) belongs to its thread and context, does not
//      synchronize with other created streams, but "is not a non-blocking
//      stream and will synchronize with the legacy default stream if both
//      are used" (same page): it is a blocking stream under S1.
//  S4  cuStreamWaitEvent: work queued on the stream afterwards runs after
//      the work the event marks (cuStreamWaitEvent). Chains compose.
// Completion the host observes (each makes earlier work known done):
//  C1  cuStreamSynchronize, and a cuStreamQuery that returned success: all
//      work queued on that stream before the call (cuStreamSynchronize,
//      cuStreamQuery).
//  C2  cuCtxSynchronize: all work of the context (cuCtxSynchronize).
//  C3  cuEventRecord marks the work queued on its stream so far (with S1
//      for the legacy stream); cuEventSynchronize, or a cuEventQuery that
//      returned success, then says that work finished (cuEventRecord,
//      cuEventSynchronize, cuEventQuery).
//  C4  A synchronous copy between host and device returns after the work
//      queued before it on its stream ran ("API synchronization behavior":
//      a stream sync is performed before a pageable host-to-device copy;
//      device-to-host and pinned host-to-device copies are synchronous
//      with respect to the host).
//  C5  cuMemFreeHost, cuMemHostUnregister and cuMemFree return only after
//      the device's queued work finished (measured on the H200 with driver
//      580, blocking and non-blocking streams alike, bench/RESULTS.md,
//      "2026-12-01: driver synchronization facts"; undocumented, so this
//      rests on that measurement).
//  C6  A host function (cuLaunchHostFunc, cuStreamAddCallback) starts after
//      the work queued before it on its stream finished (cuLaunchHostFunc);
//      the trace records when it starts.
// Captures and graphs:
//  G1  Work queued on a stream while it captures does not run; it becomes
//      part of the graph (cuStreamBeginCapture). A stream that waits for an
//      event recorded in a capture joins that capture. Event records made
//      during a capture are not records.
//  G2  A graph launch is work queued on its stream. Which captured copies
//      a launched graph contains is not recorded (graphs can be edited and
//      built by hand), so every captured copy is taken to run again at
//      every launch, and nothing about it is ever proven still running.
//
// Three answers. A copy is kDone when the trace proves it finished; kMayRun
// when nothing in the trace could have completed it, even allowing for work
// the trace does not show (kernels, memsets, graph nodes), which can only
// add dependencies among the legacy stream and blocking streams (S1): that
// is the proof an error needs; kUnknown otherwise, with a reason.
// Also counted as possible completions, never as proof: asynchronous copies
// between device and pageable memory on the same stream (the driver may run
// them synchronously: "API synchronization behavior"; the measured driver
// does for device-to-host), waits for events the trace never saw recorded,
// unwrapped host functions, and every graph launch (it may hold host nodes).
// Approximations, each on the side of fewer errors: a context's work is
// that of a device; cuCtxSynchronize and the releases of C5 complete every
// stream of the device current at the call; a stream whose creation the
// trace does not show is neither blocking nor non-blocking for proof.
#ifndef PINSHIM_ANALYZER_REPORT_SYNC_MODEL_H_
#define PINSHIM_ANALYZER_REPORT_SYNC_MODEL_H_

#include <cstdint>
#include <deque>
#include <map>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

enum class CopyState { kDone, kMayRun, kUnknown };

// An asynchronous copy on page-locked host memory not yet known done.
struct InFlightCopy {
  uint64_t id = 0;       // unique within the trace
  uint64_t time_ns = 0;  // when it was queued (a launch, for graph copies)
  uint64_t ptr = 0;      // host side
  uint64_t bytes = 0;
  CopyDir dir = CopyDir::kHostToDevice;
  MemKind kind = MemKind::kPinnedByProgram;
  uint32_t stack = 0;  // where it was queued (captured, for graph copies)
  uint64_t stream_handle = 0;
  int stream = 0;    // the model's stream index
  uint64_t seq = 0;  // its place on that stream
  bool from_graph = false;
};

class SyncModel {
 public:
  // "trace" must outlive the model.
  void Begin(const TraceReader& trace);

  // Every event, in time order. `page_locked` says whether a copy's host
  // side is the program's page-locked memory (only such copies are tracked).
  void OnEvent(const Event& e, bool page_locked);

  // What is known at the time of the last event about `copy`; `why` gets a
  // reason for kMayRun and kUnknown.
  CopyState StateOf(const InFlightCopy& copy, std::string* why) const;

  // Calls f(copy) for each tracked copy not yet known done whose host side
  // overlaps [ptr, ptr + bytes).
  template <typename F>
  void ForOverlapping(uint64_t ptr, uint64_t bytes, F f) const {
    if (bytes == 0) bytes = 1;
    for (const StreamState& s : streams_) {
      for (const InFlightCopy& c : s.inflight) {
        if (c.ptr < ptr + bytes && ptr < c.ptr + (c.bytes ? c.bytes : 1)) f(c);
      }
    }
  }

  // "stream 0x..., blocking", "the legacy default stream of device 0", ...
  std::string DescribeStream(int index) const;

  // kSync events seen (0: a trace that cannot tell completion at all).
  uint64_t sync_events() const { return sync_events_; }

 private:
  // A vector clock: per stream index, the last operation covered. Copied
  // for every completion snapshot, so the first kInline entries live inline
  // (no allocation while a trace has that few streams).
  struct Clock {
    static constexpr size_t kInline = 8;
    uint32_t n = 0;
    uint64_t small[kInline];
    std::vector<uint64_t> big;  // all n entries once n > kInline
    size_t size() const { return n; }
    uint64_t At(size_t i) const { return i >= n ? 0 : n <= kInline ? small[i] : big[i]; }
    void Set(size_t i, uint64_t x);
    // Returns true when anything grew.
    bool Join(const Clock& o);

   private:
    uint64_t* Slot(size_t i);  // grows to i + 1 entries
  };
  enum class Kind { kLegacy, kPerThread, kUser };
  struct StreamState {
    Kind kind = Kind::kUser;
    int device = 0;
    uint64_t handle = 0;
    uint32_t tid = 0;
    bool flags_known = false;  // created in the trace
    bool blocking = true;      // when flags_known
    uint64_t seq = 0;          // operations queued so far
    Clock sure;                // what its latest operation surely waits for
    Clock poss;                // ... may wait for (non-group streams only)
    int capture = 0;           // the capture it belongs to, 0 none
    std::deque<InFlightCopy> inflight;
  };
  struct Mark {
    bool valid = false;  // a real record the trace saw
    Clock sure;
    Clock poss;
    int capture = 0;  // recorded inside this capture
  };
  // What may have completed a copy, formatted only when a finding needs it.
  enum class Why : uint8_t {
    kNone,
    kSyncCopy,
    kPageableCopy,
    kStreamSync,
    kStreamQuery,
    kContextSync,
    kDeviceFree,
    kFreeHost,
    kUnregister,
    kEventSync,
    kEventQuery,
    kUnrecordedEvent,
    kUnwrappedHostFunc,
    kHostFunc,
    kGraphLaunch,
  };
  struct Reason {
    Why what = Why::kNone;
    int stream = -1;
    uint64_t time_ns = 0;
    uint64_t handle = 0;  // the event
  };
  // A completion known from a call that has not returned yet at the time
  // of the events being replayed; it applies at the call's end. Kept in a
  // pool, with only small keys in the heap (the clocks are large).
  struct Pending {
    Clock sure;
    Clock poss;
    int poss_stream = -1;  // also PossOf this stream at the end (see Schedule)
    bool poss_everything = false;
    Reason reason;
  };
  struct PendingKey {
    uint64_t at;
    uint64_t order;
    uint32_t slot;
    bool operator<(const PendingKey& o) const {
      return at != o.at ? at > o.at : order > o.order;  // min-heap
    }
  };

  void Advance(uint64_t t);
  int Resolve(uint64_t handle, uint32_t api, uint32_t tid, int device);
  int LegacyOf(int device);
  int PerThreadOf(uint32_t tid, int device);
  int NewStream(Kind kind, int device, uint64_t handle, uint32_t tid);
  bool SureBlocking(const StreamState& s) const;
  bool InGroup(const StreamState& s) const;
  const Clock& PossOf(int i) const;
  void Op(int i);
  Clock Issued() const;
  void Complete(const Clock& sure, const Clock& poss, const Reason& reason);
  void Schedule(uint64_t at, const Clock& sure, const Clock& poss, bool everything,
                const Reason& reason, int poss_stream = -1);
  std::string Describe(const Reason& r) const;
  void Push(int stream, const InFlightCopy& c);
  void Prune();
  void OnCopy(const Event& e, bool page_locked);
  void OnSync(const Event& e);
  // OnSync by kind of call (a successful one; `end` is when it returned):
  // a stream's work done (synchronize, idle query), every stream's
  // (context synchronize, cuMemFree), an event recorded, an event's work
  // done (synchronize, query), a stream waiting for an event, a host
  // function queued, and one starting.
  void OnStreamDone(const Event& e, uint64_t end, int device);
  void OnAllDone(const Event& e, uint64_t end, int device);
  void OnEventRecord(const Event& e, int device);
  void OnEventDone(const Event& e, uint64_t end);
  void OnStreamWaitEvent(const Event& e, int device);
  void OnHostFuncQueued(const Event& e, int device);
  void OnHostFuncRun(const Event& e);
  void OnGraph(const Event& e);
  void OnStream(const Event& e);
  int DeviceOf(const Event& e) const { return e.device < 0 ? 0 : e.device; }

  const TraceReader* trace_ = nullptr;
  bool damaged_ = false;
  std::unordered_map<uint32_t, bool> per_thread_api_;  // api -> a _ptsz/_ptds variant
  std::vector<StreamState> streams_;
  std::unordered_map<uint64_t, int> user_;              // handle -> stream
  std::map<int, int> legacy_;                           // device -> stream
  std::map<std::pair<uint32_t, int>, int> per_thread_;  // (tid, device) -> stream
  std::map<int, Clock> blocking_union_;                 // device -> join of blocking streams
  Clock group_poss_;
  // The group's possible completion last scheduled for a pageable copy:
  // as long as the group clock has not grown, a later one adds nothing.
  uint64_t group_poss_version_ = 0;
  uint64_t scheduled_group_version_ = ~uint64_t{0};
  uint64_t scheduled_group_at_ = 0;
  Clock sure_done_;
  Clock poss_done_;
  std::vector<Reason> poss_reason_;
  size_t inflight_ = 0;  // tracked copies not yet known done, all streams
  int overflow_ = -1;    // the index streams beyond the first kMaxStreams share
  std::unordered_map<uint64_t, Mark> events_;
  std::unordered_map<uint64_t, Mark> host_fns_;
  std::map<int, std::vector<InFlightCopy>> captured_;  // capture -> copies
  int next_capture_ = 1;
  std::priority_queue<PendingKey> pending_;
  std::vector<Pending> pending_pool_;
  std::vector<uint32_t> free_pending_;
  uint64_t pending_order_ = 0;
  uint64_t next_copy_id_ = 1;
  uint64_t sync_events_ = 0;
  uint64_t now_ = 0;
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_SYNC_MODEL_H_
