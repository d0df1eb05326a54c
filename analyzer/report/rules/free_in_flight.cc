// free-in-flight (error): host memory freed, unregistered, unmapped or
// reallocated while an asynchronous copy that uses it may still be running.
//
// How completion is known: an asynchronous copy from or to pinned memory
// stays in flight on its stream until the trace shows it finished: a
// synchronize of its stream, of the context, or of an event recorded on its
// stream after it; a successful query of either; or a synchronous copy on
// the legacy default stream (which waits for the other blocking streams).
// cuMemFreeHost waits for the device itself, so freeing with it is treated
// as a completion point, not a finding. Copies from pageable memory are not
// tracked: the driver completes them before returning.
//
// A trace with no synchronization events at all (hooks that do not record
// them) cannot tell completion, and this rule then reports nothing.
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

// In-flight copies kept per stream; older ones are taken to have finished.
constexpr size_t kMaxInFlightPerStream = 4096;

class FreeInFlight : public Rule {
 public:
  const char* id() const override { return "free-in-flight"; }

  void OnCopy(const Event& e, const PinnedAlloc*, const HostAlloc*) override {
    if (!e.IsHostDeviceCopy()) return;
    if (!e.async) {
      if (e.stream == 0) CompleteAll(e.time_ns);  // legacy default stream
      return;
    }
    MemKind k = e.HostKind();
    if (k != MemKind::kPinnedByProgram && k != MemKind::kRegisteredByProgram &&
        k != MemKind::kPinnedByPinshim) {
      return;
    }
    std::deque<Copy>& q = streams_[e.stream];
    q.push_back(Copy{e.time_ns, e.host_ptr, e.bytes, e.stack, e.stream});
    if (q.size() > kMaxInFlightPerStream) q.pop_front();
  }

  void OnSync(const Event& e) override {
    ++syncs_;
    switch (e.sync) {
      case trace::SyncKind::kStreamSynchronize:
      case trace::SyncKind::kStreamQueryDone:
        Complete(e.stream, e.time_ns);
        break;
      case trace::SyncKind::kContextSynchronize:
        CompleteAll(e.time_ns);
        break;
      case trace::SyncKind::kEventRecord:
        events_[e.event_handle] = Mark{e.stream, e.time_ns};
        break;
      case trace::SyncKind::kEventSynchronize:
      case trace::SyncKind::kEventQueryDone: {
        auto it = events_.find(e.event_handle);
        if (it != events_.end()) Complete(it->second.stream, it->second.time_ns);
        break;
      }
      default:
        break;
    }
  }

  void OnUnpin(const Event& e, const PinnedAlloc* a) override {
    if (e.op == PinOp::kFree) {
      CompleteAll(e.time_ns);
      return;
    }
    uint64_t bytes = a != nullptr ? a->bytes : e.bytes;
    Check(e, e.ptr, bytes, "unregistered");
  }

  void OnHostFree(const Event& e, const HostAlloc* a) override {
    uint64_t ptr = a != nullptr ? a->ptr : e.ptr;
    uint64_t bytes = a != nullptr ? a->bytes : e.bytes;
    Check(e, ptr, bytes, e.source == 1 ? "unmapped" : "freed or reallocated");
  }

  void Finish(const RuleContext&, std::vector<Finding>* out) override {
    if (syncs_ == 0) return;
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      Finding f;
      f.rule = id();
      f.severity = Severity::kError;
      f.stack = kv.first;
      f.explanation = "Host memory is " + s.how + " here while an asynchronous copy that uses it, "
                      "queued at {site:" + std::to_string(s.copy_stack) +
                      "}, may still be running: the transfer can read freed memory or write "
                      "into memory that now belongs to something else (" +
                      FormatCount(s.times) + (s.times == 1 ? " time" : " times") + ").";
      char stream[32];
      snprintf(stream, sizeof(stream), "0x%llx", static_cast<unsigned long long>(s.stream));
      f.evidence.Set("times", Value::Int(static_cast<int64_t>(s.times)))
          .Set("released", Value::String(s.how))
          .Set("copy_queued_at", Value::SiteOf(s.copy_stack))
          .Set("copy_bytes", Value::Bytes(s.copy_bytes))
          .Set("stream", Value::String(s.stream == 0 ? "default" : stream))
          .Set("released_after", Value::Seconds(s.after_ns * 1e-9));
      f.fix = "Wait for the copy before releasing its memory: cudaStreamSynchronize on the "
              "stream it was queued on, or cudaEventSynchronize on an event recorded after it "
              "(cudaEventRecord), before the free, cudaHostUnregister or munmap.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct Copy {
    uint64_t time_ns;
    uint64_t ptr;
    uint64_t bytes;
    uint32_t stack;
    uint64_t stream;
  };
  struct Mark {
    uint64_t stream;
    uint64_t time_ns;
  };
  struct SiteStats {
    uint64_t times = 0;
    std::string how;
    uint32_t copy_stack = 0;
    uint64_t copy_bytes = 0;
    uint64_t stream = 0;
    uint64_t after_ns = 0;
  };

  // Copies queued on `stream` before `t` have finished.
  void Complete(uint64_t stream, uint64_t t) {
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    std::deque<Copy>& q = it->second;
    while (!q.empty() && q.front().time_ns <= t) q.pop_front();
  }

  void CompleteAll(uint64_t t) {
    for (auto& kv : streams_) Complete(kv.first, t);
  }

  void Check(const Event& e, uint64_t ptr, uint64_t bytes, const char* how) {
    if (bytes == 0) bytes = 1;
    for (auto& kv : streams_) {
      std::deque<Copy>& q = kv.second;
      for (auto it = q.begin(); it != q.end();) {
        if (it->ptr < ptr + bytes && ptr < it->ptr + (it->bytes ? it->bytes : 1)) {
          SiteStats& s = sites_[e.stack];
          if (s.times++ == 0) {
            s.how = how;
            s.copy_stack = it->stack;
            s.copy_bytes = it->bytes;
            s.stream = it->stream;
            s.after_ns = e.time_ns - std::min(e.time_ns, it->time_ns);
          }
          it = q.erase(it);  // reported once
        } else {
          ++it;
        }
      }
    }
  }

  std::unordered_map<uint64_t, std::deque<Copy>> streams_;
  std::unordered_map<uint64_t, Mark> events_;
  SiteTable<SiteStats> sites_;
  uint64_t syncs_ = 0;
};

}  // namespace

std::unique_ptr<Rule> NewFreeInFlightRule() { return std::make_unique<FreeInFlight>(); }

}  // namespace report
}  // namespace pinshim
