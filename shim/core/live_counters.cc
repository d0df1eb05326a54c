#include "shim/core/live_counters.h"

#include <atomic>

#include "shim/core/macros.h"

namespace pinshim {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr int kKinds = static_cast<int>(MemKind::kCount);

struct Counters {
  std::atomic<uint64_t> copies[4][kKinds];
  std::atomic<uint64_t> bytes[4][kKinds];
  std::atomic<uint64_t> sync_call_ns;
  std::atomic<uint64_t> staged_bytes;
  std::atomic<uint64_t> in_place_bytes;
  std::atomic<int64_t> program_pinned;
  std::atomic<int64_t> program_registered;
  std::atomic<int64_t> program_vmm;
  std::atomic<int64_t> program_pool;
  std::atomic<uint64_t> pageable_copies[2][kLiveSizeClasses];
  std::atomic<uint64_t> pageable_bytes[2][kLiveSizeClasses];
  std::atomic<uint64_t> async_blocked_ns;
  std::atomic<uint64_t> small_call_ns[2];
  std::atomic<uint64_t> small_bytes[2];
  std::atomic<uint64_t> sync_overlap_ns;
};

Counters g_live;  // zero-initialised (static storage)

// The calling thread's previous synchronous host<->device copy.
PINSHIM_TLS uint64_t t_last_end_ns;
PINSHIM_TLS uint64_t t_last_call_ns;

int SizeClassOf(uint64_t bytes) { return bytes <= 1 ? 0 : 63 - __builtin_clzll(bytes); }

uint64_t Positive(int64_t v) { return v < 0 ? 0 : static_cast<uint64_t>(v); }

}  // namespace

std::atomic<bool> g_live_counters_on{false};

void EnableLiveCounters() { g_live_counters_on.store(true, kRelaxed); }

void CountLiveCopy(const LiveCopy& c) {
  if (c.failed) return;
  const int dir = static_cast<int>(c.dir) & 3;
  const MemKind host = c.dir == CopyDir::kDeviceToHost ? c.dst : c.src;
  const int kind = static_cast<int>(c.dir == CopyDir::kDeviceToDevice ? MemKind::kDevice : host);
  if (kind >= kKinds) return;
  g_live.copies[dir][kind].fetch_add(1, kRelaxed);
  g_live.bytes[dir][kind].fetch_add(c.bytes, kRelaxed);
  if (!c.async) g_live.sync_call_ns.fetch_add(c.call_ns, kRelaxed);
  if (c.staged) g_live.staged_bytes.fetch_add(c.bytes, kRelaxed);
  if (c.pinned_in_place) g_live.in_place_bytes.fetch_add(c.bytes, kRelaxed);
  const bool host_device = c.dir == CopyDir::kHostToDevice || c.dir == CopyDir::kDeviceToHost;
  if (!host_device) return;
  const int d = c.dir == CopyDir::kDeviceToHost ? 1 : 0;
  if (host == MemKind::kPageable) {
    const int cls = SizeClassOf(c.bytes);
    g_live.pageable_copies[d][cls].fetch_add(1, kRelaxed);
    g_live.pageable_bytes[d][cls].fetch_add(c.bytes, kRelaxed);
    if (c.async && c.call_ns > kLiveAsyncCallNs) {
      g_live.async_blocked_ns.fetch_add(c.call_ns - kLiveAsyncCallNs, kRelaxed);
    }
  }
  if (c.bytes < kLiveSmallCopyBytes) {
    g_live.small_call_ns[d].fetch_add(c.call_ns, kRelaxed);
    g_live.small_bytes[d].fetch_add(c.bytes, kRelaxed);
  }
  if (!c.async) {
    if (t_last_end_ns != 0 && c.start_ns >= t_last_end_ns) {
      const uint64_t gap = c.start_ns - t_last_end_ns;
      g_live.sync_overlap_ns.fetch_add(gap < t_last_call_ns ? gap : t_last_call_ns, kRelaxed);
    }
    t_last_end_ns = c.start_ns + c.call_ns;
    t_last_call_ns = c.call_ns;
  }
}

