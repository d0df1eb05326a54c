#include "shim/trace/module_map.h"

#include <elf.h>
#include <link.h>
#include <sys/auxv.h>

#include <cstring>

#include "shim/core/phdr.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace trace {
namespace {

constexpr size_t kMaxBuildId = 64;

struct WalkState {
  const char* main_path;
  uint8_t* out;
  uint8_t* end;
  uint8_t* p;
  uint64_t count;
  bool overflow;
  bool first;
  uintptr_t vdso;
  ModuleKey* keys;
  size_t max_keys;
  size_t n_keys;
};

uint64_t HashPath(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ static_cast<uint8_t>(*s)) * 1099511628211ull;
  return h;
}

// Finds the GNU build id among the module's notes, as loaded in memory.
size_t FindBuildId(const dl_phdr_info* info, const uint8_t** id) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) n;
      memcpy(&n, p, sizeof(n));
      const uint8_t* name = p + sizeof(n);
      const uint8_t* desc = name + ((n.n_namesz + 3) & ~3u);
      const uint8_t* next = desc + ((n.n_descsz + 3) & ~3u);
      if (next > end) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        *id = desc;
        return n.n_descsz > kMaxBuildId ? kMaxBuildId : n.n_descsz;
      }
      p = next;
    }
  }
  return 0;
}

bool Room(WalkState* s, size_t bytes) {
  if (static_cast<size_t>(s->end - s->p) < bytes) {
    s->overflow = true;
    return false;
  }
  return true;
}

int OnModule(dl_phdr_info* info, size_t, void* arg) {
  WalkState* s = static_cast<WalkState*>(arg);
  if (s->overflow) return 1;
  const char* path = info->dlpi_name;
  uint32_t flags = 0;
  if (s->first) {
    // The loader lists the executable first, without a name.
    flags |= kModuleMainProgram;
    if (path == nullptr || *path == '\0') path = s->main_path;
  }
  s->first = false;
  uintptr_t phdr = reinterpret_cast<uintptr_t>(info->dlpi_phdr);
  if (s->vdso != 0 && phdr >= s->vdso && phdr < s->vdso + 65536) flags |= kModuleVdso;
  if (path == nullptr) path = "";
  size_t path_len = strlen(path);
  const uint8_t* id = nullptr;
  size_t id_len = FindBuildId(info, &id);
  int segments = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) ++segments;
  }
  if (!Room(s, path_len + id_len + (6 + 2 * segments) * kMaxVarint)) return 1;
  s->p = PutVarint(s->p, path_len);
  memcpy(s->p, path, path_len);
  s->p += path_len;
  s->p = PutVarint(s->p, id_len);
  if (id_len) memcpy(s->p, id, id_len);
  s->p += id_len;
  s->p = PutVarint(s->p, info->dlpi_addr);
  s->p = PutVarint(s->p, flags);
  s->p = PutVarint(s->p, static_cast<uint64_t>(segments));
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    s->p = PutVarint(s->p, info->dlpi_addr + ph.p_vaddr);
    s->p = PutVarint(s->p, ph.p_memsz);
  }
  ++s->count;
  if (s->n_keys < s->max_keys) {
    s->keys[s->n_keys++] = ModuleKey{info->dlpi_addr, HashPath(path)};
  }
  return 0;
}

}  // namespace

size_t EncodeModuleMap(uint32_t generation, const char* main_path, uint8_t* out, size_t cap,
                       ModuleKey* keys, size_t max_keys, size_t* n_keys) {
  // The count precedes the modules but is known only at the end: modules are
  // encoded after a gap wide enough for any count, then moved down.
  constexpr size_t kGap = 2 * kMaxVarint;
  if (cap < kGap) return 0;
  WalkState s{};
  s.main_path = main_path ? main_path : "";
  s.out = out;
  s.end = out + cap;
  s.p = out + kGap;
  s.first = true;
  s.vdso = getauxval(AT_SYSINFO_EHDR);
  s.keys = keys;
  s.max_keys = max_keys;
  IteratePhdr(OnModule, &s);
  *n_keys = s.n_keys;
  if (s.overflow) return 0;
  uint8_t head[kGap];
  uint8_t* h = PutVarint(head, generation);
  h = PutVarint(h, s.count);
  size_t head_len = static_cast<size_t>(h - head);
  size_t body = static_cast<size_t>(s.p - (out + kGap));
  memmove(out + head_len, out + kGap, body);
  memcpy(out, head, head_len);
  return head_len + body;
}

bool ModulesWentAway(const ModuleKey* before, size_t n_before, const ModuleKey* after,
                     size_t n_after) {
  for (size_t i = 0; i < n_before; ++i) {
    bool found = false;
    for (size_t j = 0; j < n_after && !found; ++j) {
      found = before[i].bias == after[j].bias && before[i].path_hash == after[j].path_hash;
    }
    if (!found) return true;
  }
  return false;
}

}  // namespace trace
}  // namespace pinshim
