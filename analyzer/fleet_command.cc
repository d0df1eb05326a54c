#include "analyzer/fleet_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "analyzer/library_path.h"

namespace pinshim {
namespace {

constexpr char kDebianPython[] = "/usr/bin/python3";

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

void Complain(const std::string& line) {
  std::string out = "pinshim fleet: " + line + "\n";
  fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace

std::vector<std::string> FleetCandidates(const std::string& exe_path) {
  const std::string dir = DirName(exe_path);
  std::vector<std::string> out = {
      dir + "/../lib/pinshim-fleet",
      dir + "/../lib/" + kMultiarchTriplet + "/pinshim/fleet",
      exe_path + ".runfiles/pinshim/analyzer/fleet",
      dir + "/fleet",
  };
  // Run from another target's runfiles (a test's data), the build's own
  // runfiles protocol names the tree.
  const char* runfiles = getenv("RUNFILES_DIR");
  if (runfiles != nullptr && runfiles[0] != '\0') {
    out.push_back(std::string(runfiles) + "/pinshim/analyzer/fleet");
  }
  return out;
}

int RunFleetCommand(int argc, char** argv) {
  const std::string self = SelfExecutablePath();
  std::string package;
  std::string tried;
  for (const std::string& candidate : FleetCandidates(self)) {
    if (IsFile(candidate + "/pinshim_fleet/__main__.py")) {
      package = candidate;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + candidate;
  }
  if (package.empty()) {
    Complain("cannot find the fleet analysis (pinshim_fleet; looked in " + tried +
             "): reinstall pinshim");
    return 2;
  }
  const char* chosen = getenv(kFleetPythonVariable);
  std::string python = chosen != nullptr && chosen[0] != '\0' ? chosen
                       : access(kDebianPython, X_OK) == 0     ? kDebianPython
                                                              : "python3";
  const char* old_path = getenv("PYTHONPATH");
  const std::string path =
      package + (old_path != nullptr && old_path[0] != '\0' ? std::string(":") + old_path : "");
  setenv("PYTHONPATH", path.c_str(), 1);
  // The workers of a local cluster run this same pinshim's export.
  if (!self.empty()) setenv("PINSHIM_FLEET_PINSHIM", self.c_str(), 1);
  std::vector<char*> args;
  args.push_back(const_cast<char*>(python.c_str()));
  char module_flag[] = "-m";
  char module[] = "pinshim_fleet";
  args.push_back(module_flag);
  args.push_back(module);
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp(args[0], args.data());
  Complain("cannot run " + python + ": " + strerror(errno) + "; set " + kFleetPythonVariable +
           " to a Python 3 that has dask, distributed and pandas (Debian: python3-dask "
           "python3-distributed python3-pandas)");
  return 2;
}

}  // namespace pinshim
