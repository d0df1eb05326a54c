#include "shim/core/phdr.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace pinshim {
namespace {

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
// The thread inside dl_iterate_phdr, 0 when none: a fork from that very
// thread (a signal handler that interrupted it forks) must not wait for
// itself. The child then inherits the lock held, as without the guard.
std::atomic<long> g_holder{0};
bool g_taken = false;  // by the forking thread's prepare handler

long ThreadId() { return static_cast<long>(syscall(SYS_gettid)); }

void PrepareFork() {
  g_taken = g_holder.load(std::memory_order_acquire) != ThreadId();
  if (g_taken) pthread_mutex_lock(&g_mu);
}

void AfterFork() {
  if (g_taken) pthread_mutex_unlock(&g_mu);
  g_taken = false;
}

void Register() { pthread_atfork(PrepareFork, AfterFork, AfterFork); }

}  // namespace

void InstallPhdrForkGuard() { pthread_once(&g_once, Register); }

int IteratePhdr(PhdrCallback callback, void* data) {
  InstallPhdrForkGuard();
  pthread_mutex_lock(&g_mu);
  g_holder.store(ThreadId(), std::memory_order_release);
  const int r = dl_iterate_phdr(callback, data);
  g_holder.store(0, std::memory_order_release);
  pthread_mutex_unlock(&g_mu);
  return r;
}

}  // namespace pinshim
