#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "shim/budget/budget.h"
#include "shim/budget/test_util.h"

namespace pinshim {
namespace budget {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

class TestBudget : public Budget {
 public:
  ~TestBudget() { CloseForTesting(); }
};

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A parsed exposition: series ("name{labels}") to value, plus format checks.
struct Exposition {
  std::map<std::string, uint64_t> values;
  std::vector<std::string> problems;
};

// Parses Prometheus text format strictly enough to catch what the textfile
// collector would reject: samples before their HELP/TYPE, a family split in
// two, a series given twice, names without the pinshim_ prefix.
// This process's labels outside a ledger.
std::string OwnLabels() { return "pid=\"" + std::to_string(getpid()) + "\",slot=\"none\""; }

Exposition Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  std::string help_for;
  std::string family;
  std::set<std::string> families_done;
  if (text.empty() || text.back() != '\n') e.problems.push_back("does not end in a newline");
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      if (!family.empty()) families_done.insert(family);
      if (families_done.count(name)) e.problems.push_back("family split: " + name);
      help_for = name;
      family.clear();
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      if (name != help_for) e.problems.push_back("TYPE without HELP: " + name);
      if (type != "gauge" && type != "counter") e.problems.push_back("type " + type);
      family = name;
      continue;
    }
    size_t space = line.rfind(' ');
    std::string series = line.substr(0, space);
    std::string name = series.substr(0, series.find('{'));
    if (name != family) e.problems.push_back("sample outside its family: " + line);
    if (name.rfind("pinshim_", 0) != 0) e.problems.push_back("unprefixed: " + name);
    if (e.values.count(series)) e.problems.push_back("duplicate series: " + series);
    e.values[series] = std::stoull(line.substr(space + 1));
  }
  return e;
}

// Writes b's metrics file at path; *text: what it holds, *e: its parse,
// which must have found no problem.
void WriteAndParse(TestBudget* b, const std::string& path, std::string* text, Exposition* e) {
  BudgetStatus st = b->WriteMetricsFile(path.c_str());
  ASSERT_TRUE(st.ok()) << st.message;
  *text = ReadFile(path);
  *e = Parse(*text);
  EXPECT_TRUE(e->problems.empty()) << e->problems[0] << "\n" << *text;
}

TEST(MetricsTest, ProcessOnlyBudget) {
  const std::string path = TempPath("process.prom");
  TestBudget b;
  BudgetOptions o;
  o.process_bytes = 8 * kMiB;
  o.policy = Policy::kFallback;
  ASSERT_TRUE(b.Init(o).ok());
  ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kPinshimCache, kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kProgramRegister, 5 * kMiB), Decision::kFallback);
  std::string text;
  Exposition e;
  WriteAndParse(&b, path, &text, &e);
  if (HasFatalFailure()) return;
  const std::string me = OwnLabels();
  EXPECT_EQ(e.values.at("pinshim_pinned_bytes{" + me + ",owner=\"program_alloc\",kind=\"pinned\"}"),
            3 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_pinned_bytes{" + me +
                        ",owner=\"program_register\",kind=\"registered\"}"),
            0u);
  EXPECT_EQ(e.values.at("pinshim_pinned_bytes{" + me + ",owner=\"pinshim_pool\",kind=\"pinshim\"}"),
            0u);
  EXPECT_EQ(
      e.values.at("pinshim_pinned_bytes{" + me + ",owner=\"pinshim_cache\",kind=\"pinshim\"}"),
      kMiB);
  EXPECT_EQ(e.values.at("pinshim_process_budget_bytes{" + me + "}"), 8 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_grants_total{" + me + "}"), 2u);
  // Every owner has a kind of its own (none reads "unknown").
  EXPECT_EQ(text.find("kind=\"unknown\""), std::string::npos) << text;
  EXPECT_EQ(e.values.at("pinshim_denials_total{" + me + "}"), 0u);
  EXPECT_EQ(e.values.at("pinshim_fallbacks_total{" + me + "}"), 1u);
  EXPECT_EQ(e.values.at("pinshim_evictions_total{" + me + "}"), 0u);
  EXPECT_EQ(e.values.count("pinshim_node_budget_bytes"), 0u) << "no ledger, no node metrics";
  EXPECT_NE(text.find("# TYPE pinshim_denials_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE pinshim_pinned_bytes gauge\n"), std::string::npos);
}

