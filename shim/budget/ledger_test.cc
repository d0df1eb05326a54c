#include "shim/budget/ledger.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "shim/budget/proc.h"
#include "shim/budget/test_util.h"

namespace pinshim {
namespace budget {
namespace {

LedgerOpenOptions Options(const std::string& path, bool create = true) {
  LedgerOpenOptions o;
  o.path = path.c_str();
  o.create = create;
  o.uid = geteuid();
  return o;
}

std::string Basename(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Files in the ledger's directory whose names start with the ledger's name.
int FilesNamedLike(const std::string& path) {
  std::string dir = path.substr(0, path.rfind('/'));
  std::string base = Basename(path);
  int n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name).compare(0, base.size(), base) == 0) ++n;
  }
  closedir(d);
  return n;
}

TEST(LedgerTest, CreatesAVersionedLedger) {
  const std::string path = UniqueLedgerPath("create");
  Ledger ledger;
  char msg[512];
  EXPECT_EQ(ledger.Open(Options(path, false), msg, sizeof(msg)), LedgerOpen::kMissing);
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  const LedgerPrefix& p = ledger.header().prefix;
  EXPECT_EQ(p.magic, kLedgerMagic);
  EXPECT_EQ(p.version, kLedgerVersion);
  EXPECT_EQ(p.header_bytes, kLedgerHeaderBytes);
  EXPECT_EQ(p.file_bytes, kLedgerFileBytes);
  EXPECT_EQ(p.slot_count, kLedgerSlotCount);
  EXPECT_EQ(p.slot_bytes, sizeof(LedgerSlot));
  EXPECT_EQ(memcmp(&p.magic, "PINSLDG1", 8), 0);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kLedgerFileBytes);
  EXPECT_EQ(FilesNamedLike(path), 1) << "no temporary file left behind";
  EXPECT_TRUE(ledger.writable());
  ledger.Close();
  ASSERT_TRUE(OpenLedger(path, &ledger));
  ledger.Close();
}

TEST(LedgerTest, RacingCreatorsAllGetTheSameLedger) {
  const std::string path = UniqueLedgerPath("race-create");
  constexpr int kProcs = 8;
  int pipes[2];
  ASSERT_EQ(pipe(pipes), 0);
  pid_t pids[kProcs];
  for (int i = 0; i < kProcs; ++i) {
    pids[i] = fork();
    if (pids[i] == 0) {
      char go;
      close(pipes[1]);
      if (read(pipes[0], &go, 1) != 0) _exit(9);  // all start when the pipe closes
      Ledger ledger;
      char msg[512];
      if (ledger.Open(Options(path), msg, sizeof(msg)) != LedgerOpen::kOk) _exit(1);
      if (!ledger.Lock()) _exit(2);
      ProcessIdentity self;
      ReadSelfIdentity(&self);
      int slot = ledger.ClaimSlotLocked(self, 0, 0);
      uint64_t shortfall;
      ledger.header().node_budget.store(1 << 20);
      bool ok = slot >= 0 && ledger.ChargeLocked(slot, Owner::kProgramAlloc, 10, &shortfall);
      ledger.Unlock();
      _exit(ok ? 0 : 3);
    }
  }
  close(pipes[0]);
  close(pipes[1]);
  for (pid_t pid : pids) {
    int status;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger));
  EXPECT_EQ(ledger.header().grants.load(), static_cast<uint64_t>(kProcs))
      << "every process charged into one and the same ledger";
  EXPECT_EQ(FilesNamedLike(path), 1);
  ledger.Close();
}

TEST(LedgerTest, RefusesAnotherUsersLedgerUnlessShared) {
  const std::string path = UniqueLedgerPath("foreign");
  Ledger ledger;
  char msg[512];
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.Close();
  LedgerOpenOptions other = Options(path);
  other.uid = geteuid() + 1;  // acting as someone who does not own the file
  EXPECT_EQ(ledger.Open(other, msg, sizeof(msg)), LedgerOpen::kForeign);
  const std::string text = msg;
  EXPECT_NE(text.find("belongs to uid " + std::to_string(geteuid())), std::string::npos) << text;
  EXPECT_NE(text.find("not to uid " + std::to_string(geteuid() + 1)), std::string::npos);
  EXPECT_NE(text.find("PINSHIM_LEDGER_SHARED=1"), std::string::npos);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_FALSE(ledger.is_open());
  other.shared = true;
  EXPECT_EQ(ledger.Open(other, msg, sizeof(msg)), LedgerOpen::kOk) << msg;
  ledger.Close();
}

