// Pinned host memory: cuMemHostAlloc, cuMemAllocHost, cuMemFreeHost,
// cuMemHostRegister/Unregister and the queries on them, with enforce mode's
// budget in front and optimize mode's pool, cache and arena behind.
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <sys/mman.h>

#include <cstdint>

#include "shim/budget/budget.h"
#include "shim/core/context_gate.h"
#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace {

using hook::StartTime;

void RecordPinOp(Api api, PinOp op, void* p, uint64_t bytes, uint32_t flags, uint64_t start_ns,
                 CUresult r) {
  if (start_ns == 0) return;
  PinEvent e;
  e.api = api;
  e.op = op;
  e.ptr = p;
  e.bytes = bytes;
  e.flags = flags;
  e.start_ns = start_ns;
  e.end_ns = MonotonicNs();
  e.result = r;
  trace::RecordPin(e, hook::CurrentDevice());
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"
using pinshim::hook::ActiveOptimizer;

extern "C" {

// --- pinned host memory ------------------------------------------------------
//
// In enforce mode every pinning is charged to the budget first. Over budget,
// the policy decides: deny returns the driver's out-of-memory error; fallback
// serves pageable memory that copies and frees correctly (calls that need
// real pinning, such as cuMemHostGetDevicePointer, get the driver's own answer
// for unpinned memory).

namespace {

using budget::Budget;
using budget::Decision;
using budget::Owner;

void InsertRegion(Registry* reg, void* p, uint64_t n, unsigned int flags, MemKind kind,
                  RegionSource source) {
  Region r;
  r.start = reinterpret_cast<uintptr_t>(p);
  r.bytes = n;
  r.id = NextAllocId();
  r.flags = flags;
  r.kind = kind;
  r.source = source;
  reg->Insert(r);
}

// The budget a pinning the program asked for is charged to: enforce mode's,
// unless the arguments are ones the driver rejects without pinning.
budget::Budget* EnforceBudget(bool valid) {
  return g_enforce && valid ? &Budget::Process() : nullptr;
}

// The region pinshim handed out instead of pinning, if `p` starts one.
bool FindFallback(Registry* reg, void* p, Region* out) {
  return p != nullptr && reg->Lookup(reinterpret_cast<uintptr_t>(p), out) &&
         out->start == reinterpret_cast<uintptr_t>(p) && out->source == kSourceFallback;
}

extern "C++" template <typename Call>
CUresult HostAlloc(Api api, void** pp, size_t n, unsigned int flags, Call real_call) {
  // Arguments the driver rejects go to the driver, which pins nothing.
  const bool valid = pp != nullptr && n != 0;
  const uint64_t start_ns = StartTime();
  CUresult pooled;
  bool served = false;
  if (g_optimize && EnsureOptimizerStarted() && g_context_gate.EnterAlloc()) {
    served = optimize::Optimizer::Process().HostAlloc(pp, n, flags, &pooled);
    g_context_gate.ExitAlloc();
  }
  if (served) {
    // Served from pinshim's pool (its slabs are charged to the budget).
    CountPin(api, PinOp::kAlloc, flags, n, pooled != CUDA_SUCCESS);
    RecordPinOp(api, PinOp::kAlloc, pooled == CUDA_SUCCESS ? *pp : nullptr, n, flags, start_ns,
                pooled);
    return pooled;
  }
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  const Decision decision =
      budget::ChargeAndPin(EnforceBudget(valid), Owner::kProgramAlloc, n, [&] {
        r = real_call();
        if (r != CUDA_SUCCESS || pp == nullptr || *pp == nullptr) return false;
        InsertRegion(&g_allocations, *pp, n, flags, MemKind::kPinnedByProgram, kSourceDriver);
        return true;
      });
  if (decision == Decision::kFallback) {
    void* p = g_real.mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      *pp = p;
      InsertRegion(&g_allocations, p, n, flags, MemKind::kPageable, kSourceFallback);
      r = CUDA_SUCCESS;
    }
  }
  CountPin(api, PinOp::kAlloc, flags, n, r != CUDA_SUCCESS);
  // Pageable memory handed out instead is not pinned memory: the trace has
  // the budget's decision, not a pinned allocation.
  if (decision != Decision::kFallback) {
    RecordPinOp(api, PinOp::kAlloc, r == CUDA_SUCCESS ? *pp : nullptr, n, flags, start_ns, r);
  }
  return r;
}

}  // namespace

CUresult cuMemHostAlloc(void** pp, size_t n, unsigned int flags) {
  using Fn = CUresult (*)(void**, size_t, unsigned int);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemHostAlloc);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, pp, n, flags);
  const hook::HookScope scope;
  return HostAlloc(kApi_cuMemHostAlloc, pp, n, flags, [&] { return real_fn(pp, n, flags); });
}

