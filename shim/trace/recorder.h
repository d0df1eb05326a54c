// The trace recorder: what the hooks call to put events into this process's
// trace (format: trace_format.h).
//
// Recording path (every Record* function and CheckWcRead): no allocation
// through the program's malloc (buffers are mmap'd), no lock (a per-thread
// buffer claimed with one atomic exchange), no output. Each thread encodes
// into its own 64 KiB buffer, which goes to the file with one writev when it
// fills, when its oldest event is 100 ms old, when the thread exits, or when
// the sampler thread finds it idle for 250 ms. A call made while the same
// thread is already inside the recorder (a signal handler, or a hook reached
// from inside the recorder) is dropped and counted (kDropped).
//
// Call sites: each Record* captures the caller's stack (libunwind, bounded
// depth, cached per thread, deduplicated process-wide; see call_site.h)
// and, in a process with a Python interpreter, the calling thread's Python
// frames with it (python_frames.h).
//
// Lifecycle: StartRecorder once at start (after configuration is read),
// NoteModulesChanged after every successful dlopen and dlclose,
// RecorderAfterForkInChild in the child of a fork, RecorderBeforeExec before
// every exec*, StopRecorder at exit.
// Before StartRecorder, and after StopRecorder, every call is a cheap no-op.
#ifndef PINSHIM_SHIM_TRACE_RECORDER_H_
#define PINSHIM_SHIM_TRACE_RECORDER_H_

#include <cstddef>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/trace/event_encoder.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {

struct RecorderOptions {
  const char* trace_dir = nullptr;       // required: PINSHIM_TRACE_DIR
  const char* mode = "observe";          // recorded as is
  uint32_t sample_ms = 10;               // PINSHIM_SAMPLE_MS; 0 disables sampling
  int stack_depth = kDefaultStackDepth;  // 1..kMaxStackDepth
  uint64_t budget_bytes = 0;             // the process's pinned budget, 0 none
  bool wc_guard = false;                 // arm the write-combined page guard
  bool python_frames = true;             // PINSHIM_PYTHON_FRAMES: Python frames in stacks
  bool copy_guard = false;               // guard the pages of queued copies (copy_watch.h)
  uint32_t wc_guard_ms = 20;             // how often the guard arms a page
  // PINSHIM_TRACE_MAX: bytes of the file past which events are no longer
  // written one by one; copies are then counted per site (kSiteTotals) and
  // other events counted only. 0: no cap.
  uint64_t trace_max = 0;
  // Names of entry points for the trace's API table; ids [0, api_count).
  const char* (*api_name)(ApiId) = nullptr;
  uint32_t api_count = 0;
  // Optimize mode's counters: fills *out and returns true when there is a
  // snapshot to record (false: optimize mode is not running). Called by the
  // sampler thread at each sample (recorded when changed) and once by
  // StopRecorder and RecorderBeforeExec (recorded always). Must not
  // allocate, lock or call the driver. Null: no counters records.
  bool (*optimize_counters)(OptimizeCountersEvent* out) = nullptr;
};

// Opens the trace file and starts the sampler thread. Returns false, with a
// one-line reason in err[0, err_len), when tracing cannot start; recording
// calls then stay no-ops. Reads the environment (for the job rank) once.
bool StartRecorder(const RecorderOptions& options, char* err, size_t err_len);

// True while a trace is being written.
bool RecorderActive();

// The path of the trace file ("" when none). Valid until the next fork.
const char* RecorderTracePath();

// A host<->device (or host<->host) copy, after it returned. `device` is the
// device current for the calling thread, -1 when unknown.
void RecordCopy(const CopyEvent& event, int device = -1);

// A pinned allocation, free, registration or unregistration, after it
// returned. For kFree and kUnregister, event.bytes must be the size of what
// is released (the registry knows it), so that pinned totals stay right.
// `device` is the device current at the call, -1 when unknown.
void RecordPin(const PinEvent& event, int device = -1);

// A tracked host allocation or release (the hooks decide what is tracked).
void RecordHostAlloc(const HostAllocEvent& event);

// A synchronization or event call that tells when queued copies completed:
// stream/context/event synchronize, successful stream/event queries, event
// records and stream waits (see SyncKind).
void RecordSync(const SyncEvent& event);

