// A second library that interposes mmap, munmap and madvise after pinshim
// (LD_PRELOAD="libpinshim.so libpage_call_counter.so"), as a memory profiler
// does: it counts the calls that reach it and passes them on to libc.
// pinshim's page hooks must call through it, never around it.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/types.h>

static atomic_long g_mmap, g_munmap, g_madvise;

void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  static void* (*next)(void*, size_t, int, int, int, off_t);
  if (next == NULL) next = dlsym(RTLD_NEXT, "mmap");
  atomic_fetch_add(&g_mmap, 1);
  return next(addr, len, prot, flags, fd, off);
}

void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  return mmap(addr, len, prot, flags, fd, off);
}

int munmap(void* addr, size_t len) {
  static int (*next)(void*, size_t);
  if (next == NULL) next = dlsym(RTLD_NEXT, "munmap");
  atomic_fetch_add(&g_munmap, 1);
  return next(addr, len);
}

int madvise(void* addr, size_t len, int advice) {
  static int (*next)(void*, size_t, int);
  if (next == NULL) next = dlsym(RTLD_NEXT, "madvise");
  atomic_fetch_add(&g_madvise, 1);
  return next(addr, len, advice);
}

// The counts so far.
void page_call_counts(long* mmaps, long* munmaps, long* madvises) {
  *mmaps = atomic_load(&g_mmap);
  *munmaps = atomic_load(&g_munmap);
  *madvises = atomic_load(&g_madvise);
}
