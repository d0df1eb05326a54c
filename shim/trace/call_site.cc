#include "shim/trace/call_site.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <sys/mman.h>

#include <cstring>

namespace pinshim {
namespace trace {

struct StackTable::Slot {
  std::atomic<uint64_t> hash;  // 0: free; claimed by CAS
  std::atomic<uint32_t> id;    // 0 until the entry is complete
  uint32_t epoch;
  uint32_t ip_offset;
  uint32_t depth;
  uint64_t exact_mask;
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
  return h | 1;  // never 0, which marks a free slot
}

}  // namespace

bool StackTable::Init(int slots_log2, size_t ip_words) {
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
        size_t off = ip_used_.fetch_add(static_cast<size_t>(s.depth));
        if (off + static_cast<size_t>(s.depth) > ip_capacity_) {
          // The slot stays claimed without an id: probes skip it.
          overflows_.fetch_add(1, std::memory_order_relaxed);
          return 0;
        }
        memcpy(ips_ + off, s.ips, sizeof(uintptr_t) * static_cast<size_t>(s.depth));
        slot.epoch = epoch;
        slot.ip_offset = static_cast<uint32_t>(off);
        slot.depth = static_cast<uint32_t>(s.depth);
        slot.exact_mask = s.exact_mask;
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
        memcmp(ips_ + slot.ip_offset, s.ips,
               sizeof(uintptr_t) * static_cast<size_t>(s.depth)) == 0) {
      return id;
    }
  }
  overflows_.fetch_add(1, std::memory_order_relaxed);
  return 0;
}

namespace {

// Unwinds from `cursor` (already positioned on the first frame to keep).
// Fills `out` and, on x86-64, the return-address slots; returns false when
// the stack cannot be cached (a signal frame, or a slot that does not hold
// the return address).
bool Walk(unw_cursor_t* cursor, int max_depth, bool first_exact, CapturedStack* out,
          uintptr_t* slots) {
  bool cacheable = true;
  bool next_exact = first_exact;
  int n = 0;
  out->exact_mask = 0;
  for (;;) {
    unw_word_t ip = 0, sp = 0;
    unw_get_reg(cursor, UNW_REG_IP, &ip);
    unw_get_reg(cursor, UNW_REG_SP, &sp);
    if (ip == 0) break;
    out->ips[n] = ip;
    if (next_exact) {
      out->exact_mask |= uint64_t{1} << n;
      cacheable = false;
    }
    if (slots != nullptr) {
      slots[n] = sp - sizeof(uintptr_t);
#if defined(__x86_64__)
      if (*reinterpret_cast<const uintptr_t*>(slots[n]) != ip) cacheable = false;
#else
      cacheable = false;
#endif
    }
    // The frame after a signal trampoline holds the interrupted instruction.
    next_exact = unw_is_signal_frame(cursor) > 0;
    if (next_exact) cacheable = false;
    ++n;
    if (n >= max_depth || unw_step(cursor) <= 0) break;
  }
  out->depth = n;
  return cacheable && n > 0;
}

inline size_t CacheIndex(uintptr_t sp, uintptr_t ret) {
  uint64_t h = (sp >> 4) * 0x9e3779b97f4a7c15ull ^ ret;
  h ^= h >> 29;
  return static_cast<size_t>(h) & (kUnwindCacheEntries - 1);
}

}  // namespace

__attribute__((noinline)) uint32_t CaptureCallSite(UnwindCache* cache, int max_depth,
                                                   uint32_t epoch, StackTable* table,
                                                   CapturedStack* scratch, bool* is_new) {
  *is_new = false;
  if (max_depth > kMaxStackDepth) max_depth = kMaxStackDepth;
  if (max_depth < 1) max_depth = 1;
  uintptr_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t ret = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  UnwindCacheEntry& e = cache->entries[CacheIndex(sp, ret)];
#if defined(__x86_64__)
  if (e.epoch == epoch && e.sp == sp && e.ret == ret) {
    bool same = true;
    for (uint32_t i = 0; i < e.depth; ++i) {
      if (*reinterpret_cast<const volatile uintptr_t*>(e.slot[i]) != e.value[i]) {
        same = false;
        break;
      }
    }
    if (same) {
      ++cache->hits;
      return e.stack_id;
    }
  }
#endif
  ++cache->misses;
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0 ||
      unw_step(&cursor) <= 0) {  // the step leaves this function's own frame
    scratch->depth = 0;
    return 0;
  }
  uintptr_t slots[kMaxStackDepth];
  bool cacheable = Walk(&cursor, max_depth, false, scratch, slots);
  uint32_t id = table->Intern(*scratch, epoch, is_new);
  if (cacheable && id != 0) {
    e.epoch = 0;  // a signal handler using this entry meanwhile finds it empty
    std::atomic_signal_fence(std::memory_order_seq_cst);
    e.sp = sp;
    e.ret = ret;
    e.stack_id = id;
    e.depth = static_cast<uint32_t>(scratch->depth);
    memcpy(e.slot, slots, sizeof(uintptr_t) * e.depth);
    memcpy(e.value, scratch->ips, sizeof(uintptr_t) * e.depth);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    e.epoch = epoch;
  }
  return id;
}

int CaptureFromSignalContext(void* ucontext, int max_depth, CapturedStack* out) {
  if (max_depth > kMaxStackDepth) max_depth = kMaxStackDepth;
  out->depth = 0;
  out->exact_mask = 0;
#if defined(__x86_64__) || defined(__aarch64__)
  unw_cursor_t cursor;
  if (unw_init_local2(&cursor, static_cast<unw_context_t*>(ucontext),
                      UNW_INIT_SIGNAL_FRAME) != 0) {
    return 0;
  }
  Walk(&cursor, max_depth, true, out, nullptr);
#else
  (void)ucontext;
#endif
  return out->depth;
}

size_t EncodeStack(uint32_t id, uint32_t generation, const CapturedStack& s,
                   uint8_t* out) {
  uint8_t* p = PutVarint(out, id);
  p = PutVarint(p, generation);
  p = PutVarint(p, static_cast<uint64_t>(s.depth));
  p = PutVarint(p, s.exact_mask);
  for (int i = 0; i < s.depth; ++i) {
    p = i == 0 ? PutVarint(p, s.ips[0])
               : PutSigned(p, static_cast<int64_t>(s.ips[i] - s.ips[i - 1]));
  }
  return static_cast<size_t>(p - out);
}

}  // namespace trace
}  // namespace pinshim
