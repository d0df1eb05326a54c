// The harness without a driver: device memory is host memory, copies are
// memcpy, and every call is reported to the trace recorder the way the hooks
// report it (see cuda_harness.h). Configuration comes from the environment,
// like the preloaded library's: PINSHIM_TRACE_DIR (no trace without it),
// PINSHIM_SAMPLE_MS, PINSHIM_BUDGET (bytes), PINSHIM_WC_GUARD=1,
// PINSHIM_STACK_DEPTH, PINSHIM_MODE and PINSHIM_POLICY.
//
// With PINSHIM_MODE containing "enforce" and a PINSHIM_BUDGET, the program's
// pinned allocations and registrations are charged against that process
// budget by enforce mode's own code: a budget::Budget, the decision the
// pinned-memory hooks make (budget::ChargeAndPin) and the recorder callback
// the library installs (trace::RecordBudgetDecisionRecord). A charge that
// does not fit is refused under PINSHIM_POLICY: "deny" (the default) makes
// HostAlloc return null and HostRegister register nothing; "fallback"
// serves pageable memory and leaves registrations unpinned.
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "shim/budget/budget.h"
#include "shim/trace/budget_decisions.h"
#include "shim/trace/recorder.h"
#include "shim/trace/wc_guard.h"
#include "tests/trace/harness/cuda_harness.h"