TEST(MetricsTest, VmmHostAndHostPoolPinningHaveTheirKinds) {
  const std::string path = TempPath("kinds.prom");
  TestBudget b;
  BudgetOptions o;
  o.process_bytes = 64 * kMiB;
  ASSERT_TRUE(b.Init(o).ok());
  ASSERT_EQ(b.Charge(Owner::kProgramVmm, 4 * kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kProgramPool, 32 * kMiB), Decision::kGranted);
  std::string text;
  Exposition e;
  WriteAndParse(&b, path, &text, &e);
  if (HasFatalFailure()) return;
  const std::string me = OwnLabels();
  EXPECT_EQ(e.values.at("pinshim_pinned_bytes{" + me + ",owner=\"program_vmm\",kind=\"vmm-host\"}"),
            4 * kMiB)
      << text;
  EXPECT_EQ(
      e.values.at("pinshim_pinned_bytes{" + me + ",owner=\"program_pool\",kind=\"host-pool\"}"),
      32 * kMiB)
      << text;
}

TEST(MetricsTest, NodeLedgerShowsEveryProcessAndTheNode) {
  const std::string ledger = UniqueLedgerPath("metrics");
  const std::string path = TempPath("node.prom");
  BudgetOptions o;
  o.node_bytes = 10 * kMiB;
  o.ledger_path = ledger.c_str();
  TestBudget a;
  TestBudget b;
  ASSERT_TRUE(a.Init(o).ok());
  o.process_bytes = 4 * kMiB;
  ASSERT_TRUE(b.Init(o).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 6 * kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kPinshimPool, 3 * kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kPinshimPool, 3 * kMiB), Decision::kDenied);
  ASSERT_TRUE(b.WriteMetricsFile(path.c_str()).ok());
  Exposition e = Parse(ReadFile(path));
  EXPECT_TRUE(e.problems.empty()) << e.problems[0];
  const std::string pid = "pid=\"" + std::to_string(getpid()) + "\"";
  const std::string la = pid + ",slot=\"" + std::to_string(a.Snapshot().slot) + "\"";
  const std::string lb = pid + ",slot=\"" + std::to_string(b.Snapshot().slot) + "\"";
  EXPECT_EQ(e.values.at("pinshim_pinned_bytes{" + la + ",owner=\"program_alloc\",kind=\"pinned\"}"),
            6 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_pinned_bytes{" + lb + ",owner=\"pinshim_pool\",kind=\"pinshim\"}"),
            3 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_process_budget_bytes{" + la + "}"), 0u);
  EXPECT_EQ(e.values.at("pinshim_process_budget_bytes{" + lb + "}"), 4 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_denials_total{" + lb + "}"), 1u);
  EXPECT_EQ(e.values.at("pinshim_node_pinned_bytes{owner=\"program_alloc\"}"), 6 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_node_pinned_bytes{owner=\"pinshim_pool\"}"), 3 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_node_budget_bytes"), 10 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_reserved_bytes{" + la + "}"), 6 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_reserved_bytes{" + lb + "}"), 3 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_node_reserved_bytes"), 9 * kMiB);
  EXPECT_EQ(e.values.at("pinshim_node_reservation_takes_total"), 0u);
  EXPECT_EQ(e.values.at("pinshim_node_processes"), 2u);
  EXPECT_EQ(e.values.at("pinshim_node_grants_total"), 2u);
  EXPECT_EQ(e.values.at("pinshim_node_denials_total"), 1u);
  EXPECT_EQ(e.values.at("pinshim_node_lock_recoveries_total"), 0u);
  EXPECT_EQ(e.values.at("pinshim_node_reclaimed_processes_total"), 0u);
}

TEST(MetricsTest, TickWritesTheConfiguredFile) {
  const std::string path = TempPath("tick.prom");
  unlink(path.c_str());
  TestBudget b;
  BudgetOptions o;
  o.process_bytes = kMiB;
  o.metrics_path = path.c_str();
  ASSERT_TRUE(b.Init(o).ok());
  ASSERT_TRUE(b.Tick().ok());
  EXPECT_NE(ReadFile(path).find("pinshim_process_budget_bytes{"), std::string::npos);
}

TEST(MetricsTest, UnwritableDirectoryIsReportedAndLeavesNothing) {
  TestBudget b;
  ASSERT_TRUE(b.Init(BudgetOptions()).ok());
  BudgetStatus st = b.WriteMetricsFile(TempPath("no/such/dir.prom").c_str());
  EXPECT_EQ(st.code, BudgetStatus::kInvalid);
  EXPECT_NE(std::string(st.message).find("cannot write metrics file"), std::string::npos);
  EXPECT_NE(std::string(st.message).find("No such file or directory"), std::string::npos);
}

