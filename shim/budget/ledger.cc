#include "shim/budget/ledger.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pinshim {
namespace budget {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

std::atomic<void (*)(CrashPoint)> g_crash_hook{nullptr};
std::atomic<void (*)()> g_lock_hook{nullptr};

constexpr int kLockSpins = 64;
constexpr long kLockWaitRoundNs = 10 * 1000 * 1000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline void MaybeCrash(CrashPoint point) {
  void (*hook)(CrashPoint) = g_crash_hook.load(kRelaxed);
  if (hook != nullptr) hook(point);
}

inline void LockTaken() {
  void (*hook)() = g_lock_hook.load(kRelaxed);
  if (hook != nullptr) hook();
}

// Subtracts at most the current value of a field that others update
// concurrently; returns what was taken.
inline uint64_t SubShared(std::atomic<uint64_t>& field, uint64_t delta) {
  uint64_t cur = field.load(kRelaxed);
  uint64_t take;
  do {
    take = delta < cur ? delta : cur;
  } while (!field.compare_exchange_weak(cur, cur - take, kRelaxed, kRelaxed));
  return take;
}

inline uint64_t Min(uint64_t a, uint64_t b) { return a < b ? a : b; }

void Say(char* message, size_t len, const char* fmt, const char* path, const char* detail) {
  if (message != nullptr && len > 0) snprintf(message, len, fmt, path, detail);
}

// Builds a fresh ledger under a temporary name in the same directory and
// links it into place, so no process ever maps a half-initialised ledger.
// Returns 0 when a ledger now exists at path (ours or a racing creator's),
// else an errno.
int CreateLedger(const char* path, bool shared, uid_t uid) {
  static std::atomic<uint32_t> sequence{0};
  char tmp[4096];
  int n = snprintf(tmp, sizeof(tmp), "%s.%d.%u.tmp", path, static_cast<int>(getpid()),
                   sequence.fetch_add(1, kRelaxed));
  if (n < 0 || static_cast<size_t>(n) >= sizeof(tmp)) return ENAMETOOLONG;
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  int err = 0;
  void* map = MAP_FAILED;
  // The umask must not narrow a shared ledger: its group needs to write it.
  // Nobody else may (see Trust in ledger.h).
  if (fchmod(fd, shared ? 0660 : 0600) != 0 ||
      ftruncate(fd, static_cast<off_t>(kLedgerFileBytes)) != 0) {
    err = errno;
  } else {
    map = mmap(nullptr, kLedgerFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) err = errno;
  }
  if (err == 0) {
    // ftruncate zero-filled the file; zero is every counter's initial value.
    auto* h = static_cast<LedgerHeader*>(map);
    h->prefix.magic = kLedgerMagic;
    h->prefix.version = kLedgerVersion;
    h->prefix.header_bytes = kLedgerHeaderBytes;
    h->prefix.file_bytes = kLedgerFileBytes;
    h->prefix.slot_count = kLedgerSlotCount;
    h->prefix.slot_bytes = sizeof(LedgerSlot);
    h->flags = shared ? kLedgerFlagShared : 0;
    h->creator_uid = static_cast<uint32_t>(uid);
    h->created_unix_s = static_cast<uint64_t>(time(nullptr));
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    err = pthread_mutex_init(&h->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    munmap(map, kLedgerFileBytes);
  }
  close(fd);
  if (err == 0 && link(tmp, path) != 0 && errno != EEXIST) err = errno;
  unlink(tmp);
  return err;
}

// Someone else's file under our name could feed us any totals, or be fed
// ours; only shared mode opts into trusting other users.
LedgerOpen ForeignLedger(const char* path, uid_t owner, uid_t uid, char* message, size_t len) {
  char detail[160];
  snprintf(detail, sizeof(detail),
           "it belongs to uid %u, not to uid %u; refusing it "
           "(--ledger-shared, or PINSHIM_LEDGER_SHARED=1, shares one ledger between users)",
           static_cast<unsigned>(owner), static_cast<unsigned>(uid));
  Say(message, len, "node ledger %s: %s", path, detail);
  return LedgerOpen::kForeign;
}

// A ledger others may write: any of them could stop, kill or bypass the
// processes that map it.
LedgerOpen UnsafeLedger(const char* path, mode_t mode, bool shared, char* message, size_t len) {
  char detail[200];
  snprintf(detail, sizeof(detail),
           "mode %04o lets %s write it, and whoever can write it can stop, crash or bypass the "
           "processes that use it; refusing it (remove it, or chmod %s)",
           static_cast<unsigned>(mode & 07777), shared ? "every user" : "other users",
           shared ? "o-w" : "go-w");
  Say(message, len, "node ledger %s: %s", path, detail);
  return LedgerOpen::kUnsafe;
}

// The heartbeat tag: bits of the start time of the process that claimed the
// slot, written by pinshims that keep heartbeats. A pinshim of the same
// layout that does not keep them leaves a previous owner's tag, which then
// does not match its own start time: its slot is never judged by heartbeat.
void HeartbeatTag(uint64_t start_time, uint8_t (&tag)[3]) {
  const uint64_t h = (start_time + 1) * 0x9e3779b97f4a7c15ull;
  tag[0] = static_cast<uint8_t>(h >> 40);
  tag[1] = static_cast<uint8_t>(h >> 48);
  tag[2] = static_cast<uint8_t>(h >> 56);
}

void SetHeartbeatTag(LedgerSlot* s, uint64_t start_time) {
  HeartbeatTag(start_time, s->heartbeat_tag);
}

bool HeartbeatKept(const LedgerSlot& s) {
  uint8_t tag[3];
  HeartbeatTag(s.start_time.load(kRelaxed), tag);
  return s.heartbeat_s.load(kRelaxed) != 0 && memcmp(tag, s.heartbeat_tag, sizeof(tag)) == 0;
}

uint32_t NowSeconds() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint32_t>(ts.tv_sec);
}

}  // namespace

