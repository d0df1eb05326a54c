// pinshim's own threads: detached, started with every signal blocked
// (signals are the program's, which must never run a handler on them).
#ifndef PINSHIM_SHIM_CORE_QUIET_THREAD_H_
#define PINSHIM_SHIM_CORE_QUIET_THREAD_H_

#include <cstddef>

namespace pinshim {

// Starts main_fn(arg) on such a thread, with a stack of stack_bytes (0: the
// default). False when the thread could not be started.
bool StartQuietThread(void* (*main_fn)(void*), void* arg = nullptr, size_t stack_bytes = 0);

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_QUIET_THREAD_H_
