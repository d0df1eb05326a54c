// The in-process lock type of the library, annotated so that clang's
// -Wthread-safety (scripts/thread_safety_check.sh) checks its use: members it
// guards say GUARDED_BY(mu_), functions that need it held REQUIRES(mu_)
// (thread_annotations.h). A plain pthread mutex underneath: constant-
// initialized, so a global one is usable before any constructor runs.
#ifndef PINSHIM_SHIM_CORE_MUTEX_H_
#define PINSHIM_SHIM_CORE_MUTEX_H_

#include <pthread.h>

#include "shim/core/thread_annotations.h"

namespace pinshim {

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

// Holds *mu from construction to destruction.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_MUTEX_H_
