// Runs the interception clients against the simulated driver, with and
// without libpinshim.so preloaded, and checks that (a) the program's output
// and exit status are identical, (b) the library's summary counts exactly the
// calls the program says it made.
//
// Arguments (from BUILD): LIBPINSHIM CLIENT LINKED_CLIENT FAKE_DRIVER_DIR
// PINSHIM EXAMPLE
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

std::string g_lib, g_client, g_linked_client, g_fake_dir, g_pinshim, g_example, g_vmm_program;

struct RunResult {
  int status = -1;
  std::string out;
  std::string err;
  std::vector<std::string> summaries;  // one per process that used CUDA
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string MakeTempDir() {
  char tmpl[] = "/tmp/pinshim-interception-XXXXXX";
  char* dir = mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  return dir ? dir : "/tmp";
}

// Runs `argv` with the simulated driver on the library path; preloads pinshim
// when `preload`, with a per-process summary in a fresh directory.
RunResult RunProgram(const std::vector<std::string>& argv, bool preload,
                     const std::vector<std::string>& extra_env = {}) {
  std::string dir = MakeTempDir();
  std::vector<std::string> env;
  std::string inherited_path;  // libraries pinshim itself needs may be there
  for (char** e = environ; *e; ++e) {
    std::string v = *e;
    if (v.rfind("LD_LIBRARY_PATH=", 0) == 0) inherited_path = v.substr(16);
    if (v.rfind("LD_PRELOAD=", 0) == 0 || v.rfind("PINSHIM_", 0) == 0 ||
        v.rfind("LD_LIBRARY_PATH=", 0) == 0)
      continue;
    env.push_back(v);
  }
  env.push_back("LD_LIBRARY_PATH=" + g_fake_dir +
                (inherited_path.empty() ? "" : ":" + inherited_path));
  // First, so that they win over the defaults below (the first of two
  // entries with one name is the one getenv finds).
  for (auto& e : extra_env) env.push_back(e);
  if (preload) {
    env.push_back("LD_PRELOAD=" + g_lib);
    env.push_back("PINSHIM_SUMMARY=" + dir + "/summary.%p");
    // Nothing outside the test's directory: not the machine's config file,
    // not its node ledger.
    env.push_back("PINSHIM_CONFIG=");
    env.push_back("PINSHIM_LEDGER_PATH=" + dir + "/node-ledger");
    // These tests check which path optimize mode takes; on the simulated
    // driver the self-check would weigh speeds that mean nothing. Its own
    // tests set PINSHIM_SELF_CHECK themselves.
    bool self_check_set = false;
    for (auto& e : extra_env) self_check_set |= e.rfind("PINSHIM_SELF_CHECK=", 0) == 0;
    if (!self_check_set) env.push_back("PINSHIM_SELF_CHECK=0");
  }
  std::vector<char*> envp, args;
  for (auto& e : env) envp.push_back(&e[0]);
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(&a[0]);
  args.push_back(nullptr);
  std::string out_path = dir + "/stdout", err_path = dir + "/stderr";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  RunResult r;
  if (posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data()) != 0) {
    ADD_FAILURE() << "cannot run " << argv[0];
    return r;
  }
  waitpid(pid, &r.status, 0);
  posix_spawn_file_actions_destroy(&fa);
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  if (DIR* dp = opendir(dir.c_str())) {
    while (dirent* de = readdir(dp)) {
      if (std::string(de->d_name).rfind("summary.", 0) == 0) {
        r.summaries.push_back(ReadFile(dir + "/" + de->d_name));
      }
    }
    closedir(dp);
  }
  return r;
}

// Sums "key=N" fields over lines starting with `prefix`, grouped by the value
// of `group_key` (e.g. dir or op).
std::map<std::string, long> Sum(const std::string& text, const std::string& prefix,
                                const std::string& group_key, const std::string& count_key) {
  std::map<std::string, long> sums;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream fields(line.substr(prefix.size()));
    std::string field, group;
    long count = 0;
    while (fields >> field) {
      auto eq = field.find('=');
      if (eq == std::string::npos) continue;
      if (field.substr(0, eq) == group_key) group = field.substr(eq + 1);
      if (field.substr(0, eq) == count_key) count = std::stol(field.substr(eq + 1));
    }
    sums[group] += count;
  }
  return sums;
}

// The program's own account, summed over every "expect:" line it printed.
std::map<std::string, long> Expected(const std::string& out) {
  std::map<std::string, long> e;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("expect: ", 0) != 0) continue;
    std::istringstream fields(line.substr(8));
    std::string field;
    while (fields >> field) {
      auto eq = field.find('=');
      e[field.substr(0, eq)] += std::stol(field.substr(eq + 1));
    }
  }
  return e;
}

void CheckCounts(const RunResult& r) {
  std::string all;
  for (auto& s : r.summaries) all += s;
  auto expect = Expected(r.out);
  ASSERT_FALSE(expect.empty()) << r.out;
  auto dirs = Sum(all, "pinshim: copy ", "dir", "calls");
  auto ops = Sum(all, "pinshim: pin ", "op", "calls");
  EXPECT_EQ(dirs["H2D"], expect["h2d"]) << all;
  EXPECT_EQ(dirs["D2H"], expect["d2h"]) << all;
  EXPECT_EQ(dirs["H2H"], expect["h2h"]) << all;
  EXPECT_EQ(dirs["D2D"], expect["d2d"]) << all;
  EXPECT_EQ(ops["alloc"], expect["pin_allocs"]) << all;
  EXPECT_EQ(ops["free"], expect["pin_frees"]) << all;
  EXPECT_EQ(ops["register"], expect["registers"]) << all;
  EXPECT_EQ(ops["unregister"], expect["unregisters"]) << all;
}

void CheckTransparentAndCounted(const std::vector<std::string>& argv) {
  RunResult without = RunProgram(argv, false);
  RunResult with = RunProgram(argv, true);
  ASSERT_TRUE(WIFEXITED(without.status)) << without.err;
  EXPECT_EQ(without.status, with.status) << with.err;
  EXPECT_EQ(without.out, with.out);
  EXPECT_EQ(without.err, with.err);
  CheckCounts(with);
}

TEST(InterceptionTest, RuntimeStyleLookupsAreCountedOnce) {
  CheckTransparentAndCounted({g_client, "basic"});
}

