// The CRC-32C of many byte ranges of one buffer, for the trace reader's scan,
// in time linear in the buffer whatever the ranges.
//
// Checking a frame at every offset of a damaged region, each up to
// kMaxFramePayload long, would checksum the same bytes millions of times.
// Instead the CRC of every prefix data[0, 64k) is kept (each byte is
// checksummed once), and the CRC of data[a, b) follows from the prefixes at
// a and b, since CRC(A B) = CRC(A) * x^(8|B|) + CRC(B) over GF(2): one
// extension of under 64 bytes at each end and two multiplications.
//
// Ranges must start at non-decreasing offsets and be at most kMaxRange long
// (the reader's scan never goes back); then only a window of prefixes is
// kept. A range outside that contract is checksummed directly.
#ifndef PINSHIM_ANALYZER_REPORT_RANGE_CRC_H_
#define PINSHIM_ANALYZER_REPORT_RANGE_CRC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pinshim {
namespace report {

class RangeCrc {
 public:
  static constexpr size_t kMaxRange = size_t{8} << 20;

  RangeCrc(const uint8_t* data, size_t size);

  // CRC-32C of data[begin, end), the value trace::Crc32c gives.
  uint32_t Crc(uint64_t begin, uint64_t end);

 private:
  static constexpr unsigned kStepShift = 6;  // a prefix every 64 bytes
  static constexpr uint64_t kStep = uint64_t{1} << kStepShift;

  // CRC of data[0, pos), from the nearest kept prefix.
  uint32_t PrefixAt(uint64_t pos);

  const uint8_t* data_;
  size_t size_;
  std::vector<uint32_t> ring_;  // prefix k (data[0, k * kStep)) at k & mask_
  uint64_t mask_ = 0;
  uint64_t low_ = 0;   // oldest prefix index still kept
  uint64_t high_ = 0;  // prefixes [low_, high_] are kept
};

// CRC(A B) from CRC(A), CRC(B) and |B| <= RangeCrc::kMaxRange, as zlib's
// crc32_combine does for its own polynomial. Exposed for its test.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

// The same with the portable multiplication only (the CPU's carry-less
// multiply is used where it has one), for the test to compare both.
uint32_t Crc32cCombinePortable(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_RANGE_CRC_H_
