// The events the hooks hand to the core. One vocabulary for the summary, the
// trace writer, the budget ledger and the optimizer, so each hook describes a
// call once and every consumer reads the same facts.
#ifndef PINSHIM_SHIM_CORE_EVENTS_H_
#define PINSHIM_SHIM_CORE_EVENTS_H_

#include <cstddef>
#include <cstdint>

#include "shim/core/optimize_counters.h"  // OptimizeCountersEvent

namespace pinshim {

// What kind of memory one side of a copy, or a pointer, is.
enum class MemKind : uint8_t {
  kPageable = 0,             // ordinary host memory (tracked allocation or not)
  kPinnedByProgram = 1,      // cuMemHostAlloc / cuMemAllocHost by the program
  kRegisteredByProgram = 2,  // cuMemHostRegister by the program
  kPinnedByPinshim = 3,      // pinshim's pool, arena or registration cache
  kManaged = 4,              // cuMemAllocManaged
  kDevice = 5,               // device memory
  // Page-locked host memory of the virtual memory management API: a
  // host-located cuMemCreate allocation where cuMemMap mapped it.
  kVmmHost = 6,
  kPoolHost = 7,  // an allocation from a memory pool with a host location
  kCount = 8,     // the trace packs a kind in 3 bits: no more room
};
// Whether the kind is host memory the driver holds page-locked for the
// program (its allocations, registrations, VMM host memory, host pools):
// copies of it run by DMA from the program's own pages.
inline bool IsProgramPageLocked(MemKind k) {
  return k == MemKind::kPinnedByProgram || k == MemKind::kRegisteredByProgram ||
         k == MemKind::kVmmHost || k == MemKind::kPoolHost;
}
const char* MemKindName(MemKind kind);

enum class CopyDir : uint8_t {
  kHostToDevice = 0,
  kDeviceToHost = 1,
  kHostToHost = 2,
  kDeviceToDevice = 3,
  kCount = 4,
};
const char* CopyDirName(CopyDir dir);

// Every intercepted entry point has an id; names come from the hook table.
using ApiId = uint16_t;

// Flags of a pinned allocation or registration, as the driver defines them
// (CU_MEMHOSTALLOC_* / CU_MEMHOSTREGISTER_*).
struct CopyEvent {
  ApiId api;
  CopyDir dir;
  MemKind src_kind;
  MemKind dst_kind;
  bool async;
  uint64_t bytes;
  const void* host_ptr;    // the host side (source for H2D, destination for D2H); null if none
  uint64_t host_alloc_id;  // tracked allocation owning host_ptr, 0 if untracked
  uint32_t host_flags;     // pinning flags of the host side, if pinned
  void* stream;            // CUstream, null for the default stream
  uint64_t start_ns;       // CLOCK_MONOTONIC
  uint64_t end_ns;
  int result;  // CUresult the program saw
  // Optimize mode ran it through its staging rings (0: it did not): the
  // threads that copied, and the ring chunk size.
  uint32_t staged_workers = 0;
  uint64_t staged_chunk_bytes = 0;
};

enum class PinOp : uint8_t {
  kAlloc = 0,       // cuMemHostAlloc, cuMemAllocHost
  kFree = 1,        // cuMemFreeHost
  kRegister = 2,    // cuMemHostRegister
  kUnregister = 3,  // cuMemHostUnregister
};

const char* PinOpName(PinOp op);

struct PinEvent {
  ApiId api;
  PinOp op;
  void* ptr;
  uint64_t bytes;
  uint32_t flags;
  uint64_t start_ns;
  uint64_t end_ns;
  int result;
};

// A tracked host allocation (at or above the tracking threshold) or its release.
struct HostAllocEvent {
  uint64_t alloc_id;
  void* ptr;
  uint64_t bytes;
  bool is_free;    // true: released (free, realloc away, munmap)
  uint8_t source;  // 0 malloc family, 1 mmap
};

// --- pinshim's own pinning (optimize mode) ---------------------------------
// The values are part of the trace format (kOwnPin events, trace_format.h):
// only ever add new ones.

// Which part of optimize mode pinned the memory.
enum class OwnPinPart : uint8_t {
  kPoolSlab = 0,       // a pool slab, carved into the program's pinned allocations
  kPoolDedicated = 1,  // an exact-size allocation made for one program request
  kCache = 2,          // the registration cache: a hot pageable buffer pinned in place
  kArena = 3,          // a registered extent of the host arena
  kStaging = 4,        // a staging ring of staged copies (pageable memory copied through it)
  kCount = 5,
};
const char* OwnPinPartName(OwnPinPart part);

enum class OwnPinAction : uint8_t {
  kPinned = 0,
  kUnpinned = 1,
  kRefused = 2,  // not pinned; the program's original behaviour goes on
  kRetired = 3,  // pool slab: its pages changed; never reused, given back once free
  kCount = 4,
};
const char* OwnPinActionName(OwnPinAction action);

// Why memory was unpinned (1..15) or a pinning refused (16..).
enum class OwnPinReason : uint8_t {
  kNone = 0,               // pinned
  kProgramReleased = 1,    // freed, reallocated or unmapped by the program
  kEvictedForCap = 2,      // made room under the pin cap (PINSHIM_PIN_CAP)
  kEvictedForBudget = 3,   // given back for enforce mode's budget
  kIdleTrim = 4,           // unused for the idle time
  kContextDestroyed = 5,   // the driver freed it with its context
  kEvictedForTable = 6,    // made room in the registration cache's table
  kProgramRegistered = 7,  // the program registered the memory itself
  // The pages behind the memory changed, or were about to (page_change.h):
  kPageChangeMadvise = 8,          // madvise, posix_madvise or process_madvise
  kPageChangeMapFixed = 9,         // mmap with MAP_FIXED over it
  kPageChangeMremap = 10,          // mremap of it, or onto it
  kPageChangeMunmap = 11,          // munmap of part of it
  kPageChangeShm = 12,             // shmat with SHM_REMAP over it, or shmdt
  kPageChangeBrk = 13,             // brk / sbrk shrinking the heap over it
  kPagesVerifiedChanged = 14,      // PINSHIM_VERIFY_PAGES found other pages there
  kCopyPastRegistration = 15,      // a copy started in it and ran past its end
  kRefusedCap = 16,                // the pin cap, even after eviction
  kRefusedBudget = 17,             // enforce mode's budget
  kRefusedMemlock = 18,            // RLIMIT_MEMLOCK
  kRefusedOutOfMemory = 19,        // the driver (or the system) ran out of memory
  kRefusedAlreadyRegistered = 20,  // the program registered (part of) it already
  kRefusedDriverError = 21,        // any other driver error
  kRefusedNoContext = 22,          // no CUDA context to pin in
  kRefusedTableFull = 23,          // the registration cache's table is full
  kRefusedPageChange = 24,         // a call was changing those pages at the time
  // A copy of it went into a stream capture: unpinned for that call, so the
  // driver captures it as the pageable memory it is to the program (a graph
  // must not hold pinshim's pinning). Treated as a page change (IsPageChange).
  kCopyIntoCapture = 25,
};
// "program_released", "evicted_cap", ..., "cap", "budget", ...; "unknown".
const char* OwnPinReasonName(OwnPinReason reason);

// Whether the reason is a page change (kPageChangeMadvise..kPagesVerifiedChanged,
// and kCopyIntoCapture, which the same machinery handles).
inline bool IsPageChange(OwnPinReason reason) {
  return (reason >= OwnPinReason::kPageChangeMadvise &&
          reason <= OwnPinReason::kPagesVerifiedChanged) ||
         reason == OwnPinReason::kCopyIntoCapture;
}

// One pinning action of pinshim's own: what the pool, the registration
// cache and the arena pinned, unpinned and were refused.
struct OwnPinEvent {
  OwnPinAction action;
  OwnPinPart part;
  OwnPinReason reason;  // kNone for kPinned
  const void* ptr;      // start of the range (of the request, when refused)
  uint64_t bytes;
  // The program allocation it concerns: the cached buffer's allocation id
  // (cache), the program's allocation a dedicated pool allocation served
  // (when released); 0 for slabs and arena extents, which serve many.
  uint64_t alloc_id;
  int result;  // the driver's CUresult (0 when no driver call was made or it succeeded)
  // Page changes: the call's advice or flags (madvise advice, mmap / mremap /
  // shmat flags), 0 otherwise. The recorder also captures the call site of
  // page changes (the program's thread makes them).
  uint32_t detail = 0;
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_EVENTS_H_
