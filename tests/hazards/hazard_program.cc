// The hazard program: a CUDA program that does unusual but legal things to
// the pages behind buffers it copies (drops them, maps over them, moves them,
// forks), and prints what the device and the host end up holding. Its output
// must be byte-for-byte the same without pinshim and in every mode; any
// difference is a page change pinshim's pinning did not follow.
//
//   hazard_program [case-prefix ...] [-x case-prefix ...]
//       all cases, or those whose name starts so, less those -x names
//   hazard_program --list [case-prefix ...] [-x case-prefix ...]
//       the names of those cases, one a line, without running them
//
// Each line: "<memory> <case>: h2d=<hash> h2d_async=<hash> d2h=<hash> d2h_async=<hash>"
// (hashes of what the device received, and of what the host holds after
// copying a device pattern back). Memory kinds: malloc (glibc heap), mmap
// (anonymous mapping), hotsite (a malloc site whose buffers are copied hot:
// optimize mode serves its later buffers from the pinned arena), pinned
// (cuMemHostAlloc: optimize mode serves it from the pool), vmm-host (the
// VMM API's host memory: cuMemCreate, cuMemMap, cuMemSetAccess) and
// host-pool (cuMemAllocFromPoolAsync from a host memory pool): pinned by the
// driver, which optimize mode must leave as they are. Every buffer is copied
// hot first, so optimize mode has pinned it before its pages change.
//
// A case on memory the driver maps may end the process (a page the program
// drops from the driver's mapping need not come back as the kernel's would):
// the suite (hazards_test.py) runs those cases apart, and compares how each
// ended as well as what it printed.
//
// Reaches the driver by linking libcuda.so.1 (the simulated driver in CI,
// the real one on a GPU machine); uses only the driver API.
#include <cuda.h>
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kBytes = size_t{4} << 20;
constexpr int kHotCopies = 6;

CUdeviceptr g_dev = 0;
CUstream g_stream = nullptr;
std::vector<std::string> g_only;
std::vector<std::string> g_except;
bool g_list = false;

#define CHECK(call)                                                      \
  do {                                                                   \
    CUresult r_ = (call);                                                \
    if (r_ != CUDA_SUCCESS) {                                            \
      fprintf(stderr, "%s:%d %s = %d\n", __FILE__, __LINE__, #call, r_); \
      exit(3);                                                           \
    }                                                                    \
  } while (0)

uint64_t Hash(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
  }
  return h;
}

// What the device holds in [0, n), hashed (read back through a buffer of
// its own, so the check never touches the buffer under test).
uint64_t DeviceHash(size_t n) {
  static std::vector<unsigned char> back(kBytes);
  CHECK(cuMemcpyDtoH(back.data(), g_dev, n));
  return Hash(back.data(), n);
}

void FillPattern(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = (uint64_t{seed} << 40) ^ (i * 0x9E3779B97F4A7C15ull);
    memcpy(p + i, &v, 8);
  }
}

// Copies the buffer to the device often enough that optimize mode pins it.
void MakeHot(unsigned char* p, size_t n) {
  for (int i = 0; i < kHotCopies; ++i) CHECK(cuMemcpyHtoD(g_dev, p, n));
}

// The four measurements of one case, after `p` (n bytes) went through it.
// `write` fills the buffer with new content (the program's writes after the
// page change).
std::string Measure(unsigned char* p, size_t n) {
  char out[256];
  FillPattern(p, n, 0xB2);
  CHECK(cuMemcpyHtoD(g_dev, p, n));
  const uint64_t h2d = DeviceHash(n);
  FillPattern(p, n, 0xB3);
  CHECK(cuMemcpyHtoDAsync(g_dev, p, n, g_stream));
  CHECK(cuStreamSynchronize(g_stream));
  const uint64_t h2d_async = DeviceHash(n);
  CHECK(cuMemsetD8(g_dev, 0xC4, n));
  CHECK(cuMemcpyDtoH(p, g_dev, n));
  const uint64_t d2h = Hash(p, n);
  CHECK(cuMemsetD8(g_dev, 0xC5, n));
  CHECK(cuMemcpyDtoHAsync(p, g_dev, n, g_stream));
  CHECK(cuStreamSynchronize(g_stream));
  const uint64_t d2h_async = Hash(p, n);
  snprintf(out, sizeof(out), "h2d=%016llx h2d_async=%016llx d2h=%016llx d2h_async=%016llx",
           (unsigned long long)h2d, (unsigned long long)h2d_async, (unsigned long long)d2h,
           (unsigned long long)d2h_async);
  return out;
}

