#include "shim/hooks/state.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "shim/budget/budget.h"
#include "shim/core/log.h"
#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_frames.h"
#include "shim/optimize/site_profile.h"
#include "shim/trace/recorder.h"

extern char** environ;
extern "C" char* program_invocation_short_name;

namespace pinshim {

const char* ApiName(ApiId api);  // driver_table.cc
uint32_t kApiCountForTrace();    // driver_table.cc

RealFunctions g_real;
Config g_config;
std::atomic<bool> g_initialized{false};
uint64_t g_track_threshold = UINT64_MAX;
std::atomic<bool> g_cuda_seen{false};
bool g_enforce = false;
bool g_optimize = false;
bool g_redirect_sites = false;
Registry g_allocations;
Registry g_registrations;
std::atomic<uint64_t> g_tracked_mallocs{0};
PINSHIM_TLS int t_depth = 0;

namespace {

std::atomic<uint64_t> g_next_alloc_id{1};
std::atomic<int> g_init_state{0};  // 0 not started, 1 running, 2 done
PINSHIM_TLS bool t_resolving = false;

template <typename T>
void Next(T* out, const char* name) {
  *out = reinterpret_cast<T>(dlsym(RTLD_NEXT, name));
}

void StartMetricsThread();

void AtForkPrepare() {
  if (g_optimize) optimize::Optimizer::Process().PrepareFork();
  g_allocations.LockForFork();
  g_registrations.LockForFork();
}

void AtForkParent() {
  g_registrations.UnlockAfterFork();
  g_allocations.UnlockAfterFork();
  if (g_optimize) optimize::Optimizer::Process().AfterForkParent();
}

void AtForkChild() {
  g_registrations.UnlockAfterFork();
  g_allocations.UnlockAfterFork();
  if (g_optimize) optimize::Optimizer::Process().AfterForkChild();
  // The child reports its own calls only; the memory layout it inherited
  // (and so the registries) stays valid.
  ResetStats();
  trace::RecorderAfterForkInChild();
  StartMetricsThread();
}

// Optimize mode's line of the summary: what pinshim pinned and reused.
void WriteOptimizeSummary(int fd) {
  if (!g_optimize || !optimize::Optimizer::Process().active()) return;
  const optimize::OptimizeCounters c = optimize::Optimizer::Process().Counters();
  char line[512];
  int n = snprintf(line, sizeof(line),
                   "pinshim: optimize pinned_now=%llu pinned_peak=%llu pool_hits=%llu "
                   "pool_misses=%llu cache_registrations=%llu cache_hits=%llu arena_allocs=%llu "
                   "hot_sites=%llu profile_sites=%llu saved_copy_ns=%llu saved_alloc_ns=%llu "
                   "page_change_drops=%llu staged_copies=%llu staged_bytes=%llu\n",
                   (unsigned long long)c.pinned_bytes_now,
                   (unsigned long long)c.pinned_bytes_peak, (unsigned long long)c.pool.hits,
                   (unsigned long long)c.pool.misses, (unsigned long long)c.cache.registrations,
                   (unsigned long long)c.cache.hits, (unsigned long long)c.arena.allocs,
                   (unsigned long long)c.hot_sites, (unsigned long long)c.hot_sites_from_profile,
                   (unsigned long long)c.saved_copy_ns, (unsigned long long)c.saved_alloc_ns,
                   (unsigned long long)c.page_change_drops, (unsigned long long)c.stager.copies,
                   (unsigned long long)c.stager.bytes);
  if (n > 0) WriteAll(fd, line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
}

void WriteSummaryAtExit() {
  if (g_config.summary == SummaryTarget::kNone || !g_cuda_seen.load()) return;
  char mode[64];
  FormatMode(g_config.mode, mode, sizeof(mode));
  const char* program = program_invocation_short_name ? program_invocation_short_name : "?";
  if (g_config.summary == SummaryTarget::kStderr) {
    WriteSummary(STDERR_FILENO, getpid(), program, mode, ApiName);
    WriteOptimizeSummary(STDERR_FILENO);
    return;
  }
  char path[kConfigPathMax];
  if (!ExpandPidPattern(g_config.summary_path, getpid(), path, sizeof(path))) {
    LogLine("PINSHIM_SUMMARY path too long; summary not written");
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    LogLine("cannot write summary to %s: %s", path, strerror(errno));
    return;
  }
  WriteSummary(fd, getpid(), program, mode, ApiName);
  WriteOptimizeSummary(fd);
  close(fd);
}

// The metrics file is rewritten every few seconds by a thread of pinshim's
// own, started only when PINSHIM_METRICS_FILE is set in enforce mode. It takes
// none of the program's signals. A fork child starts its own.
constexpr unsigned kMetricsPeriodMs = 2000;

void* MetricsMain(void*) {
  prctl(PR_SET_NAME, "pinshim-metrics", 0, 0, 0);
  ++t_depth;
  for (;;) {
    budget::Budget::Process().Tick();
    struct timespec ts = {kMetricsPeriodMs / 1000, (kMetricsPeriodMs % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
  }
  return nullptr;
}

// Starts a detached thread with every signal blocked (signals are the
// program's). Returns false when it could not.
bool StartQuietThread(void* (*main_fn)(void*)) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const bool ok = pthread_create(&thread, &attr, main_fn, nullptr) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

// Optimize mode: pinned memory left idle (pool slabs, arena extents) goes
// back to the driver after PINSHIM_IDLE_TRIM_S even when the program makes
// no further call.
void* TrimMain(void*) {
  prctl(PR_SET_NAME, "pinshim-trim", 0, 0, 0);
  ++t_depth;
  const unsigned period_s = g_config.idle_trim_s >= 2 ? g_config.idle_trim_s / 2 : 1;
  for (;;) {
    struct timespec ts = {static_cast<time_t>(period_s), 0};
    nanosleep(&ts, nullptr);
    optimize::Optimizer::Process().Tick();
  }
  return nullptr;
}

void StartMetricsThread() {
  if (!g_enforce || g_config.metrics_file[0] == '\0') return;
  if (!StartQuietThread(MetricsMain)) {
    LogLine("cannot start the metrics thread; %s will not be updated", g_config.metrics_file);
  }
}

// Optimize mode: pinshim's own pinning is charged to the enforce-mode
// budget too (pool slabs and registrations of hot buffers).
budget::Owner OwnerOf(optimize::PinUse use) {
  switch (use) {
    case optimize::PinUse::kCache: return budget::Owner::kPinshimCache;
    case optimize::PinUse::kPoolDedicated: return budget::Owner::kProgramAlloc;
    default: return budget::Owner::kPinshimPool;
  }
}

bool ChargeOwnPinning(void*, optimize::PinUse use, uint64_t bytes) {
  return budget::Budget::Process().Charge(OwnerOf(use), bytes) == budget::Decision::kGranted;
}

void ReleaseOwnPinning(void*, optimize::PinUse use, uint64_t bytes) {
  budget::Budget::Process().Release(OwnerOf(use), bytes);
}

uint64_t EvictOwnPinning(uint64_t bytes_wanted) {
  return optimize::Optimizer::Process().Evict(bytes_wanted);
}

// PINSHIM_PROFILE: hot sites known before the program runs.
optimize::SiteProfile g_profile;

bool ProfileContains(const optimize::SiteFrames& frames) { return g_profile.Contains(frames); }

// What optimize mode pins, unpins and is refused goes into the trace (a
// no-op without one).
void RecordOwnPinning(const OwnPinEvent& e) { trace::RecordOwnPin(e); }

// The sampler's (and the exit's) snapshot of optimize mode's counters.
bool SnapshotOptimizeCounters(OptimizeCountersEvent* out) {
  const optimize::Optimizer& opt = optimize::Optimizer::Process();
  if (!opt.active()) return false;  // not started yet, or a fork child
  *out = optimize::CountersForTrace(opt.Counters());
  return true;
}

// In-place pinning keeps a fork's parent correct only where the kernel
// copies pinned pages for the child at fork (Linux 5.9 on, with a driver
// that pins with FOLL_PIN, as driver 580 does: bench/RESULTS.md); older
// kernels leave the parent's pinned pages shared with the child, and the
// parent's next write moves it to new pages the device does not see.
bool KernelCopiesPinnedPagesAtFork() {
  struct utsname u;
  if (uname(&u) != 0) return false;
  unsigned major = 0, minor = 0;
  if (sscanf(u.release, "%u.%u", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 9);
}

void StartOptimizing() {
  optimize::OptimizerOptions options;
  options.allocations = &g_allocations;
  options.registrations = &g_registrations;
  options.next_alloc_id = &NextAllocId;
  options.pin_cap_bytes = g_config.pin_cap_bytes;
  options.pool.idle_trim_ns = uint64_t{g_config.idle_trim_s} * 1000000000u;
  options.arena.idle_trim_ns = options.pool.idle_trim_ns;
  if (g_config.trace_dir[0] != '\0') options.on_own_pin = RecordOwnPinning;
  bool in_place = g_config.pin_in_place;
  if (in_place && !KernelCopiesPinnedPagesAtFork()) {
    LogLine("this kernel does not copy pinned pages at fork (Linux < 5.9): optimize mode "
            "will not pin the program's own pages (as with PINSHIM_PIN_IN_PLACE=0)");
    in_place = false;
  }
  // Without in-place pinning: the pool only (the driver's own kind of memory).
  options.enable_cache = in_place;
  options.enable_arena = in_place;
  options.enable_staging = g_config.stage;
  options.stager.workers = g_config.stage_workers;
  // A worker count set by hand is used as set, busy CPUs or not.
  options.stager.load_aware = g_config.stage_workers == 0;
  options.stager.idle_trim_ns = options.pool.idle_trim_ns;
  if (in_place && g_config.verify_pages) {
    if (optimize::PageFrames::Open()) {
      options.verify_pages = true;
    } else {
      LogLine("PINSHIM_VERIFY_PAGES: /proc/self/pagemap gives no page frame numbers here "
              "(they need CAP_SYS_ADMIN); pinned pages are not verified");
    }
  }
  optimize::InitSiteCapture();
  if (g_config.profile[0] != '\0') {
    char err[optimize::kProfileErrorLen];
    if (g_profile.Load(g_config.profile, err, sizeof(err))) {
      optimize::Optimizer::Process().hot_sites().SetProfile(&ProfileContains);
    } else {
      LogLine("profile not used: %s", err);
    }
  }
  g_redirect_sites = in_place;
  if (g_enforce) {
    options.pin_hooks.charge = ChargeOwnPinning;
    options.pin_hooks.release = ReleaseOwnPinning;
    budget::Budget::Process().SetEvictor(EvictOwnPinning);
  }
  optimize::Optimizer::Process().Configure(options);
  g_optimize = true;
}

// Every budget decision goes into the trace (a no-op without one).
void RecordBudgetDecision(const budget::DecisionRecord* r) {
  trace::BudgetDecisionEvent e{};
  e.owner = static_cast<uint8_t>(r->owner);
  e.decision = static_cast<uint8_t>(r->decision);
  e.limiter = static_cast<uint8_t>(r->limiter);
  e.evictor_called = r->evictor_called;
  e.bytes = r->bytes;
  e.evicted_bytes = r->evicted_bytes;
  e.process_pinned = r->process_pinned;
  e.process_budget = r->process_budget;
  e.node_pinned = r->node_pinned;
  e.node_budget = r->node_budget;
  e.time_ns = 0;
  trace::RecordBudgetDecision(e);
}

// Enforce mode: the budgets from the configuration. Without any budget there
// is nothing to enforce (pinned bytes are still counted by the summary).
void StartEnforcing() {
  budget::BudgetOptions options;
  options.process_bytes = g_config.has_budget ? g_config.budget_bytes : 0;
  options.node_bytes = g_config.has_node_budget ? g_config.node_budget_bytes : 0;
  options.policy = g_config.policy;
  options.shared_ledger = g_config.ledger_shared;
  options.metrics_path = g_config.metrics_file[0] != '\0' ? g_config.metrics_file : nullptr;
  if (options.process_bytes == 0 && options.node_bytes == 0) {
    LogLine("enforce mode without PINSHIM_BUDGET or PINSHIM_NODE_BUDGET: nothing to enforce");
    return;
  }
  budget::BudgetStatus status = budget::Budget::Process().Init(options);
  budget::Budget::Process().SetRecorder(RecordBudgetDecision);
  if (status.message[0] != '\0') LogLine("%s", status.message);
  g_enforce = status.code != budget::BudgetStatus::kInvalid;
}

void StartTracing() {
  trace::RecorderOptions options;
  options.trace_dir = g_config.trace_dir;
  static char mode[64];
  FormatMode(g_config.mode, mode, sizeof(mode));
  options.mode = mode;
  options.sample_ms = g_config.sample_ms;
  options.budget_bytes = g_config.has_budget ? g_config.budget_bytes : 0;
  options.wc_guard = g_config.wc_guard;
  options.python_frames = g_config.python_frames;
  options.copy_guard = g_config.copy_guard;
  options.api_name = ApiName;
  options.api_count = kApiCountForTrace();
  if (g_optimize) options.optimize_counters = SnapshotOptimizeCounters;
  char err[512];
  if (!trace::StartRecorder(options, err, sizeof(err))) LogLine("no trace: %s", err);
}

}  // namespace

// --- bootstrap pool: serves allocations made while resolving g_real ---

namespace {
constexpr size_t kBootBytes = 256 * 1024;
alignas(64) char g_boot[kBootBytes];
std::atomic<size_t> g_boot_used{0};
}  // namespace

bool InBootstrapPool(const void* p) {
  auto c = static_cast<const char*>(p);
  return c >= g_boot && c < g_boot + kBootBytes;
}

PINSHIM_HIDDEN void* BootstrapAlloc(size_t bytes) {
  // 16-byte header keeps the size for realloc; blocks stay 16-byte aligned.
  size_t need = ((bytes + 15) & ~size_t{15}) + 16;
  size_t at = g_boot_used.fetch_add(need);
  if (at + need > kBootBytes) return nullptr;
  char* p = g_boot + at;
  *reinterpret_cast<size_t*>(p) = bytes;
  return p + 16;
}

PINSHIM_HIDDEN size_t BootstrapSize(const void* p) {
  return *reinterpret_cast<const size_t*>(static_cast<const char*>(p) - 16);
}

PINSHIM_HIDDEN bool Resolving() { return t_resolving; }

void ResolveRealFunctions() {
  if (g_real.malloc != nullptr || t_resolving) return;
  t_resolving = true;
  RealFunctions r;
  Next(&r.free, "free");
  Next(&r.calloc, "calloc");
  Next(&r.realloc, "realloc");
  Next(&r.posix_memalign, "posix_memalign");
  Next(&r.aligned_alloc, "aligned_alloc");
  Next(&r.memalign, "memalign");
  Next(&r.valloc, "valloc");
  Next(&r.pvalloc, "pvalloc");
  Next(&r.malloc_usable_size, "malloc_usable_size");
  Next(&r.mmap, "mmap");
  Next(&r.munmap, "munmap");
  Next(&r.mremap, "mremap");
  Next(&r.mmap64, "mmap64");
  Next(&r.madvise, "madvise");
  Next(&r.posix_madvise, "posix_madvise");
  Next(&r.process_madvise, "process_madvise");
  Next(&r.shmat, "shmat");
  Next(&r.brk, "brk");
  Next(&r.sbrk, "sbrk");
  Next(&r.fork, "fork");
  r.dlopen = reinterpret_cast<void* (*)(const char*, int)>(dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34"));
  if (r.dlopen == nullptr) Next(&r.dlopen, "dlopen");
  r.dlclose = reinterpret_cast<int (*)(void*)>(dlvsym(RTLD_NEXT, "dlclose", "GLIBC_2.34"));
  if (r.dlclose == nullptr) Next(&r.dlclose, "dlclose");
  Next(&r.malloc, "malloc");
  // Publish malloc last: hooks test it to know the table is complete.
  void* (*malloc_fn)(size_t) = r.malloc;
  r.malloc = nullptr;
  g_real = r;
  __atomic_store_n(&g_real.malloc, malloc_fn, __ATOMIC_RELEASE);
  t_resolving = false;
}

namespace {
void* RealDriverSymbol(const char* name, void*) { return DriverLibrarySymbol(name); }
}  // namespace

bool EnsureOptimizerStarted() {
  auto& opt = optimize::Optimizer::Process();
  if (PINSHIM_LIKELY(opt.active())) return true;
  if (!g_optimize) return false;
  static std::atomic<bool> tried{false};
  if (tried.exchange(true)) return opt.active();
  DepthGuard guard;  // the engine's own driver calls are not the program's
  optimize::DriverOps ops;
  const bool ok = optimize::LoadDriverOps(RealDriverSymbol, nullptr, &ops) && opt.AttachDriver(ops);
  if (ok && g_config.idle_trim_s > 0 && !StartQuietThread(TrimMain)) {
    LogLine("cannot start the idle-trim thread; idle pinned memory is given back on frees only");
  }
  return ok;
}

void NoteCudaSeen() { g_cuda_seen.store(true, std::memory_order_relaxed); }

void DropTraceIfNoCuda() {
  // Tracing starts with the process, so that buffers allocated before CUDA
  // was first touched keep their allocation sites; a process that never
  // touched CUDA has nothing to report and leaves no file behind.
  if (g_cuda_seen.load() || !trace::RecorderActive() || !trace::RecorderOwnedHere()) return;
  char path[kConfigPathMax];
  snprintf(path, sizeof(path), "%s", trace::RecorderTracePath());
  trace::StopRecorder();
  if (path[0] != '\0') unlink(path);
}

uint64_t NextAllocId() { return g_next_alloc_id.fetch_add(1, std::memory_order_relaxed); }

MemKind ClassifyHost(const void* p, uint32_t* flags, uint64_t* alloc_id) {
  *flags = 0;
  *alloc_id = 0;
  Region r;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  MemKind kind = MemKind::kPageable;
  if (g_allocations.Lookup(addr, &r)) {
    *alloc_id = r.id;
    *flags = r.flags;
    kind = r.kind;
  }
  if (g_registrations.size() != 0 && g_registrations.Lookup(addr, &r)) {
    *flags = r.flags;
    kind = r.kind;
  }
  // Optimize mode's pool answers for its own blocks (they are not in the
  // registries: see Optimizer::AttachDriver).
  if (kind == MemKind::kPageable && g_optimize) {
    optimize::PoolBlockInfo block;
    const optimize::Optimizer& opt = optimize::Optimizer::Process();
    if (opt.active() && opt.PoolBlock(p, &block)) {
      *flags = block.flags;
      *alloc_id = block.alloc_id;
      kind = MemKind::kPinnedByPinshim;
    }
  }
  return kind;
}

void Init() {
  int expected = 0;
  if (!g_init_state.compare_exchange_strong(expected, 1)) return;  // done or under way
  ++t_depth;
  ResolveRealFunctions();
  ResolveExecFunctions();
  ConfigInput input;
  memset(&input, 0, sizeof(input));
  input.envp = environ;
  static ConfigErrors errors;  // static: large, and Init runs once
  if (!ParseConfig(input, &g_config, &errors)) {
    char line[kConfigErrorLen + 256];
    FormatConfigWarning(g_config, errors, line, sizeof(line));
    const char* text = strncmp(line, "pinshim: ", 9) == 0 ? line + 9 : line;
    LogLine("%s", text);
  }
  pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
  g_track_threshold = g_config.track_threshold_bytes;
  if ((g_config.mode & kModeEnforce) != 0) {
    StartEnforcing();
    StartMetricsThread();
  }
  if ((g_config.mode & kModeOptimize) != 0) StartOptimizing();
  if (g_config.trace_dir[0] != '\0') StartTracing();
  g_init_state.store(2);
  g_initialized.store(true, std::memory_order_release);
  --t_depth;
}

__attribute__((constructor(101))) static void PinshimConstructor() { Init(); }

__attribute__((destructor)) static void PinshimDestructor() {
  ++t_depth;  // nothing pinshim does at exit is the program's to count
  WriteSummaryAtExit();
  DropTraceIfNoCuda();
  trace::StopRecorder();
  // The last word on this process's counters, however short it ran.
  if (g_enforce && g_config.metrics_file[0] != '\0') {
    budget::Budget::Process().WriteMetricsFile(g_config.metrics_file);
  }
}

}  // namespace pinshim
