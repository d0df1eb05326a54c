// Reads one pinshim trace (format: shim/trace/trace_format.h).
//
// Opening a trace scans it once: frames are checked (length, checksum), the
// small ones (process, modules, stacks, API names) are decoded, and batches of
// events are indexed. Damage does not stop the scan: a bad frame is skipped up
// to the next frame whose checksum holds, and Damage says how much was lost.
// Events are then decoded on demand, merged across threads in time order;
// each event's fields are read by name through the format's field tables,
// so older and newer writers' records read as trace_format.h says.
#ifndef PINSHIM_ANALYZER_REPORT_TRACE_READER_H_
#define PINSHIM_ANALYZER_REPORT_TRACE_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "shim/core/events.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace report {

class RangeCrc;

// Stack ids above this are treated as unknown (a writer never gets near it;
// it keeps per-stack tables of damaged traces bounded).
constexpr uint32_t kMaxStackId = 1u << 22;

struct ProcessInfo {
  uint64_t pid = 0;
  uint64_t parent_pid = 0;
  uint64_t forked_from = 0;  // parent pid when the trace began in a fork child
  std::string program;
  std::vector<std::string> command_line;
  std::string hostname;
  int64_t rank = -1;
  uint64_t start_monotonic_ns = 0;
  uint64_t start_realtime_ns = 0;
  uint64_t page_size = 4096;
  uint64_t physical_bytes = 0;
  uint64_t memlock_limit = UINT64_MAX;
  uint64_t swap_total_bytes = 0;
  uint64_t sample_ms = 0;
  uint64_t stack_depth = 0;
  uint64_t budget_bytes = 0;
  std::string mode;
  std::string version;
  bool wc_guard = false;
  std::string python;          // the Python runtime found at start, "" none
  bool python_frames = false;  // the recorder was set to record Python frames
  bool copy_guard = false;     // the copy guard (PINSHIM_COPY_GUARD) was armed
};

struct Segment {
  uint64_t start;
  uint64_t length;
};

struct Module {
  std::string path;
  std::string build_id;  // raw bytes
  uint64_t bias = 0;
  uint32_t flags = 0;  // trace::ModuleFlag
  std::vector<Segment> segments;
};

struct ModuleMap {
  uint32_t generation = 0;
  std::vector<Module> modules;
};

// One Python frame of a stack: a kPythonCode id and the line (0: none).
struct PythonFrameRef {
  uint32_t code = 0;
  uint32_t line = 0;
};

struct Stack {
  uint32_t generation = 0;
  uint64_t exact_mask = 0;
  std::vector<uint64_t> ips;  // [0] innermost
  // The calling thread's Python frames, innermost first (kNone: the stack
  // has no Python section).
  trace::PythonStatus python_status = trace::PythonStatus::kNone;
  std::vector<PythonFrameRef> python;
  uint64_t python_omitted = 0;  // deeper Python frames not stored
};

// A Python code object (kPythonCode).
struct PythonCode {
  std::string file;
  std::string function;
  uint32_t first_line = 0;
};

// What the scan could not use.
struct Damage {
  uint64_t file_bytes = 0;
  uint64_t skipped_bytes = 0;  // inside damaged regions, tail included
  uint32_t skipped_regions = 0;
  uint64_t first_bad_offset = 0;
  uint64_t torn_tail_bytes = 0;    // an unfinished frame at the end
  uint64_t bad_events = 0;         // undecodable events inside good frames
  uint64_t unknown_frames = 0;     // frame types this reader does not know
  uint64_t unknown_events = 0;     // event types this reader does not know
  uint64_t dropped_events = 0;     // the recorder's own count (kDropped, kEnd)
  uint64_t stacks_not_stored = 0;  // the recorder's stack table was full
  bool header_crc_bad = false;
  bool has_end = false;  // a clean shutdown wrote the end record
  uint64_t end_ns = 0;
  double seconds_since_modified = -1;  // of the file, when read from disk
  // Without an end record: 1 when the writing process is seen still running
  // on this host, 0 when it is gone, -1 when that cannot be told.
  int writer_running = -1;

