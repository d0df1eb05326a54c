#include "shim/trace/copy_watch.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace pinshim {
namespace trace {
namespace {

// A slot's state word: generation << 2 | phase. The generation changes on
// every release, so a thread that read a live slot's fields can tell, with
// one compare-and-swap, that the slot still holds the copy it read.
enum Phase : uint64_t { kFree = 0, kBusy = 1, kLive = 2 };

struct Slot {
  std::atomic<uint64_t> state{0};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<uintptr_t> stream{0};
  std::atomic<uint64_t> ticket{0};
  std::atomic<uint32_t> d2h{0};
  std::atomic<uintptr_t> guard_begin{0};  // protected pages, 0 none
  std::atomic<uintptr_t> guard_end{0};
};

// Event (and host function) marks: key -> the stream and ticket when marked.
struct Mark {
  std::atomic<uint64_t> key{0};
  std::atomic<uintptr_t> stream{0};
  std::atomic<uint64_t> ticket{0};  // 0 while being written
};
constexpr size_t kMarks = 512;
constexpr size_t kMarkProbes = 8;

// Guard ranges opened lately: a fault that lost the race with the opening
// is still the guard's, and is simply retried.
constexpr unsigned kRecent = 16;

// The program's cuMemHostAlloc blocks and the mappings glibc made for one
// malloc chunk each (copy_watch.h: which end pages may be guarded). A slot
// is free while its end is 0; `buffer` is a chunk's buffer, 0 for a block.
struct Block {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<uintptr_t> buffer{0};
};
constexpr size_t kBlocks = 1024;
Block g_blocks[kBlocks];
// Chunks entered and not yet released, and the span any ever lay in: most
// frees skip the scan (CopyWatchReleaseChunk).
std::atomic<uint32_t> g_chunks{0};
std::atomic<uintptr_t> g_chunk_lo{UINTPTR_MAX};
std::atomic<uintptr_t> g_chunk_hi{0};

Slot g_slots[kMaxWatchedCopies];
Mark g_marks[kMarks];
std::atomic<uint32_t> g_live{0};
// Every range ever watched lies in [g_lo, g_hi): most accesses (the heap,
// the stack) fall outside, and skip the scan. Only ever widened.
std::atomic<uintptr_t> g_lo{UINTPTR_MAX};
std::atomic<uintptr_t> g_hi{0};
std::atomic<size_t> g_high_water{0};
std::atomic<uint64_t> g_ticket{1};
std::atomic<uint64_t> g_faults{0};
std::atomic<uintptr_t> g_page{4096};
std::atomic<uintptr_t> g_recent_begin[kRecent];
std::atomic<uintptr_t> g_recent_end[kRecent];
std::atomic<unsigned> g_recent_next{0};
// Bumped after every change to the set of live guards (a slot armed,
// taken, or its guard shrunk), before the pages are given their new
// protection: ApplyProtection repeats until no change came in between, so
// that the last mprotect of every page answers the latest set of guards
// whatever order concurrent changes reach the kernel in.
std::atomic<uint64_t> g_guards_version{0};
// An ApplyProtection that keeps losing to concurrent changes stops here;
// the faults it leaves behind heal themselves (CopyGuardFault).
constexpr int kApplyRounds = 64;

inline uint64_t PhaseOf(uint64_t state) { return state & 3; }

// Widens [lo, hi) to hold [a, z) (only ever widened).
void Widen(std::atomic<uintptr_t>& lo, std::atomic<uintptr_t>& hi, uintptr_t a, uintptr_t z) {
  uintptr_t cur = lo.load(std::memory_order_relaxed);
  while (a < cur && !lo.compare_exchange_weak(cur, a)) {
  }
  cur = hi.load(std::memory_order_relaxed);
  while (z > cur && !hi.compare_exchange_weak(cur, z)) {
  }
}

void NoteRecent(uintptr_t begin, uintptr_t end) {
  unsigned i = g_recent_next.fetch_add(1, std::memory_order_relaxed) % kRecent;
  g_recent_end[i].store(0, std::memory_order_relaxed);
  g_recent_begin[i].store(begin, std::memory_order_relaxed);
  g_recent_end[i].store(end, std::memory_order_release);
}

bool InRecent(uintptr_t address) {
  for (unsigned i = 0; i < kRecent; ++i) {
    uintptr_t end = g_recent_end[i].load(std::memory_order_acquire);
    uintptr_t begin = g_recent_begin[i].load(std::memory_order_relaxed);
    if (begin <= address && address < end) return true;
  }
  return false;
}

size_t HighWater() { return g_high_water.load(std::memory_order_acquire); }

uintptr_t PageSize() { return g_page.load(std::memory_order_relaxed); }

// The stronger of two protections a page is asked for (-1: none asked).
int Stronger(int a, int b) { return a == -1 || b == PROT_NONE ? b : a; }

// The protection the live guards want at `at` (-1: none), and in *next
// where that answer may change next (at most `limit`).
int WantedAt(uintptr_t at, uintptr_t limit, uintptr_t* next) {
  int prot = -1;
  *next = limit;
  for (size_t i = 0; i < HighWater(); ++i) {
    const Slot& s = g_slots[i];
    if (PhaseOf(s.state.load(std::memory_order_acquire)) != kLive) continue;
    uintptr_t gb = s.guard_begin.load(std::memory_order_relaxed);
    uintptr_t ge = s.guard_end.load(std::memory_order_relaxed);
    if (gb == 0) continue;
    if (gb <= at && at < ge) {
      prot = Stronger(prot, s.d2h.load(std::memory_order_relaxed) ? PROT_NONE : PROT_READ);
      if (ge < *next) *next = ge;
    } else if (gb > at && gb < *next) {
      *next = gb;
    }
  }
  return prot;
}

void GuardsChanged() { g_guards_version.fetch_add(1, std::memory_order_seq_cst); }

// Gives the pages of [lo, hi) what the live guards want of them: their
// strongest protection, or read-write where none is left (page-locked
// memory is read-write as the driver hands it out).
void ApplyProtection(uintptr_t lo, uintptr_t hi) {
  const int saved = errno;
  for (int round = 0; round < kApplyRounds; ++round) {
    const uint64_t version = g_guards_version.load(std::memory_order_seq_cst);
    for (uintptr_t at = lo, next = lo; at < hi; at = next) {
      const int want = WantedAt(at, hi, &next);
      mprotect(reinterpret_cast<void*>(at), next - at, want == -1 ? PROT_READ | PROT_WRITE : want);
    }
    if (g_guards_version.load(std::memory_order_seq_cst) == version) break;
  }
  errno = saved;
}

// Takes the copy `seen` says slot `s` holds; false when another thread
// took it first. `open`: lift its guard (false when the memory is gone).
bool TakeSlot(Slot& s, uint64_t seen, bool open) {
  const uint64_t gen = seen >> 2;
  if (!s.state.compare_exchange_strong(seen, (gen << 2) | kBusy, std::memory_order_acq_rel)) {
    return false;
  }
  uintptr_t gb = s.guard_begin.load(std::memory_order_relaxed);
  uintptr_t ge = s.guard_end.load(std::memory_order_relaxed);
  if (gb != 0) {
    NoteRecent(gb, ge);
    GuardsChanged();
    // Pages another copy still guards keep that copy's protection.
    if (open) ApplyProtection(gb, ge);
  }
  s.guard_begin.store(0, std::memory_order_relaxed);
  s.guard_end.store(0, std::memory_order_relaxed);
  g_live.fetch_sub(1, std::memory_order_relaxed);
  s.state.store(((gen + 1) << 2) | kFree, std::memory_order_release);
  return true;
}

// Shrinks the guard of the copy `seen` says slot `s` holds so that it no
// longer covers the end pages in [lo, hi); the copy stays watched. False
// when another thread took the slot first.
bool ShrinkGuard(Slot& s, uint64_t seen, uintptr_t lo, uintptr_t hi) {
  const uint64_t gen = seen >> 2;
  if (!s.state.compare_exchange_strong(seen, (gen << 2) | kBusy, std::memory_order_acq_rel)) {
    return false;
  }
  const uintptr_t page = PageSize();
  const uintptr_t gb = s.guard_begin.load(std::memory_order_relaxed);
  const uintptr_t ge = s.guard_end.load(std::memory_order_relaxed);
  uintptr_t nb = gb, ne = ge;
  while (nb < ne && lo <= nb && nb < hi) nb += page;
  while (nb < ne && lo < ne && ne - page < hi) ne -= page;
  const bool changed = gb != 0 && (nb != gb || ne != ge);
  if (changed) {
    NoteRecent(gb, ge);
    s.guard_end.store(nb < ne ? ne : 0, std::memory_order_relaxed);
    s.guard_begin.store(nb < ne ? nb : 0, std::memory_order_relaxed);
  }
  s.state.store(seen, std::memory_order_release);
  if (changed) {
    GuardsChanged();
    ApplyProtection(gb, ge);
  }
  return true;
}

// Takes every live copy `pred` selects.
template <typename Pred>
void TakeAll(Pred pred, bool open) {
  if (g_live.load(std::memory_order_relaxed) == 0) return;
  for (size_t i = 0; i < HighWater(); ++i) {
    Slot& s = g_slots[i];
    uint64_t st = s.state.load(std::memory_order_acquire);
    if (PhaseOf(st) != kLive || !pred(s)) continue;
    TakeSlot(s, st, open);
  }
}

Mark* FindMark(uint64_t key, bool create) {
  size_t h = static_cast<size_t>((key * 0x9e3779b97f4a7c15ull) >> 55) % kMarks;
  for (size_t probe = 0; probe < kMarkProbes; ++probe) {
    Mark& m = g_marks[(h + probe) % kMarks];
    uint64_t k = m.key.load(std::memory_order_acquire);
    if (k == key) return &m;
    if (k == 0) {
      if (!create) return nullptr;
      uint64_t expected = 0;
      if (m.key.compare_exchange_strong(expected, key) || expected == key) return &m;
    }
  }
  // Full around this key: the first probe is reused (its mark is lost,
  // which only keeps some copies watched longer).
  if (!create) return nullptr;
  Mark& m = g_marks[h];
  m.ticket.store(0, std::memory_order_release);
  m.key.store(key, std::memory_order_release);
  return &m;
}

// Whether the page at `page` lies inside one of the program's blocks (the
// driver maps a block's last page whole).
bool PageOfABlock(uintptr_t page) {
  const uintptr_t size = PageSize();
  for (Block& b : g_blocks) {
    uintptr_t end = b.end.load(std::memory_order_acquire);
    if (end == 0) continue;
    uintptr_t begin = b.begin.load(std::memory_order_relaxed);
    if (begin <= page && page + size <= ((end + size - 1) & ~(size - 1))) return true;
  }
  return false;
}

// The pages a guard of [begin, end) protects, as [*first, *last): the
// pages wholly inside it, and with kAll each end page that lies inside one
// of the program's blocks.
bool GuardedPages(uintptr_t begin, uintptr_t end, GuardPages guard, uintptr_t* first,
                  uintptr_t* last) {
  const uintptr_t page = PageSize();
  *first = (begin + page - 1) & ~(page - 1);
  *last = end & ~(page - 1);
  if (guard == GuardPages::kAll) {
    if (*first != begin && PageOfABlock(begin & ~(page - 1))) *first = begin & ~(page - 1);
    if (*last != end && PageOfABlock(end & ~(page - 1))) *last = (end + page - 1) & ~(page - 1);
  }
  return guard != GuardPages::kNone && *last > *first;
}

// Whether a slot being armed or changed (busy) has a guard on `page`.
bool BusyGuardOn(uintptr_t page) {
  for (size_t i = 0; i < HighWater(); ++i) {
    const Slot& s = g_slots[i];
    if (PhaseOf(s.state.load(std::memory_order_acquire)) != kBusy) continue;
    uintptr_t gb = s.guard_begin.load(std::memory_order_relaxed);
    uintptr_t ge = s.guard_end.load(std::memory_order_relaxed);
    if (gb != 0 && gb <= page && page < ge) return true;
  }
  return false;
}

// Drops the end pages in [lo, hi) from the guards of the live copies whose
// range does not meet [a, z) (none when a == z: every copy).
void ShrinkGuards(uintptr_t lo, uintptr_t hi, uintptr_t a, uintptr_t z) {
  for (size_t i = 0; i < HighWater(); ++i) {
    Slot& s = g_slots[i];
    uint64_t st = s.state.load(std::memory_order_acquire);
    if (PhaseOf(st) != kLive) continue;
    uintptr_t gb = s.guard_begin.load(std::memory_order_relaxed);
    uintptr_t ge = s.guard_end.load(std::memory_order_relaxed);
    if (gb == 0 || ge <= lo || hi <= gb) continue;
    if (a < s.end.load(std::memory_order_relaxed) && s.begin.load(std::memory_order_relaxed) < z) {
      continue;
    }
    ShrinkGuard(s, st, lo, hi);
  }
}

// Makes busy slot `s` (generation `gen`) hold a copy, live, its guard's
// pages protected. The slot is live before its pages are protected: a fault
// on them is then always answered from a live guard.
void Fill(Slot& s, uint64_t gen, uintptr_t begin, uintptr_t end, uint32_t d2h, uintptr_t stream,
          uint64_t ticket, GuardPages guard) {
  s.begin.store(begin, std::memory_order_relaxed);
  s.end.store(end, std::memory_order_relaxed);
  s.stream.store(stream, std::memory_order_relaxed);
  s.ticket.store(ticket, std::memory_order_relaxed);
  s.d2h.store(d2h, std::memory_order_relaxed);
  uintptr_t first = 0, last = 0;
  const bool guarded = GuardedPages(begin, end, guard, &first, &last);
  s.guard_end.store(guarded ? last : 0, std::memory_order_relaxed);
  s.guard_begin.store(guarded ? first : 0, std::memory_order_relaxed);
  g_live.fetch_add(1, std::memory_order_relaxed);
  s.state.store((gen << 2) | kLive, std::memory_order_release);
  if (guarded) {
    GuardsChanged();
    ApplyProtection(first, last);
  }
}

}  // namespace

bool CopyWatchAny() { return g_live.load(std::memory_order_relaxed) != 0; }

void WatchCopy(const void* host, uint64_t bytes, bool device_to_host, const void* stream,
               GuardPages guard) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(host);
  if (begin == 0 || bytes == 0 || begin + bytes < begin) return;
  const uintptr_t end = begin + bytes;
  const uint32_t d2h = device_to_host ? 1 : 0;
  const uintptr_t st = reinterpret_cast<uintptr_t>(stream);
  if (guard != GuardPages::kNone) {
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) g_page.store(static_cast<uintptr_t>(ps), std::memory_order_relaxed);
  }
  // A newer copy of the same range, the same way, stands for the older one.
  TakeAll(
      [&](Slot& s) {
        return s.begin.load(std::memory_order_relaxed) == begin &&
               s.end.load(std::memory_order_relaxed) == end &&
               s.d2h.load(std::memory_order_relaxed) == d2h;
      },
      /*open=*/true);
  const uint64_t ticket = g_ticket.fetch_add(1, std::memory_order_relaxed);
  Widen(g_lo, g_hi, begin, end);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (size_t i = 0; i < kMaxWatchedCopies; ++i) {
      Slot& s = g_slots[i];
      uint64_t seen = s.state.load(std::memory_order_acquire);
      if (PhaseOf(seen) != kFree) continue;
      const uint64_t gen = seen >> 2;
      if (!s.state.compare_exchange_strong(seen, (gen << 2) | kBusy, std::memory_order_acq_rel)) {
        continue;
      }
      size_t hw = g_high_water.load();
      while (hw < i + 1 && !g_high_water.compare_exchange_weak(hw, i + 1)) {
      }
      Fill(s, gen, begin, end, d2h, st, ticket, guard);
      return;
    }
    // Full: the oldest copy goes (it is the likeliest to have finished).
    Slot* oldest = nullptr;
    uint64_t oldest_state = 0, oldest_ticket = UINT64_MAX;
    for (size_t i = 0; i < HighWater(); ++i) {
      uint64_t seen = g_slots[i].state.load(std::memory_order_acquire);
      uint64_t t = g_slots[i].ticket.load(std::memory_order_relaxed);
      if (PhaseOf(seen) == kLive && t < oldest_ticket) {
        oldest = &g_slots[i];
        oldest_state = seen;
        oldest_ticket = t;
      }
    }
    if (oldest != nullptr) TakeSlot(*oldest, oldest_state, /*open=*/true);
  }
}

