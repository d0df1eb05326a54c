#include "shim/core/config.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "shim/core/fixed_text.h"
#include "shim/core/safe_file.h"
#include "shim/core/size.h"

namespace pinshim {

const ConfigKeyInfo kConfigKeys[kConfigKeyCount] = {
    {ConfigKey::kMode, "PINSHIM_MODE", "mode", "observe",
     "comma-separated combination of observe, optimize, enforce",
     "What pinshim does: observe records transfers and misuse and changes "
     "nothing; optimize makes pageable copies run at pinned speed; enforce "
     "applies the pinned-memory budgets. observe is always on."},
    {ConfigKey::kTraceDir, "PINSHIM_TRACE_DIR", "trace_dir", "no trace", "a directory path",
     "Directory the per-process trace files are written to, for pinshim "
     "report."},
    {ConfigKey::kSummary, "PINSHIM_SUMMARY", "summary", "0",
     "0 (none), 1 (stderr) or a file path where %p becomes the pid",
     "Prints a summary at exit; to a file, every process appends its own record."},
    {ConfigKey::kBudget, "PINSHIM_BUDGET", "budget", "none",
     "a size above 0 or a percentage of physical memory",
     "Most bytes the process may have pinned (enforce mode)."},
    {ConfigKey::kNodeBudget, "PINSHIM_NODE_BUDGET", "node_budget", "none",
     "a size above 0 or a percentage of physical memory",
     "Most bytes all processes under pinshim on this node may have pinned "
     "together (enforce mode)."},
    {ConfigKey::kPolicy, "PINSHIM_POLICY", "policy", "deny", "deny, fallback or evict",
     "What enforce mode does with a pinned allocation over budget: deny fails "
     "it as out of memory, fallback hands out pageable memory, evict releases "
     "pinshim's own pinned memory first."},
    {ConfigKey::kTrackThreshold, "PINSHIM_TRACK_THRESHOLD", "track_threshold", "64K",
     "a size of at least 4K (no percentage)",
     "Host allocations of at least this size are tracked; below 64 KiB "
     "pinning does not speed copies up."},
    {ConfigKey::kMetricsFile, "PINSHIM_METRICS_FILE", "metrics_file", "none", "a file path",
     "File the process's metrics (Prometheus text: copies, pinned memory, "
     "estimated time lost, and the budgets when they are enforced) are "
     "rewritten to every 2 seconds and at exit, in every mode "
     "(docs/production.md)."},
    {ConfigKey::kSampleMs, "PINSHIM_SAMPLE_MS", "sample_ms", "10", "an integer from 1 to 60000",
     "How often the trace samples pinned bytes, RSS and swap, in "
     "milliseconds."},
    {ConfigKey::kPinCap, "PINSHIM_PIN_CAP", "pin_cap", "25%",
     "a size or a percentage of physical memory",
     "Most bytes pinshim itself pins for optimize mode."},
    {ConfigKey::kIdleTrimS, "PINSHIM_IDLE_TRIM_S", "idle_trim_s", "10",
     "an integer from 0 to 86400",
     "Optimize mode gives its pinned memory (pool slabs, arena extents) back "
     "to the driver once it was idle this many seconds; 0 keeps it until "
     "the cap or a budget needs it."},
    {ConfigKey::kLedgerShared, "PINSHIM_LEDGER_SHARED", "ledger_shared", "0", "0 or 1",
     "1 makes the node's budget ledger one shared by the users of its group "
     "(created mode 0660) instead of one per user (docs/production.md)."},
    {ConfigKey::kLedgerPath, "PINSHIM_LEDGER_PATH", "ledger_path", "/dev/shm/pinshim-ledger-<uid>",
     "a file path",
     "Where the node's budget ledger is kept, instead of /dev/shm/pinshim-ledger-<uid> (or "
     "/dev/shm/pinshim-ledger-shared); every process sharing a node budget must name the "
     "same file."},
    {ConfigKey::kProfile, "PINSHIM_PROFILE", "profile", "none", "a file path",
     "Optimize mode only: a profile of hot allocation sites (pinshim report "
     "--profile-out) whose allocations are served from the pinned arena from "
     "the first one on."},
    {ConfigKey::kWcGuard, "PINSHIM_WC_GUARD", "wc_guard", "0", "0 or 1",
     "1 samples plain CPU loads of write-combined pinned memory by briefly "
     "protecting one of its pages at a time (needs a trace)."},
    {ConfigKey::kPinInPlace, "PINSHIM_PIN_IN_PLACE", "pin_in_place", "1", "0 or 1",
     "Optimize mode only: 0 never pins the program's own pages (no registration "
     "cache, no arena for hot allocation sites), for programs that change their "
     "pages in ways no hook sees (raw system calls, io_uring)."},
    {ConfigKey::kVerifyPages, "PINSHIM_VERIFY_PAGES", "verify_pages", "0", "0 or 1",
     "Optimize mode only: 1 checks, before each copy through memory pinshim pinned "
     "in place, that the pages are still the pinned ones (/proc/self/pagemap; needs "
     "CAP_SYS_ADMIN), and unpins them otherwise."},
    {ConfigKey::kStage, "PINSHIM_STAGE", "stage", "1", "0 or 1",
     "Optimize mode only: 1 runs copies of pageable memory it does not pin through "
     "rings of pinned memory, copied by worker threads; 0 leaves them to the driver."},
    {ConfigKey::kStageWorkers, "PINSHIM_STAGE_WORKERS", "stage_workers", "0",
     "an integer from 0 to 32",
     "Optimize mode only: threads that copy staged copies; 0 takes three quarters of "
     "the cores, at most 12 (measured on the H200's host); fewer are used while the "
     "CPUs are busy."},
    {ConfigKey::kStageChunk, "PINSHIM_STAGE_CHUNK", "stage_chunk", "2M", "a size from 64K to 64M",
     "Optimize mode only: the size of one slot of a staging ring (rounded down to "
     "whole pages); the default was measured best on the H200."},
    {ConfigKey::kStageSlots, "PINSHIM_STAGE_SLOTS", "stage_slots", "8", "an integer from 2 to 8",
     "Optimize mode only: the slots of one staging ring (copies in flight at once)."},
    {ConfigKey::kStageOrdered, "PINSHIM_STAGE_ORDERED", "stage_ordered", "0", "0 or 1",
     "Optimize mode only: 1 makes a staged upload, and an asynchronous upload of "
     "memory pinned in place, read its source only once the work queued before it "
     "on its stream completed (the synchronization the CUDA documentation states "
     "for pageable memory); 0 reads it as the driver does (measured on the H200; "
     "docs/optimize.md, \"Staged copies\")."},
    {ConfigKey::kPythonFrames, "PINSHIM_PYTHON_FRAMES", "python_frames", "1", "0 or 1",
     "1 records the calling thread's Python frames (file, line, function) "
     "with every call site in Python programs (CPython 3.10 to 3.13); 0 "
     "keeps native frames only."},
    {ConfigKey::kCopyGuard, "PINSHIM_COPY_GUARD", "copy_guard", "0", "0 or 1",
     "1 also catches plain CPU loads and stores of page-locked memory under "
     "a queued asynchronous copy (copy-race) by protecting its pages until "
     "the copy is seen waited for (needs a trace)."},
    {ConfigKey::kSelfCheck, "PINSHIM_SELF_CHECK", "self_check", "1", "0 or 1",
     "1 makes optimize mode measure each of its paths (staging, pinning in "
     "place) against the driver's own, per direction and size, and stop "
     "taking one where it is slower; 0 takes every path without measuring "
     "(for tests and benchmarks of the paths themselves)."},
    {ConfigKey::kTraceMax, "PINSHIM_TRACE_MAX", "trace_max", "1G", "a size, 0 for none",
     "Most bytes of per-event detail in one process's trace; past it the trace "
     "keeps per-site totals of the copies only (needs a trace; docs/observe.md)."},
};

namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Case-insensitive match of text[0..n) against a lower-case word.
bool WordIs(const char* text, size_t n, const char* word) {
  size_t i = 0;
  for (; i < n; ++i) {
    if (word[i] == '\0' || Lower(text[i]) != word[i]) return false;
  }
  return word[i] == '\0';
}

size_t Length(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

// Trims blanks at both ends of a word-valued setting.
void TrimRange(const char** begin, size_t* len) {
  while (*len > 0 && IsBlank(**begin)) ++*begin, --*len;
  while (*len > 0 && IsBlank((*begin)[*len - 1])) --*len;
}

bool CopyPath(const char* value, char* dest, char* err, size_t err_len) {
  const size_t n = Length(value);
  if (n >= kConfigPathMax) {
    FixedText(err, err_len)
        .Append("path longer than ")
        .AppendUint(kConfigPathMax - 1)
        .Append(" bytes; accepted: a path");
    return false;
  }
  for (size_t i = 0; i <= n; ++i) dest[i] = value[i];
  return true;
}

bool ParseMode(const char* value, uint32_t* mode, char* err, size_t err_len) {
  const char* kForms =
      "; accepted: observe, optimize, enforce, or a comma-separated "
      "combination such as optimize,enforce";
  uint32_t bits = kModeObserve;
  const char* p = value;
  while (true) {
    const char* word = p;
    while (*p != '\0' && *p != ',') ++p;
    size_t len = static_cast<size_t>(p - word);
    TrimRange(&word, &len);
    if (len == 0) {
      FixedText(err, err_len).Append("empty mode word").Append(kForms);
      return false;
    }
    if (WordIs(word, len, "observe")) {
      bits |= kModeObserve;
    } else if (WordIs(word, len, "optimize")) {
      bits |= kModeOptimize;
    } else if (WordIs(word, len, "enforce")) {
      bits |= kModeEnforce;
    } else {
      FixedText(err, err_len)
          .Append("unknown mode \"")
          .Append(word, len)
          .Append("\"")
          .Append(kForms);
      return false;
    }
    if (*p == '\0') break;
    ++p;  // past the comma
  }
  *mode = bits;
  return true;
}

bool ParsePolicy(const char* value, Policy* policy, char* err, size_t err_len) {
  const char* word = value;
  size_t len = Length(value);
  TrimRange(&word, &len);
  if (WordIs(word, len, "deny")) {
    *policy = Policy::kDeny;
  } else if (WordIs(word, len, "fallback")) {
    *policy = Policy::kFallback;
  } else if (WordIs(word, len, "evict")) {
    *policy = Policy::kEvict;
  } else {
    FixedText(err, err_len)
        .Append(len == 0 ? "empty" : "unknown policy")
        .Append("; accepted: deny, fallback, evict");
    return false;
  }
  return true;
}

// An integer in [lo, hi]; `forms` ("; accepted: ...") ends every error.
bool ParseBoundedInt(const char* value, uint32_t lo, uint32_t hi, const char* forms, uint32_t* out,
                     char* err, size_t err_len) {
  const char* word = value;
  size_t len = Length(value);
  TrimRange(&word, &len);
  if (len == 0) {
    FixedText(err, err_len).Append("empty").Append(forms);
    return false;
  }
  uint64_t n = 0;
  for (size_t i = 0; i < len; ++i) {
    if (word[i] < '0' || word[i] > '9') {
      FixedText(err, err_len).Append("not an integer").Append(forms);
      return false;
    }
    if (n <= hi) n = n * 10 + static_cast<unsigned>(word[i] - '0');
  }
  if (n < lo || n > hi) {
    FixedText(err, err_len).Append("out of range").Append(forms);
    return false;
  }
  *out = static_cast<uint32_t>(n);
  return true;
}

bool ParseFlag(const char* value, bool* flag, char* err, size_t err_len) {
  const char* word = value;
  size_t len = Length(value);
  TrimRange(&word, &len);
  if (len == 1 && (word[0] == '0' || word[0] == '1')) {
    *flag = word[0] == '1';
    return true;
  }
  FixedText(err, err_len).Append(len == 0 ? "empty" : "not 0 or 1").Append("; accepted: 0 or 1");
  return false;
}

// A summary target that is a word, not a path: taken for a mistake.
bool IsSummaryWord(const char* word, size_t len) {
  static const char* const kWords[] = {"yes", "no", "true",   "false",  "on",  "off",
                                       "y",   "n",  "stderr", "stdout", "none"};
  for (const char* w : kWords) {
    if (WordIs(word, len, w)) return true;
  }
  return false;
}

bool ParseSizeValue(const char* value, bool percent_allowed, uint64_t physical, uint64_t* out,
                    char* err, size_t err_len) {
  if (percent_allowed && physical == 0) {
    // Unknown physical memory: say so rather than "not accepted here".
    const char* p = value;
    while (*p != '\0' && *p != '%') ++p;
    if (*p == '%') {
      FixedText(err, err_len)
          .Append(
              "physical memory size unknown, so a percentage cannot be "
              "used; accepted: ")
          .Append(SizeFormsText(false));
      return false;
    }
  }
  return ParseSize(value, percent_allowed ? physical : 0, out, err, err_len);
}

// A budget: a size or percentage that comes to more than 0 bytes. A budget
// of 0 would refuse every pinning, which is never what was meant; no budget
// is said by leaving the setting out.
bool ParseBudget(const char* value, uint64_t physical, uint64_t* out, char* err, size_t err_len) {
  uint64_t bytes = 0;
  if (!ParseSizeValue(value, true, physical, &bytes, err, err_len)) return false;
  if (bytes == 0) {
    FixedText(err, err_len)
        .Append(
            "a budget of 0 bytes would refuse every pinning; accepted: a size above 0 or a "
            "percentage (leave the budget unset for none)");
    return false;
  }
  *out = bytes;
  return true;
}

// Appends the reason for errno value e. strerror is avoided: it may
// allocate while loading translations.
void AppendErrno(FixedText* text, int e) {
  switch (e) {
    case ENOENT: text->Append("no such file or directory"); return;
    case EACCES: text->Append("permission denied"); return;
    case EISDIR: text->Append("is a directory"); return;
    case ENOTDIR: text->Append("a path component is not a directory"); return;
    case ELOOP: text->Append("too many symbolic links"); return;
    case ENAMETOOLONG: text->Append("file name too long"); return;
    case EIO: text->Append("input/output error"); return;
    case EMFILE:
    case ENFILE: text->Append("too many open files"); return;
    case kFileNotRegular:
    case kFileTooLarge: text->Append(SafeFileReason(e)); return;
    default: text->Append("error ").AppendUint(static_cast<uint64_t>(e));
  }
}

// State shared by the steps of one ParseConfig call.
struct ParseState {
  const ConfigInput* input;
  Config* config;
  ConfigErrors* errors;
  bool invalid[kConfigKeyCount];  // the setting's latest value was rejected
  bool file_unreadable;
};

const char* Lookup(const ParseState& state, const char* name) {
  if (state.input->lookup != nullptr) {
    return state.input->lookup(name, state.input->lookup_ctx);
  }
  return LookupEnv(state.input->envp, name);
}

// Returns the next free message slot, or null (counting it as dropped).
char* NewError(ConfigErrors* errors) {
  if (errors->count >= kMaxConfigErrors) {
    ++errors->dropped;
    return nullptr;
  }
  return errors->messages[errors->count++];
}

// Starts a message about the config file: "PATH:LINE: " or "PATH: ".
void AppendFileLocation(FixedText* msg, const char* path, long line) {
  msg->Append(path);
  if (line > 0) msg->Append(":").AppendUint(static_cast<uint64_t>(line));
  msg->Append(": ");
}

// Applies one value from the environment (file_path null) or from line
// "line" of the config file, recording a message when it is rejected.
void Apply(ParseState* state, ConfigKey key, const char* value, const char* file_path, long line) {
  char reason[kConfigErrorLen];
  const int index = static_cast<int>(key);
  if (ParseConfigValue(key, value, state->config, reason, sizeof(reason))) {
    state->invalid[index] = false;
    return;
  }
  state->invalid[index] = true;
  char* slot = NewError(state->errors);
  if (slot == nullptr) return;
  FixedText msg(slot, kConfigErrorLen);
  const ConfigKeyInfo& info = kConfigKeys[index];
  if (file_path != nullptr) {
    AppendFileLocation(&msg, file_path, line);
    msg.Append(info.file_key).Append(" = ");
  } else {
    msg.Append(info.variable).Append("=");
  }
  msg.AppendQuoted(value, 80).Append(": ").Append(reason);
}

// Handles one line of the config file; "line" is modifiable, NUL-free and
// has room for a terminator after len bytes.
void ParseFileLine(ParseState* state, const char* path, long line_no, char* line, size_t len) {
  if (len > 0 && line[len - 1] == '\r') --len;
  // A comment starts at '#' at the start of the line or after a blank, so a
  // value may still contain '#' (a path like /data/run#3).
  for (size_t i = 0; i < len; ++i) {
    if (line[i] == '#' && (i == 0 || IsBlank(line[i - 1]))) {
      len = i;
      break;
    }
  }
  char* text = line;
  while (len > 0 && IsBlank(*text)) ++text, --len;
  while (len > 0 && IsBlank(text[len - 1])) --len;
  if (len == 0) return;
  text[len] = '\0';

  size_t eq = 0;
  while (eq < len && text[eq] != '=') ++eq;
  const char* key_text = text;
  size_t key_len = eq;
  TrimRange(&key_text, &key_len);
  ConfigKey key;
  if (eq == len || key_len == 0 || !ConfigKeyFromFileKey(key_text, key_len, &key)) {
    char* slot = NewError(state->errors);
    if (slot == nullptr) return;
    FixedText msg(slot, kConfigErrorLen);
    AppendFileLocation(&msg, path, line_no);
    if (eq == len || key_len == 0) {
      msg.Append("expected \"key = value\", got ").AppendQuoted(text, 80);
    } else {
      text[key_text - text + key_len] = '\0';
      msg.Append("unknown key ").AppendQuoted(key_text, 80).Append("; accepted: ");
      for (int i = 0; i < kConfigKeyCount; ++i) {
        msg.Append(i == 0 ? "" : ", ").Append(kConfigKeys[i].file_key);
      }
    }
    return;
  }
  char* value = text + eq + 1;
  while (IsBlank(*value)) ++value;  // trailing blanks went with the line's
  Apply(state, key, value, path, line_no);
}

// Records a problem with the file as a whole; such a file counts as
// unreadable, so the mode falls back to observe.
void FileProblem(ParseState* state, const char* path, const char* what, int err_no,
                 uint64_t limit) {
  state->file_unreadable = true;
  char* slot = NewError(state->errors);
  if (slot == nullptr) return;
  FixedText msg(slot, kConfigErrorLen);
  AppendFileLocation(&msg, path, 0);
  msg.Append(what);
  if (err_no != 0) AppendErrno(&msg, err_no);
  if (limit != 0) msg.AppendUint(limit).Append(" bytes");
}

// Reads the config file at "path" in fixed-size pieces (no allocation, a
// bounded stack) and applies each line. "named": the file was asked for
// explicitly, so its absence is an error too.
void ReadConfigFile(ParseState* state, const char* path, bool named) {
  // Without blocking: a FIFO or a device at the name is refused at once
  // instead of holding up the program before main.
  const int fd = OpenRegularForRead(path, kMaxConfigFileBytes, nullptr);
  if (fd == -kFileTooLarge) {
    FileProblem(state, path, "config file larger than the limit of ", 0, kMaxConfigFileBytes);
    return;
  }
  if (fd < 0) {
    const int e = -fd;
    if (!named && e == ENOENT) return;
    FileProblem(state, path, "cannot open config file: ", e, 0);
    return;
  }

  char chunk[4096];
  char line[kMaxConfigLineBytes];
  size_t line_len = 0;
  bool line_too_long = false;
  bool line_has_nul = false;
  long line_no = 1;
  size_t total = 0;
  bool ok = true;

  auto finish_line = [&]() {
    if (line_too_long || line_has_nul) {
      char* slot = NewError(state->errors);
      if (slot != nullptr) {
        FixedText msg(slot, kConfigErrorLen);
        AppendFileLocation(&msg, path, line_no);
        if (line_too_long) {
          msg.Append("line longer than ").AppendUint(kMaxConfigLineBytes - 1).Append(" bytes");
        } else {
          msg.Append("line contains a NUL byte");
        }
      }
    } else {
      ParseFileLine(state, path, line_no, line, line_len);
    }
    line_len = 0;
    line_too_long = false;
    line_has_nul = false;
  };

  while (ok) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      FileProblem(state, path, "cannot read config file: ", errno, 0);
      ok = false;
      break;
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
    if (total > kMaxConfigFileBytes) {
      FileProblem(state, path, "config file larger than the limit of ", 0, kMaxConfigFileBytes);
      ok = false;
      break;
    }
    for (ssize_t i = 0; i < n; ++i) {
      const char c = chunk[i];
      if (c == '\n') {
        finish_line();
        ++line_no;
      } else if (c == '\0') {
        line_has_nul = true;
      } else if (line_len + 1 < sizeof(line)) {
        line[line_len++] = c;
      } else {
        line_too_long = true;
      }
    }
  }
  if (ok && (line_len > 0 || line_too_long || line_has_nul)) finish_line();
  close(fd);
  if (ok) CopyPath(path, state->config->config_file, nullptr, 0);
}

}  // namespace

