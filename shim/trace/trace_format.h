// The pinshim trace format, version 1. The preloaded library writes it and
// `pinshim report` reads it; this header is the only definition of it.
//
// A trace is one file per process: <program>.<pid>.pstrace (".<n>" before the
// extension when that name is taken, e.g. after exec in the same pid).
//
//   file   := file_header frame*
//
// file_header, 32 bytes, little endian:
//   [0, 8)    magic "PINSHIMT"
//   [8, 10)   u16 format version (kTraceVersion)
//   [10, 12)  u16 header size (kFileHeaderBytes)
//   [12, 28)  reserved, zero
//   [28, 32)  u32 masked crc32c of bytes [0, 28)
//
// frame, in the spirit of LevelDB's log records: a writer killed in the
// middle of a write leaves at most one torn frame, and a reader that meets a
// bad frame skips forward byte by byte to the next frame whose checksum holds,
// so damage costs the damaged frames only.
//   [0, 4)    u32 masked crc32c of the type byte followed by the payload
//   [4, 8)    u32 payload length (at most kMaxFramePayload)
//   [8]       u8 frame type (FrameType)
//   [9, ...)  payload
//
// Payloads are built from LEB128 varints ("u"), zigzag varints ("s"),
// strings ("str" = u length, bytes) and raw byte strings of the same shape.
// Extensibility: readers skip frame types and event types they do not know,
// and ignore bytes after the fields they know at the end of a frame or event;
// writers only ever append fields. A change that older readers would misread
// bumps kTraceVersion.
//
// Frame payloads:
//   kProcess   (tag u, length u, value bytes)* with ProcessTag tags; values are
//              one u, one s or raw text, as the tag's comment says.
//   kApiNames  u count, then count times: u api id, str name.
//   kModules   u generation, u count, then count times:
//                str path, str build id (raw bytes), u load bias,
//                u flags (ModuleFlag), u segment count,
//                then that many times: u start address, u length.
//              A new generation is written at start and after every
//              dlopen/dlclose; each one lists every module then loaded.
//   kStack     u stack id (>= 1), u module generation in force when the
//              stack was first seen, u depth, u exact-ip mask (bit i: frame i
//              holds the faulting instruction itself rather than a return
//              address), u ip[0], then depth-1 times s (ip[i] - ip[i-1]).
//              Frame 0 is innermost. Written once per distinct stack, before
//              any batch that refers to it is flushed.
//              In a process with a Python runtime (see python_frames.h) the
//              same payload goes on with the calling thread's Python frames,
//              so that one stack id names both: u python status
//              (PythonStatus), u count, then count times (u code id of a
//              kPythonCode frame, u line; 0: no line), innermost first, then
//              u Python frames not stored (deeper than kMaxPythonFrames).
//              Stacks of other processes end after the native frames, as in
//              traces written before Python frames existed; older readers
//              ignore the appended fields.
//   kEvents    a batch of events of one thread:
//              u tid, u first time (ns: the first event's), u last time
//              (ns: the latest event's), u event count,
//              then count times: u8 event type (EventType), u length, payload.
//              Times are CLOCK_MONOTONIC nanoseconds. Every event payload
//              begins with s (time - previous time in this batch), the first
//              one relative to the batch's first time. Pointer and id fields
//              marked "delta" are zigzag differences against the same field
//              of the previous event of that type in this batch (initially 0),
//              so repeated buffers and streams cost one byte. A batch is
//              self-contained: losing one loses nothing else.
//   kEnd       u dropped events, u stacks not stored (table full), u time (ns).
//              Written by a clean shutdown; its absence means the process was
//              killed or is still running.
//   kPythonCode
//              one Python code object (a function, a module's body, a
//              lambda): u code id (>= 1), str file (co_filename, at most
//              kMaxPythonTextBytes), str function (co_qualname where the
//              version has it, else co_name), u first line. Written once per
//              code object before a stack that names it is written (a stack
//              may name a code id whose frame a torn tail lost: readers show
//              it as unknown). Frame type 7; readers that do not know it skip
//              it, so kTraceVersion stays 1.
//   kSiteTotals
//              what a capped trace (PINSHIM_TRACE_MAX) keeps once its
//              per-event detail ended: per-site totals of the copies made
//              since, and counts of the other events not written. u header
//              length, then the header's fields (PINSHIM_SITE_TOTALS_FIELDS,
//              whose first says this record's own version), then u cell
//              count, then that many times u cell length and the cell's
//              fields (PINSHIM_SITE_CELL_FIELDS): one site (stack id), API,
//              direction, sync or async, memory kinds, failed or not and
//              size class (floor of log2 of the bytes). Cumulative since
//              detail ended: a writer
//              rewrites its latest one in place while it is the file's last
//              frame, else appends a new one with a higher sequence number;
//              readers take the frame of the highest sequence and ignore the
//              rest. Each thread's events are in kEvents up to one batch and
//              counted here from the next; detail_end_ns is the earliest
//              time counted here. Frame type 8 (older readers skip it;
//              kTraceVersion stays 1).
//
// Event payloads (after the leading s time delta). Their layouts are defined
// by the field lists at the end of this header, which the encoder and the
// reader both go by; the fields are described here.
//   kCopy      u duration ns, u api, u bits (CopyBit), u kinds (src | dst << 3),
//              u bytes, u stack id, s stream (delta), s host pointer (delta),
//              s host allocation id (delta);
//              then if kCopyHasFlags: u host flags; if kCopyHasResult: s result;
//              if kCopyHasDevice: s device (the device current at the copy;
//              recorded only when it differs from the previous copy's);
//              if kCopyStaged: u threads that copied, u ring chunk bytes
//              (optimize mode ran this pageable copy through its staging
//              rings; the memory kinds stay the program's).
//   kPin       u duration ns, u api, u op (PinOp), u pointer, u bytes,
//              u flags, u stack id, s result, s device (-1 unknown).
//              The pinned memory of the VMM API and of host memory pools
//              comes as kAlloc (cuMemMap, cuMemAllocFromPoolAsync) and
//              kFree (cuMemUnmap, cuMemFreeAsync), flags 0 except
//              kPinFlagStreamOrdered.
//   kHostAlloc u allocation id, u pointer, u bytes, u bits (bit 0 free,
//              bits 1.. source), u stack id.
//   kMisuse    u kind (MisuseKind), u pointer, u bytes, u stack id,
//              u detail (for wc reads: the WcReadVia path; for copy races:
//              the WcReadVia path in bits 0..3, and kCopyAccessWrite when
//              the CPU wrote rather than read).
//   kSample    u pinned by the program, u registered by the program,
//              u pinned by pinshim, u resident set bytes, u swap-ins (pages,
//              cumulative, system-wide), u swap-outs (same), u budget bytes
//              (0 none).
//   kSync      u duration ns, u api, u kind (SyncKind), s stream (delta),
//              u event handle, s result; then (appended, absent in older
//              traces) s device (the device current at the call, -1 unknown).
//              `stream` is the handle as the program passed it: 0 (or
//              CU_STREAM_LEGACY, 1) is the legacy default stream, except for
//              an api whose name ends in _ptsz/_ptds, where 0 is the calling
//              thread's per-thread default stream (as CU_STREAM_PER_THREAD,
//              2, is for every api). kCopy streams read the same way.
//   kDropped   u events dropped on this thread since its previous report
//              (the recorder was re-entered, e.g. from a signal handler).
//   kStream    a stream the program created (cuStreamCreate,
//              cuStreamCreateWithPriority): u duration ns, u api, u stream
//              handle (0 when the call failed), u flags (CU_STREAM_*; bit 0
//              CU_STREAM_NON_BLOCKING: the stream does not synchronize with
//              the legacy default stream), s priority, s result, s device
//              (current at the call, -1 unknown). A handle created again
//              names a new stream (the driver reused a destroyed one's).
//              Event type 8 (older readers skip it; kTraceVersion stays 1).
//   kGraph     a stream capture or graph launch (GraphOp): u duration ns,
//              u api, u op, u stream handle (read as kSync's), u graph
//              handle (capture end: the graph made; launch: the CUgraphExec
//              launched; 0 otherwise), s result, s device. Copies queued on
//              a stream while it captures are recorded as kCopy events but do
//              not run then; they run at the launches of graphs made from
//              the capture. Event type 9 (skipped by older readers).
//   kBudgetDecision
//              one decision of enforce mode's pinned-memory budget (granted
//              ones included, so that the counts add up): the lines of
//              shim/core/budget_decision.inc, in its order, each u (owner,
//              decision, limiter, bits, the bytes and budgets, the stack id;
//              the list says what each holds). Event type 48, in the range
//              older readers skip, so adding it left kTraceVersion at 1.
//   kOwnPin    one pinning action of optimize mode's own (not the
//              program's): u action (OwnPinAction: 0 pinned, 1 unpinned,
//              2 refused), u part (OwnPinPart: 0 pool slab, 1 dedicated pool
//              allocation, 2 registration cache, 3 arena extent), u reason
//              (OwnPinReason: 0 none; unpinned: 1 the program released the
//              memory, 2 evicted for the pin cap, 3 evicted for the budget,
//              4 idle trim, 5 context destroyed, 6 evicted for the cache's
//              table, 7 the program registered the memory itself; refused:
//              16 pin cap, 17 budget, 18 RLIMIT_MEMLOCK, 19 out of memory,
//              20 already registered by the program, 21 other driver error,
//              22 no context, 23 cache table full), u address (0 when
//              nothing was allocated), u bytes, u program allocation id
//              (cache: the pinned buffer's tracked allocation; a dedicated
//              pool allocation's program allocation when it is unpinned; 0
//              otherwise), s driver result (CUresult of the pinning or
//              unpinning call, 0 when none was made); then, appended (older
//              traces end before them): u stack id, u detail. The stack is 0
//              except for page changes (reasons 8 to 14: 8 madvise,
//              posix_madvise or process_madvise, 9 mmap MAP_FIXED, 10 mremap,
//              11 munmap, 12 shmat/shmdt, 13 brk/sbrk, 14 PINSHIM_VERIFY_PAGES
//              found other pages; reason 15: a copy started in it and ran past
//              its end, which the driver refuses), which are the program's own calls on its
//              thread: the stack is where it made the call, and detail the
//              advice or the call's flags. Other actions happen in pinshim,
//              often on a thread of its own. Action 3 (retired) is a pool
//              slab whose pages the program changed: never reused, given back
//              once free. Refusal reason 24: a call was changing those pages.
//              Values are those of shim/core/events.h; unknown ones are kept
//              and reported as "unknown". Event type 49 (skipped by older
//              readers; kTraceVersion stays 1).
//   kPathVerdict
//              a change of optimize mode's self-check verdict on one of its
//              paths in one cell (shim/optimize/path_judge.h): u direction
//              (CopyDir), u sync (1: synchronous calls), u size class (0:
//              under 256 KiB, then by powers of four: 1 from 256 KiB, 2
//              from 1 MiB, ... 7 from 1 GiB), u path (1 staged, 2 pinned in
//              place), u verdict (1 faster than the driver's own path, 2
//              slower: no longer taken there), u copies that took the path,
//              u copies that took the driver's, u the path's ns per MiB, u
//              the driver's ns per MiB, u times the path was found slower.
//              Event type 51 (skipped by older readers; kTraceVersion
//              stays 1).
//   kOptimizeCounters
//              a snapshot of optimize mode's counters, written by the
//              sampler at each sample when they changed and once at exit
//              (and before exec): the TRACE lines of
//              shim/core/optimize_counters.inc, in its order, each u (the
//              list says what each counts). Cumulative since the process
//              started. Event type 50 (skipped by older readers).
#ifndef PINSHIM_SHIM_TRACE_TRACE_FORMAT_H_
#define PINSHIM_SHIM_TRACE_TRACE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "shim/core/optimize_counters.h"

