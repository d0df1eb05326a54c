// Encodes events into the payload of one kEvents batch (see trace_format.h),
// keeping the delta state that makes repeated copies cost a few bytes.
// Header-only because it sits on the per-copy recording path.
// Allocation-free, lock-free and async-signal-safe; one thread at a time.
#ifndef PINSHIM_SHIM_TRACE_EVENT_ENCODER_H_
#define PINSHIM_SHIM_TRACE_EVENT_ENCODER_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "shim/core/events.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {

// Upper bound of one encoded event, type and length included: the largest,
// kOptimizeCounters, is a time delta and 20 varints (1 + 2 + 21 * 10).
constexpr size_t kMaxEventBytes = 256;
static_assert(sizeof(OptimizeCountersEvent) == kOptimizeCounterFields * sizeof(uint64_t),
              "every counter is recorded");

// Upper bound of the batch header (tid, first time, last time, count).
constexpr size_t kMaxBatchHeaderBytes = 4 * kMaxVarint;

// A periodic sample, as the sampler thread takes it.
struct SampleEvent {
  uint64_t time_ns;
  uint64_t pinned_program;
  uint64_t registered_program;
  uint64_t pinned_pinshim;
  uint64_t rss_bytes;
  uint64_t swap_ins;
  uint64_t swap_outs;
  uint64_t budget_bytes;
};

// A completion or ordering point on a stream or event (see SyncKind).
struct SyncEvent {
  ApiId api;
  SyncKind kind;
  const void* stream;  // null: the default stream (or none, for events)
  const void* event;   // CUevent, null when the call has none
  uint64_t start_ns;
  uint64_t end_ns;
  int result;
  int device = -1;     // current at the call; -1 unknown
};

// A stream the program created (kStream).
struct StreamEvent {
  ApiId api;
  const void* stream;  // the handle made; null when the call failed
  uint32_t flags;      // CU_STREAM_*
  int priority;
  uint64_t start_ns;
  uint64_t end_ns;
  int result;
  int device;          // current at the call; -1 unknown
};

// A stream capture or graph launch (kGraph).
struct GraphEvent {
  ApiId api;
  GraphOp op;
  const void* stream;
  const void* graph;   // capture end: the CUgraph; launch: the CUgraphExec
  uint64_t start_ns;
  uint64_t end_ns;
  int result;
  int device;
};

// One decision of enforce mode's budget (see kBudgetDecision): the BUDGET
// lines of budget_decision.inc. Plain integers rather than shim/budget's
// types: the trace does not depend on the budget, whose callback converts
// its DecisionRecord into this.
struct BudgetDecisionEvent {
#define BUDGET(name, record_type, event_type, layout) event_type name;
#define RECORDER(name, layout)
#include "shim/core/budget_decision.inc"
#undef BUDGET
#undef RECORDER
  uint64_t time_ns;  // CLOCK_MONOTONIC; 0: the recorder takes the time
};

class BatchEncoder {
 public:
  // "data[0, capacity)" must remain live while this encoder is in use.
  void Init(uint8_t* data, size_t capacity) {
    data_ = data;
    capacity_ = capacity;
    Reset();
  }

  // Forgets the events (after a flush); the next event starts a new batch.
  void Reset() {
    len_ = 0;
    count_ = 0;
    t_first_ = t_last_ = prev_time_ = 0;
    prev_stream_ = prev_host_ptr_ = prev_alloc_id_ = prev_sync_stream_ = 0;
    prev_device_ = -1;
  }

  size_t size() const { return len_; }
  uint32_t count() const { return count_; }
  uint64_t first_time() const { return t_first_; }
  const uint8_t* data() const { return data_; }
  // True when one more event of any type is sure to fit.
  bool HasRoom() const { return capacity_ - len_ >= kMaxEventBytes; }

  // Each Append* requires HasRoom().
  void AppendCopy(const CopyEvent& e, uint32_t stack, int device) {
    uint8_t* p = Begin(EventType::kCopy, e.start_ns);
    uint32_t bits = static_cast<uint32_t>(e.dir) & kCopyDirMask;
    if (e.async) bits |= kCopyAsync;
    if (e.host_flags != 0) bits |= kCopyHasFlags;
    if (e.result != 0) bits |= kCopyHasResult;
    if (device != prev_device_) bits |= kCopyHasDevice;
    if (e.staged_workers != 0) bits |= kCopyStaged;
    p = PutVarint(p, e.end_ns >= e.start_ns ? e.end_ns - e.start_ns : 0);
    p = PutVarint(p, e.api);
    p = PutVarint(p, bits);
    p = PutVarint(p, static_cast<uint32_t>(e.src_kind) |
                         (static_cast<uint32_t>(e.dst_kind) << 3));
    p = PutVarint(p, e.bytes);
    p = PutVarint(p, stack);
    p = PutDelta(p, reinterpret_cast<uintptr_t>(e.stream), &prev_stream_);
    p = PutDelta(p, reinterpret_cast<uintptr_t>(e.host_ptr), &prev_host_ptr_);
    p = PutDelta(p, e.host_alloc_id, &prev_alloc_id_);
    if (bits & kCopyHasFlags) p = PutVarint(p, e.host_flags);
    if (bits & kCopyHasResult) p = PutSigned(p, e.result);
    if (bits & kCopyHasDevice) {
      p = PutSigned(p, device);
      prev_device_ = device;
    }
    if (bits & kCopyStaged) {
      p = PutVarint(p, e.staged_workers);
      p = PutVarint(p, e.staged_chunk_bytes);
    }
    End(p);
  }

