#include "analyzer/report/analysis.h"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "analyzer/report/format.h"
#include "analyzer/report/symbolizer.h"

namespace pinshim {
namespace report {
namespace {

class Replay : public EventVisitor {
 public:
  Replay(std::vector<std::unique_ptr<Rule>>* rules, OwnPinningTracker* own, SyncModel* sync)
      : rules_(*rules), own_(own), sync_(sync) {}

  // Also fills these (both or neither), which must outlive the replay.
  void KeepSiteTables(CallSiteTable* sites, PinnedSeries* series) {
    sites_ = sites;
    series_ = series;
  }

  void OnEvent(const Event& e) override {
    // The model of what has finished goes first: rules ask it about the
    // moment of the event they see.
    sync_->OnEvent(e, e.type == trace::EventType::kCopy && PageLocked(e));
    if (summary_.first_ns == 0 || e.time_ns < summary_.first_ns) summary_.first_ns = e.time_ns;
    uint64_t end = e.time_ns + e.duration_ns;
    if (end > summary_.last_ns) summary_.last_ns = end;
    if (e.tid != last_tid_) {
      last_tid_ = e.tid;
      NoteThread(e.tid);
    }
    switch (e.type) {
      case trace::EventType::kCopy: Copy(e); break;
      case trace::EventType::kPin: Pin(e); break;
      case trace::EventType::kHostAlloc: Host(e); break;
      case trace::EventType::kSync:
        for (auto& r : rules_) r->OnSync(e);
        break;
      case trace::EventType::kMisuse: {
        const PinnedAlloc* owner = PinnedAt(e.ptr);
        for (auto& r : rules_) r->OnMisuse(e, owner);
        break;
      }
      case trace::EventType::kSample: Sample(e); break;
      case trace::EventType::kBudgetDecision: BudgetDecision(e); break;
      case trace::EventType::kOwnPin: own_->OnOwnPin(e); break;
      case trace::EventType::kOptimizeCounters: own_->OnCounters(e); break;
      case trace::EventType::kPathVerdict: own_->OnPathVerdict(e); break;
      default: break;
    }
  }

  void End() {
    std::vector<const PinnedAlloc*> live;
    for (const auto& kv : pinned_) live.push_back(&kv.second);
    for (auto& r : rules_) r->OnEnd(live, summary_.last_ns);
  }

  const ProcessSummary& summary() const { return summary_; }

  // A capped trace's copies after its detail ended, into the totals and
  // the rules that use them.
  void Totals(const SiteTotals& t) {
    for (const trace::SiteCellFields& c : t.cells) {
      summary_.copies += c.copies;
      const bool failed = (c.bits & trace::kCopyHasResult) != 0;
      const CopyDir dir = static_cast<CopyDir>(c.bits & trace::kCopyDirMask);
      const uint64_t host = dir == CopyDir::kDeviceToHost ? (c.kinds >> 3) & 7 : c.kinds & 7;
      const int kind = dir == CopyDir::kDeviceToDevice ? static_cast<int>(MemKind::kDevice)
                                                       : static_cast<int>(host);
      if (sites_ != nullptr) {
        CopyCell cell;
        cell.copies = c.copies;
        cell.failed = failed ? c.copies : 0;
        cell.bytes = failed ? 0 : c.bytes;
        cell.async_copies = (c.bits & trace::kCopyAsync) ? c.copies : 0;
        cell.call_ns = c.call_ns;
        sites_->AddCopies(static_cast<uint32_t>(c.stack), dir, static_cast<MemKind>(kind), cell);
      }
      if (failed) {
        summary_.failed_copies += c.copies;
        continue;
      }
      summary_.bytes[static_cast<int>(dir) & 3][kind] += c.bytes;
      summary_.copy_count[static_cast<int>(dir) & 3][kind] += c.copies;
      for (auto& r : rules_) r->OnCopyTotals(c);
    }
    summary_.copies += t.header.lost;  // counted, without a direction or kind
    if (t.header.last_ns > summary_.last_ns) summary_.last_ns = t.header.last_ns;
  }

