// Python frames of the calling thread, read straight from CPython's own
// structures, so that a copy made from Python names the Python line that
// made it.
//
// Method. At start (and after modules change) DetectPythonRuntime looks the
// interpreter up in the process (the executable's or a libpython's exported
// symbols: the version, the code object type, four small functions), picks
// the structure layout of that version (3.10 to 3.13; 3.13 checks it against
// the interpreter's own _Py_DebugOffsets) and checks it once against the
// interpreter (PyCode_Type's own type must be PyType_Type). Each record then:
//   1. PyGILState_GetThisThreadState(): the thread's own thread state,
//      bound to the thread whether or not it holds the GIL (one TLS lookup;
//      no lock, no allocation, no GIL). On 3.12 and later, the thread's
//      current state too (also a TLS read), which differs from it inside a
//      subinterpreter entered with the GIL held.
//   2. The state must belong to this thread (its thread id is
//      pthread_self()), else nothing is read.
//   3. Its innermost frame, then `previous` (3.11+) or `f_back` (3.10), at
//      most kMaxPythonHops steps: each frame's code object must have type
//      PyCode_Type; C-stack shim frames (3.12+) and frames not yet started
//      are skipped as CPython's own frame walkers skip them. A frame that
//      fails a check ends the walk (kInvalid, the frames before it kept).
//   4. Per frame the code object and the instruction offset; the line comes
//      from the code object's line table (3.10's PEP 626 table, 3.11's
//      location table), decoded here with every step bounded by the table's
//      length, and remembered per thread by (code, offset).
// Only the calling thread's own frames are read, which cannot change while
// it is inside the call being recorded; nothing here calls the interpreter
// beyond the two TLS lookups and the finalizing flag. Code objects get ids
// in a process-wide lock-free table (a kPythonCode frame each, once).
//
// Not read (the stack is labelled instead, PythonStatus): threads without a
// Python thread state, a free-threaded build, versions without a layout, an
// interpreter that is finalizing. Everything here is allocation-free and
// lock-free; DetectPythonRuntime calls dlsym and must not run on a hot path.
#ifndef PINSHIM_SHIM_TRACE_PYTHON_FRAMES_H_
#define PINSHIM_SHIM_TRACE_PYTHON_FRAMES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {

// Frames visited per walk, skipped ones included.
constexpr int kMaxPythonHops = 4096;

// Where the fields pinshim reads live in one CPython version's structures
// (x86-64 and other LP64 targets). Offsets in bytes; -1: not in this version.
struct PythonLayout {
  int minor = 0;                // 3.<minor>
  bool frame_objects = false;   // 3.10: the chain is PyFrameObjects (f_back)
  bool location_table = false;  // 3.11+: co_linetable is the location table
  // Thread state.
  int32_t ts_interp = -1;
  int32_t ts_thread_id = -1;
  int32_t ts_frame = -1;        // 3.10 frame, 3.11/3.12 cframe, 3.13 current_frame
  int32_t cframe_current = -1;  // 3.11/3.12: _PyCFrame.current_frame; -1: direct
  // Frame (_PyInterpreterFrame, or PyFrameObject on 3.10).
  int32_t fr_previous = -1;
  int32_t fr_code = -1;
  int32_t fr_instr = -1;   // pointer to the code unit being run
                           // (prev_instr, instr_ptr); 3.10: int f_lasti
  int32_t fr_owner = -1;   // char
  int32_t fr_lineno = -1;  // 3.10: int f_lineno (set while tracing)
  int owner_generator = 1;
  int owner_cstack = -1;  // 3.12+: entry frames the C stack owns
  // Code object.
  int32_t co_filename = -1;
  int32_t co_name = -1;  // co_qualname where the version has it
  int32_t co_firstlineno = -1;
  int32_t co_linetable = -1;
  int32_t co_code_adaptive = -1;   // 3.11+: the code units, inline
  int32_t co_firsttraceable = -1;  // 3.11+: int _co_firsttraceable
  // Object headers.
  int32_t ob_type = 8;
  int32_t ob_size = 16;       // PyVarObject
  int32_t bytes_data = 32;    // PyBytesObject.ob_sval
  int32_t str_length = 16;    // PyASCIIObject.length
  int32_t str_state = 32;     // PyASCIIObject.state
  int32_t ascii_size = -1;    // sizeof(PyASCIIObject): ASCII data follows
  int32_t compact_size = -1;  // sizeof(PyCompactUnicodeObject)
};

// The layout CPython 3.<minor> publishes, null for other versions.
const PythonLayout* PythonLayoutFor(int minor);

// Type objects the walk checks objects against.
struct PythonTypes {
  uintptr_t code = 0;
  uintptr_t frame = 0;  // 3.10's PyFrame_Type
  uintptr_t unicode = 0;
  uintptr_t bytes = 0;
};

// One process's interpreter as DetectPythonRuntime found it; tests build
// their own. Functions may be null where the version has none.
struct PythonRuntime {
  PythonLayout layout;
  PythonTypes types;
  PythonStatus fixed = PythonStatus::kFrames;  // not kFrames: every stack gets this
  void* (*this_thread_state)() = nullptr;      // PyGILState_GetThisThreadState
  void* (*current_thread_state)() = nullptr;   // thread-local (3.12+), else null
  int (*is_finalizing)() = nullptr;
  void* (*main_interpreter)() = nullptr;
  char description[48] = {};  // "3.12.3", "3.13.0 free-threaded"
};

