#include "shim/budget/budget.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pinshim {
namespace budget {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// A refused charge looks for dead processes holding the node's bytes, but at
// most this often node-wide: scanning /proc under the lock is not free, and
// a node at its budget refuses often.
constexpr uint64_t kDenyReclaimIntervalNs = 100 * 1000 * 1000;

// This thread holds Reentry::kLedger while it holds (or is taking) the
// ledger lock, so a signal handler that charges on the same thread is
// refused instead of deadlocking; Reentry::kEvictor while it runs the
// evictor: no eviction from inside eviction (shim/core/reentry.h).

Budget g_process_budget;

// Whether the process-wide instance's Init ran (from then on every fork
// child resets it), and whether one fork handler of the whole process took
// that reset over (ClaimProcessForkChild).
std::atomic<bool> g_fork_child_armed{false};
std::atomic<bool> g_fork_child_claimed{false};

void ProcessForkChild() { g_process_budget.AfterForkChild(); }
void ProcessAtExit() { g_process_budget.Shutdown(); }

// Subtracts at most the current value; returns what was taken.
uint64_t SaturatingSub(std::atomic<uint64_t>& counter, uint64_t bytes) {
  uint64_t cur = counter.load(kRelaxed);
  uint64_t take;
  do {
    take = bytes < cur ? bytes : cur;
  } while (!counter.compare_exchange_weak(cur, cur - take, kRelaxed, kRelaxed));
  return take;
}

uint64_t Min(uint64_t a, uint64_t b) { return a < b ? a : b; }

// Serves a charge from the slot's available bytes with one compare-and-swap,
// the whole of the node path when the reservation covers it. False when it
// does not, or when the slot was closed at exit.
inline bool TakeAvailable(LedgerSlot& slot, Owner owner, uint64_t bytes) {
  uint64_t word = slot.available.load(kRelaxed);
  while ((word & kAvailableClosed) == 0 && AvailableBytes(word) >= bytes) {
    // Only the low bits change: bytes <= the available bytes.
    if (slot.available.compare_exchange_weak(word, word - bytes, kRelaxed, kRelaxed)) {
      // After the take, so the slot's bytes never exceed what its
      // reservation covers.
      slot.bytes[static_cast<int>(owner)].fetch_add(bytes, kRelaxed);
      slot.grants.fetch_add(1, kRelaxed);
      return true;
    }
  }
  return false;
}

}  // namespace

uint64_t ReservationQuantum(uint64_t node_budget) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const uint64_t share = node_budget / 1024;
  return share < kMiB ? kMiB : share > 64 * kMiB ? 64 * kMiB : share;
}

const char* DecisionName(Decision decision) {
  switch (decision) {
    case Decision::kGranted: return "granted";
    case Decision::kDenied: return "denied";
    case Decision::kFallback: return "fallback";
  }
  return "unknown";
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kDeny: return "deny";
    case Policy::kFallback: return "fallback";
    case Policy::kEvict: return "evict";
  }
  return "unknown";
}

const char* LimiterName(Limiter limiter) {
  switch (limiter) {
    case Limiter::kNone: return "none";
    case Limiter::kProcess: return "process";
    case Limiter::kNode: return "node";
    case Limiter::kLedger: return "ledger";
  }
  return "unknown";
}

BudgetOptions BudgetOptionsFromConfig(const Config& config) {
  BudgetOptions options;
  options.process_bytes = config.has_budget ? config.budget_bytes : 0;
  options.node_bytes = config.has_node_budget ? config.node_budget_bytes : 0;
  options.policy = config.policy;
  options.shared_ledger = config.ledger_shared;
  options.ledger_path = config.ledger_path;
  options.metrics_path = config.metrics_file;
  return options;
}

Budget& Budget::Process() { return g_process_budget; }

