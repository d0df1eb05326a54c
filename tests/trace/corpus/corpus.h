// What the corpus programs share. Each program is a correct use of streams,
// events, host functions or graphs, written against the driver API only
// (cuda.h), so that it builds with g++ against the simulated driver and with
// nvcc against the real one: no kernels; device-to-device copies stand in
// for the work between a program's uploads and downloads. Each checks its
// own results and exits 0, printing "ok"; on a failed call it prints it and
// exits 2.
#ifndef PINSHIM_TESTS_TRACE_CORPUS_CORPUS_H_
#define PINSHIM_TESTS_TRACE_CORPUS_CORPUS_H_

#include <cuda.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                        \
  do {                                                                     \
    CUresult corpus_r = (call);                                            \
    if (corpus_r != CUDA_SUCCESS) {                                        \
      const char* corpus_name = nullptr;                                   \
      cuGetErrorName(corpus_r, &corpus_name);                              \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
              corpus_name != nullptr ? corpus_name : "unknown error");     \
      exit(2);                                                             \
    }                                                                      \
  } while (0)

namespace corpus {

// cuInit and device 0's primary context, current on the calling thread.
inline CUcontext Init() {
  static CUcontext ctx = nullptr;
  if (ctx == nullptr) {
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  }
  CHECK(cuCtxSetCurrent(ctx));
  return ctx;
}

inline void Done() {
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRelease(dev));
}

// Writes `n` bytes of a pattern with plain stores.
inline void Fill(void* p, size_t n, unsigned seed) {
  unsigned char* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(seed * 31 + i * 7);
}

// Whether `n` bytes hold the pattern, read with plain loads.
inline bool Holds(const void* p, size_t n, unsigned seed) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<unsigned char>(seed * 31 + i * 7)) return false;
  }
  return true;
}

inline int Finish(bool ok, const char* name) {
  Done();
  if (!ok) {
    fprintf(stderr, "%s: wrong results\n", name);
    return 1;
  }
  printf("ok %s\n", name);
  return 0;
}

}  // namespace corpus

#endif  // PINSHIM_TESTS_TRACE_CORPUS_CORPUS_H_
