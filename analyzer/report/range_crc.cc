#include "analyzer/report/range_crc.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "shim/trace/crc32c.h"

namespace pinshim {
namespace report {
namespace {

// CRC-32C's polynomial, bit-reflected: bit 31 is the coefficient of x^0.
constexpr uint32_t kPoly = 0x82f63b78u;
constexpr uint32_t kOne = 0x80000000u;  // the polynomial 1
constexpr size_t kLowBytes = 4096;      // shifts split as high * 4096 + low

// a * b modulo the polynomial.
uint32_t MulMod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = kOne; m != 0 && a != 0; m >>= 1) {
    if (a & m) {
      product ^= b;
      a &= ~m;
    }
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

// a * x^-1 modulo the polynomial: the inverse of one step of the CRC.
uint32_t DivX(uint32_t v) {
  const uint32_t low = v >> 31;  // x^0 of the product: the bit the step shifted out
  return ((v ^ (low ? kPoly : 0)) << 1) | low;
}

#if defined(__x86_64__)
// The same product with the carry-less multiply and the CRC instruction:
// clmul(a, b) << 1 is a * b as a 64-bit message, which crc32 reduces to
// a * b * x^32 modulo the polynomial; so b must come premultiplied by x^-32.
__attribute__((target("sse4.2,pclmul"))) uint32_t MulModFast(uint32_t a, uint32_t b_over_x32) {
  const __m128i product = _mm_clmulepi64_si128(_mm_cvtsi32_si128(static_cast<int>(a)),
                                               _mm_cvtsi32_si128(static_cast<int>(b_over_x32)), 0);
  const uint64_t message = static_cast<uint64_t>(_mm_cvtsi128_si64(product)) << 1;
  return static_cast<uint32_t>(_mm_crc32_u64(0, message));
}

bool HasFastMultiply() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul");
}
#endif

// x^(8n) modulo the polynomial for every n <= kMaxRange, as a product of
// two table entries: low[n % 4096] * high[n / 4096]; and the same
// premultiplied by x^-32 for MulModFast.
struct ShiftTables {
  uint32_t low[kLowBytes];
  uint32_t low_fast[kLowBytes];
  std::vector<uint32_t> high;
  std::vector<uint32_t> high_fast;
  bool fast = false;

  ShiftTables() {
    uint32_t v = kOne;
    for (size_t i = 0; i < kLowBytes; ++i) {
      low[i] = v;
      for (int bit = 0; bit < 8; ++bit) v = (v & 1) ? (v >> 1) ^ kPoly : v >> 1;
    }
    const uint32_t step = v;  // x^(8 * 4096)
    high.resize(RangeCrc::kMaxRange / kLowBytes + 2);
    high[0] = kOne;
    for (size_t i = 1; i < high.size(); ++i) high[i] = MulMod(high[i - 1], step);
    uint32_t inverse_x32 = kOne;
    for (int i = 0; i < 32; ++i) inverse_x32 = DivX(inverse_x32);
    for (size_t i = 0; i < kLowBytes; ++i) low_fast[i] = MulMod(low[i], inverse_x32);
    high_fast.resize(high.size());
    for (size_t i = 0; i < high.size(); ++i) high_fast[i] = MulMod(high[i], inverse_x32);
#if defined(__x86_64__)
    fast = HasFastMultiply();
#endif
  }
};

const ShiftTables& Tables() {
  static const ShiftTables* tables = new ShiftTables();  // built once, never freed
  return *tables;
}

// crc * x^(8 * bytes) modulo the polynomial.
uint32_t Shift(uint32_t crc, uint64_t bytes) {
  const ShiftTables& t = Tables();
#if defined(__x86_64__)
  if (t.fast) {
    return MulModFast(MulModFast(crc, t.low_fast[bytes % kLowBytes]),
                      t.high_fast[bytes / kLowBytes]);
  }
#endif
  return MulMod(MulMod(crc, t.low[bytes % kLowBytes]), t.high[bytes / kLowBytes]);
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return Shift(crc_a, length_b) ^ crc_b;
}

uint32_t Crc32cCombinePortable(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  const ShiftTables& t = Tables();
  return MulMod(MulMod(crc_a, t.low[length_b % kLowBytes]), t.high[length_b / kLowBytes]) ^ crc_b;
}

RangeCrc::RangeCrc(const uint8_t* data, size_t size) : data_(data), size_(size) {
  // Enough prefixes to span the longest range and the step on either side.
  uint64_t needed = (std::min<uint64_t>(size, kMaxRange) >> kStepShift) + 4;
  uint64_t capacity = 16;
  while (capacity < needed) capacity <<= 1;
  ring_.assign(capacity, 0);
  mask_ = capacity - 1;
  ring_[0] = 0;  // the CRC of nothing
}

uint32_t RangeCrc::PrefixAt(uint64_t pos) {
  const uint64_t k = pos >> kStepShift;
  while (high_ < k) {
    const uint32_t next =
        trace::Crc32cExtend(ring_[high_ & mask_], data_ + (high_ << kStepShift), kStep);
    ++high_;
    ring_[high_ & mask_] = next;
    if (high_ - low_ > mask_) low_ = high_ - mask_;
  }
  return trace::Crc32cExtend(ring_[k & mask_], data_ + (k << kStepShift), pos & (kStep - 1));
}

uint32_t RangeCrc::Crc(uint64_t begin, uint64_t end) {
  if (end <= begin) return 0;
  // Outside the contract: a range that is too long, goes past the end, or
  // starts before the kept prefixes is checksummed directly. Prefixes are
  // computed forward up to the range's end: every byte once in all.
  if (end - begin > kMaxRange || end > size_ || (begin >> kStepShift) < low_ ||
      (end >> kStepShift) - (begin >> kStepShift) > mask_ - 1) {
    return trace::Crc32cExtend(0, data_ + begin, end - begin);
  }
  const uint32_t at_end = PrefixAt(end);
  const uint32_t at_begin = PrefixAt(begin);
  return at_end ^ Shift(at_begin, end - begin);
}

}  // namespace report
}  // namespace pinshim
