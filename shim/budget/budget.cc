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

// Set while this thread holds (or is taking) the ledger lock, so a signal
// handler that charges on the same thread is refused instead of deadlocking.
__attribute__((tls_model("initial-exec"))) thread_local bool t_in_ledger =
    false;
// Set while this thread runs the evictor: no eviction from inside eviction.
__attribute__((tls_model("initial-exec"))) thread_local bool t_evicting = false;

Budget g_process_budget;

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

}  // namespace

const char* DecisionName(Decision decision) {
  switch (decision) {
    case Decision::kGranted:
      return "granted";
    case Decision::kDenied:
      return "denied";
    case Decision::kFallback:
      return "fallback";
  }
  return "unknown";
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kDeny:
      return "deny";
    case Policy::kFallback:
      return "fallback";
    case Policy::kEvict:
      return "evict";
  }
  return "unknown";
}

const char* LimiterName(Limiter limiter) {
  switch (limiter) {
    case Limiter::kNone:
      return "none";
    case Limiter::kProcess:
      return "process";
    case Limiter::kNode:
      return "node";
    case Limiter::kLedger:
      return "ledger";
  }
  return "unknown";
}

BudgetOptions BudgetOptionsFromConfig(const Config& config) {
  BudgetOptions options;
  options.process_bytes = config.has_budget ? config.budget_bytes : 0;
  options.node_bytes = config.has_node_budget ? config.node_budget_bytes : 0;
  options.policy = config.policy;
  options.shared_ledger = config.ledger_shared;
  options.metrics_path = config.metrics_file;
  return options;
}

Budget& Budget::Process() { return g_process_budget; }

BudgetStatus Budget::Init(const BudgetOptions& options) {
  BudgetStatus status;
  if (enabled_.load(std::memory_order_acquire)) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message),
             "budget already initialised");
    return status;
  }
  if (options.policy != Policy::kDeny && options.policy != Policy::kFallback &&
      options.policy != Policy::kEvict) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message), "unknown budget policy %u",
             static_cast<unsigned>(options.policy));
    return status;
  }
  if (options.after_evict != Policy::kDeny &&
      options.after_evict != Policy::kFallback) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message),
             "the policy after eviction must be deny or fallback");
    return status;
  }
  const size_t path_len =
      options.metrics_path ? strlen(options.metrics_path) : 0;
  if (path_len >= sizeof(metrics_path_)) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message),
             "metrics file path too long");
    return status;
  }
  memcpy(metrics_path_, options.metrics_path ? options.metrics_path : "",
         path_len + 1);
  process_budget_ = options.process_bytes;
  process_limit_ =
      options.process_bytes != 0 ? options.process_bytes : UINT64_MAX;
  policy_ = options.policy;
  after_evict_ = options.after_evict;
  ResetCounters();
  slot_.store(kSlotOff, kRelaxed);

  if (options.node_bytes != 0) {
    char default_path[128];
    const char* path = options.ledger_path;
    if (path == nullptr || path[0] == '\0') {
      DefaultLedgerPath(options.shared_ledger, geteuid(), default_path,
                        sizeof(default_path));
      path = default_path;
    }
    LedgerOpenOptions open_options;
    open_options.path = path;
    open_options.shared = options.shared_ledger;
    open_options.create = true;
    open_options.uid = geteuid();
    char why[512];
    if (ledger_.Open(open_options, why, sizeof(why)) != LedgerOpen::kOk) {
      status.code = BudgetStatus::kProcessOnly;
      snprintf(status.message, sizeof(status.message),
               "%s; node budget off, enforcing the process budget only", why);
    } else {
      ReadSelfIdentity(&self_);
      int slot = -1;
      uint64_t in_force = options.node_bytes;
      t_in_ledger = true;
      const bool locked = ledger_.Lock();
      if (locked) {
        LedgerHeader& h = ledger_.header();
        ledger_.ReclaimDeadLocked();
        // The strictest budget among the live processes wins, so no process
        // sees the node exceed what it was told; with nobody left, the
        // newcomer's budget replaces a stale one.
        uint64_t stored = h.node_budget.load(kRelaxed);
        if (stored == 0 || ledger_.LiveSlotsLocked() == 0 ||
            options.node_bytes < stored) {
          h.node_budget.store(options.node_bytes, kRelaxed);
        } else {
          in_force = stored;
        }
        slot = ledger_.ClaimSlotLocked(self_, process_budget_,
                                       static_cast<uint8_t>(policy_));
        ledger_.Unlock();
      }
      t_in_ledger = false;
      if (slot < 0) {
        status.code = BudgetStatus::kProcessOnly;
        snprintf(status.message, sizeof(status.message),
                 "node ledger %.400s %s; node budget off, enforcing the "
                 "process budget only",
                 path,
                 locked ? "is full (4096 processes)" : "has a broken lock");
        ledger_.Close();
      } else {
        slot_.store(slot, kRelaxed);
        if (in_force != options.node_bytes) {
          snprintf(status.message, sizeof(status.message),
                   "node budget of %llu bytes set by other running processes "
                   "is smaller than the configured %llu; using %llu",
                   static_cast<unsigned long long>(in_force),
                   static_cast<unsigned long long>(options.node_bytes),
                   static_cast<unsigned long long>(in_force));
        }
      }
    }
  }

  if (this == &g_process_budget) {
    static bool registered = false;
    if (!registered) {
      registered = true;
      pthread_atfork(nullptr, nullptr, ProcessForkChild);
      atexit(ProcessAtExit);
    }
  }
  enabled_.store(true, std::memory_order_release);
  return status;
}

