#include "analyzer/report/text_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "analyzer/report/format.h"

namespace pinshim {
namespace report {
namespace {

constexpr int kShortStackFrames = 6;

std::string Upper(const char* s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(toupper(c));
  return out;
}

std::string Scalar(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kNull: return "-";
    case Value::Kind::kBool: return v.bool_value() ? "yes" : "no";
    case Value::Kind::kInt:
      return FormatCount(static_cast<uint64_t>(v.int_value() < 0 ? 0 : v.int_value()));
    case Value::Kind::kDouble: {
      char buf[32];
      snprintf(buf, sizeof(buf), "%g", v.double_value());
      return buf;
    }
    case Value::Kind::kString: return v.string_value();
    case Value::Kind::kBytes: return FormatBytes(static_cast<uint64_t>(v.int_value()));
    case Value::Kind::kSeconds: return FormatSeconds(v.double_value());
    case Value::Kind::kSite: return v.has_site() ? v.site().Short() : "an unknown site";
    default: return "";
  }
}

bool IsScalar(const Value& v) {
  if (v.kind() == Value::Kind::kArray) {
    for (const Value& i : v.items()) {
      if (!IsScalar(i)) return false;
    }
    return true;
  }
  return v.kind() != Value::Kind::kObject;
}

std::string Words(const std::string& key) {
  std::string out = key;
  std::replace(out.begin(), out.end(), '_', ' ');
  return out;
}

std::string Inline(const Value& v) {
  if (v.kind() == Value::Kind::kArray) {
    std::string out;
    for (const Value& i : v.items()) out += (out.empty() ? "" : ", ") + Scalar(i);
    return out.empty() ? "none" : out;
  }
  if (v.kind() == Value::Kind::kObject) {
    std::string out;
    for (const auto& m : v.members()) {
      out += (out.empty() ? "" : ", ") + Words(m.first) + " " + Inline(m.second);
    }
    return out;
  }
  return Scalar(v);
}

void Evidence(const Value& ev, std::string* out) {
  std::string line;
  for (const auto& m : ev.members()) {
    if (!IsScalar(m.second) || m.second.kind() == Value::Kind::kSite) continue;
    line += (line.empty() ? "" : "; ") + Words(m.first) + " " + Inline(m.second);
  }
  if (!line.empty()) *out += "    evidence: " + Printable(line) + "\n";
  for (const auto& m : ev.members()) {
    if (m.second.kind() == Value::Kind::kSite) {
      *out += "    " + Words(m.first) + ": " + Printable(Scalar(m.second)) + "\n";
    } else if (!IsScalar(m.second)) {
      *out += "    " + Words(m.first) + ":\n";
      for (const Value& item : m.second.items()) {
        *out += "      - " + Printable(Inline(item)) + "\n";
      }
      if (m.second.kind() == Value::Kind::kObject) {
        *out += "      " + Printable(Inline(m.second)) + "\n";
      }
    }
  }
}

void ShortStack(const Site& site, std::string* out) {
  if (!site.known || site.stack.empty()) return;
  const bool python = site.IsPython();
  // A Python site: its own frame and its callers first, then what it
  // called into (library Python frames, then native ones).
  *out += python ? "    python stack:\n" : "    stack:\n";
  int shown = 0, hidden = 0;
  for (size_t i = 0; i < site.stack.size(); ++i) {
    const Frame& f = site.stack[i];
    if (python && !f.python) continue;
    if (static_cast<int>(i) < site.site_index ||
        (f.runtime && static_cast<int>(i) != site.site_index)) {
      if (!python) ++hidden;
      continue;
    }
    if (shown == kShortStackFrames) {
      *out += "      ...\n";
      break;
    }
    *out += "      " + Printable(f.Describe(true)) + (f.inlined ? " [inlined]" : "") + "\n";
    ++shown;
  }
  if (python) {
    std::string under;
    int listed = 0;
    for (int i = 0; i < site.site_index; ++i) {
      const Frame& f = site.stack[static_cast<size_t>(i)];
      if (f.runtime || (!f.python && f.library)) {
        ++hidden;
        continue;
      }
      if (listed == kShortStackFrames) {
        under += "      ...\n";
        break;
      }
      under += "      " + Printable(f.Describe(true)) + (f.inlined ? " [inlined]" : "") + "\n";
      ++listed;
    }
    if (!under.empty()) *out += "    under it, innermost first:\n" + under;
    if (hidden > 0) {
      *out += "      (" + std::to_string(hidden) +
              " frames in CUDA, pinshim, the C library and the Python interpreter not shown)\n";
    }
    return;
  }
  if (hidden > 0) {
    *out += "      (" + std::to_string(hidden) +
            " frames in CUDA, pinshim and the C library not shown)\n";
  }
}

std::string Moved(const ProcessSummary& s) {
  static const CopyDir kDirs[] = {CopyDir::kHostToDevice, CopyDir::kDeviceToHost,
                                  CopyDir::kHostToHost, CopyDir::kDeviceToDevice};
  std::string out;
  for (CopyDir d : kDirs) {
    int di = static_cast<int>(d);
    uint64_t total = 0;
    std::string parts;
    for (int k = 0; k < static_cast<int>(MemKind::kCount); ++k) {
      uint64_t b = s.bytes[di][k];
      if (s.copy_count[di][k] == 0) continue;
      total += b;
      parts += (parts.empty() ? "" : ", ") + std::string(MemKindName(static_cast<MemKind>(k))) +
               " " + FormatBytes(b);
    }
    bool any = false;
    for (int k = 0; k < static_cast<int>(MemKind::kCount); ++k) any |= s.copy_count[di][k] != 0;
    if (!any) continue;
    out += (out.empty() ? "" : "; ") + std::string(CopyDirName(d)) + " " + FormatBytes(total);
    if (d != CopyDir::kDeviceToDevice) out += " (" + parts + ")";
  }
  return out.empty() ? "nothing" : out;
}

// "budget: 10 granted, 2 denied, 1 fallback, 0 evictions (0 B evicted);
// process budget 64.0 MiB, node budget none": one fixed shape, whatever the
// counts, so that scripts can pick it apart.
std::string BudgetLine(const BudgetSummary& b) {
  auto budget = [](uint64_t bytes) {
    return bytes != 0 ? FormatBytes(bytes) : std::string("none");
  };
  return "budget: " + FormatCount(b.granted) + " granted, " + FormatCount(b.denied) + " denied, " +
         FormatCount(b.fallback) + " fallback, " + FormatCount(b.evictions) + " evictions (" +
         FormatBytes(b.evicted_bytes) + " evicted); process budget " + budget(b.process_budget) +
         ", node budget " + budget(b.node_budget);
}

std::string Percent(double share) {
  char buf[16];
  snprintf(buf, sizeof(buf), "%.0f%%", share * 100);
  return buf;
}

std::string Counted(uint64_t n, const char* one, const char* many) {
  return FormatCount(n) + " " + (n == 1 ? one : many);
}

// "cap 3, budget 1"
std::string ReasonCounts(const std::map<std::string, uint64_t>& by_reason) {
  std::string out;
  for (const auto& kv : by_reason) {
    out += (out.empty() ? "" : ", ") + kv.first + " " + FormatCount(kv.second);
  }
  return out;
}

std::string Refusals(const OwnPinningSummary& o, const char* part) {
  auto it = o.refusals.find(part);
  if (it == o.refusals.end() || it->second.empty()) return "";
  uint64_t n = 0;
  for (const auto& kv : it->second) n += kv.second;
  return "; refused " + Counted(n, "time", "times") + " (" + ReasonCounts(it->second) + ")";
}

const char* PartWords(const std::string& by) {
  if (by == "cache") return "registration cache";
  if (by == "pool") return "pool";
  if (by == "arena") return "arena";
  if (by == "refused") return "refused";
  if (by == "untracked") return "untracked memory";
  if (by == "mmap_region") return "mmap region";
  if (by == "larger_than_cap") return "larger than the cap";
  if (by == "cost_model") return "not worth pinning";
  return "memory pinshim pinned";
}

// The "pinshim's own pinning" section of one process in optimize mode.
// The pool's line, and its allocation-free pairs' times.
void PoolLines(const OwnPinningSummary& o, std::string* out) {
  const OptimizeCountersEvent& c = o.counters;
  const double pool_rate = o.PoolHitRate();
  *out += "      pool: " + Counted(c.pool_hits, "hit", "hits") + ", " +
          Counted(c.pool_misses, "miss", "misses") +
          (pool_rate >= 0 ? " (" + Percent(pool_rate) + " hit rate)" : std::string()) + ", " +
          Counted(c.pool_dedicated, "dedicated allocation", "dedicated allocations") +
          Refusals(o, "pool") + "\n";
  if (o.pinned_pairs != 0) {
    auto Micros = [](uint64_t ns) { return FormatSeconds(static_cast<double>(ns) * 1e-9); };
    *out += "        allocation + free: " + Micros(o.pair_ns.mean_ns) + " a pair on average (" +
            "allocation " + Micros(o.pair_alloc_ns.mean_ns) + ", free " +
            Micros(o.pair_free_ns.mean_ns) + "), median " + Micros(o.pair_ns.median_ns) +
            ", over " + Counted(o.pinned_pairs, "pair", "pairs") + "\n";
    if (o.growth_pairs != 0) {
      *out += "        of which " + Counted(o.growth_pairs, "pair", "pairs") + " grew the pool (" +
              Micros(o.growth_pair_ns) + " in all)";
      if (o.held_pairs != 0) {
        *out += "; the " + std::to_string(o.held_pairs) +
                " served from it: " + Micros(o.held_pair_ns.mean_ns) +
                " a pair on average, median " + Micros(o.held_pair_ns.median_ns);
      }
      *out += "\n";
    }
  }
}

// Staged copies' line, and the self-check's verdicts.
void StagedLines(const OwnPinningSummary& o, std::string* out) {
  if (o.staged_copies != 0) {
    char rate[64];
    snprintf(rate, sizeof(rate), "%.1f GB/s",
             o.staged_ns != 0 ? static_cast<double>(o.staged_bytes) / o.staged_ns : 0.0);
    *out += "      staged copies (pageable memory through pinned rings): " +
            Counted(o.staged_copies, "copy", "copies") + ", " + FormatBytes(o.staged_bytes) +
            " at " + rate + ", up to " + std::to_string(o.staged_workers_max) +
            " threads copying\n";
  }
  for (const PathVerdictRow& v : o.verdicts) {
    char line[256];
    snprintf(line, sizeof(line),
             "      self-check: %s %s %s copies from %s: %.1f GB/s against the driver's %.1f "
             "(%s copies on the path, %s on the driver's)%s\n",
             v.path.c_str(), v.sync ? "synchronous" : "asynchronous", v.dir.c_str(),
             v.size_from.c_str(), v.path_gbps, v.driver_gbps, FormatCount(v.path_copies).c_str(),
             FormatCount(v.driver_copies).c_str(),
             v.slower ? ": slower, so optimize mode stopped taking it there" : "");
    *out += line;
  }
}

// What pinshim dropped, and the page changes that made it drop pinning.
void DroppedLines(const OwnPinningSummary& o, std::string* out) {
  std::string dropped;
  for (const auto& kv : o.dropped_bytes) {
    dropped +=
        (dropped.empty() ? "" : ", ") + FormatBytes(kv.second) + " " + OwnDropWords(kv.first);
  }
  *out += "      dropped: " + (dropped.empty() ? std::string("nothing") : dropped) + "\n";
  if (!o.page_changes.empty()) {
    *out += "      pages the program changed under pinshim's pinning (dropped before the call):\n";
    for (const PageChangeDrop& d : o.page_changes) {
      *out += "        - " + Counted(d.times, "time", "times") + ", " + FormatBytes(d.bytes) +
              " of " + d.part + " memory " + (d.action == "retired" ? "retired" : "unpinned") +
              ": " + OwnDropWords(d.call) + ", at " + d.site.Short() + "\n";
    }
  }
}

// The buffers copied hot, by bytes copied, and how each was handled.
void HotBufferLines(const OwnPinningSummary& o, std::string* out) {
  if (o.hot_buffers == 0) {
    *out += "      buffers copied hot: none\n";
    return;
  }
  *out += "      buffers copied hot, by bytes copied:\n";
  for (const OwnPinningBuffer& b : o.buffers) {
    std::string what =
        b.alloc_id == 0 ? "untracked memory"
        : b.size != 0   ? "the " + FormatBytes(b.size) + " allocation at " + b.allocated_at.Short()
                        : "allocation " + std::to_string(b.alloc_id);
    *out += "        - " + FormatBytes(b.bytes_copied) + " in " +
            Counted(b.copies, "copy", "copies") + " of " + what + ", copied at " +
            Printable(b.copied_at.Short()) + "\n";
    *out += std::string("          ") + (b.pinned ? "pinned by pinshim (" : "left alone (") +
            PartWords(b.by) + (b.reason.empty() ? "" : ": " + b.reason) +
            "): " + Printable(b.detail) + "\n";
  }
  if (o.hot_buffers > o.buffers.size()) {
    *out += "        ... and " + FormatCount(o.hot_buffers - o.buffers.size()) + " more\n";
  }
}

void OwnPinningSection(const OwnPinningSummary& o, std::string* out) {
  const OptimizeCountersEvent& c = o.counters;
  *out += "    pinshim's own pinning (optimize mode):\n";
  std::string cap = !o.cap_known                ? "cap unknown"
                    : o.cap_bytes == UINT64_MAX ? "no cap"
                                                : "cap " + FormatBytes(o.cap_bytes);
  *out += "      pinned by pinshim: peak " + FormatBytes(o.peak_bytes) + ", at the end " +
          FormatBytes(o.final_bytes) + "; " + cap + "\n";
  if (!o.has_counters) {
    *out += "      (no counters record: optimize mode never started, or the process was killed)\n";
  }
  PoolLines(o, out);
  const double cache_rate = o.CacheHitRate();
  *out += "      registration cache: " +
          Counted(o.cache_buffers_registered, "buffer registered", "buffers registered") + " (" +
          Counted(c.cache_registrations, "registration", "registrations") + "); " +
          FormatCount(o.cache_copies_pinned) + " of " +
          FormatCount(o.cache_copies_pinned + o.cache_copies_pageable) +
          " copies of tracked pageable buffers served pinned" +
          (cache_rate >= 0 ? " (" + Percent(cache_rate) + ")" : std::string()) +
          Refusals(o, "cache") + "\n";
  *out += "      arena: " + Counted(c.arena_allocs, "allocation", "allocations") + " served" +
          Refusals(o, "arena") + "\n";
  StagedLines(o, out);
  DroppedLines(o, out);
  *out += "      estimated time saved: " + FormatSeconds(c.saved_copy_ns * 1e-9) + " in copies, " +
          FormatSeconds(c.saved_alloc_ns * 1e-9) + " in allocations\n";
  HotBufferLines(o, out);
}

std::string FrameworkTitle(const std::string& name) {
  if (name == "pytorch") return "PyTorch";
  if (name == "cupy") return "CuPy";
  if (name == "jax") return "JAX";
  if (name == "numpy") return "NumPy";
  if (name == "python") return "Python";
  return name;
}

std::string ProcessTitle(const ProcessReport& p) {
  std::string t = p.info.program.empty() ? std::string("unknown program") : p.info.program;
  t += "  pid " + std::to_string(p.info.pid);
  if (p.info.rank >= 0) t += "  rank " + std::to_string(p.info.rank);
  if (!p.info.hostname.empty()) t += "  on " + p.info.hostname;
  if (p.info.forked_from != 0) t += "  (forked from " + std::to_string(p.info.forked_from) + ")";
  if (!p.info.python.empty()) {
    t += "  Python " + p.info.python + (p.info.python_frames ? "" : " (Python frames off)");
  }
  return Printable(t);
}

}  // namespace

double ProcessDurationSeconds(const ProcessReport& p) {
  uint64_t start = p.info.start_monotonic_ns != 0 ? p.info.start_monotonic_ns : p.summary.first_ns;
  uint64_t end = p.summary.last_ns;
  return end > start ? (end - start) * 1e-9 : 0;
}

void WriteTextReport(const MergedReport& r, std::string* out) {
  int counts[3] = {0, 0, 0};
  for (const Finding& f : r.findings) ++counts[static_cast<int>(f.severity)];
  const double lost = TotalSecondsLost(r);
  char head[256];
  snprintf(head, sizeof(head),
           "pinshim report: %zu %s, %zu %s (%d error%s, %d warning%s, %d info), about %s lost\n",
           r.processes.size(), r.processes.size() == 1 ? "process" : "processes", r.findings.size(),
           r.findings.size() == 1 ? "finding" : "findings", counts[2], counts[2] == 1 ? "" : "s",
           counts[1], counts[1] == 1 ? "" : "s", counts[0], FormatSeconds(lost).c_str());
  *out += head;
  for (const std::string& p : r.problems) *out += "  unreadable: " + Printable(p) + "\n";
  *out += "\n";
  for (size_t i = 0; i < r.processes.size(); ++i) {
    const ProcessReport& p = r.processes[i];
    const ProcessSummary& s = p.summary;
    if (r.processes.size() > 1) *out += "[p" + std::to_string(i) + "] ";
    *out += ProcessTitle(p) + "\n";
    *out += "    duration " + FormatSeconds(ProcessDurationSeconds(p)) + ", " +
            FormatCount(s.copies) + " copies";
    if (s.failed_copies) *out += " (" + FormatCount(s.failed_copies) + " failed)";
    *out += ", " + FormatCount(s.pin_calls) + " pinned-memory calls, " + std::to_string(s.threads) +
            (s.threads == 1 ? " thread\n" : " threads\n");
    *out += "    moved: " + Moved(s) + "\n";
    *out += "    peak pinned " + FormatBytes(s.peak_pinned);
    if (s.peak_pinned_ns && p.info.start_monotonic_ns &&
        s.peak_pinned_ns >= p.info.start_monotonic_ns) {
      *out += " at " + FormatSeconds((s.peak_pinned_ns - p.info.start_monotonic_ns) * 1e-9);
    }
    if (s.peak_rss) *out += "; peak RSS " + FormatBytes(s.peak_rss);
    *out += "; " + std::to_string(p.findings.size()) +
            (p.findings.size() == 1 ? " finding\n" : " findings\n");
    if (s.budget.decisions != 0) *out += "    " + BudgetLine(s.budget) + "\n";
    if (p.own.optimize_mode) OwnPinningSection(p.own, out);
    *out += "    trace " + Printable(p.path) + (p.damage.empty() ? " (complete)\n" : "\n");
    if (!p.damage.empty()) *out += "    note: " + Printable(p.damage) + "\n";
    if (p.detail.ended) *out += "    detail: " + Printable(DetailEndLine(p)) + "\n";
    for (const std::string& sp : p.symbol_problems) *out += "    symbols: " + Printable(sp) + "\n";
  }
  if (r.findings.empty()) {
    *out += "\nNo findings.\n";
    return;
  }
  *out += "\nFindings, most severe first, then by estimated time lost:\n";
  for (size_t i = 0; i < r.findings.size(); ++i) {
    const Finding& f = r.findings[i];
    *out += "\n[" + std::to_string(i + 1) + "] " + Upper(SeverityName(f.severity)) + " " + f.rule;
    *out += f.seconds_lost > 0 ? "  est. " + FormatSeconds(f.seconds_lost) + " lost" : "";
    if (r.processes.size() > 1) {
      std::string procs;
      for (size_t k = 0; k < f.processes.size(); ++k) {
        procs += (k ? ", p" : "p") + std::to_string(f.processes[k]);
        if (k < f.seconds_lost_by_process.size() && f.seconds_lost_by_process[k] > 0) {
          procs += " (" + FormatSeconds(f.seconds_lost_by_process[k]) + ")";
        }
      }
      *out += "  in " + procs;
    }
    // Names in these texts come from the traced program: escaped.
    *out += "\n    " + Printable(f.explanation) + "\n";
    *out += "    at " + Printable(f.site.Short()) + "\n";
    Evidence(f.evidence, out);
    ShortStack(f.site, out);
    *out += (f.generic_fix.empty() ? std::string("    fix: ")
                                   : "    fix (" + FrameworkTitle(f.framework) + "): ") +
            Printable(f.fix) + "\n";
  }
}

}  // namespace report
}  // namespace pinshim