BudgetStatus Budget::Init(const BudgetOptions& options) {
  BudgetStatus status;
  if (enabled_.load(std::memory_order_acquire)) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message), "budget already initialised");
    return status;
  }
  if (options.policy != Policy::kDeny && options.policy != Policy::kFallback &&
      options.policy != Policy::kEvict) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message), "unknown budget policy %u",
             static_cast<unsigned>(options.policy));
    return status;
  }
  if (options.after_evict != Policy::kDeny && options.after_evict != Policy::kFallback) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message),
             "the policy after eviction must be deny or fallback");
    return status;
  }
  const size_t path_len = options.metrics_path ? strlen(options.metrics_path) : 0;
  if (path_len >= sizeof(metrics_path_)) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message), "metrics file path too long");
    return status;
  }
  memcpy(metrics_path_, options.metrics_path ? options.metrics_path : "", path_len + 1);
  metrics_failing_.store(false, kRelaxed);
  process_budget_ = options.process_bytes;
  process_limit_ = options.process_bytes != 0 ? options.process_bytes : UINT64_MAX;
  policy_ = options.policy;
  after_evict_ = options.after_evict;
  ResetCounters();
  slot_.store(kSlotOff, kRelaxed);

  if (options.node_bytes != 0) InitNode(options, &status);

  if (this == &g_process_budget) {
    static bool registered = false;
    if (!registered) {
      registered = true;
      g_fork_child_armed.store(true, std::memory_order_release);
      if (!g_fork_child_claimed.load(std::memory_order_acquire)) {
        pthread_atfork(nullptr, nullptr, ProcessForkChild);
      }
      atexit(ProcessAtExit);
    }
  }
  enabled_.store(true, std::memory_order_release);
  return status;
}

// The node budget fails closed: asked for, but not kept (the ledger cannot
// be opened, is someone else's, is full, or its lock is held), it refuses
// every pinning the policy decides on, rather than letting the process pin
// without a node cap. Which problems clear by themselves (a lock freed, a
// slot freed) the next charge finds out.
void Budget::InitNode(const BudgetOptions& options, BudgetStatus* status) {
  // Reservations are counted in 48 bits (see kAvailableBytesMask); a node
  // budget beyond that is no limit on any real machine.
  node_bytes_ = Min(options.node_bytes, kLedgerMaxNodeBudget);
  char default_path[128];
  const char* path = options.ledger_path;
  if (path == nullptr || path[0] == '\0') {
    DefaultLedgerPath(options.shared_ledger, geteuid(), default_path, sizeof(default_path));
    path = default_path;
  }
  LedgerOpenOptions open_options;
  open_options.path = path;
  open_options.shared = options.shared_ledger;
  open_options.create = true;
  open_options.uid = geteuid();
  char why[512];
  if (ledger_.Open(open_options, why, sizeof(why)) != LedgerOpen::kOk) {
    status->code = BudgetStatus::kNodeRefused;
    snprintf(status->message, sizeof(status->message),
             "%s; the node budget cannot be kept, so pinning is refused (PINSHIM_POLICY decides "
             "what the program gets)",
             why);
    slot_.store(kSlotRefused, kRelaxed);
    return;
  }
  slot_.store(kSlotPending, kRelaxed);
  ReentryGuard in_ledger(Reentry::kLedger);
  if (!ledger_.Lock()) {
    char line[512];
    if (!ledger_.TakeLockWarning(line, sizeof(line))) snprintf(line, sizeof(line), "%s", why);
    status->code = BudgetStatus::kNodeRefused;
    snprintf(status->message, sizeof(status->message), "%s", line);
    return;
  }
  ledger_.ReclaimDeadLocked();
  const int32_t slot = EnsureSlotLocked(in_ledger);
  const uint64_t in_force = ledger_.header().node_budget.load(kRelaxed);
  ledger_.Unlock();
  if (slot < 0) {
    status->code = BudgetStatus::kNodeRefused;
    snprintf(status->message, sizeof(status->message), "%s", message_);
    full_warned_.store(true, kRelaxed);  // this message is the warning
  } else if (in_force != node_bytes_) {
    snprintf(status->message, sizeof(status->message),
             "node budget of %llu bytes set by other running processes "
             "is smaller than the configured %llu; using %llu",
             static_cast<unsigned long long>(in_force),
             static_cast<unsigned long long>(node_bytes_),
             static_cast<unsigned long long>(in_force));
  }
}

