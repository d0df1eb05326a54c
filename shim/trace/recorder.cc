#include "shim/trace/recorder.h"

#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "shim/core/clock.h"
#include "shim/core/log.h"
#include "shim/core/phdr.h"
#include "shim/core/reentry.h"
#include "shim/core/safe_file.h"
#include "shim/core/thread_annotations.h"
#include "shim/trace/call_site.h"
#include "shim/trace/copy_watch.h"
#include "shim/trace/frame_writer.h"
#include "shim/trace/module_map.h"
#include "shim/trace/python_frames.h"
#include "shim/trace/site_totals.h"
#include "shim/trace/wc_guard.h"
#include "shim/trace/wc_ranges.h"

namespace pinshim {
namespace trace {
namespace {

constexpr size_t kBatchBytes = 64 * 1024;
constexpr uint64_t kOwnerFlushAgeNs = 100 * 1000000ull;
constexpr uint64_t kIdleFlushAgeNs = 250 * 1000000ull;
// How often the site totals of a capped trace are brought up to date.
constexpr uint64_t kSiteTotalsPeriodNs = 1000 * 1000000ull;
constexpr size_t kModuleBufBytes = kMaxFramePayload;
constexpr size_t kMaxModules = 4096;
constexpr int kStackSlotsLog2 = 18;
constexpr size_t kStackIpWords = size_t{1} << 21;
constexpr const char kVersionText[] = "pinshim 0.1";

// Host function tokens share the copy watch's marks with events (CUevent
// handles are pointers, tokens small numbers); the bit keeps them apart.
constexpr uint64_t kHostFuncMarkBit = uint64_t{1} << 63;

// Who holds a thread buffer's batch right now.
enum BufferState : uint32_t { kIdle = 0, kOwner = 1, kFlusher = 2 };

struct ThreadBuffer {
  std::atomic<uint32_t> state{kIdle};
  std::atomic<uint32_t> in_use{0};  // adopted by a live thread
  ThreadBuffer* next = nullptr;     // process-wide list, push-only
  uint32_t tid = 0;
  BatchEncoder enc;
  CapturedStack scratch;
  UnwindCache cache;
  // Python frames (python_frames.h): the thread's line cache and scratch.
  PythonLineCache python_lines;
  PythonRawFrame python_raw[kMaxPythonFrames];
  PythonCodeInfo python_code;
  uint8_t python_payload[kMaxPythonCodePayload];
  SiteGaps gaps;  // past the cap: the thread's recent synchronous copies
  alignas(64) uint8_t data[kBatchBytes];
};

// A lock of one word whose waiters yield the CPU. Reset() forgets any
// holder, for state started afresh while no other thread can hold it.
class CAPABILITY("spin lock") SpinLock {
 public:
  constexpr SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  void Lock() ACQUIRE() {
    for (;;) {
      int expected = 0;
      if (word_.compare_exchange_weak(expected, 1, std::memory_order_acquire)) return;
      sched_yield();
    }
  }
  void Unlock() RELEASE() { word_.store(0, std::memory_order_release); }
  void Reset() { word_.store(0); }

