// The node ledger: one small file in POSIX shared memory that every process
// running pinshim in enforce mode with a node budget maps, so that together
// they never pin more than the node budget.
//
// Layout (see LedgerPrefix): a 4 KiB header holding the lock, the node budget
// and the node totals, then a fixed table of kLedgerSlotCount per-process
// slots. A slot is the truth: it records what one process has reserved of the
// node budget and, per owner, what it has pinned; the header totals are a
// cache of sums over the claimed slots and are rebuilt from the slots whenever
// a process died holding the lock, so a crash at any instant costs nothing.
//
// Reservations: a process does not come to the ledger for every pinning.
// Under the lock it reserves node budget for itself (LedgerSlot::reserved, at
// most the node budget in total), and its threads then take from the unused
// part of that reservation (LedgerSlot::available) with one compare-and-swap,
// without the lock; releases put bytes back the same way. Only the lock
// holder changes a reservation, and available never exceeds what the
// reservation leaves after the slot's pinned bytes, so at every instant
//
//     node pinned <= sum of (reserved - available) <= sum of reserved
//                 <= node budget.
//
// A process that needs more than its reservation and finds the node full
// takes back the unused reservations of the others (TakeUnusedLocked) before
// it is refused, so a refusal is exact: it happens only when the bytes pinned
// on the node, plus the request, exceed the budget.
//
// Locking: one process-shared robust pthread mutex. It was chosen over fcntl
// record locks because (1) record locks belong to the process, so threads of
// one process would not exclude each other without a second, in-process lock;
// (2) an uncontended robust mutex is a user-space compare-and-swap while a
// record lock is a system call; and (3) the kernel's robust-futex list makes a
// dead holder visible to the next locker (EOWNERDEAD) at any instant of death,
// which is exactly when the totals need rebuilding. Record locks would hide the
// death and leave half-done updates unnoticed. Waiters sleep in bounded rounds
// (see Lock()), because the futex protocol wakes one waiter at a time and a
// waiter killed right after its wake-up would strand the rest.
//
// Everything in the mapping is read with relaxed atomics so that the metrics
// writer may sample it without the lock. Writers hold the lock, except for
// three kinds of update: a slot's available bytes, per-owner bytes and grants,
// which its own process changes without the lock, and the decision counters
// (denials, fallbacks, evictions), which are atomic adds.
//
// Dead processes: a slot whose (pid, start time) no longer names a running
// process is reclaimed: its reservation returns to the node and the slot is
// freed. A pid means nothing in another pid namespace, so a slot of another
// namespace is judged by its heartbeat instead (LedgerSlot::heartbeat_s, which
// its process renews every few seconds): silent for kForeignSlotStaleS, it is
// reclaimed, and kept from reuse while others are free.
//
// Trust: whoever can write the file can stop every process that maps it (by
// holding the lock), kill them (by truncating it: their next access faults)
// or rewrite their budgets. A per-user ledger is mode 0600 and must belong to
// its user and be writable by nobody else; a shared ledger is created mode
// 0660 (its group shares the node budget) and refused when anyone may write
// it (o+w). Waiting for the lock is bounded (Lock()), and a holder whose
// thread no longer exists is declared dead so that the lock is recovered.
#ifndef PINSHIM_SHIM_BUDGET_LEDGER_H_
#define PINSHIM_SHIM_BUDGET_LEDGER_H_

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/budget/proc.h"
#include "shim/core/clock.h"
#include "shim/core/thread_annotations.h"

