// What vmm_hooks.cc knows of the program's VMM host allocations and host
// memory pools, and the pool calls device_memory_hooks.cc hands it.
#ifndef PINSHIM_SHIM_HOOKS_VMM_TABLES_H_
#define PINSHIM_SHIM_HOOKS_VMM_TABLES_H_

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/core/function_ref.h"
#include "shim/core/registry.h"
#include "shim/hooks/driver_table.h"

namespace pinshim {

// A fixed table of handles (physical allocations, pools) or addresses
// (mappings, pool allocations) with a byte count, a charged bit and two
// counts each: lock-free (open addressing, atomic slots), so neither a
// signal handler nor a fork child can find it held. Keys 0 and ~0 are never
// stored. A full table stores nothing more: Insert says so.
//
// The counts say how long what a key names lives: `holds` (a handle's
// references: cuMemCreate or an import, and each cuMemRetainAllocationHandle;
// a pool's own, until cuMemPoolDestroy) and `uses` (a handle's mappings; a
// pool's live allocations). It lives until both are 0: the memory of a
// handle released while mapped lives until its last mapping goes, a
// destroyed pool's until its last allocation is freed.
class VmmHandleTable {
 public:
  constexpr VmmHandleTable() = default;
  VmmHandleTable(const VmmHandleTable&) = delete;
  VmmHandleTable& operator=(const VmmHandleTable&) = delete;

  // A key's counts after Adjust.
  struct Counts {
    uint32_t holds = 0;
    uint32_t uses = 0;
    uint64_t bytes = 0;
    bool charged = false;
    bool Unused() const { return holds == 0 && uses == 0; }
  };

  // Adds `key` with `holds` and no uses, or resets it if present. False
  // when the table is full.
  bool Insert(uint64_t key, uint64_t bytes, bool charged, uint32_t holds = 1) {
    if (key == kEmpty || key == kGone) return false;
    Slot* s = const_cast<Slot*>(SlotOf(key));
    for (size_t i = 0, at = Hash(key); s == nullptr && i < kSlots; ++i, at = (at + 1) % kSlots) {
      uint64_t k = slots_[at].key.load(std::memory_order_acquire);
      if (k != kEmpty && k != kGone) continue;
      if (slots_[at].key.compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
        s = &slots_[at];
      }
    }
    if (s == nullptr) return false;
    s->bytes.store(bytes, std::memory_order_relaxed);
    s->charged.store(charged, std::memory_order_relaxed);
    s->counts.store(uint64_t{holds} << 32, std::memory_order_relaxed);
    s->ended.store(false, std::memory_order_relaxed);
    return true;
  }

  // Adds `holds` and `uses` (either may be negative; a count never goes
  // below 0) to key's counts. False if key is not held.
  bool Adjust(uint64_t key, int32_t holds, int32_t uses, Counts* after) {
    Slot* s = const_cast<Slot*>(SlotOf(key));
    if (s == nullptr) return false;
    uint64_t was = s->counts.load(std::memory_order_relaxed), now;
    do {
      now = Pack(Add(was >> 32, holds), Add(was & 0xffffffffu, uses));
    } while (!s->counts.compare_exchange_weak(was, now, std::memory_order_acq_rel));
    after->holds = static_cast<uint32_t>(now >> 32);
    after->uses = static_cast<uint32_t>(now);
    after->bytes = s->bytes.load(std::memory_order_relaxed);
    after->charged = s->charged.load(std::memory_order_relaxed);
    return true;
  }

  // True the first time only, for a held key: so that one of several
  // calls (the releases of a handle's references) is the one counted.
  bool EndOnce(uint64_t key) {
    Slot* s = const_cast<Slot*>(SlotOf(key));
    return s != nullptr && !s->ended.exchange(true, std::memory_order_acq_rel);
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
    std::atomic<uint64_t> counts{0};  // holds << 32 | uses
    std::atomic<bool> charged{false};
    std::atomic<bool> ended{false};
  };
  static uint64_t Add(uint64_t count, int32_t delta) {
    if (delta < 0) return count > uint64_t(-int64_t{delta}) ? count + delta : 0;
    return std::min<uint64_t>(count + delta, 0xffffffffu);
  }
  static uint64_t Pack(uint64_t holds, uint64_t uses) { return holds << 32 | uses; }
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

// cuMemFreeAsync or cuMemFree of host-pool allocation `r` returned `result`:
// counted and traced; freed, it no longer keeps a destroyed pool's memory
// charged. `stream_ordered`: by cuMemFreeAsync.
void HostPoolFree(Api api, const Region& r, uint64_t start_ns, CUresult result, bool stream_ordered)
    __attribute__((visibility("hidden")));

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_VMM_TABLES_H_
