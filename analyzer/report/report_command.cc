#include "analyzer/report/report_command.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "analyzer/report/analysis.h"
#include "analyzer/report/format.h"
#include "analyzer/report/frameworks.h"
#include "analyzer/report/html_report.h"
#include "analyzer/report/inputs.h"
#include "analyzer/report/json_report.h"
#include "analyzer/report/merge.h"
#include "analyzer/report/perfetto_report.h"
#include "analyzer/report/profile.h"
#include "analyzer/report/symbol_archive.h"
#include "analyzer/report/text_report.h"
#include "analyzer/report/trace_reader.h"
#include "shim/optimize/site_profile.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace report {
namespace {

constexpr char kUsage[] =
    "usage: pinshim report [--format text|json|html|perfetto] [--fail-on info|warning|error]\n"
    "                      [--calibration FILE] [--profile-out FILE] PATH...\n"
    "\n"
    "Reads pinshim traces (a file, or a directory of *.pstrace files; several\n"
    "processes are merged and also shown one by one) and reports misuse of\n"
    "host memory in GPU copies, most severe first, then by the time it costs.\n"
    "Symbols come from the programs' files, or first from a directory's\n"
    "pinshim-symbols.txt (made by pinshim archive) when it has one.\n"
    "\n"
    "  --format text       a report for the terminal (default)\n"
    "  --format json       the same as JSON (schema version 1)\n"
    "  --format html       one self-contained page: findings with their stacks, charts\n"
    "                      of pinned memory, RSS and copy throughput over time, and a\n"
    "                      table per call site (write it to a file: > report.html)\n"
    "  --format perfetto   a timeline for ui.perfetto.dev (Chrome trace JSON)\n"
    "  --fail-on LEVEL     exit with status 1 when a finding of LEVEL or worse exists\n"
    "  --calibration FILE  copy bandwidths of your machine, as pinshim calibrate\n"
    "                      writes them (docs/calibration.md); default: the H200's\n"
    "  --profile-out FILE  also write the hot allocation sites to FILE, a profile\n"
    "                      for optimize mode (pinshim run --mode optimize --profile\n"
    "                      FILE): malloc'ed buffers copied hot, by pageable-hot's\n"
    "                      measure; copies of memory pinshim pinned count too, so\n"
    "                      traces of observe or optimize mode both work\n";

enum class Format { kText, kJson, kHtml, kPerfetto };

void Complain(const std::string& line) {
  std::string out = "pinshim report: " + Printable(line) + "\n";
  fwrite(out.data(), 1, out.size(), stderr);
}

// Why --profile-out must not write to out, or "": it is one of the traces
// being read, or an existing file other than a profile (a slip of the
// finger must not cost a file). The name itself is checked again when
// written (WriteProfile: no link, FIFO or other user's file).
std::string ProfileOutProblem(const std::string& out, const std::vector<std::string>& traces) {
  struct stat target;
  if (lstat(out.c_str(), &target) == 0 && S_ISLNK(target.st_mode)) {
    return "is a symbolic link, which is not followed";
  }
  if (stat(out.c_str(), &target) != 0) return "";
  for (const std::string& t : traces) {
    struct stat st;
    if (stat(t.c_str(), &st) == 0 && st.st_dev == target.st_dev && st.st_ino == target.st_ino) {
      return "is the trace " + t + ", which is being read";
    }
  }
  if (!S_ISREG(target.st_mode)) return "exists and is not a regular file";
  std::string head;
  std::string error;
  const std::string header = optimize::kProfileHeader;
  if (target.st_size > 0 &&
      (!ReadWholeFile(out, uint64_t{64} << 20, &head, &error) ||
       head.compare(0, header.size() - 1, header, 0, header.size() - 1) != 0)) {
    return "exists and is not a pinshim profile";
  }
  return "";
}

// What the command line asks for.
struct ReportArgs {
  Format format = Format::kText;
  bool fail_on_set = false;
  Severity fail_on = Severity::kError;
  std::string calibration;
  std::string profile_out;
  bool profile_set = false;
  std::vector<std::string> paths;
};

// The value of option `name` in argv[*i] ("--name=V", or "--name V", which
// moves *i on); false when argv[*i] is not that option or has no value.
bool OptionValue(int argc, char** argv, int* i, const char* name, std::string* out) {
  const std::string a = argv[*i];
  const std::string prefix = std::string(name) + "=";
  if (a.compare(0, prefix.size(), prefix) == 0) {
    *out = a.substr(prefix.size());
    return true;
  }
  if (a == name) {
    if (*i + 1 >= argc) return false;
    *out = argv[++*i];
    return true;
  }
  return false;
}

// --format's value; false (complained) when it names no format.
bool ParseFormat(const std::string& v, Format* format) {
  if (v == "text") {
    *format = Format::kText;
  } else if (v == "json") {
    *format = Format::kJson;
  } else if (v == "html") {
    *format = Format::kHtml;
  } else if (v == "perfetto") {
    *format = Format::kPerfetto;
  } else {
    Complain("unknown format '" + v + "' (accepted: text, json, html, perfetto)");
    return false;
  }
  return true;
}

// Reads the option at argv[*i] into *args (moving *i past its value);
// returns -1 to go on, else the command's exit code (help: 0; a bad
// option: 2, complained).
int ParseOption(int argc, char** argv, int* i, ReportArgs* args) {
  const std::string a = argv[*i];
  std::string v;
  if (a == "-h" || a == "--help") {
    fputs(kUsage, stdout);
    return 0;
  } else if (a.compare(0, 8, "--format") == 0) {
    if (!OptionValue(argc, argv, i, "--format", &v)) {
      Complain("--format needs a value: text, json, html or perfetto");
      return 2;
    }
    if (!ParseFormat(v, &args->format)) return 2;
  } else if (a.compare(0, 9, "--fail-on") == 0) {
    if (!OptionValue(argc, argv, i, "--fail-on", &v) || !ParseSeverity(v, &args->fail_on)) {
      Complain("--fail-on needs a level: info, warning or error");
      return 2;
    }
    args->fail_on_set = true;
  } else if (a.compare(0, 13, "--calibration") == 0) {
    if (!OptionValue(argc, argv, i, "--calibration", &args->calibration) ||
        args->calibration.empty()) {
      Complain("--calibration needs a file");
      return 2;
    }
  } else if (a.compare(0, 13, "--profile-out") == 0 && (a.size() == 13 || a[13] == '=')) {
    if (!OptionValue(argc, argv, i, "--profile-out", &args->profile_out) ||
        args->profile_out.empty()) {
      Complain("--profile-out needs a file");
      return 2;
    }
    args->profile_set = true;
  } else {
    Complain("unknown option '" + a + "'; see pinshim report --help");
    return 2;
  }
  return -1;
}

// The whole command line into *args; -1 to go on, else the exit code.
int ParseReportArgs(int argc, char** argv, ReportArgs* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) args->paths.push_back(argv[i]);
    } else if (!a.empty() && a[0] == '-') {
      const int code = ParseOption(argc, argv, &i, args);
      if (code >= 0) return code;
    } else {
      args->paths.push_back(a);
    }
  }
  if (args->paths.empty()) {
    Complain("no trace given; usage: pinshim report [options] PATH... (see --help)");
    return 2;
  }
  return -1;
}

