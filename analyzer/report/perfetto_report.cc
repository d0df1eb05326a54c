#include "analyzer/report/perfetto_report.h"

#include <cstdio>
#include <set>
#include <string>
#include <unordered_map>

#include "analyzer/report/format.h"
#include "analyzer/report/json_writer.h"
#include "analyzer/report/symbolizer.h"

namespace pinshim {
namespace report {
namespace {

constexpr size_t kFlushBytes = 4 << 20;
// Findings get tracks of their own, numbered from here (above any thread id).
constexpr uint64_t kFindingTrackBase = 2000000000ull;

// The call sites of one trace's stacks, symbolized once each, and the
// file's stack table ("stackFrames") their frames go into.
class StackNames {
 public:
  StackNames(const TraceReader* trace, const SymbolArchive* archive, uint64_t pid,
             std::string* frames)
      : sym_(trace), pid_(pid), frames_(frames) {
    sym_.UseArchive(archive);
  }

  // The short call site of `stack` ("" for none), and the id of its
  // innermost frame in the stack table ("" when it has no frames).
  const std::pair<std::string, std::string>& Get(uint32_t stack) {
    auto it = names_.find(stack);
    if (it != names_.end()) return it->second;
    const SymbolizedStack& s = sym_.Symbolize(stack);
    std::pair<std::string, std::string> name;
    if (!s.frames.empty()) {
      name.first = MakeSite(s).Short();
      name.second = AddFrames(stack, s);
    }
    return names_[stack] = name;
  }

 private:
  // Adds the stack's frames, outermost first, each the parent of the next.
  std::string AddFrames(uint32_t stack, const SymbolizedStack& s) {
    std::string parent;
    for (size_t i = s.frames.size(); i-- > 0;) {
      const std::string id = std::to_string(pid_) + ":" + std::to_string(stack) + ":" +
                             std::to_string(s.frames.size() - 1 - i);
      *frames_ += frames_->empty() ? "\n" : ",\n";
      JsonWriter::Escape(id, frames_);
      *frames_ += ":{\"name\":";
      JsonWriter::Escape(s.frames[i].Describe(true), frames_);
      *frames_ += ",\"category\":";
      JsonWriter::Escape(s.frames[i].module, frames_);
      if (!parent.empty()) {
        *frames_ += ",\"parent\":";
        JsonWriter::Escape(parent, frames_);
      }
      *frames_ += "}";
      parent = id;
    }
    return parent;
  }

  Symbolizer sym_;
  uint64_t pid_;
  std::string* frames_;
  std::unordered_map<uint32_t, std::pair<std::string, std::string>> names_;
};

class TimelineWriter : public EventVisitor {
 public:
  TimelineWriter(const TraceReader* trace, const ProcessReport* report, uint64_t pid,
                 uint64_t origin_ns, StackNames* stacks, std::string* buf, FILE* out)
      : trace_(trace),
        report_(report),
        pid_(pid),
        origin_(origin_ns),
        stacks_(stacks),
        buf_(buf),
        out_(out) {
    for (const Finding& f : report->findings) {
      if (f.stack != 0) spans_[f.stack] = {0, 0};
    }
  }

  void Begin() {
    const ProcessInfo& p = report_->info;
    std::string name = (p.program.empty() ? std::string("process") : p.program) + " (pid " +
                       std::to_string(p.pid) +
                       (p.rank >= 0 ? ", rank " + std::to_string(p.rank) : "") + ")";
    Meta("process_name", 0, name);
    if (p.budget_bytes != 0) {
      Budget(p.start_monotonic_ns != 0 ? p.start_monotonic_ns : origin_, p.budget_bytes);
    }
  }

  void End() {
    if (budget_ != 0 && last_ns_ != 0) Budget(last_ns_, budget_);
    for (size_t i = 0; i < report_->findings.size(); ++i) FindingSpan(i);
  }

  void OnEvent(const Event& e) override {
    if (e.time_ns > last_ns_) last_ns_ = e.time_ns;
    if (e.stack != 0) NoteSpan(e);
    if (threads_.insert(e.tid).second)
      Meta("thread_name", e.tid, "thread " + std::to_string(e.tid));
    switch (e.type) {
      case trace::EventType::kCopy: Copy(e); break;
      case trace::EventType::kPin: Pin(e); break;
      case trace::EventType::kSync: Sync(e); break;
      case trace::EventType::kMisuse: Misuse(e); break;
      case trace::EventType::kSample: Sample(e); break;
      case trace::EventType::kHostAlloc: HostAlloc(e); break;
      case trace::EventType::kBudgetDecision: BudgetDecision(e); break;
      default: break;
    }
    if (buf_->size() > kFlushBytes) Flush();
  }

