#include "analyzer/report/json_report.h"

#include <map>
#include <string>

#include "analyzer/report/json_writer.h"
#include "analyzer/report/text_report.h"

namespace pinshim {
namespace report {
namespace {

void WriteFrame(const Frame& f, JsonWriter* w) {
  w->BeginObject();
  w->Key("function");
  f.function.empty() ? w->Null() : w->String(f.function);
  w->Key("file");
  f.file.empty() ? w->Null() : w->String(f.file);
  w->Key("line");
  f.line > 0 ? w->Int(f.line) : w->Null();
  w->Key("module");
  w->String(f.module);
  w->Key("offset");
  w->Uint(f.offset);
  w->Key("inlined");
  w->Bool(f.inlined);
  w->Key("runtime");
  w->Bool(f.runtime);
  w->Key("python");
  w->Bool(f.python);
  w->Key("library");
  w->Bool(f.library);
  if (!f.note.empty()) {
    w->Key("note");
    w->String(f.note);
  }
  w->EndObject();
}

void WriteSite(const Site& s, JsonWriter* w) {
  if (!s.known) {
    w->Null();
    return;
  }
  w->BeginObject();
  w->Key("function");
  s.function.empty() ? w->Null() : w->String(s.function);
  w->Key("file");
  s.file.empty() ? w->Null() : w->String(s.file);
  w->Key("line");
  s.line > 0 ? w->Int(s.line) : w->Null();
  w->Key("module");
  w->String(s.module);
  w->Key("offset");
  w->Uint(s.offset);
  w->Key("python");
  w->Bool(s.IsPython());
  if (s.python != trace::PythonStatus::kNone) {
    w->Key("python_status");
    w->String(PythonStatusName(s.python));
  }
  if (!s.note.empty()) {
    w->Key("note");
    w->String(s.note);
  }
  w->EndObject();
}

void WriteValue(const Value& v, JsonWriter* w) {
  switch (v.kind()) {
    case Value::Kind::kNull: w->Null(); break;
    case Value::Kind::kBool: w->Bool(v.bool_value()); break;
    case Value::Kind::kInt: w->Int(v.int_value()); break;
    case Value::Kind::kBytes: w->Uint(static_cast<uint64_t>(v.int_value())); break;
    case Value::Kind::kDouble:
    case Value::Kind::kSeconds: w->Double(v.double_value()); break;
    case Value::Kind::kString: w->String(v.string_value()); break;
    case Value::Kind::kSite:
      if (v.has_site()) {
        WriteSite(v.site(), w);
      } else {
        w->Null();
      }
      break;
    case Value::Kind::kArray:
      w->BeginArray();
      for (const Value& i : v.items()) WriteValue(i, w);
      w->EndArray();
      break;
    case Value::Kind::kObject:
      w->BeginObject();
      for (const auto& m : v.members()) {
        w->Key(m.first);
        WriteValue(m.second, w);
      }
      w->EndObject();
      break;
  }
}

void WriteCounts(const std::map<std::string, uint64_t>& counts, JsonWriter* w) {
  w->BeginObject();
  for (const auto& kv : counts) {
    w->Key(kv.first);
    w->Uint(kv.second);
  }
  w->EndObject();
}

void WriteRefusals(const OwnPinningSummary& o, const char* part, JsonWriter* w) {
  w->Key("refusals");
  auto it = o.refusals.find(part);
  WriteCounts(it == o.refusals.end() ? std::map<std::string, uint64_t>() : it->second, w);
}

void WriteRate(double rate, JsonWriter* w) { rate < 0 ? w->Null() : w->Double(rate); }

// The "detail_end" member of a process: where its trace's detail ended;
// null when the trace was not capped (SCHEMA.md, "detail_end").
void WriteDetailEnd(const ProcessReport& p, JsonWriter* w) {
  const DetailEnd& d = p.detail;
  if (!d.ended) {
    w->Null();
    return;
  }
  w->BeginObject();
  w->Key("time_s");
  d.end_ns >= p.info.start_monotonic_ns&& p.info.start_monotonic_ns != 0
      ? w->Double((d.end_ns - p.info.start_monotonic_ns) * 1e-9)
      : w->Null();
  const std::pair<const char*, uint64_t> counts[] = {
      {"cap_bytes", d.cap_bytes},          {"copies_after", d.copies},
      {"spilled_copies", d.spilled},       {"uncounted_kind_copies", d.lost},
      {"pin_calls_after", d.pins},         {"host_allocations_after", d.host_allocs},
      {"synchronizations_after", d.syncs}, {"misuse_records_after", d.misuses},
      {"other_events_after", d.others},
  };
  for (const auto& c : counts) {
    w->Key(c.first);
    w->Uint(c.second);
  }
  w->Key("rules_detail_only");
  w->BeginArray();
  for (const std::string& r : d.rules_detail_only) w->String(r);
  w->EndArray();
  w->Key("text");
  w->String(DetailEndLine(p));
  w->EndObject();
}

// {"mean": us, "median": us} of `count` pairs under `key`; null when there
// are none.
void WriteCallTimes(const char* key, const OwnPinningSummary::CallTimes& t, uint64_t count,
                    JsonWriter* w) {
  w->Key(key);
  if (count == 0) {
    w->Null();
    return;
  }
  w->BeginObject();
  w->Key("mean");
  w->Double(static_cast<double>(t.mean_ns) / 1000.0);
  w->Key("median");
  w->Double(static_cast<double>(t.median_ns) / 1000.0);
  w->EndObject();
}

// The "pinned_bytes" member: peak, final and cap.
void WritePinnedBytes(const OwnPinningSummary& o, JsonWriter* w) {
  w->Key("pinned_bytes");
  w->BeginObject();
  w->Key("peak");
  w->Uint(o.peak_bytes);
  w->Key("final");
  w->Uint(o.final_bytes);
  w->Key("cap");
  o.cap_known&& o.cap_bytes != UINT64_MAX ? w->Uint(o.cap_bytes) : w->Null();
  w->EndObject();
}

// The "pool" member: the pinned pool's hits, pairs and refusals.
void WritePool(const OwnPinningSummary& o, JsonWriter* w) {
  const OptimizeCountersEvent& c = o.counters;
  w->Key("pool");
  w->BeginObject();
  w->Key("hits");
  w->Uint(c.pool_hits);
  w->Key("misses");
  w->Uint(c.pool_misses);
  w->Key("hit_rate");
  WriteRate(o.PoolHitRate(), w);
  w->Key("dedicated");
  w->Uint(c.pool_dedicated);
  w->Key("pairs");
  w->Uint(o.pinned_pairs);
  WriteCallTimes("pair_us", o.pair_ns, o.pinned_pairs, w);
  WriteCallTimes("alloc_us", o.pair_alloc_ns, o.pinned_pairs, w);
  WriteCallTimes("free_us", o.pair_free_ns, o.pinned_pairs, w);
  w->Key("growth_pairs");
  w->Uint(o.growth_pairs);
  w->Key("growth_ms");
  w->Double(static_cast<double>(o.growth_pair_ns) / 1e6);
  w->Key("held_pairs");
  w->Uint(o.held_pairs);
  WriteCallTimes("held_pair_us", o.held_pair_ns, o.held_pairs, w);
  WriteRefusals(o, "pool", w);
  w->EndObject();
}

// The "cache" member: the registration cache's work and what it declined.
void WriteCache(const OwnPinningSummary& o, JsonWriter* w) {
  const OptimizeCountersEvent& c = o.counters;
  w->Key("cache");
  w->BeginObject();
  w->Key("buffers_registered");
  w->Uint(o.cache_buffers_registered);
  w->Key("registrations");
  w->Uint(c.cache_registrations);
  w->Key("copies_served_pinned");
  w->Uint(o.cache_copies_pinned);
  w->Key("copies_pageable");
  w->Uint(o.cache_copies_pageable);
  w->Key("hit_rate");
  WriteRate(o.CacheHitRate(), w);
  w->Key("hits");
  w->Uint(c.cache_hits);
  w->Key("evictions");
  w->Uint(c.cache_evictions);
  w->Key("releases");
  w->Uint(c.cache_releases);
  WriteRefusals(o, "cache", w);
  w->Key("declined");
  w->BeginObject();
  w->Key("untracked");
  w->Uint(c.cache_declined_untracked);
  w->Key("source");
  w->Uint(c.cache_declined_source);
  w->Key("sub_allocation");
  w->Uint(c.cache_declined_sub_allocation);
  w->Key("too_large");
  w->Uint(c.cache_declined_too_large);
  w->EndObject();
  w->EndObject();
}

// The "arena" member.
void WriteArena(const OwnPinningSummary& o, JsonWriter* w) {
  const OptimizeCountersEvent& c = o.counters;
  w->Key("arena");
  w->BeginObject();
  w->Key("allocations");
  w->Uint(c.arena_allocs);
  w->Key("copies");
  w->Uint(c.arena_copies);
  WriteRefusals(o, "arena", w);
  w->EndObject();
}

// The "staged" member: staged copies and their speed.
void WriteStaged(const OwnPinningSummary& o, JsonWriter* w) {
  w->Key("staged");
  w->BeginObject();
  w->Key("copies");
  w->Uint(o.staged_copies);
  w->Key("bytes");
  w->Uint(o.staged_bytes);
  w->Key("gbps");
  o.staged_ns != 0 ? w->Double(static_cast<double>(o.staged_bytes) / o.staged_ns) : w->Null();
  w->Key("most_workers");
  w->Uint(o.staged_workers_max);
  w->EndObject();
}

// One element of "self_check": a path's verdict against the driver.
void WriteVerdict(const PathVerdictRow& v, JsonWriter* w) {
  w->BeginObject();
  w->Key("path");
  w->String(v.path);
  w->Key("dir");
  w->String(v.dir);
  w->Key("sync");
  w->Bool(v.sync);
  w->Key("size_class_from_bytes");
  // A class beyond the ones a recorder writes (a damaged or crafted trace)
  // has no size: null, not a shift past 64 bits.
  if (v.size_class >= 8) {
    w->Null();
  } else {
    w->Uint(v.size_class == 0 ? 0 : uint64_t{1} << (16 + 2 * v.size_class));
  }
  w->Key("verdict");
  w->String(v.slower ? "slower" : "faster");
  w->Key("path_gbps");
  w->Double(v.path_gbps);
  w->Key("driver_gbps");
  w->Double(v.driver_gbps);
  w->Key("path_copies");
  w->Uint(v.path_copies);
  w->Key("driver_copies");
  w->Uint(v.driver_copies);
  w->Key("losses");
  w->Uint(v.losses);
  w->EndObject();
}

// One element of "page_changes": what page changes dropped, by call and part.
void WritePageChangeDrop(const PageChangeDrop& d, JsonWriter* w) {
  w->BeginObject();
  w->Key("call");
  w->String(d.call);
  w->Key("part");
  w->String(d.part);
  w->Key("action");
  w->String(d.action);
  w->Key("detail");
  w->Uint(d.detail);
  w->Key("times");
  w->Uint(d.times);
  w->Key("bytes");
  w->Uint(d.bytes);
  w->Key("site");
  WriteSite(d.site, w);
  w->EndObject();
}

// The "estimated_seconds_saved" member.
void WriteSavedSeconds(const OwnPinningSummary& o, JsonWriter* w) {
  const OptimizeCountersEvent& c = o.counters;
  w->Key("estimated_seconds_saved");
  w->BeginObject();
  w->Key("copies");
  w->Double(c.saved_copy_ns * 1e-9);
  w->Key("allocations");
  w->Double(c.saved_alloc_ns * 1e-9);
  w->EndObject();
}

// One element of "buffers": a hot buffer and how it was handled.
void WriteBuffer(const OwnPinningBuffer& b, JsonWriter* w) {
  w->BeginObject();
  w->Key("allocation");
  b.alloc_id != 0 ? w->Uint(b.alloc_id) : w->Null();
  w->Key("address");
  w->Uint(b.address);
  w->Key("size");
  b.size != 0 ? w->Uint(b.size) : w->Null();
  w->Key("allocated_at");
  WriteSite(b.allocated_at, w);
  w->Key("copied_at");
  WriteSite(b.copied_at, w);
  w->Key("copies");
  w->Uint(b.copies);
  w->Key("bytes_copied");
  w->Uint(b.bytes_copied);
  w->Key("copies_pinned");
  w->Uint(b.copies_pinned);
  w->Key("handled");
  w->String(b.pinned ? "pinned" : "left_alone");
  w->Key("by");
  w->String(b.by);
  w->Key("reason");
  b.reason.empty() ? w->Null() : w->String(b.reason);
  w->Key("unpinned");
  b.unpinned.empty() ? w->Null() : w->String(b.unpinned);
  w->Key("refusals");
  w->Uint(b.refusals);
  w->Key("detail");
  w->String(b.detail);
  w->EndObject();
}

// The "optimize" member of a process: pinshim's own pinning.
void WriteOwnPinning(const OwnPinningSummary& o, JsonWriter* w) {
  w->BeginObject();
  w->Key("counters_recorded");
  w->Bool(o.has_counters);
  WritePinnedBytes(o, w);
  WritePool(o, w);
  WriteCache(o, w);
  WriteArena(o, w);
  w->Key("dropped_bytes");
  WriteCounts(o.dropped_bytes, w);
  WriteStaged(o, w);
  w->Key("self_check");
  w->BeginArray();
  for (const PathVerdictRow& v : o.verdicts) WriteVerdict(v, w);
  w->EndArray();
  w->Key("page_changes");
  w->BeginArray();
  for (const PageChangeDrop& d : o.page_changes) WritePageChangeDrop(d, w);
  w->EndArray();
  WriteSavedSeconds(o, w);
  w->Key("hot_buffers");
  w->Uint(o.hot_buffers);
  w->Key("buffers");
  w->BeginArray();
  for (const OwnPinningBuffer& b : o.buffers) WriteBuffer(b, w);
  w->EndArray();
  w->EndObject();
}

// The "bytes_moved" member: bytes copied by direction and memory kind.
void WriteBytesMoved(const ProcessSummary& s, JsonWriter* w) {
  w->Key("bytes_moved");
  w->BeginObject();
  for (int d = 0; d < 4; ++d) {
    bool any = false;
    for (int k = 0; k < static_cast<int>(MemKind::kCount); ++k) any |= s.copy_count[d][k] != 0;
    if (!any) continue;
    w->Key(CopyDirName(static_cast<CopyDir>(d)));
    w->BeginObject();
    for (int k = 0; k < static_cast<int>(MemKind::kCount); ++k) {
      if (s.copy_count[d][k] == 0) continue;
      w->Key(MemKindName(static_cast<MemKind>(k)));
      w->Uint(s.bytes[d][k]);
    }
    w->EndObject();
  }
  w->EndObject();
}

// The "budget" member's value: enforce mode's decisions, null without any.
void WriteBudget(const BudgetSummary& b, JsonWriter* w) {
  if (b.decisions == 0) {
    w->Null();
  } else {
    w->BeginObject();
    w->Key("decisions");
    w->Uint(b.decisions);
    w->Key("granted");
    w->Uint(b.granted);
    w->Key("denied");
    w->Uint(b.denied);
    w->Key("fallback");
    w->Uint(b.fallback);
    w->Key("evictions");
    w->Uint(b.evictions);
    w->Key("evicted_bytes");
    w->Uint(b.evicted_bytes);
    w->Key("refused_bytes");
    w->Uint(b.refused_bytes);
    w->Key("process_budget");
    b.process_budget ? w->Uint(b.process_budget) : w->Null();
    w->Key("node_budget");
    b.node_budget ? w->Uint(b.node_budget) : w->Null();
    w->EndObject();
  }
}

void WriteProcess(const ProcessReport& p, size_t index, JsonWriter* w) {
  const ProcessInfo& i = p.info;
  const ProcessSummary& s = p.summary;
  w->BeginObject();
  w->Key("index");
  w->Uint(index);
  w->Key("trace");
  w->String(p.path);
  w->Key("program");
  w->String(i.program);
  w->Key("command_line");
  w->BeginArray();
  for (const std::string& a : i.command_line) w->String(a);
  w->EndArray();
  w->Key("pid");
  w->Uint(i.pid);
  w->Key("parent_pid");
  w->Uint(i.parent_pid);
  w->Key("forked_from");
  i.forked_from ? w->Uint(i.forked_from) : w->Null();
  w->Key("host");
  w->String(i.hostname);
  w->Key("rank");
  i.rank >= 0 ? w->Int(i.rank) : w->Null();
  w->Key("mode");
  w->String(i.mode);
  w->Key("python");
  i.python.empty() ? w->Null() : w->String(i.python);
  w->Key("python_frames");
  w->Bool(i.python_frames);
  w->Key("duration_seconds");
  w->Double(ProcessDurationSeconds(p));
  w->Key("events");
  w->Uint(p.events);
  w->Key("copies");
  w->Uint(s.copies);
  w->Key("failed_copies");
  w->Uint(s.failed_copies);
  w->Key("threads");
  w->Uint(s.threads);
  WriteBytesMoved(s, w);
  w->Key("peak_pinned_bytes");
  w->Uint(s.peak_pinned);
  w->Key("peak_rss_bytes");
  w->Uint(s.peak_rss);
  w->Key("physical_bytes");
  w->Uint(i.physical_bytes);
  w->Key("budget_bytes");
  i.budget_bytes ? w->Uint(i.budget_bytes) : w->Null();
  w->Key("budget");
  WriteBudget(s.budget, w);
  w->Key("optimize");
  if (p.own.optimize_mode) {
    WriteOwnPinning(p.own, w);
  } else {
    w->Null();
  }
  w->Key("trace_complete");
  w->Bool(p.complete);
  w->Key("damage");
  p.damage.empty() ? w->Null() : w->String(p.damage);
  w->Key("detail_end");
  WriteDetailEnd(p, w);
  w->Key("symbol_problems");
  w->BeginArray();
  for (const std::string& sp : p.symbol_problems) w->String(sp);
  w->EndArray();
  w->Key("findings");
  w->Uint(p.findings.size());
  w->EndObject();
}

}  // namespace

void WriteEvidenceJson(const Value& evidence, JsonWriter* w) { WriteValue(evidence, w); }

void WriteJsonReport(const MergedReport& r, std::string* out) {
  JsonWriter w(out);
  int counts[3] = {0, 0, 0};
  for (const Finding& f : r.findings) ++counts[static_cast<int>(f.severity)];
  const double lost = TotalSecondsLost(r);
  w.BeginObject();
  w.Key("version");
  w.Int(kJsonReportVersion);
  w.Key("tool");
  w.String("pinshim report");
  w.Key("bandwidth_model");
  w.String(r.model_source);
  w.Key("summary");
  w.BeginObject();
  w.Key("processes");
  w.Uint(r.processes.size());
  w.Key("findings");
  w.Uint(r.findings.size());
  w.Key("errors");
  w.Int(counts[2]);
  w.Key("warnings");
  w.Int(counts[1]);
  w.Key("infos");
  w.Int(counts[0]);
  w.Key("estimated_seconds_lost");
  w.Double(lost);
  w.EndObject();
  w.Key("problems");
  w.BeginArray();
  for (const std::string& p : r.problems) w.String(p);
  w.EndArray();
  w.Key("processes");
  w.BeginArray();
  for (size_t i = 0; i < r.processes.size(); ++i) WriteProcess(r.processes[i], i, &w);
  w.EndArray();
  w.Key("findings");
  w.BeginArray();
  for (const Finding& f : r.findings) {
    w.BeginObject();
    w.Key("rule");
    w.String(f.rule);
    w.Key("severity");
    w.String(SeverityName(f.severity));
    w.Key("explanation");
    w.String(f.explanation);
    w.Key("site");
    WriteSite(f.site, &w);
    w.Key("stack");
    w.BeginArray();
    for (const Frame& fr : f.site.stack) WriteFrame(fr, &w);
    w.EndArray();
    w.Key("evidence");
    WriteValue(f.evidence, &w);
    w.Key("estimated_seconds_lost");
    w.Double(f.seconds_lost);
    w.Key("fix");
    w.String(f.fix);
    w.Key("framework");
    f.framework.empty() ? w.Null() : w.String(f.framework);
    if (!f.generic_fix.empty()) {
      w.Key("generic_fix");
      w.String(f.generic_fix);
    }
    w.Key("processes");
    w.BeginArray();
    for (int p : f.processes) w.Int(p);
    w.EndArray();
    w.Key("seconds_lost_by_process");
    w.BeginArray();
    for (double s : f.seconds_lost_by_process) w.Double(s);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  out->push_back('\n');
}

}  // namespace report
}  // namespace pinshim
