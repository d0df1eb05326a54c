// Interposed libc allocation calls. Below the tracking threshold they cost
// one comparison on top of the real call; at or above it the allocation is
// entered into the registry (and removed again before the allocator can
// reuse the memory).
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstring>

#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {

void* BootstrapAlloc(size_t bytes);
size_t BootstrapSize(const void* p);
bool Resolving();

namespace {

inline bool EnsureReal() {
  if (PINSHIM_LIKELY(__atomic_load_n(&g_real.malloc, __ATOMIC_ACQUIRE) != nullptr)) return true;
  if (Resolving()) return false;
  ResolveRealFunctions();
  return __atomic_load_n(&g_real.malloc, __ATOMIC_ACQUIRE) != nullptr;
}

// The address span that has ever held a tracked malloc block. Most frees
// are of small blocks outside it and skip the size check entirely.
std::atomic<uintptr_t> g_tracked_lo{UINTPTR_MAX};
std::atomic<uintptr_t> g_tracked_hi{0};

void WidenTrackedSpan(uintptr_t lo, uintptr_t hi) {
  uintptr_t cur = g_tracked_lo.load(std::memory_order_relaxed);
  while (lo < cur && !g_tracked_lo.compare_exchange_weak(cur, lo)) {
  }
  cur = g_tracked_hi.load(std::memory_order_relaxed);
  while (hi > cur && !g_tracked_hi.compare_exchange_weak(cur, hi)) {
  }
}

// Tells the trace about a tracked allocation or its release.
void RecordRelease(const Region& r, bool is_free) {
  if (!trace::RecorderActive()) return;
  HostAllocEvent e;
  e.alloc_id = r.id;
  e.ptr = reinterpret_cast<void*>(r.start);
  e.bytes = r.bytes;
  e.is_free = is_free;
  e.source = r.source == kSourceMmap ? 1 : 0;
  trace::RecordHostAlloc(e);
}

void RecordRemovedPart(void*, const Region& part) { RecordRelease(part, true); }

void Track(void* p, size_t bytes, RegionSource source) {
  // Allocations made inside the driver or inside pinshim (the trace recorder
  // included, on any thread) are not the program's.
  if (p == nullptr || t_depth > 0 || trace::InsideRecorder()) return;
  DepthGuard guard;
  Region r;
  r.start = reinterpret_cast<uintptr_t>(p);
  r.bytes = bytes;
  r.id = NextAllocId();
  r.kind = MemKind::kPageable;
  r.source = source;
  if (source == kSourceMalloc) WidenTrackedSpan(r.start, r.start + bytes);
  if (g_allocations.Insert(r) && source == kSourceMalloc) {
    g_tracked_mallocs.fetch_add(1, std::memory_order_relaxed);
  }
  RecordRelease(r, false);
}

// Removes a tracked malloc-family block starting at p, keeping a copy.
bool Untrack(void* p, Region* out) {
  Region r;
  if (!g_allocations.Lookup(reinterpret_cast<uintptr_t>(p), &r) ||
      r.start != reinterpret_cast<uintptr_t>(p) || r.source != kSourceMalloc) {
    return false;
  }
  if (!g_allocations.Remove(r.start, out)) return false;
  g_tracked_mallocs.fetch_sub(1, std::memory_order_relaxed);
  RecordRelease(r, true);
  return true;
}

// Optimize mode: pinshim's registration of memory about to go back to the
// allocator or the kernel is dropped first (after copies in flight on it
// finished), so freed memory is never left pinned.
inline void ReleasePinning(const void* p, uint64_t bytes) {
  if (g_optimize && t_depth == 0) {
    DepthGuard guard;
    optimize::Optimizer::Process().OnRelease(p, bytes);
  }
}

inline bool MaybeTracked(void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a < g_tracked_lo.load(std::memory_order_relaxed) ||
      a >= g_tracked_hi.load(std::memory_order_relaxed)) {
    return false;
  }
  return g_tracked_mallocs.load(std::memory_order_relaxed) != 0 &&
         g_real.malloc_usable_size(p) >= g_track_threshold;
}

inline void TrackIfLarge(void* p, size_t bytes) {
  if (PINSHIM_UNLIKELY(bytes >= g_track_threshold)) Track(p, bytes, kSourceMalloc);
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the hooks below are extern "C"

extern "C" {

void* malloc(size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return BootstrapAlloc(n);
  void* p = g_real.malloc(n);
  TrackIfLarge(p, n);
  return p;
}

void* calloc(size_t count, size_t size) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) return nullptr;
    return BootstrapAlloc(total);  // the static pool starts zeroed
  }
  void* p = g_real.calloc(count, size);
  size_t total;
  if (p != nullptr && !__builtin_mul_overflow(count, size, &total)) TrackIfLarge(p, total);
  return p;
}

void free(void* p) {
  if (p == nullptr || InBootstrapPool(p)) return;
  if (PINSHIM_UNLIKELY(!EnsureReal())) return;  // cannot happen for a real pointer
  if (PINSHIM_UNLIKELY(MaybeTracked(p))) {
    Region r;
    if (Untrack(p, &r)) ReleasePinning(p, r.bytes);
  }
  g_real.free(p);
}

void* realloc(void* p, size_t n) {
  if (p != nullptr && InBootstrapPool(p)) {
    void* q = malloc(n);
    if (q != nullptr) {
      size_t old = BootstrapSize(p);
      memcpy(q, p, old < n ? old : n);
    }
    return q;
  }
  if (PINSHIM_UNLIKELY(!EnsureReal())) return BootstrapAlloc(n);
  Region old;
  bool had = p != nullptr && MaybeTracked(p) && Untrack(p, &old);
  if (had) ReleasePinning(p, old.bytes);
  void* q = g_real.realloc(p, n);
  if (q == nullptr) {
    // Failed (or n == 0 and p freed): on failure the old block is intact.
    if (had && n != 0) Track(p, old.bytes, kSourceMalloc);
    return q;
  }
  TrackIfLarge(q, n);
  return q;
}