  bool Flush() {
    bool ok = fwrite(buf_->data(), 1, buf_->size(), out_) == buf_->size();
    buf_->clear();
    ok_ = ok_ && ok;
    return ok;
  }
  bool ok() const { return ok_; }

 private:
  void Start(const char* ph, const std::string& name, const char* cat, uint32_t tid, uint64_t t) {
    *buf_ += ",\n{\"ph\":\"";
    *buf_ += ph;
    *buf_ += "\",\"name\":";
    JsonWriter::Escape(name, buf_);
    *buf_ += ",\"cat\":\"";
    *buf_ += cat;
    *buf_ += "\",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(tid) +
             ",\"ts\":" + Micros(t);
  }

  // Closes an event's args with its call site, and the event with its stack
  // in the file's stack table ("sf").
  void EndWithStack(uint32_t stack) {
    if (stack == 0) {
      *buf_ += "}}";
      return;
    }
    const auto& name = stacks_->Get(stack);
    if (!name.first.empty()) {
      *buf_ += ",\"site\":";
      JsonWriter::Escape(name.first, buf_);
    }
    *buf_ += "}";
    if (!name.second.empty()) {
      *buf_ += ",\"sf\":";
      JsonWriter::Escape(name.second, buf_);
    }
    *buf_ += "}";
  }

  void NoteSpan(const Event& e) {
    auto it = spans_.find(e.stack);
    if (it == spans_.end()) return;
    const uint64_t end = e.time_ns + e.duration_ns;
    if (it->second.first == 0 || e.time_ns < it->second.first) it->second.first = e.time_ns;
    if (end > it->second.second) it->second.second = end;
  }

  // A finding on a track of its own: a slice from the first to the last
  // event at its call site, or an instant at the end of the process when
  // its call site has none.
  void FindingSpan(size_t i) {
    const Finding& f = report_->findings[i];
    const uint64_t tid = kFindingTrackBase + i;
    const std::string title = Upper(SeverityName(f.severity)) + " " + f.rule;
    Meta("thread_name", static_cast<uint32_t>(tid), "finding: " + title);
    *buf_ += ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + std::to_string(pid_) +
             ",\"tid\":" + std::to_string(tid) +
             ",\"args\":{\"sort_index\":" + std::to_string(-1000000 + static_cast<int>(i)) + "}}";
    auto it = spans_.find(f.stack);
    const bool span = it != spans_.end() && it->second.first != 0;
    const uint64_t start = span ? it->second.first : last_ns_;
    Start(span ? "X" : "i", title, "finding", static_cast<uint32_t>(tid), start);
    if (span) *buf_ += ",\"dur\":" + Micros(origin_ + (it->second.second - start));
    if (!span) *buf_ += ",\"s\":\"t\"";
    *buf_ += ",\"args\":{\"severity\":";
    JsonWriter::Escape(SeverityName(f.severity), buf_);
    *buf_ += ",\"explanation\":";
    JsonWriter::Escape(f.explanation, buf_);
    *buf_ += ",\"fix\":";
    JsonWriter::Escape(f.fix, buf_);
    *buf_ += ",\"estimated_seconds_lost\":" + Seconds(f.seconds_lost) +
             ",\"stack\":" + std::to_string(f.stack);
    EndWithStack(f.stack);
  }

  static std::string Upper(const char* s) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
    return out;
  }

  static std::string Seconds(double s) {
    char b[32];
    snprintf(b, sizeof(b), "%.9g", s);
    return b;
  }

  std::string Micros(uint64_t t) const {
    char b[40];
    uint64_t d = t > origin_ ? t - origin_ : 0;
    snprintf(b, sizeof(b), "%llu.%03llu", static_cast<unsigned long long>(d / 1000),
             static_cast<unsigned long long>(d % 1000));
    return b;
  }

  void Meta(const char* what, uint32_t tid, const std::string& name) {
    *buf_ += ",\n{\"ph\":\"M\",\"name\":\"";
    *buf_ += what;
    *buf_ += "\",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(tid) +
             ",\"args\":{\"name\":";
    JsonWriter::Escape(name, buf_);
    *buf_ += "}}";
  }

  std::string Api(uint32_t api, const char* fallback) const {
    const std::string& n = trace_->ApiName(api);
    return n.empty() ? fallback : n;
  }

  // A handle or address as a JSON string ("0x7f12").
  static std::string Hex(uint64_t v) { return "\"" + HexNumber(v) + "\""; }