const ConfigKeyInfo& ConfigKeyInfoFor(ConfigKey key) { return kConfigKeys[static_cast<int>(key)]; }

bool ConfigKeyFromFileKey(const char* name, size_t len, ConfigKey* key) {
  for (const ConfigKeyInfo& info : kConfigKeys) {
    if (WordIs(name, len, info.file_key)) {
      *key = info.key;
      return true;
    }
  }
  return false;
}

bool ConfigKeyFromVariable(const char* name, ConfigKey* key) {
  for (const ConfigKeyInfo& info : kConfigKeys) {
    const char* a = name;
    const char* b = info.variable;
    while (*a != '\0' && *a == *b) ++a, ++b;
    if (*a == '\0' && *b == '\0') {
      *key = info.key;
      return true;
    }
  }
  return false;
}

const char* LookupEnv(char* const* envp, const char* name) {
  if (envp == nullptr || name == nullptr) return nullptr;
  for (char* const* entry = envp; *entry != nullptr; ++entry) {
    const char* e = *entry;
    const char* n = name;
    while (*n != '\0' && *e == *n) ++e, ++n;
    if (*n == '\0' && *e == '=') return e + 1;
  }
  return nullptr;
}

void SetConfigDefaults(uint64_t physical_bytes, Config* config) {
  config->mode = kModeObserve;
  config->policy = Policy::kDeny;
  config->summary = SummaryTarget::kNone;
  config->has_budget = false;
  config->has_node_budget = false;
  config->ledger_shared = false;
  config->wc_guard = false;
  config->pin_in_place = true;
  config->verify_pages = false;
  config->stage = true;
  config->stage_workers = 0;
  config->stage_slots = 8;
  config->stage_ordered = false;
  config->stage_chunk_bytes = uint64_t{2} << 20;
  config->python_frames = true;
  config->copy_guard = false;
  config->self_check = true;
  config->forced_observe = false;
  config->sample_ms = kDefaultSampleMs;
  config->idle_trim_s = kDefaultIdleTrimS;
  config->budget_bytes = 0;
  config->node_budget_bytes = 0;
  config->track_threshold_bytes = kDefaultTrackThreshold;
  config->trace_max_bytes = kDefaultTraceMax;
  config->pin_cap_bytes = static_cast<uint64_t>(static_cast<unsigned __int128>(physical_bytes) *
                                                kDefaultPinCapPercent / 100);
  config->physical_bytes = physical_bytes;
  config->trace_dir[0] = '\0';
  config->summary_path[0] = '\0';
  config->metrics_file[0] = '\0';
  config->profile[0] = '\0';
  config->ledger_path[0] = '\0';
  config->config_file[0] = '\0';
}