namespace pinshim {
namespace budget {

// Who holds pinned bytes. Every owner counts against the budgets.
enum class Owner : uint8_t {
  kProgramAlloc = 0,     // cuMemHostAlloc / cuMemAllocHost by the program
  kProgramRegister = 1,  // cuMemHostRegister by the program
  kPinshimPool = 2,      // pinshim's pooled pinned arena
  kPinshimCache = 3,     // pinshim's registration cache
  kProgramVmm = 4,       // host-located cuMemCreate allocations by the program
  kProgramPool = 5,      // memory reserved by the program's host memory pools
};
constexpr int kOwnerCount = 6;

// "program_alloc", "program_register", "pinshim_pool", "pinshim_cache",
// "program_vmm", "program_pool".
const char* OwnerName(Owner owner);

constexpr uint64_t kLedgerMagic = 0x3147444c534e4950ULL;  // "PINSLDG1" in file order
// The layout is named by the version and by the sizes in LedgerPrefix
// together: a ledger whose slot or file size differs is refused as surely as
// one of another version.
constexpr uint32_t kLedgerVersion = 3;  // 3: six owners (2: per-slot reservations, 192-byte slots)
constexpr uint32_t kLedgerSlotCount = 4096;
constexpr uint32_t kLedgerHeaderBytes = 4096;
constexpr uint32_t kLedgerFlagShared = 1u << 0;

// LedgerSlot::available packs into one word, so that one compare-and-swap
// decides a charge:
// - bits 0-47: the unused part of the slot's reservation;
// - bits 48-62: a stamp that every take by another process advances, so that
//   the next locker can tell a taker who died in the middle of a take from
//   one who never started (see TakeUnusedLocked);
// - bit 63: closed: the process left the ledger; charges no longer take
//   from the word.
constexpr uint64_t kAvailableBytesMask = (uint64_t{1} << 48) - 1;
constexpr int kAvailableStampShift = 48;
constexpr uint64_t kAvailableStampMask = uint64_t{0x7fff} << kAvailableStampShift;
constexpr uint64_t kAvailableClosed = uint64_t{1} << 63;
// Reservations must fit the low bits of that word, so no node budget exceeds
// them: 256 TiB less one byte, far beyond any machine's pinnable memory.
constexpr uint64_t kLedgerMaxNodeBudget = kAvailableBytesMask;

inline uint64_t AvailableBytes(uint64_t word) { return word & kAvailableBytesMask; }

// The first bytes of every ledger version, checked before anything else is
// trusted. Never reorder or resize these fields; bump kLedgerVersion instead.
struct LedgerPrefix {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t file_bytes;
  uint32_t slot_count;
  uint32_t slot_bytes;
};

// One process. Three cache lines: who it is and its reservation (written
// under the lock), what its threads update on every charge and release
// (without the lock), and the rarely touched decision counters.
struct alignas(64) LedgerSlot {
  std::atomic<uint32_t> pid;  // 0: free. Published last when claimed.
  uint8_t policy;             // the process's Policy, for display
  uint8_t heartbeat_tag[3];   // see HeartbeatKept in ledger.cc
  std::atomic<uint64_t> start_time;
  std::atomic<uint64_t> pid_ns;
  std::atomic<uint64_t> process_budget;  // 0: none
  // Node budget reserved by the process: what it has pinned plus what is
  // available to it. Only the lock holder changes it.
  std::atomic<uint64_t> reserved;
  // Set, with pid cleared, when a running process leaves the ledger at exit:
  // its other threads may still be finishing a charge or release on this
  // slot, so it is not claimed again while that process lives.
  std::atomic<uint32_t> left_pid;
  // CLOCK_REALTIME seconds, renewed by the process every few seconds while
  // it holds the slot (Budget::Heartbeat); 0 from a pinshim that does not.
  std::atomic<uint32_t> heartbeat_s;
  char comm[kCommBytes];  // written before pid is published

  // The owner's threads take from available and give back to it without the
  // lock; others change it only under the lock (see kAvailable*).
  alignas(64) std::atomic<uint64_t> available;
  std::atomic<uint64_t> bytes[kOwnerCount];  // pinned, by owner
  std::atomic<uint64_t> grants;