Decision Budget::Charge(Owner owner, uint64_t bytes) {
  if (!enabled_.load(std::memory_order_acquire) || bytes == 0)
    return Decision::kGranted;
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
      if (evictor != nullptr && !t_evicting) {
        t_evicting = true;
        evicted = evictor(shortfall);
        t_evicting = false;
        evictor_called = true;
        Count(&Budget::evictions_, &LedgerSlot::evictions,
              &LedgerHeader::evictions, 1);
        Count(&Budget::evicted_bytes_, &LedgerSlot::evicted_bytes,
              &LedgerHeader::evicted_bytes, evicted);
        uint64_t ignored;
        granted = TryCharge(owner, bytes, &ignored) == Limiter::kNone;
      }
    }
    if (!granted) {
      decision =
          policy == Policy::kFallback ? Decision::kFallback : Decision::kDenied;
    }
  }
  if (decision == Decision::kDenied) {
    Count(&Budget::denials_, &LedgerSlot::denials, &LedgerHeader::denials, 1);
  } else if (decision == Decision::kFallback) {
    Count(&Budget::fallbacks_, &LedgerSlot::fallbacks, &LedgerHeader::fallbacks,
          1);
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
    record.process_pinned = pinned_.load(kRelaxed);
    record.process_budget = process_budget_;
    const bool node = ledger_.is_open();
    record.node_pinned = node ? ledger_.header().pinned.load(kRelaxed) : 0;
    record.node_budget = node ? ledger_.header().node_budget.load(kRelaxed) : 0;
    recorder(&record);
  }
  return decision;
}

Limiter Budget::TryCharge(Owner owner, uint64_t bytes, uint64_t* shortfall) {
  uint64_t cur = pinned_.load(kRelaxed);
  do {
    if (bytes > process_limit_ - cur) {
      *shortfall = bytes - (process_limit_ - cur);
      return Limiter::kProcess;
    }
  } while (
      !pinned_.compare_exchange_weak(cur, cur + bytes, kRelaxed, kRelaxed));
  bool in_slot = false;
  const Limiter node = NodeCharge(owner, bytes, shortfall, &in_slot);
  if (node != Limiter::kNone) {
    pinned_.fetch_sub(bytes, kRelaxed);
    return node;
  }
  if (!in_slot) {
    pinned_by_owner_[static_cast<int>(owner)].fetch_add(bytes, kRelaxed);
    grants_.fetch_add(1, kRelaxed);
  }
  return Limiter::kNone;
}

