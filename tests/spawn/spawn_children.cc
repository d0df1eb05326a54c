// A process that starts children the ways that share its memory or skip
// fork's handlers, before and after it uses CUDA: vfork + execve (what
// CPython's subprocess does on Linux), vfork + a failed execve + _exit,
// posix_spawn (glibc's runs the child on the parent's memory too), and
// clone without fork's handlers. Copies before, between and after. Prints
// "copies N": the summary and the trace must count every one of them, and
// the trace must be this process's, complete.
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tests/trace/harness/cuda_harness.h"

extern char** environ;

namespace cuda = pinshim::testing::cuda;

namespace {

int g_copies = 0;

void CopySome(int times) {
  const size_t bytes = 1 << 20;
  static char* buf = static_cast<char*>(cuda::Malloc(bytes));
  static void* dev = cuda::DeviceAlloc(bytes);
  for (int i = 0; i < times; ++i) cuda::MemcpyHtoD(dev, buf, bytes);
  g_copies += times;
}

int Wait(pid_t pid) {
  int status = 0;
  if (pid <= 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// vfork, then exec `path` (or fail to, and _exit).
int VforkExec(const char* path) {
  char* argv[] = {const_cast<char*>(path), nullptr};
  pid_t pid = vfork();
  if (pid == 0) {
    execve(path, argv, environ);
    _exit(127);
  }
  return Wait(pid);
}

int Spawn(const char* path) {
  char* argv[] = {const_cast<char*>(path), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, path, nullptr, nullptr, argv, environ) != 0) return -1;
  return Wait(pid);
}

int CloneChild(void*) {
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  execve("/bin/true", argv, environ);
  _exit(127);
}

// clone(2) with its own copy of memory but no fork handlers run.
int CloneExec() {
  const size_t stack_bytes = 256 * 1024;
  void* stack = mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  pid_t pid = clone(CloneChild, static_cast<char*>(stack) + stack_bytes, SIGCHLD, nullptr);
  int rc = Wait(pid);
  munmap(stack, stack_bytes);
  return rc;
}

}  // namespace

int main() {
  // Before the process touches CUDA (CuPy's import runs ldconfig and gcc).
  if (VforkExec("/bin/true") != 0) return 2;
  if (Spawn("/bin/true") != 0) return 3;
  CopySome(3);
  if (VforkExec("/bin/true") != 0) return 4;
  if (VforkExec("/nonexistent/program") != 127) return 5;
  if (Spawn("/bin/true") != 0) return 6;
  if (CloneExec() != 0) return 7;
  CopySome(4);
  printf("copies %d\n", g_copies);
  return 0;
}