namespace pinshim {
namespace testing {
namespace {

enum HarnessApi : ApiId {
  kCopyHtoD,
  kCopyDtoH,
  kCopyHtoDAsync,
  kCopyDtoHAsync,
  kHostAllocApi,
  kFreeHostApi,
  kRegisterApi,
  kUnregisterApi,
  kStreamSyncApi,
  kCtxSyncApi,
  kEventRecordApi,
  kEventSyncApi,
  kStreamCreateApi,
  kApiCount,
};

const char* ApiName(ApiId id) {
  static const char* const kNames[] = {
      "cuMemcpyHtoD_v2",     "cuMemcpyDtoH_v2",  "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
      "cuMemHostAlloc",      "cuMemFreeHost",    "cuMemHostRegister_v2", "cuMemHostUnregister",
      "cuStreamSynchronize", "cuCtxSynchronize", "cuEventRecord",        "cuEventSynchronize",
      "cuStreamCreate"};
  return id < kApiCount ? kNames[id] : nullptr;
}

// The real libc functions behind the interposed ones.
struct Real {
  void* (*memcpy)(void*, const void*, size_t);
  void* (*memmove)(void*, const void*, size_t);
  void* (*memset)(void*, int, size_t);
  int (*memcmp)(const void*, const void*, size_t);
  size_t (*strlen)(const char*);
  size_t (*fwrite)(const void*, size_t, size_t, FILE*);
  ssize_t (*write)(int, const void*, size_t);
};
Real g_real;

// Used only until dlsym has answered (dlsym itself may copy memory).
void* ByteCopy(void* d, const void* s, size_t n) {
  volatile unsigned char* dd = static_cast<volatile unsigned char*>(d);
  const volatile unsigned char* ss = static_cast<const volatile unsigned char*>(s);
  if (dd < ss) {
    for (size_t i = 0; i < n; ++i) dd[i] = ss[i];
  } else {
    for (size_t i = n; i > 0; --i) dd[i - 1] = ss[i - 1];
  }
  return d;
}

int ByteCompare(const void* a, const void* b, size_t n) {
  const volatile unsigned char* x = static_cast<const volatile unsigned char*>(a);
  const volatile unsigned char* y = static_cast<const volatile unsigned char*>(b);
  for (size_t i = 0; i < n; ++i) {
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  }
  return 0;
}

size_t ByteLength(const char* s) {
  const volatile char* p = s;
  size_t n = 0;
  while (p[n] != '\0') ++n;
  return n;
}

// Finds the libc functions; the interposers may run before any constructor
// (other libraries' constructors copy memory too), and dlsym itself may call
// them, so until it has answered they fall back to byte loops.
void Resolve() {
  static std::atomic<int> state{0};  // 0 not yet, 1 resolving, 2 done
  int expected = 0;
  if (!state.compare_exchange_strong(expected, 1)) return;
  Real r{};
  r.memcpy = reinterpret_cast<decltype(r.memcpy)>(dlsym(RTLD_NEXT, "memcpy"));
  r.memmove = reinterpret_cast<decltype(r.memmove)>(dlsym(RTLD_NEXT, "memmove"));
  r.memset = reinterpret_cast<decltype(r.memset)>(dlsym(RTLD_NEXT, "memset"));
  r.memcmp = reinterpret_cast<decltype(r.memcmp)>(dlsym(RTLD_NEXT, "memcmp"));
  r.strlen = reinterpret_cast<decltype(r.strlen)>(dlsym(RTLD_NEXT, "strlen"));
  r.fwrite = reinterpret_cast<decltype(r.fwrite)>(dlsym(RTLD_NEXT, "fwrite"));
  r.write = reinterpret_cast<decltype(r.write)>(dlsym(RTLD_NEXT, "write"));
  g_real = r;
  state.store(2);
}

void* RealMemcpy(void* d, const void* s, size_t n) {
  if (g_real.memcpy == nullptr) Resolve();
  return g_real.memcpy ? g_real.memcpy(d, s, n) : ByteCopy(d, s, n);
}

struct Range {
  size_t bytes;
  MemKind kind;
  unsigned flags;
  uint64_t alloc_id;
  bool mapped;  // came from mmap (HostAlloc)
};

std::mutex g_mu;
std::map<uintptr_t, Range>* g_ranges;  // pinned, registered and tracked malloc ranges
std::atomic<uint64_t> g_next_id{0};
thread_local int t_device = 0;

// Enforce mode's process budget (see the top of this file).
budget::Budget g_budget;
bool g_enforce = false;

// The budget a pinning is charged to; null outside enforce mode.
budget::Budget* EnforceBudget() { return g_enforce ? &g_budget : nullptr; }

uint64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// What kind of host memory p is, and which tracked allocation owns it.
MemKind Classify(const void* p, unsigned* flags, uint64_t* alloc_id) {
  std::lock_guard<std::mutex> lock(g_mu);
  *flags = 0;
  *alloc_id = 0;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  MemKind kind = MemKind::kPageable;
  // A registration lies inside a tracked allocation: the registration decides
  // the kind, the allocation the owner.
  for (auto it = g_ranges->upper_bound(a); it != g_ranges->begin();) {
    --it;
    if (a - it->first >= it->second.bytes) {
      if (it->first + (64ull << 30) < a) break;
      continue;
    }
    if (it->second.kind != MemKind::kPageable && kind == MemKind::kPageable) {
      kind = it->second.kind;
      *flags = it->second.flags;
    }
    if (it->second.alloc_id != 0 && *alloc_id == 0) *alloc_id = it->second.alloc_id;
  }
  return kind;
}

void Copy(ApiId api, CopyDir dir, void* dst, const void* src, size_t bytes, bool async,
          void* stream) {
  CopyEvent e{};
  e.api = api;
  e.dir = dir;
  e.async = async;
  e.bytes = bytes;
  e.stream = stream;
  const void* host = dir == CopyDir::kHostToDevice ? src : dst;
  unsigned flags;
  uint64_t alloc_id;
  MemKind kind = Classify(host, &flags, &alloc_id);
  e.src_kind = dir == CopyDir::kHostToDevice ? kind : MemKind::kDevice;
  e.dst_kind = dir == CopyDir::kHostToDevice ? MemKind::kDevice : kind;
  e.host_ptr = host;
  e.host_alloc_id = alloc_id;
  e.host_flags = flags;
  // As the hooks must: no guarded page may meet the driver.
  trace::DisarmWcGuardFor(host, bytes);
  e.start_ns = Now();
  RealMemcpy(dst, src, bytes);
  e.end_ns = Now();
  trace::RecordCopy(e, t_device);
}

void Pin(ApiId api, PinOp op, void* p, size_t bytes, unsigned flags, uint64_t start) {
  PinEvent e{};
  e.api = api;
  e.op = op;
  e.ptr = p;
  e.bytes = bytes;
  e.flags = flags;
  e.start_ns = start;
  e.end_ns = Now();
  trace::RecordPin(e, t_device);
}

void Sync(ApiId api, trace::SyncKind kind, void* stream, void* event, uint64_t start) {
  trace::SyncEvent e{};
  e.api = api;
  e.kind = kind;
  e.stream = stream;
  e.event = event;
  e.start_ns = start;
  e.end_ns = Now();
  e.device = t_device;
  trace::RecordSync(e);
}

uint64_t EnvNumber(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? strtoull(v, nullptr, 10) : fallback;
}

// As the hooks do: the child of a fork gets a trace of its own.
void AfterForkInChild() { trace::RecorderAfterForkInChild(); }

__attribute__((constructor(101))) void Start() {
  Resolve();
  g_ranges = new std::map<uintptr_t, Range>;
  const char* mode = getenv("PINSHIM_MODE");
  const char* policy = getenv("PINSHIM_POLICY");
  const uint64_t budget_bytes = EnvNumber("PINSHIM_BUDGET", 0);
  if (mode != nullptr && strstr(mode, "enforce") != nullptr && budget_bytes != 0) {
    budget::BudgetOptions options;
    options.process_bytes = budget_bytes;
    const bool fallback = policy != nullptr && strcmp(policy, "fallback") == 0;
    options.policy = fallback ? Policy::kFallback : Policy::kDeny;
    g_enforce = g_budget.Init(options).ok();
    g_budget.SetRecorder(trace::RecordBudgetDecisionRecord);
  }
  const char* dir = getenv("PINSHIM_TRACE_DIR");
  if (dir == nullptr || *dir == '\0') return;
  trace::RecorderOptions o;
  o.trace_dir = dir;
  if (mode != nullptr && *mode != '\0') o.mode = mode;
  o.sample_ms = static_cast<uint32_t>(EnvNumber("PINSHIM_SAMPLE_MS", 10));
  o.budget_bytes = EnvNumber("PINSHIM_BUDGET", 0);
  o.wc_guard = EnvNumber("PINSHIM_WC_GUARD", 0) != 0;
  o.copy_guard = EnvNumber("PINSHIM_COPY_GUARD", 0) != 0;
  o.stack_depth = static_cast<int>(EnvNumber("PINSHIM_STACK_DEPTH", trace::kDefaultStackDepth));
  o.api_name = ApiName;
  o.api_count = kApiCount;
  char err[256];
  if (!trace::StartRecorder(o, err, sizeof(err))) {
    fprintf(stderr, "harness: %s\n", err);
    return;
  }
  pthread_atfork(nullptr, nullptr, AfterForkInChild);
}

__attribute__((destructor)) void Stop() { trace::StopRecorder(); }

}  // namespace

// The interposed libc functions, reached through tail calls so that their
// frames vanish like the preloaded library's (which the report trims). They
// are noexcept like the libc declarations: a noexcept caller of a throwing
// function needs an exception region, which rules the tail call out.
__attribute__((noinline)) void* CheckedMemcpy(void* d, const void* s, size_t n) noexcept {
  trace::CheckWcRead(s, n, trace::WcReadVia::kMemcpy);
  trace::CheckCopyAccess(s, n, false, trace::WcReadVia::kMemcpy);
  trace::CheckCopyAccess(d, n, true, trace::WcReadVia::kMemcpy);
  return RealMemcpy(d, s, n);
}
__attribute__((noinline)) void* CheckedMemmove(void* d, const void* s, size_t n) noexcept {
  if (g_real.memmove == nullptr) Resolve();
  trace::CheckWcRead(s, n, trace::WcReadVia::kMemmove);
  trace::CheckCopyAccess(s, n, false, trace::WcReadVia::kMemmove);
  trace::CheckCopyAccess(d, n, true, trace::WcReadVia::kMemmove);
  return g_real.memmove ? g_real.memmove(d, s, n) : ByteCopy(d, s, n);
}
__attribute__((noinline)) void* CheckedMemset(void* d, int c, size_t n) noexcept {
  if (g_real.memset == nullptr) Resolve();
  trace::CheckCopyAccess(d, n, true, trace::WcReadVia::kOther);
  if (g_real.memset != nullptr) return g_real.memset(d, c, n);
  volatile unsigned char* p = static_cast<volatile unsigned char*>(d);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(c);
  return d;
}
__attribute__((noinline)) int CheckedMemcmp(const void* a, const void* b, size_t n) noexcept {
  if (g_real.memcmp == nullptr) Resolve();
  if (!trace::CheckWcRead(a, n, trace::WcReadVia::kMemcmp)) {
    trace::CheckWcRead(b, n, trace::WcReadVia::kMemcmp);
  }
  trace::CheckCopyAccess(a, n, false, trace::WcReadVia::kMemcmp);
  trace::CheckCopyAccess(b, n, false, trace::WcReadVia::kMemcmp);
  return g_real.memcmp ? g_real.memcmp(a, b, n) : ByteCompare(a, b, n);
}
__attribute__((noinline)) size_t CheckedStrlen(const char* s) noexcept {
  if (g_real.strlen == nullptr) Resolve();
  size_t n = g_real.strlen ? g_real.strlen(s) : ByteLength(s);
  trace::CheckWcRead(s, n + 1, trace::WcReadVia::kString);
  trace::CheckCopyAccess(s, n + 1, false, trace::WcReadVia::kString);
  return n;
}
__attribute__((noinline)) size_t CheckedFwrite(const void* p, size_t size, size_t n,
                                               FILE* f) noexcept {
  if (g_real.fwrite == nullptr) Resolve();
  trace::CheckWcRead(p, size * n, trace::WcReadVia::kStdio);
  trace::CheckCopyAccess(p, size * n, false, trace::WcReadVia::kStdio);
  return g_real.fwrite(p, size, n, f);
}
__attribute__((noinline)) ssize_t CheckedWrite(int fd, const void* p, size_t n) noexcept {
  if (g_real.write == nullptr) Resolve();
  trace::CheckWcRead(p, n, trace::WcReadVia::kStdio);
  trace::CheckCopyAccess(p, n, false, trace::WcReadVia::kStdio);
  trace::DisarmWcGuardFor(p, n);
  return g_real.write(fd, p, n);
}

namespace cuda {

void SetDevice(int device) { t_device = device; }

int DeviceCount() { return 2; }

void* DeviceAlloc(size_t bytes) { return malloc(bytes); }

void DeviceFree(void* p) { free(p); }

void* Malloc(size_t bytes) {
  void* p = malloc(bytes);
  if (p == nullptr || bytes < 64 * 1024) return p;
  uint64_t id = ++g_next_id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    (*g_ranges)[reinterpret_cast<uintptr_t>(p)] = Range{bytes, MemKind::kPageable, 0, id, false};
  }
  HostAllocEvent e{id, p, bytes, false, 0};
  trace::RecordHostAlloc(e);
  return p;
}

void Free(void* p) {
  Range r{};
  bool tracked = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ranges->find(reinterpret_cast<uintptr_t>(p));
    if (it != g_ranges->end() && it->second.alloc_id != 0 && !it->second.mapped) {
      r = it->second;
      tracked = true;
      g_ranges->erase(it);
    }
  }
  if (tracked) {
    HostAllocEvent e{r.alloc_id, p, r.bytes, true, 0};
    trace::RecordHostAlloc(e);
  }
  free(p);
}

void* MapPages(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) abort();
  if (bytes < 64 * 1024) return p;
  uint64_t id = ++g_next_id;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    (*g_ranges)[reinterpret_cast<uintptr_t>(p)] = Range{bytes, MemKind::kPageable, 0, id, false};
  }
  HostAllocEvent e{id, p, bytes, false, 1};
  trace::RecordHostAlloc(e);
  return p;
}

