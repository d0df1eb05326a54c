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
// kOptimizeCounters, is a time delta and 20 varints (1 + 2 + 21 * 10);
// FitsOneEvent checks every record of a field list.
constexpr size_t kMaxEventBytes = 256;

// Whether a record of R's fields, with its type, length and time delta,
// always fits kMaxEventBytes.
template <typename R>
constexpr bool FitsOneEvent() {
  return 3 + (1 + FieldCount<R>()) * kMaxVarint <= kMaxEventBytes;
}

// Upper bound of the batch header (tid, first time, last time, count).
constexpr size_t kMaxBatchHeaderBytes = 4 * kMaxVarint;

// A periodic sample, as the sampler thread takes it: its time and the
// fields of kSample (PINSHIM_SAMPLE_FIELDS).
struct SampleEvent {
  uint64_t time_ns;
  PINSHIM_SAMPLE_FIELDS(PINSHIM_FIELD_MEMBER)
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
  int device = -1;  // current at the call; -1 unknown
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
  int device;  // current at the call; -1 unknown
};

// A stream capture or graph launch (kGraph).
struct GraphEvent {
  ApiId api;
  GraphOp op;
  const void* stream;
  const void* graph;  // capture end: the CUgraph; launch: the CUgraphExec
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
    CopyFields f;
    f.bits = static_cast<uint32_t>(e.dir) & kCopyDirMask;
    if (e.async) f.bits |= kCopyAsync;
    if (e.host_flags != 0) f.bits |= kCopyHasFlags;
    if (e.result != 0) f.bits |= kCopyHasResult;
    if (device != prev_device_) f.bits |= kCopyHasDevice;
    if (e.staged_workers != 0) f.bits |= kCopyStaged;
    f.duration_ns = Duration(e.start_ns, e.end_ns);
    f.api = e.api;
    f.kinds = static_cast<uint32_t>(e.src_kind) | (static_cast<uint32_t>(e.dst_kind) << 3);
    f.bytes = e.bytes;
    f.stack = stack;
    f.stream = Delta(reinterpret_cast<uintptr_t>(e.stream), &prev_stream_);
    f.host_ptr = Delta(reinterpret_cast<uintptr_t>(e.host_ptr), &prev_host_ptr_);
    f.alloc_id = Delta(e.host_alloc_id, &prev_alloc_id_);
    f.host_flags = e.host_flags;
    f.result = e.result;
    f.device = device;
    prev_device_ = device;
    f.staged_workers = e.staged_workers;
    f.staged_chunk_bytes = e.staged_chunk_bytes;
    AppendFields(EventType::kCopy, e.start_ns, f);
  }

  void AppendPin(const PinEvent& e, uint32_t stack, int device) {
    PinFields f;
    f.duration_ns = Duration(e.start_ns, e.end_ns);
    f.api = e.api;
    f.op = static_cast<uint32_t>(e.op);
    f.ptr = reinterpret_cast<uintptr_t>(e.ptr);
    f.bytes = e.bytes;
    f.flags = e.flags;
    f.stack = stack;
    f.result = e.result;
    f.device = device;
    AppendFields(EventType::kPin, e.start_ns, f);
  }

  void AppendHostAlloc(const HostAllocEvent& e, uint64_t time_ns, uint32_t stack) {
    HostAllocFields f;
    f.alloc_id = e.alloc_id;
    f.ptr = reinterpret_cast<uintptr_t>(e.ptr);
    f.bytes = e.bytes;
    f.bits = (e.is_free ? 1u : 0u) | (static_cast<uint32_t>(e.source) << 1);
    f.stack = stack;
    AppendFields(EventType::kHostAlloc, time_ns, f);
  }

  void AppendMisuse(MisuseKind kind, const void* ptr, uint64_t bytes, uint64_t time_ns,
                    uint32_t stack, uint32_t detail) {
    MisuseFields f;
    f.kind = static_cast<uint32_t>(kind);
    f.ptr = reinterpret_cast<uintptr_t>(ptr);
    f.bytes = bytes;
    f.stack = stack;
    f.detail = detail;
    AppendFields(EventType::kMisuse, time_ns, f);
  }

  void AppendSample(const SampleEvent& s) {
    SampleFields f;
#define PINSHIM_SAMPLE_FIELD(name, type, layout, absent) f.name = s.name;
    PINSHIM_SAMPLE_FIELDS(PINSHIM_SAMPLE_FIELD)
#undef PINSHIM_SAMPLE_FIELD
    AppendFields(EventType::kSample, s.time_ns, f);
  }

  void AppendSync(const SyncEvent& e) {
    SyncFields f;
    f.duration_ns = Duration(e.start_ns, e.end_ns);
    f.api = e.api;
    f.kind = static_cast<uint32_t>(e.kind);
    f.stream = Delta(reinterpret_cast<uintptr_t>(e.stream), &prev_sync_stream_);
    f.event = reinterpret_cast<uintptr_t>(e.event);
    f.result = e.result;
    f.device = e.device;
    AppendFields(EventType::kSync, e.start_ns, f);
  }

  void AppendStream(const StreamEvent& e) {
    StreamFields f;
    f.duration_ns = Duration(e.start_ns, e.end_ns);
    f.api = e.api;
    f.stream = reinterpret_cast<uintptr_t>(e.stream);
    f.flags = e.flags;
    f.priority = e.priority;
    f.result = e.result;
    f.device = e.device;
    AppendFields(EventType::kStream, e.start_ns, f);
  }

  void AppendGraph(const GraphEvent& e) {
    GraphFields f;
    f.duration_ns = Duration(e.start_ns, e.end_ns);
    f.api = e.api;
    f.op = static_cast<uint32_t>(e.op);
    f.stream = reinterpret_cast<uintptr_t>(e.stream);
    f.graph = reinterpret_cast<uintptr_t>(e.graph);
    f.result = e.result;
    f.device = e.device;
    AppendFields(EventType::kGraph, e.start_ns, f);
  }

  void AppendBudgetDecision(const BudgetDecisionEvent& e, uint64_t time_ns, uint32_t stack) {
    static_assert(kBudgetEvictorCalled == 1u, "evictor_called is written as its BudgetBit");
    BudgetDecisionFields f;
#define BUDGET(name, record_type, event_type, layout) f.name = e.name;
#define RECORDER(name, layout)
#include "shim/core/budget_decision.inc"
#undef BUDGET
#undef RECORDER
    f.stack = stack;
    AppendFields(EventType::kBudgetDecision, time_ns, f);
  }

  void AppendOwnPin(const OwnPinEvent& e, uint64_t time_ns, uint32_t stack = 0) {
    OwnPinFields f;
    f.action = static_cast<uint32_t>(e.action);
    f.part = static_cast<uint32_t>(e.part);
    f.reason = static_cast<uint32_t>(e.reason);
    f.ptr = reinterpret_cast<uintptr_t>(e.ptr);
    f.bytes = e.bytes;
    f.alloc_id = e.alloc_id;
    f.result = e.result;
    f.stack = stack;
    f.detail = e.detail;
    AppendFields(EventType::kOwnPin, time_ns, f);
  }

  void AppendPathVerdict(const PathVerdictFields& f, uint64_t time_ns) {
    AppendFields(EventType::kPathVerdict, time_ns, f);
  }

  void AppendOptimizeCounters(const OptimizeCountersEvent& c, uint64_t time_ns) {
    AppendFields(EventType::kOptimizeCounters, time_ns, c);
  }

  void AppendDropped(uint64_t count, uint64_t time_ns) {
    DroppedFields f;
    f.count = count;
    AppendFields(EventType::kDropped, time_ns, f);
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
    // The header's first time is the base of the first event's delta (the
    // format says so), so it is the first event's time, not the earliest:
    // an event stamped before the first (a call that began earlier and was
    // recorded later) has a negative delta, and must not move the base.
    if (count_ == 0) {
      t_first_ = t_last_ = prev_time_ = time_ns;
    } else if (time_ns > t_last_) {
      t_last_ = time_ns;
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

  static int64_t Delta(uint64_t value, uint64_t* prev) {
    const int64_t d = static_cast<int64_t>(value - *prev);
    *prev = value;
    return d;
  }

  static uint64_t Duration(uint64_t start_ns, uint64_t end_ns) {
    return end_ns >= start_ns ? end_ns - start_ns : 0;
  }

  // One event whose payload is record f (trace_format.h's field lists).
  template <typename R>
  void AppendFields(EventType type, uint64_t time_ns, const R& f) {
    static_assert(FitsOneEvent<R>(), "a record must fit kMaxEventBytes");
    End(PutFields(Begin(type, time_ns), f));
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
