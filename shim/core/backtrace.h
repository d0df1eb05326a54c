// The calling thread's return addresses, innermost first, as unw_backtrace
// gives them: ips[0] lies in the caller, ips[1] in its caller, and so on.
//
// Under ThreadSanitizer it walks a cursor instead. libunwind 1.6 frees the
// per-thread cache behind unw_backtrace in the last round of thread-specific
// data destructors, after ThreadSanitizer has torn the exiting thread's
// state down, and the lock it takes there crashes the runtime: every thread
// that ever captured a stack would crash at its exit. The cursor walk keeps
// no such cache and finds the same addresses, more slowly.
#ifndef PINSHIM_SHIM_CORE_BACKTRACE_H_
#define PINSHIM_SHIM_CORE_BACKTRACE_H_

#ifndef UNW_LOCAL_ONLY
#define UNW_LOCAL_ONLY
#endif
#include <libunwind.h>

namespace pinshim {

// Inlined, so that the first address is the caller's, as with unw_backtrace.
__attribute__((always_inline)) inline int Backtrace(void** ips, int max) {
#if defined(__SANITIZE_THREAD__)
  unw_context_t context;
  unw_cursor_t cursor;
  if (max <= 0 || unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0) {
    return 0;
  }
  int n = 0;
  do {
    unw_word_t ip = 0;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
    ips[n++] = reinterpret_cast<void*>(ip);
  } while (n < max && unw_step(&cursor) > 0);
  return n;
#else
  return unw_backtrace(ips, max);
#endif
}

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_BACKTRACE_H_
