// The copy path: what happens to one copy between the hook that caught it
// and the driver. A copy wrapper (shim/hooks/copy_hooks.cc) describes the
// call (CopyCall: what it touches, worked out before the call), hands it to
// RunCopy with the driver call it would make, and records what RunCopy
// reports. RunCopy owns every decision optimize mode makes about a copy:
//   - a copy into a stream capture is the driver's, on the program's own
//     memory (what pinshim pinned in place under it is unpinned for the
//     call, the arena's pinned again after it);
//   - pinning a hot buffer in place (registration cache), copies of memory
//     pinned in place (arena, cache) with pageable semantics, and the
//     eager head of an asynchronous upload of such memory;
//   - a pool block's copy that runs past its requested size is refused, as
//     the driver refuses it for its own allocation;
//   - staging through pinned rings;
//   - the self-check (path_judge.h): each path is taken only where it is
//     measured not to lose to the driver's own.
// Without optimize mode (a null engine) it is the driver call.
#ifndef PINSHIM_SHIM_OPTIMIZE_COPY_PATH_H_
#define PINSHIM_SHIM_OPTIMIZE_COPY_PATH_H_

#include <cuda.h>

#include <cstdint>

#include "shim/core/events.h"
#include "shim/core/function_ref.h"
#include "shim/optimize/stager.h"

namespace pinshim {
namespace optimize {

class Optimizer;

// What a copy touches, worked out before the call (the call may free
// nothing, but the program's view of its memory is the one at the time of
// the call).
struct CopyShape {
  MemKind src = MemKind::kDevice;
  MemKind dst = MemKind::kDevice;
  uint32_t host_flags = 0;
  uint64_t host_alloc = 0;
  uint64_t bytes = 0;
  const void* host_ptr = nullptr;  // the host side, when there is one
  uint64_t host_span = 0;          // bytes from host_ptr the copy may touch; 0: `bytes`
  // The other host side of a host-to-host copy (the same span at most).
  const void* other_host = nullptr;
};

inline bool IsDeviceSide(MemKind k) { return k == MemKind::kDevice || k == MemKind::kManaged; }

inline CopyDir DirOf(const CopyShape& s) {
  const bool src_dev = IsDeviceSide(s.src), dst_dev = IsDeviceSide(s.dst);
  if (!src_dev && dst_dev) return CopyDir::kHostToDevice;
  if (src_dev && !dst_dev) return CopyDir::kDeviceToHost;
  if (!src_dev && !dst_dev) return CopyDir::kHostToHost;
  return CopyDir::kDeviceToDevice;
}

enum class CopyForm : uint8_t {
  kPlain,      // 2D, 3D, arrays, device to device: may be pinned in place or refused
  kStageable,  // 1D between one host range and device memory: staging too
  kBatch,      // many operands: waited for once it succeeded (see RunCopy)
};

struct CopyCall {
  CopyShape shape;
  CopyForm form = CopyForm::kPlain;
  bool async = false;
  CUstream stream = nullptr;  // as the program named it; null for synchronous calls
  bool per_thread = false;    // a _ptds/_ptsz entry point
  bool capture_open = false;  // the program has a stream capture open (any stream)
  void* host = nullptr;       // kStageable: the host side ...
  CUdeviceptr dev = 0;        // ... and the device side
  // Out: whether it was staged, and how.
  bool staged = false;
  StagedInfo staged_info;
};

using DriverCall = FunctionRef<CUresult()>;

// Runs the copy: through `engine` when optimize mode is on for it (an
// attached engine; null otherwise), else driver(). May change the shape's
// memory kinds and flags to what the driver saw (memory pinned in place
// for this copy; memory unpinned for a capture). Returns the call's result:
// the driver's, or the error the driver gives for a copy it would refuse.
// A batch that succeeded is waited for, so no operand pinshim pinned or
// pooled is in use when it returns (as with pageable operands).
CUresult RunCopy(Optimizer* engine, CopyCall* call, DriverCall driver);

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_COPY_PATH_H_