namespace pinshim {
namespace trace {

constexpr char kTraceMagic[8] = {'P', 'I', 'N', 'S', 'H', 'I', 'M', 'T'};
constexpr uint16_t kTraceVersion = 1;

// A kPin kFree flag: the release is stream-ordered (cuMemFreeAsync of a
// host-pool allocation), so the driver does not wait for the device at the
// call. No pinning flag of the driver's uses this bit.
constexpr uint32_t kPinFlagStreamOrdered = 1u << 30;
constexpr size_t kFileHeaderBytes = 32;
constexpr size_t kFrameHeaderBytes = 9;
constexpr uint32_t kMaxFramePayload = 4u << 20;
constexpr const char kTraceExtension[] = ".pstrace";

// Deepest stack recorded; deeper stacks keep their innermost frames.
constexpr int kMaxStackDepth = 64;
constexpr int kDefaultStackDepth = 32;

enum class FrameType : uint8_t {
  kProcess = 1,
  kApiNames = 2,
  kModules = 3,
  kStack = 4,
  kEvents = 5,
  kEnd = 6,
  kPythonCode = 7,
  kSiteTotals = 8,
  // 9..255: reserved; readers skip frames of types they do not know.
};

enum class EventType : uint8_t {
  kCopy = 1,
  kPin = 2,
  kHostAlloc = 3,
  kMisuse = 4,
  kSample = 5,
  kSync = 6,
  kDropped = 7,
  kStream = 8,
  kGraph = 9,
  // 10..31: reserved for this format's own additions.
  // 32..127: reserved for the pool, the registration cache and budget
  // decisions; readers skip event types they do not know.
  kBudgetDecision = 48,
  kOwnPin = 49,
  kOptimizeCounters = 50,
  kPathVerdict = 51,
};

// kProcess tags. "u", "s" and "text" say how the value bytes are encoded.
enum class ProcessTag : uint8_t {
  kPid = 1,               // u
  kParentPid = 2,         // u
  kProgram = 3,           // text: path of the executable
  kCommandLine = 4,       // text: arguments separated by NUL bytes
  kHostname = 5,          // text
  kRank = 6,              // s: rank of a parallel job (RANK, OMPI_COMM_WORLD_RANK,
                          // PMI_RANK, SLURM_PROCID), -1 when none
  kStartMonotonicNs = 7,  // u: CLOCK_MONOTONIC when tracing began
  kStartRealtimeNs = 8,   // u: CLOCK_REALTIME at the same moment
  kPageSize = 9,          // u
  kPhysicalBytes = 10,    // u
  kMemlockLimit = 11,     // u: RLIMIT_MEMLOCK soft limit, UINT64_MAX unlimited
  kSwapTotalBytes = 12,   // u
  kSampleMs = 13,         // u
  kStackDepth = 14,       // u
  kBudgetBytes = 15,      // u: pinned-bytes budget of this process, 0 none
  kMode = 16,             // text: "observe", "observe,enforce", ...
  kVersion = 17,          // text: pinshim version that wrote the trace
  kForkedFrom = 18,       // u: parent pid when this trace began in a fork child
  kWcGuard = 19,          // u: 1 when the write-combined page guard was armed
  kPython = 20,           // text: the Python runtime found at start, e.g. "3.12.3"
                          // or "3.13.0 free-threaded"; absent: none found
  kPythonFrames = 21,     // u: 1 when Python frames are recorded (PINSHIM_PYTHON_FRAMES)
  kCopyGuard = 22,        // u: 1 when the copy guard (PINSHIM_COPY_GUARD) was armed
};

// What a stack's Python section says about the calling thread (kStack).
enum class PythonStatus : uint8_t {
  kNone = 0,            // no Python section: no Python runtime, or frames off
  kFrames = 1,          // the thread's frames (none when no Python code runs)
  kNoThreadState = 2,   // the thread has no Python thread state (a native
                        // thread, or before the interpreter started)
  kSubinterpreter = 3,  // the frames belong to a subinterpreter
  kFreeThreaded = 4,    // a free-threaded build: frames are not read
  kUnsupported = 5,     // a Python version without a known layout
  kFinalizing = 6,      // the interpreter was shutting down: not read
  kInvalid = 7,         // a frame failed validation; the walk stopped there
                        // (frames before it are kept)
};

// Python frames kept per stack (the innermost ones), and the longest file
// or function name stored (longer ones are cut, on a UTF-8 boundary).
constexpr int kMaxPythonFrames = 48;
constexpr size_t kMaxPythonTextBytes = 1024;

enum ModuleFlag : uint32_t {
  kModuleMainProgram = 1u << 0,
  kModuleVdso = 1u << 1,
};

enum CopyBit : uint32_t {
  kCopyDirMask = 3u,  // CopyDir
  kCopyAsync = 1u << 2,
  kCopyHasFlags = 1u << 3,
  kCopyHasResult = 1u << 4,
  kCopyHasDevice = 1u << 5,
  kCopyStaged = 1u << 6,  // optimize mode staged it through pinned rings
};

enum class MisuseKind : uint8_t {
  kWcRead = 1,  // the CPU read write-combined memory
  // The CPU touched the host side of an asynchronous copy on page-locked
  // memory that pinshim had not seen completed: the destination of a
  // device-to-host copy (read or written) or the source of a host-to-device
  // copy (written). Recorded once per copy, at the first such access; the
  // analyzer decides from the synchronization in the trace whether the
  // copy could still run then (the copy-race rule).
  kCopyRace = 2,
};

// kMisuse detail bit of a kCopyRace: the access wrote.
constexpr uint32_t kCopyAccessWrite = 1u << 4;
constexpr uint32_t kCopyAccessViaMask = 0xfu;

// How a read of write-combined memory was seen.
enum class WcReadVia : uint8_t {
  kMemcpy = 1,
  kMemmove = 2,
  kMemcmp = 3,
  kString = 4,     // strlen, strcpy, strcmp and the like
  kStdio = 5,      // fwrite, fputs, write and other output paths
  kPageGuard = 6,  // a plain load caught by the page-guard sampler
  kOther = 7,
};

// What a kSync event says about completion of queued work.
enum class SyncKind : uint8_t {
  kStreamSynchronize = 1,   // every copy queued on `stream` has finished
  kContextSynchronize = 2,  // every copy queued anywhere in the process has
  kEventRecord = 3,         // `event` now marks the work queued on `stream`
  kEventSynchronize = 4,    // the work `event` marks has finished
  kStreamQueryDone = 5,     // a stream query said `stream` is idle
  kEventQueryDone = 6,      // an event query said `event` has completed
  kStreamWaitEvent = 7,     // `stream` waits on the device for `event` (no
                            // host-side completion by itself; later work on
                            // `stream` runs after the work `event` marks)
  kDeviceFree = 8,          // cuMemFree returned (the measured driver waits
                            // for the device's queued work first)
  kHostFuncQueued = 9,      // a host function (cuLaunchHostFunc,
                            // cuStreamAddCallback) queued on `stream`;
                            // `event` holds its token (0: none)
  kHostFuncRun = 10,        // the host function of token `event` starts, on a
                            // driver thread: the work queued before it on its
                            // stream has finished
};

// What a kGraph event did.
enum class GraphOp : uint8_t {
  kCaptureBegin = 1,  // `stream` starts capturing (cuStreamBeginCapture*)
  kCaptureEnd = 2,    // `stream`'s capture ended, making graph `graph`
  kLaunch = 3,        // graph exec `graph` launched on `stream`
};

// Budget decisions (kBudgetDecision). The values are those of shim/budget's
// Owner, Decision and Limiter, which the format cannot include (the
// analyzer reads traces without linking the budget); whoever converts one
// into the other static_asserts that they agree.
enum class BudgetOwner : uint8_t {
  kProgramAlloc = 0,     // cuMemHostAlloc / cuMemAllocHost by the program
  kProgramRegister = 1,  // cuMemHostRegister by the program
  kPinshimPool = 2,      // pinshim's pooled pinned arena
  kPinshimCache = 3,     // pinshim's registration cache
  kProgramVmm = 4,       // host-located cuMemCreate allocations by the program
  kProgramPool = 5,      // memory reserved by the program's host memory pools
};
enum class BudgetDecision : uint8_t {
  kGranted = 0,   // pinned
  kDenied = 1,    // the call failed with the driver's out-of-memory error
  kFallback = 2,  // not pinned: pageable memory served instead
};
enum class BudgetLimiter : uint8_t {
  kNone = 0,     // granted at the first attempt
  kProcess = 1,  // the process budget
  kNode = 2,     // the node budget
  kLedger = 3,   // the node ledger could not be consulted
};
enum BudgetBit : uint32_t {
  kBudgetEvictorCalled = 1u << 0,  // the evict policy ran the evictor
};

// Pinning flags the format interprets, as the driver defines them. An
// allocation's flags are CU_MEMHOSTALLOC_*; a registration's are
// CU_MEMHOSTREGISTER_*, where 0x04 means I/O memory, not write-combined.
constexpr uint32_t kPinFlagPortable = 0x01;       // both
constexpr uint32_t kPinFlagDeviceMap = 0x02;      // both
constexpr uint32_t kPinFlagWriteCombined = 0x04;  // allocations only

// CRC masking (LevelDB's): a checksum stored inside checksummed data would
// otherwise make CRCs of CRCs degenerate.
constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;
inline uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }
inline uint32_t UnmaskCrc(uint32_t masked) {
  uint32_t rot = masked - kCrcMaskDelta;
  return (rot >> 17) | (rot << 15);
}

inline void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void StoreU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t LoadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Varint encoding. Encoders write at most kMaxVarint bytes and return the
// position after them; the caller guarantees the room.
constexpr size_t kMaxVarint = 10;

inline uint8_t* PutVarint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

inline uint8_t* PutSigned(uint8_t* p, int64_t v) { return PutVarint(p, ZigZag(v)); }

// Decodes a varint from [*p, end). On success advances *p and returns true;
// on a truncated or over-long varint returns false and leaves *p unchanged.
inline bool GetVarint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  const uint8_t* q = *p;
  if (q < end && *q < 0x80) {  // the common one-byte case
    *v = *q;
    *p = q + 1;
    return true;
  }
  uint64_t result = 0;
  for (int shift = 0; shift < 64 && q < end; shift += 7) {
    uint64_t byte = *q++;
    result |= (byte & 0x7f) << shift;
    if (byte < 0x80) {
      *v = result;
      *p = q;
      return true;
    }
  }
  return false;
}

