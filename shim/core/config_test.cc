#include "shim/core/config.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "shim/core/size.h"

// Counts heap allocations while g_counting is set, by interposing malloc in
// the test binary and forwarding to glibc, to check that parsing allocates
// nothing (the preloaded library parses inside someone else's process).
// Under AddressSanitizer the allocator is the sanitizer's, which calls
// malloc before it can run instrumented code: the count comes from its
// allocation hook instead.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int> g_allocations{0};
void Count() {
  if (g_counting.load(std::memory_order_relaxed)) ++g_allocations;
}
}  // namespace

#if defined(__SANITIZE_ADDRESS__)
// The runtime's hook (sanitizer/allocator_interface.h, which GCC does not ship).
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*,
                                                                             size_t),
                                                         void (*free_hook)(const volatile void*));

namespace {
void CountHook(const volatile void*, size_t) { Count(); }
void IgnoreFree(const volatile void*) {}  // the runtime takes both hooks or neither
[[maybe_unused]] const int g_hooks_installed =
    __sanitizer_install_malloc_and_free_hooks(&CountHook, &IgnoreFree);
}  // namespace
#else
extern "C" void* __libc_malloc(size_t size);
extern "C" void* __libc_calloc(size_t n, size_t size);
extern "C" void* __libc_realloc(void* p, size_t size);
extern "C" void __libc_free(void* p);

extern "C" void* malloc(size_t size) {
  Count();
  return __libc_malloc(size);
}
extern "C" void* calloc(size_t n, size_t size) {
  Count();
  return __libc_calloc(n, size);
}
extern "C" void* realloc(void* p, size_t size) {
  Count();
  return __libc_realloc(p, size);
}
extern "C" void free(void* p) { __libc_free(p); }
#endif

namespace pinshim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kPhysical = 64 * kGiB;

static_assert(std::is_trivial<Config>::value,
              "Config must need no constructor: it is used before C++ "
              "static initialisation has run");
static_assert(std::is_trivial<ConfigErrors>::value, "as Config");

// A test environment: owns its strings and exposes an envp array.
class Env {
 public:
  Env(std::initializer_list<std::string> entries) : entries_(entries) {}
  void Add(const std::string& entry) { entries_.push_back(entry); }
  char* const* envp() {
    ptrs_.clear();
    for (std::string& e : entries_) ptrs_.push_back(&e[0]);
    ptrs_.push_back(nullptr);
    return ptrs_.data();
  }

 private:
  std::vector<std::string> entries_;
  std::vector<char*> ptrs_;
};

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cfgXXXXXX";
    ASSERT_NE(mkdtemp(&pattern[0]), nullptr);
    dir_ = pattern;
    missing_default_ = dir_ + "/no-such-default.conf";
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    return path;
  }

  // Parses env with no default config file and 64 GiB of physical memory.
  bool Parse(Env* env, const char* default_file = nullptr) {
    ConfigInput input = {};
    input.envp = env->envp();
    input.default_file = default_file != nullptr ? default_file : missing_default_.c_str();
    input.physical_bytes = kPhysical;
    return ParseConfig(input, &config_, &errors_);
  }

  std::string Error(int i) const {
    return i < errors_.count ? std::string(errors_.messages[i]) : "(none)";
  }

  std::string dir_;
  std::string missing_default_;
  Config config_;
  ConfigErrors errors_;
};

TEST_F(ConfigTest, DefaultsWithEmptyEnvironment) {
  Env env({"HOME=/root", "PATH=/bin"});
  ASSERT_TRUE(Parse(&env));
  EXPECT_EQ(errors_.count, 0);
  EXPECT_EQ(config_.mode, kModeObserve);
  EXPECT_EQ(config_.policy, Policy::kDeny);
  EXPECT_EQ(config_.summary, SummaryTarget::kNone);
  EXPECT_FALSE(config_.has_budget);
  EXPECT_FALSE(config_.has_node_budget);
  EXPECT_FALSE(config_.ledger_shared);
  EXPECT_FALSE(config_.forced_observe);
  EXPECT_EQ(config_.sample_ms, 10u);
  EXPECT_EQ(config_.track_threshold_bytes, 64u * 1024);
  EXPECT_EQ(config_.pin_cap_bytes, kPhysical / 4);
  EXPECT_EQ(config_.physical_bytes, kPhysical);
  EXPECT_STREQ(config_.trace_dir, "");
  EXPECT_STREQ(config_.metrics_file, "");
  EXPECT_STREQ(config_.profile, "");
  EXPECT_STREQ(config_.config_file, "");
}

TEST_F(ConfigTest, PythonFramesOnByDefaultAndSwitchable) {
  Env on({"PATH=/bin"});
  ASSERT_TRUE(Parse(&on));
  EXPECT_TRUE(config_.python_frames);
  Env off({"PINSHIM_PYTHON_FRAMES=0"});
  ASSERT_TRUE(Parse(&off)) << Error(0);
  EXPECT_FALSE(config_.python_frames);
  Env bad({"PINSHIM_PYTHON_FRAMES=no"});
  EXPECT_FALSE(Parse(&bad));
  ASSERT_EQ(errors_.count, 1);
  EXPECT_NE(Error(0).find("PINSHIM_PYTHON_FRAMES"), std::string::npos) << Error(0);
  EXPECT_TRUE(config_.python_frames);  // a bad value keeps the default
}

TEST_F(ConfigTest, NullEnvironmentIsEmpty) {
  ConfigInput input = {};
  input.default_file = missing_default_.c_str();
  ASSERT_TRUE(ParseConfig(input, &config_, &errors_));
  EXPECT_EQ(config_.mode, kModeObserve);
  EXPECT_EQ(config_.physical_bytes, PhysicalMemoryBytes());
}

