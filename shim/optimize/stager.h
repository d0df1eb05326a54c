// Staged copies: a host<->device copy of pageable memory that optimize mode
// does not pin in place (used once, not hot yet, untracked, refused by the
// cap) runs through a ring of pinned chunks instead of the driver's own
// pageable path. Worker threads copy the program's bytes into (or out of)
// one chunk while the DMA of the neighbouring chunk runs on the program's
// stream; the calling thread issues the DMAs and helps copying.
//
// What the program sees is what the driver documents for pageable memory
// (invariants 1 and 9, shim/INVARIANTS.md; bench/RESULTS.md has the
// measurements): a host-to-device copy returns
// once its source has been read (its last DMAs may still be queued; later
// work on the stream, or a synchronization, sees them), a device-to-host
// copy returns with the data in place, and a synchronous host-to-device
// copy returns once the stream's earlier work completed and its source was
// read, its last DMAs possibly still queued, as the driver's own pageable
// copies were measured to do (bench/RESULTS.md, "2026-12-02: staged copies
// tuned on the H200"). Stream order is the stream's own: the DMAs go on the
// stream the program named (or its per-thread default stream). The source
// is read when the driver reads it, against the work queued before the copy
// (which may write it: a host function, say): a synchronous upload reads
// nothing before that work completed; an asynchronous one reads its first
// 2 MiB at once and the rest after that work, so one of at most 2 MiB
// returns at once and a larger one waits for it, as the driver's do
// (StagerOptions::ordered_reads: every upload waits). Where no earlier work
// can write pageable memory (ReadsAllAtCall: no host function, stream
// callback or graph was ever queued in the process, and no device can touch
// pageable memory), an asynchronous upload reads all of its source at the
// call, which gives the device the same bytes, and returns without waiting
// for that work.
//
// Stage() declines (the caller makes the driver call) when the copy is
// smaller than the direction's threshold, its device range is not one
// allocation the driver knows, the host range is not mapped, no lane is
// free, the ring cannot be pinned (cap, budget), its ring is being pinned,
// the stream is capturing (a graph must not copy the ring), or the
// machine's CPUs are busy (fewer than two idle cores: the driver's
// path costs the program less then).
//
// Rings: pinning one costs milliseconds (its pages made present, then
// registered: bench/RESULTS.md), more than the driver takes for a copy of
// tens of MiB, and the program's own driver calls wait while the driver
// registers it (about a millisecond for the default ring; cuMemHostAlloc
// held them up to ten times longer). So the first copy
// that needs a ring in a context asks a worker to pin it and goes to the
// driver meanwhile, unless the driver's copy would take longer than pinning
// the ring and staging the copy (CostModel: from about 96 MiB at the
// default ring of 16 MiB: WaitsForRing); then it waits for the ring,
// pinned on its own thread.
// Copies that come while a worker pins go to the driver. The worker pins
// inside the context gate (shim/core/context_gate.h), so a teardown of that
// context waits for it, and its ring is then given back with the context.
//
// Threads: lanes (one ring each, one copy at a time) are taken with one
// CAS; workers are shared by all lanes and sleep on a futex when idle. No
// lock is held across a driver call. Fork: in a child staging is off.
#ifndef PINSHIM_SHIM_OPTIMIZE_STAGER_H_
#define PINSHIM_SHIM_OPTIMIZE_STAGER_H_

#include <atomic>
#include <cstdint>

#include "shim/core/context_gate.h"
#include "shim/core/events.h"
#include "shim/core/registry.h"
#include "shim/optimize/driver_ops.h"
#include "shim/optimize/fresh_pages.h"
#include "shim/optimize/invariants.h"
#include "shim/optimize/path_judge.h"
#include "shim/optimize/pin_account.h"