// A plain load and store, which is cheaper than a locked read-modify-write
// and still a single aligned 8-byte store, so a death mid-update cannot
// tear it.
void Ledger::AddLocked(std::atomic<uint64_t>& field, uint64_t delta) const {
  field.store(field.load(kRelaxed) + delta, kRelaxed);
}

uint64_t Ledger::SubLocked(std::atomic<uint64_t>& field, uint64_t delta) const {
  uint64_t cur = field.load(kRelaxed);
  uint64_t take = delta < cur ? delta : cur;
  field.store(cur - take, kRelaxed);
  return take;
}

void Ledger::Heartbeat(uint32_t index) const {
  slot(index).heartbeat_s.store(NowSeconds(), kRelaxed);
}

const char* OwnerName(Owner owner) {
  switch (owner) {
    case Owner::kProgramAlloc: return "program_alloc";
    case Owner::kProgramRegister: return "program_register";
    case Owner::kPinshimPool: return "pinshim_pool";
    case Owner::kPinshimCache: return "pinshim_cache";
    case Owner::kProgramVmm: return "program_vmm";
    case Owner::kProgramPool: return "program_pool";
  }
  return "unknown";
}

void SetLedgerCrashHookForTesting(void (*hook)(CrashPoint point)) {
  g_crash_hook.store(hook, kRelaxed);
}

void SetLedgerLockHookForTesting(void (*hook)()) { g_lock_hook.store(hook, kRelaxed); }

void DefaultLedgerPath(bool shared, uid_t uid, char* out, size_t len) {
  if (shared) {
    snprintf(out, len, "/dev/shm/pinshim-ledger-shared");
  } else {
    snprintf(out, len, "/dev/shm/pinshim-ledger-%u", static_cast<unsigned>(uid));
  }
}

