#include "shim/optimize/stager.h"

#include <cpuid.h>

#include <dlfcn.h>
#include <emmintrin.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "shim/core/internal_alloc.h"
#include "shim/core/macros.h"
#include "shim/core/quiet_thread.h"
#include "shim/core/reentry.h"
#include "shim/optimize/cost_model.h"
#include "shim/optimize/fresh_pages.h"
#include "shim/optimize/lock.h"
#include "shim/optimize/stream_copy.h"

namespace pinshim {
namespace optimize {
namespace {

// A lane is empty (no ring), free (a ring, idle), busy (a copy runs on it),
// binding (a thread pins or unpins its ring), wanted (a worker is asked to
// pin its ring for lane.ctx) or pinning (a worker pins it).
enum LaneState : int {
  kLaneEmpty = 0,
  kLaneFree = 1,
  kLaneBusy = 2,
  kLaneBinding = 3,
  kLaneWanted = 4,
  kLanePinning = 5,
};

// A ring is on its way to the lane: asked for, or being pinned by a worker.
inline bool SettingUp(int state) { return state == kLaneWanted || state == kLanePinning; }

// The smallest piece a thread copies: below this the hand-off costs more
// than the copy.
constexpr uint64_t kMinPiece = uint64_t{64} << 10;
constexpr uint64_t kMaxPiece = uint64_t{256} << 10;
// How long an idle worker spins for the next job before it sleeps: copies
// often come back to back, and a futex wake costs tens of microseconds.
constexpr uint64_t kSpinNs = 200000;
constexpr uint64_t kSampleNs = 50000000;  // /proc/stat at most every 50 ms
// While staged copies run, their workers look at /proc/stat this often too
// (off the program's threads), and their figure counts while it is this
// young: when the program's load rises, staging stops waking workers onto
// cores the program took within about one such interval, not the 50 ms
// sample's (bench/RESULTS.md, "2026-12-07"). Its first line sums every CPU's
// time before it rounds to 10 ms ticks, so 10 ms of a 16-core machine is
// 160 ticks.
constexpr uint64_t kFastSampleNs = 10000000;
constexpr uint64_t kFastFreshNs = 20000000;
// A worker adds its CPU time to staging's own at least this often while it
// runs (copying or spinning), so the load sample never takes staging's own
// threads for the program's load.
constexpr uint64_t kAccountNs = 1000000;
// How long a copy's calling thread waits for a worker to join before it
// copies pieces itself (a sleeping worker wakes within tens of microseconds).
constexpr uint64_t kAloneNs = 200000;

inline void Pause() { _mm_pause(); }

using StreamFn = void (*)(char*, const char*, size_t);
StreamFn g_stream_copy = &CopyStreaming;
// Whether the CPU demotes cache lines on request (CPUID 7.0 ECX bit 25).
bool g_has_cldemote = false;

// A worker's piece of the program's buffer, demoted from its core's caches
// to the shared one once read: the program's next write of that memory then
// has no copy in this core to invalidate first (bench/copy/rewrite_probe).
__attribute__((target("cldemote"))) void DemoteRead(const char* p, uint64_t n) {
  for (uint64_t i = 0; i < n; i += 64) _cldemote(const_cast<char*>(p + i));
}

// libc's memcpy itself: pinshim interposes memcpy (write-combined reads),
// and these copies are its own.
using CopyFn = void* (*)(void*, const void*, size_t);
CopyFn g_libc_memcpy = nullptr;

// Adds the time from its construction to its end to *sum (a phase counter).
class ElapsedInto {
 public:
  explicit ElapsedInto(std::atomic<uint64_t>* sum) : sum_(sum), start_ns_(MonotonicNs()) {}
  ~ElapsedInto() { sum_->fetch_add(MonotonicNs() - start_ns_, std::memory_order_relaxed); }
  ElapsedInto(const ElapsedInto&) = delete;
  ElapsedInto& operator=(const ElapsedInto&) = delete;

 private:
  std::atomic<uint64_t>* sum_;
  uint64_t start_ns_;
};

void CopyPlain(char* dst, const char* src, size_t n) {
  if (g_libc_memcpy != nullptr) {
    g_libc_memcpy(dst, src, n);
  } else {
    __builtin_memcpy(dst, src, n);
  }
}

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op | FUTEX_PRIVATE_FLAG, val,
                 nullptr, nullptr, 0);
}

// Idle and total jiffies of all CPUs (/proc/stat's first line); false when
// it cannot be read. Raw system calls: no stdio, no allocation.
bool ReadCpuTimes(uint64_t* busy, uint64_t* total) {
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, "/proc/stat", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return false;
  char buf[256];
  long n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
  syscall(SYS_close, fd);
  if (n <= 5 || strncmp(buf, "cpu ", 4) != 0) return false;
  buf[n] = '\0';
  uint64_t v[10] = {};
  const char* p = buf + 4;
  for (int i = 0; i < 10; ++i) {
    while (*p == ' ') ++p;
    if (*p < '0' || *p > '9') break;
    while (*p >= '0' && *p <= '9') v[i] = v[i] * 10 + static_cast<uint64_t>(*p++ - '0');
  }
  uint64_t t = 0;
  for (int i = 0; i < 8; ++i) t += v[i];  // guest time is inside user time already
  *total = t;
  *busy = t - v[3] - v[4];  // minus idle and iowait
  return true;
}

uint64_t ThreadCpuNs() {
  timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint32_t OnlineCores() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<uint32_t>(n) : 1;
}

}  // namespace

struct Stager::Job {
  std::atomic<int> live{0};   // workers may join
  std::atomic<int> abort{0};  // stop: a DMA failed
  std::atomic<uint32_t> joined{0};
  std::atomic<uint32_t> inside{0};
  bool h2d = true;
  char* host = nullptr;
  char* ring = nullptr;
  uint64_t chunk = 0;
  uint64_t bytes = 0;
  uint64_t piece = 0;
  uint32_t nchunks = 0;
  uint32_t slots = 0;
  uint32_t ppc = 0;  // pieces per chunk
  uint64_t total = 0;
  uint32_t max_workers = 0;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> first_join_ns{0};  // when the first worker joined (0: none)
  std::atomic<uint32_t> done[kMaxChunks];
  // Host to device: slot s may be written for chunk k once slot_gen[s] >
  // k / slots (its previous DMA completed). Device to host: chunk k may be
  // copied out once dma_done[k].
  std::atomic<uint32_t> slot_gen[kMaxSlots];
  std::atomic<uint8_t> dma_done[kMaxChunks];

  uint64_t ChunkLen(uint32_t k) const {
    const uint64_t off = uint64_t{k} * chunk;
    return bytes - off < chunk ? bytes - off : chunk;
  }
  char* Slot(uint32_t k) const { return ring + uint64_t{k % slots} * chunk; }

  // Whether piece p can be copied now, without waiting.
  bool Ready(uint64_t p) const {
    const uint32_t k = static_cast<uint32_t>(p / ppc);
    return h2d ? slot_gen[k % slots].load(std::memory_order_acquire) > k / slots
               : dma_done[k].load(std::memory_order_acquire) != 0;
  }

  // Copies piece p (waiting for its slot when `wait`). demote: a worker's
  // piece of an upload, whose source lines it then demotes where the CPU
  // can. Returns the bytes demoted.
  uint64_t Copy(uint64_t p, bool demote = false) {
    uint64_t demoted = 0;
    const uint32_t k = static_cast<uint32_t>(p / ppc);
    const uint64_t off = (p % ppc) * piece;
    const uint64_t len = ChunkLen(k);
    if (off < len) {
      while (!Ready(p)) {
        if (abort.load(std::memory_order_relaxed)) break;
        Pause();
      }
      if (!abort.load(std::memory_order_relaxed)) {
        const uint64_t n = len - off < piece ? len - off : piece;
        char* h = host + uint64_t{k} * chunk + off;
        char* s = Slot(k) + off;
        if (h2d) {
          g_stream_copy(s, h, n);
          if (demote && g_has_cldemote) {
            DemoteRead(h, n);
            demoted = n;
          }
        } else {
          CopyPlain(h, s, n);
        }
      }
    }
    done[k].fetch_add(1, std::memory_order_release);
    return demoted;
  }
};

