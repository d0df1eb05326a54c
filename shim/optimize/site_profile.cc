#include "shim/optimize/site_profile.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "shim/core/fixed_text.h"
#include "shim/core/phdr.h"

namespace pinshim {
namespace optimize {

struct SiteProfile::Resolution {
  bool has_counters = false;
  uint64_t adds = 0;
  uint64_t subs = 0;
  uint64_t bias[kMaxProfileModules];
};

namespace {

constexpr uint64_t kNotLoaded = ~uint64_t{0};
constexpr size_t kMaxBuildIdHex = 2 * kMaxBuildIdBytes;
constexpr size_t kMaxOffsetHex = 16;

// strerror may allocate (translations); the few reasons a read fails.
void AppendErrno(FixedText* msg, int e) {
  switch (e) {
    case ENOENT: msg->Append("no such file or directory"); return;
    case EACCES: msg->Append("permission denied"); return;
    case EISDIR: msg->Append("is a directory"); return;
    case ENOTDIR: msg->Append("a path component is not a directory"); return;
    case ELOOP: msg->Append("too many symbolic links"); return;
    case ENAMETOOLONG: msg->Append("file name too long"); return;
    case EIO: msg->Append("input/output error"); return;
    case EMFILE:
    case ENFILE: msg->Append("too many open files"); return;
    default: msg->Append("error ").AppendUint(static_cast<uint64_t>(e)); return;
  }
}

// "PATH: " or "PATH:LINE: ", the path cut so the reason still fits.
void AppendLocation(FixedText* msg, const char* path, long line) {
  const size_t n = strlen(path);
  if (n > 300) {
    msg->Append("...").Append(path + n - 297);
  } else {
    msg->Append(path);
  }
  if (line > 0) msg->Append(":").AppendUint(static_cast<uint64_t>(line));
  msg->Append(": ");
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// Parses "<hex build id>+0x<hex offset>"; false when `text` is not that.
bool ParseFrame(const char* text, size_t len, uint8_t* id, size_t* id_len, uint64_t* offset) {
  size_t plus = 0;
  while (plus < len && text[plus] != '+') ++plus;
  if (plus == len || plus == 0 || plus % 2 != 0 || plus > kMaxBuildIdHex) return false;
  for (size_t i = 0; i < plus; i += 2) {
    const int hi = HexDigit(text[i]), lo = HexDigit(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    id[i / 2] = static_cast<uint8_t>(hi << 4 | lo);
  }
  *id_len = plus / 2;
  size_t p = plus + 1;
  if (len - p < 3 || text[p] != '0' || (text[p + 1] != 'x' && text[p + 1] != 'X')) return false;
  p += 2;
  if (len - p > kMaxOffsetHex) return false;
  uint64_t v = 0;
  for (; p < len; ++p) {
    const int d = HexDigit(text[p]);
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *offset = v;
  return true;
}

// Whether [start, start + len) of a module lies inside one of its loaded
// segments, so that reading it cannot fault.
bool InLoadedSegment(const dl_phdr_info* info, ElfW(Addr) start, ElfW(Addr) len) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_R)) continue;
    if (start >= ph.p_vaddr && start - ph.p_vaddr <= ph.p_memsz &&
        len <= ph.p_memsz - (start - ph.p_vaddr)) {
      return true;
    }
  }
  return false;
}

// The module's GNU build id, read from its notes as loaded in memory; 0
// when it has none. Longer ids are cut to kMaxBuildIdBytes, as traces are.
size_t FindBuildId(const dl_phdr_info* info, const uint8_t** id) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE || !InLoadedSegment(info, ph.p_vaddr, ph.p_memsz)) continue;
    const size_t align = ph.p_align == 8 ? 8 : 4;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (static_cast<size_t>(end - p) >= sizeof(ElfW(Nhdr))) {
      ElfW(Nhdr) n;
      memcpy(&n, p, sizeof(n));
      const size_t name_room = (n.n_namesz + align - 1) & ~(align - 1);
      const size_t desc_room = (n.n_descsz + align - 1) & ~(align - 1);
      const size_t left = static_cast<size_t>(end - p) - sizeof(n);
      if (name_room > left || desc_room > left - name_room) break;
      const uint8_t* name = p + sizeof(n);
      const uint8_t* desc = name + name_room;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && memcmp(name, "GNU", 4) == 0 &&
          n.n_descsz > 0) {
        *id = desc;
        return n.n_descsz > kMaxBuildIdBytes ? kMaxBuildIdBytes : n.n_descsz;
      }
      p = desc + desc_room;
    }
  }
  return 0;
}