TEST_F(ConfigTest, AcceptsEveryVariable) {
  Env env({"PINSHIM_MODE=optimize,enforce", "PINSHIM_TRACE_DIR=/data/traces",
           "PINSHIM_SUMMARY=/tmp/sum.%p.txt", "PINSHIM_BUDGET=8GiB", "PINSHIM_NODE_BUDGET=50%",
           "PINSHIM_POLICY=evict", "PINSHIM_TRACK_THRESHOLD=1M",
           "PINSHIM_METRICS_FILE=/tmp/m.jsonl", "PINSHIM_SAMPLE_MS=250", "PINSHIM_PIN_CAP=2G",
           "PINSHIM_LEDGER_SHARED=1", "PINSHIM_PROFILE=/tmp/profile.out"});
  ASSERT_TRUE(Parse(&env)) << Error(0);
  EXPECT_EQ(config_.mode, kModeObserve | kModeOptimize | kModeEnforce);
  EXPECT_STREQ(config_.trace_dir, "/data/traces");
  EXPECT_EQ(config_.summary, SummaryTarget::kFile);
  EXPECT_STREQ(config_.summary_path, "/tmp/sum.%p.txt");
  EXPECT_TRUE(config_.has_budget);
  EXPECT_EQ(config_.budget_bytes, 8 * kGiB);
  EXPECT_TRUE(config_.has_node_budget);
  EXPECT_EQ(config_.node_budget_bytes, kPhysical / 2);
  EXPECT_EQ(config_.policy, Policy::kEvict);
  EXPECT_EQ(config_.track_threshold_bytes, 1u << 20);
  EXPECT_STREQ(config_.metrics_file, "/tmp/m.jsonl");
  EXPECT_EQ(config_.sample_ms, 250u);
  EXPECT_EQ(config_.pin_cap_bytes, 2 * kGiB);
  EXPECT_TRUE(config_.ledger_shared);
  EXPECT_STREQ(config_.profile, "/tmp/profile.out");
  EXPECT_FALSE(config_.forced_observe);
}

TEST_F(ConfigTest, ModeCombinations) {
  const struct {
    const char* value;
    uint32_t mode;
  } cases[] = {
      {"observe", kModeObserve},
      {"optimize", kModeObserve | kModeOptimize},
      {"enforce", kModeObserve | kModeEnforce},
      {"observe,optimize", kModeObserve | kModeOptimize},
      {" Enforce , OBSERVE ", kModeObserve | kModeEnforce},
      {"enforce,optimize,observe", kModeObserve | kModeOptimize | kModeEnforce},
      {"optimize,optimize", kModeObserve | kModeOptimize},
  };
  for (const auto& c : cases) {
    Env env({std::string("PINSHIM_MODE=") + c.value});
    EXPECT_TRUE(Parse(&env)) << c.value << ": " << Error(0);
    EXPECT_EQ(config_.mode, c.mode) << c.value;
  }
}

TEST_F(ConfigTest, UnknownModeFallsBackToObserve) {
  Env env({"PINSHIM_MODE=optimize,fast"});
  EXPECT_FALSE(Parse(&env));
  ASSERT_EQ(errors_.count, 1);
  EXPECT_EQ(Error(0),
            "PINSHIM_MODE=\"optimize,fast\": unknown mode \"fast\"; accepted: "
            "observe, optimize, enforce, or a comma-separated combination "
            "such as optimize,enforce");
  EXPECT_EQ(config_.mode, kModeObserve);
  EXPECT_TRUE(config_.forced_observe);

  for (const char* bad : {"", "observe,", ",enforce"}) {
    Env env2({std::string("PINSHIM_MODE=") + bad});
    EXPECT_FALSE(Parse(&env2)) << bad;
    EXPECT_NE(Error(0).find(": empty mode word; accepted: observe"), std::string::npos) << Error(0);
    EXPECT_EQ(config_.mode, kModeObserve);
  }
}

TEST_F(ConfigTest, BudgetErrorForcesObserveOnly) {
  for (const char* var : {"PINSHIM_BUDGET", "PINSHIM_NODE_BUDGET"}) {
    Env env({"PINSHIM_MODE=optimize,enforce", std::string(var) + "=12X"});
    EXPECT_FALSE(Parse(&env));
    ASSERT_EQ(errors_.count, 1);
    EXPECT_EQ(Error(0).rfind(std::string(var) + "=\"12X\": unknown unit \"X\"; accepted: an "
                                                "integer or decimal",
                             0),
              0u)
        << Error(0);
    EXPECT_NE(Error(0).find("25%"), std::string::npos);
    EXPECT_EQ(config_.mode, kModeObserve) << var;
    EXPECT_TRUE(config_.forced_observe) << var;
  }
}

TEST_F(ConfigTest, EveryBudgetErrorForm) {
  const struct {
    const char* value;
    const char* reason;
  } cases[] = {
      {"", "PINSHIM_BUDGET=\"\": empty;"},
      {"-4G", "PINSHIM_BUDGET=\"-4G\": negative;"},
      {"lots", "PINSHIM_BUDGET=\"lots\": not a number;"},
      {"4Q", "PINSHIM_BUDGET=\"4Q\": unknown unit \"Q\";"},
      {"101%",
       "PINSHIM_BUDGET=\"101%\": percentage must be above 0 and at "
       "most 100;"},
      {"0%",
       "PINSHIM_BUDGET=\"0%\": percentage must be above 0 and at most "
       "100;"},
      {"99999999999T", "PINSHIM_BUDGET=\"99999999999T\": too large"},
  };
  for (const auto& c : cases) {
    Env env({"PINSHIM_MODE=enforce", std::string("PINSHIM_BUDGET=") + c.value});
    EXPECT_FALSE(Parse(&env)) << c.value;
    EXPECT_EQ(Error(0).rfind(c.reason, 0), 0u) << Error(0);
    EXPECT_TRUE(config_.forced_observe);
    EXPECT_EQ(config_.mode, kModeObserve);
    EXPECT_FALSE(config_.has_budget);
  }
}

