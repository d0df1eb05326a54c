// exec, _exit and fork. Exec and _exit both end the process image without exit handlers or
// destructors, so the trace is finished here (a process that never touched
// CUDA removes its file); after a failed exec recording goes on in the same
// file.
//
// vfork: the child of vfork(2) (CPython's subprocess uses it on Linux, and
// CuPy's import runs ldconfig and gcc through it before CUDA is touched)
// runs on the parent's memory, its thread's stack and TLS included, until it
// execs or exits, and no fork handler runs in it. Whatever these hooks did
// to the recorder or to the depth counter there would happen to the parent:
// its trace would be ended and unlinked, its thread left counting nothing.
// So they touch nothing unless the caller is the process that owns the
// trace (trace::RecorderOwnedHere), and the real functions are looked up at
// start-up, never by dlsym inside such a child.
//
// fork: the one fork handler registered at start-up (fork_handlers.cc)
// keeps the registries and optimize mode's engine consistent across the
// fork; the child counts its own calls.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/hooks/state.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace {

using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using ExecvFn = int (*)(const char*, char* const[]);
using ExitFn = void (*)(int);

struct ExecFunctions {
  ExecveFn execve;
  ExecvFn execv;
  ExecvFn execvp;
  ExecveFn execvpe;
  ExitFn exit_;
  ExitFn Exit_;
};
ExecFunctions g_exec;

template <typename T>
T Lookup(T* slot, const char* name) {
  T fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (fn == nullptr) {
    // Only when a hook runs before start-up resolved it (a constructor of
    // another library exec'ing).
    fn = reinterpret_cast<T>(dlsym(RTLD_NEXT, name));
    __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
  }
  return fn;
}

// Before exec: the trace's end, in the process that owns it only.
void BeforeExec() {
  if (Reentered(Reentry::kHook) || !trace::RecorderOwnedHere()) return;
  ReentryGuard guard(Reentry::kHook);
  DropTraceIfNoCuda();
  trace::RecorderBeforeExec();
}

[[noreturn]] void ExitNow(ExitFn* slot, const char* name, int status) {
  ExitFn real_exit = Lookup(slot, name);
  if (!Reentered(Reentry::kHook) && trace::RecorderOwnedHere()) {
    ReentryGuard::HoldForever(Reentry::kHook);  // the process ends here
    DropTraceIfNoCuda();
    trace::StopRecorder();
  }
  if (real_exit != nullptr) real_exit(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

}  // namespace

void ResolveExecFunctions() {
  Lookup(&g_exec.execve, "execve");
  Lookup(&g_exec.execv, "execv");
  Lookup(&g_exec.execvp, "execvp");
  Lookup(&g_exec.execvpe, "execvpe");
  Lookup(&g_exec.exit_, "_exit");
  Lookup(&g_exec.Exit_, "_Exit");
}

}  // namespace pinshim

using namespace pinshim;  // NOLINT: the hooks below are extern "C"

extern "C" {

int execve(const char* path, char* const argv[], char* const envp[]) {
  ExecveFn real = Lookup(&g_exec.execve, "execve");
  BeforeExec();
  return real(path, argv, envp);
}

int execv(const char* path, char* const argv[]) {
  ExecvFn real = Lookup(&g_exec.execv, "execv");
  BeforeExec();
  return real(path, argv);
}

int execvp(const char* file, char* const argv[]) {
  ExecvFn real = Lookup(&g_exec.execvp, "execvp");
  BeforeExec();
  return real(file, argv);
}

int execvpe(const char* file, char* const argv[], char* const envp[]) {
  ExecveFn real = Lookup(&g_exec.execvpe, "execvpe");
  BeforeExec();
  return real(file, argv, envp);
}

void _exit(int status) { ExitNow(&g_exec.exit_, "_exit", status); }

void _Exit(int status) { ExitNow(&g_exec.Exit_, "_Exit", status); }

pid_t fork() {
  if (PINSHIM_UNLIKELY(!EnsureReal())) return static_cast<pid_t>(syscall(SYS_fork));
  // The handlers InstallForkHandlers registered (fork_handlers.cc) run
  // around it.
  return g_real.fork();
}

}  // extern "C"
