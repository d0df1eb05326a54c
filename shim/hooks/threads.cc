// pinshim's own threads: the metrics writer (enforce mode, or any mode with
// PINSHIM_METRICS_FILE) and the idle trim (optimize mode). Each starts with every signal blocked
// and counts nothing.
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include "shim/budget/budget.h"
#include "shim/core/log.h"
#include "shim/core/quiet_thread.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"

namespace pinshim {
namespace {

// A thread of pinshim's own, in enforce mode with a node budget or a
// PINSHIM_METRICS_FILE: every few seconds it renews the process's heartbeat
// in the node ledger (how processes of other pid namespaces tell it lives)
// and, with a metrics file, reclaims dead processes and rewrites the file.
// It takes none of the program's signals. A fork child starts its own.
constexpr unsigned kMetricsPeriodMs = 2000;

void* MetricsMain(void*) {
  prctl(PR_SET_NAME, "pinshim-metrics", 0, 0, 0);
  ReentryGuard::HoldForever(Reentry::kHook);
  const bool metrics = g_config.metrics_file[0] != '\0';
  for (;;) {
    if (!g_enforce) {
      WriteLiveMetricsFile();  // observe and optimize: this process's own file
    } else if (metrics) {
      // A message only when writing the metrics starts failing or works again.
      const budget::BudgetStatus status = budget::Budget::Process().Tick();
      if (status.message[0] != '\0') LogLine("%s", status.message);
    } else {
      budget::Budget::Process().Heartbeat();
    }
    struct timespec ts = {kMetricsPeriodMs / 1000, (kMetricsPeriodMs % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
  }
  return nullptr;
}

// Optimize mode: pinned memory left idle (pool slabs, arena extents) goes
// back to the driver after PINSHIM_IDLE_TRIM_S even when the program makes
// no further call.
void* TrimMain(void*) {
  prctl(PR_SET_NAME, "pinshim-trim", 0, 0, 0);
  ReentryGuard::HoldForever(Reentry::kHook);
  const unsigned period_s = g_config.idle_trim_s >= 2 ? g_config.idle_trim_s / 2 : 1;
  for (;;) {
    struct timespec ts = {static_cast<time_t>(period_s), 0};
    nanosleep(&ts, nullptr);
    optimize::Optimizer::Process().Tick();
  }
  return nullptr;
}

}  // namespace

void StartMetricsThread() {
  const bool metrics = g_config.metrics_file[0] != '\0';
  if (!metrics && !(g_enforce && g_config.has_node_budget)) return;
  if (!StartQuietThread(MetricsMain)) {
    LogLine("cannot start pinshim's metrics thread; %s",
            g_config.metrics_file[0] != '\0' ? "the metrics file will not be updated"
                                             : "no heartbeat in the node ledger");
  }
}

bool StartTrimThread() { return StartQuietThread(TrimMain); }

}  // namespace pinshim