  alignas(64) std::atomic<uint64_t> denials;
  std::atomic<uint64_t> fallbacks;
  std::atomic<uint64_t> evictions;
  std::atomic<uint64_t> evicted_bytes;
};
static_assert(sizeof(LedgerSlot) == 192, "slot layout is part of the file format");

struct LedgerHeader {
  LedgerPrefix prefix;
  uint32_t flags;  // kLedgerFlag*
  uint32_t creator_uid;
  uint64_t created_unix_s;
  alignas(64) pthread_mutex_t mutex;
  // Sums over the claimed slots, refreshed by lock holders. Charges and
  // releases served from a reservation do not take the lock, so these show
  // them as of the last refresh (every reservation change, reclaim or
  // metrics tick makes one).
  alignas(64) std::atomic<uint64_t> node_budget;
  std::atomic<uint64_t> pinned;  // granted: sum of (reserved - available)
  std::atomic<uint64_t> pinned_by_owner[kOwnerCount];
  std::atomic<uint64_t> grants;     // including those of freed slots
  std::atomic<uint32_t> slot_high;  // slots at or above it were never claimed
  // Counters for the node as a whole: they outlive the processes' slots.
  alignas(64) std::atomic<uint64_t> denials;
  std::atomic<uint64_t> fallbacks;
  std::atomic<uint64_t> evictions;
  std::atomic<uint64_t> evicted_bytes;
  std::atomic<uint64_t> recoveries;  // times a process died holding the lock
  std::atomic<uint64_t> reclaimed_processes;
  std::atomic<uint64_t> reclaimed_bytes;
  std::atomic<uint64_t> last_reclaim_ns;  // CLOCK_MONOTONIC
  // Reservations, under the lock. reserved is what every decision to reserve
  // is made against, so it is kept exact, not refreshed.
  alignas(64) std::atomic<uint64_t> reserved;  // sum of the slots' reserved
  std::atomic<uint64_t> retired_grants;        // grants of freed slots
  std::atomic<uint64_t> takes;                 // unused reservations taken from others
  std::atomic<uint64_t> taken_bytes;
  // The take in progress (TakeUnusedLocked), so that the next locker can
  // finish it should the taker die in the middle.
  std::atomic<uint32_t> take_slot;   // the other process's slot + 1; 0: none
  std::atomic<uint32_t> take_stamp;  // its available stamp before the take
  std::atomic<uint64_t> take_bytes;
  std::atomic<uint64_t> take_reserved;  // its reservation before the take
};
static_assert(sizeof(LedgerHeader) <= kLedgerHeaderBytes, "header outgrew its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory counters must be address-free");

// A slot of another pid namespace whose heartbeat is this old is reclaimed.
constexpr uint32_t kForeignSlotStaleS = 600;

// The longest Lock() waits for the lock; after a wait that long it waits
// only kLedgerLockRetryNs until the lock has been taken again.
constexpr uint64_t kLedgerLockWaitNs = uint64_t{2} * 1000 * 1000 * 1000;
constexpr uint64_t kLedgerLockRetryNs = 10 * 1000 * 1000;

constexpr uint64_t kLedgerFileBytes =
    kLedgerHeaderBytes + uint64_t{kLedgerSlotCount} * sizeof(LedgerSlot);

// Writes the default ledger path: /dev/shm/pinshim-ledger-<uid>, or
// /dev/shm/pinshim-ledger-shared when shared. Cut short if len is too small.
void DefaultLedgerPath(bool shared, uid_t uid, char* out, size_t len);

struct LedgerOpenOptions {
  const char* path = nullptr;
  bool shared = false;  // created for every user; any owner is accepted
  bool create = false;  // create the ledger when it does not exist
  uid_t uid = 0;        // the user acting; the ledger must be theirs unless shared
};

enum class LedgerOpen : uint8_t {
  kOk = 0,
  kMissing,     // no ledger there (and create was false)
  kUnreadable,  // cannot open, create or map it
  kForeign,     // owned by another user and not in shared mode
  kBadLayout,   // not a ledger, or another layout version
  kUnsafe,      // writable by users it must not trust (see Trust above)
};

// Points at which SetLedgerCrashHookForTesting's hook is called, each in the
// middle of an update made under the lock.
enum class CrashPoint : uint8_t {
  kChargeMidUpdate = 0,   // a reservation grew: slot updated, totals not yet
  kReleaseMidUpdate = 1,  // a reservation shrank: slot updated, totals not yet
  kTakeMidUpdate = 2,     // another process's available bytes taken, its
                          // reservation not yet reduced
};

// Installs a hook the ledger calls inside its critical sections (null: none).
// Tests use it to die while holding the lock; never set in production.
void SetLedgerCrashHookForTesting(void (*hook)(CrashPoint point));

// Installs a hook called each time Lock() takes the lock (null: none), so
// that tests can count lock acquisitions; never set in production.
void SetLedgerLockHookForTesting(void (*hook)());

// A mapping of the node ledger. Not copyable; trivially destructible so that
// a process-wide instance needs no destructor at exit (call Close() instead).
//
// The mapping is itself the lock's capability (thread_annotations.h): Lock()
// takes it when it returns true, and the *Locked functions REQUIRES it, so
// clang checks that this process calls them only under the lock. What it
// cannot check: that other processes keep to the protocol, that the lock in
// the mapping is the one every process takes, and which header and slot
// fields need it (all are atomics, some written without the lock by
// design; see Locking above), so no field is GUARDED_BY.
class CAPABILITY("ledger") Ledger {
 public:
  constexpr Ledger() = default;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Opens and maps the ledger named by options, creating it when asked. On
  // failure the ledger stays closed and message holds one line saying why.
  LedgerOpen Open(const LedgerOpenOptions& options, char* message, size_t message_len);

