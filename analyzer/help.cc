#include "analyzer/help.h"

#include "analyzer/library_path.h"
#include "shim/core/config.h"
#include "shim/core/size.h"

namespace pinshim {
namespace {

constexpr int kWidth = 79;

void PrintVariable(FILE* out, const char* name, const char* default_text,
                   const std::string& accepted, const std::string& meaning) {
  std::fprintf(out, "  %s (default: %s)\n", name, default_text);
  PrintWrapped(out, meaning + " Accepted: " + accepted + ".", 6, kWidth);
}

}  // namespace

void PrintWrapped(FILE* out, const std::string& text, int indent, int width) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::string line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    if (!line.empty() && static_cast<int>(indent + line.size() + 1 + word.size()) > width) {
      std::fprintf(out, "%s%s\n", pad.c_str(), line.c_str());
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) std::fprintf(out, "%s%s\n", pad.c_str(), line.c_str());
}

void PrintOptionLine(FILE* out, const std::string& head, const std::string& text) {
  constexpr int kColumn = 27;
  std::string line = "  " + head;
  if (static_cast<int>(line.size()) + 1 > kColumn) {
    std::fprintf(out, "%s\n", line.c_str());
    line.clear();
  }
  line.resize(kColumn, ' ');
  // The first line of text goes after the head; PrintWrapped indents the rest.
  std::string rest = text;
  std::string first;
  while (!rest.empty()) {
    const size_t space = rest.find(' ');
    const std::string word = rest.substr(0, space);
    if (!first.empty() && kColumn + first.size() + 1 + word.size() > kWidth) break;
    first += (first.empty() ? "" : " ") + word;
    rest = space == std::string::npos ? "" : rest.substr(space + 1);
  }
  std::fprintf(out, "%s%s\n", line.c_str(), first.c_str());
  if (!rest.empty()) PrintWrapped(out, rest, kColumn, kWidth);
}

void PrintVariables(FILE* out) {
  std::fprintf(out,
               "Environment variables read by libpinshim.so at start-up (the "
               "environment\noverrides the config file):\n");
  for (const ConfigKeyInfo& info : kConfigKeys) {
    PrintVariable(out, info.variable, info.default_text, info.accepted, info.meaning);
  }
  std::string file_keys;
  for (const ConfigKeyInfo& info : kConfigKeys) {
    file_keys += (file_keys.empty() ? "" : ", ") + std::string(info.file_key);
  }
  PrintVariable(out, kConfigFileVariable, "/etc/pinshim.conf when it exists",
                "a file path, or empty for no file",
                "Config file with \"key = value\" lines; keys are the variable names "
                "without PINSHIM_ in lower case (" +
                    file_keys +
                    "); '#' starts a comment at the start of a line or after a blank. A "
                    "named file that cannot be read is an error.");
  PrintVariable(out, kLibraryVariable, "the library beside pinshim", "a file path",
                "Read by pinshim run only: the libpinshim.so to preload.");
  std::fprintf(out, "\n");
  PrintWrapped(out,
               std::string("A size is ") + SizeFormsText(false) +
                   ". A percentage, where accepted, is of the physical "
                   "memory of the machine the program runs on: above 0 and "
                   "at most 100, e.g. 25%.",
               0, kWidth);
  std::fprintf(out, "\n");
  PrintWrapped(out,
               "A bad value is reported in one warning line and that setting "
               "keeps its default; a bad mode, a bad budget or an unreadable "
               "config file makes the library run in observe mode only.",
               0, kWidth);
}

}  // namespace pinshim