bool TakeCopyAccess(const void* p, size_t len, bool write) {
  if (g_live.load(std::memory_order_relaxed) == 0) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t z = a + (len == 0 ? 1 : len);
  if (z <= g_lo.load(std::memory_order_relaxed) || a >= g_hi.load(std::memory_order_relaxed)) {
    return false;
  }
  for (size_t i = 0; i < HighWater(); ++i) {
    Slot& s = g_slots[i];
    uint64_t st = s.state.load(std::memory_order_acquire);
    if (PhaseOf(st) != kLive) continue;
    uintptr_t begin = s.begin.load(std::memory_order_relaxed);
    uintptr_t end = s.end.load(std::memory_order_relaxed);
    if (!(a < end && begin < z)) continue;
    // Reading the source of a host-to-device copy is no race.
    if (!s.d2h.load(std::memory_order_relaxed) && !write) continue;
    if (TakeSlot(s, st, /*open=*/true)) return true;
  }
  return false;
}

void CopyWatchStreamDone(const void* stream) {
  const uintptr_t st = reinterpret_cast<uintptr_t>(stream);
  TakeAll([&](Slot& s) { return s.stream.load(std::memory_order_relaxed) == st; }, true);
}

void CopyWatchAllDone() {
  TakeAll([](Slot&) { return true; }, true);
}

