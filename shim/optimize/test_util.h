// Test helpers: the simulated driver (tests/fakecuda) behind a DriverOps
// table, a current context, device buffers to copy through, and the
// invariant walkers (invariants.h) run after every operation.
#ifndef PINSHIM_SHIM_OPTIMIZE_TEST_UTIL_H_
#define PINSHIM_SHIM_OPTIMIZE_TEST_UTIL_H_

#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "shim/optimize/driver_ops.h"
#include "shim/optimize/invariants.h"
#include "tests/fakecuda/fakecuda_control.h"

namespace pinshim {
namespace optimize {
namespace testing {

// The simulated driver's entry points, as the hooks would hand them over.
inline DriverOps FakeDriverOps() {
  DriverOps ops;
  ops.mem_host_alloc = &cuMemHostAlloc;
  ops.mem_free_host = &cuMemFreeHost;
  ops.mem_host_register = &cuMemHostRegister;
  ops.mem_host_unregister = &cuMemHostUnregister;
  ops.mem_host_get_device_pointer = &cuMemHostGetDevicePointer;
  ops.mem_host_get_flags = &cuMemHostGetFlags;
  ops.event_create = &cuEventCreate;
  ops.event_record = &cuEventRecord;
  ops.event_query = &cuEventQuery;
  ops.event_synchronize = &cuEventSynchronize;
  ops.event_destroy = &cuEventDestroy;
  ops.stream_synchronize = &cuStreamSynchronize;
  ops.stream_query = &cuStreamQuery;
  ops.stream_get_flags = &cuStreamGetFlags;
  ops.ctx_get_current = &cuCtxGetCurrent;
  ops.ctx_set_current = &cuCtxSetCurrent;
  ops.ctx_synchronize = &cuCtxSynchronize;
  ops.memcpy_htod_async = &cuMemcpyHtoDAsync;
  ops.memcpy_dtoh_async = &cuMemcpyDtoHAsync;
  ops.pointer_get_attribute = &cuPointerGetAttribute;
  ops.stream_is_capturing = &cuStreamIsCapturing;
  ops.thread_exchange_capture_mode = &cuThreadExchangeStreamCaptureMode;
  ops.device_get_count = &cuDeviceGetCount;
  ops.device_get_attribute = &cuDeviceGetAttribute;
  return ops;
}

// cuInit and the primary context of device 0, made current on this thread.
inline CUcontext MakeContextCurrent() {
  static CUcontext ctx = [] {
    CUcontext c = nullptr;
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS) {
      return static_cast<CUcontext>(nullptr);
    }
    return c;
  }();
  cuCtxSetCurrent(ctx);
  return ctx;
}

// A clock the test moves by hand.
struct ManualClock {
  static std::atomic<uint64_t>& Value() {
    static std::atomic<uint64_t> v{1000000000};
    return v;
  }
  static uint64_t Now() { return Value().load(); }
  static void Advance(uint64_t ns) { Value().fetch_add(ns); }
};

// Fills n bytes at p with a pattern derived from seed.
inline void Fill(void* p, size_t n, uint8_t seed) {
  auto* c = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) c[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
}

// Whether n bytes at p hold Fill's pattern for seed.
inline bool HasPattern(const void* p, size_t n, uint8_t seed) {
  auto* c = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (c[i] != static_cast<uint8_t>(seed + i * 7 + (i >> 8))) return false;
  }
  return true;
}

// A host function (cuLaunchHostFunc, arg a Rewrite) that rewrites a buffer
// with Fill's pattern: work queued before an upload that changes its source.
struct Rewrite {
  void* p;
  size_t n;
  uint8_t seed;
};
inline void RewriteSource(void* arg) {
  auto* w = static_cast<Rewrite*>(arg);
  Fill(w->p, w->n, w->seed);
}

// Expects every invariant of `x` (a pool, cache, arena, stager or pin
// account) to hold; the failure names those that do not.
template <typename T>
void ExpectInvariants(const T& x, const char* after = "") {
  const InvariantReport r = x.CheckInvariants();
  EXPECT_TRUE(r.ok()) << r.text() << after;
}

// Holds a T and walks its invariants after every call made through ->: the
// Access temporary lives until the end of the call's full expression, and
// its destructor walks. raw() reaches the T without walking: for threads
// running at once (the walk needs a quiescent structure; walk after they
// joined) and for callbacks the T calls itself (its evictors), which run
// in the middle of an operation.
template <typename T>
class Checked {
 public:
  class Access {
   public:
    Access(T* t, uint64_t n) : t_(t), n_(n) {}
    ~Access() {
      const std::string after = " (after operation " + std::to_string(n_) + ")";
      ExpectInvariants(*t_, after.c_str());
    }
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;
    T* operator->() const { return t_; }

   private:
    T* t_;
    uint64_t n_;
  };

  Access operator->() { return Access(&t_, ++operations_); }
  T& raw() { return t_; }

 private:
  T t_;
  uint64_t operations_ = 0;
};

// The walker proves its power over `part`: each corruption in `cases` (the
// part's CorruptForTesting, which a second call undoes) breaks the
// invariant named with it (the walk's text names it: "C2 ", say), and once
// undone the part is whole again.
template <typename Part>
struct Corruption {
  typename Part::Corruption what;
  const char* invariant;
};

template <typename Part, size_t N>
void ExpectWalkerReportsEach(Part& part, const Corruption<Part> (&cases)[N]) {
  for (const Corruption<Part>& c : cases) {
    SCOPED_TRACE(c.invariant);
    ASSERT_TRUE(part.CheckInvariants().ok()) << part.CheckInvariants().text();
    ASSERT_TRUE(part.CorruptForTesting(c.what));
    const InvariantReport broken = part.CheckInvariants();
    EXPECT_FALSE(broken.ok());
    EXPECT_NE(strstr(broken.text(), c.invariant), nullptr) << broken.text();
    ASSERT_TRUE(part.CorruptForTesting(c.what));  // undone
    EXPECT_TRUE(part.CheckInvariants().ok()) << part.CheckInvariants().text();
  }
}

}  // namespace testing
}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_TEST_UTIL_H_