// Sets the node budget this process was configured with, when it is the
// first, or stricter than the one in force, and claims a slot.
int32_t Budget::JoinLocked(const ReentryGuard& in_ledger) {
  LedgerHeader& h = ledger_.header();
  // The strictest budget among the live processes wins, so no process sees
  // the node exceed what it was told; with nobody left, the newcomer's
  // budget replaces a stale one.
  const uint64_t stored = Min(h.node_budget.load(kRelaxed), kLedgerMaxNodeBudget);
  if (stored == 0 || ledger_.LiveSlotsLocked() == 0 || node_bytes_ < stored) {
    h.node_budget.store(node_bytes_, kRelaxed);
    // Unused reservations made under the larger budget would let their
    // owners keep charging past the new one; take them all back, so that
    // only what is pinned still counts.
    if (stored != 0 && node_bytes_ < stored) ledger_.TakeUnusedLocked(kLedgerSlotCount, UINT64_MAX);
  }
  (void)in_ledger;
  ReadSelfIdentity(&self_);
  int claimed = ledger_.ClaimSlotLocked(self_, process_budget_, static_cast<uint8_t>(policy_));
  if (claimed < 0 && ledger_.ReclaimDeadLocked() > 0) {
    claimed = ledger_.ClaimSlotLocked(self_, process_budget_, static_cast<uint8_t>(policy_));
  }
  if (claimed < 0) {
    snprintf(message_, sizeof(message_),
             "node ledger %.400s is full (%u processes); the node budget cannot be kept for "
             "pid %u, so its pinning is refused until a slot is free",
             ledger_.path(), kLedgerSlotCount, self_.pid);
    return kSlotPending;
  }
  quantum_.store(ReservationQuantum(h.node_budget.load(kRelaxed)), kRelaxed);
  slot_.store(claimed, std::memory_order_release);
  message_[0] = '\0';
  full_warned_.store(false, kRelaxed);
  return claimed;
}

Decision Budget::Charge(Owner owner, uint64_t bytes) {
  if (!enabled_.load(std::memory_order_acquire) || bytes == 0) return Decision::kGranted;
  uint64_t shortfall = 0;
  const Limiter first = TryCharge(owner, bytes, &shortfall);
  Decision decision = Decision::kGranted;
  bool evictor_called = false;
  uint64_t evicted = 0;
  if (first != Limiter::kNone) {
    bool granted = false;
    Policy policy = policy_;
    if (policy == Policy::kEvict) {
      policy = after_evict_;
      Evictor evictor = evictor_.load(std::memory_order_acquire);
      if (evictor != nullptr && !Reentered(Reentry::kEvictor)) {
        {
          ReentryGuard evicting(Reentry::kEvictor);
          evicted = evictor(shortfall);
        }
        evictor_called = true;
        Count(&Budget::evictions_, &LedgerSlot::evictions, &LedgerHeader::evictions, 1);
        Count(&Budget::evicted_bytes_, &LedgerSlot::evicted_bytes, &LedgerHeader::evicted_bytes,
              evicted);
        uint64_t ignored;
        granted = TryCharge(owner, bytes, &ignored) == Limiter::kNone;
      }
    }
    if (!granted) {
      decision = policy == Policy::kFallback ? Decision::kFallback : Decision::kDenied;
    }
  }
  if (decision == Decision::kDenied) {
    Count(&Budget::denials_, &LedgerSlot::denials, &LedgerHeader::denials, 1);
  } else if (decision == Decision::kFallback) {
    Count(&Budget::fallbacks_, &LedgerSlot::fallbacks, &LedgerHeader::fallbacks, 1);
  }
  // pinshim's own pinning is refused quietly: it copies without it.
  if (decision != Decision::kGranted && owner != Owner::kPinshimPool &&
      owner != Owner::kPinshimCache) {
    ReportRefusal(decision, first, bytes);
  }
  Recorder recorder = recorder_.load(std::memory_order_acquire);
  if (recorder != nullptr) {
    DecisionRecord record;
    record.owner = owner;
    record.decision = decision;
    record.limiter = first;
    record.evictor_called = evictor_called;
    record.bytes = bytes;
    record.evicted_bytes = evicted;
    record.process_pinned = ProcessPinned();
    record.process_budget = process_budget_;
    const bool node = ledger_.is_open();
    record.node_pinned = node ? ledger_.header().pinned.load(kRelaxed) : 0;
    record.node_budget = node ? ledger_.header().node_budget.load(kRelaxed) : 0;
    recorder(&record);
  }
  return decision;
}

namespace {

// "64.0 MiB": bytes for a person, without allocating.
void FormatBytes(uint64_t bytes, char* out, size_t len) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  snprintf(out, len, unit == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[unit]);
}

}  // namespace

