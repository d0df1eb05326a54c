// Builds one-line messages in a caller-owned buffer. The configuration parser
// runs inside the preloaded library, possibly before the C++ runtime is up and
// always where allocating or printing would disturb the program, so its
// messages are assembled here instead of with std::string or snprintf.
#ifndef PINSHIM_SHIM_CORE_FIXED_TEXT_H_
#define PINSHIM_SHIM_CORE_FIXED_TEXT_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {

// Appends to a fixed buffer, always NUL-terminated, silently cutting what does
// not fit. "buf" must outlive this object; a null buf or zero len drops all.
class FixedText {
 public:
  FixedText(char* buf, size_t len) : buf_(buf), cap_(buf ? len : 0), used_(0) {
    if (cap_ > 0) buf_[0] = '\0';
  }

  FixedText& Append(const char* text) {
    if (text == nullptr) return *this;
    for (; *text != '\0'; ++text) Put(*text);
    return *this;
  }

  FixedText& Append(const char* text, size_t n) {
    for (size_t i = 0; text != nullptr && i < n; ++i) Put(text[i]);
    return *this;
  }

  FixedText& AppendUint(uint64_t value) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0);
    while (n > 0) Put(digits[--n]);
    return *this;
  }

  // Appends "text" in double quotes, cut to max_chars with "..." so a huge
  // value cannot push the reason out of the message. Control characters
  // become '?' so the message stays one line.
  FixedText& AppendQuoted(const char* text, size_t max_chars) {
    Put('"');
    size_t i = 0;
    for (; text != nullptr && text[i] != '\0' && i < max_chars; ++i) {
      const unsigned char c = static_cast<unsigned char>(text[i]);
      Put(c < 0x20 || c == 0x7f ? '?' : static_cast<char>(c));
    }
    if (text != nullptr && text[i] != '\0') Append("...");
    Put('"');
    return *this;
  }

  size_t size() const { return used_; }
  const char* c_str() const { return cap_ > 0 ? buf_ : ""; }

 private:
  void Put(char c) {
    if (used_ + 1 >= cap_) return;
    buf_[used_++] = c;
    buf_[used_] = '\0';
  }

  char* buf_;
  size_t cap_;
  size_t used_;
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_FIXED_TEXT_H_
