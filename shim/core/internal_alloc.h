// Memory for pinshim's own tables. It comes from mmap, never from the
// program's malloc (which pinshim interposes), and is never returned to the
// kernel, so a lock-free reader that raced with a writer can still read it.
#ifndef PINSHIM_SHIM_CORE_INTERNAL_ALLOC_H_
#define PINSHIM_SHIM_CORE_INTERNAL_ALLOC_H_

#include <cstddef>

namespace pinshim {

// Returns zeroed memory of `bytes` (rounded up to 64), or null when the kernel
// refuses. Thread-safe and async-signal-safe apart from the mmap call.
void* InternalAlloc(size_t bytes);

// The same with every page present already: for a table the copy path
// reaches, whose first use would otherwise take a page fault inside one of
// the program's copies.
void* InternalAllocPresent(size_t bytes);

// Makes the pages of [p, p + bytes) present and writable without changing
// a byte (MADV_POPULATE_WRITE, Linux 5.14 and later; nothing where the
// kernel does not know it). For memory others may be using already.
void MakePresent(void* p, size_t bytes);

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_INTERNAL_ALLOC_H_
