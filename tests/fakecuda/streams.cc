// Streams, events and host functions; work queued while a stream captures
// (see graphs.cc for capture and launch).
//
// Each stream has a worker thread (started on first use) that runs its ops in
// order. An op may depend on others through Deps, which is how the legacy
// NULL stream's implicit synchronization and cuStreamWaitEvent work: an op on
// the legacy stream waits for everything queued before it on the context's
// blocking streams, and an op on a blocking stream waits for everything queued
// before it on the legacy stream. Dependencies always point at earlier ops, so
// they cannot form a cycle.
#include <pthread.h>
#include <signal.h>

#include <thread>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/fakecuda_control.h"
#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

namespace behavior = ::fakecuda::behavior;

bool Satisfied(const std::vector<Dep>& deps) {
  for (const Dep& dep : deps) {
    if (dep.progress->done < dep.target) return false;
  }
  return true;
}

// What an op newly queued on `stream` must wait for. State::mu held.
std::vector<Dep> ImplicitDeps(State& s, const Stream& stream) {
  std::vector<Dep> deps;
  if (stream.kind == Stream::Kind::kLegacy) {
    for (const auto& entry : s.streams) {
      const Stream& other = *entry.second;
      if (&other == &stream || other.ctx != stream.ctx || (other.flags & CU_STREAM_NON_BLOCKING)) {
        continue;
      }
      if (other.enqueued > other.progress->done) deps.push_back({other.progress, other.enqueued});
    }
  } else if ((stream.flags & CU_STREAM_NON_BLOCKING) == 0) {
    const Stream& legacy = *stream.ctx->legacy;
    if (legacy.enqueued > legacy.progress->done) deps.push_back({legacy.progress, legacy.enqueued});
  }
  return deps;
}

void Worker(std::shared_ptr<Stream> stream) {
  pthread_setname_np(pthread_self(), "fakecuda-stream");
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    s.cv.wait(lock, [&] { return !stream->queue.empty() || stream->retired; });
    if (stream->queue.empty()) break;  // Retired and drained.
    s.cv.wait(lock, [&] { return !stream->held && Satisfied(stream->queue.front().deps); });
    Op op = std::move(stream->queue.front());
    stream->queue.pop_front();
    lock.unlock();
    if (op.delayed) {
      if (unsigned us = CopyDelayUs()) std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    if (op.work) op.work();
    lock.lock();
    stream->progress->done = op.seq;
    if (op.marks && op.mark_generation > op.marks->progress->done) {
      op.marks->progress->done = op.mark_generation;
      op.marks->completed_at = std::chrono::steady_clock::now();
    }
    s.cv.notify_all();
  }
  stream->worker_running = false;
  s.streams.erase(stream.get());
  s.cv.notify_all();
}

// Starts the worker of `stream` if it has none. State::mu held. Workers block
// every signal, so the program's handlers only ever run on its own threads;
// they are detached, so exit never waits for them.
bool EnsureWorker(const std::shared_ptr<Stream>& stream) {
  if (stream->worker_running) return true;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  bool started = true;
  try {
    std::thread(Worker, stream).detach();
  } catch (...) {
    started = false;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  stream->worker_running = started;
  return started;
}

// Queues `op` on `stream` after the stream's implicit dependencies.
// State::mu held via `lock`; with `wait`, returns once the op ran.
CUresult Enqueue(std::unique_lock<std::mutex>& lock, const std::shared_ptr<Stream>& stream, Op op,
                 bool wait) {
  State& s = S();
  if (!EnsureWorker(stream)) return CUDA_ERROR_OUT_OF_MEMORY;
  std::vector<Dep> deps = ImplicitDeps(s, *stream);
  op.deps.insert(op.deps.end(), deps.begin(), deps.end());
  op.seq = ++stream->enqueued;
  const uint64_t seq = op.seq;
  stream->queue.push_back(std::move(op));
  s.cv.notify_all();
  if (wait) {
    std::shared_ptr<Progress> progress = stream->progress;
    s.cv.wait(lock, [&] { return progress->done >= seq; });
  }
  return CUDA_SUCCESS;
}

// The calling thread's default stream in `ctx`; a new one when the context
// was destroyed since (its handle may name a new or re-activated context).
std::shared_ptr<Stream> PerThreadStream(Context* ctx) {
  ThreadState& t = T();
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& entry : t.default_streams) {
    if (entry.first != ctx) continue;
    if (entry.second->retired) entry.second = NewStreamLocked(ctx, 0, Stream::Kind::kPerThread);
    return entry.second;
  }
  std::shared_ptr<Stream> stream = NewStreamLocked(ctx, 0, Stream::Kind::kPerThread);
  t.default_streams.emplace_back(ctx, stream);
  return stream;
}

