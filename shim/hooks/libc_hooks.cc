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

#include "shim/hooks/raw_syscall.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/optimize/page_change_protocol.h"
#include "shim/trace/copy_watch.h"
#include "shim/trace/recorder.h"

namespace pinshim {

namespace {

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

void Track(void* p, size_t bytes, RegionSource source, uint64_t site = 0, uint32_t flags = 0) {
  // Allocations made inside the driver or inside pinshim (the trace recorder
  // included, on any thread) are not the program's.
  if (p == nullptr || Reentered(Reentry::kHook) || trace::InsideRecorder()) return;
  ReentryGuard guard(Reentry::kHook);
  Region r;
  r.start = reinterpret_cast<uintptr_t>(p);
  r.bytes = bytes;
  r.id = NextAllocId();
  r.kind = MemKind::kPageable;
  r.source = source;
  r.site = site;
  r.flags = flags;
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
  if (g_optimize && !Reentered(Reentry::kHook)) {
    ReentryGuard guard(Reentry::kHook);
    optimize::Optimizer::Process().OnRelease(p, bytes);
  }
}

// With the copy guard on, a block too small to track may still be
// registered and under a queued copy: the watch forgets it, opening its
// pages, before the allocator writes its bookkeeping into it.
inline void ForgetUntrackedBlock(void* p) {
  if (PINSHIM_UNLIKELY(g_config.copy_guard) && trace::CopyWatchAny()) {
    trace::CopyWatchForgetRange(p, g_real.malloc_usable_size(p), /*still_mapped=*/true);
  }
}

// glibc's bit, in a chunk's size field, of a chunk it mapped for itself.
constexpr size_t kChunkMapped = 0x2;

// With the copy guard on, a large block glibc mapped for itself is handed
// to the watch, which may then guard the pages it shares with nothing but
// its chunk's header and padding (copy_watch.h: which pages). The header
// is the two words before p; g_guard_malloc_chunks says they are glibc's,
// written by the call that returned p, so they are mapped. A mapped chunk
// holds its offset from the start of its mapping in the first word (0 but
// for aligned requests), and its size, of whole pages with that offset, in
// the second.
void NoteOwnMapping(void* p, size_t n) {
  if (PINSHIM_LIKELY(!g_guard_malloc_chunks) || p == nullptr || Reentered(Reentry::kHook) ||
      trace::InsideRecorder()) {
    return;
  }
  const uintptr_t chunk = reinterpret_cast<uintptr_t>(p) - 2 * sizeof(size_t);
  const size_t lead = reinterpret_cast<const size_t*>(chunk)[0];
  const size_t size = reinterpret_cast<const size_t*>(chunk)[1];
  if ((size & kChunkMapped) == 0) return;
  const size_t total = lead + (size & ~size_t{7});
  const auto page = static_cast<uintptr_t>(getpagesize());
  const uintptr_t map = chunk - lead;
  if (lead > chunk || total < lead || ((map | total) & (page - 1)) != 0 ||
      map + total < reinterpret_cast<uintptr_t>(p) + n) {
    return;
  }
  trace::CopyWatchAddChunk(p, reinterpret_cast<void*>(map), total);
}

// Before the allocator reads or reuses the header of a block the watch may
// guard (free, realloc): the watch lets it go, opening its pages.
inline void ReleaseOwnMapping(void* p) {
  if (PINSHIM_UNLIKELY(g_guard_malloc_chunks)) trace::CopyWatchReleaseChunk(p);
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

// --- optimize mode: hot allocation sites come from the host arena --------

inline optimize::HostArena& Arena() { return optimize::Optimizer::Process().arena(); }

// Whether p is arena memory (then glibc must never see it). Two loads and
// two comparisons when redirection is on; one load otherwise.
inline bool InArena(const void* p) { return PINSHIM_UNLIKELY(g_redirect_sites) && Arena().Owns(p); }

// A large malloc-family request in optimize mode. Captures the allocation
// site; when the site is hot, serves the request from the arena (align: 0
// for malloc's 16 bytes; zero: calloc). Returns the memory, tracked, or
// null: the caller serves it from the real allocator and tracks it with
// *site and *flags.
void* AllocateAtSite(size_t n, size_t align, bool zero, uint64_t* site, uint32_t* flags) {
  *site = 0;
  *flags = 0;
  if (Reentered(Reentry::kHook) || trace::InsideRecorder()) return nullptr;
  void* p = nullptr;
  {
    ReentryGuard guard(Reentry::kHook);
    optimize::SiteFrames frames;
    optimize::CaptureSite(&frames);
    if (frames.n == 0) return nullptr;
    *site = optimize::SiteKey(frames);
    optimize::Optimizer& opt = optimize::Optimizer::Process();
    if (!opt.ArenaServes(*site, frames, n)) return nullptr;
    if (opt.arena_on()) {
      p = align != 0 ? Arena().Memalign(align, n) : zero ? Arena().Calloc(1, n) : Arena().Malloc(n);
    }
    // Not served (no context yet, the cap): pinned in place at first copy.
    if (p == nullptr) *flags = kRegionFromHotSite;
  }
  if (p != nullptr) Track(p, n, kSourceMalloc, *site);
  return p;
}

// The large-request path shared by the allocation hooks: arena for a hot
// site, else real_alloc(), tracked.
template <typename RealAlloc>
inline void* AllocateLarge(size_t n, size_t align, bool zero, RealAlloc real_alloc) {
  uint64_t site = 0;
  uint32_t flags = 0;
  if (g_capture_sites) {
    if (void* p = AllocateAtSite(n, align, zero, &site, &flags)) return p;
  }
  void* p = real_alloc();
  if (p != nullptr) {
    Track(p, n, kSourceMalloc, site, flags);
    NoteOwnMapping(p, n);
  }
  return p;
}

inline bool PowerOfTwo(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

void FreeArenaBlock(void* p) {
  Region r;
  Untrack(p, &r);
  ReentryGuard guard(Reentry::kHook);
  Arena().Free(p);
}

// Whether an mmap with these arguments leaves private anonymous memory that
// may be pinned in place (the arena pins its memory again after a MAP_FIXED).
// The mapping's type is a field, not a bit: MAP_SHARED_VALIDATE (3) has
// MAP_PRIVATE's bit set and is shared.
constexpr bool PrivateAnonymous(int prot, int flags) {
  return (flags & (MAP_TYPE | MAP_ANONYMOUS)) == (MAP_PRIVATE | MAP_ANONYMOUS) &&
         (prot & (PROT_READ | PROT_WRITE)) == (PROT_READ | PROT_WRITE);
}

// PROT_NONE mappings are address-space reservations, not memory to copy.
// Shared and file-backed mappings are tracked (copies of them are counted)
// but never pinned in place: the cache pins only private anonymous memory
// (RegionFlags kRegionNotPinnable otherwise).
inline bool TracksMapping(size_t len, int prot) {
  return prot != PROT_NONE && len >= g_track_threshold;
}

// Whether [addr, addr + len) may hold a tracked allocation (the registry's
// summary answers for address space no range touches in a few loads).
inline bool MayHoldTracked(const void* addr, size_t len) {
  return !Reentered(Reentry::kHook) && g_allocations.size() != 0 &&
         g_allocations.AnyOverlapping(reinterpret_cast<uintptr_t>(addr), len);
}

// MAP_FIXED replaces what was mapped there: pinshim's pinning of it goes
// first. (MAP_FIXED_NOREPLACE fails rather than replace anything.)
inline optimize::PageChange MapFixedChange(int prot, int flags) {
  return optimize::PageChangeOf(OwnPinReason::kPageChangeMapFixed, static_cast<uint32_t>(flags),
                                PrivateAnonymous(prot, flags));
}

// The tracked allocations in [p, p + len) are gone (unmapped, or replaced
// by a MAP_FIXED); the rest of a region the range covered in part stays
// tracked as it was.
__attribute__((noinline)) void ForgetTracked(void* p, size_t len) {
  ReentryGuard guard(Reentry::kHook);
  g_allocations.RemoveSpan(reinterpret_cast<uintptr_t>(p), len, RecordRemovedPart, nullptr);
}

// A MAP_FIXED runs as a page change. The registry is asked before the call,
// as munmap asks it, while what it reads is still in cache (bench/RESULTS.md,
// "2026-12-01, late night", the mmap change, has the cost of asking after). A
// tracked allocation placed in the range between the two could only be
// another thread's mapping of address space that this call then replaces
// under it.
template <typename RealMmap>
__attribute__((noinline)) void* MmapFixedGeneral(void* addr, size_t len, int prot, int flags,
                                                 int fd, off64_t off, RealMmap real_mmap) {
  const bool may_hold_tracked = MayHoldTracked(addr, len);
  void* p = optimize::ChangePages(g_optimize, addr, len, MapFixedChange(prot, flags), real_mmap,
                                  addr, len, prot, flags, fd, off);
  if (PINSHIM_UNLIKELY(may_hold_tracked) && p != MAP_FAILED) ForgetTracked(p, len);
  return p;
}

template <typename RealMmap>
__attribute__((noinline)) void* MmapFixed(void* addr, size_t len, int prot, int flags, int fd,
                                          off64_t off, RealMmap real_mmap) {
  const optimize::PageHookLine& line = optimize::PageLine();
  if (PINSHIM_UNLIKELY(!optimize::NothingThere(line, g_allocations, addr, len))) {
    return MmapFixedGeneral(addr, len, prot, flags, fd, off, real_mmap);
  }
  return line.raw_calls ? RawMmap(addr, len, prot, flags, fd, off)
                        : real_mmap(addr, len, prot, flags, fd, off);
}

// A mapping large enough to track. Out of line, so that a smaller one keeps
// nothing across its call but what MAP_FIXED needs.
template <typename RealMmap>
__attribute__((noinline)) void* MmapTracking(void* addr, size_t len, int prot, int flags, int fd,
                                             off64_t off, RealMmap real_mmap) {
  void* p = (flags & MAP_FIXED) != 0 ? MmapFixed(addr, len, prot, flags, fd, off, real_mmap)
                                     : real_mmap(addr, len, prot, flags, fd, off);
  if (p != MAP_FAILED) {
    Track(p, len, kSourceMmap, 0, PrivateAnonymous(prot, flags) ? 0 : kRegionNotPinnable);
  }
  return p;
}

// Every mmap but the fast path's. Out of line, so that mmap keeps no frame.
template <typename RealMmap>
__attribute__((noinline)) void* MmapOther(void* addr, size_t len, int prot, int flags, int fd,
                                          off64_t off, RealMmap real_mmap) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) {
    return reinterpret_cast<void*>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
  }
  if (PINSHIM_UNLIKELY(TracksMapping(len, prot))) {
    return MmapTracking(addr, len, prot, flags, fd, off, real_mmap);
  }
  if ((flags & MAP_FIXED) == 0) return real_mmap(addr, len, prot, flags, fd, off);
  return MmapFixed(addr, len, prot, flags, fd, off, real_mmap);
}

// mmap and mmap64. In optimize mode a MAP_FIXED too small to track goes to
// its fast path first, having read only the page hooks' line (which says
// that the real functions are known: it is set after they were resolved).
template <typename RealMmap>
__attribute__((always_inline)) inline void* MmapHook(void* addr, size_t len, int prot, int flags,
                                                     int fd, off64_t off, RealMmap real_mmap) {
  if ((flags & MAP_FIXED) != 0) {
    const optimize::PageHookLine& line = optimize::PageLine();
    if (PINSHIM_LIKELY(line.optimizing) && (prot == PROT_NONE || len < line.track_threshold)) {
      return MmapFixed(addr, len, prot, flags, fd, off, real_mmap);
    }
  }
  return MmapOther(addr, len, prot, flags, fd, off, real_mmap);
}

__attribute__((noinline)) int MunmapGeneral(void* addr, size_t len) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return static_cast<int>(syscall(SYS_munmap, addr, len));
  if (MayHoldTracked(addr, len)) ForgetTracked(addr, len);
  // Whole buffers unmapped are released (the cache records them so); part
  // of one unmapped is a page change of the rest.
  return optimize::ChangePages(g_optimize, addr, len,
                               optimize::PageChangeOf(OwnPinReason::kPageChangeMunmap, 0, false),
                               g_real.munmap, addr, len);
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the hooks below are extern "C"

extern "C" {

void* malloc(size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return BootstrapAlloc(n);
  if (PINSHIM_UNLIKELY(n >= g_track_threshold)) {
    return AllocateLarge(n, 0, false, [n] { return g_real.malloc(n); });
  }
  return g_real.malloc(n);
}

void* calloc(size_t count, size_t size) {
  size_t total;
  if (PINSHIM_UNLIKELY(!EnsureReal())) {
    if (__builtin_mul_overflow(count, size, &total)) return nullptr;
    return BootstrapAlloc(total);  // the static pool starts zeroed
  }
  if (PINSHIM_UNLIKELY(!__builtin_mul_overflow(count, size, &total) &&
                       total >= g_track_threshold)) {
    return AllocateLarge(total, 0, true, [count, size] { return g_real.calloc(count, size); });
  }
  return g_real.calloc(count, size);
}

void free(void* p) {
  if (p == nullptr || InBootstrapPool(p)) return;
  if (PINSHIM_UNLIKELY(!EnsureReal())) return;  // cannot happen for a real pointer
  if (InArena(p)) {
    FreeArenaBlock(p);
    return;
  }
  ReleaseOwnMapping(p);
  if (PINSHIM_UNLIKELY(MaybeTracked(p))) {
    Region r;
    if (Untrack(p, &r)) ReleasePinning(p, r.bytes);
  }
  ForgetUntrackedBlock(p);
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
  if (InArena(p)) {
    // Stays in the arena when it can (malloc's semantics, content kept);
    // otherwise moves to the real allocator.
    Region old;
    const bool had = Untrack(p, &old);
    void* q;
    {
      ReentryGuard guard(Reentry::kHook);
      q = Arena().Realloc(p, n, g_real.malloc);
    }
    if (q == nullptr) {
      if (had && n != 0) Track(p, old.bytes, kSourceMalloc, old.site);  // failed: p intact
      return q;
    }
    if (n >= g_track_threshold) Track(q, n, kSourceMalloc, had ? old.site : 0);
    return q;
  }
  Region old;
  if (p != nullptr) ReleaseOwnMapping(p);
  bool had = p != nullptr && MaybeTracked(p) && Untrack(p, &old);
  if (had) ReleasePinning(p, old.bytes);
  if (p != nullptr) ForgetUntrackedBlock(p);
  void* q = g_real.realloc(p, n);
  if (q == nullptr) {
    // Failed (or n == 0 and p freed): on failure the old block is intact.
    if (had && n != 0) {
      Track(p, old.bytes, kSourceMalloc, old.site, old.flags);
      NoteOwnMapping(p, old.bytes);
    }
    return q;
  }
  if (PINSHIM_UNLIKELY(n >= g_track_threshold)) {
    Track(q, n, kSourceMalloc, had ? old.site : 0, had ? old.flags : 0);
    NoteOwnMapping(q, n);
  }
  return q;
}

// glibc's reallocarray calls its realloc by an internal name, past
// pinshim's: this one goes through pinshim's, so a block it moves or frees
// leaves the registry and the copy watch as with realloc.
void* reallocarray(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(p, total);
}

int posix_memalign(void** out, size_t align, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) {
    *out = BootstrapAlloc(n);  // 16-byte aligned; early callers ask no more
    return *out ? 0 : ENOMEM;
  }
  // A bad alignment gets the real function's EINVAL.
  if (PINSHIM_UNLIKELY(n >= g_track_threshold) && PowerOfTwo(align) && align % sizeof(void*) == 0) {
    int r = 0;
    void* p = AllocateLarge(n, align, false, [&] {
      void* q = nullptr;
      r = g_real.posix_memalign(&q, align, n);
      return r == 0 ? q : nullptr;
    });
    if (p != nullptr) *out = p;
    return p != nullptr ? 0 : (r != 0 ? r : ENOMEM);
  }
  return g_real.posix_memalign(out, align, n);
}

void* aligned_alloc(size_t align, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return BootstrapAlloc(n);
  if (PINSHIM_UNLIKELY(n >= g_track_threshold) && PowerOfTwo(align)) {
    return AllocateLarge(n, align, false, [align, n] { return g_real.aligned_alloc(align, n); });
  }
  return g_real.aligned_alloc(align, n);
}

void* memalign(size_t align, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return BootstrapAlloc(n);
  if (PINSHIM_UNLIKELY(n >= g_track_threshold) && PowerOfTwo(align)) {
    return AllocateLarge(n, align, false, [align, n] { return g_real.memalign(align, n); });
  }
  return g_real.memalign(align, n);
}

void* valloc(size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return nullptr;
  if (PINSHIM_UNLIKELY(n >= g_track_threshold)) {
    const size_t page = static_cast<size_t>(getpagesize());
    return AllocateLarge(n, page, false, [n] { return g_real.valloc(n); });
  }
  return g_real.valloc(n);
}

void* pvalloc(size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return nullptr;
  const size_t page = static_cast<size_t>(getpagesize());
  // pvalloc rounds the size up to whole pages (and 0 to one page).
  const size_t rounded = n == 0 ? page : (n + page - 1) / page * page;
  if (PINSHIM_UNLIKELY(rounded >= g_track_threshold && rounded >= n)) {
    return AllocateLarge(rounded, page, false, [n] { return g_real.pvalloc(n); });
  }
  return g_real.pvalloc(n);
}

size_t malloc_usable_size(void* p) {
  if (p != nullptr && InBootstrapPool(p)) return BootstrapSize(p);
  if (PINSHIM_UNLIKELY(!EnsureReal())) return 0;
  if (InArena(p)) return Arena().UsableSize(p);
  // glibc reads the block's header: a guard on its page steps aside.
  if (PINSHIM_UNLIKELY(g_guard_malloc_chunks) && p != nullptr) {
    trace::CopyGuardOpenFor(static_cast<char*>(p) - 2 * sizeof(size_t), 2 * sizeof(size_t));
  }
  return g_real.malloc_usable_size(p);
}

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return MmapHook(addr, len, prot, flags, fd, off,
                  [](void* a, size_t l, int pr, int fl, int f, off64_t o) {
                    return g_real.mmap(a, l, pr, fl, f, static_cast<off_t>(o));
                  });
}

// Programs built with _FILE_OFFSET_BITS=64 call mmap64 (the same function
// in glibc on 64-bit, under its own name).
void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off64_t off) {
  return MmapHook(
      addr, len, prot, flags, fd, off, [](void* a, size_t l, int pr, int fl, int f, off64_t o) {
        auto real = g_real.mmap64;
        return real != nullptr ? real(a, l, pr, fl, f, o)
                               : reinterpret_cast<void*>(syscall(SYS_mmap, a, l, pr, fl, f, o));
      });
}

