#include "shim/core/size.h"

#include <unistd.h>

#include "shim/core/fixed_text.h"

namespace pinshim {
namespace {

using u128 = unsigned __int128;

constexpr u128 kMaxBytes = static_cast<u128>(UINT64_MAX);

// Further fraction digits are read but ignored: they change a size in TiB by
// less than a byte, and the limit keeps every product below within 128 bits.
constexpr int kMaxFractionDigits = 12;

struct Unit {
  const char* name;
  uint64_t bytes;
};

// Every unit is binary and KB means KiB, as in free(1) and nvidia-smi, so
// no letter stands for two sizes 7% apart.
constexpr Unit kUnits[] = {
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10},
    {"kb", 1ull << 10},
    {"kib", 1ull << 10},
    {"m", 1ull << 20},
    {"mb", 1ull << 20},
    {"mib", 1ull << 20},
    {"g", 1ull << 30},
    {"gb", 1ull << 30},
    {"gib", 1ull << 30},
    {"t", 1ull << 40},
    {"tb", 1ull << 40},
    {"tib", 1ull << 40},
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Case-insensitive comparison of text[0..n) with a lower-case name.
bool UnitMatches(const char* text, size_t n, const char* name) {
  size_t i = 0;
  for (; i < n; ++i) {
    if (name[i] == '\0' || Lower(text[i]) != name[i]) return false;
  }
  return name[i] == '\0';
}

bool Fail(char* err, size_t err_len, bool percent_allowed, const char* reason,
          const char* detail = nullptr, size_t detail_len = 0) {
  FixedText msg(err, err_len);
  msg.Append(reason);
  if (detail != nullptr) {
    msg.Append(" \"").Append(detail, detail_len).Append("\"");
  }
  msg.Append("; accepted: ").Append(SizeFormsText(percent_allowed));
  return false;
}

}  // namespace

const char* SizeFormsText(bool percent_allowed) {
  return percent_allowed ? "an integer or decimal with an optional unit B, K/KB/KiB, "
                           "M/MB/MiB, G/GB/GiB, T/TB/TiB (any case, 1K = 1024), e.g. "
                           "4096, 512K, 1.5GiB, or a percentage of physical memory above "
                           "0 and at most 100, e.g. 25%"
                         : "an integer or decimal with an optional unit B, K/KB/KiB, "
                           "M/MB/MiB, G/GB/GiB, T/TB/TiB (any case, 1K = 1024), e.g. "
                           "4096, 512K, 1.5GiB";
}

namespace {

// A decimal number kept exact as whole + fraction / scale (scale = 10^
// fraction_digits); all arithmetic is done in 128 bits so overflow is
// detected, not wrapped.
struct Decimal {
  u128 whole = 0;
  u128 fraction = 0;
  u128 scale = 1;
  int fraction_digits = 0;
  bool any_digit = false;
  bool whole_too_big = false;
};

// Reads the digits (and a fraction after '.') at p into *d; returns where
// they end.
const char* ReadDecimal(const char* p, Decimal* d) {
  for (; IsDigit(*p); ++p) {
    d->any_digit = true;
    d->whole = d->whole * 10 + static_cast<unsigned>(*p - '0');
    if (d->whole > kMaxBytes) {
      d->whole_too_big = true;
      d->whole = kMaxBytes + 1;  // stays bounded however many digits follow
    }
  }
  if (*p != '.') return p;
  ++p;
  for (; IsDigit(*p); ++p) {
    d->any_digit = true;
    if (d->fraction_digits < kMaxFractionDigits) {
      d->fraction = d->fraction * 10 + static_cast<unsigned>(*p - '0');
      d->scale *= 10;
      ++d->fraction_digits;
    }
  }
  return p;
}

// d percent of physical_bytes into *bytes; false (err set) unless it is
// above 0 and at most 100.
bool PercentBytes(const Decimal& d, uint64_t physical_bytes, u128* bytes, char* err,
                  size_t err_len) {
  const u128 scaled = d.whole_too_big ? kMaxBytes : d.whole * d.scale + d.fraction;
  if (scaled == 0 || scaled > 100 * d.scale) {
    return Fail(err, err_len, true, "percentage must be above 0 and at most 100");
  }
  *bytes = static_cast<u128>(physical_bytes) * scaled / (100 * d.scale);
  return true;
}

// d in the unit unit[0, unit_len) (none: bytes) into *bytes; false (err
// set) for an unknown unit or more than 2^64 - 1 bytes.
bool UnitBytes(const Decimal& d, const char* unit, size_t unit_len, bool percent_allowed,
               u128* bytes, char* err, size_t err_len) {
  uint64_t multiplier = 0;
  for (const Unit& u : kUnits) {
    if (UnitMatches(unit, unit_len, u.name)) {
      multiplier = u.bytes;
      break;
    }
  }
  if (multiplier == 0) {
    return Fail(err, err_len, percent_allowed, "unknown unit", unit, unit_len);
  }
  if (d.whole_too_big) {
    return Fail(err, err_len, percent_allowed, "too large (over 2^64 - 1 bytes)");
  }
  *bytes = d.whole * multiplier + d.fraction * multiplier / d.scale;
  if (*bytes > kMaxBytes) {
    return Fail(err, err_len, percent_allowed, "too large (over 2^64 - 1 bytes)");
  }
  return true;
}

}  // namespace

bool ParseSize(const char* text, uint64_t physical_bytes, uint64_t* out, char* err,
               size_t err_len) {
  const bool percent_allowed = physical_bytes != 0;
  if (text == nullptr) text = "";
  const char* p = text;
  while (IsBlank(*p)) ++p;
  if (*p == '\0') return Fail(err, err_len, percent_allowed, "empty");
  if (*p == '-') return Fail(err, err_len, percent_allowed, "negative");
  Decimal d;
  p = ReadDecimal(p, &d);
  if (!d.any_digit) return Fail(err, err_len, percent_allowed, "not a number");
  while (IsBlank(*p)) ++p;

  const char* unit = p;
  size_t unit_len = 0;
  if (*p == '%') {
    unit_len = 1;
    ++p;
  } else {
    while (IsAlpha(p[unit_len])) ++unit_len;
    p += unit_len;
  }
  while (IsBlank(*p)) ++p;
  const char* rest = p;
  if (*p != '\0') {
    // Whatever follows the number and unit, e.g. "1.2.3" or "4G B".
    size_t n = 0;
    while (rest[n] != '\0') ++n;
    return Fail(err, err_len, percent_allowed, "unexpected text", rest, n);
  }

  u128 bytes = 0;
  if (unit_len == 1 && *unit == '%') {
    if (!percent_allowed) {
      return Fail(err, err_len, false, "a percentage is not accepted here");
    }
    if (!PercentBytes(d, physical_bytes, &bytes, err, err_len)) return false;
  } else if (!UnitBytes(d, unit, unit_len, percent_allowed, &bytes, err, err_len)) {
    return false;
  }
  *out = static_cast<uint64_t>(bytes);
  if (err != nullptr && err_len > 0) err[0] = '\0';
  return true;
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

}  // namespace pinshim
