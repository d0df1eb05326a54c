#include "tests/fakecuda/pinning.h"

#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

constexpr unsigned kSlots = 1u << 14;            // IORING_MAX_REG_BUFFERS
constexpr size_t kMaxSegment = size_t{1} << 30;  // io_uring's limit per buffer
constexpr size_t kScratchBytes = size_t{4} << 20;

// The library's own mappings go straight to the kernel, so a preloaded
// tracker never takes them for the program's.
void* RawMmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  return r < 0 && r > -4096 ? MAP_FAILED : reinterpret_cast<void*>(r);
}

// One io_uring instance per process: its sparse fixed-buffer table holds the
// pins, and a scratch memfd is the other end of every transfer.
struct Ring {
  pid_t owner = 0;
  bool ok = false;
  int fd = -1;
  unsigned* sq_tail = nullptr;
  unsigned* sq_mask = nullptr;
  unsigned* sq_array = nullptr;
  unsigned* cq_head = nullptr;
  unsigned* cq_mask = nullptr;
  io_uring_sqe* sqes = nullptr;
  io_uring_cqe* cqes = nullptr;
  int scratch_fd = -1;
  char* scratch = nullptr;
  std::vector<bool> used;
  std::mutex mu;  // one transfer, one table change at a time

  bool Setup() {
    io_uring_params p;
    memset(&p, 0, sizeof(p));
    fd = static_cast<int>(syscall(__NR_io_uring_setup, 4, &p));
    if (fd < 0) return false;
    size_t sq_bytes = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_bytes = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    const bool single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single && cq_bytes > sq_bytes) sq_bytes = cq_bytes;
    char* sq = static_cast<char*>(RawMmap(nullptr, sq_bytes, PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING));
    if (sq == MAP_FAILED) return false;
    char* cq = single
                   ? sq
                   : static_cast<char*>(RawMmap(nullptr, cq_bytes, PROT_READ | PROT_WRITE,
                                                MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING));
    if (cq == MAP_FAILED) return false;
    void* s = RawMmap(nullptr, p.sq_entries * sizeof(io_uring_sqe), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (s == MAP_FAILED) return false;
    sqes = static_cast<io_uring_sqe*>(s);
    sq_tail = reinterpret_cast<unsigned*>(sq + p.sq_off.tail);
    sq_mask = reinterpret_cast<unsigned*>(sq + p.sq_off.ring_mask);
    sq_array = reinterpret_cast<unsigned*>(sq + p.sq_off.array);
    cq_head = reinterpret_cast<unsigned*>(cq + p.cq_off.head);
    cq_mask = reinterpret_cast<unsigned*>(cq + p.cq_off.ring_mask);
    cqes = reinterpret_cast<io_uring_cqe*>(cq + p.cq_off.cqes);
    io_uring_rsrc_register reg;
    memset(&reg, 0, sizeof(reg));
    reg.nr = kSlots;
    reg.flags = IORING_RSRC_REGISTER_SPARSE;
    if (syscall(__NR_io_uring_register, fd, IORING_REGISTER_BUFFERS2, &reg, sizeof(reg)) != 0) {
      return false;
    }
    scratch_fd = static_cast<int>(syscall(SYS_memfd_create, "fakecuda-dma", MFD_CLOEXEC));
    if (scratch_fd < 0 || ftruncate(scratch_fd, kScratchBytes) != 0) return false;
    void* m = RawMmap(nullptr, kScratchBytes, PROT_READ | PROT_WRITE, MAP_SHARED, scratch_fd, 0);
    if (m == MAP_FAILED) return false;
    scratch = static_cast<char*>(m);
    used.assign(kSlots, false);
    return true;
  }

  // Sets slot `slot` to [base, base + len), or clears it (len 0). mu held.
  bool SetSlot(unsigned slot, void* base, size_t len) {
    iovec iov = {base, len};
    io_uring_rsrc_update2 up;
    memset(&up, 0, sizeof(up));
    up.offset = slot;
    up.data = reinterpret_cast<uint64_t>(&iov);
    up.nr = 1;
    return syscall(__NR_io_uring_register, fd, IORING_REGISTER_BUFFERS_UPDATE, &up, sizeof(up)) ==
           1;
  }

