// A small streaming JSON writer: commas, indentation and string escaping.
// Strings that are not valid UTF-8 (paths and names from damaged traces) are
// written with U+FFFD in place of the bad bytes, so the output always parses.
#ifndef PINSHIM_ANALYZER_REPORT_JSON_WRITER_H_
#define PINSHIM_ANALYZER_REPORT_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace pinshim {
namespace report {

class JsonWriter {
 public:
  // Appends to *out, which must outlive the writer. `indent` 0: compact.
  explicit JsonWriter(std::string* out, int indent = 2) : out_(out), indent_(indent) {}

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  // In an object: the next value's key.
  void Key(const std::string& key);
  void String(const std::string& s);
  void Int(int64_t v);
  void Uint(uint64_t v);
  void Double(double v);
  void Bool(bool v);
  void Null();

  // Writes `s` as a JSON string literal (quotes included) into *out.
  static void Escape(const std::string& s, std::string* out);

 private:
  void Open(char c);
  void Close(char c);
  void BeforeValue();
  void Newline();

  std::string* out_;
  int indent_;
  std::vector<bool> first_;  // per open container: nothing written yet
  bool after_key_ = false;
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_JSON_WRITER_H_
