#include "analyzer/status/status_command.h"

#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "analyzer/help.h"
#include "analyzer/report/format.h"
#include "analyzer/report/json_writer.h"
#include "shim/budget/budget.h"
#include "shim/budget/ledger.h"
#include "shim/budget/proc.h"
#include "shim/core/config.h"
#include "shim/core/thread_annotations.h"

extern char** environ;

namespace pinshim {
namespace {

using budget::kOwnerCount;
using budget::Ledger;
using budget::LedgerHeader;
using budget::LedgerOpen;
using budget::LedgerSlot;
using budget::Owner;
using report::FormatBytes;
using report::JsonWriter;

constexpr int kExitOk = 0;
constexpr int kExitProblem = 2;
constexpr int kExitDamaged = 3;

// One process of the ledger, copied out under the lock.
struct ProcessRow {
  uint32_t pid = 0;
  bool same_pid_ns = true;
  std::string command;
  uint8_t policy = 0;
  uint64_t bytes[kOwnerCount] = {};
  uint64_t total = 0;
  uint64_t process_budget = 0;
  uint64_t grants = 0;
  uint64_t denials = 0;
  uint64_t fallbacks = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
};

// The node as shown.
struct NodeView {
  std::string path;
  bool shared = false;
  bool reclaimed_now_checked = false;  // false when only read access was granted
  uint32_t reclaimed_now = 0;
  uint64_t reclaimed_now_bytes = 0;
  uint64_t budget = 0;
  uint64_t pinned = 0;
  uint64_t by_owner[kOwnerCount] = {};
  uint64_t grants = 0;
  uint64_t denials = 0;
  uint64_t fallbacks = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t recoveries = 0;
  uint64_t reclaimed_processes = 0;
  uint64_t reclaimed_bytes = 0;
  std::vector<ProcessRow> processes;
  // Its lock was held past the bounded wait: read without it.
  bool lock_held = false;
  std::string lock_note;
  // What Ledger::CheckDamage found: problems, and the first one.
  uint32_t damage = 0;
  std::string first_damage;

