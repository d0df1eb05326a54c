// Initialization, devices, contexts and error strings.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

namespace behavior = ::fakecuda::behavior;

// FAKECUDA_DEVICES, read at cuInit; anything unparsable means the default.
int DeviceCountFromEnvironment() {
  const char* text = std::getenv("FAKECUDA_DEVICES");
  if (text == nullptr || *text == '\0') return behavior::kDefaultDeviceCount;
  char* end = nullptr;
  long count = std::strtol(text, &end, 10);
  if (*end != '\0' || count < 0 || count > behavior::kMaxDeviceCount) {
    return behavior::kDefaultDeviceCount;
  }
  return static_cast<int>(count);
}

CUresult CheckDevice(CUdevice dev) {
  if (CUresult err = RequireInit()) return err;
  State& s = S();
  if (dev < 0 || dev >= s.device_count) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

// A UUID of its own per device: "fakecuda", zeros, then the device number.
CUresult DeviceUuid(CUuuid* uuid, CUdevice dev) {
  if (CUresult err = RequireInit()) return err;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = CheckDevice(dev)) return err;
  std::memset(uuid->bytes, 0, sizeof(uuid->bytes));
  std::memcpy(uuid->bytes, "fakecuda", 8);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

// An H200-like device; attributes not listed read 0.
int AttributeValue(CUdevice_attribute attribute, CUdevice dev) {
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + dev;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    default: return 0;
  }
}

// Makes `ctx` an active context of `dev` with a fresh legacy stream: a new
// context, a reused one (kReuseDestroyedContextHandles), or a primary context
// retained again. State::mu must be held.
void ActivateContextLocked(State& s, Context* ctx, CUdevice dev, unsigned flags, bool primary) {
  ctx->device = dev;
  ctx->flags = flags;
  ctx->primary = primary;
  ctx->legacy = NewStreamLocked(ctx, 0, Stream::Kind::kLegacy);
  ctx->fault.store(CUDA_SUCCESS);
  ctx->alive.store(true);
  s.contexts.insert(ctx);
}

// A new context of `dev`. State::mu must be held.
Context* NewContextLocked(State& s, CUdevice dev, unsigned flags, bool primary) {
  Context* ctx;
  if (!primary && behavior::kReuseDestroyedContextHandles && !s.spare_contexts.empty()) {
    ctx = s.spare_contexts.back();
    s.spare_contexts.pop_back();
  } else {
    ctx = new Context;
  }
  ctx->primary_refs = 0;
  ActivateContextLocked(s, ctx, dev, flags, primary);
  return ctx;
}

// Destroys what `ctx` owns: its work finishes, then its streams and memory
// go, and the handle stops being valid. State::lifecycle_mu must be held
// (and State::mu not).
void TeardownContext(State& s, Context* ctx) {
  SynchronizeContext(ctx);
  RetireContextStreams(ctx);
  ReleaseContextMemory(ctx);  // Documented: destroying a context frees its allocations.
  std::lock_guard<std::mutex> lock(s.mu);
  s.contexts.erase(ctx);
  ctx->alive.store(false);
}

// A context handle the program passed in, if it is live.
CUresult CheckContext(CUcontext handle, Context** out) {
  if (CUresult err = RequireInit()) return err;
  auto* ctx = reinterpret_cast<Context*>(handle);
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ctx == nullptr || s.contexts.count(ctx) == 0) return behavior::kBadContextHandle;
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult CreateContext(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (CUresult err = RequireInit()) return err;
  if (pctx == nullptr || (flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult err = CheckDevice(dev)) return err;
  State& s = S();
  Context* ctx;
  {
    std::lock_guard<std::mutex> life(s.lifecycle_mu);
    std::lock_guard<std::mutex> lock(s.mu);
    ctx = NewContextLocked(s, dev, flags, /*primary=*/false);
  }
  T().stack.push_back(ctx);
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

CUresult DestroyContext(CUcontext handle) {
  Context* ctx;
  if (CUresult err = CheckContext(handle, &ctx)) return err;
  if (ctx->primary) return behavior::kBadContextHandle;
  State& s = S();
  {
    std::lock_guard<std::mutex> life(s.lifecycle_mu);
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.contexts.count(ctx) == 0) return behavior::kBadContextHandle;  // Lost a race.
    }
    TeardownContext(s, ctx);
    std::lock_guard<std::mutex> lock(s.mu);
    s.spare_contexts.push_back(ctx);
  }
  auto& stack = T().stack;
  stack.erase(std::remove(stack.begin(), stack.end(), ctx), stack.end());
  return CUDA_SUCCESS;
}

