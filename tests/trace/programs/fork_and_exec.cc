// One trace per process: the parent copies, forks a child that copies, and
// then replaces itself (exec) with a second run of this program, which
// copies again. Three traces, two of them with the parent's pid.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "tests/trace/harness/cuda_harness.h"

namespace cuda = pinshim::testing::cuda;

static void CopySome(int times, size_t bytes) {
  char* buf = static_cast<char*>(cuda::Malloc(bytes));
  void* dev = cuda::DeviceAlloc(bytes);
  for (int i = 0; i < times; ++i) cuda::MemcpyHtoD(dev, buf, bytes);  // MISUSE(pageable-hot)
  cuda::DeviceFree(dev);
  cuda::Free(buf);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "after-exec") == 0) {
    CopySome(7, 8 << 20);
    return 0;
  }
  CopySome(5, 8 << 20);
  pid_t child = fork();
  if (child == 0) {
    CopySome(6, 8 << 20);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  char self[] = "/proc/self/exe";
  char arg[] = "after-exec";
  char* args[] = {argv[0], arg, nullptr};
  execv(self, args);
  return 1;
}
