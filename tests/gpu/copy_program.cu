// A CUDA runtime program for the GPU tier: every kind of host memory the
// library tells apart (pageable, pinned with each flag combination,
// cudaMallocHost, registered), every copy form (sync, async on a created and on
// the default stream, 2D, 3D, cudaMemcpyDefault, device to device) and a set of
// deliberately invalid calls. It prints a checksum of every result buffer,
// the return code of every invalid call, the results of cudaHostGetFlags and
// cudaHostGetDevicePointer, and finally an "expect:" line with the exact
// counts of what it did (see call_ledger.h). Nothing printed depends on
// addresses or timing, so the output with and without the library must match.
//
// run_gpu_tier.sh builds it twice: static CUDA runtime (nvcc's default) and
// -cudart shared.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "call_ledger.h"

namespace {

using pinshim_gpu_tier::CallLedger;
using pinshim_gpu_tier::Dir;
using pinshim_gpu_tier::Fill;
using pinshim_gpu_tier::Host;
using pinshim_gpu_tier::PrintChecksum;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;
constexpr size_t kSizes[] = {4 * kKiB, 64 * kKiB, 1 * kMiB, 16 * kMiB};
constexpr size_t kBig = 16 * kMiB;

CallLedger g_ledger;

void Must(cudaError_t rc, const char* what, int line) {
  if (rc == cudaSuccess) return;
  std::printf("FATAL line %d: %s returned %d %s\n", line, what, static_cast<int>(rc),
              cudaGetErrorName(rc));
  std::fflush(stdout);
  std::exit(2);
}
#define MUST(call) Must((call), #call, __LINE__)

// Prints the code of a call that is allowed (or meant) to fail, then clears
// the runtime's last-error slot so later checks are not confused by it.
void PrintRc(const char* label, cudaError_t rc) {
  std::printf("rc %s=%d %s\n", label, static_cast<int>(rc), cudaGetErrorName(rc));
  cudaGetLastError();
}

const char* Label(const char* fmt, size_t a, size_t b = 0) {
  static char buf[128];
  std::snprintf(buf, sizeof(buf), fmt, a, b);
  return buf;
}

unsigned char* Bytes(void* p) { return static_cast<unsigned char*>(p); }

__global__ void Mix(uint32_t* words, size_t n, uint32_t salt) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    words[i] = (words[i] * 2654435761u) ^ (salt + static_cast<uint32_t>(i));
  }
}

// Makes the device contents depend on the data that was copied in.
void LaunchMix(void* dev, size_t bytes, uint32_t salt, cudaStream_t stream) {
  Mix<<<128, 256, 0, stream>>>(static_cast<uint32_t*>(dev), bytes / 4, salt);
  MUST(cudaGetLastError());
}

void CopySync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, Dir dir, Host host) {
  MUST(cudaMemcpy(dst, src, n, kind));
  g_ledger.Copy(dir, host, n);
}

void CopyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
               Dir dir, Host host) {
  MUST(cudaMemcpyAsync(dst, src, n, kind, stream));
  g_ledger.Copy(dir, host, n);
}

// Host -> device, mix, device -> host into `back`, on `stream` (async) or
// with cudaMemcpy (stream == nullptr and sync == true).
void RoundTrip(void* dev, const void* host_in, void* back, size_t n, uint32_t salt, Host in_kind,
               Host back_kind, bool sync, cudaStream_t stream) {
  if (sync) {
    CopySync(dev, host_in, n, cudaMemcpyHostToDevice, Dir::kH2D, in_kind);
    LaunchMix(dev, n, salt, nullptr);
    CopySync(back, dev, n, cudaMemcpyDeviceToHost, Dir::kD2H, back_kind);
  } else {
    CopyAsync(dev, host_in, n, cudaMemcpyHostToDevice, stream, Dir::kH2D, in_kind);
    LaunchMix(dev, n, salt, stream);
    CopyAsync(back, dev, n, cudaMemcpyDeviceToHost, stream, Dir::kD2H, back_kind);
    MUST(cudaStreamSynchronize(stream));
  }
}

struct Device {
  void* a = nullptr;      // kBig bytes
  void* b = nullptr;      // kBig bytes
  void* small = nullptr;  // 4 KiB, for the out-of-bounds copy
  cudaStream_t stream = nullptr;
};