TEST_F(ConfigTest, OtherErrorsKeepDefaultsWithoutFallback) {
  const struct {
    const char* entry;
    const char* message;
  } cases[] = {
      {"PINSHIM_POLICY=drop",
       "PINSHIM_POLICY=\"drop\": unknown policy; accepted: deny, fallback, "
       "evict"},
      {"PINSHIM_POLICY=",
       "PINSHIM_POLICY=\"\": empty; accepted: deny, "
       "fallback, evict"},
      {"PINSHIM_SAMPLE_MS=0",
       "PINSHIM_SAMPLE_MS=\"0\": out of range; accepted: an integer from 1 to "
       "60000 (milliseconds)"},
      {"PINSHIM_SAMPLE_MS=60001",
       "PINSHIM_SAMPLE_MS=\"60001\": out of range; accepted: an integer from "
       "1 to 60000 (milliseconds)"},
      {"PINSHIM_SAMPLE_MS=99999999999999999999999",
       "PINSHIM_SAMPLE_MS=\"99999999999999999999999\": out of range; "
       "accepted: an integer from 1 to 60000 (milliseconds)"},
      {"PINSHIM_SAMPLE_MS=1.5",
       "PINSHIM_SAMPLE_MS=\"1.5\": not an integer; accepted: an integer from "
       "1 to 60000 (milliseconds)"},
      {"PINSHIM_SAMPLE_MS=",
       "PINSHIM_SAMPLE_MS=\"\": empty; accepted: an "
       "integer from 1 to 60000 (milliseconds)"},
      {"PINSHIM_LEDGER_SHARED=yes", "PINSHIM_LEDGER_SHARED=\"yes\": not 0 or 1; accepted: 0 or 1"},
      {"PINSHIM_LEDGER_SHARED=",
       "PINSHIM_LEDGER_SHARED=\"\": empty; "
       "accepted: 0 or 1"},
      {"PINSHIM_TRACK_THRESHOLD=10%",
       "PINSHIM_TRACK_THRESHOLD=\"10%\": a percentage is not accepted here; "
       "accepted: an integer or decimal with an optional unit B, K/KB/KiB, "
       "M/MB/MiB, G/GB/GiB, T/TB/TiB (any case, 1K = 1024), e.g. 4096, "
       "512K, 1.5GiB"},
      {"PINSHIM_PIN_CAP=200%",
       "PINSHIM_PIN_CAP=\"200%\": percentage must be above 0 and at most "
       "100;"},
  };
  for (const auto& c : cases) {
    Env env({"PINSHIM_MODE=optimize", c.entry});
    EXPECT_FALSE(Parse(&env)) << c.entry;
    ASSERT_EQ(errors_.count, 1) << c.entry;
    EXPECT_EQ(Error(0).rfind(c.message, 0), 0u) << Error(0);
    EXPECT_FALSE(config_.forced_observe) << c.entry;
    EXPECT_EQ(config_.mode, kModeObserve | kModeOptimize);
    EXPECT_EQ(config_.policy, Policy::kDeny);
    EXPECT_EQ(config_.sample_ms, 10u);
    EXPECT_FALSE(config_.ledger_shared);
    EXPECT_EQ(config_.track_threshold_bytes, 64u * 1024);
    EXPECT_EQ(config_.pin_cap_bytes, kPhysical / 4);
  }
}

TEST_F(ConfigTest, BoundaryValuesAccepted) {
  Env env({"PINSHIM_SAMPLE_MS=60000", "PINSHIM_LEDGER_SHARED=0", "PINSHIM_TRACK_THRESHOLD=4K",
           "PINSHIM_PIN_CAP=100%", "PINSHIM_BUDGET=1", "PINSHIM_POLICY=Fallback"});
  ASSERT_TRUE(Parse(&env)) << Error(0);
  EXPECT_EQ(config_.sample_ms, 60000u);
  EXPECT_EQ(config_.track_threshold_bytes, 4096u);
  EXPECT_EQ(config_.pin_cap_bytes, kPhysical);
  EXPECT_TRUE(config_.has_budget);
  EXPECT_EQ(config_.budget_bytes, 1u);
  EXPECT_EQ(config_.policy, Policy::kFallback);
  Env one({"PINSHIM_SAMPLE_MS=1"});
  ASSERT_TRUE(Parse(&one));
  EXPECT_EQ(config_.sample_ms, 1u);
}