void UnmapPages(void* p, size_t bytes) {
  Range r{};
  bool tracked = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ranges->find(reinterpret_cast<uintptr_t>(p));
    if (it != g_ranges->end() && it->second.alloc_id != 0) {
      r = it->second;
      tracked = true;
      g_ranges->erase(it);
    }
  }
  if (tracked) {
    HostAllocEvent e{r.alloc_id, p, r.bytes, true, 1};
    trace::RecordHostAlloc(e);
  }
  munmap(p, bytes);
}

void* HostAlloc(size_t bytes, unsigned flags) {
  uint64_t start = Now();
  size_t len = (bytes + 4095) & ~size_t{4095};
  auto map = [len] {
    return mmap(nullptr, len == 0 ? 4096 : len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  };
  void* p = MAP_FAILED;
  const budget::Decision decision =
      budget::ChargeAndPin(EnforceBudget(), budget::Owner::kProgramAlloc, bytes, [&] {
        p = map();
        return p != MAP_FAILED;
      });
  if (decision == budget::Decision::kDenied) return nullptr;
  const bool pinned = decision == budget::Decision::kGranted;
  if (!pinned) p = map();  // pageable memory in its place
  if (p == MAP_FAILED) return nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    (*g_ranges)[reinterpret_cast<uintptr_t>(p)] =
        Range{bytes, pinned ? MemKind::kPinnedByProgram : MemKind::kPageable, flags, 0, true};
  }
  // Pageable memory served instead: the program's call succeeds, and no
  // pinned allocation exists for the trace to record.
  if (!pinned) return p;
  Pin(kHostAllocApi, PinOp::kAlloc, p, bytes, flags, start);
  return p;
}