Limiter Budget::NodeCharge(Owner owner, uint64_t bytes, uint64_t* shortfall,
                           bool* in_slot) {
  if (slot_.load(kRelaxed) == kSlotOff) return Limiter::kNone;
  *shortfall = bytes;
  if (t_in_ledger) return Limiter::kLedger;
  t_in_ledger = true;
  Limiter result = Limiter::kLedger;
  if (ledger_.Lock()) {
    const int32_t slot = EnsureSlotLocked();
    if (slot == kSlotOff) {
      result = Limiter::kNone;
    } else if (slot >= 0) {
      *in_slot = ledger_.ChargeLocked(slot, owner, bytes, shortfall) ||
                 (ledger_.ReclaimDueLocked(kDenyReclaimIntervalNs) &&
                  ledger_.ReclaimDeadLocked() > 0 &&
                  ledger_.ChargeLocked(slot, owner, bytes, shortfall));
      result = *in_slot ? Limiter::kNone : Limiter::kNode;
    }
    ledger_.Unlock();
  }
  t_in_ledger = false;
  return result;
}

int32_t Budget::EnsureSlotLocked() {
  int32_t slot = slot_.load(kRelaxed);
  if (slot >= 0) {
    if (OwnsSlotLocked(slot)) return slot;
    // Not ours any more (it cannot be judged dead while we run, so only a
    // damaged ledger gets here): claim a fresh one rather than charge another
    // process's slot. What the lost slot held is lost with it; releases of
    // those bytes then find nothing to take.
    slot = kSlotPending;
  }
  if (slot != kSlotPending) return slot;
  ReadSelfIdentity(&self_);
  int claimed = ledger_.ClaimSlotLocked(self_, process_budget_,
                                        static_cast<uint8_t>(policy_));
  if (claimed < 0 && ledger_.ReclaimDeadLocked() > 0) {
    claimed = ledger_.ClaimSlotLocked(self_, process_budget_,
                                      static_cast<uint8_t>(policy_));
  }
  if (claimed < 0) {
    snprintf(message_, sizeof(message_),
             "node ledger is full (4096 processes); node budget off for pid "
             "%u, enforcing the process budget only",
             self_.pid);
    slot_.store(kSlotOff, kRelaxed);
    return kSlotOff;
  }
  slot_.store(claimed, kRelaxed);
  return claimed;
}

void Budget::Release(Owner owner, uint64_t bytes) {
  if (!enabled_.load(std::memory_order_acquire) || bytes == 0) return;
  uint64_t taken = 0;
  if (!NodeRelease(owner, bytes, &taken)) {
    taken = SaturatingSub(pinned_by_owner_[static_cast<int>(owner)], bytes);
  }
  if (taken != 0) pinned_.fetch_sub(taken, kRelaxed);
}

bool Budget::NodeRelease(Owner owner, uint64_t bytes, uint64_t* taken) {
  if (slot_.load(kRelaxed) < 0) return false;
  // Re-entered from a signal handler inside the lock, or a broken lock:
  // nothing is taken off, so the counts err on the safe side (too high).
  if (t_in_ledger) return true;
  t_in_ledger = true;
  bool in_slot = true;
  if (ledger_.Lock()) {
    const int32_t slot = slot_.load(kRelaxed);
    in_slot = slot >= 0 && OwnsSlotLocked(slot);
    if (in_slot) *taken = ledger_.ReleaseLocked(slot, owner, bytes);
    ledger_.Unlock();
  }
  t_in_ledger = false;
  return in_slot;
}

bool Budget::OwnsSlotLocked(int32_t slot) const {
  const LedgerSlot& s = ledger_.slot(slot);
  return s.pid.load(kRelaxed) == self_.pid &&
         s.start_time.load(kRelaxed) == self_.start_time;
}

void Budget::Count(Counter local, SlotCounter in_slot, HeaderCounter in_header,
                   uint64_t n) {
  // Atomic adds without the lock: these rare counters never decide anything.
  (this->*local).fetch_add(n, kRelaxed);
  const int32_t slot = slot_.load(kRelaxed);
  if (slot >= 0) {
    (ledger_.slot(slot).*in_slot).fetch_add(n, kRelaxed);
    (ledger_.header().*in_header).fetch_add(n, kRelaxed);
  }
}

