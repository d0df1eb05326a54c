#include "shim/optimize/copy_path.h"

#include "shim/optimize/driver_ops.h"
#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_change_protocol.h"

namespace pinshim {
namespace optimize {
namespace {

// A copy into a capture is the driver's, on the program's memory as the
// program made it: what pinshim pinned in place under its host side
// (registration cache, arena) is unpinned for the call (the arena's pinned
// again after it), so the driver captures pageable memory as without pinshim;
// it is neither staged nor pinned now. A graph that held pinshim's pinning
// would fault its context at a launch after pinshim unpinned it
// (bench/RESULTS.md, "2026-12-01, late night", copies into a stream capture).
// Pool blocks are the program's pinned memory, and stay so.
constexpr PageChange kCopyIntoCapture(OwnPinReason::kCopyIntoCapture, 0,
                                      PageChange::kReplacesPrivate | PageChange::kStaysAnonymous);

CUresult UnpinnedFor(const void* host, uint64_t len, DriverCall fn) {
  const auto start = reinterpret_cast<uintptr_t>(host);
  const uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;
  if (host == nullptr || end <= start) return fn();
  return CallMarked(start, end, kCopyIntoCapture, false, fn);
}

// A side classified as pinned by pinshim that is no pool block is cache or
// arena memory, which the call unpinned: the driver saw pageable memory.
void SeenPageable(Optimizer* engine, MemKind* kind, const void* host, uint32_t* flags) {
  PoolBlockInfo block;
  if (*kind == MemKind::kPinnedByPinshim && !engine->PoolBlock(host, &block)) {
    *kind = MemKind::kPageable;
    *flags = 0;
  }
}

// Both host sides of a host-to-host copy (its source is host_ptr, its
// destination other_host), nested.
CUresult CopyIntoCapture(Optimizer* engine, CopyShape* s, DriverCall driver) {
  const uint64_t len = s->host_span != 0 ? s->host_span : s->bytes;
  auto inner = [&] { return UnpinnedFor(s->other_host, len, driver); };
  const CUresult r = UnpinnedFor(s->host_ptr, len, inner);
  SeenPageable(engine, &s->src, s->host_ptr, &s->host_flags);
  SeenPageable(engine, &s->dst, s->other_host != nullptr ? s->other_host : s->host_ptr,
               &s->host_flags);
  return r;
}

bool IntoCapture(Optimizer* engine, const CopyCall& c) {
  return c.capture_open && c.shape.host_ptr != nullptr &&
         engine->StreamCaptures(RecordableStream(c.stream, c.per_thread));
}

// Which of the judge's paths a copy took, once it ran; false: none the
// judge compares (device to device, the program's own pinned memory, 2D
// and 3D forms, whose speed is not the 1D copies').
bool JudgedPath(const CopyCall& c, const CopyTicket& t, MemKind host_kind, CopyPath* path) {
  if (c.form != CopyForm::kStageable) return false;
  if (c.staged) {
    *path = CopyPath::kStaged;
  } else if (t.kind == CopyTicket::kCache || t.kind == CopyTicket::kArena) {
    *path = CopyPath::kPinnedInPlace;
  } else if (t.kind == CopyTicket::kNone && host_kind == MemKind::kPageable) {
    *path = CopyPath::kDriver;
  } else {
    return false;
  }
  return true;
}

// The copy itself once the ticket is known: staged, refused, its eager
// head read now, or the driver's call. *in_flight: whether DMA from memory
// pinned in place may still be queued when it returns.
CUresult Issue(Optimizer* engine, CopyCall* c, const CopyTicket& t, DriverCall driver,
               bool* in_flight) {
  *in_flight = c->async;
  if (t.stage && c->form == CopyForm::kStageable) {
    CUresult r;
    c->staged =
        engine->Stage(t, c->host, c->dev, c->stream, c->per_thread, !c->async, &r, &c->staged_info);
    if (c->staged) return r;
  }
  if (t.refuse) return CUDA_ERROR_INVALID_VALUE;
  if (c->async && c->form == CopyForm::kStageable) {
    CUresult r;
    if (engine->UploadEagerHead(t, c->host, c->dev, c->stream, c->per_thread, &r, in_flight)) {
      return r;
    }
  }
  return driver();
}

CUresult RunHostCopy(Optimizer* engine, CopyCall* c, DriverCall driver) {
  CopyShape& s = c->shape;
  const CopyDir dir = DirOf(s);
  if (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) return driver();
  MemKind& host_kind = dir == CopyDir::kHostToDevice ? s.src : s.dst;
  const uint64_t start = MonotonicNs();
  const uint64_t overlap_ticket = engine->judge().BeginCopy();
  const bool stageable = c->form == CopyForm::kStageable;
  const CopyTicket t =
      engine->BeforeHostCopy(s.host_ptr, s.bytes, dir, host_kind, !c->async, stageable);
  // A buffer pinned just now runs this copy pinned, and is recorded so.
  const bool registered_now = t.kind == CopyTicket::kCache && host_kind == MemKind::kPageable;
  if (registered_now) {
    host_kind = MemKind::kPinnedByPinshim;
    s.host_flags = engine->cache().register_flags();
  }
  bool in_flight;
  const CUresult r = Issue(engine, c, t, driver, &in_flight);
  engine->AfterHostCopy(t, r, in_flight, c->stream, c->per_thread);
  // A copy that also set its path up (registered its buffer, pinned a
  // ring) is not that path's speed: the setup's cost is the cost model's
  // to weigh.
  const bool setup = registered_now || (c->staged && c->staged_info.pinned_ring);
  const uint64_t ns = MonotonicNs() - start;
  const bool overlapped = engine->judge().EndCopy(overlap_ticket);
  CopyPath path;
  if (r == CUDA_SUCCESS && !setup && JudgedPath(*c, t, host_kind, &path)) {
    if (overlapped) {
      engine->judge().Overlapped(path, dir, s.bytes, !c->async, ns);
    } else {
      engine->judge().Record(path, dir, s.bytes, !c->async, ns);
    }
  }
  return r;
}

}  // namespace

CUresult RunCopy(Optimizer* engine, CopyCall* call, DriverCall driver) {
  if (engine == nullptr) return driver();
  if (call->form == CopyForm::kBatch) {
    const CUresult r = driver();
    if (r == CUDA_SUCCESS) engine->AfterAsyncCopyOnCachedMemory(call->stream, call->per_thread);
    return r;
  }
  if (call->shape.host_ptr == nullptr) return driver();
  if (IntoCapture(engine, *call)) return CopyIntoCapture(engine, &call->shape, driver);
  return RunHostCopy(engine, call, driver);
}

}  // namespace optimize
}  // namespace pinshim
