// Copies (linear, 2D, 3D, batched; synchronous and asynchronous) and memset.
//
// Every copy is an op on a stream: the legacy NULL stream, the calling
// thread's default stream (_ptds/_ptsz variants) or the stream given. What
// the caller then waits for follows the driver's documented synchronization
// rules (see MustWait). The bytes are read and written when the op runs, not
// when it is queued.
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"
#include "tests/fakecuda/pinning.h"

namespace fakecuda {

MoveFn LibcMemmove() {
  static MoveFn fn = [] {
    void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void* sym = libc != nullptr ? dlsym(libc, "memmove") : nullptr;
    return sym != nullptr ? reinterpret_cast<MoveFn>(sym) : &std::memmove;
  }();
  return fn;
}

namespace {

namespace behavior = ::fakecuda::behavior;

// `depth` slices of `rows` rows of `width` bytes. A side with held pages
// (page-locked memory) is reached through them, as DMA reaches it.
struct Block {
  char* dst;
  const char* src;
  size_t width;
  size_t rows = 1;
  size_t depth = 1;
  size_t dst_pitch = 0;
  size_t src_pitch = 0;
  size_t dst_slice = 0;
  size_t src_slice = 0;
  std::shared_ptr<HeldPages> dst_held;
  std::shared_ptr<HeldPages> src_held;
};

Block MakeBlock(const Span& d, const Span& s, size_t width) {
  Block b{d.view, s.view, width};
  b.dst_held = d.held;
  b.src_held = s.held;
  return b;
}

// One contiguous run of bytes, through held pages where a side has them.
// The kernel refusing a transfer cannot happen for a range inside a pin;
// should it, the bytes stay as they were, as a failed DMA leaves them.
void MoveRun(char* dst, const HeldPages* dst_held, const char* src, const HeldPages* src_held,
             size_t n) {
  if (dst_held == nullptr && src_held == nullptr) {
    // No held pages (pageable memory, or a range that could not be pinned):
    // page-locked ranges still move as by DMA, whatever their protection.
    DmaMove(dst, src, n);
  } else if (dst_held == nullptr) {
    DmaFromHeld(*src_held, reinterpret_cast<uintptr_t>(src), dst, n);
  } else if (src_held == nullptr) {
    DmaToHeld(*dst_held, reinterpret_cast<uintptr_t>(dst), src, n);
  } else {
    std::vector<char> bounce(n < (size_t{1} << 20) ? n : (size_t{1} << 20));
    for (size_t done = 0; done < n; done += bounce.size()) {
      const size_t len = n - done < bounce.size() ? n - done : bounce.size();
      DmaFromHeld(*src_held, reinterpret_cast<uintptr_t>(src + done), bounce.data(), len);
      DmaToHeld(*dst_held, reinterpret_cast<uintptr_t>(dst + done), bounce.data(), len);
    }
  }
}

void RunBlock(const Block& b) {
  for (size_t z = 0; z < b.depth; ++z) {
    for (size_t y = 0; y < b.rows; ++y) {
      MoveRun(b.dst + z * b.dst_slice + y * b.dst_pitch, b.dst_held.get(),
              b.src + z * b.src_slice + y * b.src_pitch, b.src_held.get(), b.width);
    }
  }
}

// Whether the pages each block was resolved through are still an
// allocation's or a registration's. Only work launched from a graph can find
// them gone: unregistering and freeing wait for the work queued before.
bool StillPinned(const std::vector<Block>& blocks) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const Block& b : blocks) {
    if ((b.dst_held && !StillHeldLocked(b.dst_held.get(), reinterpret_cast<uintptr_t>(b.dst))) ||
        (b.src_held && !StillHeldLocked(b.src_held.get(), reinterpret_cast<uintptr_t>(b.src)))) {
      return false;
    }
  }
  return true;
}

enum class Api { kSync, kAsync };

