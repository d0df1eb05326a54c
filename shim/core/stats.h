// Counters behind the exit summary: copies by (API, direction, memory kinds,
// host flags) and pinned-memory operations by (API, operation, flags).
// Updating is lock-free and allocation-free; the table is fixed-size, and
// keys beyond its capacity are folded into an overflow count, never dropped
// silently.
#ifndef PINSHIM_SHIM_CORE_STATS_H_
#define PINSHIM_SHIM_CORE_STATS_H_

#include <cstdint>

#include "shim/core/events.h"

namespace pinshim {

// Adds one copy call (and `bytes`) under its key.
void CountCopy(ApiId api, CopyDir dir, MemKind src, MemKind dst, uint32_t flags, uint64_t bytes,
               bool failed);

// Adds one pinned-memory operation under its key.
void CountPin(ApiId api, PinOp op, uint32_t flags, uint64_t bytes, bool failed);

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
