#include "shim/core/quiet_thread.h"

#include <pthread.h>
#include <signal.h>

namespace pinshim {

bool StartQuietThread(void* (*main_fn)(void*), void* arg, size_t stack_bytes) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (stack_bytes != 0) pthread_attr_setstacksize(&attr, stack_bytes);
  pthread_t thread;
  const bool ok = pthread_create(&thread, &attr, main_fn, arg) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

}  // namespace pinshim