// Whether the call returns only after the copy ran:
// - asynchronous calls: only when host memory is pageable (the driver stages
//   pageable memory synchronously; measured: a 256 MiB pageable
//   cudaMemcpyAsync returned after the whole copy);
// - synchronous calls: always, except device to device, which only queues,
//   and a linear pageable upload (Copy), which returns once its source was
//   read (kSyncPageableUploadReturnsBeforeItsDma).
bool MustWait(Api api, MemKind dst, MemKind src) {
  if (api == Api::kAsync) return dst == MemKind::kPageable || src == MemKind::kPageable;
  return !(dst == MemKind::kDevice && src == MemKind::kDevice);
}

// How an API names an operand.
enum class Naming { kHost, kDevice, kUnified };

CUresult Resolve(Naming naming, uintptr_t p, size_t len, Span* out) {
  switch (naming) {
    case Naming::kHost: return ResolveHostRange(reinterpret_cast<const void*>(p), len, out);
    case Naming::kDevice: return ResolveDeviceRange(p, len, out);
    case Naming::kUnified: return ResolveUnifiedRange(p, len, out);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult Launch(CUstream handle, bool per_thread_api, std::vector<Block> blocks, bool wait,
                bool async_pageable, std::shared_ptr<std::vector<char>> staging = nullptr) {
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  return Submit(
      stream,
      [blocks = std::move(blocks), staging = std::move(staging), ctx = stream->ctx] {
        if (!StillPinned(blocks)) {
          // Measured on the H200: a graph whose copy was captured from
          // registered memory unregistered before the launch faults the
          // context ("unspecified launch failure"), and moves nothing.
          ctx->fault.store(CUDA_ERROR_LAUNCH_FAILED);
          return;
        }
        for (const Block& block : blocks) RunBlock(block);
      },
      wait, async_pageable);
}

bool AsyncPageable(Api api, MemKind dst, MemKind src) {
  return api == Api::kAsync && (dst == MemKind::kPageable || src == MemKind::kPageable);
}

// Test instruments for optimize mode's self-check, not a model of any
// hardware: FAKECUDA_PAGEABLE_NS_PER_MIB and FAKECUDA_PAGELOCKED_NS_PER_MIB
// (read once) make each 1D copy between the device and host memory of that
// kind take at least that long per MiB in the calling thread, so a test can
// make one path slower than the other on purpose.
unsigned long NsPerMibFromEnvironment(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const unsigned long v = std::strtoul(text, &end, 10);
  return *end == '\0' && v <= 1000000000ul ? v : 0;
}

void SlowDownOnPurpose(const Span& d, const Span& s, size_t n) {
  static const unsigned long pageable = NsPerMibFromEnvironment("FAKECUDA_PAGEABLE_NS_PER_MIB");
  static const unsigned long locked = NsPerMibFromEnvironment("FAKECUDA_PAGELOCKED_NS_PER_MIB");
  const bool to_device = d.kind == MemKind::kDevice, from_device = s.kind == MemKind::kDevice;
  if (to_device == from_device) return;
  const MemKind host = to_device ? s.kind : d.kind;
  const unsigned long per_mib = host == MemKind::kPageable ? pageable
                                : host == MemKind::kPinned ? locked
                                                           : 0;
  if (per_mib == 0) return;
  std::this_thread::sleep_for(
      std::chrono::nanoseconds(static_cast<uint64_t>(per_mib) * n / (size_t{1} << 20)));
}

CUresult Copy(Naming dst_naming, uintptr_t dst, Naming src_naming, uintptr_t src, size_t n,
              CUstream handle, Api api, bool per_thread_api) {
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  if (n == 0) return CUDA_SUCCESS;
  Span d, s;
  if (CUresult err = Resolve(dst_naming, dst, n, &d)) return err;
  if (CUresult err = Resolve(src_naming, src, n, &s)) return err;
  SlowDownOnPurpose(d, s, n);
  if (api == Api::kSync && d.kind == MemKind::kDevice && s.kind == MemKind::kPageable &&
      behavior::kSyncPageableUploadReturnsBeforeItsDma) {
    // The stream's earlier work first, then the source read into staging
    // memory; the DMA from there is queued and may still run at return.
    if (CUresult err = Launch(handle, per_thread_api, {}, /*wait=*/true, false)) return err;
    auto staging = std::make_shared<std::vector<char>>(n);
    MoveRun(staging->data(), nullptr, s.view, s.held.get(), n);
    Block b = MakeBlock(d, s, n);
    b.src = staging->data();
    b.src_held = nullptr;
    return Launch(handle, per_thread_api, {b}, /*wait=*/false, false, std::move(staging));
  }
  if (api == Api::kAsync && d.kind == MemKind::kDevice && s.kind == MemKind::kPageable &&
      !StreamCapturing(handle, per_thread_api)) {
    // The first bytes read now (kAsyncPageableUploadEagerBytes), into
    // staging memory the DMA reads later; the rest in stream order, the call
    // waiting for it. A copy no larger returns at once.
    const size_t eager = std::min(n, behavior::kAsyncPageableUploadEagerBytes);
    auto staging = std::make_shared<std::vector<char>>(eager);
    MoveRun(staging->data(), nullptr, s.view, s.held.get(), eager);
    Block first = MakeBlock(d, s, eager);
    first.src = staging->data();
    first.src_held = nullptr;
    std::vector<Block> blocks{first};
    if (n > eager) {
      Block rest = MakeBlock(d, s, n - eager);
      rest.dst += eager;
      rest.src += eager;
      blocks.push_back(rest);
    }
    return Launch(handle, per_thread_api, std::move(blocks), /*wait=*/n > eager, true,
                  std::move(staging));
  }
  return Launch(handle, per_thread_api, {MakeBlock(d, s, n)}, MustWait(api, d.kind, s.kind),
                AsyncPageable(api, d.kind, s.kind));
}

// One side of a 2D/3D copy, as the descriptor gives it.
struct Operand {
  CUmemorytype type;
  const void* host;
  CUdeviceptr device;
  size_t x, y, z;
  size_t pitch;
  size_t height;  // Rows per slice (3D only).
};

// Resolves the bytes `op` touches for a width x rows x depth copy.
CUresult ResolveOperand(const Operand& op, size_t width, size_t rows, size_t depth, Span* out) {
  if ((rows > 1 || depth > 1) && (op.x > op.pitch || width > op.pitch - op.x)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (depth > 1 && (op.y > op.height || rows > op.height - op.y)) return CUDA_ERROR_INVALID_VALUE;
  // offset = (z * height + y) * pitch + x; length = ((depth - 1) * height + rows - 1) * pitch +
  // width.
  size_t offset, length, t;
  if (__builtin_mul_overflow(op.z, op.height, &t) || __builtin_add_overflow(t, op.y, &t) ||
      __builtin_mul_overflow(t, op.pitch, &t) || __builtin_add_overflow(t, op.x, &offset) ||
      __builtin_mul_overflow(depth - 1, op.height, &t) || __builtin_add_overflow(t, rows - 1, &t) ||
      __builtin_mul_overflow(t, op.pitch, &t) || __builtin_add_overflow(t, width, &length)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uintptr_t base;
  Naming naming;
  switch (op.type) {
    case CU_MEMORYTYPE_HOST:
      base = reinterpret_cast<uintptr_t>(op.host);
      naming = Naming::kHost;
      break;
    case CU_MEMORYTYPE_DEVICE:
      base = op.device;
      naming = Naming::kDevice;
      break;
    case CU_MEMORYTYPE_UNIFIED:
      base = op.device;
      naming = Naming::kUnified;
      break;
    default:  // CUDA arrays are not simulated.
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (base == 0 || offset > UINTPTR_MAX - base) return CUDA_ERROR_INVALID_VALUE;
  return Resolve(naming, base + offset, length, out);
}

CUresult Copy3D(const Operand& src, const Operand& dst, size_t width, size_t rows, size_t depth,
                CUstream handle, Api api, bool per_thread_api) {
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  if (width == 0 || rows == 0 || depth == 0) return CUDA_SUCCESS;
  Span d, s;
  if (CUresult err = ResolveOperand(dst, width, rows, depth, &d)) return err;
  if (CUresult err = ResolveOperand(src, width, rows, depth, &s)) return err;
  Block block{d.view,
              s.view,
              width,
              rows,
              depth,
              dst.pitch,
              src.pitch,
              dst.pitch * dst.height,
              src.pitch * src.height,
              d.held,
              s.held};
  return Launch(handle, per_thread_api, {block}, MustWait(api, d.kind, s.kind),
                AsyncPageable(api, d.kind, s.kind));
}

CUresult Copy2D(const CUDA_MEMCPY2D* p, CUstream handle, Api api, bool per_thread_api) {
  if (p == nullptr) {
    if (CUresult err = RequireInit()) return err;
    return CUDA_ERROR_INVALID_VALUE;
  }
  Operand src{p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes,
              p->srcY,          0,          p->srcPitch,  0};
  Operand dst{p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes,
              p->dstY,          0,          p->dstPitch,  0};
  return Copy3D(src, dst, p->WidthInBytes, p->Height, 1, handle, api, per_thread_api);
}

CUresult Copy3DDescriptor(const CUDA_MEMCPY3D* p, CUstream handle, Api api, bool per_thread_api) {
  if (CUresult err = RequireInit()) return err;
  if (p == nullptr || p->reserved0 != nullptr || p->reserved1 != nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Operand src{p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes,
              p->srcY,          p->srcZ,    p->srcPitch,  p->srcHeight};
  Operand dst{p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes,
              p->dstY,          p->dstZ,    p->dstPitch,  p->dstHeight};
  return Copy3D(src, dst, p->WidthInBytes, p->Height, p->Depth, handle, api, per_thread_api);
}

// cuMemcpyBatchAsync, both ABIs (`fail_idx` is null for the CUDA 13.0 one).
CUresult Batch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
               CUmemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs, size_t* fail_idx,
               CUstream handle, bool per_thread_api) {
  auto fail = [fail_idx](CUresult err, size_t index) {
    if (fail_idx != nullptr) *fail_idx = index;
    return err;
  };
  constexpr size_t kNoCopy = SIZE_MAX;  // The error concerns no single copy.
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return fail(err, kNoCopy);
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attrs_idxs == nullptr || num_attrs == 0 || num_attrs > count || attrs_idxs[0] != 0) {
    return fail(CUDA_ERROR_INVALID_VALUE, kNoCopy);
  }
  // Documented: the legacy NULL stream is not allowed.
  if (handle == CU_STREAM_LEGACY || (handle == nullptr && !per_thread_api)) {
    return fail(CUDA_ERROR_INVALID_VALUE, kNoCopy);
  }
  for (size_t k = 0; k < num_attrs; ++k) {
    const CUmemcpySrcAccessOrder order = attrs[k].srcAccessOrder;
    if ((k > 0 && (attrs_idxs[k] <= attrs_idxs[k - 1] || attrs_idxs[k] >= count)) ||
        (order != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM &&
         order != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
         order != CU_MEMCPY_SRC_ACCESS_ORDER_ANY) ||
        (attrs[k].flags & ~static_cast<unsigned>(CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)) !=
            0) {
      return fail(CUDA_ERROR_INVALID_VALUE, kNoCopy);
    }
  }
  std::vector<Block> blocks;
  std::vector<bool> read_now;  // Source must be read before the call returns.
  bool pageable = false;
  size_t staged_bytes = 0;
  size_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    while (k + 1 < num_attrs && attrs_idxs[k + 1] <= i) ++k;
    if (sizes[i] == 0) continue;
    Span d, s;
    if (CUresult err = ResolveUnifiedRange(dsts[i], sizes[i], &d)) return fail(err, i);
    if (CUresult err = ResolveUnifiedRange(srcs[i], sizes[i], &s)) return fail(err, i);
    pageable = pageable || d.kind == MemKind::kPageable || s.kind == MemKind::kPageable;
    const bool now = attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
    if (now) staged_bytes += sizes[i];
    blocks.push_back(MakeBlock(d, s, sizes[i]));
    read_now.push_back(now);
  }
  if (blocks.empty()) return CUDA_SUCCESS;
  const bool wait = pageable && behavior::kBatchWithPageableIsSynchronous;
  std::shared_ptr<std::vector<char>> staging;
  if (!wait && staged_bytes != 0) {
    // Read those sources now, out of stream order, as the attribute allows.
    staging = std::make_shared<std::vector<char>>(staged_bytes);
    char* next = staging->data();
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (!read_now[i]) continue;
      MoveRun(next, nullptr, blocks[i].src, blocks[i].src_held.get(), blocks[i].width);
      blocks[i].src = next;
      blocks[i].src_held = nullptr;
      next += blocks[i].width;
    }
  }
  if (CUresult err =
          Launch(handle, per_thread_api, std::move(blocks), wait, pageable, std::move(staging))) {
    return fail(err, kNoCopy);
  }
  return CUDA_SUCCESS;
}

CUresult MemsetD8(CUdeviceptr dst, unsigned char value, size_t n, bool per_thread_api) {
  Context* ctx;
  if (CUresult err = CurrentContext(&ctx)) return err;
  if (n == 0) return CUDA_SUCCESS;
  Span d;
  if (CUresult err = ResolveDeviceRange(dst, n, &d)) return err;
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(nullptr, per_thread_api, &stream)) return err;
  // Documented: asynchronous to the host unless the target is host or managed memory.
  char* view = d.view;
  std::shared_ptr<HeldPages> held = d.held;
  return Submit(
      stream,
      [view, value, n, held] {
        if (held == nullptr) {
          std::memset(view, value, n);
          return;
        }
        std::vector<char> fill(n < (size_t{1} << 20) ? n : (size_t{1} << 20), value);
        for (size_t done = 0; done < n; done += fill.size()) {
          const size_t len = n - done < fill.size() ? n - done : fill.size();
          DmaToHeld(*held, reinterpret_cast<uintptr_t>(view + done), fill.data(), len);
        }
      },
      d.kind != MemKind::kDevice);
}

constexpr Naming kH = Naming::kHost;
constexpr Naming kD = Naming::kDevice;
constexpr Naming kU = Naming::kUnified;
constexpr Api kSync = Api::kSync;
constexpr Api kAsync = Api::kAsync;

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace
}  // namespace fakecuda

