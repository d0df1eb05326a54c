// The copy watch: the host side of asynchronous copies on page-locked
// memory, kept from the moment a copy is queued until the process is seen
// to wait for it, so that a CPU access made in between can be recorded
// (kMisuse kCopyRace; the copy-race rule decides from the whole trace
// whether the copy could still run at that moment).
//
// What is watched, and what an access is: a device-to-host copy's
// destination (any read or write by the CPU), a host-to-device copy's
// source (writes). Each watched copy is reported at most once, at the first
// such access: when that access comes after the copy finished, every later
// one does too, so nothing is lost by stopping there.
//
// Waits prune the watch conservatively, by the stream handle the program
// named: a stream synchronize or successful query drops that stream's
// copies, an event synchronize or successful query drops the copies queued
// on the event's stream before it was recorded, a context synchronize and
// the driver's releases (which wait for the device, measured) drop all. A
// copy the watch keeps longer than needed costs one extra record, which the
// analyzer dismisses; one it drops too early is a race not reported.
//
// The guard (PINSHIM_COPY_GUARD=1) also catches plain loads and stores: the
// whole pages inside a watched range are protected (a device-to-host
// destination made inaccessible, a host-to-device source read-only) until
// the copy is pruned or first touched; the SIGSEGV handler (wc_guard.cc)
// records the access with its faulting instruction and lifts the
// protection. A device's DMA ignores CPU page protections; the simulated
// driver moves page-locked bytes the same way (tests/fakecuda/dma.cc). The
// guard assumes page-locked memory is read-write, as the driver hands it
// out; a program that mprotects such memory itself should not use it.
// System calls that touch a protected page fail with EFAULT instead of
// faulting; pages of a race the hooks see handed to the kernel (write) are
// opened first.
//
// Everything here is lock-free, allocation-free and async-signal-safe. A
// process with nothing watched pays one relaxed load per question.
#ifndef PINSHIM_SHIM_TRACE_COPY_WATCH_H_
#define PINSHIM_SHIM_TRACE_COPY_WATCH_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {
namespace trace {

constexpr size_t kMaxWatchedCopies = 256;

// True when some copy is watched (one relaxed load).
bool CopyWatchAny();

// An asynchronous copy with page-locked host side [host, host + bytes) was
// queued on `stream` (the handle as passed). With `guard`, its pages are
// protected too (see above). When the table is full the oldest copy is
// dropped.
void WatchCopy(const void* host, uint64_t bytes, bool device_to_host, const void* stream,
               bool guard);

// The CPU is about to touch [p, p + len) (`write`: stores). When that is an
// access to a watched copy (see above), stops watching it, lifts its guard
// and returns true (the caller records the access).
bool TakeCopyAccess(const void* p, size_t len, bool write);

// Completion points (see above).
void CopyWatchStreamDone(const void* stream);
void CopyWatchAllDone();
// `key` is a CUevent (or a host function's token): it now marks the copies
// queued on `stream` so far.
void CopyWatchMark(uint64_t key, const void* stream);
void CopyWatchMarkDone(uint64_t key);

// [p, p + bytes) is about to be released by the program (free, munmap,
// cuMemHostUnregister): copies on it are forgotten and their pages opened.
// `still_mapped` false: the memory is gone already (cuMemFreeHost), so its
// protection went with it and nothing is called on it.
void CopyWatchForgetRange(const void* p, uint64_t bytes, bool still_mapped);

// Forgets everything, opening guarded pages (stop, fork child).
void CopyWatchReset();

// From the SIGSEGV handler: a fault at `address` (`write`: a store). True
// when it was the guard's (the access is retried); *record then says whether
// it was an access to report (false: a neighbour of the guarded bytes, or a
// fault that lost a race with the guard being lifted).
bool CopyGuardFault(uintptr_t address, bool write, bool* record);

// Guarded pages faulted on so far (tests).
uint64_t CopyGuardFaults();

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_COPY_WATCH_H_
