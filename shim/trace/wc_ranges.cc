#include "shim/trace/wc_ranges.h"

#include <atomic>

namespace pinshim {
namespace trace {
namespace {

// begin: 0 free, 1 being written, else the start of a live range.
struct Slot {
  std::atomic<uintptr_t> begin;
  std::atomic<uintptr_t> end;
};
constexpr uintptr_t kBusy = 1;

Slot g_slots[kMaxWcRanges];
std::atomic<size_t> g_high_water{0};  // slots [0, g_high_water) may be in use
std::atomic<size_t> g_live{0};

}  // namespace

bool AddWcRange(const void* ptr, uint64_t bytes) {
  uintptr_t begin = reinterpret_cast<uintptr_t>(ptr);
  if (begin <= kBusy || bytes == 0) return false;
  for (size_t i = 0; i < kMaxWcRanges; ++i) {
    uintptr_t expected = 0;
    if (!g_slots[i].begin.compare_exchange_strong(expected, kBusy)) continue;
    g_slots[i].end.store(begin + bytes, std::memory_order_relaxed);
    size_t hw = g_high_water.load();
    while (hw < i + 1 && !g_high_water.compare_exchange_weak(hw, i + 1)) {
    }
    g_live.fetch_add(1);
    g_slots[i].begin.store(begin, std::memory_order_release);
    return true;
  }
  return false;
}

bool RemoveWcRange(const void* ptr) {
  uintptr_t begin = reinterpret_cast<uintptr_t>(ptr);
  if (g_live.load(std::memory_order_relaxed) == 0) return false;
  size_t hw = g_high_water.load(std::memory_order_acquire);
  for (size_t i = 0; i < hw; ++i) {
    uintptr_t expected = begin;
    if (g_slots[i].begin.compare_exchange_strong(expected, kBusy)) {
      g_slots[i].end.store(0, std::memory_order_relaxed);
      g_live.fetch_sub(1);
      g_slots[i].begin.store(0, std::memory_order_release);
      return true;
    }
  }
  return false;
}

bool OverlapsWc(const void* ptr, size_t len) {
  if (g_live.load(std::memory_order_relaxed) == 0) return false;
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t b = a + (len == 0 ? 1 : len);
  size_t hw = g_high_water.load(std::memory_order_acquire);
  for (size_t i = 0; i < hw; ++i) {
    uintptr_t begin = g_slots[i].begin.load(std::memory_order_acquire);
    if (begin <= kBusy) continue;
    uintptr_t end = g_slots[i].end.load(std::memory_order_relaxed);
    if (a < end && begin < b) return true;
  }
  return false;
}

size_t SnapshotWcRanges(WcRange* out, size_t max) {
  size_t n = 0;
  size_t hw = g_high_water.load(std::memory_order_acquire);
  for (size_t i = 0; i < hw && n < max; ++i) {
    uintptr_t begin = g_slots[i].begin.load(std::memory_order_acquire);
    if (begin <= kBusy) continue;
    uintptr_t end = g_slots[i].end.load(std::memory_order_relaxed);
    if (end > begin) out[n++] = WcRange{begin, end};
  }
  return n;
}

void ClearWcRanges() {
  for (size_t i = 0; i < kMaxWcRanges; ++i) {
    g_slots[i].begin.store(0);
    g_slots[i].end.store(0);
  }
  g_live.store(0);
  g_high_water.store(0);
}

}  // namespace trace
}  // namespace pinshim
