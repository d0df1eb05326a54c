#include "analyzer/status/status_command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "shim/budget/budget.h"

namespace pinshim {
namespace {

using budget::Budget;
using budget::BudgetOptions;
using budget::Decision;
using budget::Owner;

constexpr uint64_t kMiB = 1024 * 1024;

class TestBudget : public Budget {
 public:
  ~TestBudget() { CloseForTesting(); }
};

std::string LedgerPath(const std::string& tag) {
  const char* dir = getenv("TEST_TMPDIR");
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/status-ledger-" + tag + "-" +
                     std::to_string(getpid());
  unlink(path.c_str());
  return path;
}

struct Result {
  int status;
  std::string out;
  std::string err;
};

Result Show(const StatusRequest& request) {
  char* out_buf = nullptr;
  char* err_buf = nullptr;
  size_t out_len = 0;
  size_t err_len = 0;
  FILE* out = open_memstream(&out_buf, &out_len);
  FILE* err = open_memstream(&err_buf, &err_len);
  Result r;
  r.status = ShowStatus(request, out, err);
  fclose(out);
  fclose(err);
  r.out.assign(out_buf, out_len);
  r.err.assign(err_buf, err_len);
  free(out_buf);
  free(err_buf);
  return r;
}

StatusRequest Request(const std::string& path, bool json = false) {
  StatusRequest request;
  request.ledger_path = path;
  request.json = json;
  request.uid = geteuid();
  return request;
}

BudgetOptions NodeOptions(const std::string& path, uint64_t process_bytes = 0) {
  BudgetOptions o;
  o.process_bytes = process_bytes;
  o.node_bytes = 10 * kMiB;
  o.ledger_path = path.c_str();
  return o;
}

// A process that joined the ledger, pinned bytes and died without leaving.
void LeaveADeadProcess(const std::string& path, uint64_t bytes) {
  pid_t pid = fork();
  if (pid == 0) {
    auto* b = new Budget;
    if (!b->Init(NodeOptions(path)).ok()) _exit(1);
    _exit(b->Charge(Owner::kPinshimCache, bytes) == Decision::kGranted ? 0 : 2);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

TEST(StatusCommandTest, NoLedgerIsNotAnError) {
  const std::string path = LedgerPath("none");
  Result r = Show(Request(path));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "No node ledger at " + path +
                       ": no process with a node budget has run here since boot.\n");
  EXPECT_EQ(r.err, "");
  r = Show(Request(path, true));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "{\n  \"ledger\": \"" + path + "\",\n  \"exists\": false\n}\n");
}

TEST(StatusCommandTest, ShowsProcessesAndTheNodeAfterReclaimingTheDead) {
  const std::string path = LedgerPath("show");
  TestBudget a;
  TestBudget b;
  ASSERT_TRUE(a.Init(NodeOptions(path)).ok());
  ASSERT_TRUE(b.Init(NodeOptions(path, 8 * kMiB)).ok());
  ASSERT_EQ(a.Charge(Owner::kProgramAlloc, 3 * kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kProgramRegister, kMiB), Decision::kGranted);
  ASSERT_EQ(b.Charge(Owner::kProgramRegister, 7 * kMiB), Decision::kDenied);
  LeaveADeadProcess(path, 2 * kMiB);
  ASSERT_EQ(a.ledger().header().pinned.load(), 6 * kMiB);

  Result r = Show(Request(path));
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.err, "");
  const std::string& t = r.out;
  EXPECT_NE(t.find("Node ledger " + path + " (per user)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("Reclaimed 1 dead process holding 2.00 MiB.\n"), std::string::npos) << t;
  EXPECT_NE(t.find("Node budget 10.0 MiB, pinned 4.00 MiB, headroom 6.00 MiB, "
                   "2 processes.\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("Pinned by owner: program_alloc 3.00 MiB, program_register 1.00 MiB, "
                   "pinshim_pool 0 B, pinshim_cache 0 B, program_vmm 0 B, program_pool 0 B\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("grants 3, denials 1, fallbacks 0"), std::string::npos) << t;
  char comm[budget::kCommBytes];
  ASSERT_TRUE(budget::ReadComm(getpid(), comm));
  const std::string pid = std::to_string(getpid());
  size_t first = t.find(pid + "  " + comm);
  ASSERT_NE(first, std::string::npos) << t;
  EXPECT_NE(t.find(pid + "  " + comm, first + 1), std::string::npos) << "two rows for our pid";
  EXPECT_NE(t.find("8.00 MiB"), std::string::npos) << "the process budget column";
  EXPECT_EQ(a.ledger().header().pinned.load(), 4 * kMiB) << "the dead share was reclaimed";

  // Nothing left to reclaim the second time.
  r = Show(Request(path));
  EXPECT_EQ(r.out.find("Reclaimed"), std::string::npos) << r.out;
}

TEST(StatusCommandTest, JsonHasExactNumbers) {
  const std::string path = LedgerPath("json");
  TestBudget a;
  ASSERT_TRUE(a.Init(NodeOptions(path, 5 * kMiB)).ok());
  ASSERT_EQ(a.Charge(Owner::kPinshimPool, 12345), Decision::kGranted);
  LeaveADeadProcess(path, 1000);
  Result r = Show(Request(path, true));
  EXPECT_EQ(r.status, 0);
  const std::string& j = r.out;
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j.substr(j.size() - 2), "}\n");
  // Whitespace outside strings is layout; compare without it.
  std::string compact;
  bool in_string = false;
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i] == '"' && (i == 0 || j[i - 1] != '\\')) in_string = !in_string;
    if (in_string || !isspace(static_cast<unsigned char>(j[i]))) compact += j[i];
  }
  for (const std::string& want : {
           std::string("\"exists\":true"),
           std::string("\"shared\":false"),
           std::string("\"layout_version\":3"),
           std::string("\"reclaimed_now\":{\"processes\":1,\"bytes\":1000}"),
           std::string("\"node_budget_bytes\":10485760"),
           std::string("\"pinned_bytes\":12345"),
           std::string("\"headroom_bytes\":10473415"),
           std::string("\"pinshim_pool\":12345"),
           std::string("{\"pid\":" + std::to_string(getpid()) + ",\"command\":\""),
           std::string("\"same_pid_namespace\":true,\"policy\":\"deny\""),
           std::string("\"process_budget_bytes\":5242880,\"grants\":1"),
           std::string("\"reclaimed_processes\":1,\"reclaimed_bytes\":1000"),
       }) {
    EXPECT_NE(compact.find(want), std::string::npos) << want << "\n" << j;
  }
  int depth = 0;
  for (char c : j) {
    depth += (c == '{' || c == '[') - (c == '}' || c == ']');
    EXPECT_GE(depth, 0);
  }
  EXPECT_EQ(depth, 0);
}

TEST(StatusCommandTest, ForeignLedgerIsOneLineAndExitTwo) {
  const std::string path = LedgerPath("foreign");
  {
    TestBudget a;
    ASSERT_TRUE(a.Init(NodeOptions(path)).ok());
  }
  StatusRequest request = Request(path);
  request.uid = geteuid() + 1;
  Result r = Show(request);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("pinshim status: node ledger " + path + ": it belongs to uid", 0), 0u)
      << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line";
  request.shared = true;
  EXPECT_EQ(Show(request).status, 0);
}

