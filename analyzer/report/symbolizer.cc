#include "analyzer/report/symbolizer.h"

#include "analyzer/report/format.h"
#include "analyzer/report/symbol_archive.h"
#include "shim/core/safe_file.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pinshim {
namespace report {
namespace {

std::string Demangle(const char* name) {
  if (name == nullptr) return "";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status == 0 && d != nullptr) {
    std::string out = d;
    free(d);
    return out;
  }
  return name;
}

// Bazel and other build systems map their working directory to this.
std::string CleanPath(const char* file) {
  if (file == nullptr) return "";
  std::string f = file;
  static const char kCwd[] = "/proc/self/cwd/";
  if (StartsWith(f, kCwd)) f = f.substr(sizeof(kCwd) - 1);
  return f;
}

// The name of a DWARF function entry, following abstract origins and
// specifications; the linkage name (demangled) when there is one.
std::string DieName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* linkage = nullptr;
  if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) != nullptr ||
      dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr) != nullptr) {
    linkage = dwarf_formstring(&attr);
  }
  if (linkage != nullptr) return Demangle(linkage);
  if (dwarf_attr_integrate(die, DW_AT_name, &attr) != nullptr) {
    const char* n = dwarf_formstring(&attr);
    if (n != nullptr) return n;
  }
  return "";
}

}  // namespace

bool IsSystemHeader(const std::string& file) {
  return StartsWith(file, "/usr/include/") || StartsWith(file, "/usr/local/cuda");
}

bool IsRuntimeFrame(const std::string& module, const std::string& function) {
  std::string base = Basename(module);
  static const char* const kModules[] = {"libcuda.so", "libcudart.so", "libpinshim.so", "libc.so",
                                         "libc-",      "ld-linux",     "libpthread",    "libdl.so"};
  for (const char* m : kModules) {
    if (StartsWith(base, m)) return true;
  }
  // The statically linked CUDA runtime and pinshim's own code linked into a
  // program are known by their names.
  if (StartsWith(function, "pinshim::") || StartsWith(function, "cudart::") ||
      StartsWith(function, "__cudart") || StartsWith(function, "__cuda") ||
      StartsWith(function, "libcudart")) {
    return true;
  }
  if (function == "_start" || StartsWith(function, "__libc_start")) return true;
  if (function.size() > 4 && StartsWith(function, "cuda") && isupper(function[4])) return true;
  if (function.size() > 2 && StartsWith(function, "cu") && isupper(function[2])) return true;
  return false;
}