struct Stager::Lane {
  std::atomic<int> state{kLaneEmpty};
  // Written only by the thread that holds the lane (busy or binding), but
  // read before taking it, to pick a lane of the caller's context.
  std::atomic<CUcontext> ctx{nullptr};
  char* ring = nullptr;
  uint64_t ring_bytes = 0;
  uint64_t chunk_bytes = 0;
  uint32_t slots = 0;
  CUevent events[kMaxSlots] = {};
  // Recorded on the stream before a synchronous host-to-device copy's first
  // DMA: the call returns once it completed (the stream's earlier work).
  CUevent before = nullptr;
  // DMAs that may still run, by the event whose completion is theirs:
  // events[e] stands for DMAs that read or write ring bytes [busy_lo[e],
  // busy_hi[e]) while pending[e]. A job waits only for those that overlap
  // the bytes it writes, and for an event it records again.
  bool pending[kMaxSlots] = {};
  uint64_t busy_lo[kMaxSlots] = {};
  uint64_t busy_hi[kMaxSlots] = {};
  // records when events[e] was last recorded: the oldest is waited for
  // when every event is pending.
  uint64_t recorded[kMaxSlots] = {};
  uint64_t records = 0;
  // Where the next upload the ring holds whole starts: after the last one,
  // so back-to-back uploads write their chunks while the previous one's DMA
  // still runs.
  uint64_t cursor = 0;
  std::atomic<uint64_t> last_use_ns{0};
  // A teardown of ctx found the lane pinning (a worker took the request and
  // has not entered the context gate yet): the worker makes no ring.
  std::atomic<bool> cancelled{false};
  Job* job = nullptr;
};

uint32_t Stager::DefaultWorkers(uint32_t cores) {
  // Three quarters of the cores, at most 12: where the ring settings swept
  // on a 16-core host found fresh uploads fastest (bench/RESULTS.md,
  // "2026-12-02: staged copies tuned on the H200").
  uint32_t w = cores * 3 / 4;
  if (w < 1) w = 1;
  if (w > 12) w = 12;
  return w;
}

bool Stager::Init(const DriverOps* ops, PinAccount* account, const StagerOptions& options) {
  if (ops == nullptr || account == nullptr || !DriverOpsComplete(*ops)) return false;
  options_ = options;
  if (options_.slots < 2) options_.slots = 2;
  if (options_.slots > kMaxSlots) options_.slots = kMaxSlots;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (options_.chunk_bytes < page) options_.chunk_bytes = page;
  options_.chunk_bytes = options_.chunk_bytes / page * page;
  uint32_t workers = options_.workers != 0 ? options_.workers : DefaultWorkers(OnlineCores());
  if (workers > kMaxWorkers) workers = kMaxWorkers;
  nworkers_.store(workers, std::memory_order_relaxed);
  if (lanes_ == nullptr) {
    lanes_ = static_cast<Lane*>(InternalAlloc(sizeof(Lane) * kMaxLanes));
    if (lanes_ == nullptr) return false;
    for (int i = 0; i < kMaxLanes; ++i) {
      new (&lanes_[i]) Lane();
      void* mem = InternalAlloc(sizeof(Job));
      if (mem == nullptr) return false;
      lanes_[i].job = new (mem) Job();
    }
  }
  g_libc_memcpy = reinterpret_cast<CopyFn>(dlsym(RTLD_NEXT, "memcpy"));
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) g_stream_copy = &CopyStreamingAvx2;
  {
    unsigned a, b, c, d;
    g_has_cldemote = __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (c & (1u << 25)) != 0;
  }
  huge_pages_ = KernelHugePageMode();
  ops_ = ops;
  exchange_capture_mode_ = ops->thread_exchange_capture_mode;
  account_ = account;
  active_.store(true, std::memory_order_release);
  return true;
}

uint32_t Stager::IdleCoresX16(uint64_t busy, uint64_t total, uint64_t own, uint32_t cores) {
  if (total == 0) return cores * 16;
  if (own > busy) own = busy;  // the two clocks tick apart
  const double others = static_cast<double>(busy - own) / static_cast<double>(total);
  const double idle = others >= 1.0 ? 0.0 : (1.0 - others) * cores;
  return static_cast<uint32_t>(idle * 16);
}

uint32_t Stager::UsableIdleX16(uint32_t slow_x16, uint32_t fast_x16, uint64_t fast_age_ns) {
  // Two cores at least: a 10 ms look is a few ticks a core, and a lower
  // figure by less is as likely its rounding as the program's load.
  if (fast_age_ns >= kFastFreshNs || uint64_t{fast_x16} + 2 * 16 > slow_x16) return slow_x16;
  return fast_x16;
}

Stager::Look Stager::LookAtLoad(LoadMark* mark, uint32_t* idle_x16) {
  uint64_t busy, total;
  if (!ReadCpuTimes(&busy, &total)) return Look::kUnreadable;
  const uint64_t own_ns = own_cpu_ns_.load(std::memory_order_relaxed);
  Look look = mark->total == 0 ? Look::kFirst : Look::kNoTicks;
  if (mark->total != 0 && total > mark->total) {
    static const long ticks_per_s = sysconf(_SC_CLK_TCK);
    const uint64_t own =
        (own_ns - mark->own_ns) /
        (1000000000ull / static_cast<uint64_t>(ticks_per_s > 0 ? ticks_per_s : 100));
    *idle_x16 = IdleCoresX16(busy - mark->busy, total - mark->total, own, OnlineCores());
    look = Look::kFigure;
  }
  *mark = LoadMark{busy, total, own_ns};
  return look;
}

void Stager::FastSample() {
  if (!options_.load_aware) return;
  const uint64_t now = MonotonicNs();
  if (now - fast_sample_ns_.load(std::memory_order_relaxed) < kFastSampleNs ||
      sampling_.exchange(true, std::memory_order_acquire)) {
    return;
  }
  uint32_t x16;
  if (LookAtLoad(&fast_mark_, &x16) == Look::kFigure) {
    fast_idle_x16_.store(x16, std::memory_order_relaxed);
    fast_samples_.fetch_add(1, std::memory_order_relaxed);
  }
  fast_sample_ns_.store(now, std::memory_order_relaxed);
  sampling_.store(false, std::memory_order_release);
}

uint32_t Stager::UsableWorkers() {
  const uint32_t workers = nworkers_.load(std::memory_order_relaxed);
  if (!options_.load_aware) return workers;
  const uint64_t now = MonotonicNs();
  uint64_t last = idle_sample_ns_.load(std::memory_order_relaxed);
  if (now - last >= kSampleNs && !sampling_.exchange(true, std::memory_order_acquire)) {
    uint32_t x16;
    switch (LookAtLoad(&slow_mark_, &x16)) {
      case Look::kFigure: idle_cores_x16_.store(x16, std::memory_order_relaxed); break;
      case Look::kFirst:  // nothing to compare with yet
      case Look::kUnreadable:
        idle_cores_x16_.store(OnlineCores() * 16, std::memory_order_relaxed);
        break;
      case Look::kNoTicks: break;
    }
    idle_sample_ns_.store(now, std::memory_order_relaxed);
    sampling_.store(false, std::memory_order_release);
  }
  // The calling thread copies too: helpers only for idle cores beyond it.
  const uint32_t idle = UsableIdleX16(idle_cores_x16_.load(std::memory_order_relaxed),
                                      fast_idle_x16_.load(std::memory_order_relaxed),
                                      now - fast_sample_ns_.load(std::memory_order_relaxed)) /
                        16;
  if (idle < 2) return 0;
  return idle - 1 < workers ? idle - 1 : workers;
}

