// The bytes pinshim itself keeps pinned (pool slabs, cached registrations,
// arena chunks), the cap on them (Config::pin_cap_bytes) and who gives
// memory back when the cap is reached.
//
// Voluntary pinning (the registration cache, the arena) is charged with
// ChargeWithEviction: it fits under the cap, or the evictors (idle pool
// slabs, idle arena chunks, least-recently-used registrations, in that
// order) free the shortfall first, or it is refused and the memory simply
// stays pageable. When the evictors say that what is idle cannot cover the
// shortfall, nothing is evicted: useful pinning is not thrown away for a
// request that would be refused anyway. Pool slabs serve the program's own pinned requests, so a
// refusal there makes the pool fall back to the exact allocation the
// program asked for, never to a failure the driver would not have given.
//
// An optional external hook sees every charge and release (the enforce
// mode budget: PinUse maps onto budget Owners), and may refuse a charge.
//
// What pinshim pins, unpins and is refused goes to an optional OwnPinCallback
// (the trace): pool, cache and arena call it outside their locks, never on
// a copy that pins nothing.
#ifndef PINSHIM_SHIM_OPTIMIZE_PIN_ACCOUNT_H_
#define PINSHIM_SHIM_OPTIMIZE_PIN_ACCOUNT_H_

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"
#include "shim/optimize/invariants.h"

namespace pinshim {
namespace optimize {

enum class PinUse : uint8_t {
  kPoolSlab = 0,       // a pool slab (carved into blocks)
  kPoolDedicated = 1,  // an exact-size allocation made for one program request
  kCache = 2,          // a registration of a hot pageable allocation
  kArena = 3,          // a registered arena extent
  kStaging = 4,        // the staging rings of staged copies
  kCount = 5,
};
constexpr int kPinUseCount = static_cast<int>(PinUse::kCount);
// The trace names the parts by the same values.
static_assert(static_cast<int>(OwnPinPart::kPoolSlab) == static_cast<int>(PinUse::kPoolSlab) &&
                  static_cast<int>(OwnPinPart::kPoolDedicated) ==
                      static_cast<int>(PinUse::kPoolDedicated) &&
                  static_cast<int>(OwnPinPart::kCache) == static_cast<int>(PinUse::kCache) &&
                  static_cast<int>(OwnPinPart::kArena) == static_cast<int>(PinUse::kArena) &&
                  static_cast<int>(OwnPinPart::kStaging) == static_cast<int>(PinUse::kStaging),
              "PinUse and OwnPinPart must agree");
inline OwnPinPart PartOf(PinUse use) { return static_cast<OwnPinPart>(use); }

// Told about each pinning action of pinshim's own (null: nobody listens).
using OwnPinCallback = void (*)(const OwnPinEvent& event);

// Calls `callback` (when set) with one event. Call outside engine locks.
inline void ReportOwnPin(OwnPinCallback callback, OwnPinAction action, OwnPinPart part,
                         OwnPinReason reason, uintptr_t start, uint64_t bytes, uint64_t alloc_id,
                         int result, uint32_t detail = 0) {
  if (callback == nullptr) return;
  OwnPinEvent e;
  e.action = action;
  e.part = part;
  e.reason = reason;
  e.ptr = reinterpret_cast<const void*>(start);
  e.bytes = bytes;
  e.alloc_id = alloc_id;
  e.result = result;
  e.detail = detail;
  callback(e);
}

// Why the driver refused to pin `bytes` more (cuMemHostAlloc or
// cuMemHostRegister returned `result`): already registered, RLIMIT_MEMLOCK
// (out of memory while pinned_now + bytes exceeds the limit), out of
// memory, or another driver error.
OwnPinReason DriverRefusalReason(int result, uint64_t pinned_now, uint64_t bytes);

struct PinAccountHooks {
  // Asked before pinning; false refuses. Null: always granted.
  bool (*charge)(void* arg, PinUse use, uint64_t bytes) = nullptr;
  // Told after unpinning. Null: nothing.
  void (*release)(void* arg, PinUse use, uint64_t bytes) = nullptr;
  void* arg = nullptr;
};

// Frees up to about bytes_wanted of pinshim's pinning; returns what it freed.
// `why` (kEvictedForCap or kEvictedForBudget) is what the unpinning is
// recorded as. Called without any engine lock held.
using Evictor = uint64_t (*)(void* arg, uint64_t bytes_wanted, OwnPinReason why);
// About how many bytes the evictor could free now (an upper bound is fine).
using EvictableBytes = uint64_t (*)(void* arg);

class PinAccount {
 public:
  static constexpr int kMaxEvictors = 4;
  static constexpr uint64_t kNoCap = UINT64_MAX;

