// Finds libpinshim.so for the running pinshim binary, without relying on
// environment variables: beside it when installed, in Bazel's output tree
// when run from a build.
#ifndef PINSHIM_ANALYZER_LIBRARY_PATH_H_
#define PINSHIM_ANALYZER_LIBRARY_PATH_H_

#include <string>
#include <vector>

namespace pinshim {

// The environment variable that names the library explicitly.
constexpr const char kLibraryVariable[] = "PINSHIM_LIBRARY";

// The Debian multiarch folder of this architecture (/usr/lib/<triplet>).
#if defined(__x86_64__)
constexpr const char kMultiarchTriplet[] = "x86_64-linux-gnu";
#elif defined(__aarch64__)
constexpr const char kMultiarchTriplet[] = "aarch64-linux-gnu";
#else
#error "pinshim: no Debian multiarch triplet for this architecture"
#endif

// Places tried for a pinshim binary at exe_path (an absolute path with
// symbolic links resolved), in order:
//   <exe_dir>/../lib/libpinshim.so                    installed under a
//                                                     prefix, the release
//                                                     archive, the wheel
//   <exe_dir>/../lib/<triplet>/pinshim/libpinshim.so  the Debian package
//   <exe_path>.runfiles/pinshim/shim/libpinshim.so    Bazel runfiles
//   <exe_dir>/../shim/libpinshim.so                   bazel-bin
//   <exe_dir>/libpinshim.so                           one flat folder
std::vector<std::string> LibraryCandidates(const std::string& exe_path);

// Sets *library to the absolute, resolved path of libpinshim.so: the file
// named by override_path when it is non-null and non-empty, else the first
// readable regular file among LibraryCandidates(exe_path). On failure
// returns false and sets *error to one line naming what was tried.
bool FindLibrary(const std::string& exe_path, const char* override_path, std::string* library,
                 std::string* error);

// The resolved path of the running executable (/proc/self/exe), "" if unknown.
std::string SelfExecutablePath();

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_LIBRARY_PATH_H_
