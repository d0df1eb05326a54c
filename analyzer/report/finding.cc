#include "analyzer/report/finding.h"

#include <cstdio>

namespace pinshim {
namespace report {

const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kWarning: return "warning";
    case Severity::kError: return "error";
  }
  return "info";
}

bool ParseSeverity(const std::string& text, Severity* out) {
  if (text == "info")
    *out = Severity::kInfo;
  else if (text == "warning")
    *out = Severity::kWarning;
  else if (text == "error")
    *out = Severity::kError;
  else
    return false;
  return true;
}

std::string Site::Short() const {
  if (!known) return "an unknown site";
  std::string out;
  if (site_index >= 0 && site_index < static_cast<int>(stack.size())) {
    out = stack[site_index].Describe(true);
  } else {
    Frame f;
    f.function = function;
    f.file = file;
    f.line = line;
    f.module = module;
    f.offset = offset;
    f.note = note;
    out = f.Describe(true);
  }
  const char* why = PythonStatusWords(python);
  if (why[0] != '\0') out += std::string(" [") + why + "]";
  return out;
}

std::string Site::Key() const {
  if (!known) return "?";
  if (!file.empty()) return function + "|" + file + ":" + std::to_string(line);
  char buf[32];
  snprintf(buf, sizeof(buf), "+%llx", static_cast<unsigned long long>(offset));
  return function + "|" + module + buf;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.i_ = b;
  return v;
}
Value Value::Int(int64_t n) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = n;
  return v;
}
Value Value::Double(double d) {
  Value v;
  v.kind_ = Kind::kDouble;
  v.d_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}
Value Value::Bytes(uint64_t n) {
  Value v;
  v.kind_ = Kind::kBytes;
  v.i_ = static_cast<int64_t>(n);
  return v;
}
Value Value::Seconds(double s) {
  Value v;
  v.kind_ = Kind::kSeconds;
  v.d_ = s;
  return v;
}
Value Value::SiteOf(uint32_t stack) {
  Value v;
  v.kind_ = Kind::kSite;
  v.i_ = stack;
  return v;
}
Value Value::Array() {
  Value v;
  v.kind_ = Kind::kArray;
  return v;
}
Value Value::Object() {
  Value v;
  v.kind_ = Kind::kObject;
  return v;
}

Value& Value::Set(const std::string& key, Value v) {
  members_.emplace_back(key, std::move(v));
  return *this;
}

Value& Value::Push(Value v) {
  items_.push_back(std::move(v));
  return *this;
}

const Value* Value::Find(const std::string& key) const {
  for (const auto& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

}  // namespace report
}  // namespace pinshim