namespace {

// Opens the ledger file at options.path into *fd (read-write, or read-only
// with *writable false where only that is allowed), creating it where
// asked; kOk when *fd is open, else why not (said in message).
LedgerOpen OpenLedgerFile(const LedgerOpenOptions& options, int* fd, bool* writable, char* message,
                          size_t message_len) {
  const char* path = options.path;
  *writable = true;
  *fd = -1;
  // A racing creator or remover can change the picture between our calls;
  // a few rounds settle it.
  for (int attempt = 0; attempt < 4 && *fd < 0; ++attempt) {
    // O_NONBLOCK: a FIFO planted at the name must not block the open.
    *fd = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (*fd >= 0) break;
    int err = errno;
    if ((err == EACCES || err == EROFS) && !options.create) {
      *fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (*fd >= 0) {
        *writable = false;
        break;
      }
      err = errno;
    }
    if (err == ENOENT && !options.create) return LedgerOpen::kMissing;
    struct stat st;
    if (err == EACCES && !options.shared && lstat(path, &st) == 0 && st.st_uid != options.uid) {
      return ForeignLedger(path, st.st_uid, options.uid, message, message_len);
    }
    if (err != ENOENT) {
      Say(message, message_len, "cannot open the node ledger %s: %s", path, strerror(err));
      return err == ELOOP ? LedgerOpen::kBadLayout : LedgerOpen::kUnreadable;
    }
    err = CreateLedger(path, options.shared, options.uid);
    if (err != 0) {
      Say(message, message_len, "cannot create the node ledger %s: %s", path, strerror(err));
      return LedgerOpen::kUnreadable;
    }
  }
  if (*fd < 0) {
    Say(message, message_len, "cannot open the node ledger %s: %s", path, "it keeps disappearing");
    return LedgerOpen::kUnreadable;
  }
  return LedgerOpen::kOk;
}

// Whether the open ledger file fd is a safe pinshim ledger of this
// layout: kOk, else why not (said in message).
LedgerOpen CheckLedgerFile(int fd, const LedgerOpenOptions& options, char* message,
                           size_t message_len) {
  const char* path = options.path;
  struct stat st;
  LedgerPrefix prefix;
  char detail[160];
  LedgerOpen result = LedgerOpen::kOk;
  if (fstat(fd, &st) != 0) {
    Say(message, message_len, "cannot stat the node ledger %s: %s", path, strerror(errno));
    result = LedgerOpen::kUnreadable;
  } else if (!S_ISREG(st.st_mode)) {
    Say(message, message_len, "%s is not a pinshim node ledger (%s)", path, "not a regular file");
    result = LedgerOpen::kBadLayout;
  } else if (!options.shared && st.st_uid != options.uid) {
    result = ForeignLedger(path, st.st_uid, options.uid, message, message_len);
  } else if ((st.st_mode & (options.shared ? 0002 : 0022)) != 0) {
    result = UnsafeLedger(path, st.st_mode, options.shared, message, message_len);
  } else if (static_cast<uint64_t>(st.st_size) < sizeof(prefix) ||
             pread(fd, &prefix, sizeof(prefix), 0) != static_cast<ssize_t>(sizeof(prefix))) {
    Say(message, message_len, "%s is not a pinshim node ledger (%s)", path, "too short");
    result = LedgerOpen::kBadLayout;
  } else if (prefix.magic != kLedgerMagic) {
    Say(message, message_len, "%s is not a pinshim node ledger (%s)", path, "bad magic");
    result = LedgerOpen::kBadLayout;
  } else if (prefix.version != kLedgerVersion || prefix.header_bytes != kLedgerHeaderBytes ||
             prefix.file_bytes != kLedgerFileBytes || prefix.slot_count != kLedgerSlotCount ||
             prefix.slot_bytes != sizeof(LedgerSlot) ||
             static_cast<uint64_t>(st.st_size) != kLedgerFileBytes) {
    snprintf(detail, sizeof(detail),
             "layout version %u with %u slots of %u bytes in %llu bytes; "
             "this pinshim uses version %u, %u slots of %u bytes in %llu bytes",
             prefix.version, prefix.slot_count, prefix.slot_bytes,
             static_cast<unsigned long long>(st.st_size), kLedgerVersion, kLedgerSlotCount,
             static_cast<unsigned>(sizeof(LedgerSlot)),
             static_cast<unsigned long long>(kLedgerFileBytes));
    Say(message, message_len, "node ledger %s has %s", path, detail);
    result = LedgerOpen::kBadLayout;
  }
  return result;
}

}  // namespace

LedgerOpen Ledger::Open(const LedgerOpenOptions& options, char* message, size_t message_len) {
  if (message != nullptr && message_len > 0) message[0] = '\0';
  Close();
  const char* path = options.path;
  bool writable = true;
  int fd = -1;
  const LedgerOpen opened = OpenLedgerFile(options, &fd, &writable, message, message_len);
  if (opened != LedgerOpen::kOk) return opened;
  const LedgerOpen result = CheckLedgerFile(fd, options, message, message_len);
  if (result != LedgerOpen::kOk) {
    close(fd);
    return result;
  }
  void* map =
      mmap(nullptr, kLedgerFileBytes, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  int map_err = errno;
  close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) {
    Say(message, message_len, "cannot map the node ledger %s: %s", path, strerror(map_err));
    return LedgerOpen::kUnreadable;
  }
  header_ = static_cast<LedgerHeader*>(map);
  writable_ = writable;
  pid_ns_ = SelfPidNamespace();
  snprintf(path_, sizeof(path_), "%s", path);
  lock_stalled_.store(false, kRelaxed);
  stall_warned_.store(false, kRelaxed);
  return LedgerOpen::kOk;
}

void Ledger::Close() {
  if (header_ != nullptr) munmap(header_, kLedgerFileBytes);
  header_ = nullptr;
  writable_ = false;
}

