#include "shim/budget/budget.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "shim/budget/test_util.h"

namespace pinshim {
namespace budget {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// A Budget that is closed when the test ends, so its ledger slot and mapping
// do not outlive the test.
class TestBudget : public Budget {
 public:
  ~TestBudget() { CloseForTesting(); }
};

BudgetOptions ProcessOnly(uint64_t bytes, Policy policy = Policy::kDeny) {
  BudgetOptions o;
  o.process_bytes = bytes;
  o.policy = policy;
  return o;
}

BudgetOptions WithNode(const std::string& path, uint64_t process_bytes, uint64_t node_bytes,
                       Policy policy = Policy::kDeny) {
  BudgetOptions o;
  o.process_bytes = process_bytes;
  o.node_bytes = node_bytes;
  o.policy = policy;
  o.ledger_path = path.c_str();
  return o;
}

TEST(ProcessBudgetTest, GrantsUntilFullThenDenies) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(10 * kMiB)).ok());
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 6 * kMiB), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramRegister, 4 * kMiB), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kPinshimPool, 1), Decision::kDenied);
  BudgetSnapshot s = b.Snapshot();
  EXPECT_EQ(s.pinned, 10 * kMiB);
  EXPECT_EQ(s.pinned_by_owner[0], 6 * kMiB);
  EXPECT_EQ(s.pinned_by_owner[1], 4 * kMiB);
  EXPECT_EQ(s.grants, 2u);
  EXPECT_EQ(s.denials, 1u);
  b.Release(Owner::kProgramAlloc, 6 * kMiB);
  EXPECT_EQ(b.Charge(Owner::kPinshimPool, 6 * kMiB), Decision::kGranted);
  EXPECT_EQ(b.Snapshot().pinned, 10 * kMiB);
}

TEST(ProcessBudgetTest, HugeRequestDoesNotWrapAround) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(10 * kMiB)).ok());
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, kMiB), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, UINT64_MAX), Decision::kDenied);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, UINT64_MAX - kMiB + 1), Decision::kDenied);
  EXPECT_EQ(b.Snapshot().pinned, kMiB);
}

TEST(ProcessBudgetTest, ReleaseNeverGoesBelowZero) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(10 * kMiB)).ok());
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, kMiB), Decision::kGranted);
  b.Release(Owner::kProgramRegister, kMiB);  // never charged to this owner
  EXPECT_EQ(b.Snapshot().pinned, kMiB);
  b.Release(Owner::kProgramAlloc, 5 * kMiB);
  BudgetSnapshot s = b.Snapshot();
  EXPECT_EQ(s.pinned, 0u);
  EXPECT_EQ(s.pinned_by_owner[0], 0u);
}

TEST(ProcessBudgetTest, GrantsEverythingBeforeInitAndForZeroBytes) {
  TestBudget b;
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, UINT64_MAX), Decision::kGranted);
  EXPECT_EQ(b.Snapshot().pinned, 0u);
  ASSERT_TRUE(b.Init(ProcessOnly(1)).ok());
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 0), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 2), Decision::kDenied);
}

TEST(ProcessBudgetTest, NoProcessBudgetStillCounts) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(0)).ok());
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, UINT64_MAX / 2), Decision::kGranted);
  EXPECT_EQ(b.Snapshot().pinned, UINT64_MAX / 2);
}

TEST(ProcessBudgetTest, RejectsBadOptionsAndSecondInit) {
  TestBudget b;
  BudgetOptions o = ProcessOnly(1, Policy::kEvict);
  o.after_evict = Policy::kEvict;
  BudgetStatus st = b.Init(o);
  EXPECT_EQ(st.code, BudgetStatus::kInvalid);
  EXPECT_NE(std::string(st.message).find("after eviction"), std::string::npos);
  ASSERT_TRUE(b.Init(ProcessOnly(1)).ok());
  st = b.Init(ProcessOnly(2));
  EXPECT_EQ(st.code, BudgetStatus::kInvalid);
  EXPECT_STREQ(st.message, "budget already initialised");
}

// 16 threads charge and release random sizes; an observer thread checks the
// total continuously and each thread's holdings add up at the end.
TEST(ProcessBudgetTest, SixteenThreadsNeverExceed) {
  constexpr uint64_t kBudget = 64 * kMiB;
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(kBudget)).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> over{0};
  std::atomic<uint64_t> observations{0};
  std::thread observer([&] {
    while (!stop.load()) {
      if (b.Snapshot().pinned > kBudget) over.fetch_add(1);
      observations.fetch_add(1);
    }
  });
  std::vector<std::thread> threads;
  std::vector<uint64_t> held(16 * kOwnerCount, 0);
  std::atomic<uint64_t> granted{0};
  std::atomic<uint64_t> denied{0};
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<std::pair<int, uint64_t>> mine;
      for (int i = 0; i < 20000; ++i) {
        if (!mine.empty() && (rng() % 3 == 0)) {
          auto [o, bytes] = mine.back();
          mine.pop_back();
          b.Release(static_cast<Owner>(o), bytes);
          continue;
        }
        int o = static_cast<int>(rng() % kOwnerCount);
        uint64_t bytes = 1 + rng() % (4 * kMiB);
        if (b.Charge(static_cast<Owner>(o), bytes) == Decision::kGranted) {
          mine.emplace_back(o, bytes);
          granted.fetch_add(1);
        } else {
          denied.fetch_add(1);
        }
      }
      for (auto [o, bytes] : mine) held[t * kOwnerCount + o] += bytes;
    });
  }
  for (auto& th : threads) th.join();
  stop.store(true);
  observer.join();
  EXPECT_EQ(over.load(), 0u);
  EXPECT_GT(observations.load(), 0u);
  EXPECT_GT(denied.load(), 0u) << "the budget was never reached; the test proves nothing";
  BudgetSnapshot s = b.Snapshot();
  uint64_t total = 0;
  for (int o = 0; o < kOwnerCount; ++o) {
    uint64_t owner_total = 0;
    for (int t = 0; t < 16; ++t) owner_total += held[t * kOwnerCount + o];
    EXPECT_EQ(s.pinned_by_owner[o], owner_total) << OwnerName(static_cast<Owner>(o));
    total += owner_total;
  }
  EXPECT_EQ(s.pinned, total);
  EXPECT_LE(s.pinned, kBudget);
  EXPECT_EQ(s.grants, granted.load());
  EXPECT_EQ(s.denials, denied.load());
}

