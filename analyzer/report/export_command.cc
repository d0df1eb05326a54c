#include "analyzer/report/export_command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "analyzer/report/export.h"
#include "analyzer/report/format.h"
#include "analyzer/report/inputs.h"

namespace pinshim {
namespace report {
namespace {

constexpr char kUsage[] =
    "usage: pinshim export --out DIR [--calibration FILE] [--quiet] PATH...\n"
    "\n"
    "Analyzes pinshim traces (a file, or a directory of *.pstrace files) as\n"
    "pinshim report does and writes the analysis as tables, one JSON Lines\n"
    "file each, into DIR (created if missing): processes, sites, copies (per\n"
    "call site, direction and memory kind), pinned_sites, findings,\n"
    "pinned_series, problems, and manifest.json with the schema's version.\n"
    "A call site has the same key in every process and host. pinshim fleet\n"
    "reduces many such exports; the schema is in docs/fleet.md.\n"
    "\n"
    "  --out DIR           where the tables go (files there of the same names\n"
    "                      are replaced; a symbolic link is not followed)\n"
    "  --calibration FILE  copy bandwidths of your machine, as pinshim calibrate\n"
    "                      writes them (docs/calibration.md); default: the H200's\n"
    "  --quiet             no line on stderr for an unreadable input (the\n"
    "                      problems table still lists it)\n";

void Complain(const std::string& line) {
  std::string out = "pinshim export: " + Printable(line) + "\n";
  fwrite(out.data(), 1, out.size(), stderr);
}

struct ExportArgs {
  std::string out;
  std::string calibration;
  bool quiet = false;
  std::vector<std::string> paths;
};

// 0: parsed; 1: help shown; 2: bad usage (said).
int ParseArgs(int argc, char** argv, ExportArgs* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& name, std::string* out) {
      if (a.compare(0, name.size() + 1, name + "=") == 0) {
        *out = a.substr(name.size() + 1);
        return true;
      }
      if (a != name || i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 1;
    } else if (a == "--out" || a.compare(0, 6, "--out=") == 0) {
      if (!value("--out", &args->out) || args->out.empty()) {
        Complain("--out needs a directory");
        return 2;
      }
    } else if (a == "--calibration" || a.compare(0, 14, "--calibration=") == 0) {
      if (!value("--calibration", &args->calibration) || args->calibration.empty()) {
        Complain("--calibration needs a file");
        return 2;
      }
    } else if (a == "--quiet") {
      args->quiet = true;
    } else if (a == "--") {
      for (++i; i < argc; ++i) args->paths.push_back(argv[i]);
    } else if (!a.empty() && a[0] == '-') {
      Complain("unknown option '" + a + "'; see pinshim export --help");
      return 2;
    } else {
      args->paths.push_back(a);
    }
  }
  if (args->out.empty()) {
    Complain("--out DIR is required; usage: pinshim export --out DIR PATH... (see --help)");
    return 2;
  }
  if (args->paths.empty()) {
    Complain("no trace given; usage: pinshim export --out DIR PATH... (see --help)");
    return 2;
  }
  return 0;
}

}  // namespace

int RunExportCommand(int argc, char** argv) {
  ExportArgs args;
  const int parsed = ParseArgs(argc, argv, &args);
  if (parsed != 0) return parsed == 1 ? 0 : 2;
  AnalysisOptions options;
  options.site_tables = true;
  if (!args.calibration.empty()) {
    std::string error;
    if (!options.model.LoadCalibration(args.calibration, &error)) {
      Complain(error);
      return 2;
    }
  }
  std::vector<std::string> problems;
  const std::vector<std::string> files = CollectInputs(args.paths, &problems);
  std::vector<Input> inputs(files.size());
  for (size_t i = 0; i < files.size(); ++i) inputs[i].path = files[i];
  const ArchiveMap archives = LoadArchives(inputs, &problems);
  AnalyzeAll(&inputs, options, archives);
  std::vector<ExportProblem> unread;
  for (const std::string& p : problems) unread.push_back({"", p});
  std::vector<ProcessReport> reports;
  for (Input& in : inputs) {
    if (in.reader == nullptr) {
      problems.push_back(in.error);
      unread.push_back({in.path, in.error});
      continue;
    }
    reports.push_back(std::move(in.report));
    in.reader.reset();
  }
  if (!args.quiet) {
    for (const std::string& p : problems) Complain(p);
  }
  const auto tables = ExportTables(reports, unread, options.model.source());
  std::string error;
  if (!WriteExport(args.out, tables, &error)) {
    Complain(error);
    return 2;
  }
  if (reports.empty()) {
    Complain("nothing to export: no readable trace (the problems table says why)");
    return 2;
  }
  return 0;
}

}  // namespace report
}  // namespace pinshim