TEST(InterceptionTest, PerThreadDefaultStreamVariants) {
  RunResult with = RunProgram({g_client, "basic_ptds"}, true);
  CheckCounts(with);
  ASSERT_EQ(with.summaries.size(), 1u);
  EXPECT_NE(with.summaries[0].find("api=cuMemcpyHtoD_v2_ptds "), std::string::npos)
      << with.summaries[0];
  EXPECT_NE(with.summaries[0].find("api=cuMemcpyHtoDAsync_v2_ptsz "), std::string::npos);
  EXPECT_NE(with.summaries[0].find("api=cuMemcpyBatchAsync_v2_ptsz "), std::string::npos);
  EXPECT_NE(with.summaries[0].find("api=cuMemcpyDtoD_v2_ptds "), std::string::npos);
}

TEST(InterceptionTest, MemoryKindsAndFlagsAreClassified) {
  RunResult with = RunProgram({g_client, "basic"}, true);
  ASSERT_EQ(with.summaries.size(), 1u);
  const std::string& s = with.summaries[0];
  EXPECT_NE(s.find("api=cuMemcpyHtoD_v2 dir=H2D src=pageable dst=device flags=0x0 calls=3 "
                   "bytes=3145728 failed=0"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("api=cuMemcpyHtoDAsync_v2 dir=H2D src=pinned dst=device flags=0x4 calls=1"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("api=cuMemcpyHtoD_v2 dir=H2D src=registered dst=device flags=0x1 calls=1"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("api=cuMemcpy dir=H2H src=pinned dst=pageable"), std::string::npos) << s;
  EXPECT_NE(s.find("api=cuMemcpy dir=D2D src=device dst=device"), std::string::npos) << s;
  EXPECT_NE(s.find("api=cuMemcpyDtoD_v2 dir=D2D src=device dst=device flags=0x0 calls=1 "
                   "bytes=1048576"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("api=cuMemcpy2D_v2 dir=H2D src=pageable dst=device flags=0x0 calls=1 "
                   "bytes=256000"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("api=cuMemcpy3D_v2 dir=D2H src=device dst=pageable flags=0x0 calls=1 "
                   "bytes=128000"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("api=cuMemcpyBatchAsync_v2 dir=H2D src=pinned dst=device flags=0x0 calls=1 "
                   "bytes=2097152"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("pinshim: pin api=cuMemHostAlloc op=alloc flags=0x4 calls=1 bytes=1048576"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("pinshim: pin api=cuMemAllocHost_v2 op=alloc flags=0x0 calls=1 bytes=2097152"),
            std::string::npos)
      << s;
}

TEST(InterceptionTest, InvalidCallsKeepTheirErrorCodes) {
  CheckTransparentAndCounted({g_client, "invalid"});
  RunResult with = RunProgram({g_client, "invalid"}, true);
  ASSERT_EQ(with.summaries.size(), 1u);
  EXPECT_NE(with.summaries[0].find("failed=1"), std::string::npos) << with.summaries[0];
}

TEST(InterceptionTest, SixteenThreadsCopyingAndAllocating) {
  CheckTransparentAndCounted({g_client, "threads"});
}

// Context teardown outside optimize mode: forwarded, counted as nothing.
TEST(InterceptionTest, ContextTeardownPassesThrough) {
  CheckTransparentAndCounted({g_client, "ctx_teardown"});
}

TEST(InterceptionTest, DriverLoadedAfterStart) {
  CheckTransparentAndCounted({g_client, "late_dlopen"});
}

TEST(InterceptionTest, ForkChildrenWithAndWithoutCuda) {
  RunResult without = RunProgram({g_client, "fork"}, false);
  RunResult with = RunProgram({g_client, "fork"}, true);
  EXPECT_EQ(without.status, with.status);
  EXPECT_EQ(without.out, with.out);
  // The CUDA child and the parent each wrote their own summary; the child
  // that never touched CUDA wrote none.
  EXPECT_EQ(with.summaries.size(), 2u);
  CheckCounts(with);
}

TEST(InterceptionTest, ExitWithCopiesInFlight) {
  CheckTransparentAndCounted({g_client, "exit_inflight"});
}

TEST(InterceptionTest, DeepBindLoadIsNoted) {
  RunResult with = RunProgram({g_client, "deepbind"}, true);
  EXPECT_EQ(with.status, 0);
  CheckCounts(with);
  ASSERT_EQ(with.summaries.size(), 1u);
  EXPECT_NE(with.summaries[0].find("rtld_deepbind_loads=1"), std::string::npos)
      << with.summaries[0];
}

// Enforce mode, end to end: each policy as the program sees it.
TEST(EnforceTest, DenyReturnsTheDriversOutOfMemoryError) {
  std::string ledger = MakeTempDir();
  RunResult r = RunProgram({g_client, "budget"}, true,
                           {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=2M", "PINSHIM_POLICY=deny"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("alloc 1M: 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alloc 4M: 2\n"), std::string::npos) << r.out;  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_NE(r.out.find("register 4M: 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alloc 2M after free: 0\n"), std::string::npos) << r.out;
  CheckCounts(r);
}

TEST(EnforceTest, FallbackServesPageableMemoryThatBehaves) {
  RunResult r =
      RunProgram({g_client, "budget"}, true,
                 {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=2M", "PINSHIM_POLICY=fallback"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("alloc 4M: 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4M round trip intact: 1\n"), std::string::npos) << r.out;
  // Calls that need real pinning get the driver's answer for unpinned memory.
  EXPECT_NE(r.out.find("4M getflags: 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4M devptr: 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("free 4M: 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("register 4M: 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unregister 4M: 0\n"), std::string::npos) << r.out;
  CheckCounts(r);
  ASSERT_EQ(r.summaries.size(), 1u);
  // The copies from fallback memory ran from pageable memory.
  EXPECT_NE(r.summaries[0].find("api=cuMemcpyHtoD_v2 dir=H2D src=pageable dst=device flags=0x1"),
            std::string::npos)
      << r.summaries[0];
}

// The node ledger is the test's own (PINSHIM_LEDGER_PATH), never the
// machine's /dev/shm/pinshim-ledger-<uid>.
TEST(EnforceTest, MetricsFileAndNodeLedger) {
  std::string dir = MakeTempDir();
  std::string metrics = dir + "/pinshim.prom";
  std::string ledger = dir + "/ledger";
  RunResult r = RunProgram({g_client, "budget"}, true,
                           {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=2M", "PINSHIM_NODE_BUDGET=64M",
                            "PINSHIM_METRICS_FILE=" + metrics, "PINSHIM_LEDGER_PATH=" + ledger});
  ASSERT_EQ(r.status, 0) << r.err;
  // The refusals are said when they happen: one line for the first, and at
  // most one a second after it.
  ASSERT_FALSE(r.err.empty());
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.rfind("pinshim: enforce: denied pinning 4.0 MiB, over the process budget of "
                         "2.0 MiB",
                         0),
              0u)
        << r.err;
  }
  std::string text = ReadFile(metrics);
  EXPECT_NE(text.find("# TYPE pinshim_"), std::string::npos) << text;
  EXPECT_NE(text.find("pinshim_node_budget_bytes 67108864"), std::string::npos) << text;
  // Two denials (the 4M allocation and the 4M registration) are counted.
  EXPECT_NE(text.find("pinshim_denials_total{"), std::string::npos) << text;
  EXPECT_EQ(access(ledger.c_str(), F_OK), 0) << "the ledger is the test's own";
}

// A metrics file that cannot be written is said once, and the program runs
// on as before.
TEST(EnforceTest, UnwritableMetricsFileWarnsOnce) {
  RunResult r = RunProgram({g_client, "budget"}, true,
                           {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=2M",
                            "PINSHIM_METRICS_FILE=/nonexistent-pinshim-dir/x.prom"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string warning = "cannot write metrics file /nonexistent-pinshim-dir/x.prom";
  const size_t first = r.err.find(warning);
  EXPECT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(warning, first + 1), std::string::npos) << "said once: " << r.err;
}

// Without %p, every process appends its own record to the one summary file.
TEST(SummaryTest, OneFileKeepsEveryProcessRecord) {
  std::string dir = MakeTempDir();
  const std::string summary = dir + "/all.txt";
  for (int i = 0; i < 2; ++i) {
    RunResult r = RunProgram({g_client, "budget"}, true, {"PINSHIM_SUMMARY=" + summary});
    ASSERT_EQ(r.status, 0) << r.err;
  }
  const std::string text = ReadFile(summary);
  size_t records = 0;
  for (size_t at = text.find("pinshim: summary pid="); at != std::string::npos;
       at = text.find("pinshim: summary pid=", at + 1)) {
    ++records;
  }
  EXPECT_EQ(records, 2u) << text;
}

TEST(EnforceTest, WithinBudgetNothingChanges) {
  RunResult without = RunProgram({g_client, "budget"}, false);
  RunResult with =
      RunProgram({g_client, "budget"}, true, {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=64M"});
  EXPECT_EQ(without.status, with.status);
  EXPECT_EQ(without.out, with.out);
}

TEST(EnforceTest, BadBudgetFallsBackToObserveWithOneLine) {
  RunResult without = RunProgram({g_client, "budget"}, false);
  RunResult with =
      RunProgram({g_client, "budget"}, true, {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=12Q"});
  EXPECT_EQ(without.out, with.out);  // observe mode: nothing enforced
  EXPECT_EQ(std::count(with.err.begin(), with.err.end(), '\n'), 1) << with.err;
  EXPECT_NE(with.err.find("PINSHIM_BUDGET=\"12Q\""), std::string::npos) << with.err;
  EXPECT_NE(with.err.find("observe mode only"), std::string::npos) << with.err;
}

// The trace path end to end: a program under the library with a trace
// directory, then `pinshim report --format json` on it.
std::string ReportJson(const std::vector<std::string>& program, const std::string& trace_dir) {
  RunResult r = RunProgram(program, true, {"PINSHIM_TRACE_DIR=" + trace_dir});
  EXPECT_EQ(r.status, 0) << r.err;
  RunResult report = RunProgram({g_pinshim, "report", "--format", "json", trace_dir}, false);
  EXPECT_EQ(report.status, 0) << report.err;
  return report.out;
}

// The finding of `rule` in the JSON report names `file`:`line` as its site.
bool HasFinding(const std::string& pretty, const std::string& rule, const std::string& file,
                int line) {
  std::string json;  // without layout whitespace (paths here have no blanks)
  for (char c : pretty) {
    if (c != ' ' && c != '\n') json += c;
  }
  size_t at = 0;
  const std::string key = "\"rule\":\"" + rule + "\"";
  while ((at = json.find(key, at)) != std::string::npos) {
    size_t site = json.find("\"site\"", at);
    size_t next = json.find("\"rule\":", at + key.size());
    if (site != std::string::npos && (next == std::string::npos || site < next)) {
      std::string window = json.substr(site, 400);
      if (window.find(file) != std::string::npos &&
          window.find("\"line\":" + std::to_string(line)) != std::string::npos) {
        return true;
      }
    }
    at += key.size();
  }
  return false;
}

TEST(TraceTest, ExampleFindingsNameTheProgramsLines) {
  std::string dir = MakeTempDir();
  std::string json = ReportJson({g_example, "8"}, dir);
  // Nothing the library does for itself is lost from, or added to, the trace.
  RunResult text = RunProgram({g_pinshim, "report", dir}, false);
  EXPECT_EQ(text.out.find("dropped"), std::string::npos) << text.out;
  EXPECT_TRUE(HasFinding(json, "async-pageable", "tests/programs/copy_loop_example.cc", 72))
      << json;
  EXPECT_TRUE(HasFinding(json, "pinned-churn", "tests/programs/copy_loop_example.cc", 74)) << json;
}

// The line of client.cc that holds `marker` (the source travels with the test).
int LineOf(const std::string& marker) {
  std::ifstream f("tests/interception/client.cc");
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find(marker) != std::string::npos) return n;
  }
  ADD_FAILURE() << "no line with " << marker << " in tests/interception/client.cc";
  return -1;
}

TEST(TraceTest, WriteCombinedReadThroughMemcpyIsFound) {
  std::string json = ReportJson({g_client, "wc_read"}, MakeTempDir());
  EXPECT_TRUE(HasFinding(json, "wc-read", "tests/interception/client.cc",
                         LineOf("the misuse: a CPU read of WC memory")))
      << json;
}

TEST(TraceTest, CleanProgramHasNoFindings) {
  std::string json = ReportJson({g_client, "clean"}, MakeTempDir());
  EXPECT_EQ(json.find("\"rule\""), std::string::npos) << json;
}

// Optimize mode: the program's output, exit status and call counts are those
// of the run without pinshim, whatever pinshim pinned or pooled.
void CheckOptimizeTransparent(const std::vector<std::string>& argv) {
  RunResult without = RunProgram(argv, false);
  RunResult with = RunProgram(argv, true, {"PINSHIM_MODE=optimize"});
  ASSERT_TRUE(WIFEXITED(without.status)) << without.err;
  EXPECT_EQ(without.status, with.status) << with.err;
  EXPECT_EQ(without.out, with.out);
  EXPECT_EQ(without.err, with.err);
  CheckCounts(with);
}

// A field of a summary's "pinshim: optimize" line; -1 when absent.
long long OptimizeField(const std::string& summary, const char* name) {
  const size_t at = summary.find("pinshim: optimize ");
  if (at == std::string::npos) return -1;
  const size_t p = summary.find(std::string(" ") + name + "=", at);
  return p == std::string::npos ? -1 : std::stoll(summary.substr(p + strlen(name) + 2));
}

// The self-check (shim/optimize/path_judge.h) on a driver made slow on
// purpose for one path: with page-locked copies slow, staging (whose DMAs
// run from its pinned rings) loses to the driver's pageable path and is
// stopped after a few copies, the summary and its self-check lines saying
// so; with pageable copies slow instead, staging wins and takes nearly
// every copy. Results as without the library either way.
TEST(OptimizeTest, SelfCheckStopsAPathTheDriverBeats) {
  // The slow paths are the simulated driver's knobs; a real driver has its
  // own speeds, which bench/gpu/matrix.sh measures the self-check against.
  if (access((g_fake_dir + "/libcuda.so.1").c_str(), F_OK) != 0) {
    printf("NOT RUN self_check_slow_path: needs the simulated driver's FAKECUDA_*_NS_PER_MIB\n");
    GTEST_SKIP() << "needs the simulated driver (FAKECUDA_*_NS_PER_MIB)";
  }
  const RunResult base = RunProgram({g_client, "fresh"}, false);
  ASSERT_EQ(base.status, 0) << base.err;
  const std::vector<std::string> optimize = {"PINSHIM_MODE=optimize", "PINSHIM_SELF_CHECK=1",
                                             "PINSHIM_PIN_IN_PLACE=0", "PINSHIM_STAGE_WORKERS=1"};
  std::vector<std::string> slow_locked = optimize;
  slow_locked.push_back("FAKECUDA_PAGELOCKED_NS_PER_MIB=30000000");
  const RunResult lose = RunProgram({g_client, "fresh"}, true, slow_locked);
  EXPECT_EQ(lose.out, base.out);
  ASSERT_EQ(lose.summaries.size(), 1u) << lose.err;
  const std::string& l = lose.summaries[0];
  EXPECT_GE(OptimizeField(l, "judge_losing_cells"), 1) << l;
  // 400 copies of 4 MiB: the first to the driver, a few tried staged, then
  // retries after 32, 64, 128 and 256 more.
  EXPECT_LE(OptimizeField(l, "staged_copies"), 24) << l;
  EXPECT_NE(l.find("pinshim: self-check path=staged dir=H2D size=4M+ call=sync verdict=slower"),
            std::string::npos)
      << l;
  std::vector<std::string> slow_pageable = optimize;
  slow_pageable.push_back("FAKECUDA_PAGEABLE_NS_PER_MIB=30000000");
  const RunResult win = RunProgram({g_client, "fresh"}, true, slow_pageable);
  EXPECT_EQ(win.out, base.out);
  ASSERT_EQ(win.summaries.size(), 1u) << win.err;
  const std::string& w = win.summaries[0];
  // The uploads are judged here: staged downloads copy out of the ring on
  // the worker threads, which a sanitizer's build or a loaded machine can
  // slow to the driver's pace, and then they are rightly stopped.
  EXPECT_GE(OptimizeField(w, "staged_copies"), 180) << w;
  EXPECT_GE(OptimizeField(w, "judge_driver_probes"), 2) << w;
  EXPECT_NE(w.find("pinshim: self-check path=staged dir=H2D size=4M+ call=sync verdict=faster"),
            std::string::npos)
      << w;
}

// Optimize mode in a child that uses CUDA (forked before the parent did):
// the child stages copies with workers and a ring of its own, and so does
// the parent afterwards; results as without the library.
TEST(OptimizeTest, AForkedChildStagesItsOwnCopies) {
  CheckOptimizeTransparent({g_client, "fork_stage"});
  // Nothing pinned in place: the registration cache would take the buffer
  // over after its first copy. Workers set by hand: staging takes every
  // copy, however busy the test machine's cores are.
  RunResult with =
      RunProgram({g_client, "fork_stage"}, true,
                 {"PINSHIM_MODE=optimize", "PINSHIM_PIN_IN_PLACE=0", "PINSHIM_STAGE_WORKERS=1"});
  ASSERT_EQ(with.summaries.size(), 2u) << with.err;
  for (const std::string& s : with.summaries) {
    EXPECT_EQ(OptimizeField(s, "staged_copies"), 2) << s;
    EXPECT_EQ(OptimizeField(s, "staged_bytes"), 2 * (128 << 20)) << s;
    EXPECT_EQ(OptimizeField(s, "pinned_peak"), 16 << 20) << s;  // one ring: 4 x 4 MiB
  }
  // The ring's settings reach the stager: 3 slots of 1 MiB.
  RunResult small =
      RunProgram({g_client, "fork_stage"}, true,
                 {"PINSHIM_MODE=optimize", "PINSHIM_PIN_IN_PLACE=0", "PINSHIM_STAGE_WORKERS=1",
                  "PINSHIM_STAGE_CHUNK=1M", "PINSHIM_STAGE_SLOTS=3"});
  EXPECT_EQ(small.out, with.out);
  ASSERT_EQ(small.summaries.size(), 2u) << small.err;
  for (const std::string& s : small.summaries) {
    EXPECT_EQ(OptimizeField(s, "staged_copies"), 2) << s;
    EXPECT_EQ(OptimizeField(s, "pinned_peak"), 3 << 20) << s;
  }
}

// A copy on a stream that captures gets the driver's own answer in
// optimize mode, whatever pinshim would otherwise do with its host side: a
// fresh buffer is not staged (the graph would copy the ring at every
// launch), a hot one the registration cache pinned and one the arena serves
// are unpinned for the call (the driver then sees the pageable memory the
// program made); a graph that comes out copies what the buffer holds at
// launch, as without the library. Workers set by hand, so staging would
// take the copy on any machine.
TEST(OptimizeTest, CopiesIntoAStreamCaptureAreTheDrivers) {
  for (const char* dir : {"h2d", "d2h"}) {
    for (const char* kind : {"plain", "hot", "site"}) {
      SCOPED_TRACE(std::string(dir) + " " + kind);
      RunResult without = RunProgram({g_client, "capture", dir, kind}, false);
      RunResult with = RunProgram({g_client, "capture", dir, kind}, true,
                                  {"PINSHIM_MODE=optimize", "PINSHIM_STAGE_WORKERS=1"});
      ASSERT_TRUE(WIFEXITED(without.status)) << without.err;
      EXPECT_EQ(without.status, with.status) << with.err;
      EXPECT_EQ(without.out, with.out);
      EXPECT_NE(with.out.find("capture "), std::string::npos) << with.out;
      CheckCounts(with);
      ASSERT_EQ(with.summaries.size(), 1u) << with.err;
      const std::string& sum = with.summaries[0];
      // The captured copy is recorded as what the driver saw: pageable memory.
      EXPECT_NE(sum.find(strcmp(dir, "h2d") == 0
                             ? "api=cuMemcpyHtoDAsync_v2 dir=H2D src=pageable dst=device"
                             : "api=cuMemcpyDtoHAsync_v2 dir=D2H src=device dst=pageable"),
                std::string::npos)
          << sum;
      if (strcmp(kind, "hot") == 0) {
        EXPECT_GE(OptimizeField(sum, "cache_registrations"), 1) << sum;
        EXPECT_GE(OptimizeField(sum, "page_change_drops"), 1) << sum;
      } else if (strcmp(kind, "site") == 0) {
        EXPECT_GE(OptimizeField(sum, "arena_allocs"), 1) << sum;
        EXPECT_GE(OptimizeField(sum, "page_change_drops"), 1) << sum;
      }
    }
  }
}

// What optimize mode does on a program thread during another thread's
// global-mode capture (arena, cache release, page changes) must not
// invalidate that capture: the simulated driver refuses pinning calls there
// as the H200 does, and pinshim makes them in relaxed mode.
TEST(OptimizeTest, PinningBesideAGlobalCaptureLeavesItIntact) {
  RunResult without = RunProgram({g_client, "capture_neighbour"}, false);
  RunResult with = RunProgram({g_client, "capture_neighbour"}, true,
                              {"PINSHIM_MODE=optimize", "PINSHIM_STAGE_WORKERS=1"});
  ASSERT_TRUE(WIFEXITED(without.status)) << without.err;
  EXPECT_NE(without.out.find("capture neighbour: end=0 graph=1"), std::string::npos) << without.out;
  EXPECT_EQ(without.status, with.status) << with.err;
  EXPECT_EQ(without.out, with.out);
  CheckCounts(with);
  ASSERT_EQ(with.summaries.size(), 1u) << with.err;
  const std::string& sum = with.summaries[0];
  // Optimize mode did call the driver for those buffers.
  EXPECT_GE(OptimizeField(sum, "cache_registrations"), 3) << sum;
  EXPECT_GE(OptimizeField(sum, "arena_allocs"), 1) << sum;
  EXPECT_GE(OptimizeField(sum, "page_change_drops"), 1) << sum;
}

TEST(OptimizeTest, HotBuffersAndPoolKeepResults) {
  CheckOptimizeTransparent({g_client, "hot"});
  RunResult with = RunProgram({g_client, "hot"}, true, {"PINSHIM_MODE=optimize"});
  ASSERT_EQ(with.summaries.size(), 1u);
  // The reused pageable buffer was pinned in place: later copies ran from it.
  EXPECT_NE(with.summaries[0].find("dir=H2D src=pinshim"), std::string::npos) << with.summaries[0];
}

// Hot allocation sites are redirected into the arena with malloc's
// semantics; the program's output is unchanged.
TEST(OptimizeTest, HotSitesComeFromTheArena) {
  CheckOptimizeTransparent({g_client, "sites"});
  RunResult with = RunProgram({g_client, "sites"}, true, {"PINSHIM_MODE=optimize"});
  ASSERT_EQ(with.summaries.size(), 1u);
  const std::string& s = with.summaries[0];
  ASSERT_NE(s.find("pinshim: optimize "), std::string::npos) << s;
  auto field = [&](const char* name) { return OptimizeField(s, name); };
  // Two sites copied hot (the malloc'd buffer, the aligned one; the calloc'd
  // one is a copy destination and hot too): the rounds after the first get
  // arena memory.
  EXPECT_GE(field("hot_sites"), 2) << s;
  EXPECT_GE(field("arena_allocs"), 8) << s;
  EXPECT_EQ(field("profile_sites"), 0) << s;
}

// Only private anonymous memory is pinned in place: shared mappings
// (MAP_SHARED_VALIDATE's type included) and file mappings are copied as
// they are. The protection counted is the one at mmap: a mapping made
// read-only is never pinned, even once the program makes it writable.
TEST(OptimizeTest, OnlyPrivateAnonymousMappingsArePinnedInPlace) {
  const struct {
    const char* kind;
    long long registrations;
  } kinds[] = {{"private", 1},        {"shared", 0},       {"memfd", 0},
               {"memfd_validate", 0}, {"file_private", 0}, {"readonly", 0}};
  for (const auto& k : kinds) {
    SCOPED_TRACE(k.kind);
    CheckOptimizeTransparent({g_client, "mapping", k.kind});
    RunResult with = RunProgram({g_client, "mapping", k.kind}, true,
                                {"PINSHIM_MODE=optimize", "PINSHIM_STAGE=0"});
    ASSERT_EQ(with.summaries.size(), 1u) << with.err;
    EXPECT_EQ(OptimizeField(with.summaries[0], "cache_registrations"), k.registrations)
        << with.summaries[0];
  }
}

// The differential run: a random sequence of allocations (VMM host and
// host-pool memory among them), copies, reallocs and frees leaves the same
// host and device contents in every mode, and optimize mode did act on it
// (pool, cache and arena all used) but left the driver's pinned kinds alone.
TEST(OptimizeTest, RandomSequenceLeavesIdenticalContents) {
  CheckOptimizeTransparent({g_client, "random"});
  RunResult without = RunProgram({g_client, "random"}, false);
  ASSERT_EQ(without.status, 0) << without.err;
  for (const char* mode : {"observe", "enforce"}) {
    SCOPED_TRACE(mode);
    RunResult r = RunProgram({g_client, "random"}, true,
                             {std::string("PINSHIM_MODE=") + mode, "PINSHIM_BUDGET=8G"});
    EXPECT_EQ(r.status, without.status) << r.err;
    EXPECT_EQ(r.out, without.out);
    CheckCounts(r);
    ASSERT_EQ(r.summaries.size(), 1u);
    // Both kinds were exercised, counted as what they are.
    EXPECT_NE(r.summaries[0].find("src=vmm-host"), std::string::npos) << r.summaries[0];
    EXPECT_NE(r.summaries[0].find("src=host-pool"), std::string::npos) << r.summaries[0];
  }
  RunResult with = RunProgram({g_client, "random"}, true, {"PINSHIM_MODE=optimize"});
  ASSERT_EQ(with.summaries.size(), 1u);
  const std::string& s = with.summaries[0];
  ASSERT_NE(s.find("pinshim: optimize "), std::string::npos) << s;
  auto field = [&](const char* name) { return OptimizeField(s, name); };
  EXPECT_GT(field("pool_hits"), 0) << s;
  EXPECT_GT(field("cache_registrations"), 0) << s;
  EXPECT_GT(field("arena_allocs"), 0) << s;
}

// Contexts destroyed (a primary context reset, its last release, created
// contexts destroyed) while the pool holds slabs pinned in them: the driver
// freed those slabs, so pinned allocations in the contexts that follow (the
// simulated driver gives them the old handles) get new slabs. Served from a
// freed slab, the program would fault at its first write.
TEST(OptimizeTest, DestroyedContextsTakeTheirPoolSlabsAlong) {
  CheckOptimizeTransparent({g_client, "ctx_teardown"});
  RunResult with = RunProgram({g_client, "ctx_teardown"}, true, {"PINSHIM_MODE=optimize"});
  ASSERT_TRUE(WIFEXITED(with.status) && WEXITSTATUS(with.status) == 0) << with.err;
  ASSERT_EQ(with.summaries.size(), 1u);
  const std::string& s = with.summaries[0];
  ASSERT_NE(s.find("pinshim: optimize "), std::string::npos) << s;
  auto field = [&](const char* name) { return OptimizeField(s, name); };
  // Five contexts (the primary one, after the reset, after the last release,
  // two created): the first allocation in each is a miss, the second a hit
  // on its slab, and the primary context's last two rounds are hits.
  EXPECT_EQ(field("pool_misses"), 5) << s;
  EXPECT_EQ(field("pool_hits"), 7) << s;
}

// A pin cap too small for any of pinshim's pinning: nothing is pinned, the
// hot sites' requests fall back to malloc, and the program sees no change.
TEST(OptimizeTest, FullCapFallsBackToTheProgramsOwnBehaviour) {
  for (const char* scenario : {"sites", "random"}) {
    SCOPED_TRACE(scenario);
    RunResult without = RunProgram({g_client, scenario}, false);
    RunResult capped =
        RunProgram({g_client, scenario}, true, {"PINSHIM_MODE=optimize", "PINSHIM_PIN_CAP=64K"});
    ASSERT_EQ(capped.status, without.status) << capped.err;
    EXPECT_EQ(capped.out, without.out);
    EXPECT_EQ(capped.err, without.err);
    ASSERT_EQ(capped.summaries.size(), 1u);
    const std::string& s = capped.summaries[0];
    EXPECT_EQ(OptimizeField(s, "arena_allocs"), 0) << s;
    EXPECT_EQ(OptimizeField(s, "cache_registrations"), 0) << s;
    // (The program's own cudaHostAlloc calls are still served, by exact-size
    // allocations outside the cap, as the driver would have.)
  }
}

// Idle pinned memory goes back to the driver after PINSHIM_IDLE_TRIM_S
// without any further call from the program; 0 keeps it.
TEST(OptimizeTest, IdlePinnedMemoryIsGivenBack) {
  RunResult trimmed =
      RunProgram({g_client, "idle"}, true, {"PINSHIM_MODE=optimize", "PINSHIM_IDLE_TRIM_S=1"});
  ASSERT_EQ(trimmed.status, 0) << trimmed.err;
  ASSERT_EQ(trimmed.summaries.size(), 1u);
  EXPECT_EQ(OptimizeField(trimmed.summaries[0], "pinned_now"), 0) << trimmed.summaries[0];
  RunResult kept =
      RunProgram({g_client, "idle"}, true, {"PINSHIM_MODE=optimize", "PINSHIM_IDLE_TRIM_S=0"});
  ASSERT_EQ(kept.summaries.size(), 1u);
  EXPECT_GT(OptimizeField(kept.summaries[0], "pinned_now"), 0) << kept.summaries[0];
  EXPECT_EQ(kept.out, trimmed.out);
}

TEST(OptimizeTest, EveryScenarioKeepsResults) {
  for (const char* scenario : {"basic", "basic_ptds", "invalid", "threads", "late_dlopen", "fork",
                               "exit_inflight", "budget", "clean", "wc_read"}) {
    SCOPED_TRACE(scenario);
    CheckOptimizeTransparent({g_client, scenario});
  }
  CheckOptimizeTransparent({g_linked_client});
}

// Pointer attribute queries (cudaPointerGetAttributes, PyTorch's
// is_pinned()) see neither what optimize mode pinned behind the program's
// back nor the pool's slabs: every answer is the one the run without pinshim
// gets, through cuGetProcAddress, dlsym and the exported symbols alike.
TEST(OptimizeTest, PointerAttributesDoNotSeePinshimsPinning) {
  const std::string dir = MakeTempDir();
  const std::string probe_without = dir + "/probe.without", probe_with = dir + "/probe.with";
  RunResult without = RunProgram({g_client, "ptrattr", probe_without}, false);
  // Staging off: its rings are page-locked allocations of pinshim's own,
  // which the driver's counts below would include while the program asks.
  RunResult with = RunProgram({g_client, "ptrattr", probe_with}, true,
                              {"PINSHIM_MODE=optimize", "PINSHIM_STAGE=0"});
  ASSERT_EQ(without.status, 0) << without.err;
  EXPECT_EQ(with.status, 0) << with.err;
  EXPECT_EQ(without.out, with.out);
  EXPECT_EQ(without.err, with.err);
  CheckCounts(with);
  // While the program asked, pinshim had registered the hot buffer and
  // served both pinned allocations from one slab (the simulated driver's
  // own counts; the real driver has no such probe and reports zeros).
  if (ReadFile(probe_without) !=
      "hot: host_allocations=0 registrations=0\n"
      "pinned: host_allocations=0 registrations=0\n") {
    EXPECT_EQ(ReadFile(probe_without),
              "hot: host_allocations=0 registrations=0\n"
              "pinned: host_allocations=2 registrations=0\n");
    EXPECT_EQ(ReadFile(probe_with),
              "hot: host_allocations=0 registrations=1\n"
              "pinned: host_allocations=1 registrations=1\n");
  }

  // The answers (those of the run without pinshim), attribute by number:
  // 1 context, 2 memory type, 3 device pointer, 4 host pointer, 7 buffer id,
  // 8 is managed, 9 device ordinal, 11 range start, 12 range size, 13 mapped.
  // Pageable memory: each single query fails with CUDA_ERROR_INVALID_VALUE;
  // the multi-attribute query succeeds with the defaults, the host pointer
  // being the pointer itself, and leaves the range's start and size
  // unwritten (as the H200's driver 580 answers).
  const std::string pageable_one =
      " one: 1:rc1 2:rc1 3:rc1 4:rc1 7:rc1 8:rc1 9:rc1 11:rc1 12:rc1 13:rc1\n";
  const std::string pageable_all =
      " all: rc0 1=null 2=0 3=null 4=ptr 7=0 8=0 9=-2 11=other 12=17216961135462248174 13=0 "
      "widths=8,4,8,8,8,4,4,0,0,4\n";
  for (const char* label : {"hot", "hot+1M", "pinned-a-past-end"}) {
    for (const char* source : {"getproc", "getproc_pt", "dlsym"}) {
      const std::string prefix = std::string(label) + " " + source;
      EXPECT_NE(without.out.find(prefix + pageable_one), std::string::npos) << prefix;
      EXPECT_NE(without.out.find(prefix + pageable_all), std::string::npos) << prefix;
    }
  }
  // A pinned allocation: its own start, requested size and buffer id.
  EXPECT_NE(without.out.find("pinned-a getproc one: 1=ctx 2=1 3=ptr 4=ptr 7=id 8=0 9=0 11=base "
                             "12=100000 13=1\n"),
            std::string::npos)
      << without.out;
  EXPECT_NE(without.out.find("pinned-b dlsym all: rc0 1=ctx 2=1 3=ptr 4=ptr 7=id 8=0 9=0 "
                             "11=base 12=100000 13=1 "),
            std::string::npos)
      << without.out;
  EXPECT_NE(without.out.find("pinned ids differ=1\n"), std::string::npos) << without.out;

  // The same program through the exported symbols (linked against libcuda).
  RunResult linked_without = RunProgram({g_linked_client}, false);
  RunResult linked_with = RunProgram({g_linked_client}, true, {"PINSHIM_MODE=optimize"});
  EXPECT_EQ(linked_without.out, linked_with.out);
  EXPECT_NE(linked_without.out.find("linked pinned: start-is-base=1 size=1048576\n"),
            std::string::npos)
      << linked_without.out;
  EXPECT_NE(linked_without.out.find("linked pageable type: rc 1\n"), std::string::npos)
      << linked_without.out;
}

// Outside optimize mode the queries pass through untouched.
TEST(InterceptionTest, PointerAttributeQueriesPassThrough) {
  CheckTransparentAndCounted({g_client, "ptrattr"});
}

TEST(OptimizeTest, WithEnforceTheBudgetStillHolds) {
  RunResult r = RunProgram({g_client, "budget"}, true,
                           {"PINSHIM_MODE=optimize,enforce", "PINSHIM_BUDGET=2M"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("alloc 4M: 2\n"), std::string::npos) << r.out;
}

// Pinshim's own idle pinning (here: the pool's freed blocks) never makes the
// program's request fail: with the evict policy it is given back first.
TEST(EnforceTest, EvictGivesBackPinshimsPinningFirst) {
  RunResult evict =
      RunProgram({g_client, "evict"}, true,
                 {"PINSHIM_MODE=optimize,enforce", "PINSHIM_BUDGET=40M", "PINSHIM_POLICY=evict"});
  ASSERT_EQ(evict.status, 0) << evict.err;
  EXPECT_NE(evict.out.find("alloc 16M after freeing 32M: 0\n"), std::string::npos) << evict.out;
  CheckCounts(evict);
  // The same request without optimize mode (nothing held after the frees).
  RunResult plain =
      RunProgram({g_client, "evict"}, true,
                 {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=40M", "PINSHIM_POLICY=deny"});
  EXPECT_NE(plain.out.find("alloc 16M after freeing 32M: 0\n"), std::string::npos) << plain.out;
}

TEST(InterceptionTest, ProgramLinkedAgainstLibcuda) {
  CheckTransparentAndCounted({g_linked_client});
}

// Processes that never touch CUDA behave byte for byte as without pinshim
// and print nothing, even with a summary requested.
// --- pinned host memory of the VMM API and of host memory pools ------------

// Every copy of the program's memory kind, counted with its direction, and
// never a pageable one (the driver's own mappings are not the program's).
void CheckVmmKind(const std::string& what, const char* kind, const char* mode,
                  const std::vector<std::string>& args = {},
                  const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {g_vmm_program, what};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> with_env = {std::string("PINSHIM_MODE=") + mode};
  with_env.insert(with_env.end(), env.begin(), env.end());
  RunResult without = RunProgram(argv, false);
  RunResult with = RunProgram(argv, true, with_env);
  ASSERT_EQ(without.status, 0) << without.err;
  ASSERT_EQ(with.status, 0) << with.err;
  EXPECT_EQ(without.out, with.out);
  CheckCounts(with);
  ASSERT_EQ(with.summaries.size(), 1u);
  const std::string& s = with.summaries[0];
  EXPECT_EQ(s.find("src=pageable"), std::string::npos) << mode << "\n" << s;
  EXPECT_EQ(s.find("dst=pageable"), std::string::npos) << mode << "\n" << s;
  EXPECT_NE(s.find(std::string("dir=H2D src=") + kind + " dst=device"), std::string::npos) << s;
  EXPECT_NE(s.find(std::string("dir=D2H src=device dst=") + kind), std::string::npos) << s;
  // Every copy's host side is that kind, as the hooks tracked it: never the
  // kind the driver's answers would suggest (cuMemHostGetFlags answers for
  // VMM host memory as for cuMemHostAlloc memory).
  std::istringstream lines(s);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("pinshim: copy ") != 0) continue;
    const bool host_kind =
        line.find(std::string("src=") + kind + " dst=device") != std::string::npos ||
        line.find(std::string("src=device dst=") + kind + " ") != std::string::npos;
    EXPECT_TRUE(host_kind) << mode << ": " << line;
  }
  // Optimize mode neither staged nor pinned anything of it.
  if (std::string(mode) == "optimize") {
    EXPECT_NE(s.find(" staged_copies=0 "), std::string::npos) << s;
    EXPECT_NE(s.find(" cache_registrations=0 "), std::string::npos) << s;
  }
}

TEST(VmmHostTest, VmmHostAllocationsAreCountedAsPinnedInEveryMode) {
  for (const char* mode : {"observe", "optimize", "enforce"}) CheckVmmKind("vmm", "vmm-host", mode);
}

TEST(VmmHostTest, ImportedVmmHostAllocationsAreCountedAsPinned) {
  for (const char* mode : {"observe", "optimize"}) CheckVmmKind("import", "vmm-host", mode);
}

TEST(VmmHostTest, HostPoolAllocationsAreCountedAsPinnedInEveryMode) {
  for (const char* mode : {"observe", "optimize", "enforce"}) {
    CheckVmmKind("pool", "host-pool", mode);
  }
}

TEST(VmmHostTest, EnforceChargesVmmHostAndPoolMemory) {
  const char* expected =
      "create 8g: 0\ncreate 32g more: 2\nrelease: 0\ncreate 8g after release: 0\n"
      "pool 1 MiB: 0\npool 4g from its reservation: 0\n"
      "pool 12g more: 2\npool reserved: 16g\n"
      "release b: 0\npool 12g after release: 0\ndestroy: 0\n";
  RunResult free_run = RunProgram({g_vmm_program, "budget"}, true);
  ASSERT_EQ(free_run.status, 0) << free_run.err;
  EXPECT_EQ(free_run.out.find(": 2\n"), std::string::npos) << free_run.out;
  for (const char* policy : {"deny", "fallback", "evict"}) {
    RunResult r = RunProgram(
        {g_vmm_program, "budget"}, true,
        {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=72M", std::string("PINSHIM_POLICY=") + policy});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, expected) << policy << "\n" << r.err;
    const bool says =
        r.err.find("fallback policy cannot serve pageable memory for VMM") != std::string::npos;
    EXPECT_EQ(says, std::string(policy) == "fallback") << r.err;
  }
}

// Unusual but legal uses (tests/interception/vmm_program.cc "edges-vmm"):
// one handle mapped at two addresses, two handles side by side with a copy
// across both, a handle released before its unmap, a retained handle. Every
// copy counted as VMM host memory, every pin call balanced; under enforce
// (a budget of 20 granules) the program's probes find the budget charged
// with exactly what is pinned after each step, and whole at each end.
TEST(VmmHostTest, UnusualVmmHostUsesAreCountedAndChargedInEveryMode) {
  for (const char* mode : {"observe", "optimize", "enforce"}) {
    CheckVmmKind("edges-vmm", "vmm-host", mode, {"20"}, {"PINSHIM_BUDGET=40M"});
  }
}

// A host pool's allocations freed by cuMemFree, trimmed, and a pool
// destroyed with allocations outstanding, used and then freed.
TEST(VmmHostTest, UnusualHostPoolUsesAreCountedAndChargedInEveryMode) {
  for (const char* mode : {"observe", "optimize", "enforce"}) {
    CheckVmmKind("edges-pool", "host-pool", mode, {"20"}, {"PINSHIM_BUDGET=40M"});
  }
}

// Their traces: every copy of pinned memory, no advice to pin it, and each
// mapping used (the copy across two mappings side by side uses both).
TEST(VmmHostTest, UnusualUsesReportNoPageableAndNoUnusedPinning) {
  for (const char* what : {"edges-vmm", "edges-pool"}) {
    std::string dir = MakeTempDir();
    std::string json = ReportJson({g_vmm_program, what}, dir);
    ASSERT_NE(json.find("\"findings\""), std::string::npos) << what << "\n" << json;
    for (const char* rule : {"pinned-unused", "pageable-hot", "async-pageable"}) {
      EXPECT_EQ(json.find(std::string("\"rule\": \"") + rule + "\""), std::string::npos)
          << what << " " << rule << "\n"
          << json;
    }
    RunResult text = RunProgram({g_pinshim, "report", dir}, false);
    EXPECT_NE(text.out.find("moved: H2D"), std::string::npos) << text.out;
    EXPECT_EQ(text.out.find("pageable"), std::string::npos) << text.out;
  }
}

// The charges of those uses while they last: memory released while mapped,
// or held by a retained reference, or by a destroyed pool's outstanding
// allocation, stays charged until it goes; a handle mapped twice is charged
// once; a cuMemFree'd pool allocation leaves its reservation charged until
// the trim.
TEST(VmmHostTest, EnforceChargesUnusualUsesUntilTheMemoryGoes) {
  RunResult free_run = RunProgram({g_vmm_program, "edges-budget"}, false);
  ASSERT_EQ(free_run.status, 0) << free_run.err;
  EXPECT_EQ(free_run.out.find(": 2\n"), std::string::npos) << free_run.out;
  const char* expected =
      "12g beside 8g mapped twice: 0\n"
      "16g beside 8g released, mapped: 2\n"
      "16g after its unmap: 0\n"
      "16g beside 8g with a retained reference: 2\n"
      "16g after the last release and unmap: 0\n"
      "pool 1 MiB: 0\n"
      "destroy with it outstanding: 0\n"
      "8g beside the destroyed pool's allocation: 2\n"
      "cuMemFree: 0\n"
      "20g after the destroyed pool's last free: 0\n"
      "cuMemFree from a live pool: 0\n"
      "8g beside its reservation: 2\n"
      "20g after the trim: 0\n"
      "destroy: 0\n";
  for (const char* policy : {"deny", "evict"}) {
    RunResult r = RunProgram(
        {g_vmm_program, "edges-budget"}, true,
        {"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=40M", std::string("PINSHIM_POLICY=") + policy});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, expected) << policy << "\n" << r.err;
  }
}

TEST(InterceptionTest, NonCudaProcessesAreUntouched) {
  const std::vector<std::vector<std::string>> commands = {
      {"/bin/ls", "-la", "/usr/include/linux"},
      {"/bin/sh", "-c", "for i in 1 2 3; do echo $i; done | sort -r; echo done >&2; exit 3"},
      {"/usr/bin/env", "python3", "-c",
       "import json,sys; print(json.dumps(list(range(5)))); "
       "sys.exit(4)"},
  };
  for (const auto& argv : commands) {
    std::string trace_dir = MakeTempDir();
    RunResult without = RunProgram(argv, false);
    RunResult with = RunProgram(argv, true, {"PINSHIM_TRACE_DIR=" + trace_dir});
    EXPECT_EQ(without.status, with.status) << argv[0];
    EXPECT_EQ(without.out, with.out) << argv[0];
    EXPECT_EQ(without.err, with.err) << argv[0];
    EXPECT_TRUE(with.summaries.empty()) << argv[0];
    // No trace file either.
    DIR* dp = opendir(trace_dir.c_str());
    ASSERT_NE(dp, nullptr);
    int entries = 0;
    while (dirent* de = readdir(dp)) entries += de->d_name[0] != '.';
    closedir(dp);
    EXPECT_EQ(entries, 0) << argv[0];
  }
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc < 8) {
    fprintf(stderr,
            "usage: %s LIBPINSHIM CLIENT LINKED_CLIENT FAKE_DRIVER_DIR PINSHIM EXAMPLE "
            "VMM_PROGRAM\n",
            argv[0]);
    return 2;
  }
  char buf[4096];
  auto abs = [&](const char* p) {
    return std::string(p[0] == '/' ? p : std::string(getcwd(buf, sizeof(buf))) + "/" + p);
  };
  g_lib = abs(argv[1]);
  g_client = abs(argv[2]);
  g_linked_client = abs(argv[3]);
  g_fake_dir = abs(argv[4]);
  g_pinshim = abs(argv[5]);
  g_example = abs(argv[6]);
  g_vmm_program = abs(argv[7]);
  return RUN_ALL_TESTS();
}
