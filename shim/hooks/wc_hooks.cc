// CPU reads and writes through the C library's copy functions, for two
// rules. wc-read: reads of write-combined pinned memory are uncached and very
// slow on real hardware. copy-race: the CPU touching page-locked memory under
// a queued asynchronous copy (reading a device-to-host destination, writing
// a host-to-device source) before the copy is known done. The calls a
// program most often reads and writes memory through (memcpy, memmove,
// memset, memcmp, the string functions, stdio and write) are interposed so
// the trace can record such accesses with their call site. With no trace,
// no write-combined memory and no copy queued, each call costs a few loads.
#include <dlfcn.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "shim/hooks/state.h"
#include "shim/trace/copy_watch.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace {

using trace::WcReadVia;

struct ReadFunctions {
  void* (*memcpy)(void*, const void*, size_t);
  void* (*memmove)(void*, const void*, size_t);
  void* (*memset)(void*, int, size_t);
  int (*memcmp)(const void*, const void*, size_t);
  size_t (*strlen)(const char*);
  int (*strcmp)(const char*, const char*);
  char* (*strcpy)(char*, const char*);
  size_t (*fwrite)(const void*, size_t, size_t, FILE*);
  int (*fputs)(const char*, FILE*);
  ssize_t (*write)(int, const void*, size_t);
};
ReadFunctions g_fn;
std::atomic<bool> g_ready{false};

// Used only while the real functions are being looked up (dlsym may copy).
// Kept a plain loop: the attribute stops GCC from turning it into a memcpy call.
__attribute__((optimize("no-tree-loop-distribute-patterns"))) void* ByteMove(void* dst,
                                                                             const void* src,
                                                                             size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  auto* s = static_cast<const unsigned char*>(src);
  if (d < s) {
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
  } else {
    for (size_t i = n; i > 0; --i) d[i - 1] = s[i - 1];
  }
  return dst;
}

template <typename T>
void Next(T* out, const char* name) {
  *out = reinterpret_cast<T>(dlsym(RTLD_NEXT, name));
}

// False while resolving on this thread: the caller then uses a fallback.
bool EnsureReadFunctions() {
  if (PINSHIM_LIKELY(g_ready.load(std::memory_order_acquire))) return true;
  if (Reentered(Reentry::kReadLookup)) return false;
  ReentryGuard resolving(Reentry::kReadLookup);
  ReadFunctions f;
  Next(&f.memcpy, "memcpy");
  Next(&f.memmove, "memmove");
  Next(&f.memset, "memset");
  Next(&f.memcmp, "memcmp");
  Next(&f.strlen, "strlen");
  Next(&f.strcmp, "strcmp");
  Next(&f.strcpy, "strcpy");
  Next(&f.fwrite, "fwrite");
  Next(&f.fputs, "fputs");
  Next(&f.write, "write");
  g_fn = f;
  g_ready.store(true, std::memory_order_release);
  return true;
}

// The copy-race side: pinshim's own copies (depth > 0) are not the
// program's accesses.
inline void CopyRead(const void* p, size_t n, WcReadVia via) {
  if (PINSHIM_UNLIKELY(trace::CopyWatchAny()) && !Reentered(Reentry::kHook)) {
    trace::CheckCopyAccess(p, n, /*write=*/false, via);
  }
}
inline void CopyWrite(const void* p, size_t n, WcReadVia via) {
  if (PINSHIM_UNLIKELY(trace::CopyWatchAny()) && !Reentered(Reentry::kHook)) {
    trace::CheckCopyAccess(p, n, /*write=*/true, via);
  }
}

__attribute__((optimize("no-tree-loop-distribute-patterns"))) void* ByteSet(void* dst, int c,
                                                                            size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<unsigned char>(c);
  return dst;
}

}  // namespace
}  // namespace pinshim

using namespace pinshim;  // NOLINT: the hooks below are extern "C"

