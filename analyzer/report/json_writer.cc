#include "analyzer/report/json_writer.h"

#include <cmath>
#include <cstdio>

namespace pinshim {
namespace report {
namespace {

// Length of the valid UTF-8 sequence at s[i], 0 if invalid.
size_t Utf8Length(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t min;
  if (c < 0x80) return 1;
  if ((c & 0xe0) == 0xc0) {
    n = 2;
    min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3;
    min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4;
    min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace

void JsonWriter::Escape(const std::string& s, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      char buf[8];
      switch (c) {
        case '\n': out->append("\\n"); break;
        case '\t': out->append("\\t"); break;
        case '\r': out->append("\\r"); break;
        default: snprintf(buf, sizeof(buf), "\\u%04x", c); out->append(buf);
      }
      ++i;
    } else if (c == 0x7f ||
               (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                static_cast<unsigned char>(s[i + 1]) <= 0x9f)) {
      // DEL and the C1 controls, which a terminal may act on, escaped too.
      char buf[8];
      const unsigned code = c == 0x7f ? 0x7fu : static_cast<unsigned char>(s[i + 1]);
      snprintf(buf, sizeof(buf), "\\u%04x", code);
      out->append(buf);
      i += c == 0x7f ? 1 : 2;
    } else {
      size_t n = Utf8Length(s, i);
      if (n == 0) {
        out->append("\xef\xbf\xbd");
        ++i;
      } else {
        out->append(s, i, n);
        i += n;
      }
    }
  }
  out->push_back('"');
}

void JsonWriter::Newline() {
  if (indent_ <= 0) return;
  out_->push_back('\n');
  out_->append(first_.size() * static_cast<size_t>(indent_), ' ');
}

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_->push_back(',');
    first_.back() = false;
    Newline();
  }
}

void JsonWriter::Open(char c) {
  BeforeValue();
  out_->push_back(c);
  first_.push_back(true);
}

void JsonWriter::Close(char c) {
  bool empty = first_.back();
  first_.pop_back();
  if (!empty) Newline();
  out_->push_back(c);
}

void JsonWriter::Key(const std::string& key) {
  BeforeValue();
  Escape(key, out_);
  out_->append(indent_ > 0 ? ": " : ":");
  after_key_ = true;
}

void JsonWriter::String(const std::string& s) {
  BeforeValue();
  Escape(s, out_);
}

void JsonWriter::Int(int64_t v) {
  BeforeValue();
  out_->append(std::to_string(v));
}

void JsonWriter::Uint(uint64_t v) {
  BeforeValue();
  out_->append(std::to_string(v));
}

void JsonWriter::Double(double v) {
  BeforeValue();
  if (!std::isfinite(v)) {
    out_->append("null");
    return;
  }
  char buf[40];
  snprintf(buf, sizeof(buf), "%.9g", v);
  out_->append(buf);
}

void JsonWriter::Bool(bool v) {
  BeforeValue();
  out_->append(v ? "true" : "false");
}

void JsonWriter::Null() {
  BeforeValue();
  out_->append("null");
}

}  // namespace report
}  // namespace pinshim