  constexpr PinAccount() = default;
  PinAccount(const PinAccount&) = delete;
  PinAccount& operator=(const PinAccount&) = delete;

  // Sets the cap on voluntary pinning (kNoCap: none) and the external hooks.
  void Init(uint64_t cap_bytes, const PinAccountHooks& hooks);

  // Adds an evictor; they run in the order added. False when full.
  // `evictable` (null: unknown, as much as asked) lets the account see
  // beforehand that evicting cannot make room under the cap.
  bool AddEvictor(Evictor evictor, void* arg, EvictableBytes evictable = nullptr);

  // Charges bytes if pinned() + bytes stays within the cap and the external
  // hook grants them. No eviction. On refusal *why (when given) says who
  // refused: kRefusedCap or kRefusedBudget (the external hook).
  bool TryCharge(PinUse use, uint64_t bytes, OwnPinReason* why = nullptr);

  // TryCharge; on refusal, runs the evictors for the shortfall and tries
  // once more.
  bool ChargeWithEviction(PinUse use, uint64_t bytes, OwnPinReason* why = nullptr);

  // Charges bytes regardless of the cap (the external hook may still refuse).
  bool ChargeUncapped(PinUse use, uint64_t bytes, OwnPinReason* why = nullptr);

  // Gives back bytes charged for use.
  void Release(PinUse use, uint64_t bytes);

  uint64_t pinned() const { return pinned_.load(std::memory_order_relaxed); }
  uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  uint64_t pinned_for(PinUse use) const {
    return by_use_[static_cast<int>(use)].load(std::memory_order_relaxed);
  }
  uint64_t cap() const { return cap_; }
  uint64_t refusals() const { return refusals_.load(std::memory_order_relaxed); }
  uint64_t evicted_bytes() const { return evicted_.load(std::memory_order_relaxed); }

  // Forgets everything (fork child: nothing is pinned there).
  void ResetInChild();

#ifdef PINSHIM_DEBUG_INVARIANTS
  // Debug builds (invariants.h). Checks (no charge or release in flight):
  //  PA1 pinned() is the sum of what each use holds
  //  PA2 peak() >= pinned()
  //  PA3 at most kMaxEvictors evictors, each of them set
  // (What each use holds is checked against the structures that charge it
  // by their own walkers: pool, cache, arena, stager.)
  InvariantReport CheckInvariants() const;
  // Breaks PA1 on purpose; the same call again restores it.
  void CorruptForTesting();
#endif

 private:
  // kNone when charged, else who refused.
  OwnPinReason ChargeImpl(PinUse use, uint64_t bytes, bool capped);

  uint64_t cap_ = kNoCap;
  PinAccountHooks hooks_;
  std::atomic<uint64_t> pinned_{0};
  std::atomic<uint64_t> peak_{0};
  std::atomic<uint64_t> by_use_[kPinUseCount] = {};
  std::atomic<uint64_t> refusals_{0};
  std::atomic<uint64_t> evicted_{0};
  std::atomic<int> evictor_count_{0};
  Evictor evictors_[kMaxEvictors] = {};
  EvictableBytes evictables_[kMaxEvictors] = {};
  void* evictor_args_[kMaxEvictors] = {};
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PIN_ACCOUNT_H_