 private:
  std::atomic<int> word_{0};
};

// Constant-initialised (the constexpr constructor proves it): the hooks may
// start recording from a constructor that runs before this file's dynamic
// initialisers, which would otherwise reset it afterwards.
struct Global {
  constexpr Global() = default;
  std::atomic<int> active{0};  // 1 while recording
  int fd = -1;
  int stack_depth = kDefaultStackDepth;
  uint32_t sample_ms = 0;
  uint32_t wc_guard_ms = 0;
  bool wc_guard = false;
  bool copy_guard = false;
  long owner_pid = 0;  // the process whose trace this is (see RecorderOwnedHere)
  uint64_t budget = 0;
  const char* (*api_name)(ApiId) = nullptr;
  uint32_t api_count = 0;
  bool (*optimize_counters)(OptimizeCountersEvent*) = nullptr;
  OptimizeCountersEvent last_counters{};  // the sampler's last record
  std::atomic<uint32_t> epoch{1};         // bumped when stack ids must not be reused
  std::atomic<uint32_t> generation{0};    // latest module map written
  StackTable stacks;
  bool stacks_ready = false;
  bool python_frames = false;  // record Python frames where there is a runtime
  PythonCodeTable python_codes;
  std::atomic<ThreadBuffer*> buffers{nullptr};
  std::atomic<int64_t> pinned_program{0};
  std::atomic<int64_t> registered_program{0};
  std::atomic<int64_t> pinned_pinshim{0};
  std::atomic<uint64_t> dropped{0};
  std::atomic<bool> write_failed{false};  // a batch could not be written (warned once)
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> samples{0};
  pthread_key_t key{};
  bool key_ok = false;
  // Sampler thread.
  pthread_t sampler{};
  bool sampler_running = false;
  int wake_fd = -1;
  int statm_fd = -1;
  int vmstat_fd = -1;
  long page_size = 4096;
  // Module maps.
  SpinLock modules_lock;
  uint8_t* module_buf PT_GUARDED_BY(modules_lock) = nullptr;
  ModuleKey* keys GUARDED_BY(modules_lock) = nullptr;      // of the latest map
  ModuleKey* new_keys GUARDED_BY(modules_lock) = nullptr;  // scratch for the next one
  size_t n_keys GUARDED_BY(modules_lock) = 0;
  // PINSHIM_TRACE_MAX (see CappedFile below).
  uint64_t trace_max = 0;
  std::atomic<uint64_t> file_bytes{0};  // written to the file so far
  std::atomic<int> appending{0};        // O_APPEND writes under way
  std::atomic<bool> detail_ended{false};
  std::atomic<uint64_t> detail_end_ns{0};
  SpinLock tail_lock;                             // serializes every write once detail ended
  bool tail_ready GUARDED_BY(tail_lock) = false;  // tail_end is the file's end
  // The same file without O_APPEND, for rewrites.
  int tail_fd GUARDED_BY(tail_lock) = -1;
  uint64_t tail_end GUARDED_BY(tail_lock) = 0;
  // Of the latest kSiteTotals frame (0: none yet).
  uint64_t totals_offset GUARDED_BY(tail_lock) = 0;
  uint64_t totals_frame_bytes GUARDED_BY(tail_lock) = 0;
  uint64_t totals_sequence GUARDED_BY(tail_lock) = 0;
  uint64_t next_totals_ns = 0;  // the sampler's next snapshot
  uint8_t* totals_buf = nullptr;
  std::atomic<uint64_t> totals_written{0};
  std::atomic<bool> positions_unknown{false};  // a write failed part way
  SiteTotals totals;
  char trace_dir[PATH_MAX] = {};
  char mode[64] = {};
  char path[PATH_MAX] = {};
  char exe[PATH_MAX] = {};
};
Global g;

PINSHIM_TLS ThreadBuffer* t_buffer;
PINSHIM_TLS uint64_t t_dropped;

uint64_t RealtimeNs() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void* MapBytes(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void CopyText(char* out, size_t cap, const char* in) {
  size_t n = in ? strlen(in) : 0;
  if (n >= cap) n = cap - 1;
  if (n) memcpy(out, in, n);
  out[n] = '\0';
}

// --- Thread buffers ---------------------------------------------------------

// Takes the batch for the owning thread. The only contender is a flusher
// (sampler or StopRecorder), which holds it for one writev.
void ClaimAsOwner(ThreadBuffer* b) {
  for (;;) {
    uint32_t expected = kIdle;
    if (b->state.compare_exchange_weak(expected, kOwner, std::memory_order_acquire)) return;
    sched_yield();
  }
}

// Takes another thread's batch, waiting a while for its owner to finish an
// append when `wait`; returns false when it did not get it. The wait is
// bounded: an owner interrupted by a signal whose handler ends up here would
// otherwise never release it.
bool ClaimAsFlusher(ThreadBuffer* b, bool wait) {
  for (int tries = 0;; ++tries) {
    uint32_t expected = kIdle;
    if (b->state.compare_exchange_weak(expected, kFlusher, std::memory_order_acquire)) return true;
    if (!wait || tries > 100000) return false;
    sched_yield();
  }
}

void Release(ThreadBuffer* b) { b->state.store(kIdle, std::memory_order_release); }

// --- The capped file ----------------------------------------------------------
// While detail lasts, frames are appended (O_APPEND) by any thread, each
// counted in file_bytes; a batch is written only if it keeps file_bytes
// within trace_max. The first batch that would not ends detail: that batch
// and every later one are folded into the site totals instead. Once the
// appends under way have finished, every write (stacks, modules, totals,
// the end) is serialized by tail_lock, so the file's end is known and the
// latest kSiteTotals frame can be rewritten in place while it is last.

void LockTail() ACQUIRE(g.tail_lock) {
  g.tail_lock.Lock();
  if (g.tail_ready) return;
  // Appends that began before detail ended finish their one writev.
  while (g.appending.load(std::memory_order_acquire) != 0) sched_yield();
  g.tail_end = g.file_bytes.load(std::memory_order_acquire);
  char self[64];
  snprintf(self, sizeof(self), "/proc/self/fd/%d", g.fd);
  g.tail_fd = open(self, O_WRONLY | O_CLOEXEC);
  g.tail_ready = true;
}

void UnlockTail() RELEASE(g.tail_lock) { g.tail_lock.Unlock(); }

void NoteDetailEnd(uint64_t t) {
  g.detail_ended.store(true, std::memory_order_release);
  uint64_t cur = g.detail_end_ns.load(std::memory_order_relaxed);
  while ((cur == 0 || t < cur) &&
         !g.detail_end_ns.compare_exchange_weak(cur, t, std::memory_order_relaxed)) {
  }
}

// Appends a frame while detail lasts. `reserve`: only if it fits trace_max
// (batches); false when it was not written because detail ended.
bool AppendWhileDetailed(FrameType type, const struct iovec* parts, int n, bool reserve,
                         bool* written, int* error) {
  size_t bytes = kFrameHeaderBytes;
  for (int i = 0; i < n; ++i) bytes += parts[i].iov_len;
  g.appending.fetch_add(1, std::memory_order_acq_rel);
  bool ok = !g.detail_ended.load(std::memory_order_acquire);
  if (ok && reserve && g.trace_max != 0) {
    uint64_t cur = g.file_bytes.load(std::memory_order_relaxed);
    do {
      ok = cur + bytes <= g.trace_max;
    } while (ok && !g.file_bytes.compare_exchange_weak(cur, cur + bytes));
  } else if (ok) {
    g.file_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  if (ok) {
    *written = WriteFrame(g.fd, type, parts, n, error);
    // A partial write leaves the file's end unknown: no rewrite in place.
    if (!*written) g.positions_unknown.store(true, std::memory_order_relaxed);
  }
  g.appending.fetch_sub(1, std::memory_order_acq_rel);
  return ok;
}

// Writes a frame at the file's end once detail ended.
bool AppendAtTail(FrameType type, const struct iovec* parts, int n, int* error)
    REQUIRES(g.tail_lock) {
  size_t bytes = kFrameHeaderBytes;
  for (int i = 0; i < n; ++i) bytes += parts[i].iov_len;
  if (!WriteFrame(g.fd, type, parts, n, error)) {
    g.positions_unknown.store(true, std::memory_order_relaxed);
    return false;
  }
  g.tail_end += bytes;
  g.file_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

// Any frame but a batch: appended while detail lasts, else at the tail.
bool WriteMetaFrame(FrameType type, const struct iovec* parts, int n) {
  bool written = false;
  int error = 0;
  if (AppendWhileDetailed(type, parts, n, false, &written, &error)) return written;
  LockTail();
  written = AppendAtTail(type, parts, n, &error);
  UnlockTail();
  return written;
}

// Counts the events of a batch past the cap: copies per site, the rest by
// type. The caller holds the batch.
void FoldBatch(ThreadBuffer* b) {
  const uint8_t* p = b->enc.data();
  const uint8_t* end = p + b->enc.size();
  uint64_t time = b->enc.first_time();
  NoteDetailEnd(time);
  while (p < end) {
    const uint8_t type = *p++;
    uint64_t len = 0;
    int64_t dt = 0;
    if (!GetVarint(&p, end, &len) || len > static_cast<uint64_t>(end - p)) break;
    const uint8_t* q = p;
    p += len;
    if (!GetSigned(&q, p, &dt)) continue;
    time += static_cast<uint64_t>(dt);
    switch (static_cast<EventType>(type)) {
      case EventType::kCopy: break;
      case EventType::kPin: g.totals.CountNotDetailed(NotDetailed::kPin); continue;
      case EventType::kHostAlloc: g.totals.CountNotDetailed(NotDetailed::kHostAlloc); continue;
      case EventType::kSync: g.totals.CountNotDetailed(NotDetailed::kSync); continue;
      case EventType::kMisuse: g.totals.CountNotDetailed(NotDetailed::kMisuse); continue;
      default: g.totals.CountNotDetailed(NotDetailed::kOther); continue;
    }
    CopyFields f;
    if (!GetFields(q, p, &f)) continue;
    SiteCopy c;
    c.stack = static_cast<uint32_t>(f.stack);
    c.api = static_cast<ApiId>(f.api);
    c.dir = static_cast<CopyDir>(f.bits & kCopyDirMask);
    c.async = (f.bits & kCopyAsync) != 0;
    c.failed = (f.bits & kCopyHasResult) != 0;
    c.src = static_cast<MemKind>(f.kinds & 7);
    c.dst = static_cast<MemKind>((f.kinds >> 3) & 7);
    c.bytes = f.bytes;
    c.call_ns = f.duration_ns;
    const bool host_device = c.dir == CopyDir::kHostToDevice || c.dir == CopyDir::kDeviceToHost;
    c.overlap_ns = !c.async && host_device ? b->gaps.Overlap(c.stack, time, f.duration_ns) : 0;
    g.totals.Add(c);
    g.totals.NoteTime(time + f.duration_ns);
  }
}

// Writes the site totals when they changed (always when `final`): in place
// while the previous frame is the file's last, else appended.
void WriteSiteTotals(bool final) {
  if (!g.detail_ended.load(std::memory_order_acquire) || g.totals_buf == nullptr) return;
  if (!g.totals.TakeChanged() && !final) return;
  LockTail();
  SiteTotalsFields h;
  h.version = kSiteTotalsVersion;
  h.sequence = ++g.totals_sequence;
  h.detail_end_ns = g.detail_end_ns.load(std::memory_order_relaxed);
  h.detail_bytes = g.trace_max;
  const size_t len = g.totals.Encode(h, g.totals_buf, kMaxSiteTotalsBytes);
  struct iovec part = {g.totals_buf, len};
  const bool last = g.totals_offset != 0 && g.totals_offset + g.totals_frame_bytes == g.tail_end;
  if (last && g.tail_fd >= 0 && !g.positions_unknown.load(std::memory_order_relaxed)) {
    uint8_t header[kFrameHeaderBytes];
    EncodeFrameHeader(FrameType::kSiteTotals, &part, 1, header);
    struct iovec parts[2] = {{header, sizeof(header)}, part};
    const size_t bytes = sizeof(header) + len;
    if (pwritev(g.tail_fd, parts, 2, static_cast<off_t>(g.totals_offset)) ==
        static_cast<ssize_t>(bytes)) {
      g.file_bytes.fetch_add(bytes - g.totals_frame_bytes, std::memory_order_relaxed);
      g.tail_end = g.totals_offset + bytes;
      g.totals_frame_bytes = bytes;
      g.totals_written.fetch_add(1, std::memory_order_relaxed);
    }
  } else {
    const uint64_t at = g.tail_end;
    int error = 0;
    if (AppendAtTail(FrameType::kSiteTotals, &part, 1, &error)) {
      g.totals_offset = at;
      g.totals_frame_bytes = g.tail_end - at;
      g.totals_written.fetch_add(1, std::memory_order_relaxed);
    }
  }
  UnlockTail();
}

// Writes the batch out, or past the cap folds it into the site totals; the
// caller holds it.
void Flush(ThreadBuffer* b) {
  if (b->enc.count() == 0) return;
  uint8_t header[kMaxBatchHeaderBytes];
  size_t header_len = b->enc.EncodeHeader(b->tid, header);
  struct iovec parts[2] = {{header, header_len},
                           {const_cast<uint8_t*>(b->enc.data()), b->enc.size()}};
  int error = 0;
  bool written = false;
  if (!AppendWhileDetailed(FrameType::kEvents, parts, 2, true, &written, &error)) {
    FoldBatch(b);
  } else if (written) {
    g.batches.fetch_add(1, std::memory_order_relaxed);
    g.bytes.fetch_add(kFrameHeaderBytes + header_len + b->enc.size(), std::memory_order_relaxed);
  } else {
    g.dropped.fetch_add(b->enc.count(), std::memory_order_relaxed);
    // Said once per process: the trace will lack its end record too (a full
    // disk has no room for it), and the report can only say it is missing.
    if (!g.write_failed.exchange(true, std::memory_order_relaxed)) {
      LogLine("cannot write the trace %s: %s; events from now on are lost", g.path,
              SafeFileReason(error));
    }
  }
  b->enc.Reset();
}

void OnThreadExit(void* arg) {
  ThreadBuffer* b = static_cast<ThreadBuffer*>(arg);
  if (b == nullptr) return;
  ClaimAsOwner(b);
  Flush(b);
  Release(b);
  if (t_buffer == b) t_buffer = nullptr;
  b->in_use.store(0, std::memory_order_release);
}

void Adopt(ThreadBuffer* b) {
  b->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  b->enc.Init(b->data, kBatchBytes);
  // Entries of a previous owner point into a stack that may be gone.
  for (auto& e : b->cache.entries) e.epoch = 0;
  b->cache.hits = b->cache.misses = 0;
  b->gaps.Reset();
  b->cache.stack_top = CurrentThreadStackTop();
  t_buffer = b;
  if (g.key_ok) pthread_setspecific(g.key, b);
}

ThreadBuffer* AcquireBuffer() {
  for (ThreadBuffer* b = g.buffers.load(std::memory_order_acquire); b; b = b->next) {
    uint32_t expected = 0;
    if (b->in_use.load(std::memory_order_relaxed) == 0 &&
        b->in_use.compare_exchange_strong(expected, 1)) {
      Adopt(b);
      return b;
    }
  }
  void* mem = MapBytes(sizeof(ThreadBuffer));
  if (mem == nullptr) return nullptr;
  // Default-initialised: the mapping is already zero, and value-initialising
  // would touch every page of the buffer.
  ThreadBuffer* b = new (mem) ThreadBuffer;
  b->in_use.store(1);
  Adopt(b);
  ThreadBuffer* head = g.buffers.load();
  do {
    b->next = head;
  } while (!g.buffers.compare_exchange_weak(head, b));
  return b;
}

// The calling thread's buffer, held under Reentry::kRecorder while the
// entry lives; buffer() null when nothing may be recorded now (the caller
// then returns at once): no trace, or a call from inside the recorder
// (a signal handler that interrupted it, or pinshim's own calls), counted
// as dropped.
class RecorderEntry {
 public:
  RecorderEntry() : guard_(Reentry::kRecorder, ReentryGuard::kFirstEntry) {
    if (g.active.load(std::memory_order_acquire) != 1) return;
    if (!guard_.held()) {
      ++t_dropped;
      return;
    }
    buffer_ = t_buffer != nullptr ? t_buffer : AcquireBuffer();
  }
  RecorderEntry(const RecorderEntry&) = delete;
  RecorderEntry& operator=(const RecorderEntry&) = delete;

  ThreadBuffer* buffer() const { return buffer_; }

 private:
  ReentryGuard guard_;
  ThreadBuffer* buffer_ = nullptr;
};

void WriteStack(uint32_t id, const CapturedStack& stack) {
  uint8_t payload[kMaxStackPayload];
  size_t n = EncodeStack(id, g.generation.load(std::memory_order_acquire), stack, payload);
  struct iovec part = {payload, n};
  WriteMetaFrame(FrameType::kStack, &part, 1);
}

// Writes each code object the first time a stack names it.
class CodeWriter final : public PythonCodeSink {
 public:
  explicit CodeWriter(ThreadBuffer* b) : b_(b) {}
  void NewCode(uint32_t id, const PythonCodeInfo& info) override {
    size_t n = EncodePythonCode(id, info, b_->python_payload);
    struct iovec part = {b_->python_payload, n};
    WriteMetaFrame(FrameType::kPythonCode, &part, 1);
  }

 private:
  ThreadBuffer* b_;
};

// Reads the calling thread's Python frames into the stack scratch. Out of
// line: only Python processes pay for its code.
__attribute__((noinline)) void CapturePython(ThreadBuffer* b, const PythonRuntime* rt,
                                             uint32_t epoch) {
  CodeWriter writer(b);
  CapturePythonStack(rt, &b->python_lines, &g.python_codes, epoch, b->python_raw, &b->python_code,
                     &b->scratch.python, &writer);
}

// Inlined so that the recorder's own frames above the capture stay few.
__attribute__((always_inline)) inline uint32_t Capture(ThreadBuffer* b) {
  bool is_new = false;
  uint32_t epoch = g.epoch.load(std::memory_order_relaxed);
  const PythonStack* python = nullptr;
  if (g.python_frames) {
    if (const PythonRuntime* rt = ActivePythonRuntime()) {
      CapturePython(b, rt, epoch);
      python = &b->scratch.python;
    }
  }
  uint32_t id =
      CaptureCallSite(&b->cache, g.stack_depth, epoch, &g.stacks, &b->scratch, &is_new, python);
  if (is_new) WriteStack(id, b->scratch);
  return id;
}

// Runs `append(encoder)` on the thread's batch, flushing around it as needed.
template <typename Append>
inline void AppendEvent(ThreadBuffer* b, uint64_t now_ns, Append append) {
  ClaimAsOwner(b);
  if (!b->enc.HasRoom()) Flush(b);
  if (t_dropped != 0) {
    g.dropped.fetch_add(t_dropped, std::memory_order_relaxed);
    b->enc.AppendDropped(t_dropped, now_ns);
    t_dropped = 0;
    if (!b->enc.HasRoom()) Flush(b);
  }
  append(b->enc);
  if (static_cast<int64_t>(now_ns - b->enc.first_time()) >=
      static_cast<int64_t>(kOwnerFlushAgeNs)) {
    Flush(b);
  }
  Release(b);
}

// --- Files ------------------------------------------------------------------

struct TlvWriter {
  uint8_t* p;
  uint8_t* end;
  void Unsigned(ProcessTag tag, uint64_t v) {
    uint8_t tmp[kMaxVarint];
    size_t n = static_cast<size_t>(PutVarint(tmp, v) - tmp);
    Raw(tag, tmp, n);
  }
  void Signed(ProcessTag tag, int64_t v) { Unsigned(tag, ZigZag(v)); }
  void Text(ProcessTag tag, const char* s) { Raw(tag, s, strlen(s)); }
  void Raw(ProcessTag tag, const void* data, size_t n) {
    if (static_cast<size_t>(end - p) < n + 2 * kMaxVarint) return;
    p = PutVarint(p, static_cast<uint64_t>(tag));
    p = PutVarint(p, n);
    memcpy(p, data, n);
    p += n;
  }
};

// Reads a whole small file with raw read(2) into buf; returns its length.
size_t ReadSmallFile(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t len = 0;
  while (len + 1 < cap) {
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += static_cast<size_t>(n);
  }
  close(fd);
  buf[len] = '\0';
  return len;
}

// Finds "key" at a line start in text and parses the number after it.
bool FindNumber(const char* text, size_t len, const char* key, uint64_t* value) {
  size_t klen = strlen(key);
  const char* p = text;
  const char* end = text + len;
  while (p < end) {
    if (static_cast<size_t>(end - p) > klen && memcmp(p, key, klen) == 0) {
      const char* q = p + klen;
      while (q < end && (*q == ' ' || *q == ':' || *q == '\t')) ++q;
      uint64_t v = 0;
      bool any = false;
      while (q < end && *q >= '0' && *q <= '9') {
        v = v * 10 + static_cast<uint64_t>(*q++ - '0');
        any = true;
      }
      if (any) {
        *value = v;
        return true;
      }
    }
    const char* nl = static_cast<const char*>(memchr(p, '\n', static_cast<size_t>(end - p)));
    if (nl == nullptr) break;
    p = nl + 1;
  }
  return false;
}

int64_t JobRank() {
  static const char* const kVars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                      "SLURM_PROCID", "RANK"};
  for (const char* var : kVars) {
    const char* v = getenv(var);
    if (v != nullptr && *v >= '0' && *v <= '9') return strtoll(v, nullptr, 10);
  }
  return -1;
}

void WriteProcessFrame(long forked_from, int64_t rank) {
  static uint8_t buf[16384];  // start-up and fork only, never concurrently
  TlvWriter w{buf, buf + sizeof(buf)};
  w.Unsigned(ProcessTag::kPid, static_cast<uint64_t>(getpid()));
  w.Unsigned(ProcessTag::kParentPid, static_cast<uint64_t>(getppid()));
  w.Text(ProcessTag::kProgram, g.exe);
  char cmdline[4096];
  size_t n = ReadSmallFile("/proc/self/cmdline", cmdline, sizeof(cmdline));
  while (n > 0 && cmdline[n - 1] == '\0') --n;
  w.Raw(ProcessTag::kCommandLine, cmdline, n);
  struct utsname u;
  if (uname(&u) == 0) w.Text(ProcessTag::kHostname, u.nodename);
  w.Signed(ProcessTag::kRank, rank);
  w.Unsigned(ProcessTag::kStartMonotonicNs, MonotonicNs());
  w.Unsigned(ProcessTag::kStartRealtimeNs, RealtimeNs());
  w.Unsigned(ProcessTag::kPageSize, static_cast<uint64_t>(g.page_size));
  long pages = sysconf(_SC_PHYS_PAGES);
  w.Unsigned(ProcessTag::kPhysicalBytes,
             pages > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(g.page_size) : 0);
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    w.Unsigned(ProcessTag::kMemlockLimit,
               rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(rl.rlim_cur));
  }
  char meminfo[8192];
  size_t mlen = ReadSmallFile("/proc/meminfo", meminfo, sizeof(meminfo));
  uint64_t swap_kib = 0;
  if (FindNumber(meminfo, mlen, "SwapTotal", &swap_kib)) {
    w.Unsigned(ProcessTag::kSwapTotalBytes, swap_kib * 1024);
  }
  w.Unsigned(ProcessTag::kSampleMs, g.sample_ms);
  w.Unsigned(ProcessTag::kStackDepth, static_cast<uint64_t>(g.stack_depth));
  w.Unsigned(ProcessTag::kBudgetBytes, g.budget);
  w.Text(ProcessTag::kMode, g.mode);
  w.Text(ProcessTag::kVersion, kVersionText);
  if (forked_from > 0) w.Unsigned(ProcessTag::kForkedFrom, static_cast<uint64_t>(forked_from));
  w.Unsigned(ProcessTag::kWcGuard, g.wc_guard ? 1 : 0);
  if (const PythonRuntime* rt = ActivePythonRuntime()) w.Text(ProcessTag::kPython, rt->description);
  w.Unsigned(ProcessTag::kPythonFrames, g.python_frames ? 1 : 0);
  w.Unsigned(ProcessTag::kCopyGuard, g.copy_guard ? 1 : 0);
  struct iovec part = {buf, static_cast<size_t>(w.p - buf)};
  WriteMetaFrame(FrameType::kProcess, &part, 1);
}

void WriteApiNames() {
  if (g.api_name == nullptr || g.api_count == 0) return;
  static uint8_t buf[65536];  // start-up and fork only
  uint8_t* p = buf;
  uint8_t* end = buf + sizeof(buf);
  uint8_t* count_at = p;
  p += kMaxVarint;  // room for the count, filled in below
  uint64_t count = 0;
  for (uint32_t id = 0; id < g.api_count; ++id) {
    const char* name = g.api_name(static_cast<ApiId>(id));
    if (name == nullptr || *name == '\0') continue;
    size_t n = strlen(name);
    if (static_cast<size_t>(end - p) < n + 2 * kMaxVarint) break;
    p = PutVarint(p, id);
    p = PutVarint(p, n);
    memcpy(p, name, n);
    p += n;
    ++count;
  }
  uint8_t head[kMaxVarint];
  size_t head_len = static_cast<size_t>(PutVarint(head, count) - head);
  memmove(count_at + head_len, count_at + kMaxVarint,
          static_cast<size_t>(p - (count_at + kMaxVarint)));
  memcpy(count_at, head, head_len);
  p -= kMaxVarint - head_len;
  struct iovec part = {buf, static_cast<size_t>(p - buf)};
  WriteMetaFrame(FrameType::kApiNames, &part, 1);
}

void WriteModules() {
  g.modules_lock.Lock();
  uint32_t gen = g.generation.load() + 1;
  size_t n_new = 0;
  size_t len =
      EncodeModuleMap(gen, g.exe, g.module_buf, kModuleBufBytes, g.new_keys, kMaxModules, &n_new);
  if (len > 0) {
    if (ModulesWentAway(g.keys, g.n_keys, g.new_keys, n_new)) {
      // Addresses may now belong to other code: stacks must be stored anew.
      g.epoch.fetch_add(1);
    }
    ModuleKey* t = g.keys;
    g.keys = g.new_keys;
    g.new_keys = t;
    g.n_keys = n_new;
    struct iovec part = {g.module_buf, len};
    WriteMetaFrame(FrameType::kModules, &part, 1);
    g.generation.store(gen, std::memory_order_release);
  }
  g.modules_lock.Unlock();
}

// The module maps' buffers, mapped once before recording starts, when no
// other thread uses them (the analysis cannot know that); false when the
// kernel refused one.
bool MapModuleBuffers() NO_THREAD_SAFETY_ANALYSIS {
  g.module_buf = static_cast<uint8_t*>(MapBytes(kModuleBufBytes));
  g.keys = static_cast<ModuleKey*>(MapBytes(kMaxModules * sizeof(ModuleKey)));
  g.new_keys = static_cast<ModuleKey*>(MapBytes(kMaxModules * sizeof(ModuleKey)));
  return g.module_buf != nullptr && g.keys != nullptr && g.new_keys != nullptr;
}

// In a fork child, where this thread is the only one (the analysis cannot
// know that): no map written yet, and the lock free of any parent thread.
void ForgetModuleMaps() NO_THREAD_SAFETY_ANALYSIS {
  g.n_keys = 0;
  g.modules_lock.Reset();
}

// --- Sampler ----------------------------------------------------------------

uint64_t PreadNumberField(int fd, int field) {
  char buf[256];
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = buf;
  for (int i = 0; i < field; ++i) {
    while (*p && *p != ' ') ++p;
    while (*p == ' ') ++p;
  }
  return strtoull(p, nullptr, 10);
}

void TakeSample(uint64_t now) {
  SampleEvent s{};
  s.time_ns = now;
  auto clamp = [](int64_t v) { return v < 0 ? uint64_t{0} : static_cast<uint64_t>(v); };
  s.pinned_program = clamp(g.pinned_program.load(std::memory_order_relaxed));
  s.registered_program = clamp(g.registered_program.load(std::memory_order_relaxed));
  s.pinned_pinshim = clamp(g.pinned_pinshim.load(std::memory_order_relaxed));
  if (g.statm_fd >= 0) {
    s.rss_bytes = PreadNumberField(g.statm_fd, 1) * static_cast<uint64_t>(g.page_size);
  }
  if (g.vmstat_fd >= 0) {
    char buf[16384];
    ssize_t n = pread(g.vmstat_fd, buf, sizeof(buf) - 1, 0);
    if (n > 0) {
      FindNumber(buf, static_cast<size_t>(n), "pswpin", &s.swap_ins);
      FindNumber(buf, static_cast<size_t>(n), "pswpout", &s.swap_outs);
    }
  }
  s.budget_bytes = g.budget;
  {
    RecorderEntry entry;
    ThreadBuffer* b = entry.buffer();
    if (b == nullptr) return;
    AppendEvent(b, now, [&](BatchEncoder& enc) { enc.AppendSample(s); });
  }
  g.samples.fetch_add(1, std::memory_order_relaxed);
}

// Records optimize mode's counters: when they changed since the sampler's
// last record, or always (`force`, at the end).
void TakeCounters(uint64_t now, bool force) {
  if (g.optimize_counters == nullptr) return;
  OptimizeCountersEvent c;
  memset(&c, 0, sizeof(c));
  if (!g.optimize_counters(&c)) return;
  if (!force && memcmp(&c, &g.last_counters, sizeof(c)) == 0) return;
  {
    RecorderEntry entry;
    ThreadBuffer* b = entry.buffer();
    if (b == nullptr) return;
    AppendEvent(b, now, [&](BatchEncoder& enc) { enc.AppendOptimizeCounters(c, now); });
  }
  if (!force) g.last_counters = c;
}

// Writes out batches that have waited too long in threads that went quiet.
void FlushIdle(uint64_t now, bool all) {
  for (ThreadBuffer* b = g.buffers.load(std::memory_order_acquire); b; b = b->next) {
    if (b == t_buffer && Reentered(Reentry::kRecorder)) continue;  // held by this very thread
    if (!ClaimAsFlusher(b, all)) continue;
    if (b->enc.count() > 0 && (all || now - b->enc.first_time() >= kIdleFlushAgeNs)) Flush(b);
    Release(b);
  }
}

void OnGuardedRead(void* ucontext, uintptr_t address) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  CapturedStack& s = b->scratch;
  uint32_t id = 0;
  if (CaptureFromSignalContext(ucontext, g.stack_depth, &s) > 0) {
    bool is_new = false;
    id = g.stacks.Intern(s, g.epoch.load(std::memory_order_relaxed), &is_new);
    if (is_new) WriteStack(id, s);
  }
  uint64_t now = MonotonicNs();
  AppendEvent(b, now, [&](BatchEncoder& enc) {
    enc.AppendMisuse(MisuseKind::kWcRead, reinterpret_cast<const void*>(address), 1, now, id,
                     static_cast<uint32_t>(WcReadVia::kPageGuard));
  });
}

// A plain load or store the copy guard caught (signal context).
void OnCopyGuardAccess(void* ucontext, uintptr_t address, bool write) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  CapturedStack& s = b->scratch;
  uint32_t id = 0;
  if (CaptureFromSignalContext(ucontext, g.stack_depth, &s) > 0) {
    bool is_new = false;
    id = g.stacks.Intern(s, g.epoch.load(std::memory_order_relaxed), &is_new);
    if (is_new) WriteStack(id, s);
  }
  uint64_t now = MonotonicNs();
  uint32_t detail = static_cast<uint32_t>(WcReadVia::kPageGuard) | (write ? kCopyAccessWrite : 0);
  AppendEvent(b, now, [&](BatchEncoder& enc) {
    enc.AppendMisuse(MisuseKind::kCopyRace, reinterpret_cast<const void*>(address), 1, now, id,
                     detail);
  });
}

// Whether a copy's host side is page-locked memory of the program's, whose
// asynchronous copies really run after the call returns (pageable memory
// is staged or copied before it returns; pinshim's own pinning is waited
// for by optimize mode).
bool WatchedKind(MemKind k) { return IsProgramPageLocked(k); }

// dlopen is interposed by a tail-jumping thunk (glibc resolves a bare name
// against the caller's RUNPATH, so pinshim cannot call it on the program's
// behalf), which leaves no point after the load to rewrite the module map.
// The loader's own counters say when the set of modules changed: checked
// every sampler tick and at the end, so a map is at most one tick late, and
// the analyzer looks a late-loaded module up in the next map.
struct LoadCounts {
  unsigned long long adds = 0;
  unsigned long long subs = 0;
};
LoadCounts g_load_counts;

int ReadLoadCounts(dl_phdr_info* info, size_t, void* data) {
  auto* c = static_cast<LoadCounts*>(data);
  c->adds = info->dlpi_adds;
  c->subs = info->dlpi_subs;
  return 1;  // the counters are the same in every entry
}

void RewriteModulesIfLoadsChanged() {
  LoadCounts now;
  IteratePhdr(ReadLoadCounts, &now);
  if (now.adds == g_load_counts.adds && now.subs == g_load_counts.subs) return;
  g_load_counts = now;
  NoteModulesChanged();
}

// A program that loads libpython itself (embedding it) gets Python frames
// from the next module change on.
void DetectPythonIfNew() {
  if (g.python_frames && ActivePythonRuntime() == nullptr) DetectPythonRuntime();
}

void* SamplerMain(void*) {
  prctl(PR_SET_NAME, "pinshim-sample", 0, 0, 0);
  uint32_t tick_ms = g.sample_ms != 0 ? g.sample_ms : 100;
  uint32_t window_ms = 2;
  if (g.wc_guard && tick_ms > window_ms) tick_ms = window_ms;
  uint64_t next_sample = 0;
  for (;;) {
    struct pollfd pfd = {g.wake_fd, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(tick_ms));
    if (r > 0) break;  // StopRecorder or the end of the process
    if (g.active.load() != 1) break;
    uint64_t now = MonotonicNs();
    if (g.sample_ms != 0 && now >= next_sample) {
      TakeSample(now);
      TakeCounters(now, false);
      next_sample = now + uint64_t{g.sample_ms} * 1000000;
    }
    RewriteModulesIfLoadsChanged();
    if (g.detail_ended.load(std::memory_order_acquire) && now >= g.next_totals_ns) {
      FlushIdle(now, true);
      WriteSiteTotals(false);
      g.next_totals_ns = now + kSiteTotalsPeriodNs;
    }
    FlushIdle(now, false);
    if (g.wc_guard) WcGuardTick(now, g.wc_guard_ms, window_ms);
  }
  return nullptr;
}

void OpenProcFiles() {
  g.statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  g.vmstat_fd = open("/proc/vmstat", O_RDONLY | O_CLOEXEC);
}

void StartSampler() {
  g.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g.wake_fd < 0) return;
  // Its module checks iterate the loaded modules: from here on a fork
  // waits until it is not inside (shim/core/phdr.h).
  InstallPhdrForkGuard();
  // The sampler takes none of the program's signals: its handlers must run
  // in the program's own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  g.sampler_running = pthread_create(&g.sampler, &attr, SamplerMain, nullptr) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// A new file: detail starts again, with no totals. Runs before recording
// starts (at start and in a fork child), when no other thread writes the
// file; the analysis cannot know that.
void ResetCappedFile() NO_THREAD_SAFETY_ANALYSIS {
  g.file_bytes.store(kFileHeaderBytes);
  g.appending.store(0);
  g.detail_ended.store(false);
  g.detail_end_ns.store(0);
  g.tail_lock.Reset();
  g.tail_ready = false;
  if (g.tail_fd >= 0) close(g.tail_fd);
  g.tail_fd = -1;
  g.tail_end = 0;
  g.totals_offset = g.totals_frame_bytes = g.totals_sequence = 0;
  g.next_totals_ns = 0;
  g.totals_written.store(0);
  g.positions_unknown.store(false);
  g.totals.Reset();
}

bool OpenTrace(long forked_from, char* err, size_t err_len) {
  g.owner_pid = static_cast<long>(getpid());
  g.write_failed.store(false, std::memory_order_relaxed);
  g.fd = CreateTraceFile(g.trace_dir, g.exe, static_cast<long>(getpid()), g.path, sizeof(g.path),
                         err, err_len);
  if (g.fd < 0) return false;
  ResetCappedFile();
  WriteProcessFrame(forked_from, JobRank());
  WriteApiNames();
  WriteModules();
  return true;
}

}  // namespace

bool StartRecorder(const RecorderOptions& options, char* err, size_t err_len) {
  if (g.active.load() == 1) {
    snprintf(err, err_len, "the trace recorder is already running");
    return false;
  }
  // A restart after StopRecorder writes a new file, which must define its
  // stacks again: a new epoch gives them new ids.
  if (g.stacks_ready) g.epoch.fetch_add(1);
  if (options.trace_dir == nullptr || options.trace_dir[0] == '\0') {
    snprintf(err, err_len, "no trace directory given");
    return false;
  }
  CopyText(g.trace_dir, sizeof(g.trace_dir), options.trace_dir);
  CopyText(g.mode, sizeof(g.mode), options.mode ? options.mode : "observe");
  g.sample_ms = options.sample_ms;
  g.stack_depth = options.stack_depth < 1                ? 1
                  : options.stack_depth > kMaxStackDepth ? kMaxStackDepth
                                                         : options.stack_depth;
  g.budget = options.budget_bytes;
  g.wc_guard = options.wc_guard;
  g.copy_guard = options.copy_guard;
  g.wc_guard_ms = options.wc_guard_ms == 0 ? 20 : options.wc_guard_ms;
  g.api_name = options.api_name;
  g.api_count = options.api_count;
  g.optimize_counters = options.optimize_counters;
  g.trace_max = options.trace_max;
  if (g.trace_max != 0 && g.totals_buf == nullptr) {
    g.totals_buf = static_cast<uint8_t*>(MapBytes(kMaxSiteTotalsBytes));
    if (g.totals_buf == nullptr) {
      snprintf(err, err_len, "cannot map memory for the trace's site totals");
      return false;
    }
  }
  memset(&g.last_counters, 0, sizeof(g.last_counters));
  g.python_frames = options.python_frames;
  long ps = sysconf(_SC_PAGESIZE);
  g.page_size = ps > 0 ? ps : 4096;
  ssize_t n = readlink("/proc/self/exe", g.exe, sizeof(g.exe) - 1);
  g.exe[n > 0 ? n : 0] = '\0';
  if (n <= 0) CopyText(g.exe, sizeof(g.exe), "program");
  if (!g.stacks_ready) {
    g.stacks_ready = g.stacks.Init(kStackSlotsLog2, kStackIpWords);
    const bool buffers = MapModuleBuffers();
    if (!g.stacks_ready || !buffers) {
      snprintf(err, err_len, "cannot map memory for the trace recorder");
      return false;
    }
    g.key_ok = pthread_key_create(&g.key, OnThreadExit) == 0;
    // Without it, stacks keep their native frames only.
    if (!g.python_codes.Init(16)) g.python_frames = false;
  }
  DetectPythonIfNew();
  if (!OpenTrace(0, err, err_len)) return false;
  OpenProcFiles();
  g.active.store(1, std::memory_order_release);
  if (g.wc_guard) {
    char guard_err[256];
    if (!StartWcGuard(OnGuardedRead, guard_err, sizeof(guard_err))) g.wc_guard = false;
  }
  if (g.copy_guard) {
    char guard_err[256];
    if (!StartCopyGuard(OnCopyGuardAccess, guard_err, sizeof(guard_err))) g.copy_guard = false;
  }
  StartSampler();
  return true;
}

bool RecorderActive() { return g.active.load(std::memory_order_relaxed) == 1; }

const char* RecorderTracePath() { return g.path; }

void RecordCopy(const CopyEvent& e, int device) {
  {
    RecorderEntry entry;
    ThreadBuffer* b = entry.buffer();
    if (b == nullptr) return;
    uint32_t stack = Capture(b);
    AppendEvent(b, e.end_ns, [&](BatchEncoder& enc) { enc.AppendCopy(e, stack, device); });
  }
  if (e.async && e.result == 0 && e.host_ptr != nullptr && e.bytes != 0) {
    const bool d2h = e.dir == CopyDir::kDeviceToHost;
    if ((d2h || e.dir == CopyDir::kHostToDevice) && WatchedKind(d2h ? e.dst_kind : e.src_kind)) {
      WatchCopy(e.host_ptr, e.bytes, d2h, e.stream,
                g.copy_guard ? CopyGuardPagesNow() : GuardPages::kNone);
    }
  }
}

void RecordPin(const PinEvent& e, int device) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  if (e.result == 0) {
    int64_t bytes = static_cast<int64_t>(e.bytes);
    switch (e.op) {
      case PinOp::kAlloc:
        g.pinned_program.fetch_add(bytes, std::memory_order_relaxed);
        if (e.flags & kPinFlagWriteCombined) AddWcRange(e.ptr, e.bytes);
        CopyWatchAddBlock(e.ptr, e.bytes);
        break;
      case PinOp::kFree:
        g.pinned_program.fetch_sub(bytes, std::memory_order_relaxed);
        RemoveWcRange(e.ptr);
        CopyWatchRemoveBlock(e.ptr);
        // The driver waited for the device before releasing (measured); the
        // freed range is unmapped already, so nothing is done to its pages.
        CopyWatchForgetRange(e.ptr, e.bytes, /*still_mapped=*/false);
        CopyWatchAllDone();
        break;
      case PinOp::kRegister:
        g.registered_program.fetch_add(bytes, std::memory_order_relaxed);
        break;
      case PinOp::kUnregister:
        g.registered_program.fetch_sub(bytes, std::memory_order_relaxed);
        CopyWatchAllDone();
        break;
    }
  }
  uint32_t stack = Capture(b);
  AppendEvent(b, e.end_ns, [&](BatchEncoder& enc) { enc.AppendPin(e, stack, device); });
}