inline bool GetSigned(const uint8_t** p, const uint8_t* end, int64_t* v) {
  uint64_t u;
  if (!GetVarint(p, end, &u)) return false;
  *v = UnZigZag(u);
  return true;
}

// --- Event payloads as field lists ---------------------------------------
// Every event payload is a list of fields after the leading time delta
// (kCopy's has optional ones, which its presence bits announce). The lists below
// (and, for the payloads that cross other boundaries,
// shim/core/optimize_counters.inc and shim/core/budget_decision.inc) are the
// only definition of those layouts: each one makes a record struct, one
// member per field, and a table of its fields in order, by which the encoder
// writes the record and the reader reads it back into the same members. A
// field is found by its name, so adding one cannot shift another.
//   X(name, type, layout, value when absent)
// type: uint64_t (written u) or int64_t (written s). layout: kFirst, in the
// event's first layout (a record that ends before it is damage), or
// kAppended, added since: a record of an older writer ends before it, and it
// reads as the value when absent. Fields are only ever appended, after those
// of the first layout; a reader skips fields after the last it knows (a
// newer writer's).

// FieldTable<R>::kFields: R's fields in the order they are written.
template <typename R>
struct FieldTable;

// FieldPresence<R>::kMember: the member holding R's presence bits; none
// (null) for records without optional fields.
template <typename R>
struct FieldPresence {
  static constexpr uint64_t R::*kMember = nullptr;
};