TEST(ProcessBudgetTest, OptionsComeFromTheConfiguration) {
  Config config;
  SetConfigDefaults(64 * kMiB, &config);
  BudgetOptions o = BudgetOptionsFromConfig(config);
  EXPECT_EQ(o.process_bytes, 0u);
  EXPECT_EQ(o.node_bytes, 0u);
  EXPECT_EQ(o.policy, Policy::kDeny);
  EXPECT_STREQ(o.metrics_path, "");
  const char* env[] = {"PINSHIM_BUDGET=2M",
                       "PINSHIM_NODE_BUDGET=8M",
                       "PINSHIM_POLICY=evict",
                       "PINSHIM_LEDGER_SHARED=1",
                       "PINSHIM_METRICS_FILE=/tmp/p.prom",
                       "PINSHIM_CONFIG=",
                       nullptr};
  ConfigInput input = {};
  input.envp = const_cast<char* const*>(env);
  input.physical_bytes = 64 * kMiB;
  ConfigErrors errors;
  ASSERT_TRUE(ParseConfig(input, &config, &errors)) << errors.messages[0];
  o = BudgetOptionsFromConfig(config);
  EXPECT_EQ(o.process_bytes, 2 * kMiB);
  EXPECT_EQ(o.node_bytes, 8 * kMiB);
  EXPECT_EQ(o.policy, Policy::kEvict);
  EXPECT_EQ(o.after_evict, Policy::kDeny);
  EXPECT_TRUE(o.shared_ledger);
  EXPECT_STREQ(o.metrics_path, "/tmp/p.prom");
}

// --- Policies.

struct FakePool {
  Budget* budget = nullptr;
  uint64_t idle = 0;  // bytes pinned for the cache that may be evicted
  uint64_t calls = 0;
  uint64_t last_wanted = 0;
};
FakePool g_pool;

uint64_t FakeEvictor(uint64_t wanted) {
  ++g_pool.calls;
  g_pool.last_wanted = wanted;
  uint64_t freed = g_pool.idle;
  g_pool.idle = 0;
  g_pool.budget->Release(Owner::kPinshimCache, freed);
  return freed;
}

std::vector<DecisionRecord> g_records;
void RecordDecision(const DecisionRecord* record) { g_records.push_back(*record); }

TEST(PolicyTest, DenyAndFallback) {
  TestBudget deny;
  ASSERT_TRUE(deny.Init(ProcessOnly(kMiB, Policy::kDeny)).ok());
  EXPECT_EQ(deny.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kDenied);
  TestBudget fallback;
  ASSERT_TRUE(fallback.Init(ProcessOnly(kMiB, Policy::kFallback)).ok());
  EXPECT_EQ(fallback.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kFallback);
  BudgetSnapshot s = fallback.Snapshot();
  EXPECT_EQ(s.fallbacks, 1u);
  EXPECT_EQ(s.denials, 0u);
  EXPECT_EQ(s.pinned, 0u);
}

// The decision the pinned-memory hooks make (and the test harness with
// them): a pinning that fails is not counted, a refused one never runs.
// A refusal of the program's pinning is one line on stderr when it happens;
// further ones within the interval are counted into the next line, and
// pinshim's own refused pinning says nothing.
TEST(PolicyTest, RefusalsOfTheProgramArePrintedRateLimited) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(4 * kMiB)).ok());
  b.SetRefusalLineIntervalForTesting(UINT64_MAX / 2);  // never elapses here
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kGranted);
  testing::internal::CaptureStderr();
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kDenied);
  EXPECT_EQ(b.Charge(Owner::kProgramRegister, 2 * kMiB), Decision::kDenied);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kDenied);
  EXPECT_EQ(b.Charge(Owner::kPinshimPool, 2 * kMiB), Decision::kDenied);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "pinshim: enforce: denied pinning 2.0 MiB, over the process budget of 4.0 MiB "
            "(3.0 MiB pinned): the call fails as out of memory\n");
  b.SetRefusalLineIntervalForTesting(0);
  testing::internal::CaptureStderr();
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1536 * 1024), Decision::kDenied);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "pinshim: enforce: denied pinning 1.5 MiB, over the process budget of 4.0 MiB "
            "(3.0 MiB pinned): the call fails as out of memory; 2 more refused since the last "
            "such line\n");
}

TEST(PolicyTest, FallbackRefusalSaysPageableMemoryIsHandedOut) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(kMiB, Policy::kFallback)).ok());
  testing::internal::CaptureStderr();
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kFallback);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "pinshim: enforce: refused pinning 2.0 MiB, over the process budget of 1.0 MiB "
            "(0 B pinned): pageable memory is handed out instead\n");
}

TEST(ChargeAndPinTest, PinsOnlyWhenGrantedAndUncountsAFailedPinning) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(4 * kMiB, Policy::kDeny)).ok());
  int calls = 0;
  EXPECT_EQ(ChargeAndPin(&b, Owner::kProgramAlloc, kMiB, [&] { return ++calls, true; }),
            Decision::kGranted);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(b.Snapshot().pinned, kMiB);
  // Granted, but the driver failed: the charge is released.
  EXPECT_EQ(ChargeAndPin(&b, Owner::kProgramRegister, 2 * kMiB, [&] { return ++calls, false; }),
            Decision::kGranted);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(b.Snapshot().pinned, kMiB);
  EXPECT_EQ(b.Snapshot().pinned_by_owner[static_cast<int>(Owner::kProgramRegister)], 0u);
  // Over budget: denied, and the pinning never runs.
  EXPECT_EQ(ChargeAndPin(&b, Owner::kProgramAlloc, 4 * kMiB, [&] { return ++calls, true; }),
            Decision::kDenied);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(b.Snapshot().pinned, kMiB);
}

TEST(ChargeAndPinTest, FallbackNeverPinsAndNoBudgetAlwaysPins) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(kMiB, Policy::kFallback)).ok());
  int calls = 0;
  EXPECT_EQ(ChargeAndPin(&b, Owner::kProgramAlloc, 2 * kMiB, [&] { return ++calls, true; }),
            Decision::kFallback);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(b.Snapshot().pinned, 0u);
  EXPECT_EQ(ChargeAndPin(nullptr, Owner::kProgramAlloc, 2 * kMiB, [&] { return ++calls, false; }),
            Decision::kGranted);
  EXPECT_EQ(calls, 1);
}

