// Call sites: the stack of the thread that made a call, turned into a small
// id. Two levels keep the per-copy cost low:
//
// 1. A per-thread unwind cache. Unwinding (libunwind's unw_backtrace) costs
//    a few hundred nanoseconds per stack; a loop that copies from one place
//    has the same stack every time. An entry remembers, for one (stack
//    pointer, return address) pair, where each frame's return address lives
//    on the stack and what it was; a hit re-reads those slots (a few loads)
//    and proves the stack unchanged without unwinding. The slots are found
//    after an unwind by looking up the stack, from this function's own
//    return-address slot, for each return address in turn. x86-64 only:
//    elsewhere every call unwinds (return addresses need not be on the
//    stack). Stacks through a signal frame, or on an alternate signal
//    stack, are not cached.
// 2. A process-wide table that deduplicates stacks: a stack seen before costs
//    its id; a new one gets the next id and is handed back for the caller to
//    write into the trace (one kStack frame each). A stack is its native
//    frames and, in a Python process, the calling thread's Python frames
//    (python_frames.h) together: one id names both, so the same native
//    stack reached from two Python lines is two stacks. The unwind cache
//    then proves only the native part unchanged; the table does the rest.
//
// Everything is allocation-free (mmap), lock-free and async-signal-safe,
// except that libunwind itself may take the loader lock when it first meets a
// module.
#ifndef PINSHIM_SHIM_TRACE_CALL_SITE_H_
#define PINSHIM_SHIM_TRACE_CALL_SITE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/trace/python_frames.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {

// The per-thread cache of captured stacks: 64 entries, looked up first in
// the set of 8 that the capture's frame and return address choose, then in
// the others. Captures with the same frame and return address (one hook
// reached from different places of a program at the same depth: its
// allocations and frees) share a set; it holds their 8 latest, and older
// ones move to other sets, so up to 64 stacks in all stay cached.
constexpr int kUnwindCacheWays = 8;
constexpr int kUnwindCacheSets = 8;
constexpr int kUnwindCacheEntries = kUnwindCacheWays * kUnwindCacheSets;

struct UnwindCacheEntry {
  uintptr_t sp;
  uintptr_t ret;
  uint32_t epoch;     // 0: empty
  uint32_t stack_id;  // of the native stack alone; 0: not interned alone
  uint32_t depth;
  uintptr_t slot[kMaxStackDepth];   // where frame i's return address lives
  uintptr_t value[kMaxStackDepth];  // and what it was
  // The last Python frames seen with this native stack and the id of the
  // two together: a loop that copies from one Python line costs a compare
  // of its Python frames, not a lookup of the whole stack.
  uint32_t python_id;  // 0: none remembered
  uint8_t python_status;
  uint8_t python_depth;
  uint32_t python_omitted;
  uint64_t python_frames[kMaxPythonFrames];
};

// One per thread, zero-initialised; then set stack_top.
struct UnwindCache {
  UnwindCacheEntry entries[kUnwindCacheEntries];
  uint64_t hits;
  uint64_t misses;
  uintptr_t stack_top;  // CurrentThreadStackTop() of the owning thread; 0: no caching
  uint8_t next_way[kUnwindCacheSets];  // each full set's next entry to move out
  uint8_t next_victim;                 // where one goes next when no entry is free
  uint8_t moved_out;                   // 1 once an entry moved out of its set
};

// An address at or below the top of the calling thread's stack, up to which
// the stack can be read: the main thread's __libc_stack_end, another
// thread's descriptor (glibc keeps it above the thread's stack). No
// allocation, no system call.
uintptr_t CurrentThreadStackTop();

// A stack as captured; `ips[0]` is innermost. `python` holds the thread's
// Python frames (status kNone: none, and the stack is native only).
struct CapturedStack {
  int depth;
  uint64_t exact_mask;  // bit i: ips[i] is a faulting instruction, not a return address
  uintptr_t ips[kMaxStackDepth];
  PythonStack python;
};

// The process-wide set of distinct stacks.
class StackTable {
 public:
  constexpr StackTable() = default;

  // Maps the table (2^slots_log2 entries and room for `ip_words` frames).
  // Returns false when the kernel refused the memory. Call once.
  bool Init(int slots_log2, size_t ip_words);

  // Returns the id of `stack` under `epoch`, adding it when new (then
  // *is_new is true and the caller must write it out). Returns 0 when the
  // table is full.
  uint32_t Intern(const CapturedStack& stack, uint32_t epoch, bool* is_new);

  // Forgets every stack; ids restart at 1 (a fork child's new trace).
  // Only while no other thread uses the table.
  void Reset();

  // Stacks that found no room.
  uint64_t overflows() const { return overflows_.load(std::memory_order_relaxed); }

 private:
  struct Slot;
  Slot* slots_ = nullptr;
  size_t mask_ = 0;
  uintptr_t* ips_ = nullptr;
  size_t ip_capacity_ = 0;
  std::atomic<size_t> ip_used_{0};
  std::atomic<uint32_t> next_id_{1};
  std::atomic<uint64_t> overflows_{0};
};

// Captures the caller's stack (frames of this function excluded), at most
// `max_depth` frames, answering from `cache` when the stack is unchanged,
// together with the Python frames in `python` (null or status kNone: none).
// Returns the stack id; when the stack is new, *is_new is set and `scratch`
// holds it. `cache` and `scratch` belong to the calling thread.
uint32_t CaptureCallSite(UnwindCache* cache, int max_depth, uint32_t epoch, StackTable* table,
                         CapturedStack* scratch, bool* is_new, const PythonStack* python = nullptr);

// Captures the stack interrupted by a signal, from the handler's ucontext;
// frame 0 is the interrupted instruction. No cache. Returns the depth.
int CaptureFromSignalContext(void* ucontext, int max_depth, CapturedStack* out);

// Encodes `stack` as a kStack payload into `out` (room for
// kMaxStackPayload bytes) and returns its length; the Python section only
// when the stack has one.
constexpr size_t kMaxStackPayload = 4 * kMaxVarint + kMaxStackDepth * kMaxVarint + 3 * kMaxVarint +
                                    kMaxPythonFrames * 2 * kMaxVarint;
size_t EncodeStack(uint32_t id, uint32_t generation, const CapturedStack& stack, uint8_t* out);

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_CALL_SITE_H_
