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

}  // namespace

int RunReportCommand(int argc, char** argv) {
  Format format = Format::kText;
  bool fail_on_set = false;
  Severity fail_on = Severity::kError;
  std::string calibration;
  std::string profile_out;
  bool profile_set = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name, std::string* out) {
      std::string prefix = std::string(name) + "=";
      if (a.compare(0, prefix.size(), prefix) == 0) {
        *out = a.substr(prefix.size());
        return true;
      }
      if (a == name) {
        if (i + 1 >= argc) return false;
        *out = argv[++i];
        return true;
      }
      return false;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 0;
    } else if (a.compare(0, 8, "--format") == 0) {
      if (!value("--format", &v)) {
        Complain("--format needs a value: text, json, html or perfetto");
        return 2;
      }
      if (v == "text")
        format = Format::kText;
      else if (v == "json")
        format = Format::kJson;
      else if (v == "html")
        format = Format::kHtml;
      else if (v == "perfetto")
        format = Format::kPerfetto;
      else {
        Complain("unknown format '" + v + "' (accepted: text, json, html, perfetto)");
        return 2;
      }
    } else if (a.compare(0, 9, "--fail-on") == 0) {
      if (!value("--fail-on", &v) || !ParseSeverity(v, &fail_on)) {
        Complain("--fail-on needs a level: info, warning or error");
        return 2;
      }
      fail_on_set = true;
    } else if (a.compare(0, 13, "--calibration") == 0) {
      if (!value("--calibration", &calibration) || calibration.empty()) {
        Complain("--calibration needs a file");
        return 2;
      }
    } else if (a.compare(0, 13, "--profile-out") == 0 && (a.size() == 13 || a[13] == '=')) {
      if (!value("--profile-out", &profile_out) || profile_out.empty()) {
        Complain("--profile-out needs a file");
        return 2;
      }
      profile_set = true;
    } else if (a == "--") {
      for (++i; i < argc; ++i) paths.push_back(argv[i]);
    } else if (!a.empty() && a[0] == '-') {
      Complain("unknown option '" + a + "'; see pinshim report --help");
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) {
    Complain("no trace given; usage: pinshim report [options] PATH... (see --help)");
    return 2;
  }
  AnalysisOptions options;
  options.hot_sites = profile_set;
  if (!calibration.empty()) {
    std::string error;
    if (!options.model.LoadCalibration(calibration, &error)) {
      Complain(error);
      return 2;
    }
  }
  std::vector<std::string> problems;
  std::vector<std::string> files = CollectInputs(paths, &problems);
  if (profile_set) {
    const std::string why = ProfileOutProblem(profile_out, files);
    if (!why.empty()) {
      Complain("--profile-out " + profile_out + ": " + why + "; nothing written");
      return 2;
    }
  }
  std::vector<Input> inputs(files.size());
  for (size_t i = 0; i < files.size(); ++i) inputs[i].path = files[i];
  const auto archives = LoadArchives(inputs, &problems);
  AnalyzeAll(&inputs, options, archives);

  std::vector<ProcessReport> reports;
  std::vector<const TraceReader*> readers;
  std::vector<const SymbolArchive*> reader_archives;
  for (Input& in : inputs) {
    if (in.reader == nullptr) {
      problems.push_back(in.error);
      continue;
    }
    readers.push_back(in.reader.get());
    reader_archives.push_back(ArchiveFor(archives, in.path));
    reports.push_back(std::move(in.report));
  }
  for (const std::string& p : problems) Complain(p);
  if (reports.empty()) {
    Complain("nothing to report: no readable trace");
    return 2;
  }
  MergedReport merged = Merge(std::move(reports));
  merged.problems = problems;
  merged.model_source = options.model.source();
  std::string out;
  switch (format) {
    case Format::kText: WriteTextReport(merged, &out); break;
    case Format::kJson: WriteJsonReport(merged, &out); break;
    case Format::kHtml: WriteHtmlReport(merged, readers, &out); break;
    case Format::kPerfetto:
      if (!WritePerfettoTrace(merged, readers, reader_archives, stdout)) {
        Complain(std::string("cannot write the timeline: ") + strerror(errno));
        return 2;
      }
      break;
  }
  if (!out.empty() && fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
    Complain(std::string("cannot write the report: ") + strerror(errno));
    return 2;
  }
  fflush(stdout);
  if (profile_set) {
    std::vector<const HotSites*> each;
    for (const ProcessReport& p : merged.processes) each.push_back(&p.hot_sites);
    HotSites sites = MergeHotSites(each);
    std::string error;
    if (!WriteProfile(profile_out, sites, merged.processes.size(), &error)) {
      Complain(error);
      return 2;
    }
    std::string line = "pinshim: profile: " + std::to_string(sites.sites.size()) +
                       (sites.sites.size() == 1 ? " hot site" : " hot sites") + " written to " +
                       profile_out;
    if (sites.unwritable > 0) {
      line += "; " + std::to_string(sites.unwritable) +
              " more could not be written (a frame in a module without a GNU build id, "
              "or in no module the trace lists)";
    }
    line += "\n";
    fwrite(line.data(), 1, line.size(), stderr);
  }
  if (fail_on_set && HasFindingAtLeast(merged, fail_on)) return 1;
  return 0;
}

}  // namespace report
}  // namespace pinshim
