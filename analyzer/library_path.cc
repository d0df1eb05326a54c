#include "analyzer/library_path.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pinshim {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Returns why path is not a readable regular file, "" if it is one.
std::string FileProblem(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (access(path.c_str(), R_OK) != 0) return std::strerror(errno);
  return "";
}

// Resolves symbolic links and "..", so LD_PRELOAD gets a plain path that
// stays valid whatever directory the program changes to.
std::string Resolve(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return path;
  return buf;
}

}  // namespace

std::vector<std::string> LibraryCandidates(const std::string& exe_path) {
  const std::string dir = DirName(exe_path);
  return {
      dir + "/../lib/libpinshim.so",
      dir + "/../lib/" + kMultiarchTriplet + "/pinshim/libpinshim.so",
      exe_path + ".runfiles/pinshim/shim/libpinshim.so",
      dir + "/../shim/libpinshim.so",
      dir + "/libpinshim.so",  // a flat folder holding both files
  };
}

bool FindLibrary(const std::string& exe_path, const char* override_path, std::string* library,
                 std::string* error) {
  if (override_path != nullptr && override_path[0] != '\0') {
    const std::string problem = FileProblem(override_path);
    if (!problem.empty()) {
      *error = std::string(kLibraryVariable) + "=\"" + override_path + "\": " + problem +
               "; accepted: the path of libpinshim.so, or unset to use the "
               "one found beside pinshim";
      return false;
    }
    *library = Resolve(override_path);
    return true;
  }
  if (exe_path.empty()) {
    *error = std::string(
                 "cannot find libpinshim.so: the path of pinshim "
                 "itself is unknown; set ") +
             kLibraryVariable + " to the library's path";
    return false;
  }
  std::string tried;
  for (const std::string& candidate : LibraryCandidates(exe_path)) {
    if (FileProblem(candidate).empty()) {
      *library = Resolve(candidate);
      return true;
    }
    tried += (tried.empty() ? "" : ", ") + candidate;
  }
  *error = "cannot find libpinshim.so (looked for " + tried + "); set " + kLibraryVariable +
           " to the library's path";
  return false;
}

std::string SelfExecutablePath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

}  // namespace pinshim
