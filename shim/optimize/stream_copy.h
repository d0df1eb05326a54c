// Copies into memory the CPU will not read back (a staging ring's slot the
// device reads next): non-temporal stores skip the read-for-ownership of
// the destination, which on the H200's host raised staged host-to-device
// throughput (bench/RESULTS.md, staging probe). The stager's copy routines,
// and bench/copy/handoff_probe's, which times them as the stager runs them.
#ifndef PINSHIM_SHIM_OPTIMIZE_STREAM_COPY_H_
#define PINSHIM_SHIM_OPTIMIZE_STREAM_COPY_H_

#include <emmintrin.h>
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace pinshim {
namespace optimize {

// 16-byte streaming stores (SSE2, every x86-64 CPU).
inline void CopyStreaming(char* dst, const char* src, size_t n) {
  while (n != 0 && (reinterpret_cast<uintptr_t>(dst) & 15) != 0) {
    *dst++ = *src++;
    --n;
  }
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();  // the DMA that follows must see every byte
}

// The same with 32-byte stores, where the CPU has AVX2 (the caller checks).
__attribute__((target("avx2"))) inline void CopyStreamingAvx2(char* dst, const char* src,
                                                              size_t n) {
  while (n != 0 && (reinterpret_cast<uintptr_t>(dst) & 31) != 0) {
    *dst++ = *src++;
    --n;
  }
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  for (; i < n; ++i) dst[i] = src[i];
  _mm_sfence();
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_STREAM_COPY_H_