bool ParseConfigValue(ConfigKey key, const char* value, Config* config, char* err, size_t err_len) {
  if (value == nullptr) value = "";
  const uint64_t physical = config->physical_bytes;
  switch (key) {
    case ConfigKey::kMode: return ParseMode(value, &config->mode, err, err_len);
    case ConfigKey::kTraceDir: return CopyPath(value, config->trace_dir, err, err_len);
    case ConfigKey::kTraceMax:
      return ParseSizeValue(value, false, physical, &config->trace_max_bytes, err, err_len);
    case ConfigKey::kSummary: {
      const char* word = value;
      size_t len = Length(value);
      TrimRange(&word, &len);
      if (len == 0 || (len == 1 && word[0] == '0')) {
        config->summary = SummaryTarget::kNone;
        config->summary_path[0] = '\0';
        return true;
      }
      if (len == 1 && word[0] == '1') {
        config->summary = SummaryTarget::kStderr;
        config->summary_path[0] = '\0';
        return true;
      }
      if (IsSummaryWord(word, len)) {
        FixedText(err, err_len)
            .Append(
                "a word, not a file name; accepted: 0 (none), 1 (stderr) or a file path "
                "(write ./")
            .Append(word, len)
            .Append(" for a file of that name)");
        return false;
      }
      if (!CopyPath(value, config->summary_path, err, err_len)) return false;
      config->summary = SummaryTarget::kFile;
      return true;
    }
    case ConfigKey::kBudget:
      if (!ParseBudget(value, physical, &config->budget_bytes, err, err_len)) return false;
      config->has_budget = true;
      return true;
    case ConfigKey::kNodeBudget:
      if (!ParseBudget(value, physical, &config->node_budget_bytes, err, err_len)) return false;
      config->has_node_budget = true;
      return true;
    case ConfigKey::kPolicy: return ParsePolicy(value, &config->policy, err, err_len);
    case ConfigKey::kTrackThreshold: {
      uint64_t bytes = 0;
      if (!ParseSizeValue(value, false, physical, &bytes, err, err_len)) return false;
      if (bytes < kMinTrackThreshold) {
        FixedText(err, err_len)
            .Append(
                "below 4K, tracking would slow every small malloc and pinning such "
                "allocations gains nothing; accepted: a size of at least 4K");
        return false;
      }
      config->track_threshold_bytes = bytes;
      return true;
    }
    case ConfigKey::kMetricsFile: return CopyPath(value, config->metrics_file, err, err_len);
    case ConfigKey::kSampleMs:
      return ParseBoundedInt(value, 1, kMaxSampleMs,
                             "; accepted: an integer from 1 to 60000 (milliseconds)",
                             &config->sample_ms, err, err_len);
    case ConfigKey::kPinCap:
      return ParseSizeValue(value, true, physical, &config->pin_cap_bytes, err, err_len);
    case ConfigKey::kIdleTrimS:
      return ParseBoundedInt(value, 0, kMaxIdleTrimS,
                             "; accepted: an integer from 0 to 86400 (seconds)",
                             &config->idle_trim_s, err, err_len);
    case ConfigKey::kLedgerShared: return ParseFlag(value, &config->ledger_shared, err, err_len);
    case ConfigKey::kLedgerPath: return CopyPath(value, config->ledger_path, err, err_len);
    case ConfigKey::kProfile: return CopyPath(value, config->profile, err, err_len);
    case ConfigKey::kWcGuard: return ParseFlag(value, &config->wc_guard, err, err_len);
    case ConfigKey::kPinInPlace: return ParseFlag(value, &config->pin_in_place, err, err_len);
    case ConfigKey::kVerifyPages: return ParseFlag(value, &config->verify_pages, err, err_len);
    case ConfigKey::kStage: return ParseFlag(value, &config->stage, err, err_len);
    case ConfigKey::kStageWorkers:
      return ParseBoundedInt(value, 0, kMaxStageWorkers, "; accepted: an integer from 0 to 32",
                             &config->stage_workers, err, err_len);
    case ConfigKey::kStageChunk: {
      uint64_t bytes = 0;
      if (!ParseSizeValue(value, false, physical, &bytes, err, err_len)) return false;
      if (bytes < kMinStageChunk || bytes > kMaxStageChunk) {
        FixedText(err, err_len).Append("out of range; accepted: a size from 64K to 64M");
        return false;
      }
      config->stage_chunk_bytes = bytes;
      return true;
    }
    case ConfigKey::kStageSlots:
      return ParseBoundedInt(value, kMinStageSlots, kMaxStageSlots,
                             "; accepted: an integer from 2 to 8", &config->stage_slots, err,
                             err_len);
    case ConfigKey::kStageOrdered: return ParseFlag(value, &config->stage_ordered, err, err_len);
    case ConfigKey::kPythonFrames: return ParseFlag(value, &config->python_frames, err, err_len);
    case ConfigKey::kCopyGuard: return ParseFlag(value, &config->copy_guard, err, err_len);
    case ConfigKey::kSelfCheck: return ParseFlag(value, &config->self_check, err, err_len);
    case ConfigKey::kCount: break;
  }
  FixedText(err, err_len).Append("unknown setting");
  return false;
}