// The staging settings: workers, the ring's slot size and depth, each in
// range or refused with the accepted forms (the default kept).
TEST_F(ConfigTest, StagingRingSettings) {
  Env none({"PATH=/bin"});
  ASSERT_TRUE(Parse(&none));
  EXPECT_EQ(config_.stage_workers, 0u);
  EXPECT_EQ(config_.stage_chunk_bytes, uint64_t{2} << 20);
  EXPECT_EQ(config_.stage_slots, 8u);
  EXPECT_FALSE(config_.stage_ordered);
  Env set({"PINSHIM_STAGE_WORKERS=12", "PINSHIM_STAGE_CHUNK=4M", "PINSHIM_STAGE_SLOTS=4",
           "PINSHIM_STAGE_ORDERED=1"});
  ASSERT_TRUE(Parse(&set)) << Error(0);
  EXPECT_TRUE(config_.stage_ordered);
  EXPECT_EQ(config_.stage_workers, 12u);
  EXPECT_EQ(config_.stage_chunk_bytes, uint64_t{4} << 20);
  EXPECT_EQ(config_.stage_slots, 4u);
  Env edges({"PINSHIM_STAGE_CHUNK=64K", "PINSHIM_STAGE_SLOTS=2"});
  ASSERT_TRUE(Parse(&edges)) << Error(0);
  EXPECT_EQ(config_.stage_chunk_bytes, uint64_t{64} << 10);
  EXPECT_EQ(config_.stage_slots, 2u);
  const struct {
    const char* entry;
    const char* message;
  } bad[] = {
      {"PINSHIM_STAGE_CHUNK=32K",
       "PINSHIM_STAGE_CHUNK=\"32K\": out of range; accepted: a size from 64K to 64M"},
      {"PINSHIM_STAGE_CHUNK=65M",
       "PINSHIM_STAGE_CHUNK=\"65M\": out of range; accepted: a size from 64K to 64M"},
      {"PINSHIM_STAGE_CHUNK=10%", "PINSHIM_STAGE_CHUNK=\"10%\": a percentage is not accepted"},
      {"PINSHIM_STAGE_SLOTS=1",
       "PINSHIM_STAGE_SLOTS=\"1\": out of range; accepted: an integer from 2 to 8"},
      {"PINSHIM_STAGE_SLOTS=9",
       "PINSHIM_STAGE_SLOTS=\"9\": out of range; accepted: an integer from 2 to 8"},
      {"PINSHIM_STAGE_WORKERS=33",
       "PINSHIM_STAGE_WORKERS=\"33\": out of range; accepted: an integer from 0 to 32"},
      {"PINSHIM_STAGE_ORDERED=yes", "PINSHIM_STAGE_ORDERED=\"yes\""},
  };
  for (const auto& c : bad) {
    Env env({c.entry});
    EXPECT_FALSE(Parse(&env)) << c.entry;
    ASSERT_EQ(errors_.count, 1) << c.entry;
    EXPECT_EQ(Error(0).rfind(c.message, 0), 0u) << Error(0);
    EXPECT_EQ(config_.stage_chunk_bytes, uint64_t{2} << 20);
    EXPECT_EQ(config_.stage_slots, 8u);
  }
}

TEST_F(ConfigTest, IdleTrimSeconds) {
  Env none({});
  ASSERT_TRUE(Parse(&none));
  EXPECT_EQ(config_.idle_trim_s, 10u);
  for (const char* ok : {"0", "86400", " 30 "}) {
    Env env({std::string("PINSHIM_IDLE_TRIM_S=") + ok});
    ASSERT_TRUE(Parse(&env)) << ok << ": " << Error(0);
    EXPECT_EQ(config_.idle_trim_s, static_cast<uint32_t>(atoi(ok))) << ok;
  }
  for (const char* bad : {"", "-1", "86401", "5s", "1e3"}) {
    Env env({std::string("PINSHIM_IDLE_TRIM_S=") + bad});
    EXPECT_FALSE(Parse(&env)) << bad;
    ASSERT_EQ(errors_.count, 1) << bad;
    EXPECT_NE(Error(0).find("accepted: an integer from 0 to 86400"), std::string::npos) << Error(0);
    EXPECT_EQ(config_.idle_trim_s, 10u) << bad;
  }
}

// Values that parse but cannot be meant: refused with one line each; a
// refused budget drops the mode to observe, as any invalid budget does.
TEST_F(ConfigTest, NonsenseValuesAreRefused) {
  struct Case {
    const char* entry;
    const char* message;
    bool forced_observe;
  } cases[] = {
      {"PINSHIM_BUDGET=0", "PINSHIM_BUDGET=\"0\": a budget of 0 bytes would refuse", true},
      {"PINSHIM_NODE_BUDGET=0K", "PINSHIM_NODE_BUDGET=\"0K\": a budget of 0 bytes", true},
      {"PINSHIM_TRACK_THRESHOLD=0", "PINSHIM_TRACK_THRESHOLD=\"0\": below 4K", false},
      {"PINSHIM_TRACK_THRESHOLD=4095", "PINSHIM_TRACK_THRESHOLD=\"4095\": below 4K", false},
      {"PINSHIM_SUMMARY=yes", "PINSHIM_SUMMARY=\"yes\": a word, not a file name", false},
      {"PINSHIM_SUMMARY= True ", "PINSHIM_SUMMARY=\" True \": a word, not a file name", false},
      {"PINSHIM_SUMMARY=stderr", "PINSHIM_SUMMARY=\"stderr\": a word", false},
  };
  for (const Case& c : cases) {
    Env env({"PINSHIM_MODE=enforce", c.entry});
    EXPECT_FALSE(Parse(&env)) << c.entry;
    ASSERT_EQ(errors_.count, 1) << c.entry;
    EXPECT_EQ(Error(0).rfind(c.message, 0), 0u) << Error(0);
    EXPECT_EQ(config_.forced_observe, c.forced_observe) << c.entry;
    EXPECT_EQ(config_.track_threshold_bytes, 64u * 1024) << c.entry;
    EXPECT_EQ(config_.summary, SummaryTarget::kNone) << c.entry;
  }
  Env file({"PINSHIM_SUMMARY=./yes"});
  ASSERT_TRUE(Parse(&file));
  EXPECT_STREQ(config_.summary_path, "./yes");
}

TEST_F(ConfigTest, SummaryForms) {
  const struct {
    const char* entry;
    SummaryTarget target;
    const char* path;
  } cases[] = {
      {"OTHER=1", SummaryTarget::kNone, ""},
      {"PINSHIM_SUMMARY=", SummaryTarget::kNone, ""},
      {"PINSHIM_SUMMARY=0", SummaryTarget::kNone, ""},
      {"PINSHIM_SUMMARY=1", SummaryTarget::kStderr, ""},
      {"PINSHIM_SUMMARY=/dev/stderr", SummaryTarget::kStderr, ""},
      {"PINSHIM_SUMMARY= /dev/stderr ", SummaryTarget::kStderr, ""},
      {"PINSHIM_SUMMARY=/dev/stderr2", SummaryTarget::kFile, "/dev/stderr2"},
      {"PINSHIM_SUMMARY=summary.txt", SummaryTarget::kFile, "summary.txt"},
      {"PINSHIM_SUMMARY=/var/log/pinshim-%p.txt", SummaryTarget::kFile, "/var/log/pinshim-%p.txt"},
      {"PINSHIM_SUMMARY=10", SummaryTarget::kFile, "10"},
  };
  for (const auto& c : cases) {
    Env env({c.entry});
    ASSERT_TRUE(Parse(&env)) << c.entry;
    EXPECT_EQ(config_.summary, c.target) << c.entry;
    EXPECT_STREQ(config_.summary_path, c.path) << c.entry;
  }
}