// --- buffers of each kind ------------------------------------------------------

enum class Kind { kMalloc, kMmap, kHotSite, kPinned, kVmmHost, kHostPool };
const char* KindName(Kind k) {
  switch (k) {
    case Kind::kMalloc: return "malloc";
    case Kind::kMmap: return "mmap";
    case Kind::kHotSite: return "hotsite";
    case Kind::kPinned: return "pinned";
    case Kind::kVmmHost: return "vmm-host";
    case Kind::kHostPool: return "host-pool";
  }
  return "?";
}

// Memory the driver maps for the program (VMM host memory, a host pool's):
// the program does not map over it; the driver's calls give it back.
bool DriverMapped(Kind k) { return k == Kind::kVmmHost || k == Kind::kHostPool; }

bool Wanted(const std::string& name);

// VMM host allocations live: address -> physical handle.
std::vector<std::pair<unsigned char*, CUmemGenericAllocationHandle>> g_vmm;

// Creates, reserves and maps n bytes of host-located VMM memory (n a
// multiple of the granularity), opened read-write for device 0 and the CPU.
unsigned char* VmmHostAlloc(size_t n) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, n, &prop, 0));
  CUdeviceptr va;
  CHECK(cuMemAddressReserve(&va, n, 0, 0, 0));
  CHECK(cuMemMap(va, n, 0, h, 0));
  CUmemAccessDesc access[2] = {};
  access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access[1].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  for (CUmemAccessDesc& a : access) a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(va, n, &access[0], 1));
  CHECK(cuMemSetAccess(va, n, &access[1], 1));
  auto* p = reinterpret_cast<unsigned char*>(va);
  g_vmm.emplace_back(p, h);
  return p;
}

void VmmHostFree(unsigned char* p, size_t n) {
  for (auto it = g_vmm.begin(); it != g_vmm.end(); ++it) {
    if (it->first != p) continue;
    CHECK(cuMemUnmap(reinterpret_cast<CUdeviceptr>(p), n));
    CHECK(cuMemAddressFree(reinterpret_cast<CUdeviceptr>(p), n));
    CHECK(cuMemRelease(it->second));
    g_vmm.erase(it);
    return;
  }
}

// One host memory pool for every host-pool buffer, opened for device 0.
CUmemoryPool HostPool() {
  static CUmemoryPool pool = nullptr;
  if (pool != nullptr) return pool;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  props.location.id = 0;
  CHECK(cuMemPoolCreate(&pool, &props));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemPoolSetAccess(pool, &access, 1));
  return pool;
}

// One allocation site for every hotsite buffer: its first buffers are
// copied hot, which makes the site hot for optimize mode.
__attribute__((noinline)) unsigned char* HotSiteAlloc(size_t n) {
  unsigned char* p = static_cast<unsigned char*>(malloc(n));
  asm volatile("" ::: "memory");  // keeps this frame a distinct return address
  return p;
}

void WarmHotSite() {
  static bool warmed = false;
  if (warmed) return;
  warmed = true;
  for (int i = 0; i < 3; ++i) {
    unsigned char* p = HotSiteAlloc(kBytes);
    FillPattern(p, kBytes, i);
    MakeHot(p, kBytes);
    free(p);
  }
}

unsigned char* Allocate(Kind k, size_t n) {
  switch (k) {
    case Kind::kMalloc: return static_cast<unsigned char*>(malloc(n));
    case Kind::kMmap: {
      void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      return p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
    }
    case Kind::kHotSite: WarmHotSite(); return HotSiteAlloc(n);
    case Kind::kPinned: {
      void* p = nullptr;
      CHECK(cuMemHostAlloc(&p, n, 0));
      return static_cast<unsigned char*>(p);
    }
    case Kind::kVmmHost: return VmmHostAlloc(n);
    case Kind::kHostPool: {
      CUdeviceptr p;
      CHECK(cuMemAllocFromPoolAsync(&p, n, HostPool(), g_stream));
      CHECK(cuStreamSynchronize(g_stream));
      return reinterpret_cast<unsigned char*>(p);
    }
  }
  return nullptr;
}

void Release(Kind k, unsigned char* p, size_t n) {
  switch (k) {
    case Kind::kMalloc:
    case Kind::kHotSite: free(p); break;
    case Kind::kMmap: munmap(p, n); break;
    case Kind::kPinned: CHECK(cuMemFreeHost(p)); break;
    case Kind::kVmmHost: VmmHostFree(p, n); break;
    case Kind::kHostPool:
      CHECK(cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(p), g_stream));
      CHECK(cuStreamSynchronize(g_stream));
      break;
  }
}

