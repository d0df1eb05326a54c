// The events the hooks hand to the core. One vocabulary for the summary, the
// trace writer, the budget ledger and the optimizer, so each hook describes a
// call once and every consumer reads the same facts.
#ifndef PINSHIM_SHIM_CORE_EVENTS_H_
#define PINSHIM_SHIM_CORE_EVENTS_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {

// What kind of memory one side of a copy, or a pointer, is.
enum class MemKind : uint8_t {
  kPageable = 0,        // ordinary host memory (tracked allocation or not)
  kPinnedByProgram = 1, // cuMemHostAlloc / cuMemAllocHost by the program
  kRegisteredByProgram = 2,  // cuMemHostRegister by the program
  kPinnedByPinshim = 3, // pinshim's pool, arena or registration cache
  kManaged = 4,         // cuMemAllocManaged
  kDevice = 5,          // device memory
  kCount = 6,
};
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
  int result;              // CUresult the program saw
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
  bool is_free;  // true: released (free, realloc away, munmap)
  uint8_t source;  // 0 malloc family, 1 mmap
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_EVENTS_H_