void* Stager::WorkerMain(void* arg) {
  prctl(PR_SET_NAME, "pinshim-stage", 0, 0, 0);
  // pinshim's own thread: what the driver allocates for it (a ring) is not
  // the program's.
  ReentryGuard::HoldForever(Reentry::kHook);
  Stager* self = static_cast<Stager*>(arg);
  // Its driver calls (a ring's pinning) never meet a program's capture.
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  self->exchange_capture_mode_(&relaxed);
  self->WorkerLoop();
  return nullptr;
}

void Stager::StartWorkers() {
  int expected = 0;
  if (!workers_started_.compare_exchange_strong(expected, 1)) {
    // Another thread starts them: nworkers_ is final once it is done, and a
    // ring is asked of workers only then (TakeLane reads it).
    while (workers_started_.load(std::memory_order_acquire) != 2) sched_yield();
    return;
  }
  uint32_t started = 0;
  const uint32_t wanted = nworkers_.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < wanted; ++i) {
    // Room for the driver's own frames: a worker pins rings too.
    if (StartQuietThread(&Stager::WorkerMain, this, 512 << 10)) ++started;
  }
  nworkers_.store(started, std::memory_order_relaxed);
  workers_started_.store(2, std::memory_order_release);
}

void* Stager::StarterMain(void* arg) {
  prctl(PR_SET_NAME, "pinshim-stage", 0, 0, 0);
  ReentryGuard::HoldForever(Reentry::kHook);
  Stager* self = static_cast<Stager*>(arg);
  self->StartWorkers();
  self->UsableWorkers();  // the first look at /proc/stat
  return nullptr;
}

bool Stager::StartWorkersInBackground() {
  if (!active() || workers_started_.load(std::memory_order_acquire) != 0) return false;
  return StartQuietThread(&Stager::StarterMain, this, 64 << 10);
}

void Stager::WorkerLoop() {
  uint32_t seen = work_gen_.load(std::memory_order_acquire);
  uint64_t idle_since = MonotonicNs();
  // This thread's CPU time, counted as staging's own (UsableWorkers).
  uint64_t cpu_mark = ThreadCpuNs();
  uint64_t accounted_ns = idle_since;
  auto account = [&] {
    const uint64_t cpu = ThreadCpuNs();
    own_cpu_ns_.fetch_add(cpu - cpu_mark, std::memory_order_relaxed);
    cpu_mark = cpu;
    accounted_ns = MonotonicNs();
  };
  for (;;) {
    // Spinning counts too: a worker that keeps seeing jobs it does not join
    // (the load sample allowed fewer helpers) never sleeps, and its spinning
    // used to count as the program's load, which allowed fewer helpers still.
    if (MonotonicNs() - accounted_ns >= kAccountNs) account();
    bool worked = false;
    for (int i = 0; i < kMaxLanes && active(); ++i) {
      Lane& l = lanes_[i];
      int wanted = kLaneWanted;
      if (l.state.load(std::memory_order_relaxed) == kLaneWanted &&
          l.state.compare_exchange_strong(wanted, kLanePinning, std::memory_order_acquire)) {
        PinRingInBackground(&l);
        worked = true;
      }
    }
    for (int i = 0; i < kMaxLanes && active(); ++i) {
      Job* j = lanes_[i].job;
      if (j->live.load(std::memory_order_acquire) == 0) continue;
      // Inside first, then the job's fields: the owner rewrites them for its
      // next job only once no worker is inside, and publishes them with
      // live, so a worker reads them only after seeing live again.
      j->inside.fetch_add(1, std::memory_order_seq_cst);
      bool copied = false, sample = false;
      uint32_t before = 0;
      if (j->live.load(std::memory_order_seq_cst) != 0 &&
          (before = j->joined.fetch_add(1, std::memory_order_acq_rel)) < j->max_workers) {
        const uint64_t joined_ns = MonotonicNs();
        if (before == 0) j->first_join_ns.store(joined_ns, std::memory_order_relaxed);
        uint64_t pieces = 0, demoted = 0;
        for (;;) {
          const uint64_t p = j->next.fetch_add(1, std::memory_order_acq_rel);
          if (p >= j->total) break;
          demoted += j->Copy(p, /*demote=*/true);
          ++pieces;
        }
        if (demoted != 0) demoted_bytes_.fetch_add(demoted, std::memory_order_relaxed);
        sample = pieces != 0;
        if (pieces != 0) {
          helpers_.fetch_add(1, std::memory_order_relaxed);
          pieces_.fetch_add(pieces, std::memory_order_relaxed);
          piece_ns_.fetch_add(MonotonicNs() - joined_ns, std::memory_order_relaxed);
        }
        copied = true;
      }
      j->inside.fetch_sub(1, std::memory_order_acq_rel);
      // Outside the job: the calling thread's pass may end meanwhile.
      if (sample) FastSample();
      if (copied) account();
      worked = true;
    }
    if (worked) idle_since = MonotonicNs();
    const uint32_t gen = work_gen_.load(std::memory_order_acquire);
    if (gen != seen) {
      seen = gen;
      continue;
    }
    if (MonotonicNs() - idle_since < kSpinNs) {
      Pause();
      continue;
    }
    account();
    Futex(&work_gen_, FUTEX_WAIT, seen);
    seen = work_gen_.load(std::memory_order_acquire);
    idle_since = MonotonicNs();
  }
}