void FreeHost(void* p) {
  uint64_t start = Now();
  Range r{};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ranges->find(reinterpret_cast<uintptr_t>(p));
    if (it == g_ranges->end()) return;
    r = it->second;
    g_ranges->erase(it);
  }
  trace::DisarmWcGuardFor(p, r.bytes);
  munmap(p, (r.bytes + 4095) & ~size_t{4095});
  if (r.kind != MemKind::kPinnedByProgram) return;  // served pageable: never pinned
  if (g_enforce) g_budget.Release(budget::Owner::kProgramAlloc, r.bytes);
  Pin(kFreeHostApi, PinOp::kFree, p, r.bytes, r.flags, start);
}

void HostRegister(void* p, size_t bytes, unsigned flags) {
  uint64_t start = Now();
  // Refused either way the program's memory stays as it was: denied, the
  // call fails; fallback, it succeeds without pinning.
  const budget::Decision decision =
      budget::ChargeAndPin(EnforceBudget(), budget::Owner::kProgramRegister, bytes, [&] {
        std::lock_guard<std::mutex> lock(g_mu);
        // Registering a tracked allocation in place: one entry serves both, the
        // kind from the registration, the owner from the allocation.
        uint64_t owner = 0;
        auto it = g_ranges->find(reinterpret_cast<uintptr_t>(p));
        if (it != g_ranges->end()) owner = it->second.alloc_id;
        (*g_ranges)[reinterpret_cast<uintptr_t>(p)] =
            Range{bytes, MemKind::kRegisteredByProgram, flags, owner, false};
        return true;
      });
  if (decision != budget::Decision::kGranted) return;
  Pin(kRegisterApi, PinOp::kRegister, p, bytes, flags, start);
}

