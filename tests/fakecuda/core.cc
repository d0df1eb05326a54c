// Process state, per-thread state, fork handling, call accounting and the
// test-only knobs of fakecuda_control.h.
#include <pthread.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/fakecuda/fakecuda_control.h"
#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

// Trivially destructible globals only: nothing here may be torn down while
// stream workers still run at exit.
std::atomic<State*> g_state{nullptr};
std::atomic<ApiSite*> g_sites{nullptr};
std::atomic<unsigned> g_copy_delay_us{0};

// Armed failures. A spin lock rather than a mutex: the fork child handler can
// simply clear it.
constexpr int kMaxArmed = 16;
struct Armed {
  char name[64];
  CUresult error;
};
Armed g_armed[kMaxArmed];
int g_armed_used = 0;
std::atomic<int> g_armed_count{0};
std::atomic_flag g_armed_lock = ATOMIC_FLAG_INIT;

// Names of the entry points already reported as not simulated.
constexpr int kMaxReported = 1024;
const char* g_reported[kMaxReported];
int g_reported_used = 0;
std::atomic_flag g_reported_lock = ATOMIC_FLAG_INIT;

// Whether FAKECUDA_DEBUG asks for a trace: -1 until read.
std::atomic<int> g_debug{-1};

bool DebugEnabled() {
  int debug = g_debug.load(std::memory_order_relaxed);
  if (debug < 0) {
    const char* value = std::getenv("FAKECUDA_DEBUG");
    debug = value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
    g_debug.store(debug, std::memory_order_relaxed);
  }
  return debug != 0;
}

// True the first time `name` is passed.
bool FirstReport(const char* name) {
  while (g_reported_lock.test_and_set(std::memory_order_acquire)) {
  }
  bool first = true;
  for (int i = 0; i < g_reported_used && first; ++i) {
    first = std::strcmp(g_reported[i], name) != 0;
  }
  if (first && g_reported_used < kMaxReported) g_reported[g_reported_used++] = name;
  g_reported_lock.clear(std::memory_order_release);
  return first;
}

void LockArmed() {
  while (g_armed_lock.test_and_set(std::memory_order_acquire)) {
  }
}
void UnlockArmed() { g_armed_lock.clear(std::memory_order_release); }

// Thread state lives behind a plain pointer plus a pthread key rather than a
// thread_local object with a destructor, so a call made after the key's
// destructor ran (from another TLS destructor) builds a fresh one instead of
// touching a destroyed object.
thread_local ThreadState* t_state = nullptr;
pthread_key_t g_thread_key;
pthread_once_t g_thread_key_once = PTHREAD_ONCE_INIT;

void ThreadExit(void* arg) {
  auto* t = static_cast<ThreadState*>(arg);
  if (t_state == t) t_state = nullptr;
  if (t->epoch == S().epoch) {
    for (auto& entry : t->default_streams) RetireStream(entry.second);
  }
  delete t;
}

void CreateThreadKey() { pthread_key_create(&g_thread_key, ThreadExit); }

// fork: the child keeps only the forking thread, so every lock another thread
// held and every stream worker is gone. It abandons the parent's state (never
// freeing it: objects in it may be mid-update) and starts over, keeping only
// the reserved address ranges.
void PrepareFork() {
  LockArmed();
  S().mu.lock();
}

void ParentAfterFork() {
  S().mu.unlock();
  UnlockArmed();
}

void ChildAfterFork() {
  g_reported_used = 0;  // A new process: each name is reported once again.
  g_reported_lock.clear();
  State& old = S();
  auto* fresh = new State;
  fresh->epoch = old.epoch + 1;
  fresh->page = old.page;
  fresh->dev_base = old.dev_base;
  fresh->shadow_base = old.shadow_base;
  fresh->arena_size = old.arena_size;
  g_state.store(fresh, std::memory_order_release);
  UnlockArmed();
}

__attribute__((constructor)) void RegisterForkHandlers() {
  pthread_once(&g_thread_key_once, CreateThreadKey);
  pthread_atfork(PrepareFork, ParentAfterFork, ChildAfterFork);
}

}  // namespace