namespace {

// A ring is anonymous memory of pinshim's own, every page made present
// before the driver sees it, then registered with the driver. The program's
// driver calls wait for whatever pinning call the driver is in; a
// registration of present pages is a fraction of what cuMemHostAlloc of the
// same size takes, and the pages' zeroing happens outside the driver
// (bench/RESULTS.md, "2026-12-06, seventh part"). A child of fork gets none
// of it (staging is off there). System calls made directly: the ring is not
// the program's memory, and pinshim's page hooks must not take it for it.
void* MapRing(uint64_t bytes) {
  void* p = reinterpret_cast<void*>(syscall(SYS_mmap, nullptr, bytes, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  if (p == MAP_FAILED) return nullptr;
  syscall(SYS_madvise, p, bytes, MADV_DONTFORK);
  return p;
}

void UnmapRing(void* ring, uint64_t bytes) { syscall(SYS_munmap, ring, bytes); }

}  // namespace

bool Stager::PinRing(Lane* lane, CUcontext ctx) {
  const uint64_t bytes = options_.chunk_bytes * options_.slots;
  OwnPinReason refused = OwnPinReason::kNone;
  if (!account_->ChargeWithEviction(PinUse::kStaging, bytes, &refused)) {
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kStaging, refused, 0,
                 bytes, 0, CUDA_SUCCESS);
    return false;
  }
  void* ring = MapRing(bytes);
  CUresult r = ring == nullptr ? CUDA_ERROR_OUT_OF_MEMORY
                               : ops_->mem_host_register(ring, bytes, CU_MEMHOSTREGISTER_PORTABLE);
  if (r != CUDA_SUCCESS) {
    if (ring != nullptr) UnmapRing(ring, bytes);
    account_->Release(PinUse::kStaging, bytes);
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kRefused, OwnPinPart::kStaging,
                 DriverRefusalReason(r, account_->pinned(), bytes), 0, bytes, 0, r);
    return false;
  }
  uint32_t made = 0;
  for (; made < options_.slots; ++made) {
    if (ops_->event_create(&lane->events[made], CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) break;
    lane->pending[made] = false;
  }
  if (made == options_.slots &&
      ops_->event_create(&lane->before, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    lane->before = nullptr;
    made = 0;
    for (uint32_t i = 0; i < options_.slots; ++i) ops_->event_destroy(lane->events[i]);
  }
  if (made != options_.slots) {
    for (uint32_t i = 0; i < made; ++i) ops_->event_destroy(lane->events[i]);
    ops_->mem_host_unregister(ring);
    UnmapRing(ring, bytes);
    account_->Release(PinUse::kStaging, bytes);
    return false;
  }
  lane->ctx.store(ctx, std::memory_order_relaxed);
  lane->ring = static_cast<char*>(ring);
  lane->ring_bytes = bytes;
  lane->cursor = 0;
  lane->chunk_bytes = options_.chunk_bytes;
  lane->slots = options_.slots;
  ring_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kPinned, OwnPinPart::kStaging,
               OwnPinReason::kNone, reinterpret_cast<uintptr_t>(ring), bytes, 0, CUDA_SUCCESS);
  return true;
}

void Stager::UnpinRing(Lane* lane, OwnPinReason why) {
  CUresult r;
  {
    ScopedContext scope(ops_, lane->ctx.load(std::memory_order_relaxed));
    RelaxedCaptureMode relaxed(ops_);
    for (uint32_t i = 0; i < lane->slots; ++i) {
      if (lane->pending[i]) ops_->event_synchronize(lane->events[i]);
      ops_->event_destroy(lane->events[i]);
    }
    ops_->event_destroy(lane->before);
    lane->before = nullptr;
    r = ops_->mem_host_unregister(lane->ring);
  }
  UnmapRing(lane->ring, lane->ring_bytes);
  account_->Release(PinUse::kStaging, lane->ring_bytes);
  ring_bytes_.fetch_sub(lane->ring_bytes, std::memory_order_relaxed);
  ReportOwnPin(options_.on_own_pin, OwnPinAction::kUnpinned, OwnPinPart::kStaging, why,
               reinterpret_cast<uintptr_t>(lane->ring), lane->ring_bytes, 0, r);
  lane->ring = nullptr;
  lane->ctx.store(nullptr, std::memory_order_relaxed);
}

// A staged copy runs at about two thirds of pinned memory's speed
// (bench/RESULTS.md, staged copies).
static double StagedNs(CopyDir dir, uint64_t bytes) {
  return 1.5 * CostModel::CopyNs(bytes, dir, true);
}

// What pinning a ring of `bytes` costs: making its pages present (the
// kernel zeroes each, outside the driver) and registering them
// (bench/RESULTS.md, "2026-12-06, seventh part").
static double RingPinNs(uint64_t bytes) {
  constexpr double kPopulateNsPerByte = 0.4;
  return kPopulateNsPerByte * static_cast<double>(bytes) + CostModel::RegisterNs(bytes);
}

bool Stager::WaitsForRing(CopyDir dir, uint64_t bytes, uint64_t ring_bytes) {
  const double driver = CostModel::CopyNs(bytes, dir, false);
  return driver > RingPinNs(ring_bytes) + StagedNs(dir, bytes);
}

double Stager::ExpectedWin(CopyDir dir, uint64_t bytes) {
  const double staged = StagedNs(dir, bytes);
  return staged > 0 ? CostModel::CopyNs(bytes, dir, false) / staged : 0.0;
}

bool Stager::WaitsForRingHere(CopyDir dir, uint64_t bytes) const {
  return !options_.background_rings || nworkers_.load(std::memory_order_relaxed) == 0 ||
         WaitsForRing(dir, bytes, options_.chunk_bytes * options_.slots);
}

bool Stager::RingWorthIt(CopyDir dir, uint64_t bytes) const {
  const uint64_t ring = options_.chunk_bytes * options_.slots;
  return options_.judge == nullptr || WaitsForRing(dir, bytes, ring) ||
         options_.judge->WorthSetup(dir, RingPinNs(ring));
}

void Stager::PinRingInBackground(Lane* lane) {
  const CUcontext ctx = lane->ctx.load(std::memory_order_relaxed);
  ContextGate* gate = options_.teardown_gate;
  bool pinned = false;
  // A teardown under way: its context's ring is not made (the next copy
  // after it asks again, in whatever context is current then).
  if (gate == nullptr || gate->EnterAlloc()) {
    if (!lane->cancelled.load(std::memory_order_acquire)) {
      ScopedContext scope(ops_, ctx);
      pinned = PinRing(lane, ctx);
    }
    if (pinned) {
      background_rings_.fetch_add(1, std::memory_order_relaxed);
      lane->last_use_ns.store(MonotonicNs(), std::memory_order_relaxed);
      // Free before the gate opens: a teardown that follows finds the ring.
      lane->state.store(kLaneFree, std::memory_order_release);
    }
    if (gate != nullptr) gate->ExitAlloc();
  }
  if (!pinned) {
    lane->ctx.store(nullptr, std::memory_order_relaxed);
    lane->state.store(kLaneEmpty, std::memory_order_release);
  }
}

Stager::Lane* Stager::TakeLane(CUcontext ctx, CopyDir dir, uint64_t bytes, bool* pending,
                               bool* pinned_now) {
  *pending = false;
  *pinned_now = false;
  // A free lane of this context first.
  for (int i = 0; i < kMaxLanes; ++i) {
    Lane& l = lanes_[i];
    int free_state = kLaneFree;
    if (l.ctx.load(std::memory_order_relaxed) == ctx &&
        l.state.load(std::memory_order_relaxed) == kLaneFree &&
        l.state.compare_exchange_strong(free_state, kLaneBusy, std::memory_order_acquire)) {
      if (l.ctx.load(std::memory_order_relaxed) == ctx) return &l;
      l.state.store(kLaneFree, std::memory_order_release);
    }
  }
  // Its ring is on the way: the driver copies meanwhile.
  for (int i = 0; i < kMaxLanes; ++i) {
    Lane& l = lanes_[i];
    if (SettingUp(l.state.load(std::memory_order_acquire)) &&
        l.ctx.load(std::memory_order_relaxed) == ctx) {
      *pending = true;
      return nullptr;
    }
  }
  // Else an empty one: its ring pinned by a worker, or now.
  for (int i = 0; i < kMaxLanes; ++i) {
    Lane& l = lanes_[i];
    int empty = kLaneEmpty;
    if (l.state.load(std::memory_order_relaxed) != kLaneEmpty ||
        !l.state.compare_exchange_strong(empty, kLaneBinding, std::memory_order_acquire)) {
      continue;
    }
    const bool waits = WaitsForRingHere(dir, bytes);
    if (!waits && !RingWorthIt(dir, bytes)) {
      // Not worth a ring yet: the lane stays empty for a later copy.
      l.state.store(kLaneEmpty, std::memory_order_release);
      ring_deferred_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    if (!waits) {
      l.cancelled.store(false, std::memory_order_relaxed);
      l.ctx.store(ctx, std::memory_order_relaxed);
      l.state.store(kLaneWanted, std::memory_order_release);
      work_gen_.fetch_add(1, std::memory_order_acq_rel);
      Futex(&work_gen_, FUTEX_WAKE, 1);
      *pending = true;
      return nullptr;
    }
    if (!PinRing(&l, ctx)) {
      l.ctx.store(nullptr, std::memory_order_relaxed);
      l.state.store(kLaneEmpty, std::memory_order_release);
      return nullptr;
    }
    *pinned_now = true;
    l.state.store(kLaneBusy, std::memory_order_release);
    return &l;
  }
  return nullptr;
}

bool Stager::ReadsAllAtCall() {
  if (options_.ordered_reads || host_work_queued_.load(std::memory_order_relaxed)) return false;
  int known = pageable_access_.load(std::memory_order_relaxed);
  if (known == 0) {
    int count = 0;
    known = ops_->device_get_count(&count) == CUDA_SUCCESS && count > 0 ? 1 : 2;
    for (int d = 0; d < count && known == 1; ++d) {
      int value = 1;
      if (ops_->device_get_attribute(&value, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, d) !=
              CUDA_SUCCESS ||
          value != 0) {
        known = 2;
      }
    }
    pageable_access_.store(known, std::memory_order_relaxed);
  }
  return known == 1;
}

bool Stager::WaitForRings(uint64_t timeout_ns) const {
  if (lanes_ == nullptr) return true;
  const uint64_t start = MonotonicNs();
  for (;;) {
    bool any = false;
    for (int i = 0; i < kMaxLanes; ++i) {
      any = any || SettingUp(lanes_[i].state.load(std::memory_order_acquire));
    }
    if (!any) return true;
    if (MonotonicNs() - start >= timeout_ns) return false;
    sched_yield();
  }
}

void Stager::ReleaseLane(Lane* lane) {
  lane->last_use_ns.store(MonotonicNs(), std::memory_order_relaxed);
  lane->state.store(kLaneFree, std::memory_order_release);
}

bool Stager::Stage(CopyDir dir, void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream,
                   bool sync, CUresult* result, StagedInfo* info) {
  if (!Wants(dir, bytes)) return false;
  return StageImpl(dir, host, dev, bytes, stream, sync, false, result, info);
}

bool Stager::StageEagerHead(void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream,
                            CUresult* result, StagedInfo* info) {
  if (!active() || bytes == 0 || bytes > kDriverEagerBytes) return false;
  return StageImpl(CopyDir::kHostToDevice, host, dev, bytes, stream, false, true, result, info);
}

bool Stager::Admits(CopyDir dir, void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream,
                    bool eager_head, uint32_t* helpers, CUcontext* ctx) {
  // Before any check that costs a system or driver call: a program's first
  // copies, before a ring is worth pinning, go to the driver at its price
  // (TakeLane would decline them; with no ring pinned, the checks below
  // would be paid for nothing).
  if (!eager_head && ring_bytes_.load(std::memory_order_relaxed) == 0 && !RingWorthIt(dir, bytes)) {
    declined_.fetch_add(1, std::memory_order_relaxed);
    ring_deferred_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *helpers = UsableWorkers();
  if (options_.load_aware && *helpers == 0 && !eager_head) {
    declined_.fetch_add(1, std::memory_order_relaxed);
    busy_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // The host range must be mapped (the driver answers for one that is not;
  // a worker would fault).
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(host) / page * page;
  const uintptr_t hi = reinterpret_cast<uintptr_t>(host) + bytes;
  if (syscall(SYS_msync, lo, hi - lo, MS_ASYNC) != 0) return false;
  if (!eager_head && !DeviceRangeOk(*ops_, options_.allocations, dev, bytes)) return false;
  if (ops_->ctx_get_current(ctx) != CUDA_SUCCESS || *ctx == nullptr) return false;
  // A stream that captures would record the ring's DMAs into the program's
  // graph, which would copy the ring (whatever it holds then) at every
  // launch: the driver answers for such a copy, as without pinshim.
  if (StreamCaptures(*ops_, stream)) {
    declined_.fetch_add(1, std::memory_order_relaxed);
    capturing_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool Stager::WaitForEarlierWork(Lane* lane, CUstream stream, bool wait_first,
                                bool wait_after_eager) {
  if (!wait_first && !wait_after_eager) return true;
  CUresult e = ops_->event_record(lane->before, stream);
  if (e == CUDA_SUCCESS && wait_first) e = ops_->event_synchronize(lane->before);
  return e == CUDA_SUCCESS;
}

void Stager::PlanPieces(CopyDir dir, uint64_t bytes, uint64_t ring_chunk, uint32_t slots,
                        uint32_t threads, uint64_t* chunk_out, uint64_t* piece_out) {
  // Chunks small enough that several are in flight for short copies, so a
  // DMA always overlaps the copying of the next one. Short copies to the
  // host: two chunks, so the first DMA overlaps the copying out of the
  // second. Short copies to the device: one chunk, one DMA, which runs after
  // the call returned (issuing a DMA costs the call more than the overlap
  // gains at that size: bench/RESULTS.md). Longer ones fill the ring.
  const uint64_t page = 4096;
  const uint64_t short_copy = uint64_t{2} << 20;
  uint64_t chunk = ring_chunk;
  if (bytes <= short_copy && dir == CopyDir::kHostToDevice) {
    chunk = (bytes + page - 1) / page * page;
  } else if (bytes <= short_copy) {
    chunk = ((bytes + 1) / 2 + page - 1) / page * page;
  } else {
    while (chunk > (uint64_t{1} << 20) && bytes < chunk * slots) chunk /= 2;
  }
  if (chunk > ring_chunk) chunk = ring_chunk;
  chunk = chunk / page * page;
  // Pieces of 256 KiB (the staging probe's), smaller for short copies so
  // every thread gets several.
  uint64_t piece = chunk < kMaxPiece ? chunk : kMaxPiece;
  while (piece > kMinPiece && (bytes / piece) < uint64_t{threads} * 4) piece /= 2;
  *chunk_out = chunk;
  *piece_out = piece;
}

CUresult Stager::CopyThroughRing(Lane* lane, const RingCopy& c) {
  Job* job = lane->job;
  CUresult r = CUDA_SUCCESS;
  uint64_t off = 0;
  while (off < c.bytes && r == CUDA_SUCCESS) {
    uint64_t n = c.bytes - off;
    if (n > c.chunk * kMaxChunks) n = c.chunk * kMaxChunks;
    uint64_t piece = c.piece;
    if (c.huge_pieces) {
      const uint64_t head = HugePageHead(c.host);
      if (off == 0 && head != 0) {
        if (n > head) n = head;
      } else {
        piece = c.chunk;  // a multiple of the huge page (StageImpl)
      }
    }
    if (c.wait_after_eager) {
      if (off == 0 && n > kDriverEagerBytes) n = kDriverEagerBytes;
      if (off == kDriverEagerBytes) {
        r = ops_->event_synchronize(lane->before);
        if (r != CUDA_SUCCESS) break;  // the earlier work's error, as the driver returns it
      }
    }
    job->h2d = c.dir == CopyDir::kHostToDevice;
    job->host = static_cast<char*>(c.host) + off;
    job->chunk = c.chunk;
    job->bytes = n;
    job->piece = piece;
    job->slots = lane->slots;
    job->nchunks = static_cast<uint32_t>((n + c.chunk - 1) / c.chunk);
    job->ppc = static_cast<uint32_t>((c.chunk + piece - 1) / piece);
    job->total = uint64_t{job->nchunks} * job->ppc;
    job->max_workers = c.threads - 1;
    r = RunJob(lane, job, c.dev + off, c.stream);
    off += n;
  }
  return r;
}

bool Stager::StageImpl(CopyDir dir, void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream,
                       bool sync, bool eager_head, CUresult* result, StagedInfo* info) {
  if (host == nullptr) return false;
  const uint64_t entered_ns = MonotonicNs();
  uint32_t helpers = 0;
  CUcontext ctx = nullptr;
  if (!Admits(dir, host, dev, bytes, stream, eager_head, &helpers, &ctx)) return false;
  RelaxedCaptureMode relaxed(ops_);
  // Started at the engine's attach on a thread of their own; if that thread
  // could not start, by the first copy staging takes. While they are being
  // started, the driver copies (a copy never waits for thread creation);
  // an eager head, which is read at its call, waits for them.
  const int started = workers_started_.load(std::memory_order_acquire);
  if (started == 1 && !eager_head) {
    declined_.fetch_add(1, std::memory_order_relaxed);
    ring_pending_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (started != 2) StartWorkers();
  bool pending = false, pinned_now = false;
  Lane* lane = TakeLane(ctx, dir, bytes, &pending, &pinned_now);
  if (info != nullptr) info->pinned_ring = pinned_now;
  if (lane == nullptr) {
    declined_.fetch_add(1, std::memory_order_relaxed);
    (pending ? ring_pending_ : no_lane_).fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // When an upload reads its source, against the work queued before it on
  // its stream (which may write that source: a host function, say): as the
  // driver reads it. A synchronous one, and any with ordered_reads, reads
  // nothing before that work completed; an asynchronous one reads its first
  // kDriverEagerBytes at once and the rest after it, or all of it at once
  // where that work cannot write it (ReadsAllAtCall). `before` marks that
  // work. What fails here (the stream, or an error of that earlier work) the
  // driver answers for, as without pinshim.
  const bool h2d = dir == CopyDir::kHostToDevice;
  RingCopy c;
  const bool async_long_upload =
      h2d && !(sync || options_.ordered_reads) && bytes > kDriverEagerBytes;
  const bool read_at_call = async_long_upload && ReadsAllAtCall();
  c.wait_after_eager = async_long_upload && !read_at_call;
  if (!WaitForEarlierWork(lane, stream, h2d && (sync || options_.ordered_reads),
                          c.wait_after_eager)) {
    ReleaseLane(lane);
    declined_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const uint64_t cpu_start = ThreadCpuNs();
  const uint32_t workers = nworkers_.load(std::memory_order_relaxed);
  c.dir = dir;
  c.host = host;
  c.dev = dev;
  c.bytes = bytes;
  c.stream = stream;
  c.threads = (helpers < workers ? helpers : workers) + 1;
  PlanPieces(dir, bytes, lane->chunk_bytes, lane->slots, c.threads, &c.chunk, &c.piece);
  if (!h2d && c.chunk % kHugePageBytes == 0 && AdviseFreshDestination(host, bytes, huge_pages_)) {
    c.huge_pieces = true;
    huge_advised_.fetch_add(1, std::memory_order_relaxed);
  }
  setup_ns_.fetch_add(MonotonicNs() - entered_ns, std::memory_order_relaxed);
  const CUresult r = CopyThroughRing(lane, c);
  ReleaseLane(lane);
  own_cpu_ns_.fetch_add(ThreadCpuNs() - cpu_start, std::memory_order_relaxed);
  copies_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (read_at_call) read_at_call_.fetch_add(1, std::memory_order_relaxed);
  info->workers = c.threads;
  info->chunk_bytes = c.chunk;
  *result = r;
  return true;
}

// One pass of a job over the ring: the calling thread's side of it (the
// DMAs it queues and reaps, the pieces it copies itself), while workers
// copy the other pieces.
class Stager::Pass {
 public:
  Pass(Stager* stager, Lane* lane, Job* job, CUdeviceptr dev, CUstream stream)
      : st_(stager), lane_(lane), job_(job), dev_(dev), stream_(stream), S_(job->slots) {}

  CUresult Run() {
    const uint64_t start_ns = MonotonicNs();
    ClaimRing();
    Publish();
    published_ns_ = MonotonicNs();
    st_->wait_ns_.fetch_add(published_ns_ - start_ns, std::memory_order_relaxed);
    job_->live.store(1, std::memory_order_release);
    if (job_->max_workers != 0) {
      st_->work_gen_.fetch_add(1, std::memory_order_acq_rel);
      Futex(&st_->work_gen_, FUTEX_WAKE, job_->max_workers);
    }
    if (job_->h2d) {
      Uploads();
    } else {
      Downloads();
    }
    const uint64_t copied_ns = MonotonicNs();
    st_->copy_ns_.fetch_add(copied_ns - published_ns_, std::memory_order_relaxed);
    Close();
    const uint64_t joined_at = job_->first_join_ns.load(std::memory_order_relaxed);
    if (joined_at != 0) {
      st_->join_ns_.fetch_add(joined_at > published_ns_ ? joined_at - published_ns_ : 0,
                              std::memory_order_relaxed);
      st_->joined_passes_.fetch_add(1, std::memory_order_relaxed);
    }
    st_->passes_.fetch_add(1, std::memory_order_relaxed);
    st_->tail_ns_.fetch_add(MonotonicNs() - copied_ns, std::memory_order_relaxed);
    return r_;
  }

 private:
  // Where in the ring the job writes, once earlier copies' DMAs from those
  // bytes (and those of an event it records again) finished. A host-to-
  // device copy the ring holds whole reuses no slot: one event, after its
  // last DMA, tells every chunk's completion (stream order), and it writes
  // the ring's bytes after the previous such copy's, so that back-to-back
  // uploads overlap their copying with the DMA before. Every other job
  // starts at the ring's start, one event per slot.
  void ClaimRing() {
    whole_ = job_->h2d && job_->nchunks <= S_;
    span_ = uint64_t{whole_ ? job_->nchunks : S_} * job_->chunk;
    base_ = whole_ && lane_->cursor + span_ <= lane_->ring_bytes ? lane_->cursor : 0;
    for (uint32_t e = 0; e < S_; ++e) {
      if (lane_->pending[e] &&
          (!whole_ || (lane_->busy_lo[e] < base_ + span_ && base_ < lane_->busy_hi[e]))) {
        Finish(e);
      }
    }
    if (whole_) {  // a whole upload's event: a free one, else the oldest
      while (whole_ev_ < S_ && lane_->pending[whole_ev_]) ++whole_ev_;
      if (whole_ev_ == S_) {
        whole_ev_ = 0;
        for (uint32_t e = 1; e < S_; ++e) {
          if (lane_->recorded[e] < lane_->recorded[whole_ev_]) whole_ev_ = e;
        }
        Finish(whole_ev_);
      }
    }
    // The next whole upload starts after this one, or, after a larger one,
    // at the slot whose DMA was queued first of those that may still run.
    lane_->cursor = whole_      ? base_ + span_
                    : job_->h2d ? uint64_t{job_->nchunks % S_} * job_->chunk
                                : 0;
  }

  // Waits for an earlier copy's DMAs behind event e (an error there is
  // that copy's, already returned).
  void Finish(uint32_t e) {
    CUresult q = st_->ops_->event_synchronize(lane_->events[e]);
    (void)q;
    lane_->pending[e] = false;
  }

  // The job's shared state, reset before workers may join.
  void Publish() {
    for (uint32_t k = 0; k < job_->nchunks; ++k) {
      job_->done[k].store(0, std::memory_order_relaxed);
      job_->dma_done[k].store(0, std::memory_order_relaxed);
    }
    job_->ring = lane_->ring + base_;
    for (uint32_t s = 0; s < S_; ++s) job_->slot_gen[s].store(1, std::memory_order_relaxed);
    job_->next.store(0, std::memory_order_relaxed);
    job_->abort.store(0, std::memory_order_relaxed);
    job_->joined.store(0, std::memory_order_relaxed);
    job_->first_join_ns.store(0, std::memory_order_relaxed);
  }

  // The event chunk k's DMA completes with.
  uint32_t EventOf(uint32_t k) const { return whole_ ? whole_ev_ : k % S_; }

  // Queues chunk k's DMA, and the event that tells its completion.
  CUresult Issue(uint32_t k) {
    const ElapsedInto timed(&st_->issue_ns_);
    const uint32_t s = k % S_;
    char* slot = job_->Slot(k);
    const uint64_t len = job_->ChunkLen(k);
    const CUdeviceptr dev = dev_ + uint64_t{k} * job_->chunk;
    CUresult e = job_->h2d ? st_->ops_->memcpy_htod_async(dev, slot, len, stream_)
                           : st_->ops_->memcpy_dtoh_async(slot, dev, len, stream_);
    if (e != CUDA_SUCCESS) return e;
    ++issued_;
    if (whole_ && k + 1 != job_->nchunks) return CUDA_SUCCESS;
    // Claimed before the record: a later job waits for these bytes.
    const uint32_t ev = EventOf(k);
    lane_->pending[ev] = true;
    lane_->busy_lo[ev] = whole_ ? base_ : base_ + uint64_t{s} * job_->chunk;
    lane_->busy_hi[ev] = whole_ ? base_ + span_ : lane_->busy_lo[ev] + job_->chunk;
    lane_->recorded[ev] = ++lane_->records;
    e = st_->ops_->event_record(lane_->events[ev], stream_);
    if (e != CUDA_SUCCESS) return e;
    inflight_[tail_++ % S_] = k;
    return CUDA_SUCCESS;
  }

  // Sees the oldest queued DMA complete, if it has.
  bool Reap() {
    if (head_ == tail_) return false;
    const uint32_t k = inflight_[head_ % S_];
    const uint32_t s = k % S_;
    CUresult q = st_->ops_->event_query(lane_->events[EventOf(k)]);
    if (q == CUDA_ERROR_NOT_READY) return false;
    if (q != CUDA_SUCCESS && r_ == CUDA_SUCCESS) r_ = q;
    lane_->pending[EventOf(k)] = false;
    ++head_;
    if (job_->h2d) {
      job_->slot_gen[s].store(k / S_ + 2, std::memory_order_release);
    } else {
      job_->dma_done[k].store(1, std::memory_order_release);
    }
    return true;
  }

  // Reaps only when no piece is ready to copy: every query is a driver
  // call, and they slow the DMAs' submission when made back to back.
  bool ReapIfIdle() {
    const uint64_t next = job_->next.load(std::memory_order_relaxed);
    return (next >= job_->total || !job_->Ready(next)) && Reap();
  }

  // One piece of the calling thread's own, when one is ready. With helper
  // workers it copies only where it has no DMA left to queue before the
  // job's end: the pieces of an upload's last chunk (whose DMA waits for
  // all of them anyway), a download's once all its DMAs completed. Elsewhere
  // a DMA queued late leaves the bus idle (a piece takes longer to copy than
  // the DMA of a chunk), so it watches; unless no worker joined within
  // kAloneNs (every worker busy, pinning a ring for another copy, say): then
  // it copies until one does. Its share matters for short uploads: memory
  // the program just wrote sits in this core's cache, which the workers read
  // only through it (bench/RESULTS.md, "2026-12-02, third part").
  bool Help() {
    bool any = job_->max_workers == 0;
    if (!any && job_->joined.load(std::memory_order_relaxed) == 0 &&
        MonotonicNs() - published_ns_ >= kAloneNs) {
      any = true;
      if (!alone_) {
        alone_ = true;
        st_->alone_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    uint64_t p = job_->next.load(std::memory_order_relaxed);
    while (p < job_->total && job_->Ready(p)) {
      const bool mine = any || (job_->h2d ? p / job_->ppc + 1 == job_->nchunks
                                          : issued_ == job_->nchunks && head_ == tail_);
      if (!mine) return false;
      if (job_->next.compare_exchange_weak(p, p + 1, std::memory_order_acq_rel)) {
        job_->Copy(p);
        st_->own_pieces_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
    }
    return false;
  }

  // A synchronous host-to-device copy returns as the driver's own pageable
  // one does: once the stream's earlier work completed (StageImpl waited
  // for it before any byte was read) and the source was read, its last
  // DMAs possibly still queued (bench/RESULTS.md, page_facts
  // sync_h2d_return).
  void Uploads() {
    while (issued_ < job_->nchunks && r_ == CUDA_SUCCESS) {
      bool progress = false;
      if (job_->done[issued_].load(std::memory_order_acquire) == job_->ppc) {
        if (CUresult e = Issue(issued_)) {
          r_ = e;
          break;
        }
        progress = true;
      }
      if (!progress) progress = ReapIfIdle();
      if (!progress && !Help()) Pause();
    }
  }

  // Each chunk's DMA once its slot's previous chunk was copied out (and,
  // for the first round, its previous DMA completed); chunks copied out as
  // their DMAs complete.
  void Downloads() {
    while (finished_ < job_->nchunks && r_ == CUDA_SUCCESS) {
      bool progress = false;
      if (issued_ < job_->nchunks) {
        const uint32_t k = issued_;
        const bool free_slot =
            k < S_ ? job_->slot_gen[k].load(std::memory_order_acquire) != 0
                   : job_->done[k - S_].load(std::memory_order_acquire) == job_->ppc;
        if (free_slot) {
          if (CUresult e = Issue(k)) {
            r_ = e;
            break;
          }
          progress = true;
        }
      }
      if (!progress) progress = ReapIfIdle();
      while (finished_ < job_->nchunks &&
             job_->done[finished_].load(std::memory_order_acquire) == job_->ppc) {
        ++finished_;
        progress = true;
      }
      if (!progress && !Help()) Pause();
    }
  }

  // Ends the pass: every piece taken by then is finished before the host
  // buffer is the program's again, and a download's DMAs completed.
  void Close() {
    if (r_ != CUDA_SUCCESS) job_->abort.store(1, std::memory_order_release);
    // Sequentially consistent, with the worker's inside-then-live: a store
    // followed by a load of another variable may otherwise pass each other
    // (x86's store buffer does), and a worker joining at that moment would
    // see the job live while this thread sees it outside.
    job_->live.store(0, std::memory_order_seq_cst);
    job_->next.store(job_->total, std::memory_order_seq_cst);
    while (job_->inside.load(std::memory_order_seq_cst) != 0) Pause();
    if (r_ != CUDA_SUCCESS || job_->h2d) return;
    // Device-to-host copies return with the data in place: their DMAs
    // completed by now; the events say so and free the slots.
    while (head_ != tail_) {
      CUresult q = st_->ops_->event_synchronize(lane_->events[EventOf(inflight_[head_ % S_])]);
      if (q != CUDA_SUCCESS && r_ == CUDA_SUCCESS) r_ = q;
      ++head_;
    }
    for (uint32_t e = 0; e < S_; ++e) lane_->pending[e] = false;
  }

  Stager* const st_;
  Lane* const lane_;
  Job* const job_;
  const CUdeviceptr dev_;
  const CUstream stream_;
  const uint32_t S_;
  bool whole_ = false;
  uint64_t span_ = 0;
  uint64_t base_ = 0;
  uint32_t whole_ev_ = 0;
  uint64_t published_ns_ = 0;
  CUresult r_ = CUDA_SUCCESS;
  // DMAs queued and not yet seen complete, oldest first: chunk indices in
  // inflight_[head_ % S_ .. tail_ % S_).
  uint32_t inflight_[kMaxSlots];
  uint32_t head_ = 0, tail_ = 0;
  uint32_t issued_ = 0;    // chunks whose DMA was queued
  uint32_t finished_ = 0;  // device to host: chunks copied out
  bool alone_ = false;     // no worker joined within kAloneNs
};

CUresult Stager::RunJob(Lane* lane, Job* job, CUdeviceptr dev, CUstream stream) {
  return Pass(this, lane, job, dev, stream).Run();
}

uint64_t Stager::TrimIdle(bool all) {
  if (!active()) return 0;
  uint64_t freed = 0;
  const uint64_t now = MonotonicNs();
  for (int i = 0; i < kMaxLanes; ++i) {
    Lane& l = lanes_[i];
    if (l.state.load(std::memory_order_acquire) != kLaneFree) continue;
    if (!all && (options_.idle_trim_ns == 0 ||
                 now - l.last_use_ns.load(std::memory_order_relaxed) < options_.idle_trim_ns)) {
      continue;
    }
    int expected = kLaneFree;
    if (!l.state.compare_exchange_strong(expected, kLaneBinding, std::memory_order_acquire)) {
      continue;
    }
    freed += l.ring_bytes;
    UnpinRing(&l, all ? OwnPinReason::kEvictedForCap : OwnPinReason::kIdleTrim);
    l.state.store(kLaneEmpty, std::memory_order_release);
  }
  return freed;
}

uint64_t Stager::IdleBytes() const {
  if (!active()) return 0;
  uint64_t idle = 0;
  for (int i = 0; i < kMaxLanes; ++i) {
    if (lanes_[i].state.load(std::memory_order_acquire) == kLaneFree) idle += lanes_[i].ring_bytes;
  }
  return idle;
}

void Stager::OnContextDestroyed(CUcontext ctx) {
  if (!active()) return;
  for (int i = 0; i < kMaxLanes; ++i) {
    Lane& l = lanes_[i];
    if (l.ctx.load(std::memory_order_relaxed) != ctx) continue;
    // A ring asked for and not begun: never made. One a worker took and has
    // not begun in the gate (it cannot be inside: the teardown closed the
    // gate and waited): cancelled, the worker makes none.
    int wanted = kLaneWanted;
    if (l.state.compare_exchange_strong(wanted, kLaneBinding, std::memory_order_acquire)) {
      if (l.ctx.load(std::memory_order_relaxed) != ctx) {  // another context's since
        l.state.store(kLaneWanted, std::memory_order_release);
        continue;
      }
      l.ctx.store(nullptr, std::memory_order_relaxed);
      l.state.store(kLaneEmpty, std::memory_order_release);
      continue;
    }
    if (wanted == kLanePinning) {
      l.cancelled.store(true, std::memory_order_release);
      continue;
    }
    int expected = kLaneFree;
    if (!l.state.compare_exchange_strong(expected, kLaneBinding, std::memory_order_acquire)) {
      continue;
    }
    if (l.ctx.load(std::memory_order_relaxed) != ctx) {  // unpinned and pinned again since
      l.state.store(kLaneFree, std::memory_order_release);
      continue;
    }
    // The driver dropped the events and the ring's registration with the
    // context (bench/RESULTS.md, "2026-12-06, seventh part"); the memory is
    // pinshim's to unmap.
    UnmapRing(l.ring, l.ring_bytes);
    account_->Release(PinUse::kStaging, l.ring_bytes);
    ring_bytes_.fetch_sub(l.ring_bytes, std::memory_order_relaxed);
    ReportOwnPin(options_.on_own_pin, OwnPinAction::kUnpinned, OwnPinPart::kStaging,
                 OwnPinReason::kContextDestroyed, reinterpret_cast<uintptr_t>(l.ring), l.ring_bytes,
                 0, CUDA_SUCCESS);
    l.ring = nullptr;
    l.ctx.store(nullptr, std::memory_order_relaxed);
    l.state.store(kLaneEmpty, std::memory_order_release);
  }
}

void Stager::AfterForkChild() {
  // The workers did not survive the fork, and the rings are the parent's.
  active_.store(false, std::memory_order_release);
}

StagerStats Stager::Stats() const {
  StagerStats s;
  s.copies = copies_.load();
  s.bytes = bytes_.load();
  s.declined = declined_.load();
  s.busy_cpus = busy_.load();
  s.no_lane = no_lane_.load();
  s.ring_pending = ring_pending_.load();
  s.ring_deferred = ring_deferred_.load();
  s.read_at_call = read_at_call_.load();
  s.demoted_bytes = demoted_bytes_.load();
  s.fast_load_samples = fast_samples_.load();
  s.huge_advised = huge_advised_.load();
  s.capturing = capturing_.load();
  s.alone = alone_.load();
  s.setup_ns = setup_ns_.load();
  s.wait_ns = wait_ns_.load();
  s.join_ns = join_ns_.load();
  s.copy_ns = copy_ns_.load();
  s.tail_ns = tail_ns_.load();
  s.passes = passes_.load();
  s.joined_passes = joined_passes_.load();
  s.helpers = helpers_.load();
  s.pieces = pieces_.load();
  s.own_pieces = own_pieces_.load();
  s.piece_ns = piece_ns_.load();
  s.issue_ns = issue_ns_.load();
  s.ring_bytes = ring_bytes_.load();
  s.background_rings = background_rings_.load();
  s.workers = nworkers_.load(std::memory_order_relaxed);
  return s;
}

#ifdef PINSHIM_DEBUG_INVARIANTS

PINSHIM_INVARIANT_WALKER InvariantReport Stager::CheckInvariants() const {
  InvariantReport r;
  if (!active() || lanes_ == nullptr) return r;  // off: nothing is staged
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // A ring pinned in the background may be in flight (its worker charges,
  // pins and counts it in steps): given a moment to finish, else S3 waits
  // for a later walk. No new one starts: only a staging call asks for one.
  const bool settled = WaitForRings(uint64_t{100} * 1000000);
  uint64_t ring_bytes = 0;
  for (int i = 0; i < kMaxLanes; ++i) {
    const Lane& l = lanes_[i];
    const int state = l.state.load(std::memory_order_acquire);
    const CUcontext ctx = l.ctx.load(std::memory_order_relaxed);
    const bool setting_up = SettingUp(state);
    r.Expect(state == kLaneEmpty || state == kLaneFree || (!settled && setting_up),
             "S1 every lane is empty or free, or its ring is being pinned in the background", i,
             state);
    if (setting_up) {
      r.Expect(ctx != nullptr, "S2 a ring is pinned in the background for a context", i);
    } else if (state == kLaneEmpty) {
      r.Expect(l.ring == nullptr && ctx == nullptr, "S2 an empty lane holds no ring and no context",
               i);
    } else if (state == kLaneFree) {
      r.Expect(l.ring != nullptr && ctx != nullptr && l.slots >= 2 && l.slots <= kMaxSlots &&
                   l.chunk_bytes != 0 && l.chunk_bytes % page == 0 &&
                   l.ring_bytes == l.chunk_bytes * l.slots,
               "S2 a free lane holds a ring of chunk_bytes x slots in a context", i, l.ring_bytes);
      ring_bytes += l.ring_bytes;
      const auto lo = reinterpret_cast<uintptr_t>(l.ring);
      for (int j = 0; j < i; ++j) {
        const Lane& o = lanes_[j];
        if (o.state.load(std::memory_order_acquire) != kLaneFree || o.ring == nullptr) continue;
        const auto olo = reinterpret_cast<uintptr_t>(o.ring);
        r.Expect(lo + l.ring_bytes <= olo || olo + o.ring_bytes <= lo, "S4 no two rings overlap", j,
                 i);
      }
    }
    for (uint32_t e = 0; e < l.slots && e < kMaxSlots; ++e) {
      if (!l.pending[e]) continue;
      r.Expect(l.busy_lo[e] < l.busy_hi[e] && l.busy_hi[e] <= l.ring_bytes,
               "S6 the ring bytes of DMAs that may still run lie in the ring", i, e);
      for (uint32_t f = 0; f < e; ++f) {
        r.Expect(!l.pending[f] || l.busy_hi[f] <= l.busy_lo[e] || l.busy_hi[e] <= l.busy_lo[f],
                 "S6 no two events' DMAs that may still run share ring bytes", i, e);
      }
    }
    const Job* job = l.job;
    r.Expect(job != nullptr && job->live.load(std::memory_order_acquire) == 0 &&
                 job->next.load(std::memory_order_acquire) >= job->total,
             "S5 every lane's job is over: not live, every piece taken", i);
  }
  if (settled) {
    r.Expect(ring_bytes_.load(std::memory_order_relaxed) == ring_bytes,
             "S3 ring_bytes_ is the free lanes' ring bytes",
             ring_bytes_.load(std::memory_order_relaxed), ring_bytes);
    r.Expect(account_->pinned_for(PinUse::kStaging) == ring_bytes,
             "S3 the account's staging bytes are the rings'",
             account_->pinned_for(PinUse::kStaging), ring_bytes);
  }
  const uint32_t workers = nworkers_.load(std::memory_order_relaxed);
  const int started = workers_started_.load(std::memory_order_acquire);
  r.Expect(workers <= kMaxWorkers && started >= 0 && started <= 2,
           "S7 nworkers_ <= kMaxWorkers and the workers are started, being started or not", workers,
           started);
  return r;
}

bool Stager::CorruptForTesting(Corruption what) {
  if (!active() || lanes_ == nullptr) return false;
  switch (what) {
    case Corruption::kRingBytes:
      ring_bytes_.fetch_xor(static_cast<uint64_t>(sysconf(_SC_PAGESIZE)),
                            std::memory_order_relaxed);
      return true;
    case Corruption::kJobLive:
      lanes_[0].job->live.fetch_xor(1, std::memory_order_relaxed);
      return true;
  }
  return false;
}

#endif  // PINSHIM_DEBUG_INVARIANTS

}  // namespace optimize
}  // namespace pinshim