LedgerSlot& Ledger::slot(uint32_t index) const {
  auto* base = reinterpret_cast<char*>(header_) + kLedgerHeaderBytes;
  return reinterpret_cast<LedgerSlot*>(base)[index];
}

namespace {

// glibc's robust mutex keeps its owner's thread id in the lock word, with
// these bits beside it (the kernel's robust-futex protocol).
constexpr uint32_t kFutexTidMask = 0x3fffffff;
constexpr uint32_t kFutexOwnerDied = 0x40000000;

#if defined(__GLIBC__)
int* LockWord(LedgerHeader* h) { return &h->mutex.__data.__lock; }
#endif

// True while a thread with this id exists in our pid namespace.
bool ThreadExists(uint32_t tid) {
  if (kill(static_cast<pid_t>(tid), 0) == 0 || errno == EPERM) return true;
  char proc[32];
  snprintf(proc, sizeof(proc), "/proc/%u", tid);
  struct stat st;
  return stat(proc, &st) == 0 || access("/proc/self", F_OK) != 0;
}

uint64_t DeadlineAfter(uint64_t ns) { return MonotonicNs() + ns; }

}  // namespace

bool Ledger::HasForeignSlots() const {
  uint32_t high = header_->slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount) high = kLedgerSlotCount;
  for (uint32_t i = 0; i < high; ++i) {
    const LedgerSlot& s = slot(i);
    if (s.pid.load(kRelaxed) != 0 && s.pid_ns.load(kRelaxed) != pid_ns_) return true;
  }
  return false;
}

bool Ledger::BreakLockOfVanishedHolder(uint64_t waited_ns) {
#if defined(__GLIBC__)
  // Critical sections last microseconds: only a wait this long is looked at.
  if (waited_ns < 50 * 1000 * 1000) return false;
  int* word = LockWord(header_);
  int seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  const uint32_t tid = static_cast<uint32_t>(seen) & kFutexTidMask;
  if (tid == 0 || (static_cast<uint32_t>(seen) & kFutexOwnerDied) != 0) return false;
  if (ThreadExists(tid) || HasForeignSlots()) return false;
  // What the kernel does for a holder that dies: the next locker then gets
  // EOWNERDEAD and repairs the ledger (see Lock()).
  const int died = static_cast<int>(static_cast<uint32_t>(seen) | kFutexOwnerDied);
  return __atomic_compare_exchange_n(word, &seen, died, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
#else
  (void)waited_ns;
  return false;
#endif
}

bool Ledger::Lock() {
  // The critical sections are a few dozen instructions: while the holder runs
  // on another CPU, a short spin hands the lock over far sooner than sleeping
  // in the kernel and being woken would.
  int rc = EBUSY;
  for (int spin = 0; spin < kLockSpins && rc == EBUSY; ++spin) {
    rc = pthread_mutex_trylock(&header_->mutex);
    if (rc == EBUSY) CpuRelax();
  }
  // Clocks are read only when the spin did not settle it.
  const uint64_t start = rc == EBUSY ? MonotonicNs() : 0;
  const uint64_t deadline =
      rc == EBUSY
          ? DeadlineAfter(lock_stalled_.load(kRelaxed) ? kLedgerLockRetryNs : kLedgerLockWaitNs)
          : 0;
  // Sleep in bounded rounds. When a holder dies the kernel wakes a single
  // waiter, and when that waiter is a thread of a process dying at the same
  // moment (its sibling, say) the wake-up is lost and every other waiter
  // would sleep forever. Each round that times out looks at the lock again
  // and finds the dead owner itself, or a holder whose thread is gone.
  while (rc == EBUSY || rc == ETIMEDOUT) {
    const uint64_t now = MonotonicNs();
    if (now >= deadline) break;
    if (BreakLockOfVanishedHolder(now - start)) continue;
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer intercepts neither pthread_mutex_clocklock nor a dead
    // owner's EOWNERDEAD from pthread_mutex_timedlock: it would not see the
    // lock taken, and would report the unlock and every access made under
    // it. Its builds poll with trylock instead, which it follows in full.
    struct timespec pause = {0, 50000};
    nanosleep(&pause, nullptr);
    rc = pthread_mutex_trylock(&header_->mutex);
#else
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += static_cast<long>(std::min<uint64_t>(kLockWaitRoundNs, deadline - now));
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000;
    }
    rc = pthread_mutex_clocklock(&header_->mutex, CLOCK_MONOTONIC, &until);
#endif
  }
  if (rc == EBUSY || rc == ETIMEDOUT) {
#if defined(__GLIBC__)
    stalled_holder_.store(
        static_cast<uint32_t>(__atomic_load_n(LockWord(header_), __ATOMIC_RELAXED)) & kFutexTidMask,
        kRelaxed);
#endif
    lock_stalled_.store(true, kRelaxed);
    return false;
  }
  if (rc != 0 && rc != EOWNERDEAD) return false;
  lock_stalled_.store(false, kRelaxed);
  stall_warned_.store(false, kRelaxed);
  if (rc == 0) {
    LockTaken();
    return true;
  }
  // The holder died somewhere inside an update. The slots are the truth;
  // make the totals agree with them (finishing a take it left half done),
  // then drop the dead. Marking the mutex consistent only afterwards means a
  // death during this repair is repaired by the next locker in turn; every
  // step can be repeated.
  RebuildTotalsLocked();
  ReclaimDeadLocked();
  header_->recoveries.fetch_add(1, kRelaxed);
  pthread_mutex_consistent(&header_->mutex);
  LockTaken();
  return true;
}

