#include "analyzer/report/perfetto_report.h"

#include <cstdio>
#include <set>
#include <string>
#include <unordered_map>

#include "analyzer/report/format.h"
#include "analyzer/report/json_writer.h"

namespace pinshim {
namespace report {
namespace {

constexpr size_t kFlushBytes = 4 << 20;

class TimelineWriter : public EventVisitor {
 public:
  TimelineWriter(const TraceReader* trace, const ProcessReport* report, uint64_t pid,
                 uint64_t origin_ns, std::string* buf, FILE* out)
      : trace_(trace), report_(report), pid_(pid), origin_(origin_ns), buf_(buf), out_(out) {}

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
  }

  void OnEvent(const Event& e) override {
    if (e.time_ns > last_ns_) last_ns_ = e.time_ns;
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

  static std::string Hex(uint64_t v) {
    char b[24];
    snprintf(b, sizeof(b), "\"0x%llx\"", static_cast<unsigned long long>(v));
    return b;
  }

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
             ",\"stack\":" + std::to_string(e.stack) + "}}";
  }

  void Pin(const Event& e) {
    static const char* const kOps[] = {"pinned alloc", "pinned free", "register", "unregister"};
    std::string name = std::string(kOps[static_cast<int>(e.op) & 3]) + " " + FormatBytes(e.bytes);
    Start("X", name, "pinned", e.tid, e.time_ns);
    *buf_ += ",\"dur\":" + Micros(origin_ + e.duration_ns) + ",\"args\":{\"api\":";
    JsonWriter::Escape(Api(e.api, kOps[static_cast<int>(e.op) & 3]), buf_);
    *buf_ += ",\"bytes\":" + std::to_string(e.bytes) + ",\"ptr\":" + Hex(e.ptr) +
             ",\"flags\":" + std::to_string(e.flags) + ",\"result\":" + std::to_string(e.result) +
             "}}";
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
             ",\"stack\":" + std::to_string(e.stack) + "}}";
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
             ",\"bytes\":" + std::to_string(e.bytes) + ",\"stack\":" + std::to_string(e.stack) +
             "}}";
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
                        FILE* out) {
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
  bool ok = true;
  for (size_t i = 0; i < traces.size(); ++i) {
    uint64_t pid = report.processes[i].info.pid;
    // Ranks on different hosts may share a pid; each process needs its own.
    if (pid == 0 || !pids.insert(pid).second) {
      pid = 1000000000ull + i;
      pids.insert(pid);
    }
    TimelineWriter w(traces[i], &report.processes[i], pid, origin, &buf, out);
    w.Begin();
    traces[i]->ForEachEvent(&w);
    w.End();
    ok = w.Flush() && w.ok() && ok;
  }
  buf += "\n]}\n";
  ok = fwrite(buf.data(), 1, buf.size(), out) == buf.size() && ok;
  return ok && fflush(out) == 0;
}

}  // namespace report
}  // namespace pinshim
