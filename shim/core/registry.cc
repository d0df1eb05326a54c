#include "shim/core/registry.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "shim/core/internal_alloc.h"

namespace pinshim {

// A two-level sorted table: an index of chunks ordered by their first start
// address, each chunk a sorted array of up to kChunkCap ranges. Lookups are
// two binary searches over contiguous memory; inserts move at most one
// chunk's worth of entries.
constexpr size_t kChunkCap = 64;

struct Registry::Chunk {
  uint32_t count;
  Chunk* next_free;
  uintptr_t starts[kChunkCap];
  Region regions[kChunkCap];
};

struct Registry::Index {
  size_t capacity;
  size_t count;
  Index* retired;  // the index this one replaced (kept mapped for readers)
  uintptr_t* firsts;
  Chunk** chunks;
};

namespace {

inline void CpuRelax() { __builtin_ia32_pause(); }

// Index of the last element of sorted `a[0, n)` that is <= key, or -1.
// Branch-free (the comparison feeds a conditional move), because lookups
// probe unpredictable addresses and a mispredicted branch per step would
// cost more than the memory reads.
inline long FloorIndex(const uintptr_t* a, size_t n, uintptr_t key) {
  if (n == 0) return -1;
  const uintptr_t* base = a;
  size_t len = n;
  while (len > 1) {
    size_t half = len / 2;
    base = (base[half] <= key) ? base + half : base;
    len -= half;
  }
  long pos = base - a;
  return *base <= key ? pos : pos - 1;
}

}  // namespace

void Registry::SummaryCount(uint8_t* s, const Region& r, int delta) {
  if (r.bytes == 0) return;
  const uintptr_t end = r.bytes > UINTPTR_MAX - r.start ? UINTPTR_MAX : r.start + r.bytes;
  for (uintptr_t g = r.start >> kGranuleShift;
       g < kSummaryGranules && g <= (end - 1) >> kGranuleShift; ++g) {
    const uint8_t v = __atomic_load_n(&s[g], __ATOMIC_RELAXED);
    // A saturated count no longer knows how many ranges it stands for.
    if (v == 255 || (delta < 0 && v == 0)) continue;
    __atomic_store_n(&s[g], static_cast<uint8_t>(v + delta), __ATOMIC_RELAXED);
  }
}

void Registry::SummaryAdd(const Region& r) {
  uint8_t* s = summary_.load(std::memory_order_relaxed);
  if (s == nullptr) {
    if (summary_refused_) return;
    // Mapped by the first insert, before any range exists (every insert
    // counts its range here first). Reserved, not committed: only the pages
    // of granules that ranges touch are ever written. A system call, not
    // mmap: this runs inside the program's own mmap calls.
    void* p =
        reinterpret_cast<void*>(syscall(SYS_mmap, nullptr, kSummaryGranules, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (p == MAP_FAILED) {  // no summary: every probe searches
      summary_refused_ = true;
      return;
    }
    // Left out of core dumps (64 MiB of mostly untouched zeros).
    syscall(SYS_madvise, p, kSummaryGranules, MADV_DONTDUMP);
    s = static_cast<uint8_t*>(p);
    summary_.store(s, std::memory_order_release);
  }
  if (r.bytes > kSummaryMaxRange) {
    // Counting it would write a megabyte or more of the summary (and every
    // later write of it again): the registry does without its summary from
    // now on. Readers may still hold the old pointer; the mapping stays.
    summary_refused_ = true;
    summary_.store(nullptr, std::memory_order_release);
    return;
  }
  SummaryCount(s, r, +1);
}

void Registry::SummarySub(const Region& r) {
  uint8_t* s = summary_.load(std::memory_order_relaxed);
  if (s != nullptr) SummaryCount(s, r, -1);
}

void Registry::BeginWrite() {
  seq_.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

void Registry::EndWrite() { seq_.fetch_add(1, std::memory_order_release); }

Registry::Chunk* Registry::NewChunk() {
  Chunk* c = free_chunks_;
  if (c != nullptr) {
    free_chunks_ = c->next_free;
  } else {
    c = static_cast<Chunk*>(InternalAlloc(sizeof(Chunk)));
    if (c == nullptr) return nullptr;
  }
  c->count = 0;
  c->next_free = nullptr;
  return c;
}

bool Registry::GrowIndexLocked() {
  Index* old = index_.load(std::memory_order_relaxed);
  size_t cap = old ? old->capacity * 2 : 16;
  size_t bytes = sizeof(Index) + cap * (sizeof(uintptr_t) + sizeof(Chunk*));
  auto* raw = static_cast<char*>(InternalAlloc(bytes));
  if (raw == nullptr) return false;
  auto* idx = reinterpret_cast<Index*>(raw);
  idx->capacity = cap;
  idx->firsts = reinterpret_cast<uintptr_t*>(raw + sizeof(Index));
  idx->chunks = reinterpret_cast<Chunk**>(raw + sizeof(Index) + cap * sizeof(uintptr_t));
  idx->retired = old;
  if (old != nullptr) {
    idx->count = old->count;
    memcpy(idx->firsts, old->firsts, old->count * sizeof(uintptr_t));
    memcpy(idx->chunks, old->chunks, old->count * sizeof(Chunk*));
  }
  index_.store(idx, std::memory_order_release);
  return true;
}

size_t Registry::FindChunkLocked(uintptr_t addr) const {
  const Index* idx = index_.load(std::memory_order_relaxed);
  long pos = FloorIndex(idx->firsts, idx->count, addr);
  return pos < 0 ? 0 : static_cast<size_t>(pos);
}

bool Registry::InsertLocked(const Region& r) {
  Index* idx = index_.load(std::memory_order_relaxed);
  if (idx == nullptr && !GrowIndexLocked()) return false;
  idx = index_.load(std::memory_order_relaxed);
  if (idx->count == 0) {
    Chunk* c = NewChunk();
    if (c == nullptr) return false;
    c->starts[0] = r.start;
    c->regions[0] = r;
    c->count = 1;
    idx->chunks[0] = c;
    idx->firsts[0] = r.start;
    idx->count = 1;
    count_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  size_t pos = FindChunkLocked(r.start);
  Chunk* c = idx->chunks[pos];
  if (c->count == kChunkCap) {
    // Split: the upper half moves to a new chunk placed right after this one.
    if (idx->count == idx->capacity) {
      if (!GrowIndexLocked()) return false;
      idx = index_.load(std::memory_order_relaxed);
    }
    Chunk* upper = NewChunk();
    if (upper == nullptr) return false;
    size_t half = kChunkCap / 2;
    memcpy(upper->starts, c->starts + half, (kChunkCap - half) * sizeof(uintptr_t));
    memcpy(upper->regions, c->regions + half, (kChunkCap - half) * sizeof(Region));
    upper->count = kChunkCap - half;
    memmove(idx->firsts + pos + 2, idx->firsts + pos + 1,
            (idx->count - pos - 1) * sizeof(uintptr_t));
    memmove(idx->chunks + pos + 2, idx->chunks + pos + 1, (idx->count - pos - 1) * sizeof(Chunk*));
    idx->firsts[pos + 1] = upper->starts[0];
    idx->chunks[pos + 1] = upper;
    idx->count++;
    c->count = half;
    if (r.start >= upper->starts[0]) {
      pos++;
      c = upper;
    }
  }
  long at = FloorIndex(c->starts, c->count, r.start) + 1;
  memmove(c->starts + at + 1, c->starts + at, (c->count - at) * sizeof(uintptr_t));
  memmove(c->regions + at + 1, c->regions + at, (c->count - at) * sizeof(Region));
  c->starts[at] = r.start;
  c->regions[at] = r;
  c->count++;
  idx->firsts[pos] = c->starts[0];
  count_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool Registry::RemoveAtLocked(size_t pos, size_t slot, Region* out) {
  Index* idx = index_.load(std::memory_order_relaxed);
  Chunk* c = idx->chunks[pos];
  if (out != nullptr) *out = c->regions[slot];
  SummarySub(c->regions[slot]);
  memmove(c->starts + slot, c->starts + slot + 1, (c->count - slot - 1) * sizeof(uintptr_t));
  memmove(c->regions + slot, c->regions + slot + 1, (c->count - slot - 1) * sizeof(Region));
  c->count--;
  count_.fetch_sub(1, std::memory_order_relaxed);
  if (c->count == 0) {
    memmove(idx->firsts + pos, idx->firsts + pos + 1, (idx->count - pos - 1) * sizeof(uintptr_t));
    memmove(idx->chunks + pos, idx->chunks + pos + 1, (idx->count - pos - 1) * sizeof(Chunk*));
    idx->count--;
    c->next_free = free_chunks_;
    free_chunks_ = c;
  } else {
    idx->firsts[pos] = c->starts[0];
  }
  return true;
}

bool Registry::Insert(const Region& r) {
  if (r.bytes == 0) return true;
  mu_.Lock();
  BeginWrite();
  SummaryAdd(r);  // before the stale ranges it replaces are subtracted
  RemoveSpanLocked(r.start, r.bytes, nullptr, nullptr);
  bool ok = InsertLocked(r);
  if (!ok) SummarySub(r);
  EndWrite();
  mu_.Unlock();
  return ok;
}

bool Registry::Remove(uintptr_t start, Region* out) {
  mu_.Lock();
  bool found = false;
  Index* idx = index_.load(std::memory_order_relaxed);
  if (idx != nullptr && idx->count != 0) {
    size_t pos = FindChunkLocked(start);
    Chunk* c = idx->chunks[pos];
    long slot = FloorIndex(c->starts, c->count, start);
    if (slot >= 0 && c->starts[slot] == start) {
      BeginWrite();
      found = RemoveAtLocked(pos, static_cast<size_t>(slot), out);
      EndWrite();
    }
  }
  mu_.Unlock();
  return found;
}

size_t Registry::RemoveSpan(uintptr_t start, uint64_t bytes,
                            void (*on_removed)(void*, const Region&), void* arg) {
  if (bytes == 0) return 0;
  mu_.Lock();
  BeginWrite();
  size_t touched = RemoveSpanLocked(start, bytes, on_removed, arg);
  EndWrite();
  mu_.Unlock();
  return touched;
}

size_t Registry::RemoveSpanLocked(uintptr_t start, uint64_t bytes,
                                  void (*on_removed)(void*, const Region&), void* arg) {
  const uintptr_t end = start + bytes;
  size_t touched = 0;
  for (;;) {
    Index* idx = index_.load(std::memory_order_relaxed);
    if (idx == nullptr || idx->count == 0) break;
    // The first candidate is the last range starting at or before `start`
    // (it may stick into the span); after it, ranges in start order.
    size_t pos = FindChunkLocked(start);
    Chunk* c = idx->chunks[pos];
    long slot = FloorIndex(c->starts, c->count, start);
    if (slot < 0 || c->regions[slot].start + c->regions[slot].bytes <= start) {
      slot++;
      if (static_cast<size_t>(slot) == c->count) {
        if (pos + 1 == idx->count) break;
        pos++;
        c = idx->chunks[pos];
        slot = 0;
      }
    }
    Region r = c->regions[slot];
    if (r.start >= end || r.start + r.bytes <= start) break;
    // The parts that stay are counted in the summary before the range is
    // subtracted from it.
    const uintptr_t r_end = r.start + r.bytes;
    Region left = r, right = r;
    left.bytes = r.start < start ? start - r.start : 0;
    right.start = end;
    right.bytes = r_end > end ? r_end - end : 0;
    SummaryAdd(left);
    SummaryAdd(right);
    RemoveAtLocked(pos, static_cast<size_t>(slot), nullptr);
    ++touched;
    Region part = r;
    if (left.bytes != 0) {
      if (!InsertLocked(left)) SummarySub(left);
      part.start = start;
    }
    if (right.bytes != 0 && !InsertLocked(right)) SummarySub(right);
    part.bytes = (r_end < end ? r_end : end) - part.start;
    if (on_removed != nullptr) on_removed(arg, part);
  }
  return touched;
}

bool Registry::SearchUnsynchronized(uintptr_t addr, Region* out) const {
  const Index* idx = index_.load(std::memory_order_acquire);
  if (idx == nullptr) return false;
  size_t n = idx->count;
  if (n > idx->capacity) n = idx->capacity;
  long pos = FloorIndex(idx->firsts, n, addr);
  if (pos < 0) return false;
  const Chunk* c = idx->chunks[pos];
  if (c == nullptr) return false;
  size_t m = c->count;
  if (m > kChunkCap) m = kChunkCap;
  long slot = FloorIndex(c->starts, m, addr);
  if (slot < 0) return false;
  *out = c->regions[slot];
  return addr - out->start < out->bytes;
}

// The range at or before `start` (does it reach past start?) and the one
// after it (does it begin before end?): no other range can overlap.
bool Registry::OverlapUnsynchronized(uintptr_t start, uintptr_t end) const {
  const Index* idx = index_.load(std::memory_order_acquire);
  if (idx == nullptr) return false;
  size_t n = idx->count;
  if (n > idx->capacity) n = idx->capacity;
  if (n == 0) return false;
  long pos = FloorIndex(idx->firsts, n, start);
  long slot = -1;
  if (pos >= 0) {
    const Chunk* c = idx->chunks[pos];
    if (c == nullptr) return true;  // torn: let the caller look properly
    size_t m = c->count;
    if (m > kChunkCap) m = kChunkCap;
    slot = FloorIndex(c->starts, m, start);
    if (slot >= 0) {
      const Region& r = c->regions[slot];
      if (start - r.start < r.bytes) return true;
    }
    if (static_cast<size_t>(slot + 1) < m) return c->starts[slot + 1] < end;
  }
  // The successor is the first range of the next chunk.
  const size_t next = static_cast<size_t>(pos + 1);
  if (next >= n) return false;
  const Chunk* c = idx->chunks[next];
  if (c == nullptr) return true;
  return c->count != 0 && c->starts[0] < end;
}

bool Registry::SearchOverlap(uintptr_t start, uintptr_t end) const {
  for (int tries = 0; tries < 64; ++tries) {
    uint64_t s1 = seq_.load(std::memory_order_acquire);
    if (s1 & 1) {
      CpuRelax();
      continue;
    }
    bool found = OverlapUnsynchronized(start, end);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) == s1) return found;
  }
  mu_.Lock();
  bool found = OverlapUnsynchronized(start, end);
  mu_.Unlock();
  return found;
}

bool Registry::SearchLookup(uintptr_t addr, Region* out) const {
  Region r;
  // Optimistic reads first: they never write shared memory, so readers on
  // many threads don't contend. Clamped indices keep a torn read in bounds.
  for (int tries = 0; tries < 64; ++tries) {
    uint64_t s1 = seq_.load(std::memory_order_acquire);
    if (s1 & 1) {
      CpuRelax();
      continue;
    }
    bool found = SearchUnsynchronized(addr, &r);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) == s1) {
      if (found && out != nullptr) *out = r;
      return found;
    }
  }
  // A writer kept the table busy: read under its lock instead. (Lookups are
  // made from hooks, never from signal handlers, so this cannot self-deadlock.)
  mu_.Lock();
  bool found = SearchUnsynchronized(addr, &r);
  mu_.Unlock();
  if (found && out != nullptr) *out = r;
  return found;
}

void Registry::Clear() {
  mu_.Lock();
  BeginWrite();
  Index* idx = index_.load(std::memory_order_relaxed);
  if (idx != nullptr) {
    for (size_t i = 0; i < idx->count; ++i) {
      for (uint32_t j = 0; j < idx->chunks[i]->count; ++j) SummarySub(idx->chunks[i]->regions[j]);
      idx->chunks[i]->next_free = free_chunks_;
      free_chunks_ = idx->chunks[i];
    }
    idx->count = 0;
  }
  count_.store(0, std::memory_order_relaxed);
  EndWrite();
  mu_.Unlock();
}

void Registry::LockForFork() { mu_.Lock(); }

void Registry::UnlockAfterFork() { mu_.Unlock(); }

}  // namespace pinshim
