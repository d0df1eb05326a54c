// What the real driver does with pinned memory whose pages change, and with
// asynchronous copies from pageable memory: the facts pinshim's page-change
// handling, its simulated driver and its staged copies are built on.
//
//   nvcc -O2 -o page_facts bench/gpu/page_facts.cu && ./page_facts
//
// Each check prints one line "fact <name>: <what happened>". "device=new"
// means the device received the data the program wrote last, "device=old"
// that it received what the buffer held before its pages changed.
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "cuda_check.h"

#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

namespace {

constexpr size_t kPage = 4096;
char* g_dev = nullptr;             // device scratch, 64 MiB
unsigned char* g_check = nullptr;  // pinned scratch for reading the device back

__global__ void Spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Fill(void* p, size_t n, unsigned char v) { memset(p, v, n); }

// What the device holds after copying [p, p+n) to it, as seen per page:
// "new" when every byte is `want`, "old" when every byte is `old`, else a mix.
std::string DeviceGets(const void* p, size_t n, unsigned char want, unsigned char old) {
  cudaError_t e = cudaMemcpy(g_dev, p, n, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return std::string("copy-failed(") + cudaGetErrorString(e) + ")";
  CHECK(cudaMemcpy(g_check, g_dev, n, cudaMemcpyDeviceToHost));
  size_t nw = 0, no = 0, other = 0;
  for (size_t i = 0; i < n; i += kPage) {
    unsigned char c = g_check[i];
    if (c == want)
      ++nw;
    else if (c == old)
      ++no;
    else
      ++other;
  }
  char buf[128];
  if (no == 0 && other == 0) return "device=new";
  if (nw == 0 && other == 0) return "device=old";
  snprintf(buf, sizeof(buf), "device=mixed(new %zu, old %zu, other %zu pages)", nw, no, other);
  return buf;
}

// What the host sees at [p, p+n) after a device-to-host copy of `v` into it.
std::string HostGets(void* p, size_t n, unsigned char v) {
  CHECK(cudaMemset(g_dev, v, n));
  cudaError_t e = cudaMemcpy(p, g_dev, n, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return std::string("copy-failed(") + cudaGetErrorString(e) + ")";
  size_t got = 0;
  for (size_t i = 0; i < n; i += kPage) got += static_cast<unsigned char*>(p)[i] == v;
  char buf[96];
  snprintf(buf, sizeof(buf), "host=%s(%zu/%zu pages)", got == n / kPage ? "new" : "stale", got,
           n / kPage);
  return buf;
}

void Fact(const char* name, const std::string& what) {
  printf("fact %s: %s\n", name, what.c_str());
}

std::string Rc(int rc) {
  return rc == 0 ? std::string("rc=0") : std::string("rc=-1 errno=") + strerror(errno);
}

// The VmFlags line of the mapping holding p (smaps).
std::string VmFlags(const void* p) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (!f) return "?";
  char line[512];
  bool in = false;
  std::string out = "?";
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, ':') != nullptr &&
        line[strlen(line) - 1] == '\n' && strncmp(line, "VmFlags", 7) != 0) {
      in = a >= lo && a < hi;
      if (in) {
        std::string l(line);
        l.pop_back();
        out = l;
      }
      continue;
    }
    if (in && strncmp(line, "VmFlags:", 8) == 0) {
      std::string l(line + 8);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      out += " |" + l;
      in = false;
    }
  }
  fclose(f);
  return out;
}

uint64_t Pfn(const void* p) {
  int fd = open("/proc/self/pagemap", O_RDONLY);
  uint64_t v = 0;
  if (fd >= 0) {
    pread(fd, &v, 8, (reinterpret_cast<uintptr_t>(p) / kPage) * 8);
    close(fd);
  }
  return v;
}

void* Anon(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  return p;
}

// --- program-registered anonymous memory under page changes ------------------

void RegisteredAdvice(const char* name, int advice, size_t n) {
  unsigned char* b = static_cast<unsigned char*>(Anon(n));
  Fill(b, n, 0xA1);
  CHECK(cudaHostRegister(b, n, cudaHostRegisterDefault));
  std::string rc = Rc(madvise(b, n, advice));
  Fill(b, n, 0xB2);
  std::string got = DeviceGets(b, n, 0xB2, 0xA1);
  std::string back = HostGets(b, n, 0xC3);
  CHECK(cudaHostUnregister(b));
  munmap(b, n);
  Fact((std::string("registered_madvise_") + name).c_str(), rc + " " + got + " " + back);
}