bool ParseConfig(const ConfigInput& input, Config* config, ConfigErrors* errors) {
  const uint64_t physical =
      input.physical_bytes != 0 ? input.physical_bytes : PhysicalMemoryBytes();
  SetConfigDefaults(physical, config);
  errors->count = 0;
  errors->dropped = 0;

  ParseState state;
  state.input = &input;
  state.config = config;
  state.errors = errors;
  for (bool& invalid : state.invalid) invalid = false;
  state.file_unreadable = false;

  const char* named = Lookup(state, kConfigFileVariable);
  if (named != nullptr) {
    // An empty PINSHIM_CONFIG turns the default file off.
    if (named[0] != '\0') ReadConfigFile(&state, named, true);
  } else {
    ReadConfigFile(&state, input.default_file != nullptr ? input.default_file : kDefaultConfigFile,
                   false);
  }

  for (const ConfigKeyInfo& info : kConfigKeys) {
    const char* value = Lookup(state, info.variable);
    if (value != nullptr) Apply(&state, info.key, value, nullptr, 0);
  }

  if (state.invalid[static_cast<int>(ConfigKey::kMode)] ||
      state.invalid[static_cast<int>(ConfigKey::kBudget)] ||
      state.invalid[static_cast<int>(ConfigKey::kNodeBudget)] || state.file_unreadable) {
    config->mode = kModeObserve;
    config->forced_observe = true;
  }
  return errors->count == 0 && errors->dropped == 0;
}