  bool Any() const { return skipped_bytes != 0 || bad_events != 0 || header_crc_bad || !has_end; }
};

// One decoded event. Fields not used by an event's type are zero.
struct Event {
  trace::EventType type;
  uint32_t tid = 0;
  uint64_t time_ns = 0;
  uint64_t duration_ns = 0;
  uint32_t api = 0;
  uint32_t stack = 0;
  // kCopy
  CopyDir dir = CopyDir::kHostToDevice;
  MemKind src = MemKind::kPageable;
  MemKind dst = MemKind::kPageable;
  bool async = false;
  uint64_t bytes = 0;   // also kPin, kHostAlloc, kMisuse
  uint64_t stream = 0;  // also kSync, kStream, kGraph
  uint64_t host_ptr = 0;
  uint64_t alloc_id = 0;  // also kHostAlloc
  uint32_t host_flags = 0;
  int32_t result = 0;   // also kPin, kSync, kStream, kGraph
  int32_t device = -1;  // also kPin, kSync, kStream, kGraph
  // kPin
  PinOp op = PinOp::kAlloc;
  uint64_t ptr = 0;    // also kHostAlloc, kMisuse
  uint32_t flags = 0;  // also kStream (CU_STREAM_*)
  // kHostAlloc
  bool is_free = false;
  uint8_t source = 0;
  // kMisuse
  trace::MisuseKind misuse = trace::MisuseKind::kWcRead;
  uint32_t detail = 0;
  // kSample
  uint64_t pinned_program = 0;
  uint64_t registered_program = 0;
  uint64_t pinned_pinshim = 0;
  uint64_t rss_bytes = 0;
  uint64_t swap_ins = 0;
  uint64_t swap_outs = 0;
  uint64_t budget_bytes = 0;
  // kSync (also stream, result, device: -1 when the trace does not say)
  trace::SyncKind sync = trace::SyncKind::kStreamSynchronize;
  uint64_t event_handle = 0;
  // kStream (also stream, flags, result, device)
  int32_t priority = 0;
  // kGraph (also stream, result, device)
  trace::GraphOp graph_op = trace::GraphOp::kCaptureBegin;
  uint64_t graph_handle = 0;  // the CUgraph made, or the CUgraphExec launched
  // kDropped
  uint64_t dropped = 0;
  // kBudgetDecision (bytes: what was asked for; stack: the call site)
  trace::BudgetOwner budget_owner = trace::BudgetOwner::kProgramAlloc;
  trace::BudgetDecision budget_decision = trace::BudgetDecision::kGranted;
  trace::BudgetLimiter budget_limiter = trace::BudgetLimiter::kNone;
  bool evictor_called = false;
  uint64_t evicted_bytes = 0;
  uint64_t process_pinned = 0;
  uint64_t process_budget = 0;  // 0: none
  uint64_t node_pinned = 0;
  uint64_t node_budget = 0;  // 0: none
  // kOwnPin (also ptr, bytes, alloc_id, result). Values a newer writer
  // added are kept as they are.
  OwnPinAction own_action = OwnPinAction::kPinned;
  OwnPinPart own_part = OwnPinPart::kPoolSlab;
  OwnPinReason own_reason = OwnPinReason::kNone;
  uint32_t own_detail = 0;  // page changes: the advice or the call's flags
  // kCopy staged by optimize mode: threads that copied (0: not staged), chunk bytes
  uint32_t staged_workers = 0;
  uint64_t staged_chunk_bytes = 0;
  // kOptimizeCounters
  OptimizeCountersEvent counters{};
  // kPathVerdict
  trace::PathVerdictFields verdict{};

  // The host side of a copy and its memory kind (source of H2D, destination
  // of D2H; source of H2H).
  MemKind HostKind() const { return dir == CopyDir::kDeviceToHost ? dst : src; }
  bool IsHostDeviceCopy() const {
    return dir == CopyDir::kHostToDevice || dir == CopyDir::kDeviceToHost;
  }
};

