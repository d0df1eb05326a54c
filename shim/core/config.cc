#include "shim/core/config.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "shim/core/fixed_text.h"
#include "shim/core/safe_file.h"
#include "shim/core/size.h"

namespace pinshim {

namespace {

// The Config member type each kind sets.
template <ConfigKind kind>
struct FieldOf;
template <>
struct FieldOf<ConfigKind::kMode> {
  using Type = uint32_t;
};
template <>
struct FieldOf<ConfigKind::kPath> {
  using Type = char[kConfigPathMax];
};
template <>
struct FieldOf<ConfigKind::kSummary> {
  using Type = SummaryTarget;
};
template <>
struct FieldOf<ConfigKind::kBudget> {
  using Type = uint64_t;
};
template <>
struct FieldOf<ConfigKind::kPolicy> {
  using Type = Policy;
};
template <>
struct FieldOf<ConfigKind::kSize> {
  using Type = uint64_t;
};
template <>
struct FieldOf<ConfigKind::kSizeOrPercent> {
  using Type = uint64_t;
};
template <>
struct FieldOf<ConfigKind::kInt> {
  using Type = uint32_t;
};
template <>
struct FieldOf<ConfigKind::kFlag> {
  using Type = bool;
};

// Every entry's field has its kind's type, so the parser may write it by offset.
#define PINSHIM_CONFIG_KEY(key, variable, file_key, kind, field, ...)                          \
  static_assert(std::is_same<decltype(Config::field), FieldOf<ConfigKind::kind>::Type>::value, \
                "config_keys.inc: " #key "'s field is not of its kind's type");
#include "shim/core/config_keys.inc"
#undef PINSHIM_CONFIG_KEY

}  // namespace

const ConfigKeyInfo kConfigKeys[kConfigKeyCount] = {
#define PINSHIM_CONFIG_KEY(key, variable, file_key, kind, field, needs, default_value,       \
                           default_text, min, max, unit, accepted, meaning, option, metavar, \
                           option_brief)                                                     \
  {ConfigKey::key,                                                                           \
   variable,                                                                                 \
   file_key,                                                                                 \
   ConfigKind::kind,                                                                         \
   offsetof(Config, field),                                                                  \
   ConfigNeeds::needs,                                                                       \
   default_value,                                                                            \
   (default_text) != nullptr ? (default_text) : (default_value),                             \
   min,                                                                                      \
   max,                                                                                      \
   unit,                                                                                     \
   accepted,                                                                                 \
   meaning,                                                                                  \
   option,                                                                                   \
   metavar,                                                                                  \
   option_brief},
#include "shim/core/config_keys.inc"
#undef PINSHIM_CONFIG_KEY
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

// Appends "; accepted: ..." for info's values, the end of every message
// about them: the accepted forms, and the unit where there is one.
void AppendForms(FixedText* text, const ConfigKeyInfo& info) {
  text->Append("; accepted: ").Append(info.accepted);
  if (info.unit != nullptr) text->Append(" (").Append(info.unit).Append(")");
}

// Writes "<what>; accepted: ..." for info into err; returns false.
bool ValueError(const char* what, const ConfigKeyInfo& info, char* err, size_t err_len) {
  FixedText text(err, err_len);
  text.Append(what);
  AppendForms(&text, info);
  return false;
}

// An integer in [info.min, info.max].
bool ParseBoundedInt(const char* value, const ConfigKeyInfo& info, uint32_t* out, char* err,
                     size_t err_len) {
  const char* word = value;
  size_t len = Length(value);
  TrimRange(&word, &len);
  if (len == 0) return ValueError("empty", info, err, err_len);
  uint64_t n = 0;
  for (size_t i = 0; i < len; ++i) {
    if (word[i] < '0' || word[i] > '9') return ValueError("not an integer", info, err, err_len);
    if (n <= info.max) n = n * 10 + static_cast<unsigned>(word[i] - '0');
  }
  if (n < info.min || n > info.max) return ValueError("out of range", info, err, err_len);
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
  // Everything off, empty or unset; then each setting's default as its
  // table entry writes it, through the same parser as the environment (a
  // percentage fails, leaving 0, only while physical memory is unknown).
  unsigned char* bytes = reinterpret_cast<unsigned char*>(config);
  for (size_t i = 0; i < sizeof(Config); ++i) bytes[i] = 0;
  config->physical_bytes = physical_bytes;
  for (const ConfigKeyInfo& info : kConfigKeys) {
    if (info.default_value != nullptr) {
      ParseConfigValue(info.key, info.default_value, config, nullptr, 0);
    }
  }
}

namespace {

// The member of *config at `offset`, of type T (checked per entry above).
template <typename T>
T* FieldAt(Config* config, size_t offset) {
  return reinterpret_cast<T*>(reinterpret_cast<char*>(config) + offset);
}

bool ParseSummary(const char* value, Config* config, char* err, size_t err_len) {
  const char* word = value;
  size_t len = Length(value);
  TrimRange(&word, &len);
  if (len == 0 || (len == 1 && word[0] == '0')) {
    config->summary = SummaryTarget::kNone;
    config->summary_path[0] = '\0';
    return true;
  }
  // /dev/stderr is a link (to /proc/self/fd/2), which no output of pinshim
  // follows; it names the standard error the program already has.
  if ((len == 1 && word[0] == '1') || (len == 11 && memcmp(word, "/dev/stderr", 11) == 0)) {
    config->summary = SummaryTarget::kStderr;
    config->summary_path[0] = '\0';
    return true;
  }
  if (IsSummaryWord(word, len)) {
    FixedText(err, err_len)
        .Append(
            "a word, not a file name; accepted: 0 (none), 1 or /dev/stderr (stderr) or a file path "
            "(write ./")
        .Append(word, len)
        .Append(" for a file of that name)");
    return false;
  }
  if (!CopyPath(value, config->summary_path, err, err_len)) return false;
  config->summary = SummaryTarget::kFile;
  return true;
}

// A size in [info.min, info.max] (max 0: no largest), no percentage.
bool ParseBoundedSize(const char* value, const ConfigKeyInfo& info, uint64_t* out, char* err,
                      size_t err_len) {
  uint64_t bytes = 0;
  if (!ParseSizeValue(value, false, 0, &bytes, err, err_len)) return false;
  if (info.key == ConfigKey::kTrackThreshold && bytes < info.min) {
    FixedText(err, err_len)
        .Append(
            "below 4K, tracking would slow every small malloc and pinning such "
            "allocations gains nothing; accepted: a size of at least 4K");
    return false;
  }
  if (bytes < info.min || (info.max != 0 && bytes > info.max)) {
    return ValueError("out of range", info, err, err_len);
  }
  *out = bytes;
  return true;
}

}  // namespace

bool ParseConfigValue(ConfigKey key, const char* value, Config* config, char* err, size_t err_len) {
  if (value == nullptr) value = "";
  if (static_cast<int>(key) >= kConfigKeyCount) {
    FixedText(err, err_len).Append("unknown setting");
    return false;
  }
  const ConfigKeyInfo& info = kConfigKeys[static_cast<int>(key)];
  const uint64_t physical = config->physical_bytes;
  switch (info.kind) {
    case ConfigKind::kMode:
      return ParseMode(value, FieldAt<uint32_t>(config, info.offset), err, err_len);
    case ConfigKind::kPath:
      return CopyPath(value, FieldAt<char>(config, info.offset), err, err_len);
    case ConfigKind::kSummary: return ParseSummary(value, config, err, err_len);
    case ConfigKind::kBudget: {
      if (!ParseBudget(value, physical, FieldAt<uint64_t>(config, info.offset), err, err_len)) {
        return false;
      }
      (key == ConfigKey::kBudget ? config->has_budget : config->has_node_budget) = true;
      return true;
    }
    case ConfigKind::kPolicy:
      return ParsePolicy(value, FieldAt<Policy>(config, info.offset), err, err_len);
    case ConfigKind::kSize:
      return ParseBoundedSize(value, info, FieldAt<uint64_t>(config, info.offset), err, err_len);
    case ConfigKind::kSizeOrPercent:
      return ParseSizeValue(value, true, physical, FieldAt<uint64_t>(config, info.offset), err,
                            err_len);
    case ConfigKind::kInt:
      return ParseBoundedInt(value, info, FieldAt<uint32_t>(config, info.offset), err, err_len);
    case ConfigKind::kFlag:
      return ParseFlag(value, FieldAt<bool>(config, info.offset), err, err_len);
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