void CopyWatchMark(uint64_t key, const void* stream) {
  if (key == 0) return;
  Mark* m = FindMark(key, /*create=*/true);
  const uint64_t ticket = g_ticket.fetch_add(1, std::memory_order_relaxed);
  m->ticket.store(0, std::memory_order_release);
  m->stream.store(reinterpret_cast<uintptr_t>(stream), std::memory_order_relaxed);
  m->ticket.store(ticket, std::memory_order_release);
}

void CopyWatchMarkDone(uint64_t key) {
  if (key == 0 || g_live.load(std::memory_order_relaxed) == 0) return;
  Mark* m = FindMark(key, /*create=*/false);
  if (m == nullptr) return;
  uint64_t t1 = m->ticket.load(std::memory_order_acquire);
  uintptr_t st = m->stream.load(std::memory_order_relaxed);
  uint64_t t2 = m->ticket.load(std::memory_order_acquire);
  if (t1 == 0 || t1 != t2 || m->key.load(std::memory_order_relaxed) != key) return;
  TakeAll(
      [&](Slot& s) {
        return s.stream.load(std::memory_order_relaxed) == st &&
               s.ticket.load(std::memory_order_relaxed) < t1;
      },
      true);
}

void CopyWatchForgetRange(const void* p, uint64_t bytes, bool still_mapped) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t z = a + (bytes == 0 ? 1 : bytes);
  TakeAll(
      [&](Slot& s) {
        return a < s.end.load(std::memory_order_relaxed) &&
               s.begin.load(std::memory_order_relaxed) < z;
      },
      still_mapped);
}