void PageableSection(const Device& d, unsigned char* src, unsigned char* dst) {
  for (size_t i = 0; i < 4; ++i) {
    size_t n = kSizes[i];
    Fill(src, n, 100 + i);
    RoundTrip(d.a, src, dst, n, 7 + i, Host::kPageable, Host::kPageable,
              /*sync=*/true, nullptr);
    PrintChecksum(Label("pageable/sync/%zu", n), dst, n);
    Fill(src, n, 110 + i);
    RoundTrip(d.a, src, dst, n, 17 + i, Host::kPageable, Host::kPageable,
              /*sync=*/false, d.stream);
    PrintChecksum(Label("pageable/async-stream/%zu", n), dst, n);
  }
}

void HostAllocSection(const Device& d) {
  const unsigned kCombos[] = {
      cudaHostAllocDefault,
      cudaHostAllocPortable,
      cudaHostAllocMapped,
      cudaHostAllocWriteCombined,
      cudaHostAllocPortable | cudaHostAllocMapped,
      cudaHostAllocPortable | cudaHostAllocWriteCombined,
      cudaHostAllocMapped | cudaHostAllocWriteCombined,
      cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined,
  };
  for (size_t c = 0; c < 8; ++c) {
    const unsigned flags = kCombos[c];
    const size_t n = kSizes[c % 4];
    void* p = nullptr;
    MUST(cudaHostAlloc(&p, n, flags));
    g_ledger.PinAlloc(n);
    unsigned got = 0;
    cudaError_t rc = cudaHostGetFlags(&got, p);
    std::printf("hostalloc flags=0x%x bytes=%zu getflags_rc=%d got=0x%x\n", flags, n,
                static_cast<int>(rc), rc == cudaSuccess ? got : 0u);
    void* dp = nullptr;
    rc = cudaHostGetDevicePointer(&dp, p, 0);
    std::printf("hostalloc flags=0x%x devptr_rc=%d devptr_is_hostptr=%d\n", flags,
                static_cast<int>(rc), rc == cudaSuccess ? static_cast<int>(dp == p) : -1);
    cudaGetLastError();
    const Host kind = (flags & cudaHostAllocWriteCombined) ? Host::kPinnedWc : Host::kPinned;
    Fill(p, n, 200 + c);
    // Even combinations on the created stream, odd ones on the default one.
    cudaStream_t stream = (c % 2 == 0) ? d.stream : nullptr;
    RoundTrip(d.a, p, p, n, 27 + c, kind, kind, /*sync=*/false, stream);
    PrintChecksum(Label("hostalloc/0x%zx/%zu", flags, n), p, n);
    if ((flags & cudaHostAllocMapped) && rc == cudaSuccess && n <= kMiB) {
      // Zero-copy: the kernel works on the host memory itself.
      LaunchMix(dp, n, 37 + c, nullptr);
      MUST(cudaDeviceSynchronize());
      PrintChecksum(Label("hostalloc-mapped/0x%zx/%zu", flags, n), p, n);
    }
    MUST(cudaFreeHost(p));
    g_ledger.PinFree();
  }
}