namespace pinshim {
namespace optimize {

struct StagerOptions {
  uint32_t workers = 0;  // 0: the measured default, from the core count (DefaultWorkers)
  uint64_t chunk_bytes = uint64_t{2} << 20;    // a ring slot; copies may use less of it
  uint32_t slots = 8;                          // ring depth
  uint64_t min_h2d_bytes = uint64_t{1} << 20;  // smaller copies go to the driver
  uint64_t min_d2h_bytes = uint64_t{256} << 10;
  uint64_t idle_trim_ns = uint64_t{10} * 1000000000;  // rings idle this long are given back
  bool load_aware = true;                             // use only the cores /proc/stat says are idle
  // Rings pinned by a worker while the first copies go to the driver (see
  // above); false: every ring is pinned by the copy that needs it.
  bool background_rings = true;
  // An upload reads its source only once the work queued before it on its
  // stream completed (PINSHIM_STAGE_ORDERED: the synchronization the CUDA
  // documentation states for pageable memory). False: as the driver reads
  // it (see above).
  bool ordered_reads = false;
  // Context teardowns wait for rings being pinned in the background (the
  // hooks' gate); null: nothing to wait for (no teardown can race).
  ContextGate* teardown_gate = nullptr;
  OwnPinCallback on_own_pin = nullptr;
  // The self-check (path_judge.h): a ring is pinned for copies that could
  // go without it only once the program has spent as long in the driver's
  // own copies of that direction as pinning the ring takes. Null: always.
  const PathJudge* judge = nullptr;
  // The program's device allocations as the hooks saw them (kDevice
  // regions): a copy's device range is checked there first, without a
  // driver call. Null, or not found there: the driver is asked.
  const Registry* allocations = nullptr;
};

// What a staged copy was, for the trace.
struct StagedInfo {
  uint32_t workers = 0;  // threads that copied (the calling thread included)
  uint64_t chunk_bytes = 0;
  bool pinned_ring = false;  // its ring was pinned on the calling thread, in this call
};

struct StagerStats {
  uint64_t copies;  // staged
  uint64_t bytes;
  uint64_t declined;      // went to the driver (busy, small copies not counted)
  uint64_t busy_cpus;     // of those: no idle cores
  uint64_t no_lane;       // of those: every lane busy, or no ring
  uint64_t ring_pending;  // of those: their context's ring was being pinned
  // of those: no ring yet, and the program had not yet spent as long in
  // the driver's copies of that direction as pinning one takes
  uint64_t ring_deferred;
  uint64_t huge_advised;  // downloads whose fresh destination was advised for huge pages
  // Asynchronous uploads over kDriverEagerBytes read whole at the call,
  // without waiting for their stream's earlier work (ReadsAllAtCall).
  uint64_t read_at_call;
  // Source bytes of uploads that workers read and then demoted from their
  // cores' caches to the shared one (CPUs with CLDEMOTE; 0 elsewhere), so
  // the program's next write of its buffer need not invalidate them there:
  // on the GPU host's CPU a write of memory other cores had just read took
  // up to 1.5 times as long (bench/RESULTS.md, "2026-12-07").
  uint64_t demoted_bytes;
  // Looks at /proc/stat that workers took after their pieces (FastSample).
  uint64_t fast_load_samples;
  uint64_t capturing;  // of those: their stream was capturing (or its status unknown)
  // Staged passes in which no worker joined within 200 us, so the calling
  // thread copied alone until one did (workers slow to wake, or all busy).
  uint64_t alone;
  // Where staged copies spent their time, summed over them (ns; the summary
  // prints microseconds): setup, from the call to its first pass (checks,
  // the load sample, a lane, and for an upload that reads nothing before
  // the stream's earlier work completed, that work); wait, from each pass's start to its job's
  // publication (earlier DMAs still reading the ring bytes it writes);
  // join, from publication to the first worker's arrival (passes a worker
  // joined); copy, from publication until every chunk was copied and its
  // DMA queued (to the host: copied out); tail, from then to the pass's end
  // (downloads' last DMAs).
  uint64_t setup_ns, wait_ns, join_ns, copy_ns, tail_ns;
  uint64_t passes, joined_passes;
  uint64_t helpers;  // workers that copied a piece, summed over the passes
  // Pieces the workers copied, and the time they spent copying them (from
  // each worker's join to its last piece); the owner's time queueing DMAs
  // and their events.
  uint64_t pieces, piece_ns, issue_ns;
  uint64_t own_pieces;        // pieces the copying threads copied themselves
  uint64_t ring_bytes;        // pinned for rings now
  uint64_t background_rings;  // rings a worker pinned
  uint32_t workers;           // the pool's size
};

class Stager {
 public:
  static constexpr int kMaxLanes = 8;
  static constexpr int kMaxSlots = 8;
  static constexpr uint32_t kMaxChunks = 512;  // per pass; larger copies take several
  static constexpr uint32_t kMaxWorkers = 32;