TEST_F(ConfigTest, OverlongPathIsRejected) {
  Env env({"PINSHIM_TRACE_DIR=/" + std::string(kConfigPathMax, 'a')});
  EXPECT_FALSE(Parse(&env));
  ASSERT_EQ(errors_.count, 1);
  EXPECT_NE(Error(0).find("...\": path longer than 4095 bytes; accepted: a path"),
            std::string::npos)
      << Error(0);
  EXPECT_STREQ(config_.trace_dir, "");
}

TEST_F(ConfigTest, LookupMatchesWholeNamesOnly) {
  Env env({"PINSHIM_MODEX=enforce", "XPINSHIM_MODE=enforce", "PINSHIM_MODE",
           "PINSHIM_MODE=optimize", "PINSHIM_MODE=enforce"});
  ASSERT_TRUE(Parse(&env)) << Error(0);
  // The first complete entry wins, as with getenv.
  EXPECT_EQ(config_.mode, kModeObserve | kModeOptimize);
  EXPECT_EQ(LookupEnv(nullptr, "PINSHIM_MODE"), nullptr);
}

TEST_F(ConfigTest, LookupFunctionInsteadOfEnvp) {
  ConfigInput input = {};
  input.lookup = [](const char* name, void*) -> const char* {
    return std::strcmp(name, "PINSHIM_POLICY") == 0 ? "fallback" : nullptr;
  };
  input.default_file = missing_default_.c_str();
  input.physical_bytes = kPhysical;
  ASSERT_TRUE(ParseConfig(input, &config_, &errors_));
  EXPECT_EQ(config_.policy, Policy::kFallback);
}

TEST_F(ConfigTest, TooManyErrorsAreCounted) {
  Env env({});
  for (int i = 0; i < 12; ++i) {
    env.Add(std::string("PINSHIM_CONFIG=") + dir_ + "/bad.conf");
  }
  std::string text;
  for (int i = 0; i < 11; ++i) text += "nonsense\n";
  WriteFile("bad.conf", text);
  EXPECT_FALSE(Parse(&env));
  EXPECT_EQ(errors_.count, kMaxConfigErrors);
  EXPECT_EQ(errors_.dropped, 11 - kMaxConfigErrors);
  char line[1024];
  FormatConfigWarning(config_, errors_, line, sizeof(line));
  EXPECT_NE(std::string(line).find(":1: expected \"key = value\", got "
                                   "\"nonsense\" (and 10 more); those "
                                   "settings keep their defaults; mode observe"),
            std::string::npos)
      << line;
}

TEST_F(ConfigTest, ParsingDoesNotAllocate) {
  const std::string path = WriteFile("alloc.conf",
                                     "mode = optimize\nbudget = 1G\nsummary = 1\n"
                                     "bogus = 1\n");
  Env env({"PINSHIM_CONFIG=" + path, "PINSHIM_BUDGET=12X", "PINSHIM_TRACE_DIR=/tmp"});
  char* const* envp = env.envp();
  ConfigInput input = {};
  input.envp = envp;
  // The counter sees allocations at all.
  g_allocations = 0;
  g_counting = true;
  void* volatile probe = malloc(16);  // volatile: the allocation is made
  g_counting = false;
  free(probe);
  ASSERT_EQ(g_allocations.load(), 1);

  g_allocations = 0;
  g_counting = true;
  const bool ok = ParseConfig(input, &config_, &errors_);
  char warning[1024];
  FormatConfigWarning(config_, errors_, warning, sizeof(warning));
  g_counting = false;
  EXPECT_FALSE(ok);
  EXPECT_EQ(errors_.count, 2);
  EXPECT_EQ(g_allocations.load(), 0);
}

TEST_F(ConfigTest, WarningLineNamesFallback) {
  Env env({"PINSHIM_MODE=enforce", "PINSHIM_BUDGET=4Q"});
  EXPECT_FALSE(Parse(&env));
  char line[1024];
  FormatConfigWarning(config_, errors_, line, sizeof(line));
  const std::string text(line);
  EXPECT_EQ(text.rfind("pinshim: configuration error: PINSHIM_BUDGET=\"4Q\": "
                       "unknown unit \"Q\";",
                       0),
            0u)
      << text;
  EXPECT_EQ(text.substr(text.size() - 30), "; running in observe mode only");
  EXPECT_EQ(text.find('\n'), std::string::npos);
}

TEST(ExpandPidPatternTest, ReplacesEveryPid) {
  char out[64];
  EXPECT_TRUE(ExpandPidPattern("/tmp/s.%p.%p.txt", 4242, out, sizeof(out)));
  EXPECT_STREQ(out, "/tmp/s.4242.4242.txt");
  EXPECT_TRUE(ExpandPidPattern("plain%", 1, out, sizeof(out)));
  EXPECT_STREQ(out, "plain%");
  EXPECT_FALSE(ExpandPidPattern("abcdef%p", 123456, out, 10));
  EXPECT_STREQ(out, "abcdef123");
}

TEST(FormatModeTest, ListsEveryBit) {
  char out[64];
  FormatMode(kModeObserve, out, sizeof(out));
  EXPECT_STREQ(out, "observe");
  FormatMode(kModeObserve | kModeOptimize | kModeEnforce, out, sizeof(out));
  EXPECT_STREQ(out, "observe,optimize,enforce");
}

