// The cost enforce mode adds to every pinned allocation and free: one
// Charge and one Release, on the granted path (the common one), uncontended
// and with 16 threads contending (targets: at most 100 ns median
// uncontended; contended within 5x of that).
//
//   bazel run //bench/budget:budget_bench --
//       --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
// (one command line; the build's default flags already optimize)
//
// Variants: Off (enforce mode off: Init never called), Process (process
// budget only: the lock-free counter), Node (process and node budget: the
// charges come out of the process's reservation of node budget in its
// shared-memory ledger slot, so after the first charge reserved a quantum
// the ledger lock is no longer taken). With threads, Google Benchmark's CPU
// time is CPU time per charge+release across all threads, its real time the
// wall-clock time per charge+release of the whole group.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <string>

#include "shim/budget/budget.h"

namespace pinshim {
namespace budget {
namespace {

enum Variant { kOff = 0, kProcess = 1, kNode = 2 };

Budget g_budget;

std::string LedgerPath() {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  return std::string(dir) + "/pinshim-ledger-bench-" + std::to_string(getpid());
}

void BM_ChargeRelease(benchmark::State& state) {
  const auto variant = static_cast<Variant>(state.range(0));
  const std::string path = LedgerPath();
  if (state.thread_index() == 0 && variant != kOff) {
    BudgetOptions options;
    options.process_bytes = uint64_t{1} << 40;
    options.node_bytes = variant == kNode ? uint64_t{1} << 41 : 0;
    options.ledger_path = path.c_str();
    BudgetStatus status = g_budget.Init(options);
    if (!status.ok()) state.SkipWithError(status.message);
  }
  const Owner owner = static_cast<Owner>(state.thread_index() % kOwnerCount);
  for (auto _ : state) {
    benchmark::DoNotOptimize(g_budget.Charge(owner, 1 << 20));
    g_budget.Release(owner, 1 << 20);
  }
  if (state.thread_index() == 0) {
    g_budget.CloseForTesting();
    unlink(path.c_str());
  }
}
BENCHMARK(BM_ChargeRelease)
    ->ArgName("off_process_node")
    ->Arg(kOff)
    ->Arg(kProcess)
    ->Arg(kNode)
    ->Threads(1)
    ->Threads(16)
    ->UseRealTime();

}  // namespace
}  // namespace budget
}  // namespace pinshim

BENCHMARK_MAIN();