  uint64_t headroom() const { return budget > pinned ? budget - pinned : 0; }
};

const char* PolicyText(uint8_t policy) {
  return policy <= static_cast<uint8_t>(Policy::kEvict)
             ? budget::PolicyName(static_cast<Policy>(policy))
             : "?";
}

// The totals and the processes' rows, as the mapping shows them now.
void CopyLedgerNumbers(const Ledger& ledger, NodeView* view) {
  const LedgerHeader& h = ledger.header();
  view->shared = (h.flags & budget::kLedgerFlagShared) != 0;
  view->budget = h.node_budget.load();
  view->pinned = h.pinned.load();
  for (int o = 0; o < kOwnerCount; ++o) view->by_owner[o] = h.pinned_by_owner[o].load();
  view->grants = h.grants.load();
  view->denials = h.denials.load();
  view->fallbacks = h.fallbacks.load();
  view->evictions = h.evictions.load();
  view->evicted_bytes = h.evicted_bytes.load();
  view->recoveries = h.recoveries.load();
  view->reclaimed_processes = h.reclaimed_processes.load();
  view->reclaimed_bytes = h.reclaimed_bytes.load();
  const uint64_t my_ns = budget::SelfPidNamespace();
  uint32_t high = h.slot_high.load();
  if (high > budget::kLedgerSlotCount) high = budget::kLedgerSlotCount;
  for (uint32_t i = 0; i < high; ++i) {
    const LedgerSlot& s = ledger.slot(i);
    ProcessRow row;
    row.pid = s.pid.load(std::memory_order_acquire);
    if (row.pid == 0) continue;
    row.same_pid_ns = s.pid_ns.load() == my_ns;
    row.command.assign(s.comm, strnlen(s.comm, sizeof(s.comm)));
    row.policy = s.policy;
    for (int o = 0; o < kOwnerCount; ++o) {
      row.bytes[o] = s.bytes[o].load();
      row.total += row.bytes[o];
    }
    row.process_budget = s.process_budget.load();
    row.grants = s.grants.load();
    row.denials = s.denials.load();
    row.fallbacks = s.fallbacks.load();
    row.evictions = s.evictions.load();
    row.evicted_bytes = s.evicted_bytes.load();
    view->processes.push_back(row);
  }
}

// Under the ledger's lock: the damage check exact, dead processes
// reclaimed, then the numbers.
void ReadLedgerLocked(Ledger& ledger, NodeView* view) REQUIRES(ledger) {
  const LedgerHeader& h = ledger.header();
  char damage[256] = "";
  view->damage = ledger.CheckDamage(/*locked=*/true, damage, sizeof(damage));
  view->first_damage = damage;
  const uint64_t before = h.reclaimed_bytes.load();
  view->reclaimed_now = ledger.ReclaimDeadLocked();
  view->reclaimed_now_bytes = h.reclaimed_bytes.load() - before;
  view->reclaimed_now_checked = true;
  CopyLedgerNumbers(ledger, view);
}

// Copies what the ledger says, under the lock when we may take it.
void ReadLedger(Ledger& ledger, NodeView* view) {
  if (ledger.writable() && ledger.Lock()) {
    ReadLedgerLocked(ledger, view);
    ledger.Unlock();
  } else {
    if (ledger.writable()) {
      char note[640] = "the ledger's lock could not be taken";
      ledger.TakeLockWarning(note, sizeof(note));
      view->lock_held = true;
      view->lock_note = note;
    }
    char damage[256] = "";
    view->damage = ledger.CheckDamage(/*locked=*/false, damage, sizeof(damage));
    view->first_damage = damage;
    CopyLedgerNumbers(ledger, view);
  }
  // /proc is read after the lock is given back; the name the process had
  // when it joined stands in when /proc does not show it.
  for (ProcessRow& row : view->processes) {
    char comm[budget::kCommBytes];
    if (row.same_pid_ns && budget::ReadComm(row.pid, comm)) row.command = comm;
  }
}

void PrintText(const NodeView& v, FILE* out) {
  fprintf(out, "Node ledger %s (%s)\n", report::Printable(v.path).c_str(),
          v.shared ? "shared by the users of its group" : "per user");
  if (v.damage > 0) {
    fprintf(out, "DAMAGED: %s%s; the numbers below cannot be trusted.\n",
            report::Printable(v.first_damage).c_str(),
            v.damage > 1 ? (" (and " + std::to_string(v.damage - 1) + " more)").c_str() : "");
  }
  if (v.lock_held) {
    fprintf(out, "Read without the lock (%s): dead processes were not reclaimed.\n",
            report::Printable(v.lock_note).c_str());
  } else if (!v.reclaimed_now_checked) {
    fprintf(out, "Read-only access: dead processes were not reclaimed.\n");
  } else if (v.reclaimed_now > 0) {
    fprintf(out, "Reclaimed %u dead process%s holding %s.\n", v.reclaimed_now,
            v.reclaimed_now == 1 ? "" : "es", FormatBytes(v.reclaimed_now_bytes).c_str());
  }
  fprintf(out, "Node budget %s, pinned %s, headroom %s, %zu process%s.\n",
          FormatBytes(v.budget).c_str(), FormatBytes(v.pinned).c_str(),
          FormatBytes(v.headroom()).c_str(), v.processes.size(),
          v.processes.size() == 1 ? "" : "es");
  fprintf(out, "Pinned by owner:");
  for (int o = 0; o < kOwnerCount; ++o) {
    fprintf(out, "%s %s %s", o == 0 ? "" : ",", budget::OwnerName(static_cast<Owner>(o)),
            FormatBytes(v.by_owner[o]).c_str());
  }
  fprintf(out, "\n");
  fprintf(out,
          "Since the ledger was created: grants %" PRIu64 ", denials %" PRIu64
          ", fallbacks %" PRIu64 ", evictions %" PRIu64 " (%s), lock recoveries %" PRIu64
          ", dead processes reclaimed %" PRIu64 " (%s).\n",
          v.grants, v.denials, v.fallbacks, v.evictions, FormatBytes(v.evicted_bytes).c_str(),
          v.recoveries, v.reclaimed_processes, FormatBytes(v.reclaimed_bytes).c_str());
  if (v.processes.empty()) return;
  fprintf(out,
          "\n%8s  %-15s  %-8s  %10s  %10s  %10s  %10s  %10s  %10s  %10s  %10s  %8s  %7s  "
          "%9s  %9s\n",
          "PID", "COMMAND", "POLICY", "PROG_ALLOC", "PROG_REG", "PROG_VMM", "PROG_POOL", "PIN_POOL",
          "PIN_CACHE", "TOTAL", "BUDGET", "GRANTS", "DENIALS", "FALLBACKS", "EVICTIONS");
  for (const ProcessRow& r : v.processes) {
    fprintf(out,
            "%8u  %-15s  %-8s  %10s  %10s  %10s  %10s  %10s  %10s  %10s  %10s  %8" PRIu64
            "  %7" PRIu64 "  %9" PRIu64 "  %9" PRIu64 "%s\n",
            r.pid, report::Printable(r.command).c_str(), PolicyText(r.policy),
            FormatBytes(r.bytes[0]).c_str(), FormatBytes(r.bytes[1]).c_str(),
            FormatBytes(r.bytes[4]).c_str(), FormatBytes(r.bytes[5]).c_str(),
            FormatBytes(r.bytes[2]).c_str(), FormatBytes(r.bytes[3]).c_str(),
            FormatBytes(r.total).c_str(),
            r.process_budget == 0 ? "none" : FormatBytes(r.process_budget).c_str(), r.grants,
            r.denials, r.fallbacks, r.evictions, r.same_pid_ns ? "" : "  (other pid namespace)");
  }
}

void JsonOwners(const uint64_t (&bytes)[kOwnerCount], JsonWriter* json) {
  json->BeginObject();
  for (int o = 0; o < kOwnerCount; ++o) {
    json->Key(budget::OwnerName(static_cast<Owner>(o)));
    json->Uint(bytes[o]);
  }
  json->EndObject();
}

// The "damage" member: what the ledger's check found, null when nothing.
void JsonDamage(const NodeView& v, JsonWriter* json) {
  json->Key("damage");
  if (v.damage == 0) {
    json->Null();
  } else {
    json->BeginObject();
    json->Key("problems");
    json->Uint(v.damage);
    json->Key("first");
    json->String(v.first_damage);
    json->EndObject();
  }
}

// The "reclaimed_now" member: what this look reclaimed, null when it could
// not (read-only access).
void JsonReclaimedNow(const NodeView& v, JsonWriter* json) {
  json->Key("reclaimed_now");
  if (v.reclaimed_now_checked) {
    json->BeginObject();
    json->Key("processes");
    json->Uint(v.reclaimed_now);
    json->Key("bytes");
    json->Uint(v.reclaimed_now_bytes);
    json->EndObject();
  } else {
    json->Null();  // read-only access: nothing was reclaimed
  }
}

// The "counters" member: the ledger's decision counters.
void JsonCounters(const NodeView& v, JsonWriter* json) {
  const std::pair<const char*, uint64_t> counters[] = {
      {"grants", v.grants},
      {"denials", v.denials},
      {"fallbacks", v.fallbacks},
      {"evictions", v.evictions},
      {"evicted_bytes", v.evicted_bytes},
      {"lock_recoveries", v.recoveries},
      {"reclaimed_processes", v.reclaimed_processes},
      {"reclaimed_bytes", v.reclaimed_bytes},
  };
  json->Key("counters");
  json->BeginObject();
  for (const auto& [name, value] : counters) {
    json->Key(name);
    json->Uint(value);
  }
  json->EndObject();
}

// One element of "processes": a process holding a slot, and its share.
void JsonProcess(const ProcessRow& r, JsonWriter* json) {
  json->BeginObject();
  json->Key("pid");
  json->Uint(r.pid);
  json->Key("command");
  json->String(r.command);
  json->Key("same_pid_namespace");
  json->Bool(r.same_pid_ns);
  json->Key("policy");
  json->String(PolicyText(r.policy));
  json->Key("pinned_bytes");
  json->Uint(r.total);
  json->Key("pinned_by_owner");
  JsonOwners(r.bytes, json);
  const std::pair<const char*, uint64_t> fields[] = {
      {"process_budget_bytes", r.process_budget},
      {"grants", r.grants},
      {"denials", r.denials},
      {"fallbacks", r.fallbacks},
      {"evictions", r.evictions},
      {"evicted_bytes", r.evicted_bytes},
  };
  for (const auto& [name, value] : fields) {
    json->Key(name);
    json->Uint(value);
  }
  json->EndObject();
}

void PrintJson(const NodeView& v, FILE* out) {
  std::string text;
  JsonWriter json(&text);
  json.BeginObject();
  json.Key("ledger");
  json.String(v.path);
  json.Key("exists");
  json.Bool(true);
  json.Key("shared");
  json.Bool(v.shared);
  JsonDamage(v, &json);
  json.Key("lock_held");
  json.Bool(v.lock_held);
  json.Key("layout_version");
  json.Uint(budget::kLedgerVersion);
  JsonReclaimedNow(v, &json);
  json.Key("node_budget_bytes");
  json.Uint(v.budget);
  json.Key("pinned_bytes");
  json.Uint(v.pinned);
  json.Key("headroom_bytes");
  json.Uint(v.headroom());
  json.Key("pinned_by_owner");
  JsonOwners(v.by_owner, &json);
  JsonCounters(v, &json);
  json.Key("processes");
  json.BeginArray();
  for (const ProcessRow& r : v.processes) {
    JsonProcess(r, &json);
  }
  json.EndArray();
  json.EndObject();
  fprintf(out, "%s\n", text.c_str());
}

// The PINSHIM_LEDGER_SHARED and PINSHIM_LEDGER_PATH settings the library
// would see here.
void LedgerFromConfig(StatusRequest* request) {
  auto config = std::make_unique<Config>();
  auto errors = std::make_unique<ConfigErrors>();
  ConfigInput input = {};
  input.envp = environ;
  ParseConfig(input, config.get(),
              errors.get());  // an invalid setting keeps its default
  request->shared = config->ledger_shared;
  request->ledger_path = config->ledger_path;
}

}  // namespace

void PrintStatusHelp(FILE* out) {
  fprintf(out, "usage: pinshim status [--json] [--shared] [--ledger PATH]\n\n");
  PrintWrapped(out,
               "Shows the node ledger that enforce mode keeps when a node budget is "
               "set (PINSHIM_NODE_BUDGET): every process in it with its command, "
               "its pinned bytes by owner (program_alloc: cuMemHostAlloc and "
               "cuMemAllocHost; program_register: cuMemHostRegister; program_vmm: "
               "host-located cuMemCreate allocations; program_pool: what host "
               "memory pools reserved; pinshim_pool and pinshim_cache: pinshim's own pinning), its "
               "process budget and "
               "its counters, then the node budget, the node total and the "
               "headroom. Processes that died without leaving are reclaimed first.",
               0, 79);
  fprintf(out, "\nOptions:\n");
  fprintf(out, "  --json\n");
  PrintWrapped(out, "print JSON instead of a table; byte counts are exact.", 6, 79);
  fprintf(out, "  --shared\n");
  PrintWrapped(out,
               "show the ledger shared by the users of its group (the default when "
               "PINSHIM_LEDGER_SHARED=1).",
               6, 79);
  fprintf(out, "  --ledger PATH\n");
  PrintWrapped(out,
               "show the ledger at PATH instead of PINSHIM_LEDGER_PATH or the default "
               "/dev/shm/pinshim-ledger-<uid> (or /dev/shm/pinshim-ledger-shared).",
               6, 79);
  fprintf(out, "  -h, --help\n      show this help.\n\n");
  PrintWrapped(out,
               "Exit status: 0 when the ledger was shown or there is none; 2 for a "
               "bad option, or a ledger that cannot be read, belongs to another "
               "user (without --shared), is writable by users it must not trust or "
               "has another layout; 3 when it is damaged (shown, with what is wrong). "
               "Its lock is waited for 2 seconds at most.",
               0, 79);
}

int ShowStatus(const StatusRequest& request, FILE* out, FILE* err) {
  NodeView view;
  if (request.ledger_path.empty()) {
    char path[128];
    budget::DefaultLedgerPath(request.shared, request.uid, path, sizeof(path));
    view.path = path;
  } else {
    view.path = request.ledger_path;
  }
  budget::LedgerOpenOptions options;
  options.path = view.path.c_str();
  options.shared = request.shared;
  options.create = false;
  options.uid = request.uid;
  Ledger ledger;
  char message[640];
  switch (ledger.Open(options, message, sizeof(message))) {
    case LedgerOpen::kOk: break;
    case LedgerOpen::kMissing:
      if (request.json) {
        std::string text;
        JsonWriter json(&text);
        json.BeginObject();
        json.Key("ledger");
        json.String(view.path);
        json.Key("exists");
        json.Bool(false);
        json.EndObject();
        fprintf(out, "%s\n", text.c_str());
      } else {
        fprintf(out,
                "No node ledger at %s: no process with a node budget has run here "
                "since boot.\n",
                report::Printable(view.path).c_str());
      }
      return kExitOk;
    default:
      fprintf(err, "pinshim status: %s\n", report::Printable(message).c_str());
      return kExitProblem;
  }
  ReadLedger(ledger, &view);
  ledger.Close();
  if (request.json) {
    PrintJson(view, out);
  } else {
    PrintText(view, out);
  }
  if (view.lock_held)
    fprintf(err, "pinshim status: %s\n", report::Printable(view.lock_note).c_str());
  if (view.damage > 0) {
    fprintf(err, "pinshim status: node ledger %s is damaged: %s\n",
            report::Printable(view.path).c_str(), report::Printable(view.first_damage).c_str());
    return kExitDamaged;
  }
  return kExitOk;
}

int RunStatusCommand(int argc, char** argv) {
  StatusRequest request;
  request.uid = geteuid();
  LedgerFromConfig(&request);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      PrintStatusHelp(stdout);
      return kExitOk;
    } else if (arg == "--json") {
      request.json = true;
    } else if (arg == "--shared") {
      request.shared = true;
    } else if (arg == "--ledger" || arg.rfind("--ledger=", 0) == 0) {
      if (arg == "--ledger") {
        request.ledger_path = i + 1 < argc ? argv[++i] : "";
      } else {
        request.ledger_path = arg.substr(9);
      }
      if (request.ledger_path.empty()) {
        fprintf(stderr, "pinshim status: --ledger needs a PATH; see %s\n", "pinshim status --help");
        return kExitProblem;
      }
    } else {
      fprintf(stderr, "pinshim status: unknown option \"%s\"; see pinshim status --help\n",
              arg.c_str());
      return kExitProblem;
    }
  }
  return ShowStatus(request, stdout, stderr);
}

}  // namespace pinshim
