#include "analyzer/run_command.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "analyzer/help.h"
#include "analyzer/ineffective_settings.h"
#include "analyzer/library_path.h"
#include "shim/core/config.h"
#include "shim/core/size.h"
#include "shim/hooks/profile_file.h"
#include "shim/optimize/site_profile.h"

extern char** environ;

namespace pinshim {
namespace {

enum class Value {
  kRequired,  // --opt VALUE or --opt=VALUE
  kOptional,  // --opt or --opt=VALUE
};

enum class PathKind { kNone, kPath, kSummary };

struct RunOption {
  const char* name;
  const char* metavar;
  const char* variable;
  Value value;
  const char* implicit;  // the value when an optional value is left out
  PathKind path;         // relative paths are made absolute
  const char* brief;     // one line for pinshim run --help
};

// Every option sets one variable; the library reads only the variables, so
// pinshim run and a hand-set environment behave the same. The options are
// the settings' (config_keys.inc) and --config. The help groups options by
// what they need to act (ineffective_settings.h), in this order; the full
// description of each is its variable's (pinshim help settings).
const std::vector<RunOption>& RunOptions() {
  static const std::vector<RunOption>* options = [] {
    auto* list = new std::vector<RunOption>;
    for (const ConfigKeyInfo& info : kConfigKeys) {
      if (info.option == nullptr) continue;
      const bool optional = info.kind == ConfigKind::kFlag || info.kind == ConfigKind::kSummary;
      const PathKind path = info.kind == ConfigKind::kPath      ? PathKind::kPath
                            : info.kind == ConfigKind::kSummary ? PathKind::kSummary
                                                                : PathKind::kNone;
      list->push_back({info.option, info.metavar, info.variable,
                       optional ? Value::kOptional : Value::kRequired, optional ? "1" : nullptr,
                       path, info.option_brief});
    }
    list->push_back({"--config", "FILE", kConfigFileVariable, Value::kRequired, nullptr,
                     PathKind::kPath, "read settings from FILE instead of /etc/pinshim.conf"});
    return list;
  }();
  return *options;
}

// The help's groups, by what their options need.
struct HelpGroup {
  const char* title;
  Needs needs[2];
};
const HelpGroup kHelpGroups[] = {
    {"Basics:", {Needs::kNothing, Needs::kNothing}},
    {"With a trace (--trace-dir):", {Needs::kTrace, Needs::kTrace}},
    {"Optimize mode (--mode optimize):", {Needs::kOptimize, Needs::kOptimize}},
    {"Enforce mode (--mode enforce):", {Needs::kEnforce, Needs::kNodeLedger}},
};

// What an option needs: that of the setting it sets (none for --config).
Needs OptionNeeds(const RunOption& option) {
  ConfigKey key;
  return ConfigKeyFromVariable(option.variable, &key) ? NeedsOf(key) : Needs::kNothing;
}

const char kUsage[] = "usage: pinshim run [OPTIONS] [--] CMD [ARGS...]";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "pinshim run: %s\n", message.c_str());
  return kExitUsage;
}

std::string CurrentDirectory() {
  std::vector<char> buf(PATH_MAX);
  while (getcwd(buf.data(), buf.size()) == nullptr) {
    if (errno != ERANGE) return "";
    buf.resize(buf.size() * 2);
  }
  return buf.data();
}

// The program may change directory before writing, so relative paths are
// anchored where pinshim run was started.
std::string MakeAbsolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const std::string cwd = CurrentDirectory();
  if (cwd.empty()) return path;
  return cwd + (cwd == "/" ? "" : "/") + path;
}

// Creates dir and its missing parents. Returns "" or the reason it failed.
std::string MakeDirectories(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    return S_ISDIR(st.st_mode) ? "" : "exists and is not a directory";
  }
  if (errno != ENOENT) {
    return std::string("cannot create directory: ") + std::strerror(errno);
  }
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    const std::string parent_problem = MakeDirectories(dir.substr(0, slash));
    if (!parent_problem.empty()) return parent_problem;
  }
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    return std::string("cannot create directory: ") + std::strerror(errno);
  }
  return "";
}

// Ensures the trace directory exists and that a file can be created in it,
// since the library can only warn once the program is running.
std::string PrepareTraceDirectory(const std::string& dir) {
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const std::string problem = MakeDirectories(trimmed);
  if (!problem.empty()) return problem;
  std::string probe = trimmed + "/.pinshim-write-test-XXXXXX";
  const int fd = mkstemp(&probe[0]);
  if (fd < 0) {
    return std::string("directory is not writable: ") + std::strerror(errno);
  }
  close(fd);
  unlink(probe.c_str());
  return "";
}

// Puts library first in LD_PRELOAD, keeping every other entry in order.
std::string PreloadValue(const std::string& library, const char* existing) {
  std::string result = library;
  if (existing == nullptr) return result;
  const std::string old = existing;
  size_t pos = 0;
  while (pos <= old.size()) {
    size_t end = old.find_first_of(" :", pos);
    if (end == std::string::npos) end = old.size();
    const std::string entry = old.substr(pos, end - pos);
    if (!entry.empty() && entry != library) result += ":" + entry;
    pos = end + 1;
  }
  return result;
}

