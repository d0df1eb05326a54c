#include "analyzer/report/sync_model.h"

#include <cstdio>
#include <cstring>

#include "analyzer/report/format.h"

namespace pinshim {
namespace report {
namespace {

constexpr uint64_t kLegacyHandle = 1;     // CU_STREAM_LEGACY
constexpr uint64_t kPerThreadHandle = 2;  // CU_STREAM_PER_THREAD
constexpr uint32_t kNonBlocking = 1;      // CU_STREAM_NON_BLOCKING

// Tracked copies per stream; older ones are taken to have finished (a bound
// on memory for traces of programs that never wait).
constexpr size_t kMaxInFlightPerStream = 4096;

// Streams modelled one by one; later ones share one index (see NewStream).
constexpr size_t kMaxStreams = 1024;

std::string At(uint64_t t_ns, uint64_t start_ns) {
  return FormatSeconds(t_ns >= start_ns ? (t_ns - start_ns) * 1e-9 : 0);
}

}  // namespace

uint64_t* SyncModel::Clock::Slot(size_t i) {
  if (i >= n) {
    const size_t want = i + 1;
    if (want > kInline) {
      if (n <= kInline) big.assign(small, small + n);
      big.resize(want, 0);
    } else {
      for (size_t k = n; k < want; ++k) small[k] = 0;
    }
    n = static_cast<uint32_t>(want);
  }
  return n <= kInline ? &small[i] : &big[i];
}

void SyncModel::Clock::Set(size_t i, uint64_t x) {
  uint64_t* slot = Slot(i);
  if (x > *slot) *slot = x;
}

bool SyncModel::Clock::Join(const Clock& o) {
  bool grew = false;
  if (o.n == 0) return false;
  Slot(o.n - 1);
  uint64_t* mine = n <= kInline ? small : big.data();
  const uint64_t* theirs = o.n <= kInline ? o.small : o.big.data();
  for (size_t i = 0; i < o.n; ++i) {
    if (theirs[i] > mine[i]) {
      mine[i] = theirs[i];
      grew = true;
    }
  }
  return grew;
}

void SyncModel::Begin(const TraceReader& trace) {
  trace_ = &trace;
  const Damage& d = trace.damage();
  damaged_ = d.skipped_bytes != 0 || d.bad_events != 0 || d.dropped_events != 0;
}

int SyncModel::NewStream(Kind kind, int device, uint64_t handle, uint32_t tid) {
  // Streams made and dropped by the thousand (one per request, say) share
  // one last index: their completions then complete one another's copies,
  // which can only hide findings, never make one, and keeps clocks bounded.
  if (streams_.size() >= kMaxStreams) {
    if (overflow_ < 0) {
      overflow_ = static_cast<int>(streams_.size());
      StreamState s;
      s.kind = Kind::kUser;
      s.device = device;
      streams_.push_back(std::move(s));
      poss_reason_.emplace_back();
    }
    return overflow_;
  }
  StreamState s;
  s.kind = kind;
  s.device = device;
  s.handle = handle;
  s.tid = tid;
  streams_.push_back(std::move(s));
  poss_reason_.emplace_back();
  return static_cast<int>(streams_.size() - 1);
}

int SyncModel::LegacyOf(int device) {
  auto it = legacy_.find(device);
  if (it != legacy_.end()) return it->second;
  int i = NewStream(Kind::kLegacy, device, 0, 0);
  legacy_[device] = i;
  return i;
}

int SyncModel::PerThreadOf(uint32_t tid, int device) {
  auto key = std::make_pair(tid, device);
  auto it = per_thread_.find(key);
  if (it != per_thread_.end()) return it->second;
  int i = NewStream(Kind::kPerThread, device, 0, tid);
  per_thread_[key] = i;
  return i;
}

int SyncModel::Resolve(uint64_t handle, uint32_t api, uint32_t tid, int device) {
  if (handle == 0) {
    auto it = per_thread_api_.find(api);
    if (it == per_thread_api_.end()) {
      const std::string& name = trace_->ApiName(api);
      it = per_thread_api_.emplace(api, EndsWith(name, "_ptsz") || EndsWith(name, "_ptds")).first;
    }
    return it->second ? PerThreadOf(tid, device) : LegacyOf(device);
  }
  if (handle == kLegacyHandle) return LegacyOf(device);
  if (handle == kPerThreadHandle) return PerThreadOf(tid, device);
  auto it = user_.find(handle);
  if (it != user_.end()) return it->second;
  // Created where the trace did not see it: flags unknown.
  int i = NewStream(Kind::kUser, device, handle, 0);
  user_[handle] = i;
  return i;
}

bool SyncModel::SureBlocking(const StreamState& s) const {
  return s.kind == Kind::kPerThread || (s.kind == Kind::kUser && s.flags_known && s.blocking);
}

bool SyncModel::InGroup(const StreamState& s) const {
  return s.kind != Kind::kUser || !s.flags_known || s.blocking;
}

const SyncModel::Clock& SyncModel::PossOf(int i) const {
  return InGroup(streams_[i]) ? group_poss_ : streams_[i].poss;
}

void SyncModel::Op(int i) {
  const int device = streams_[i].device;
  const bool legacy = streams_[i].kind == Kind::kLegacy;
  const bool blocking = SureBlocking(streams_[i]);
  const int l = blocking ? LegacyOf(device) : -1;  // may grow streams_
  StreamState& s = streams_[i];
  ++s.seq;
  s.sure.Set(i, s.seq);
  if (legacy) {
    // S1: the legacy stream first waits for every blocking stream...
    auto it = blocking_union_.find(device);
    if (it != blocking_union_.end()) s.sure.Join(it->second);
  } else if (blocking) {
    // ... and blocking streams wait for the legacy stream.
    s.sure.Join(streams_[l].sure);
  }
  if (blocking) blocking_union_[device].Join(s.sure);
  if (InGroup(s)) {
    group_poss_.Set(i, s.seq);
    ++group_poss_version_;
  } else {
    s.poss.Set(i, s.seq);
  }
}

SyncModel::Clock SyncModel::Issued() const {
  Clock c;
  for (size_t i = 0; i < streams_.size(); ++i) c.Set(i, streams_[i].seq);
  return c;
}

void SyncModel::Complete(const Clock& sure, const Clock& poss, const Reason& reason) {
  const bool grew = sure_done_.Join(sure);
  for (size_t i = 0; i < poss.size(); ++i) {
    if (poss.At(i) > poss_done_.At(i) && i < poss_reason_.size()) poss_reason_[i] = reason;
  }
  poss_done_.Join(poss);
  poss_done_.Join(sure);
  if (grew) Prune();
}

// `poss_stream`: the possible completion is that stream's as it stands when
// the completion applies, not as it stood when scheduled: a possible
// completion may only grow (it is an upper bound), and this one needs no
// snapshot.
void SyncModel::Schedule(uint64_t at, const Clock& sure, const Clock& poss, bool everything,
                         const Reason& reason, int poss_stream) {
  // A completion snapshot holds only work queued so far: with no tracked
  // copy in flight it can complete none (one that may cover later work, an
  // "everything", is kept).
  if (inflight_ == 0 && !everything) return;
  uint32_t slot;
  if (!free_pending_.empty()) {
    slot = free_pending_.back();
    free_pending_.pop_back();
  } else {
    slot = static_cast<uint32_t>(pending_pool_.size());
    pending_pool_.emplace_back();
  }
  Pending& p = pending_pool_[slot];
  p.sure = sure;
  p.poss = poss;
  p.poss_everything = everything;
  p.poss_stream = poss_stream;
  p.reason = reason;
  pending_.push(PendingKey{at, pending_order_++, slot});
}

void SyncModel::Advance(uint64_t t) {
  while (!pending_.empty() && pending_.top().at <= t) {
    const uint32_t slot = pending_.top().slot;
    pending_.pop();
    Pending& p = pending_pool_[slot];
    if (p.poss_everything) p.poss.Join(Issued());
    if (p.poss_stream >= 0) p.poss.Join(PossOf(p.poss_stream));
    Complete(p.sure, p.poss, p.reason);
    free_pending_.push_back(slot);
  }
}

void SyncModel::Prune() {
  if (inflight_ == 0) return;
  for (size_t i = 0; i < streams_.size(); ++i) {
    std::deque<InFlightCopy>& q = streams_[i].inflight;
    const uint64_t done = sure_done_.At(i);
    while (!q.empty() && q.front().seq <= done) {
      q.pop_front();
      --inflight_;
    }
  }
}

void SyncModel::Push(int stream, const InFlightCopy& c) {
  std::deque<InFlightCopy>& q = streams_[stream].inflight;
  q.push_back(c);
  ++inflight_;
  if (q.size() > kMaxInFlightPerStream) {
    q.pop_front();
    --inflight_;
  }
}

std::string SyncModel::Describe(const Reason& r) const {
  const std::string when = At(r.time_ns, trace_->process().start_monotonic_ns);
  const std::string on = r.stream >= 0 ? DescribeStream(r.stream) : std::string("?");
  switch (r.what) {
    case Why::kSyncCopy: return "a synchronous copy on " + on + " at " + when;
    case Why::kPageableCopy:
      return "an asynchronous copy with pageable memory on " + on + " at " + when +
             ", which the driver may run synchronously";
    case Why::kStreamSync: return "a synchronize of " + on + " at " + when;
    case Why::kStreamQuery: return "a successful query of " + on + " at " + when;
    case Why::kContextSync: return "a context synchronize at " + when;
    case Why::kDeviceFree: return "cuMemFree, which waited for the device, at " + when;
    case Why::kFreeHost: return "cuMemFreeHost, which waited for the device, at " + when;
    case Why::kUnregister: return "cuMemHostUnregister, which waited for the device, at " + when;
    case Why::kEventSync: return "a synchronize of event " + HexNumber(r.handle) + " at " + when;
    case Why::kEventQuery:
      return "a successful query of event " + HexNumber(r.handle) + " at " + when;
    case Why::kUnrecordedEvent:
      return "a wait for event " + HexNumber(r.handle) + " at " + when +
             ", which the trace never saw recorded outside a capture";
    case Why::kUnwrappedHostFunc:
      return "a host function queued on " + on + " at " + when +
             " (when it ran is not in the trace)";
    case Why::kHostFunc: return "a host function starting at " + when;
    case Why::kGraphLaunch:
      return "a graph launched on " + on + " at " + when +
             ", whose host nodes (if any) run once the work before them finished";
    case Why::kNone: break;
  }
  return "a wait in the trace";
}

void SyncModel::OnEvent(const Event& e, bool page_locked) {
  now_ = e.time_ns;
  Advance(e.time_ns);
  switch (e.type) {
    case trace::EventType::kCopy: OnCopy(e, page_locked); break;
    case trace::EventType::kSync: OnSync(e); break;
    case trace::EventType::kStream: OnStream(e); break;
    case trace::EventType::kGraph: OnGraph(e); break;
    case trace::EventType::kPin:
      // C5: the driver waits for the device before it releases pinned memory
      // (not a host pool's cuMemFreeAsync, which is stream-ordered).
      if (e.result == 0 && (e.op == PinOp::kFree || e.op == PinOp::kUnregister) &&
          (e.flags & trace::kPinFlagStreamOrdered) == 0) {
        const int device = DeviceOf(e);
        Clock sure;
        for (size_t i = 0; i < streams_.size(); ++i) {
          if (streams_[i].device == device || !streams_[i].flags_known) sure.Join(streams_[i].sure);
        }
        Schedule(e.time_ns + e.duration_ns, sure, Clock(), true,
                 Reason{e.op == PinOp::kFree ? Why::kFreeHost : Why::kUnregister, -1, e.time_ns});
      }
      break;
    case trace::EventType::kDropped: damaged_ = true; break;
    default: break;
  }
}

void SyncModel::OnStream(const Event& e) {
  if (e.result != 0 || e.stream == 0) return;
  // A handle created again is a new stream: the old one's work is its own.
  int i = NewStream(Kind::kUser, DeviceOf(e), e.stream, 0);
  if (i != overflow_) {
    streams_[i].flags_known = true;
    streams_[i].blocking = (e.flags & kNonBlocking) == 0;
  }
  user_[e.stream] = i;
}

void SyncModel::OnCopy(const Event& e, bool page_locked) {
  if (e.result != 0 || !e.IsHostDeviceCopy()) return;
  const int i = Resolve(e.stream, e.api, e.tid, DeviceOf(e));
  const int capture = streams_[i].capture;
  if (!e.async) {
    if (capture != 0) return;  // refused by the driver while capturing
    // C4: returns after the earlier work on its stream ran.
    Op(i);
    Schedule(e.time_ns + e.duration_ns, streams_[i].sure, Clock(), false,
             Reason{Why::kSyncCopy, i, e.time_ns}, i);
    return;
  }
  InFlightCopy c;
  c.time_ns = e.time_ns;
  c.ptr = e.host_ptr;
  c.bytes = e.bytes;
  c.dir = e.dir;
  c.kind = e.HostKind();
  c.stack = e.stack;
  c.stream_handle = e.stream;
  if (capture != 0) {
    // G1: runs only when a graph made from this capture is launched.
    if (page_locked) captured_[capture].push_back(c);
    return;
  }
  Op(i);
  if (page_locked) {
    c.id = next_copy_id_++;
    c.stream = i;
    c.seq = streams_[i].seq;
    Push(i, c);
  } else if (c.kind == MemKind::kPageable) {
    const uint64_t at = e.time_ns + e.duration_ns;
    if (InGroup(streams_[i])) {
      // Applied at its end as the group stands then: one already waiting
      // that applies no later, with the group unchanged since, is the same.
      if (group_poss_version_ == scheduled_group_version_ && scheduled_group_at_ <= at) return;
      scheduled_group_version_ = group_poss_version_;
      scheduled_group_at_ = at;
    }
    Schedule(at, Clock(), Clock(), false, Reason{Why::kPageableCopy, i, e.time_ns}, i);
  }
}

void SyncModel::OnStreamDone(const Event& e, uint64_t end, int device) {
  int i = Resolve(e.stream, e.api, e.tid, device);
  if (streams_[i].capture != 0) return;
  Schedule(
      end, streams_[i].sure, Clock(), false,
      Reason{e.sync == trace::SyncKind::kStreamSynchronize ? Why::kStreamSync : Why::kStreamQuery,
             i, e.time_ns},
      i);
}

void SyncModel::OnAllDone(const Event& e, uint64_t end, int device) {
  Clock sure;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].device == device || !streams_[i].flags_known) sure.Join(streams_[i].sure);
  }
  Schedule(
      end, sure, Clock(), true,
      Reason{e.sync == trace::SyncKind::kContextSynchronize ? Why::kContextSync : Why::kDeviceFree,
             -1, e.time_ns});
}