void RegisteredMapFixed(bool half, size_t n) {
  unsigned char* b = static_cast<unsigned char*>(Anon(n));
  Fill(b, n, 0xA1);
  CHECK(cudaHostRegister(b, n, cudaHostRegisterDefault));
  const size_t len = half ? n / 2 : n;
  void* q = mmap(b, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  Fill(b, n, 0xB2);
  std::string got = DeviceGets(b, n, 0xB2, 0xA1);
  cudaError_t u = cudaHostUnregister(b);
  munmap(b, n);
  Fact(half ? "registered_map_fixed_half" : "registered_map_fixed_whole",
       std::string(q == MAP_FAILED ? "mmap failed " : "") + got +
           " unregister=" + cudaGetErrorName(u));
}

void RegisteredMremap(size_t n) {
  // MREMAP_DONTUNMAP: the pages move to the new address, the old range stays
  // mapped but empty. The registration was made on the old addresses.
  unsigned char* b = static_cast<unsigned char*>(Anon(n));
  Fill(b, n, 0xA1);
  CHECK(cudaHostRegister(b, n, cudaHostRegisterDefault));
  void* moved = mremap(b, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
  std::string rc = moved == MAP_FAILED ? std::string("errno=") + strerror(errno) : "ok";
  if (moved != MAP_FAILED) {
    Fill(b, n, 0xB2);  // the old range, fresh pages
    rc += " old-range " + DeviceGets(b, n, 0xB2, 0xA1);
    munmap(moved, n);
  }
  cudaError_t u = cudaHostUnregister(b);
  munmap(b, n);
  Fact("registered_mremap_dontunmap", rc + " unregister=" + cudaGetErrorName(u));
  // A plain move: the old addresses are gone; the registration stays on them.
  b = static_cast<unsigned char*>(Anon(n));
  Fill(b, n, 0xA1);
  CHECK(cudaHostRegister(b, n, cudaHostRegisterDefault));
  void* target = Anon(n);
  moved = mremap(b, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  rc = moved == MAP_FAILED ? std::string("errno=") + strerror(errno) : "ok";
  if (moved != MAP_FAILED) {
    Fill(moved, n, 0xB2);
    rc += " new-range " + DeviceGets(moved, n, 0xB2, 0xA1);
  }
  u = cudaHostUnregister(b);
  Fact("registered_mremap_move", rc + " unregister=" + cudaGetErrorName(u));
  if (moved != MAP_FAILED) munmap(moved, n);
}

// A copy whose host range is only partly registered: what the driver does.
void PartlyRegistered() {
  const size_t n = 4 << 20;
  unsigned char* b = static_cast<unsigned char*>(Anon(n));
  Fill(b, n, 0xA1);
  CHECK(cudaHostRegister(b, n / 2, cudaHostRegisterDefault));
  cudaError_t h2d = cudaMemcpy(g_dev, b, n, cudaMemcpyHostToDevice);
  cudaGetLastError();
  cudaError_t d2h = cudaMemcpy(b, g_dev, n, cudaMemcpyDeviceToHost);
  cudaGetLastError();
  cudaError_t h2d_async = cudaMemcpyAsync(g_dev, b, n, cudaMemcpyHostToDevice, 0);
  cudaGetLastError();
  cudaDeviceSynchronize();
  CHECK(cudaHostUnregister(b));
  // Registered second half, copy starting in the unregistered first half.
  CHECK(cudaHostRegister(b + n / 2, n / 2, cudaHostRegisterDefault));
  cudaError_t tail = cudaMemcpy(g_dev, b, n, cudaMemcpyHostToDevice);
  cudaGetLastError();
  CHECK(cudaHostUnregister(b + n / 2));
  munmap(b, n);
  Fact("copy_partly_registered", std::string("head-registered h2d=") + cudaGetErrorName(h2d) +
                                     " d2h=" + cudaGetErrorName(d2h) +
                                     " h2d_async=" + cudaGetErrorName(h2d_async) +
                                     "; tail-registered h2d=" + cudaGetErrorName(tail));
}

// Copies from cudaHostAlloc memory past the allocation's requested size
// (what a pool block must answer as the dedicated allocation would).
void HostAllocBounds() {
  std::string out;
  for (size_t req : {size_t{100}, size_t{4096}, size_t{1} << 20}) {
    unsigned char* b = nullptr;
    CHECK(cudaHostAlloc(&b, req, cudaHostAllocDefault));
    char part[160];
    const size_t page_end = (req + kPage - 1) / kPage * kPage;
    cudaError_t exact = cudaMemcpy(g_dev, b, req, cudaMemcpyHostToDevice);
    cudaGetLastError();
    cudaError_t to_page = cudaMemcpy(g_dev, b, page_end, cudaMemcpyHostToDevice);
    cudaGetLastError();
    cudaError_t past = cudaMemcpy(g_dev, b, page_end + 1, cudaMemcpyHostToDevice);
    cudaGetLastError();
    snprintf(part, sizeof(part), " alloc=%zu: exact=%s to-page-end=%s past-page=%s;", req,
             cudaGetErrorName(exact), cudaGetErrorName(to_page), cudaGetErrorName(past));
    out += part;
    CHECK(cudaFreeHost(b));
  }
  Fact("hostalloc_copy_bounds", out);
}

// --- fork with program-registered memory --------------------------------------

void ForkRegistered(const char* name, int advice) {
  const size_t n = 16 << 20;
  unsigned char* b = static_cast<unsigned char*>(malloc(n));
  Fill(b, n, 0xA1);
  CHECK(cudaHostRegister(b, n, cudaHostRegisterDefault));
  if (advice >= 0) {
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + kPage - 1) / kPage * kPage;
    madvise(reinterpret_cast<void*>(lo), n - 2 * kPage, advice);
  }
  int to_parent[2], to_child[2];
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    // The child: its copy must stay its own.
    static sigjmp_buf jump;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = [](int) { siglongjmp(jump, 1); };
    sigaction(SIGSEGV, &sa, nullptr);
    char verdict[64] = "child-faulted";
    if (sigsetjmp(jump, 1) == 0) {
      const unsigned char first = b[n / 2];
      Fill(b + kPage, n - 2 * kPage, 0xC3);  // the child writes its copy
      char c;
      write(to_parent[1], "w", 1);
      read(to_child[0], &c, 1);  // the parent wrote and copied meanwhile
      size_t mine = 0;
      for (size_t i = kPage; i < n - kPage; i += kPage) mine += b[i] == 0xC3;
      snprintf(verdict, sizeof(verdict), "child-read-%02x child-keeps=%zu/%zu", first, mine,
               (n - 2 * kPage) / kPage);
    }
    write(to_parent[1], verdict, strlen(verdict) + 1);
    _exit(0);
  }
  char c;
  read(to_parent[0], &c, 1);
  Fill(b, n, 0xB2);  // the parent writes while the child holds its copy
  std::string got = DeviceGets(b, n, 0xB2, 0xA1);
  std::string back = HostGets(b, n, 0xD4);
  write(to_child[1], "g", 1);
  char verdict[64] = {0};
  read(to_parent[0], verdict, sizeof(verdict) - 1);
  waitpid(pid, nullptr, 0);
  CHECK(cudaHostUnregister(b));
  free(b);
  Fact(name, std::string("parent ") + got + " " + back + " " + verdict);
}

// MADV_WIPEONFORK on memory nobody registered: what the child reads.
void WipeOnForkPlain(bool registered) {
  const size_t n = 16 << 20;
  unsigned char* b = static_cast<unsigned char*>(Anon(n));
  Fill(b, n, 0xA1);
  if (registered) CHECK(cudaHostRegister(b, n, cudaHostRegisterDefault));
  int rc = madvise(b, n, MADV_WIPEONFORK);
  int out[2];
  if (pipe(out) != 0) exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    unsigned char msg[2] = {'M', 0};
    if (write(out[1], b, 1) != 1) msg[0] = 'U';
    msg[1] = msg[0] == 'M' ? b[0] : 0;
    if (write(out[1], msg, 2) != 2) _exit(2);
    _exit(0);
  }
  close(out[1]);
  unsigned char buf[3] = {0, 0, 0};
  ssize_t got = 0, r;
  while (got < 3 && (r = read(out[0], buf + got, 3 - got)) > 0) got += r;
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const unsigned char* msg = got == 3 ? buf + 1 : buf;
  char text[160];
  snprintf(text, sizeof(text), "madvise rc=%d child %s value=%02x exit=%d sig=%d", rc,
           msg[0] == 'M' ? "mapped" : "unmapped", msg[1],
           WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  Fact(registered ? "wipeonfork_registered" : "wipeonfork_plain", text);
  if (registered) CHECK(cudaHostUnregister(b));
  munmap(b, n);
}

// A child that uses CUDA after the parent initialized it.
void ForkChildUsesCuda() {
  pid_t pid = fork();
  if (pid == 0) {
    char* d = nullptr;
    cudaError_t e = cudaMalloc(&d, 4096);
    printf("fact fork_child_cuda: cudaMalloc in child = %s\n", cudaGetErrorName(e));
    fflush(stdout);
    _exit(0);
  }
  waitpid(pid, nullptr, 0);
}

// --- the driver's own pinned memory (what the pool's memory must match) -------

void HostAllocUnder(const char* name, int what) {
  const size_t n = 4 << 20;
  unsigned char* b = nullptr;
  CHECK(cudaHostAlloc(&b, n, cudaHostAllocDefault));
  Fill(b, n, 0xA1);
  std::string rc;
  unsigned char* mid = b + n / 4;
  const size_t midlen = n / 2;
  switch (what) {
    case 0: rc = Rc(madvise(b, n, MADV_DONTNEED)); break;
    case 1: rc = Rc(madvise(mid, midlen, MADV_DONTNEED)); break;
    case 2: rc = Rc(madvise(b, n, MADV_FREE)); break;
    case 3: rc = Rc(madvise(b, n, MADV_REMOVE)); break;
    case 4: rc = Rc(madvise(b, n, MADV_DONTFORK)); break;
    case 5: rc = Rc(madvise(b, n, MADV_PAGEOUT)); break;
    case 6:
      rc = mmap(mid, midlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                0) == MAP_FAILED
               ? std::string("mmap errno=") + strerror(errno)
               : "mmap ok";
      break;
    case 7: rc = "munmap-mid " + Rc(munmap(mid, midlen)); break;
    case 8: {
      void* t = Anon(n);
      void* m = mremap(b, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, t);
      rc = m == MAP_FAILED ? std::string("mremap errno=") + strerror(errno) : "mremap ok";
      if (m != MAP_FAILED) munmap(m, n);
      break;
    }
    case 9: rc = Rc(madvise(b, n, MADV_HUGEPAGE)); break;
  }
  std::string after = "first-byte=";
  char hex[8];
  const bool mapped = what != 7 && what != 8;
  if (mapped) {
    snprintf(hex, sizeof(hex), "%02x", mid[0]);
    after += hex;
    Fill(b, n, 0xB2);
    after += " " + DeviceGets(b, n, 0xB2, 0xA1);
  } else {
    after += "unmapped";
  }
  cudaError_t f = cudaFreeHost(b);
  int still = msync(reinterpret_cast<void*>(mid), kPage, MS_ASYNC);
  Fact((std::string("hostalloc_") + name).c_str(),
       rc + " " + after + " free=" + cudaGetErrorName(f) +
           (still == 0 ? " range-still-mapped-after-free" : " range-unmapped-after-free"));
}

void HostAllocLayout() {
  const size_t n = 4 << 20;
  unsigned char* b = nullptr;
  CHECK(cudaHostAlloc(&b, n, cudaHostAllocDefault));
  Fill(b, n, 1);
  uint64_t pfn = Pfn(b);
  char buf[96];
  snprintf(buf, sizeof(buf), " pagemap=%016llx", static_cast<unsigned long long>(pfn));
  Fact("hostalloc_mapping", VmFlags(b) + buf);
  unsigned char* r = static_cast<unsigned char*>(Anon(n));
  Fill(r, n, 1);
  CHECK(cudaHostRegister(r, n, cudaHostRegisterDefault));
  snprintf(buf, sizeof(buf), " pagemap=%016llx", static_cast<unsigned long long>(Pfn(r)));
  Fact("registered_mapping", VmFlags(r) + buf);
  // Forked: what the child sees of each.
  pid_t pid = fork();
  if (pid == 0) {
    static sigjmp_buf jump;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = [](int) { siglongjmp(jump, 1); };
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    const char* hv = "fault";
    if (sigsetjmp(jump, 1) == 0) {
      hv = b[0] == 1 ? "reads-parent-data" : "reads-other";
      b[0] = 9;  // does the parent see this?
    }
    printf("fact fork_child_hostalloc: %s\n", hv);
    fflush(stdout);
    _exit(0);
  }
  waitpid(pid, nullptr, 0);
  Fact("fork_parent_hostalloc_after_child_write",
       b[0] == 1 ? "parent-unchanged" : "parent-changed");
  CHECK(cudaHostUnregister(r));
  munmap(r, n);
  CHECK(cudaFreeHost(b));
}

// --- file-backed and shared memory ------------------------------------------------

sigjmp_buf g_bus;
void OnBus(int) { siglongjmp(g_bus, 1); }

// Fills [p, p+n) with v; false when the mapping faults (SIGBUS past a
// truncated file's end).
bool SafeFill(unsigned char* p, size_t n, unsigned char v) {
  struct sigaction sa, old_bus, old_segv;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnBus;
  sigaction(SIGBUS, &sa, &old_bus);
  sigaction(SIGSEGV, &sa, &old_segv);
  bool ok = true;
  if (sigsetjmp(g_bus, 1) == 0) {
    memset(p, v, n);
  } else {
    ok = false;
  }
  sigaction(SIGBUS, &old_bus, nullptr);
  sigaction(SIGSEGV, &old_segv, nullptr);
  return ok;
}

void FileBacked(const char* dir, int how) {
  const size_t n = 4 << 20;
  std::string path = std::string(dir) + "/pinshim-page-facts";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, n) != 0) {
    Fact("file", "cannot create " + path);
    return;
  }
  unlink(path.c_str());
  unsigned char* b = static_cast<unsigned char*>(
      mmap(nullptr, n, PROT_READ | PROT_WRITE, how == 2 ? MAP_PRIVATE : MAP_SHARED, fd, 0));
  Fill(b, n, 0xA1);
  cudaError_t reg = cudaHostRegister(b, n, cudaHostRegisterDefault);
  std::string name = std::string("file_") + (strstr(dir, "shm") ? "tmpfs_" : "disk_") +
                     (how == 0   ? "truncate"
                      : how == 1 ? "punch_hole"
                                 : "private_write");
  if (reg != cudaSuccess) {
    Fact(name.c_str(), std::string("register=") + cudaGetErrorName(reg));
    cudaGetLastError();
    munmap(b, n);
    close(fd);
    return;
  }
  std::string rc;
  if (how == 0) {
    rc = "truncate " + Rc(ftruncate(fd, 0)) + " " + Rc(ftruncate(fd, n));
  } else if (how == 1) {
    rc = "punch " + Rc(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, n));
  } else {
    rc = "private";
  }
  std::string got = SafeFill(b, n, 0xB2) ? DeviceGets(b, n, 0xB2, 0xA1) : "write-faulted(SIGBUS)";
  cudaError_t u = cudaHostUnregister(b);
  munmap(b, n);
  close(fd);
  Fact(name.c_str(),
       std::string("register=ok ") + rc + " " + got + " unregister=" + cudaGetErrorName(u));
}