// A third layout serves records whose fields are optional (kCopy's):
// kWhen(bits), present exactly when the record's presence field (named by
// FieldPresence<R>::kMember, read before it) has one of those bits set; a
// field so marked is of the first layout otherwise.
enum class FieldLayout : uint8_t { kFirst, kAppended, kWhen };

// A field's layout as the lists name it: kFirst, kAppended or kWhen(bits).
struct FieldPlace {
  FieldLayout layout;
  uint64_t when_bits;
};
struct FieldPlaces {
  static constexpr FieldPlace kFirst{FieldLayout::kFirst, 0};
  static constexpr FieldPlace kAppended{FieldLayout::kAppended, 0};
  static constexpr FieldPlace kWhen(uint64_t bits) { return FieldPlace{FieldLayout::kWhen, bits}; }
};

// One field of record struct R: exactly one of u and s is set.
template <typename R>
struct Field {
  const char* name;
  FieldLayout layout;
  uint64_t R::*u;      // written u
  int64_t R::*s;       // written s
  uint64_t when_bits;  // kWhen: the presence bits that make it present
};

template <typename R>
constexpr Field<R> MakeField(const char* name, FieldPlace place, uint64_t R::*member) {
  return Field<R>{name, place.layout, member, nullptr, place.when_bits};
}
template <typename R>
constexpr Field<R> MakeField(const char* name, FieldPlace place, int64_t R::*member) {
  return Field<R>{name, place.layout, nullptr, member, place.when_bits};
}