namespace {

// libpython, or a python executable (python, python3, python3.12,
// python3.13t) with the interpreter linked in.
bool IsInterpreterItself(const std::string& module) {
  std::string base = Basename(module);
  if (StartsWith(base, "libpython")) return true;
  if (!StartsWith(base, "python")) return false;
  for (size_t i = 6; i < base.size(); ++i) {
    if (!isdigit(static_cast<unsigned char>(base[i])) && base[i] != '.' &&
        !(base[i] == 't' && i + 1 == base.size())) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool IsInterpreterModule(const std::string& module) {
  std::string base = Basename(module);
  return IsInterpreterItself(module) || StartsWith(base, "libffi.so") ||
         StartsWith(base, "_ctypes.");
}

bool IsPythonLibraryFile(const std::string& file) {
  if (file.find("/site-packages/") != std::string::npos ||
      file.find("/dist-packages/") != std::string::npos || StartsWith(file, "<frozen ")) {
    return true;
  }
  // The standard library: .../lib/python3.12/..., .../lib64/python3.11/...
  for (const char* dir : {"/lib/python", "/lib64/python"}) {
    size_t at = file.find(dir);
    if (at == std::string::npos) continue;
    size_t v = at + strlen(dir);
    if (v < file.size() && isdigit(static_cast<unsigned char>(file[v]))) return true;
  }
  return false;
}

namespace {

// Copies the symbol of an operator whose "operator" was just written
// (operator<, operator<<=, operator->, operator(), operator[]): it is not a
// template bracket. Returns the position after it.
size_t CopyOperatorSymbol(const std::string& name, size_t i, std::string* out) {
  if (name.compare(i, 2, "()") == 0 || name.compare(i, 2, "[]") == 0) {
    out->append(name, i, 2);
    return i + 2;
  }
  static const char kSymbolChars[] = "<>=-!+*/%^&|~,";
  while (i < name.size() && name[i] != '\0' && strchr(kSymbolChars, name[i]) != nullptr) {
    out->push_back(name[i++]);
  }
  return i;
}

bool EndsWithOperator(const std::string& s) {
  static const char kOp[] = "operator";
  size_t n = sizeof(kOp) - 1;
  if (s.size() < n || s.compare(s.size() - n, n, kOp) != 0) return false;
  return s.size() == n ||
         !(isalnum(static_cast<unsigned char>(s[s.size() - n - 1])) || s[s.size() - n - 1] == '_');
}

}  // namespace

std::string ShortCxxName(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  int angle = 0;
  bool had_template = false;
  for (size_t i = 0; i < name.size();) {
    char c = name[i];
    if (angle == 0 && EndsWithOperator(out)) {
      size_t next = CopyOperatorSymbol(name, i, &out);
      if (next != i) {
        i = next;
        continue;
      }
    }
    if (c == '<') {
      if (angle == 0) out += "<...>";
      ++angle;
      had_template = true;
    } else if (c == '>' && angle > 0) {
      --angle;
    } else if (angle == 0) {
      out.push_back(c);
    }
    ++i;
  }
  if (angle != 0) return name;  // unbalanced: not a name this understands
  if (!had_template) return out;
  // A function template instantiation reads "RET NAME(ARGS)": the return
  // type ends at the last space outside brackets before the parameters.
  const std::string anon = "(anonymous namespace)";
  int depth = 0;
  size_t last_space = std::string::npos;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out.compare(i, anon.size(), anon) == 0) {
      i += anon.size() - 1;
      continue;
    }
    char c = out[i];
    if (depth == 0 && c == '(') break;
    if (c == '(' || c == '[' || c == '{')
      ++depth;
    else if ((c == ')' || c == ']' || c == '}') && depth > 0)
      --depth;
    // "operator< <...>" and "operator new": not the end of a return type.
    else if (c == ' ' && depth == 0 && out.compare(i + 1, 1, "<") != 0 &&
             !EndsWithOperator(out.substr(0, i)))
      last_space = i;
  }
  if (last_space != std::string::npos && last_space + 1 < out.size()) {
    out = out.substr(last_space + 1);
  }
  return out;
}

const char* PythonStatusWords(trace::PythonStatus status) {
  switch (status) {
    case trace::PythonStatus::kNone:
    case trace::PythonStatus::kFrames: return "";
    case trace::PythonStatus::kNoThreadState: return "thread without a Python state";
    case trace::PythonStatus::kSubinterpreter: return "in a subinterpreter";
    case trace::PythonStatus::kFreeThreaded: return "free-threaded Python: frames not read";
    case trace::PythonStatus::kUnsupported:
      return "Python version without a known layout: frames not read";
    case trace::PythonStatus::kFinalizing:
      return "Python interpreter shutting down: frames not read";
    case trace::PythonStatus::kInvalid:
      return "Python frames cut short (a frame failed validation)";
  }
  return "unknown Python status";
}

const char* PythonStatusName(trace::PythonStatus status) {
  switch (status) {
    case trace::PythonStatus::kNone: return "";
    case trace::PythonStatus::kFrames: return "frames";
    case trace::PythonStatus::kNoThreadState: return "no_thread_state";
    case trace::PythonStatus::kSubinterpreter: return "subinterpreter";
    case trace::PythonStatus::kFreeThreaded: return "free_threaded";
    case trace::PythonStatus::kUnsupported: return "unsupported_version";
    case trace::PythonStatus::kFinalizing: return "finalizing";
    case trace::PythonStatus::kInvalid: return "invalid";
  }
  return "unknown";
}

std::string Frame::Describe(bool short_names) const {
  std::string out;
  if (!function.empty()) {
    out = short_names && !python ? ShortCxxName(function) : function;
  } else {
    char buf[64];
    snprintf(buf, sizeof(buf), "+0x%llx", static_cast<unsigned long long>(offset));
    out = (module.empty() ? std::string("?") : Basename(module)) + buf;
  }
  if (!file.empty()) {
    out += " (" + file;
    if (line > 0) out += ":" + std::to_string(line);
    out += ")";
  } else if (!note.empty()) {
    out += " (" + note + ")";
  }
  return out;
}

namespace {

// Modules larger than this are not read.
constexpr uint64_t kMaxModuleBytes = uint64_t{8} << 30;

// True when every place libdw's standard search looks for separate debug
// information (beside the file, in its .debug folder, under /usr/lib/debug,
// and by build id) holds nothing or a regular file: a FIFO or a device
// planted there would block it or feed it without end.
bool DebugPlacesAreFiles(Dwfl_Module* mod, const char* file_name, const char* debuglink) {
  std::vector<std::string> places;
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr;
  const int n = dwfl_module_build_id(mod, &bits, &vaddr);
  if (n > 1) {
    const std::string id = HexBytes(std::string(reinterpret_cast<const char*>(bits), n));
    places.push_back("/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug");
  }
  if (file_name != nullptr && debuglink != nullptr) {
    const std::string file = file_name;
    const size_t slash = file.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash);
    places.push_back(dir + "/" + debuglink);
    places.push_back(dir + "/.debug/" + debuglink);
    places.push_back("/usr/lib/debug" + (dir[0] == '/' ? dir : "/" + dir) + "/" + debuglink);
  }
  for (const std::string& p : places) {
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return false;
  }
  return true;
}

int FindDebuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                  const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                  char** debuginfo_file_name) {
  if (!DebugPlacesAreFiles(mod, file_name, debuglink_file)) return -1;
  return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
                                      debuglink_crc, debuginfo_file_name);
}

}  // namespace

