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

}  // namespace pinshim