  // Unmaps the ledger. No thread may use it afterwards.
  void Close();

  bool is_open() const { return header_ != nullptr; }
  // False when only read access was granted (no locking, no reclaiming).
  bool writable() const { return writable_; }

  LedgerHeader& header() const { return *header_; }
  LedgerSlot& slot(uint32_t index) const;

  // Takes the lock. When its previous holder died, first rebuilds the totals
  // from the slots and reclaims dead processes. False if the lock is broken,
  // or after waiting kLedgerLockWaitNs (kLedgerLockRetryNs when the previous
  // wait of this mapping already timed out and nobody got the lock since):
  // a stopped holder, or a lock word forged by someone who can write the
  // file, costs each caller that long at most. A holder whose thread does
  // not exist is declared dead (and the lock recovered), unless the ledger
  // has slots of another pid namespace, whose thread ids mean nothing here.
  bool Lock() TRY_ACQUIRE(true);
  void Unlock() RELEASE();

  // After Lock() returned false: true once per run of failed Lock() calls
  // (the next success starts a new run), with one line in message saying
  // who holds the lock. For a single warning per stall.
  bool TakeLockWarning(char* message, size_t len);

  // Renews slot index's heartbeat (LedgerSlot::heartbeat_s); its own
  // process calls it every few seconds, without the lock.
  void Heartbeat(uint32_t index) const;

  // The path the ledger was opened at.
  const char* path() const { return path_; }

  // Looks for what no run of pinshim writes: totals that disagree with the
  // slots, values beyond any budget, impossible pids. Returns how many
  // problems, the first in message. Exact under the lock; without it (read
  // access only) only what no concurrent update can make untrue.
  uint32_t CheckDamage(bool locked, char* message, size_t len) const;

  // --- The rest requires the lock.

  // Claims a free slot for id; returns its index or -1 when the table is full.
  // A slot left by a process that still runs is not taken (see
  // LedgerSlot::left_pid).
  int ClaimSlotLocked(const ProcessIdentity& id, uint64_t process_budget, uint8_t policy)
      REQUIRES(this);

  // Frees the slot of a process that is gone: its reservation returns to the
  // node and its bytes leave the totals.
  void FreeSlotLocked(uint32_t index) REQUIRES(this);

  // Frees the calling process's own slot while it still runs: closes its
  // available word, so that no further charge is served from it, and keeps
  // the slot from being claimed again before the process is gone.
  void LeaveSlotLocked(uint32_t index) REQUIRES(this);

