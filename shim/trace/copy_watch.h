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
// The guard (PINSHIM_COPY_GUARD=1) also catches plain loads and stores:
// the pages of a watched range are protected (a device-to-host destination
// made inaccessible, a host-to-device source read-only) until the copy is
// pruned or first touched. A device's DMA ignores CPU page protections; the
// simulated driver moves page-locked bytes the same way
// (tests/fakecuda/dma.cc). The guard assumes page-locked memory is
// read-write, as the driver hands it out; a program that mprotects such
// memory itself should not use it.
//
// Which pages: every page wholly inside the range, and each end page it
// shares with other bytes when that page lies inside one of the program's
// cuMemHostAlloc blocks (CopyWatchAddBlock), or inside the mapping glibc
// made for one malloc chunk (CopyWatchAddChunk: the hooks enter a large
// block whose size field has glibc's mapped bit; with the guard on, start-up
// fixes glibc's mmap threshold at the size the hooks call large). The other bytes are then
// the program's own, or that chunk's header and padding, which only the
// allocator reads, for that block, in calls the hooks see first
// (CopyWatchReleaseChunk; malloc_usable_size opens the header's page). Any
// other end page stays open. Such a page may hold the allocator's header
// and other blocks of the heap (a registered malloc'd buffer carved from
// it), which any thread may touch, the driver's among them; the driver's
// threads block every signal (tests/fakecuda/streams.cc does the same), and
// a fault on a thread that blocks SIGSEGV kills the process, with no
// handler asked. So a race on such a page is not seen by the guard.
//
// The SIGSEGV handler (wc_guard.cc) asks CopyGuardFault what a fault was.
// An access to a byte of a watched range is recorded with its faulting
// instruction and that copy's guard is lifted. An access to a guarded end
// page outside every watched range is let through unreported, by opening
// the page for exactly one instruction (single-step, wc_guard.cc) and
// protecting it again, so that the guard stays on for the copy's own
// bytes. Another thread that touches the page while it is open goes
// unreported, never harmed. Where a step cannot be taken (pinshim's trap
// handler replaced, an instruction that touches too many guarded pages),
// the guard gives up that end page for good. Without a single step
// (x86-64 only) no end page is guarded.
//
// Every change to the set of guards is followed by giving the affected
// pages what the live guards want of them, again until no change came in
// between (ApplyProtection): without that, two threads lifting overlapping
// guards could leave a page protected with no guard left to answer its
// fault, and the program would die of it. A fault on a page no live guard
// forbids is healed the same way and retried.
//
// System calls that touch a protected page fail with EFAULT instead of
// faulting. A watched range the hooks see handed to the kernel (write) is
// an access and lifts its copy's guard; other memory the hooks hand to the
// kernel or the driver (DisarmWcGuardFor: write, registrations, copies)
// makes the copies whose guarded end pages it shares give those pages up
// (CopyGuardOpenFor). A system call the hooks do not see (a raw syscall,
// one inside another library) on a guarded page fails with EFAULT while
// the copy is guarded: one reason the guard is opt-in.
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

// Which pages of a watched range WatchCopy protects.
enum class GuardPages {
  kNone,
  kWhole,  // the pages wholly inside it (no single-step available)
  kAll,    // also its end pages, where they lie inside one of the program's
           // cuMemHostAlloc blocks or one chunk's own mapping (see above)
};

// True when some copy is watched (one relaxed load).
bool CopyWatchAny();

// An asynchronous copy with page-locked host side [host, host + bytes) was
// queued on `stream` (the handle as passed); `guard` says which of its
// pages are protected (see above). When the table is full the oldest copy
// is dropped.
void WatchCopy(const void* host, uint64_t bytes, bool device_to_host, const void* stream,
               GuardPages guard);

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

// What a fault was, for the SIGSEGV handler.
enum class GuardFault {
  kNotGuard,  // not the guard's: the program's own fault
  kRetry,     // the guard's, already answered: retry the access
  kRecord,    // an access to a watched copy: record it (its guard is lifted), retry
  kStep,      // an access next to the watched bytes on a guarded page: let it
              // through (CopyGuardOpenPage, one instruction, CopyGuardRestorePage)
};

// From the SIGSEGV handler: a fault at `address` (`write`: a store).
GuardFault CopyGuardFault(uintptr_t address, bool write);

// Opens `page` for one instruction (kStep), and gives it back what the
// live guards want of it once that instruction ran.
void CopyGuardOpenPage(uintptr_t page);
void CopyGuardRestorePage(uintptr_t page);

// Every copy guarding `page` gives it up (a step that cannot be taken).
void CopyGuardDropPage(uintptr_t page);

// The kernel or the driver is about to touch [p, p + len): copies whose
// guarded end pages hold part of it, but none of whose bytes it touches,
// give those pages up. One load when nothing is watched.
void CopyGuardOpenFor(const void* p, size_t len);

// The program's cuMemHostAlloc block [p, p + bytes) was allocated, or
// is about to be released (copy_watch.h: which end pages may be guarded).
// A full table leaves a block out: its ranges keep to whole pages.
void CopyWatchAddBlock(const void* p, uint64_t bytes);
void CopyWatchRemoveBlock(const void* p);

// glibc mapped [map, map + map_bytes) for the one malloc chunk whose
// buffer starts at `buffer` (copy_watch.h: which end pages may be guarded).
// A full table leaves it out.
void CopyWatchAddChunk(const void* buffer, const void* map, uint64_t map_bytes);
// That chunk is about to go back to the allocator (free, realloc): copies on
// its mapping are forgotten, its pages opened and the chunk left out, before
// the allocator reads its header. A few loads when `buffer` is no chunk's.
void CopyWatchReleaseChunk(const void* buffer);

// Guarded pages faulted on so far (tests).
uint64_t CopyGuardFaults();

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_COPY_WATCH_H_