struct Symbolizer::ModuleHandle {
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  std::string problem;  // set when the module cannot be used
  ~ModuleHandle() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

Symbolizer::Symbolizer(const TraceReader* trace) : trace_(trace) {}

Symbolizer::~Symbolizer() = default;

Symbolizer::ModuleHandle* Symbolizer::HandleFor(const Module& m) {
  std::string key = m.path + "@" + std::to_string(m.bias);
  auto it = modules_.find(key);
  if (it != modules_.end()) return it->second.get();
  auto h = std::make_unique<ModuleHandle>();
  if (m.flags & trace::kModuleVdso) {
    h->problem = "the kernel's vdso has no file";
  } else if (m.path.empty()) {
    h->problem = "module without a path";
  } else {
    // The path comes from the trace: opened without blocking, and only a
    // regular file of a plausible size is handed to libdw (which consumes
    // the descriptor when it takes the module).
    const int fd = OpenRegularForRead(m.path.c_str(), kMaxModuleBytes, nullptr);
    if (fd < 0) {
      h->problem = -fd == ENOENT ? "file not found (" + std::string(SafeFileReason(-fd)) + ")"
                                 : "cannot open (" + std::string(SafeFileReason(-fd)) + ")";
    } else {
      static char* debuginfo_path = nullptr;
      static const Dwfl_Callbacks kCallbacks = {dwfl_build_id_find_elf, FindDebuginfo,
                                                dwfl_offline_section_address, &debuginfo_path};
      h->dwfl = dwfl_begin(&kCallbacks);
      if (h->dwfl != nullptr) {
        dwfl_report_begin(h->dwfl);
        h->mod =
            dwfl_report_elf(h->dwfl, Basename(m.path).c_str(), m.path.c_str(), fd, m.bias, false);
        dwfl_report_end(h->dwfl, nullptr, nullptr);
      }
      if (h->mod == nullptr) {
        close(fd);
        h->problem = std::string("cannot read ELF: ") + dwfl_errmsg(-1);
      } else if (!m.build_id.empty()) {
        const unsigned char* bits = nullptr;
        GElf_Addr vaddr;
        int n = dwfl_module_build_id(h->mod, &bits, &vaddr);
        if (n > 0 && std::string(reinterpret_cast<const char*>(bits), static_cast<size_t>(n)) !=
                         m.build_id) {
          h->problem = "the file changed since the trace was taken (build id " +
                       HexBytes(m.build_id) + " traced, " +
                       HexBytes(std::string(reinterpret_cast<const char*>(bits), n)) + " on disk)";
          h->mod = nullptr;
        }
      }
    }
  }
  ModuleHandle* raw = h.get();
  modules_[key] = std::move(h);
  return raw;
}

namespace {

// The frames of the functions inlined at addr (offset in the compile unit
// cu's module), innermost first, each with the location inside it: from
// *file and *line (the address's own), which move out to where each was
// inlined. *outer_name gets the function around them where the symbol
// table had none.
void InlinedFrames(Dwarf_Die* cu, Dwarf_Addr addr, const Frame& base, std::string* file, int* line,
                   std::string* outer_name, std::vector<Frame>* out) {
  Dwarf_Die* scopes = nullptr;
  int n = dwarf_getscopes(cu, addr, &scopes);
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  bool have_files = dwarf_getsrcfiles(cu, &files, &nfiles) == 0;
  for (int i = 0; i < n; ++i) {
    int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_inlined_subroutine) {
      Frame f = base;
      f.function = DieName(&scopes[i]);
      f.file = *file;
      f.line = *line;
      f.inlined = true;
      out->push_back(f);
      // Where it was inlined is the location in the function around it.
      Dwarf_Attribute attr;
      Dwarf_Word call_file = 0, call_line = 0;
      file->clear();
      *line = 0;
      if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attr), &call_file) == 0 &&
          have_files && call_file < nfiles) {
        *file = CleanPath(dwarf_filesrc(files, call_file, nullptr, nullptr));
      }
      if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attr), &call_line) == 0) {
        *line = static_cast<int>(call_line);
      }
    } else if (tag == DW_TAG_subprogram) {
      if (outer_name->empty()) *outer_name = DieName(&scopes[i]);
      break;
    }
  }
  free(scopes);
}

}  // namespace

