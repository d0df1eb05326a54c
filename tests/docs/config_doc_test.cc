// docs/configuration.md shows the settings as config_keys.inc defines them:
// its settings table is the table's entries, one row each, in order, with
// their texts, and its `pinshim run` table has a row for every option.
// On a difference the test prints the rows the page should have.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "shim/core/config.h"

namespace pinshim {
namespace {

constexpr char kPage[] = "docs/configuration.md";

std::vector<std::string> PageLines() {
  std::ifstream in(kPage);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A table cell's text: '|' escaped as Markdown needs.
std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string SettingRow(const ConfigKeyInfo& info) {
  return std::string("| `") + info.variable + "` | `" + info.file_key + "` | " +
         Cell(info.default_text) + " | " + Cell(info.accepted) + " | " + Cell(info.meaning) + " |";
}

const char* GroupWords(ConfigNeeds needs) {
  switch (needs) {
    case ConfigNeeds::kNothing: return "basics";
    case ConfigNeeds::kTrace: return "with a trace";
    case ConfigNeeds::kOptimize: return "optimize mode";
    case ConfigNeeds::kEnforce:
    case ConfigNeeds::kNodeLedger: return "enforce mode";
  }
  return "";
}

// The start of the option's row: group and option with its value.
std::string OptionRowStart(const ConfigKeyInfo& info) {
  const bool optional = info.kind == ConfigKind::kFlag || info.kind == ConfigKind::kSummary;
  const std::string head = std::string(info.option) +
                           (optional ? "[=" + Cell(info.metavar) + "]" : " " + Cell(info.metavar));
  return std::string("| ") + GroupWords(info.needs) + " | `" + head + "`";
}

TEST(ConfigDocTest, SettingsTableIsTheTable) {
  const std::vector<std::string> lines = PageLines();
  ASSERT_FALSE(lines.empty()) << "cannot read " << kPage;
  const std::string header = "| variable | file key | default | accepted | meaning |";
  size_t at = 0;
  while (at < lines.size() && lines[at] != header) ++at;
  ASSERT_LT(at + 1, lines.size()) << kPage << " has no settings table (" << header << ")";
  at += 2;  // past the header and its rule
  std::string expected;
  std::string found;
  for (const ConfigKeyInfo& info : kConfigKeys) {
    expected += SettingRow(info) + "\n";
    found += (at < lines.size() ? lines[at++] : std::string()) + "\n";
  }
  EXPECT_EQ(found, expected) << kPage << "'s settings table should read:\n" << expected;
  EXPECT_TRUE(at >= lines.size() || lines[at].empty() || lines[at][0] != '|')
      << kPage << "'s settings table has rows beyond the settings: " << lines[at];
}

TEST(ConfigDocTest, EveryRunOptionHasItsRow) {
  const std::vector<std::string> lines = PageLines();
  ASSERT_FALSE(lines.empty()) << "cannot read " << kPage;
  int options = 0;
  for (const ConfigKeyInfo& info : kConfigKeys) {
    if (info.option == nullptr) continue;
    ++options;
    const std::string start = OptionRowStart(info);
    const std::string end = std::string("| `") + info.variable + "` |";
    bool found = false;
    for (const std::string& line : lines) {
      found = found || (line.compare(0, start.size(), start) == 0 && line.size() >= end.size() &&
                        line.compare(line.size() - end.size(), end.size(), end) == 0);
    }
    EXPECT_TRUE(found) << kPage << " has no row \"" << start << " ... " << end << "\"";
  }
  EXPECT_GT(options, 10) << "the table lost its options";
  // No row for an option that is gone: the settings' options and --config.
  int rows = 0;
  for (const std::string& line : lines) {
    for (const char* group : {"basics", "with a trace", "optimize mode", "enforce mode"}) {
      const std::string start = std::string("| ") + group + " | `--";
      rows += line.compare(0, start.size(), start) == 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(rows, options + 1) << kPage << "'s pinshim run table has rows for other options";
}

}  // namespace
}  // namespace pinshim