  constexpr Stager() = default;
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // ops and account outlive the stager. False: staging stays off.
  bool Init(const DriverOps* ops, PinAccount* account, const StagerOptions& options);
  bool active() const { return active_.load(std::memory_order_acquire); }

  // The measured default worker count for `cores` online cores.
  static uint32_t DefaultWorkers(uint32_t cores);

  // Idle cores, times 16, of `cores` over a /proc/stat interval of `total`
  // ticks of which `busy` were busy, `own` of those spent staging (by the
  // workers and the threads that staged): the stager's own copying is not
  // load that should make it copy with fewer threads.
  static uint32_t IdleCoresX16(uint64_t busy, uint64_t total, uint64_t own, uint32_t cores);
  // The idle cores staging may use, times 16: the 50 ms sample's figure, or
  // the workers' 10 ms one (fast_age_ns old) where that is at least two
  // cores lower and under 20 ms old. Load that rises is then seen within about 10 ms of
  // staged copying; load that falls, within 50 ms.
  static uint32_t UsableIdleX16(uint32_t slow_x16, uint32_t fast_x16, uint64_t fast_age_ns);

  // Whether a copy of `bytes` in `dir` that needs a ring of `ring_bytes`
  // waits for it to be pinned (the driver's pageable copy would take longer
  // than pinning the ring and staging the copy) rather than go to the
  // driver while a worker pins the ring.
  static bool WaitsForRing(CopyDir dir, uint64_t bytes, uint64_t ring_bytes);
  // Whether pinning a ring for this copy pays: it waits for one
  // (WaitsForRing), or the program spent as long in the driver's copies of
  // that direction as pinning one takes (StagerOptions::judge).
  bool RingWorthIt(CopyDir dir, uint64_t bytes) const;

  // The cost model's ratio of the driver's time for a pageable copy of
  // `bytes` in `dir` to a staged copy's (for PathJudge::Take).
  static double ExpectedWin(CopyDir dir, uint64_t bytes);

  // Whether a copy of `bytes` in `dir` is worth staging (size only; one load).
  bool Wants(CopyDir dir, uint64_t bytes) const {
    return active() && (dir == CopyDir::kHostToDevice ? bytes >= options_.min_h2d_bytes
                                                      : bytes >= options_.min_d2h_bytes);
  }

  // Runs the copy between host [host, host + bytes) and device [dev, dev +
  // bytes) in `dir` through a ring, on `stream` (RecordableStream form).
  // `sync`: the call was a synchronous copy (a host-to-device one returns
  // once the stream's earlier work completed and the source was read; a
  // device-to-host one, like every one, with its data in place). Returns
  // false, having done nothing, when it declines; else *result is the
  // copy's result and *info what it used.
  bool Stage(CopyDir dir, void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream, bool sync,
             CUresult* result, StagedInfo* info);

  // Reads host [host, host + bytes), at most kDriverEagerBytes, into a ring
  // now and queues its DMA to dev on `stream`: the first bytes of an
  // asynchronous upload of memory pinned in place, which the driver's
  // upload of that pageable memory reads at the call (Optimizer::
  // UploadEagerHead). Unlike Stage, whatever the size and the load (the
  // calling thread copies alone when no core is idle); the caller checked
  // the device range. Declines (false) with no lane or ring, or while the
  // stream captures.
  bool StageEagerHead(void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream,
                      CUresult* result, StagedInfo* info);

  // How much of an asynchronous pageable upload the driver reads at call
  // time: the first 2 MiB, the rest only once the work queued before it on
  // its stream completed (measured with page_facts hostfunc_order: a host
  // function that rewrites the source queued ahead of the copy; a
  // synchronous upload reads nothing before that work completed;
  // tests/fakecuda/driver_behavior.h).
  static constexpr uint64_t kDriverEagerBytes = uint64_t{2} << 20;

  // Waits until no ring is being pinned in the background; false when one
  // still is after timeout_ns.
  bool WaitForRings(uint64_t timeout_ns) const;