  void AppendPin(const PinEvent& e, uint32_t stack, int device) {
    uint8_t* p = Begin(EventType::kPin, e.start_ns);
    p = PutVarint(p, e.end_ns >= e.start_ns ? e.end_ns - e.start_ns : 0);
    p = PutVarint(p, e.api);
    p = PutVarint(p, static_cast<uint32_t>(e.op));
    p = PutVarint(p, reinterpret_cast<uintptr_t>(e.ptr));
    p = PutVarint(p, e.bytes);
    p = PutVarint(p, e.flags);
    p = PutVarint(p, stack);
    p = PutSigned(p, e.result);
    p = PutSigned(p, device);
    End(p);
  }

  void AppendHostAlloc(const HostAllocEvent& e, uint64_t time_ns, uint32_t stack) {
    uint8_t* p = Begin(EventType::kHostAlloc, time_ns);
    p = PutVarint(p, e.alloc_id);
    p = PutVarint(p, reinterpret_cast<uintptr_t>(e.ptr));
    p = PutVarint(p, e.bytes);
    p = PutVarint(p, (e.is_free ? 1u : 0u) | (static_cast<uint32_t>(e.source) << 1));
    p = PutVarint(p, stack);
    End(p);
  }

  void AppendMisuse(MisuseKind kind, const void* ptr, uint64_t bytes,
                    uint64_t time_ns, uint32_t stack, uint32_t detail) {
    uint8_t* p = Begin(EventType::kMisuse, time_ns);
    p = PutVarint(p, static_cast<uint32_t>(kind));
    p = PutVarint(p, reinterpret_cast<uintptr_t>(ptr));
    p = PutVarint(p, bytes);
    p = PutVarint(p, stack);
    p = PutVarint(p, detail);
    End(p);
  }

  void AppendSample(const SampleEvent& s) {
    uint8_t* p = Begin(EventType::kSample, s.time_ns);
    p = PutVarint(p, s.pinned_program);
    p = PutVarint(p, s.registered_program);
    p = PutVarint(p, s.pinned_pinshim);
    p = PutVarint(p, s.rss_bytes);
    p = PutVarint(p, s.swap_ins);
    p = PutVarint(p, s.swap_outs);
    p = PutVarint(p, s.budget_bytes);
    End(p);
  }

  void AppendSync(const SyncEvent& e) {
    uint8_t* p = Begin(EventType::kSync, e.start_ns);
    p = PutVarint(p, e.end_ns >= e.start_ns ? e.end_ns - e.start_ns : 0);
    p = PutVarint(p, e.api);
    p = PutVarint(p, static_cast<uint32_t>(e.kind));
    p = PutDelta(p, reinterpret_cast<uintptr_t>(e.stream), &prev_sync_stream_);
    p = PutVarint(p, reinterpret_cast<uintptr_t>(e.event));
    p = PutSigned(p, e.result);
    p = PutSigned(p, e.device);
    End(p);
  }

  void AppendStream(const StreamEvent& e) {
    uint8_t* p = Begin(EventType::kStream, e.start_ns);
    p = PutVarint(p, e.end_ns >= e.start_ns ? e.end_ns - e.start_ns : 0);
    p = PutVarint(p, e.api);
    p = PutVarint(p, reinterpret_cast<uintptr_t>(e.stream));
    p = PutVarint(p, e.flags);
    p = PutSigned(p, e.priority);
    p = PutSigned(p, e.result);
    p = PutSigned(p, e.device);
    End(p);
  }

  void AppendGraph(const GraphEvent& e) {
    uint8_t* p = Begin(EventType::kGraph, e.start_ns);
    p = PutVarint(p, e.end_ns >= e.start_ns ? e.end_ns - e.start_ns : 0);
    p = PutVarint(p, e.api);
    p = PutVarint(p, static_cast<uint32_t>(e.op));
    p = PutVarint(p, reinterpret_cast<uintptr_t>(e.stream));
    p = PutVarint(p, reinterpret_cast<uintptr_t>(e.graph));
    p = PutSigned(p, e.result);
    p = PutSigned(p, e.device);
    End(p);
  }

  void AppendBudgetDecision(const BudgetDecisionEvent& e, uint64_t time_ns, uint32_t stack) {
    uint8_t* p = Begin(EventType::kBudgetDecision, time_ns);
    p = PutVarint(p, e.owner);
    p = PutVarint(p, e.decision);
    p = PutVarint(p, e.limiter);
    p = PutVarint(p, e.evictor_called ? uint32_t{kBudgetEvictorCalled} : 0u);
    p = PutVarint(p, e.bytes);
    p = PutVarint(p, e.evicted_bytes);
    p = PutVarint(p, e.process_pinned);
    p = PutVarint(p, e.process_budget);
    p = PutVarint(p, e.node_pinned);
    p = PutVarint(p, e.node_budget);
    p = PutVarint(p, stack);
    End(p);
  }