// Waits until every stream `ctx` owns (every stream when null) has run what
// was queued on it before the call.
void WaitStreams(Context* ctx) {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  std::vector<Dep> targets;
  for (const auto& entry : s.streams) {
    const Stream& stream = *entry.second;
    if (ctx == nullptr || stream.ctx == ctx) targets.push_back({stream.progress, stream.enqueued});
  }
  s.cv.wait(lock, [&] { return Satisfied(targets); });
}

bool IsSpecialHandle(CUstream handle) {
  return handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD;
}

CUresult FindEvent(CUevent handle, std::shared_ptr<Event>* out) {
  if (CUresult err = RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.events.find(reinterpret_cast<Event*>(handle));
  if (handle == nullptr || it == s.events.end()) return CUDA_ERROR_INVALID_HANDLE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult StreamSynchronize(CUstream handle, bool per_thread_api) {
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const uint64_t target = stream->enqueued;
  s.cv.wait(lock, [&] { return stream->progress->done >= target; });
  return stream->ctx->fault.load();
}

CUresult StreamQuery(CUstream handle, bool per_thread_api) {
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult f = stream->ctx->fault.load()) return f;
  return stream->progress->done >= stream->enqueued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult StreamGetFlags(CUstream handle, bool per_thread_api, unsigned* flags) {
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = stream->flags;
  return CUDA_SUCCESS;
}

CUresult StreamWaitEvent(CUstream handle, CUevent event, unsigned flags, bool per_thread_api) {
  if (CUresult err = RequireInit()) return err;
  if ((flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  std::shared_ptr<Event> ev;
  if (CUresult err = FindEvent(event, &ev)) return err;
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  // Waiting for an event recorded inside a capture joins that capture; a
  // capturing stream's waits are ordering inside its graph, which the
  // linearized graph keeps anyway.
  if (stream->capture) return CUDA_SUCCESS;
  if (ev->captured_in && ev->captured_in->capturing) {
    stream->capture = ev->captured_in;
    return CUDA_SUCCESS;
  }
  if (ev->recorded == 0) return CUDA_SUCCESS;  // Never recorded: nothing to wait for.
  Op op;
  op.deps.push_back({ev->progress, ev->recorded});
  return Enqueue(lock, stream, std::move(op), /*wait=*/false);
}

CUresult EventRecord(CUevent event, CUstream handle, bool per_thread_api) {
  std::shared_ptr<Event> ev;
  if (CUresult err = FindEvent(event, &ev)) return err;
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  if (stream->capture) {
    // A record node: the event is recorded when the graph runs.
    stream->capture->nodes.push_back(GraphNode{nullptr, false, ev});
    ev->captured_in = stream->capture;
    return CUDA_SUCCESS;
  }
  ev->captured_in.reset();
  // On an idle stream the device records the event within microseconds of
  // the call; here at once, so that a query right after the record (how
  // pinshim asks whether the legacy stream has work queued) sees it done.
  if (!stream->held && stream->queue.empty() && stream->progress->done >= stream->enqueued &&
      ImplicitDeps(s, *stream).empty()) {
    stream->progress->done = ++stream->enqueued;
    ev->progress->done = ++ev->recorded;
    ev->completed_at = std::chrono::steady_clock::now();
    s.cv.notify_all();
    return CUDA_SUCCESS;
  }
  Op op;
  op.marks = ev;
  op.mark_generation = ev->recorded + 1;
  if (CUresult err = Enqueue(lock, stream, std::move(op), /*wait=*/false)) return err;
  ++ev->recorded;
  return CUDA_SUCCESS;
}

CUresult DestroyStream(CUstream handle) {
  if (CUresult err = RequireInit()) return err;
  if (IsSpecialHandle(handle)) return behavior::kDestroySpecialStream;
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, false, &stream)) return err;
  RetireStream(stream);
  return CUDA_SUCCESS;
}

CUresult DestroyEvent(CUevent handle) {
  std::shared_ptr<Event> ev;
  if (CUresult err = FindEvent(handle, &ev)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.erase(ev.get());  // Ops that still mark it hold their own reference.
  return CUDA_SUCCESS;
}

// Queues a call of the host function on the stream's worker, after the work
// queued before it (on a capturing stream: a graph node).
CUresult HostFunc(CUstream handle, bool per_thread_api, std::function<void()> call) {
  if (CUresult err = RequireInit()) return err;
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  if (stream->retired) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) {
    stream->capture->nodes.push_back(GraphNode{std::move(call), false, nullptr});
    return CUDA_SUCCESS;
  }
  Op op;
  op.work = std::move(call);
  return Enqueue(lock, stream, std::move(op), /*wait=*/false);
}

CUresult CreateStream(CUstream* out, unsigned flags) {
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  if (out == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto stream = NewStreamLocked(ctx, flags, Stream::Kind::kUser);
  *out = reinterpret_cast<CUstream>(stream.get());
  return CUDA_SUCCESS;
}

CUresult ElapsedTime(float* ms, CUevent start, CUevent end) {
  if (CUresult err = RequireInit()) return err;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Event> a, b;
  if (CUresult err = FindEvent(start, &a)) return err;
  if (CUresult err = FindEvent(end, &b)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) || a->recorded == 0 || b->recorded == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (a->progress->done < a->recorded || b->progress->done < b->recorded)
    return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(b->completed_at - a->completed_at).count();
  return CUDA_SUCCESS;
}

}  // namespace

std::shared_ptr<Stream> NewStreamLocked(Context* ctx, unsigned flags, Stream::Kind kind) {
  auto stream = std::make_shared<Stream>();
  stream->ctx = ctx;
  stream->flags = flags;
  stream->kind = kind;
  S().streams[stream.get()] = stream;
  return stream;
}

CUresult ResolveStream(CUstream handle, bool per_thread_api, std::shared_ptr<Stream>* out) {
  if (IsSpecialHandle(handle)) {
    Context* ctx;
    if (CUresult err = CurrentContext(&ctx)) return err;
    const bool per_thread = handle == CU_STREAM_PER_THREAD || (handle == nullptr && per_thread_api);
    if (per_thread) {
      *out = PerThreadStream(ctx);
    } else {
      std::lock_guard<std::mutex> lock(S().mu);
      *out = ctx->legacy;
    }
    return CUDA_SUCCESS;
  }
  if (CUresult err = RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.streams.find(reinterpret_cast<Stream*>(handle));
  if (it == s.streams.end() || it->second->retired || it->second->kind != Stream::Kind::kUser) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *out = it->second;
  return CUDA_SUCCESS;
}

bool StreamCapturing(CUstream handle, bool per_thread_api) {
  std::shared_ptr<Stream> stream;
  if (ResolveStream(handle, per_thread_api, &stream) != CUDA_SUCCESS) return false;
  std::lock_guard<std::mutex> lock(S().mu);
  return stream->capture != nullptr;
}

CUresult Submit(const std::shared_ptr<Stream>& stream, std::function<void()> work, bool wait,
                bool async_pageable) {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  if (stream->retired) return CUDA_ERROR_INVALID_HANDLE;
  if (!stream->capture && async_pageable) ProhibitedByCaptureLocked();
  if (stream->capture) {
    // What must finish before the call returns cannot wait for a launch.
    if (wait && !async_pageable) {
      stream->capture->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    stream->capture->nodes.push_back(GraphNode{std::move(work), true, nullptr});
    return CUDA_SUCCESS;
  }
  Op op;
  op.work = std::move(work);
  op.delayed = true;
  return Enqueue(lock, stream, std::move(op), wait);
}

CUresult EnqueueGraph(const std::shared_ptr<Stream>& stream, const Graph& graph) {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  if (stream->retired) return CUDA_ERROR_INVALID_HANDLE;
  if (stream->capture) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // not simulated
  for (const GraphNode& node : graph.nodes) {
    Op op;
    op.work = node.work;
    op.delayed = node.delayed;
    if (node.marks) {
      op.marks = node.marks;
      op.mark_generation = ++node.marks->recorded;
      node.marks->captured_in.reset();
    }
    if (CUresult err = Enqueue(lock, stream, std::move(op), /*wait=*/false)) return err;
  }
  return CUDA_SUCCESS;
}

void SynchronizeContext(Context* ctx) { WaitStreams(ctx); }

void WaitAllStreamsIdle() { WaitStreams(nullptr); }

// A capture whose origin stream goes away before its end is abandoned: it
// prohibits nothing from then on. State::mu must be held.
void AbandonCaptureLocked(State& s, Stream& stream) {
  if (!stream.capture || !stream.capture_origin) return;
  stream.capture->invalidated = true;
  CloseCaptureLocked(s, stream.capture);
}

void RetireStream(const std::shared_ptr<Stream>& stream) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (stream->retired) return;
  AbandonCaptureLocked(s, *stream);
  stream->retired = true;
  if (!stream->worker_running) s.streams.erase(stream.get());
  s.cv.notify_all();
}

void RetireContextStreams(Context* ctx) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto it = s.streams.begin(); it != s.streams.end();) {
    Stream& stream = *it->second;
    if (stream.ctx == ctx) {
      AbandonCaptureLocked(s, stream);
      stream.retired = true;
    }
    if (stream.ctx == ctx && !stream.worker_running) {
      it = s.streams.erase(it);
    } else {
      ++it;
    }
  }
  s.cv.notify_all();
}

}  // namespace fakecuda