void Budget::SetEvictor(Evictor evictor) {
  evictor_.store(evictor, std::memory_order_release);
}

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

void Budget::AfterForkChild() {
  // Only the forking thread exists here, and it was not inside the ledger
  // (fork is not called from within Charge); its flags are stale copies.
  t_in_ledger = false;
  t_evicting = false;
  message_[0] = '\0';
  ResetCounters();
  const int32_t slot = slot_.load(kRelaxed);
  if (slot >= 0) slot_.store(kSlotPending, kRelaxed);
}

void Budget::Shutdown() {
  if (!enabled_.load(std::memory_order_acquire)) return;
  const int32_t seen = slot_.load(kRelaxed);
  if (seen == kSlotOff || seen == kSlotClosed || t_in_ledger) return;
  t_in_ledger = true;
  if (ledger_.Lock()) {
    const int32_t slot = slot_.load(kRelaxed);
    if (slot >= 0 && OwnsSlotLocked(slot)) {
      // The slot kept this process's books; they move back here so later
      // releases still find what they free.
      const LedgerSlot& s = ledger_.slot(slot);
      for (int o = 0; o < kOwnerCount; ++o) {
        pinned_by_owner_[o].store(s.bytes[o].load(kRelaxed), kRelaxed);
      }
      grants_.fetch_add(s.grants.load(kRelaxed), kRelaxed);
      ledger_.FreeSlotLocked(slot);
    }
    if (slot != kSlotOff) slot_.store(kSlotClosed, kRelaxed);
    ledger_.Unlock();
  }
  t_in_ledger = false;
}

uint32_t Budget::ReclaimDead() {
  if (!ledger_.is_open() || slot_.load(kRelaxed) == kSlotOff || t_in_ledger)
    return 0;
  uint32_t reclaimed = 0;
  t_in_ledger = true;
  if (ledger_.Lock()) {
    reclaimed = ledger_.ReclaimDeadLocked();
    ledger_.Unlock();
  }
  t_in_ledger = false;
  return reclaimed;
}

BudgetStatus Budget::Tick() {
  if (!enabled_.load(std::memory_order_acquire)) return BudgetStatus();
  ReclaimDead();
  if (metrics_path_[0] == '\0') return BudgetStatus();
  return WriteMetricsFile(metrics_path_);
}

BudgetSnapshot Budget::Snapshot() const {
  BudgetSnapshot s = {};
  s.pinned = pinned_.load(kRelaxed);
  s.slot = slot_.load(kRelaxed);
  // With a slot, the slot holds the per-owner bytes and the grants.
  const bool in_slot = s.slot >= 0 && ledger_.is_open();
  for (int o = 0; o < kOwnerCount; ++o) {
    s.pinned_by_owner[o] = in_slot
                               ? ledger_.slot(s.slot).bytes[o].load(kRelaxed)
                               : pinned_by_owner_[o].load(kRelaxed);
  }
  s.grants = in_slot ? ledger_.slot(s.slot).grants.load(kRelaxed)
                     : grants_.load(kRelaxed);
  s.process_budget = process_budget_;
  s.denials = denials_.load(kRelaxed);
  s.fallbacks = fallbacks_.load(kRelaxed);
  s.evictions = evictions_.load(kRelaxed);
  s.evicted_bytes = evicted_bytes_.load(kRelaxed);
  s.node_active = s.slot >= 0 || s.slot == kSlotPending;
  if (ledger_.is_open()) {
    s.node_pinned = ledger_.header().pinned.load(kRelaxed);
    s.node_budget = ledger_.header().node_budget.load(kRelaxed);
  }
  return s;
}

void Budget::CloseForTesting() {
  Shutdown();
  enabled_.store(false, std::memory_order_release);
  slot_.store(kSlotOff, kRelaxed);
  ledger_.Close();
  evictor_.store(nullptr, kRelaxed);
  recorder_.store(nullptr, kRelaxed);
}

}  // namespace budget
}  // namespace pinshim