void SysvShm() {
  const size_t n = 16 << 20;
  int id = shmget(IPC_PRIVATE, n, IPC_CREAT | 0600);
  if (id < 0) {
    Fact("shm", std::string("shmget ") + strerror(errno));
    return;
  }
  unsigned char* b = static_cast<unsigned char*>(shmat(id, nullptr, 0));
  Fill(b, n, 0xA1);
  cudaError_t reg = cudaHostRegister(b, n, cudaHostRegisterDefault);
  std::string out = std::string("register=") + cudaGetErrorName(reg);
  if (reg == cudaSuccess) {
    shmdt(b);
    int id2 = shmget(IPC_PRIVATE, n, IPC_CREAT | 0600);
    void* again = shmat(id2, b, 0);
    out += again == b ? " reattached-other-segment" : " reattach-failed";
    if (again == b) {
      Fill(b, n, 0xB2);
      out += " " + DeviceGets(b, n, 0xB2, 0xA1);
    }
    cudaError_t u = cudaHostUnregister(b);
    out += std::string(" unregister=") + cudaGetErrorName(u);
    if (again == b) shmdt(b);
    shmctl(id2, IPC_RMID, nullptr);
  }
  shmctl(id, IPC_RMID, nullptr);
  Fact("shm_detach_reattach", out);
}

