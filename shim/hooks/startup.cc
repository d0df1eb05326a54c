// Start-up and exit: Init reads the configuration once and starts the modes
// it names (enforce, optimize, trace), wiring the engines to one another;
// the library's destructor writes the summary and ends the trace.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim/budget/budget.h"
#include "shim/core/context_gate.h"
#include "shim/core/log.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/profile_file.h"
#include "shim/hooks/raw_syscall.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_frames.h"
#include "shim/optimize/site_profile.h"
#include "shim/trace/budget_decisions.h"
#include "shim/trace/recorder.h"

extern char** environ;

namespace pinshim {
namespace {

std::atomic<int> g_init_state{0};  // 0 not started, 1 running, 2 done

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

void RecordVerdict(const optimize::PathCellReport& c) {
  trace::PathVerdictFields f;
  f.dir = static_cast<uint64_t>(c.dir);
  f.sync = c.sync ? 1 : 0;
  f.size_class = c.size_class;
  f.path = static_cast<uint64_t>(c.path);
  f.verdict = static_cast<uint64_t>(c.verdict);
  f.path_copies = c.path_copies;
  f.driver_copies = c.driver_copies;
  f.path_ns_per_mib = c.path_ns_per_mib;
  f.driver_ns_per_mib = c.driver_ns_per_mib;
  f.losses = c.losses;
  trace::RecordPathVerdict(f);
}

// The sampler's (and the exit's) snapshot of optimize mode's counters.
bool SnapshotOptimizeCounters(OptimizeCountersEvent* out) {
  const optimize::Optimizer& opt = optimize::Optimizer::Process();
  if (!opt.active()) return false;  // not started yet, or a fork child
  *out = optimize::CountersForTrace(opt.Counters());
  return true;
}

// In-place pinning keeps a fork's parent correct only where the kernel copies
// pinned pages for the child at fork (Linux 5.9 on, with a driver that pins
// with FOLL_PIN, as driver 580 does: bench/RESULTS.md, "Pages that change
// under pinned memory"); older kernels leave the parent's pinned pages shared
// with the child, and the parent's next write moves it to new pages the
// device does not see.
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
  if (g_config.trace_dir[0] != '\0') {
    options.on_own_pin = RecordOwnPinning;
    options.on_verdict = RecordVerdict;
  }
  bool in_place = g_config.pin_in_place;
  if (in_place && !KernelCopiesPinnedPagesAtFork()) {
    LogLine(
        "this kernel does not copy pinned pages at fork (Linux < 5.9): optimize mode "
        "will not pin the program's own pages (as with PINSHIM_PIN_IN_PLACE=0)");
    in_place = false;
  }
  // Without in-place pinning: the pool only (the driver's own kind of memory).
  options.enable_cache = in_place;
  options.enable_arena = in_place;
  options.enable_staging = g_config.stage;
  options.stager.workers = g_config.stage_workers;
  options.stager.chunk_bytes = g_config.stage_chunk_bytes;
  options.stager.slots = g_config.stage_slots;
  options.stager.ordered_reads = g_config.stage_ordered;
  // A worker count set by hand is used as set, busy CPUs or not.
  options.stager.load_aware = g_config.stage_workers == 0;
  options.stager.idle_trim_ns = options.pool.idle_trim_ns;
  options.stager.teardown_gate = &g_context_gate;
  if (in_place && g_config.verify_pages) {
    if (optimize::PageFrames::Open()) {
      options.verify_pages = true;
    } else {
      LogLine(
          "PINSHIM_VERIFY_PAGES: /proc/self/pagemap gives no page frame numbers here "
          "(they need CAP_SYS_ADMIN); pinned pages are not verified");
    }
  }
  optimize::InitSiteCapture();
  if (g_config.profile[0] != '\0') {
    char err[optimize::kProfileErrorLen];
    if (LoadProfile(g_config.profile, &g_profile, err, sizeof(err))) {
      optimize::Optimizer::Process().hot_sites().SetProfile(&ProfileContains);
    } else {
      LogLine("profile not used: %s", err);
    }
  }
  g_redirect_sites = in_place;
  g_capture_sites = in_place;
  if (g_enforce) {
    options.pin_hooks.charge = ChargeOwnPinning;
    options.pin_hooks.release = ReleaseOwnPinning;
    budget::Budget::Process().SetEvictor(EvictOwnPinning);
  }
  optimize::Optimizer::Process().Configure(options);
  optimize::Optimizer::Process().judge().set_enabled(g_config.self_check);
  g_optimize = true;
}

void WarnLine(const char* line) { LogLine("%s", line); }

// Enforce mode: the budgets from the configuration. Without any budget there
// is nothing to enforce (pinned bytes are still counted by the summary).
void StartEnforcing() {
  const budget::BudgetOptions options = budget::BudgetOptionsFromConfig(g_config);
  if (options.process_bytes == 0 && options.node_bytes == 0) {
    LogLine(
        "enforce mode without a budget (--budget or --node-budget; PINSHIM_BUDGET or "
        "PINSHIM_NODE_BUDGET): nothing to enforce");
    return;
  }
  budget::BudgetStatus status = budget::Budget::Process().Init(options);
  // Every decision goes into the trace (a no-op without one).
  budget::Budget::Process().SetRecorder(trace::RecordBudgetDecisionRecord);
  // A stalled ledger lock or a full ledger, later on: one line each time.
  budget::Budget::Process().SetWarner(WarnLine);
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
  options.trace_max = g_config.trace_max_bytes;
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

namespace {
void* RealDriverSymbol(const char* name, void*) { return DriverLibrarySymbol(name); }
}  // namespace

bool EnsureOptimizerStarted() {
  auto& opt = optimize::Optimizer::Process();
  if (PINSHIM_LIKELY(opt.active())) return true;
  if (!g_optimize) return false;
  static std::atomic<bool> tried{false};
  if (tried.exchange(true)) return opt.active();
  ReentryGuard guard(Reentry::kHook);  // the engine's own driver calls are not the program's
  optimize::DriverOps ops;
  const bool ok = optimize::LoadDriverOps(RealDriverSymbol, nullptr, &ops) && opt.AttachDriver(ops);
  // The process's engine lives as long as the process: its staging workers
  // are started now, by a thread of their own, so that thread creation and
  // the first load sample are the attach's, not a copy's (bench/RESULTS.md,
  // "2026-12-06, fourth part").
  if (ok) opt.stager().StartWorkersInBackground();
  if (ok && g_config.idle_trim_s > 0 && !StartTrimThread()) {
    LogLine("cannot start the idle-trim thread; idle pinned memory is given back on frees only");
  }
  return ok;
}

// Whether fn is defined in the C library itself (not in another library
// that interposes it after pinshim).
bool InLibc(const void* fn) {
  Dl_info info;
  if (fn == nullptr || dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = strrchr(info.dli_fname, '/');
  return strncmp(slash != nullptr ? slash + 1 : info.dli_fname, "libc.so", 7) == 0;
}

namespace {

// Whether every allocation function pinshim calls on is the C library's
// (no allocator interposed after pinshim).
bool MallocIsLibcs() {
  const RealFunctions& r = g_real;
  for (const void* fn :
       {reinterpret_cast<const void*>(r.malloc), reinterpret_cast<const void*>(r.free),
        reinterpret_cast<const void*>(r.calloc), reinterpret_cast<const void*>(r.realloc),
        reinterpret_cast<const void*>(r.posix_memalign),
        reinterpret_cast<const void*>(r.aligned_alloc), reinterpret_cast<const void*>(r.memalign),
        reinterpret_cast<const void*>(r.valloc), reinterpret_cast<const void*>(r.pvalloc),
        reinterpret_cast<const void*>(r.malloc_usable_size)}) {
    if (!InLibc(fn)) return false;
  }
  return true;
}

// Whether the program chose how glibc places large blocks itself, through
// its environment (a mallopt it makes later wins anyway).
bool ProgramSetMallocPlacement() {
  static const struct {
    const char* env;
    const char* tunable;
  } kSettings[] = {{"MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"},
                   {"MALLOC_TOP_PAD_", "glibc.malloc.top_pad"},
                   {"MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold"}};
  const char* tunables = getenv("GLIBC_TUNABLES");
  for (const auto& setting : kSettings) {
    if (getenv(setting.env) != nullptr ||
        (tunables != nullptr && strstr(tunables, setting.tunable) != nullptr)) {
      return true;
    }
  }
  return false;
}

// With the copy guard on, glibc maps each block of at least the tracking
// threshold for itself, so that the guard may protect the block's end
// pages, which it then shares with nothing but its own header and padding
// (copy_watch.h). glibc maps a block when it is at least its mmap threshold
// and its heap has no free space that holds it: the threshold is fixed at
// the tracking threshold (left alone, glibc raises it, up to 32 MiB, each
// time a mapped block is freed, and carves later ones of that size from its
// heap), and the heap keeps no more free space at its end than that (no
// padding when it grows, trimmed past the threshold, and trimmed now).
// Free space between blocks in use can still hold one.
void GiveLargeBlocksTheirOwnMappings() {
  constexpr size_t kMostGlibcTakes = size_t{32} << 20;  // half its heap size
  const size_t threshold = std::max(g_track_threshold, static_cast<size_t>(getpagesize()));
  if (!g_guard_malloc_chunks || threshold > kMostGlibcTakes || ProgramSetMallocPlacement()) {
    return;
  }
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(threshold));
  mallopt(M_TOP_PAD, 0);
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(threshold));
  malloc_trim(0);  // the free end the heap has already
}

}  // namespace

void Init() {
  int expected = 0;
  if (!g_init_state.compare_exchange_strong(expected, 1)) return;  // done or under way
  ReentryGuard guard(Reentry::kHook);  // start-up's own calls are not the program's
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
  InstallForkHandlers();  // before any thread of pinshim's iterates modules
  g_track_threshold = g_config.track_threshold_bytes;
  // The guard works within a trace (recorder.cc starts it).
  g_guard_malloc_chunks = g_config.copy_guard && g_config.trace_dir[0] != '\0' && MallocIsLibcs();
  GiveLargeBlocksTheirOwnMappings();
  if (g_config.metrics_file[0] != '\0') UseLiveMetrics();
  if ((g_config.mode & kModeEnforce) != 0) StartEnforcing();
  // Enforce mode's thread also keeps the ledger's heartbeat.
  if ((g_config.mode & kModeEnforce) != 0 || g_config.metrics_file[0] != '\0') {
    StartMetricsThread();
  }
  if ((g_config.mode & kModeOptimize) != 0) {
    // The next mmap, mmap64, munmap and madvise after pinshim's are libc's
    // own (no other library interposes them between): the page hooks' fast
    // paths then make the system calls themselves (raw_syscall.h).
    optimize::PageHookLine& line = optimize::Optimizer::Process().page_line();
    line.raw_calls = kRawPageCalls && InLibc(reinterpret_cast<void*>(g_real.mmap)) &&
                     InLibc(reinterpret_cast<void*>(g_real.mmap64)) &&
                     InLibc(reinterpret_cast<void*>(g_real.munmap)) &&
                     InLibc(reinterpret_cast<void*>(g_real.madvise));
    line.track_threshold = g_track_threshold;
    StartOptimizing();
    line.optimizing = g_optimize;  // last: the fast paths start with it
  }
  if (g_config.trace_dir[0] != '\0') StartTracing();
  g_init_state.store(2);
  g_initialized.store(true, std::memory_order_release);
}

__attribute__((constructor(101))) static void PinshimConstructor() { Init(); }

__attribute__((destructor)) static void PinshimDestructor() {
  ReentryGuard::HoldForever(Reentry::kHook);  // nothing pinshim does at exit is the program's
  WriteSummaryAtExit();
  DropTraceIfNoCuda();
  trace::StopRecorder();
  // The last word on this process's counters, however short it ran.
  if (g_enforce && g_config.metrics_file[0] != '\0') {
    const budget::BudgetStatus status = budget::Budget::Process().WriteMetricsNow();
    if (status.message[0] != '\0') LogLine("%s", status.message);
  } else if (g_config.metrics_file[0] != '\0') {
    WriteLiveMetricsFile();
  }
}

}  // namespace pinshim