TEST(ConfigKeyTest, TableIsIndexedByKeyAndNamesMatch) {
  for (int i = 0; i < kConfigKeyCount; ++i) {
    const ConfigKeyInfo& info = kConfigKeys[i];
    EXPECT_EQ(static_cast<int>(info.key), i);
    // The file key is the variable name without PINSHIM_, in lower case.
    std::string expected = std::string(info.variable).substr(8);
    for (char& c : expected) c = static_cast<char>(tolower(c));
    EXPECT_EQ(expected, info.file_key);
    ConfigKey key;
    ASSERT_TRUE(ConfigKeyFromVariable(info.variable, &key));
    EXPECT_EQ(key, info.key);
    ASSERT_TRUE(ConfigKeyFromFileKey(info.file_key, strlen(info.file_key), &key));
    EXPECT_EQ(key, info.key);
  }
  ConfigKey key;
  EXPECT_FALSE(ConfigKeyFromVariable("PINSHIM_CONFIG", &key));
  EXPECT_FALSE(ConfigKeyFromVariable("PINSHIM_BUDGETS", &key));
  EXPECT_FALSE(ConfigKeyFromFileKey("config", 6, &key));
  EXPECT_TRUE(ConfigKeyFromFileKey("Node_Budget", 11, &key));
  EXPECT_EQ(key, ConfigKey::kNodeBudget);
}

// --- Config file -----------------------------------------------------------

TEST_F(ConfigTest, FileSetsEverything) {
  const std::string path = WriteFile("all.conf",
                                     "# pinshim settings\n"
                                     "\n"
                                     "mode = optimize, enforce\n"
                                     "  trace_dir=/data/run#3   # inline comment after a blank\n"
                                     "summary = /tmp/sum-%p\r\n"
                                     "budget = 4G\n"
                                     "node_budget = 10%\n"
                                     "\tpolicy\t=\tfallback\t\n"
                                     "track_threshold = 128K\n"
                                     "metrics_file = /tmp/metrics\n"
                                     "sample_ms = 20\n"
                                     "pin_cap = 1G\n"
                                     "ledger_shared = 1\n"
                                     "PROFILE = /tmp/prof\n"
                                     "trace_dir = /data/run#4");  // no final newline
  Env env({"PINSHIM_CONFIG=" + path});
  ASSERT_TRUE(Parse(&env)) << Error(0);
  EXPECT_EQ(config_.mode, kModeObserve | kModeOptimize | kModeEnforce);
  EXPECT_STREQ(config_.trace_dir, "/data/run#4");  // the later line wins
  EXPECT_EQ(config_.summary, SummaryTarget::kFile);
  EXPECT_STREQ(config_.summary_path, "/tmp/sum-%p");
  EXPECT_EQ(config_.budget_bytes, 4 * kGiB);
  EXPECT_EQ(config_.node_budget_bytes, kPhysical / 10);
  EXPECT_EQ(config_.policy, Policy::kFallback);
  EXPECT_EQ(config_.track_threshold_bytes, 128u * 1024);
  EXPECT_STREQ(config_.metrics_file, "/tmp/metrics");
  EXPECT_EQ(config_.sample_ms, 20u);
  EXPECT_EQ(config_.pin_cap_bytes, kGiB);
  EXPECT_TRUE(config_.ledger_shared);
  EXPECT_STREQ(config_.profile, "/tmp/prof");
  EXPECT_EQ(std::string(config_.config_file), path);
}

TEST_F(ConfigTest, HashInsideValueIsKept) {
  const std::string path = WriteFile("hash.conf", "trace_dir = /data/run#3\n");
  Env env({"PINSHIM_CONFIG=" + path});
  ASSERT_TRUE(Parse(&env)) << Error(0);
  EXPECT_STREQ(config_.trace_dir, "/data/run#3");
}

TEST_F(ConfigTest, EnvironmentOverridesFile) {
  const std::string path =
      WriteFile("base.conf", "mode = enforce\nbudget = 4G\npolicy = evict\nsample_ms = 5\n");
  Env env({"PINSHIM_CONFIG=" + path, "PINSHIM_BUDGET=1G", "PINSHIM_MODE=optimize"});
  ASSERT_TRUE(Parse(&env)) << Error(0);
  EXPECT_EQ(config_.mode, kModeObserve | kModeOptimize);
  EXPECT_EQ(config_.budget_bytes, kGiB);
  EXPECT_EQ(config_.policy, Policy::kEvict);  // from the file
  EXPECT_EQ(config_.sample_ms, 5u);
}

TEST_F(ConfigTest, DefaultFileIsReadWhenPresent) {
  const std::string path = WriteFile("default.conf", "policy = evict\n");
  Env env({});
  ASSERT_TRUE(Parse(&env, path.c_str()));
  EXPECT_EQ(config_.policy, Policy::kEvict);
  EXPECT_EQ(std::string(config_.config_file), path);

  // An empty PINSHIM_CONFIG turns the default file off.
  Env off({"PINSHIM_CONFIG="});
  ASSERT_TRUE(Parse(&off, path.c_str()));
  EXPECT_EQ(config_.policy, Policy::kDeny);
  EXPECT_STREQ(config_.config_file, "");
}

TEST_F(ConfigTest, MissingDefaultFileIsNoError) {
  Env env({"PINSHIM_MODE=optimize"});
  ASSERT_TRUE(Parse(&env));
  EXPECT_EQ(config_.mode, kModeObserve | kModeOptimize);
}

TEST_F(ConfigTest, MissingNamedFileIsAnErrorAndFallsBack) {
  const std::string path = dir_ + "/absent.conf";
  Env env({"PINSHIM_CONFIG=" + path, "PINSHIM_MODE=enforce"});
  EXPECT_FALSE(Parse(&env));
  ASSERT_EQ(errors_.count, 1);
  EXPECT_EQ(Error(0), path + ": cannot open config file: no such file or directory");
  EXPECT_EQ(config_.mode, kModeObserve);
  EXPECT_TRUE(config_.forced_observe);
}