  void AppendOwnPin(const OwnPinEvent& e, uint64_t time_ns, uint32_t stack = 0) {
    uint8_t* p = Begin(EventType::kOwnPin, time_ns);
    p = PutVarint(p, static_cast<uint32_t>(e.action));
    p = PutVarint(p, static_cast<uint32_t>(e.part));
    p = PutVarint(p, static_cast<uint32_t>(e.reason));
    p = PutVarint(p, reinterpret_cast<uintptr_t>(e.ptr));
    p = PutVarint(p, e.bytes);
    p = PutVarint(p, e.alloc_id);
    p = PutSigned(p, e.result);
    p = PutVarint(p, stack);
    p = PutVarint(p, e.detail);
    End(p);
  }

  void AppendOptimizeCounters(const OptimizeCountersEvent& c, uint64_t time_ns) {
    uint8_t* p = Begin(EventType::kOptimizeCounters, time_ns);
    const uint64_t fields[] = {c.pinned_bytes_now,
                               c.pinned_bytes_peak,
                               c.pin_cap_bytes,
                               c.pin_refusals,
                               c.evicted_bytes,
                               c.pool_hits,
                               c.pool_misses,
                               c.pool_dedicated,
                               c.cache_registrations,
                               c.cache_hits,
                               c.cache_evictions,
                               c.cache_releases,
                               c.cache_declined_untracked,
                               c.cache_declined_source,
                               c.cache_declined_sub_allocation,
                               c.cache_declined_too_large,
                               c.arena_allocs,
                               c.arena_copies,
                               c.saved_copy_ns,
                               c.saved_alloc_ns};
    static_assert(sizeof(fields) / sizeof(fields[0]) == kOptimizeCounterFields,
                  "the counters record's layout");
    static_assert(3 + (1 + kOptimizeCounterFields) * kMaxVarint <= kMaxEventBytes,
                  "a counters record must fit kMaxEventBytes");
    for (uint64_t v : fields) p = PutVarint(p, v);
    End(p);
  }

  void AppendDropped(uint64_t count, uint64_t time_ns) {
    uint8_t* p = Begin(EventType::kDropped, time_ns);
    p = PutVarint(p, count);
    End(p);
  }

  // Writes the batch header into `out` (kMaxBatchHeaderBytes of room) and
  // returns its length.
  size_t EncodeHeader(uint32_t tid, uint8_t* out) const {
    uint8_t* p = PutVarint(out, tid);
    p = PutVarint(p, t_first_);
    p = PutVarint(p, t_last_);
    p = PutVarint(p, count_);
    return static_cast<size_t>(p - out);
  }

 private:
  // Payloads are written two bytes in, which leaves room for the type and a
  // one-byte length; the rare longer payload is moved up by End().
  uint8_t* Begin(EventType type, uint64_t time_ns) {
    event_start_ = data_ + len_;
    event_start_[0] = static_cast<uint8_t>(type);
    if (count_ == 0) {
      t_first_ = t_last_ = prev_time_ = time_ns;
    } else {
      if (time_ns < t_first_) t_first_ = time_ns;
      if (time_ns > t_last_) t_last_ = time_ns;
    }
    uint8_t* p = PutSigned(event_start_ + 2, static_cast<int64_t>(time_ns - prev_time_));
    prev_time_ = time_ns;
    return p;
  }

  void End(uint8_t* p) {
    size_t payload = static_cast<size_t>(p - (event_start_ + 2));
    if (payload < 0x80) {
      event_start_[1] = static_cast<uint8_t>(payload);
      len_ += 2 + payload;
    } else {
      uint8_t len_bytes[kMaxVarint];
      size_t n = static_cast<size_t>(PutVarint(len_bytes, payload) - len_bytes);
      memmove(event_start_ + 1 + n, event_start_ + 2, payload);
      memcpy(event_start_ + 1, len_bytes, n);
      len_ += 1 + n + payload;
    }
    ++count_;
  }

  static uint8_t* PutDelta(uint8_t* p, uint64_t value, uint64_t* prev) {
    p = PutSigned(p, static_cast<int64_t>(value - *prev));
    *prev = value;
    return p;
  }

  uint8_t* data_ = nullptr;
  uint8_t* event_start_ = nullptr;
  size_t capacity_ = 0;
  size_t len_ = 0;
  uint32_t count_ = 0;
  uint64_t t_first_ = 0;
  uint64_t t_last_ = 0;
  uint64_t prev_time_ = 0;
  uint64_t prev_stream_ = 0;
  uint64_t prev_host_ptr_ = 0;
  uint64_t prev_alloc_id_ = 0;
  uint64_t prev_sync_stream_ = 0;
  int prev_device_ = -1;
};

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_EVENT_ENCODER_H_
