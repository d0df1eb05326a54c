#include "shim/core/stats.h"

#include "shim/core/live_counters.h"
#include "shim/core/macros.h"

#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <cstdio>
#include <cstring>

namespace pinshim {
namespace {

constexpr size_t kSlots = 1024;  // power of two

// Key layout: bit 63 marks a used slot, bit 62 a pin record; bits 32..47 the
// API; 48..51 direction or operation; 52..55 source kind; 56..59 destination
// kind; 0..31 the pinning flags.
constexpr uint64_t kUsed = uint64_t{1} << 63;
constexpr uint64_t kPinRecord = uint64_t{1} << 62;

using Slot = CountSlot;

Slot g_slots[kSlots];
std::atomic<uint64_t> g_overflow_calls{0};
std::atomic<uint64_t> g_notes[static_cast<int>(Note::kCount)];

inline uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

Slot* FindSlot(uint64_t key) {
  size_t i = Mix(key) & (kSlots - 1);
  for (size_t probe = 0; probe < kSlots; ++probe, i = (i + 1) & (kSlots - 1)) {
    uint64_t cur = g_slots[i].key.load(std::memory_order_acquire);
    if (cur == key) return &g_slots[i];
    if (cur == 0) {
      uint64_t expected = 0;
      if (g_slots[i].key.compare_exchange_strong(expected, key, std::memory_order_acq_rel) ||
          expected == key) {
        return &g_slots[i];
      }
    }
  }
  return nullptr;
}

void AddTo(Slot* s, uint64_t bytes, bool failed) {
  s->calls.fetch_add(1, std::memory_order_relaxed);
  s->bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (failed) s->failed.fetch_add(1, std::memory_order_relaxed);
}

void Add(uint64_t key, uint64_t bytes, bool failed) {
  Slot* s = FindSlot(key);
  if (s == nullptr) {
    g_overflow_calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  AddTo(s, bytes, failed);
}

}  // namespace

void WriteAll(int fd, const char* buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= static_cast<size_t>(n);
  }
}

std::atomic<CountSlot*> g_copy_hints[kCopyHints];

void CountCopySlow(ApiId api, uint64_t key, uint64_t bytes, bool failed) {
  Slot* s = FindSlot(key);
  if (s == nullptr) {
    g_overflow_calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_copy_hints[api & (kCopyHints - 1)].store(s, std::memory_order_relaxed);
  AddTo(s, bytes, failed);
}

void CountPin(ApiId api, PinOp op, uint32_t flags, uint64_t bytes, bool failed, LivePin live) {
  if (!failed) CountLivePin(live, op, bytes);
  uint64_t key = kUsed | kPinRecord | (uint64_t{api} << 32) | (uint64_t(op) << 48) | flags;
  Add(key, bytes, failed);
}

void CountNote(Note note) {
  g_notes[static_cast<int>(note)].fetch_add(1, std::memory_order_relaxed);
}

void WriteSummary(int fd, int pid, const char* program, const char* mode,
                  const char* (*api_name)(ApiId)) {
  char line[512];
  int n = snprintf(line, sizeof(line), "pinshim: summary pid=%d program=%s mode=%s\n", pid, program,
                   mode);
  WriteAll(fd, line, static_cast<size_t>(n));
  uint64_t copies = 0, copy_bytes = 0, pin_calls = 0;
  // Copies first, then pinned operations, so the output reads top-down.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < kSlots; ++i) {
      uint64_t key = g_slots[i].key.load(std::memory_order_acquire);
      if (key == 0 || ((key & kPinRecord) != 0) != (pass == 1)) continue;
      uint64_t calls = g_slots[i].calls.load(std::memory_order_relaxed);
      uint64_t bytes = g_slots[i].bytes.load(std::memory_order_relaxed);
      uint64_t failed = g_slots[i].failed.load(std::memory_order_relaxed);
      if (calls == 0) continue;
      auto api = static_cast<ApiId>((key >> 32) & 0xffff);
      auto sel = static_cast<uint8_t>((key >> 48) & 0xf);
      auto flags = static_cast<uint32_t>(key & 0xffffffffu);
      if (pass == 0) {
        auto src = static_cast<MemKind>((key >> 52) & 0xf);
        auto dst = static_cast<MemKind>((key >> 56) & 0xf);
        n = snprintf(line, sizeof(line),
                     "pinshim: copy api=%s dir=%s src=%s dst=%s flags=0x%x calls=%llu "
                     "bytes=%llu failed=%llu\n",
                     api_name(api), CopyDirName(static_cast<CopyDir>(sel)), MemKindName(src),
                     MemKindName(dst), flags, (unsigned long long)calls, (unsigned long long)bytes,
                     (unsigned long long)failed);
        copies += calls;
        copy_bytes += bytes;
      } else {
        n = snprintf(line, sizeof(line),
                     "pinshim: pin api=%s op=%s flags=0x%x calls=%llu bytes=%llu failed=%llu\n",
                     api_name(api), PinOpName(static_cast<PinOp>(sel)), flags,
                     (unsigned long long)calls, (unsigned long long)bytes,
                     (unsigned long long)failed);
        pin_calls += calls;
      }
      WriteAll(fd, line, static_cast<size_t>(n));
    }
  }
  uint64_t overflow = g_overflow_calls.load();
  uint64_t deepbind = g_notes[static_cast<int>(Note::kDeepBind)].load();
  uint64_t unknown_abi = g_notes[static_cast<int>(Note::kUnknownAbi)].load();
  if (overflow != 0 || deepbind != 0 || unknown_abi != 0) {
    n = snprintf(line, sizeof(line),
                 "pinshim: note uncounted_keys=%llu rtld_deepbind_loads=%llu "
                 "unknown_abi_lookups=%llu\n",
                 (unsigned long long)overflow, (unsigned long long)deepbind,
                 (unsigned long long)unknown_abi);
    WriteAll(fd, line, static_cast<size_t>(n));
  }
  n = snprintf(line, sizeof(line), "pinshim: totals copies=%llu copy_bytes=%llu pin_calls=%llu\n",
               (unsigned long long)copies, (unsigned long long)copy_bytes,
               (unsigned long long)pin_calls);
  WriteAll(fd, line, static_cast<size_t>(n));
}

void ResetStats() {
  ResetLiveCounters();
  for (Slot& s : g_slots) {
    s.calls.store(0, std::memory_order_relaxed);
    s.bytes.store(0, std::memory_order_relaxed);
    s.failed.store(0, std::memory_order_relaxed);
  }
  g_overflow_calls.store(0);
  for (auto& note : g_notes) note.store(0);
}

}  // namespace pinshim
