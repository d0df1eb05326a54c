// Test-only knobs of the simulated CUDA driver (tests/fakecuda, libcuda.so.1).
// The real driver has none of these: dlsym(handle, "fakecuda_call_count")
// tells which driver a process has loaded.
#ifndef PINSHIM_TESTS_FAKECUDA_FAKECUDA_CONTROL_H_
#define PINSHIM_TESTS_FAKECUDA_FAKECUDA_CONTROL_H_

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Device allocations (cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged) not yet freed.
size_t fakecuda_live_device_allocations(void);

// Page-locked allocations (cuMemHostAlloc, cuMemAllocHost) not yet freed.
size_t fakecuda_live_host_allocations(void);

// cuMemHostRegister registrations not yet unregistered.
size_t fakecuda_live_registrations(void);

// Bytes page-locked now: host allocations plus registrations, as requested.
size_t fakecuda_pinned_bytes(void);

// Calls so far to the entry point `base_name` as cuGetProcAddress names it
// ("cuMemcpyHtoD"): every ABI version and stream variant together.
uint64_t fakecuda_call_count(const char* base_name);

// Makes the next call to `base_name` return `error` without doing anything.
// CUDA_SUCCESS disarms. At most 16 names are armed at once.
void fakecuda_fail_next(const char* base_name, CUresult error);

// Every copy or memset that starts running from now on first waits
// `microseconds`, so asynchronous work visibly completes later. 0 turns it off.
void fakecuda_set_copy_delay_us(unsigned microseconds);

// Holds `stream` (held != 0) or lets it go (held == 0): a held stream starts
// no further work, so what is queued on it stays pending, deterministically.
// The handle is read as the stream APIs read it: NULL or CU_STREAM_LEGACY is
// the current context's legacy stream, CU_STREAM_PER_THREAD the calling
// thread's default stream. A call that waits on held work blocks until the
// stream is let go (stream/event/context synchronization, synchronous and
// pageable copies, and frees, which synchronize every stream), so only query
// while holding. Returns the error the stream APIs would give for a bad handle.
CUresult fakecuda_hold_stream(CUstream stream, int held);

// Operations queued on any stream that have not finished yet.
size_t fakecuda_pending_ops(void);

// 1 when page-locked memory pins its pages here (pinning.h: copies then move
// the pinned pages' bytes, as DMA does), 0 when this kernel cannot, and
// copies of page-locked memory go through the program's addresses.
int fakecuda_pins_pages(void);

// 1 when a page the program dropped (MADV_DONTNEED) from its mapping of VMM
// host memory or of a host pool faults with SIGBUS at the CPU's next
// access, as on the GPU host (driver_behavior.h, kDroppedDriverPagesFault);
// 0 when this kernel cannot make it so, or no such mapping was made yet.
int fakecuda_drops_fault(void);

// Ranges page-locked so far whose pages could not be pinned (RLIMIT_MEMLOCK
// without CAP_IPC_LOCK, memory io_uring refuses): their copies went through
// the program's addresses, which the hardware's DMA would not.
uint64_t fakecuda_pin_failures(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // PINSHIM_TESTS_FAKECUDA_FAKECUDA_CONTROL_H_
