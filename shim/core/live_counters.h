// Counters behind the live metrics file (PINSHIM_METRICS_FILE) in every
// mode: copies and bytes by direction and memory kind, time in synchronous
// copy calls, optimize mode's staged and pinned-in-place bytes, the
// program's pinned bytes, and the inputs of the per-rule loss estimates
// (docs/production.md says how each is estimated). Lock-free, allocation-
// free, fixed-size: counting a copy is a few relaxed atomic adds.
#ifndef PINSHIM_SHIM_CORE_LIVE_COUNTERS_H_
#define PINSHIM_SHIM_CORE_LIVE_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"

namespace pinshim {

// One copy call that returned, as the live counters take it.
struct LiveCopy {
  CopyDir dir;
  MemKind src;  // the kinds the driver saw, as the trace records them
  MemKind dst;
  bool async;
  bool failed;
  bool staged;           // optimize mode ran it through its staging rings
  bool pinned_in_place;  // optimize mode pinned its pageable host side in place
  uint64_t bytes;
  uint64_t start_ns;
  uint64_t call_ns;
};

// Whether copies are counted (a metrics file is written); set at start-up.
// Inline: every copy asks.
void EnableLiveCounters();
extern std::atomic<bool> g_live_counters_on;
inline bool LiveCountersEnabled() { return g_live_counters_on.load(std::memory_order_relaxed); }

void CountLiveCopy(const LiveCopy& c);

// Which total a pinned-memory operation of the program moves: by its op
// (cuMemHostAlloc's kinds, or registrations), VMM host handles, host-pool
// allocations, or none (mapping a handle pins nothing more).
enum class LivePin : uint8_t { kByOp, kVmmHost, kHostPool, kNone };

// A pinned-memory operation of the program that succeeded (bytes of what
// was pinned or released).
void CountLivePin(LivePin total, PinOp op, uint64_t bytes);

// Sizes below this are "small" for the small-copies estimate, as the
// report's default (RuleOptions::small_copy_bytes).
constexpr uint64_t kLiveSmallCopyBytes = 64 * 1024;
// What a truly asynchronous call costs its caller (the async-pageable
// rule's constant, analyzer/report/rules/async_pageable.cc).
constexpr uint64_t kLiveAsyncCallNs = 16000;
constexpr int kLiveSizeClasses = 64;

// A consistent-enough copy of the counters for one metrics write.
struct LiveSnapshot {
  uint64_t copies[4][static_cast<int>(MemKind::kCount)];
  uint64_t bytes[4][static_cast<int>(MemKind::kCount)];
  uint64_t sync_call_ns;
  uint64_t staged_bytes;
  uint64_t in_place_bytes;
  uint64_t program_pinned;      // cuMemHostAlloc/cuMemAllocHost, as the program sees them
  uint64_t program_registered;  // cuMemHostRegister
  uint64_t program_vmm;         // host-located cuMemCreate handles
  uint64_t program_pool;        // allocations from host memory pools
  // pageable-hot: successful pageable host<->device copies, [H2D=0/D2H=1][floor log2 bytes].
  uint64_t pageable_copies[2][kLiveSizeClasses];
  uint64_t pageable_bytes[2][kLiveSizeClasses];
  uint64_t async_blocked_ns;  // async-pageable: sum of (call - kLiveAsyncCallNs) > 0
  uint64_t small_call_ns[2];  // small-copies: calls below kLiveSmallCopyBytes
  uint64_t small_bytes[2];
  uint64_t sync_overlap_ns;  // sync-copy-loop: per thread, min(gap, previous call)
};
void TakeLiveSnapshot(LiveSnapshot* out);

// Zeroes every counter (a fork child counts its own).
void ResetLiveCounters();

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_LIVE_COUNTERS_H_
