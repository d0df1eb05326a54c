// The node ledger: one small file in POSIX shared memory that every process
// running pinshim in enforce mode with a node budget maps, so that together
// they never pin more than the node budget.
//
// Layout (versioned; see LedgerPrefix): a 4 KiB header holding the lock, the
// node budget and the node totals, then a fixed table of kLedgerSlotCount
// per-process slots. A slot is the truth: it records, per owner, what one
// process has pinned; the header totals are a cache of the sum over claimed
// slots and are rebuilt from the slots whenever a process died holding the
// lock, so a crash at any instant costs nothing.
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
// writer may sample it without the lock; writers hold the lock, except the
// decision counters (denials, fallbacks, evictions), which are atomic adds.
//
// Dead processes: a slot whose (pid, start time) no longer names a running
// process is reclaimed: its bytes leave the totals and the slot is freed.
// Only slots of the caller's own pid namespace are judged, since a pid means
// nothing in another namespace.
#ifndef PINSHIM_SHIM_BUDGET_LEDGER_H_
#define PINSHIM_SHIM_BUDGET_LEDGER_H_

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/budget/proc.h"

namespace pinshim {
namespace budget {

// Who holds pinned bytes. Every owner counts against the budgets.
enum class Owner : uint8_t {
  kProgramAlloc = 0,     // cuMemHostAlloc / cuMemAllocHost by the program
  kProgramRegister = 1,  // cuMemHostRegister by the program
  kPinshimPool = 2,      // pinshim's pooled pinned arena
  kPinshimCache = 3,     // pinshim's registration cache
};
constexpr int kOwnerCount = 4;

// "program_alloc", "program_register", "pinshim_pool", "pinshim_cache".
const char* OwnerName(Owner owner);

constexpr uint64_t kLedgerMagic =
    0x3147444c534e4950ULL;  // "PINSLDG1" in file order
constexpr uint32_t kLedgerVersion = 1;
constexpr uint32_t kLedgerSlotCount = 4096;
constexpr uint32_t kLedgerHeaderBytes = 4096;
constexpr uint32_t kLedgerFlagShared = 1u << 0;

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

struct alignas(64) LedgerSlot {
  std::atomic<uint32_t> pid;  // 0: free. Published last when claimed.
  uint8_t policy;             // the process's Policy, for display
  uint8_t reserved[3];
  std::atomic<uint64_t> start_time;
  std::atomic<uint64_t> pid_ns;
  std::atomic<uint64_t> process_budget;  // 0: none
  std::atomic<uint64_t> bytes[kOwnerCount];
  std::atomic<uint64_t> grants;
  std::atomic<uint64_t> denials;
  std::atomic<uint64_t> fallbacks;
  std::atomic<uint64_t> evictions;
  std::atomic<uint64_t> evicted_bytes;
  char comm[kCommBytes];  // written before pid is published
};
static_assert(sizeof(LedgerSlot) == 128,
              "slot layout is part of the file format");

struct LedgerHeader {
  LedgerPrefix prefix;
  uint32_t flags;  // kLedgerFlag*
  uint32_t creator_uid;
  uint64_t created_unix_s;
  alignas(64) pthread_mutex_t mutex;
  // Written under the lock on every grant and release.
  alignas(64) std::atomic<uint64_t> node_budget;
  std::atomic<uint64_t> pinned;
  std::atomic<uint64_t> pinned_by_owner[kOwnerCount];
  std::atomic<uint64_t> grants;
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
};
static_assert(sizeof(LedgerHeader) <= kLedgerHeaderBytes,
              "header outgrew its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory counters must be address-free");

constexpr uint64_t kLedgerFileBytes =
    kLedgerHeaderBytes + uint64_t{kLedgerSlotCount} * sizeof(LedgerSlot);

// Writes the default ledger path: /dev/shm/pinshim-ledger-<uid>, or
// /dev/shm/pinshim-ledger-shared when shared. Cut short if len is too small.
void DefaultLedgerPath(bool shared, uid_t uid, char* out, size_t len);

struct LedgerOpenOptions {
  const char* path = nullptr;
  bool shared = false;  // created for every user; any owner is accepted
  bool create = false;  // create the ledger when it does not exist
  uid_t uid = 0;  // the user acting; the ledger must be theirs unless shared
};

enum class LedgerOpen : uint8_t {
  kOk = 0,
  kMissing,     // no ledger there (and create was false)
  kUnreadable,  // cannot open, create or map it
  kForeign,     // owned by another user and not in shared mode
  kBadLayout,   // not a ledger, or another layout version
};

// Points at which SetLedgerCrashHookForTesting's hook is called, each in the
// middle of an update made under the lock.
enum class CrashPoint : uint8_t {
  kChargeMidUpdate = 0,   // slot updated, totals not yet
  kReleaseMidUpdate = 1,  // slot updated, totals not yet
};

// Installs a hook the ledger calls inside its critical sections (null: none).
// Tests use it to die while holding the lock; never set in production.
void SetLedgerCrashHookForTesting(void (*hook)(CrashPoint point));

// A mapping of the node ledger. Not copyable; trivially destructible so that
// a process-wide instance needs no destructor at exit (call Close() instead).
class Ledger {
 public:
  constexpr Ledger() = default;
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  // Opens and maps the ledger named by options, creating it when asked. On
  // failure the ledger stays closed and message holds one line saying why.
  LedgerOpen Open(const LedgerOpenOptions& options, char* message,
                  size_t message_len);

  // Unmaps the ledger. No thread may use it afterwards.
  void Close();

  bool is_open() const { return header_ != nullptr; }
  // False when only read access was granted (no locking, no reclaiming).
  bool writable() const { return writable_; }

  LedgerHeader& header() const { return *header_; }
  LedgerSlot& slot(uint32_t index) const;

  // Takes the lock. When its previous holder died, first rebuilds the totals
  // from the slots and reclaims dead processes. False if the lock is broken.
  bool Lock();
  void Unlock();

  // --- The rest requires the lock.

  // Claims a free slot for id; returns its index or -1 when the table is full.
  int ClaimSlotLocked(const ProcessIdentity& id, uint64_t process_budget,
                      uint8_t policy);

  // Frees a slot and takes its bytes out of the totals.
  void FreeSlotLocked(uint32_t index);

  // Frees the slots of processes that no longer exist. Returns how many.
  uint32_t ReclaimDeadLocked();

  // True when the last reclaim was at least interval_ns ago.
  bool ReclaimDueLocked(uint64_t interval_ns) const;

  // Makes the header totals the sum over claimed slots.
  void RebuildTotalsLocked();

  // Claimed slots.
  uint32_t LiveSlotsLocked() const;

  // Adds bytes for owner to slot index when the node budget allows it and
  // returns true; otherwise returns false with the excess in *shortfall.
  bool ChargeLocked(uint32_t index, Owner owner, uint64_t bytes,
                    uint64_t* shortfall);

  // Takes up to bytes for owner off slot index (never below zero); returns
  // what it took.
  uint64_t ReleaseLocked(uint32_t index, Owner owner, uint64_t bytes);

 private:
  LedgerHeader* header_ = nullptr;
  bool writable_ = false;
  uint64_t pid_ns_ = 0;
};

// CLOCK_MONOTONIC in nanoseconds.
uint64_t MonotonicNs();

}  // namespace budget
}  // namespace pinshim

#endif  // PINSHIM_SHIM_BUDGET_LEDGER_H_
