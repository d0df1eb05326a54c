// The GPU tier's programs count every copy and pinned-memory call they make
// and print the totals as one "expect:" line, in the vocabulary that
// run_gpu_tier.sh derives from pinshim's summary. A value is either exact
// ("h2d=12") or a range ("failed_copies=0..2") where the program cannot know
// whether a call reaches the driver (the CUDA runtime may reject some invalid
// calls itself). Header-only so nvcc and a plain C++ compiler both build it.
#ifndef PINSHIM_TESTS_GPU_CALL_LEDGER_H_
#define PINSHIM_TESTS_GPU_CALL_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace pinshim_gpu_tier {

enum class Dir { kH2D, kD2H, kD2D, kH2H };

// The host side of a copy, as the program allocated it.
enum class Host {
  kNone,        // device-to-device
  kPageable,    // malloc, aligned_alloc, new
  kPinned,      // cudaHostAlloc / cudaMallocHost / cuMemHostAlloc
  kPinnedWc,    // pinned with the write-combined flag
  kRegistered,  // malloc memory passed to cudaHostRegister
};

// FNV-1a over a buffer; printed so runs with and without the library can be
// compared byte for byte.
inline uint64_t Checksum(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// Fills a buffer with a pattern that depends on every word's index and seed.
inline void Fill(void* data, size_t bytes, uint32_t seed) {
  unsigned char* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u + seed;
    p[i] = static_cast<unsigned char>((x >> 13) ^ (x >> 24));
  }
}

inline void PrintChecksum(const char* label, const void* data, size_t bytes) {
  std::printf("checksum %s bytes=%zu fnv=%016llx\n", label, bytes,
              static_cast<unsigned long long>(Checksum(data, bytes)));
}

// Counts what one program did. Successful calls are exact; failed calls are
// kept apart because pinshim's summary counts a failed call only if it
// reached the driver.
class CallLedger {
 public:
  // One successful copy of `bytes` bytes.
  void Copy(Dir dir, Host host, uint64_t bytes) {
    ++copies_[static_cast<int>(dir)];
    copy_bytes_ += bytes;
    switch (host) {
      case Host::kPageable: ++host_pageable_; break;
      case Host::kPinned: ++host_pinned_; break;
      case Host::kPinnedWc:
        ++host_pinned_;
        ++host_wc_;
        break;
      case Host::kRegistered: ++host_registered_; break;
      case Host::kNone: break;
    }
  }
  // One copy call that returned an error. `reaches_driver`: the call is
  // certain to have been made on the driver (a driver-API program), as
  // opposed to a runtime call the runtime might have refused by itself.
  void FailedCopy(uint64_t bytes, bool reaches_driver) {
    ++failed_copies_max_;
    if (reaches_driver) ++failed_copies_min_;
    failed_copy_bytes_ += bytes;
  }
  void PinAlloc(uint64_t bytes) {
    ++pin_allocs_;
    pin_alloc_bytes_ += bytes;
  }
  void PinFree() { ++pin_frees_; }
  void Register(uint64_t bytes) {
    ++registers_;
    register_bytes_ += bytes;
  }
  void Unregister() { ++unregisters_; }
  // One pinned-memory call that returned an error (see FailedCopy).
  void FailedPin(uint64_t bytes_if_register, bool reaches_driver) {
    ++failed_pins_max_;
    if (reaches_driver) ++failed_pins_min_;
    failed_register_bytes_ += bytes_if_register;
  }

  // The line run_gpu_tier.sh compares with the summary.
  std::string ExpectLine() const {
    std::string s = "expect:";
    uint64_t total = 0;
    for (uint64_t c : copies_) total += c;
    Add(&s, "copies", total);
    Add(&s, "h2d", copies_[0]);
    Add(&s, "d2h", copies_[1]);
    Add(&s, "d2d", copies_[2]);
    Add(&s, "h2h", copies_[3]);
    // Whether a failed call's bytes are added to a summary line is the
    // library's choice; both are accepted.
    AddRange(&s, "copy_bytes", copy_bytes_, copy_bytes_ + failed_copy_bytes_);
    AddRange(&s, "failed_copies", failed_copies_min_, failed_copies_max_);
    Add(&s, "pin_allocs", pin_allocs_);
    Add(&s, "pin_frees", pin_frees_);
    Add(&s, "registers", registers_);
    Add(&s, "unregisters", unregisters_);
    AddRange(&s, "failed_pins", failed_pins_min_, failed_pins_max_);
    Add(&s, "pin_alloc_bytes", pin_alloc_bytes_);
    AddRange(&s, "register_bytes", register_bytes_, register_bytes_ + failed_register_bytes_);
    Add(&s, "host_pageable", host_pageable_);
    Add(&s, "host_pinned", host_pinned_);
    Add(&s, "host_registered", host_registered_);
    Add(&s, "host_wc", host_wc_);
    return s;
  }

 private:
  static void Add(std::string* s, const char* key, uint64_t v) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), " %s=%llu", key, static_cast<unsigned long long>(v));
    *s += buf;
  }
  static void AddRange(std::string* s, const char* key, uint64_t lo, uint64_t hi) {
    if (lo == hi) return Add(s, key, lo);
    char buf[128];
    std::snprintf(buf, sizeof(buf), " %s=%llu..%llu", key, static_cast<unsigned long long>(lo),
                  static_cast<unsigned long long>(hi));
    *s += buf;
  }

  uint64_t copies_[4] = {0, 0, 0, 0};
  uint64_t copy_bytes_ = 0;
  uint64_t failed_copies_min_ = 0;
  uint64_t failed_copies_max_ = 0;
  uint64_t failed_copy_bytes_ = 0;
  uint64_t pin_allocs_ = 0;
  uint64_t pin_frees_ = 0;
  uint64_t registers_ = 0;
  uint64_t unregisters_ = 0;
  uint64_t failed_pins_min_ = 0;
  uint64_t failed_pins_max_ = 0;
  uint64_t pin_alloc_bytes_ = 0;
  uint64_t register_bytes_ = 0;
  uint64_t failed_register_bytes_ = 0;
  uint64_t host_pageable_ = 0;
  uint64_t host_pinned_ = 0;
  uint64_t host_registered_ = 0;
  uint64_t host_wc_ = 0;
};

}  // namespace pinshim_gpu_tier

#endif  // PINSHIM_TESTS_GPU_CALL_LEDGER_H_