void Budget::ReportRefusal(Decision decision, Limiter limiter, uint64_t bytes) {
  const uint64_t now = MonotonicNs();
  uint64_t last = last_refusal_line_ns_.load(kRelaxed);
  if ((last != 0 && now - last < refusal_line_interval_ns_) ||
      !last_refusal_line_ns_.compare_exchange_strong(last, now, kRelaxed)) {
    refusals_unreported_.fetch_add(1, kRelaxed);
    return;
  }
  const uint64_t unreported = refusals_unreported_.exchange(0, kRelaxed);
  char size[32], budget[32], pinned[32], more[96] = "";
  FormatBytes(bytes, size, sizeof(size));
  const bool node = limiter == Limiter::kNode && ledger_.is_open();
  FormatBytes(node ? ledger_.header().node_budget.load(kRelaxed) : process_budget_, budget,
              sizeof(budget));
  FormatBytes(node ? ledger_.header().pinned.load(kRelaxed) : ProcessPinned(), pinned,
              sizeof(pinned));
  char why[160];
  if (limiter == Limiter::kLedger) {
    snprintf(why, sizeof(why), "the node ledger could not be consulted");
  } else {
    snprintf(why, sizeof(why), "over the %s budget of %s (%s pinned)", node ? "node" : "process",
             budget, pinned);
  }
  if (unreported != 0) {
    snprintf(more, sizeof(more), "; %llu more refused since the last such line",
             static_cast<unsigned long long>(unreported));
  }
  char line[512];
  const int n = snprintf(line, sizeof(line), "pinshim: enforce: %s pinning %s, %s: %s%s\n",
                         decision == Decision::kDenied ? "denied" : "refused", size, why,
                         decision == Decision::kDenied ? "the call fails as out of memory"
                                                       : "pageable memory is handed out instead",
                         more);
  if (n > 0) {
    ssize_t ignored = write(STDERR_FILENO, line, Min(static_cast<uint64_t>(n), sizeof(line) - 1));
    (void)ignored;
  }
}

Limiter Budget::TryCharge(Owner owner, uint64_t bytes, uint64_t* shortfall) {
  // Acquire pairs with the release that published the slot, so the word read
  // below is the one the claim initialised, not a previous owner's.
  const int32_t slot = slot_.load(std::memory_order_acquire);
  if (slot >= 0) {
    // The node path's common case: the reservation covers it. Since the
    // reservation never exceeds the process budget, this also enforces that.
    if (TakeAvailable(ledger_.slot(slot), owner, bytes)) return Limiter::kNone;
    return NodeCharge(owner, bytes, shortfall);
  }
  if (slot == kSlotOff) return LocalCharge(owner, bytes, shortfall);
  if (slot == kSlotRefused) {
    *shortfall = bytes;
    return Limiter::kLedger;
  }
  return NodeCharge(owner, bytes, shortfall);  // pending or closed
}

Limiter Budget::LocalCharge(Owner owner, uint64_t bytes, uint64_t* shortfall) {
  uint64_t cur = pinned_.load(kRelaxed);
  do {
    if (bytes > process_limit_ - cur) {
      *shortfall = bytes - (process_limit_ - cur);
      return Limiter::kProcess;
    }
  } while (!pinned_.compare_exchange_weak(cur, cur + bytes, kRelaxed, kRelaxed));
  pinned_by_owner_[static_cast<int>(owner)].fetch_add(bytes, kRelaxed);
  grants_.fetch_add(1, kRelaxed);
  return Limiter::kNone;
}

Limiter Budget::NodeCharge(Owner owner, uint64_t bytes, uint64_t* shortfall) {
  *shortfall = bytes;
  Limiter result = Limiter::kLedger;
  bool local = false;
  {
    ReentryGuard in_ledger(Reentry::kLedger, ReentryGuard::kFirstEntry);
    if (!in_ledger.held()) return Limiter::kLedger;
    if (ledger_.Lock()) {
      const int32_t slot = EnsureSlotLocked(in_ledger);
      if (slot == kSlotOff) {
        local = true;
      } else if (slot >= 0) {
        result = ChargeFromReservationLocked(in_ledger, slot, owner, bytes, shortfall);
        ledger_.RebuildTotalsLocked();
      } else if (message_[0] != '\0' && !full_warned_.exchange(true, kRelaxed)) {
        Warn(message_);
      }
      ledger_.Unlock();
    } else {
      char line[512];
      if (ledger_.TakeLockWarning(line, sizeof(line))) Warn(line);
    }
  }
  // The ledger just turned out to be full: the process budget alone applies.
  if (local) return LocalCharge(owner, bytes, shortfall);
  return result;
}