void SyncModel::OnEventRecord(const Event& e, int device) {
  int i = Resolve(e.stream, e.api, e.tid, device);
  Mark& m = events_[e.event_handle];
  m = Mark();
  if (streams_[i].capture != 0) {
    m.capture = streams_[i].capture;  // G1: a capture's fork point, not a record
    return;
  }
  Op(i);
  m.valid = true;
  m.sure = streams_[i].sure;
  m.poss = PossOf(i);
}

void SyncModel::OnEventDone(const Event& e, uint64_t end) {
  auto it = events_.find(e.event_handle);
  if (it != events_.end() && it->second.valid) {
    Schedule(
        end, it->second.sure, it->second.poss, false,
        Reason{e.sync == trace::SyncKind::kEventSynchronize ? Why::kEventSync : Why::kEventQuery,
               -1, e.time_ns, e.event_handle});
  } else {
    Schedule(end, Clock(), Clock(), true,
             Reason{Why::kUnrecordedEvent, -1, e.time_ns, e.event_handle});
  }
}

void SyncModel::OnStreamWaitEvent(const Event& e, int device) {
  int i = Resolve(e.stream, e.api, e.tid, device);
  auto it = events_.find(e.event_handle);
  const Mark* m = it == events_.end() ? nullptr : &it->second;
  if (streams_[i].capture != 0) return;
  if (m != nullptr && m->capture != 0) {
    streams_[i].capture = m->capture;  // G1: joins the capture
    return;
  }
  // S4 (and S1: a wait on the legacy stream is an action on it).
  Op(i);
  StreamState& s = streams_[i];
  if (m != nullptr && m->valid) {
    s.sure.Join(m->sure);
    if (SureBlocking(s)) blocking_union_[s.device].Join(s.sure);
    (InGroup(s) ? group_poss_ : s.poss).Join(m->poss);
  } else {
    (InGroup(s) ? group_poss_ : s.poss).Join(Issued());
  }
  if (InGroup(s)) ++group_poss_version_;
}