  // Gives back rings idle for idle_trim_ns (from the trim thread); all
  // idle ones with `all` (the cap or a budget needs the memory).
  uint64_t TrimIdle(bool all = false);
  uint64_t IdleBytes() const;
  // ctx was destroyed: its rings went with it.
  void OnContextDestroyed(CUcontext ctx);
  void AfterForkChild();
  // Starts the workers and takes the first load sample on a thread of
  // their own, off every copy's path (at the engine's attach): until they
  // run, staging declines and the driver copies. False when that thread
  // could not start (the first copy staging takes then starts them).
  bool StartWorkersInBackground();
  // Whether the workers have been started (by either way).
  bool WorkersStarted() const { return workers_started_.load(std::memory_order_acquire) == 2; }

  // Called before the program queues a host function, a stream callback or
  // a graph launch (any of which may write pageable memory when it runs):
  // from then on asynchronous uploads read their source as the driver does.
  // (A load first: every graph launch comes here, and the line stays shared.)
  void NoteHostWorkQueued() {
    if (!host_work_queued_.load(std::memory_order_relaxed)) {
      host_work_queued_.store(true, std::memory_order_relaxed);
    }
  }

  StagerStats Stats() const;

#ifdef PINSHIM_DEBUG_INVARIANTS
  // Debug builds (invariants.h): walks the lanes (lock-free; no staging
  // call in flight). Checks, with shim/INVARIANTS.md's numbers in brackets:
  //  S1 every lane is empty or free (busy and binding exist only inside a
  //     call), or its ring is being pinned in the background (then S3 is
  //     not checked: the ring's charge and its bytes are made in steps)
  //  S2 an empty lane holds no ring and no context; a free one a ring of
  //     chunk_bytes x slots in a context, with 2 <= slots <= kMaxSlots and
  //     page-multiple chunks
  //  S3 ring_bytes_ is the free lanes' ring bytes, and the account's staging
  //     bytes equal it (the stager is their only charger)
  //  S4 no two rings overlap
  //  S5 every lane's job is over: not live, every piece taken, so no worker
  //     copies to or from the program's memory any more [9]
  //  S6 the ring bytes of DMAs that may still run lie in the ring, and no
  //     two events' such bytes overlap (a job writes none of them) [9]
  //  S7 nworkers_ <= kMaxWorkers; workers are started, not started, or
  //     being started (by the thread StartWorkersInBackground made, while
  //     staging declines)
  InvariantReport CheckInvariants() const;

  // Breaks one invariant on purpose, so a test sees the walker report it;
  // the same call again restores it. False when nothing to break exists
  // (kRingBytes needs no ring; kJobLive needs none either).
  enum class Corruption { kRingBytes, kJobLive };
  bool CorruptForTesting(Corruption what);
#endif

 private:
  struct Lane;
  struct Job;
  class Pass;

  Lane* TakeLane(CUcontext ctx, CopyDir dir, uint64_t bytes, bool* pending, bool* pinned_now);
  bool WaitsForRingHere(CopyDir dir, uint64_t bytes) const;
  // Whether no work the program queued can write pageable memory: no host
  // function, callback or graph queued so far, and no device with
  // CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS (asked once), unless
  // ordered_reads.
  bool ReadsAllAtCall();
  void PinRingInBackground(Lane* lane);
  void ReleaseLane(Lane* lane);
  bool PinRing(Lane* lane, CUcontext ctx);
  void UnpinRing(Lane* lane, OwnPinReason why);
  uint32_t UsableWorkers();
  // /proc/stat's CPU times, and staging's own CPU time, at one look.
  struct LoadMark {
    uint64_t busy = 0, total = 0, own_ns = 0;
  };
  enum class Look { kUnreadable, kFirst, kNoTicks, kFigure };
  // A look at /proc/stat against *mark, which then moves to it (guarded by
  // sampling_): kFigure sets *idle_x16 to the idle cores since *mark, times
  // 16; kFirst, no look before; kNoTicks, no tick since.
  Look LookAtLoad(LoadMark* mark, uint32_t* idle_x16);
  // A worker's look at /proc/stat after its pieces, at most every 10 ms.
  void FastSample();
  void StartWorkers();
  static void* StarterMain(void* arg);
  static void* WorkerMain(void* arg);
  void WorkerLoop();
  CUresult RunJob(Lane* lane, Job* job, CUdeviceptr dev, CUstream stream);
  // A staged copy's plan: what it moves, and in what pieces.
  struct RingCopy {
    CopyDir dir = CopyDir::kHostToDevice;
    void* host = nullptr;
    CUdeviceptr dev = 0;
    uint64_t bytes = 0;
    CUstream stream = nullptr;
    uint32_t threads = 1;  // the calling thread and its helpers
    uint64_t chunk = 0;
    uint64_t piece = 0;
    bool wait_after_eager = false;  // an upload's first kDriverEagerBytes before the stream's work
    // A download into fresh memory advised for huge pages: after a head up
    // to the destination's first huge-page boundary, one piece per huge
    // page (fresh_pages.h says why).
    bool huge_pieces = false;
  };
  // Whether staging takes this copy now (counted when not); *helpers: the
  // workers that may help, *ctx: the current context.
  bool Admits(CopyDir dir, void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream,
              bool eager_head, uint32_t* helpers, CUcontext* ctx);
  // Marks (and, for wait_first, waits for) the work queued before the copy
  // on its stream; false when the driver refused.
  bool WaitForEarlierWork(Lane* lane, CUstream stream, bool wait_first, bool wait_after_eager);
  // The chunk and piece sizes of a copy of bytes through a ring of slots
  // chunks of ring_chunk, by threads threads.
  static void PlanPieces(CopyDir dir, uint64_t bytes, uint64_t ring_chunk, uint32_t slots,
                         uint32_t threads, uint64_t* chunk, uint64_t* piece);
  // The copy, as passes over the lane's ring; the driver's result.
  CUresult CopyThroughRing(Lane* lane, const RingCopy& c);
  bool StageImpl(CopyDir dir, void* host, CUdeviceptr dev, uint64_t bytes, CUstream stream,
                 bool sync, bool eager_head, CUresult* result, StagedInfo* info);