CUresult PushContext(CUcontext handle) {
  if (CUresult err = RequireInit()) return err;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  if (CUresult err = CheckContext(handle, &ctx)) return err;
  T().stack.push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult PopContext(CUcontext* pctx) {
  if (CUresult err = RequireInit()) return err;
  auto& stack = T().stack;
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult ContextDevice(CUdevice* device, CUcontext handle) {
  if (CUresult err = RequireInit()) return err;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx;
  CUresult err = handle == nullptr ? CurrentContext(&ctx) : CheckContext(handle, &ctx);
  if (err != CUDA_SUCCESS) return err;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUresult Synchronize(CUcontext handle) {
  Context* ctx;
  CUresult err = handle == nullptr ? CurrentContext(&ctx) : CheckContext(handle, &ctx);
  if (err != CUDA_SUCCESS) return err;
  SynchronizeContext(ctx);
  return ctx->fault.load();
}

CUresult RetainPrimary(CUcontext* pctx, CUdevice dev) {
  if (CUresult err = RequireInit()) return err;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = CheckDevice(dev)) return err;
  State& s = S();
  std::lock_guard<std::mutex> life(s.lifecycle_mu);
  std::lock_guard<std::mutex> lock(s.mu);
  Context*& ctx = s.primary[dev];
  if (ctx == nullptr) {
    ctx = NewContextLocked(s, dev, 0, /*primary=*/true);
  } else if (!ctx->alive.load()) {
    ActivateContextLocked(s, ctx, dev, ctx->flags, /*primary=*/true);  // Same handle.
  }
  ++ctx->primary_refs;
  *pctx = reinterpret_cast<CUcontext>(ctx);
  return CUDA_SUCCESS;
}

// Documented: the primary context is reset once its last reference is
// released. It is not popped from any thread's stack.
CUresult ReleasePrimary(CUdevice dev) {
  if (CUresult err = CheckDevice(dev)) return err;
  State& s = S();
  std::lock_guard<std::mutex> life(s.lifecycle_mu);
  Context* ctx;
  bool last;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ctx = s.primary[dev];
    if (ctx == nullptr || ctx->primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    --ctx->primary_refs;
    last = ctx->primary_refs == 0 && ctx->alive.load();
  }
  if (last) TeardownContext(s, ctx);
  return CUDA_SUCCESS;
}

// Documented: destroys the primary context's resources; references stay
// counted (driver_behavior.h). Not popped from any thread's stack either.
CUresult ResetPrimary(CUdevice dev) {
  if (CUresult err = CheckDevice(dev)) return err;
  State& s = S();
  std::lock_guard<std::mutex> life(s.lifecycle_mu);
  Context* ctx;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ctx = s.primary[dev];
    if (ctx == nullptr || !ctx->alive.load()) return behavior::kResetInactivePrimary;
  }
  TeardownContext(s, ctx);
  return CUDA_SUCCESS;
}

CUresult PrimaryState(CUdevice dev, unsigned* flags, int* active) {
  if (CUresult err = RequireInit()) return err;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = CheckDevice(dev)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  const Context* ctx = s.primary[dev];
  *flags = ctx != nullptr ? ctx->flags : 0;  // cuDevicePrimaryCtxSetFlags is not simulated.
  *active = ctx != nullptr && ctx->alive.load() ? 1 : 0;
  return CUDA_SUCCESS;
}

// ---- Error strings ----

#define FAKECUDA_ERRORS(X)                                                  \
  X(CUDA_SUCCESS, "no error")                                               \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                           \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                              \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                     \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                       \
  X(CUDA_ERROR_PROFILER_DISABLED, nullptr)                                  \
  X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, nullptr)                           \
  X(CUDA_ERROR_PROFILER_ALREADY_STARTED, nullptr)                           \
  X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, nullptr)                           \
  X(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")               \
  X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, nullptr)                         \
  X(CUDA_ERROR_DEVICE_UNAVAILABLE, nullptr)                                 \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")             \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                    \
  X(CUDA_ERROR_DEVICE_NOT_LICENSED, nullptr)                                \
  X(CUDA_ERROR_INVALID_IMAGE, nullptr)                                      \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                   \
  X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, nullptr)                            \
  X(CUDA_ERROR_MAP_FAILED, nullptr)                                         \
  X(CUDA_ERROR_UNMAP_FAILED, nullptr)                                       \
  X(CUDA_ERROR_ARRAY_IS_MAPPED, nullptr)                                    \
  X(CUDA_ERROR_ALREADY_MAPPED, nullptr)                                     \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, nullptr)                                  \
  X(CUDA_ERROR_ALREADY_ACQUIRED, nullptr)                                   \
  X(CUDA_ERROR_NOT_MAPPED, nullptr)                                         \
  X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, nullptr)                                \
  X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, nullptr)                              \
  X(CUDA_ERROR_ECC_UNCORRECTABLE, nullptr)                                  \
  X(CUDA_ERROR_UNSUPPORTED_LIMIT, nullptr)                                  \
  X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, nullptr)                             \
  X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, nullptr)                            \
  X(CUDA_ERROR_INVALID_PTX, nullptr)                                        \
  X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, nullptr)                           \
  X(CUDA_ERROR_NVLINK_UNCORRECTABLE, nullptr)                               \
  X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, nullptr)                             \
  X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, nullptr)                            \
  X(CUDA_ERROR_JIT_COMPILATION_DISABLED, nullptr)                           \
  X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, nullptr)                          \
  X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, nullptr)                           \
  X(CUDA_ERROR_CONTAINED, nullptr)                                          \
  X(CUDA_ERROR_INVALID_SOURCE, nullptr)                                     \
  X(CUDA_ERROR_FILE_NOT_FOUND, nullptr)                                     \
  X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, nullptr)                     \
  X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, nullptr)                          \
  X(CUDA_ERROR_OPERATING_SYSTEM, nullptr)                                   \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                   \
  X(CUDA_ERROR_ILLEGAL_STATE, nullptr)                                      \
  X(CUDA_ERROR_LOSSY_QUERY, nullptr)                                        \
  X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                         \
  X(CUDA_ERROR_NOT_READY, "device not ready")                               \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered") \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, nullptr)                            \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, nullptr)                                     \
  X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, nullptr)                      \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, nullptr)                        \
  X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, nullptr)                            \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, nullptr)                             \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                \
  X(CUDA_ERROR_ASSERT, nullptr)                                             \
  X(CUDA_ERROR_TOO_MANY_PEERS, nullptr)                                     \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,                              \
    "part or all of the requested memory range is already mapped")          \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,                                  \
    "pointer does not correspond to a registered memory region")            \
  X(CUDA_ERROR_HARDWARE_STACK_ERROR, nullptr)                               \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION, nullptr)                                \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, nullptr)                                 \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE, nullptr)                              \
  X(CUDA_ERROR_INVALID_PC, nullptr)                                         \
  X(CUDA_ERROR_LAUNCH_FAILED, nullptr)                                      \
  X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, nullptr)                       \
  X(CUDA_ERROR_TENSOR_MEMORY_LEAK, nullptr)                                 \
  X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                    \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                    \
  X(CUDA_ERROR_SYSTEM_NOT_READY, nullptr)                                   \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, nullptr)                             \
  X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, nullptr)                     \
  X(CUDA_ERROR_MPS_CONNECTION_FAILED, nullptr)                              \
  X(CUDA_ERROR_MPS_RPC_FAILURE, nullptr)                                    \
  X(CUDA_ERROR_MPS_SERVER_NOT_READY, nullptr)                               \
  X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, nullptr)                            \
  X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, nullptr)                        \
  X(CUDA_ERROR_MPS_CLIENT_TERMINATED, nullptr)                              \
  X(CUDA_ERROR_CDP_NOT_SUPPORTED, nullptr)                                  \
  X(CUDA_ERROR_CDP_VERSION_MISMATCH, nullptr)                               \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, nullptr)                         \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, nullptr)                         \
  X(CUDA_ERROR_STREAM_CAPTURE_MERGE, nullptr)                               \
  X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, nullptr)                           \
  X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, nullptr)                            \
  X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, nullptr)                           \
  X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, nullptr)                            \
  X(CUDA_ERROR_CAPTURED_EVENT, nullptr)                                     \
  X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, nullptr)                        \
  X(CUDA_ERROR_TIMEOUT, nullptr)                                            \
  X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, nullptr)                          \
  X(CUDA_ERROR_EXTERNAL_DEVICE, nullptr)                                    \
  X(CUDA_ERROR_INVALID_CLUSTER_SIZE, nullptr)                               \
  X(CUDA_ERROR_FUNCTION_NOT_LOADED, nullptr)                                \
  X(CUDA_ERROR_INVALID_RESOURCE_TYPE, nullptr)                              \
  X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, nullptr)                     \
  X(CUDA_ERROR_KEY_ROTATION, nullptr)                                       \
  X(CUDA_ERROR_UNKNOWN, "unknown error")