TEST(PolicyTest, EvictFreesRoomThenGrants) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(10 * kMiB, Policy::kEvict)).ok());
  g_pool = FakePool{&b, 0, 0, 0};
  b.SetEvictor(FakeEvictor);
  ASSERT_EQ(b.Charge(Owner::kPinshimCache, 8 * kMiB), Decision::kGranted);
  g_pool.idle = 8 * kMiB;
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 5 * kMiB), Decision::kGranted);
  EXPECT_EQ(g_pool.calls, 1u);
  EXPECT_EQ(g_pool.last_wanted, 3 * kMiB);  // the shortfall, not the request
  BudgetSnapshot s = b.Snapshot();
  EXPECT_EQ(s.pinned, 5 * kMiB);
  EXPECT_EQ(s.pinned_by_owner[static_cast<int>(Owner::kPinshimCache)], 0u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.evicted_bytes, 8 * kMiB);
  EXPECT_EQ(s.grants, 2u);
}

TEST(PolicyTest, EvictThatFreesTooLittleFallsToSecondaryPolicy) {
  for (Policy after : {Policy::kDeny, Policy::kFallback}) {
    TestBudget b;
    BudgetOptions o = ProcessOnly(10 * kMiB, Policy::kEvict);
    o.after_evict = after;
    ASSERT_TRUE(b.Init(o).ok());
    g_pool = FakePool{&b, 0, 0, 0};
    b.SetEvictor(FakeEvictor);
    ASSERT_EQ(b.Charge(Owner::kPinshimCache, 8 * kMiB), Decision::kGranted);
    g_pool.idle = kMiB;  // frees 1 MiB, 2 MiB short of the 11 MiB needed
    Decision want = after == Policy::kDeny ? Decision::kDenied : Decision::kFallback;
    EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 4 * kMiB), want);
    EXPECT_EQ(g_pool.calls, 1u) << "retried once, not looped";
    BudgetSnapshot s = b.Snapshot();
    EXPECT_EQ(s.pinned, 7 * kMiB);
    EXPECT_EQ(s.evictions, 1u);
    EXPECT_EQ(after == Policy::kDeny ? s.denials : s.fallbacks, 1u);
  }
}

TEST(PolicyTest, EvictWithoutEvictorUsesSecondaryPolicy) {
  TestBudget b;
  BudgetOptions o = ProcessOnly(kMiB, Policy::kEvict);
  o.after_evict = Policy::kFallback;
  ASSERT_TRUE(b.Init(o).ok());
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kFallback);
  EXPECT_EQ(b.Snapshot().evictions, 0u);
}

uint64_t ChargingEvictor(uint64_t) {
  // An evictor that itself needs pinned memory must not recurse into eviction.
  ++g_pool.calls;
  EXPECT_EQ(g_pool.budget->Charge(Owner::kPinshimPool, 100 * kMiB), Decision::kDenied);
  return 0;
}

TEST(PolicyTest, NoEvictionFromInsideTheEvictor) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(kMiB, Policy::kEvict)).ok());
  g_pool = FakePool{&b, 0, 0, 0};
  b.SetEvictor(ChargingEvictor);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kDenied);
  EXPECT_EQ(g_pool.calls, 1u);
}

TEST(PolicyTest, RecorderSeesEveryDecision) {
  TestBudget b;
  ASSERT_TRUE(b.Init(ProcessOnly(10 * kMiB, Policy::kEvict)).ok());
  g_pool = FakePool{&b, 0, 0, 0};
  b.SetEvictor(FakeEvictor);
  g_records.clear();
  b.SetRecorder(RecordDecision);
  ASSERT_EQ(b.Charge(Owner::kPinshimCache, 8 * kMiB), Decision::kGranted);
  g_pool.idle = 8 * kMiB;
  ASSERT_EQ(b.Charge(Owner::kProgramRegister, 5 * kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 6 * kMiB), Decision::kDenied);
  b.SetRecorder(nullptr);
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kGranted);
  ASSERT_EQ(g_records.size(), 3u);
  EXPECT_EQ(g_records[0].decision, Decision::kGranted);
  EXPECT_EQ(g_records[0].limiter, Limiter::kNone);
  EXPECT_FALSE(g_records[0].evictor_called);
  EXPECT_EQ(g_records[1].owner, Owner::kProgramRegister);
  EXPECT_EQ(g_records[1].decision, Decision::kGranted);
  EXPECT_EQ(g_records[1].limiter, Limiter::kProcess);
  EXPECT_TRUE(g_records[1].evictor_called);
  EXPECT_EQ(g_records[1].evicted_bytes, 8 * kMiB);
  EXPECT_EQ(g_records[1].process_pinned, 5 * kMiB);
  EXPECT_EQ(g_records[1].process_budget, 10 * kMiB);
  EXPECT_EQ(g_records[2].decision, Decision::kDenied);
  EXPECT_EQ(g_records[2].bytes, 6 * kMiB);
  EXPECT_EQ(g_records[2].node_budget, 0u);
}

// --- The node budget through Budget.

TEST(NodeBudgetTest, ProcessesShareTheNodeBudget) {
  const std::string path = UniqueLedgerPath("share");
  TestBudget a;
  TestBudget b;
  BudgetStatus st = a.Init(WithNode(path, 0, 10 * kMiB));
  ASSERT_TRUE(st.ok()) << st.message;
  ASSERT_TRUE(b.Init(WithNode(path, 0, 10 * kMiB)).ok());
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 6 * kMiB), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 6 * kMiB), Decision::kDenied);
  EXPECT_EQ(b.Snapshot().pinned, 0u) << "the process reservation is given back";
  EXPECT_EQ(b.Charge(Owner::kPinshimPool, 4 * kMiB), Decision::kGranted);
  EXPECT_EQ(a.Snapshot().node_pinned, 10 * kMiB);
  a.Release(Owner::kProgramAlloc, 6 * kMiB);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 6 * kMiB), Decision::kGranted);
  const LedgerHeader& h = a.ledger().header();
  EXPECT_EQ(h.pinned.load(), 10 * kMiB);
  EXPECT_EQ(h.pinned_by_owner[0].load(), 6 * kMiB);
  EXPECT_EQ(h.pinned_by_owner[2].load(), 4 * kMiB);
  EXPECT_EQ(h.denials.load(), 1u);
  EXPECT_EQ(h.grants.load(), 3u);
}

