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
  std::string dir =
      std::string(tmp ? tmp : "/tmp") + "/symbolizer_test." + std::to_string(getpid());
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
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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

namespace pinshim {
namespace report {
namespace {

TEST(ShortCxxName, ElidesTemplateArgumentsAndReturnTypes) {
  EXPECT_EQ(ShortCxxName(
                "void at::native::copy_kernel_cuda<float, c10::Half>(at::TensorIterator&, bool)"),
            "at::native::copy_kernel_cuda<...>(at::TensorIterator&, bool)");
  EXPECT_EQ(ShortCxxName("std::vector<std::pair<int, std::map<int, int> >, std::allocator<x> "
                         ">::push_back(int const&)"),
            "std::vector<...>::push_back(int const&)");
  EXPECT_EQ(ShortCxxName("unsigned long foo<3>(std::function<void (int)>)"),
            "foo<...>(std::function<...>)");
  EXPECT_EQ(ShortCxxName("void at::native::(anonymous namespace)::launch<1>(int)"),
            "at::native::(anonymous namespace)::launch<...>(int)");
  EXPECT_EQ(ShortCxxName("at::native::gpu_kernel_impl<X>(at::TensorIteratorBase&)::{lambda(int)#1}:"
                         ":operator()(int) const"),
            "at::native::gpu_kernel_impl<...>(at::TensorIteratorBase&)::{lambda(int)#1}::operator()"
            "(int) const");
  // Operators are not brackets; names without templates stay as they are.
  EXPECT_EQ(ShortCxxName("bool operator< <int>(Foo<int> const&, Foo<int> const&)"),
            "operator< <...>(Foo<...> const&, Foo<...> const&)");
  EXPECT_EQ(ShortCxxName("std::ostream::operator<<(int)"), "std::ostream::operator<<(int)");
  EXPECT_EQ(ShortCxxName("Iter::operator->() const"), "Iter::operator->() const");
  EXPECT_EQ(ShortCxxName("copy_kernel(at::TensorIterator&, bool)"),
            "copy_kernel(at::TensorIterator&, bool)");
  EXPECT_EQ(ShortCxxName("cudaMemcpy"), "cudaMemcpy");
  EXPECT_EQ(ShortCxxName("broken<name"), "broken<name");  // unbalanced: left alone
}

TEST(PythonFiles, LibrariesAndTheUsersCode) {
  EXPECT_TRUE(IsPythonLibraryFile("/usr/lib/python3/dist-packages/numpy/core/x.py"));
  EXPECT_TRUE(IsPythonLibraryFile(
      "/opt/torch/.venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py"));
  EXPECT_TRUE(IsPythonLibraryFile("/usr/lib/python3.11/threading.py"));
  EXPECT_TRUE(IsPythonLibraryFile("/root/.pyenv/versions/3.13.0/lib/python3.13/asyncio/tasks.py"));
  EXPECT_TRUE(IsPythonLibraryFile("<frozen importlib._bootstrap>"));
  EXPECT_FALSE(IsPythonLibraryFile("/home/me/train.py"));
  EXPECT_FALSE(IsPythonLibraryFile("<string>"));
  EXPECT_FALSE(IsPythonLibraryFile("/home/me/lib/pythonic/model.py"));
  EXPECT_TRUE(IsInterpreterModule("/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"));
  EXPECT_TRUE(IsInterpreterModule("/usr/bin/python3.11"));
  EXPECT_TRUE(IsInterpreterModule("/opt/py/bin/python3.13t"));
  EXPECT_TRUE(IsInterpreterModule("/usr/lib/x86_64-linux-gnu/libffi.so.8"));
  EXPECT_FALSE(IsInterpreterModule("/opt/torch/lib/libtorch_cuda.so"));
  EXPECT_FALSE(IsInterpreterModule("/usr/bin/pythonista"));
}

}  // namespace
}  // namespace report
}  // namespace pinshim