 private:
  // Whether a copy's host side is the program's page-locked memory: its own
  // allocations and registrations, and its pinned allocations served from
  // optimize mode's pool (pinshim's other pinning is waited for by optimize
  // mode, so the program sees pageable semantics there).
  bool PageLocked(const Event& e) {
    if (!e.IsHostDeviceCopy()) return false;
    MemKind k = e.HostKind();
    if (IsProgramPageLocked(k)) return true;
    return k == MemKind::kPinnedByPinshim && PinnedAt(e.host_ptr) != nullptr;
  }

  PinnedAlloc* PinnedAt(uint64_t addr) {
    if (pinned_.empty()) return nullptr;
    auto it = pinned_.upper_bound(addr);
    if (it == pinned_.begin()) return nullptr;
    --it;
    PinnedAlloc& a = it->second;
    return addr - a.ptr < (a.bytes == 0 ? 1 : a.bytes) ? &a : nullptr;
  }

  // A copy that runs past the end of the pinned allocation it starts in
  // (legal for VMM host mappings side by side in one reservation) uses each
  // allocation it reaches too, for its part of the bytes.
  void UseFollowing(const PinnedAlloc& first, uint64_t addr, uint64_t bytes) {
    const uint64_t end = addr + bytes;
    for (auto it = pinned_.upper_bound(first.ptr); it != pinned_.end() && it->first < end; ++it) {
      PinnedAlloc& a = it->second;
      ++a.copies;
      a.copy_bytes += std::min(end, a.ptr + a.bytes) - a.ptr;
    }
  }

  void Copy(const Event& e) {
    ++summary_.copies;
    if (sites_ != nullptr) sites_->OnCopy(e);
    if (e.result != 0) {
      ++summary_.failed_copies;
      return;
    }
    int dir = static_cast<int>(e.dir) & 3;
    int kind =
        static_cast<int>(e.dir == CopyDir::kDeviceToDevice ? MemKind::kDevice : e.HostKind());
    summary_.bytes[dir][kind] += e.bytes;
    ++summary_.copy_count[dir][kind];
    PinnedAlloc* pinned = nullptr;
    MemKind hk = e.HostKind();
    if (e.dir != CopyDir::kDeviceToDevice && hk != MemKind::kPageable && hk != MemKind::kDevice) {
      pinned = PinnedAt(e.host_ptr);
      if (pinned != nullptr) {
        ++pinned->copies;
        pinned->copy_bytes += e.bytes;
        UseFollowing(*pinned, e.host_ptr, e.bytes);
      }
    }
    const HostAlloc* host = nullptr;
    if (e.alloc_id != 0) {
      auto it = host_.find(e.alloc_id);
      if (it != host_.end()) host = &it->second;
    }
    for (auto& r : rules_) r->OnCopy(e, pinned, host);
    own_->OnCopy(e, pinned);
  }

  void Pin(const Event& e) {
    ++summary_.pin_calls;
    summary_.pin_call_ns += e.duration_ns;
    if (sites_ != nullptr) sites_->OnPin(e);
    if (e.result != 0) return;
    if (e.op == PinOp::kAlloc || e.op == PinOp::kRegister) {
      PinnedAlloc a;
      a.seq = ++pin_seq_;
      a.ptr = e.ptr;
      a.bytes = e.bytes;
      a.flags = e.flags;
      a.registered = e.op == PinOp::kRegister;
      a.stack = e.stack;
      a.device = e.device;
      a.time_ns = e.time_ns;
      a.call_ns = e.duration_ns;
      // A range already here was released without the trace seeing it.
      auto old = pinned_.find(e.ptr);
      if (old != pinned_.end()) {
        summary_.pinned_now -= std::min(summary_.pinned_now, old->second.bytes);
        pinned_.erase(old);
      }
      if (!a.registered) own_->OnPinnedAlloc(e);
      PinnedAlloc& stored = pinned_[e.ptr] = a;
      summary_.pinned_now += a.bytes;
      NotePinned(summary_.pinned_now, e.time_ns);
      for (auto& r : rules_) r->OnPin(e, stored);
    } else {
      auto it = pinned_.find(e.ptr);
      const PinnedAlloc* a = it == pinned_.end() ? nullptr : &it->second;
      for (auto& r : rules_) r->OnUnpin(e, a);
      own_->OnUnpin(e, a);
      uint64_t bytes = a != nullptr ? a->bytes : e.bytes;
      summary_.pinned_now -= std::min(summary_.pinned_now, bytes);
      if (it != pinned_.end()) pinned_.erase(it);
      if (series_ != nullptr) series_->Note(e.time_ns, summary_.pinned_now);
    }
  }