using fakecuda::S;
using fakecuda::State;

extern "C" {

CUresult fakecuda_hold_stream(CUstream stream, int held) {
  std::shared_ptr<fakecuda::Stream> resolved;
  if (CUresult err = fakecuda::ResolveStream(stream, false, &resolved)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  resolved->held = held != 0;
  s.cv.notify_all();
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  FAKECUDA_ENTER("cuStreamCreate");
  return fakecuda::CreateStream(phStream, Flags);
}

// Priorities change nothing the simulation orders by; any value is taken
// (the driver clamps out-of-range ones).
CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  FAKECUDA_ENTER("cuStreamCreateWithPriority");
  (void)priority;
  return fakecuda::CreateStream(phStream, flags);
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  FAKECUDA_ENTER("cuLaunchHostFunc");
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::HostFunc(hStream, false, [fn, userData] { fn(userData); });
}

CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  FAKECUDA_ENTER("cuLaunchHostFunc");
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::HostFunc(hStream, true, [fn, userData] { fn(userData); });
}

CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                             unsigned int flags) {
  FAKECUDA_ENTER("cuStreamAddCallback");
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::HostFunc(hStream, false, [=] { callback(hStream, CUDA_SUCCESS, userData); });
}

CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void* userData,
                                  unsigned int flags) {
  FAKECUDA_ENTER("cuStreamAddCallback");
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::HostFunc(hStream, true, [=] { callback(hStream, CUDA_SUCCESS, userData); });
}

