#include "analyzer/report/export.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "analyzer/report/json_report.h"
#include "analyzer/report/json_writer.h"
#include "analyzer/report/text_report.h"
#include "shim/core/safe_file.h"

namespace pinshim {
namespace report {
namespace {

// One table being written: a line per row, each a compact JSON object.
class Table {
 public:
  JsonWriter& Begin() {
    writer_ = JsonWriter(&text_, 0);
    writer_.BeginObject();
    return writer_;
  }
  void End() {
    writer_.EndObject();
    text_.push_back('\n');
    ++rows_;
  }
  std::string& text() { return text_; }
  uint64_t rows() const { return rows_; }

 private:
  std::string text_;
  JsonWriter writer_{&text_, 0};
  uint64_t rows_ = 0;
};

void NullOr(JsonWriter* w, uint64_t v) { v != 0 ? w->Uint(v) : w->Null(); }
void NullOr(JsonWriter* w, const std::string& v) { v.empty() ? w->Null() : w->String(v); }

// Within a process, the findings whose losses are time in the same copies
// count once, as TotalSecondsLost (merge.h) counts them: their group.
std::string LossGroup(const Finding& f) {
  if (!f.loss_in_copies) return "";
  return ShortHash('g', f.site.known ? f.site.Key() : "#" + std::to_string(f.stack));
}

double ProcessSecondsLost(const ProcessReport& p) {
  double total = 0;
  std::map<std::string, double> largest;
  for (const Finding& f : p.findings) {
    const std::string group = LossGroup(f);
    if (group.empty()) {
      total += f.seconds_lost;
    } else {
      largest[group] = std::max(largest[group], f.seconds_lost);
    }
  }
  for (const auto& kv : largest) total += kv.second;
  return total;
}

const std::string& KeyOf(const ProcessReport& p, uint32_t stack) {
  static const std::string kNone;
  auto it = p.sites.stacks().find(stack);
  return it == p.sites.stacks().end() ? kNone : it->second.key;
}

void ProcessRow(const ProcessReport& p, const std::string& key, Table* t) {
  const ProcessInfo& i = p.info;
  const ProcessSummary& s = p.summary;
  JsonWriter& w = t->Begin();
  w.Key("process");
  w.String(key);
  w.Key("trace");
  w.String(p.path);
  w.Key("host");
  w.String(i.hostname);
  w.Key("program");
  w.String(i.program);
  w.Key("pid");
  w.Uint(i.pid);
  w.Key("parent_pid");
  w.Uint(i.parent_pid);
  w.Key("rank");
  i.rank >= 0 ? w.Int(i.rank) : w.Null();
  w.Key("start_unix_ns");
  NullOr(&w, i.start_realtime_ns);
  w.Key("duration_seconds");
  w.Double(ProcessDurationSeconds(p));
  w.Key("mode");
  w.String(i.mode);
  w.Key("version");
  w.String(i.version);
  w.Key("physical_bytes");
  w.Uint(i.physical_bytes);
  w.Key("memlock_limit_bytes");
  i.memlock_limit != UINT64_MAX ? w.Uint(i.memlock_limit) : w.Null();
  w.Key("budget_bytes");
  NullOr(&w, i.budget_bytes != 0 ? i.budget_bytes : s.budget.process_budget);
  w.Key("node_budget_bytes");
  NullOr(&w, s.budget.node_budget);
  w.Key("budget_denied");
  w.Uint(s.budget.denied + s.budget.fallback);
  w.Key("events");
  w.Uint(p.events);
  w.Key("copies");
  w.Uint(s.copies);
  w.Key("failed_copies");
  w.Uint(s.failed_copies);
  uint64_t bytes = 0;
  for (int d = 0; d < kCopyDirs; ++d) {
    for (int k = 0; k < kMemKinds; ++k) bytes += s.bytes[d][k];
  }
  w.Key("copy_bytes");
  w.Uint(bytes);
  w.Key("peak_pinned_bytes");
  w.Uint(s.peak_pinned);
  w.Key("peak_rss_bytes");
  w.Uint(s.peak_rss);
  w.Key("threads");
  w.Uint(s.threads);
  w.Key("findings");
  w.Uint(p.findings.size());
  w.Key("estimated_seconds_lost");
  w.Double(ProcessSecondsLost(p));
  w.Key("trace_complete");
  w.Bool(p.complete);
  w.Key("damage");
  NullOr(&w, p.damage);
  w.Key("symbol_problems");
  w.Uint(p.symbol_problems.size());
  t->End();
}

void SiteRow(const CallSiteStats& s, Table* t) {
  const Frame& f = s.site.stack[static_cast<size_t>(s.site.site_index)];
  JsonWriter& w = t->Begin();
  w.Key("site");
  w.String(s.key);
  w.Key("kind");
  w.String(s.key.substr(0, 1) == "y" ? "python" : "native");
  w.Key("build_id");
  NullOr(&w, s.build_id);
  w.Key("module");
  NullOr(&w, f.module);
  w.Key("offset");
  f.python ? w.Null() : w.Uint(f.offset);
  w.Key("function");
  NullOr(&w, f.function);
  w.Key("file");
  NullOr(&w, f.file);
  w.Key("line");
  f.line > 0 ? w.Int(f.line) : w.Null();
  w.Key("short");
  w.String(s.site.Short());
  t->End();
}

void CopyRows(const std::string& process, const CallSiteStats& s, Table* t) {
  for (int d = 0; d < kCopyDirs; ++d) {
    for (int k = 0; k < kMemKinds; ++k) {
      const CopyCell& c = s.copy[d][k];
      if (c.copies == 0) continue;
      JsonWriter& w = t->Begin();
      w.Key("process");
      w.String(process);
      w.Key("site");
      NullOr(&w, s.key);
      w.Key("direction");
      w.String(CopyDirName(static_cast<CopyDir>(d)));
      w.Key("memory");
      w.String(MemKindName(static_cast<MemKind>(k)));
      w.Key("copies");
      w.Uint(c.copies);
      w.Key("failed");
      w.Uint(c.failed);
      w.Key("async_copies");
      w.Uint(c.async_copies);
      w.Key("bytes");
      w.Uint(c.bytes);
      w.Key("call_seconds");
      w.Double(c.call_ns * 1e-9);
      t->End();
    }
  }
}

void PinRow(const std::string& process, const CallSiteStats& s, Table* t) {
  const PinCell& p = s.pin;
  if (p.allocations + p.registrations + p.failed == 0) return;
  JsonWriter& w = t->Begin();
  w.Key("process");
  w.String(process);
  w.Key("site");
  NullOr(&w, s.key);
  w.Key("allocations");
  w.Uint(p.allocations);
  w.Key("registrations");
  w.Uint(p.registrations);
  w.Key("failed");
  w.Uint(p.failed);
  w.Key("bytes");
  w.Uint(p.bytes);
  w.Key("largest_bytes");
  w.Uint(p.largest);
  w.Key("call_seconds");
  w.Double(p.call_ns * 1e-9);
  t->End();
}

void FindingRow(const std::string& process, const ProcessReport& p, const Finding& f, Table* t) {
  JsonWriter& w = t->Begin();
  w.Key("process");
  w.String(process);
  w.Key("rule");
  w.String(f.rule);
  w.Key("severity");
  w.String(SeverityName(f.severity));
  w.Key("site");
  NullOr(&w, KeyOf(p, f.stack));
  w.Key("site_short");
  w.String(f.site.Short());
  w.Key("estimated_seconds_lost");
  w.Double(f.seconds_lost);
  w.Key("loss_group");
  NullOr(&w, LossGroup(f));
  w.Key("framework");
  NullOr(&w, f.framework);
  w.Key("explanation");
  w.String(f.explanation);
  w.Key("fix");
  w.String(f.fix);
  w.Key("evidence");
  WriteEvidenceJson(f.evidence, &w);
  t->End();
}

void SeriesRows(const std::string& process, const ProcessReport& p, Table* t) {
  for (const auto& point : p.pinned_series.Points()) {
    JsonWriter& w = t->Begin();
    w.Key("process");
    w.String(process);
    w.Key("seconds");
    w.Double(point.first * 1e-9);
    w.Key("unix_ns");
    NullOr(&w, p.info.start_realtime_ns != 0 ? p.info.start_realtime_ns + point.first : 0);
    w.Key("bucket_seconds");
    w.Double(p.pinned_series.width_ns() * 1e-9);
    w.Key("pinned_bytes");
    w.Uint(point.second);
    t->End();
  }
}

// Of the processes' definitions of one site, a symbolized one.
void NoteSite(const CallSiteStats& s, std::map<std::string, const CallSiteStats*>* sites) {
  if (s.key.empty()) return;
  const CallSiteStats*& kept = (*sites)[s.key];
  if (kept == nullptr || (kept->site.file.empty() && !s.site.file.empty())) kept = &s;
}

std::string Manifest(const std::map<std::string, Table>& tables, size_t problems,
                     const std::string& model_source) {
  std::string out;
  JsonWriter w(&out);
  w.BeginObject();
  w.Key("schema");
  w.String("pinshim-export");
  w.Key("version");
  w.Int(kExportSchemaVersion);
  w.Key("bandwidth_model");
  w.String(model_source);
  w.Key("rows");
  w.BeginObject();
  for (const auto& kv : tables) {
    w.Key(kv.first);
    w.Uint(kv.second.rows());
  }
  w.EndObject();
  w.Key("problems");
  w.Uint(problems);
  w.EndObject();
  out.push_back('\n');
  return out;
}

}  // namespace

std::string ProcessKey(const ProcessInfo& i) {
  return ShortHash('p', i.hostname + "\n" + std::to_string(i.pid) + "\n" +
                            std::to_string(i.start_realtime_ns) + "\n" +
                            std::to_string(i.start_monotonic_ns));
}

std::map<std::string, std::string> ExportTables(const std::vector<ProcessReport>& processes,
                                                const std::vector<ExportProblem>& problems,
                                                const std::string& model_source) {
  std::map<std::string, Table> t;
  for (const char* name :
       {"processes", "sites", "copies", "pinned_sites", "findings", "pinned_series", "problems"}) {
    t[name];
  }
  std::map<std::string, const CallSiteStats*> sites;
  for (const ProcessReport& p : processes) {
    const std::string key = ProcessKey(p.info);
    ProcessRow(p, key, &t["processes"]);
    // Stacks in id order, so that the same trace exports the same bytes.
    std::vector<std::pair<uint32_t, const CallSiteStats*>> order;
    for (const auto& kv : p.sites.stacks()) order.emplace_back(kv.first, &kv.second);
    std::sort(order.begin(), order.end());
    for (const auto& s : order) {
      NoteSite(*s.second, &sites);
      CopyRows(key, *s.second, &t["copies"]);
      PinRow(key, *s.second, &t["pinned_sites"]);
    }
    for (const Finding& f : p.findings) FindingRow(key, p, f, &t["findings"]);
    SeriesRows(key, p, &t["pinned_series"]);
  }
  for (const auto& kv : sites) SiteRow(*kv.second, &t["sites"]);
  for (const ExportProblem& problem : problems) {
    JsonWriter& w = t["problems"].Begin();
    w.Key("trace");
    NullOr(&w, problem.trace);
    w.Key("problem");
    w.String(problem.reason);
    t["problems"].End();
  }
  std::map<std::string, std::string> out;
  out["manifest.json"] = Manifest(t, problems.size(), model_source);
  for (auto& kv : t) out[kv.first + ".jsonl"] = std::move(kv.second.text());
  return out;
}

bool WriteExport(const std::string& dir, const std::map<std::string, std::string>& tables,
                 std::string* error) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || mkdir(dir.c_str(), 0755) != 0) {
      *error = "cannot create the directory " + dir + ": " + strerror(errno);
      return false;
    }
  } else if (!S_ISDIR(st.st_mode)) {
    *error = dir + " is not a directory" +
             (S_ISLNK(st.st_mode) ? std::string(" (a symbolic link, which is not followed)") : "");
    return false;
  }
  // The tables first and the manifest last: a reader that finds the
  // manifest finds the tables it counts.
  std::vector<const std::pair<const std::string, std::string>*> order;
  for (const auto& kv : tables) {
    if (kv.first != "manifest.json") order.push_back(&kv);
  }
  auto manifest = tables.find("manifest.json");
  if (manifest != tables.end()) order.push_back(&*manifest);
  for (const auto* kv : order) {
    const std::string path = dir + "/" + kv->first;
    const int err = ReplaceWithData(path.c_str(), 0644, kv->second.data(), kv->second.size());
    if (err != 0) {
      *error = "cannot write " + path + ": " + SafeFileReason(err);
      return false;
    }
  }
  return true;
}

}  // namespace report
}  // namespace pinshim
