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

bool FenceManager::Record(CUstream stream, Fence* out) {
  *out = Fence();
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