bool Symbolizer::FromArchive(const Module& m, const Frame& base, bool exact,
                             std::vector<Frame>* out) {
  if (archive_ == nullptr) return false;
  const std::vector<Frame>* archived = archive_->Lookup(m, base.offset, exact);
  if (archived == nullptr) return false;
  for (Frame f : *archived) {
    f.ip = base.ip;
    f.module = m.path;
    f.offset = base.offset;
    out->push_back(f);
  }
  std::string problem = archive_->Problem(m);
  if (!problem.empty()) archived_problems_[m.path + "@" + std::to_string(m.bias)] = problem;
  return true;
}

void Symbolizer::SymbolizeIp(uint64_t ip, bool exact, uint32_t generation,
                             std::vector<Frame>* out) {
  Frame base;
  base.ip = ip;
  // A return address points after the call; the call itself is one byte back.
  uint64_t addr = exact ? ip : ip - 1;
  const Module* m = trace_->ModuleAt(generation, ip);
  if (m == nullptr) {
    base.note = "address in no module the trace lists";
    out->push_back(base);
    return;
  }
  base.module = m->path;
  base.offset = ip - m->bias;
  if (FromArchive(*m, base, exact, out)) return;
  ModuleHandle* h = HandleFor(*m);
  if (h->mod == nullptr) {
    base.note = h->problem;
    base.runtime = IsRuntimeFrame(base.module, "");
    out->push_back(base);
    return;
  }
  GElf_Off sym_off = 0;
  GElf_Sym sym;
  const char* sym_name =
      dwfl_module_addrinfo(h->mod, addr, &sym_off, &sym, nullptr, nullptr, nullptr);
  std::string outer_name = Demangle(sym_name);
  std::string file;
  int line = 0;
  if (Dwfl_Line* l = dwfl_module_getsrc(h->mod, addr)) {
    Dwarf_Addr a;
    int lineno = 0, col = 0;
    const char* f = dwfl_lineinfo(l, &a, &lineno, &col, nullptr, nullptr);
    file = CleanPath(f);
    line = lineno;
  }
  size_t first = out->size();
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = dwfl_module_addrdie(h->mod, addr, &bias);
  if (cu != nullptr) {
    InlinedFrames(cu, addr - bias, base, &file, &line, &outer_name, out);
  } else if (sym_name != nullptr) {
    base.note = "no debug information";
  } else {
    base.note = "no symbols";
  }
  base.function = outer_name;
  base.file = file;
  base.line = line;
  base.runtime = IsRuntimeFrame(base.module, base.function);
  out->push_back(base);
  // Inlined frames carry no namespace when their function has internal
  // linkage; code inlined into runtime code is taken for runtime code.
  for (size_t i = first; i + 1 < out->size(); ++i) {
    Frame& f = (*out)[i];
    f.runtime = base.runtime || IsRuntimeFrame(f.module, f.function);
  }
}

