#include "analyzer/report/archive_command.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "analyzer/report/format.h"
#include "analyzer/report/symbol_archive.h"
#include "analyzer/report/symbolizer.h"
#include "analyzer/report/trace_reader.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace report {
namespace {

constexpr char kUsage[] =
    "usage: pinshim archive DIR...\n"
    "\n"
    "Makes each trace directory self-contained, in place: writes\n"
    "DIR/pinshim-symbols.txt with the function, file and line of every address\n"
    "the directory's traces reference, keyed by each module's build id, so that\n"
    "`pinshim report DIR` prints the same on a machine without the programs (or\n"
    "with other builds of them). Run it where the traced programs ran, before\n"
    "they change. An archive already in DIR is kept and added to.\n";

void Complain(const std::string& line) {
  std::string out = "pinshim archive: " + Printable(line) + "\n";
  fwrite(out.data(), 1, out.size(), stderr);
}

// The traces of `dir`, sorted; false with a message when there are none.
bool TracesIn(const std::string& dir, std::vector<std::string>* out, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    *error = dir + ": " + strerror(errno);
    return false;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (EndsWith(name, trace::kTraceExtension)) out->push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(out->begin(), out->end());
  if (out->empty()) {
    *error = dir + ": no pinshim traces (*" + std::string(trace::kTraceExtension) + ") here";
    return false;
  }
  return true;
}

// Adds every address of every stack of `trace` to `archive`. Symbols come
// from `existing` first (an earlier archive), then from the files.
size_t ArchiveTrace(const TraceReader& trace, const SymbolArchive* existing,
                    SymbolArchive* archive) {
  Symbolizer sym(&trace);
  sym.UseArchive(existing);
  size_t addresses = 0;
  for (uint32_t id = 1; id <= trace.max_stack_id(); ++id) {
    const Stack* stack = trace.FindStack(id);
    if (stack == nullptr) continue;
    const std::vector<Frame>& frames = sym.Symbolize(id).frames;
    // Each address gave its inlined frames, then one frame of its own.
    size_t k = 0;
    for (size_t i = 0; i < stack->ips.size() && k < frames.size(); ++i) {
      const uint64_t ip = stack->ips[i];
      const bool exact = (stack->exact_mask >> i) & 1;
      std::vector<Frame> group;
      while (k < frames.size()) {
        group.push_back(frames[k]);
        if (!frames[k++].inlined) break;
      }
      const Module* m = trace.ModuleAt(stack->generation, ip);
      if (m == nullptr) continue;  // the report says so from the trace alone
      archive->Add(*m, ip - m->bias, exact, group);
      std::string problem = sym.ModuleProblem(*m);
      if (!problem.empty()) archive->SetProblem(*m, problem);
      ++addresses;
    }
  }
  return addresses;
}

int ArchiveDirectory(const std::string& dir) {
  std::vector<std::string> files;
  std::string error;
  if (!TracesIn(dir, &files, &error)) {
    Complain(error);
    return 2;
  }
  const std::string path = dir + "/" + kArchiveFileName;
  SymbolArchive existing;
  bool missing = false;
  bool have_existing = existing.Load(path, &error, &missing);
  if (!have_existing && !missing) {
    Complain(error + "; not replaced");
    return 2;
  }
  SymbolArchive archive = have_existing ? existing : SymbolArchive();
  size_t traces = 0;
  for (const std::string& f : files) {
    TraceReader reader;
    if (!reader.Open(f, &error)) {
      Complain(error);
      continue;
    }
    ArchiveTrace(reader, have_existing ? &existing : nullptr, &archive);
    ++traces;
  }
  if (traces == 0) {
    Complain(dir + ": no readable trace; nothing archived");
    return 2;
  }
  if (!archive.Write(path, &error)) {
    Complain(error);
    return 2;
  }
  struct stat st;
  uint64_t bytes = stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  printf("pinshim archive: %s: %zu trace%s, %zu addresses in %zu modules; %s, %s\n", dir.c_str(),
         traces, traces == 1 ? "" : "s", archive.addresses(), archive.modules(), path.c_str(),
         FormatBytes(bytes).c_str());
  return 0;
}

}  // namespace

int RunArchiveCommand(int argc, char** argv) {
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--") {
      for (++i; i < argc; ++i) dirs.push_back(argv[i]);
    } else if (!a.empty() && a[0] == '-') {
      Complain("unknown option '" + a + "'; see pinshim archive --help");
      return 2;
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.empty()) {
    Complain("no directory given; usage: pinshim archive DIR... (see --help)");
    return 2;
  }
  int status = 0;
  for (const std::string& d : dirs) {
    struct stat st;
    if (stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      Complain(d + ": not a directory (pinshim archive takes trace directories)");
      status = 2;
      continue;
    }
    status = std::max(status, ArchiveDirectory(d));
  }
  fflush(stdout);
  return status;
}

}  // namespace report
}  // namespace pinshim