  void Host(const Event& e) {
    own_->OnHostAlloc(e);
    if (e.is_free) {
      auto it = host_.find(e.alloc_id);
      const HostAlloc* a = it == host_.end() ? nullptr : &it->second;
      for (auto& r : rules_) r->OnHostFree(e, a);
      if (it != host_.end()) host_.erase(it);
      return;
    }
    HostAlloc& a = host_[e.alloc_id];
    a.id = e.alloc_id;
    a.ptr = e.ptr;
    a.bytes = e.bytes;
    a.stack = e.stack;
    a.time_ns = e.time_ns;
    a.source = e.source;
    for (auto& r : rules_) r->OnHostAlloc(e, a);
  }

  void Sample(const Event& e) {
    ++summary_.samples;
    NotePinned(e.pinned_program + e.registered_program + e.pinned_pinshim, e.time_ns);
    if (e.rss_bytes > summary_.peak_rss) summary_.peak_rss = e.rss_bytes;
    for (auto& r : rules_) r->OnSample(e);
  }

  void BudgetDecision(const Event& e) {
    BudgetSummary& b = summary_.budget;
    ++b.decisions;
    switch (e.budget_decision) {
      case trace::BudgetDecision::kGranted: ++b.granted; break;
      case trace::BudgetDecision::kDenied:
        ++b.denied;
        b.refused_bytes += e.bytes;
        break;
      case trace::BudgetDecision::kFallback:
        ++b.fallback;
        b.refused_bytes += e.bytes;
        break;
    }
    if (e.evictor_called) {
      ++b.evictions;
      b.evicted_bytes += e.evicted_bytes;
    }
    b.process_budget = e.process_budget;
    b.node_budget = e.node_budget;
    for (auto& r : rules_) r->OnBudgetDecision(e);
  }

  // Threads interleave in the merged stream: a few are looked up linearly
  // before the set is used.
  void NoteThread(uint32_t tid) {
    for (uint32_t t : recent_tids_) {
      if (t == tid) return;
    }
    if (tids_.insert(tid).second) ++summary_.threads;
    recent_tids_[recent_next_++ % 8] = tid;
  }

  void NotePinned(uint64_t bytes, uint64_t t) {
    if (series_ != nullptr) series_->Note(t, bytes);
    if (bytes > summary_.peak_pinned) {
      summary_.peak_pinned = bytes;
      summary_.peak_pinned_ns = t;
    }
  }

  std::vector<std::unique_ptr<Rule>>& rules_;
  OwnPinningTracker* own_;
  SyncModel* sync_;
  CallSiteTable* sites_ = nullptr;
  PinnedSeries* series_ = nullptr;
  ProcessSummary summary_;
  std::map<uint64_t, PinnedAlloc> pinned_;
  std::unordered_map<uint64_t, HostAlloc> host_;
  std::unordered_set<uint32_t> tids_;
  uint32_t recent_tids_[8] = {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u};
  uint32_t recent_next_ = 0;
  uint32_t last_tid_ = ~0u;
  uint64_t pin_seq_ = 0;
};

class SiteResolver {
 public:
  SiteResolver(Symbolizer* sym, bool symbolize) : sym_(sym), symbolize_(symbolize) {}