// --- asynchronous copies from pageable memory ----------------------------------

long long g_cycles_200ms = 0;

void CalibrateSpin() {
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  g_cycles_200ms = static_cast<long long>(khz) * 200;
}

// How long the copy call itself takes when a 200 ms kernel runs first on
// `kernel_stream`, and the copy goes on `copy_stream`.
void AsyncTiming(const char* name, cudaStream_t kernel_stream, cudaStream_t copy_stream, size_t n,
                 bool to_device, bool async, bool pinned) {
  void* host = pinned ? nullptr : malloc(n);
  if (pinned) CHECK(cudaHostAlloc(&host, n, cudaHostAllocDefault));
  memset(host, 1, n);
  CHECK(cudaDeviceSynchronize());
  Spin<<<1, 1, 0, kernel_stream>>>(g_cycles_200ms);
  const double t0 = NowMs();
  cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  if (async) {
    CHECK(
        cudaMemcpyAsync(to_device ? g_dev : host, to_device ? host : g_dev, n, kind, copy_stream));
  } else {
    CHECK(cudaMemcpy(to_device ? g_dev : host, to_device ? host : g_dev, n, kind));
  }
  const double t1 = NowMs();
  CHECK(cudaDeviceSynchronize());
  const double t2 = NowMs();
  char buf[160];
  snprintf(buf, sizeof(buf), "call returned after %.1f ms, all done after %.1f ms", t1 - t0,
           t2 - t0);
  Fact(name, buf);
  if (pinned)
    CHECK(cudaFreeHost(host));
  else
    free(host);
}