CUresult cuStreamDestroy(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamDestroy");
  return fakecuda::DestroyStream(hStream);
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamDestroy");
  return fakecuda::DestroyStream(hStream);
}

CUresult cuStreamSynchronize(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamSynchronize");
  return fakecuda::StreamSynchronize(hStream, false);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamSynchronize");
  return fakecuda::StreamSynchronize(hStream, true);
}

CUresult cuStreamQuery(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamQuery");
  return fakecuda::StreamQuery(hStream, false);
}

CUresult cuStreamQuery_ptsz(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamQuery");
  return fakecuda::StreamQuery(hStream, true);
}

CUresult cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  FAKECUDA_ENTER("cuStreamGetFlags");
  return fakecuda::StreamGetFlags(hStream, false, flags);
}

CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  FAKECUDA_ENTER("cuStreamGetFlags");
  return fakecuda::StreamGetFlags(hStream, true, flags);
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  FAKECUDA_ENTER("cuStreamWaitEvent");
  return fakecuda::StreamWaitEvent(hStream, hEvent, Flags, false);
}

CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  FAKECUDA_ENTER("cuStreamWaitEvent");
  return fakecuda::StreamWaitEvent(hStream, hEvent, Flags, true);
}

CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  FAKECUDA_ENTER("cuEventCreate");
  fakecuda::Context* ctx;
  if (CUresult err = fakecuda::CurrentContext(&ctx)) return err;
  constexpr unsigned kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (Flags & ~kKnown) != 0 ||
      ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto ev = std::make_shared<fakecuda::Event>();
  ev->flags = Flags;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events[ev.get()] = ev;
  *phEvent = reinterpret_cast<CUevent>(ev.get());
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  FAKECUDA_ENTER("cuEventRecord");
  return fakecuda::EventRecord(hEvent, hStream, false);
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  FAKECUDA_ENTER("cuEventRecord");
  return fakecuda::EventRecord(hEvent, hStream, true);
}

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  FAKECUDA_ENTER("cuEventRecordWithFlags");
  if ((flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::EventRecord(hEvent, hStream, false);
}

CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  FAKECUDA_ENTER("cuEventRecordWithFlags");
  if ((flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::EventRecord(hEvent, hStream, true);
}

CUresult cuEventQuery(CUevent hEvent) {
  FAKECUDA_ENTER("cuEventQuery");
  std::shared_ptr<fakecuda::Event> ev;
  if (CUresult err = fakecuda::FindEvent(hEvent, &ev)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return ev->progress->done >= ev->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent hEvent) {
  FAKECUDA_ENTER("cuEventSynchronize");
  std::shared_ptr<fakecuda::Event> ev;
  if (CUresult err = fakecuda::FindEvent(hEvent, &ev)) return err;
  if (CUresult err = fakecuda::RefuseDuringCapture()) return err;
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  const uint64_t target = ev->recorded;
  s.cv.wait(lock, [&] { return ev->progress->done >= target; });
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent hEvent) {
  FAKECUDA_ENTER("cuEventDestroy");
  return fakecuda::DestroyEvent(hEvent);
}

CUresult cuEventDestroy_v2(CUevent hEvent) {
  FAKECUDA_ENTER("cuEventDestroy");
  return fakecuda::DestroyEvent(hEvent);
}

CUresult cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  FAKECUDA_ENTER("cuEventElapsedTime");
  return fakecuda::ElapsedTime(pMilliseconds, hStart, hEnd);
}

CUresult cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  FAKECUDA_ENTER("cuEventElapsedTime");
  return fakecuda::ElapsedTime(pMilliseconds, hStart, hEnd);
}

}  // extern "C"