bool Ledger::TakeLockWarning(char* message, size_t len) {
  if (!lock_stalled_.load(kRelaxed) || stall_warned_.exchange(true, kRelaxed)) return false;
  const uint32_t tid = stalled_holder_.load(kRelaxed);
  snprintf(message, len,
           "node ledger %s: its lock has been held for over %llu s (by thread %u%s); pinning "
           "that needs the ledger is refused until it is free (PINSHIM_POLICY decides what the "
           "program gets)",
           path_, static_cast<unsigned long long>(kLedgerLockWaitNs / 1000000000), tid,
           HasForeignSlots() ? ", perhaps of another pid namespace" : ", which is stopped or hung");
  return true;
}

void Ledger::Unlock() { pthread_mutex_unlock(&header_->mutex); }

int Ledger::ClaimSlotLocked(const ProcessIdentity& id, uint64_t process_budget, uint8_t policy) {
  // A slot left by a process of another pid namespace cannot be judged, so
  // it is taken only when nothing else is free: by then its process is long
  // gone.
  int fallback = -1;
  int chosen = -1;
  for (uint32_t i = 0; i < kLedgerSlotCount && chosen < 0; ++i) {
    LedgerSlot& s = slot(i);
    if (s.pid.load(kRelaxed) != 0) continue;
    const uint32_t left = s.left_pid.load(kRelaxed);
    if (left == 0) {
      chosen = static_cast<int>(i);
    } else if (s.pid_ns.load(kRelaxed) != pid_ns_) {
      if (fallback < 0) fallback = static_cast<int>(i);
    } else if (CheckProcess(left, s.start_time.load(kRelaxed)) == Liveness::kDead) {
      chosen = static_cast<int>(i);
    }
  }
  if (chosen < 0) chosen = fallback;
  if (chosen < 0) return -1;
  const uint32_t i = static_cast<uint32_t>(chosen);
  LedgerSlot& s = slot(i);
  s.policy = policy;
  s.start_time.store(id.start_time, kRelaxed);
  s.pid_ns.store(id.pid_ns, kRelaxed);
  s.process_budget.store(process_budget, kRelaxed);
  s.reserved.store(0, kRelaxed);
  s.left_pid.store(0, kRelaxed);
  s.heartbeat_s.store(NowSeconds(), kRelaxed);
  SetHeartbeatTag(&s, id.start_time);
  s.available.store(0, kRelaxed);
  for (auto& b : s.bytes) b.store(0, kRelaxed);
  s.grants.store(0, kRelaxed);
  s.denials.store(0, kRelaxed);
  s.fallbacks.store(0, kRelaxed);
  s.evictions.store(0, kRelaxed);
  s.evicted_bytes.store(0, kRelaxed);
  memcpy(s.comm, id.comm, sizeof(s.comm));
  s.pid.store(id.pid, std::memory_order_release);
  if (header_->slot_high.load(kRelaxed) <= i) header_->slot_high.store(i + 1, kRelaxed);
  return chosen;
}

void Ledger::FreeSlotLocked(uint32_t index) {
  LedgerSlot& s = slot(index);
  // Unclaim first: should we die before the totals are adjusted, the rebuild
  // no longer counts this slot, which is what the adjustment would do.
  s.pid.store(0, kRelaxed);
  s.left_pid.store(0, kRelaxed);
  const uint64_t reserved = s.reserved.load(kRelaxed);
  const uint64_t available = AvailableBytes(s.available.load(kRelaxed));
  SubLocked(header_->reserved, reserved);
  SubLocked(header_->pinned, reserved > available ? reserved - available : 0);
  for (int o = 0; o < kOwnerCount; ++o)
    SubLocked(header_->pinned_by_owner[o], s.bytes[o].load(kRelaxed));
  AddLocked(header_->retired_grants, s.grants.load(kRelaxed));
}

