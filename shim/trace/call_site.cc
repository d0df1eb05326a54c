#include "shim/trace/call_site.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "shim/core/backtrace.h"

// glibc's: an address near the top of the main thread's stack.
extern "C" void* __libc_stack_end;

namespace pinshim {
namespace trace {

struct StackTable::Slot {
  std::atomic<uint64_t> hash;  // 0: free; claimed by CAS
  std::atomic<uint32_t> id;    // 0 until the entry is complete
  uint32_t epoch;
  uint32_t ip_offset;  // native frames, then the Python frames' words
  uint32_t depth;
  uint64_t exact_mask;
  uint8_t py_status;
  uint8_t py_depth;
  uint32_t py_omitted;
};

namespace {

void* MapNoReserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

inline uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

uint64_t HashStack(const CapturedStack& s, uint32_t epoch) {
  uint64_t h = Mix(0x243f6a8885a308d3ull, (uint64_t{epoch} << 32) | uint32_t(s.depth));
  h = Mix(h, s.exact_mask);
  for (int i = 0; i < s.depth; ++i) h = Mix(h, s.ips[i]);
  const PythonStack& py = s.python;
  if (py.status != PythonStatus::kNone) {
    h = Mix(h, (uint64_t{static_cast<uint8_t>(py.status)} << 40) |
                   (uint64_t{static_cast<uint32_t>(py.depth)} << 32) | py.omitted);
    for (int i = 0; i < py.depth; ++i) h = Mix(h, py.frames[i]);
  }
  return h | 1;  // never 0, which marks a free slot
}

// The Python frames stored with a stack (none for a native-only one).
inline int PythonWords(const CapturedStack& s) {
  return s.python.status == PythonStatus::kNone ? 0 : s.python.depth;
}

}  // namespace

bool StackTable::Init(int slots_log2, size_t ip_words) {
  // libunwind's default cache is process-wide behind a lock it takes with
  // signals blocked (two system calls per step); a per-thread cache needs
  // neither, and a signal handler may unwind too.
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  size_t n = size_t{1} << slots_log2;
  slots_ = static_cast<Slot*>(MapNoReserve(n * sizeof(Slot)));
  ips_ = static_cast<uintptr_t*>(MapNoReserve(ip_words * sizeof(uintptr_t)));
  if (slots_ == nullptr || ips_ == nullptr) return false;
  mask_ = n - 1;
  ip_capacity_ = ip_words;
  return true;
}

void StackTable::Reset() {
  if (slots_ == nullptr) return;
  // Dropping the pages gives back zeroed memory at the next touch.
  madvise(slots_, (mask_ + 1) * sizeof(Slot), MADV_DONTNEED);
  madvise(ips_, ip_capacity_ * sizeof(uintptr_t), MADV_DONTNEED);
  ip_used_.store(0);
  next_id_.store(1);
  overflows_.store(0);
}

uint32_t StackTable::Intern(const CapturedStack& s, uint32_t epoch, bool* is_new) {
  *is_new = false;
  if (slots_ == nullptr) return 0;
  constexpr int kMaxProbes = 64;
  uint64_t h = HashStack(s, epoch);
  for (int probe = 0; probe < kMaxProbes; ++probe) {
    Slot& slot = slots_[(h + probe) & mask_];
    uint64_t seen = slot.hash.load(std::memory_order_acquire);
    if (seen == 0) {
      if (!slot.hash.compare_exchange_strong(seen, h, std::memory_order_acq_rel)) {
        if (seen != h) continue;  // another stack took the slot
      } else {
        size_t words = static_cast<size_t>(s.depth + PythonWords(s));
        size_t off = ip_used_.fetch_add(words);
        if (off + words > ip_capacity_) {
          // The slot stays claimed without an id: probes skip it.
          overflows_.fetch_add(1, std::memory_order_relaxed);
          return 0;
        }
        memcpy(ips_ + off, s.ips, sizeof(uintptr_t) * static_cast<size_t>(s.depth));
        static_assert(sizeof(uintptr_t) == sizeof(uint64_t), "Python frames share the ip words");
        memcpy(ips_ + off + s.depth, s.python.frames,
               sizeof(uint64_t) * static_cast<size_t>(PythonWords(s)));
        slot.epoch = epoch;
        slot.ip_offset = static_cast<uint32_t>(off);
        slot.depth = static_cast<uint32_t>(s.depth);
        slot.exact_mask = s.exact_mask;
        slot.py_status = static_cast<uint8_t>(s.python.status);
        slot.py_depth = static_cast<uint8_t>(PythonWords(s));
        slot.py_omitted = s.python.omitted;
        uint32_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
        slot.id.store(id, std::memory_order_release);
        *is_new = true;
        return id;
      }
    }
    if (seen != h) continue;
    // An entry being filled in has no id yet. Waiting could deadlock a signal
    // handler that interrupted the filler; treating it as a different stack
    // at worst stores this one twice under two ids.
    uint32_t id = slot.id.load(std::memory_order_acquire);
    if (id == 0) continue;
    if (slot.epoch == epoch && slot.depth == static_cast<uint32_t>(s.depth) &&
        slot.exact_mask == s.exact_mask &&
        slot.py_status == static_cast<uint8_t>(s.python.status) &&
        slot.py_depth == static_cast<uint8_t>(PythonWords(s)) &&
        slot.py_omitted == s.python.omitted &&
        memcmp(ips_ + slot.ip_offset, s.ips, sizeof(uintptr_t) * static_cast<size_t>(s.depth)) ==
            0 &&
        memcmp(ips_ + slot.ip_offset + s.depth, s.python.frames,
               sizeof(uint64_t) * static_cast<size_t>(PythonWords(s))) == 0) {
      return id;
    }
  }
  overflows_.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

namespace {

// Unwinds from `cursor` (positioned on the first frame to keep) into `out`:
// the slow, general walk, for signal contexts.
void Walk(unw_cursor_t* cursor, int max_depth, bool first_exact, CapturedStack* out) {
  bool next_exact = first_exact;
  int n = 0;
  out->exact_mask = 0;
  for (;;) {
    unw_word_t ip = 0;
    unw_get_reg(cursor, UNW_REG_IP, &ip);
    if (ip == 0) break;
    out->ips[n] = ip;
    if (next_exact) out->exact_mask |= uint64_t{1} << n;
    // The frame after a signal trampoline holds the interrupted instruction.
    next_exact = unw_is_signal_frame(cursor) > 0;
    ++n;
    if (n >= max_depth || unw_step(cursor) <= 0) break;
  }
  out->depth = n;
}

// True when `ip` is glibc's x86-64 signal return trampoline
// (mov $15, %rax; syscall), after which the next frame is the interrupted
// instruction itself.
bool IsSigreturnTrampoline(uintptr_t ip) {
#if defined(__x86_64__)
  static const uint8_t kCode[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
  return memcmp(reinterpret_cast<const void*>(ip), kCode, sizeof(kCode)) == 0;
#else
  (void)ip;
  return false;
#endif
}

// Largest distance searched between two return-address slots, and in all.
constexpr uintptr_t kMaxFrameScan = 256 * 1024;
constexpr uintptr_t kMaxStackScan = 64 * 1024 * 1024;

// Remembers `py` and the id of the whole stack in the entry of its native
// part. The entry is the calling thread's; a signal handler that interrupts
// this meets python_id 0 and looks the stack up instead.
void RememberPython(UnwindCacheEntry* e, const PythonStack& py, uint32_t id) {
  e->python_id = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  e->python_status = static_cast<uint8_t>(py.status);
  e->python_depth = static_cast<uint8_t>(py.depth);
  e->python_omitted = py.omitted;
  memcpy(e->python_frames, py.frames, sizeof(uint64_t) * static_cast<size_t>(py.depth));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  e->python_id = id;
}

// A word of this thread's stack above the capturing frame: the cache reads
// return addresses where the callers' frames hold them, between locals no
// code here owns. AddressSanitizer puts redzones around those locals; the
// read is meant, so it is not checked.
__attribute__((no_sanitize_address)) inline uintptr_t StackWord(uintptr_t p) {
  return *reinterpret_cast<const volatile uintptr_t*>(p);
}

// The address of the first word from p (aligned) below limit that holds
// `want`, or 0 when none does: four words a step, as a miss's search for
// the callers' return addresses can read many KiB of a deep stack.
__attribute__((no_sanitize_address)) inline uintptr_t FindStackWord(uintptr_t p, uintptr_t limit,
                                                                    uintptr_t want) {
  const volatile uintptr_t* w = reinterpret_cast<const volatile uintptr_t*>(p);
  const size_t n = limit > p ? (limit - p) / sizeof(uintptr_t) : 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uintptr_t a = w[i], b = w[i + 1], c = w[i + 2], d = w[i + 3];
    if (a == want) return p + i * sizeof(uintptr_t);
    if (b == want) return p + (i + 1) * sizeof(uintptr_t);
    if (c == want) return p + (i + 2) * sizeof(uintptr_t);
    if (d == want) return p + (i + 3) * sizeof(uintptr_t);
  }
  for (; i < n; ++i) {
    if (w[i] == want) return p + i * sizeof(uintptr_t);
  }
  return 0;
}

// The set of a capture from frame `sp` returning to `ret`: the top bits of
// a multiplicative hash of both, which every bit of either reaches (the low
// bits of a product would depend on the low bits of its factors alone).
inline size_t CacheSet(uintptr_t sp, uintptr_t ret) {
  static_assert((kUnwindCacheSets & (kUnwindCacheSets - 1)) == 0, "sets: a power of two");
  constexpr int kSetBits = __builtin_ctz(kUnwindCacheSets);
  const uint64_t h =
      ((uint64_t{sp} >> 4) ^ (uint64_t{ret} * 0xff51afd7ed558ccdull)) * 0x9e3779b97f4a7c15ull;
  return static_cast<size_t>(h >> (64 - kSetBits));
}

// Whether entry i lies outside `set`.
inline bool InOtherSet(int i, size_t set) {
  return static_cast<size_t>(i / kUnwindCacheWays) != set;
}

// Copies entry `from` into `to`, which a signal handler on this thread
// finds empty until the copy is whole.
inline void MoveEntry(const UnwindCacheEntry* from, UnwindCacheEntry* to) {
  const uint32_t epoch = from->epoch;
  to->epoch = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  constexpr size_t kEpochAt = offsetof(UnwindCacheEntry, epoch);
  constexpr size_t kAfterEpoch = kEpochAt + sizeof(uint32_t);
  memcpy(to, from, kEpochAt);
  memcpy(reinterpret_cast<char*>(to) + kAfterEpoch,
         reinterpret_cast<const char*>(from) + kAfterEpoch, sizeof(UnwindCacheEntry) - kAfterEpoch);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  to->epoch = epoch;
}

// Where a new stack of `set` is remembered: an empty or stale entry of the
// set; else the set's entries in turn, the one replaced moving first to an
// empty or stale entry of another set (else over another set's entries in
// turn). More stacks than a set holds can share a frame and return address
// (one function's allocations and frees): the most recent are found first,
// and the older ones stay cached.
inline UnwindCacheEntry* EntryToReplace(UnwindCache* cache, size_t set, uint32_t epoch) {
  UnwindCacheEntry* ways = &cache->entries[set * kUnwindCacheWays];
  for (int w = 0; w < kUnwindCacheWays; ++w) {
    if (ways[w].epoch != epoch) return &ways[w];
  }
  UnwindCacheEntry* out = &ways[cache->next_way[set]];
  cache->next_way[set] = static_cast<uint8_t>((cache->next_way[set] + 1) % kUnwindCacheWays);
  UnwindCacheEntry* to = nullptr;
  for (int i = 0; i < kUnwindCacheEntries && to == nullptr; ++i) {
    if (InOtherSet(i, set) && cache->entries[i].epoch != epoch) {
      to = &cache->entries[i];
    }
  }
  while (to == nullptr) {
    const int i = cache->next_victim;
    cache->next_victim = static_cast<uint8_t>((i + 1) % kUnwindCacheEntries);
    if (InOtherSet(i, set)) to = &cache->entries[i];
  }
  MoveEntry(out, to);
  cache->moved_out = 1;
  return out;
}

}  // namespace

uintptr_t CurrentThreadStackTop() {
  if (syscall(SYS_gettid) == getpid()) return reinterpret_cast<uintptr_t>(__libc_stack_end);
  return static_cast<uintptr_t>(pthread_self());
}

namespace {

// The Python frames of this capture into scratch->python (none without).
__attribute__((always_inline)) inline void TakePythonStack(const PythonStack* python,
                                                           bool with_python,
                                                           CapturedStack* scratch) {
  if (with_python && python == &scratch->python) {
    // Captured in place.
  } else if (with_python) {
    scratch->python.status = python->status;
    scratch->python.depth = python->depth;
    scratch->python.omitted = python->omitted;
    memcpy(scratch->python.frames, python->frames,
           sizeof(uint64_t) * static_cast<size_t>(python->depth));
  } else {
    scratch->python.status = PythonStatus::kNone;
    scratch->python.depth = 0;
    scratch->python.omitted = 0;
  }
}

#if defined(__x86_64__)
// Whether the cache entry e holds this call's stack (same frame, return
// address, and every slot it remembered still holds its word): then *id is
// its stack id (0 when the table had no room), the whole stack interned
// where only its Python part is new.
__attribute__((always_inline)) inline bool CachedStackId(UnwindCacheEntry* e, uint32_t epoch,
                                                         uintptr_t frame, uintptr_t ret,
                                                         bool with_python, StackTable* table,
                                                         CapturedStack* scratch, bool* is_new,
                                                         uint32_t* id) {
  if (e->epoch != epoch || e->sp != frame || e->ret != ret) return false;
  for (uint32_t i = 0; i < e->depth; ++i) {
    if (StackWord(e->slot[i]) != e->value[i]) return false;
  }
  if (!with_python && e->stack_id != 0) {
    *id = e->stack_id;
    return true;
  }
  const PythonStack& py = scratch->python;
  if (with_python && e->python_id != 0 && e->python_status == static_cast<uint8_t>(py.status) &&
      e->python_depth == static_cast<uint8_t>(py.depth) && e->python_omitted == py.omitted &&
      memcmp(e->python_frames, py.frames, sizeof(uint64_t) * static_cast<size_t>(py.depth)) == 0) {
    *id = e->python_id;
    return true;
  }
  // The native part is unchanged; the whole stack (with its Python
  // frames) is looked up in the table.
  scratch->depth = static_cast<int>(e->depth);
  scratch->exact_mask = 0;  // cached stacks have no signal frames
  memcpy(scratch->ips, e->value, sizeof(uintptr_t) * e->depth);
  *id = table->Intern(*scratch, epoch, is_new);
  if (!with_python && *id != 0) e->stack_id = *id;
  if (with_python && *id != 0) RememberPython(e, py, *id);
  return true;
}

// Remembers in e where on the stack (above `frame`, below `top`) each
// return address of the captured stack lies, so that the next capture
// from the same frame only compares those words; nothing when one is not
// found, or on an alternate signal stack.
__attribute__((always_inline)) inline void RememberStack(UnwindCacheEntry* e, uintptr_t top,
                                                         uintptr_t frame, uintptr_t ret,
                                                         uint32_t epoch, bool with_python,
                                                         const CapturedStack& scratch,
                                                         uint32_t id) {
  if (top <= frame || top - frame > kMaxStackScan) return;
  // On an alternate signal stack the search would walk off its end.
  stack_t ss;
  if (sigaltstack(nullptr, &ss) != 0 || (ss.ss_flags & SS_ONSTACK)) return;
  uintptr_t slots[kMaxStackDepth];
  slots[0] = frame + sizeof(uintptr_t);
  if (StackWord(slots[0]) != scratch.ips[0]) return;
  for (int i = 1; i < scratch.depth; ++i) {
    uintptr_t limit = slots[i - 1] + kMaxFrameScan;
    if (limit > top) limit = top;
    const uintptr_t p = FindStackWord(slots[i - 1] + sizeof(uintptr_t), limit, scratch.ips[i]);
    if (p == 0) return;  // not found: do not cache
    slots[i] = p;
  }
  e->epoch = 0;  // a signal handler using this entry meanwhile finds it empty
  std::atomic_signal_fence(std::memory_order_seq_cst);
  e->sp = frame;
  e->ret = ret;
  e->stack_id = with_python ? 0 : id;
  e->python_id = 0;
  if (with_python) RememberPython(e, scratch.python, id);
  e->depth = static_cast<uint32_t>(scratch.depth);
  memcpy(e->slot, slots, sizeof(uintptr_t) * e->depth);
  memcpy(e->value, scratch.ips, sizeof(uintptr_t) * e->depth);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  e->epoch = epoch;
}
#endif

}  // namespace

__attribute__((noinline)) uint32_t CaptureCallSite(UnwindCache* cache, int max_depth,
                                                   uint32_t epoch, StackTable* table,
                                                   CapturedStack* scratch, bool* is_new,
                                                   const PythonStack* python) {
  *is_new = false;
  const bool with_python = python != nullptr && python->status != PythonStatus::kNone;
  TakePythonStack(python, with_python, scratch);
  if (max_depth > kMaxStackDepth) max_depth = kMaxStackDepth;
  if (max_depth < 1) max_depth = 1;
  // Forcing a frame pointer here puts this function's return address at
  // frame + 8: the first slot, and where the search for the others starts.
  uintptr_t frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t ret = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  [[maybe_unused]] const size_t set = CacheSet(frame, ret);
#if defined(__x86_64__)
  // Its set first, then the others, where a full set's older stacks went
  // (none until a set was full).
  UnwindCacheEntry* ways = &cache->entries[set * kUnwindCacheWays];
  uint32_t cached_id = 0;
  for (int w = 0; w < kUnwindCacheWays; ++w) {
    if (CachedStackId(&ways[w], epoch, frame, ret, with_python, table, scratch, is_new,
                      &cached_id)) {
      ++cache->hits;
      return cached_id;
    }
  }
  for (int i = 0; cache->moved_out != 0 && i < kUnwindCacheEntries; ++i) {
    if (InOtherSet(i, set) && CachedStackId(&cache->entries[i], epoch, frame, ret, with_python,
                                            table, scratch, is_new, &cached_id)) {
      ++cache->hits;
      return cached_id;
    }
  }
#endif
  ++cache->misses;
  void* raw[kMaxStackDepth + 1];
  int n = Backtrace(raw, max_depth + 1);  // raw[0] is this function
  scratch->depth = n > 1 ? n - 1 : 0;
  scratch->exact_mask = 0;
  bool cacheable = scratch->depth > 0;
  for (int i = 0; i < scratch->depth; ++i) {
    scratch->ips[i] = reinterpret_cast<uintptr_t>(raw[i + 1]);
    if (IsSigreturnTrampoline(scratch->ips[i]) && i + 1 < scratch->depth) {
      scratch->exact_mask |= uint64_t{1} << (i + 1);
      cacheable = false;
    }
  }
  uint32_t id = table->Intern(*scratch, epoch, is_new);
  if (id == 0) return 0;
#if defined(__x86_64__)
  if (cacheable) {
    RememberStack(EntryToReplace(cache, set, epoch), cache->stack_top, frame, ret, epoch,
                  with_python, *scratch, id);
  }
#endif
  return id;
}

int CaptureFromSignalContext(void* ucontext, int max_depth, CapturedStack* out) {
  if (max_depth > kMaxStackDepth) max_depth = kMaxStackDepth;
  out->depth = 0;
  out->exact_mask = 0;
  // The interrupted thread may be in the middle of changing its Python
  // frames: none are read here.
  out->python.status = PythonStatus::kNone;
  out->python.depth = 0;
  out->python.omitted = 0;
#if defined(__x86_64__) || defined(__aarch64__)
  unw_cursor_t cursor;
  if (unw_init_local2(&cursor, static_cast<unw_context_t*>(ucontext), UNW_INIT_SIGNAL_FRAME) != 0) {
    return 0;
  }
  Walk(&cursor, max_depth, true, out);
#else
  (void)ucontext;
#endif
  return out->depth;
}

size_t EncodeStack(uint32_t id, uint32_t generation, const CapturedStack& s, uint8_t* out) {
  uint8_t* p = PutVarint(out, id);
  p = PutVarint(p, generation);
  p = PutVarint(p, static_cast<uint64_t>(s.depth));
  p = PutVarint(p, s.exact_mask);
  for (int i = 0; i < s.depth; ++i) {
    p = i == 0 ? PutVarint(p, s.ips[0])
               : PutSigned(p, static_cast<int64_t>(s.ips[i] - s.ips[i - 1]));
  }
  const PythonStack& py = s.python;
  if (py.status != PythonStatus::kNone) {
    p = PutVarint(p, static_cast<uint8_t>(py.status));
    p = PutVarint(p, static_cast<uint64_t>(py.depth));
    for (int i = 0; i < py.depth; ++i) {
      p = PutVarint(p, py.frames[i] >> 32);
      p = PutVarint(p, py.frames[i] & 0xffffffffu);
    }
    p = PutVarint(p, py.omitted);
  }
  return static_cast<size_t>(p - out);
}

}  // namespace trace
}  // namespace pinshim