using fakecuda::Addr;
using fakecuda::kAsync;
using fakecuda::kD;
using fakecuda::kH;
using fakecuda::kSync;
using fakecuda::kU;

extern "C" {

// ---- Linear ----

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpy");
  return fakecuda::Copy(kU, dst, kU, src, ByteCount, nullptr, kSync, false);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpy");
  return fakecuda::Copy(kU, dst, kU, src, ByteCount, nullptr, kSync, true);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyAsync");
  return fakecuda::Copy(kU, dst, kU, src, ByteCount, hStream, kAsync, false);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyAsync");
  return fakecuda::Copy(kU, dst, kU, src, ByteCount, hStream, kAsync, true);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpyHtoD");
  return fakecuda::Copy(kD, dstDevice, kH, Addr(srcHost), ByteCount, nullptr, kSync, false);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpyHtoD");
  return fakecuda::Copy(kD, dstDevice, kH, Addr(srcHost), ByteCount, nullptr, kSync, true);
}

CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpyDtoH");
  return fakecuda::Copy(kH, Addr(dstHost), kD, srcDevice, ByteCount, nullptr, kSync, false);
}

CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpyDtoH");
  return fakecuda::Copy(kH, Addr(dstHost), kD, srcDevice, ByteCount, nullptr, kSync, true);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpyDtoD");
  return fakecuda::Copy(kD, dstDevice, kD, srcDevice, ByteCount, nullptr, kSync, false);
}

CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  FAKECUDA_ENTER("cuMemcpyDtoD");
  return fakecuda::Copy(kD, dstDevice, kD, srcDevice, ByteCount, nullptr, kSync, true);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                              CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyHtoDAsync");
  return fakecuda::Copy(kD, dstDevice, kH, Addr(srcHost), ByteCount, hStream, kAsync, false);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                   CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyHtoDAsync");
  return fakecuda::Copy(kD, dstDevice, kH, Addr(srcHost), ByteCount, hStream, kAsync, true);
}

CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyDtoHAsync");
  return fakecuda::Copy(kH, Addr(dstHost), kD, srcDevice, ByteCount, hStream, kAsync, false);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyDtoHAsync");
  return fakecuda::Copy(kH, Addr(dstHost), kD, srcDevice, ByteCount, hStream, kAsync, true);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                              CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyDtoDAsync");
  return fakecuda::Copy(kD, dstDevice, kD, srcDevice, ByteCount, hStream, kAsync, false);
}

CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyDtoDAsync");
  return fakecuda::Copy(kD, dstDevice, kD, srcDevice, ByteCount, hStream, kAsync, true);
}

// ---- 2D and 3D ----

CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* pCopy) {
  FAKECUDA_ENTER("cuMemcpy2D");
  return fakecuda::Copy2D(pCopy, nullptr, kSync, false);
}

CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  FAKECUDA_ENTER("cuMemcpy2D");
  return fakecuda::Copy2D(pCopy, nullptr, kSync, true);
}

CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* pCopy) {
  FAKECUDA_ENTER("cuMemcpy2DUnaligned");
  return fakecuda::Copy2D(pCopy, nullptr, kSync, false);
}

CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* pCopy) {
  FAKECUDA_ENTER("cuMemcpy2DUnaligned");
  return fakecuda::Copy2D(pCopy, nullptr, kSync, true);
}

CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpy2DAsync");
  return fakecuda::Copy2D(pCopy, hStream, kAsync, false);
}

CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* pCopy, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpy2DAsync");
  return fakecuda::Copy2D(pCopy, hStream, kAsync, true);
}

CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* pCopy) {
  FAKECUDA_ENTER("cuMemcpy3D");
  return fakecuda::Copy3DDescriptor(pCopy, nullptr, kSync, false);
}

CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* pCopy) {
  FAKECUDA_ENTER("cuMemcpy3D");
  return fakecuda::Copy3DDescriptor(pCopy, nullptr, kSync, true);
}

CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpy3DAsync");
  return fakecuda::Copy3DDescriptor(pCopy, hStream, kAsync, false);
}

CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* pCopy, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpy3DAsync");
  return fakecuda::Copy3DDescriptor(pCopy, hStream, kAsync, true);
}

// ---- Batches: the CUDA 12.8 ABI (with failIdx) and the CUDA 13.0 one ----

CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                            CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                            size_t* failIdx, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyBatchAsync");
  return fakecuda::Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream,
                         false);
}

CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                 CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 size_t* failIdx, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyBatchAsync");
  return fakecuda::Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream,
                         true);
}

CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                               CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyBatchAsync");
  return fakecuda::Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream,
                         false);
}

CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                    size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                    size_t numAttrs, CUstream hStream) {
  FAKECUDA_ENTER("cuMemcpyBatchAsync");
  return fakecuda::Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream,
                         true);
}

// ---- Memset ----

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  FAKECUDA_ENTER("cuMemsetD8");
  return fakecuda::MemsetD8(dstDevice, uc, N, false);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  FAKECUDA_ENTER("cuMemsetD8");
  return fakecuda::MemsetD8(dstDevice, uc, N, true);
}

}  // extern "C"