// The readers and archives of the traces that were read, for the formats
// that look back into them.
struct ReadTraces {
  std::vector<const TraceReader*> readers;
  std::vector<const SymbolArchive*> archives;
};

// The analyzed traces' reports (moved out of *inputs), their readers in
// *read; a trace that could not be read adds its error to *problems.
std::vector<ProcessReport> CollectReports(std::vector<Input>* inputs, const ArchiveMap& archives,
                                          ReadTraces* read, std::vector<std::string>* problems) {
  std::vector<ProcessReport> reports;
  for (Input& in : *inputs) {
    if (in.reader == nullptr) {
      problems->push_back(in.error);
      continue;
    }
    read->readers.push_back(in.reader.get());
    read->archives.push_back(ArchiveFor(archives, in.path));
    reports.push_back(std::move(in.report));
  }
  return reports;
}

// Writes the report in `format` to stdout; false (complained) when it
// cannot.
bool WriteReport(const MergedReport& merged, Format format, const ReadTraces& read) {
  std::string out;
  switch (format) {
    case Format::kText: WriteTextReport(merged, &out); break;
    case Format::kJson: WriteJsonReport(merged, &out); break;
    case Format::kHtml: WriteHtmlReport(merged, read.readers, &out); break;
    case Format::kPerfetto:
      if (!WritePerfettoTrace(merged, read.readers, read.archives, stdout)) {
        Complain(std::string("cannot write the timeline: ") + strerror(errno));
        return false;
      }
      break;
  }
  if (!out.empty() && fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
    Complain(std::string("cannot write the report: ") + strerror(errno));
    return false;
  }
  fflush(stdout);
  return true;
}