int posix_memalign(void** out, size_t align, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) {
    *out = BootstrapAlloc(n);  // 16-byte aligned; early callers ask no more
    return *out ? 0 : ENOMEM;
  }
  int r = g_real.posix_memalign(out, align, n);
  if (r == 0) TrackIfLarge(*out, n);
  return r;
}

void* aligned_alloc(size_t align, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return BootstrapAlloc(n);
  void* p = g_real.aligned_alloc(align, n);
  TrackIfLarge(p, n);
  return p;
}

void* memalign(size_t align, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return BootstrapAlloc(n);
  void* p = g_real.memalign(align, n);
  TrackIfLarge(p, n);
  return p;
}

void* valloc(size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return nullptr;
  void* p = g_real.valloc(n);
  TrackIfLarge(p, n);
  return p;
}

void* pvalloc(size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return nullptr;
  void* p = g_real.pvalloc(n);
  TrackIfLarge(p, n);
  return p;
}

size_t malloc_usable_size(void* p) {
  if (p != nullptr && InBootstrapPool(p)) return BootstrapSize(p);
  if (PINSHIM_UNLIKELY(!EnsureReal())) return 0;
  return g_real.malloc_usable_size(p);
}

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) {
    return reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
  }
  void* p = g_real.mmap(addr, len, prot, flags, fd, off);
  // PROT_NONE mappings are address-space reservations, not memory to copy.
  if (p != MAP_FAILED && prot != PROT_NONE && len >= g_track_threshold) {
    Track(p, len, kSourceMmap);
  }
  return p;
}

int munmap(void* addr, size_t len) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return static_cast<int>(syscall(SYS_munmap, addr, len));
  if (t_depth == 0 && g_allocations.size() != 0) {
    DepthGuard guard;
    g_allocations.RemoveSpan(reinterpret_cast<uintptr_t>(addr), len, RecordRemovedPart, nullptr);
  }
  ReleasePinning(addr, len);
  return g_real.munmap(addr, len);
}

void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  void* new_addr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    new_addr = va_arg(ap, void*);
    va_end(ap);
  }
  if (PINSHIM_UNLIKELY(!EnsureReal())) {
    return reinterpret_cast<void*>(syscall(SYS_mremap, old, old_len, new_len, flags, new_addr));
  }
  Region before;
  bool had = false;
  if (t_depth == 0 && g_allocations.size() != 0) {
    DepthGuard guard;
    had = g_allocations.Lookup(reinterpret_cast<uintptr_t>(old), &before);
    g_allocations.RemoveSpan(reinterpret_cast<uintptr_t>(old), old_len, RecordRemovedPart, nullptr);
  }
  ReleasePinning(old, old_len);
  void* p = g_real.mremap(old, old_len, new_len, flags, new_addr);
  if (p == MAP_FAILED) {
    if (had) Track(old, old_len, static_cast<RegionSource>(before.source));
  } else if (new_len >= g_track_threshold) {
    Track(p, new_len, kSourceMmap);
  }
  return p;
}

// exec replaces the process without running exit handlers: the trace is
// flushed first (and stays open, should exec fail).
int execve(const char* path, char* const argv[], char* const envp[]) {
  static int (*real)(const char*, char* const[], char* const[]) = nullptr;
  if (real == nullptr) {
    real = reinterpret_cast<decltype(real)>(dlsym(RTLD_NEXT, "execve"));
  }
  DropTraceIfNoCuda();
  trace::RecorderBeforeExec();
  return real(path, argv, envp);
}

int execv(const char* path, char* const argv[]) {
  static int (*real)(const char*, char* const[]) = nullptr;
  if (real == nullptr) real = reinterpret_cast<decltype(real)>(dlsym(RTLD_NEXT, "execv"));
  DropTraceIfNoCuda();
  trace::RecorderBeforeExec();
  return real(path, argv);
}

int execvp(const char* file, char* const argv[]) {
  static int (*real)(const char*, char* const[]) = nullptr;
  if (real == nullptr) real = reinterpret_cast<decltype(real)>(dlsym(RTLD_NEXT, "execvp"));
  DropTraceIfNoCuda();
  trace::RecorderBeforeExec();
  return real(file, argv);
}

int execvpe(const char* file, char* const argv[], char* const envp[]) {
  static int (*real)(const char*, char* const[], char* const[]) = nullptr;
  if (real == nullptr) real = reinterpret_cast<decltype(real)>(dlsym(RTLD_NEXT, "execvpe"));
  DropTraceIfNoCuda();
  trace::RecorderBeforeExec();
  return real(file, argv, envp);
}

// _exit skips exit handlers and destructors: the trace is finished here (a
// forked child that never touched CUDA removes its file).
[[noreturn]] static void ExitNow(const char* name, int status) {
  static void (*real_exit)(int) = nullptr;
  if (real_exit == nullptr) real_exit = reinterpret_cast<void (*)(int)>(dlsym(RTLD_NEXT, name));
  if (t_depth == 0) {
    DepthGuard guard;
    DropTraceIfNoCuda();
    trace::StopRecorder();
  }
  if (real_exit != nullptr) real_exit(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

void _exit(int status) { ExitNow("_exit", status); }

void _Exit(int status) { ExitNow("_Exit", status); }

pid_t fork() {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return static_cast<pid_t>(syscall(SYS_fork));
  // pthread_atfork handlers (registered by Init) keep the registries
  // consistent across the fork and reset the child's counters.
  return g_real.fork();
}

}  // extern "C"
