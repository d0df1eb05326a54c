// CHECK(call): a CUDA runtime call in a benchmark program; on an error it
// prints where and what, and exits 1 (a benchmark that went wrong measures
// nothing). DCHECK(call): the same for a driver API call.
#ifndef PINSHIM_BENCH_GPU_CUDA_CHECK_H_
#define PINSHIM_BENCH_GPU_CUDA_CHECK_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

#define DCHECK(x)                                                          \
  do {                                                                     \
    CUresult r_ = (x);                                                     \
    if (r_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d %s: error %d\n", __FILE__, __LINE__, #x, r_); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

#endif  // PINSHIM_BENCH_GPU_CUDA_CHECK_H_
