// Pinned-memory budgets for enforce mode.
//
// The hooks ask before pinning and tell after unpinning. The decision around
// one pinning the program asked for is ChargeAndPin (below), which the
// pinned-memory hooks and the test harness both call:
//
//   // cuMemHostAlloc hook, enforce mode:
//   CUresult r;
//   switch (ChargeAndPin(&Budget::Process(), Owner::kProgramAlloc, bytes,
//                        [&] { return (r = real(...)) == CUDA_SUCCESS; })) {
//     case Decision::kGranted:  return r;  // pinned, or the driver's error
//     case Decision::kDenied:   return CUDA_ERROR_OUT_OF_MEMORY;
//     case Decision::kFallback: serve pageable memory instead;
//   }
//   // cuMemFreeHost hook, after the real call succeeded:
//   Budget::Process().Release(Owner::kProgramAlloc, bytes_of(ptr));
//
// Two budgets apply, both optional:
// - the process budget: an atomic counter advanced by compare-and-swap only
//   while the result stays within the budget, so it is never exceeded;
// - the node budget: kept in the node ledger (ledger.h), a file in POSIX
//   shared memory that every pinshim process on the node maps.
//
// With a node budget, a process charges against a reservation of node budget
// that it holds in its ledger slot, and the process budget is enforced by
// never letting that reservation exceed it:
// - A charge the reservation covers is one compare-and-swap on the slot's
//   available bytes (plus two atomic adds for the per-owner bytes and the
//   grant count), all on one cache line that only this process's threads
//   write. No lock, no line shared with other processes.
// - A charge it does not cover takes the ledger lock and grows the
//   reservation by a quantum (ReservationQuantum: node budget / 1024, within
//   1 MiB and 64 MiB), or by exactly what is missing when a quantum no longer
//   fits, so that quantization never refuses a request the node has room
//   for. When even that does not fit, the unused reservations of other
//   processes are taken back (and, at most every 100 ms, dead processes
//   reclaimed) before the charge is refused. The refusal is therefore exact:
//   it is decided under the lock, against reservations that then hold only
//   pinned bytes (plus what this process has available, which counts towards
//   the request), so a charge is refused by the node exactly when the bytes
//   pinned on the node plus the request exceed the node budget. The process
//   budget refuses, likewise, exactly when the process's granted bytes plus
//   the request exceed it.
// - A release puts the bytes back into the available bytes with an atomic
//   add; when that leaves more than two quanta idle, the process takes the
//   lock and returns all but one quantum to the node, so that idle
//   reservations stay small and the next charges still need no lock.
// The ledger invariant (ledger.h) keeps the node's pinned bytes within the
// sum of the reservations, and that within the node budget, at every instant
// and under any interleaving, including processes killed at any point: a
// dead process's reservation is reclaimed with its slot.
//
// Policies, applied when a charge does not fit:
// - kDeny: Decision::kDenied; the hook returns the driver's out-of-memory
// error.
// - kFallback: Decision::kFallback; the hook serves pageable memory (for
//   pinshim's own pinning it simply stays unpinned).
// - kEvict: calls the evictor with the shortfall (outside every lock), which
//   unpins pinshim's own idle pinning and Releases it through this API, then
//   retries once; still no room -> the options' after_evict policy (kDeny by
//   default: a budget is a cap, and pageable memory behind the program's back
//   is opt-in). Without an evictor kEvict behaves as after_evict.
//
// Hot path (Charge, Release): no allocation, no output, no system call and
// no lock in the common case; the ledger lock is taken only to change a
// reservation (see above), never on a copy path. A thread-local flag refuses
// a charge made from a signal handler that interrupted this thread inside
// that lock, when the reservation does not cover it, instead of
// deadlocking.
//
// Fork: a child starts at zero, with its own ledger slot (and reservation)
// claimed on its first charge. Pinned memory is not inherited as pinned (the
// kernel does not carry page locks into a child, and CUDA maps pinned memory
// MADV_DONTFORK), so charging the parent's bytes to the child would count them
// twice; the child's frees of inherited pointers are ignored, as Release never
// takes a count below zero. Exit: the process-wide instance leaves the ledger
// in an atexit handler, returning its reservation; later charges are refused by
// policy (the node can no longer account for them) and later releases only
// touch the process count. A process that dies without exiting is reclaimed
// by the others, reservation and all.
#ifndef PINSHIM_SHIM_BUDGET_BUDGET_H_
#define PINSHIM_SHIM_BUDGET_BUDGET_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/budget/ledger.h"
#include "shim/budget/proc.h"
#include "shim/core/config.h"  // Policy, as PINSHIM_POLICY sets it
#include "shim/core/reentry.h"
#include "shim/core/thread_annotations.h"