const RunOption* FindOption(const std::string& name) {
  for (const RunOption& option : RunOptions()) {
    if (name == option.name) return &option;
  }
  return nullptr;
}

// Runs the command; returns only when exec failed, with the shell's status.
int Execute(char** cmd) {
  execvp(cmd[0], cmd);
  const int e = errno;
  const bool has_slash = std::strchr(cmd[0], '/') != nullptr;
  if (e == ENOENT || (e == ENOTDIR && !has_slash)) {
    std::fprintf(stderr, "pinshim run: %s: %s\n", cmd[0],
                 has_slash ? "no such file or directory" : "command not found");
    return kExitNotFound;
  }
  struct stat st;
  if (e == EACCES && has_slash && stat(cmd[0], &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "pinshim run: %s: is a directory\n", cmd[0]);
  } else if (e == EACCES) {
    std::fprintf(stderr, "pinshim run: %s: permission denied (not executable)\n", cmd[0]);
  } else {
    std::fprintf(stderr, "pinshim run: %s: cannot execute: %s\n", cmd[0], std::strerror(e));
  }
  return kExitCannotExecute;
}

struct Setting {
  const RunOption* option;
  std::string value;
};

// One line for each kind of setting that will do nothing in `config`'s mode,
// naming each as the user gave it: the option, else the variable inherited
// from the environment. Settings from the config file are the site's
// defaults and are not reported.
void ReportIneffectiveSettings(const Config& config, const std::vector<Setting>& settings) {
  auto name_of = [&](ConfigKey key) -> std::string {
    const char* variable = kConfigKeys[static_cast<int>(key)].variable;
    for (auto it = settings.rbegin(); it != settings.rend(); ++it) {
      if (std::strcmp(it->option->variable, variable) == 0) return it->option->name;
    }
    const char* value = getenv(variable);
    return value != nullptr && value[0] != '\0' ? variable : "";
  };
  for (const std::string& line : IneffectiveSettings(config, name_of)) {
    std::fprintf(stderr, "pinshim run: %s\n", line.c_str());
  }
}

}  // namespace

void PrintRunHelp(bool to_stdout) {
  FILE* out = to_stdout ? stdout : stderr;
  std::fprintf(out, "%s\n\n", kUsage);
  PrintWrapped(out,
               "Runs CMD with libpinshim.so preloaded. Every option is checked "
               "before CMD runs and sets a PINSHIM_ variable ('pinshim help "
               "settings' describes them all, and the settings that have no "
               "option); a value follows its option or an '=' (--budget 8G, "
               "--budget=8G). '--' may be left out when CMD does not start with "
               "'-'.",
               0, 79);
  for (const HelpGroup& group : kHelpGroups) {
    std::fprintf(out, "\n%s\n", group.title);
    for (const RunOption& option : RunOptions()) {
      const Needs needs = OptionNeeds(option);
      if (needs != group.needs[0] && needs != group.needs[1]) continue;
      std::string head = option.name;
      head += option.value == Value::kOptional ? std::string("[=") + option.metavar + "]"
                                               : std::string(" ") + option.metavar;
      PrintOptionLine(out, head, option.brief);
    }
  }
  PrintOptionLine(out, "-h, --help", "show this help");
  std::fprintf(out, "\n");
  PrintWrapped(out,
               "An option or PINSHIM_ variable that does nothing in the chosen "
               "mode is reported in one line, and CMD runs anyway. The library "
               "is the libpinshim.so installed with pinshim, unless "
               "PINSHIM_LIBRARY names another.",
               0, 79);
  PrintWrapped(out,
               "Exit status: CMD's own; 2 for a bad option or value, a trace "
               "directory that cannot be written, an unreadable profile or a "
               "missing libpinshim.so; 126 when CMD cannot be executed; 127 "
               "when it is not found.",
               0, 79);
}

namespace {

// What the steps of RunRunCommand return when the command may go on.
constexpr int kGoOn = -1;

// The value of the option in arg (argv[*i]): after its '=', implicit, or the
// next word (then *i moves past it). "" or the usage error.
std::string TakeValue(const RunOption& option, const std::string& arg, size_t eq, int argc,
                      char** argv, int* i, std::string* value) {
  if (eq != std::string::npos) {
    *value = arg.substr(eq + 1);
  } else if (option.value == Value::kOptional) {
    *value = option.implicit;
  } else if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
    *value = argv[++*i];
  } else if (*i + 1 < argc) {
    // "--trace-dir -- prog": the next word is an option or the end of
    // them, not the value; a value that starts with "--" is written with '='.
    return std::string(option.name) + " needs a value (" + option.metavar + "), not \"" +
           argv[*i + 1] + "\" (write " + option.name + "=VALUE for a value that starts with '--')";
  } else {
    return std::string(option.name) + " needs a value (" + option.metavar +
           "); see pinshim run --help";
  }
  // An empty file name given on purpose is a slip, not "none" (--config ""
  // is the one way to say no config file).
  if (value->empty() && option.path != PathKind::kNone && option.variable != kConfigFileVariable) {
    return std::string(option.name) + "= needs a " + option.metavar + "; see pinshim run --help";
  }
  return "";
}

