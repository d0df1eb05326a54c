// Stream-ordered fences: "everything queued on stream S up to now has
// finished", as a recorded CUDA event. The pool, the arena and the
// registration cache attach fences to memory an asynchronous copy used and
// give the memory back (to the program, or to the driver) only once every
// fence attached to it has completed.
//
// Events are created without timing (cheapest to record and query) in the
// context current on the recording thread, and recycled per context.
// Whenever an event cannot be created or recorded (no context, driver
// error), Record waits for the stream instead, so there is never work in
// flight that no fence covers.
#ifndef PINSHIM_SHIM_OPTIMIZE_FENCES_H_
#define PINSHIM_SHIM_OPTIMIZE_FENCES_H_

#include <atomic>
#include <cstdint>

#include "shim/optimize/driver_ops.h"
#include "shim/optimize/lock.h"

namespace pinshim {
namespace optimize {

struct Fence {
  CUevent event = nullptr;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  uint64_t id = 0;  // unique, never 0 for a recorded fence
  // Streams created in the process before this fence was recorded
  // (FenceManager::NoteStreamCreated). Two fences on one stream handle with
  // the same count were recorded on one stream: a handle is reused only by
  // a creation.
  uint64_t stream_epoch = 0;
};

// Whether `later` completing implies `earlier` completed without asking the
// driver: both recorded on the same stream (same context and handle, no
// stream created between them), `later` after `earlier`. Never for the
// per-thread default stream's handle, which names a different stream on
// every thread.
inline bool ImpliesDone(const Fence& later, const Fence& earlier) {
  return later.id != 0 && earlier.id != 0 && later.id > earlier.id && later.ctx == earlier.ctx &&
         later.stream == earlier.stream && later.stream != CU_STREAM_PER_THREAD &&
         later.stream_epoch == earlier.stream_epoch;
}

// The fences attached to one piece of memory. Plain data, guarded by its
// owner's lock; the driver is only ever asked about copies of its entries,
// outside that lock, and results are applied back by id.
class FenceSet {
 public:
  static constexpr int kSlots = 4;

  bool empty() const { return count_ == 0; }
  int count() const { return count_; }

  // Adds f. A fence held for the same context and stream is superseded (f
  // completes after it, by stream order) and comes back in *superseded for
  // recycling. When every slot holds another stream, the oldest comes back
  // in *must_wait: wait for it, then recycle it. Unused outputs get id 0.
  void Add(const Fence& f, Fence* superseded, Fence* must_wait);

  // Copies the entries to out; returns how many.
  int Copy(Fence out[kSlots]) const;

  // Removes the entry with this id (seen complete); false if gone already.
  bool Remove(uint64_t id, Fence* removed);

  // Moves every entry to out and empties the set; returns how many.
  int TakeAll(Fence out[kSlots]);

#ifdef PINSHIM_DEBUG_INVARIANTS
  // Debug builds (invariants.h): at most kSlots entries, every one recorded
  // (id != 0, an event), ids distinct, at most one per context and stream
  // (Add supersedes the older).
  bool WellFormed() const;
#endif

 private:
  Fence slots_[kSlots];
  int count_ = 0;
};

class FenceManager {
 public:
  static constexpr int kMaxContexts = 32;
  static constexpr int kEventsPerContext = 512;

  constexpr FenceManager() = default;
  FenceManager(const FenceManager&) = delete;
  FenceManager& operator=(const FenceManager&) = delete;

  // ops must stay valid while the manager is used. False when the driver
  // table is incomplete or internal memory ran out.
  bool Init(const DriverOps* ops);

  // Records a fence on `stream` (in RecordableStream form). Returns false
  // when it could not, after waiting for the stream (or the context)
  // instead: then nothing on the stream is pending and *out is empty.
  bool Record(CUstream stream, Fence* out);

  // Whether the fence completed. Errors count as completed: an event of a
  // destroyed context has no work left behind it.
  bool IsDone(const Fence& f) const;
  // The same for n fences at once (done[i] for fs[i]), asking the driver as
  // little as stream order allows: per stream, the newest first (done: so
  // are the older ones), then the oldest (pending: so are the newer ones),
  // then halving what lies between.
  // Returns the number of driver queries made (per stream at most 2 and
  // the halvings between its newest and oldest). At most kMaxAreDone.
  static constexpr int kMaxAreDone = 64;
  int AreDone(const Fence* fs, int n, bool* done) const;

  // A stream was (or is being) created: its handle may be one a destroyed
  // stream had. Called by the stream-creating hooks, in every mode.
  static void NoteStreamCreated() { stream_epoch_.fetch_add(1, std::memory_order_acq_rel); }