CUresult cuMemAllocHost_v2(void** pp, size_t n) {
  using Fn = CUresult (*)(void**, size_t);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemAllocHost_v2);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, pp, n);
  const hook::HookScope scope;
  return HostAlloc(kApi_cuMemAllocHost_v2, pp, n, 0, [&] { return real_fn(pp, n); });
}

CUresult cuMemFreeHost(void* p) {
  using Fn = CUresult (*)(void*);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemFreeHost);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, p);
  const hook::HookScope scope;
  const uint64_t start_ns = StartTime();
  Region reg;
  if (optimize::Optimizer* optp = ActiveOptimizer()) {
    auto& opt = *optp;
    optimize::PoolBlockInfo block{};
    // A pool block goes back for reuse: no page of it may stay guarded.
    if (trace::RecorderActive() && opt.PoolBlock(p, &block)) {
      trace::DisarmWcGuardFor(p, block.requested);
    }
    CUresult freed;
    if (opt.FreeHost(p, &freed, &block)) {
      const bool in_pool = freed == CUDA_SUCCESS;
      CountPin(kApi_cuMemFreeHost, PinOp::kFree, in_pool ? block.flags : 0,
               in_pool ? block.requested : 0, freed != CUDA_SUCCESS);
      RecordPinOp(kApi_cuMemFreeHost, PinOp::kFree, p, in_pool ? block.requested : 0,
                  in_pool ? block.flags : 0, start_ns, freed);
      return freed;
    }
  }
  if (FindFallback(&g_allocations, p, &reg)) {
    trace::DisarmWcGuardFor(p, reg.bytes);  // the page guard must not outlive the mapping
    g_allocations.Remove(reg.start, nullptr);
    g_real.munmap(p, reg.bytes);
    CountPin(kApi_cuMemFreeHost, PinOp::kFree, reg.flags, reg.bytes, false);
    return CUDA_SUCCESS;
  }
  bool known = p != nullptr && g_allocations.Lookup(reinterpret_cast<uintptr_t>(p), &reg) &&
               reg.start == reinterpret_cast<uintptr_t>(p) && reg.kind == MemKind::kPinnedByProgram;
  // The driver unmaps it: no page of it may stay guarded (recorder.h).
  if (known) trace::DisarmWcGuardFor(p, reg.bytes);
  CUresult r = real_fn(p);
  if (r == CUDA_SUCCESS && known) {
    g_allocations.Remove(reg.start, nullptr);
    if (g_enforce) Budget::Process().Release(Owner::kProgramAlloc, reg.bytes);
  }
  CountPin(kApi_cuMemFreeHost, PinOp::kFree, known ? reg.flags : 0, known ? reg.bytes : 0,
           r != CUDA_SUCCESS);
  RecordPinOp(kApi_cuMemFreeHost, PinOp::kFree, p, known ? reg.bytes : 0, known ? reg.flags : 0,
              start_ns, r);
  return r;
}