// cudaMallocHost memory with the default stream, 2D, 3D and cudaMemcpyDefault.
void MallocHostSection(const Device& d, unsigned char* src, unsigned char* dst) {
  void* ph = nullptr;
  MUST(cudaMallocHost(&ph, kBig));
  g_ledger.PinAlloc(kBig);
  unsigned got = 0;
  cudaError_t rc = cudaHostGetFlags(&got, ph);
  std::printf("mallochost getflags_rc=%d got=0x%x\n", static_cast<int>(rc),
              rc == cudaSuccess ? got : 0u);
  cudaGetLastError();

  for (size_t i = 0; i < 4; ++i) {
    size_t n = kSizes[i];
    Fill(ph, n, 300 + i);
    RoundTrip(d.a, ph, ph, n, 47 + i, Host::kPinned, Host::kPinned,
              /*sync=*/false, nullptr);
    PrintChecksum(Label("mallochost/async-default/%zu", n), ph, n);
  }
  // Synchronous copies, the second into the middle of the allocation.
  Fill(ph, kMiB, 310);
  CopySync(d.b, ph, kMiB, cudaMemcpyHostToDevice, Dir::kH2D, Host::kPinned);
  LaunchMix(d.b, kMiB, 57, nullptr);
  CopySync(Bytes(ph) + 5 * kMiB, d.b, kMiB, cudaMemcpyDeviceToHost, Dir::kD2H, Host::kPinned);
  PrintChecksum("mallochost/sync-interior/1048576", Bytes(ph) + 5 * kMiB, kMiB);

  // 2D: pinned (pitch 1024) -> pitched device -> pageable (pitch 1100).
  {
    const size_t width = 1000, height = 64, hpitch = 1024, ppitch = 1100;
    void* d2 = nullptr;
    size_t dpitch = 0;
    MUST(cudaMallocPitch(&d2, &dpitch, width, height));
    Fill(ph, hpitch * height, 320);
    MUST(cudaMemcpy2D(d2, dpitch, ph, hpitch, width, height, cudaMemcpyHostToDevice));
    g_ledger.Copy(Dir::kH2D, Host::kPinned, width * height);
    LaunchMix(d2, dpitch * height, 67, nullptr);
    std::memset(dst, 0, ppitch * height);
    MUST(cudaMemcpy2D(dst, ppitch, d2, dpitch, width, height, cudaMemcpyDeviceToHost));
    g_ledger.Copy(Dir::kD2H, Host::kPageable, width * height);
    PrintChecksum("2d/sync/1000x64", dst, ppitch * height);

    Fill(src, ppitch * height, 330);
    MUST(cudaMemcpy2DAsync(d2, dpitch, src, ppitch, width, height, cudaMemcpyHostToDevice,
                           d.stream));
    g_ledger.Copy(Dir::kH2D, Host::kPageable, width * height);
    LaunchMix(d2, dpitch * height, 77, d.stream);
    std::memset(ph, 0, hpitch * height);
    MUST(
        cudaMemcpy2DAsync(ph, hpitch, d2, dpitch, width, height, cudaMemcpyDeviceToHost, d.stream));
    g_ledger.Copy(Dir::kD2H, Host::kPinned, width * height);
    MUST(cudaStreamSynchronize(d.stream));
    PrintChecksum("2d/async-stream/1000x64", ph, hpitch * height);
    MUST(cudaFree(d2));
  }

  // 3D: pinned -> pitched 3D device allocation -> pageable.
  {
    const size_t w = 512, h = 16, depth = 8;
    cudaPitchedPtr dev3;
    MUST(cudaMalloc3D(&dev3, make_cudaExtent(w, h, depth)));
    Fill(ph, w * h * depth, 340);
    cudaMemcpy3DParms p;
    std::memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr(ph, w, w, h);
    p.dstPtr = dev3;
    p.extent = make_cudaExtent(w, h, depth);
    p.kind = cudaMemcpyHostToDevice;
    MUST(cudaMemcpy3D(&p));
    g_ledger.Copy(Dir::kH2D, Host::kPinned, w * h * depth);
    LaunchMix(dev3.ptr, dev3.pitch * h * depth, 87, nullptr);
    std::memset(dst, 0, w * h * depth);
    std::memset(&p, 0, sizeof(p));
    p.srcPtr = dev3;
    p.dstPtr = make_cudaPitchedPtr(dst, w, w, h);
    p.extent = make_cudaExtent(w, h, depth);
    p.kind = cudaMemcpyDeviceToHost;
    MUST(cudaMemcpy3D(&p));
    g_ledger.Copy(Dir::kD2H, Host::kPageable, w * h * depth);
    PrintChecksum("3d/sync/512x16x8", dst, w * h * depth);
    MUST(cudaFree(dev3.ptr));
  }

  // cudaMemcpyDefault: the direction comes from the pointers.
  Fill(ph, kMiB, 350);
  CopySync(d.a, ph, kMiB, cudaMemcpyDefault, Dir::kH2D, Host::kPinned);
  CopySync(d.b, d.a, kMiB, cudaMemcpyDefault, Dir::kD2D, Host::kNone);
  LaunchMix(d.b, kMiB, 97, nullptr);
  CopySync(dst, d.b, kMiB, cudaMemcpyDefault, Dir::kD2H, Host::kPageable);
  PrintChecksum("default/sync/1048576", dst, kMiB);
  Fill(src, 64 * kKiB, 360);
  CopyAsync(d.a, src, 64 * kKiB, cudaMemcpyDefault, d.stream, Dir::kH2D, Host::kPageable);
  LaunchMix(d.a, 64 * kKiB, 107, d.stream);
  CopyAsync(ph, d.a, 64 * kKiB, cudaMemcpyDefault, d.stream, Dir::kD2H, Host::kPinned);
  MUST(cudaStreamSynchronize(d.stream));
  PrintChecksum("default/async-stream/65536", ph, 64 * kKiB);

  MUST(cudaFreeHost(ph));
  g_ledger.PinFree();
}

