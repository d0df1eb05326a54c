// The one lock type of the optimize engine. Every lock here is a leaf: no
// code holds one while calling the driver, a registry, or another
// component, so fork handlers can take them in any order and a driver that
// calls back into the program's allocator never finds one held.
#ifndef PINSHIM_SHIM_OPTIMIZE_LOCK_H_
#define PINSHIM_SHIM_OPTIMIZE_LOCK_H_

#include <pthread.h>
#include <sched.h>

#include "shim/core/thread_annotations.h"

namespace pinshim {
namespace optimize {

// Members it guards say GUARDED_BY(mu_), and functions that need it held
// REQUIRES(mu_) (thread_annotations.h): clang checks both.
class CAPABILITY("mutex") Mutex {
 public:
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { pthread_mutex_lock(&mu_); }
  void Unlock() RELEASE() { pthread_mutex_unlock(&mu_); }

  // Fork: PrepareFork takes the lock so the child never inherits it held by
  // a thread that does not exist there; both sides release it afterwards.
  void PrepareFork() ACQUIRE() { Lock(); }
  void AfterFork() RELEASE() { Unlock(); }

 private:
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// Waits for another thread to finish a state change it made outside every
// lock (a registration, an unregistration). Those take microseconds to
// milliseconds, so yielding beats a condition variable that fork would have
// to reset.
inline void Backoff() { sched_yield(); }

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_LOCK_H_
