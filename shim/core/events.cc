#include "shim/core/events.h"

namespace pinshim {

const char* MemKindName(MemKind kind) {
  switch (kind) {
    case MemKind::kPageable: return "pageable";
    case MemKind::kPinnedByProgram: return "pinned";
    case MemKind::kRegisteredByProgram: return "registered";
    case MemKind::kPinnedByPinshim: return "pinshim";
    case MemKind::kManaged: return "managed";
    case MemKind::kDevice: return "device";
    case MemKind::kVmmHost: return "vmm-host";
    case MemKind::kPoolHost: return "host-pool";
    default: return "unknown";
  }
}

const char* CopyDirName(CopyDir dir) {
  switch (dir) {
    case CopyDir::kHostToDevice: return "H2D";
    case CopyDir::kDeviceToHost: return "D2H";
    case CopyDir::kHostToHost: return "H2H";
    case CopyDir::kDeviceToDevice: return "D2D";
    default: return "unknown";
  }
}

const char* PinOpName(PinOp op) {
  switch (op) {
    case PinOp::kAlloc: return "alloc";
    case PinOp::kFree: return "free";
    case PinOp::kRegister: return "register";
    case PinOp::kUnregister: return "unregister";
    default: return "unknown";
  }
}

const char* OwnPinPartName(OwnPinPart part) {
  switch (part) {
    case OwnPinPart::kPoolSlab: return "pool_slab";
    case OwnPinPart::kPoolDedicated: return "pool_dedicated";
    case OwnPinPart::kCache: return "cache";
    case OwnPinPart::kArena: return "arena";
    case OwnPinPart::kStaging: return "staging";
    default: return "unknown";
  }
}

const char* OwnPinActionName(OwnPinAction action) {
  switch (action) {
    case OwnPinAction::kPinned: return "pinned";
    case OwnPinAction::kUnpinned: return "unpinned";
    case OwnPinAction::kRefused: return "refused";
    case OwnPinAction::kRetired: return "retired";
    default: return "unknown";
  }
}

const char* OwnPinReasonName(OwnPinReason reason) {
  switch (reason) {
    case OwnPinReason::kNone: return "none";
    case OwnPinReason::kProgramReleased: return "program_released";
    case OwnPinReason::kEvictedForCap: return "evicted_cap";
    case OwnPinReason::kEvictedForBudget: return "evicted_budget";
    case OwnPinReason::kIdleTrim: return "idle_trim";
    case OwnPinReason::kContextDestroyed: return "context_destroyed";
    case OwnPinReason::kEvictedForTable: return "evicted_table_full";
    case OwnPinReason::kProgramRegistered: return "program_registered";
    case OwnPinReason::kPageChangeMadvise: return "page_change_madvise";
    case OwnPinReason::kPageChangeMapFixed: return "page_change_map_fixed";
    case OwnPinReason::kPageChangeMremap: return "page_change_mremap";
    case OwnPinReason::kPageChangeMunmap: return "page_change_munmap";
    case OwnPinReason::kPageChangeShm: return "page_change_shm";
    case OwnPinReason::kPageChangeBrk: return "page_change_brk";
    case OwnPinReason::kPagesVerifiedChanged: return "pages_verified_changed";
    case OwnPinReason::kCopyPastRegistration: return "copy_past_end";
    case OwnPinReason::kRefusedCap: return "cap";
    case OwnPinReason::kRefusedBudget: return "budget";
    case OwnPinReason::kRefusedMemlock: return "memlock_limit";
    case OwnPinReason::kRefusedOutOfMemory: return "out_of_memory";
    case OwnPinReason::kRefusedAlreadyRegistered: return "already_registered";
    case OwnPinReason::kRefusedDriverError: return "driver_error";
    case OwnPinReason::kRefusedNoContext: return "no_context";
    case OwnPinReason::kRefusedTableFull: return "table_full";
    case OwnPinReason::kRefusedPageChange: return "page_change_under_way";
    case OwnPinReason::kCopyIntoCapture: return "copy_into_capture";
    default: return "unknown";
  }
}

}  // namespace pinshim