extern "C" {

void* memcpy(void* dst, const void* src, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) return ByteMove(dst, src, n);
  trace::CheckWcRead(src, n, WcReadVia::kMemcpy);
  CopyRead(src, n, WcReadVia::kMemcpy);
  CopyWrite(dst, n, WcReadVia::kMemcpy);
  return g_fn.memcpy(dst, src, n);
}

void* memmove(void* dst, const void* src, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) return ByteMove(dst, src, n);
  trace::CheckWcRead(src, n, WcReadVia::kMemmove);
  CopyRead(src, n, WcReadVia::kMemmove);
  CopyWrite(dst, n, WcReadVia::kMemmove);
  return g_fn.memmove(dst, src, n);
}

void* memset(void* dst, int c, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) return ByteSet(dst, c, n);
  CopyWrite(dst, n, WcReadVia::kOther);
  return g_fn.memset(dst, c, n);
}

int memcmp(const void* a, const void* b, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) {
    auto* x = static_cast<const unsigned char*>(a);
    auto* y = static_cast<const unsigned char*>(b);
    for (size_t i = 0; i < n; ++i) {
      if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    }
    return 0;
  }
  if (!trace::CheckWcRead(a, n, WcReadVia::kMemcmp)) trace::CheckWcRead(b, n, WcReadVia::kMemcmp);
  CopyRead(a, n, WcReadVia::kMemcmp);
  CopyRead(b, n, WcReadVia::kMemcmp);
  return g_fn.memcmp(a, b, n);
}

size_t strlen(const char* s) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) {
    size_t n = 0;
    while (s[n] != '\0') ++n;
    return n;
  }
  trace::CheckWcRead(s, 1, WcReadVia::kString);
  CopyRead(s, 1, WcReadVia::kString);
  return g_fn.strlen(s);
}

int strcmp(const char* a, const char* b) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) {
    while (*a != '\0' && *a == *b) ++a, ++b;
    return static_cast<unsigned char>(*a) - static_cast<unsigned char>(*b);
  }
  if (!trace::CheckWcRead(a, 1, WcReadVia::kString)) trace::CheckWcRead(b, 1, WcReadVia::kString);
  CopyRead(a, 1, WcReadVia::kString);
  CopyRead(b, 1, WcReadVia::kString);
  return g_fn.strcmp(a, b);
}

char* strcpy(char* dst, const char* src) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) {
    char* d = dst;
    while ((*d++ = *src++) != '\0') {
    }
    return dst;
  }
  trace::CheckWcRead(src, 1, WcReadVia::kString);
  CopyRead(src, 1, WcReadVia::kString);
  CopyWrite(dst, 1, WcReadVia::kString);
  return g_fn.strcpy(dst, src);
}

// (stdio is never used by the lookup itself; should it be, it fails cleanly.)
size_t fwrite(const void* buf, size_t size, size_t count, FILE* f) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) return 0;
  size_t bytes;
  if (!__builtin_mul_overflow(size, count, &bytes)) {
    trace::CheckWcRead(buf, bytes, WcReadVia::kStdio);
    CopyRead(buf, bytes, WcReadVia::kStdio);
  }
  return g_fn.fwrite(buf, size, count, f);
}

int fputs(const char* s, FILE* f) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) return EOF;
  trace::CheckWcRead(s, 1, WcReadVia::kStdio);
  CopyRead(s, 1, WcReadVia::kStdio);
  return g_fn.fputs(s, f);
}

ssize_t write(int fd, const void* buf, size_t n) {
  if (PINSHIM_UNLIKELY(!EnsureReadFunctions())) return syscall(SYS_write, fd, buf, n);
  // The kernel reads the buffer: a page the guard protected must be open.
  trace::DisarmWcGuardFor(buf, n);
  trace::CheckWcRead(buf, n, WcReadVia::kStdio);
  // Also opens a copy guard on a device-to-host destination it reads.
  CopyRead(buf, n, WcReadVia::kStdio);
  return g_fn.write(fd, buf, n);
}

}  // extern "C"