// What a capped trace kept once its per-event detail ended (kSiteTotals):
// per-site copy totals and counts of the other events not written.
struct SiteTotals {
  trace::SiteTotalsFields header;
  std::vector<trace::SiteCellFields> cells;
};

class EventVisitor {
 public:
  virtual ~EventVisitor() = default;
  virtual void OnEvent(const Event& event) = 0;
};

class TraceReader {
 public:
  TraceReader() = default;
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // Reads and scans the file (opened without blocking: a FIFO or a device
  // is refused; read into memory, so that truncation while reading cannot
  // fault). Returns false with a one-line message when
  // nothing in it is usable (empty, not a trace, another format version);
  // damage past the header is not an error (see damage()).
  bool Open(const std::string& path, std::string* error);

  // The same for bytes in memory; "data[0, size)" must outlive the reader.
  bool OpenBuffer(const uint8_t* data, size_t size, std::string* error);

  // Visits every event in time order (threads merged). May be called again.
  void ForEachEvent(EventVisitor* visitor) const;

  const std::string& path() const { return path_; }
  const ProcessInfo& process() const { return process_; }
  bool has_process() const { return has_process_; }
  const std::vector<ModuleMap>& module_maps() const { return module_maps_; }
  // Null when the stack is not in the trace.
  const Stack* FindStack(uint32_t id) const;
  // Null when the code object is not in the trace.
  const PythonCode* FindPythonCode(uint32_t id) const;
  size_t python_code_count() const { return python_codes_.size(); }
  // The module whose executable segments hold `ip`, as the module map of
  // `generation` (a stack's) lists it, else a later map, else any; null
  // when none does.
  const Module* ModuleAt(uint32_t generation, uint64_t ip) const;
  size_t stack_count() const { return stacks_.size(); }
  uint32_t max_stack_id() const { return max_stack_id_; }
  // "" when the trace has no name for it.
  const std::string& ApiName(uint32_t api) const;
  const Damage& damage() const { return damage_; }
  uint64_t event_count() const { return event_count_; }
  size_t batch_count() const { return batches_.size(); }
  uint64_t first_event_ns() const { return first_ns_; }
  uint64_t last_event_ns() const { return last_ns_; }
  // Null when the trace's detail never ended (no kSiteTotals frame).
  const SiteTotals* site_totals() const { return has_totals_ ? &totals_ : nullptr; }

  // One line describing the damage, "" when there is none worth saying.
  std::string DescribeDamage() const;

 private:
  struct Batch {
    uint64_t offset;  // of the first event
    uint64_t length;  // bytes of events
    uint32_t tid;
    uint32_t count;
    uint64_t first_ns;
    uint64_t last_ns;
  };

  bool Scan(std::string* error);
  void HandleFrame(uint8_t type, const uint8_t* p, const uint8_t* end, uint64_t offset);
  bool FrameAt(uint64_t pos, bool resync, RangeCrc* crc) const;
  void ParseProcess(const uint8_t* p, const uint8_t* end);
  void ParseModules(const uint8_t* p, const uint8_t* end);
  void ParseStack(const uint8_t* p, const uint8_t* end);
  void ParsePythonCode(const uint8_t* p, const uint8_t* end);
  void ParseApiNames(const uint8_t* p, const uint8_t* end);
  void ParseBatch(const uint8_t* p, const uint8_t* end, uint64_t offset);
  void ParseSiteTotals(const uint8_t* p, const uint8_t* end);

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<uint8_t[]> owned_;  // the file's bytes, when read from disk
  ProcessInfo process_;
  bool has_process_ = false;
  std::vector<ModuleMap> module_maps_;
  std::unordered_map<uint32_t, Stack> stacks_;
  std::unordered_map<uint32_t, PythonCode> python_codes_;
  uint32_t max_stack_id_ = 0;
  std::unordered_map<uint32_t, std::string> api_names_;
  std::vector<Batch> batches_;  // sorted by first_ns after the scan
  mutable Damage damage_;
  uint64_t event_count_ = 0;
  uint64_t first_ns_ = 0;
  uint64_t last_ns_ = 0;
  SiteTotals totals_;
  bool has_totals_ = false;
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_TRACE_READER_H_