bool HasCounters(size_t info_size) {
  return info_size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(dl_phdr_info::dlpi_subs);
}

struct Counters {
  bool known = false;
  uint64_t adds = 0;
  uint64_t subs = 0;
};

// The loader's counts of modules ever loaded and unloaded: any change to the
// set of modules changes them. Looks at the first module only.
int ReadCounters(dl_phdr_info* info, size_t size, void* arg) {
  Counters* c = static_cast<Counters*>(arg);
  if (HasCounters(size)) {
    c->known = true;
    c->adds = info->dlpi_adds;
    c->subs = info->dlpi_subs;
  }
  return 1;
}

}  // namespace

// One line of a profile as its bytes arrive.
struct SiteProfile::ProfileLine {
  char text[kMaxProfileLineBytes + 1];
  size_t len = 0;
  bool too_long = false;
  bool comment = false;  // the rest of this line is skipped
  long number = 1;
};

namespace {

// Whether line 1 (`line`, its blanks at the end dropped) is the header;
// else the message says what it is instead.
bool CheckHeader(const char* path, const char* line, size_t len, bool too_long, FixedText* msg) {
  while (len > 0 && IsBlank(line[len - 1])) --len;
  const size_t header_len = sizeof(kProfileHeader) - 1;
  if (!too_long && len == header_len && memcmp(line, kProfileHeader, header_len) == 0) return true;
  AppendLocation(msg, path, 1);
  const size_t stem = header_len - 1;  // "# pinshim profile v"
  bool version =
      !too_long && len > stem && len - stem <= 8 && memcmp(line, kProfileHeader, stem) == 0;
  for (size_t i = stem; version && i < len; ++i) version = line[i] >= '0' && line[i] <= '9';
  if (version) {
    msg->Append("profile format ")
        .Append(line + stem - 1, len - stem + 1)
        .Append(" is not supported; this pinshim reads v1");
  } else {
    msg->Append("not a pinshim profile (line 1 must be \"").Append(kProfileHeader).Append("\")");
  }
  return false;
}

}  // namespace

bool SiteProfile::FinishLine(const char* path, ProfileLine* line, char* err, size_t err_len) {
  bool good = true;
  if (line->number == 1) {
    FixedText msg(err, err_len);
    good = CheckHeader(path, line->text, line->len, line->too_long, &msg);
  } else if (line->too_long) {
    FixedText msg(err, err_len);
    AppendLocation(&msg, path, line->number);
    msg.Append("line longer than ").AppendUint(kMaxProfileLineBytes).Append(" bytes");
    good = false;
  } else if (!line->comment) {
    good = ParseLine(path, line->number, line->text, line->len, err, err_len);
  }
  line->len = 0;
  line->too_long = false;
  line->comment = false;
  return good;
}

bool SiteProfile::ReadLines(int fd, const char* path, ProfileLine* line, bool* any, char* err,
                            size_t err_len) {
  char chunk[4096];
  for (;;) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      FixedText msg(err, err_len);
      AppendLocation(&msg, path, 0);
      msg.Append("cannot read profile: ");
      AppendErrno(&msg, e);
      return false;
    }
    if (n == 0) return true;
    *any = true;
    for (ssize_t i = 0; i < n; ++i) {
      const char c = chunk[i];
      if (c == '\n') {
        if (!FinishLine(path, line, err, err_len)) return false;
        ++line->number;
      } else if (line->comment) {
        // skipped
      } else if (line->len == 0 && c == '#' && line->number > 1) {
        line->comment = true;
      } else if (line->len < kMaxProfileLineBytes) {
        line->text[line->len++] = c;
      } else {
        line->too_long = true;
      }
    }
  }
}