struct ErrorInfo {
  CUresult code;
  const char* name;
  const char* description;  // nullptr: derived from the name.
};

constexpr ErrorInfo kErrors[] = {
#define FAKECUDA_ERROR_ENTRY(code, text) {code, #code, text},
    FAKECUDA_ERRORS(FAKECUDA_ERROR_ENTRY)
#undef FAKECUDA_ERROR_ENTRY
};
constexpr size_t kErrorCount = sizeof(kErrors) / sizeof(kErrors[0]);

// Descriptions derived from names ("CUDA_ERROR_TOO_MANY_PEERS" -> "too many
// peers") for the codes without a written one; static storage, built once.
char g_derived[kErrorCount][64];
std::once_flag g_derived_once;

void BuildDerivedDescriptions() {
  for (size_t i = 0; i < kErrorCount; ++i) {
    if (kErrors[i].description != nullptr) continue;
    const char* word = kErrors[i].name + std::strlen("CUDA_ERROR_");
    size_t n = 0;
    for (; word[n] != '\0' && n + 1 < sizeof(g_derived[i]); ++n) {
      char c = word[n];
      g_derived[i][n] =
          c == '_' ? ' ' : static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    g_derived[i][n] = '\0';
  }
}

const ErrorInfo* FindError(CUresult code, size_t* index) {
  for (size_t i = 0; i < kErrorCount; ++i) {
    if (kErrors[i].code == code) {
      *index = i;
      return &kErrors[i];
    }
  }
  return nullptr;
}

}  // namespace
}  // namespace fakecuda

