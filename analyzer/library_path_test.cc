#include "analyzer/library_path.h"

#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace pinshim {
namespace {

class LibraryPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/libXXXXXX";
    ASSERT_NE(mkdtemp(&pattern[0]), nullptr);
    char resolved[PATH_MAX];
    ASSERT_NE(realpath(pattern.c_str(), resolved), nullptr);
    root_ = resolved;
  }

  void MakeDir(const std::string& rel) {
    std::string path = root_;
    size_t pos = 0;
    while (pos != std::string::npos) {
      const size_t next = rel.find('/', pos);
      path = root_ + "/" + rel.substr(0, next);
      mkdir(path.c_str(), 0755);
      pos = next == std::string::npos ? next : next + 1;
    }
  }

  std::string Touch(const std::string& rel) {
    const size_t slash = rel.rfind('/');
    if (slash != std::string::npos) MakeDir(rel.substr(0, slash));
    const std::string path = root_ + "/" + rel;
    std::ofstream(path) << "x";
    return path;
  }

  std::string root_;
};

TEST_F(LibraryPathTest, InstalledLayoutComesFirst) {
  const std::string exe = Touch("prefix/bin/pinshim");
  Touch("prefix/lib/libpinshim.so");
  Touch("prefix/bin/pinshim.runfiles/pinshim/shim/libpinshim.so");
  std::string library, error;
  ASSERT_TRUE(FindLibrary(exe, nullptr, &library, &error)) << error;
  EXPECT_EQ(library, root_ + "/prefix/lib/libpinshim.so");
}

TEST_F(LibraryPathTest, BazelRunfilesThenBazelBin) {
  const std::string exe = Touch("bin/analyzer/pinshim");
  Touch("bin/shim/libpinshim.so");
  std::string library, error;
  ASSERT_TRUE(FindLibrary(exe, nullptr, &library, &error)) << error;
  EXPECT_EQ(library, root_ + "/bin/shim/libpinshim.so");

  Touch("bin/analyzer/pinshim.runfiles/pinshim/shim/libpinshim.so");
  ASSERT_TRUE(FindLibrary(exe, nullptr, &library, &error)) << error;
  EXPECT_EQ(library, root_ + "/bin/analyzer/pinshim.runfiles/pinshim/shim/libpinshim.so");
}

// The Debian package: /usr/bin/pinshim, /usr/lib/<triplet>/pinshim/libpinshim.so.
TEST_F(LibraryPathTest, DebianLayout) {
  const std::string exe = Touch("usr/bin/pinshim");
  const std::string lib =
      Touch(std::string("usr/lib/") + kMultiarchTriplet + "/pinshim/libpinshim.so");
  std::string library, error;
  ASSERT_TRUE(FindLibrary(exe, nullptr, &library, &error)) << error;
  EXPECT_EQ(library, lib);
}

TEST_F(LibraryPathTest, SymlinkedLibraryIsResolved) {
  const std::string exe = Touch("prefix/bin/pinshim");
  const std::string real = Touch("store/libpinshim.so.1");
  MakeDir("prefix/lib");
  ASSERT_EQ(symlink(real.c_str(), (root_ + "/prefix/lib/libpinshim.so").c_str()), 0);
  std::string library, error;
  ASSERT_TRUE(FindLibrary(exe, nullptr, &library, &error)) << error;
  EXPECT_EQ(library, real);
}

TEST_F(LibraryPathTest, MissingLibraryNamesEveryPlaceTried) {
  const std::string exe = Touch("prefix/bin/pinshim");
  MakeDir("prefix/lib/libpinshim.so");  // a directory is not the library
  std::string library, error;
  EXPECT_FALSE(FindLibrary(exe, nullptr, &library, &error));
  EXPECT_EQ(error, "cannot find libpinshim.so (looked for " + root_ +
                       "/prefix/bin/../lib/libpinshim.so, " + root_ + "/prefix/bin/../lib/" +
                       kMultiarchTriplet + "/pinshim/libpinshim.so, " + root_ +
                       "/prefix/bin/pinshim.runfiles/pinshim/shim/"
                       "libpinshim.so, " +
                       root_ + "/prefix/bin/../shim/libpinshim.so, " + root_ +
                       "/prefix/bin/libpinshim.so); set "
                       "PINSHIM_LIBRARY to the library's path");
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST_F(LibraryPathTest, OverrideWinsAndMustExist) {
  const std::string exe = Touch("prefix/bin/pinshim");
  Touch("prefix/lib/libpinshim.so");
  const std::string other = Touch("elsewhere/libpinshim.so");
  std::string library, error;
  ASSERT_TRUE(FindLibrary(exe, other.c_str(), &library, &error)) << error;
  EXPECT_EQ(library, other);

  // An empty override is no override.
  ASSERT_TRUE(FindLibrary(exe, "", &library, &error)) << error;
  EXPECT_EQ(library, root_ + "/prefix/lib/libpinshim.so");

  const std::string absent = root_ + "/absent.so";
  EXPECT_FALSE(FindLibrary(exe, absent.c_str(), &library, &error));
  EXPECT_EQ(
      error.rfind("PINSHIM_LIBRARY=\"" + absent + "\": No such file or directory; accepted:", 0),
      0u)
      << error;
  EXPECT_FALSE(FindLibrary(exe, root_.c_str(), &library, &error));
  EXPECT_NE(error.find("\": not a regular file; accepted:"), std::string::npos) << error;
}

TEST(SelfExecutablePathTest, NamesThisTest) {
  const std::string self = SelfExecutablePath();
  ASSERT_FALSE(self.empty());
  EXPECT_EQ(self[0], '/');
  EXPECT_NE(self.find("library_path_test"), std::string::npos) << self;
}

}  // namespace
}  // namespace pinshim