void CopyWatchReset() {
  TakeAll([](Slot&) { return true; }, true);
  for (Mark& m : g_marks) {
    m.ticket.store(0);
    m.key.store(0);
  }
}

GuardFault CopyGuardFault(uintptr_t address, bool write) {
  const uintptr_t page = address & ~(PageSize() - 1);
  bool ours = false;
  for (size_t i = 0; i < HighWater(); ++i) {
    Slot& s = g_slots[i];
    uint64_t st = s.state.load(std::memory_order_acquire);
    if (PhaseOf(st) != kLive) continue;
    uintptr_t gb = s.guard_begin.load(std::memory_order_relaxed);
    uintptr_t ge = s.guard_end.load(std::memory_order_relaxed);
    if (gb == 0 || page < gb || page >= ge) continue;
    ours = true;
    uintptr_t begin = s.begin.load(std::memory_order_relaxed);
    uintptr_t end = s.end.load(std::memory_order_relaxed);
    // Reading the source of a host-to-device copy is no race.
    if (address < begin || address >= end || (!s.d2h.load(std::memory_order_relaxed) && !write)) {
      continue;
    }
    if (TakeSlot(s, st, /*open=*/true)) {
      g_faults.fetch_add(1, std::memory_order_relaxed);
      return GuardFault::kRecord;
    }
    return GuardFault::kRetry;  // taken by another thread meanwhile
  }
  uintptr_t next;
  const int want = WantedAt(page, page + PageSize(), &next);
  if (want == PROT_NONE || (want == PROT_READ && write)) return GuardFault::kStep;
  // No live guard forbids this access: the page lost a race with a guard
  // being lifted or armed (or is being armed, busy, by a thread this
  // signal interrupted). Give it what the guards want now and retry.
  if (!ours && !InRecent(address) && !BusyGuardOn(page)) return GuardFault::kNotGuard;
  ApplyProtection(page, page + PageSize());
  return GuardFault::kRetry;
}