TEST_F(ConfigTest, UnreadableFileIsAnError) {
  const std::string path = WriteFile("secret.conf", "mode = enforce\n");
  chmod(path.c_str(), 0);
  Env env({"PINSHIM_CONFIG=" + path});
  const bool ok = Parse(&env);
  if (geteuid() == 0) {
    // root reads it regardless of the mode bits.
    EXPECT_TRUE(ok);
  } else {
    EXPECT_FALSE(ok);
    EXPECT_EQ(Error(0), path + ": cannot open config file: permission denied");
    EXPECT_TRUE(config_.forced_observe);
  }
  // A directory is not a regular file.
  Env dir({"PINSHIM_CONFIG=" + dir_});
  EXPECT_FALSE(Parse(&dir));
  EXPECT_EQ(Error(0), dir_ + ": cannot open config file: not a regular file");
  EXPECT_TRUE(config_.forced_observe);
}

TEST_F(ConfigTest, MalformedLinesNameFileAndLine) {
  const std::string path = WriteFile("bad.conf",
                                     "# comment\n"
                                     "mode = optimize\n"
                                     "just words\n"
                                     "= 5\n"
                                     "budgets = 4G\n"
                                     "budget = 12X\n"
                                     "sample_ms = 0\n"
                                     "config = /etc/other.conf\n"
                                     "policy = evict\n");
  Env env({"PINSHIM_CONFIG=" + path});
  EXPECT_FALSE(Parse(&env));
  ASSERT_EQ(errors_.count, 6);
  EXPECT_EQ(Error(0), path + ":3: expected \"key = value\", got \"just words\"");
  EXPECT_EQ(Error(1), path + ":4: expected \"key = value\", got \"= 5\"");
  EXPECT_EQ(Error(2).rfind(path + ":5: unknown key \"budgets\"; accepted: mode, "
                                  "trace_dir, summary, budget,",
                           0),
            0u)
      << Error(2);
  EXPECT_EQ(Error(3).rfind(path + ":6: budget = \"12X\": unknown unit \"X\"; "
                                  "accepted: an integer",
                           0),
            0u)
      << Error(3);
  EXPECT_EQ(Error(4), path +
                          ":7: sample_ms = \"0\": out of range; accepted: "
                          "an integer from 1 to 60000 (milliseconds)");
  EXPECT_EQ(Error(5).rfind(path + ":8: unknown key \"config\";", 0), 0u) << Error(5);
  // The budget error forces observe; valid lines still apply.
  EXPECT_TRUE(config_.forced_observe);
  EXPECT_EQ(config_.mode, kModeObserve);
  EXPECT_EQ(config_.policy, Policy::kEvict);
}

TEST_F(ConfigTest, GoodEnvironmentBudgetClearsFileBudgetFallback) {
  const std::string path = WriteFile("b.conf", "mode = enforce\nbudget = 12X\n");
  Env env({"PINSHIM_CONFIG=" + path, "PINSHIM_BUDGET=2G"});
  EXPECT_FALSE(Parse(&env));  // the file's error is still reported
  ASSERT_EQ(errors_.count, 1);
  EXPECT_EQ(Error(0).rfind(path + ":2: budget = \"12X\"", 0), 0u);
  EXPECT_FALSE(config_.forced_observe);
  EXPECT_EQ(config_.mode, kModeObserve | kModeEnforce);
  EXPECT_EQ(config_.budget_bytes, 2 * kGiB);
}

TEST_F(ConfigTest, OversizedFileIsAnError) {
  std::string text = "mode = optimize\n";
  while (text.size() <= kMaxConfigFileBytes) text += "# padding line\n";
  const std::string path = WriteFile("big.conf", text);
  Env env({"PINSHIM_CONFIG=" + path});
  EXPECT_FALSE(Parse(&env));
  EXPECT_EQ(Error(errors_.count - 1), path + ": config file larger than the limit of 65536 bytes");
  EXPECT_TRUE(config_.forced_observe);
  EXPECT_EQ(config_.mode, kModeObserve);
  EXPECT_STREQ(config_.config_file, "");
}

// A FIFO or a device named as the config file is refused at once: the
// library parses the configuration before the program's main.
TEST_F(ConfigTest, FifoOrDeviceIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/fifo.conf";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    Env env({"PINSHIM_CONFIG=" + path, "PINSHIM_MODE=enforce"});
    EXPECT_FALSE(Parse(&env));
    EXPECT_EQ(Error(0), path + ": cannot open config file: not a regular file");
    EXPECT_TRUE(config_.forced_observe);
  }
}

TEST_F(ConfigTest, OverlongLineAndNulByteAreErrors) {
  const std::string path = WriteFile(
      "long.conf", "policy = evict\ntrace_dir = /" + std::string(kMaxConfigLineBytes, 'x') +
                       "\nsample_ms = 7\nmode = opt" + std::string(1, '\0') + "imize\n");
  Env env({"PINSHIM_CONFIG=" + path});
  EXPECT_FALSE(Parse(&env));
  ASSERT_EQ(errors_.count, 2);
  EXPECT_EQ(Error(0), path + ":2: line longer than 4223 bytes");
  EXPECT_EQ(Error(1), path + ":4: line contains a NUL byte");
  EXPECT_EQ(config_.policy, Policy::kEvict);
  EXPECT_EQ(config_.sample_ms, 7u);
  EXPECT_STREQ(config_.trace_dir, "");
}

TEST_F(ConfigTest, ParseConfigValueLeavesConfigOnError) {
  SetConfigDefaults(kPhysical, &config_);
  char err[512];
  EXPECT_FALSE(ParseConfigValue(ConfigKey::kBudget, "1.5Z", &config_, err, sizeof(err)));
  EXPECT_EQ(std::string(err).rfind("unknown unit \"Z\"; accepted:", 0), 0u);
  EXPECT_FALSE(config_.has_budget);
  EXPECT_TRUE(ParseConfigValue(ConfigKey::kBudget, "1.5G", &config_, err, sizeof(err)));
  EXPECT_EQ(config_.budget_bytes, 3 * kGiB / 2);
  EXPECT_FALSE(ParseConfigValue(ConfigKey::kMode, "observe,turbo", &config_, err, sizeof(err)));
  EXPECT_EQ(config_.mode, kModeObserve);
}

