// pinshim's configuration, shared by the preloaded library (read once at
// start-up, inside a program someone else wrote) and by the pinshim tool
// (which validates options with the same code before running anything).
//
// The parser never allocates, never prints, never calls getenv and needs no
// static constructors: Config holds fixed arrays, the caller hands in the
// environment (an envp array such as environ, or a lookup function), and
// problems come back as one-line messages in a fixed array.
//
// Sources, later ones winning per setting: built-in defaults, the config
// file, the environment.
//
// | variable                | file key        | default            |
// |-------------------------|-----------------|--------------------|
// | PINSHIM_MODE            | mode            | observe            |
//       observe, optimize, enforce, comma-separated; observe always on
// | PINSHIM_TRACE_DIR       | trace_dir       | no trace           |
//       directory for the per-process traces
// | PINSHIM_TRACE_MAX       | trace_max       | 1G                 |
//       size, 0 = none: past it a trace keeps per-site totals only
// | PINSHIM_SUMMARY         | summary         | 0                  |
//       0 = none, 1 = stderr at exit, else a file path (%p = pid) that
//       every process appends its record to; a word such as yes, true or
//       stderr is refused (write ./yes for a file of that name)
// | PINSHIM_BUDGET          | budget          | none               |
//       size or %, above 0: pinned bytes per process
// | PINSHIM_NODE_BUDGET     | node_budget     | none               |
//       size or %, above 0: pinned bytes per node
// | PINSHIM_POLICY          | policy          | deny               |
//       deny, fallback or evict
// | PINSHIM_TRACK_THRESHOLD | track_threshold | 64K                |
//       size, at least 4K; allocations at or above it are tracked (below
//       64 KiB pinning gains nothing on the H200)
// | PINSHIM_CONFIG          | -               | /etc/pinshim.conf  |
//       config file path; "" = no file; default read only if present
// | PINSHIM_METRICS_FILE    | metrics_file    | none               |
//       file path
// | PINSHIM_SAMPLE_MS       | sample_ms       | 10                 |
//       integer 1..60000, milliseconds
// | PINSHIM_PIN_CAP         | pin_cap         | 25%                |
//       size or %: cap on pinshim's own pinning
// | PINSHIM_IDLE_TRIM_S     | idle_trim_s     | 10                 |
//       integer 0..86400, seconds: optimize mode gives back its pinned
//       memory left idle this long; 0 = only under pressure
// | PINSHIM_LEDGER_SHARED   | ledger_shared   | 0                  |
//       0 or 1
// | PINSHIM_LEDGER_PATH     | ledger_path     | /dev/shm/...       |
//       file path of the node ledger (default: /dev/shm/pinshim-ledger-<uid>
//       or, shared, /dev/shm/pinshim-ledger-shared)
// | PINSHIM_PROFILE         | profile         | none               |
//       file path
// | PINSHIM_WC_GUARD        | wc_guard        | 0                  |
//       0 or 1
// | PINSHIM_PYTHON_FRAMES   | python_frames   | 1                  |
//       0 or 1: Python frames in the trace's call sites
// | PINSHIM_COPY_GUARD      | copy_guard      | 0                  |
//       0 or 1
// | PINSHIM_SELF_CHECK      | self_check      | 1                  |
//       0 or 1: optimize mode measures its paths against the driver's
//
// Sizes: see size.h (integer or decimal, optional binary unit B/K/M/G/T with
// optional B or iB, any case, 1K = 1024; or P% of physical memory, 0 < P <=
// 100; PINSHIM_TRACK_THRESHOLD takes no percentage). Numeric and word settings
// reject an empty value; an empty path means "none".
//
// Config file: "key = value" lines; blank lines and lines starting with '#'
// are skipped, and '#' after a blank starts a comment. Keys are case-
// insensitive. At most kMaxConfigFileBytes bytes and kMaxConfigLineBytes per
// line. A file named by PINSHIM_CONFIG that cannot be read is an error; the
// default file is read only when it exists.
//
// What errors do (each also adds a message):
// - an unknown mode word: the mode falls back to observe;
// - an invalid budget, or a config file that cannot be read: the mode falls
//   back to observe, so that a budget that was meant is never silently
//   dropped while optimize or enforce carry on unbounded;
// - any other invalid value: that setting keeps its default.
// A later source that sets the same setting correctly clears the fallback.
#ifndef PINSHIM_SHIM_CORE_CONFIG_H_
#define PINSHIM_SHIM_CORE_CONFIG_H_