void HostUnregister(void* p) {
  uint64_t start = Now();
  Range r{};
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_ranges->find(reinterpret_cast<uintptr_t>(p));
    if (it == g_ranges->end() || it->second.kind != MemKind::kRegisteredByProgram) return;
    r = it->second;
    if (r.alloc_id != 0) {
      it->second.kind = MemKind::kPageable;  // back to the tracked allocation
      it->second.flags = 0;
    } else {
      g_ranges->erase(it);
    }
  }
  if (g_enforce) g_budget.Release(budget::Owner::kProgramRegister, r.bytes);
  Pin(kUnregisterApi, PinOp::kUnregister, p, r.bytes, r.flags, start);
}

void MemcpyHtoD(void* d, const void* s, size_t n) {
  Copy(kCopyHtoD, CopyDir::kHostToDevice, d, s, n, false, nullptr);
}
void MemcpyDtoH(void* d, const void* s, size_t n) {
  Copy(kCopyDtoH, CopyDir::kDeviceToHost, d, s, n, false, nullptr);
}
void MemcpyHtoDAsync(void* d, const void* s, size_t n, Stream stream) {
  Copy(kCopyHtoDAsync, CopyDir::kHostToDevice, d, s, n, true, stream);
}
void MemcpyDtoHAsync(void* d, const void* s, size_t n, Stream stream) {
  Copy(kCopyDtoHAsync, CopyDir::kDeviceToHost, d, s, n, true, stream);
}

