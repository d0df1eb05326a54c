#include "shim/optimize/hot_sites.h"

#include <dlfcn.h>
#include <link.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "shim/core/backtrace.h"
#include "shim/core/phdr.h"

namespace pinshim {
namespace optimize {
namespace {

// This library's mapped span, [lo, hi); 0/0 until InitSiteCapture.
std::atomic<uintptr_t> g_self_lo{0};
std::atomic<uintptr_t> g_self_hi{0};

struct SelfSearch {
  uintptr_t probe;
  uintptr_t lo;
  uintptr_t hi;
};

int FindSelf(struct dl_phdr_info* info, size_t, void* arg) {
  auto* s = static_cast<SelfSearch*>(arg);
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t a = info->dlpi_addr + ph.p_vaddr;
    if (a < lo) lo = a;
    if (a + ph.p_memsz > hi) hi = a + ph.p_memsz;
  }
  if (s->probe >= lo && s->probe < hi) {
    s->lo = lo;
    s->hi = hi;
    return 1;
  }
  return 0;
}

}  // namespace

int64_t HotSites::Find(uint64_t key, bool create) {
  const uint32_t mask = kSlots - 1;
  uint32_t i = static_cast<uint32_t>(key ^ (key >> 29)) & mask;
  for (uint32_t probes = 0; probes < kSlots; ++probes, i = (i + 1) & mask) {
    uint64_t k = keys_[i].load(std::memory_order_acquire);
    if (k == key) return i;
    if (k != 0) continue;
    if (!create) return -1;
    if (keys_[i].compare_exchange_strong(k, key, std::memory_order_acq_rel)) return i;
    if (k == key) return i;  // another thread claimed it for the same key
  }
  return -1;
}

HotSites::State HotSites::Get(uint64_t key) const {
  const int64_t i = const_cast<HotSites*>(this)->Find(key, false);
  return i < 0 ? kUnknown : static_cast<State>(states_[i].load(std::memory_order_acquire));
}

bool HotSites::IsHot(uint64_t key, const SiteFrames& frames) {
  int64_t i = Find(key, false);
  if (i >= 0) {
    const uint8_t st = states_[i].load(std::memory_order_acquire);
    if (st != kUnknown) return st == kHot;
  }
  // First sight: the profile decides (outside any lock; it may take the
  // loader's lock to resolve build ids).
  auto contains = profile_.load(std::memory_order_acquire);
  const bool listed = contains != nullptr && contains(frames);
  i = Find(key, true);
  if (i < 0) {
    overflows_.fetch_add(1, std::memory_order_relaxed);
    return listed;
  }
  uint8_t expected = kUnknown;
  const uint8_t want = listed ? kHot : kCold;
  if (states_[i].compare_exchange_strong(expected, want, std::memory_order_acq_rel)) {
    if (listed) {
      hot_.fetch_add(1, std::memory_order_relaxed);
      from_profile_.fetch_add(1, std::memory_order_relaxed);
    }
    return listed;
  }
  return expected == kHot;
}

void HotSites::MarkHot(uint64_t key) {
  if (key == 0) return;
  const int64_t i = Find(key, true);
  if (i < 0) {
    overflows_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (states_[i].exchange(kHot, std::memory_order_acq_rel) != kHot) {
    hot_.fetch_add(1, std::memory_order_relaxed);
  }
}

void InitSiteCapture() {
  SelfSearch s{reinterpret_cast<uintptr_t>(&InitSiteCapture), 0, 0};
  IteratePhdr(FindSelf, &s);
  g_self_lo.store(s.lo, std::memory_order_relaxed);
  g_self_hi.store(s.hi, std::memory_order_release);
}

void SetSelfRangeForTest(uintptr_t lo, uintptr_t hi) {
  g_self_lo.store(lo, std::memory_order_relaxed);
  g_self_hi.store(hi, std::memory_order_release);
}

namespace {

// The site's frames among ips[0, n): the first kSiteFrames outside this
// library.
void KeepOutside(void* const* ips, int n, SiteFrames* frames) {
  const uintptr_t hi = g_self_hi.load(std::memory_order_acquire);
  const uintptr_t lo = g_self_lo.load(std::memory_order_relaxed);
  frames->n = 0;
  for (int i = 0; i < n && frames->n < kSiteFrames; ++i) {
    const auto a = reinterpret_cast<uintptr_t>(ips[i]);
    if (a >= lo && a < hi) continue;
    frames->ips[frames->n++] = a;
  }
}

}  // namespace

void CaptureSite(SiteFrames* frames) {
  // Each frame walked costs (about 6 ns on the development VM), and a
  // program's stack may be far deeper than the site (a Python program's):
  // a short walk first, room for this library's two or three frames above
  // the site; a deeper one only when that left the site short.
  constexpr int kShort = kSiteFrames + 4;
  constexpr int kMax = kSiteFrames + 16;
  void* ips[kMax];
  int n = Backtrace(ips, kShort);
  KeepOutside(ips, n, frames);
  if (frames->n < kSiteFrames && n == kShort) {
    n = Backtrace(ips, kMax);
    KeepOutside(ips, n, frames);
  }
}

}  // namespace optimize
}  // namespace pinshim