// Whether field f of r is in the record: always, except kWhen fields whose
// bits the record's presence field lacks.
template <typename R>
constexpr bool FieldPresent(const Field<R>& f, const R& r) {
  constexpr uint64_t R::*presence = FieldPresence<R>::kMember;
  if constexpr (presence != nullptr) {
    if (f.layout == FieldLayout::kWhen) return (r.*presence & f.when_bits) != 0;
  }
  return true;
}

template <typename R>
constexpr size_t FieldCount() {
  return sizeof(FieldTable<R>::kFields) / sizeof(FieldTable<R>::kFields[0]);
}

// Whether no field of the first layout follows an appended one.
template <typename R>
constexpr bool AppendedLast() {
  bool appended = false;
  for (const Field<R>& f : FieldTable<R>::kFields) {
    if (f.layout == FieldLayout::kAppended) {
      appended = true;
    } else if (appended) {
      return false;
    }
  }
  return true;
}

// Whether every kWhen field has a presence field to go by.
template <typename R>
constexpr bool PresenceDeclared() {
  for (const Field<R>& f : FieldTable<R>::kFields) {
    if (f.layout == FieldLayout::kWhen && f.when_bits == 0) return false;
    if (f.layout == FieldLayout::kWhen && FieldPresence<R>::kMember == nullptr) return false;
  }
  return true;
}