Stream StreamCreate() {
  uint64_t start = Now();
  void* s = malloc(16);
  trace::StreamEvent e{};
  e.api = kStreamCreateApi;
  e.stream = s;
  e.flags = 0;  // CU_STREAM_DEFAULT, as the driver backend creates them
  e.start_ns = start;
  e.end_ns = Now();
  e.device = t_device;
  trace::RecordStream(e);
  return s;
}
void StreamDestroy(Stream s) { free(s); }
void StreamSynchronize(Stream s) {
  Sync(kStreamSyncApi, trace::SyncKind::kStreamSynchronize, s, nullptr, Now());
}
void CtxSynchronize() {
  Sync(kCtxSyncApi, trace::SyncKind::kContextSynchronize, nullptr, nullptr, Now());
}
Event EventCreate() { return malloc(16); }
void EventRecord(Event e, Stream s) {
  Sync(kEventRecordApi, trace::SyncKind::kEventRecord, s, e, Now());
}
void EventSynchronize(Event e) {
  Sync(kEventSyncApi, trace::SyncKind::kEventSynchronize, nullptr, e, Now());
}

long GuardedReadsSoFar() { return static_cast<long>(trace::WcGuardReads()); }

}  // namespace cuda
}  // namespace testing
}  // namespace pinshim

extern "C" {
void* memcpy(void* d, const void* s, size_t n) noexcept {
  return pinshim::testing::CheckedMemcpy(d, s, n);
}
void* memmove(void* d, const void* s, size_t n) noexcept {
  return pinshim::testing::CheckedMemmove(d, s, n);
}
void* memset(void* d, int c, size_t n) noexcept { return pinshim::testing::CheckedMemset(d, c, n); }
int memcmp(const void* a, const void* b, size_t n) noexcept {
  return pinshim::testing::CheckedMemcmp(a, b, n);
}
size_t strlen(const char* s) noexcept { return pinshim::testing::CheckedStrlen(s); }
size_t fwrite(const void* p, size_t size, size_t n, FILE* f) {
  return pinshim::testing::CheckedFwrite(p, size, n, f);
}
ssize_t write(int fd, const void* p, size_t n) { return pinshim::testing::CheckedWrite(fd, p, n); }

// exec replaces the process without exit handlers: the trace is flushed first.
int execve(const char* path, char* const argv[], char* const envp[]) noexcept {
  using Fn = int (*)(const char*, char* const[], char* const[]);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "execve"));
  pinshim::trace::RecorderBeforeExec();
  return real(path, argv, envp);
}
int execv(const char* path, char* const argv[]) noexcept { return execve(path, argv, environ); }

// _exit skips exit handlers too; the trace gets its last events and end record.
[[noreturn]] void _exit(int status) {
  using Fn = void (*)(int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "_exit"));
  pinshim::trace::StopRecorder();
  real(status);
  __builtin_unreachable();
}
}