// Writes the hot sites of every process to the profile at `path`, and one
// line about it to stderr; false (complained) when it cannot.
bool WriteProfileOut(const MergedReport& merged, const std::string& path) {
  std::vector<const HotSites*> each;
  for (const ProcessReport& p : merged.processes) each.push_back(&p.hot_sites);
  HotSites sites = MergeHotSites(each);
  std::string error;
  if (!WriteProfile(path, sites, merged.processes.size(), &error)) {
    Complain(error);
    return false;
  }
  std::string line = "pinshim: profile: " + std::to_string(sites.sites.size()) +
                     (sites.sites.size() == 1 ? " hot site" : " hot sites") + " written to " + path;
  if (sites.unwritable > 0) {
    line += "; " + std::to_string(sites.unwritable) +
            " more could not be written (a frame in a module without a GNU build id, "
            "or in no module the trace lists)";
  }
  line += "\n";
  fwrite(line.data(), 1, line.size(), stderr);
  return true;
}

}  // namespace

int RunReportCommand(int argc, char** argv) {
  ReportArgs args;
  const int parsed = ParseReportArgs(argc, argv, &args);
  if (parsed >= 0) return parsed;
  AnalysisOptions options;
  options.hot_sites = args.profile_set;
  if (!args.calibration.empty()) {
    std::string error;
    if (!options.model.LoadCalibration(args.calibration, &error)) {
      Complain(error);
      return 2;
    }
  }
  std::vector<std::string> problems;
  std::vector<std::string> files = CollectInputs(args.paths, &problems);
  if (args.profile_set) {
    const std::string why = ProfileOutProblem(args.profile_out, files);
    if (!why.empty()) {
      Complain("--profile-out " + args.profile_out + ": " + why + "; nothing written");
      return 2;
    }
  }
  std::vector<Input> inputs(files.size());
  for (size_t i = 0; i < files.size(); ++i) inputs[i].path = files[i];
  const auto archives = LoadArchives(inputs, &problems);
  AnalyzeAll(&inputs, options, archives);
  ReadTraces read;
  std::vector<ProcessReport> reports = CollectReports(&inputs, archives, &read, &problems);
  for (const std::string& p : problems) Complain(p);
  if (reports.empty()) {
    Complain("nothing to report: no readable trace");
    return 2;
  }
  MergedReport merged = Merge(std::move(reports));
  merged.problems = problems;
  merged.model_source = options.model.source();
  if (!WriteReport(merged, args.format, read)) return 2;
  if (args.profile_set && !WriteProfileOut(merged, args.profile_out)) return 2;
  if (args.fail_on_set && HasFindingAtLeast(merged, args.fail_on)) return 1;
  return 0;
}

}  // namespace report
}  // namespace pinshim
