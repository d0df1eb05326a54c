// free-in-flight (error): host memory the program registered, and has not
// unregistered, is freed, reallocated or unmapped while an asynchronous
// copy that uses it may still be running. The allocator can hand that
// memory to something else at once, and the copy then reads or writes the
// new owner's data.
//
// Only such releases are races. cuMemFreeHost and cuMemHostUnregister wait
// for the device's queued work before they return (measured on the H200,
// driver 580: sync_model.h C5), so releasing pinned memory through the
// driver with copies queued is not a finding; those calls are completion
// points instead. Pageable memory is not tracked: the driver is done with
// it when an asynchronous copy returns.
//
// Whether the copy could still run comes from the model of the driver's
// synchronization (sync_model.h): an error needs its proof that nothing in
// the trace could have completed the copy; where completion cannot be told
// (a wait that may have covered it through work the trace does not show, a
// graph launch, a damaged trace), the finding says so at info level. A
// trace with no synchronization events at all cannot tell completion, and
// the rule then reports nothing.
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

class FreeInFlight : public Rule {
 public:
  const char* id() const override { return "free-in-flight"; }

  void OnPin(const Event& e, const PinnedAlloc& a) override {
    if (a.registered) registered_[a.ptr] = a.bytes;
  }

  void OnUnpin(const Event& e, const PinnedAlloc* a) override {
    if (e.op == PinOp::kUnregister) registered_.erase(e.ptr);
  }

  void OnHostFree(const Event& e, const HostAlloc* a) override {
    const uint64_t ptr = a != nullptr ? a->ptr : e.ptr;
    const uint64_t bytes = std::max<uint64_t>(a != nullptr ? a->bytes : e.bytes, 1);
    if (!Registered(ptr, bytes)) return;
    const char* how = e.source == kHostAllocMmap ? "unmapped" : "freed or reallocated";
    sync_->ForOverlapping(ptr, bytes, [&](const InFlightCopy& c) {
      if (reported_.count(c.id) != 0 || !Registered(c.ptr, c.bytes)) return;
      std::string why;
      CopyState state = sync_->StateOf(c, &why);
      if (state == CopyState::kDone) return;
      reported_.insert(c.id);
      const Severity severity = state == CopyState::kMayRun ? Severity::kError : Severity::kInfo;
      SiteStats& s = sites_[std::make_tuple(e.stack, severity)];
      if (s.times++ == 0) {
        s.how = how;
        s.copy = c;
        s.stream = sync_->DescribeStream(c.stream);
        s.why = why;
        s.after_ns = e.time_ns - std::min(e.time_ns, c.time_ns);
      }
    });
  }

  void Finish(const RuleContext&, std::vector<Finding>* out) override {
    if (sync_->sync_events() == 0) return;
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      const Severity severity = std::get<1>(kv.first);
      const bool proven = severity == Severity::kError;
      Finding f;
      f.rule = id();
      f.severity = severity;
      f.stack = std::get<0>(kv.first);
      const std::string times = FormatCount(s.times) + (s.times == 1 ? " time" : " times");
      const std::string copy = "an asynchronous " + std::string(DirectionWords(s.copy.dir)) +
                               " copy queued at {site:" + std::to_string(s.copy.stack) + "} on " +
                               s.stream;
      if (proven) {
        f.explanation = "Registered host memory is " + s.how +
                        " here, while still registered, "
                        "and " +
                        copy + " may still be running (" + s.why +
                        "): the memory can "
                        "go to something else at once, and the transfer then reads or "
                        "overwrites that data (" +
                        times + ").";
      } else {
        f.explanation = "Registered host memory is " + s.how +
                        " here, while still registered, "
                        "after " +
                        copy +
                        "; whether that copy had finished cannot be told "
                        "from the trace: " +
                        s.why + " (" + times + ").";
      }
      f.evidence.Set("times", Value::Int(static_cast<int64_t>(s.times)))
          .Set("released", Value::String(s.how))
          .Set("copy_queued_at", Value::SiteOf(s.copy.stack))
          .Set("copy_bytes", Value::Bytes(s.copy.bytes))
          .Set("copy_direction", Value::String(std::string(DirectionWords(s.copy.dir))))
          .Set("stream", Value::String(s.stream))
          .Set("proven", Value::Bool(proven))
          .Set("why", Value::String(s.why))
          .Set("released_after", Value::Seconds(s.after_ns * 1e-9));
      f.fix =
          "Wait for the copy before releasing its memory: cudaStreamSynchronize on the "
          "stream it was queued on, or cudaEventSynchronize on an event recorded after it "
          "(cudaEventRecord); and cudaHostUnregister the memory before free or munmap "
          "(which also waits for the device's queued work).";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint64_t times = 0;
    std::string how;
    InFlightCopy copy;
    std::string stream;
    std::string why;
    uint64_t after_ns = 0;
  };

  // Whether [ptr, ptr + bytes) overlaps a live registration.
  bool Registered(uint64_t ptr, uint64_t bytes) const {
    if (bytes == 0) bytes = 1;
    auto it = registered_.upper_bound(ptr + bytes - 1);
    if (it == registered_.begin()) return false;
    --it;
    // Registrations do not overlap one another (the driver refuses that).
    return ptr < it->first + std::max<uint64_t>(it->second, 1);
  }

  std::map<uint64_t, uint64_t> registered_;  // start -> bytes
  std::set<uint64_t> reported_;              // copy ids
  std::map<std::tuple<uint32_t, Severity>, SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewFreeInFlightRule() { return std::make_unique<FreeInFlight>(); }

}  // namespace report
}  // namespace pinshim