// Whether work on the legacy stream waits for work on `other` (and back).
void LegacyOrder(const char* name, cudaStream_t other) {
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev));
  CHECK(cudaDeviceSynchronize());
  Spin<<<1, 1, 0, other>>>(g_cycles_200ms);
  double t0 = NowMs();
  CHECK(cudaEventRecord(ev, 0));
  CHECK(cudaEventSynchronize(ev));
  double a = NowMs() - t0;
  CHECK(cudaDeviceSynchronize());
  Spin<<<1, 1, 0, 0>>>(g_cycles_200ms);
  t0 = NowMs();
  CHECK(cudaEventRecord(ev, other));
  CHECK(cudaEventSynchronize(ev));
  double b = NowMs() - t0;
  CHECK(cudaDeviceSynchronize());
  char buf[160];
  snprintf(buf, sizeof(buf), "legacy-after-other %.1f ms, other-after-legacy %.1f ms", a, b);
  Fact(name, buf);
  cudaEventDestroy(ev);
}

// --- copies into a stream capture ------------------------------------------
// An async copy of host memory of each kind (pageable, registered, pinned)
// into a stream that captures (global mode): the copy's result, the
// capture's end, and, when a graph came out, what its launch copies after
// the host buffer changed; for registered memory also after it was
// unregistered before the launch.
void CaptureCopy(const char* name, int kind, bool h2d, bool unregister_before_launch) {
  const size_t n = 8 << 20;
  char* host = nullptr;
  if (kind == 2) {
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), n, cudaHostAllocDefault));
  } else {
    host = static_cast<char*>(Anon(n));
  }
  if (kind == 1) CHECK(cudaHostRegister(host, n, cudaHostRegisterDefault));
  Fill(host, n, 0x21);
  CHECK(cudaMemset(g_dev, 0x22, n));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaError_t copy = h2d ? cudaMemcpyAsync(g_dev, host, n, cudaMemcpyHostToDevice, s)
                         : cudaMemcpyAsync(host, g_dev, n, cudaMemcpyDeviceToHost, s);
  cudaGraph_t graph = nullptr;
  cudaError_t end = cudaStreamEndCapture(s, &graph);
  std::string what = std::string("copy=") + cudaGetErrorName(copy) +
                     " end=" + cudaGetErrorName(end) + (graph != nullptr ? " graph" : " no graph");
  cudaGetLastError();
  if (graph != nullptr) {
    cudaGraphExec_t exec;
    cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    what += std::string(" instantiate=") + cudaGetErrorName(inst);
    if (inst == cudaSuccess) {
      Fill(host, n, 0x23);                // what a launch should copy (H2D)
      CHECK(cudaMemset(g_dev, 0x24, n));  // (D2H)
      if (unregister_before_launch) CHECK(cudaHostUnregister(host));
      cudaError_t launch = cudaGraphLaunch(exec, s);
      cudaError_t sync = cudaStreamSynchronize(s);
      what +=
          std::string(" launch=") + cudaGetErrorName(launch) + " sync=" + cudaGetErrorName(sync);
      cudaGetLastError();
      if (h2d) {
        CHECK(cudaMemcpy(g_check, g_dev, n, cudaMemcpyDeviceToHost));
        what += g_check[0] == 0x23 ? " device=new"
                                   : (g_check[0] == 0x21 ? " device=old" : " device=other");
      } else {
        what += static_cast<unsigned char>(host[0]) == 0x24 ? " host=new" : " host=not-new";
      }
      cudaGraphExecDestroy(exec);
    }
    cudaGraphDestroy(graph);
  }
  Fact(name, what);
  CHECK(cudaStreamDestroy(s));
  if (kind == 1 && !unregister_before_launch) CHECK(cudaHostUnregister(host));
  if (kind == 2) {
    CHECK(cudaFreeHost(host));
  } else {
    munmap(host, n);
  }
}

