#include "shim/core/safe_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace pinshim {
namespace {

class SafeFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/safe_file.XXXXXX";
    ASSERT_NE(mkdtemp(&tmpl[0]), nullptr);
    dir_ = tmpl;
  }

  std::string Path(const char* name) const { return dir_ + "/" + name; }

  static std::string Read(const std::string& path) {
    std::string out;
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return "<missing>";
    char buf[256];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    close(fd);
    return out;
  }

  static void Write(const std::string& path, const std::string& text, mode_t mode = 0644) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, mode);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
  }

  // Entries of the directory other than . and ..
  int Entries() const {
    int n = 0;
    DIR* d = opendir(dir_.c_str());
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) ++n;
    }
    closedir(d);
    return n;
  }

  std::string dir_;
};

TEST_F(SafeFileTest, ReadRefusesFifoAndDeviceWithoutBlocking) {
  const std::string fifo = Path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(OpenRegularForRead(fifo.c_str(), 1 << 20, nullptr), -kFileNotRegular);
  EXPECT_EQ(OpenRegularForRead("/dev/null", 1 << 20, nullptr), -kFileNotRegular);
  EXPECT_EQ(OpenRegularForRead(dir_.c_str(), 1 << 20, nullptr), -kFileNotRegular);
  EXPECT_EQ(OpenRegularForRead(Path("missing").c_str(), 1 << 20, nullptr), -ENOENT);
  EXPECT_STREQ(SafeFileReason(kFileNotRegular), "not a regular file");
}

TEST_F(SafeFileTest, ReadChecksTheSizeLimit) {
  Write(Path("f"), "0123456789");
  FileFacts facts;
  int fd = OpenRegularForRead(Path("f").c_str(), 10, &facts);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(facts.size, 10u);
  char buf[4];
  EXPECT_EQ(ReadUpTo(fd, buf, sizeof(buf)), 4);  // cut at the caller's cap
  close(fd);
  EXPECT_EQ(OpenRegularForRead(Path("f").c_str(), 9, nullptr), -kFileTooLarge);
}

TEST_F(SafeFileTest, ReplaceNeverFollowsALinkAndLeavesNoTemporaryFile) {
  const std::string victim = Path("victim");
  Write(victim, "precious");
  ASSERT_EQ(symlink(victim.c_str(), Path("out").c_str()), 0);
  EXPECT_EQ(ReplaceWithData(Path("out").c_str(), 0644, "x", 1), kFileSymlink);
  EXPECT_EQ(Read(victim), "precious");
  EXPECT_EQ(Entries(), 2);  // victim and the link, nothing else
}

TEST_F(SafeFileTest, ReplaceKeepsTheUsersPermissionBits) {
  const std::string out = Path("metrics.prom");
  Write(out, "old", 0600);
  ASSERT_EQ(chmod(out.c_str(), 0600), 0);
  ASSERT_EQ(ReplaceWithData(out.c_str(), 0644, "new", 3), 0);
  EXPECT_EQ(Read(out), "new");
  struct stat st;
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(Entries(), 1);
}

TEST_F(SafeFileTest, ReplaceRefusesADirectoryOrFifo) {
  ASSERT_EQ(mkdir(Path("d").c_str(), 0700), 0);
  EXPECT_EQ(ReplaceWithData(Path("d").c_str(), 0644, "x", 1), kFileNotRegular);
  ASSERT_EQ(mkfifo(Path("p").c_str(), 0600), 0);
  EXPECT_EQ(ReplaceWithData(Path("p").c_str(), 0644, "x", 1), kFileNotRegular);
}

TEST_F(SafeFileTest, TemporaryNamesAreNotPredictable) {
  ReplaceFile a, b;
  ASSERT_EQ(BeginReplace(Path("x.prom").c_str(), 0644, &a), 0);
  ASSERT_EQ(BeginReplace(Path("x.prom").c_str(), 0644, &b), 0);
  EXPECT_STRNE(a.tmp, b.tmp);
  const std::string tmp = a.tmp;
  EXPECT_EQ(tmp.find(dir_ + "/.x.prom."), 0u) << tmp;
  EXPECT_NE(tmp.substr(tmp.size() - 4), "prom");
  AbortReplace(&a);
  AbortReplace(&b);
  EXPECT_EQ(Entries(), 0);
}

TEST_F(SafeFileTest, AppendRefusesLinksAndFifosAndKeepsEarlierRecords) {
  const std::string victim = Path("victim");
  Write(victim, "precious");
  ASSERT_EQ(symlink(victim.c_str(), Path("link").c_str()), 0);
  EXPECT_EQ(OpenForAppend(Path("link").c_str(), 0644), -kFileSymlink);
  ASSERT_EQ(mkfifo(Path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(OpenForAppend(Path("fifo").c_str(), 0644), -kFileNotRegular);
  for (const char* record : {"one\n", "two\n"}) {
    int fd = OpenForAppend(Path("summary").c_str(), 0644);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(WriteFully(fd, record, strlen(record)), 0);
    close(fd);
  }
  EXPECT_EQ(Read(Path("summary")), "one\ntwo\n");
  EXPECT_EQ(Read(victim), "precious");
}

TEST_F(SafeFileTest, CreateExclusiveRefusesAnythingThere) {
  ASSERT_EQ(symlink("/nonexistent-target", Path("l").c_str()), 0);
  EXPECT_EQ(CreateExclusive(Path("l").c_str(), 0, 0644), -EEXIST);
  int fd = CreateExclusive(Path("new").c_str(), O_APPEND, 0644);
  EXPECT_GE(fd, 0);
  close(fd);
}

}  // namespace
}  // namespace pinshim
