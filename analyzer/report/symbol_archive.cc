#include "analyzer/report/symbol_archive.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "analyzer/report/format.h"
#include "shim/core/safe_file.h"

namespace pinshim {
namespace report {
namespace {

constexpr char kVersionLine[] = "pinshim-symbols 1";
constexpr uint64_t kMaxArchiveBytes = uint64_t{1} << 30;

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char n = s[++i];
      out += n == 't' ? '\t' : n == 'n' ? '\n' : n;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t tab = line.find('\t', start);
    out.push_back(Unescape(line.substr(start, tab == std::string::npos ? tab : tab - start)));
    if (tab == std::string::npos) return out;
    start = tab + 1;
  }
}

}  // namespace

std::string ArchiveModuleKey(const Module& m) {
  return m.build_id.empty() ? "p:" + m.path : "b:" + HexBytes(m.build_id);
}

bool SymbolArchive::Load(const std::string& path, std::string* error, bool* missing) {
  // Without blocking on a FIFO planted at the name.
  std::string text;
  std::string why;
  if (!ReadWholeFile(path, kMaxArchiveBytes, &text, &why, missing)) {
    *error = path + ": " + why;
    return false;
  }
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kVersionLine) {
    *error = path + ": not a pinshim symbol archive of version 1 (first line: \"" +
             line.substr(0, 40) + "\")";
    return false;
  }
  ModuleEntry* module = nullptr;
  std::vector<Frame>* frames = nullptr;
  size_t frames_left = 0;
  size_t number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.size() < 2 || line[1] != '\t') continue;
    std::vector<std::string> f = Fields(line.substr(2));
    const char type = line[0];
    auto bad = [&]() {
      *error = path + ":" + std::to_string(number) + ": malformed record";
      return false;
    };
    if (type == 'M') {
      if (f.size() < 2) return bad();
      module = &modules_[f[0]];
      module->path = f[1];
      frames = nullptr;
    } else if (type == 'P') {
      if (module == nullptr || f.empty()) return bad();
      module->problem = f[0];
    } else if (type == 'A') {
      if (module == nullptr || f.size() < 3) return bad();
      uint64_t offset = strtoull(f[0].c_str(), nullptr, 16);
      bool exact = f[1] == "1";
      frames = &module->addresses[{offset, exact}];
      frames->clear();
      frames_left = strtoull(f[2].c_str(), nullptr, 10);
    } else if (type == 'F') {
      if (frames == nullptr || frames_left == 0 || f.size() < 6) return bad();
      Frame fr;
      fr.inlined = f[0] == "1";
      fr.runtime = f[1] == "1";
      fr.function = f[2];
      fr.file = f[3];
      fr.line = atoi(f[4].c_str());
      fr.note = f[5];
      frames->push_back(fr);
      --frames_left;
    }
  }
  return true;
}

const std::vector<Frame>* SymbolArchive::Lookup(const Module& m, uint64_t offset,
                                                bool exact) const {
  auto it = modules_.find(ArchiveModuleKey(m));
  if (it == modules_.end()) return nullptr;
  auto a = it->second.addresses.find({offset, exact});
  return a == it->second.addresses.end() || a->second.empty() ? nullptr : &a->second;
}

std::string SymbolArchive::Problem(const Module& m) const {
  auto it = modules_.find(ArchiveModuleKey(m));
  return it == modules_.end() ? std::string() : it->second.problem;
}

bool SymbolArchive::HasModule(const Module& m) const {
  return modules_.count(ArchiveModuleKey(m)) != 0;
}

void SymbolArchive::Add(const Module& m, uint64_t offset, bool exact,
                        const std::vector<Frame>& frames) {
  ModuleEntry& e = modules_[ArchiveModuleKey(m)];
  e.path = m.path;
  e.addresses[{offset, exact}] = frames;
}

void SymbolArchive::SetProblem(const Module& m, const std::string& problem) {
  ModuleEntry& e = modules_[ArchiveModuleKey(m)];
  e.path = m.path;
  e.problem = problem;
}

size_t SymbolArchive::addresses() const {
  size_t n = 0;
  for (const auto& kv : modules_) n += kv.second.addresses.size();
  return n;
}

bool SymbolArchive::Write(const std::string& path, std::string* error) const {
  std::ostringstream out;
  out << kVersionLine << "\n";
  for (const auto& kv : modules_) {
    const ModuleEntry& e = kv.second;
    out << "M\t" << Escape(kv.first) << "\t" << Escape(e.path) << "\n";
    if (!e.problem.empty()) out << "P\t" << Escape(e.problem) << "\n";
    for (const auto& a : e.addresses) {
      char head[64];
      snprintf(head, sizeof(head), "A\t%llx\t%d\t%zu\n",
               static_cast<unsigned long long>(a.first.first), a.first.second ? 1 : 0,
               a.second.size());
      out << head;
      for (const Frame& f : a.second) {
        out << "F\t" << (f.inlined ? 1 : 0) << "\t" << (f.runtime ? 1 : 0) << "\t"
            << Escape(f.function) << "\t" << Escape(f.file) << "\t" << f.line << "\t"
            << Escape(f.note) << "\n";
      }
    }
  }
  const std::string text = out.str();
  // Renamed into place from an unguessable temporary name; a link, a FIFO or
  // another user's file at the name is refused (shim/core/safe_file.h).
  const int err = ReplaceWithData(path.c_str(), 0644, text.data(), text.size());
  if (err != 0) {
    *error = path + ": " + SafeFileReason(err);
    return false;
  }
  return true;
}

}  // namespace report
}  // namespace pinshim