  // One fixed-buffer transfer between slot memory at addr and the scratch
  // file's start. mu held. Returns bytes moved or -errno.
  int Transfer(uint8_t opcode, unsigned slot, uintptr_t addr, unsigned len) {
    const unsigned tail = *sq_tail;
    const unsigned i = tail & *sq_mask;
    io_uring_sqe* sqe = &sqes[i];
    memset(sqe, 0, sizeof(*sqe));
    sqe->opcode = opcode;
    sqe->fd = scratch_fd;
    sqe->addr = addr;
    sqe->len = len;
    sqe->off = 0;
    sqe->buf_index = static_cast<uint16_t>(slot);
    sq_array[i] = i;
    __atomic_store_n(sq_tail, tail + 1, __ATOMIC_RELEASE);
    long r;
    do {
      r = syscall(__NR_io_uring_enter, fd, 1, 1, IORING_ENTER_GETEVENTS, nullptr, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return -errno;
    const unsigned head = __atomic_load_n(cq_head, __ATOMIC_ACQUIRE);
    const int res = cqes[head & *cq_mask].res;
    __atomic_store_n(cq_head, head + 1, __ATOMIC_RELEASE);
    return res;
  }
};

Ring* g_ring = nullptr;
std::mutex g_ring_mu;
std::atomic<uint64_t> g_pin_failures{0};

// The calling process's ring (a fork child gets its own: the parent's table
// is the parent's pins).
Ring* GetRing() {
  std::lock_guard<std::mutex> lock(g_ring_mu);
  const pid_t self = getpid();
  if (g_ring == nullptr || g_ring->owner != self) {
    Ring* r = new Ring();  // never freed: stream workers may use it until exit
    r->owner = self;
    r->ok = r->Setup();
    g_ring = r;
  }
  return g_ring->ok ? g_ring : nullptr;
}

}  // namespace

class HeldPages {
 public:
  struct Segment {
    unsigned slot;
    uintptr_t base;
    size_t len;
  };
  Ring* ring = nullptr;
  std::vector<Segment> segments;

  ~HeldPages() {
    if (ring == nullptr) return;
    std::lock_guard<std::mutex> lock(ring->mu);
    for (const Segment& s : segments) {
      ring->SetSlot(s.slot, nullptr, 0);
      ring->used[s.slot] = false;
    }
  }

  const Segment* Find(uintptr_t a) const {
    for (const Segment& s : segments) {
      if (a >= s.base && a - s.base < s.len) return &s;
    }
    return nullptr;
  }
};

std::shared_ptr<HeldPages> HoldPages(uintptr_t p, size_t len) {
  Ring* ring = GetRing();
  if (ring == nullptr || len == 0) return nullptr;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = p / page * page;
  if (len > UINTPTR_MAX - p - page) return nullptr;
  const uintptr_t hi = (p + len + page - 1) / page * page;
  auto held = std::make_shared<HeldPages>();
  std::lock_guard<std::mutex> lock(ring->mu);
  for (uintptr_t a = lo; a < hi;) {
    const size_t seg = hi - a < kMaxSegment ? hi - a : kMaxSegment;
    unsigned slot = 0;
    while (slot < kSlots && ring->used[slot]) ++slot;
    if (slot == kSlots || !ring->SetSlot(slot, reinterpret_cast<void*>(a), seg)) {
      g_pin_failures.fetch_add(1, std::memory_order_relaxed);
      for (const HeldPages::Segment& s : held->segments) {
        ring->SetSlot(s.slot, nullptr, 0);
        ring->used[s.slot] = false;
      }
      return nullptr;
    }
    ring->used[slot] = true;
    held->segments.push_back({slot, a, seg});
    a += seg;
  }
  held->ring = ring;
  return held;
}

namespace {

bool Dma(const HeldPages& held, uintptr_t addr, char* plain, size_t n, bool to_held) {
  Ring* ring = held.ring;
  const MoveFn move = LibcMemmove();
  std::lock_guard<std::mutex> lock(ring->mu);
  while (n != 0) {
    const HeldPages::Segment* s = held.Find(addr);
    if (s == nullptr) return false;
    size_t len = s->base + s->len - addr;
    if (len > n) len = n;
    if (len > kScratchBytes) len = kScratchBytes;
    if (to_held) move(ring->scratch, plain, len);
    size_t done = 0;
    while (done < len) {
      int r = ring->Transfer(to_held ? IORING_OP_READ_FIXED : IORING_OP_WRITE_FIXED, s->slot,
                             addr + done, static_cast<unsigned>(len - done));
      if (r <= 0) return false;
      // A short transfer moved the first r bytes: the rest follows at the
      // scratch file's start again, so copy what arrived first.
      if (!to_held) move(plain + done, ring->scratch, static_cast<size_t>(r));
      if (to_held && done + r < len) move(ring->scratch, plain + done + r, len - done - r);
      done += static_cast<size_t>(r);
    }
    addr += len;
    plain += len;
    n -= len;
  }
  return true;
}

}  // namespace

bool DmaFromHeld(const HeldPages& held, uintptr_t addr, void* plain, size_t n) {
  return Dma(held, addr, static_cast<char*>(plain), n, false);
}

bool DmaToHeld(const HeldPages& held, uintptr_t addr, const void* plain, size_t n) {
  return Dma(held, addr, const_cast<char*>(static_cast<const char*>(plain)), n, true);
}

bool PinningAvailable() { return GetRing() != nullptr; }

}  // namespace fakecuda

extern "C" int fakecuda_pins_pages(void) { return fakecuda::PinningAvailable() ? 1 : 0; }

extern "C" uint64_t fakecuda_pin_failures(void) { return fakecuda::g_pin_failures.load(); }