#include <limits.h>

#include <cstddef>
#include <cstdint>

namespace pinshim {

// Mode bits; combinable. kModeObserve is always set.
constexpr uint32_t kModeObserve = 1u << 0;
constexpr uint32_t kModeOptimize = 1u << 1;
constexpr uint32_t kModeEnforce = 1u << 2;

// What enforce mode does with a pinned allocation that would exceed a budget.
enum class Policy : uint8_t {
  kDeny = 0,      // fail it with the driver's out-of-memory error
  kFallback = 1,  // hand out pageable memory instead
  kEvict = 2,     // unpin pinshim's own cached registrations first
};

enum class SummaryTarget : uint8_t {
  kNone = 0,
  kStderr = 1,
  kFile = 2,  // Config::summary_path, "%p" still unexpanded
};

// One setting; the order is the order of documentation and help.
enum class ConfigKey : uint8_t {
  kMode = 0,
  kTraceDir,
  kSummary,
  kBudget,
  kNodeBudget,
  kPolicy,
  kTrackThreshold,
  kMetricsFile,
  kSampleMs,
  kPinCap,
  kIdleTrimS,
  kLedgerShared,
  kLedgerPath,
  kProfile,
  kWcGuard,
  kPinInPlace,
  kVerifyPages,
  kStage,
  kStageWorkers,
  kStageChunk,
  kStageSlots,
  kStageOrdered,
  kPythonFrames,
  kCopyGuard,
  kSelfCheck,
  kTraceMax,
  kCount,
};
constexpr int kConfigKeyCount = static_cast<int>(ConfigKey::kCount);

constexpr size_t kConfigPathMax = PATH_MAX;  // including the terminating NUL
constexpr size_t kMaxConfigFileBytes = 64 * 1024;
constexpr size_t kMaxConfigLineBytes = kConfigPathMax + 128;
constexpr const char* kDefaultConfigFile = "/etc/pinshim.conf";
constexpr const char* kConfigFileVariable = "PINSHIM_CONFIG";

constexpr uint64_t kDefaultTrackThreshold = 64 * 1024;
// Tracking smaller allocations slows every malloc and pinning them gains
// nothing: a smaller PINSHIM_TRACK_THRESHOLD is refused.
constexpr uint64_t kMinTrackThreshold = 4 * 1024;
constexpr uint64_t kDefaultTraceMax = uint64_t{1} << 30;
constexpr uint32_t kDefaultSampleMs = 10;
constexpr uint32_t kMaxSampleMs = 60000;
constexpr uint32_t kDefaultPinCapPercent = 25;
constexpr uint32_t kDefaultIdleTrimS = 10;
constexpr uint32_t kMaxIdleTrimS = 86400;
constexpr uint32_t kMaxStageWorkers = 32;
constexpr uint32_t kMinStageSlots = 2, kMaxStageSlots = 8;
constexpr uint64_t kMinStageChunk = uint64_t{64} << 10, kMaxStageChunk = uint64_t{64} << 20;

struct Config {
  uint32_t mode;  // kMode* bits
  Policy policy;
  SummaryTarget summary;
  bool has_budget;       // budget_bytes holds a valid PINSHIM_BUDGET
  bool has_node_budget;  // node_budget_bytes holds a valid PINSHIM_NODE_BUDGET
  bool ledger_shared;
  bool forced_observe;         // an error reduced mode to observe only
  bool wc_guard;               // sample plain CPU loads of write-combined memory
  bool pin_in_place;           // optimize mode may pin the program's own pages
  bool verify_pages;           // check pinned-in-place pages before each copy
  bool stage;                  // optimize mode stages pageable copies it does not pin
  uint32_t stage_workers;      // 0: the measured default from the core count
  uint32_t stage_slots;        // ring depth
  bool stage_ordered;          // staged uploads read their source after the stream's earlier work
  uint64_t stage_chunk_bytes;  // a ring slot
  bool python_frames;          // record Python frames with call sites
  bool copy_guard;             // catch plain CPU accesses to memory under queued copies
  bool self_check;             // optimize mode takes a path only where it beats the driver
  uint32_t sample_ms;
  uint32_t idle_trim_s;  // 0: no idle trimming
  uint64_t budget_bytes;
  uint64_t node_budget_bytes;
  uint64_t track_threshold_bytes;
  uint64_t pin_cap_bytes;
  uint64_t trace_max_bytes;           // 0: traces are not capped
  uint64_t physical_bytes;            // what percentages were taken of; 0 if unknown
  char trace_dir[kConfigPathMax];     // "" = no trace
  char summary_path[kConfigPathMax];  // set when summary == kFile
  char metrics_file[kConfigPathMax];  // "" = none
  char profile[kConfigPathMax];       // "" = none
  char ledger_path[kConfigPathMax];   // "" = the default for the user or shared
  char config_file[kConfigPathMax];   // the file that was read, "" = none
};

constexpr int kMaxConfigErrors = 8;
constexpr size_t kConfigErrorLen = 512;

// Problems found while parsing, one line each (no newline), in the order found.
struct ConfigErrors {
  int count;    // messages[0..count) are filled
  int dropped;  // further errors that did not fit
  char messages[kMaxConfigErrors][kConfigErrorLen];
};

// Names and documentation of one setting, for messages and help texts.
struct ConfigKeyInfo {
  ConfigKey key;
  const char* variable;      // "PINSHIM_BUDGET"
  const char* file_key;      // "budget"
  const char* default_text;  // "(none)"
  const char* accepted;      // the accepted forms, one clause
  const char* meaning;       // what the setting does, one sentence
};

// Every setting, indexed by ConfigKey.
extern const ConfigKeyInfo kConfigKeys[kConfigKeyCount];

// Returns the entry for key.
const ConfigKeyInfo& ConfigKeyInfoFor(ConfigKey key);

// Finds a key by its config-file name (case-insensitive); false if unknown.
bool ConfigKeyFromFileKey(const char* name, size_t len, ConfigKey* key);

// Finds a key by its variable name ("PINSHIM_BUDGET"); false if unknown.
bool ConfigKeyFromVariable(const char* name, ConfigKey* key);

// Looks a variable up in an environment array; null if absent or envp null.
const char* LookupEnv(char* const* envp, const char* name);

// Returns the value of variable "name", or null when it is not set.
using EnvLookupFn = const char* (*)(const char* name, void* ctx);

// Where ParseConfig reads from. Zero-initialise, then set what applies.
struct ConfigInput {
  char* const* envp;         // the environment, e.g. environ; used when lookup is null
  EnvLookupFn lookup;        // alternative to envp
  void* lookup_ctx;          // passed to lookup
  const char* default_file;  // read when PINSHIM_CONFIG is unset and it exists;
                             // null means kDefaultConfigFile
  uint64_t physical_bytes;   // for percentages; 0 means PhysicalMemoryBytes()
};

// Sets every field of *config to its default (25% pin cap of physical_bytes).
void SetConfigDefaults(uint64_t physical_bytes, Config* config);

// Fills *config from defaults, the config file and the environment. Returns
// true when there was nothing to report; otherwise *errors holds the
// messages and *config is still complete and usable (see the fallbacks above).
bool ParseConfig(const ConfigInput& input, Config* config, ConfigErrors* errors);

// Parses one value for key into *config, as the environment would set it.
// On failure returns false, leaves *config unchanged and writes into err the
// reason and the accepted forms, without naming the variable or the value
// (the caller knows whether it came from a variable, a file or an option).
bool ParseConfigValue(ConfigKey key, const char* value, Config* config, char* err, size_t err_len);

// Writes the library's single warning line (without newline) for a parse
// that returned false: the first message, how many more there were, and the
// mode that is in force.
void FormatConfigWarning(const Config& config, const ConfigErrors& errors, char* out,
                         size_t out_len);

// Writes the mode as "observe", "observe,enforce", ... into out.
void FormatMode(uint32_t mode, char* out, size_t out_len);

// Copies pattern into out with every "%p" replaced by pid. Returns false if
// the result does not fit (out then holds a truncated, terminated prefix).
bool ExpandPidPattern(const char* pattern, long pid, char* out, size_t out_len);

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_CONFIG_H_
