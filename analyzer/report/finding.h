// What a rule reports: a finding with its evidence, and the small value tree
// that evidence is made of (numbers, text, call sites, lists, objects), which
// the text and JSON reports render without knowing the rule.
#ifndef PINSHIM_ANALYZER_REPORT_FINDING_H_
#define PINSHIM_ANALYZER_REPORT_FINDING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "analyzer/report/symbolizer.h"

namespace pinshim {
namespace report {

enum class Severity : uint8_t { kInfo = 0, kWarning = 1, kError = 2 };
const char* SeverityName(Severity s);
// Parses "info", "warning" or "error"; false otherwise.
bool ParseSeverity(const std::string& text, Severity* out);

// A call site, once symbolized.
struct Site {
  bool known = false;  // false: no stack, or a stack with no frames
  std::string function;
  std::string file;
  int line = 0;
  std::string module;
  uint64_t offset = 0;
  std::string note;
  std::vector<Frame> stack;  // the full stack, innermost first
  int site_index = -1;       // index of the site in `stack`
  // The stack's Python section (kNone: none; see SymbolizedStack).
  trace::PythonStatus python = trace::PythonStatus::kNone;

  // "function (file:line)" or "module+0x... (why)", C++ names shortened,
  // with the Python status when it says why there is no Python line;
  // "unknown site" if none.
  std::string Short() const;
  // Whether the site is a Python frame.
  bool IsPython() const {
    return site_index >= 0 && site_index < static_cast<int>(stack.size()) &&
           stack[site_index].python;
  }
  // Identity for merging findings across processes.
  std::string Key() const;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kNull,
    kBool,
    kInt,
    kDouble,
    kString,
    kBytes,
    kSeconds,
    kSite,
    kArray,
    kObject
  };

  Value() = default;
  static Value Bool(bool b);
  static Value Int(int64_t v);
  static Value Double(double v);
  static Value String(std::string s);
  static Value Bytes(uint64_t n);       // a byte count: "1.5 MiB" in text, a number in JSON
  static Value Seconds(double s);       // a duration: "12.3 ms" in text, seconds in JSON
  static Value SiteOf(uint32_t stack);  // a call site, symbolized before output
  static Value Array();
  static Value Object();

  // On objects: appends a member and returns *this (for chaining).
  Value& Set(const std::string& key, Value v);
  // On arrays: appends an element and returns *this.
  Value& Push(Value v);

  Kind kind() const { return kind_; }
  bool bool_value() const { return i_ != 0; }
  int64_t int_value() const { return i_; }
  double double_value() const { return d_; }
  const std::string& string_value() const { return s_; }
  uint32_t stack() const { return static_cast<uint32_t>(i_); }
  const Site& site() const { return *site_; }
  bool has_site() const { return site_ != nullptr; }
  void set_site(std::shared_ptr<const Site> s) { site_ = std::move(s); }
  const std::vector<std::pair<std::string, Value>>& members() const { return members_; }
  std::vector<std::pair<std::string, Value>>& mutable_members() { return members_; }
  const std::vector<Value>& items() const { return items_; }
  std::vector<Value>& mutable_items() { return items_; }
  // Member by key, null when absent.
  const Value* Find(const std::string& key) const;

 private:
  Kind kind_ = Kind::kNull;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::shared_ptr<const Site> site_;
  std::vector<std::pair<std::string, Value>> members_;
  std::vector<Value> items_;
};

struct Finding {
  std::string rule;  // "pageable-hot"
  Severity severity = Severity::kInfo;
  std::string explanation;  // one sentence; "{site:N}" expands to a short site
  uint32_t stack = 0;       // the call site's stack id, 0 none
  Site site;                // filled by symbolization
  Value evidence = Value::Object();
  double seconds_lost = 0;  // estimate; 0 when the rule cannot estimate
  // seconds_lost is time spent in the copy calls at `stack`, which other
  // findings on the same copies may estimate too: a report's total counts
  // the largest of those once (TotalSecondsLost, merge.h).
  bool loss_in_copies = false;
  std::string fix;  // concrete advice; "{site:N}" expands too
  // The framework the stack shows ("pytorch", "cupy", "jax", "numpy",
  // "python"; "" none: frameworks.h) and, when `fix` is that framework's,
  // the rule's generic fix it replaced ("" otherwise).
  std::string framework;
  std::string generic_fix;
  std::vector<int> processes;                   // indices of the processes it was found in
  std::vector<double> seconds_lost_by_process;  // aligned with `processes`
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_FINDING_H_