void Ledger::LeaveSlotLocked(uint32_t index) {
  LedgerSlot& s = slot(index);
  // Closed before anything else: a thread of ours still about to take from
  // the word finds nothing, so no charge is served that the node would no
  // longer count.
  s.available.fetch_or(kAvailableClosed, kRelaxed);
  const uint32_t pid = s.pid.load(kRelaxed);
  FreeSlotLocked(index);
  // Nobody can claim the slot while we hold the lock, so marking it after
  // freeing it leaves no gap; should we die first, it is free, as it should.
  s.left_pid.store(pid, kRelaxed);
}

uint32_t Ledger::ReclaimDeadLocked() {
  uint32_t reclaimed = 0;
  uint64_t bytes = 0;
  uint32_t high = header_->slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount) high = kLedgerSlotCount;
  const uint32_t now_s = NowSeconds();
  for (uint32_t i = 0; i < high; ++i) {
    LedgerSlot& s = slot(i);
    uint32_t pid = s.pid.load(kRelaxed);
    if (pid == 0) continue;
    if (s.pid_ns.load(kRelaxed) != pid_ns_) {
      // Another pid namespace: judged by its heartbeat, never by its pid.
      // Freed as a slot its process left (closed to charges, reused last),
      // so that a process misjudged while stopped finds its slot gone and
      // claims a fresh one rather than charging another's.
      const uint32_t beat = s.heartbeat_s.load(kRelaxed);
      if (!HeartbeatKept(s) || now_s < beat || now_s - beat < kForeignSlotStaleS) continue;
      for (auto& b : s.bytes) bytes += b.load(kRelaxed);
      LeaveSlotLocked(i);
      ++reclaimed;
      continue;
    }
    if (CheckProcess(pid, s.start_time.load(kRelaxed)) != Liveness::kDead) continue;
    for (auto& b : s.bytes) bytes += b.load(kRelaxed);
    FreeSlotLocked(i);
    ++reclaimed;
  }
  if (reclaimed > 0) {
    AddLocked(header_->reclaimed_processes, reclaimed);
    AddLocked(header_->reclaimed_bytes, bytes);
  }
  header_->last_reclaim_ns.store(MonotonicNs(), kRelaxed);
  // The scan is also the moment to bring the totals up to date with what
  // the processes did without the lock; readers such as `pinshim status`
  // reclaim before they read.
  RebuildTotalsLocked();
  return reclaimed;
}

uint32_t Ledger::CheckDamage(bool locked, char* message, size_t len) const {
  uint32_t problems = 0;
  auto problem = [&](const char* fmt, unsigned long long a, unsigned long long b) {
    if (problems++ == 0 && message != nullptr && len > 0) snprintf(message, len, fmt, a, b);
  };
  const LedgerHeader& h = *header_;
  const uint32_t high = h.slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount)
    problem("slot table end %llu beyond its %llu slots", high, kLedgerSlotCount);
  const uint64_t budget = h.node_budget.load(kRelaxed);
  if (budget > kLedgerMaxNodeBudget)
    problem("node budget %llu beyond the largest, %llu", budget, kLedgerMaxNodeBudget);
  uint64_t reserved_sum = 0;
  uint32_t live = 0;
  for (uint32_t i = 0; i < std::min(high, kLedgerSlotCount); ++i) {
    const LedgerSlot& s = slot(i);
    const uint32_t pid = s.pid.load(kRelaxed);
    if (pid == 0) continue;
    ++live;
    // Linux pids stay below 2^22 (PID_MAX_LIMIT).
    if (pid > (1u << 22)) problem("slot %llu names pid %llu, which no Linux process has", i, pid);
    const uint64_t reserved = s.reserved.load(kRelaxed);
    if (reserved > kLedgerMaxNodeBudget) {
      problem("slot %llu reserves %llu bytes, beyond any node budget", i, reserved);
    }
    for (const auto& b : s.bytes) {
      if (b.load(kRelaxed) > kLedgerMaxNodeBudget) {
        problem("slot %llu counts %llu pinned bytes, beyond any node budget", i, b.load(kRelaxed));
      }
    }
    reserved_sum += reserved;
  }
  if (live > 0 && budget == 0) problem("%llu processes in it but no node budget", live, 0);
  // Reservations change only under the lock, and their total with them.
  if (locked && reserved_sum != h.reserved.load(kRelaxed)) {
    problem("the node total of reservations (%llu bytes) is not the slots' sum (%llu bytes)",
            h.reserved.load(kRelaxed), reserved_sum);
  }
  return problems;
}