TEST(NodeBudgetTest, ProcessBudgetAppliesBeforeTheNode) {
  const std::string path = UniqueLedgerPath("both");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 2 * kMiB, 10 * kMiB)).ok());
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kDenied);
  EXPECT_EQ(a.ledger().header().pinned.load(), 0u);
}

TEST(NodeBudgetTest, StrictestBudgetAmongLiveProcessesWins) {
  const std::string path = UniqueLedgerPath("strict");
  {
    TestBudget a;
    ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB)).ok());
    TestBudget b;
    BudgetStatus st = b.Init(WithNode(path, 0, 20 * kMiB));
    EXPECT_TRUE(st.ok());
    EXPECT_NE(std::string(st.message).find("smaller"), std::string::npos) << st.message;
    EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 11 * kMiB), Decision::kDenied);
    TestBudget c;
    ASSERT_TRUE(c.Init(WithNode(path, 0, 4 * kMiB)).ok());
    EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 5 * kMiB), Decision::kDenied);
    EXPECT_EQ(a.ledger().header().node_budget.load(), 4 * kMiB);
  }
  // Nobody is left: a newcomer's budget replaces the stale one.
  TestBudget d;
  ASSERT_TRUE(d.Init(WithNode(path, 0, 30 * kMiB)).ok());
  EXPECT_EQ(d.ledger().header().node_budget.load(), 30 * kMiB);
  EXPECT_EQ(d.Charge(Owner::kProgramAlloc, 25 * kMiB), Decision::kGranted);
}

TEST(NodeBudgetTest, LoweredBudgetGrantsNothingUntilUnderIt) {
  const std::string path = UniqueLedgerPath("lowered");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB)).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 8 * kMiB), Decision::kGranted);
  TestBudget b;
  ASSERT_TRUE(b.Init(WithNode(path, 0, 4 * kMiB)).ok());
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
  a.Release(Owner::kProgramAlloc, 5 * kMiB);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, kMiB), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
}

TEST(NodeBudgetTest, ShutdownFreesTheSlotAndRefusesLaterCharges) {
  const std::string path = UniqueLedgerPath("shutdown");
  TestBudget a;
  TestBudget b;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB, Policy::kFallback)).ok());
  ASSERT_TRUE(b.Init(WithNode(path, 0, 10 * kMiB)).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kGranted);
  a.Shutdown();
  const LedgerHeader& h = b.ledger().header();
  EXPECT_EQ(h.pinned.load(), 2 * kMiB);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 1), Decision::kFallback);
  a.Release(Owner::kProgramAlloc,
            3 * kMiB);  // after shutdown: process count only
  EXPECT_EQ(a.Snapshot().pinned, 0u);
  EXPECT_EQ(h.pinned.load(), 2 * kMiB);
}

TEST(NodeBudgetTest, ForkedChildStartsAtZeroWithItsOwnSlot) {
  const std::string path = UniqueLedgerPath("fork");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB)).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kGranted);
  const int parent_slot = a.Snapshot().slot;
  int status = RunInChild([&] {
    a.AfterForkChild();  // what pthread_atfork does for Budget::Process()
    BudgetSnapshot s = a.Snapshot();
    if (s.pinned != 0 || s.grants != 0) return 1;
    a.Release(Owner::kProgramAlloc, 3 * kMiB);  // an inherited pointer: ignored
    if (a.ledger().header().pinned.load() != 3 * kMiB) return 2;
    if (a.Charge(Owner::kProgramAlloc, 8 * kMiB) != Decision::kDenied) return 3;
    if (a.Charge(Owner::kProgramAlloc, 2 * kMiB) != Decision::kGranted) return 4;
    s = a.Snapshot();
    if (s.slot < 0 || s.slot == parent_slot) return 5;
    if (a.ledger().slot(s.slot).pid.load() != static_cast<uint32_t>(getpid())) return 6;
    if (a.ledger().slot(parent_slot).bytes[0].load() != 3 * kMiB) return 7;
    a.Shutdown();
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(a.ledger().header().pinned.load(), 3 * kMiB);
  EXPECT_EQ(a.Snapshot().pinned, 3 * kMiB);
}

// The process-wide instance registers the fork and exit handlers itself.
TEST(NodeBudgetTest, ProcessInstanceResetsInChildrenAndReleasesAtExit) {
  const std::string path = UniqueLedgerPath("process");
  int status = RunInChild([&] {
    Budget& b = Budget::Process();
    if (!b.Init(WithNode(path, 0, 10 * kMiB)).ok()) return 1;
    if (b.Charge(Owner::kProgramAlloc, kMiB) != Decision::kGranted) return 2;
    pid_t grandchild = fork();
    if (grandchild == 0) {
      if (b.Snapshot().pinned != 0) exit(10);
      if (b.Charge(Owner::kProgramRegister, 2 * kMiB) != Decision::kGranted) exit(11);
      if (b.ledger().header().pinned.load() != 3 * kMiB) exit(12);
      exit(0);  // runs the at-exit release
    }
    int gs = 0;
    waitpid(grandchild, &gs, 0);
    if (!WIFEXITED(gs) || WEXITSTATUS(gs) != 0) return 20 + WEXITSTATUS(gs);
    const LedgerHeader& h = b.ledger().header();
    if (h.pinned.load() != kMiB || h.reclaimed_processes.load() != 0) return 3;
    exit(0);
  });
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger));
  EXPECT_EQ(ledger.header().pinned.load(), 0u);
  EXPECT_EQ(ledger.header().reclaimed_processes.load(), 0u) << "released at exit, not reclaimed";
  ASSERT_TRUE(ledger.Lock());
  EXPECT_EQ(ledger.LiveSlotsLocked(), 0u);
  ledger.Unlock();
  ledger.Close();
}

