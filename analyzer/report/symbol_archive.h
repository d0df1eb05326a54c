// A trace directory's symbols, kept beside its traces by `pinshim archive`
// (file kArchiveFileName) so that `pinshim report` prints the same
// functions, files and lines on a machine that lacks the programs, or has
// other builds of them.
//
// The file is text, one record a line, fields separated by tabs; a
// backslash escapes a tab (\t), a newline (\n) or itself (\\):
//   pinshim-symbols 1                      the version line, first
//   M <module key> <path>                  a module; the records below are its
//   P <problem>                            why the module could not be read where
//                                          it was archived (its frames then carry
//                                          notes instead of names)
//   A <offset, hex> <exact 0|1> <frames>   an address: its offset from the
//                                          module's load bias, whether it is the
//                                          faulting instruction itself (else a
//                                          return address), and how many F lines
//                                          follow
//   F <inlined 0|1> <runtime 0|1> <function> <file> <line> <note>
//                                          one frame, innermost first, as the
//                                          symbolizer made it (symbolizer.h)
// A module key is "b:" and the module's GNU build id in hex, or "p:" and its
// path for a module without one. Unknown record types are skipped.
#ifndef PINSHIM_ANALYZER_REPORT_SYMBOL_ARCHIVE_H_
#define PINSHIM_ANALYZER_REPORT_SYMBOL_ARCHIVE_H_

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "analyzer/report/symbolizer.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

constexpr char kArchiveFileName[] = "pinshim-symbols.txt";

// "b:<hex build id>", or "p:<path>" without a build id.
std::string ArchiveModuleKey(const Module& m);

class SymbolArchive {
 public:
  // Reads `path`. False with a one-line message when it is not an archive
  // this reader knows (a missing file is an error too: *missing is set).
  bool Load(const std::string& path, std::string* error, bool* missing);

  // The frames archived for the address `offset` of module `m`, or null.
  const std::vector<Frame>* Lookup(const Module& m, uint64_t offset, bool exact) const;

  // Why `m` could not be read where it was archived ("" when it could).
  std::string Problem(const Module& m) const;
  bool HasModule(const Module& m) const;

  void Add(const Module& m, uint64_t offset, bool exact, const std::vector<Frame>& frames);
  void SetProblem(const Module& m, const std::string& problem);

  // Writes the archive to `path` (through a temporary file and a rename).
  bool Write(const std::string& path, std::string* error) const;

  size_t modules() const { return modules_.size(); }
  size_t addresses() const;

 private:
  struct ModuleEntry {
    std::string path;
    std::string problem;
    std::map<std::pair<uint64_t, bool>, std::vector<Frame>> addresses;
  };
  std::map<std::string, ModuleEntry> modules_;  // by module key
};

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_SYMBOL_ARCHIVE_H_