bool Ledger::ReclaimDueLocked(uint64_t interval_ns) const {
  uint64_t last = header_->last_reclaim_ns.load(kRelaxed);
  uint64_t now = MonotonicNs();
  return now < last || now - last >= interval_ns;
}

void Ledger::RebuildTotalsLocked() {
  // A take the previous holder left half done: the other slot's available
  // bytes were taken (its stamp moved on) but its reservation still holds
  // them. Nobody else held the lock since, so both fields are as it left them.
  const uint32_t take = header_->take_slot.load(std::memory_order_acquire);
  if (take != 0) {
    if (take <= kLedgerSlotCount) {
      LedgerSlot& s = slot(take - 1);
      const uint64_t stamp =
          (s.available.load(kRelaxed) & kAvailableStampMask) >> kAvailableStampShift;
      const uint64_t before = header_->take_reserved.load(kRelaxed);
      if (stamp != header_->take_stamp.load(kRelaxed) && s.reserved.load(kRelaxed) == before) {
        const uint64_t bytes = header_->take_bytes.load(kRelaxed);
        s.reserved.store(before - Min(bytes, before), kRelaxed);
      }
    }
    header_->take_slot.store(0, std::memory_order_release);
  }

  uint64_t by_owner[kOwnerCount] = {};
  uint64_t reserved = 0;
  uint64_t granted = 0;
  uint64_t grants = header_->retired_grants.load(kRelaxed);
  uint32_t high = header_->slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount) high = kLedgerSlotCount;
  for (uint32_t i = 0; i < high; ++i) {
    LedgerSlot& s = slot(i);
    if (s.pid.load(kRelaxed) == 0) continue;
    // The reservation cannot move while we hold the lock, so each slot's
    // granted bytes come from one read of available: the sum never counts
    // more than the slots had reserved.
    const uint64_t r = s.reserved.load(kRelaxed);
    const uint64_t a = AvailableBytes(s.available.load(kRelaxed));
    reserved += r;
    granted += r > a ? r - a : 0;
    for (int o = 0; o < kOwnerCount; ++o) by_owner[o] += s.bytes[o].load(kRelaxed);
    grants += s.grants.load(kRelaxed);
  }
  header_->reserved.store(reserved, kRelaxed);
  header_->pinned.store(granted, kRelaxed);
  for (int o = 0; o < kOwnerCount; ++o) header_->pinned_by_owner[o].store(by_owner[o], kRelaxed);
  header_->grants.store(grants, kRelaxed);
}

uint32_t Ledger::LiveSlotsLocked() const {
  uint32_t live = 0;
  uint32_t high = header_->slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount) high = kLedgerSlotCount;
  for (uint32_t i = 0; i < high; ++i) {
    if (slot(i).pid.load(kRelaxed) != 0) ++live;
  }
  return live;
}

uint64_t Ledger::UnreservedLocked() const {
  const uint64_t budget = header_->node_budget.load(kRelaxed);
  const uint64_t reserved = header_->reserved.load(kRelaxed);
  return budget > reserved ? budget - reserved : 0;
}

uint64_t Ledger::OverBudgetLocked() const {
  const uint64_t budget = header_->node_budget.load(kRelaxed);
  const uint64_t reserved = header_->reserved.load(kRelaxed);
  return reserved > budget ? reserved - budget : 0;
}

void Ledger::ReserveLocked(uint32_t index, uint64_t bytes) {
  LedgerSlot& s = slot(index);
  // Reservation first, available last: available never exceeds what the
  // reservation covers, at any instant a death could freeze.
  AddLocked(s.reserved, bytes);
  MaybeCrash(CrashPoint::kChargeMidUpdate);
  AddLocked(header_->reserved, bytes);
  s.available.fetch_add(bytes, kRelaxed);
}

uint64_t Ledger::UnreserveLocked(uint32_t index, uint64_t keep) {
  LedgerSlot& s = slot(index);
  uint64_t word = s.available.load(kRelaxed);
  uint64_t give;
  do {
    const uint64_t have = AvailableBytes(word);
    if (have <= keep) return 0;
    give = have - keep;
    // Only the low bits change: give <= have.
  } while (!s.available.compare_exchange_weak(word, word - give, kRelaxed, kRelaxed));
  SubLocked(s.reserved, give);
  MaybeCrash(CrashPoint::kReleaseMidUpdate);
  SubLocked(header_->reserved, give);
  return give;
}