Limiter Budget::ChargeFromReservationLocked(const ReentryGuard& /*in_ledger*/, int32_t index,
                                            Owner owner, uint64_t bytes, uint64_t* shortfall) {
  LedgerSlot& slot = ledger_.slot(index);
  const uint64_t quantum = ReservationQuantum(ledger_.header().node_budget.load(kRelaxed));
  quantum_.store(quantum, kRelaxed);
  bool reclaimed = false;
  // Each round either grants, refuses, or grows the reservation by at least
  // what was missing; it repeats only when this process's other threads took
  // the new bytes first, which they may do since they never wait for the
  // lock. Their grants are progress, and the budgets bound the growth.
  for (;;) {
    if (TakeAvailable(slot, owner, bytes)) return Limiter::kNone;
    const uint64_t word = slot.available.load(kRelaxed);
    // Closed only when leaving, which also gives up the slot; a damaged
    // ledger is the only way here.
    if ((word & kAvailableClosed) != 0) return Limiter::kLedger;
    const uint64_t have = AvailableBytes(word);
    if (have >= bytes) continue;
    const uint64_t need = bytes - have;
    // What the process has granted is its reservation less what is
    // available, so the process budget refuses exactly when that plus the
    // request exceeds it.
    const uint64_t reserved = slot.reserved.load(kRelaxed);
    const uint64_t process_room = process_limit_ > reserved ? process_limit_ - reserved : 0;
    if (need > process_room) {
      *shortfall = need - process_room;
      return Limiter::kProcess;
    }
    uint64_t room = ledger_.UnreservedLocked();
    // Other processes' idle reservations come back before anyone is refused
    // (a refusal means the node's pinned bytes leave no room), and before
    // that, when even all of them would not do, the shares of dead
    // processes. A request that nothing can make fit leaves the others'
    // reservations alone, so that it costs them nothing.
    const uint32_t self = static_cast<uint32_t>(index);
    if (need > room && need - room > ledger_.UnusedLocked(self) && !reclaimed &&
        ledger_.ReclaimDueLocked(kDenyReclaimIntervalNs)) {
      reclaimed = true;
      if (ledger_.ReclaimDeadLocked() > 0) room = ledger_.UnreservedLocked();
    }
    if (need > room && need - room <= ledger_.UnusedLocked(self)) {
      ledger_.TakeUnusedLocked(self, need - room);
      room = ledger_.UnreservedLocked();
    }
    if (need > room) {
      *shortfall = need - room + ledger_.OverBudgetLocked();
      return Limiter::kNode;
    }
    // A quantum at a time, so that the next charges need no lock; exactly
    // what is missing when a quantum no longer fits, so that quantization
    // never refuses a request the node has room for.
    uint64_t grow = need > quantum ? need : quantum;
    grow = Min(grow, Min(room, process_room));
    ledger_.ReserveLocked(self, grow);
  }
}

int32_t Budget::EnsureSlotLocked(const ReentryGuard& in_ledger) {
  int32_t slot = slot_.load(kRelaxed);
  if (slot >= 0) {
    if (OwnsSlotLocked(slot)) return slot;
    // Not ours any more (a damaged ledger, or reclaimed while this process
    // was stopped in another pid namespace): claim a fresh one rather than
    // charge another process's slot. What the lost slot held is lost with
    // it; releases of those bytes then find nothing to take.
    slot = kSlotPending;
  }
  if (slot != kSlotPending) return slot;
  return JoinLocked(in_ledger);
}

void Budget::Release(Owner owner, uint64_t bytes) {
  if (!enabled_.load(std::memory_order_acquire) || bytes == 0) return;
  const int o = static_cast<int>(owner);
  const int32_t slot = slot_.load(std::memory_order_acquire);
  if (slot >= 0) {
    LedgerSlot& s = ledger_.slot(slot);
    // Bytes first, available after: available never exceeds what the
    // reservation leaves beyond the slot's bytes.
    const uint64_t taken = SaturatingSub(s.bytes[o], bytes);
    if (taken == 0) return;
    const uint64_t before = s.available.fetch_add(taken, kRelaxed);
    // An idle reservation is budget other processes cannot use without
    // taking it back; past the high-water mark it goes back by itself.
    if ((before & kAvailableClosed) == 0 &&
        AvailableBytes(before) + taken > 2 * quantum_.load(kRelaxed)) {
      ReturnExcess();
    }
    return;
  }
  const uint64_t taken = SaturatingSub(pinned_by_owner_[o], bytes);
  if (taken != 0) pinned_.fetch_sub(taken, kRelaxed);
}