void DeviceToDeviceSection(const Device& d, unsigned char* src, unsigned char* dst) {
  Fill(src, kBig, 400);
  CopySync(d.a, src, kBig, cudaMemcpyHostToDevice, Dir::kH2D, Host::kPageable);
  CopySync(d.b, d.a, kBig, cudaMemcpyDeviceToDevice, Dir::kD2D, Host::kNone);
  LaunchMix(d.b, kBig, 117, nullptr);
  MUST(cudaDeviceSynchronize());
  CopyAsync(Bytes(d.a) + kMiB, Bytes(d.b) + 3 * kMiB, 4 * kMiB, cudaMemcpyDeviceToDevice, d.stream,
            Dir::kD2D, Host::kNone);
  MUST(cudaStreamSynchronize(d.stream));
  CopySync(dst, d.a, kBig, cudaMemcpyDeviceToHost, Dir::kD2H, Host::kPageable);
  PrintChecksum("d2d/16777216", dst, kBig);
}

void RegisteredSection(const Device& d) {
  void* reg = std::aligned_alloc(4096, kBig);
  MUST(cudaHostRegister(reg, kBig, cudaHostRegisterDefault));
  g_ledger.Register(kBig);
  unsigned got = 0;
  cudaError_t rc = cudaHostGetFlags(&got, reg);
  std::printf("registered getflags_rc=%d got=0x%x\n", static_cast<int>(rc),
              rc == cudaSuccess ? got : 0u);
  cudaGetLastError();

  for (size_t i = 0; i < 4; ++i) {
    const size_t n = kSizes[i];
    // Interior pointers: the library must find the registration around them.
    const size_t off = (n == kBig) ? 0 : 4096 * (i + 1);
    Fill(Bytes(reg) + off, n, 500 + i);
    RoundTrip(d.a, Bytes(reg) + off, Bytes(reg) + off, n, 127 + i, Host::kRegistered,
              Host::kRegistered, /*sync=*/false, d.stream);
    PrintChecksum(Label("registered/async-stream/%zu+%zu", n, off), Bytes(reg) + off, n);
  }
  Fill(reg, kMiB, 510);
  RoundTrip(d.a, reg, Bytes(reg) + 2 * kMiB, kMiB, 137, Host::kRegistered, Host::kRegistered,
            /*sync=*/true, nullptr);
  PrintChecksum("registered/sync/1048576", Bytes(reg) + 2 * kMiB, kMiB);

  // Registering the same range twice must fail and change nothing.
  rc = cudaHostRegister(reg, kBig, cudaHostRegisterDefault);
  PrintRc("register_twice", rc);
  if (rc != cudaSuccess) {
    g_ledger.FailedPin(kBig, /*reaches_driver=*/false);
  } else {
    g_ledger.Register(kBig);
    MUST(cudaHostUnregister(reg));
    g_ledger.Unregister();
  }
  MUST(cudaHostUnregister(reg));
  g_ledger.Unregister();
  rc = cudaHostUnregister(reg);
  PrintRc("unregister_unregistered", rc);
  if (rc != cudaSuccess) {
    g_ledger.FailedPin(0, /*reaches_driver=*/false);
  } else {
    g_ledger.Unregister();
  }
  // The range is ordinary pageable memory again.
  Fill(reg, 64 * kKiB, 520);
  RoundTrip(d.a, reg, Bytes(reg) + kMiB, 64 * kKiB, 147, Host::kPageable, Host::kPageable,
            /*sync=*/true, nullptr);
  PrintChecksum("unregistered/sync/65536", Bytes(reg) + kMiB, 64 * kKiB);

  // A mapped registration used by a kernel directly.
  void* reg2 = std::aligned_alloc(4096, 64 * kKiB);
  MUST(cudaHostRegister(reg2, 64 * kKiB, cudaHostRegisterMapped));
  g_ledger.Register(64 * kKiB);
  void* dp = nullptr;
  rc = cudaHostGetDevicePointer(&dp, reg2, 0);
  std::printf("registered-mapped devptr_rc=%d devptr_is_hostptr=%d\n", static_cast<int>(rc),
              rc == cudaSuccess ? static_cast<int>(dp == reg2) : -1);
  cudaGetLastError();
  Fill(reg2, 64 * kKiB, 530);
  if (rc == cudaSuccess) {
    LaunchMix(dp, 64 * kKiB, 157, nullptr);
    MUST(cudaDeviceSynchronize());
  }
  PrintChecksum("registered-mapped/65536", reg2, 64 * kKiB);
  MUST(cudaHostUnregister(reg2));
  g_ledger.Unregister();
  std::free(reg2);
  std::free(reg);
}

