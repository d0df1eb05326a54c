// non-portable (warning): pinned memory allocated (or registered) without the
// portable flag, then used in a copy under another device's context. Such
// memory is page-locked for the context that pinned it; elsewhere the copy
// may take the slow path. (On systems with unified addressing the driver
// treats all pinned memory as portable; the finding still marks code that
// depends on that.) The finding is placed at the allocation, where the flag
// belongs.
#include <memory>
#include <set>

#include "analyzer/report/format.h"
#include "analyzer/report/rules/rule.h"

namespace pinshim {
namespace report {
namespace {

class NonPortable : public Rule {
 public:
  const char* id() const override { return "non-portable"; }

  void OnCopy(const Event& e, const PinnedAlloc* owner, const HostAlloc*) override {
    if (owner == nullptr || (owner->flags & trace::kPinFlagPortable) || owner->device < 0 ||
        e.device < 0 || e.device == owner->device) {
      return;
    }
    SiteStats& s = sites_[owner->stack];
    if (s.copies++ == 0) {
      s.alloc_device = owner->device;
      s.copy_stack = e.stack;
      s.registered = owner->registered;
    }
    s.copy_devices.insert(e.device);
    s.bytes += e.bytes;
  }

  void Finish(const RuleContext&, std::vector<Finding>* out) override {
    for (auto& kv : sites_) {
      const SiteStats& s = kv.second;
      std::string devices;
      Value list = Value::Array();
      for (int d : s.copy_devices) {
        devices += (devices.empty() ? "" : ", ") + std::to_string(d);
        list.Push(Value::Int(d));
      }
      Finding f;
      f.rule = id();
      f.severity = Severity::kWarning;
      f.stack = kv.first;
      f.explanation = std::string("Pinned memory ") + (s.registered ? "registered" : "allocated") +
                      " here under device " + std::to_string(s.alloc_device) +
                      " without the portable flag is copied under device " + devices + " (" +
                      FormatCount(s.copies) + (s.copies == 1 ? " copy" : " copies") +
                      ", first at {site:" + std::to_string(s.copy_stack) +
                      "}); it is page-locked only for the context that pinned it.";
      f.evidence.Set("allocated_under_device", Value::Int(s.alloc_device))
          .Set("copied_under_devices", std::move(list))
          .Set("copies", Value::Int(static_cast<int64_t>(s.copies)))
          .Set("bytes", Value::Bytes(s.bytes))
          .Set("first_copy_at", Value::SiteOf(s.copy_stack));
      f.fix = s.registered ? "Register it with cudaHostRegisterPortable so every device's "
                             "context treats it as pinned."
                           : "Allocate it with cudaHostAllocPortable (cudaHostAlloc flags) so "
                             "every device's context treats it as pinned.";
      out->push_back(std::move(f));
    }
  }

 private:
  struct SiteStats {
    uint64_t copies = 0;
    uint64_t bytes = 0;
    int alloc_device = -1;
    bool registered = false;
    uint32_t copy_stack = 0;
    std::set<int> copy_devices;
  };
  SiteTable<SiteStats> sites_;
};

}  // namespace

std::unique_ptr<Rule> NewNonPortableRule() { return std::make_unique<NonPortable>(); }

}  // namespace report
}  // namespace pinshim