// A copy captured from pageable memory whose pages are registered after the
// capture (as the registration cache may pin a buffer later), then
// unregistered between two launches: whether each launch still moves the
// memory as it is then, or the graph came to depend on the registration.
// Runs last in its process: if it faults, the context is gone.
void CaptureThenRegister(const char* name, bool h2d) {
  const size_t n = 8 << 20;
  char* host = static_cast<char*>(Anon(n));
  Fill(host, n, 0x31);
  CHECK(cudaMemset(g_dev, 0x32, n));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(h2d ? cudaMemcpyAsync(g_dev, host, n, cudaMemcpyHostToDevice, s)
            : cudaMemcpyAsync(host, g_dev, n, cudaMemcpyDeviceToHost, s));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::string what;
  for (int launch = 0; launch < 2; ++launch) {
    if (launch == 0) {
      CHECK(cudaHostRegister(host, n, cudaHostRegisterDefault));
    } else {
      CHECK(cudaHostUnregister(host));
    }
    const unsigned char want = static_cast<unsigned char>(0x40 + launch);
    if (h2d) {
      Fill(host, n, want);
    } else {
      CHECK(cudaMemset(g_dev, want, n));
      CHECK(cudaDeviceSynchronize());
    }
    cudaError_t l = cudaGraphLaunch(exec, s);
    cudaError_t sync = cudaStreamSynchronize(s);
    what += std::string(launch == 0 ? "registered: " : " unregistered: ") +
            "launch=" + cudaGetErrorName(l) + " sync=" + cudaGetErrorName(sync);
    if (sync != cudaSuccess) break;
    if (h2d) {
      CHECK(cudaMemcpy(g_check, g_dev, n, cudaMemcpyDeviceToHost));
      what += g_check[n - 1] == static_cast<char>(want) ? " device=new" : " device=not-new";
    } else {
      what += static_cast<unsigned char>(host[n - 1]) == want ? " host=new" : " host=not-new";
    }
  }
  Fact(name, what);
}

// A call pinshim may make on one thread while the program captures a
// stream in global mode on another: the call's result and whether the
// capture survived, with the calling thread in global (default) or relaxed
// capture mode. `what`: register, unregister, hostalloc, freehost,
// event_sync, legacy_is_capturing, async_pageable_h2d (on another stream).
void CaptureNeighbour(const char* what, bool relaxed) {
  const size_t n = 4 << 20;
  void* buf = Anon(n);
  memset(buf, 1, n);
  void* pinned = nullptr;
  CHECK(cudaHostAlloc(&pinned, n, cudaHostAllocDefault));
  if (strcmp(what, "unregister") == 0) CHECK(cudaHostRegister(buf, n, cudaHostRegisterDefault));
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaStream_t cap, other;
  CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  CHECK(cudaEventRecord(ev, other));
  CHECK(cudaStreamSynchronize(other));
  CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(g_dev, 0, 4096, cap));
  cudaError_t call = cudaSuccess;
  std::thread t([&] {
    CHECK(cudaSetDevice(0));
    cudaStreamCaptureMode mode =
        relaxed ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeGlobal;
    cudaThreadExchangeStreamCaptureMode(&mode);
    if (strcmp(what, "register") == 0) {
      call = cudaHostRegister(buf, n, cudaHostRegisterDefault);
    } else if (strcmp(what, "unregister") == 0) {
      call = cudaHostUnregister(buf);
    } else if (strcmp(what, "hostalloc") == 0) {
      void* p = nullptr;
      call = cudaHostAlloc(&p, n, cudaHostAllocDefault);
      if (call == cudaSuccess) cudaFreeHost(p);
    } else if (strcmp(what, "freehost") == 0) {
      call = cudaFreeHost(pinned);
      if (call == cudaSuccess) pinned = nullptr;
    } else if (strcmp(what, "event_sync") == 0) {
      call = cudaEventSynchronize(ev);
    } else if (strcmp(what, "legacy_is_capturing") == 0) {
      cudaStreamCaptureStatus st;
      call = cudaStreamIsCapturing(nullptr, &st);
    } else if (strcmp(what, "async_pageable_h2d") == 0) {
      call = cudaMemcpyAsync(g_dev, buf, n, cudaMemcpyHostToDevice, other);
      cudaStreamSynchronize(other);
    }
    cudaGetLastError();
  });
  t.join();
  cudaGraph_t graph = nullptr;
  cudaError_t end = cudaStreamEndCapture(cap, &graph);
  cudaGetLastError();
  Fact((std::string("capture_neighbour_") + what + (relaxed ? "_relaxed" : "_global")).c_str(),
       std::string("call=") + cudaGetErrorName(call) + " capture_end=" + cudaGetErrorName(end));
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (strcmp(what, "register") == 0 && call == cudaSuccess) cudaHostUnregister(buf);
  if (strcmp(what, "unregister") == 0 && call != cudaSuccess) cudaHostUnregister(buf);
  if (pinned != nullptr) cudaFreeHost(pinned);
  cudaEventDestroy(ev);
  cudaStreamDestroy(cap);
  cudaStreamDestroy(other);
  munmap(buf, n);
}

void PagemapCost() {
  const size_t n = 64 << 20;
  unsigned char* b = static_cast<unsigned char*>(Anon(n));
  Fill(b, n, 1);
  int fd = open("/proc/self/pagemap", O_RDONLY);
  static uint64_t entries[(64 << 20) / kPage];
  const double t0 = NowMs();
  const int reps = 50;
  for (int i = 0; i < reps; ++i) {
    pread(fd, entries, sizeof(entries), (reinterpret_cast<uintptr_t>(b) / kPage) * 8);
  }
  const double ms = (NowMs() - t0) / reps;
  close(fd);
  char buf[96];
  snprintf(buf, sizeof(buf), "%.3f ms per 64 MiB range (%zu entries), pfn[0]=%llx", ms, n / kPage,
           static_cast<unsigned long long>(entries[0] & ((1ull << 55) - 1)));
  Fact("pagemap_read_cost", buf);
  munmap(b, n);
}