namespace pinshim {
class PromWriter;

namespace budget {

enum class Decision : uint8_t {
  kGranted = 0,   // pin it; Release the bytes when unpinned
  kDenied = 1,    // fail the call with the driver's out-of-memory error
  kFallback = 2,  // do not pin; serve pageable memory
};

// What stood in the way of a charge.
enum class Limiter : uint8_t {
  kNone = 0,     // nothing: granted at the first attempt
  kProcess = 1,  // the process budget
  kNode = 2,     // the node budget
  kLedger = 3,   // the node ledger could not be consulted (closed at exit,
                 // refused, full, its lock held too long or broken, or
                 // re-entered from a signal handler): the node budget
                 // fails closed
};

const char* DecisionName(Decision decision);  // "granted", "denied", "fallback"
const char* PolicyName(Policy policy);        // "deny", "fallback", "evict"
const char* LimiterName(Limiter limiter);     // "none", "process", "node", "ledger"

// How much node budget a process reserves at a time for a node budget of
// node_budget bytes: node_budget / 1024, at least 1 MiB and at most 64 MiB.
// Large enough that charges rarely take the ledger lock; small enough that
// what many processes hold idle is a small part of the node budget (and it
// is taken back when the node runs short anyway).
uint64_t ReservationQuantum(uint64_t node_budget);

struct BudgetOptions {
  uint64_t process_bytes = 0;  // 0: no process budget (bytes are still counted)
  uint64_t node_bytes = 0;     // 0: no node budget and no ledger
  Policy policy = Policy::kDeny;
  Policy after_evict = Policy::kDeny;  // kDeny or kFallback
  bool shared_ledger = false;          // one ledger for a group of users (mode 0660)
  const char* ledger_path = nullptr;   // null or "": DefaultLedgerPath()
  const char* metrics_path = nullptr;  // written by Tick(); null or "": none
};

// The options PINSHIM_BUDGET, PINSHIM_NODE_BUDGET, PINSHIM_POLICY,
// PINSHIM_LEDGER_SHARED, PINSHIM_LEDGER_PATH and PINSHIM_METRICS_FILE ask for (kDeny after
// eviction). The result points into config, which must outlive Init().
BudgetOptions BudgetOptionsFromConfig(const Config& config);

struct BudgetStatus {
  enum Code : uint8_t {
    kOk = 0,  // message may still hold a note
    // A node budget was asked for but cannot be kept now (the ledger was
    // refused, is full, or its lock is held): pinning is refused by policy
    // until it can (never, for a refused ledger); message says why.
    kNodeRefused = 1,
    kInvalid = 2,  // bad options or a failed write; nothing changed
  };
  Code code = kOk;
  char message[640] = {};  // one line, no newline; empty when nothing to say
  bool ok() const { return code == kOk; }
};

// One decision, for the trace: the BUDGET lines of budget_decision.inc.
// Plain data; valid only during the callback.
struct DecisionRecord {
#define BUDGET(name, record_type, event_type, layout) record_type name;
#define RECORDER(name, layout)
#include "shim/core/budget_decision.inc"
#undef BUDGET
#undef RECORDER
};

// Called on the charging thread after every decision, outside every lock.
using Recorder = void (*)(const DecisionRecord* record);

// Unpins pinshim's own idle pinning, Releasing it through Budget, until about
// bytes_wanted are free; returns the bytes it unpinned. Called outside every
// budget lock; must not call Charge with the evict policy expecting eviction.
using Evictor = uint64_t (*)(uint64_t bytes_wanted);

// Process-side numbers.
struct BudgetSnapshot {
  uint64_t pinned;
  uint64_t pinned_by_owner[kOwnerCount];
  uint64_t reserved;        // node budget this process holds; 0 without a slot
  uint64_t available;       // the part of it not pinned (nor being charged)
  uint64_t process_budget;  // 0: none
  uint64_t grants;
  uint64_t denials;
  uint64_t fallbacks;
  uint64_t evictions;  // evictor calls
  uint64_t evicted_bytes;
  bool node_active;  // in the ledger with a slot (or about to claim one)
  int32_t slot;      // ledger slot index, negative when none
  // Node totals as of the ledger's last refresh (see LedgerHeader); 0 when
  // no ledger.
  uint64_t node_pinned;
  uint64_t node_reserved;  // exact: reservations change under the lock only
  uint64_t node_budget;
};

class Budget {
 public:
  constexpr Budget() = default;
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  // The instance the hooks use. Its Init also registers the fork-child reset
  // (pthread_atfork; unless ClaimProcessForkChild came first) and the
  // at-exit slot release.
  static Budget& Process();