using fakecuda::Context;
using fakecuda::S;
using fakecuda::State;
using fakecuda::T;
namespace behavior = fakecuda::behavior;

extern "C" {

CUresult cuInit(unsigned int Flags) {
  FAKECUDA_ENTER("cuInit");
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.initialized.load()) return CUDA_SUCCESS;
  int count = fakecuda::DeviceCountFromEnvironment();
  if (count == 0) return CUDA_ERROR_NO_DEVICE;
  long page = sysconf(_SC_PAGESIZE);
  s.page = page > 0 ? static_cast<size_t>(page) : 4096;
  if (CUresult err = fakecuda::ReserveArena(s)) return err;
  s.device_count = count;
  s.primary.assign(count, nullptr);
  s.device_used.assign(count, 0);
  s.initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* driverVersion) {
  FAKECUDA_ENTER("cuDriverGetVersion");
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = behavior::kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  FAKECUDA_ENTER("cuDeviceGet");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = fakecuda::CheckDevice(ordinal)) return err;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  FAKECUDA_ENTER("cuDeviceGetCount");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = S().device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  FAKECUDA_ENTER("cuDeviceGetName");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = fakecuda::CheckDevice(dev)) return err;
  std::snprintf(name, static_cast<size_t>(len), "FakeCUDA H200 (device %d)", dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  FAKECUDA_ENTER("cuDeviceGetAttribute");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (pi == nullptr || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult err = fakecuda::CheckDevice(dev)) return err;
  *pi = fakecuda::AttributeValue(attrib, dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  FAKECUDA_ENTER("cuDeviceGetUuid");
  return fakecuda::DeviceUuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  FAKECUDA_ENTER("cuDeviceGetUuid");
  return fakecuda::DeviceUuid(uuid, dev);
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  FAKECUDA_ENTER("cuDeviceTotalMem");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult err = fakecuda::CheckDevice(dev)) return err;
  *bytes = behavior::kDeviceTotalMem;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  FAKECUDA_ENTER("cuDevicePrimaryCtxRetain");
  return fakecuda::RetainPrimary(pctx, dev);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  FAKECUDA_ENTER("cuDevicePrimaryCtxRelease");
  return fakecuda::ReleasePrimary(dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FAKECUDA_ENTER("cuDevicePrimaryCtxRelease");
  return fakecuda::ReleasePrimary(dev);
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  FAKECUDA_ENTER("cuDevicePrimaryCtxReset");
  return fakecuda::ResetPrimary(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  FAKECUDA_ENTER("cuDevicePrimaryCtxReset");
  return fakecuda::ResetPrimary(dev);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  FAKECUDA_ENTER("cuDevicePrimaryCtxGetState");
  return fakecuda::PrimaryState(dev, flags, active);
}

CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  FAKECUDA_ENTER("cuCtxCreate");
  return fakecuda::CreateContext(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                        unsigned int flags, CUdevice dev) {
  FAKECUDA_ENTER("cuCtxCreate");
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return fakecuda::CreateContext(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams, unsigned int flags,
                        CUdevice dev) {
  FAKECUDA_ENTER("cuCtxCreate");
  (void)ctxCreateParams;  // Affinity and CIG settings have nothing to act on here.
  return fakecuda::CreateContext(pctx, flags, dev);
}

CUresult cuCtxDestroy(CUcontext ctx) {
  FAKECUDA_ENTER("cuCtxDestroy");
  return fakecuda::DestroyContext(ctx);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  FAKECUDA_ENTER("cuCtxDestroy");
  return fakecuda::DestroyContext(ctx);
}

CUresult cuCtxPushCurrent(CUcontext ctx) {
  FAKECUDA_ENTER("cuCtxPushCurrent");
  return fakecuda::PushContext(ctx);
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  FAKECUDA_ENTER("cuCtxPushCurrent");
  return fakecuda::PushContext(ctx);
}

CUresult cuCtxPopCurrent(CUcontext* pctx) {
  FAKECUDA_ENTER("cuCtxPopCurrent");
  return fakecuda::PopContext(pctx);
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  FAKECUDA_ENTER("cuCtxPopCurrent");
  return fakecuda::PopContext(pctx);
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  FAKECUDA_ENTER("cuCtxSetCurrent");
  if (CUresult err = fakecuda::RequireInit()) return err;
  auto& stack = T().stack;
  if (ctx == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  Context* checked;
  if (CUresult err = fakecuda::CheckContext(ctx, &checked)) return err;
  if (stack.empty()) {
    stack.push_back(checked);
  } else {
    stack.back() = checked;
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  FAKECUDA_ENTER("cuCtxGetCurrent");
  if (CUresult err = fakecuda::RequireInit()) return err;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& stack = T().stack;
  *pctx = stack.empty() ? nullptr : reinterpret_cast<CUcontext>(stack.back());
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  FAKECUDA_ENTER("cuCtxGetDevice");
  return fakecuda::ContextDevice(device, nullptr);
}

CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  FAKECUDA_ENTER("cuCtxGetDevice");
  return fakecuda::ContextDevice(device, ctx);
}

CUresult cuCtxSynchronize(void) {
  FAKECUDA_ENTER("cuCtxSynchronize");
  return fakecuda::Synchronize(nullptr);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  FAKECUDA_ENTER("cuCtxSynchronize");
  return fakecuda::Synchronize(ctx);
}

CUresult cuGetErrorName(CUresult error, const char** pStr) {
  FAKECUDA_ENTER("cuGetErrorName");
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t index;
  const fakecuda::ErrorInfo* info = fakecuda::FindError(error, &index);
  *pStr = info == nullptr ? nullptr : info->name;
  return info == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** pStr) {
  FAKECUDA_ENTER("cuGetErrorString");
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t index;
  const fakecuda::ErrorInfo* info = fakecuda::FindError(error, &index);
  if (info == nullptr) {
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (info->description != nullptr) {
    *pStr = info->description;
  } else {
    std::call_once(fakecuda::g_derived_once, fakecuda::BuildDerivedDescriptions);
    *pStr = fakecuda::g_derived[index];
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