// Whether a synchronous cudaMemcpy from pageable memory to the device
// returns before its DMA completed, as the documentation allows ("the DMA to
// final destination may not have completed"): right after it returns, the
// legacy stream is queried; per size, how many of 40 copies were still in
// flight, and the median time to return and to completion. Pinned memory
// alongside. Staged copies may return as early as the driver does.
void SyncH2dReturn() {
  for (int pinned = 0; pinned < 2; ++pinned) {
    for (size_t n :
         {size_t{64} << 10, size_t{1} << 20, size_t{4} << 20, size_t{16} << 20, size_t{64} << 20}) {
      const int reps = 40;
      int in_flight = 0;
      double ret[reps], done[reps];
      for (int r = 0; r < reps; ++r) {
        void* host = nullptr;
        if (pinned) {
          CHECK(cudaHostAlloc(&host, n, cudaHostAllocDefault));
        } else {
          host = malloc(n);
        }
        memset(host, r + 1, n);
        CHECK(cudaDeviceSynchronize());
        const double t0 = NowMs();
        CHECK(cudaMemcpy(g_dev, host, n, cudaMemcpyHostToDevice));
        const double t1 = NowMs();
        const cudaError_t q = cudaStreamQuery(0);
        if (q == cudaErrorNotReady) ++in_flight;
        CHECK(cudaDeviceSynchronize());
        const double t2 = NowMs();
        ret[r] = t1 - t0;
        done[r] = t2 - t0;
        if (pinned) {
          CHECK(cudaFreeHost(host));
        } else {
          free(host);
        }
      }
      std::sort(ret, ret + reps);
      std::sort(done, done + reps);
      char name[64], buf[160];
      snprintf(name, sizeof(name), "sync_h2d_%s_%zuKiB", pinned ? "pinned" : "pageable", n >> 10);
      snprintf(buf, sizeof(buf),
               "in flight at return %d of %d; returned after %.3f ms, done after %.3f ms (medians)",
               in_flight, reps, ret[reps / 2], done[reps / 2]);
      Fact(name, buf);
    }
  }
}

// Whether a pageable host-to-device copy reads its source before or after
// the work queued ahead of it on its stream: a 50 ms kernel, then a host
// function that rewrites the source (0x11 -> 0x22), then the copy. The
// CUDA documentation says a stream sync is performed before such a copy
// is initiated (the device would get 0x22 throughout); a copy that reads
// its source at once gets 0x11. Asynchronous on a created stream, and
// synchronous on the legacy stream.
struct Rewrite {
  void* p;
  size_t n;
};
void RewriteSource(void* arg) {
  auto* w = static_cast<Rewrite*>(arg);
  memset(w->p, 0x22, w->n);
}

void HostFuncOrder() {
  CalibrateSpin();
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (int sync = 0; sync < 2; ++sync) {
    for (size_t n : {size_t{64} << 10, size_t{1} << 20, size_t{4} << 20, size_t{8} << 20,
                     size_t{16} << 20, size_t{32} << 20, size_t{64} << 20}) {
      cudaStream_t on = sync ? cudaStream_t{0} : s;
      auto* host = static_cast<unsigned char*>(malloc(n));
      memset(host, 0x11, n);
      CHECK(cudaMemset(g_dev, 0, n));
      CHECK(cudaDeviceSynchronize());
      Rewrite w{host, n};
      Spin<<<1, 1, 0, on>>>(g_cycles_200ms / 4);
      CHECK(cudaLaunchHostFunc(on, RewriteSource, &w));
      const double t0 = NowMs();
      if (sync) {
        CHECK(cudaMemcpy(g_dev, host, n, cudaMemcpyHostToDevice));
      } else {
        CHECK(cudaMemcpyAsync(g_dev, host, n, cudaMemcpyHostToDevice, on));
      }
      const double t1 = NowMs();
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(g_check, g_dev, n, cudaMemcpyDeviceToHost));
      size_t fresh = 0, old = 0;
      for (size_t i = 0; i < n; ++i) {
        fresh += g_check[i] == 0x22;
        old += g_check[i] == 0x11;
      }
      char name[64], buf[200];
      snprintf(name, sizeof(name), "hostfunc_then_%s_h2d_%zuKiB", sync ? "sync" : "async", n >> 10);
      snprintf(buf, sizeof(buf),
               "%s: %zu of %zu bytes rewritten, %zu old; call returned after %.1f ms",
               fresh == n ? "after"
               : old == n ? "before"
                          : "MIXED",
               fresh, n, old, t1 - t0);
      Fact(name, buf);
      free(host);
    }
  }
  CHECK(cudaStreamDestroy(s));
}

void CaptureFacts() {
  CaptureCopy("capture_h2d_pageable", 0, true, false);
  CaptureCopy("capture_d2h_pageable", 0, false, false);
  CaptureCopy("capture_h2d_registered", 1, true, false);
  CaptureCopy("capture_d2h_registered", 1, false, false);
  CaptureCopy("capture_h2d_hostalloc", 2, true, false);
  for (const char* what : {"register", "unregister", "hostalloc", "freehost", "event_sync",
                           "legacy_is_capturing", "async_pageable_h2d"}) {
    CaptureNeighbour(what, false);
    CaptureNeighbour(what, true);
  }
}

}  // namespace