// One field of R, written or read; the table entry is a constant, so each
// compiles to a plain member access.
template <typename R, size_t I>
inline uint8_t* PutField(uint8_t* p, const R& r) {
  constexpr Field<R> f = FieldTable<R>::kFields[I];
  if (!FieldPresent(f, r)) return p;
  if constexpr (f.s != nullptr) {
    return PutSigned(p, r.*f.s);
  } else {
    return PutVarint(p, r.*f.u);
  }
}

// True: go on. False: stop, with *ok false for damage (the record ends
// before a field of the first layout, or inside a field).
template <typename R, size_t I>
inline bool GetField(const uint8_t** p, const uint8_t* end, R* r, bool* ok) {
  constexpr Field<R> f = FieldTable<R>::kFields[I];
  if (!FieldPresent(f, *r)) return true;
  if (*p == end) {
    *ok = f.layout == FieldLayout::kAppended;
    return false;
  }
  bool got;
  if constexpr (f.s != nullptr) {
    got = GetSigned(p, end, &(r->*f.s));
  } else {
    got = GetVarint(p, end, &(r->*f.u));
  }
  if (!got) *ok = false;
  return got;
}

template <typename R, size_t... I>
inline uint8_t* PutFieldsIn(uint8_t* p, const R& r, std::index_sequence<I...>) {
  ((p = PutField<R, I>(p, r)), ...);
  return p;
}

template <typename R, size_t... I>
inline bool GetFieldsIn(const uint8_t* p, const uint8_t* end, R* r, std::index_sequence<I...>) {
  bool ok = true;
  (void)(GetField<R, I>(&p, end, r, &ok) && ...);
  return ok;
}

// Writes every field of r in table order (at most FieldCount<R>() *
// kMaxVarint bytes) and returns the position after them.
template <typename R>
inline uint8_t* PutFields(uint8_t* p, const R& r) {
  return PutFieldsIn(p, r, std::make_index_sequence<FieldCount<R>()>());
}

// Reads the fields of one record from [p, end) into *r, by name. Fields of
// an older writer's record that ends before them keep *r's values; bytes
// after the last field of the table are skipped. False (damage) when the
// record ends before a field of the first layout or inside a field.
template <typename R>
inline bool GetFields(const uint8_t* p, const uint8_t* end, R* r) {
  return GetFieldsIn(p, end, r, std::make_index_sequence<FieldCount<R>()>());
}