  const DriverOps* ops_ = nullptr;
  // ops_->thread_exchange_capture_mode, kept here for a starting worker
  // (which reads nothing of ops_ until it pins a ring).
  CUresult (*exchange_capture_mode_)(CUstreamCaptureMode*) = nullptr;
  PinAccount* account_ = nullptr;
  StagerOptions options_;
  std::atomic<bool> active_{false};
  Lane* lanes_ = nullptr;  // kMaxLanes
  // Set at Init, lowered once by StartWorkers when fewer threads started;
  // read by every staging call meanwhile.
  std::atomic<uint32_t> nworkers_{0};
  std::atomic<int> workers_started_{0};  // 0 no, 1 starting, 2 yes
  std::atomic<uint32_t> work_gen_{0};    // futex: bumped when a job is published
  std::atomic<uint64_t> idle_sample_ns_{0};
  std::atomic<uint32_t> idle_cores_x16_{0};  // idle cores seen last, times 16
  LoadMark slow_mark_;                       // the 50 ms sample's last look, guarded by sampling_
  // CPU time threads spent staging (thread CPU clocks), for the load sample.
  std::atomic<uint64_t> own_cpu_ns_{0};
  std::atomic<bool> sampling_{false};
  // The workers' short sample (FastSample); its figure UINT32_MAX until the
  // first one. fast_mark_ guarded by sampling_.
  std::atomic<uint64_t> fast_sample_ns_{0};
  std::atomic<uint32_t> fast_idle_x16_{UINT32_MAX};
  LoadMark fast_mark_;
  std::atomic<uint64_t> fast_samples_{0};
  std::atomic<uint64_t> copies_{0}, bytes_{0}, declined_{0}, busy_{0}, no_lane_{0}, ring_bytes_{0};
  std::atomic<uint64_t> ring_pending_{0}, background_rings_{0}, capturing_{0}, alone_{0};
  std::atomic<uint64_t> ring_deferred_{0};
  std::atomic<uint64_t> huge_advised_{0};
  std::atomic<uint64_t> read_at_call_{0};
  std::atomic<uint64_t> demoted_bytes_{0};
  // 0: not asked yet; 1: no device touches pageable memory; 2: one does, or
  // the driver did not say.
  std::atomic<int> pageable_access_{0};
  std::atomic<bool> host_work_queued_{false};
  HugePageMode huge_pages_ = HugePageMode::kUnknown;
  std::atomic<uint64_t> setup_ns_{0}, wait_ns_{0}, join_ns_{0}, copy_ns_{0}, tail_ns_{0};
  std::atomic<uint64_t> passes_{0}, joined_passes_{0}, helpers_{0};
  std::atomic<uint64_t> pieces_{0}, piece_ns_{0}, issue_ns_{0}, own_pieces_{0};
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_STAGER_H_
