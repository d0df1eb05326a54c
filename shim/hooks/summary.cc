// The summary written at exit (PINSHIM_SUMMARY): the counted calls, and in
// optimize mode what pinshim pinned, reused and staged.
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "shim/core/log.h"
#include "shim/core/safe_file.h"
#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"

extern "C" char* program_invocation_short_name;

namespace pinshim {
namespace {

// Optimize mode's line of the summary: what pinshim pinned and reused, as
// "pinshim: optimize key=value ..." with the keys of optimize_counters.inc.
void WriteOptimizeSummary(int fd) {
  if (!g_optimize || !optimize::Optimizer::Process().active()) return;
  const optimize::OptimizeCounters c = optimize::Optimizer::Process().Counters();
  char line[2048];
  size_t n = 0;
  auto add = [&](const char* key, uint64_t value) {
    if (key[0] == '\0') return;  // a counter only the trace records
    int k = snprintf(line + n, sizeof(line) - n, " %s=%llu", key,
                     static_cast<unsigned long long>(value));
    if (k > 0) n += static_cast<size_t>(k) < sizeof(line) - n ? k : sizeof(line) - 1 - n;
  };
  n = static_cast<size_t>(snprintf(line, sizeof(line), "pinshim: optimize"));
#define TRACE(name, layout, source, summary_key) add(summary_key, c.source);
#define SUMMARY(source, summary_key) add(summary_key, c.source);
#include "shim/core/optimize_counters.inc"
#undef TRACE
#undef SUMMARY
  if (n < sizeof(line) - 1) line[n++] = '\n';
  WriteAll(fd, line, n);
}

// The program's name as the summary shows it: a byte that could move the
// terminal's cursor or start a new line becomes '?', so that a name cannot
// forge lines of the summary.
void PrintableName(const char* name, char* out, size_t len) {
  size_t n = 0;
  for (; name[n] != '\0' && n + 1 < len; ++n) {
    const unsigned char c = static_cast<unsigned char>(name[n]);
    out[n] = c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c);
  }
  out[n] = '\0';
}

// Several processes may append to one summary file (no %p in its name): each
// appends its record under an exclusive flock, so records never interleave.
// Whoever can open the file can hold that lock too, so the wait is bounded;
// after it the record is appended without the lock.
void LockForAppend(int fd) {
  for (int round = 0; round < 200; ++round) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) return;
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
}

const char* PathName(optimize::CopyPath p) {
  switch (p) {
    case optimize::CopyPath::kStaged: return "staged";
    case optimize::CopyPath::kPinnedInPlace: return "pinned-in-place";
    case optimize::CopyPath::kDriver: break;
  }
  return "driver";
}

double GBps(uint64_t ns_per_mib) { return ns_per_mib == 0 ? 0.0 : 1048576.0 / ns_per_mib; }

// The self-check's verdicts (path_judge.h), one line per direction, size
// class, kind of call and path with one: whether the path beat the driver
// there, at what speeds, and how often it was found slower.
void WriteSelfCheckSummary(int fd) {
  if (!g_optimize || !optimize::Optimizer::Process().active()) return;
  constexpr int kMax = 2 * 2 * optimize::PathJudge::kClasses * optimize::kCopyPathCount;
  optimize::PathCellReport cells[kMax];
  const int n = optimize::Optimizer::Process().judge().Report(cells, kMax);
  for (int i = 0; i < n && i < kMax; ++i) {
    const optimize::PathCellReport& c = cells[i];
    char line[320];
    const int k = snprintf(
        line, sizeof(line),
        "pinshim: self-check path=%s dir=%s size=%s+ call=%s verdict=%s path_gbps=%.2f "
        "driver_gbps=%.2f path_copies=%llu driver_copies=%llu losses=%llu\n",
        PathName(c.path), c.dir == CopyDir::kHostToDevice ? "H2D" : "D2H",
        optimize::PathJudge::ClassName(c.size_class), c.sync ? "sync" : "async",
        c.verdict == optimize::PathVerdict::kLoses ? "slower" : "faster", GBps(c.path_ns_per_mib),
        GBps(c.driver_ns_per_mib), static_cast<unsigned long long>(c.path_copies),
        static_cast<unsigned long long>(c.driver_copies),
        static_cast<unsigned long long>(c.losses));
    if (k > 0) WriteAll(fd, line, static_cast<size_t>(k) < sizeof(line) ? k : sizeof(line) - 1);
  }
}

}  // namespace

void WriteSummaryAtExit() {
  if (g_config.summary == SummaryTarget::kNone || !g_cuda_seen.load()) return;
  char mode[64];
  FormatMode(g_config.mode, mode, sizeof(mode));
  char program[256];
  PrintableName(program_invocation_short_name ? program_invocation_short_name : "?", program,
                sizeof(program));
  if (g_config.summary == SummaryTarget::kStderr) {
    WriteSummary(STDERR_FILENO, getpid(), program, mode, ApiName);
    WriteOptimizeSummary(STDERR_FILENO);
    WriteSelfCheckSummary(STDERR_FILENO);
    return;
  }
  char path[kConfigPathMax];
  if (!ExpandPidPattern(g_config.summary_path, getpid(), path, sizeof(path))) {
    LogLine(
        "the summary file's path (--summary=FILE, PINSHIM_SUMMARY) is too long; summary not "
        "written");
    return;
  }
  // Appended, never truncated: without %p every process of a run adds its
  // own record to the one file. A link, a FIFO or another user's file at the
  // name is refused (safe_file.h).
  const int fd = OpenForAppend(path, 0644);
  if (fd < 0) {
    LogLine("cannot write summary to %s: %s", path, SafeFileReason(-fd));
    return;
  }
  LockForAppend(fd);
  WriteSummary(fd, getpid(), program, mode, ApiName);
  WriteOptimizeSummary(fd);
  WriteSelfCheckSummary(fd);
  close(fd);  // releases the lock
}

}  // namespace pinshim