  // For a process that registers one fork handler for all its parts (the
  // library's, shim/hooks/fork_handlers.cc), before any Init: the
  // process-wide instance's Init then registers no fork handler, and the
  // caller's child handler runs ProcessAfterForkChild where the instance's
  // own registration at Init would have run it (after every handler
  // registered earlier). False if an Init came first (it registered).
  static bool ClaimProcessForkChild();
  // The process-wide instance's AfterForkChild, once its Init ran; else
  // nothing (as no handler would have been registered).
  static void ProcessAfterForkChild();

  // Turns enforcement on. Call once, before any Charge. kNodeRefused when a
  // node budget was asked for and cannot be kept (foreign owner, unsafe
  // mode, other layout, unreadable, full, lock held): the node budget fails
  // closed, and message says why.
  BudgetStatus Init(const BudgetOptions& options);

  // Asks to pin bytes for owner and applies the policy. Always kGranted
  // before Init or for zero bytes.
  Decision Charge(Owner owner, uint64_t bytes);

  // Tells that bytes pinned for owner were unpinned. Never takes a count
  // below zero, so releasing what was charged elsewhere is harmless.
  void Release(Owner owner, uint64_t bytes);

  // Installs the evict policy's evictor (null: none). Safe at any time.
  void SetEvictor(Evictor evictor);

  // Installs the decision recorder (null: none). Safe at any time.
  void SetRecorder(Recorder recorder);

  // Installs where warnings go after Init (null: nowhere): one line each
  // time the ledger's lock stalls or the ledger is full. Safe at any time.
  using Warner = void (*)(const char* line);
  void SetWarner(Warner warner);

  // In a fork child: restart at zero and claim a fresh slot on first charge.
  // The process-wide instance has it registered with pthread_atfork.
  void AfterForkChild();

  // Frees this process's ledger slot; further charges are refused by policy.
  // The process-wide instance runs it at exit.
  void Shutdown();

  // For the library's metrics thread, every few seconds: renews this
  // process's heartbeat in its ledger slot, reclaims the slots of dead
  // processes and writes the metrics file if one was configured (the message
  // as WriteMetricsNow's).
  BudgetStatus Tick();

  // Renews the heartbeat of this process's ledger slot, if it holds one: all
  // the library's thread does every few seconds without a metrics file.
  void Heartbeat();

  // Frees the ledger slots of dead processes now; returns how many.
  uint32_t ReclaimDead();

  // Writes Prometheus text (textfile-collector style) atomically to path:
  // written to a temporary file in the same directory, then renamed.
  BudgetStatus WriteMetricsFile(const char* path) const;
  // Families of the process's own that every metrics file gets after the
  // budget's (the library's copy metrics); null: none. Set once at start-up.
  static void SetMetricsExtra(void (*write)(PromWriter& w));

  // Writes the configured metrics file, if any. The message is set only when
  // writing starts failing (one warning per run of failures, with the
  // reason) or works again after failing; otherwise it is empty.
  BudgetStatus WriteMetricsNow();

  // Current numbers (each read atomically, not all at one instant).
  BudgetSnapshot Snapshot() const;

  // The node ledger, open when node enforcement was set up.
  const Ledger& ledger() const { return ledger_; }

  // The last message a lazy ledger join produced after fork ("" if none).
  const char* message() const { return message_; }

  // The least time between two lines on stderr for refused pinnings of the
  // program (default one second); refusals in between are counted into the
  // next line.
  void SetRefusalLineIntervalForTesting(uint64_t ns) { refusal_line_interval_ns_ = ns; }

  // Shuts down and unmaps the ledger, leaving the instance as before Init.
  // Only when no other thread can be inside Charge or Release; never on the
  // process-wide instance.
  void CloseForTesting();

 private:
  static constexpr int32_t kSlotPending = -1;  // in the ledger, slot claimed lazily
  static constexpr int32_t kSlotClosed = -2;   // slot freed at exit
  static constexpr int32_t kSlotOff = -3;      // no node budget for this process
  static constexpr int32_t kSlotRefused = -4;  // node budget asked for, ledger refused