// A node budget that cannot be kept fails closed: nothing is pinned that
// the node could not account for, until a slot is free.
TEST(NodeBudgetTest, FullLedgerRefusesPinningUntilASlotIsFree) {
  const std::string path = UniqueLedgerPath("full");
  Ledger ledger;
  ASSERT_TRUE(OpenLedger(path, &ledger, true));
  ProcessIdentity self;
  ReadSelfIdentity(&self);  // alive, so never reclaimed
  ASSERT_TRUE(ledger.Lock());
  for (uint32_t i = 0; i < kLedgerSlotCount; ++i) ASSERT_GE(ledger.ClaimSlotLocked(self, 0, 0), 0);
  EXPECT_EQ(ledger.ClaimSlotLocked(self, 0, 0), -1);
  ledger.Unlock();
  TestBudget b;
  BudgetStatus st = b.Init(WithNode(path, kMiB, 10 * kMiB));
  EXPECT_EQ(st.code, BudgetStatus::kNodeRefused);
  EXPECT_NE(std::string(st.message).find("is full (4096 processes)"), std::string::npos)
      << st.message;
  EXPECT_NE(std::string(st.message).find("refused"), std::string::npos) << st.message;
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, kMiB), Decision::kDenied);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
  ASSERT_TRUE(ledger.Lock());
  ledger.FreeSlotLocked(7);
  ledger.Unlock();
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, kMiB), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);  // the process budget
  EXPECT_TRUE(b.Snapshot().node_active);
  ledger.Close();
}

void WriteLedgerWithVersion(const std::string& path, uint32_t version) {
  LedgerPrefix prefix = {kLedgerMagic,     version,          kLedgerHeaderBytes,
                         kLedgerFileBytes, kLedgerSlotCount, sizeof(LedgerSlot)};
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kLedgerFileBytes), 0);
  ASSERT_EQ(pwrite(fd, &prefix, sizeof(prefix), 0), static_cast<ssize_t>(sizeof(prefix)));
  close(fd);
}

TEST(NodeBudgetTest, OtherLayoutVersionRefusesPinning) {
  const std::string path = UniqueLedgerPath("version");
  WriteLedgerWithVersion(path, 7);
  TestBudget b;
  BudgetStatus st = b.Init(WithNode(path, kMiB, 10 * kMiB));
  EXPECT_EQ(st.code, BudgetStatus::kNodeRefused);
  const std::string msg = st.message;
  EXPECT_NE(msg.find("layout version 7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pinning is refused"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
  EXPECT_FALSE(b.Snapshot().node_active);
}

// Another user plants a FIFO or a file of their own at the ledger's name: the
// open does not block, and the node cap fails closed instead of off.
TEST(NodeBudgetTest, PlantedFifoOrForeignFileFailsClosed) {
  const std::string path = UniqueLedgerPath("planted");
  ASSERT_EQ(mkfifo(path.c_str(), 0666), 0);
  TestBudget a;
  BudgetStatus st = a.Init(WithNode(path, 0, 10 * kMiB, Policy::kFallback));
  EXPECT_EQ(st.code, BudgetStatus::kNodeRefused);
  EXPECT_NE(std::string(st.message).find("not a regular file"), std::string::npos) << st.message;
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 4096), Decision::kFallback);
  unlink(path.c_str());
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0666);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fchmod(fd, 0666), 0);
  close(fd);
  TestBudget b;
  st = b.Init(WithNode(path, 0, 10 * kMiB));
  EXPECT_EQ(st.code, BudgetStatus::kNodeRefused);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 4096), Decision::kDenied);
}

std::vector<std::string> g_warnings;
void CollectWarning(const char* line) { g_warnings.push_back(line); }

// Another process holds the ledger's lock and is stopped: the start-up waits
// a bounded time and says so once; pinning fails closed meanwhile (here by
// falling back to pageable memory) and works again once the lock is free.
TEST(NodeBudgetTest, StalledLedgerLockFailsClosedWithOneWarning) {
  const std::string path = UniqueLedgerPath("stalled");
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
  g_warnings.clear();
  TestBudget a;
  a.SetWarner(CollectWarning);
  BudgetStatus st = a.Init(WithNode(path, 0, 10 * kMiB, Policy::kFallback));
  EXPECT_EQ(st.code, BudgetStatus::kNodeRefused);
  EXPECT_NE(std::string(st.message).find("held for over 2 s"), std::string::npos) << st.message;
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 4096), Decision::kFallback);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 4096), Decision::kFallback);
  EXPECT_TRUE(g_warnings.empty()) << "Init's message was the warning of this stall";
  kill(holder, SIGKILL);
  int status;
  waitpid(holder, &status, 0);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 4096), Decision::kGranted);
  EXPECT_TRUE(a.Snapshot().node_active);
  EXPECT_EQ(a.ledger().header().node_budget.load(), 10 * kMiB);
  close(ready[0]);
  close(ready[1]);
  ledger.Close();
}

TEST(NodeBudgetTest, EvictMakesRoomOnTheNode) {
  const std::string path = UniqueLedgerPath("evict");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB, Policy::kEvict)).ok());
  g_pool = FakePool{&a, 0, 0, 0};
  a.SetEvictor(FakeEvictor);
  ASSERT_EQ(a.Charge(Owner::kPinshimCache, 7 * kMiB), Decision::kGranted);
  g_pool.idle = 7 * kMiB;
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 9 * kMiB), Decision::kGranted);
  EXPECT_EQ(g_pool.last_wanted, 6 * kMiB);
  const LedgerHeader& h = a.ledger().header();
  EXPECT_EQ(h.pinned.load(), 9 * kMiB);
  EXPECT_EQ(h.evictions.load(), 1u);
  EXPECT_EQ(h.evicted_bytes.load(), 7 * kMiB);
  const LedgerSlot& s = a.ledger().slot(a.Snapshot().slot);
  EXPECT_EQ(s.evictions.load(), 1u);
  EXPECT_EQ(s.bytes[static_cast<int>(Owner::kPinshimCache)].load(), 0u);
  EXPECT_EQ(s.grants.load(), 2u);
  EXPECT_EQ(a.Snapshot().grants, 2u);
}

// A signal handler that pins while its thread is inside the ledger's lock is
// refused, not deadlocked; the test hook stands in for the signal.
Budget* g_reentered = nullptr;
Decision g_reentrant_decision = Decision::kGranted;
int g_reentries = 0;
void ChargeFromInsideTheLock(CrashPoint point) {
  if (point != CrashPoint::kChargeMidUpdate || g_reentries++ > 0) return;
  g_reentrant_decision = g_reentered->Charge(Owner::kProgramAlloc, 1);
  g_reentered->Release(Owner::kProgramAlloc, 1);
}