void RecordHostAlloc(const HostAllocEvent& e) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  // Frees keep their stack too: releasing memory under an async copy is
  // reported where it is released.
  if (e.is_free) CopyWatchForgetRange(e.ptr, e.bytes, /*still_mapped=*/true);
  uint32_t stack = Capture(b);
  uint64_t now = MonotonicNs();
  AppendEvent(b, now, [&](BatchEncoder& enc) { enc.AppendHostAlloc(e, now, stack); });
}

void RecordSync(const SyncEvent& e) {
  {
    RecorderEntry entry;
    ThreadBuffer* b = entry.buffer();
    if (b == nullptr) return;
    AppendEvent(b, e.end_ns, [&](BatchEncoder& enc) { enc.AppendSync(e); });
  }
  if (e.result != 0) return;
  const uint64_t key = reinterpret_cast<uintptr_t>(e.event);
  switch (e.kind) {
    case SyncKind::kStreamSynchronize:
    case SyncKind::kStreamQueryDone: CopyWatchStreamDone(e.stream); break;
    case SyncKind::kContextSynchronize:
    case SyncKind::kDeviceFree: CopyWatchAllDone(); break;
    case SyncKind::kEventRecord: CopyWatchMark(key, e.stream); break;
    case SyncKind::kHostFuncQueued: CopyWatchMark(key | kHostFuncMarkBit, e.stream); break;
    case SyncKind::kEventSynchronize:
    case SyncKind::kEventQueryDone: CopyWatchMarkDone(key); break;
    case SyncKind::kHostFuncRun: CopyWatchMarkDone(key | kHostFuncMarkBit); break;
    default: break;
  }
}

