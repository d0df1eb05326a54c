#include "shim/core/phdr.h"

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "shim/core/mutex.h"

namespace pinshim {
namespace {

// Serializes pinshim's dl_iterate_phdr calls with fork. It guards no data of
// ours (the loader's list is the state), so it carries no GUARDED_BY.
Mutex g_mu;
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
// Whether the pair takes and releases the lock depends on g_taken, which the
// analysis cannot follow.
void PhdrForkPrepare() NO_THREAD_SAFETY_ANALYSIS {
  g_taken = g_holder.load(std::memory_order_acquire) != Self();
  if (!g_taken) return;
  g_mu.Lock();
  g_holder.store(Self(), std::memory_order_release);
}

void PhdrAfterFork() NO_THREAD_SAFETY_ANALYSIS {
  if (!g_taken) return;
  g_taken = false;
  g_holder.store(0, std::memory_order_release);
  g_mu.Unlock();
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
  MutexLock lock(&g_mu);
  g_holder.store(self, std::memory_order_release);
  const int r = dl_iterate_phdr(callback, data);
  g_holder.store(0, std::memory_order_release);
  return r;
}

}  // namespace pinshim