bool SiteProfile::Load(const char* path, char* err, size_t err_len) {
  n_sites_ = 0;
  n_modules_ = 0;
  seq_.store(0, std::memory_order_relaxed);
  FixedText msg(err, err_len);
  if (path == nullptr || *path == '\0') {
    msg.Append("no profile file named");
    return false;
  }
  int fd;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int e = errno;
    AppendLocation(&msg, path, 0);
    msg.Append("cannot open profile: ");
    AppendErrno(&msg, e);
    return false;
  }
  ProfileLine line;
  bool any = false;
  bool ok = ReadLines(fd, path, &line, &any, err, err_len);
  close(fd);
  if (ok && (line.len > 0 || line.too_long || line.comment || line.number == 1)) {
    if (!any) {
      FixedText empty(err, err_len);
      AppendLocation(&empty, path, 0);
      empty.Append("empty file, not a pinshim profile");
      ok = false;
    } else {
      ok = FinishLine(path, &line, err, err_len);
    }
  }
  if (!ok) {
    n_sites_ = 0;
    n_modules_ = 0;
    return false;
  }
  return true;
}

bool SiteProfile::ParseLine(const char* path, long line_no, const char* line, size_t len, char* err,
                            size_t err_len) {
  FixedText msg(err, err_len);
  size_t p = 0;
  auto next_word = [&](size_t* start) -> size_t {
    while (p < len && IsBlank(line[p])) ++p;
    *start = p;
    while (p < len && !IsBlank(line[p])) ++p;
    return p - *start;
  };
  size_t start;
  size_t n = next_word(&start);
  if (n == 0) return true;  // blank
  if (n != 4 || memcmp(line + start, "site", 4) != 0) {
    AppendLocation(&msg, path, line_no);
    msg.Append("expected \"site FRAME...\" or a '#' comment, got ");
    char quoted[64];
    FixedText q(quoted, sizeof(quoted));
    q.Append(line, len);
    msg.AppendQuoted(quoted, 40);
    return false;
  }
  if (n_sites_ >= kMaxProfileSites) {
    AppendLocation(&msg, path, line_no);
    msg.Append("more than ")
        .AppendUint(kMaxProfileSites)
        .Append(" sites; a profile holds at most that many");
    return false;
  }
  Site& site = sites_[n_sites_];
  site.n = 0;
  for (;;) {
    n = next_word(&start);
    if (n == 0) break;
    if (site.n == kSiteFrames) {
      AppendLocation(&msg, path, line_no);
      msg.Append("more than ").AppendUint(kSiteFrames).Append(" frames in a site");
      return false;
    }
    uint8_t id[kMaxBuildIdBytes];
    size_t id_len = 0;
    uint64_t offset = 0;
    if (!ParseFrame(line + start, n, id, &id_len, &offset)) {
      AppendLocation(&msg, path, line_no);
      msg.Append("bad frame ");
      char word[64];
      FixedText w(word, sizeof(word));
      w.Append(line + start, n);
      msg.AppendQuoted(word, 48);
      msg.Append(" (expected BUILDID+0xOFFSET: a GNU build id of at most ")
          .AppendUint(kMaxBuildIdBytes)
          .Append(" bytes and an offset, both in hexadecimal)");
      return false;
    }
    const int module = FindOrAddModule(id, id_len);
    if (module < 0) {
      AppendLocation(&msg, path, line_no);
      msg.Append("more than ")
          .AppendUint(kMaxProfileModules)
          .Append(" distinct build ids; a profile names at most that many modules");
      return false;
    }
    site.offset[site.n] = offset;
    site.module[site.n] = static_cast<uint16_t>(module);
    ++site.n;
  }
  if (site.n == 0) {
    AppendLocation(&msg, path, line_no);
    msg.Append("a site needs at least one frame (BUILDID+0xOFFSET)");
    return false;
  }
  ++n_sites_;
  return true;
}

