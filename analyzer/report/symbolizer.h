// Turns a trace's raw stacks into functions, files and lines with elfutils
// (libdwfl), offline: each module is opened at the path and load bias the
// trace recorded, and checked against the recorded build id.
//
// The call site of a stack is its first frame in the program's own code:
// frames in the CUDA driver and runtime (shared, or linked statically and
// recognised by name), in pinshim and in the C library are marked `runtime`
// and skipped, but stay in the full stack.
//
// Stacks of Python programs carry the calling thread's Python frames too
// (trace_format.h, kStack). They are placed where the interpreter's own
// native frames begin (the native frames the Python code called into come
// first, innermost first, then the Python frames, then the interpreter and
// the rest), and the call site is the first Python frame in the user's code:
// outside site-packages and the standard library, unless there is none.
#ifndef PINSHIM_ANALYZER_REPORT_SYMBOLIZER_H_
#define PINSHIM_ANALYZER_REPORT_SYMBOLIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

struct Frame {
  uint64_t ip = 0;
  std::string module;    // path of the module, "" when unknown
  uint64_t offset = 0;   // ip relative to the module's load bias
  std::string function;  // demangled; "" when unknown
  std::string file;      // "" when unknown
  int line = 0;
  bool inlined = false;  // inlined into the frame after it
  bool runtime = false;  // CUDA, pinshim or the C library
  bool python = false;   // a Python frame: the code object's function and file
  bool library = false;  // Python: site-packages or the standard library;
                         // native: the Python interpreter, libffi, ctypes
  std::string note;      // why function or line are missing

  // "function (file:line)", or "module+0xoffset (note)"; with `short_names`,
  // C++ names with their template arguments elided (ShortCxxName).
  std::string Describe(bool short_names = false) const;
};

struct SymbolizedStack {
  std::vector<Frame> frames;  // innermost first, inlined frames included
  int site = -1;              // index of the call site, -1 when none
  // What the trace says about the thread's Python frames (kNone: no
  // Python section), and how many deeper ones it did not store.
  trace::PythonStatus python = trace::PythonStatus::kNone;
  uint64_t python_omitted = 0;
  const Frame* SiteFrame() const { return site < 0 ? nullptr : &frames[site]; }
};

// Whether a frame belongs to the CUDA runtime/driver, pinshim or libc.
bool IsRuntimeFrame(const std::string& module, const std::string& function);

// Whether a native module is the Python interpreter or what it calls native
// code through (libpython, a python executable, libffi, ctypes).
bool IsInterpreterModule(const std::string& module);

// Whether a Python file is outside the user's code: site-packages,
// dist-packages, the standard library, frozen modules.
bool IsPythonLibraryFile(const std::string& file);

// A C++ name as a person reads it: template arguments elided ("<...>") and
// the return type of a function template instantiation dropped, e.g.
// "void at::native::copy_kernel_cuda<float>(at::TensorIterator&, bool)" ->
// "at::native::copy_kernel_cuda<...>(at::TensorIterator&, bool)". Other
// names are returned as they are.
std::string ShortCxxName(const std::string& name);

// One line for a stack's Python status: "" for kNone and kFrames.
const char* PythonStatusWords(trace::PythonStatus status);
// Its name in JSON: "frames", "no_thread_state", "subinterpreter",
// "free_threaded", "unsupported_version", "finalizing", "invalid";
// "" for kNone.
const char* PythonStatusName(trace::PythonStatus status);

// Whether a source file is a system or CUDA toolkit header (whose inlined
// functions are never the call site).
bool IsSystemHeader(const std::string& file);

class SymbolArchive;

class Symbolizer {
 public:
  // "trace" must outlive the symbolizer.
  explicit Symbolizer(const TraceReader* trace);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Symbolizes stack `id` (cached). Unknown ids give an empty stack.
  const SymbolizedStack& Symbolize(uint32_t id);

  // One line per module that could not be symbolized, and why.
  std::vector<std::string> Problems() const;

  // Answers from `archive` (pinshim archive; symbol_archive.h) the addresses
  // it holds, before any file is opened. "archive" must outlive this.
  void UseArchive(const SymbolArchive* archive) { archive_ = archive; }

  // Why module `m` cannot be symbolized here ("" when it can).
  std::string ModuleProblem(const Module& m);

 private:
  struct ModuleHandle;
  ModuleHandle* HandleFor(const Module& m);
  void SymbolizeIp(uint64_t ip, bool exact, uint32_t generation, std::vector<Frame>* out);
  // The frames the symbol archive holds for base's address in module m
  // (true), or nothing when it has none (false).
  bool FromArchive(const Module& m, const Frame& base, bool exact, std::vector<Frame>* out);

  void AddPythonFrames(const Stack& stack, SymbolizedStack* out) const;

  const TraceReader* trace_;
  const SymbolArchive* archive_ = nullptr;
  std::map<std::string, std::string> archived_problems_;          // by path+bias, from the archive
  std::map<std::string, std::unique_ptr<ModuleHandle>> modules_;  // by path+bias
  std::unordered_map<uint32_t, SymbolizedStack> cache_;
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_SYMBOLIZER_H_
