#include "analyzer/report/inputs.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "analyzer/report/frameworks.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace report {
namespace {

bool EndsWith(const std::string& s, const char* suffix) {
  size_t n = strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

}  // namespace

std::vector<std::string> CollectInputs(const std::vector<std::string>& paths,
                                       std::vector<std::string>* problems) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) {
      problems->push_back(p + ": " + strerror(errno));
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      files.push_back(p);
      continue;
    }
    DIR* d = opendir(p.c_str());
    if (d == nullptr) {
      problems->push_back(p + ": cannot read directory: " + strerror(errno));
      continue;
    }
    std::vector<std::string> found;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (EndsWith(name, trace::kTraceExtension)) found.push_back(p + "/" + name);
    }
    closedir(d);
    if (found.empty()) {
      problems->push_back(p + ": no pinshim traces (*" + std::string(trace::kTraceExtension) +
                          ") in this directory: a process writes one when it first calls the CUDA "
                          "driver while pinshim run --trace-dir (or PINSHIM_TRACE_DIR) "
                          "names this directory; did the program reach CUDA?");
    }
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

ArchiveMap LoadArchives(const std::vector<Input>& inputs, std::vector<std::string>* problems) {
  ArchiveMap archives;
  for (const Input& in : inputs) {
    size_t slash = in.path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : in.path.substr(0, slash);
    if (archives.count(dir) != 0) continue;
    auto archive = std::make_unique<SymbolArchive>();
    std::string error;
    bool missing = false;
    if (!archive->Load(dir + "/" + kArchiveFileName, &error, &missing)) {
      if (!missing) problems->push_back(error + "; symbols come from the files");
      archive.reset();
    }
    archives[dir] = std::move(archive);
  }
  return archives;
}

const SymbolArchive* ArchiveFor(const ArchiveMap& a, const std::string& path) {
  size_t slash = path.rfind('/');
  auto it = a.find(slash == std::string::npos ? "." : path.substr(0, slash));
  return it == a.end() ? nullptr : it->second.get();
}

void AnalyzeAll(std::vector<Input>* inputs, const AnalysisOptions& shared,
                const ArchiveMap& archives) {
  std::atomic<size_t> next{0};
  auto work = [&]() {
    for (;;) {
      size_t i = next.fetch_add(1);
      if (i >= inputs->size()) return;
      Input& in = (*inputs)[i];
      in.reader = std::make_unique<TraceReader>();
      if (!in.reader->Open(in.path, &in.error)) {
        in.reader.reset();
        continue;
      }
      AnalysisOptions options = shared;
      options.archive = ArchiveFor(archives, in.path);
      in.report = AnalyzeTrace(*in.reader, options);
      ApplyFrameworkKnowledge(&in.report);
    }
  };
  size_t threads =
      std::max<size_t>(1, std::min<size_t>(inputs->size(), std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace report
}  // namespace pinshim
