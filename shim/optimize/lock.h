// The one lock type of the optimize engine. Every lock here is a leaf: no
// code holds one while calling the driver, a registry, or another
// component, so fork handlers can take them in any order and a driver that
// calls back into the program's allocator never finds one held.
#ifndef PINSHIM_SHIM_OPTIMIZE_LOCK_H_
#define PINSHIM_SHIM_OPTIMIZE_LOCK_H_

#include <sched.h>

#include "shim/core/mutex.h"

namespace pinshim {
namespace optimize {

// The library's annotated mutex (shim/core/mutex.h): members it guards say
// GUARDED_BY(mu_), and functions that need it held REQUIRES(mu_).
using ::pinshim::Mutex;
using ::pinshim::MutexLock;

// Waits for another thread to finish a state change it made outside every
// lock (a registration, an unregistration). Those take microseconds to
// milliseconds, so yielding beats a condition variable that fork would have
// to reset.
inline void Backoff() { sched_yield(); }

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_LOCK_H_
