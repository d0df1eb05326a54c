#include "shim/optimize/site_profile.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace pinshim {
namespace optimize {
namespace {

// Return addresses in this test binary: each function below calls this one,
// so its return address lies inside that function. noipa: identical
// functions are not folded into one.
__attribute__((noipa)) uintptr_t CallerReturnAddress() {
  uintptr_t r = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return r;
}

__attribute__((noipa)) uintptr_t AllocatingFunction() {
  uintptr_t r = CallerReturnAddress();
  asm volatile("" ::: "memory");  // a call, not a tail jump
  return r;
}

__attribute__((noipa)) uintptr_t ItsCaller() {
  uintptr_t r = CallerReturnAddress();
  asm volatile("" ::: "memory");
  return r;
}

__attribute__((noipa)) uintptr_t AnotherFunction() {
  uintptr_t r = CallerReturnAddress();
  asm volatile("" ::: "memory");
  return r;
}

std::string Hex(const std::string& raw) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The GNU build id of an ELF file, read from the file on disk (not the way
// the profile reads it, from memory): its PT_NOTE program headers.
std::string BuildIdOfFile(const std::string& path) {
  const std::string elf = ReadWholeFile(path);
  if (elf.size() < sizeof(Elf64_Ehdr)) return "";
  Elf64_Ehdr eh;
  memcpy(&eh, elf.data(), sizeof(eh));
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    memcpy(&ph, elf.data() + eh.e_phoff + i * sizeof(ph), sizeof(ph));
    if (ph.p_type != PT_NOTE) continue;
    const size_t align = ph.p_align == 8 ? 8 : 4;
    size_t p = ph.p_offset;
    while (p + sizeof(Elf64_Nhdr) <= ph.p_offset + ph.p_filesz) {
      Elf64_Nhdr n;
      memcpy(&n, elf.data() + p, sizeof(n));
      size_t name = p + sizeof(n);
      size_t desc = name + ((n.n_namesz + align - 1) & ~(align - 1));
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 &&
          memcmp(elf.data() + name, "GNU", 4) == 0) {
        return elf.substr(desc, n.n_descsz);
      }
      p = desc + ((n.n_descsz + align - 1) & ~(align - 1));
    }
  }
  return "";
}

struct ModuleInfo {
  uintptr_t bias = 0;
  std::string path;
  bool found = false;
};

// The loaded module holding `addr`: its load bias and file.
ModuleInfo ModuleOf(uintptr_t addr) {
  struct Search {
    uintptr_t addr;
    ModuleInfo out;
    bool first = true;
  } s{addr, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        Search* s = static_cast<Search*>(arg);
        const bool main_program = s->first;
        s->first = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->addr >= start && s->addr - start < ph.p_memsz) {
            s->out.bias = info->dlpi_addr;
            s->out.path = main_program ? "/proc/self/exe" : info->dlpi_name;
            s->out.found = true;
            return 1;
          }
        }
        return 0;
      },
      &s);
  return s.out;
}

// "<build id>+0x<offset>" for an address in a loaded module.
std::string FrameOf(uintptr_t addr) {
  ModuleInfo m = ModuleOf(addr);
  EXPECT_TRUE(m.found) << std::hex << addr;
  std::string id = BuildIdOfFile(m.path);
  EXPECT_FALSE(id.empty()) << m.path << " has no GNU build id; link it with -Wl,--build-id";
  char off[32];
  snprintf(off, sizeof(off), "+0x%lx", static_cast<unsigned long>(addr - m.bias));
  return Hex(id) + off;
}

