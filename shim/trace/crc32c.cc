#include "shim/trace/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace pinshim {
namespace trace {
namespace {

constexpr uint32_t kPolyReflected = 0x82f63b78u;

struct Table {
  uint32_t t[256];
  constexpr Table() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
      t[i] = c;
    }
  }
};
// constexpr so that the table exists before any constructor runs: the
// library may checksum a frame from another library's constructor.
constexpr Table kTable;

uint32_t ExtendPortable(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kTable.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool HasSse42() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c & bit_SSE4_2) != 0;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  // 0 unknown, 1 table, 2 hardware; racing first callers compute the same.
  static int mode = 0;
  int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
  if (m == 0) {
    m = HasSse42() ? 2 : 1;
    __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
  }
  if (m == 2) return ExtendHardware(crc, p, n);
#endif
  return ExtendPortable(crc, p, n);
}

}  // namespace trace
}  // namespace pinshim
