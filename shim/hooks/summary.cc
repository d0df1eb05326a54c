// The summary written at exit (PINSHIM_SUMMARY): the counted calls, and in
// optimize mode what pinshim pinned, reused and staged.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "shim/core/log.h"
#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"

extern "C" char* program_invocation_short_name;

namespace pinshim {
namespace {

// Optimize mode's line of the summary: what pinshim pinned and reused.
void WriteOptimizeSummary(int fd) {
  if (!g_optimize || !optimize::Optimizer::Process().active()) return;
  const optimize::OptimizeCounters c = optimize::Optimizer::Process().Counters();
  char line[512];
  int n = snprintf(line, sizeof(line),
                   "pinshim: optimize pinned_now=%llu pinned_peak=%llu pool_hits=%llu "
                   "pool_misses=%llu cache_registrations=%llu cache_hits=%llu arena_allocs=%llu "
                   "hot_sites=%llu profile_sites=%llu saved_copy_ns=%llu saved_alloc_ns=%llu "
                   "page_change_drops=%llu staged_copies=%llu staged_bytes=%llu\n",
                   (unsigned long long)c.pinned_bytes_now,
                   (unsigned long long)c.pinned_bytes_peak, (unsigned long long)c.pool.hits,
                   (unsigned long long)c.pool.misses, (unsigned long long)c.cache.registrations,
                   (unsigned long long)c.cache.hits, (unsigned long long)c.arena.allocs,
                   (unsigned long long)c.hot_sites, (unsigned long long)c.hot_sites_from_profile,
                   (unsigned long long)c.saved_copy_ns, (unsigned long long)c.saved_alloc_ns,
                   (unsigned long long)c.page_change_drops, (unsigned long long)c.stager.copies,
                   (unsigned long long)c.stager.bytes);
  if (n > 0) WriteAll(fd, line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
}

}  // namespace

void WriteSummaryAtExit() {
  if (g_config.summary == SummaryTarget::kNone || !g_cuda_seen.load()) return;
  char mode[64];
  FormatMode(g_config.mode, mode, sizeof(mode));
  const char* program = program_invocation_short_name ? program_invocation_short_name : "?";
  if (g_config.summary == SummaryTarget::kStderr) {
    WriteSummary(STDERR_FILENO, getpid(), program, mode, ApiName);
    WriteOptimizeSummary(STDERR_FILENO);
    return;
  }
  char path[kConfigPathMax];
  if (!ExpandPidPattern(g_config.summary_path, getpid(), path, sizeof(path))) {
    LogLine("PINSHIM_SUMMARY path too long; summary not written");
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    LogLine("cannot write summary to %s: %s", path, strerror(errno));
    return;
  }
  WriteSummary(fd, getpid(), program, mode, ApiName);
  WriteOptimizeSummary(fd);
  close(fd);
}

}  // namespace pinshim