#define PINSHIM_FIELD_MEMBER(name, type, layout, absent) type name = absent;
#define PINSHIM_FIELD_ROW(name, type, layout, absent) \
  MakeField(#name, FieldPlaces::layout, &R::name),
// struct Record, one member per field of FIELDS, and its FieldTable.
#define PINSHIM_TRACE_RECORD(Record, FIELDS) \
  struct Record {                            \
    FIELDS(PINSHIM_FIELD_MEMBER)             \
  };                                         \
  PINSHIM_TRACE_RECORD_TABLE(Record, FIELDS)

// The same for a record with optional fields, present as its member
// PRESENCE says (kWhen).
#define PINSHIM_TRACE_RECORD_WITH_PRESENCE(Record, FIELDS, PRESENCE) \
  struct Record {                                                    \
    FIELDS(PINSHIM_FIELD_MEMBER)                                     \
  };                                                                 \
  template <>                                                        \
  struct FieldPresence<Record> {                                     \
    static constexpr uint64_t Record::*kMember = &Record::PRESENCE;  \
  };                                                                 \
  PINSHIM_TRACE_RECORD_TABLE(Record, FIELDS)

#define PINSHIM_TRACE_RECORD_TABLE(Record, FIELDS)                             \
  template <>                                                                  \
  struct FieldTable<Record> {                                                  \
    using R = Record;                                                          \
    static constexpr Field<R> kFields[] = {FIELDS(PINSHIM_FIELD_ROW)};         \
  };                                                                           \
  static_assert(AppendedLast<Record>(), #Record ": fields are only appended"); \
  static_assert(PresenceDeclared<Record>(), #Record ": optional fields need bits")

// kCopy. stream, host_ptr and alloc_id are the deltas the format describes;
// kinds is src | dst << 3; device is written only when it changed.
#define PINSHIM_COPY_FIELDS(X)                       \
  X(duration_ns, uint64_t, kFirst, 0)                \
  X(api, uint64_t, kFirst, 0)                        \
  X(bits, uint64_t, kFirst, 0)                       \
  X(kinds, uint64_t, kFirst, 0)                      \
  X(bytes, uint64_t, kFirst, 0)                      \
  X(stack, uint64_t, kFirst, 0)                      \
  X(stream, int64_t, kFirst, 0)                      \
  X(host_ptr, int64_t, kFirst, 0)                    \
  X(alloc_id, int64_t, kFirst, 0)                    \
  X(host_flags, uint64_t, kWhen(kCopyHasFlags), 0)   \
  X(result, int64_t, kWhen(kCopyHasResult), 0)       \
  X(device, int64_t, kWhen(kCopyHasDevice), 0)       \
  X(staged_workers, uint64_t, kWhen(kCopyStaged), 0) \
  X(staged_chunk_bytes, uint64_t, kWhen(kCopyStaged), 0)
PINSHIM_TRACE_RECORD_WITH_PRESENCE(CopyFields, PINSHIM_COPY_FIELDS, bits);

// kPin
#define PINSHIM_PIN_FIELDS(X)         \
  X(duration_ns, uint64_t, kFirst, 0) \
  X(api, uint64_t, kFirst, 0)         \
  X(op, uint64_t, kFirst, 0)          \
  X(ptr, uint64_t, kFirst, 0)         \
  X(bytes, uint64_t, kFirst, 0)       \
  X(flags, uint64_t, kFirst, 0)       \
  X(stack, uint64_t, kFirst, 0)       \
  X(result, int64_t, kFirst, 0)       \
  X(device, int64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(PinFields, PINSHIM_PIN_FIELDS);

// kHostAlloc (bits: bit 0 free, bits 1.. source)
#define PINSHIM_HOST_ALLOC_FIELDS(X) \
  X(alloc_id, uint64_t, kFirst, 0)   \
  X(ptr, uint64_t, kFirst, 0)        \
  X(bytes, uint64_t, kFirst, 0)      \
  X(bits, uint64_t, kFirst, 0)       \
  X(stack, uint64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(HostAllocFields, PINSHIM_HOST_ALLOC_FIELDS);

// kMisuse
#define PINSHIM_MISUSE_FIELDS(X) \
  X(kind, uint64_t, kFirst, 0)   \
  X(ptr, uint64_t, kFirst, 0)    \
  X(bytes, uint64_t, kFirst, 0)  \
  X(stack, uint64_t, kFirst, 0)  \
  X(detail, uint64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(MisuseFields, PINSHIM_MISUSE_FIELDS);

// kSample
#define PINSHIM_SAMPLE_FIELDS(X)             \
  X(pinned_program, uint64_t, kFirst, 0)     \
  X(registered_program, uint64_t, kFirst, 0) \
  X(pinned_pinshim, uint64_t, kFirst, 0)     \
  X(rss_bytes, uint64_t, kFirst, 0)          \
  X(swap_ins, uint64_t, kFirst, 0)           \
  X(swap_outs, uint64_t, kFirst, 0)          \
  X(budget_bytes, uint64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(SampleFields, PINSHIM_SAMPLE_FIELDS);

// kSync (stream: the delta; device: -1 unknown)
#define PINSHIM_SYNC_FIELDS(X)        \
  X(duration_ns, uint64_t, kFirst, 0) \
  X(api, uint64_t, kFirst, 0)         \
  X(kind, uint64_t, kFirst, 0)        \
  X(stream, int64_t, kFirst, 0)       \
  X(event, uint64_t, kFirst, 0)       \
  X(result, int64_t, kFirst, 0)       \
  X(device, int64_t, kAppended, -1)
PINSHIM_TRACE_RECORD(SyncFields, PINSHIM_SYNC_FIELDS);

// kDropped
#define PINSHIM_DROPPED_FIELDS(X) X(count, uint64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(DroppedFields, PINSHIM_DROPPED_FIELDS);

// kStream
#define PINSHIM_STREAM_FIELDS(X)      \
  X(duration_ns, uint64_t, kFirst, 0) \
  X(api, uint64_t, kFirst, 0)         \
  X(stream, uint64_t, kFirst, 0)      \
  X(flags, uint64_t, kFirst, 0)       \
  X(priority, int64_t, kFirst, 0)     \
  X(result, int64_t, kFirst, 0)       \
  X(device, int64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(StreamFields, PINSHIM_STREAM_FIELDS);

// kGraph
#define PINSHIM_GRAPH_FIELDS(X)       \
  X(duration_ns, uint64_t, kFirst, 0) \
  X(api, uint64_t, kFirst, 0)         \
  X(op, uint64_t, kFirst, 0)          \
  X(stream, uint64_t, kFirst, 0)      \
  X(graph, uint64_t, kFirst, 0)       \
  X(result, int64_t, kFirst, 0)       \
  X(device, int64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(GraphFields, PINSHIM_GRAPH_FIELDS);

// kOwnPin
#define PINSHIM_OWN_PIN_FIELDS(X)  \
  X(action, uint64_t, kFirst, 0)   \
  X(part, uint64_t, kFirst, 0)     \
  X(reason, uint64_t, kFirst, 0)   \
  X(ptr, uint64_t, kFirst, 0)      \
  X(bytes, uint64_t, kFirst, 0)    \
  X(alloc_id, uint64_t, kFirst, 0) \
  X(result, int64_t, kFirst, 0)    \
  X(stack, uint64_t, kAppended, 0) \
  X(detail, uint64_t, kAppended, 0)
PINSHIM_TRACE_RECORD(OwnPinFields, PINSHIM_OWN_PIN_FIELDS);

// kPathVerdict
#define PINSHIM_PATH_VERDICT_FIELDS(X)      \
  X(dir, uint64_t, kFirst, 0)               \
  X(sync, uint64_t, kFirst, 0)              \
  X(size_class, uint64_t, kFirst, 0)        \
  X(path, uint64_t, kFirst, 0)              \
  X(verdict, uint64_t, kFirst, 0)           \
  X(path_copies, uint64_t, kFirst, 0)       \
  X(driver_copies, uint64_t, kFirst, 0)     \
  X(path_ns_per_mib, uint64_t, kFirst, 0)   \
  X(driver_ns_per_mib, uint64_t, kFirst, 0) \
  X(losses, uint64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(PathVerdictFields, PINSHIM_PATH_VERDICT_FIELDS);

// kSiteTotals header.
constexpr uint64_t kSiteTotalsVersion = 1;
#define PINSHIM_SITE_TOTALS_FIELDS(X)                                        \
  X(version, uint64_t, kFirst, 0)       /* kSiteTotalsVersion */             \
  X(sequence, uint64_t, kFirst, 0)      /* higher: later */                  \
  X(detail_end_ns, uint64_t, kFirst, 0) /* first event not in detail */      \
  X(last_ns, uint64_t, kFirst, 0)       /* latest event counted */           \
  X(detail_bytes, uint64_t, kFirst, 0)  /* the cap that ended detail */      \
  X(copies, uint64_t, kFirst, 0)        /* copies in the cells */            \
  X(spilled, uint64_t, kFirst, 0)       /* of those, without their site */   \
  X(lost, uint64_t, kFirst, 0)          /* copies not counted: table full */ \
  X(pins, uint64_t, kFirst, 0)          /* kPin events not written */        \
  X(host_allocs, uint64_t, kFirst, 0)   /* kHostAlloc events not written */  \
  X(syncs, uint64_t, kFirst, 0)         /* kSync events not written */       \
  X(misuses, uint64_t, kFirst, 0)       /* kMisuse events not written */     \
  X(others, uint64_t, kFirst, 0)        /* other events not written */
PINSHIM_TRACE_RECORD(SiteTotalsFields, PINSHIM_SITE_TOTALS_FIELDS);

// One kSiteTotals cell. bits: CopyDir in kCopyDirMask, kCopyAsync, and
// kCopyHasResult for copies that failed; kinds as kCopy's.
#define PINSHIM_SITE_CELL_FIELDS(X)  \
  X(stack, uint64_t, kFirst, 0)      \
  X(api, uint64_t, kFirst, 0)        \
  X(bits, uint64_t, kFirst, 0)       \
  X(kinds, uint64_t, kFirst, 0)      \
  X(size_class, uint64_t, kFirst, 0) \
  X(copies, uint64_t, kFirst, 0)     \
  X(bytes, uint64_t, kFirst, 0)      \
  X(call_ns, uint64_t, kFirst, 0)    \
  X(overlap_ns, uint64_t, kFirst, 0)
PINSHIM_TRACE_RECORD(SiteCellFields, PINSHIM_SITE_CELL_FIELDS);
// overlap_ns: for synchronous host<->device copies, the sum over each copy
// of the smaller of its duration and the calling thread's host time since
// its previous copy from the same site (what the sync-copy-loop rule
// estimates), as far as the writer's small per-thread memory of sites goes.

// Cells a writer keeps at most, and the most a cell takes encoded.
constexpr size_t kMaxSiteCells = 2048;
constexpr size_t kMaxSiteCellBytes = 1 + FieldCount<SiteCellFields>() * kMaxVarint;
constexpr size_t kMaxSiteTotalsBytes = kMaxVarint + FieldCount<SiteTotalsFields>() * kMaxVarint +
                                       kMaxVarint + kMaxSiteCells * kMaxSiteCellBytes;
static_assert(kMaxSiteTotalsBytes <= kMaxFramePayload, "site totals fit one frame");

// kBudgetDecision: the lines of shim/core/budget_decision.inc, each u.
struct BudgetDecisionFields {
#define BUDGET(name, record_type, event_type, layout) uint64_t name = 0;
#define RECORDER(name, layout) uint64_t name = 0;
#include "shim/core/budget_decision.inc"
#undef BUDGET
#undef RECORDER
};
template <>
struct FieldTable<BudgetDecisionFields> {
  using R = BudgetDecisionFields;
  static constexpr Field<R> kFields[] = {
#define BUDGET(name, record_type, event_type, layout) PINSHIM_FIELD_ROW(name, uint64_t, layout, 0)
#define RECORDER(name, layout) PINSHIM_FIELD_ROW(name, uint64_t, layout, 0)
#include "shim/core/budget_decision.inc"
#undef BUDGET
#undef RECORDER
  };
};
static_assert(AppendedLast<BudgetDecisionFields>(), "budget decision fields are only appended");

// kOptimizeCounters: the TRACE lines of shim/core/optimize_counters.inc, each
// u, in OptimizeCountersEvent (absent ones read as 0).
template <>
struct FieldTable<OptimizeCountersEvent> {
  using R = OptimizeCountersEvent;
  static constexpr Field<R> kFields[] = {
#define TRACE(name, layout, source, summary_key) PINSHIM_FIELD_ROW(name, uint64_t, layout, 0)
#define SUMMARY(source, summary_key)
#include "shim/core/optimize_counters.inc"
#undef TRACE
#undef SUMMARY
  };
};
static_assert(AppendedLast<OptimizeCountersEvent>(), "counters are only appended");
static_assert(sizeof(OptimizeCountersEvent) ==
                  FieldCount<OptimizeCountersEvent>() * sizeof(uint64_t),
              "every counter of OptimizeCountersEvent is recorded");

// Fields of a kOptimizeCounters record, as this format version lists them.
constexpr size_t kOptimizeCounterFields = FieldCount<OptimizeCountersEvent>();

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_TRACE_FORMAT_H_
