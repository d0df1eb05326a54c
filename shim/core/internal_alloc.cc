#include "shim/core/internal_alloc.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace pinshim {
namespace {

constexpr size_t kBlockBytes = size_t{1} << 20;

// One bump block at a time; a CAS on the cursor makes concurrent callers safe.
struct Block {
  std::atomic<uintptr_t> cursor{0};
  std::atomic<uintptr_t> end{0};
};
Block g_block;
std::atomic<int> g_refill_lock{0};

void* MapZeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

void* InternalAlloc(size_t bytes) {
  bytes = (bytes + 63) & ~size_t{63};
  if (bytes >= kBlockBytes / 4) return MapZeroed(bytes);
  for (;;) {
    uintptr_t cur = g_block.cursor.load(std::memory_order_acquire);
    uintptr_t end = g_block.end.load(std::memory_order_acquire);
    if (cur != 0 && cur + bytes <= end) {
      if (g_block.cursor.compare_exchange_weak(cur, cur + bytes, std::memory_order_acq_rel)) {
        return reinterpret_cast<void*>(cur);
      }
      continue;
    }
    // Refill: one thread maps a new block; the tail of the old one is dropped.
    int expected = 0;
    if (!g_refill_lock.compare_exchange_strong(expected, 1)) continue;
    if (g_block.cursor.load() == cur && g_block.end.load() == end) {
      void* fresh = MapZeroed(kBlockBytes);
      if (fresh == nullptr) {
        g_refill_lock.store(0);
        return nullptr;
      }
      uintptr_t base = reinterpret_cast<uintptr_t>(fresh);
      g_block.end.store(0, std::memory_order_release);
      g_block.cursor.store(base, std::memory_order_release);
      g_block.end.store(base + kBlockBytes, std::memory_order_release);
    }
    g_refill_lock.store(0);
  }
}

void* InternalAllocPresent(size_t bytes) {
  void* p = InternalAlloc(bytes);
  // Fresh zeroed memory no one else has seen: writing its zeros is safe.
  if (p != nullptr) memset(p, 0, bytes);
  return p;
}

void MakePresent(void* p, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  if (p == nullptr || bytes == 0) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
  // A system call of its own: pinshim's page hooks are for the program's
  // calls. Errors leave the pages as they were (an older kernel).
  syscall(SYS_madvise, start, end - start, MADV_POPULATE_WRITE);
}

}  // namespace pinshim