void CopyGuardOpenPage(uintptr_t page) {
  const int saved = errno;
  mprotect(reinterpret_cast<void*>(page), PageSize(), PROT_READ | PROT_WRITE);
  errno = saved;
}

void CopyGuardRestorePage(uintptr_t page) { ApplyProtection(page, page + PageSize()); }

void CopyGuardDropPage(uintptr_t page) { ShrinkGuards(page, page + PageSize(), 0, 0); }

void CopyGuardOpenFor(const void* p, size_t len) {
  if (g_live.load(std::memory_order_relaxed) == 0 || len == 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t z = a + len < a ? UINTPTR_MAX : a + len;
  if (z <= g_lo.load(std::memory_order_relaxed) || a >= g_hi.load(std::memory_order_relaxed)) {
    return;
  }
  const uintptr_t page = PageSize();
  ShrinkGuards(a & ~(page - 1), (z + page - 1) & ~(page - 1), a, z);
}

namespace {

// Enters [begin, begin + bytes) in a free slot; false when the table is full.
bool AddBlock(uintptr_t begin, uint64_t bytes, uintptr_t buffer) {
  if (begin == 0 || bytes == 0) return false;
  for (Block& b : g_blocks) {
    uintptr_t expected = 0;
    if (b.begin.compare_exchange_strong(expected, begin, std::memory_order_acq_rel)) {
      b.buffer.store(buffer, std::memory_order_relaxed);
      b.end.store(begin + bytes, std::memory_order_release);
      return true;
    }
  }
  return false;
}

}  // namespace

void CopyWatchAddBlock(const void* p, uint64_t bytes) {
  AddBlock(reinterpret_cast<uintptr_t>(p), bytes, 0);
}

void CopyWatchAddChunk(const void* buffer, const void* map, uint64_t map_bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(map);
  const uintptr_t at = reinterpret_cast<uintptr_t>(buffer);
  if (at <= begin || at - begin >= map_bytes) return;
  // Counted first: a release that follows the entry always finds it.
  Widen(g_chunk_lo, g_chunk_hi, at, at + 1);
  g_chunks.fetch_add(1, std::memory_order_acq_rel);
  if (!AddBlock(begin, map_bytes, at)) g_chunks.fetch_sub(1, std::memory_order_acq_rel);
}

void CopyWatchReleaseChunk(const void* buffer) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(buffer);
  if (g_chunks.load(std::memory_order_acquire) == 0 ||
      at < g_chunk_lo.load(std::memory_order_relaxed) ||
      at >= g_chunk_hi.load(std::memory_order_relaxed)) {
    return;
  }
  for (Block& b : g_blocks) {
    if (at == 0 || b.buffer.load(std::memory_order_acquire) != at) continue;
    const uintptr_t begin = b.begin.load(std::memory_order_relaxed);
    const uintptr_t end = b.end.load(std::memory_order_acquire);
    if (end == 0) continue;
    // Copies on the mapping are forgotten and its pages opened while the
    // block still says the end pages are the chunk's; then it goes.
    CopyWatchForgetRange(reinterpret_cast<const void*>(begin), end - begin, /*still_mapped=*/true);
    b.end.store(0, std::memory_order_release);
    b.buffer.store(0, std::memory_order_release);
    b.begin.store(0, std::memory_order_release);
    g_chunks.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
}

void CopyWatchRemoveBlock(const void* p) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  for (Block& b : g_blocks) {
    if (begin == 0 || b.begin.load(std::memory_order_acquire) != begin ||
        b.buffer.load(std::memory_order_relaxed) != 0) {
      continue;
    }
    b.end.store(0, std::memory_order_release);
    b.begin.store(0, std::memory_order_release);
    return;
  }
}

uint64_t CopyGuardFaults() { return g_faults.load(); }

}  // namespace trace
}  // namespace pinshim