TEST(NodeBudgetTest, ChargeFromASignalHandlerInsideTheLockIsRefused) {
  const std::string path = UniqueLedgerPath("reentry");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB, Policy::kFallback)).ok());
  g_reentered = &a;
  g_reentries = 0;
  g_records.clear();
  a.SetRecorder(RecordDecision);
  SetLedgerCrashHookForTesting(ChargeFromInsideTheLock);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, kMiB), Decision::kGranted);
  SetLedgerCrashHookForTesting(nullptr);
  EXPECT_EQ(g_reentries, 1);
  EXPECT_EQ(g_reentrant_decision, Decision::kFallback);
  ASSERT_EQ(g_records.size(), 2u);
  EXPECT_EQ(g_records[0].limiter, Limiter::kLedger);
  EXPECT_EQ(a.Snapshot().pinned, kMiB);
  EXPECT_EQ(a.ledger().header().pinned.load(), kMiB);
}

TEST(NodeBudgetTest, TickReclaimsProcessesThatDiedWithoutLeaving) {
  const std::string path = UniqueLedgerPath("tick");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB)).ok());
  int status = RunInChild([&] {
    auto* b = new Budget;
    if (!b->Init(WithNode(path, 0, 10 * kMiB)).ok()) return 1;
    return b->Charge(Owner::kProgramRegister, 6 * kMiB) == Decision::kGranted ? 0 : 2;
  });
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(a.Snapshot().node_pinned, 6 * kMiB);
  EXPECT_TRUE(a.Tick().ok());
  EXPECT_EQ(a.Snapshot().node_pinned, 0u);
  EXPECT_EQ(a.ledger().header().reclaimed_processes.load(), 1u);
  EXPECT_EQ(a.ledger().header().reclaimed_bytes.load(), 6 * kMiB);
}

TEST(NodeBudgetTest, RefusedChargeReclaimsTheDeadFirst) {
  const std::string path = UniqueLedgerPath("deny-reclaim");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB)).ok());
  int status = RunInChild([&] {
    auto* b = new Budget;
    if (!b->Init(WithNode(path, 0, 10 * kMiB)).ok()) return 1;
    return b->Charge(Owner::kProgramAlloc, 8 * kMiB) == Decision::kGranted ? 0 : 2;
  });
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  // The last reclaim ran when the child joined; wait out the rate limit.
  usleep(150 * 1000);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 5 * kMiB), Decision::kGranted);
  EXPECT_EQ(a.ledger().header().reclaimed_processes.load(), 1u);
}

TEST(NodeBudgetTest, SharedLedgerIsCreatedForItsGroup) {
  const std::string path = UniqueLedgerPath("mode");
  const std::string shared_path = UniqueLedgerPath("mode-shared");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, kMiB)).ok());
  BudgetOptions o = WithNode(shared_path, 0, kMiB);
  o.shared_ledger = true;
  TestBudget b;
  ASSERT_TRUE(b.Init(o).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(shared_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u) << "its group shares it; nobody else may write it";
  EXPECT_EQ(st.st_gid, getegid());
}

// --- Reservations: the node path without the lock.

std::atomic<uint64_t> g_lock_count{0};
void CountLock() { g_lock_count.fetch_add(1); }

// Counts the ledger lock acquisitions of this process while it lives.
class LockCounter {
 public:
  LockCounter() {
    g_lock_count.store(0);
    SetLedgerLockHookForTesting(CountLock);
  }
  ~LockCounter() { SetLedgerLockHookForTesting(nullptr); }
  uint64_t count() const { return g_lock_count.load(); }
};

TEST(ReservationTest, QuantumFollowsTheNodeBudgetWithinBounds) {
  EXPECT_EQ(ReservationQuantum(10 * kMiB), kMiB);
  EXPECT_EQ(ReservationQuantum(4096 * kMiB), 4 * kMiB);
  EXPECT_EQ(ReservationQuantum(uint64_t{1} << 41), 64 * kMiB);
}

// 8 threads charge and release within the reservation: one compare-and-swap
// each, and the ledger lock is never taken.
TEST(ReservationTest, ChargesTheReservationCoversTakeNoLock) {
  const std::string path = UniqueLedgerPath("no-lock");
  TestBudget b;
  ASSERT_TRUE(b.Init(WithNode(path, 0, 1024 * kMiB)).ok());
  ASSERT_EQ(ReservationQuantum(1024 * kMiB), kMiB);
  LockCounter locks;
  ASSERT_EQ(b.Charge(Owner::kPinshimPool, 4096), Decision::kGranted);
  EXPECT_EQ(locks.count(), 1u) << "the first charge reserves a quantum";
  EXPECT_EQ(b.Snapshot().reserved, kMiB);

  // At most 8 threads x 4 pieces of 16 KiB are held at once: 512 KiB, well
  // inside the quantum.
  constexpr int kThreads = 8;
  constexpr int kRounds = 5000;
  constexpr uint64_t kPiece = 16 * 1024;
  std::atomic<uint64_t> granted{0};
  std::atomic<uint64_t> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const Owner owner = static_cast<Owner>(t % kOwnerCount);
      for (int i = 0; i < kRounds; ++i) {
        const int pieces = 1 + i % 4;
        for (int p = 0; p < pieces; ++p) {
          if (b.Charge(owner, kPiece) == Decision::kGranted) {
            granted.fetch_add(1);
          } else {
            refused.fetch_add(1);
          }
        }
        b.Release(owner, pieces * kPiece);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 0u);
  EXPECT_EQ(locks.count(), 1u) << "charges and releases the reservation covered took the lock";
  BudgetSnapshot s = b.Snapshot();
  EXPECT_EQ(s.pinned, 4096u);
  EXPECT_EQ(s.pinned_by_owner[static_cast<int>(Owner::kPinshimPool)], 4096u);
  EXPECT_EQ(s.grants, 1 + granted.load());
  EXPECT_EQ(s.reserved, kMiB);
  EXPECT_EQ(s.available, kMiB - 4096);
  EXPECT_EQ(s.node_reserved, kMiB);

  // Past the reservation: one lock, one more quantum.
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, kMiB), Decision::kGranted);
  EXPECT_EQ(locks.count(), 2u);
  EXPECT_EQ(b.Snapshot().reserved, 2 * kMiB);
  EXPECT_EQ(b.ledger().header().pinned.load(), kMiB + 4096);
}

