// Which framework a finding's stack shows, and the fix it then gets.
#include "analyzer/report/frameworks.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace pinshim {
namespace report {
namespace {

Frame Native(const std::string& module, const std::string& function) {
  Frame f;
  f.module = module;
  f.function = function;
  return f;
}

Frame Py(const std::string& file, const std::string& function, int line) {
  Frame f;
  f.python = true;
  f.file = file;
  f.function = function;
  f.line = line;
  return f;
}

const char kSitePackages[] = "/opt/venv/lib/python3.12/site-packages/";

std::vector<Frame> TorchStack() {
  return {Native("/usr/lib/libcuda.so.1", "cuMemcpyHtoDAsync_v2"),
          Native(std::string(kSitePackages) + "torch/lib/libtorch_cuda.so",
                 "void at::native::copy_kernel_cuda<float>(at::TensorIterator&, bool)"),
          Native(std::string(kSitePackages) + "numpy/core/_multiarray_umath.cpython-312.so", "f"),
          Py(std::string(kSitePackages) + "torch/nn/modules/module.py", "Module._apply", 900),
          Py("/home/me/train.py", "train", 12)};
}

Finding Make(const std::string& rule, std::vector<Frame> stack) {
  Finding f;
  f.rule = rule;
  f.fix = "generic fix for " + rule;
  f.site.known = true;
  f.site.stack = std::move(stack);
  f.site.site_index = static_cast<int>(f.site.stack.size()) - 1;
  return f;
}

ProcessReport Report(std::vector<Finding> findings, const char* mode = "observe") {
  ProcessReport r;
  r.info.mode = mode;
  r.findings = std::move(findings);
  ApplyFrameworkKnowledge(&r);
  return r;
}

void ExpectAll(const std::string& text, std::vector<const char*> words) {
  for (const char* w : words) EXPECT_NE(text.find(w), std::string::npos) << w << " in: " << text;
}

TEST(Frameworks, TellsThemApartByModulesFilesAndNames) {
  EXPECT_EQ(FrameworkOfStack(TorchStack()), Framework::kPyTorch);  // over NumPy
  EXPECT_EQ(FrameworkOfStack({Native("/x/libc10_cuda.so", "c10::cuda::foo()")}),
            Framework::kPyTorch);
  EXPECT_EQ(FrameworkOfStack({Native("/x/app", "at::native::copy_(at::Tensor&)")}),
            Framework::kPyTorch);
  EXPECT_EQ(FrameworkOfStack({Native(std::string(kSitePackages) +
                                         "cupy/_core/core.cpython-312-x86_64-linux-gnu.so",
                                     "f"),
                              Py(std::string(kSitePackages) + "numpy/core/numeric.py", "g", 1)}),
            Framework::kCuPy);
  EXPECT_EQ(FrameworkOfStack({Py(std::string(kSitePackages) + "cupyx/_pinned_array.py", "f", 1)}),
            Framework::kCuPy);
  EXPECT_EQ(FrameworkOfStack({Native(std::string(kSitePackages) + "jaxlib/xla_extension.so",
                                     "xla::PjRtStreamExecutorBuffer::CopyToDevice()")}),
            Framework::kJax);
  EXPECT_EQ(FrameworkOfStack({Py(std::string(kSitePackages) + "jax/_src/api.py", "device_put", 1)}),
            Framework::kJax);
  EXPECT_EQ(FrameworkOfStack({Py(std::string(kSitePackages) + "numpy/lib/npyio.py", "load", 1),
                              Py("/home/me/a.py", "main", 3)}),
            Framework::kNumPy);
  EXPECT_EQ(FrameworkOfStack({Py("/home/me/a.py", "main", 3)}), Framework::kPython);
  EXPECT_EQ(FrameworkOfStack({Native("/home/me/app", "main")}), Framework::kNone);
  // "torch" elsewhere in a path is not PyTorch's.
  EXPECT_EQ(FrameworkOfStack({Native("/home/me/torchlight/app", "main")}), Framework::kNone);
}

TEST(Frameworks, PyTorchFixesSpeakPyTorch) {
  ProcessReport r =
      Report({Make("pageable-hot", TorchStack()), Make("async-pageable", TorchStack()),
              Make("pinned-churn", TorchStack()), Make("sync-copy-loop", TorchStack()),
              Make("small-copies", TorchStack()), Make("over-pinning", TorchStack()),
              Make("pinned-unused", TorchStack()), Make("free-in-flight", TorchStack())});
  for (const Finding& f : r.findings) EXPECT_EQ(f.framework, "pytorch") << f.rule;
  const Finding& hot = r.findings[0];
  ExpectAll(hot.fix, {"DataLoader(..., pin_memory=True)", "tensor.pin_memory()",
                      "non_blocking=True", "buf.copy_(src)", "PINSHIM_MODE=optimize"});
  EXPECT_EQ(hot.generic_fix, "generic fix for pageable-hot");
  EXPECT_EQ(hot.fix.find("cudaMallocHost"), std::string::npos);
  ExpectAll(r.findings[1].fix, {"non_blocking=True", "pinned", "pin_memory=True"});
  ExpectAll(r.findings[2].fix, {"torch.cuda.host_memory_stats()", "PYTORCH_CUDA_ALLOC_CONF",
                                "pinned_use_cuda_host_register", "pin_memory()"});
  ExpectAll(r.findings[3].fix, {".item()", "non_blocking=True", "torch.cuda.Stream"});
  ExpectAll(r.findings[4].fix, {"torch.stack", "pin_memory=True"});
  ExpectAll(r.findings[5].fix, {"torch.cuda.host_memory_stats()", "power of two"});
  ExpectAll(r.findings[6].fix, {"torch.cuda.host_memory_stats()"});
  // No PyTorch text for this rule: the generic fix stays, tagged.
  EXPECT_EQ(r.findings[7].fix, "generic fix for free-in-flight");
  EXPECT_EQ(r.findings[7].generic_fix, "");
  EXPECT_EQ(r.findings[7].framework, "pytorch");
}

TEST(Frameworks, OptimizeModeRunsSayWhatItDid) {
  ProcessReport r = Report({Make("pageable-hot", TorchStack())}, "observe,optimize");
  ExpectAll(r.findings[0].fix, {"Optimize mode was on in this run"});
}

TEST(Frameworks, CuPyJaxNumPyAndPlainPython) {
  std::vector<Frame> cupy = {Native(std::string(kSitePackages) + "cupy/cuda/memory.so", "f"),
                             Py("/home/me/a.py", "main", 3)};
  std::vector<Frame> jax = {Py(std::string(kSitePackages) + "jax/_src/api.py", "f", 1),
                            Py("/home/me/a.py", "main", 3)};
  std::vector<Frame> numpy = {Py(std::string(kSitePackages) + "numpy/core/numeric.py", "f", 1),
                              Py("/home/me/a.py", "main", 3)};
  std::vector<Frame> plain = {Native("/usr/lib/x86_64-linux-gnu/libffi.so.8", "ffi_call"),
                              Py("/home/me/a.py", "main", 3)};
  ProcessReport r =
      Report({Make("pageable-hot", cupy), Make("async-pageable", cupy), Make("pinned-churn", cupy),
              Make("pageable-hot", jax), Make("pageable-hot", numpy), Make("pageable-hot", plain),
              Make("wc-read", plain)});
  ExpectAll(r.findings[0].fix, {"cupyx.empty_pinned", "cupy.cuda.alloc_pinned_memory"});
  ExpectAll(r.findings[1].fix, {"cupyx.empty_pinned", "stream=s"});
  ExpectAll(r.findings[2].fix, {"cupy.get_default_pinned_memory_pool()"});
  ExpectAll(r.findings[3].fix, {"jax.device_put", "pinned_host"});
  ExpectAll(r.findings[4].fix, {"numpy.copyto", "cudaHostRegister"});
  ExpectAll(r.findings[5].fix, {"cuMemHostAlloc", "from_address"});
  EXPECT_EQ(r.findings[5].framework, "python");
  EXPECT_EQ(r.findings[6].fix, "generic fix for wc-read");
}

TEST(Frameworks, TheAllocationSiteCanTell) {
  // The copy site is plain Python, but the buffer came from PyTorch.
  Finding f = Make("pageable-hot", {Py("/home/me/a.py", "main", 3)});
  auto alloc = std::make_shared<Site>();
  alloc->known = true;
  alloc->stack = {
      Native(std::string(kSitePackages) + "torch/lib/libc10.so", "c10::alloc_cpu(unsigned long)"),
      Py("/home/me/a.py", "load", 9)};
  alloc->site_index = 1;
  Value buffer = Value::Object();
  Value at = Value::SiteOf(7);
  at.set_site(alloc);
  buffer.Set("allocated_at", std::move(at));
  Value buffers = Value::Array();
  buffers.Push(std::move(buffer));
  f.evidence.Set("buffers", std::move(buffers));
  ProcessReport r = Report({f});
  EXPECT_EQ(r.findings[0].framework, "pytorch");
  ExpectAll(r.findings[0].fix, {"allocated at load (/home/me/a.py:9)", "pin_memory"});
}

TEST(Frameworks, NativeProgramsKeepTheGenericFix) {
  ProcessReport r = Report({Make("pageable-hot", {Native("/home/me/app", "Upload(void*)")})});
  EXPECT_EQ(r.findings[0].framework, "");
  EXPECT_EQ(r.findings[0].fix, "generic fix for pageable-hot");
  EXPECT_EQ(r.findings[0].generic_fix, "");
}

}  // namespace
}  // namespace report
}  // namespace pinshim