TEST_F(ConfigTest, PercentWithUnknownPhysicalMemory) {
  Config config;
  SetConfigDefaults(0, &config);
  EXPECT_EQ(config.pin_cap_bytes, 0u);
  char err[512];
  EXPECT_FALSE(ParseConfigValue(ConfigKey::kBudget, "10%", &config, err, sizeof(err)));
  EXPECT_EQ(
      std::string(err).rfind("physical memory size unknown, so a percentage cannot be used", 0), 0u)
      << err;
}

// Every default, as the library has always started: a change of the table
// that moves one shows here.
TEST(ConfigTableTest, DefaultsAreTheLibrarysDefaults) {
  Config config;
  SetConfigDefaults(uint64_t{64} << 30, &config);
  EXPECT_EQ(config.mode, kModeObserve);
  EXPECT_EQ(config.policy, Policy::kDeny);
  EXPECT_EQ(config.summary, SummaryTarget::kNone);
  EXPECT_FALSE(config.has_budget);
  EXPECT_FALSE(config.has_node_budget);
  EXPECT_EQ(config.budget_bytes, 0u);
  EXPECT_EQ(config.node_budget_bytes, 0u);
  EXPECT_FALSE(config.ledger_shared);
  EXPECT_FALSE(config.forced_observe);
  EXPECT_FALSE(config.wc_guard);
  EXPECT_TRUE(config.pin_in_place);
  EXPECT_FALSE(config.verify_pages);
  EXPECT_TRUE(config.stage);
  EXPECT_EQ(config.stage_workers, 0u);
  EXPECT_EQ(config.stage_slots, 8u);
  EXPECT_FALSE(config.stage_ordered);
  EXPECT_EQ(config.stage_chunk_bytes, uint64_t{2} << 20);
  EXPECT_TRUE(config.python_frames);
  EXPECT_FALSE(config.copy_guard);
  EXPECT_TRUE(config.self_check);
  EXPECT_EQ(config.sample_ms, 10u);
  EXPECT_EQ(config.idle_trim_s, 10u);
  EXPECT_EQ(config.track_threshold_bytes, uint64_t{64} << 10);
  EXPECT_EQ(config.trace_max_bytes, uint64_t{1} << 30);
  EXPECT_EQ(config.pin_cap_bytes, uint64_t{16} << 30);
  EXPECT_EQ(config.physical_bytes, uint64_t{64} << 30);
  for (const char* path : {config.trace_dir, config.summary_path, config.metrics_file,
                           config.profile, config.ledger_path, config.config_file}) {
    EXPECT_STREQ(path, "");
  }
}

// The columns say the same as the texts help and docs print.
TEST(ConfigTableTest, TextsAgreeWithTheColumns) {
  for (int k = 0; k < kConfigKeyCount; ++k) {
    const ConfigKeyInfo& info = kConfigKeys[k];
    SCOPED_TRACE(info.variable);
    EXPECT_EQ(static_cast<int>(info.key), k) << "entries are in ConfigKey order";
    // The file key is the variable, lower case, without PINSHIM_.
    std::string file_key = std::string(info.variable).substr(8);
    for (char& c : file_key) c = static_cast<char>(tolower(c));
    EXPECT_EQ(std::string(info.variable).substr(0, 8), "PINSHIM_");
    EXPECT_EQ(file_key, info.file_key);
    ASSERT_NE(info.default_text, nullptr);
    if (info.default_value != nullptr) {
      // A default is a value its own parser accepts.
      Config config;
      SetConfigDefaults(uint64_t{64} << 30, &config);
      char err[kConfigErrorLen];
      EXPECT_TRUE(ParseConfigValue(info.key, info.default_value, &config, err, sizeof(err))) << err;
    }
    switch (info.kind) {
      case ConfigKind::kInt:
        EXPECT_EQ(std::string(info.accepted), "an integer from " + std::to_string(info.min) +
                                                  " to " + std::to_string(info.max));
        break;
      case ConfigKind::kFlag:
        EXPECT_STREQ(info.accepted, "0 or 1");
        EXPECT_TRUE(info.option == nullptr || std::string(info.metavar) == "0|1");
        break;
      case ConfigKind::kPath:
      case ConfigKind::kBudget: EXPECT_EQ(info.default_value, nullptr); break;
      default: break;
    }
    EXPECT_EQ(info.option == nullptr, info.metavar == nullptr);
    EXPECT_EQ(info.option == nullptr, info.option_brief == nullptr);
  }
}

// A range is the parser's: the bounds pass, one past them fails with the
// accepted forms.
TEST(ConfigTableTest, RangesAreParsed) {
  for (const ConfigKeyInfo& info : kConfigKeys) {
    if (info.kind != ConfigKind::kInt) continue;
    SCOPED_TRACE(info.variable);
    Config config;
    SetConfigDefaults(uint64_t{64} << 30, &config);
    char err[kConfigErrorLen];
    EXPECT_TRUE(
        ParseConfigValue(info.key, std::to_string(info.min).c_str(), &config, err, sizeof(err)));
    EXPECT_TRUE(
        ParseConfigValue(info.key, std::to_string(info.max).c_str(), &config, err, sizeof(err)));
    ASSERT_FALSE(ParseConfigValue(info.key, std::to_string(info.max + 1).c_str(), &config, err,
                                  sizeof(err)));
    EXPECT_EQ(std::string(err).rfind(std::string("out of range; accepted: ") + info.accepted, 0),
              0u)
        << err;
  }
}

}  // namespace
}  // namespace pinshim