  void Copy(const Event& e) {
    std::string name = std::string(CopyDirName(e.dir)) + " " + FormatBytes(e.bytes);
    if (e.dir != CopyDir::kDeviceToDevice) name += std::string(" ") + MemKindName(e.HostKind());
    if (e.async) name += " async";
    Start("X", name, "copy", e.tid, e.time_ns);
    *buf_ += ",\"dur\":" + Micros(origin_ + e.duration_ns) + ",\"args\":{\"api\":";
    JsonWriter::Escape(Api(e.api, "copy"), buf_);
    *buf_ += ",\"bytes\":" + std::to_string(e.bytes) + ",\"src\":\"" + MemKindName(e.src) +
             "\",\"dst\":\"" + MemKindName(e.dst) + "\",\"async\":" + (e.async ? "true" : "false") +
             ",\"stream\":" + Hex(e.stream) + ",\"host_ptr\":" + Hex(e.host_ptr) +
             ",\"device\":" + std::to_string(e.device) + ",\"result\":" + std::to_string(e.result) +
             ",\"stack\":" + std::to_string(e.stack);
    EndWithStack(e.stack);
  }

  void Pin(const Event& e) {
    static const char* const kOps[] = {"pinned alloc", "pinned free", "register", "unregister"};
    std::string name = std::string(kOps[static_cast<int>(e.op) & 3]) + " " + FormatBytes(e.bytes);
    Start("X", name, "pinned", e.tid, e.time_ns);
    *buf_ += ",\"dur\":" + Micros(origin_ + e.duration_ns) + ",\"args\":{\"api\":";
    JsonWriter::Escape(Api(e.api, kOps[static_cast<int>(e.op) & 3]), buf_);
    *buf_ += ",\"bytes\":" + std::to_string(e.bytes) + ",\"ptr\":" + Hex(e.ptr) +
             ",\"flags\":" + std::to_string(e.flags) + ",\"result\":" + std::to_string(e.result);
    EndWithStack(e.stack);
    if (e.result != 0) return;
    int64_t delta = static_cast<int64_t>(e.bytes);
    if (e.op == PinOp::kFree || e.op == PinOp::kUnregister) {
      auto it = sizes_.find(e.ptr);
      delta = -static_cast<int64_t>(it != sizes_.end() ? it->second : e.bytes);
      if (it != sizes_.end()) sizes_.erase(it);
    } else {
      sizes_[e.ptr] = e.bytes;
    }
    int64_t& owner = (e.op == PinOp::kAlloc || e.op == PinOp::kFree) ? pinned_ : registered_;
    owner += delta;
    if (owner < 0) owner = 0;
    PinnedCounter(e.time_ns + e.duration_ns);
  }

  void PinnedCounter(uint64_t t) {
    Start("C", "pinned bytes", "memory", 0, t);
    *buf_ += ",\"args\":{\"program pinned\":" + std::to_string(pinned_) +
             ",\"program registered\":" + std::to_string(registered_) +
             ",\"pinshim\":" + std::to_string(pinshim_) + "}}";
  }

  // The process budget as a counter: from the process record when it has
  // one, else from the decisions, which also show it changing.
  void Budget(uint64_t t, uint64_t bytes) {
    budget_ = bytes;
    Start("C", "pinned budget", "memory", 0, t);
    *buf_ += ",\"args\":{\"budget\":" + std::to_string(bytes) + "}}";
  }

  void BudgetDecision(const Event& e) {
    if (e.process_budget != 0 && e.process_budget != budget_) Budget(e.time_ns, e.process_budget);
    // Granted decisions are the normal case and would crowd the timeline;
    // refusals are what a reader looks for.
    if (e.budget_decision != trace::BudgetDecision::kDenied &&
        e.budget_decision != trace::BudgetDecision::kFallback) {
      return;
    }
    std::string name =
        std::string("budget ") + BudgetDecisionName(e.budget_decision) + " " + FormatBytes(e.bytes);
    Start("i", name, "budget", e.tid, e.time_ns);
    *buf_ += ",\"s\":\"t\",\"args\":{\"owner\":\"" + std::string(BudgetOwnerName(e.budget_owner)) +
             "\",\"decision\":\"" + BudgetDecisionName(e.budget_decision) + "\",\"limiter\":\"" +
             BudgetLimiterName(e.budget_limiter) + "\",\"bytes\":" + std::to_string(e.bytes) +
             ",\"evictor_called\":" + (e.evictor_called ? "true" : "false") +
             ",\"evicted_bytes\":" + std::to_string(e.evicted_bytes) +
             ",\"process_pinned\":" + std::to_string(e.process_pinned) +
             ",\"process_budget\":" + std::to_string(e.process_budget) +
             ",\"node_pinned\":" + std::to_string(e.node_pinned) +
             ",\"node_budget\":" + std::to_string(e.node_budget) +
             ",\"stack\":" + std::to_string(e.stack);
    EndWithStack(e.stack);
  }

