// Where a test finds the built libcuda.so.1 (a `data` dependency).
#ifndef PINSHIM_TESTS_FAKECUDA_LIBRARY_PATH_H_
#define PINSHIM_TESTS_FAKECUDA_LIBRARY_PATH_H_

#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace fakecuda_test {

// The runfiles path of `workspace_relative` (e.g. "tests/fakecuda/libcuda.so.1"):
// under $TEST_SRCDIR when Bazel runs the test, else beside the binary.
inline std::string RunfilesPath(const std::string& workspace_relative) {
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    return std::string(srcdir) + "/pinshim/" + workspace_relative;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return workspace_relative;
  exe[n] = '\0';
  return std::string(exe) + ".runfiles/pinshim/" + workspace_relative;
}

// The simulated driver library.
inline std::string DriverLibraryPath() { return RunfilesPath("tests/fakecuda/libcuda.so.1"); }

// The folder holding it, for LD_LIBRARY_PATH.
inline std::string DriverLibraryDir() {
  std::string path = DriverLibraryPath();
  return path.substr(0, path.rfind('/'));
}

}  // namespace fakecuda_test

#endif  // PINSHIM_TESTS_FAKECUDA_LIBRARY_PATH_H_
