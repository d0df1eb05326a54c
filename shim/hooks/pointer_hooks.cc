// Pointer attribute queries: the driver's answer, except for memory optimize
// mode pinned (answered as pageable) or pooled (answered as the dedicated
// allocation the program asked for).
//
// cuda.h is read as the driver itself reads it (__CUDA_API_VERSION_INTERNAL),
// which declares every versioned and per-thread ABI name.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "shim/hooks/driver_table.h"
#include "shim/hooks/hook_support.h"
#include "shim/hooks/pointer_attributes.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"

using namespace pinshim;  // NOLINT: the wrappers below are extern "C"
using pinshim::hook::ActiveOptimizer;

extern "C" {

// --- pointer attributes -------------------------------------------------------
//
// Optimize mode pins memory the program did not pin (registration cache, host
// arena) and serves the program's pinned allocations from shared slabs (pool).
// Attribute queries must not see either: the first answers as pageable
// memory, a pool block as the dedicated allocation the program asked for
// (shim/hooks/pointer_attributes.h). Any other pointer, and every query
// outside optimize mode, goes to the driver untouched.

namespace {

enum class PointerView : uint8_t { kDriver, kPageable, kPoolBlock };

PointerView ViewOf(optimize::Optimizer& opt, CUdeviceptr ptr, BlockAttributes* block) {
  const void* p = reinterpret_cast<const void*>(ptr);
  if (opt.pool().Owns(p)) {
    optimize::PoolBlockInfo info;
    // Pool memory outside a live block's requested bytes (a freed block, the
    // rounding of a size class) belongs to no allocation of the program's.
    if (!opt.pool().Lookup(p, &info)) return PointerView::kPageable;
    block->base = info.base;
    block->bytes = info.requested;
    block->buffer_id = PoolBufferId(info.alloc_id);
    return PointerView::kPoolBlock;
  }
  return opt.HidesPinning(p) ? PointerView::kPageable : PointerView::kDriver;
}

}  // namespace

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  using Fn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuPointerGetAttribute);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, data, attribute, ptr);
  const hook::HookScope scope;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(data, attribute, ptr);
  BlockAttributes block;
  switch (ViewOf(*opt, ptr, &block)) {
    case PointerView::kPageable: return PageablePointerGetAttribute(real_fn, data, attribute, ptr);
    case PointerView::kPoolBlock: {
      CUresult r = real_fn(data, attribute, ptr);
      if (r == CUDA_SUCCESS) RewriteForBlock(block, attribute, data);
      return r;
    }
    case PointerView::kDriver: break;
  }
  return real_fn(data, attribute, ptr);
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attributes, void** data,
                                CUdeviceptr ptr) {
  using Fn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);
  const Fn real_fn = hook::RealFn<Fn>(kApi_cuPointerGetAttributes);
  if (!hook::Handles(real_fn)) return hook::Forward(real_fn, n, attributes, data, ptr);
  const hook::HookScope scope;
  optimize::Optimizer* opt = ActiveOptimizer();
  if (PINSHIM_LIKELY(opt == nullptr)) return real_fn(n, attributes, data, ptr);
  BlockAttributes block;
  switch (ViewOf(*opt, ptr, &block)) {
    case PointerView::kPageable:
      return PageablePointerGetAttributes(real_fn, n, attributes, data, ptr);
    case PointerView::kPoolBlock: {
      CUresult r = real_fn(n, attributes, data, ptr);
      if (r == CUDA_SUCCESS) RewriteForBlock(block, n, attributes, data);
      return r;
    }
    case PointerView::kDriver: break;
  }
  return real_fn(n, attributes, data, ptr);
}

}  // extern "C"