void Budget::ReturnExcess() {
  // A release from a signal handler that interrupted this thread inside the
  // lock: the excess waits for a later release.
  ReentryGuard in_ledger(Reentry::kLedger, ReentryGuard::kFirstEntry);
  if (!in_ledger.held()) return;
  if (ledger_.Lock()) {
    const int32_t slot = slot_.load(kRelaxed);
    const uint64_t quantum = quantum_.load(kRelaxed);
    // Checked again under the lock: of several threads that crossed the
    // mark together, the first gives back and the rest find nothing to do.
    if (slot >= 0 && OwnsSlotLocked(slot) &&
        AvailableBytes(ledger_.slot(slot).available.load(kRelaxed)) > 2 * quantum) {
      // Down to one quantum, not to the mark, so that the next few charges
      // and releases stay off the lock.
      ledger_.UnreserveLocked(static_cast<uint32_t>(slot), quantum);
      ledger_.RebuildTotalsLocked();
    }
    ledger_.Unlock();
  }
}

bool Budget::OwnsSlotLocked(int32_t slot) const {
  const LedgerSlot& s = ledger_.slot(slot);
  return s.pid.load(kRelaxed) == self_.pid && s.start_time.load(kRelaxed) == self_.start_time;
}

uint64_t Budget::ProcessPinned() const {
  const int32_t slot = slot_.load(std::memory_order_acquire);
  if (slot < 0 || !ledger_.is_open()) return pinned_.load(kRelaxed);
  const LedgerSlot& s = ledger_.slot(slot);
  uint64_t total = 0;
  for (const auto& b : s.bytes) total += b.load(kRelaxed);
  return total;
}

void Budget::Count(Counter local, SlotCounter in_slot, HeaderCounter in_header, uint64_t n) {
  // Atomic adds without the lock: these rare counters never decide anything.
  (this->*local).fetch_add(n, kRelaxed);
  const int32_t slot = slot_.load(std::memory_order_acquire);
  if (slot >= 0) {
    (ledger_.slot(slot).*in_slot).fetch_add(n, kRelaxed);
    (ledger_.header().*in_header).fetch_add(n, kRelaxed);
  }
}

void Budget::SetEvictor(Evictor evictor) { evictor_.store(evictor, std::memory_order_release); }

void Budget::SetRecorder(Recorder recorder) {
  recorder_.store(recorder, std::memory_order_release);
}

void Budget::ResetCounters() {
  pinned_.store(0, kRelaxed);
  for (auto& b : pinned_by_owner_) b.store(0, kRelaxed);
  grants_.store(0, kRelaxed);
  denials_.store(0, kRelaxed);
  fallbacks_.store(0, kRelaxed);
  evictions_.store(0, kRelaxed);
  evicted_bytes_.store(0, kRelaxed);
}

bool Budget::ClaimProcessForkChild() {
  if (g_fork_child_armed.load(std::memory_order_acquire)) return false;
  g_fork_child_claimed.store(true, std::memory_order_release);
  return true;
}

void Budget::ProcessAfterForkChild() {
  if (g_fork_child_claimed.load(std::memory_order_relaxed) &&
      g_fork_child_armed.load(std::memory_order_relaxed)) {
    ProcessForkChild();
  }
}

void Budget::AfterForkChild() {
  // Only the forking thread exists here, and it was not inside the ledger
  // (fork is not called from within Charge); its flags are stale copies.
  ReentryGuard::ClearAfterFork(Reentry::kLedger);
  ReentryGuard::ClearAfterFork(Reentry::kEvictor);
  message_[0] = '\0';
  ResetCounters();
  // The parent's slot and reservation stay the parent's; the child reserves
  // for itself in a slot of its own.
  const int32_t slot = slot_.load(kRelaxed);
  if (slot >= 0) slot_.store(kSlotPending, kRelaxed);
}