// A stream the program created, with its flags (kStream).
void RecordStream(const StreamEvent& event);

// A stream capture beginning or ending, or a graph launch (kGraph).
void RecordGraph(const GraphEvent& event);

// A decision of enforce mode's pinned-memory budget, every one (granted,
// denied, fallback), with the caller's stack as its call site. Made from
// the budget's recorder callback, on the charging thread: event.time_ns 0
// takes the time here. Like the other Record* calls: no allocation, no
// lock, no output, and dropped (counted) when made from inside the recorder.
void RecordBudgetDecision(const BudgetDecisionEvent& event);

// One pinning action of optimize mode's own (pool, registration cache,
// arena): pinned, unpinned, refused or retired, with the reason. The
// recorder takes the time; a call site is captured only for page changes
// (the program's own call, on its thread: IsPageChange(reason)); other
// actions belong to pinshim and may run on a thread of its own. Like the
// other Record* calls: no allocation, no lock, no output.
void RecordOwnPin(const OwnPinEvent& event);
// A change of optimize mode's self-check verdict (kPathVerdict).
void RecordPathVerdict(const PathVerdictFields& verdict);

// The memcpy-family hooks call this with the source they are about to read.
// When it overlaps write-combined pinned memory, records a wc-read misuse
// at the caller's stack and returns true. One load when the process has no
// write-combined memory.
bool CheckWcRead(const void* src, size_t len, WcReadVia via);

// The memcpy-family hooks call this for each range they are about to read
// (`write` false) or write: when it is the first such access to the host
// side of a queued copy the recorder has not seen waited for
// (copy_watch.h), records a copy-race misuse at the caller's stack and
// returns true. One load when no copy is watched.
bool CheckCopyAccess(const void* p, size_t len, bool write, WcReadVia via);

// A system call is about to read or write [ptr, ptr + len): hooks of such
// calls (write, read, send, recv, ...) and of copies (before the driver
// sees the host pointer) call this so the page guard never leaves a page
// protected where the kernel would answer EFAULT, and the copy guard gives
// up the end pages it protects next to [ptr, ptr + len) (copy_watch.h,
// CopyGuardOpenFor). One load each when no page is guarded.
void DisarmWcGuardFor(const void* ptr, size_t len);

// pinshim's own pinned memory (pool, arena, registration cache) grew or
// shrank by `delta` bytes; reported in samples.
void NotePinshimPinnedBytes(int64_t delta);

// Writes a new module map; call after every successful dlopen and dlclose.
void NoteModulesChanged();

// In the child of a fork: forgets the parent's trace and buffers, starts the
// child's own trace file and sampler. Call before the child records anything.
void RecorderAfterForkInChild();

// Before an exec* call: exec replaces the process without running exit
// handlers, so everything buffered is written now, with an end record. The
// recorder stays on: when exec fails, recording goes on in the same file.
// A no-op unless the caller is the process that opened the trace.
void RecorderBeforeExec();

// Flushes every thread's buffer, writes the end record and stops the sampler.
// Later records are dropped. Idempotent. A no-op unless the caller is the
// process that opened the trace.
void StopRecorder();

// True when the calling process is the one whose trace this is. It is not
// in a vfork child (or a child of clone(2) without fork's handlers), which
// shares or copies the parent's memory without RecorderAfterForkInChild:
// exec and _exit hooks there must leave the trace alone. One system call.
bool RecorderOwnedHere();

// True while the calling thread runs recorder code (its own mmap, open and
// write calls reach the libc hooks, which must not take them for the
// program's).
bool InsideRecorder();

// Counters for tests and benchmarks.
struct RecorderStats {
  uint64_t unwind_cache_hits;    // of the calling thread
  uint64_t unwind_cache_misses;  // of the calling thread
  uint64_t dropped;              // process-wide
  uint64_t batches_written;
  uint64_t bytes_written;
  uint64_t samples_taken;
  bool detail_ended;             // the trace reached PINSHIM_TRACE_MAX
  uint64_t site_totals_written;  // kSiteTotals frames written or rewritten
};
RecorderStats GetRecorderStats();

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_RECORDER_H_