// Writing that starts failing says so once, then nothing until it works.
TEST(MetricsTest, FailuresWarnOnceEachTimeTheyStart) {
  const std::string dir = TempPath("failing");
  const std::string path = dir + "/pinshim.prom";
  TestBudget b;
  BudgetOptions o;
  o.process_bytes = kMiB;
  o.metrics_path = path.c_str();
  ASSERT_TRUE(b.Init(o).ok());
  BudgetStatus st = b.WriteMetricsNow();  // the directory does not exist yet
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message).find("cannot write metrics file " + path), std::string::npos)
      << st.message;
  st = b.WriteMetricsNow();
  EXPECT_FALSE(st.ok());
  EXPECT_STREQ(st.message, "") << "no second warning while it keeps failing";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  st = b.WriteMetricsNow();
  EXPECT_TRUE(st.ok());
  EXPECT_NE(std::string(st.message).find("written again"), std::string::npos) << st.message;
  EXPECT_STREQ(b.WriteMetricsNow().message, "");
  ASSERT_EQ(rename(dir.c_str(), (dir + ".gone").c_str()), 0);
  EXPECT_NE(std::string(b.WriteMetricsNow().message).find("cannot write"), std::string::npos)
      << "a new run of failures warns again";
}

// Another user's link, or their file, at the metrics path (a directory both
// may write): nothing is written through the link, their file is not
// replaced, and the user's own file keeps its mode.
TEST(MetricsTest, NeverWritesThroughALinkAndKeepsTheFilesMode) {
  const std::string dir = TempPath("links");
  mkdir(dir.c_str(), 0755);
  const std::string victim = dir + "/victim";
  {
    std::ofstream v(victim);
    v << "precious\n";
  }
  const std::string path = dir + "/pinshim.prom";
  ASSERT_EQ(symlink(victim.c_str(), path.c_str()), 0);
  TestBudget b;
  ASSERT_TRUE(b.Init(BudgetOptions()).ok());
  BudgetStatus st = b.WriteMetricsFile(path.c_str());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message).find("symbolic link"), std::string::npos) << st.message;
  EXPECT_EQ(ReadFile(victim), "precious\n");
  unlink(path.c_str());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_TRUE(b.WriteMetricsFile(path.c_str()).ok());
  struct stat st_after;
  ASSERT_EQ(stat(path.c_str(), &st_after), 0);
  EXPECT_EQ(st_after.st_mode & 0777, 0600u) << "not widened to 0644";
}

// Readers see the old file or the new one, never a mixture or a prefix.
TEST(MetricsTest, ReplacementIsAtomic) {
  const std::string dir = TempPath("atomic");
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/pinshim.prom";
  TestBudget b;
  BudgetOptions o;
  o.process_bytes = UINT64_MAX;
  ASSERT_TRUE(b.Init(o).ok());
  ASSERT_TRUE(b.WriteMetricsFile(path.c_str()).ok());
  const size_t lines = Parse(ReadFile(path)).values.size();
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!stop.load()) {
      Exposition e = Parse(ReadFile(path));
      if (!e.problems.empty() || e.values.size() != lines) torn.fetch_add(1);
      // The grants counter and the pinned bytes move together.
      const std::string me = "{" + OwnLabels();
      uint64_t grants = e.values[std::string("pinshim_grants_total") + me + "}"];
      uint64_t pinned =
          e.values["pinshim_pinned_bytes" + me + ",owner=\"program_alloc\",kind=\"pinned\"}"];
      if (pinned != grants * 4096) torn.fetch_add(1);
      reads.fetch_add(1);
    }
  });
  // Held open, the first file keeps its inode, which a rewrite in place
  // would keep too and a rename cannot.
  int first = open(path.c_str(), O_RDONLY);
  ASSERT_GE(first, 0);
  struct stat before;
  ASSERT_EQ(fstat(first, &before), 0);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(b.Charge(Owner::kProgramAlloc, 4096), Decision::kGranted);
    ASSERT_TRUE(b.WriteMetricsFile(path.c_str()).ok());
  }
  while (reads.load() < 50) std::this_thread::yield();
  stop.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  struct stat after;
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "replaced by rename, not rewritten in place";
  close(first);
  int entries = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) entries += e->d_name[0] != '.';
  closedir(d);
  EXPECT_EQ(entries, 1) << "no temporary file left behind";
}

}  // namespace
}  // namespace budget
}  // namespace pinshim