void RecordStream(const StreamEvent& e) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  AppendEvent(b, e.end_ns, [&](BatchEncoder& enc) { enc.AppendStream(e); });
}

void RecordGraph(const GraphEvent& e) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  AppendEvent(b, e.end_ns, [&](BatchEncoder& enc) { enc.AppendGraph(e); });
}

bool CheckCopyAccess(const void* p, size_t len, bool write, WcReadVia via) {
  if (PINSHIM_LIKELY(!CopyWatchAny())) return false;
  if (g.active.load(std::memory_order_relaxed) != 1 || Reentered(Reentry::kRecorder)) return false;
  if (!TakeCopyAccess(p, len, write)) return false;
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return true;
  uint32_t stack = Capture(b);
  uint64_t now = MonotonicNs();
  uint32_t detail = static_cast<uint32_t>(via) | (write ? kCopyAccessWrite : 0);
  AppendEvent(b, now, [&](BatchEncoder& enc) {
    enc.AppendMisuse(MisuseKind::kCopyRace, p, len, now, stack, detail);
  });
  return true;
}

void RecordOwnPin(const OwnPinEvent& e) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  // A page change is the program's call, made on its thread: its stack is
  // where the program changed the pages.
  const uint32_t stack = IsPageChange(e.reason) ? Capture(b) : 0;
  uint64_t now = MonotonicNs();
  AppendEvent(b, now, [&](BatchEncoder& enc) { enc.AppendOwnPin(e, now, stack); });
}