void Budget::Shutdown() {
  if (!enabled_.load(std::memory_order_acquire)) return;
  const int32_t seen = slot_.load(kRelaxed);
  if (seen == kSlotOff || seen == kSlotClosed || seen == kSlotRefused) return;
  ReentryGuard in_ledger(Reentry::kLedger, ReentryGuard::kFirstEntry);
  if (!in_ledger.held()) return;
  if (ledger_.Lock()) {
    const int32_t slot = slot_.load(kRelaxed);
    if (slot >= 0 && OwnsSlotLocked(slot)) {
      // The slot kept this process's books; they move back here so later
      // releases still find what they free.
      const LedgerSlot& s = ledger_.slot(slot);
      uint64_t total = 0;
      for (int o = 0; o < kOwnerCount; ++o) {
        const uint64_t b = s.bytes[o].load(kRelaxed);
        pinned_by_owner_[o].store(b, kRelaxed);
        total += b;
      }
      pinned_.store(total, kRelaxed);
      grants_.fetch_add(s.grants.load(kRelaxed), kRelaxed);
      // Threads of ours may be in the middle of a charge or release on the
      // slot right now; leaving (rather than freeing) keeps it ours until
      // the process is gone, and closes it to further charges.
      ledger_.LeaveSlotLocked(static_cast<uint32_t>(slot));
      ledger_.RebuildTotalsLocked();
    }
    if (slot != kSlotOff) slot_.store(kSlotClosed, kRelaxed);
    ledger_.Unlock();
  }
}

uint32_t Budget::ReclaimDead() {
  const int32_t seen = slot_.load(kRelaxed);
  if (!ledger_.is_open() || seen == kSlotOff || seen == kSlotRefused) return 0;
  ReentryGuard in_ledger(Reentry::kLedger, ReentryGuard::kFirstEntry);
  if (!in_ledger.held()) return 0;
  uint32_t reclaimed = 0;
  if (ledger_.Lock()) {
    reclaimed = ledger_.ReclaimDeadLocked();
    ledger_.Unlock();
  }
  return reclaimed;
}

BudgetStatus Budget::Tick() {
  if (!enabled_.load(std::memory_order_acquire)) return BudgetStatus();
  Heartbeat();
  ReclaimDead();
  return WriteMetricsNow();
}

void Budget::Heartbeat() {
  const int32_t slot = slot_.load(std::memory_order_acquire);
  if (slot >= 0 && ledger_.is_open()) ledger_.Heartbeat(static_cast<uint32_t>(slot));
}

void Budget::SetWarner(Warner warner) { warner_.store(warner, std::memory_order_release); }

void Budget::Warn(const char* line) {
  Warner warner = warner_.load(std::memory_order_acquire);
  if (warner != nullptr) warner(line);
}

BudgetSnapshot Budget::Snapshot() const {
  BudgetSnapshot s = {};
  s.slot = slot_.load(std::memory_order_acquire);
  // With a slot, the slot holds the books.
  if (s.slot >= 0 && ledger_.is_open()) {
    const LedgerSlot& ls = ledger_.slot(s.slot);
    for (int o = 0; o < kOwnerCount; ++o) {
      s.pinned_by_owner[o] = ls.bytes[o].load(kRelaxed);
      s.pinned += s.pinned_by_owner[o];
    }
    s.grants = ls.grants.load(kRelaxed);
    s.reserved = ls.reserved.load(kRelaxed);
    s.available = AvailableBytes(ls.available.load(kRelaxed));
  } else {
    s.pinned = pinned_.load(kRelaxed);
    for (int o = 0; o < kOwnerCount; ++o) s.pinned_by_owner[o] = pinned_by_owner_[o].load(kRelaxed);
    s.grants = grants_.load(kRelaxed);
  }
  s.process_budget = process_budget_;
  s.denials = denials_.load(kRelaxed);
  s.fallbacks = fallbacks_.load(kRelaxed);
  s.evictions = evictions_.load(kRelaxed);
  s.evicted_bytes = evicted_bytes_.load(kRelaxed);
  s.node_active = s.slot >= 0 || s.slot == kSlotPending;
  if (ledger_.is_open()) {
    const LedgerHeader& h = ledger_.header();
    s.node_pinned = h.pinned.load(kRelaxed);
    s.node_reserved = h.reserved.load(kRelaxed);
    s.node_budget = h.node_budget.load(kRelaxed);
  }
  return s;
}

void Budget::CloseForTesting() {
  Shutdown();
  enabled_.store(false, std::memory_order_release);
  slot_.store(kSlotOff, kRelaxed);
  quantum_.store(0, kRelaxed);
  ledger_.Close();
  warner_.store(nullptr, kRelaxed);
  evictor_.store(nullptr, kRelaxed);
  recorder_.store(nullptr, kRelaxed);
}

}  // namespace budget
}  // namespace pinshim