std::string TestDir() {
  const char* tmp = getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

std::string RunfilesPath(const std::string& workspace_relative) {
  if (const char* srcdir = getenv("TEST_SRCDIR")) {
    return std::string(srcdir) + "/pinshim/" + workspace_relative;
  }
  return workspace_relative;
}

class SiteProfileTest : public ::testing::Test {
 protected:
  SiteProfileTest() : profile_(new SiteProfile) {}

  // Writes `text` to a file of its own and returns the path.
  std::string Write(const std::string& text) {
    std::string path = TestDir() + "/profile" + std::to_string(files_++) + ".txt";
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  bool LoadText(const std::string& text) {
    path_ = Write(text);
    return profile_->Load(path_.c_str(), err_, sizeof(err_));
  }

  // Loads `text`, which must be rejected, and returns the message with
  // the file's path shown as PROFILE.
  std::string LoadError(const std::string& text) {
    EXPECT_FALSE(LoadText(text)) << text.substr(0, 200);
    EXPECT_EQ(profile_->size(), 0u);
    std::string message = err_;
    if (message.compare(0, path_.size(), path_) == 0) {
      message = "PROFILE" + message.substr(path_.size());
    }
    return message;
  }

  static SiteFrames Frames(std::vector<uintptr_t> ips) {
    SiteFrames f;
    f.n = static_cast<int>(ips.size());
    for (size_t i = 0; i < ips.size(); ++i) f.ips[i] = ips[i];
    return f;
  }

  std::unique_ptr<SiteProfile> profile_;  // large: not on the stack
  char err_[kProfileErrorLen] = {};
  std::string path_;
  int files_ = 0;
};

const std::string kHeader = std::string(kProfileHeader) + "\n";

TEST_F(SiteProfileTest, MatchesASiteInTheTestBinaryExactly) {
  const uintptr_t a = AllocatingFunction(), b = ItsCaller();
  ASSERT_TRUE(LoadText(kHeader + "site " + FrameOf(a) + " " + FrameOf(b) + "\n")) << err_;
  EXPECT_EQ(profile_->size(), 1u);
  EXPECT_TRUE(profile_->Contains(Frames({a, b})));
  // Asked again: the shared view answers the same.
  EXPECT_TRUE(profile_->Contains(Frames({a, b})));
}

TEST_F(SiteProfileTest, AShorterSiteMatchesAsAPrefix) {
  const uintptr_t a = AllocatingFunction(), b = ItsCaller(), c = AnotherFunction();
  ASSERT_TRUE(LoadText(kHeader + "site " + FrameOf(a) + " " + FrameOf(b) + "\n")) << err_;
  EXPECT_TRUE(profile_->Contains(Frames({a, b, c})));
  EXPECT_TRUE(profile_->Contains(Frames({a, b, c, 0x1234})));
  // A stack shorter than the site is not that site.
  EXPECT_FALSE(profile_->Contains(Frames({a})));
}

TEST_F(SiteProfileTest, OtherFramesDoNotMatch) {
  const uintptr_t a = AllocatingFunction(), b = ItsCaller(), c = AnotherFunction();
  ASSERT_TRUE(LoadText(kHeader + "site " + FrameOf(a) + " " + FrameOf(b) + "\n" + "site " +
                       FrameOf(c) + " " + FrameOf(a) + " " + FrameOf(b) + "\n"))
      << err_;
  EXPECT_EQ(profile_->size(), 2u);
  EXPECT_FALSE(profile_->Contains(Frames({b, a})));
  EXPECT_FALSE(profile_->Contains(Frames({a + 1, b})));
  EXPECT_FALSE(profile_->Contains(Frames({a, b - 1})));
  EXPECT_FALSE(profile_->Contains(Frames({c, a})));
  EXPECT_FALSE(profile_->Contains(Frames({})));
  EXPECT_TRUE(profile_->Contains(Frames({c, a, b})));
}

TEST_F(SiteProfileTest, AnotherBuildIdDoesNotMatch) {
  const uintptr_t a = AllocatingFunction();
  const std::string frame = FrameOf(a);
  const size_t plus = frame.find('+');
  std::string other = frame;
  other[0] = other[0] == 'f' ? '0' : 'f';       // one byte of the id differs
  const std::string shorter = frame.substr(2);  // the id one byte shorter
  ASSERT_TRUE(LoadText(kHeader + "site " + other + "\nsite " + shorter + "\n")) << err_;
  ASSERT_NE(plus, std::string::npos);
  EXPECT_FALSE(profile_->Contains(Frames({a})));
  // The real id, upper case, does.
  std::string upper = frame;
  for (size_t i = 0; i < plus; ++i) upper[i] = static_cast<char>(toupper(upper[i]));
  ASSERT_TRUE(LoadText(kHeader + "site " + upper + "\n")) << err_;
  EXPECT_TRUE(profile_->Contains(Frames({a})));
}

using CallSiteFn = uintptr_t (*)();

TEST_F(SiteProfileTest, FindsModulesLoadedAfterTheProfile) {
  const std::string lib = RunfilesPath("shim/optimize/libsite_profile_testlib.so");
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto call_site = reinterpret_cast<CallSiteFn>(dlsym(h, "PinshimSiteProfileTestCallSite"));
  ASSERT_NE(call_site, nullptr);
  const uintptr_t first = call_site();
  const std::string frame = FrameOf(first);
  ASSERT_EQ(dlclose(h), 0);
  ASSERT_FALSE(ModuleOf(first).found) << "the test library stayed loaded";

  ASSERT_TRUE(LoadText(kHeader + "site " + frame + "\n")) << err_;
  EXPECT_FALSE(profile_->Contains(Frames({first})));  // not loaded now

  h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  call_site = reinterpret_cast<CallSiteFn>(dlsym(h, "PinshimSiteProfileTestCallSite"));
  const uintptr_t again = call_site();
  EXPECT_TRUE(profile_->Contains(Frames({again})));
  EXPECT_FALSE(profile_->Contains(Frames({again + 4})));
  ASSERT_EQ(dlclose(h), 0);
  EXPECT_FALSE(profile_->Contains(Frames({again})));
}

TEST_F(SiteProfileTest, ThreadsAgreeWhileModulesComeAndGo) {
  const uintptr_t a = AllocatingFunction(), b = ItsCaller(), c = AnotherFunction();
  ASSERT_TRUE(LoadText(kHeader + "site " + FrameOf(a) + " " + FrameOf(b) + "\n")) << err_;
  const std::string lib = RunfilesPath("shim/optimize/libsite_profile_testlib.so");
  std::atomic<bool> stop{false};
  std::thread loader([&] {
    while (!stop.load()) {
      void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) dlclose(h);
    }
  });
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if (!profile_->Contains(Frames({a, b}))) wrong.fetch_add(1);
        if (profile_->Contains(Frames({b, c}))) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  stop.store(true);
  loader.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(SiteProfileTest, LoadAndContainsDoNotAllocate) {
  const uintptr_t a = AllocatingFunction(), b = ItsCaller();
  const std::string path =
      Write(kHeader + "# a comment\nsite " + FrameOf(a) + " " + FrameOf(b) + "\n");
  const std::string missing = TestDir() + "/no-such-profile";
  SiteFrames hit = Frames({a, b}), miss = Frames({b, a});
  const size_t before = mallinfo2().uordblks;
  bool loaded = profile_->Load(path.c_str(), err_, sizeof(err_));
  bool found = profile_->Contains(hit);
  bool not_found = !profile_->Contains(miss);
  SiteProfile* other = profile_.get();
  bool rejected = !other->Load(missing.c_str(), err_, sizeof(err_));
  const size_t after = mallinfo2().uordblks;
  EXPECT_TRUE(loaded && found && not_found && rejected);
  EXPECT_EQ(before, after);
}

TEST_F(SiteProfileTest, CommentsBlankLinesAndCrlfAreAccepted) {
  const std::string f = FrameOf(AllocatingFunction());
  ASSERT_TRUE(LoadText(std::string(kProfileHeader) + "  \r\n" + "# hottest first\n\n" + "   \t\n" +
                       "site\t" + f + "  \r\n" + "# " + std::string(5000, 'x') + "\n" + "site " +
                       f + " " + f))  // no final newline
      << err_;
  EXPECT_EQ(profile_->size(), 2u);
  ASSERT_TRUE(LoadText(kHeader)) << err_;
  EXPECT_EQ(profile_->size(), 0u);
  EXPECT_FALSE(profile_->Contains(Frames({AllocatingFunction()})));
}

TEST_F(SiteProfileTest, UnreadableFilesAreNamed) {
  const std::string missing = TestDir() + "/absent.profile";
  EXPECT_FALSE(profile_->Load(missing.c_str(), err_, sizeof(err_)));
  EXPECT_EQ(std::string(err_), missing + ": cannot open profile: no such file or directory");
  EXPECT_FALSE(profile_->Load(TestDir().c_str(), err_, sizeof(err_)));
  EXPECT_EQ(std::string(err_), TestDir() + ": cannot read profile: is a directory");
  EXPECT_FALSE(profile_->Load("", err_, sizeof(err_)));
  EXPECT_EQ(std::string(err_), "no profile file named");
}

TEST_F(SiteProfileTest, AWrongOrMissingHeaderIsRejected) {
  EXPECT_EQ(LoadError(""), "PROFILE: empty file, not a pinshim profile");
  const std::string not_profile =
      ": not a pinshim profile (line 1 must be \"# pinshim profile v1\")";
  EXPECT_EQ(LoadError("site 00+0x1\n"), "PROFILE:1" + not_profile);
  EXPECT_EQ(LoadError("\n" + kHeader), "PROFILE:1" + not_profile);
  EXPECT_EQ(LoadError("# pinshim profile\n"), "PROFILE:1" + not_profile);
  EXPECT_EQ(LoadError("# pinshim profile v1 and more\n"), "PROFILE:1" + not_profile);
  EXPECT_EQ(LoadError(std::string(3000, '#')), "PROFILE:1" + not_profile);
  EXPECT_EQ(LoadError("# pinshim profile v2\nsite 00+0x1\n"),
            "PROFILE:1: profile format v2 is not supported; this pinshim reads v1");
}

TEST_F(SiteProfileTest, MalformedLinesNameTheirLineNumber) {
  const std::string bad_frame =
      " (expected BUILDID+0xOFFSET: a GNU build id of at most 64 bytes and an offset, both "
      "in hexadecimal)";
  EXPECT_EQ(LoadError(kHeader + "# ok\nsite ab12+0x10 zz+0x10\n"),
            "PROFILE:3: bad frame \"zz+0x10\"" + bad_frame);
  EXPECT_EQ(LoadError(kHeader + "site abc+0x10\n"),
            "PROFILE:2: bad frame \"abc+0x10\"" + bad_frame);  // odd digit count
  EXPECT_EQ(LoadError(kHeader + "site ab+10\n"), "PROFILE:2: bad frame \"ab+10\"" + bad_frame);
  EXPECT_EQ(LoadError(kHeader + "site ab+0x\n"), "PROFILE:2: bad frame \"ab+0x\"" + bad_frame);
  EXPECT_EQ(LoadError(kHeader + "site +0x10\n"), "PROFILE:2: bad frame \"+0x10\"" + bad_frame);
  EXPECT_EQ(LoadError(kHeader + "site ab+0x12345678123456789\n"),
            "PROFILE:2: bad frame \"ab+0x12345678123456789\"" + bad_frame);
  EXPECT_EQ(LoadError(kHeader + "site " + std::string(130, 'a') + "+0x1\n"),
            "PROFILE:2: bad frame \"" + std::string(48, 'a') + "...\"" + bad_frame);
  EXPECT_EQ(LoadError(kHeader + "site\n"),
            "PROFILE:2: a site needs at least one frame (BUILDID+0xOFFSET)");
  EXPECT_EQ(LoadError(kHeader + "site 01+0x1 01+0x2 01+0x3 01+0x4 01+0x5\n"),
            "PROFILE:2: more than 4 frames in a site");
  EXPECT_EQ(LoadError(kHeader + "\nsites 01+0x1\n"),
            "PROFILE:3: expected \"site FRAME...\" or a '#' comment, got \"sites 01+0x1\"");
  EXPECT_EQ(LoadError(kHeader + " # indented comment\n"),
            "PROFILE:2: expected \"site FRAME...\" or a '#' comment, got \" # indented "
            "comment\"");
  EXPECT_EQ(LoadError(kHeader + "site " + std::string(2000, 'a') + "\n"),
            "PROFILE:2: line longer than 1023 bytes");
}

TEST_F(SiteProfileTest, AtMost4096Sites) {
  std::string text = kHeader;
  for (int i = 0; i < 4096; ++i) text += "site 0a0b+0x" + std::to_string(i) + "\n";
  ASSERT_TRUE(LoadText(text)) << err_;
  EXPECT_EQ(profile_->size(), 4096u);
  text += "site 0a0b+0x1\n";
  EXPECT_EQ(LoadError(text),
            "PROFILE:4098: more than 4096 sites; a profile holds at most that many");
}

TEST_F(SiteProfileTest, AtMost256BuildIds) {
  std::string text = kHeader;
  char frame[32];
  for (int i = 0; i < 256; ++i) {
    snprintf(frame, sizeof(frame), "site %04x+0x1\n", i);
    text += frame;
  }
  ASSERT_TRUE(LoadText(text)) << err_;
  text += "site ffff+0x1\n";
  EXPECT_EQ(LoadError(text),
            "PROFILE:258: more than 256 distinct build ids; a profile names at "
            "most that many modules");
}

TEST_F(SiteProfileTest, AFailedLoadLeavesTheProfileEmpty) {
  const uintptr_t a = AllocatingFunction();
  ASSERT_TRUE(LoadText(kHeader + "site " + FrameOf(a) + "\n")) << err_;
  EXPECT_TRUE(profile_->Contains(Frames({a})));
  EXPECT_FALSE(LoadText(kHeader + "site " + FrameOf(a) + "\nbroken\n"));
  EXPECT_EQ(profile_->size(), 0u);
  EXPECT_FALSE(profile_->Contains(Frames({a})));
}

TEST_F(SiteProfileTest, MessagesFitSmallBuffers) {
  char small[16];
  EXPECT_FALSE(profile_->Load("/no/such/profile/anywhere", small, sizeof(small)));
  EXPECT_EQ(std::string(small), "/no/such/profil");
  EXPECT_FALSE(profile_->Load("/no/such/profile", nullptr, 0));
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