  Limiter TryCharge(Owner owner, uint64_t bytes, uint64_t* shortfall);
  // Says on stderr that the program's pinning was refused (rate-limited).
  void ReportRefusal(Decision decision, Limiter limiter, uint64_t bytes);
  // The process budget alone: no ledger slot, none yet, or none any more.
  Limiter LocalCharge(Owner owner, uint64_t bytes, uint64_t* shortfall);
  // Takes the ledger lock: the reservation did not cover the charge.
  Limiter NodeCharge(Owner owner, uint64_t bytes, uint64_t* shortfall);
  // The *Locked functions need the ledger lock (clang checks it), taken
  // under Reentry::kLedger (the guard is their proof of that).
  Limiter ChargeFromReservationLocked(const ReentryGuard& in_ledger, int32_t slot, Owner owner,
                                      uint64_t bytes, uint64_t* shortfall) REQUIRES(ledger_);
  // Gives back the reservation above one quantum, under the lock.
  void ReturnExcess();
  // Init's node part: opens the ledger, joins it, or fails closed.
  void InitNode(const BudgetOptions& options, BudgetStatus* status);
  // Sets the node budget and claims a slot; kSlotPending when it is full.
  int32_t JoinLocked(const ReentryGuard& in_ledger) REQUIRES(ledger_);
  void Warn(const char* line);
  int32_t EnsureSlotLocked(const ReentryGuard& in_ledger) REQUIRES(ledger_);
  bool OwnsSlotLocked(int32_t slot) const REQUIRES(ledger_);
  uint64_t ProcessPinned() const;
  using Counter = std::atomic<uint64_t> Budget::*;
  using SlotCounter = std::atomic<uint64_t> LedgerSlot::*;
  using HeaderCounter = std::atomic<uint64_t> LedgerHeader::*;
  // Adds n to a decision counter here, in this process's slot and in the
  // node's totals.
  void Count(Counter local, SlotCounter in_slot, HeaderCounter in_header, uint64_t n);
  void ResetCounters();

  // The process's books while it holds no ledger slot (no node budget, or
  // before the slot is claimed after fork, or after exit). With a slot, the
  // slot keeps them, on the one line every charge and release touches
  // anyway.
  alignas(64) std::atomic<uint64_t> pinned_{0};
  std::atomic<uint64_t> pinned_by_owner_[kOwnerCount] = {};
  std::atomic<uint64_t> grants_{0};

  // Set by Init, read on every charge.
  alignas(64) std::atomic<bool> enabled_{false};
  std::atomic<int32_t> slot_{kSlotOff};
  // ReservationQuantum of the node budget in force, as of the last time
  // this process held the lock; releases compare against it.
  std::atomic<uint64_t> quantum_{0};
  uint64_t process_limit_ = 0;  // UINT64_MAX when there is no process budget
  uint64_t process_budget_ = 0;
  Policy policy_ = Policy::kDeny;
  Policy after_evict_ = Policy::kDeny;
  std::atomic<Evictor> evictor_{nullptr};
  std::atomic<Recorder> recorder_{nullptr};
  std::atomic<Warner> warner_{nullptr};
  uint64_t node_bytes_ = 0;  // the node budget configured, capped

  // Rare paths.
  alignas(64) std::atomic<uint64_t> denials_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> evicted_bytes_{0};
  std::atomic<uint64_t> last_refusal_line_ns_{0};  // 0: no line yet
  std::atomic<uint64_t> refusals_unreported_{0};
  uint64_t refusal_line_interval_ns_ = 1000 * 1000 * 1000;
  Ledger ledger_;
  ProcessIdentity self_ GUARDED_BY(ledger_) = {};
  char metrics_path_[4096] = {};
  std::atomic<bool> metrics_failing_{false};
  std::atomic<bool> full_warned_{false};  // the ledger-full message was given
  char message_[640] = {};
};

// The enforce decision around one pinning the program asked for: charges
// `bytes` to `owner`; denied or fallback, returns that without calling `pin`;
// granted, calls `pin()` (true: it pinned) and releases the bytes again when
// it did not, so a failed pinning is never counted. `budget` null (not
// enforcing, or arguments the driver rejects without pinning): calls `pin`
// and returns kGranted. The caller acts on a denial (the driver's
// out-of-memory error) or a fallback (pageable memory in its place).
template <typename Pin>
Decision ChargeAndPin(Budget* budget, Owner owner, uint64_t bytes, Pin&& pin) {
  if (budget == nullptr) {
    pin();
    return Decision::kGranted;
  }
  const Decision decision = budget->Charge(owner, bytes);
  if (decision != Decision::kGranted) return decision;
  if (!pin()) budget->Release(owner, bytes);
  return decision;
}

}  // namespace budget
}  // namespace pinshim

#endif  // PINSHIM_SHIM_BUDGET_BUDGET_H_
