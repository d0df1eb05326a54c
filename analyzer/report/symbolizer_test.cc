// Records real stacks with the recorder and symbolizes them: functions,
// files, lines, inlined frames, the call site past pinshim's own frames, and
// what happens when a module is gone or changed.
#include "analyzer/report/symbolizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "shim/trace/recorder.h"

// The recording functions live outside namespace pinshim: frames in it count
// as pinshim's own and are trimmed from call sites.
namespace {

using pinshim::CopyDir;
using pinshim::CopyEvent;
namespace trace = pinshim::trace;

int g_copy_line = 0;
int g_inline_line = 0;

__attribute__((noinline)) void CopyHere() {
  CopyEvent e{};
  e.dir = CopyDir::kHostToDevice;
  e.bytes = 1;
  g_copy_line = __LINE__ + 1;
  trace::RecordCopy(e);
}

__attribute__((always_inline)) inline void InlinedCopy() {
  CopyEvent e{};
  e.bytes = 2;
  trace::RecordCopy(e);
}

__attribute__((noinline)) void CallsInlined() {
  g_inline_line = __LINE__ + 1;
  InlinedCopy();
}

std::string RecordTrace() {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/symbolizer_test." + std::to_string(getpid());
  trace::RecorderOptions o;
  o.trace_dir = dir.c_str();
  o.sample_ms = 0;
  char err[256];
  EXPECT_TRUE(trace::StartRecorder(o, err, sizeof(err))) << err;
  CopyHere();
  CallsInlined();
  std::string path = trace::RecorderTracePath();
  trace::StopRecorder();
  return path;
}

}  // namespace

namespace pinshim {
namespace report {
namespace {

struct Collect : EventVisitor {
  std::vector<Event> events;
  void OnEvent(const Event& e) override { events.push_back(e); }
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TEST(Symbolizer, FindsFunctionFileLineInlinesAndTheCallSite) {
  std::string path = RecordTrace();
  TraceReader r;
  std::string error;
  ASSERT_TRUE(r.Open(path, &error)) << error;
  Collect c;
  r.ForEachEvent(&c);
  ASSERT_EQ(c.events.size(), 2u);
  Symbolizer sym(&r);

  const SymbolizedStack& a = sym.Symbolize(c.events[0].stack);
  ASSERT_NE(a.SiteFrame(), nullptr);
  const Frame& site = *a.SiteFrame();
  EXPECT_NE(site.function.find("CopyHere"), std::string::npos) << site.Describe();
  EXPECT_TRUE(EndsWith(site.file, "analyzer/report/symbolizer_test.cc")) << site.file;
  EXPECT_EQ(site.line, g_copy_line);
  // Frames before the site are the recorder's, marked runtime.
  ASSERT_GT(a.site, 0);
  bool saw_recorder = false;
  for (int i = 0; i < a.site; ++i) {
    EXPECT_TRUE(a.frames[i].runtime) << a.frames[i].Describe();
    if (a.frames[i].function.find("pinshim::trace::RecordCopy") == 0) saw_recorder = true;
  }
  EXPECT_TRUE(saw_recorder);
  // The full stack goes on to the test body.
  bool saw_test_body = false;
  for (const Frame& f : a.frames) {
    if (f.function.find("FindsFunctionFileLineInlinesAndTheCallSite") != std::string::npos) {
      saw_test_body = true;
    }
  }
  EXPECT_TRUE(saw_test_body);

  const SymbolizedStack& b = sym.Symbolize(c.events[1].stack);
  ASSERT_NE(b.SiteFrame(), nullptr);
  // The inlined function is a frame of its own, with the caller's line after it.
  const Frame& inl = *b.SiteFrame();
  EXPECT_NE(inl.function.find("InlinedCopy"), std::string::npos) << inl.Describe();
  EXPECT_TRUE(inl.inlined);
  ASSERT_LT(static_cast<size_t>(b.site + 1), b.frames.size());
  const Frame& outer = b.frames[b.site + 1];
  EXPECT_NE(outer.function.find("CallsInlined"), std::string::npos) << outer.Describe();
  EXPECT_EQ(outer.line, g_inline_line);
  EXPECT_TRUE(sym.Problems().empty());
  EXPECT_TRUE(sym.Symbolize(999999).frames.empty());
}

TEST(Symbolizer, MissingOrChangedModulesGiveModulePlusOffsetAndAReason) {
  std::string path = RecordTrace();
  TraceReader r;
  std::string error;
  ASSERT_TRUE(r.Open(path, &error)) << error;
  Collect c;
  r.ForEachEvent(&c);
  // Point the main program's entry somewhere else, and change a build id.
  auto& maps = const_cast<std::vector<ModuleMap>&>(r.module_maps());
  for (ModuleMap& map : maps) {
    for (Module& m : map.modules) {
      if (m.flags & trace::kModuleMainProgram) m.path = "/nonexistent/program";
      if (m.path.find("libc.so") != std::string::npos) m.build_id = "0123";
    }
  }
  Symbolizer sym(&r);
  const SymbolizedStack& a = sym.Symbolize(c.events[0].stack);
  ASSERT_NE(a.SiteFrame(), nullptr);
  const Frame& site = *a.SiteFrame();
  EXPECT_EQ(site.function, "");
  EXPECT_EQ(site.module, "/nonexistent/program");
  EXPECT_NE(site.Describe().find("program+0x"), std::string::npos) << site.Describe();
  EXPECT_NE(site.note.find("file not found"), std::string::npos) << site.note;
  bool libc_changed = false;
  for (const std::string& p : sym.Problems()) {
    if (p.find("libc.so") != std::string::npos && p.find("build id") != std::string::npos) {
      libc_changed = true;
    }
  }
  EXPECT_TRUE(libc_changed);
}

TEST(Symbolizer, RuntimeFramesAreKnownByModuleOrName) {
  EXPECT_TRUE(IsRuntimeFrame("/usr/lib/x86_64-linux-gnu/libcuda.so.1", ""));
  EXPECT_TRUE(IsRuntimeFrame("/opt/lib/libcudart.so.13", "foo"));
  EXPECT_TRUE(IsRuntimeFrame("/lib/libpinshim.so", ""));
  EXPECT_TRUE(IsRuntimeFrame("/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_main"));
  EXPECT_TRUE(IsRuntimeFrame("/app", "cudaMemcpy"));
  EXPECT_TRUE(IsRuntimeFrame("/app", "cudart::globalState::init()"));
  EXPECT_TRUE(IsRuntimeFrame("/app", "cuMemcpyHtoD_v2"));
  EXPECT_FALSE(IsRuntimeFrame("/app", "cudaish_helper()"));
  EXPECT_FALSE(IsRuntimeFrame("/app", "main"));
  EXPECT_FALSE(IsRuntimeFrame("/usr/lib/libtorch_cuda.so", "at::native::copy_"));
}

}  // namespace
}  // namespace report
}  // namespace pinshim

namespace pinshim {
namespace report {
namespace {

// glibc's fortified memcpy and other header inlines are never a call site.
TEST(SystemHeaderTest, HeadersAreNotCallSites) {
  EXPECT_TRUE(IsSystemHeader("/usr/include/x86_64-linux-gnu/bits/string_fortified.h"));
  EXPECT_TRUE(IsSystemHeader("/usr/local/cuda/include/cuda_runtime.h"));
  EXPECT_FALSE(IsSystemHeader("tests/gpu/misuse/misuse_program.cu"));
  EXPECT_FALSE(IsSystemHeader("/home/user/src/train.cc"));
}

}  // namespace
}  // namespace report
}  // namespace pinshim