namespace {
CUresult HostRegister(Api api, void* p, size_t n, unsigned int flags) {
  using Fn = CUresult (*)(void*, size_t, unsigned int);
  const Fn real_fn = hook::RealFn<Fn>(api);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, p, n, flags);
  const hook::HookScope scope;
  const bool valid = p != nullptr && n != 0;
  const uint64_t start_ns = StartTime();
  // The driver pins the pages through the kernel, which fails on a
  // protected one: a guarded page next to them is opened first.
  if (valid) trace::DisarmWcGuardFor(p, n);
  CUresult emulated;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->ProgramRegister(p, n, flags, &emulated)) {
    CountPin(api, PinOp::kRegister, flags, n, emulated != CUDA_SUCCESS);
    RecordPinOp(api, PinOp::kRegister, p, n, flags, start_ns, emulated);
    return emulated;
  }
  CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
  const Decision decision =
      budget::ChargeAndPin(EnforceBudget(valid), Owner::kProgramRegister, n, [&] {
        r = real_fn(p, n, flags);
        if (r != CUDA_SUCCESS) return false;
        InsertRegion(&g_registrations, p, n, flags, MemKind::kRegisteredByProgram, kSourceDriver);
        return true;
      });
  if (decision == Decision::kFallback) {
    // Left pageable: copies still work, at pageable speed.
    InsertRegion(&g_registrations, p, n, flags, MemKind::kPageable, kSourceFallback);
    r = CUDA_SUCCESS;
  }
  CountPin(api, PinOp::kRegister, flags, n, r != CUDA_SUCCESS);
  if (decision != Decision::kFallback) RecordPinOp(api, PinOp::kRegister, p, n, flags, start_ns, r);
  return r;
}
}  // namespace

CUresult cuMemHostRegister(void* p, size_t n, unsigned int flags) {
  return HostRegister(kApi_cuMemHostRegister, p, n, flags);
}

CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned int flags) {
  return HostRegister(kApi_cuMemHostRegister_v2, p, n, flags);
}

CUresult cuMemHostUnregister(void* p) {
  using Fn = CUresult (*)(void*);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemHostUnregister);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, p);
  const hook::HookScope scope;
  const uint64_t start_ns = StartTime();
  Region reg;
  CUresult emulated;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->ProgramUnregister(p, &emulated)) {
    CountPin(kApi_cuMemHostUnregister, PinOp::kUnregister, 0, 0, emulated != CUDA_SUCCESS);
    RecordPinOp(kApi_cuMemHostUnregister, PinOp::kUnregister, p, 0, 0, start_ns, emulated);
    return emulated;
  }
  if (FindFallback(&g_registrations, p, &reg)) {
    g_registrations.Remove(reg.start, nullptr);
    CountPin(kApi_cuMemHostUnregister, PinOp::kUnregister, reg.flags, reg.bytes, false);
    return CUDA_SUCCESS;
  }
  CUresult r = real_fn(p);
  bool known = false;
  if (r == CUDA_SUCCESS) known = g_registrations.Remove(reinterpret_cast<uintptr_t>(p), &reg);
  if (known && g_enforce) Budget::Process().Release(Owner::kProgramRegister, reg.bytes);
  CountPin(kApi_cuMemHostUnregister, PinOp::kUnregister, known ? reg.flags : 0,
           known ? reg.bytes : 0, r != CUDA_SUCCESS);
  RecordPinOp(kApi_cuMemHostUnregister, PinOp::kUnregister, p, known ? reg.bytes : 0,
              known ? reg.flags : 0, start_ns, r);
  return r;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* out, void* p, unsigned int flags) {
  using Fn = CUresult (*)(CUdeviceptr*, void*, unsigned int);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemHostGetDevicePointer_v2);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, out, p, flags);
  const hook::HookScope scope;
  CUresult answer;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->HostGetDevicePointer(out, p, flags, &answer)) {
    return answer;
  }
  return real_fn(out, p, flags);
}

CUresult cuMemHostGetFlags(unsigned int* out, void* p) {
  using Fn = CUresult (*)(unsigned int*, void*);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuMemHostGetFlags);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, out, p);
  const hook::HookScope scope;
  CUresult answer;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (opt != nullptr && opt->HostGetFlags(out, p, &answer)) {
    return answer;
  }
  return real_fn(out, p);
}
}  // extern "C"