int SiteProfile::FindOrAddModule(const uint8_t* id, size_t len) {
  for (size_t i = 0; i < n_modules_; ++i) {
    if (modules_[i].len == len && memcmp(modules_[i].bytes, id, len) == 0) {
      return static_cast<int>(i);
    }
  }
  if (n_modules_ == kMaxProfileModules) return -1;
  BuildId& m = modules_[n_modules_];
  m.len = static_cast<uint8_t>(len);
  memcpy(m.bytes, id, len);
  return static_cast<int>(n_modules_++);
}

void SiteProfile::Resolve(Resolution* r) const {
  for (size_t i = 0; i < n_modules_; ++i) r->bias[i] = kNotLoaded;
  struct Walk {
    const SiteProfile* self;
    Resolution* r;
    bool first;
  } walk{this, r, true};
  IteratePhdr(
      [](dl_phdr_info* info, size_t size, void* arg) -> int {
        Walk* w = static_cast<Walk*>(arg);
        if (w->first) {
          w->first = false;
          if (HasCounters(size)) {
            w->r->has_counters = true;
            w->r->adds = info->dlpi_adds;
            w->r->subs = info->dlpi_subs;
          }
        }
        const uint8_t* id = nullptr;
        const size_t len = FindBuildId(info, &id);
        if (len == 0) return 0;
        for (size_t i = 0; i < w->self->n_modules_; ++i) {
          const BuildId& m = w->self->modules_[i];
          // Two modules with one build id (a copy loaded twice): the first wins.
          if (m.len == len && w->r->bias[i] == kNotLoaded && memcmp(m.bytes, id, len) == 0) {
            w->r->bias[i] = info->dlpi_addr;
          }
        }
        return 0;
      },
      &walk);
}

void SiteProfile::Publish(const Resolution& r) const {
  if (!r.has_counters) return;
  uint64_t s = seq_.load(std::memory_order_relaxed);
  if ((s & 1) != 0) return;  // another thread is writing; its view will do
  if (!seq_.compare_exchange_strong(s, s + 1, std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
    return;
  }
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t i = 0; i < n_modules_; ++i) bias_[i].store(r.bias[i], std::memory_order_relaxed);
  adds_.store(r.adds, std::memory_order_relaxed);
  subs_.store(r.subs, std::memory_order_relaxed);
  seq_.store(s + 2, std::memory_order_release);
}

template <typename BiasOf>
bool SiteProfile::Match(const SiteFrames& frames, BiasOf bias_of) const {
  for (size_t s = 0; s < n_sites_; ++s) {
    const Site& site = sites_[s];
    if (site.n > frames.n) continue;
    bool same = true;
    for (int i = 0; i < site.n && same; ++i) {
      const uint64_t bias = bias_of(site.module[i]);
      same = bias != kNotLoaded && bias + site.offset[i] == frames.ips[i];
    }
    if (same) return true;
  }
  return false;
}

bool SiteProfile::Contains(const SiteFrames& frames) const {
  if (n_sites_ == 0 || frames.n <= 0 || frames.n > kSiteFrames) return false;
  Counters now;
  IteratePhdr(ReadCounters, &now);
  if (now.known) {
    const uint64_t s1 = seq_.load(std::memory_order_acquire);
    if (s1 != 0 && (s1 & 1) == 0 && adds_.load(std::memory_order_relaxed) == now.adds &&
        subs_.load(std::memory_order_relaxed) == now.subs) {
      const bool hit =
          Match(frames, [this](uint16_t m) { return bias_[m].load(std::memory_order_relaxed); });
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq_.load(std::memory_order_relaxed) == s1) return hit;
    }
  }
  // Modules changed since the shared view was made, or it is being
  // rewritten: find them again (no lock held while the loader's is).
  Resolution r;
  Resolve(&r);
  const bool hit = Match(frames, [&r](uint16_t m) { return r.bias[m]; });
  Publish(r);
  return hit;
}

}  // namespace optimize
}  // namespace pinshim