// The page-aligned middle of [p, p + n).
struct Pages {
  unsigned char* lo;
  size_t len;
};
Pages Interior(unsigned char* p, size_t n) {
  uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kPage - 1) / kPage * kPage;
  uintptr_t b = (reinterpret_cast<uintptr_t>(p) + n) / kPage * kPage;
  return {reinterpret_cast<unsigned char*>(a), b > a ? b - a : 0};
}

bool Named(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const std::string& prefix : prefixes) {
    if (name.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

// Whether case `name` runs; with --list, prints its name instead.
bool Wanted(const std::string& name) {
  if (!g_only.empty() && !Named(name, g_only)) return false;
  if (Named(name, g_except)) return false;
  if (g_list) printf("%s\n", name.c_str());
  return !g_list;
}

// --- cases ---------------------------------------------------------------------

// A case changes the pages of buffer p (n bytes, hot); returns the buffer
// the program goes on using (the same, or where it moved), or null when
// the case does not apply to the kind.
using CaseFn = unsigned char* (*)(Kind, unsigned char*, size_t);

unsigned char* DontneedWhole(Kind, unsigned char* p, size_t n) {
  Pages g = Interior(p, n);
  madvise(g.lo, g.len, MADV_DONTNEED);
  return p;
}

unsigned char* DontneedMiddle(Kind, unsigned char* p, size_t n) {
  Pages g = Interior(p + n / 4, n / 2);
  madvise(g.lo, g.len, MADV_DONTNEED);
  return p;
}

unsigned char* MadvFree(Kind, unsigned char* p, size_t n) {
  Pages g = Interior(p, n);
  madvise(g.lo, g.len, MADV_FREE);
  return p;
}

unsigned char* MadvRemove(Kind, unsigned char* p, size_t n) {
  Pages g = Interior(p, n);
  madvise(g.lo, g.len, MADV_REMOVE);  // shared memory only; fails elsewhere
  return p;
}

unsigned char* PosixDontneed(Kind, unsigned char* p, size_t n) {
  Pages g = Interior(p, n);
  posix_madvise(g.lo, g.len, POSIX_MADV_DONTNEED);
  return p;
}

unsigned char* PageOut(Kind, unsigned char* p, size_t n) {
#ifdef SYS_process_madvise
  Pages g = Interior(p, n);
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
  if (pidfd >= 0) {
    iovec iov = {g.lo, g.len};
    process_madvise(pidfd, &iov, 1, 21 /* MADV_PAGEOUT */, 0);
    close(pidfd);
  }
#endif
  return p;
}

unsigned char* MapFixed(unsigned char* lo, size_t len) {
  mmap(lo, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  return lo;
}

unsigned char* MapFixedWhole(Kind, unsigned char* p, size_t n) {
  Pages g = Interior(p, n);
  MapFixed(g.lo, g.len);
  return p;
}

unsigned char* MapFixedHalf(Kind, unsigned char* p, size_t n) {
  Pages g = Interior(p, n / 2);
  MapFixed(g.lo, g.len);
  return p;
}

// Moves an mmap'd buffer elsewhere and goes on with it there.
unsigned char* MremapMove(Kind k, unsigned char* p, size_t n) {
  if (k != Kind::kMmap) return nullptr;
  void* target = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* q = mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  return q == MAP_FAILED ? p : static_cast<unsigned char*>(q);
}

// The pages move away; the old addresses stay mapped, empty; the program
// goes on with the old addresses (and unmaps the new ones).
unsigned char* MremapDontunmap(Kind k, unsigned char* p, size_t n) {
  if (k != Kind::kMmap) return nullptr;
  void* q = mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
  if (q != MAP_FAILED) munmap(q, n);
  return p;
}

// Shrinks in place, then grows back (possibly elsewhere).
unsigned char* MremapShrinkGrow(Kind k, unsigned char* p, size_t n) {
  if (k != Kind::kMmap) return nullptr;
  void* q = mremap(p, n, n / 2, 0);
  if (q == MAP_FAILED) return p;
  q = mremap(q, n / 2, n, MREMAP_MAYMOVE);
  return q == MAP_FAILED ? p : static_cast<unsigned char*>(q);
}

// Unmaps the buffer's second half and maps fresh memory there again.
unsigned char* MunmapPart(Kind k, unsigned char* p, size_t n) {
  if (k != Kind::kMmap) return nullptr;
  munmap(p + n / 2, n / 2);
  mmap(p + n / 2, n / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
       -1, 0);
  return p;
}

// A System V segment attached over the buffer's middle (SHM_REMAP).
unsigned char* ShmRemap(Kind k, unsigned char* p, size_t n) {
  if (k != Kind::kMmap) return nullptr;
  int id = shmget(IPC_PRIVATE, n / 2, IPC_CREAT | 0600);
  if (id < 0) return p;
  shmat(id, p + n / 4, SHM_REMAP);
  shmctl(id, IPC_RMID, nullptr);  // goes once detached
  return p;
}

// Frees neighbours of a heap buffer and trims the heap.
unsigned char* MallocTrim(Kind k, unsigned char* p, size_t) {
  if (k != Kind::kMalloc) return nullptr;
  std::vector<void*> junk;
  for (int i = 0; i < 64; ++i) junk.push_back(malloc(100000));
  for (void* j : junk) free(j);
  malloc_trim(0);
  return p;
}

// The child of ForkWrites, alive while the parent writes and copies.
pid_t g_child = -1;
int g_child_go = -1;

// The child writes its own copy; the parent writes and copies meanwhile
// (in Measure); ForkReap then lets the child check its copy.
unsigned char* ForkWrites(Kind, unsigned char* p, size_t n) {
  int go[2], done[2];
  if (pipe(go) != 0 || pipe(done) != 0) return p;
  pid_t pid = fork();
  if (pid == 0) {
    FillPattern(p, n, 0xC1);
    char c = 'w';
    if (write(done[1], &c, 1) != 1) _exit(2);
    if (read(go[0], &c, 1) != 1) _exit(2);
    unsigned char probe[64];
    FillPattern(probe, sizeof(probe), 0xC1);
    _exit(memcmp(p, probe, sizeof(probe)) == 0 ? 0 : 1);
  }
  char c;
  const bool ready = read(done[0], &c, 1) == 1;
  close(go[0]);
  close(done[0]);
  close(done[1]);
  g_child = ready ? pid : -1;
  g_child_go = go[1];
  return p;
}

// Ends the child of ForkWrites: whether its copy stayed its own.
std::string ForkReap() {
  if (g_child_go < 0) return "";
  const bool told = write(g_child_go, "g", 1) == 1;
  close(g_child_go);
  g_child_go = -1;
  int status = 0;
  if (g_child > 0) waitpid(g_child, &status, 0);
  const bool own = told && g_child > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  g_child = -1;
  // Pinned (cuMemHostAlloc) memory is shared with a fork child, so the
  // child sees the parent's writes there; other memory is the child's own.
  return own ? " child=own-copy" : " child=sees-other-writes";
}

// Forks with the buffer's pages marked with `advice` first; the child
// reports whether it has the range and the first byte it reads there.
std::string ForkWithAdvice(unsigned char* p, size_t n, int advice) {
  Pages g = Interior(p, n);
  madvise(g.lo, g.len, advice);
  int out[2];
  if (pipe(out) != 0) return " child=?";
  pid_t pid = fork();
  if (pid == 0) {
    // A range the child does not have would fault: a system call reading
    // it answers EFAULT instead.
    unsigned char msg[2] = {'M', 0};
    if (write(out[1], g.lo, 1) != 1) msg[0] = 'U';
    msg[1] = msg[0] == 'M' ? g.lo[0] : 0;
    if (write(out[1], msg, 2) != 2) _exit(2);
    _exit(0);
  }
  close(out[1]);
  unsigned char buf[3] = {0, 0, 0};
  size_t got = 0;
  ssize_t r;
  while (got < sizeof(buf) && (r = read(out[0], buf + got, sizeof(buf) - got)) > 0) got += r;
  close(out[0]);
  waitpid(pid, nullptr, 0);
  // 3 bytes: the probe byte, then 'M' and the value; 2: 'U' and 0.
  const unsigned char* msg = got == 3 ? buf + 1 : buf;
  char text[48];
  if (msg[0] == 'M') {
    snprintf(text, sizeof(text), " child-reads=%02x", msg[1]);
  } else {
    snprintf(text, sizeof(text), " child-reads=%s", msg[0] == 'U' ? "unmapped" : "?");
  }
  return text;
}

// The child tries the driver (which a forked child cannot use on the real
// driver) and reports the result code.
std::string ForkChildCuda() {
  int out[2];
  if (pipe(out) != 0) return "";
  pid_t pid = fork();
  if (pid == 0) {
    unsigned char b[64] = {1};
    CUresult r = cuMemcpyHtoD(g_dev, b, sizeof(b));
    int code = static_cast<int>(r);
    if (write(out[1], &code, sizeof(code)) != sizeof(code)) _exit(2);
    _exit(0);
  }
  close(out[1]);
  int code = -1;
  if (read(out[0], &code, sizeof(code)) != sizeof(code)) code = -1;
  close(out[0]);
  waitpid(pid, nullptr, 0);
  return " child-copy-result=" + std::to_string(code);
}

struct Case {
  const char* name;
  CaseFn fn;
};

const Case kCases[] = {
    {"dontneed_whole", DontneedWhole},
    {"dontneed_middle", DontneedMiddle},
    {"madv_free", MadvFree},
    {"madv_remove", MadvRemove},
    {"posix_dontneed", PosixDontneed},
    {"pageout_process_madvise", PageOut},
    {"map_fixed_whole", MapFixedWhole},
    {"map_fixed_half", MapFixedHalf},
    {"mremap_move", MremapMove},
    {"mremap_dontunmap", MremapDontunmap},
    {"mremap_shrink_grow", MremapShrinkGrow},
    {"munmap_part", MunmapPart},
    {"shm_remap", ShmRemap},
    {"malloc_trim", MallocTrim},
    {"fork_writes", ForkWrites},
};

// The cases for memory the driver maps: a page drop, a hole punched in the
// shared pages, a fork child writing. The other page drops add nothing for
// shared memory, and mapping over the driver's mapping is not the
// program's to do.
bool AppliesToDriverMapped(const Case& c) {
  for (const char* name : {"dontneed_whole", "madv_remove", "fork_writes"}) {
    if (strcmp(c.name, name) == 0) return true;
  }
  return false;
}

void RunCase(Kind kind, const Case& c) {
  std::string name = std::string(KindName(kind)) + " " + c.name;
  if ((DriverMapped(kind) && !AppliesToDriverMapped(c)) || !Wanted(name)) return;
  unsigned char* p = Allocate(kind, kBytes);
  FillPattern(p, kBytes, 0xA1);
  MakeHot(p, kBytes);
  unsigned char* q = c.fn(kind, p, kBytes);
  if (q == nullptr) {
    Release(kind, p, kBytes);
    return;
  }
  std::string line = Measure(q, kBytes);
  line += ForkReap();
  Release(kind, q, kBytes);
  // A buffer allocated after it must not inherit anything of it.
  unsigned char* next = Allocate(kind, kBytes);
  FillPattern(next, kBytes, 0xA7);
  MakeHot(next, kBytes);
  line += " next:" + Measure(next, kBytes).substr(0, 20);
  Release(kind, next, kBytes);
  printf("%s: %s\n", name.c_str(), line.c_str());
  fflush(stdout);
}

void RunForkAdvice(Kind kind, const char* what, int advice) {
  std::string name = std::string(KindName(kind)) + " " + what;
  if (!Wanted(name)) return;
  unsigned char* p = Allocate(kind, kBytes);
  FillPattern(p, kBytes, 0x5E);
  MakeHot(p, kBytes);
  std::string child = ForkWithAdvice(p, kBytes, advice);
  std::string line = Measure(p, kBytes) + child;
  // The advice outlives the buffer in the mapping (glibc's heap, the arena):
  // undone, so that later cases start alike.
  Pages g = Interior(p, kBytes);
  madvise(g.lo, g.len, advice == MADV_DONTFORK ? MADV_DOFORK : MADV_KEEPONFORK);
  Release(kind, p, kBytes);
  printf("%s: %s\n", name.c_str(), line.c_str());
  fflush(stdout);
}

// A hot buffer copied into a stream capture (global mode) both ways: what
// the driver answers, and what a graph that comes out copies at launch once
// the buffer and the device hold new data; then the buffer as used after.
void RunCapture(Kind kind) {
  std::string name = std::string(KindName(kind)) + " stream_capture";
  if (!Wanted(name)) return;
  unsigned char* p = Allocate(kind, kBytes);
  FillPattern(p, kBytes, 0xA1);
  MakeHot(p, kBytes);
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const CUresult h2d = cuMemcpyHtoDAsync(g_dev, p, kBytes / 2, s);
  const CUresult d2h = cuMemcpyDtoHAsync(p + kBytes / 2, g_dev + kBytes / 2, kBytes / 2, s);
  CUgraph graph = nullptr;
  const CUresult end = cuStreamEndCapture(s, &graph);
  char line[512];
  snprintf(line, sizeof(line), "h2d=%d d2h=%d end=%d graph=%d", h2d, d2h, end, graph != nullptr);
  std::string out = line;
  if (graph != nullptr) {
    CUgraphExec exec = nullptr;
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    FillPattern(p, kBytes, 0xA5);
    CHECK(cuMemsetD8(g_dev + kBytes / 2, 0x5A, kBytes / 2));
    // The memset runs on the legacy stream, which a non-blocking stream does
    // not wait for.
    CHECK(cuStreamSynchronize(nullptr));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    snprintf(line, sizeof(line), " launch: device=%016llx host=%016llx",
             (unsigned long long)DeviceHash(kBytes / 2),
             (unsigned long long)Hash(p + kBytes / 2, kBytes / 2));
    out += line;
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
  }
  CHECK(cuStreamDestroy(s));
  out += " after: " + Measure(p, kBytes);
  Release(kind, p, kBytes);
  printf("%s: %s\n", name.c_str(), out.c_str());
  fflush(stdout);
}

// Work queued ahead of an upload rewrites its source: a host function that
// waits while the upload is called (RewriteLater) and then writes a new
// pattern. Without pinshim a synchronous upload from pageable memory reads
// its source after that work; an asynchronous one reads its first 2 MiB at
// the call and the rest after it (H200, driver 580: bench/RESULTS.md); from
// page-locked memory the DMA reads it all after it. Uploads of the whole
// 4 MiB buffer: a synchronous one on the legacy stream, an asynchronous one
// on a stream; an asynchronous one of its first 1 MiB (all of it read at
// the call); an asynchronous one on the legacy stream, whose rewrite is
// queued on another blocking stream (the legacy stream waits for it). The
// device's bytes after each.
// The host function waits until the upload is being called, then 100 ms
// more (the time the upload has to read what it reads at the call, however
// loaded the machine), then rewrites.
struct Rewrite {
  unsigned char* p;
  size_t n;
  unsigned seed;
  std::atomic<bool> calling{false};
};
void RewriteLater(void* arg) {
  auto* w = static_cast<Rewrite*>(arg);
  while (!w->calling.load()) usleep(100);
  usleep(100000);
  FillPattern(w->p, w->n, w->seed);
}

// The buffer filled with `before`, a host function queued on `rewrite_on`
// that rewrites its first `n` bytes with `after`, then an upload of those
// bytes on `upload_on` (asynchronous unless `sync`, which uploads on the
// legacy stream); the device's bytes once all is done.
uint64_t UploadBehindRewrite(unsigned char* p, size_t n, unsigned before, unsigned after,
                             CUstream rewrite_on, CUstream upload_on, bool sync) {
  FillPattern(p, kBytes, before);
  Rewrite w{p, n, after};
  CHECK(cuLaunchHostFunc(rewrite_on, RewriteLater, &w));
  w.calling.store(true);
  CHECK(sync ? cuMemcpyHtoD(g_dev, p, n) : cuMemcpyHtoDAsync(g_dev, p, n, upload_on));
  CHECK(cuCtxSynchronize());
  return DeviceHash(n);
}

void RunStreamRewrite(Kind kind) {
  std::string name = std::string(KindName(kind)) + " stream_rewrite";
  if (!Wanted(name)) return;
  unsigned char* p = Allocate(kind, kBytes);
  FillPattern(p, kBytes, 0xA1);
  MakeHot(p, kBytes);
  const uint64_t sync_hash = UploadBehindRewrite(p, kBytes, 0xD1, 0xD2, nullptr, nullptr, true);
  const uint64_t async_hash = UploadBehindRewrite(p, kBytes, 0xD3, 0xD4, g_stream, g_stream, false);
  const uint64_t small_hash =
      UploadBehindRewrite(p, kBytes / 4, 0xD5, 0xD6, g_stream, g_stream, false);
  CUstream other;
  CHECK(cuStreamCreate(&other, CU_STREAM_DEFAULT));
  const uint64_t legacy_hash = UploadBehindRewrite(p, kBytes, 0xD7, 0xD8, other, nullptr, false);
  CHECK(cuStreamDestroy(other));
  char line[256];
  snprintf(line, sizeof(line),
           "h2d=%016llx h2d_async=%016llx h2d_async_1m=%016llx h2d_async_legacy=%016llx",
           (unsigned long long)sync_hash, (unsigned long long)async_hash,
           (unsigned long long)small_hash, (unsigned long long)legacy_hash);
  Release(kind, p, kBytes);
  printf("%s: %s\n", name.c_str(), line);
  fflush(stdout);
}

// A page change the hooks cannot see: madvise by raw system call. Without
// page verification optimize mode cannot follow it (docs/limits.md).
void RunRawSyscall(Kind kind) {
  std::string name = std::string(KindName(kind)) + " raw_syscall_dontneed";
  if (!Wanted(name)) return;
  unsigned char* p = Allocate(kind, kBytes);
  FillPattern(p, kBytes, 0xA1);
  MakeHot(p, kBytes);
  Pages g = Interior(p, kBytes);
  syscall(SYS_madvise, g.lo, g.len, MADV_DONTNEED);
  std::string line = Measure(p, kBytes);
  Release(kind, p, kBytes);
  printf("%s: %s\n", name.c_str(), line.c_str());
  fflush(stdout);
}

// The page calls' results and errno, as the program sees them, for calls
// the kernel accepts and refuses, on memory pinshim did not pin (the hooks'
// fast paths, which make the system calls themselves in optimize mode:
// shim/hooks/raw_syscall.h) and on a hot buffer (their general paths).
std::string PageCallResult(const char* what, long r, unsigned char* base) {
  const int e = errno;
  char out[160];
  if (r == reinterpret_cast<long>(MAP_FAILED) || r == -1) {
    snprintf(out, sizeof(out), " %s=fail/%d", what, e);
  } else if (base != nullptr && r != 0) {
    snprintf(out, sizeof(out), " %s=base%+ld", what, r - reinterpret_cast<long>(base));
  } else {
    snprintf(out, sizeof(out), " %s=%ld", what, r);
  }
  return out;
}

void RunPageCalls() {
  const char* name = "page_calls results";
  if (!Wanted(name)) return;
  std::string out;
  for (int hot = 0; hot < 2; ++hot) {
    const size_t n = kBytes;
    auto* p = static_cast<unsigned char*>(
        mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    FillPattern(p, n, 0x31);
    if (hot) MakeHot(p, n);
    out += hot ? " hot:" : " cold:";
    const int rw = PROT_READ | PROT_WRITE, anon = MAP_PRIVATE | MAP_ANONYMOUS;
    auto fixed = [&](unsigned char* at, size_t len, int flags, int fd, off_t off) {
      errno = 0;
      return reinterpret_cast<long>(mmap(at, len, rw, flags, fd, off));
    };
    out += PageCallResult("fixed", fixed(p + n - kPage, kPage, anon | MAP_FIXED, -1, 0), p);
    out += PageCallResult("fixed_unaligned", fixed(p + 1, kPage, anon | MAP_FIXED, -1, 0), p);
    out += PageCallResult("fixed_empty", fixed(p, 0, anon | MAP_FIXED, -1, 0), p);
    out += PageCallResult("fixed_badfd", fixed(p, kPage, MAP_PRIVATE | MAP_FIXED, -1, 0), p);
    out += PageCallResult("fixed_badoff", fixed(p, kPage, MAP_PRIVATE | MAP_FIXED, 0, 1), p);
    out += PageCallResult("noreplace", fixed(p, kPage, anon | MAP_FIXED_NOREPLACE, -1, 0), p);
    errno = 0;
    out += PageCallResult("dontneed_unaligned", madvise(p + 1, kPage, MADV_DONTNEED), nullptr);
    errno = 0;
    out += PageCallResult("advice_bad", madvise(p, kPage, 12345), nullptr);
    errno = 0;
    out += PageCallResult("dontneed", madvise(p + kPage, kPage, MADV_DONTNEED), nullptr);
    char line[64];
    snprintf(line, sizeof(line), " zeroed=%d", p[kPage] == 0 && p[2 * kPage - 1] == 0);
    out += line;
    errno = 0;
    out += PageCallResult("munmap_unaligned", munmap(p + 1, kPage), nullptr);
    errno = 0;
    out += PageCallResult("munmap_empty", munmap(p, 0), nullptr);
    errno = 0;
    out += PageCallResult("munmap_part", munmap(p + n - 2 * kPage, kPage), nullptr);
    errno = 0;
    out += PageCallResult("dontneed_unmapped", madvise(p + n - 2 * kPage, kPage, MADV_DONTNEED),
                          nullptr);
    errno = 0;
    out += PageCallResult("munmap_unmapped", munmap(p + n - 2 * kPage, kPage), nullptr);
    out += " after: " + Measure(p, n - 2 * kPage);
    munmap(p, n);
  }
  printf("%s:%s\n", name, out.c_str());
  fflush(stdout);
}

// Threads race page changes of their own buffers against their copies;
// each checks what the device got. Prints the number of wrong results.
std::atomic<int> g_wrong{0};
CUcontext g_ctx = nullptr;

void* RaceThread(void* arg) {
  const int t = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  CHECK(cuCtxSetCurrent(g_ctx));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes / 4));
  CUstream s;
  CHECK(cuStreamCreate(&s, 0));
  const size_t n = kBytes / 4;
  std::vector<unsigned char> back(n), want(n);
  for (int round = 0; round < 12; ++round) {
    unsigned char* p = static_cast<unsigned char*>(
        mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    for (int k = 0; k < 4; ++k) {
      FillPattern(p, n, t * 100 + round * 10 + k);
      if (k % 2 == 0) {
        CHECK(cuMemcpyHtoD(dev, p, n));
      } else {
        CHECK(cuMemcpyHtoDAsync(dev, p, n, s));
        CHECK(cuStreamSynchronize(s));
      }
      CHECK(cuMemcpyDtoH(back.data(), dev, n));
      if (memcmp(back.data(), p, n) != 0) g_wrong.fetch_add(1);
      switch ((round + k + t) % 4) {
        case 0: madvise(p, n, MADV_DONTNEED); break;
        case 1: MapFixed(p, n / 2); break;
        case 2: madvise(p + n / 2, n / 2, MADV_DONTNEED); break;
        default: break;
      }
    }
    munmap(p, n);
  }
  CHECK(cuStreamDestroy(s));
  CHECK(cuMemFree(dev));
  return nullptr;
}

void RunRace() {
  if (!Wanted("race 16_threads")) return;
  pthread_t threads[16];
  for (int t = 0; t < 16; ++t) {
    pthread_create(&threads[t], nullptr, RaceThread, reinterpret_cast<void*>(intptr_t{t}));
  }
  for (pthread_t& th : threads) pthread_join(th, nullptr);
  printf("race 16_threads: wrong=%d\n", g_wrong.load());
  fflush(stdout);
}

// Every case Wanted selects, in order.
void RunAll() {
  for (Kind kind : {Kind::kMalloc, Kind::kMmap, Kind::kHotSite, Kind::kPinned, Kind::kVmmHost,
                    Kind::kHostPool}) {
    for (const Case& c : kCases) RunCase(kind, c);
    RunForkAdvice(kind, "fork_dontfork", MADV_DONTFORK);
    RunForkAdvice(kind, "fork_wipeonfork", MADV_WIPEONFORK);
    RunRawSyscall(kind);
    RunCapture(kind);
    RunStreamRewrite(kind);
  }
  if (Wanted("fork child_uses_cuda")) printf("fork child_uses_cuda:%s\n", ForkChildCuda().c_str());
  RunPageCalls();
  RunRace();
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--list") {
      g_list = true;
    } else if (arg == "-x" && i + 1 < argc) {
      g_except.push_back(argv[++i]);
    } else {
      g_only.push_back(arg);
    }
  }
  if (g_list) {
    RunAll();  // each case asks Wanted before it touches the device
    return 0;
  }
  CHECK(cuInit(0));
  CUdevice device;
  CHECK(cuDeviceGet(&device, 0));
  CHECK(cuDevicePrimaryCtxRetain(&g_ctx, device));
  CHECK(cuCtxSetCurrent(g_ctx));
  CHECK(cuMemAlloc(&g_dev, kBytes));
  CHECK(cuStreamCreate(&g_stream, 0));
  RunAll();
  CHECK(cuStreamDestroy(g_stream));
  CHECK(cuMemFree(g_dev));
  CHECK(cuDevicePrimaryCtxRelease(device));
  // On the simulated driver: whether every page-locked range was pinned
  // (else its copies were not those of hardware). Not in the compared output.
  using PinFailures = uint64_t (*)();
  if (auto f = reinterpret_cast<PinFailures>(dlsym(RTLD_DEFAULT, "fakecuda_pin_failures"))) {
    fprintf(stderr, "fakecuda pin failures: %llu\n", static_cast<unsigned long long>(f()));
  }
  printf("done\n");
  return 0;
}
