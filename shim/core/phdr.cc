#include "shim/core/phdr.h"

#include <pthread.h>

#include <atomic>
#include <cstdint>

namespace pinshim {
namespace {

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
// 0 not yet, 1 registering or registered, 2 claimed by the caller of
// ClaimPhdrForkGuard (which runs the handlers). Not pthread_once: pthread_atfork
// allocates, and an allocation hook that iterates (site capture) would call
// back in here on the same thread while the once is still running.
std::atomic<int> g_registered{0};
// The thread inside dl_iterate_phdr (pthread_self), 0 when none: a fork
// from that very thread (a signal handler that interrupted it forks) must
// not wait for itself, nor a call made from inside its callback (it runs
// unguarded; the outer call holds the lock). The child of such a fork
// inherits the lock held, as without the guard.
std::atomic<uintptr_t> g_holder{0};
bool g_taken = false;  // by the forking thread's prepare handler

uintptr_t Self() { return static_cast<uintptr_t>(pthread_self()); }

}  // namespace

// The forking thread takes the lock and holds it as the iterating thread
// until the fork is over: fork handlers that run between this one's (in the
// child, before PhdrAfterFork: every handler registered earlier) iterate as
// a call from inside a callback does, without waiting for themselves.
void PhdrForkPrepare() {
  g_taken = g_holder.load(std::memory_order_acquire) != Self();
  if (!g_taken) return;
  pthread_mutex_lock(&g_mu);
  g_holder.store(Self(), std::memory_order_release);
}

void PhdrAfterFork() {
  if (!g_taken) return;
  g_taken = false;
  g_holder.store(0, std::memory_order_release);
  pthread_mutex_unlock(&g_mu);
}

void InstallPhdrForkGuard() {
  if (g_registered.load(std::memory_order_acquire) != 0) return;
  int expected = 0;
  if (g_registered.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    pthread_atfork(PhdrForkPrepare, PhdrAfterFork, PhdrAfterFork);
  }
}

bool ClaimPhdrForkGuard() {
  int expected = 0;
  return g_registered.compare_exchange_strong(expected, 2, std::memory_order_acq_rel);
}

int IteratePhdr(PhdrCallback callback, void* data) {
  InstallPhdrForkGuard();
  const uintptr_t self = Self();
  if (g_holder.load(std::memory_order_acquire) == self) return dl_iterate_phdr(callback, data);
  pthread_mutex_lock(&g_mu);
  g_holder.store(self, std::memory_order_release);
  const int r = dl_iterate_phdr(callback, data);
  g_holder.store(0, std::memory_order_release);
  pthread_mutex_unlock(&g_mu);
  return r;
}

}  // namespace pinshim