TEST(ReservationTest, IdleReservationAboveTwoQuantaGoesBackToTheNode) {
  const std::string path = UniqueLedgerPath("high-water");
  TestBudget b;
  ASSERT_TRUE(b.Init(WithNode(path, 0, 1024 * kMiB)).ok());  // quantum 1 MiB
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kGranted);
  EXPECT_EQ(b.Snapshot().reserved, 3 * kMiB) << "exactly what was missing";
  LockCounter locks;
  b.Release(Owner::kProgramAlloc, kMiB / 2);  // 0.5 MiB idle: kept
  EXPECT_EQ(locks.count(), 0u);
  b.Release(Owner::kProgramAlloc, 2 * kMiB);  // 2.5 MiB idle: back to 1
  EXPECT_EQ(locks.count(), 1u);
  BudgetSnapshot s = b.Snapshot();
  EXPECT_EQ(s.pinned, kMiB / 2);
  EXPECT_EQ(s.reserved, kMiB / 2 + kMiB);
  EXPECT_EQ(s.available, kMiB);
  EXPECT_EQ(s.node_reserved, kMiB / 2 + kMiB);
  EXPECT_EQ(s.node_pinned, kMiB / 2);
}

TEST(ReservationTest, ProcessBudgetIsExactWithReservations) {
  const std::string path = UniqueLedgerPath("process-exact");
  TestBudget b;
  ASSERT_TRUE(b.Init(WithNode(path, 3 * kMiB + 5, 1024 * kMiB)).ok());
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 10), Decision::kGranted);
  EXPECT_EQ(b.Snapshot().reserved, kMiB);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kDenied);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 3 * kMiB - 5), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
  BudgetSnapshot s = b.Snapshot();
  EXPECT_EQ(s.pinned, 3 * kMiB + 5);
  EXPECT_EQ(s.reserved, 3 * kMiB + 5) << "never more than the process budget";
  b.Release(Owner::kProgramAlloc, 10);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 10), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
}

// The node budget N is reached exactly by two processes, the first holding
// an idle reservation: the last request fits only once that reservation is
// taken back, and it is granted; one byte more is refused to either process.
TEST(ReservationTest, RequestsSummingToTheNodeBudgetAreAllGranted) {
  const std::string path = UniqueLedgerPath("edge");
  constexpr uint64_t kNode = 10 * kMiB + 12345;  // quantum 1 MiB
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, kNode)).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 1000), Decision::kGranted);
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 2 * kMiB), Decision::kGranted);
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 100), Decision::kGranted);
  const uint64_t a_pinned = 2 * kMiB + 1100;
  ASSERT_EQ(a.Snapshot().pinned, a_pinned);
  ASSERT_EQ(a.Snapshot().available, kMiB - 100) << "an idle reservation";
  const uint64_t rest = kNode - a_pinned;

  int to_parent[2];
  int to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  pid_t child = fork();
  if (child == 0) {
    close(to_child[1]);  // so that the parent's close reads as end of file
    auto* b = new Budget;
    char go;
    int rc = 0;
    if (!b->Init(WithNode(path, 0, kNode)).ok()) {
      rc = 1;
    } else if (b->Charge(Owner::kProgramRegister, 5 * kMiB) != Decision::kGranted) {
      rc = 2;
    } else if (b->Charge(Owner::kProgramRegister, 1) != Decision::kGranted) {
      rc = 3;
    } else if (b->Charge(Owner::kProgramRegister, rest - 5 * kMiB - 1) != Decision::kGranted) {
      rc = 4;
    } else if (b->Charge(Owner::kProgramRegister, 1) != Decision::kDenied) {
      rc = 5;
    } else if (b->Snapshot().pinned != rest) {
      rc = 6;
    }
    if (write(to_parent[1], "x", 1) != 1 || read(to_child[0], &go, 1) != 0) rc = 7;
    b->Shutdown();  // gives back the reservation before exit
    _exit(rc);
  }
  char ready;
  ASSERT_EQ(read(to_parent[0], &ready, 1), 1);
  // The child holds the rest of the node now.
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
  const LedgerHeader& h = a.ledger().header();
  EXPECT_EQ(h.reserved.load(), kNode);
  EXPECT_EQ(h.pinned.load(), kNode);
  EXPECT_GE(h.takes.load(), 1u) << "a's idle reservation was taken back";
  EXPECT_EQ(a.Snapshot().reserved, a_pinned);
  close(to_child[1]);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  close(to_parent[0]);
  close(to_parent[1]);
  close(to_child[0]);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, rest), Decision::kGranted);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
  EXPECT_EQ(a.Snapshot().pinned, kNode);
  EXPECT_EQ(h.reserved.load(), kNode);
}

TEST(ReservationTest, ReturnedAtExitAndReclaimedFromAKilledProcess) {
  const std::string path = UniqueLedgerPath("exit-kill");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 64 * kMiB)).ok());  // quantum 1 MiB
  const LedgerHeader& h = a.ledger().header();

  // Leaves through the process-wide instance's exit handler, still holding
  // an idle quantum.
  int status = RunInChild([&] {
    Budget& b = Budget::Process();
    if (!b.Init(WithNode(path, 0, 64 * kMiB)).ok()) return 1;
    if (b.Charge(Owner::kPinshimCache, kMiB / 2) != Decision::kGranted) return 2;
    b.Release(Owner::kPinshimCache, kMiB / 2);
    if (b.ledger().header().reserved.load() != kMiB) return 3;
    exit(0);
  });
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(h.reserved.load(), 0u);
  EXPECT_EQ(h.reclaimed_processes.load(), 0u) << "returned, not reclaimed";

  // Killed holding a quantum.
  status = RunInChild([&] {
    auto* b = new Budget;
    if (!b->Init(WithNode(path, 0, 64 * kMiB)).ok()) return 1;
    if (b->Charge(Owner::kProgramAlloc, 100) != Decision::kGranted) return 2;
    raise(SIGKILL);
    return 3;
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(h.reserved.load(), kMiB) << "the dead process still holds it";
  EXPECT_EQ(a.ReclaimDead(), 1u);
  EXPECT_EQ(h.reserved.load(), 0u);
  EXPECT_EQ(h.pinned.load(), 0u);
  EXPECT_EQ(h.reclaimed_bytes.load(), 100u);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 64 * kMiB), Decision::kGranted);
}