void InvalidCallsSection(const Device& d, unsigned char* dst) {
  cudaError_t rc = cudaMemcpy(d.a, nullptr, 4 * kKiB, cudaMemcpyHostToDevice);
  PrintRc("memcpy_null_source", rc);
  if (rc != cudaSuccess) {
    g_ledger.FailedCopy(4 * kKiB, /*reaches_driver=*/false);
  } else {
    g_ledger.Copy(Dir::kH2D, Host::kPageable, 4 * kKiB);
  }
  // Reads past the end of a 4 KiB device allocation; the host side is large
  // enough, so nothing on the host is overrun whatever the driver does.
  rc = cudaMemcpy(dst, d.small, 64 * kKiB, cudaMemcpyDeviceToHost);
  PrintRc("memcpy_past_end", rc);
  if (rc != cudaSuccess) {
    g_ledger.FailedCopy(64 * kKiB, /*reaches_driver=*/false);
  } else {
    g_ledger.Copy(Dir::kD2H, Host::kPageable, 64 * kKiB);
  }
  void* not_pinned = std::malloc(64 * kKiB);
  rc = cudaFreeHost(not_pinned);
  PrintRc("freehost_of_malloc", rc);
  if (rc != cudaSuccess) {
    g_ledger.FailedPin(0, /*reaches_driver=*/false);
    std::free(not_pinned);
  } else {
    g_ledger.PinFree();
  }
}

}  // namespace

int main() {
  int runtime_version = 0, driver_version = 0;
  MUST(cudaRuntimeGetVersion(&runtime_version));
  MUST(cudaDriverGetVersion(&driver_version));
  std::printf("copy_program runtime=%d driver=%d\n", runtime_version, driver_version);
  MUST(cudaSetDevice(0));
  MUST(cudaFree(nullptr));  // creates the context

  Device d;
  MUST(cudaMalloc(&d.a, kBig));
  MUST(cudaMalloc(&d.b, kBig));
  MUST(cudaMalloc(&d.small, 4 * kKiB));
  MUST(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking));
  unsigned char* src = static_cast<unsigned char*>(std::malloc(kBig));
  unsigned char* dst = static_cast<unsigned char*>(std::malloc(kBig));

  PageableSection(d, src, dst);
  HostAllocSection(d);
  MallocHostSection(d, src, dst);
  DeviceToDeviceSection(d, src, dst);
  RegisteredSection(d);
  InvalidCallsSection(d, dst);
  MUST(cudaDeviceSynchronize());

  std::printf("%s\n", g_ledger.ExpectLine().c_str());
  MUST(cudaStreamDestroy(d.stream));
  MUST(cudaFree(d.small));
  MUST(cudaFree(d.b));
  MUST(cudaFree(d.a));
  std::free(dst);
  std::free(src);
  std::printf("copy_program done\n");
  return 0;
}
