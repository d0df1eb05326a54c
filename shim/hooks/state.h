// State shared by every hook: the real functions behind the interposed ones,
// the configuration, the two address registries and the per-thread guard.
//
// Start-up rules (the library runs inside a program someone else wrote):
// until Init() has run, hooks only forward; nothing here prints except the
// single configuration warning; the environment is read once, in Init().
#ifndef PINSHIM_SHIM_HOOKS_STATE_H_
#define PINSHIM_SHIM_HOOKS_STATE_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/core/config.h"
#include "shim/core/events.h"
#include "shim/core/macros.h"
#include "shim/core/reentry.h"
#include "shim/core/registry.h"

namespace pinshim {

// The libc functions pinshim interposes, as found after it (RTLD_NEXT), so a
// second preloaded allocator keeps working.
struct RealFunctions {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  int (*posix_memalign)(void**, size_t, size_t);
  void* (*aligned_alloc)(size_t, size_t);
  void* (*memalign)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*malloc_usable_size)(void*);
  void* (*mmap)(void*, size_t, int, int, int, off_t);
  int (*munmap)(void*, size_t);
  void* (*mremap)(void*, size_t, size_t, int, ...);
  void* (*mmap64)(void*, size_t, int, int, int, off64_t);
  int (*madvise)(void*, size_t, int);
  int (*posix_madvise)(void*, size_t, int);
  ssize_t (*process_madvise)(int, const struct iovec*, size_t, int, unsigned int);  // may be null
  void* (*shmat)(int, const void*, int);
  int (*brk)(void*);
  void* (*sbrk)(intptr_t);
  pid_t (*fork)();
  void* (*dlopen)(const char*, int);
  int (*dlclose)(void*);
};
extern RealFunctions g_real PINSHIM_HIDDEN;

// Resolves g_real (idempotent). Allocations made by the resolution itself
// are served from a small static pool.
void ResolveRealFunctions() PINSHIM_HIDDEN;

// Looks up the real exec* and _exit functions (process_hooks.cc); Init
// calls it, so that no hook has to call dlsym in a vfork child.
void ResolveExecFunctions() PINSHIM_HIDDEN;
// Registers pinshim's one fork handler (fork_handlers.cc); Init calls it
// before any thread of pinshim's iterates modules.
void InstallForkHandlers() PINSHIM_HIDDEN;

// pinshim's own threads (threads.cc). The metrics thread runs in enforce
// mode with PINSHIM_METRICS_FILE (a fork child starts its own); the trim
// thread in optimize mode with PINSHIM_IDLE_TRIM_S (false: not started).
void StartMetricsThread() PINSHIM_HIDDEN;
// Live metrics in every mode (metrics_file.cc): UseLiveMetrics at start-up
// when PINSHIM_METRICS_FILE is set; WriteLiveMetricsFile writes observe and
// optimize mode's file (enforce mode's budget writes its own).
void UseLiveMetrics() PINSHIM_HIDDEN;
void WriteLiveMetricsFile() PINSHIM_HIDDEN;
bool StartTrimThread() PINSHIM_HIDDEN;

// Writes the summary PINSHIM_SUMMARY asks for, at exit (summary.cc).
void WriteSummaryAtExit() PINSHIM_HIDDEN;

// Reads the configuration and sets up the registries (idempotent, thread-safe).
void Init() PINSHIM_HIDDEN;

extern Config g_config PINSHIM_HIDDEN;
extern std::atomic<bool> g_initialized PINSHIM_HIDDEN;
// Allocations at or above this size are tracked; "never" until Init().
extern uint64_t g_track_threshold PINSHIM_HIDDEN;
// Set once the process has touched the CUDA driver through a hook.
extern std::atomic<bool> g_cuda_seen PINSHIM_HIDDEN;
// Called on the process's contact with the CUDA driver through a hook. A
// process that never touches CUDA prints nothing and, at exit or exec,
// removes its trace file (only the process that owns the trace: see
// process_hooks.cc).
void NoteCudaSeen() PINSHIM_HIDDEN;
void DropTraceIfNoCuda() PINSHIM_HIDDEN;

// Enforce mode with a budget that Init() could set up.
extern bool g_enforce PINSHIM_HIDDEN;
// Optimize mode configured (the engine starts once the driver is in use).
extern bool g_optimize PINSHIM_HIDDEN;
// Optimize mode: stream captures the program began and has not ended yet
// (sync_hooks.cc). While any is open, a copy asks whether its own stream
// captures (copy_hooks.cc: IntoCapture); otherwise it asks nothing.
extern std::atomic<int> g_open_captures PINSHIM_HIDDEN;
// Optimize mode redirects hot allocation sites into the host arena (set
// once at start, before the program runs). The arena's blocks stay the
// arena's in a fork child, so this stays set there.
extern bool g_redirect_sites PINSHIM_HIDDEN;
// Large allocations capture their call site (to learn which sites are hot
// and serve those from the arena): set with g_redirect_sites, cleared in a
// fork child, whose engine is off for good (nothing there is served from
// the arena or pinned in place, so a site would be captured for nothing:
// a DataLoader worker allocates every sample so).
extern bool g_capture_sites PINSHIM_HIDDEN;
// The copy guard may guard the end pages of a malloc chunk glibc mapped for
// itself (libc_hooks.cc: NoteOwnMapping): set at start-up with
// PINSHIM_COPY_GUARD when every real allocation function is the C
// library's, so that a chunk's header is glibc's and its bits mean what
// glibc says.
extern bool g_guard_malloc_chunks PINSHIM_HIDDEN;

// Starts optimize mode's engine with the real driver functions, once the
// program has used the driver (idempotent; false while it cannot start).
bool EnsureOptimizerStarted() PINSHIM_HIDDEN;

// allocations: malloc/mmap (pageable), pinned and device allocations.
// registrations: cuMemHostRegister'd ranges (and pinshim's own, later).
extern Registry g_allocations PINSHIM_HIDDEN;
extern Registry g_registrations PINSHIM_HIDDEN;
// Tracked malloc-family allocations alive; free() skips its size check at 0.
extern std::atomic<uint64_t> g_tracked_mallocs PINSHIM_HIDDEN;

// A hook entered while this thread holds Reentry::kHook (shim/core/reentry.h)
// was reached from inside another hook, the driver or pinshim itself: it
// forwards without counting or tracking, so each call of the program counts
// once.

uint64_t NextAllocId() PINSHIM_HIDDEN;

// What kind of host memory `p` is, with its flags and owning allocation.
MemKind ClassifyHost(const void* p, uint32_t* flags, uint64_t* alloc_id) PINSHIM_HIDDEN;

// The bootstrap pool (see ResolveRealFunctions): allocations made while
// g_real is being resolved, on the thread resolving it (Resolving()).
bool InBootstrapPool(const void* p) PINSHIM_HIDDEN;
void* BootstrapAlloc(size_t bytes) PINSHIM_HIDDEN;
size_t BootstrapSize(const void* p) PINSHIM_HIDDEN;
bool Resolving() PINSHIM_HIDDEN;

// Whether g_real is usable, resolving it first if need be; false on the
// thread that is resolving it (its allocations go to the bootstrap pool).
inline bool EnsureReal() {
  if (PINSHIM_LIKELY(__atomic_load_n(&g_real.malloc, __ATOMIC_ACQUIRE) != nullptr)) return true;
  if (Resolving()) return false;
  ResolveRealFunctions();
  return __atomic_load_n(&g_real.malloc, __ATOMIC_ACQUIRE) != nullptr;
}

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_STATE_H_
