// The live metrics of every mode (PINSHIM_METRICS_FILE): the copy families
// from live_counters.h, which enforce mode's file gets after the budget's
// (Budget::SetMetricsExtra), and in observe and optimize mode a file of this
// process's own, rewritten atomically as enforce mode's is. Families, labels
// and the loss estimates are documented in docs/production.md.
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "shim/budget/budget.h"
#include "shim/core/live_counters.h"
#include "shim/core/log.h"
#include "shim/core/prom_text.h"
#include "shim/core/safe_file.h"
#include "shim/hooks/state.h"
#include "shim/optimize/cost_model.h"
#include "shim/optimize/optimizer.h"

namespace pinshim {
namespace {

using optimize::CostModel;

constexpr int kKinds = static_cast<int>(MemKind::kCount);
// The host kinds a host-side copy is labelled with (device: D2D only).
constexpr MemKind kHostKinds[] = {MemKind::kPageable, MemKind::kPinnedByProgram,
                                  MemKind::kRegisteredByProgram, MemKind::kPinnedByPinshim,
                                  MemKind::kManaged};
constexpr CopyDir kDirs[] = {CopyDir::kHostToDevice, CopyDir::kDeviceToHost, CopyDir::kHostToHost};

// Calls fn(direction, memory, dir index, kind index) for every series.
template <typename Fn>
void ForEachCopySeries(Fn fn) {
  for (CopyDir d : kDirs) {
    for (MemKind k : kHostKinds) fn(CopyDirName(d), MemKindName(k), static_cast<int>(d), k);
  }
  fn(CopyDirName(CopyDir::kDeviceToDevice), MemKindName(MemKind::kDevice),
     static_cast<int>(CopyDir::kDeviceToDevice), MemKind::kDevice);
}

// The estimates, in seconds, by rule (docs/production.md, "Estimated time lost").
struct Losses {
  double pageable_hot = 0, async_pageable = 0, small_copies = 0, sync_copy_loop = 0;
};

Losses Estimate(const LiveSnapshot& s) {
  Losses l;
  for (int d = 0; d < 2; ++d) {
    const CopyDir dir = d == 0 ? CopyDir::kHostToDevice : CopyDir::kDeviceToHost;
    for (int c = 0; c < kLiveSizeClasses; ++c) {
      const uint64_t n = s.pageable_copies[d][c];
      if (n != 0) l.pageable_hot += n * CostModel::SavingNs(s.pageable_bytes[d][c] / n, dir) * 1e-9;
    }
    const uint64_t bytes = s.small_bytes[d];
    if (bytes != 0) {
      const uint64_t batch = bytes < (uint64_t{16} << 20) ? bytes : uint64_t{16} << 20;
      const double batched_ns =
          CostModel::CopyNs(batch, dir, true) * (double(bytes) / double(batch));
      const double lost = s.small_call_ns[d] - batched_ns;
      if (lost > 0) l.small_copies += lost * 1e-9;
    }
  }
  l.async_pageable = s.async_blocked_ns * 1e-9;
  l.sync_copy_loop = s.sync_overlap_ns * 1e-9;
  return l;
}

void WriteCopyFamilies(PromWriter& w) {
  LiveSnapshot s;
  TakeLiveSnapshot(&s);
  const unsigned pid = static_cast<unsigned>(getpid());
  const auto per_series = [&](const char* name, uint64_t(*table)[kKinds]) {
    ForEachCopySeries([&](const char* dir, const char* mem, int d, MemKind k) {
      w.Printf("%s{pid=\"%u\",direction=\"%s\",memory=\"%s\"} %llu\n", name, pid, dir, mem,
               static_cast<unsigned long long>(table[d][static_cast<int>(k)]));
    });
  };
  w.Family("pinshim_copies_total", "counter",
           "Copies that succeeded, by direction and memory kind of the host side.");
  per_series("pinshim_copies_total", s.copies);
  w.Family("pinshim_copy_bytes_total", "counter",
           "Bytes of copies that succeeded, by direction and memory kind of the host side.");
  per_series("pinshim_copy_bytes_total", s.bytes);
  const struct {
    const char* name;
    const char* help;
    double value;
  } plain[] = {
      {"pinshim_copy_seconds_total", "Time the program spent in synchronous copy calls.",
       s.sync_call_ns * 1e-9},
      {"pinshim_staged_bytes_total", "Bytes optimize mode copied through its pinned staging rings.",
       double(s.staged_bytes)},
      {"pinshim_registered_in_place_bytes_total",
       "Bytes copied from pageable memory optimize mode pinned in place.",
       double(s.in_place_bytes)},
  };
  for (const auto& p : plain) {
    w.Family(p.name, "counter", p.help);
    w.Printf("%s{pid=\"%u\"} %.9g\n", p.name, pid, p.value);
  }
  const Losses l = Estimate(s);
  w.Family("pinshim_estimated_seconds_lost_total", "counter",
           "Time the copies lost by the report's rule, as the library estimates it from its "
           "counters.");
  const std::pair<const char*, double> rules[] = {{"pageable-hot", l.pageable_hot},
                                                  {"async-pageable", l.async_pageable},
                                                  {"small-copies", l.small_copies},
                                                  {"sync-copy-loop", l.sync_copy_loop}};
  for (const auto& r : rules) {
    w.Printf("pinshim_estimated_seconds_lost_total{pid=\"%u\",rule=\"%s\"} %.9g\n", pid, r.first,
             r.second);
  }
}

// Outside enforce mode, which writes its own: the program's pinned bytes
// and pinshim's, with enforce mode's labels.
void WritePinnedFamily(PromWriter& w) {
  LiveSnapshot s;
  TakeLiveSnapshot(&s);
  uint64_t pinshim = 0;
  const optimize::Optimizer& opt = optimize::Optimizer::Process();
  if (g_optimize && opt.active()) pinshim = opt.Counters().pinned_bytes_now;
  const unsigned pid = static_cast<unsigned>(getpid());
  w.Family("pinshim_pinned_bytes", "gauge",
           "Host memory pinned by a process, by owner and memory kind.");
  const struct {
    const char* owner;
    const char* kind;
    uint64_t bytes;
  } rows[] = {{"program_alloc", "pinned", s.program_pinned},
              {"program_register", "registered", s.program_registered},
              {"program_vmm", "vmm-host", s.program_vmm},
              {"program_pool", "host-pool", s.program_pool},
              {"pinshim", "pinshim", pinshim}};
  for (const auto& r : rows) {
    w.Printf("pinshim_pinned_bytes{pid=\"%u\",slot=\"none\",owner=\"%s\",kind=\"%s\"} %llu\n", pid,
             r.owner, r.kind, static_cast<unsigned long long>(r.bytes));
  }
}

// The last write failed (said once until it works again).
bool g_failing = false;

}  // namespace

void UseLiveMetrics() {
  EnableLiveCounters();
  budget::Budget::SetMetricsExtra(WriteCopyFamilies);
}

void WriteLiveMetricsFile() {
  const char* path = g_config.metrics_file;
  ReplaceFile file;
  int err = BeginReplace(path, 0644, &file);
  if (err == 0) {
    PromWriter w(file.fd);
    WritePinnedFamily(w);
    WriteCopyFamilies(w);
    err = w.Flush();
    if (err == 0) {
      err = CommitReplace(&file);
    } else {
      AbortReplace(&file);
    }
  }
  if (err != 0 && !g_failing) {
    LogLine(
        "cannot write metrics file %.400s: %s; retrying every few seconds, no further "
        "warning until it works again",
        path, SafeFileReason(err));
  } else if (err == 0 && g_failing) {
    LogLine("metrics file %.400s written again", path);
  }
  g_failing = err != 0;
}

}  // namespace pinshim