// Two instances (two slots) with 8 threads each charge and release random
// sizes around a small node budget, so that reservations grow, go back and
// are taken from one slot by the other all the time. An observer thread
// checks the ledger throughout; at the end the books are exact.
TEST(ReservationTest, ThreadsOfTwoSlotsAtTheNodeEdgeNeverExceed) {
  constexpr uint64_t kNode = 24 * kMiB;  // quantum 1 MiB
  const std::string path = UniqueLedgerPath("edge-threads");
  TestBudget budgets[2];
  for (TestBudget& b : budgets) ASSERT_TRUE(b.Init(WithNode(path, 0, kNode)).ok());
  const Ledger& ledger = budgets[0].ledger();
  // The ledger's lock is in the file, shared by both budgets' ledgers.
  Ledger& lock = const_cast<Ledger&>(ledger);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> over{0};
  std::thread observer([&] {
    while (!stop.load()) {
      const LedgerHeader& h = ledger.header();
      if (h.reserved.load() > kNode || h.pinned.load() > kNode) over.fetch_add(1);
      // A slot's reservation changes only under the ledger's lock, in two
      // steps (its available part, then the reservation): a snapshot taken
      // without the lock can read one step before and one after. With the
      // lock held the reservation stands still, and what is available never
      // exceeds it.
      if (!lock.Lock()) continue;
      for (TestBudget& b : budgets) {
        BudgetSnapshot s = b.Snapshot();
        if (s.available > s.reserved) over.fetch_add(1);
      }
      lock.Unlock();
    }
  });
  constexpr int kThreads = 16;
  std::vector<std::thread> threads;
  std::vector<uint64_t> held(kThreads * kOwnerCount, 0);
  std::atomic<uint64_t> denied{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Budget& b = budgets[t % 2];
      std::mt19937_64 rng(t);
      std::vector<std::pair<int, uint64_t>> mine;
      for (int i = 0; i < 20000; ++i) {
        if (!mine.empty() && rng() % 2 == 0) {
          auto [o, bytes] = mine.back();
          mine.pop_back();
          b.Release(static_cast<Owner>(o), bytes);
          continue;
        }
        const int o = static_cast<int>(rng() % kOwnerCount);
        const uint64_t bytes = 1 + rng() % (2 * kMiB);
        if (b.Charge(static_cast<Owner>(o), bytes) == Decision::kGranted) {
          mine.emplace_back(o, bytes);
        } else {
          denied.fetch_add(1);
        }
      }
      for (auto [o, bytes] : mine) held[t * kOwnerCount + o] += bytes;
    });
  }
  for (auto& th : threads) th.join();
  stop.store(true);
  observer.join();
  EXPECT_EQ(over.load(), 0u);
  EXPECT_GT(denied.load(), 0u) << "the node budget was never reached";
  EXPECT_GT(ledger.header().takes.load(), 0u);
  uint64_t node_total = 0;
  for (int k = 0; k < 2; ++k) {
    BudgetSnapshot s = budgets[k].Snapshot();
    uint64_t total = 0;
    for (int o = 0; o < kOwnerCount; ++o) {
      uint64_t expect = 0;
      for (int t = k; t < kThreads; t += 2) expect += held[t * kOwnerCount + o];
      EXPECT_EQ(s.pinned_by_owner[o], expect) << "instance " << k;
      total += expect;
    }
    EXPECT_EQ(s.pinned, total);
    EXPECT_EQ(s.reserved, total + s.available) << "instance " << k;
    node_total += total;
  }
  EXPECT_EQ(budgets[0].ReclaimDead(), 0u);  // refreshes the totals
  EXPECT_EQ(ledger.header().pinned.load(), node_total);
  EXPECT_LE(ledger.header().reserved.load(), kNode);
}

TEST(ReservationTest, HopelessRequestLeavesOtherReservationsAlone) {
  const std::string path = UniqueLedgerPath("hopeless");
  TestBudget a;
  TestBudget b;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 10 * kMiB)).ok());  // quantum 1 MiB
  ASSERT_TRUE(b.Init(WithNode(path, 0, 10 * kMiB)).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 1), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 10 * kMiB), Decision::kDenied);
  EXPECT_EQ(a.Snapshot().reserved, kMiB);
  EXPECT_EQ(a.ledger().header().takes.load(), 0u);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 10 * kMiB - 1), Decision::kGranted);
  EXPECT_EQ(a.Snapshot().reserved, 1u);
  EXPECT_EQ(a.ledger().header().takes.load(), 1u);
}

// A process joining with a smaller node budget takes back every idle
// reservation, so none can be spent past the new budget.
TEST(ReservationTest, SmallerBudgetTakesBackIdleReservations) {
  const std::string path = UniqueLedgerPath("shrink");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 100 * kMiB)).ok());  // quantum 1 MiB
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 1), Decision::kGranted);
  ASSERT_EQ(a.Snapshot().available, kMiB - 1);
  TestBudget b;
  ASSERT_TRUE(b.Init(WithNode(path, 0, kMiB / 2)).ok());
  EXPECT_EQ(a.Snapshot().reserved, 1u);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, kMiB / 2), Decision::kDenied);
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, kMiB / 2 - 1), Decision::kGranted);
  EXPECT_EQ(b.Charge(Owner::kProgramAlloc, 1), Decision::kDenied);
  EXPECT_EQ(a.ledger().header().reserved.load(), kMiB / 2);
}

// Closing the available word at exit stops charges that are already past
// the check of the slot, so a thread still running at exit cannot pin what
// the node no longer counts.
TEST(ReservationTest, ChargesAfterShutdownAreRefusedEvenFromTheReservation) {
  const std::string path = UniqueLedgerPath("closed");
  TestBudget a;
  ASSERT_TRUE(a.Init(WithNode(path, 0, 64 * kMiB, Policy::kFallback)).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 1), Decision::kGranted);
  const int slot = a.Snapshot().slot;
  a.Shutdown();
  const LedgerSlot& s = a.ledger().slot(slot);
  EXPECT_NE(s.available.load() & kAvailableClosed, 0u);
  EXPECT_EQ(s.pid.load(), 0u);
  EXPECT_EQ(s.left_pid.load(), static_cast<uint32_t>(getpid()))
      << "not to be claimed while this process runs";
  EXPECT_EQ(a.Charge(Owner::kProgramAlloc, 1), Decision::kFallback);
  // A newcomer gets another slot while we live.
  TestBudget b;
  ASSERT_TRUE(b.Init(WithNode(path, 0, 64 * kMiB)).ok());
  EXPECT_NE(b.Snapshot().slot, slot);
  EXPECT_EQ(a.ledger().header().reserved.load(), 0u);
}

}  // namespace
}  // namespace budget
}  // namespace pinshim