  // Frees the slots of processes that no longer exist, then refreshes the
  // totals. Returns how many.
  uint32_t ReclaimDeadLocked() REQUIRES(this);

  // True when the last reclaim was at least interval_ns ago.
  bool ReclaimDueLocked(uint64_t interval_ns) const REQUIRES(this);

  // Makes the header totals the sums over claimed slots. Also finishes a
  // take whose taker died (see TakeUnusedLocked).
  void RebuildTotalsLocked() REQUIRES(this);

  // Claimed slots.
  uint32_t LiveSlotsLocked() const REQUIRES(this);

  // Node budget that no process has reserved; 0 when the reservations reach
  // or exceed it (they exceed it after a process joined with a smaller one).
  uint64_t UnreservedLocked() const REQUIRES(this);
  // How far the reservations exceed the node budget; usually 0.
  uint64_t OverBudgetLocked() const REQUIRES(this);

  // Adds bytes to slot index's reservation and to its available bytes. The
  // caller checked that they fit (UnreservedLocked) and stay under
  // kLedgerMaxNodeBudget.
  void ReserveLocked(uint32_t index, uint64_t bytes) REQUIRES(this);

  // Returns slot index's available bytes above keep to the node; returns how
  // many. Its threads may be charging meanwhile; they only lower what is
  // returned.
  uint64_t UnreserveLocked(uint32_t index, uint64_t keep) REQUIRES(this);

  // The available bytes of the claimed slots other than except: what
  // TakeUnusedLocked could take now (their owners change it meanwhile).
  uint64_t UnusedLocked(uint32_t except) const REQUIRES(this);

  // Takes up to want available bytes from the reservations of claimed slots
  // other than except (kLedgerSlotCount: none excepted) and returns them to
  // the node; returns how many. Each take is journaled in the header first,
  // so that a taker killed between taking the bytes and shrinking the other
  // slot's reservation leaves the next locker what it needs to finish.
  uint64_t TakeUnusedLocked(uint32_t except, uint64_t want) REQUIRES(this);

  // Reserves exactly bytes for slot index and counts them pinned for owner,
  // when the node budget allows it, and returns true; otherwise returns false
  // with the excess in *shortfall. (Budget serves charges from reservations
  // instead; this is the whole-charge-under-the-lock form.)
  bool ChargeLocked(uint32_t index, Owner owner, uint64_t bytes, uint64_t* shortfall)
      REQUIRES(this);

  // Takes up to bytes for owner off slot index (never below zero) together
  // with as much of its reservation; returns what it took.
  uint64_t ReleaseLocked(uint32_t index, Owner owner, uint64_t bytes) REQUIRES(this);

 private:
  // True when a slot of another pid namespace is claimed (read racily).
  bool HasForeignSlots() const;
  // Marks the lock's holder dead when its thread does not exist (see Lock).
  bool BreakLockOfVanishedHolder(uint64_t waited_ns);
  // Adds to a header or slot field only the lock holder writes (never one a
  // slot's owner updates without the lock: available, bytes, grants).
  void AddLocked(std::atomic<uint64_t>& field, uint64_t delta) const REQUIRES(this);
  // Subtracts at most the field's value; returns what was taken. Same rule.
  uint64_t SubLocked(std::atomic<uint64_t>& field, uint64_t delta) const REQUIRES(this);

  LedgerHeader* header_ = nullptr;
  bool writable_ = false;
  uint64_t pid_ns_ = 0;
  std::atomic<bool> lock_stalled_{false};    // the last wait timed out
  std::atomic<bool> stall_warned_{false};    // ... and TakeLockWarning said so
  std::atomic<uint32_t> stalled_holder_{0};  // the thread id in the lock word then
  char path_[256] = {};
};

}  // namespace budget
}  // namespace pinshim

#endif  // PINSHIM_SHIM_BUDGET_LEDGER_H_