void Symbolizer::AddPythonFrames(const Stack& stack, SymbolizedStack* s) const {
  s->python = stack.python_status;
  s->python_omitted = stack.python_omitted;
  for (Frame& f : s->frames) f.library = IsInterpreterModule(f.module);
  if (stack.python.empty()) return;
  std::vector<Frame> py;
  for (const PythonFrameRef& ref : stack.python) {
    Frame f;
    f.python = true;
    if (const PythonCode* code = trace_->FindPythonCode(ref.code)) {
      f.function = code->function;
      f.file = code->file;
      f.line = static_cast<int>(ref.line);
      f.library = IsPythonLibraryFile(code->file);
    } else {
      f.note = "Python code object not in the trace";
    }
    py.push_back(std::move(f));
  }
  // Where the interpreter's own frames begin (the native frames above are
  // what the Python code called); at the end when the stack is too short
  // to reach them.
  size_t at = s->frames.size();
  for (size_t i = 0; i < s->frames.size(); ++i) {
    if (IsInterpreterItself(s->frames[i].module)) {
      at = i;
      break;
    }
  }
  s->frames.insert(s->frames.begin() + static_cast<std::ptrdiff_t>(at), py.begin(), py.end());
}

const SymbolizedStack& Symbolizer::Symbolize(uint32_t id) {
  auto it = cache_.find(id);
  if (it != cache_.end()) return it->second;
  SymbolizedStack& s = cache_[id];
  const Stack* stack = trace_->FindStack(id);
  if (stack == nullptr) return s;
  for (size_t i = 0; i < stack->ips.size(); ++i) {
    bool exact = (stack->exact_mask >> i) & 1;
    SymbolizeIp(stack->ips[i], exact, stack->generation, &s.frames);
  }
  if (stack->python_status != trace::PythonStatus::kNone) AddPythonFrames(*stack, &s);
  // A Python program's call site is its own Python line: the first Python
  // frame outside the libraries, else the first Python frame.
  int first_python = -1;
  for (size_t i = 0; i < s.frames.size(); ++i) {
    const Frame& f = s.frames[i];
    if (!f.python) continue;
    if (first_python < 0) first_python = static_cast<int>(i);
    if (!f.library && !f.function.empty()) {
      s.site = static_cast<int>(i);
      return s;
    }
  }
  if (first_python >= 0) {
    s.site = first_python;
    return s;
  }
  for (size_t i = 0; i < s.frames.size(); ++i) {
    const Frame& f = s.frames[i];
    // A system header's inline wrapper (glibc's fortified memcpy, say)
    // inlined into the program is not where the program made the call:
    // the frame it was inlined into is.
    if (!f.runtime && !(f.inlined && IsSystemHeader(f.file))) {
      s.site = static_cast<int>(i);
      break;
    }
  }
  return s;
}

std::vector<std::string> Symbolizer::Problems() const {
  std::map<std::string, std::string> all = archived_problems_;
  for (const auto& kv : modules_) {
    if (!kv.second->problem.empty()) all[kv.first] = kv.second->problem;
  }
  std::vector<std::string> out;
  for (const auto& kv : all) {
    std::string path = kv.first.substr(0, kv.first.rfind('@'));
    out.push_back(path + ": " + kv.second + "; its frames show as module+offset");
  }
  return out;
}

std::string Symbolizer::ModuleProblem(const Module& m) {
  // What was archived stands: the file here may be gone or rebuilt.
  if (archive_ != nullptr && archive_->HasModule(m)) return archive_->Problem(m);
  return HandleFor(m)->problem;
}

}  // namespace report
}  // namespace pinshim
