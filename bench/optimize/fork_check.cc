// After fork, does a child still see memory the driver pinned, and do the
// parent's copies from registered memory stay correct? The answer decides
// whether the host arena may undo a MADV_DONTFORK the driver sets on
// registered memory (ArenaOptions::dofork_after_register): the arena hands
// out "malloc" memory, which a forked child expects to keep.
//
//   <bin>/bench/optimize/fork_check          # with the real driver
//
// Prints one line per check; exit status 0 when it ran, 2 on setup failure.
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/optimize/driver_loader.h"

namespace {

sigjmp_buf g_jump;
void OnFault(int) { siglongjmp(g_jump, 1); }

// In the child: 1 if all of [p, p + n) reads back `seed`, 0 if not, -1 on a fault.
int ChildReads(const unsigned char* p, size_t n, unsigned char seed) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnFault;
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
  if (sigsetjmp(g_jump, 1) != 0) return -1;
  for (size_t i = 0; i < n; i += 4096) {
    if (p[i] != seed) return 0;
  }
  return 1;
}

const char* ReadResult(int r) { return r == 1 ? "ok" : r == 0 ? "WRONG DATA" : "FAULT"; }

struct Outcome {
  int child_read;    // ChildReads' answer
  bool parent_copy;  // the parent's H2D after fork delivered its new bytes
};

// Forks while `p` (n bytes, filled with seed) is pinned; the child reads it
// and stays alive while the parent rewrites it and copies it to the device.
Outcome ForkAndCopy(pinshim::bench::LoadedDriver& d, unsigned char* p, size_t n, unsigned char seed,
                    CUdeviceptr dev) {
  Outcome out = {-2, false};
  int result_pipe[2], go_pipe[2];
  if (pipe(result_pipe) != 0 || pipe(go_pipe) != 0) return out;
  memset(p, seed, n);
  pid_t pid = fork();
  if (pid == 0) {
    int r = ChildReads(p, n, seed);
    if (write(result_pipe[1], &r, sizeof(r)) != sizeof(r)) _exit(1);
    char c;
    if (read(go_pipe[0], &c, 1) < 0) _exit(1);  // keep the pages shared until told
    _exit(0);
  }
  int r = -2;
  if (read(result_pipe[0], &r, sizeof(r)) != sizeof(r)) r = -2;
  out.child_read = r;
  // The parent writes after fork (a copy-on-write break, if pages are
  // shared), then copies: a stale pinned page would deliver the old bytes.
  memset(p, seed + 1, n);
  auto htod = reinterpret_cast<CUresult (*)(CUdeviceptr, const void*, size_t)>(
      dlsym(d.handle, "cuMemcpyHtoD_v2"));
  unsigned char* back = static_cast<unsigned char*>(malloc(n));
  if (htod != nullptr && back != nullptr && htod(dev, p, n) == CUDA_SUCCESS &&
      d.memcpy_dtoh(back, dev, n) == CUDA_SUCCESS) {
    out.parent_copy = true;
    for (size_t i = 0; i < n; i += 4096)
      out.parent_copy &= back[i] == static_cast<unsigned char>(seed + 1);
  }
  free(back);
  if (write(go_pipe[1], "x", 1) != 1) {
  }
  waitpid(pid, nullptr, 0);
  close(result_pipe[0]);
  close(result_pipe[1]);
  close(go_pipe[0]);
  close(go_pipe[1]);
  return out;
}

}  // namespace

int main() {
  pinshim::bench::LoadedDriver d;
  if (!pinshim::bench::LoadDriver(&d)) return 2;
  printf("driver: %s\n", d.simulated ? "simulated (tests/fakecuda)" : "real");
  const size_t n = size_t{64} << 20;
  CUdeviceptr dev;
  if (d.mem_alloc(&dev, n) != CUDA_SUCCESS) return 2;

  unsigned char* reg = static_cast<unsigned char*>(aligned_alloc(4096, n));
  if (reg == nullptr ||
      d.ops.mem_host_register(reg, n, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS) {
    return 2;
  }
  Outcome a = ForkAndCopy(d, reg, n, 10, dev);
  printf("registered malloc memory:             child reads %-10s parent copy after fork %s\n",
         ReadResult(a.child_read), a.parent_copy ? "ok" : "STALE");

  madvise(reg, n, MADV_DOFORK);
  Outcome b = ForkAndCopy(d, reg, n, 20, dev);
  printf("registered + MADV_DOFORK:             child reads %-10s parent copy after fork %s\n",
         ReadResult(b.child_read), b.parent_copy ? "ok" : "STALE");
  d.ops.mem_host_unregister(reg);

  void* h = nullptr;
  if (d.ops.mem_host_alloc(&h, n, 0) != CUDA_SUCCESS) return 2;
  Outcome c = ForkAndCopy(d, static_cast<unsigned char*>(h), n, 30, dev);
  printf("cuMemHostAlloc memory:                child reads %-10s parent copy after fork %s\n",
         ReadResult(c.child_read), c.parent_copy ? "ok" : "STALE");
  d.ops.mem_free_host(h);
  printf("arena dofork_after_register is safe here: %s\n",
         (b.child_read == 1 && b.parent_copy) ? "yes" : "no");
  return 0;
}
