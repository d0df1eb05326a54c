#include "shim/trace/site_totals.h"

#include <cstring>

namespace pinshim {
namespace trace {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr uint64_t kUsedKey = uint64_t{1} << 63;

// Key layout: bit 63 used; 32..62 stack; 20..31 api; 14..19 kinds; 10..13
// bits (dir, async, failed); 0..5 size class.
uint64_t KeyOf(const SiteCopy& c) {
  const uint64_t bits =
      (static_cast<uint64_t>(c.dir) & kCopyDirMask) | (c.async ? 4u : 0u) | (c.failed ? 8u : 0u);
  const uint64_t kinds = static_cast<uint64_t>(c.src) | (static_cast<uint64_t>(c.dst) << 3);
  return kUsedKey | (uint64_t{c.stack & 0x7fffffffu} << 32) | (uint64_t{c.api & 0xfffu} << 20) |
         (kinds << 14) | (bits << 10) | SizeClass(c.bytes);
}

uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

SiteTotals::Cell* SiteTotals::Find(uint64_t key, bool may_claim) {
  size_t i = Mix(key) & (kSlots - 1);
  for (size_t probe = 0; probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    uint64_t cur = cells_[i].key.load(std::memory_order_acquire);
    if (cur == key) return &cells_[i];
    if (cur != 0) continue;
    if (!may_claim) return nullptr;
    uint64_t expected = 0;
    if (cells_[i].key.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
      used_.fetch_add(1, kRelaxed);
      return &cells_[i];
    }
    if (expected == key) return &cells_[i];
  }
  return nullptr;
}

void SiteTotals::Add(const SiteCopy& copy) {
  SiteCopy c = copy;
  uint64_t key = KeyOf(c);
  Cell* cell = Find(key, used_.load(kRelaxed) < kSiteCellLimit);
  if (cell == nullptr && c.stack != 0) {
    spilled_.fetch_add(1, kRelaxed);
    c.stack = 0;
    cell = Find(KeyOf(c), true);
  }
  copies_.fetch_add(1, kRelaxed);
  changed_.store(true, kRelaxed);
  if (cell == nullptr) {
    lost_.fetch_add(1, kRelaxed);
    return;
  }
  cell->copies.fetch_add(1, kRelaxed);
  cell->bytes.fetch_add(c.bytes, kRelaxed);
  cell->call_ns.fetch_add(c.call_ns, kRelaxed);
  if (c.overlap_ns != 0) cell->overlap_ns.fetch_add(c.overlap_ns, kRelaxed);
}

void SiteTotals::NoteTime(uint64_t ns) {
  uint64_t cur = last_ns_.load(kRelaxed);
  while (ns > cur && !last_ns_.compare_exchange_weak(cur, ns, kRelaxed)) {
  }
}

size_t SiteTotals::Encode(SiteTotalsFields h, uint8_t* out, size_t cap) const {
  if (cap < kMaxSiteTotalsBytes) return 0;
  h.last_ns = last_ns_.load(kRelaxed);
  h.copies = copies_.load(kRelaxed);
  h.spilled = spilled_.load(kRelaxed);
  h.lost = lost_.load(kRelaxed);
  const auto count = [this](NotDetailed k) {
    return not_detailed_[static_cast<int>(k)].load(kRelaxed);
  };
  h.pins = count(NotDetailed::kPin);
  h.host_allocs = count(NotDetailed::kHostAlloc);
  h.syncs = count(NotDetailed::kSync);
  h.misuses = count(NotDetailed::kMisuse);
  h.others = count(NotDetailed::kOther);
  uint8_t scratch[FieldCount<SiteTotalsFields>() * kMaxVarint];
  size_t n = static_cast<size_t>(PutFields(scratch, h) - scratch);
  uint8_t* p = PutVarint(out, n);
  memcpy(p, scratch, n);
  p += n;
  uint8_t* count_at = p;
  uint64_t cells = 0;
  p += kMaxVarint;  // the count goes here once known
  for (const Cell& c : cells_) {
    const uint64_t key = c.key.load(std::memory_order_acquire);
    const uint64_t copies = c.copies.load(kRelaxed);
    if (key == 0 || copies == 0) continue;
    SiteCellFields f;
    f.stack = (key >> 32) & 0x7fffffffu;
    f.api = (key >> 20) & 0xfffu;
    f.kinds = (key >> 14) & 0x3fu;
    const uint64_t bits = (key >> 10) & 0xfu;
    f.bits =
        (bits & kCopyDirMask) | ((bits & 4) ? kCopyAsync : 0) | ((bits & 8) ? kCopyHasResult : 0);
    f.size_class = key & 0x3fu;
    f.copies = copies;
    f.bytes = c.bytes.load(kRelaxed);
    f.call_ns = c.call_ns.load(kRelaxed);
    f.overlap_ns = c.overlap_ns.load(kRelaxed);
    uint8_t cell[kMaxSiteCellBytes];
    const size_t len = static_cast<size_t>(PutFields(cell, f) - cell);
    p = PutVarint(p, len);
    memcpy(p, cell, len);
    p += len;
    ++cells;
  }
  // The count, moved down to its own length.
  uint8_t head[kMaxVarint];
  const size_t head_len = static_cast<size_t>(PutVarint(head, cells) - head);
  memmove(count_at + head_len, count_at + kMaxVarint,
          static_cast<size_t>(p - (count_at + kMaxVarint)));
  memcpy(count_at, head, head_len);
  return static_cast<size_t>(p - out) - (kMaxVarint - head_len);
}

void SiteTotals::Reset() {
  for (Cell& c : cells_) {
    c.key.store(0, kRelaxed);
    c.copies.store(0, kRelaxed);
    c.bytes.store(0, kRelaxed);
    c.call_ns.store(0, kRelaxed);
    c.overlap_ns.store(0, kRelaxed);
  }
  used_.store(0, kRelaxed);
  copies_.store(0, kRelaxed);
  spilled_.store(0, kRelaxed);
  lost_.store(0, kRelaxed);
  last_ns_.store(0, kRelaxed);
  for (auto& n : not_detailed_) n.store(0, kRelaxed);
  changed_.store(false, kRelaxed);
}

uint64_t SiteGaps::Overlap(uint32_t stack, uint64_t start_ns, uint64_t duration_ns) {
  Entry& e = entries_[(stack * 0x9e3779b1u) >> 29];  // kEntries == 8
  uint64_t overlap = 0;
  if (e.seen && e.stack == stack && start_ns >= e.last_end) {
    const uint64_t gap = start_ns - e.last_end;
    overlap = gap < e.last_duration ? gap : e.last_duration;
  }
  e.stack = stack;
  e.seen = true;
  e.last_end = start_ns + duration_ns;
  e.last_duration = duration_ns;
  return overlap;
}

}  // namespace trace
}  // namespace pinshim
