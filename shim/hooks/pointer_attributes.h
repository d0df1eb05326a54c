// Pointer attribute answers (cuPointerGetAttribute, cuPointerGetAttributes)
// for memory optimize mode pinned, so the program sees what it would see
// without pinshim (invariant 1):
//
// - Memory pinned behind the program's back (registration cache, host arena)
//   answers as pageable memory does. cuda.h documents that answer as the one
//   for a pointer the driver does not know: cuPointerGetAttribute fails with
//   CUDA_ERROR_INVALID_VALUE (every attribute; cuPointerGetAttributes is
//   documented as the call that, unlike this one, does not fail for such a
//   pointer); cuPointerGetAttributes returns CUDA_SUCCESS with every attribute
//   at its "NULL" default: zero, except DEVICE_ORDINAL, which is
//   CU_DEVICE_INVALID (-2, cudaInvalidDeviceId in the runtime's terms; the
//   simulated driver answers the same, tests/fakecuda/memory.cc).
//   The driver is still asked about the same pointer, into scratch outputs,
//   so that errors which do not depend on the pointer (null outputs, no
//   current context for DEVICE_POINTER, a deinitialized driver) remain the
//   driver's own. It is never asked about some other, pageable address.
// - A pool block answers as a dedicated allocation of its own: the driver's
//   answer for its slab, with RANGE_START_ADDR/RANGE_SIZE (and the mapping
//   base and size) replaced by the block's start and requested size, and
//   BUFFER_ID (and MEMORY_BLOCK_ID) by an id of the block's own.
//
// Plain functions of the driver's entry point, so they can be tested against
// any driver; the hooks decide which memory gets which treatment.
#ifndef PINSHIM_SHIM_HOOKS_POINTER_ATTRIBUTES_H_
#define PINSHIM_SHIM_HOOKS_POINTER_ATTRIBUTES_H_

#include <cuda.h>

#include <cstdint>

namespace pinshim {

using PointerGetAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
using PointerGetAttributesFn = CUresult (*)(unsigned int, CUpointer_attribute*, void**,
                                            CUdeviceptr);

// What a pool block reports as its own allocation.
struct BlockAttributes {
  uintptr_t base;      // the pointer cuMemHostAlloc returned
  uint64_t bytes;      // the size the program asked for
  uint64_t buffer_id;  // PoolBufferId(the block's alloc_id)
};

// The BUFFER_ID a pool block reports. Unique per allocation, never reused,
// and never equal to an id the driver hands out (those count up from small
// numbers; these have the top bit set), as the driver guarantees for its own.
uint64_t PoolBufferId(uint64_t alloc_id);

// cuPointerGetAttribute(data, attribute, ptr), answered as for pageable
// memory; `real` is the driver's entry point.
CUresult PageablePointerGetAttribute(PointerGetAttributeFn real, void* data,
                                     CUpointer_attribute attribute, CUdeviceptr ptr);

// cuPointerGetAttributes(n, attributes, data, ptr), answered as for pageable
// memory. When the driver reports an error, its error is returned and no
// output holds anything about the pinned memory (attributes are asked 32 at
// a time; those answered before the failing group hold their defaults). An
// attribute newer than cuda.h of CUDA 13.0 has no known default: that one
// gets the driver's own answer.
CUresult PageablePointerGetAttributes(PointerGetAttributesFn real, unsigned int n,
                                      CUpointer_attribute* attributes, void** data,
                                      CUdeviceptr ptr);

// After the driver's successful answer for a pointer inside a pool block:
// replaces what describes the slab with what describes the block.
void RewriteForBlock(const BlockAttributes& block, CUpointer_attribute attribute, void* data);
void RewriteForBlock(const BlockAttributes& block, unsigned int n,
                     const CUpointer_attribute* attributes, void** data);

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_POINTER_ATTRIBUTES_H_
