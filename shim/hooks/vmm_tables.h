// What vmm_hooks.cc knows of the program's VMM host allocations and host
// memory pools, and the pool calls device_memory_hooks.cc hands it.
#ifndef PINSHIM_SHIM_HOOKS_VMM_TABLES_H_
#define PINSHIM_SHIM_HOOKS_VMM_TABLES_H_

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/core/function_ref.h"
#include "shim/core/registry.h"
#include "shim/hooks/driver_table.h"

namespace pinshim {

// A fixed table of handles (physical allocations, pools) with a byte count
// and a charged bit each: lock-free (open addressing, atomic slots), so
// neither a signal handler nor a fork child can find it held. Handles 0
// and ~0 are never stored. A full table stores nothing more: Insert says so.
class VmmHandleTable {
 public:
  constexpr VmmHandleTable() = default;
  VmmHandleTable(const VmmHandleTable&) = delete;
  VmmHandleTable& operator=(const VmmHandleTable&) = delete;

  // Adds `key`, or updates it if present. False when the table is full.
  bool Insert(uint64_t key, uint64_t bytes, bool charged) {
    if (key == kEmpty || key == kGone) return false;
    for (size_t i = 0, at = Hash(key); i < kSlots; ++i, at = (at + 1) % kSlots) {
      Slot& s = slots_[at];
      uint64_t k = s.key.load(std::memory_order_acquire);
      if (k != key && k != kEmpty && k != kGone) continue;
      if (k != key && !s.key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
        if (k != key) continue;
      }
      s.bytes.store(bytes, std::memory_order_relaxed);
      s.charged.store(charged, std::memory_order_relaxed);
      return true;
    }
    return false;
  }

  // Whether `key` is held; its bytes and charged bit if so.
  bool Find(uint64_t key, uint64_t* bytes, bool* charged = nullptr) const {
    const Slot* s = SlotOf(key);
    if (s == nullptr) return false;
    *bytes = s->bytes.load(std::memory_order_relaxed);
    if (charged != nullptr) *charged = s->charged.load(std::memory_order_relaxed);
    return true;
  }

  void SetBytes(uint64_t key, uint64_t bytes) {
    if (Slot* s = const_cast<Slot*>(SlotOf(key))) s->bytes.store(bytes, std::memory_order_relaxed);
  }

  void Erase(uint64_t key) {
    if (Slot* s = const_cast<Slot*>(SlotOf(key))) s->key.store(kGone, std::memory_order_release);
  }

 private:
  static constexpr size_t kSlots = 4096;
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kGone = ~uint64_t{0};
  struct Slot {
    std::atomic<uint64_t> key{kEmpty};
    std::atomic<uint64_t> bytes{0};
    std::atomic<bool> charged{false};
  };
  static size_t Hash(uint64_t key) { return (key * 0x9e3779b97f4a7c15ULL >> 40) % kSlots; }
  const Slot* SlotOf(uint64_t key) const {
    if (key == kEmpty || key == kGone) return nullptr;
    for (size_t i = 0, at = Hash(key); i < kSlots; ++i, at = (at + 1) % kSlots) {
      const uint64_t k = slots_[at].key.load(std::memory_order_acquire);
      if (k == key) return &slots_[at];
      if (k == kEmpty) return nullptr;
    }
    return nullptr;
  }
  Slot slots_[kSlots];
};

// Whether pinshim saw `pool` made with a host location.
bool IsHostPool(CUmemoryPool pool) __attribute__((visibility("hidden")));

// cuMemAllocFromPoolAsync from a host pool: charged (enforce), recorded as
// MemKind::kPoolHost, counted and traced. real_call makes the driver call;
// undo frees what it allocated, for a pool that grew past the budget.
CUresult HostPoolAlloc(Api api, CUdeviceptr* dptr, size_t n, CUmemoryPool pool,
                       const FunctionRef<CUresult()>& real_call, const FunctionRef<void()>& undo)
    __attribute__((visibility("hidden")));

// cuMemFreeAsync of host-pool allocation `r` returned `result`: counted and traced.
void HostPoolFree(Api api, const Region& r, uint64_t start_ns, CUresult result)
    __attribute__((visibility("hidden")));

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_VMM_TABLES_H_
