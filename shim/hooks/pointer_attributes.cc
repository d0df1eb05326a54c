#include "shim/hooks/pointer_attributes.h"

#include <cstring>

namespace pinshim {
namespace {

// How an attribute's value is written, and its answer for pageable memory.
enum class Kind : uint8_t {
  kUnknown = 0,  // newer than CUDA 13.0's cuda.h: no known default
  kPointer,      // a handle or address (CUcontext, CUdeviceptr, void*, CUmemoryPool): null
  kUnsigned,     // unsigned int: 0
  kU64,          // unsigned long long or size_t: 0
  kOrdinal,      // int: CU_DEVICE_INVALID
  kP2PTokens,    // CUDA_POINTER_ATTRIBUTE_P2P_TOKENS: all zero
  // Booleans and small bitmasks whose C type cuda.h does not state: 0, at
  // the width the driver itself just wrote (see WidthWritten).
  kSmall,
};

Kind KindOf(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return Kind::kPointer;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return Kind::kUnsigned;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return Kind::kU64;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return Kind::kOrdinal;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: return Kind::kP2PTokens;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return Kind::kSmall;
  }
  return Kind::kUnknown;
}

// Room for any known attribute's value (the largest is the P2P token pair).
struct alignas(16) Scratch {
  unsigned char bytes[16];
};
static_assert(sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS) <= sizeof(Scratch), "scratch too small");
constexpr unsigned char kUnwritten = 0xFF;

// Bytes the driver wrote for a small value (below 0xFF) into a scratch
// filled with kUnwritten: the low byte, then the zero bytes above it
// (little-endian), rounded down to a power of two.
size_t WidthWritten(const Scratch& s) {
  if (s.bytes[0] == kUnwritten) return 0;
  size_t n = 1;
  while (n < 8 && s.bytes[n] == 0) ++n;
  return n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1;
}

template <typename T>
void Put(void* out, T value) {
  memcpy(out, &value, sizeof(value));
}

// The pageable answer of one attribute, into the program's `out`. Measured
// on the H200 (driver 580) for malloc'd memory: the host pointer is the
// pointer itself, and the range's start and size are left unwritten.
void WriteDefault(CUpointer_attribute attribute, const Scratch& driver_wrote, CUdeviceptr ptr,
                  void* out) {
  if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
    Put(out, reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)));
    return;
  }
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
      attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
    return;
  }
  switch (KindOf(attribute)) {
    case Kind::kPointer: Put(out, static_cast<void*>(nullptr)); break;
    case Kind::kUnsigned: Put(out, 0u); break;
    case Kind::kU64: Put(out, 0ull); break;
    case Kind::kOrdinal: Put(out, static_cast<int>(CU_DEVICE_INVALID)); break;
    case Kind::kP2PTokens: memset(out, 0, sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS)); break;
    case Kind::kSmall: memset(out, 0, WidthWritten(driver_wrote)); break;
    case Kind::kUnknown: break;
  }
}

}  // namespace

uint64_t PoolBufferId(uint64_t alloc_id) { return alloc_id | (uint64_t{1} << 63); }

CUresult PageablePointerGetAttribute(PointerGetAttributeFn real, void* data,
                                     CUpointer_attribute attribute, CUdeviceptr ptr) {
  // Every attribute fails for a pointer the driver does not know; an
  // attribute the driver does not know fails too.
  if (KindOf(attribute) == Kind::kUnknown) return CUDA_ERROR_INVALID_VALUE;
  Scratch scratch;
  CUresult r = real(data == nullptr ? nullptr : scratch.bytes, attribute, ptr);
  return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
}

CUresult PageablePointerGetAttributes(PointerGetAttributesFn real, unsigned int n,
                                      CUpointer_attribute* attributes, void** data,
                                      CUdeviceptr ptr) {
  // Nothing the driver could write: its answer is the pageable one.
  if (n == 0 || attributes == nullptr || data == nullptr) return real(n, attributes, data, ptr);
  constexpr unsigned int kChunk = 32;
  Scratch scratch[kChunk];
  void* outs[kChunk];
  for (unsigned int done = 0; done < n;) {
    const unsigned int m = n - done < kChunk ? n - done : kChunk;
    for (unsigned int i = 0; i < m; ++i) {
      void* out = data[done + i];
      if (out != nullptr && KindOf(attributes[done + i]) != Kind::kUnknown) {
        memset(scratch[i].bytes, kUnwritten, sizeof(scratch[i].bytes));
        out = scratch[i].bytes;
      }
      outs[i] = out;
    }
    CUresult r = real(m, attributes + done, outs, ptr);
    if (r != CUDA_SUCCESS) return r;
    for (unsigned int i = 0; i < m; ++i) {
      if (data[done + i] != nullptr)
        WriteDefault(attributes[done + i], scratch[i], ptr, data[done + i]);
    }
    done += m;
  }
  return CUDA_SUCCESS;
}

void RewriteForBlock(const BlockAttributes& block, CUpointer_attribute attribute, void* data) {
  if (data == nullptr) return;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      Put(data, static_cast<CUdeviceptr>(block.base));
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: Put(data, static_cast<size_t>(block.bytes)); break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      Put(data, static_cast<unsigned long long>(block.buffer_id));
      break;
    default: break;
  }
}

void RewriteForBlock(const BlockAttributes& block, unsigned int n,
                     const CUpointer_attribute* attributes, void** data) {
  if (attributes == nullptr || data == nullptr) return;
  for (unsigned int i = 0; i < n; ++i) RewriteForBlock(block, attributes[i], data[i]);
}

}  // namespace pinshim