// With no argument: every fact but the four below. `page_facts capture`: the
// capture facts alone. `page_facts capture_unregistered_h2d` (or `_d2h`):
// a graph launched after the memory its copy captured as registered was
// unregistered. On the H200 (driver 580) that launch faults the context
// ("unspecified launch failure", which every later call returns), so each
// runs alone, in its own process. `page_facts capture_then_register_h2d`
// (or `_d2h`): CaptureThenRegister, alone for the same reason.
int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string only = argc > 1 ? argv[1] : "";
  struct Section {
    const char* name;
    void (*run)();
  };
  static const Section kSections[] = {
      {"capture", CaptureFacts},
      {"sync_h2d_return", SyncH2dReturn},
      {"hostfunc_order", HostFuncOrder},
      {"capture_unregistered_h2d",
       [] { CaptureCopy("capture_h2d_registered_unregistered_before_launch", 1, true, true); }},
      {"capture_unregistered_d2h",
       [] { CaptureCopy("capture_d2h_registered_unregistered_before_launch", 1, false, true); }},
      {"capture_then_register_h2d",
       [] { CaptureThenRegister("capture_h2d_pageable_registered_after_capture", true); }},
      {"capture_then_register_d2h",
       [] { CaptureThenRegister("capture_d2h_pageable_registered_after_capture", false); }},
  };
  const Section* section = nullptr;
  for (const Section& s : kSections) {
    if (only == s.name) section = &s;
  }
  if (!only.empty() && section == nullptr) {
    fprintf(stderr, "page_facts: unknown section '%s'; the sections:", only.c_str());
    for (const Section& s : kSections) fprintf(stderr, " %s", s.name);
    fprintf(stderr, "\n");
    return 2;
  }
  CHECK(cudaMalloc(&g_dev, 64 << 20));
  CHECK(cudaHostAlloc(&g_check, 64 << 20, cudaHostAllocDefault));
  if (section != nullptr) {
    section->run();
    printf("done\n");
    return 0;
  }
  CalibrateSpin();
  const size_t n = 64 << 20;
  RegisteredAdvice("dontneed", MADV_DONTNEED, n);
  RegisteredAdvice("free", MADV_FREE, n);
  RegisteredAdvice("pageout", MADV_PAGEOUT, n);
  RegisteredAdvice("cold", MADV_COLD, n);
  RegisteredAdvice("hugepage", MADV_HUGEPAGE, n);
  RegisteredAdvice("mergeable", MADV_MERGEABLE, n);
  RegisteredAdvice("populate_write", MADV_POPULATE_WRITE, n);
  RegisteredAdvice("dontfork", MADV_DONTFORK, n);
  RegisteredAdvice("wipeonfork", MADV_WIPEONFORK, n);
  RegisteredAdvice("remove", MADV_REMOVE, n);
  RegisteredMapFixed(false, n);
  RegisteredMapFixed(true, n);
  RegisteredMremap(n);
  PartlyRegistered();
  HostAllocBounds();
  ForkRegistered("fork_registered", -1);
  ForkRegistered("fork_registered_dontfork", MADV_DONTFORK);
  ForkRegistered("fork_registered_wipeonfork", MADV_WIPEONFORK);
  ForkChildUsesCuda();
  WipeOnForkPlain(false);
  WipeOnForkPlain(true);
  HostAllocLayout();
  const char* names[] = {"dontneed", "dontneed_mid",  "free",       "remove",      "dontfork",
                         "pageout",  "map_fixed_mid", "munmap_mid", "mremap_move", "hugepage"};
  for (int i = 0; i < 10; ++i) HostAllocUnder(names[i], i);
  FileBacked("/dev/shm", 0);
  FileBacked("/dev/shm", 1);
  FileBacked("/dev/shm", 2);
  FileBacked("/tmp", 0);
  FileBacked("/tmp", 1);
  FileBacked("/tmp", 2);
  SysvShm();
  cudaStream_t blocking, nonblocking;
  CHECK(cudaStreamCreate(&blocking));
  CHECK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
  AsyncTiming("async_h2d_pageable_64MiB_behind_kernel_same_stream", blocking, blocking, n, true,
              true, false);
  AsyncTiming("async_h2d_pageable_64KiB_behind_kernel_same_stream", blocking, blocking, 64 << 10,
              true, true, false);
  AsyncTiming("async_h2d_pageable_1MiB_behind_kernel_same_stream", blocking, blocking, 1 << 20,
              true, true, false);
  AsyncTiming("async_d2h_pageable_64MiB_behind_kernel_same_stream", blocking, blocking, n, false,
              true, false);
  AsyncTiming("async_h2d_pageable_64MiB_kernel_on_other_nonblocking", nonblocking, blocking, n,
              true, true, false);
  AsyncTiming("async_h2d_pinned_64MiB_behind_kernel_same_stream", blocking, blocking, n, true, true,
              true);
  AsyncTiming("sync_h2d_pageable_64MiB_kernel_on_blocking", blocking, nullptr, n, true, false,
              false);
  AsyncTiming("sync_h2d_pageable_64MiB_kernel_on_nonblocking", nonblocking, nullptr, n, true, false,
              false);
  AsyncTiming("sync_d2h_pageable_64MiB_kernel_on_nonblocking", nonblocking, nullptr, n, false,
              false, false);
  AsyncTiming("sync_h2d_pinned_64MiB_kernel_on_nonblocking", nonblocking, nullptr, n, true, false,
              true);
  LegacyOrder("legacy_vs_blocking_stream", blocking);
  LegacyOrder("legacy_vs_nonblocking_stream", nonblocking);
  CaptureFacts();
  PagemapCost();
  printf("done\n");
  return 0;
}