void RecordPathVerdict(const PathVerdictFields& f) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  const uint64_t now = MonotonicNs();
  AppendEvent(b, now, [&](BatchEncoder& enc) { enc.AppendPathVerdict(f, now); });
}

void RecordBudgetDecision(const BudgetDecisionEvent& e) {
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return;
  // The stack runs through the budget and the hook into the program's
  // pinning call, which the report takes as the call site.
  uint32_t stack = Capture(b);
  uint64_t now = e.time_ns != 0 ? e.time_ns : MonotonicNs();
  AppendEvent(b, now, [&](BatchEncoder& enc) { enc.AppendBudgetDecision(e, now, stack); });
}

bool CheckWcRead(const void* src, size_t len, WcReadVia via) {
  if (g.active.load(std::memory_order_relaxed) != 1 || !OverlapsWc(src, len)) return false;
  RecorderEntry entry;
  ThreadBuffer* b = entry.buffer();
  if (b == nullptr) return true;
  uint32_t stack = Capture(b);
  uint64_t now = MonotonicNs();
  AppendEvent(b, now, [&](BatchEncoder& enc) {
    enc.AppendMisuse(MisuseKind::kWcRead, src, len, now, stack, static_cast<uint32_t>(via));
  });
  return true;
}

void DisarmWcGuardFor(const void* ptr, size_t len) {
  WcGuardDisarmFor(ptr, len);
  CopyGuardOpenFor(ptr, len);
}

