// The CUDA calls the trace test programs make, behind one small interface
// with two implementations:
//
//   recorder_backend.cc  (what the tests use now) emulates the driver in host
//       memory and hands each call to the trace recorder exactly as the hooks
//       do: CopyEvent/PinEvent/HostAllocEvent/SyncEvent, with the caller's
//       real stack. It also interposes memcpy/memmove/memset/memcmp/strlen/
//       fwrite/write, as the libc hooks do, for the wc-read and copy-race
//       rules.
//   driver_backend.cc  calls the CUDA driver API (the real libcuda, or
//       tests/fakecuda's), for running the same programs under
//       LD_PRELOAD=libpinshim.so once the hooks record.
//
// Switching is a link-time choice (see trace_program() in BUILD); the
// programs do not change. The functions live in namespace pinshim, which the
// report trims from call sites like the CUDA runtime, so sites land on the
// program's own lines either way.
#ifndef PINSHIM_TESTS_TRACE_HARNESS_CUDA_HARNESS_H_
#define PINSHIM_TESTS_TRACE_HARNESS_CUDA_HARNESS_H_

#include <cstddef>

namespace pinshim {
namespace testing {
namespace cuda {

using Stream = void*;
using Event = void*;

// CU_MEMHOSTALLOC_* / CU_MEMHOSTREGISTER_* values.
constexpr unsigned kHostAllocPortable = 0x01;
constexpr unsigned kHostAllocMapped = 0x02;
constexpr unsigned kHostAllocWriteCombined = 0x04;

// Makes `device` current for the calling thread (cuCtxSetCurrent).
void SetDevice(int device);

// Devices the program can use (the recorder backend emulates two).
int DeviceCount();

// The exit status of a program that cannot run here (too few devices); it
// says why on stderr, and the tests report it as not run.
constexpr int kNotRun = 77;

void* DeviceAlloc(size_t bytes);
void DeviceFree(void* device_ptr);

// Ordinary host memory, as malloc/free (tracked when large, like the hooks).
void* Malloc(size_t bytes);
void Free(void* p);

// Anonymous pages, as mmap/munmap (tracked when large, like the hooks).
void* MapPages(size_t bytes);
void UnmapPages(void* p, size_t bytes);

// Under enforce mode (see recorder_backend.cc) HostAlloc returns null when
// the budget denies it, and HostRegister registers nothing when refused.
void* HostAlloc(size_t bytes, unsigned flags = 0);
void FreeHost(void* p);
void HostRegister(void* p, size_t bytes, unsigned flags = 0);
void HostUnregister(void* p);

void MemcpyHtoD(void* device_dst, const void* host_src, size_t bytes);
void MemcpyDtoH(void* host_dst, const void* device_src, size_t bytes);
void MemcpyHtoDAsync(void* device_dst, const void* host_src, size_t bytes, Stream stream);
void MemcpyDtoHAsync(void* host_dst, const void* device_src, size_t bytes, Stream stream);

Stream StreamCreate();
void StreamDestroy(Stream stream);
void StreamSynchronize(Stream stream);
void CtxSynchronize();
Event EventCreate();
void EventRecord(Event event, Stream stream);
void EventSynchronize(Event event);

// Reads of write-combined memory the page guard has caught in this process,
// or -1 when the backend cannot tell (the driver backend).
long GuardedReadsSoFar();

}  // namespace cuda
}  // namespace testing
}  // namespace pinshim

#endif  // PINSHIM_TESTS_TRACE_HARNESS_CUDA_HARNESS_H_
