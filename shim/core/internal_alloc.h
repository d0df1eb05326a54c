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

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_INTERNAL_ALLOC_H_