void SyncModel::OnHostFuncQueued(const Event& e, int device) {
  int i = Resolve(e.stream, e.api, e.tid, device);
  if (streams_[i].capture != 0) return;  // a graph node: see G2
  Op(i);
  if (e.event_handle == 0) {
    // Not wrapped: when it ran is not in the trace, so it may have run
    // at any moment from now on, touching what its stream had done.
    Schedule(e.time_ns, Clock(), PossOf(i), false, Reason{Why::kUnwrappedHostFunc, i, e.time_ns});
    return;
  }
  Mark& m = host_fns_[e.event_handle];
  m.valid = true;
  m.sure = streams_[i].sure;
  m.poss = PossOf(i);
}

void SyncModel::OnHostFuncRun(const Event& e) {
  auto it = host_fns_.find(e.event_handle);
  if (it == host_fns_.end()) return;
  Schedule(e.time_ns, it->second.sure, it->second.poss, false,
           Reason{Why::kHostFunc, -1, e.time_ns});
  host_fns_.erase(it);
}

void SyncModel::OnSync(const Event& e) {
  ++sync_events_;
  if (e.result != 0) {
    // A failed host function launch cancels its token.
    if (e.sync == trace::SyncKind::kHostFuncQueued) host_fns_.erase(e.event_handle);
    return;
  }
  const uint64_t end = e.time_ns + e.duration_ns;
  const int device = DeviceOf(e);
  switch (e.sync) {
    case trace::SyncKind::kStreamSynchronize:
    case trace::SyncKind::kStreamQueryDone: OnStreamDone(e, end, device); break;
    case trace::SyncKind::kContextSynchronize:
    case trace::SyncKind::kDeviceFree: OnAllDone(e, end, device); break;
    case trace::SyncKind::kEventRecord: OnEventRecord(e, device); break;
    case trace::SyncKind::kEventSynchronize:
    case trace::SyncKind::kEventQueryDone: OnEventDone(e, end); break;
    case trace::SyncKind::kStreamWaitEvent: OnStreamWaitEvent(e, device); break;
    case trace::SyncKind::kHostFuncQueued: OnHostFuncQueued(e, device); break;
    case trace::SyncKind::kHostFuncRun: OnHostFuncRun(e); break;
    default: break;
  }
}