  // Blocks until the fence completed.
  void Wait(const Fence& f);

  // Returns the fence's event for reuse. The fence must be out of every set.
  void Recycle(const Fence& f);

  // Record, Wait and Recycle: returns once everything queued on `stream`
  // so far (in RecordableStream form) has finished.
  void WaitForStream(CUstream stream);

  // Whether work that an operation queued now on `stream` (RecordableStream
  // form) would run after has yet to complete: the stream's own, and what
  // it waits for implicitly (a blocking stream, or the per-thread default
  // stream, the legacy stream's; the legacy stream every blocking
  // stream's). Asked with stream queries, and for the legacy stream by a
  // fence recorded on it and asked for up to kIdleSpinNs (an event on an
  // idle stream completes a few microseconds after its record). Never
  // blocks longer than that. kUnknown: the driver cannot say (an error, a
  // capturing stream).
  enum class Work { kNone, kQueued, kUnknown };
  static constexpr uint64_t kIdleSpinNs = 50000;
  Work QueuedWork(CUstream stream);

  // The context is gone; its cached events are dropped without the driver.
  void OnContextDestroyed(CUcontext ctx);

  // Fork handling (see lock.h). In the child, events are unusable: they are
  // forgotten and Record only ever waits.
  void PrepareFork() ACQUIRE(mu_) { mu_.PrepareFork(); }
  void AfterForkParent() RELEASE(mu_) { mu_.AfterFork(); }
  void AfterForkChild() RELEASE(mu_);

  uint64_t records() const { return records_.load(std::memory_order_relaxed); }
  uint64_t record_failures() const { return record_failures_.load(std::memory_order_relaxed); }
  uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }

  const DriverOps* ops() const { return ops_; }

 private:
  struct ContextEvents {
    CUcontext ctx;
    int count;
    CUevent events[kEventsPerContext];
  };

  CUevent Pop(CUcontext ctx);
  bool Push(CUcontext ctx, CUevent event);

  const DriverOps* ops_ = nullptr;
  ContextEvents* table_ PT_GUARDED_BY(mu_) = nullptr;  // kMaxContexts entries
  Mutex mu_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> disabled_{false};
  std::atomic<uint64_t> records_{0};
  std::atomic<uint64_t> record_failures_{0};
  std::atomic<uint64_t> waits_{0};
  static std::atomic<uint64_t> stream_epoch_;
};

// Attaching a fence to memory an asynchronous copy used, the protocol the
// pool, the arena and the registration cache share: record the fence
// before taking the owner's lock (the driver is never called under it),
// add it under the lock to the memory's FenceSet when that memory is still
// there, and after the lock wait for it at once when it is not (always
// safe); then recycle what the set superseded and wait for what it had no
// slot left for. The caller holds the lock around AddTo:
//     FenceAttachment attach(fences_, stream);
//     if (!attach.recorded()) return;  // the stream was waited for instead
//     { MutexLock lock(&mu_); if (Set* s = Find(p)) attach.AddTo(&s->fences); }
//     attach.Finish();
class FenceAttachment {
 public:
  // Records a fence on `stream`; `fences` must outlive the attachment.
  FenceAttachment(FenceManager* fences, CUstream stream) : fences_(fences) {
    recorded_ = fences_->Record(stream, &fence_);
  }
  FenceAttachment(const FenceAttachment&) = delete;
  FenceAttachment& operator=(const FenceAttachment&) = delete;

  // False when no fence could be recorded: Record waited for the stream
  // instead, so nothing is pending and there is nothing to attach.
  bool recorded() const { return recorded_; }

  // Adds the fence to `set`. Called at most once, under the set owner's lock.
  void AddTo(FenceSet* set) {
    set->Add(fence_, &superseded_, &must_wait_);
    added_ = true;
  }

  // Outside the lock: waits for the fence when it was not added, recycles
  // the superseded one and waits for the one the set had no slot for.
  // Returns whether the fence was added.
  bool Finish() {
    if (recorded_ && !added_) {
      fences_->Wait(fence_);
      fences_->Recycle(fence_);
    }
    fences_->Recycle(superseded_);
    if (must_wait_.id != 0) {
      fences_->Wait(must_wait_);
      fences_->Recycle(must_wait_);
    }
    return added_;
  }

 private:
  FenceManager* fences_;
  Fence fence_;
  Fence superseded_;
  Fence must_wait_;
  bool recorded_ = false;
  bool added_ = false;
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_FENCES_H_