void CountLivePin(LivePin total, PinOp op, uint64_t bytes) {
  const int64_t b = static_cast<int64_t>(bytes);
  const bool adds = op == PinOp::kAlloc || op == PinOp::kRegister;
  switch (total) {
    case LivePin::kNone: return;
    case LivePin::kVmmHost: g_live.program_vmm.fetch_add(adds ? b : -b, kRelaxed); return;
    case LivePin::kHostPool: g_live.program_pool.fetch_add(adds ? b : -b, kRelaxed); return;
    case LivePin::kByOp: break;
  }
  switch (op) {
    case PinOp::kAlloc: g_live.program_pinned.fetch_add(b, kRelaxed); break;
    case PinOp::kFree: g_live.program_pinned.fetch_sub(b, kRelaxed); break;
    case PinOp::kRegister: g_live.program_registered.fetch_add(b, kRelaxed); break;
    case PinOp::kUnregister: g_live.program_registered.fetch_sub(b, kRelaxed); break;
  }
}

void TakeLiveSnapshot(LiveSnapshot* out) {
  for (int d = 0; d < 4; ++d) {
    for (int k = 0; k < kKinds; ++k) {
      out->copies[d][k] = g_live.copies[d][k].load(kRelaxed);
      out->bytes[d][k] = g_live.bytes[d][k].load(kRelaxed);
    }
  }
  out->sync_call_ns = g_live.sync_call_ns.load(kRelaxed);
  out->staged_bytes = g_live.staged_bytes.load(kRelaxed);
  out->in_place_bytes = g_live.in_place_bytes.load(kRelaxed);
  out->program_pinned = Positive(g_live.program_pinned.load(kRelaxed));
  out->program_registered = Positive(g_live.program_registered.load(kRelaxed));
  out->program_vmm = Positive(g_live.program_vmm.load(kRelaxed));
  out->program_pool = Positive(g_live.program_pool.load(kRelaxed));
  for (int d = 0; d < 2; ++d) {
    for (int c = 0; c < kLiveSizeClasses; ++c) {
      out->pageable_copies[d][c] = g_live.pageable_copies[d][c].load(kRelaxed);
      out->pageable_bytes[d][c] = g_live.pageable_bytes[d][c].load(kRelaxed);
    }
    out->small_call_ns[d] = g_live.small_call_ns[d].load(kRelaxed);
    out->small_bytes[d] = g_live.small_bytes[d].load(kRelaxed);
  }
  out->async_blocked_ns = g_live.async_blocked_ns.load(kRelaxed);
  out->sync_overlap_ns = g_live.sync_overlap_ns.load(kRelaxed);
}

void ResetLiveCounters() {
  for (int d = 0; d < 4; ++d) {
    for (int k = 0; k < kKinds; ++k) {
      g_live.copies[d][k].store(0, kRelaxed);
      g_live.bytes[d][k].store(0, kRelaxed);
    }
  }
  g_live.sync_call_ns.store(0, kRelaxed);
  g_live.staged_bytes.store(0, kRelaxed);
  g_live.in_place_bytes.store(0, kRelaxed);
  g_live.program_pinned.store(0, kRelaxed);
  g_live.program_registered.store(0, kRelaxed);
  g_live.program_vmm.store(0, kRelaxed);
  g_live.program_pool.store(0, kRelaxed);
  for (int d = 0; d < 2; ++d) {
    for (int c = 0; c < kLiveSizeClasses; ++c) {
      g_live.pageable_copies[d][c].store(0, kRelaxed);
      g_live.pageable_bytes[d][c].store(0, kRelaxed);
    }
    g_live.small_call_ns[d].store(0, kRelaxed);
    g_live.small_bytes[d].store(0, kRelaxed);
  }
  g_live.async_blocked_ns.store(0, kRelaxed);
  g_live.sync_overlap_ns.store(0, kRelaxed);
  t_last_end_ns = t_last_call_ns = 0;
}

}  // namespace pinshim