  void Sync(const Event& e) {
    static const char* const kKinds[] = {"sync",
                                         "stream synchronize",
                                         "context synchronize",
                                         "event record",
                                         "event synchronize",
                                         "stream query (done)",
                                         "event query (done)",
                                         "stream wait event"};
    int k = static_cast<int>(e.sync);
    const char* name = k >= 1 && k <= 7 ? kKinds[k] : kKinds[0];
    Start("X", name, "sync", e.tid, e.time_ns);
    *buf_ += ",\"dur\":" + Micros(origin_ + e.duration_ns) +
             ",\"args\":{\"stream\":" + Hex(e.stream) + ",\"event\":" + Hex(e.event_handle) + "}}";
  }

  void Misuse(const Event& e) {
    Start("i", "wc-read", "misuse", e.tid, e.time_ns);
    *buf_ += ",\"s\":\"t\",\"args\":{\"ptr\":" + Hex(e.ptr) +
             ",\"bytes\":" + std::to_string(e.bytes) + ",\"stack\":" + std::to_string(e.stack);
    EndWithStack(e.stack);
  }

  void HostAlloc(const Event& e) {
    Start("i", e.is_free ? "host free" : "host alloc " + FormatBytes(e.bytes), "host", e.tid,
          e.time_ns);
    *buf_ += ",\"s\":\"t\",\"args\":{\"allocation\":" + std::to_string(e.alloc_id) +
             ",\"ptr\":" + Hex(e.ptr) + ",\"bytes\":" + std::to_string(e.bytes) + "}}";
  }

  void Sample(const Event& e) {
    pinshim_ = static_cast<int64_t>(e.pinned_pinshim);
    Start("C", "pinned bytes (sampled)", "memory", 0, e.time_ns);
    *buf_ += ",\"args\":{\"program pinned\":" + std::to_string(e.pinned_program) +
             ",\"program registered\":" + std::to_string(e.registered_program) +
             ",\"pinshim\":" + std::to_string(e.pinned_pinshim) + "}}";
    Start("C", "resident memory", "memory", 0, e.time_ns);
    *buf_ += ",\"args\":{\"rss\":" + std::to_string(e.rss_bytes) + "}}";
  }

  const TraceReader* trace_;
  const ProcessReport* report_;
  uint64_t pid_;
  uint64_t origin_;
  StackNames* stacks_;
  // The first and last time of an event at each finding's call site.
  std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> spans_;
  std::string* buf_;
  FILE* out_;
  bool ok_ = true;
  std::set<uint32_t> threads_;
  std::unordered_map<uint64_t, uint64_t> sizes_;
  int64_t pinned_ = 0;
  int64_t registered_ = 0;
  int64_t pinshim_ = 0;
  uint64_t last_ns_ = 0;
  uint64_t budget_ = 0;  // the last value of the budget counter, 0: none yet
};

}  // namespace

bool WritePerfettoTrace(const MergedReport& report, const std::vector<const TraceReader*>& traces,
                        const std::vector<const SymbolArchive*>& archives, FILE* out) {
  uint64_t origin = UINT64_MAX;
  for (size_t i = 0; i < traces.size(); ++i) {
    const ProcessInfo& p = report.processes[i].info;
    uint64_t start = p.start_monotonic_ns != 0 ? p.start_monotonic_ns : traces[i]->first_event_ns();
    if (start != 0 && start < origin) origin = start;
  }
  if (origin == UINT64_MAX) origin = 0;
  std::string buf =
      "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"tool\":\"pinshim report\"},"
      "\"traceEvents\":[\n{\"ph\":\"M\",\"name\":\"pinshim\",\"pid\":0,\"tid\":0,"
      "\"args\":{\"name\":\"pinshim\"}}";
  std::set<uint64_t> pids;
  std::string frames;  // the stack table, written after the events
  bool ok = true;
  for (size_t i = 0; i < traces.size(); ++i) {
    uint64_t pid = report.processes[i].info.pid;
    // Ranks on different hosts may share a pid; each process needs its own.
    if (pid == 0 || !pids.insert(pid).second) {
      pid = 1000000000ull + i;
      pids.insert(pid);
    }
    StackNames stacks(traces[i], i < archives.size() ? archives[i] : nullptr, pid, &frames);
    TimelineWriter w(traces[i], &report.processes[i], pid, origin, &stacks, &buf, out);
    w.Begin();
    traces[i]->ForEachEvent(&w);
    w.End();
    ok = w.Flush() && w.ok() && ok;
  }
  buf += "\n],\n\"stackFrames\":{" + frames + "\n}}\n";
  ok = fwrite(buf.data(), 1, buf.size(), out) == buf.size() && ok;
  return ok && fflush(out) == 0;
}

}  // namespace report
}  // namespace pinshim