TEST(StatusCommandTest, OtherLayoutIsOneLineAndExitTwo) {
  const std::string path = LedgerPath("layout");
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "not a ledger at all, not even close", 36), 36);
  close(fd);
  Result r = Show(Request(path, true));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "pinshim status: " + path + " is not a pinshim node ledger (bad magic)\n");
}

TEST(StatusCommandTest, Options) {
  char status[] = "status";
  char help[] = "--help";
  char bogus[] = "--bogus";
  char ledger[] = "--ledger";
  char empty_ledger[] = "--ledger=";
  char* help_args[] = {status, help, nullptr};
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunStatusCommand(2, help_args), 0);
  std::string text = testing::internal::GetCapturedStdout();
  EXPECT_EQ(text.rfind("usage: pinshim status", 0), 0u) << text;
  EXPECT_NE(text.find("--json"), std::string::npos);
  char* bogus_args[] = {status, bogus, nullptr};
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunStatusCommand(2, bogus_args), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "pinshim status: unknown option \"--bogus\"; see pinshim status "
            "--help\n");
  char* ledger_args[] = {status, ledger, nullptr};
  EXPECT_EQ(RunStatusCommand(2, ledger_args), 2);
  char* empty_args[] = {status, empty_ledger, nullptr};
  EXPECT_EQ(RunStatusCommand(2, empty_args), 2);
}

TEST(StatusCommandTest, LedgerOptionNamesTheFile) {
  const std::string path = LedgerPath("option");
  std::string flag = "--ledger=" + path;
  char status[] = "status";
  char* args[] = {status, flag.data(), nullptr};
  testing::internal::CaptureStdout();
  EXPECT_EQ(RunStatusCommand(2, args), 0);
  EXPECT_EQ(
      testing::internal::GetCapturedStdout(),
      "No node ledger at " + path + ": no process with a node budget has run here since boot.\n");
}

}  // namespace
}  // namespace pinshim