// The prefix of CPython 3.13's _Py_DebugOffsets (Include/internal/
// pycore_runtime.h, the start of _PyRuntime) that pinshim reads.
struct PythonDebugOffsets313 {
  char cookie[8];  // "xdebugpy"
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil,
        gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
        gil_runtime_state_holder;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk,
        status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames,
        localspluskinds, co_code_adaptive;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
};

// What a 3.13 interpreter's debug offsets say about reading its frames with
// `layout`: kFrames when they agree, kFreeThreaded for a free-threaded
// build, kUnsupported when the cookie, the version (`version_hex`, as
// Py_Version) or an offset differs.
PythonStatus ClassifyDebugOffsets313(const PythonDebugOffsets313& offsets,
                                     unsigned long version_hex, const PythonLayout& layout);

// Finds the interpreter in this process, once; later calls after a failure
// look again (a libpython dlopen'ed since). Returns true when one was found
// (also one whose frames cannot be read: see PythonRuntime::fixed).
bool DetectPythonRuntime();

// The runtime DetectPythonRuntime found, or null. One acquire load.
const PythonRuntime* ActivePythonRuntime();

// The line of the instruction at byte offset `addr` of a code object whose
// line table is table[0, len) and whose first line is `first_line`: 0 when
// the table gives the instruction no line; first_line for addr < 0. 3.10's
// format, or 3.11's location table when `location_table`.
int PythonLineFromTable(const uint8_t* table, size_t len, int first_line, int addr,
                        bool location_table);

// One frame as the walk found it.
struct PythonRawFrame {
  uintptr_t code;
  int32_t addr;  // byte offset of the instruction in the code; -1 before the first
  int32_t line;  // > 0: the frame states its line itself (3.10 while tracing)
};

// Walks from frame `frame` (the innermost) outwards, storing at most `max`
// frames in out[0, *n) and counting further ones in *omitted. Returns
// kFrames, or kInvalid when a frame failed a check.
PythonStatus WalkPythonFrames(const PythonRuntime& rt, uintptr_t frame, PythonRawFrame* out,
                              int max, int* n, uint32_t* omitted);

// The innermost frame of thread state `tstate` (0: none).
uintptr_t InnermostPythonFrame(const PythonLayout& layout, uintptr_t tstate);

// A code object's file, function and first line, decoded to UTF-8 (cut at
// kMaxPythonTextBytes). False when the object does not look like one.
struct PythonCodeInfo {
  char file[kMaxPythonTextBytes];
  size_t file_len;
  char function[kMaxPythonTextBytes];
  size_t function_len;
  int32_t first_line;
};
bool ReadPythonCode(const PythonRuntime& rt, uintptr_t code, PythonCodeInfo* out);

// The line of raw frame `f` (0 when unknown).
int PythonLineOf(const PythonRuntime& rt, const PythonRawFrame& f);

// What identifies a code object beyond its address, which a freed one's
// successor may reuse: its file, name and line table objects and first line.
uint64_t PythonCodeFingerprint(const PythonRuntime& rt, uintptr_t code);

// Process-wide ids for code objects: allocation-free (mmap), lock-free.
class PythonCodeTable {
 public:
  constexpr PythonCodeTable() = default;
  // Maps 2^slots_log2 slots. False when the kernel refused. Call once.
  bool Init(int slots_log2);
  // The id of (code, fingerprint) under `epoch`; *is_new when just added
  // (the caller writes its kPythonCode frame). 0 when the table is full.
  uint32_t Intern(uintptr_t code, uint64_t fingerprint, uint32_t epoch, bool* is_new);
  // Forgets everything; ids restart at 1. Only while no thread uses it.
  void Reset();

 private:
  struct Slot;
  Slot* slots_ = nullptr;
  size_t mask_ = 0;
  std::atomic<uint32_t> next_id_{1};
};

// A thread's memory of (code, offset) -> (code id, line). Zero-initialised.
constexpr int kPythonLineCacheEntries = 256;
struct PythonLineCache {
  struct Entry {
    uintptr_t code;
    uint64_t fingerprint;
    int32_t addr;
    uint32_t epoch;  // 0: empty
    uint32_t code_id;
    uint32_t line;
  };
  Entry entries[kPythonLineCacheEntries];
};

// The Python part of one captured stack.
struct PythonStack {
  PythonStatus status = PythonStatus::kNone;
  int depth = 0;
  uint32_t omitted = 0;
  uint64_t frames[kMaxPythonFrames];  // (code id << 32) | line, innermost first
};

// Receives code objects seen for the first time (under the epoch).
class PythonCodeSink {
 public:
  virtual void NewCode(uint32_t id, const PythonCodeInfo& info) = 0;

 protected:
  ~PythonCodeSink() = default;
};

// Reads the calling thread's Python frames into *out (status kNone when
// `rt` is null). `cache`, `raw` (room for kMaxPythonFrames) and `info` are
// the thread's own scratch.
void CapturePythonStack(const PythonRuntime* rt, PythonLineCache* cache, PythonCodeTable* table,
                        uint32_t epoch, PythonRawFrame* raw, PythonCodeInfo* info, PythonStack* out,
                        PythonCodeSink* sink);

// Encodes a kPythonCode payload into `out` (room for kMaxPythonCodePayload).
constexpr size_t kMaxPythonCodePayload = 4 * kMaxVarint + 2 * kMaxPythonTextBytes;
size_t EncodePythonCode(uint32_t id, const PythonCodeInfo& info, uint8_t* out);

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_PYTHON_FRAMES_H_
