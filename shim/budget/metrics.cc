// Budget::WriteMetricsFile: Prometheus text exposition format, as node
// exporter's textfile collector reads it.
//
// Per-process series carry the labels pid and slot (the ledger slot index;
// "none" without a ledger). The slot label keeps series unique even while a
// dead process and a newcomer with its recycled pid both sit in the ledger,
// which would otherwise make the collector reject the whole file. Every
// process that writes the same path writes the whole node's view, so any
// number of processes can share one metrics file.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include <atomic>

#include "shim/budget/budget.h"
#include "shim/core/prom_text.h"
#include "shim/core/safe_file.h"

namespace pinshim {
namespace budget {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

using FdWriter = PromWriter;

void Family(FdWriter& w, const char* name, const char* type, const char* help) {
  w.Family(name, type, help);
}

// Extra families of the process's own (live_counters.h), set by the library.
std::atomic<void (*)(PromWriter&)> g_extra{nullptr};

// The memory kind of an owner's pinning, as the copy metrics' `memory`
// label names it (docs/production.md: an open list).
const char* KindOfOwner(Owner o) {
  switch (o) {
    case Owner::kProgramAlloc: return "pinned";
    case Owner::kProgramRegister: return "registered";
    case Owner::kPinshimPool:
    case Owner::kPinshimCache: return "pinshim";
    case Owner::kProgramVmm: return "vmm-host";
    case Owner::kProgramPool: return "host-pool";
  }
  return "unknown";
}

// One process as the metrics see it.
struct ProcessRow {
  uint32_t pid;
  int32_t slot;  // -1: no ledger
  uint64_t bytes[kOwnerCount];
  uint64_t reserved;  // node budget reserved; 0 without a ledger slot
  uint64_t budget;
  uint64_t counters[5];  // grants, denials, fallbacks, evictions, evicted bytes
};

// Calls fn for every process to report: the ledger's claimed slots, or just
// this process when it holds no ledger slot (none, not yet, or no longer).
template <typename Fn>
void ForEachProcess(const Budget& budget, Fn fn) {
  const Ledger& ledger = budget.ledger();
  const BudgetSnapshot self = budget.Snapshot();
  if (!ledger.is_open() || self.slot < 0) {
    ProcessRow row = {};
    row.pid = static_cast<uint32_t>(getpid());
    row.slot = -1;
    memcpy(row.bytes, self.pinned_by_owner, sizeof(row.bytes));
    row.budget = self.process_budget;
    const uint64_t counters[5] = {self.grants, self.denials, self.fallbacks, self.evictions,
                                  self.evicted_bytes};
    memcpy(row.counters, counters, sizeof(counters));
    fn(row);
    return;
  }
  uint32_t high = ledger.header().slot_high.load(kRelaxed);
  if (high > kLedgerSlotCount) high = kLedgerSlotCount;
  for (uint32_t i = 0; i < high; ++i) {
    const LedgerSlot& s = ledger.slot(i);
    ProcessRow row = {};
    row.pid = s.pid.load(std::memory_order_acquire);
    if (row.pid == 0) continue;
    row.slot = static_cast<int32_t>(i);
    for (int o = 0; o < kOwnerCount; ++o) row.bytes[o] = s.bytes[o].load(kRelaxed);
    row.reserved = s.reserved.load(kRelaxed);
    row.budget = s.process_budget.load(kRelaxed);
    row.counters[0] = s.grants.load(kRelaxed);
    row.counters[1] = s.denials.load(kRelaxed);
    row.counters[2] = s.fallbacks.load(kRelaxed);
    row.counters[3] = s.evictions.load(kRelaxed);
    row.counters[4] = s.evicted_bytes.load(kRelaxed);
    fn(row);
  }
}

void Labels(const ProcessRow& row, char (&out)[48]) {
  if (row.slot < 0) {
    snprintf(out, sizeof(out), "pid=\"%u\",slot=\"none\"", row.pid);
  } else {
    snprintf(out, sizeof(out), "pid=\"%u\",slot=\"%d\"", row.pid, row.slot);
  }
}

// The per-process families: pinned bytes by owner, budget, counters.
void WriteProcessFamilies(const Budget& budget, FdWriter& w) {
  char labels[48];
  Family(w, "pinshim_pinned_bytes", "gauge",
         "Host memory pinned by a process, by owner and memory kind.");
  ForEachProcess(budget, [&](const ProcessRow& row) {
    Labels(row, labels);
    for (int o = 0; o < kOwnerCount; ++o) {
      w.Printf("pinshim_pinned_bytes{%s,owner=\"%s\",kind=\"%s\"} %llu\n", labels,
               OwnerName(static_cast<Owner>(o)), KindOfOwner(static_cast<Owner>(o)),
               static_cast<unsigned long long>(row.bytes[o]));
    }
  });
  Family(w, "pinshim_process_budget_bytes", "gauge",
         "Pinned-memory budget of a process; 0 means none.");
  ForEachProcess(budget, [&](const ProcessRow& row) {
    Labels(row, labels);
    w.Printf("pinshim_process_budget_bytes{%s} %llu\n", labels,
             static_cast<unsigned long long>(row.budget));
  });
  static const char* const kCounterNames[5] = {"pinshim_grants_total", "pinshim_denials_total",
                                               "pinshim_fallbacks_total", "pinshim_evictions_total",
                                               "pinshim_evicted_bytes_total"};
  static const char* const kCounterHelp[5] = {
      "Pinning requests granted.", "Pinning requests denied with an out-of-memory error.",
      "Pinning requests served with pageable memory instead.",
      "Times pinshim unpinned its own idle memory to make room.",
      "Bytes pinshim unpinned to make room."};
  for (int c = 0; c < 5; ++c) {
    Family(w, kCounterNames[c], "counter", kCounterHelp[c]);
    ForEachProcess(budget, [&](const ProcessRow& row) {
      Labels(row, labels);
      w.Printf("%s{%s} %llu\n", kCounterNames[c], labels,
               static_cast<unsigned long long>(row.counters[c]));
    });
  }
}

// The node's single values: budget, reservations, processes, counters.
void WriteNodeValues(const Budget& budget, const LedgerHeader& h, FdWriter& w) {
  struct NodeValue {
    const char* name;
    const char* type;
    const char* help;
    uint64_t value;
  };
  uint32_t processes = 0;
  ForEachProcess(budget, [&](const ProcessRow&) { ++processes; });
  const NodeValue values[] = {
      {"pinshim_node_budget_bytes", "gauge", "Pinned-memory budget of the node.",
       h.node_budget.load(kRelaxed)},
      {"pinshim_node_reserved_bytes", "gauge",
       "Node budget reserved by the processes in the ledger.", h.reserved.load(kRelaxed)},
      {"pinshim_node_processes", "gauge", "Processes in the node ledger.", processes},
      {"pinshim_node_grants_total", "counter", "Pinning requests granted on the node.",
       h.grants.load(kRelaxed)},
      {"pinshim_node_denials_total", "counter",
       "Pinning requests denied on the node with an out-of-memory error.",
       h.denials.load(kRelaxed)},
      {"pinshim_node_fallbacks_total", "counter",
       "Pinning requests served with pageable memory on the node.", h.fallbacks.load(kRelaxed)},
      {"pinshim_node_evictions_total", "counter",
       "Times pinshim unpinned its own idle memory on the node.", h.evictions.load(kRelaxed)},
      {"pinshim_node_evicted_bytes_total", "counter",
       "Bytes pinshim unpinned on the node to make room.", h.evicted_bytes.load(kRelaxed)},
      {"pinshim_node_lock_recoveries_total", "counter",
       "Times a process died holding the node ledger lock.", h.recoveries.load(kRelaxed)},
      {"pinshim_node_reclaimed_processes_total", "counter",
       "Dead processes whose pinned share was reclaimed.", h.reclaimed_processes.load(kRelaxed)},
      {"pinshim_node_reclaimed_bytes_total", "counter",
       "Pinned bytes reclaimed from dead processes.", h.reclaimed_bytes.load(kRelaxed)},
      {"pinshim_node_reservation_takes_total", "counter",
       "Times a process took back another's unused reservation.", h.takes.load(kRelaxed)},
  };
  for (const NodeValue& v : values) {
    Family(w, v.name, v.type, v.help);
    w.Printf("%s %llu\n", v.name, static_cast<unsigned long long>(v.value));
  }
}

// The node families of an open ledger: reservations by process, pinned
// bytes by owner, and the node's single values.
void WriteNodeFamilies(const Budget& budget, const LedgerHeader& h, FdWriter& w) {
  char labels[48];
  // Reservations are what the node budget is divided into; the part of a
  // reservation above the pinned bytes is what the process may still pin
  // without asking the ledger.
  Family(w, "pinshim_reserved_bytes", "gauge",
         "Node budget reserved by a process: its pinned bytes plus what it "
         "may pin without taking the ledger lock.");
  ForEachProcess(budget, [&](const ProcessRow& row) {
    Labels(row, labels);
    w.Printf("pinshim_reserved_bytes{%s} %llu\n", labels,
             static_cast<unsigned long long>(row.reserved));
  });
  Family(w, "pinshim_node_pinned_bytes", "gauge",
         "Host memory pinned on the node by processes in the ledger, by owner.");
  for (int o = 0; o < kOwnerCount; ++o) {
    w.Printf("pinshim_node_pinned_bytes{owner=\"%s\"} %llu\n", OwnerName(static_cast<Owner>(o)),
             static_cast<unsigned long long>(h.pinned_by_owner[o].load(kRelaxed)));
  }
  WriteNodeValues(budget, h, w);
}

void WriteBody(const Budget& budget, FdWriter& w) {
  WriteProcessFamilies(budget, w);
  if (auto* extra = g_extra.load(std::memory_order_acquire)) extra(w);
  const Ledger& ledger = budget.ledger();
  if (!ledger.is_open()) return;
  WriteNodeFamilies(budget, ledger.header(), w);
}

}  // namespace

void Budget::SetMetricsExtra(void (*write)(PromWriter& w)) {
  g_extra.store(write, std::memory_order_release);
}

BudgetStatus Budget::WriteMetricsFile(const char* path) const {
  BudgetStatus status;
  if (path == nullptr || path[0] == '\0') {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message), "bad metrics file path");
    return status;
  }
  // Written under a fresh, unguessable name beside the target (rename is
  // atomic only within one file system) that does not end in .prom, so the
  // collector never reads a half-written file and nobody can plant a file or
  // link under that name; then renamed over the target, which must be
  // missing or a regular file of this user's, whose permission bits stay
  // (safe_file.h). A new file is 0644 less the umask: the collector usually
  // runs as another user.
  ReplaceFile file;
  int err = BeginReplace(path, 0644, &file);
  if (err == 0) {
    FdWriter writer(file.fd);
    WriteBody(*this, writer);
    err = writer.Flush();
    if (err == 0) {
      err = CommitReplace(&file);
    } else {
      AbortReplace(&file);
    }
  }
  if (err != 0) {
    status.code = BudgetStatus::kInvalid;
    snprintf(status.message, sizeof(status.message), "cannot write metrics file %.400s: %s", path,
             SafeFileReason(err));
  }
  return status;
}

BudgetStatus Budget::WriteMetricsNow() {
  BudgetStatus status;
  if (metrics_path_[0] == '\0') return status;
  status = WriteMetricsFile(metrics_path_);
  const bool failed = !status.ok();
  const bool was_failing = metrics_failing_.exchange(failed, std::memory_order_relaxed);
  if (failed && !was_failing) {
    // The first failure of a run of them says so, once.
    const size_t used = strlen(status.message);
    snprintf(status.message + used, sizeof(status.message) - used,
             "; retrying every few seconds, no further warning until it works again");
  } else if (!failed && was_failing) {
    snprintf(status.message, sizeof(status.message), "metrics file %.400s written again",
             metrics_path_);
  } else {
    status.message[0] = '\0';
  }
  return status;
}

}  // namespace budget
}  // namespace pinshim