void FormatMode(uint32_t mode, char* out, size_t out_len) {
  FixedText text(out, out_len);
  text.Append("observe");
  if (mode & kModeOptimize) text.Append(",optimize");
  if (mode & kModeEnforce) text.Append(",enforce");
}

void FormatConfigWarning(const Config& config, const ConfigErrors& errors, char* out,
                         size_t out_len) {
  FixedText text(out, out_len);
  text.Append("pinshim: configuration error: ");
  text.Append(errors.count > 0 ? errors.messages[0] : "unknown");
  const int more = errors.count - 1 + errors.dropped;
  if (more > 0) {
    text.Append(" (and ").AppendUint(static_cast<uint64_t>(more)).Append(" more)");
  }
  if (config.forced_observe) {
    text.Append("; running in observe mode only");
  } else {
    char mode[32];
    FormatMode(config.mode, mode, sizeof(mode));
    text.Append("; those settings keep their defaults; mode ").Append(mode);
  }
}

bool ExpandPidPattern(const char* pattern, long pid, char* out, size_t out_len) {
  if (out == nullptr || out_len == 0) return false;
  char digits[24];
  FixedText pid_text(digits, sizeof(digits));
  if (pid < 0) {
    pid_text.Append("-");
    pid = -pid;
  }
  pid_text.AppendUint(static_cast<uint64_t>(pid));
  size_t used = 0;
  bool fits = true;
  auto put = [&](char c) {
    if (used + 1 < out_len) {
      out[used++] = c;
    } else {
      fits = false;
    }
  };
  for (const char* p = pattern; p != nullptr && *p != '\0'; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      for (const char* d = digits; *d != '\0'; ++d) put(*d);
      ++p;
    } else {
      put(*p);
    }
  }
  out[used] = '\0';
  return fits;
}

}  // namespace pinshim