bool InsideRecorder() { return Reentered(Reentry::kRecorder); }

void NotePinshimPinnedBytes(int64_t delta) {
  g.pinned_pinshim.fetch_add(delta, std::memory_order_relaxed);
}

void NoteModulesChanged() {
  if (g.active.load(std::memory_order_acquire) != 1) return;
  ReentryGuard inside(Reentry::kRecorder);
  WriteModules();
  IteratePhdr(ReadLoadCounts, &g_load_counts);
  DetectPythonIfNew();
}

void RecorderAfterForkInChild() {
  if (g.active.load() != 1) return;
  g.active.store(0);
  // The parent's sampler did not come along; the parent still owns its file
  // and writes its own buffers, so the child forgets both.
  g.sampler_running = false;
  if (g.wake_fd >= 0) close(g.wake_fd);
  g.wake_fd = -1;
  if (g.fd >= 0) close(g.fd);
  if (g.statm_fd >= 0) close(g.statm_fd);  // /proc/self meant the parent
  if (g.vmstat_fd >= 0) close(g.vmstat_fd);
  g.fd = g.statm_fd = g.vmstat_fd = -1;
  StopWcGuard();
  for (ThreadBuffer* b = g.buffers.load(); b; b = b->next) {
    b->state.store(kIdle);
    b->enc.Reset();
    if (b != t_buffer) b->in_use.store(0);  // its thread does not exist here
  }
  if (t_buffer != nullptr) t_buffer->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  ReentryGuard::ClearAfterFork(Reentry::kRecorder);
  t_dropped = 0;
  g.stacks.Reset();
  g.python_codes.Reset();  // the child's trace defines its code objects anew
  g.epoch.fetch_add(1);
  g.generation.store(0);
  ForgetModuleMaps();
  // A fork child has no CUDA context: the parent's pinned memory is not its own.
  g.pinned_program.store(0);
  g.registered_program.store(0);
  g.pinned_pinshim.store(0);
  g.dropped.store(0);
  memset(&g.last_counters, 0, sizeof(g.last_counters));
  // The parent's copies are not the child's to race with.
  CopyWatchReset();
  char err[256];
  long parent = static_cast<long>(getppid());
  if (!OpenTrace(parent, err, sizeof(err))) return;
  OpenProcFiles();
  g.active.store(1, std::memory_order_release);
  if (g.wc_guard) {
    char guard_err[256];
    if (!StartWcGuard(OnGuardedRead, guard_err, sizeof(guard_err))) g.wc_guard = false;
  }
  StartSampler();
}