void SyncModel::OnGraph(const Event& e) {
  if (e.result != 0) return;
  const int i = Resolve(e.stream, e.api, e.tid, DeviceOf(e));
  switch (e.graph_op) {
    case trace::GraphOp::kCaptureBegin:
      if (streams_[i].capture == 0) streams_[i].capture = next_capture_++;
      break;
    case trace::GraphOp::kCaptureEnd: {
      const int capture = streams_[i].capture;
      if (capture == 0) return;
      for (StreamState& s : streams_) {
        if (s.capture == capture) s.capture = 0;
      }
      break;
    }
    case trace::GraphOp::kLaunch: {
      if (streams_[i].capture != 0) return;  // a graph launched into a capture
      Op(i);
      // G2: every captured copy may run again in this launch.
      for (const auto& kv : captured_) {
        for (const InFlightCopy& proto : kv.second) {
          InFlightCopy c = proto;
          c.id = next_copy_id_++;
          c.time_ns = e.time_ns;
          c.stream = i;
          c.seq = streams_[i].seq;
          c.from_graph = true;
          Push(i, c);
        }
      }
      Schedule(e.time_ns, Clock(), PossOf(i), false, Reason{Why::kGraphLaunch, i, e.time_ns});
      break;
    }
  }
}

CopyState SyncModel::StateOf(const InFlightCopy& c, std::string* why) const {
  if (sure_done_.At(c.stream) >= c.seq) return CopyState::kDone;
  if (c.from_graph) {
    *why = "the copy belongs to a graph launched on " + DescribeStream(c.stream) +
           "; which copies a launched graph holds is not in the trace";
    return CopyState::kUnknown;
  }
  if (poss_done_.At(c.stream) >= c.seq) {
    *why = "it may have been completed by " + Describe(poss_reason_[c.stream]) +
           ", through work the trace does not show (kernels, memsets, graph nodes) or a "
           "synchronous-looking copy the driver need not run synchronously";
    return CopyState::kUnknown;
  }
  if (damaged_) {
    *why = "the trace lost events (damaged or dropped), among which a wait for it may have been";
    return CopyState::kUnknown;
  }
  *why = "nothing in the trace waited for it: no synchronize or successful query of " +
         DescribeStream(c.stream) +
         ", no wait for an event recorded after it there, no context synchronize";
  return CopyState::kMayRun;
}

std::string SyncModel::DescribeStream(int index) const {
  if (index == overflow_) {
    return "one of the streams beyond the first " + std::to_string(kMaxStreams) +
           " (modelled together)";
  }
  const StreamState& s = streams_[index];
  const std::string device = "device " + std::to_string(s.device);
  switch (s.kind) {
    case Kind::kLegacy: return "the legacy default stream (" + device + ")";
    case Kind::kPerThread:
      return "the per-thread default stream of thread " + std::to_string(s.tid) + " (" + device +
             ")";
    case Kind::kUser: break;
  }
  if (!s.flags_known) return "stream " + HexNumber(s.handle) + " (created outside the trace)";
  return "stream " + HexNumber(s.handle) + (s.blocking ? " (blocking)" : " (non-blocking)");
}

}  // namespace report
}  // namespace pinshim