// Reads the options into *settings and where the command starts into
// *command; kGoOn, or the exit status (0 after --help).
int ParseRunArguments(int argc, char** argv, std::vector<Setting>* settings, int* command) {
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;  // the command
    if (arg == "-h" || arg == "--help") {
      PrintRunHelp(true);
      return 0;
    }
    const size_t eq = arg.find('=');
    const RunOption* option = FindOption(arg.substr(0, eq));
    if (option == nullptr || arg.compare(0, 2, "--") != 0) {
      return UsageError("unknown option \"" + arg + "\"; see pinshim run --help");
    }
    std::string value;
    const std::string problem = TakeValue(*option, arg, eq, argc, argv, &i, &value);
    if (!problem.empty()) return UsageError(problem);
    settings->push_back({option, value});
  }
  if (i >= argc) {
    return UsageError(std::string("missing command; ") + kUsage);
  }
  *command = i;
  return kGoOn;
}

// Checks each option alone, so a message names the option rather than the
// variable it becomes, makes its paths absolute and sets its variable.
// "" or the usage error.
std::string ApplySettings(std::vector<Setting>* settings) {
  Config scratch;
  SetConfigDefaults(PhysicalMemoryBytes(), &scratch);
  for (Setting& setting : *settings) {
    const RunOption& option = *setting.option;
    ConfigKey key;
    if (ConfigKeyFromVariable(option.variable, &key)) {
      char err[kConfigErrorLen];
      if (!ParseConfigValue(key, setting.value.c_str(), &scratch, err, sizeof(err))) {
        return std::string(option.name) + " \"" + setting.value + "\": " + err;
      }
    }
    if (option.path == PathKind::kPath ||
        (option.path == PathKind::kSummary && setting.value != "0" && setting.value != "1")) {
      setting.value = MakeAbsolute(setting.value);
    }
  }
  for (const Setting& setting : *settings) {
    setenv(setting.option->variable, setting.value.c_str(), 1);
  }
  return "";
}

// Checks everything together, as the library will see it (inherited
// variables and the config file included), into *config: the settings, the
// profile and the trace directory, which the library could only warn about
// once the program runs. kGoOn, or the exit status.
int CheckConfiguration(Config* config) {
  static ConfigErrors errors;  // large; kept off the stack
  ConfigInput input = {};
  input.envp = environ;
  if (!ParseConfig(input, config, &errors)) {
    for (int e = 0; e < errors.count; ++e) {
      std::fprintf(stderr, "pinshim run: %s\n", errors.messages[e]);
    }
    if (errors.dropped > 0) {
      std::fprintf(stderr, "pinshim run: and %d more configuration errors\n", errors.dropped);
    }
    return kExitUsage;
  }
  if (config->profile[0] != '\0') {
    static optimize::SiteProfile profile;  // large; kept off the stack
    char err[optimize::kProfileErrorLen];
    if (!LoadProfile(config->profile, &profile, err, sizeof(err))) return UsageError(err);
  }
  if (config->trace_dir[0] != '\0') {
    const std::string problem = PrepareTraceDirectory(config->trace_dir);
    if (!problem.empty()) {
      return UsageError(std::string("trace directory \"") + config->trace_dir + "\": " + problem);
    }
  }
  return kGoOn;
}

// Preloads libpinshim.so and runs cmd; returns only when that failed.
int PreloadAndRun(const Config& config, const std::vector<Setting>& settings, char** cmd) {
  std::string library;
  std::string error;
  if (!FindLibrary(SelfExecutablePath(), getenv(kLibraryVariable), &library, &error)) {
    return UsageError(error);
  }
  if (library.find_first_of(" :") != std::string::npos) {
    return UsageError("libpinshim.so at \"" + library +
                      "\" cannot be preloaded: LD_PRELOAD cannot hold a "
                      "path with a space or colon");
  }
  ReportIneffectiveSettings(config, settings);
  setenv("LD_PRELOAD", PreloadValue(library, getenv("LD_PRELOAD")).c_str(), 1);
  return Execute(cmd);
}

}  // namespace

int RunRunCommand(int argc, char** argv) {
  std::vector<Setting> settings;
  int command = 0;
  int status = ParseRunArguments(argc, argv, &settings, &command);
  if (status != kGoOn) return status;
  const std::string problem = ApplySettings(&settings);
  if (!problem.empty()) return UsageError(problem);
  static Config config;  // large; kept off the stack
  status = CheckConfiguration(&config);
  if (status != kGoOn) return status;
  return PreloadAndRun(config, settings, argv + command);
}

}  // namespace pinshim