namespace {

void WriteEnd() {
  uint8_t payload[3 * kMaxVarint];
  uint8_t* p = PutVarint(payload, g.dropped.load());
  p = PutVarint(p, g.stacks.overflows());
  p = PutVarint(p, MonotonicNs());
  struct iovec part = {payload, static_cast<size_t>(p - payload)};
  WriteMetaFrame(FrameType::kEnd, &part, 1);
}

}  // namespace

bool RecorderOwnedHere() {
  return g.owner_pid != 0 && g.owner_pid == static_cast<long>(syscall(SYS_getpid));
}

void RecorderBeforeExec() {
  if (g.active.load(std::memory_order_acquire) != 1) return;
  // A vfork child (or a clone without fork's handlers) runs on the parent's
  // memory: whatever it did here would be done to the parent's trace.
  if (!RecorderOwnedHere()) return;
  TakeCounters(MonotonicNs(), true);
  FlushIdle(MonotonicNs(), true);
  {
    // A signal handler on this thread must not wait for the tail it holds.
    ReentryGuard inside(Reentry::kRecorder);
    WriteSiteTotals(true);
  }
  WriteEnd();
}

void StopRecorder() {
  if (g.active.load() != 0 && !RecorderOwnedHere()) return;  // see RecorderBeforeExec
  if (g.active.load() == 1) {
    RewriteModulesIfLoadsChanged();
    TakeCounters(MonotonicNs(), true);  // the last word on optimize mode
  }
  int expected = 1;
  if (!g.active.compare_exchange_strong(expected, 2)) return;
  if (g.sampler_running) {
    uint64_t one = 1;
    ssize_t ignored = write(g.wake_fd, &one, sizeof(one));
    (void)ignored;
    if (!pthread_equal(pthread_self(), g.sampler)) pthread_join(g.sampler, nullptr);
    g.sampler_running = false;
  }
  StopWcGuard();
  CopyWatchReset();
  FlushIdle(MonotonicNs(), true);
  WriteSiteTotals(true);
  WriteEnd();
  // The descriptor stays open: a thread that saw the recorder active a moment
  // ago may still write a frame, and must not hit a reused descriptor.
}

RecorderStats GetRecorderStats() {
  RecorderStats s{};
  if (t_buffer != nullptr) {
    s.unwind_cache_hits = t_buffer->cache.hits;
    s.unwind_cache_misses = t_buffer->cache.misses;
  }
  s.dropped = g.dropped.load();
  s.batches_written = g.batches.load();
  s.bytes_written = g.bytes.load();
  s.samples_taken = g.samples.load();
  s.detail_ended = g.detail_ended.load();
  s.site_totals_written = g.totals_written.load();
  return s;
}

}  // namespace trace
}  // namespace pinshim
