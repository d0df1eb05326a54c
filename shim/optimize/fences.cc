#include "shim/optimize/fences.h"

#include <cstring>

#include "shim/core/internal_alloc.h"
#include "shim/optimize/invariants.h"

namespace pinshim {
namespace optimize {

void FenceSet::Add(const Fence& f, Fence* superseded, Fence* must_wait) {
  *superseded = Fence();
  *must_wait = Fence();
  for (int i = 0; i < count_; ++i) {
    if (slots_[i].ctx == f.ctx && slots_[i].stream == f.stream) {
      *superseded = slots_[i];
      // Keep the slots in recording order: the superseded one leaves, f
      // joins at the end.
      memmove(&slots_[i], &slots_[i + 1], (count_ - i - 1) * sizeof(Fence));
      slots_[count_ - 1] = f;
      return;
    }
  }
  if (count_ == kSlots) {
    *must_wait = slots_[0];
    memmove(&slots_[0], &slots_[1], (kSlots - 1) * sizeof(Fence));
    slots_[kSlots - 1] = f;
    return;
  }
  slots_[count_++] = f;
}

int FenceSet::Copy(Fence out[kSlots]) const {
  for (int i = 0; i < count_; ++i) out[i] = slots_[i];
  return count_;
}

bool FenceSet::Remove(uint64_t id, Fence* removed) {
  for (int i = 0; i < count_; ++i) {
    if (slots_[i].id == id) {
      if (removed != nullptr) *removed = slots_[i];
      memmove(&slots_[i], &slots_[i + 1], (count_ - i - 1) * sizeof(Fence));
      --count_;
      return true;
    }
  }
  return false;
}

int FenceSet::TakeAll(Fence out[kSlots]) {
  int n = Copy(out);
  count_ = 0;
  return n;
}

#ifdef PINSHIM_DEBUG_INVARIANTS
PINSHIM_INVARIANT_WALKER bool FenceSet::WellFormed() const {
  if (count_ < 0 || count_ > kSlots) return false;
  for (int i = 0; i < count_; ++i) {
    if (slots_[i].id == 0 || slots_[i].event == nullptr) return false;
    for (int j = i + 1; j < count_; ++j) {
      if (slots_[j].id == slots_[i].id) return false;
      if (slots_[j].ctx == slots_[i].ctx && slots_[j].stream == slots_[i].stream) return false;
    }
  }
  return true;
}
#endif

bool FenceManager::Init(const DriverOps* ops) {
  if (ops == nullptr || !DriverOpsComplete(*ops)) return false;
  if (table_ == nullptr) {
    table_ = static_cast<ContextEvents*>(InternalAlloc(sizeof(ContextEvents) * kMaxContexts));
    if (table_ == nullptr) return false;
  }
  ops_ = ops;
  return true;
}

CUevent FenceManager::Pop(CUcontext ctx) {
  MutexLock lock(&mu_);
  for (int i = 0; i < kMaxContexts; ++i) {
    ContextEvents& c = table_[i];
    if (c.ctx == ctx && c.count > 0) return c.events[--c.count];
  }
  return nullptr;
}

bool FenceManager::Push(CUcontext ctx, CUevent event) {
  MutexLock lock(&mu_);
  ContextEvents* empty = nullptr;
  for (int i = 0; i < kMaxContexts; ++i) {
    ContextEvents& c = table_[i];
    if (c.ctx == ctx) {
      if (c.count == kEventsPerContext) return false;
      c.events[c.count++] = event;
      return true;
    }
    if (c.ctx == nullptr && empty == nullptr) empty = &c;
  }
  if (empty == nullptr) return false;
  empty->ctx = ctx;
  empty->count = 1;
  empty->events[0] = event;
  return true;
}

std::atomic<uint64_t> FenceManager::stream_epoch_{0};

bool FenceManager::Record(CUstream stream, Fence* out) {
  *out = Fence();
  // Read before the record: a stream created after it cannot be this one.
  const uint64_t epoch = stream_epoch_.load(std::memory_order_acquire);
  CUcontext ctx = nullptr;
  if (!disabled_.load(std::memory_order_relaxed) && ops_->ctx_get_current(&ctx) == CUDA_SUCCESS &&
      ctx != nullptr) {
    CUevent ev = Pop(ctx);
    if (ev == nullptr && ops_->event_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      ev = nullptr;
    }
    if (ev != nullptr) {
      if (ops_->event_record(ev, stream) == CUDA_SUCCESS) {
        out->event = ev;
        out->ctx = ctx;
        out->stream = stream;
        out->stream_epoch = epoch;
        out->id = next_id_.fetch_add(1, std::memory_order_relaxed);
        records_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (!Push(ctx, ev)) ops_->event_destroy(ev);
    }
  }
  // No fence: make sure nothing is left in flight instead.
  record_failures_.fetch_add(1, std::memory_order_relaxed);
  if (ops_->stream_synchronize(stream) != CUDA_SUCCESS) ops_->ctx_synchronize();
  return false;
}

bool FenceManager::IsDone(const Fence& f) const {
  if (f.id == 0) return true;
  return ops_->event_query(f.event) != CUDA_ERROR_NOT_READY;
}

int FenceManager::AreDone(const Fence* fs, int n, bool* done) const {
  if (n > kMaxAreDone) n = kMaxAreDone;
  bool known[kMaxAreDone];
  for (int i = 0; i < n; ++i) {
    known[i] = fs[i].id == 0;
    done[i] = known[i];
  }
  int queries = 0;
  for (;;) {
    // The newest fence not known yet, and the others of its stream, oldest
    // first.
    int newest = -1;
    for (int i = 0; i < n; ++i) {
      if (!known[i] && (newest < 0 || fs[i].id > fs[newest].id)) newest = i;
    }
    if (newest < 0) break;
    int group[kMaxAreDone];
    int g = 0;
    for (int i = 0; i < n; ++i) {
      if (!known[i] && (i == newest || ImpliesDone(fs[newest], fs[i]))) group[g++] = i;
    }
    for (int i = 1; i < g; ++i) {
      const int x = group[i];
      int j = i;
      for (; j > 0 && fs[group[j - 1]].id > fs[x].id; --j) group[j] = group[j - 1];
      group[j] = x;
    }
    // group[0..lo] done, group[hi..g) pending: asked at the ends, then
    // halving what lies between.
    auto ask = [&](int k) {
      ++queries;
      return IsDone(fs[group[k]]);
    };
    int lo = -1, hi = g;
    if (ask(g - 1)) {
      lo = g - 1;
    } else {
      hi = g - 1;
      if (g > 1) {
        if (ask(0)) {
          lo = 0;
        } else {
          hi = 0;
        }
      }
    }
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      if (ask(mid)) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    for (int k = 0; k < g; ++k) {
      known[group[k]] = true;
      done[group[k]] = k <= lo;
    }
  }
  return queries;
}

void FenceManager::Wait(const Fence& f) {
  if (f.id == 0) return;
  waits_.fetch_add(1, std::memory_order_relaxed);
  ops_->event_synchronize(f.event);
}

void FenceManager::Recycle(const Fence& f) {
  if (f.id == 0 || disabled_.load(std::memory_order_relaxed)) return;
  if (!Push(f.ctx, f.event)) ops_->event_destroy(f.event);
}

void FenceManager::WaitForStream(CUstream stream) {
  Fence f;
  if (!Record(stream, &f)) return;
  Wait(f);
  Recycle(f);
}

FenceManager::Work FenceManager::QueuedWork(CUstream stream) {
  auto answer = [](CUresult r) {
    return r == CUDA_SUCCESS           ? Work::kNone
           : r == CUDA_ERROR_NOT_READY ? Work::kQueued
                                       : Work::kUnknown;
  };
  const Work own = answer(ops_->stream_query(stream));
  if (own != Work::kNone) return own;
  if (stream != nullptr && stream != CU_STREAM_LEGACY) {
    unsigned int flags = 0;
    if (stream != CU_STREAM_PER_THREAD && ops_->stream_get_flags(stream, &flags) == CUDA_SUCCESS &&
        (flags & CU_STREAM_NON_BLOCKING) != 0) {
      return Work::kNone;
    }
    return answer(ops_->stream_query(CU_STREAM_LEGACY));
  }
  // The legacy stream: an event recorded on it waits for every blocking
  // stream's earlier work, which no query of one stream tells.
  CUcontext ctx = nullptr;
  if (disabled_.load(std::memory_order_relaxed) || ops_->ctx_get_current(&ctx) != CUDA_SUCCESS ||
      ctx == nullptr) {
    return Work::kUnknown;
  }
  CUevent ev = Pop(ctx);
  if (ev == nullptr && ops_->event_create(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    return Work::kUnknown;
  }
  Work w = answer(ops_->event_record(ev, stream));
  if (w == Work::kNone) {
    const uint64_t start = MonotonicNs();
    for (;;) {
      w = answer(ops_->event_query(ev));
      if (w != Work::kQueued || MonotonicNs() - start >= kIdleSpinNs) break;
    }
  }
  if (!Push(ctx, ev)) ops_->event_destroy(ev);
  return w;
}

void FenceManager::OnContextDestroyed(CUcontext ctx) {
  MutexLock lock(&mu_);
  if (table_ == nullptr) return;
  for (int i = 0; i < kMaxContexts; ++i) {
    if (table_[i].ctx == ctx) {
      table_[i].ctx = nullptr;
      table_[i].count = 0;
    }
  }
}

void FenceManager::AfterForkChild() {
  mu_.AfterFork();
  disabled_.store(true);
  if (table_ != nullptr) memset(table_, 0, sizeof(ContextEvents) * kMaxContexts);
}

}  // namespace optimize
}  // namespace pinshim
