// Counters behind the exit summary: copies by (API, direction, memory kinds,
// host flags) and pinned-memory operations by (API, operation, flags).
// Updating is lock-free and allocation-free; the table is fixed-size, and
// keys beyond its capacity are folded into an overflow count, never dropped
// silently.
#ifndef PINSHIM_SHIM_CORE_STATS_H_
#define PINSHIM_SHIM_CORE_STATS_H_

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/core/live_counters.h"
#include "shim/core/macros.h"

namespace pinshim {

// One key's counts. A slot keeps its key for good once it has one.
struct CountSlot {
  std::atomic<uint64_t> key{0};
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> failed{0};
};

// The slot each entry point's copies last went to, by API id modulo the
// hints' count: a program's copies through one entry point nearly always
// have one key, so the hint is checked with a load instead of hashing and
// probing (CountCopySlow).
constexpr size_t kCopyHints = 512;  // power of two
extern std::atomic<CountSlot*> g_copy_hints[kCopyHints];
void CountCopySlow(ApiId api, uint64_t key, uint64_t bytes, bool failed);

// Adds one copy call (and `bytes`) under its key.
inline void CountCopy(ApiId api, CopyDir dir, MemKind src, MemKind dst, uint32_t flags,
                      uint64_t bytes, bool failed) {
  // Key layout (stats.cc): used bit, API, direction, kinds, flags.
  const uint64_t key = (uint64_t{1} << 63) | (uint64_t{api} << 32) | (uint64_t(dir) << 48) |
                       (uint64_t(src) << 52) | (uint64_t(dst) << 56) | flags;
  CountSlot* s = g_copy_hints[api & (kCopyHints - 1)].load(std::memory_order_relaxed);
  if (PINSHIM_LIKELY(s != nullptr && s->key.load(std::memory_order_relaxed) == key)) {
    s->calls.fetch_add(1, std::memory_order_relaxed);
    s->bytes.fetch_add(bytes, std::memory_order_relaxed);
    if (failed) s->failed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  CountCopySlow(api, key, bytes, failed);
}

// Adds one pinned-memory operation under its key (`live`: which live total
// it moves, live_counters.h).
void CountPin(ApiId api, PinOp op, uint32_t flags, uint64_t bytes, bool failed,
              LivePin live = LivePin::kByOp);

// Counts a note (e.g. a library loaded with RTLD_DEEPBIND).
enum class Note : uint8_t { kDeepBind = 0, kUnknownAbi = 1, kCount = 2 };
void CountNote(Note note);

// Writes all of buf to fd (retrying interrupted writes); gives up on error.
void WriteAll(int fd, const char* buf, size_t len);

// Writes the summary, one record per line (format in docs/observe.md), to `fd`.
// `api_name` maps an ApiId to its ABI symbol name.
void WriteSummary(int fd, int pid, const char* program, const char* mode,
                  const char* (*api_name)(ApiId));

// Zeroes every counter (the child after fork starts its own summary).
void ResetStats();

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_STATS_H_