void WriteFile(const std::string& path, const void* data, size_t len, off_t size) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, size), 0);
  ASSERT_EQ(pwrite(fd, data, len, 0), static_cast<ssize_t>(len));
  close(fd);
}

TEST(LedgerTest, RefusesOtherLayoutsWithOneLine) {
  const std::string path = UniqueLedgerPath("layout");
  Ledger ledger;
  char msg[512];
  LedgerPrefix good = {kLedgerMagic,     kLedgerVersion,   kLedgerHeaderBytes,
                       kLedgerFileBytes, kLedgerSlotCount, sizeof(LedgerSlot)};
  struct Case {
    const char* what;
    LedgerPrefix prefix;
    off_t size;
    const char* expect;
  } cases[] = {
      {"newer version", good, static_cast<off_t>(kLedgerFileBytes), "layout version 4"},
      {"bad magic", good, static_cast<off_t>(kLedgerFileBytes), "bad magic"},
      {"other slot count", good, static_cast<off_t>(kLedgerFileBytes), "with 8 slots"},
      {"truncated file", good, 4096, "in 4096 bytes"},
  };
  cases[0].prefix.version = kLedgerVersion + 1;
  cases[1].prefix.magic = 0x1234;
  cases[2].prefix.slot_count = 8;
  for (const Case& c : cases) {
    WriteFile(path, &c.prefix, sizeof(c.prefix), c.size);
    EXPECT_EQ(ledger.Open(Options(path), msg, sizeof(msg)), LedgerOpen::kBadLayout) << c.what;
    EXPECT_NE(std::string(msg).find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(std::string(msg).find(path), std::string::npos) << msg;
    EXPECT_EQ(std::string(msg).find('\n'), std::string::npos);
  }
  WriteFile(path, "x", 1, 1);
  EXPECT_EQ(ledger.Open(Options(path), msg, sizeof(msg)), LedgerOpen::kBadLayout);
  EXPECT_NE(std::string(msg).find("too short"), std::string::npos) << msg;
  unlink(path.c_str());
  const std::string target = path + ".target";  // a link to any file is refused
  WriteFile(target, "x", 1, static_cast<off_t>(kLedgerFileBytes));
  ASSERT_EQ(symlink(target.c_str(), path.c_str()), 0);
  EXPECT_EQ(ledger.Open(Options(path), msg, sizeof(msg)), LedgerOpen::kBadLayout) << msg;
  unlink(path.c_str());
  unlink(target.c_str());
  EXPECT_FALSE(ledger.is_open());
}

// A claimed slot holding bytes for a process described by id.
int ClaimWithBytes(Ledger& ledger, const ProcessIdentity& id, uint64_t bytes) {
  uint64_t shortfall;
  int slot = ledger.ClaimSlotLocked(id, 0, 0);
  EXPECT_GE(slot, 0);
  EXPECT_TRUE(ledger.ChargeLocked(slot, Owner::kProgramRegister, bytes, &shortfall));
  return slot;
}

TEST(LedgerTest, ReclaimsOnlyProcessesThatAreGone) {
  const std::string path = UniqueLedgerPath("reclaim");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(1000);
  ProcessIdentity self;
  ReadSelfIdentity(&self);

  pid_t child = fork();
  if (child == 0) _exit(0);
  int status;
  waitpid(child, &status, 0);
  ProcessIdentity gone = self;
  gone.pid = static_cast<uint32_t>(child);
  ProcessIdentity reused = self;  // our pid, but another process's start time
  reused.start_time = self.start_time + 100;
  ProcessIdentity elsewhere = gone;  // a pid of another pid namespace
  elsewhere.pid_ns = self.pid_ns + 1;

  ASSERT_TRUE(ledger.Lock());
  int live = ClaimWithBytes(ledger, self, 100);
  int dead = ClaimWithBytes(ledger, gone, 200);
  int recycled = ClaimWithBytes(ledger, reused, 300);
  int foreign = ClaimWithBytes(ledger, elsewhere, 50);
  EXPECT_EQ(ledger.header().pinned.load(), 650u);
  EXPECT_EQ(ledger.ReclaimDeadLocked(), 2u);
  EXPECT_EQ(ledger.slot(live).pid.load(), self.pid);
  EXPECT_EQ(ledger.slot(dead).pid.load(), 0u);
  EXPECT_EQ(ledger.slot(recycled).pid.load(), 0u);
  EXPECT_EQ(ledger.slot(foreign).pid.load(), gone.pid);
  EXPECT_EQ(ledger.header().pinned.load(), 150u);
  EXPECT_EQ(ledger.header().pinned_by_owner[1].load(), 150u);
  EXPECT_EQ(ledger.header().reclaimed_processes.load(), 2u);
  EXPECT_EQ(ledger.header().reclaimed_bytes.load(), 500u);
  EXPECT_EQ(ledger.LiveSlotsLocked(), 2u);
  ledger.Unlock();
  ledger.Close();
}

TEST(LedgerTest, ChargeNeverPassesTheNodeBudget) {
  const std::string path = UniqueLedgerPath("cap");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(1000);
  ProcessIdentity self;
  ReadSelfIdentity(&self);
  ASSERT_TRUE(ledger.Lock());
  int slot = ledger.ClaimSlotLocked(self, 0, 0);
  uint64_t shortfall = 0;
  EXPECT_TRUE(ledger.ChargeLocked(slot, Owner::kProgramAlloc, 900, &shortfall));
  EXPECT_FALSE(ledger.ChargeLocked(slot, Owner::kProgramAlloc, 101, &shortfall));
  EXPECT_EQ(shortfall, 1u);
  EXPECT_FALSE(ledger.ChargeLocked(slot, Owner::kProgramAlloc, UINT64_MAX, &shortfall));
  EXPECT_TRUE(ledger.ChargeLocked(slot, Owner::kPinshimPool, 100, &shortfall));
  ledger.ReleaseLocked(slot, Owner::kPinshimPool, 500);  // more than it holds
  EXPECT_EQ(ledger.header().pinned.load(), 900u);
  EXPECT_EQ(ledger.slot(slot).bytes[2].load(), 0u);
  ledger.header().node_budget.store(500);  // lowered under what is pinned
  EXPECT_FALSE(ledger.ChargeLocked(slot, Owner::kProgramAlloc, 1, &shortfall));
  EXPECT_EQ(shortfall, 401u);
  ledger.FreeSlotLocked(slot);
  EXPECT_EQ(ledger.header().pinned.load(), 0u);
  ledger.Unlock();
  ledger.Close();
}

void DieNow(CrashPoint) { raise(SIGKILL); }

// A process killed inside the critical section, between updating its slot
// and the totals: the next locker is told, rebuilds the totals from the
// slots and reclaims the dead process; survivors keep what they hold.
class DeathInLockTest : public ::testing::TestWithParam<CrashPoint> {};

TEST_P(DeathInLockTest, NextLockerRepairsTheLedger) {
  const std::string path = UniqueLedgerPath("death");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(10000);
  ProcessIdentity self;
  ReadSelfIdentity(&self);
  ASSERT_TRUE(ledger.Lock());
  int mine = ClaimWithBytes(ledger, self, 1000);
  ledger.Unlock();

  const CrashPoint point = GetParam();
  pid_t child = fork();
  if (child == 0) {
    ProcessIdentity id;
    ReadSelfIdentity(&id);
    if (!ledger.Lock()) _exit(1);
    int slot = ledger.ClaimSlotLocked(id, 0, 0);
    uint64_t shortfall;
    ledger.ChargeLocked(slot, Owner::kPinshimCache, 3000, &shortfall);
    ledger.Unlock();
    SetLedgerCrashHookForTesting(DieNow);
    if (!ledger.Lock()) _exit(2);
    if (point == CrashPoint::kChargeMidUpdate) {
      ledger.ChargeLocked(slot, Owner::kPinshimCache, 500, &shortfall);
    } else {
      ledger.ReleaseLocked(slot, Owner::kPinshimCache, 2000);
    }
    _exit(3);  // not reached: the hook kills us holding the lock
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(WTERMSIG(status), SIGKILL);
  // The totals are stale: the slot changed, the header did not.
  EXPECT_EQ(ledger.header().pinned.load(), 4000u);
  EXPECT_EQ(ledger.header().recoveries.load(), 0u);

  ASSERT_TRUE(ledger.Lock());
  EXPECT_EQ(ledger.header().recoveries.load(), 1u);
  EXPECT_EQ(ledger.header().pinned.load(), 1000u);
  EXPECT_EQ(ledger.header().pinned_by_owner[3].load(), 0u);
  EXPECT_EQ(ledger.header().reclaimed_processes.load(), 1u);
  EXPECT_EQ(ledger.LiveSlotsLocked(), 1u);
  EXPECT_EQ(ledger.slot(mine).bytes[1].load(), 1000u);
  uint64_t shortfall;
  EXPECT_TRUE(ledger.ChargeLocked(mine, Owner::kProgramAlloc, 9000, &shortfall));
  ledger.Unlock();
  // The lock is healthy again.
  ASSERT_TRUE(ledger.Lock());
  EXPECT_EQ(ledger.header().recoveries.load(), 1u);
  ledger.Unlock();
  ledger.Close();
}

// A process killed in the middle of taking another's idle reservation: the
// bytes left the other slot's available word, its reservation still holds
// them. The next locker finishes the take from the journal in the header.
TEST(LedgerTest, TakeInterruptedByDeathIsFinishedByTheNextLocker) {
  const std::string path = UniqueLedgerPath("take-death");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(10000);
  ProcessIdentity self;
  ReadSelfIdentity(&self);
  ASSERT_TRUE(ledger.Lock());
  const int mine = ClaimWithBytes(ledger, self, 1000);
  ledger.ReserveLocked(mine, 5000);  // 5000 idle
  EXPECT_EQ(ledger.header().reserved.load(), 6000u);
  ledger.Unlock();

  pid_t child = fork();
  if (child == 0) {
    ProcessIdentity id;
    ReadSelfIdentity(&id);
    if (!ledger.Lock()) _exit(1);
    const int slot = ledger.ClaimSlotLocked(id, 0, 0);
    ledger.Unlock();
    SetLedgerCrashHookForTesting(DieNow);
    if (!ledger.Lock()) _exit(2);
    ledger.TakeUnusedLocked(slot, 2000);
    _exit(3);  // not reached
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  const LedgerSlot& s = ledger.slot(mine);
  EXPECT_EQ(AvailableBytes(s.available.load()), 3000u) << "taken";
  EXPECT_EQ(s.reserved.load(), 6000u) << "but still reserved";
  EXPECT_NE(ledger.header().take_slot.load(), 0u);

  ASSERT_TRUE(ledger.Lock());
  EXPECT_EQ(ledger.header().recoveries.load(), 1u);
  EXPECT_EQ(ledger.header().take_slot.load(), 0u);
  EXPECT_EQ(s.reserved.load(), 4000u);
  EXPECT_EQ(AvailableBytes(s.available.load()), 3000u);
  EXPECT_EQ(ledger.header().reserved.load(), 4000u);
  EXPECT_EQ(ledger.header().pinned.load(), 1000u);
  // Repeating the repair (a second death during it) changes nothing.
  ledger.RebuildTotalsLocked();
  EXPECT_EQ(s.reserved.load(), 4000u);
  ledger.Unlock();
  ledger.Close();
}

// A take journaled but not yet made (the other slot's stamp has not moved)
// leaves that slot's reservation as it was.
TEST(LedgerTest, TakeJournaledButNotMadeChangesNothing) {
  const std::string path = UniqueLedgerPath("take-journal");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(10000);
  ProcessIdentity self;
  ReadSelfIdentity(&self);
  ASSERT_TRUE(ledger.Lock());
  const int mine = ClaimWithBytes(ledger, self, 1000);
  ledger.ReserveLocked(mine, 5000);
  ledger.Unlock();
  pid_t child = fork();
  if (child == 0) {
    if (!ledger.Lock()) _exit(1);
    LedgerHeader& h = ledger.header();
    const uint64_t word = ledger.slot(mine).available.load();
    h.take_stamp.store(static_cast<uint32_t>((word & kAvailableStampMask) >> kAvailableStampShift));
    h.take_bytes.store(2000);
    h.take_reserved.store(ledger.slot(mine).reserved.load());
    h.take_slot.store(mine + 1);
    raise(SIGKILL);  // holding the lock, before the take
    _exit(3);
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_TRUE(ledger.Lock());
  EXPECT_EQ(ledger.header().take_slot.load(), 0u);
  EXPECT_EQ(ledger.slot(mine).reserved.load(), 6000u);
  EXPECT_EQ(AvailableBytes(ledger.slot(mine).available.load()), 5000u);
  EXPECT_EQ(ledger.header().reserved.load(), 6000u);
  ledger.Unlock();
  ledger.Close();
}

TEST(LedgerTest, TakesLeaveClosedSlotsAndTheExceptedOneAlone) {
  const std::string path = UniqueLedgerPath("take-which");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(100000);
  ProcessIdentity self;
  ReadSelfIdentity(&self);
  ASSERT_TRUE(ledger.Lock());
  const int a = ledger.ClaimSlotLocked(self, 0, 0);
  const int b = ledger.ClaimSlotLocked(self, 0, 0);
  const int c = ledger.ClaimSlotLocked(self, 0, 0);
  ledger.ReserveLocked(a, 1000);
  ledger.ReserveLocked(b, 2000);
  ledger.ReserveLocked(c, 4000);
  ledger.LeaveSlotLocked(c);
  EXPECT_EQ(ledger.header().reserved.load(), 3000u);
  EXPECT_EQ(ledger.TakeUnusedLocked(a, 100000), 2000u);
  EXPECT_EQ(ledger.slot(a).reserved.load(), 1000u);
  EXPECT_EQ(ledger.slot(b).reserved.load(), 0u);
  EXPECT_EQ(ledger.header().reserved.load(), 1000u);
  EXPECT_EQ(ledger.TakeUnusedLocked(kLedgerSlotCount, 600), 600u);
  EXPECT_EQ(AvailableBytes(ledger.slot(a).available.load()), 400u);
  EXPECT_EQ(ledger.header().takes.load(), 2u);
  EXPECT_EQ(ledger.header().taken_bytes.load(), 2600u);
  // c's process (this one) still runs: its slot is not handed out again.
  const int d = ledger.ClaimSlotLocked(self, 0, 0);
  EXPECT_NE(d, c);
  ledger.Unlock();
  ledger.Close();
}

char ProcessState(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  char buf[1024] = {};
  int fd = open(path, O_RDONLY);
  if (fd < 0) return '?';
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  ProcStat st;
  return n > 0 && ParseProcStat(buf, &st) ? st.state : '?';
}

// An unlock wakes a single waiter and trusts it to tell the lock that others
// still sleep (glibc's FUTEX_WAITERS bit). A waiter killed between its wake-up
// and that point leaves the others asleep with nobody to wake them; waits in
// bounded rounds must still get them the lock. The test makes that state
// directly: a waiter sleeps, the bit is cleared, the holder unlocks.
TEST(LedgerTest, WaiterWhoseWakeUpWasLostStillGetsTheLock) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "under ThreadSanitizer the ledger waits for its lock by polling trylock "
                  "(ledger.cc): there is no futex wait whose wake-up could be lost";
#endif
  const std::string path = UniqueLedgerPath("lost-wake");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ASSERT_TRUE(ledger.Lock());
  pid_t waiter = fork();
  if (waiter == 0) {
    if (!ledger.Lock()) _exit(1);
    ledger.Unlock();
    _exit(0);
  }
  constexpr int kWaitersBit = 1 << 31;  // FUTEX_WAITERS
  int* word = &ledger.header().mutex.__data.__lock;
  for (int i = 0; i < 5000; ++i) {
    if ((__atomic_load_n(word, __ATOMIC_SEQ_CST) & kWaitersBit) != 0 &&
        ProcessState(waiter) == 'S') {
      break;
    }
    usleep(1000);
  }
  ASSERT_NE(__atomic_load_n(word, __ATOMIC_SEQ_CST) & kWaitersBit, 0);
  ASSERT_EQ(ProcessState(waiter), 'S');
  __atomic_fetch_and(word, ~kWaitersBit, __ATOMIC_SEQ_CST);
  ledger.Unlock();  // the bit is gone, so this wakes nobody
  int status;
  pid_t done = 0;
  for (int i = 0; i < 3000 && done == 0; ++i) {
    done = waitpid(waiter, &status, WNOHANG);
    if (done == 0) usleep(10 * 1000);
  }
  if (done == 0) kill(waiter, SIGKILL);
  ASSERT_EQ(done, waiter) << "the waiter never got the lock";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ledger.Close();
}

// --- Hostile or stalled neighbours: bounded waits, recovered locks.

// A process that holds the lock and is stopped: the wait is bounded, says
// so once, and the next wait is short until the lock is taken again.
TEST(LedgerTest, StoppedHolderCostsABoundedWaitAndOneWarning) {
  const std::string path = UniqueLedgerPath("stopped");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t holder = fork();
  if (holder == 0) {
    if (!ledger.Lock()) _exit(1);
    (void)!write(ready[1], "x", 1);
    raise(SIGSTOP);
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_FALSE(ledger.Lock()) << "the wait must end";
  char line[640];
  ASSERT_TRUE(ledger.TakeLockWarning(line, sizeof(line)));
  EXPECT_NE(std::string(line).find("held for over 2 s"), std::string::npos) << line;
  EXPECT_NE(std::string(line).find(std::to_string(holder)), std::string::npos) << line;
  EXPECT_FALSE(ledger.Lock());
  EXPECT_FALSE(ledger.TakeLockWarning(line, sizeof(line))) << "one warning per stall";
  kill(holder, SIGKILL);  // dies holding it: the kernel marks the owner dead
  int status;
  waitpid(holder, &status, 0);
  ASSERT_TRUE(ledger.Lock());
  EXPECT_EQ(ledger.header().recoveries.load(), 1u);
  ledger.Unlock();
  ledger.Close();
  close(ready[0]);
  close(ready[1]);
}

// A thread id that does not exist, written into the lock word by whoever can
// write the file (or left by a holder the kernel could not clean up after):
// declared dead after a short wait, and the ledger repaired as for a death.
TEST(LedgerTest, LockWordNamingAVanishedThreadIsRecovered) {
  const std::string path = UniqueLedgerPath("vanished");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  int status;
  waitpid(gone, &status, 0);
  int* word = &ledger.header().mutex.__data.__lock;
  __atomic_store_n(word, static_cast<int>(gone), __ATOMIC_SEQ_CST);
  ASSERT_TRUE(ledger.Lock());
  EXPECT_EQ(ledger.header().recoveries.load(), 1u);
  ledger.Unlock();
  ASSERT_TRUE(ledger.Lock());  // and it works as before
  ledger.Unlock();
  ledger.Close();
}

// With a slot of another pid namespace in the ledger, a thread id that does
// not exist here may be a live holder there: the lock is not broken, only
// waited for (bounded).
TEST(LedgerTest, VanishedThreadIsNotJudgedWhenAnotherPidNamespaceTakesPart) {
  const std::string path = UniqueLedgerPath("vanished-ns");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ProcessIdentity elsewhere;
  ReadSelfIdentity(&elsewhere);
  elsewhere.pid_ns += 1;
  ASSERT_TRUE(ledger.Lock());
  ASSERT_GE(ledger.ClaimSlotLocked(elsewhere, 0, 0), 0);
  ledger.Unlock();
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  int status;
  waitpid(gone, &status, 0);
  int* word = &ledger.header().mutex.__data.__lock;
  __atomic_store_n(word, static_cast<int>(gone), __ATOMIC_SEQ_CST);
  EXPECT_FALSE(ledger.Lock());
  EXPECT_EQ(ledger.header().recoveries.load(), 0u);
  char line[640];
  ASSERT_TRUE(ledger.TakeLockWarning(line, sizeof(line)));
  EXPECT_NE(std::string(line).find("another pid namespace"), std::string::npos) << line;
  ledger.Close();
}

// A slot of another pid namespace cannot be judged by its pid: it is
// reclaimed once its heartbeat is kForeignSlotStaleS old, as a slot its
// process left (closed to charges), and not before.
TEST(LedgerTest, SlotOfAnotherPidNamespaceIsReclaimedWhenItsHeartbeatStops) {
  const std::string path = UniqueLedgerPath("heartbeat");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(1000);
  ProcessIdentity elsewhere;
  ReadSelfIdentity(&elsewhere);
  elsewhere.pid_ns += 1;
  ASSERT_TRUE(ledger.Lock());
  const int fresh = ClaimWithBytes(ledger, elsewhere, 100);
  const int stale = ClaimWithBytes(ledger, elsewhere, 200);
  ledger.Heartbeat(fresh);
  ledger.slot(stale).heartbeat_s.fetch_sub(kForeignSlotStaleS + 1);
  EXPECT_EQ(ledger.ReclaimDeadLocked(), 1u);
  EXPECT_NE(ledger.slot(fresh).pid.load(), 0u);
  EXPECT_EQ(ledger.slot(stale).pid.load(), 0u);
  EXPECT_NE(ledger.slot(stale).available.load() & kAvailableClosed, 0u);
  EXPECT_EQ(ledger.header().pinned.load(), 100u);
  // A slot claimed by a pinshim that keeps no heartbeat (its tag is not the
  // claimer's) is never judged by one.
  ledger.slot(fresh).heartbeat_tag[0] ^= 1;
  ledger.slot(fresh).heartbeat_s.fetch_sub(kForeignSlotStaleS + 1);
  EXPECT_EQ(ledger.ReclaimDeadLocked(), 0u);
  ledger.Unlock();
  ledger.Close();
}

TEST(LedgerTest, RefusesALedgerOthersMayWrite) {
  const std::string path = UniqueLedgerPath("unsafe");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.Close();
  char msg[512];
  ASSERT_EQ(chmod(path.c_str(), 0620), 0);
  EXPECT_EQ(ledger.Open(Options(path), msg, sizeof(msg)), LedgerOpen::kUnsafe);
  EXPECT_NE(std::string(msg).find("mode 0620"), std::string::npos) << msg;
  LedgerOpenOptions shared = Options(path);
  shared.shared = true;
  EXPECT_EQ(ledger.Open(shared, msg, sizeof(msg)), LedgerOpen::kOk) << "its group may, shared";
  ledger.Close();
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  EXPECT_EQ(ledger.Open(shared, msg, sizeof(msg)), LedgerOpen::kUnsafe);
  EXPECT_NE(std::string(msg).find("every user"), std::string::npos) << msg;
  EXPECT_FALSE(ledger.is_open());
}

TEST(LedgerTest, FifoAtTheNameIsRefusedWithoutBlocking) {
  const std::string path = UniqueLedgerPath("fifo");
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  Ledger ledger;
  char msg[512];
  EXPECT_EQ(ledger.Open(Options(path, false), msg, sizeof(msg)), LedgerOpen::kBadLayout);
  EXPECT_NE(std::string(msg).find("not a regular file"), std::string::npos) << msg;
  ASSERT_EQ(chmod(path.c_str(), 0400), 0);  // the read-only open must not block either
  EXPECT_NE(ledger.Open(Options(path, false), msg, sizeof(msg)), LedgerOpen::kOk);
}

TEST(LedgerTest, DamageIsFoundAndNamed) {
  const std::string path = UniqueLedgerPath("damage");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ledger.header().node_budget.store(1000);
  ProcessIdentity self;
  ReadSelfIdentity(&self);
  ASSERT_TRUE(ledger.Lock());
  const int slot = ClaimWithBytes(ledger, self, 100);
  char msg[256];
  EXPECT_EQ(ledger.CheckDamage(true, msg, sizeof(msg)), 0u);
  ledger.header().reserved.store(5);
  EXPECT_EQ(ledger.CheckDamage(true, msg, sizeof(msg)), 1u);
  EXPECT_NE(std::string(msg).find("not the slots' sum"), std::string::npos) << msg;
  EXPECT_EQ(ledger.CheckDamage(false, msg, sizeof(msg)), 0u) << "racy without the lock";
  ledger.slot(slot).bytes[0].store(~uint64_t{0});
  ledger.slot(slot).pid.store(1u << 30);
  EXPECT_EQ(ledger.CheckDamage(false, msg, sizeof(msg)), 2u);
  ledger.Unlock();
  ledger.Close();
}

INSTANTIATE_TEST_SUITE_P(BothUpdates, DeathInLockTest,
                         ::testing::Values(CrashPoint::kChargeMidUpdate,
                                           CrashPoint::kReleaseMidUpdate));

}  // namespace
}  // namespace budget
}  // namespace pinshim