int munmap(void* addr, size_t len) {
  const optimize::PageHookLine& line = optimize::PageLine();
  if (PINSHIM_UNLIKELY(!optimize::NothingThere(line, g_allocations, addr, len)))
    return MunmapGeneral(addr, len);
  return line.raw_calls ? RawMunmap(addr, len) : g_real.munmap(addr, len);
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
  if (!Reentered(Reentry::kHook) && g_allocations.size() != 0) {
    ReentryGuard guard(Reentry::kHook);
    had = g_allocations.Lookup(reinterpret_cast<uintptr_t>(old), &before);
    g_allocations.RemoveSpan(reinterpret_cast<uintptr_t>(old), old_len, RecordRemovedPart, nullptr);
  }
  // Every form moves, drops or empties the old range's pages (growing in
  // place keeps them, but is not told apart); MREMAP_FIXED also replaces
  // whatever was mapped at the target.
  const auto detail = static_cast<uint32_t>(flags);
  const optimize::PageChange change =
      optimize::PageChangeOf(OwnPinReason::kPageChangeMremap, detail, false);
  // The target's change nested inside the source's.
  auto remap_into_target = [=] {
    return optimize::ChangePages(g_optimize, (flags & MREMAP_FIXED) != 0 ? new_addr : nullptr,
                                 (flags & MREMAP_FIXED) != 0 ? new_len : 0, change, g_real.mremap,
                                 old, old_len, new_len, flags, new_addr);
  };
  void* p = optimize::ChangePages(g_optimize, old, old_len, change, remap_into_target);
  if (p == MAP_FAILED) {
    if (had) Track(old, old_len, static_cast<RegionSource>(before.source), 0, before.flags);
  } else if (new_len >= g_track_threshold) {
    Track(p, new_len, kSourceMmap, 0, had ? (before.flags & kRegionNotPinnable) : 0);
  }
  return p;
}

}  // extern "C"