  std::shared_ptr<const Site> Get(uint32_t stack) {
    auto it = cache_.find(stack);
    if (it != cache_.end()) return it->second;
    auto site = std::make_shared<Site>();
    if (symbolize_ && stack != 0) *site = MakeSite(sym_->Symbolize(stack));
    cache_[stack] = site;
    return site;
  }

  void Resolve(Value* v) {
    if (v->kind() == Value::Kind::kSite) v->set_site(Get(v->stack()));
    for (auto& m : v->mutable_members()) Resolve(&m.second);
    for (auto& i : v->mutable_items()) Resolve(&i);
  }

  // Replaces each "{site:N}" with the short form of stack N's site.
  std::string Expand(const std::string& text) {
    std::string out;
    size_t pos = 0;
    for (;;) {
      size_t open = text.find("{site:", pos);
      if (open == std::string::npos) break;
      size_t close = text.find('}', open);
      if (close == std::string::npos) break;
      out.append(text, pos, open - pos);
      uint32_t id = static_cast<uint32_t>(strtoul(text.c_str() + open + 6, nullptr, 10));
      out += Get(id)->Short();
      pos = close + 1;
    }
    out.append(text, pos, std::string::npos);
    return out;
  }

 private:
  Symbolizer* sym_;
  bool symbolize_;
  std::unordered_map<uint32_t, std::shared_ptr<const Site>> cache_;
};

DetailEnd DescribeDetailEnd(const SiteTotals& t, const std::vector<std::unique_ptr<Rule>>& rules) {
  DetailEnd d;
  const trace::SiteTotalsFields& h = t.header;
  d.ended = true;
  d.end_ns = h.detail_end_ns;
  d.cap_bytes = h.detail_bytes;
  d.copies = h.copies;
  d.spilled = h.spilled;
  d.lost = h.lost;
  d.pins = h.pins;
  d.host_allocs = h.host_allocs;
  d.syncs = h.syncs;
  d.misuses = h.misuses;
  d.others = h.others;
  for (const auto& r : rules) {
    if (!r->UsesSiteTotals()) d.rules_detail_only.push_back(r->id());
  }
  return d;
}

}  // namespace

Site MakeSite(const SymbolizedStack& s) {
  Site site;
  if (s.frames.empty()) return site;
  site.known = true;
  site.stack = s.frames;
  site.site_index = s.site >= 0 ? s.site : 0;
  const Frame& f = s.frames[site.site_index];
  site.function = f.function;
  site.file = f.file;
  site.line = f.line;
  site.module = f.module;
  site.offset = f.offset;
  site.note = f.note;
  site.python = s.python;
  return site;
}

std::string DetailEndLine(const ProcessReport& p) {
  const DetailEnd& d = p.detail;
  if (!d.ended) return "";
  std::string at = "";
  if (d.end_ns >= p.info.start_monotonic_ns && p.info.start_monotonic_ns != 0) {
    at = " at " + FormatSeconds((d.end_ns - p.info.start_monotonic_ns) * 1e-9);
  }
  std::string line = "per-event detail ended" + at + " (the trace reached its cap of " +
                     FormatBytes(d.cap_bytes) + "); the " + FormatCount(d.copies) +
                     " copies after it are counted per call site, and the copy totals and the "
                     "copy rules include them";
  const uint64_t other = d.pins + d.host_allocs + d.syncs + d.misuses + d.others;
  if (other != 0) {
    line += "; " + FormatCount(other) + " other events after it (" + FormatCount(d.pins) +
            " pinned-memory calls, " + FormatCount(d.host_allocs) + " host allocations, " +
            FormatCount(d.syncs) + " synchronizations, " + FormatCount(d.misuses) +
            " misuse records) were counted only";
  }
  if (!d.rules_detail_only.empty()) {
    line += "; these rules judged the detail only and could not decide after it:";
    for (size_t i = 0; i < d.rules_detail_only.size(); ++i) {
      line += (i == 0 ? " " : ", ") + d.rules_detail_only[i];
    }
  }
  if (d.spilled != 0) {
    line += "; " + FormatCount(d.spilled) +
            " copies found the site table full and are counted without their site";
  }
  if (d.lost != 0) line += "; " + FormatCount(d.lost) + " copies are counted without their kind";
  return line;
}

void SortFindings(std::vector<Finding>* findings) {
  std::stable_sort(findings->begin(), findings->end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    if (a.seconds_lost != b.seconds_lost) return a.seconds_lost > b.seconds_lost;
    if (a.rule != b.rule) return a.rule < b.rule;
    return a.site.Key() < b.site.Key();
  });
}

ProcessReport AnalyzeTrace(const TraceReader& trace, const AnalysisOptions& options) {
  ProcessReport report;
  report.path = trace.path();
  report.info = trace.process();
  std::vector<std::unique_ptr<Rule>> rules = MakeAllRules(&options.model, &options.rules);
  HotSiteCollector* hot_sites = nullptr;
  if (options.hot_sites) {
    auto collector = std::make_unique<HotSiteCollector>();
    collector->Configure(&options.model, &options.rules);
    hot_sites = collector.get();
    rules.push_back(std::move(collector));
  }
  SyncModel sync;
  sync.Begin(trace);
  for (auto& r : rules) {
    r->UseSyncModel(&sync);
    r->Begin(report.info);
  }
  OwnPinningTracker own(&options.model, &options.rules);
  own.Begin(report.info);
  Replay replay(&rules, &own, &sync);
  if (options.site_tables) {
    report.pinned_series.Begin(report.info.start_monotonic_ns);
    replay.KeepSiteTables(&report.sites, &report.pinned_series);
  }
  trace.ForEachEvent(&replay);
  if (const SiteTotals* totals = trace.site_totals()) {
    replay.Totals(*totals);
    report.detail = DescribeDetailEnd(*totals, rules);
  }
  replay.End();
  report.own = own.Finish();
  report.summary = replay.summary();
  report.events = trace.event_count();
  RuleContext ctx{&report.info,    &options.model, &options.rules,
                  &report.summary, &trace,         report.summary.last_ns};
  for (auto& r : rules) r->Finish(ctx, &report.findings);

  Symbolizer sym(&trace);
  sym.UseArchive(options.archive);
  SiteResolver resolver(&sym, options.symbolize);
  for (Finding& f : report.findings) {
    if (f.stack != 0) f.site = *resolver.Get(f.stack);
    resolver.Resolve(&f.evidence);
    f.explanation = resolver.Expand(f.explanation);
    f.fix = resolver.Expand(f.fix);
    f.processes = {0};
    f.seconds_lost_by_process = {f.seconds_lost};
  }
  for (OwnPinningBuffer& b : report.own.buffers) {
    if (b.alloc_stack != 0) b.allocated_at = *resolver.Get(b.alloc_stack);
    if (b.copy_stack != 0) b.copied_at = *resolver.Get(b.copy_stack);
  }
  for (PageChangeDrop& d : report.own.page_changes) {
    if (d.stack != 0) d.site = *resolver.Get(d.stack);
  }
  if (options.site_tables) {
    for (const Finding& f : report.findings) report.sites.Mention(f.stack);
    report.sites.Resolve(trace, [&](uint32_t stack) { return *resolver.Get(stack); });
  }
  SortFindings(&report.findings);
  if (hot_sites != nullptr) {
    report.hot_sites = hot_sites->Collect(trace, options.symbolize ? &sym : nullptr);
  }
  report.symbol_problems = sym.Problems();
  report.damage = trace.DescribeDamage();
  report.complete = trace.damage().has_end;
  return report;
}

}  // namespace report
}  // namespace pinshim
