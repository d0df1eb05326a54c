#include "shim/optimize/pin_account.h"

#include <cuda.h>
#include <sys/resource.h>

namespace pinshim {
namespace optimize {

OwnPinReason DriverRefusalReason(int result, uint64_t pinned_now, uint64_t bytes) {
  if (result == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
    return OwnPinReason::kRefusedAlreadyRegistered;
  }
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    rlimit lim;
    if (getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        pinned_now + bytes > lim.rlim_cur) {
      return OwnPinReason::kRefusedMemlock;
    }
    return OwnPinReason::kRefusedOutOfMemory;
  }
  return OwnPinReason::kRefusedDriverError;
}

void PinAccount::Init(uint64_t cap_bytes, const PinAccountHooks& hooks) {
  cap_ = cap_bytes;
  hooks_ = hooks;
}

bool PinAccount::AddEvictor(Evictor evictor, void* arg, EvictableBytes evictable) {
  int n = evictor_count_.load(std::memory_order_acquire);
  if (n >= kMaxEvictors) return false;
  evictors_[n] = evictor;
  evictables_[n] = evictable;
  evictor_args_[n] = arg;
  evictor_count_.store(n + 1, std::memory_order_release);
  return true;
}

OwnPinReason PinAccount::ChargeImpl(PinUse use, uint64_t bytes, bool capped) {
  uint64_t cur = pinned_.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > UINT64_MAX - cur) return OwnPinReason::kRefusedCap;
    if (capped && (bytes > cap_ || cur > cap_ - bytes)) return OwnPinReason::kRefusedCap;
    if (pinned_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) break;
  }
  if (hooks_.charge != nullptr && !hooks_.charge(hooks_.arg, use, bytes)) {
    pinned_.fetch_sub(bytes, std::memory_order_relaxed);
    return OwnPinReason::kRefusedBudget;
  }
  by_use_[static_cast<int>(use)].fetch_add(bytes, std::memory_order_relaxed);
  uint64_t now = cur + bytes;
  uint64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return OwnPinReason::kNone;
}

bool PinAccount::TryCharge(PinUse use, uint64_t bytes, OwnPinReason* why) {
  OwnPinReason r = ChargeImpl(use, bytes, true);
  if (r == OwnPinReason::kNone) return true;
  refusals_.fetch_add(1, std::memory_order_relaxed);
  if (why != nullptr) *why = r;
  return false;
}

bool PinAccount::ChargeWithEviction(PinUse use, uint64_t bytes, OwnPinReason* why) {
  OwnPinReason r = ChargeImpl(use, bytes, true);
  if (r == OwnPinReason::kNone) return true;
  if (bytes <= cap_) {
    // The budget refused when the cap did not: what is evicted is given
    // back for the budget.
    const OwnPinReason evict_for = r == OwnPinReason::kRefusedBudget
                                       ? OwnPinReason::kEvictedForBudget
                                       : OwnPinReason::kEvictedForCap;
    uint64_t cur = pinned();
    uint64_t shortfall = cur + bytes > cap_ ? cur + bytes - cap_ : bytes;
    int n = evictor_count_.load(std::memory_order_acquire);
    if (r == OwnPinReason::kRefusedCap) {
      uint64_t idle = 0;
      for (int i = 0; i < n && idle < shortfall; ++i) {
        idle += evictables_[i] != nullptr ? evictables_[i](evictor_args_[i]) : shortfall;
      }
      if (idle < shortfall) n = 0;  // hopeless: keep what is pinned
    }
    uint64_t freed = 0;
    for (int i = 0; i < n && freed < shortfall; ++i) {
      freed += evictors_[i](evictor_args_[i], shortfall - freed, evict_for);
    }
    evicted_.fetch_add(freed, std::memory_order_relaxed);
    r = ChargeImpl(use, bytes, true);
    if (r == OwnPinReason::kNone) return true;
  }
  refusals_.fetch_add(1, std::memory_order_relaxed);
  if (why != nullptr) *why = r;
  return false;
}

bool PinAccount::ChargeUncapped(PinUse use, uint64_t bytes, OwnPinReason* why) {
  OwnPinReason r = ChargeImpl(use, bytes, false);
  if (r == OwnPinReason::kNone) return true;
  refusals_.fetch_add(1, std::memory_order_relaxed);
  if (why != nullptr) *why = r;
  return false;
}

void PinAccount::Release(PinUse use, uint64_t bytes) {
  auto& mine = by_use_[static_cast<int>(use)];
  uint64_t cur = mine.load(std::memory_order_relaxed);
  // Never below zero: a release after a fork-child reset finds nothing.
  uint64_t take;
  do {
    take = cur < bytes ? cur : bytes;
  } while (!mine.compare_exchange_weak(cur, cur - take, std::memory_order_relaxed));
  if (take == 0) return;
  pinned_.fetch_sub(take, std::memory_order_relaxed);
  if (hooks_.release != nullptr) hooks_.release(hooks_.arg, use, take);
}

void PinAccount::ResetInChild() {
  pinned_.store(0);
  peak_.store(0);
  for (auto& b : by_use_) b.store(0);
}

#ifdef PINSHIM_DEBUG_INVARIANTS

PINSHIM_INVARIANT_WALKER InvariantReport PinAccount::CheckInvariants() const {
  InvariantReport r;
  uint64_t parts = 0;
  for (const auto& held : by_use_) parts += held.load(std::memory_order_relaxed);
  const uint64_t total = pinned();
  r.Expect(total == parts, "PA1 pinned() is the sum of what each use holds", total, parts);
  r.Expect(peak() >= total, "PA2 peak() >= pinned()", peak(), total);
  const int n = evictor_count_.load(std::memory_order_acquire);
  r.Expect(n >= 0 && n <= kMaxEvictors, "PA3 at most kMaxEvictors evictors", n);
  for (int i = 0; i < n && i < kMaxEvictors; ++i) {
    r.Expect(evictors_[i] != nullptr, "PA3 every evictor added is set", i);
  }
  return r;
}

void PinAccount::CorruptForTesting() { pinned_.fetch_xor(1, std::memory_order_relaxed); }

#endif  // PINSHIM_DEBUG_INVARIANTS

}  // namespace optimize
}  // namespace pinshim