uint64_t Ledger::UnusedLocked(uint32_t except) const {
  uint64_t unused = 0;
  uint32_t high = header_->slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount) high = kLedgerSlotCount;
  for (uint32_t i = 0; i < high; ++i) {
    const LedgerSlot& s = slot(i);
    if (i == except || s.pid.load(kRelaxed) == 0) continue;
    const uint64_t word = s.available.load(kRelaxed);
    if ((word & kAvailableClosed) == 0) unused += AvailableBytes(word);
  }
  return unused;
}

uint64_t Ledger::TakeUnusedLocked(uint32_t except, uint64_t want) {
  uint64_t got = 0;
  uint32_t high = header_->slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount) high = kLedgerSlotCount;
  for (uint32_t i = 0; i < high && got < want; ++i) {
    if (i == except) continue;
    LedgerSlot& s = slot(i);
    if (s.pid.load(kRelaxed) == 0) continue;
    uint64_t word = s.available.load(kRelaxed);
    for (;;) {
      const uint64_t have = AvailableBytes(word);
      if (have == 0 || (word & kAvailableClosed) != 0) break;
      const uint64_t take = Min(have, want - got);
      const uint64_t stamp = word & kAvailableStampMask;
      const uint64_t next_stamp =
          (stamp + (uint64_t{1} << kAvailableStampShift)) & kAvailableStampMask;
      const uint64_t desired = next_stamp | (have - take);
      const uint64_t reserved = s.reserved.load(kRelaxed);
      // The journal is written before the word changes (the exchange below
      // orders it), so a death between the two steps is always recorded.
      header_->take_stamp.store(static_cast<uint32_t>(stamp >> kAvailableStampShift), kRelaxed);
      header_->take_bytes.store(take, kRelaxed);
      header_->take_reserved.store(reserved, kRelaxed);
      header_->take_slot.store(i + 1, kRelaxed);
      if (!s.available.compare_exchange_weak(word, desired, std::memory_order_acq_rel, kRelaxed)) {
        continue;  // its owner charged or released meanwhile
      }
      MaybeCrash(CrashPoint::kTakeMidUpdate);
      s.reserved.store(reserved - take, kRelaxed);
      SubLocked(header_->reserved, take);
      header_->take_slot.store(0, std::memory_order_release);
      AddLocked(header_->takes, 1);
      AddLocked(header_->taken_bytes, take);
      got += take;
      break;
    }
  }
  return got;
}

bool Ledger::ChargeLocked(uint32_t index, Owner owner, uint64_t bytes, uint64_t* shortfall) {
  const uint64_t budget = header_->node_budget.load(kRelaxed);
  const uint64_t reserved = header_->reserved.load(kRelaxed);
  // Reservations can sit above the budget after a process joined with a
  // smaller one; nothing is granted until releases bring them back under.
  if (reserved > budget || bytes > budget - reserved) {
    uint64_t over = reserved > budget ? reserved - budget : 0;
    uint64_t excess = bytes - (reserved > budget ? 0 : budget - reserved);
    *shortfall = over + excess;
    return false;
  }
  const int o = static_cast<int>(owner);
  LedgerSlot& s = slot(index);
  AddLocked(s.reserved, bytes);
  s.bytes[o].fetch_add(bytes, kRelaxed);
  MaybeCrash(CrashPoint::kChargeMidUpdate);
  AddLocked(header_->reserved, bytes);
  AddLocked(header_->pinned_by_owner[o], bytes);
  AddLocked(header_->pinned, bytes);
  s.grants.fetch_add(1, kRelaxed);
  AddLocked(header_->grants, 1);
  return true;
}

uint64_t Ledger::ReleaseLocked(uint32_t index, Owner owner, uint64_t bytes) {
  const int o = static_cast<int>(owner);
  LedgerSlot& s = slot(index);
  // Bytes first, reservation after: the reservation always covers them.
  const uint64_t take = SubShared(s.bytes[o], bytes);
  SubLocked(s.reserved, take);
  MaybeCrash(CrashPoint::kReleaseMidUpdate);
  SubLocked(header_->reserved, take);
  SubLocked(header_->pinned_by_owner[o], take);
  SubLocked(header_->pinned, take);
  return take;
}

}  // namespace budget
}  // namespace pinshim