State& S() {
  State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  auto* fresh = new State;
  if (g_state.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *s;
}

ThreadState& T() {
  ThreadState* t = t_state;
  const uint64_t epoch = S().epoch;
  if (t == nullptr) {
    pthread_once(&g_thread_key_once, CreateThreadKey);
    t = new ThreadState;
    t->epoch = epoch;
    t_state = t;
    pthread_setspecific(g_thread_key, t);
  } else if (t->epoch != epoch) {
    // Inherited across fork: the contexts and streams belong to the parent.
    t->stack.clear();
    t->default_streams.clear();
    t->epoch = epoch;
  }
  return *t;
}

CUresult RequireInit() {
  return S().initialized.load(std::memory_order_acquire) ? CUDA_SUCCESS
                                                         : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult CurrentContext(Context** ctx) {
  if (CUresult err = RequireInit()) return err;
  ThreadState& t = T();
  if (t.stack.empty() || !t.stack.back()->alive.load()) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = t.stack.back();
  return (*ctx)->fault.load();
}

unsigned CopyDelayUs() { return g_copy_delay_us.load(std::memory_order_relaxed); }

ApiSite::ApiSite(const char* base_name) : name(base_name) {
  ApiSite* head = g_sites.load(std::memory_order_relaxed);
  do {
    next = head;
  } while (!g_sites.compare_exchange_weak(head, this, std::memory_order_release,
                                          std::memory_order_relaxed));
}

void DebugLog(const char* format, ...) {
  if (!DebugEnabled()) return;
  char line[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  std::fprintf(stderr, "fakecuda: %s\n", line);
}

CUresult NotSimulated(const char* base_name, const char* detail) {
  if (FirstReport(base_name)) {
    std::fprintf(stderr, "fakecuda: %s is not simulated%s%s\n", base_name,
                 detail != nullptr ? ": " : "", detail != nullptr ? detail : "");
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult Enter(ApiSite* site) {
  site->calls.fetch_add(1, std::memory_order_relaxed);
  DebugLog("%s", site->name);
  if (g_armed_count.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  CUresult error = CUDA_SUCCESS;
  LockArmed();
  for (int i = 0; i < g_armed_used; ++i) {
    if (std::strcmp(g_armed[i].name, site->name) == 0) {
      error = g_armed[i].error;
      g_armed[i] = g_armed[--g_armed_used];
      g_armed_count.store(g_armed_used, std::memory_order_release);
      break;
    }
  }
  UnlockArmed();
  return error;
}

}  // namespace fakecuda

using fakecuda::S;
using fakecuda::State;

extern "C" {

size_t fakecuda_live_device_allocations(void) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.device_allocs.size();
}

size_t fakecuda_live_host_allocations(void) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.host_allocs.size();
}

size_t fakecuda_live_registrations(void) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.registrations.size();
}

size_t fakecuda_pinned_bytes(void) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t total = 0;
  for (const auto& entry : s.host_allocs) total += entry.second.size;
  for (const auto& entry : s.registrations) total += entry.second.size;
  return total;
}

uint64_t fakecuda_call_count(const char* base_name) {
  if (base_name == nullptr) return 0;
  uint64_t total = 0;
  for (auto* site = fakecuda::g_sites.load(std::memory_order_acquire); site != nullptr;
       site = site->next) {
    if (std::strcmp(site->name, base_name) == 0) total += site->calls.load();
  }
  return total;
}

void fakecuda_fail_next(const char* base_name, CUresult error) {
  using fakecuda::g_armed;
  using fakecuda::g_armed_used;
  if (base_name == nullptr || std::strlen(base_name) >= sizeof(g_armed[0].name)) return;
  fakecuda::LockArmed();
  int slot = -1;
  for (int i = 0; i < g_armed_used; ++i) {
    if (std::strcmp(g_armed[i].name, base_name) == 0) slot = i;
  }
  if (error == CUDA_SUCCESS) {
    if (slot >= 0) g_armed[slot] = g_armed[--g_armed_used];
  } else {
    if (slot < 0 && g_armed_used < fakecuda::kMaxArmed) slot = g_armed_used++;
    if (slot >= 0) {
      std::strcpy(g_armed[slot].name, base_name);
      g_armed[slot].error = error;
    }
  }
  fakecuda::g_armed_count.store(g_armed_used, std::memory_order_release);
  fakecuda::UnlockArmed();
}

void fakecuda_set_copy_delay_us(unsigned microseconds) {
  fakecuda::g_copy_delay_us.store(microseconds, std::memory_order_relaxed);
}

size_t fakecuda_pending_ops(void) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t pending = 0;
  for (const auto& entry : s.streams) {
    pending += entry.second->enqueued - entry.second->progress->done;
  }
  return pending;
}

}  // extern "C"
