// Attributes every part of the preloaded library uses.
#ifndef PINSHIM_SHIM_CORE_MACROS_H_
#define PINSHIM_SHIM_CORE_MACROS_H_

// Thread-locals of a preloaded library: initial-exec, so reading one never
// calls into the dynamic loader (which may allocate or take its lock from
// inside a hook).
#define PINSHIM_TLS __thread __attribute__((tls_model("initial-exec")))
#define PINSHIM_HIDDEN __attribute__((visibility("hidden")))
#define PINSHIM_LIKELY(x) __builtin_expect(!!(x), 1)
#define PINSHIM_UNLIKELY(x) __builtin_expect(!!(x), 0)

#endif  // PINSHIM_SHIM_CORE_MACROS_H_
