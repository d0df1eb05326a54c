#include "shim/trace/python_frames.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim/core/phdr.h"

namespace pinshim {
namespace trace {
namespace {

// The layouts, as CPython's headers of each version define the structures
// (Include/cpython/pystate.h, Include/internal/pycore_frame.h,
// Include/cpython/code.h, Include/cpython/unicodeobject.h; 3.10's frame is
// Include/cpython/frameobject.h). They hold for every patch release of a
// minor version; tests/trace/python_frames_test.py (with python_layout_dump) checks them against
// the headers of every interpreter it finds.
constexpr PythonLayout Layout310() {
  PythonLayout l;
  l.minor = 10;
  l.frame_objects = true;
  l.ts_interp = 16;
  l.ts_thread_id = 176;
  l.ts_frame = 24;
  l.fr_previous = 24;  // f_back
  l.fr_code = 32;
  l.fr_instr = 96;  // f_lasti, in code units
  l.fr_lineno = 100;
  l.co_filename = 104;
  l.co_name = 112;
  l.co_firstlineno = 40;
  l.co_linetable = 120;
  l.ascii_size = 48;
  l.compact_size = 72;
  return l;
}

constexpr PythonLayout Layout311() {
  PythonLayout l;
  l.minor = 11;
  l.location_table = true;
  l.ts_interp = 16;
  l.ts_thread_id = 152;
  l.ts_frame = 56;  // cframe
  l.cframe_current = 8;
  l.fr_code = 32;
  l.fr_previous = 48;
  l.fr_instr = 56;  // prev_instr
  l.fr_owner = 69;
  l.co_filename = 112;
  l.co_name = 128;  // co_qualname
  l.co_firstlineno = 72;
  l.co_linetable = 136;
  l.co_code_adaptive = 184;
  l.co_firsttraceable = 168;
  l.ascii_size = 48;
  l.compact_size = 72;
  return l;
}

constexpr PythonLayout Layout312() {
  PythonLayout l;
  l.minor = 12;
  l.location_table = true;
  l.ts_interp = 16;
  l.ts_thread_id = 136;
  l.ts_frame = 56;  // cframe
  l.cframe_current = 0;
  l.fr_code = 0;
  l.fr_previous = 8;
  l.fr_instr = 56;  // prev_instr
  l.fr_owner = 70;
  l.owner_cstack = 3;
  l.co_filename = 112;
  l.co_name = 128;
  l.co_firstlineno = 68;
  l.co_linetable = 136;
  l.co_code_adaptive = 192;
  l.co_firsttraceable = 176;
  l.ascii_size = 40;
  l.compact_size = 56;
  return l;
}

constexpr PythonLayout Layout313() {
  PythonLayout l;
  l.minor = 13;
  l.location_table = true;
  l.ts_interp = 16;
  l.ts_thread_id = 152;
  l.ts_frame = 72;  // current_frame
  l.fr_code = 0;    // f_executable
  l.fr_previous = 8;
  l.fr_instr = 56;  // instr_ptr
  l.fr_owner = 70;
  l.owner_cstack = 3;
  l.co_filename = 112;
  l.co_name = 128;
  l.co_firstlineno = 68;
  l.co_linetable = 136;
  l.co_code_adaptive = 200;
  l.co_firsttraceable = 184;
  l.ascii_size = 40;
  l.compact_size = 56;
  return l;
}

// Constant-initialised: the recorder may start from a constructor that runs
// before this file's dynamic initialisers.
constexpr PythonLayout kLayouts[] = {Layout310(), Layout311(), Layout312(), Layout313()};

template <typename T>
inline T Load(uintptr_t address) {
  T v;
  memcpy(&v, reinterpret_cast<const void*>(address), sizeof(T));
  return v;
}

// A pointer the walk may follow: aligned, in the user half of the address
// space, not in the first page.
inline bool Plausible(uintptr_t p) { return p >= 4096 && (p & 7) == 0 && p < (uintptr_t{1} << 47); }

inline bool HasType(uintptr_t object, int32_t ob_type, uintptr_t type) {
  return type != 0 && Plausible(object) && Load<uintptr_t>(object + ob_type) == type;
}

inline uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

// CPython's varints in the location table: 6 bits a byte, bit 6 set on all
// but the last. False when the table ends first.
bool ReadVarint6(const uint8_t** p, const uint8_t* end, uint32_t* value) {
  uint32_t v = 0;
  for (int shift = 0; shift < 32; shift += 6) {
    if (*p >= end) return false;
    uint8_t b = *(*p)++;
    v |= static_cast<uint32_t>(b & 63) << shift;
    if ((b & 64) == 0) {
      *value = v;
      return true;
    }
  }
  return false;
}

// Appends `cp` as UTF-8 when it fits.
inline bool PutUtf8(uint32_t cp, char* out, size_t cap, size_t* n) {
  char buf[4];
  size_t len;
  if (cp < 0x80) {
    buf[0] = static_cast<char>(cp);
    len = 1;
  } else if (cp < 0x800) {
    buf[0] = static_cast<char>(0xc0 | (cp >> 6));
    buf[1] = static_cast<char>(0x80 | (cp & 63));
    len = 2;
  } else if (cp < 0x10000) {
    buf[0] = static_cast<char>(0xe0 | (cp >> 12));
    buf[1] = static_cast<char>(0x80 | ((cp >> 6) & 63));
    buf[2] = static_cast<char>(0x80 | (cp & 63));
    len = 3;
  } else {
    if (cp > 0x10ffff) cp = 0xfffd;
    buf[0] = static_cast<char>(0xf0 | (cp >> 18));
    buf[1] = static_cast<char>(0x80 | ((cp >> 12) & 63));
    buf[2] = static_cast<char>(0x80 | ((cp >> 6) & 63));
    buf[3] = static_cast<char>(0x80 | (cp & 63));
    len = 4;
  }
  if (*n + len > cap) return false;
  memcpy(out + *n, buf, len);
  *n += len;
  return true;
}

// A compact str object's text as UTF-8 (the only kind code objects hold:
// their strings are made by the compiler or unmarshalled, never legacy).
bool ReadString(const PythonRuntime& rt, uintptr_t s, char* out, size_t cap, size_t* n) {
  const PythonLayout& l = rt.layout;
  *n = 0;
  if (!HasType(s, l.ob_type, rt.types.unicode)) return false;
  uint32_t state = Load<uint32_t>(s + l.str_state);
  int64_t length = Load<int64_t>(s + l.str_length);
  unsigned kind = (state >> 2) & 7;
  bool compact = (state >> 5) & 1;
  bool ascii = (state >> 6) & 1;
  if (!compact || length < 0 || (kind != 1 && kind != 2 && kind != 4)) return false;
  if (length > static_cast<int64_t>(kMaxPythonTextBytes)) length = kMaxPythonTextBytes;
  uintptr_t data = s + static_cast<uintptr_t>(ascii ? l.ascii_size : l.compact_size);
  for (int64_t i = 0; i < length; ++i) {
    uint32_t cp = kind == 1   ? Load<uint8_t>(data + static_cast<uintptr_t>(i))
                  : kind == 2 ? Load<uint16_t>(data + static_cast<uintptr_t>(2 * i))
                              : Load<uint32_t>(data + static_cast<uintptr_t>(4 * i));
    if (!PutUtf8(cp, out, cap, n)) break;
  }
  return true;
}

// --- Finding the interpreter --------------------------------------------

// The table's offsets must be the interpreter's own: a build whose
// structures differ (another configuration of 3.13) is not read.
bool MatchesDebugOffsets(const PythonLayout& l, const PythonDebugOffsets313& d) {
  return d.thread_state.interp == static_cast<uint64_t>(l.ts_interp) &&
         d.thread_state.current_frame == static_cast<uint64_t>(l.ts_frame) &&
         d.thread_state.thread_id == static_cast<uint64_t>(l.ts_thread_id) &&
         d.interpreter_frame.previous == static_cast<uint64_t>(l.fr_previous) &&
         d.interpreter_frame.executable == static_cast<uint64_t>(l.fr_code) &&
         d.interpreter_frame.instr_ptr == static_cast<uint64_t>(l.fr_instr) &&
         d.interpreter_frame.owner == static_cast<uint64_t>(l.fr_owner) &&
         d.code_object.filename == static_cast<uint64_t>(l.co_filename) &&
         d.code_object.qualname == static_cast<uint64_t>(l.co_name) &&
         d.code_object.linetable == static_cast<uint64_t>(l.co_linetable) &&
         d.code_object.firstlineno == static_cast<uint64_t>(l.co_firstlineno) &&
         d.code_object.co_code_adaptive == static_cast<uint64_t>(l.co_code_adaptive) &&
         d.pyobject.ob_type == static_cast<uint64_t>(l.ob_type);
}

struct FindLibpython {
  char path[512];
};

int FindLibpythonModule(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<FindLibpython*>(data);
  const char* name = info->dlpi_name;
  if (name == nullptr) return 0;
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libpython", 9) != 0 || strstr(base, ".so") == nullptr) return 0;
  snprintf(f->path, sizeof(f->path), "%s", name);
  return 1;
}

PythonRuntime g_runtime;
std::atomic<const PythonRuntime*> g_active{nullptr};
std::atomic<int> g_detecting{0};

void Describe(PythonRuntime* rt, unsigned major, unsigned minor, unsigned micro, const char* what) {
  snprintf(rt->description, sizeof(rt->description), "%u.%u.%u%s%s", major, minor, micro,
           what[0] ? " " : "", what);
}

}  // namespace

PythonStatus ClassifyDebugOffsets313(const PythonDebugOffsets313& d, unsigned long version_hex,
                                     const PythonLayout& layout) {
  if (memcmp(d.cookie, "xdebugpy", 8) != 0 ||
      ((d.version >> 16) & 0xffff) != ((version_hex >> 16) & 0xffff)) {
    return PythonStatus::kUnsupported;
  }
  if (d.free_threaded != 0) return PythonStatus::kFreeThreaded;
  return MatchesDebugOffsets(layout, d) ? PythonStatus::kFrames : PythonStatus::kUnsupported;
}

const PythonLayout* PythonLayoutFor(int minor) {
  for (const PythonLayout& l : kLayouts) {
    if (l.minor == minor) return &l;
  }
  return nullptr;
}

namespace {

// The handle to look libpython's symbols up in, and its
// PyGILState_GetThisThreadState in *gil (null when no libpython is loaded).
void* FindLibpythonHandle(void** gil) {
  void* handle = RTLD_DEFAULT;
  *gil = dlsym(handle, "PyGILState_GetThisThreadState");
  if (*gil != nullptr) return handle;
  // A libpython loaded without RTLD_GLOBAL (embedding through dlopen).
  // The reference taken here is never given back: its functions are
  // called from every record on, so it must not be unloaded under them.
  FindLibpython f{};
  IteratePhdr(FindLibpythonModule, &f);
  if (f.path[0] != '\0') handle = dlopen(f.path, RTLD_NOLOAD | RTLD_LAZY);
  if (handle == nullptr) handle = RTLD_DEFAULT;
  if (handle != RTLD_DEFAULT) *gil = dlsym(handle, "PyGILState_GetThisThreadState");
  return handle;
}

// The runtime's version as PY_VERSION_HEX (major, minor, micro; 0 unknown).
unsigned long PythonVersionHex(void* handle) {
  if (const auto* v = static_cast<const unsigned long*>(dlsym(handle, "Py_Version"))) {
    return *v;  // 3.11+
  }
  auto get = reinterpret_cast<const char* (*)()>(dlsym(handle, "Py_GetVersion"));
  if (get == nullptr) return 0;
  const char* text = get();  // "3.10.13 (main, ...": a static string, no allocation
  char* end = nullptr;
  unsigned long major = strtoul(text, &end, 10);
  unsigned long minor = *end == '.' ? strtoul(end + 1, &end, 10) : 0;
  unsigned long micro = *end == '.' ? strtoul(end + 1, &end, 10) : 0;
  return (major << 24) | (minor << 16) | (micro << 8);
}

// Whether frames can be read (rt->fixed kFrames) after the checks of the
// runtime's own structures: 3.13's debug offsets, and the object header
// the table assumes (the code type's own type is `type`; a Py_TRACE_REFS
// build has a longer header and is not read). Says why not in rt.
void CheckLayout(void* handle, unsigned long hex, const PythonLayout& layout, PythonRuntime* rt) {
  const unsigned major = (hex >> 24) & 0xff, minor = (hex >> 16) & 0xff, micro = (hex >> 8) & 0xff;
  const uintptr_t type_type = reinterpret_cast<uintptr_t>(dlsym(handle, "PyType_Type"));
  if (minor == 13) {
    const auto* d = static_cast<const PythonDebugOffsets313*>(dlsym(handle, "_PyRuntime"));
    rt->fixed =
        d == nullptr ? PythonStatus::kUnsupported : ClassifyDebugOffsets313(*d, hex, rt->layout);
    if (rt->fixed == PythonStatus::kFreeThreaded) {
      Describe(rt, major, minor, micro, "free-threaded");
    } else if (rt->fixed == PythonStatus::kUnsupported) {
      Describe(rt, major, minor, micro, "(unknown structure layout)");
    }
  }
  if (rt->fixed != PythonStatus::kFrames) return;
  if (rt->types.code == 0 || rt->types.unicode == 0 || rt->types.bytes == 0 || type_type == 0 ||
      (layout.frame_objects && rt->types.frame == 0) ||
      Load<uintptr_t>(rt->types.code + static_cast<uintptr_t>(rt->layout.ob_type)) != type_type) {
    rt->fixed = PythonStatus::kUnsupported;
    Describe(rt, major, minor, micro, "(unknown object layout)");
  }
}

// The runtime's functions pinshim calls: the thread's state, the
// thread-local current state (3.12 on; before that the "current" state is
// the GIL holder's, possibly another thread's, which pinshim never reads),
// whether it is finalizing, the main interpreter.
void FindRuntimeFunctions(void* handle, void* gil, unsigned minor, PythonRuntime* rt) {
  auto sym = [handle](const char* name) { return dlsym(handle, name); };
  rt->this_thread_state = reinterpret_cast<void* (*)()>(gil);
  if (minor == 12) {
    rt->current_thread_state = reinterpret_cast<void* (*)()>(sym("_PyThreadState_UncheckedGet"));
  } else if (minor >= 13) {
    rt->current_thread_state = reinterpret_cast<void* (*)()>(sym("PyThreadState_GetUnchecked"));
  }
  rt->is_finalizing =
      reinterpret_cast<int (*)()>(sym(minor >= 13 ? "Py_IsFinalizing" : "_Py_IsFinalizing"));
  rt->main_interpreter = reinterpret_cast<void* (*)()>(sym("PyInterpreterState_Main"));
}

}  // namespace

bool DetectPythonRuntime() {
  if (g_active.load(std::memory_order_acquire) != nullptr) return true;
  int expected = 0;
  if (!g_detecting.compare_exchange_strong(expected, 1)) return false;  // another thread is at it
  void* gil = nullptr;
  void* handle = FindLibpythonHandle(&gil);
  if (gil == nullptr) {
    g_detecting.store(0);
    return false;
  }
  auto sym = [handle](const char* name) { return dlsym(handle, name); };
  PythonRuntime rt;
  const unsigned long hex = PythonVersionHex(handle);
  unsigned major = (hex >> 24) & 0xff, minor = (hex >> 16) & 0xff, micro = (hex >> 8) & 0xff;
  Describe(&rt, major, minor, micro, "");
  const PythonLayout* layout = major == 3 ? PythonLayoutFor(static_cast<int>(minor)) : nullptr;
  if (layout == nullptr) {
    rt.fixed = PythonStatus::kUnsupported;
  } else {
    rt.layout = *layout;
    rt.types.code = reinterpret_cast<uintptr_t>(sym("PyCode_Type"));
    rt.types.frame = reinterpret_cast<uintptr_t>(sym("PyFrame_Type"));
    rt.types.unicode = reinterpret_cast<uintptr_t>(sym("PyUnicode_Type"));
    rt.types.bytes = reinterpret_cast<uintptr_t>(sym("PyBytes_Type"));
    CheckLayout(handle, hex, *layout, &rt);
    FindRuntimeFunctions(handle, gil, minor, &rt);
  }
  g_runtime = rt;
  g_active.store(&g_runtime, std::memory_order_release);
  g_detecting.store(0);
  return true;
}

const PythonRuntime* ActivePythonRuntime() { return g_active.load(std::memory_order_acquire); }

int PythonLineFromTable(const uint8_t* table, size_t len, int first_line, int addr,
                        bool location_table) {
  if (addr < 0) return first_line;
  const uint8_t* p = table;
  const uint8_t* end = table + len;
  int line = first_line;
  if (!location_table) {
    // 3.10 (PEP 626): (bytes covered, signed line delta) pairs; a delta of
    // -128 means "no line" for that range.
    int range_end = 0;
    int range_line = -1;
    while (range_end <= addr) {
      if (end - p < 2) return 0;
      range_end += p[0];
      int8_t delta = static_cast<int8_t>(p[1]);
      p += 2;
      if (delta == -128) {
        range_line = -1;
      } else {
        line += delta;
        range_line = line;
      }
    }
    return range_line < 0 ? 0 : range_line;
  }
  // 3.11+ location table: entries start with a byte 1CCCCLLL (code C, L+1
  // code units); code 15 has no location, 13 and 14 carry a signed varint
  // line delta, 10..12 a delta of C-10, the short forms none.
  int unit = addr / 2;
  int pos = 0;
  while (p < end) {
    uint8_t b = *p;
    if ((b & 0x80) == 0) return 0;  // not an entry start: a table this code does not know
    int code = (b >> 3) & 15;
    int length = (b & 7) + 1;
    const uint8_t* q = p + 1;
    bool none = code == 15;
    if (code == 13 || code == 14) {
      uint32_t raw;
      if (!ReadVarint6(&q, end, &raw)) return 0;
      line += (raw & 1) ? -static_cast<int>(raw >> 1) : static_cast<int>(raw >> 1);
    } else if (code >= 10 && code <= 12) {
      line += code - 10;
    }
    if (unit < pos + length) return none ? 0 : line;
    pos += length;
    do {
      ++p;
    } while (p < end && (*p & 0x80) == 0);
  }
  return 0;
}

uintptr_t InnermostPythonFrame(const PythonLayout& l, uintptr_t tstate) {
  uintptr_t f = Load<uintptr_t>(tstate + static_cast<uintptr_t>(l.ts_frame));
  if (l.cframe_current >= 0) {
    if (!Plausible(f)) return 0;
    f = Load<uintptr_t>(f + static_cast<uintptr_t>(l.cframe_current));
  }
  return f;
}

PythonStatus WalkPythonFrames(const PythonRuntime& rt, uintptr_t f, PythonRawFrame* out, int max,
                              int* n, uint32_t* omitted) {
  const PythonLayout& l = rt.layout;
  *n = 0;
  *omitted = 0;
  for (int hops = 0; f != 0; ++hops) {
    if (hops >= kMaxPythonHops || !Plausible(f)) return PythonStatus::kInvalid;
    uintptr_t code;
    int32_t addr;
    int32_t line = 0;
    uintptr_t next = Load<uintptr_t>(f + static_cast<uintptr_t>(l.fr_previous));
    if (l.frame_objects) {
      if (!HasType(f, l.ob_type, rt.types.frame)) return PythonStatus::kInvalid;
      code = Load<uintptr_t>(f + static_cast<uintptr_t>(l.fr_code));
      if (!HasType(code, l.ob_type, rt.types.code)) return PythonStatus::kInvalid;
      int32_t lasti = Load<int32_t>(f + static_cast<uintptr_t>(l.fr_instr));
      addr = lasti < 0 || lasti > (1 << 28) ? -1 : lasti * 2;
      line = Load<int32_t>(f + static_cast<uintptr_t>(l.fr_lineno));
      if (line < 0) line = 0;
    } else {
      int owner = Load<uint8_t>(f + static_cast<uintptr_t>(l.fr_owner));
      if (l.owner_cstack >= 0 && owner == l.owner_cstack) {  // the C stack's entry frame
        f = next;
        continue;
      }
      code = Load<uintptr_t>(f + static_cast<uintptr_t>(l.fr_code));
      if (!HasType(code, l.ob_type, rt.types.code)) return PythonStatus::kInvalid;
      uintptr_t base = code + static_cast<uintptr_t>(l.co_code_adaptive);
      uintptr_t instr = Load<uintptr_t>(f + static_cast<uintptr_t>(l.fr_instr));
      int64_t units = Load<int64_t>(code + static_cast<uintptr_t>(l.ob_size));
      int64_t diff = static_cast<int64_t>(instr - base);
      if (units < 0 || diff < -2 || diff > 2 * units) return PythonStatus::kInvalid;
      // Frames not yet started (before their first RESUME) are skipped, as
      // CPython's own walkers skip them; a generator's frame always counts.
      if (owner != l.owner_generator && l.co_firsttraceable >= 0) {
        int32_t first = Load<int32_t>(code + static_cast<uintptr_t>(l.co_firsttraceable));
        if (diff < 2 * static_cast<int64_t>(first)) {
          f = next;
          continue;
        }
      }
      addr = diff < 0 ? -1 : static_cast<int32_t>(diff);
    }
    if (*n < max) {
      out[*n] = PythonRawFrame{code, addr, line};
      ++*n;
    } else {
      ++*omitted;
    }
    f = next;
  }
  return PythonStatus::kFrames;
}

bool ReadPythonCode(const PythonRuntime& rt, uintptr_t code, PythonCodeInfo* out) {
  const PythonLayout& l = rt.layout;
  out->file_len = out->function_len = 0;
  out->first_line = 0;
  if (!HasType(code, l.ob_type, rt.types.code)) return false;
  uintptr_t file = Load<uintptr_t>(code + static_cast<uintptr_t>(l.co_filename));
  uintptr_t name = Load<uintptr_t>(code + static_cast<uintptr_t>(l.co_name));
  out->first_line = Load<int32_t>(code + static_cast<uintptr_t>(l.co_firstlineno));
  bool ok = ReadString(rt, file, out->file, sizeof(out->file), &out->file_len);
  ok = ReadString(rt, name, out->function, sizeof(out->function), &out->function_len) && ok;
  return ok;
}

int PythonLineOf(const PythonRuntime& rt, const PythonRawFrame& f) {
  if (f.line > 0) return f.line;
  const PythonLayout& l = rt.layout;
  int first = Load<int32_t>(f.code + static_cast<uintptr_t>(l.co_firstlineno));
  if (f.addr < 0) return first > 0 ? first : 0;
  uintptr_t table = Load<uintptr_t>(f.code + static_cast<uintptr_t>(l.co_linetable));
  if (!HasType(table, l.ob_type, rt.types.bytes)) return 0;
  int64_t len = Load<int64_t>(table + static_cast<uintptr_t>(l.ob_size));
  if (len < 0 || len > (int64_t{16} << 20)) return 0;
  int line = PythonLineFromTable(
      reinterpret_cast<const uint8_t*>(table + static_cast<uintptr_t>(l.bytes_data)),
      static_cast<size_t>(len), first, f.addr, l.location_table);
  return line > 0 ? line : 0;
}

uint64_t PythonCodeFingerprint(const PythonRuntime& rt, uintptr_t code) {
  // Per frame of every record: shifts and xors, not a hash. The objects
  // are 8-byte aligned, so the shifts keep their bits apart.
  const PythonLayout& l = rt.layout;
  uint64_t file = Load<uintptr_t>(code + static_cast<uintptr_t>(l.co_filename));
  uint64_t name = Load<uintptr_t>(code + static_cast<uintptr_t>(l.co_name));
  uint64_t table = Load<uintptr_t>(code + static_cast<uintptr_t>(l.co_linetable));
  uint64_t first =
      static_cast<uint32_t>(Load<int32_t>(code + static_cast<uintptr_t>(l.co_firstlineno)));
  return file ^ (name << 1) ^ (table << 2) ^ (first << 40) ^ (first >> 24);
}

// --- Code ids ----------------------------------------------------------------

struct PythonCodeTable::Slot {
  std::atomic<uint64_t> hash;  // 0: free; claimed by CAS
  std::atomic<uint32_t> id;    // 0 until the entry is complete
  uint32_t epoch;
  uintptr_t code;
  uint64_t fingerprint;
};

bool PythonCodeTable::Init(int slots_log2) {
  size_t n = size_t{1} << slots_log2;
  void* p = mmap(nullptr, n * sizeof(Slot), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  slots_ = static_cast<Slot*>(p);
  mask_ = n - 1;
  return true;
}

void PythonCodeTable::Reset() {
  if (slots_ == nullptr) return;
  madvise(slots_, (mask_ + 1) * sizeof(Slot), MADV_DONTNEED);
  next_id_.store(1);
}

uint32_t PythonCodeTable::Intern(uintptr_t code, uint64_t fingerprint, uint32_t epoch,
                                 bool* is_new) {
  *is_new = false;
  if (slots_ == nullptr) return 0;
  uint64_t h = Mix(Mix(code, fingerprint), epoch) | 1;
  constexpr int kMaxProbes = 32;
  for (int probe = 0; probe < kMaxProbes; ++probe) {
    Slot& slot = slots_[(h + static_cast<uint64_t>(probe)) & mask_];
    uint64_t seen = slot.hash.load(std::memory_order_acquire);
    if (seen == 0) {
      if (slot.hash.compare_exchange_strong(seen, h, std::memory_order_acq_rel)) {
        slot.epoch = epoch;
        slot.code = code;
        slot.fingerprint = fingerprint;
        uint32_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
        slot.id.store(id, std::memory_order_release);
        *is_new = true;
        return id;
      }
      if (seen != h) continue;
    }
    if (seen != h) continue;
    // Being filled in by another thread (or a signal handler that
    // interrupted it): taken as another entry, so at worst stored twice.
    uint32_t id = slot.id.load(std::memory_order_acquire);
    if (id == 0) continue;
    if (slot.epoch == epoch && slot.code == code && slot.fingerprint == fingerprint) return id;
  }
  return 0;
}

void CapturePythonStack(const PythonRuntime* rt, PythonLineCache* cache, PythonCodeTable* table,
                        uint32_t epoch, PythonRawFrame* raw, PythonCodeInfo* info, PythonStack* out,
                        PythonCodeSink* sink) {
  out->depth = 0;
  out->omitted = 0;
  out->status = PythonStatus::kNone;
  if (rt == nullptr) return;
  if (rt->fixed != PythonStatus::kFrames) {
    out->status = rt->fixed;
    return;
  }
  if (rt->is_finalizing != nullptr && rt->is_finalizing()) {
    out->status = PythonStatus::kFinalizing;
    return;
  }
  const PythonLayout& l = rt->layout;
  uintptr_t ts = rt->this_thread_state ? reinterpret_cast<uintptr_t>(rt->this_thread_state()) : 0;
  // Inside a subinterpreter entered with the GIL held, the thread runs
  // another of its states (3.12+ keep it thread-local, so it is this
  // thread's own).
  if (rt->current_thread_state != nullptr) {
    uintptr_t current = reinterpret_cast<uintptr_t>(rt->current_thread_state());
    if (current != 0) ts = current;
  }
  if (ts == 0) {
    out->status = PythonStatus::kNoThreadState;
    return;
  }
  if (!Plausible(ts) || Load<uint64_t>(ts + static_cast<uintptr_t>(l.ts_thread_id)) !=
                            static_cast<uint64_t>(pthread_self())) {
    out->status = PythonStatus::kInvalid;  // not this thread's: nothing is read
    return;
  }
  uintptr_t interp = Load<uintptr_t>(ts + static_cast<uintptr_t>(l.ts_interp));
  uintptr_t main = rt->main_interpreter ? reinterpret_cast<uintptr_t>(rt->main_interpreter()) : 0;
  out->status = main != 0 && interp != main ? PythonStatus::kSubinterpreter : PythonStatus::kFrames;
  int n = 0;
  PythonStatus walked =
      WalkPythonFrames(*rt, InnermostPythonFrame(l, ts), raw, kMaxPythonFrames, &n, &out->omitted);
  if (walked == PythonStatus::kInvalid) out->status = PythonStatus::kInvalid;
  for (int i = 0; i < n; ++i) {
    const PythonRawFrame& f = raw[i];
    uint64_t fp = PythonCodeFingerprint(*rt, f.code);
    uint64_t key = ((f.code >> 4) ^
                    static_cast<uint64_t>(static_cast<uint32_t>(f.addr)) * 0x9e3779b97f4a7c15ull) >>
                   20;
    PythonLineCache::Entry& e = cache->entries[key & (kPythonLineCacheEntries - 1)];
    uint32_t id;
    uint32_t line;
    if (e.epoch == epoch && e.code == f.code && e.fingerprint == fp && e.addr == f.addr) {
      id = e.code_id;
      line = e.line;
    } else {
      bool is_new = false;
      id = table->Intern(f.code, fp, epoch, &is_new);
      if (is_new && sink != nullptr) {
        if (!ReadPythonCode(*rt, f.code, info) && info->file_len == 0) {
          memcpy(info->file, "?", 1);
          info->file_len = 1;
        }
        sink->NewCode(id, *info);
      }
      line = static_cast<uint32_t>(PythonLineOf(*rt, PythonRawFrame{f.code, f.addr, 0}));
      if (id != 0) {
        e.epoch = 0;  // a signal handler meanwhile finds it empty
        std::atomic_signal_fence(std::memory_order_seq_cst);
        e.code = f.code;
        e.fingerprint = fp;
        e.addr = f.addr;
        e.code_id = id;
        e.line = line;
        std::atomic_signal_fence(std::memory_order_seq_cst);
        e.epoch = epoch;
      }
    }
    if (f.line > 0) line = static_cast<uint32_t>(f.line);
    out->frames[i] = (static_cast<uint64_t>(id) << 32) | line;
  }
  out->depth = n;
}

size_t EncodePythonCode(uint32_t id, const PythonCodeInfo& info, uint8_t* out) {
  uint8_t* p = PutVarint(out, id);
  size_t file_len = info.file_len < kMaxPythonTextBytes ? info.file_len : kMaxPythonTextBytes;
  size_t fn_len = info.function_len < kMaxPythonTextBytes ? info.function_len : kMaxPythonTextBytes;
  p = PutVarint(p, file_len);
  memcpy(p, info.file, file_len);
  p += file_len;
  p = PutVarint(p, fn_len);
  memcpy(p, info.function, fn_len);
  p += fn_len;
  p = PutVarint(p, static_cast<uint64_t>(info.first_line < 0 ? 0 : info.first_line));
  return static_cast<size_t>(p - out);
}

}  // namespace trace
}  // namespace pinshim
