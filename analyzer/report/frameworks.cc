#include "analyzer/report/frameworks.h"

#include <cstring>

#include "analyzer/report/format.h"

namespace pinshim {
namespace report {
namespace {

bool Has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Which framework one frame belongs to, kNone for none.
Framework OfFrame(const Frame& f) {
  if (f.python) {
    const std::string& file = f.file;
    if (Has(file, "/torch/")) return Framework::kPyTorch;
    if (Has(file, "/cupy/") || Has(file, "/cupyx/") || Has(file, "/cupy_backends/")) {
      return Framework::kCuPy;
    }
    if (Has(file, "/jax/") || Has(file, "/jaxlib/")) return Framework::kJax;
    if (Has(file, "/numpy/")) return Framework::kNumPy;
    return Framework::kNone;
  }
  std::string module = Basename(f.module);
  if (StartsWith(module, "libtorch") || StartsWith(module, "libc10") ||
      Has(f.module, "/torch/lib/") || Has(f.module, "/torch/_C")) {
    return Framework::kPyTorch;
  }
  if (StartsWith(f.function, "at::") || StartsWith(f.function, "c10::") ||
      StartsWith(f.function, "torch::") || StartsWith(f.function, "THP")) {
    return Framework::kPyTorch;
  }
  if (Has(f.module, "/cupy/") || Has(f.module, "/cupy_backends/") ||
      StartsWith(module, "libcupy")) {
    return Framework::kCuPy;
  }
  if (Has(f.module, "/jaxlib/") || Has(f.module, "/jax_plugins/") || Has(module, "jax_cuda") ||
      StartsWith(module, "xla_extension") || StartsWith(f.function, "xla::") ||
      StartsWith(f.function, "jax::")) {
    return Framework::kJax;
  }
  if (Has(f.module, "/numpy/") || StartsWith(module, "_multiarray_umath")) return Framework::kNumPy;
  return Framework::kNone;
}

// The most specific framework among frames: PyTorch, CuPy and JAX over
// NumPy, which each of them uses.
Framework Strongest(Framework a, Framework b) {
  auto rank = [](Framework f) {
    switch (f) {
      case Framework::kPyTorch:
      case Framework::kCuPy:
      case Framework::kJax: return 3;
      case Framework::kNumPy: return 2;
      case Framework::kPython: return 1;
      case Framework::kNone: return 0;
    }
    return 0;
  };
  return rank(b) > rank(a) ? b : a;
}

void SitesOf(const Value& v, std::vector<const Site*>* out) {
  if (v.kind() == Value::Kind::kSite && v.has_site()) out->push_back(&v.site());
  for (const auto& m : v.members()) SitesOf(m.second, out);
  for (const auto& i : v.items()) SitesOf(i, out);
}

// Where the finding's buffer was allocated, when its evidence says.
const Site* AllocatedAt(const Finding& f) {
  const Value* buffers = f.evidence.Find("buffers");
  if (buffers != nullptr) {
    for (const Value& b : buffers->items()) {
      const Value* at = b.Find("allocated_at");
      if (at != nullptr && at->has_site() && at->site().known) return &at->site();
    }
  }
  const Value* at = f.evidence.Find("allocated_at");
  if (at != nullptr && at->has_site() && at->site().known) return &at->site();
  return nullptr;
}

std::string Where(const Finding& f, const char* what) {
  const Site* at = AllocatedAt(f);
  return at != nullptr ? std::string(what) + ", allocated at " + at->Short() : std::string(what);
}

const char* kOptimizeReused =
    " Without code changes, pinshim's optimize mode (pinshim run --mode optimize, or "
    "PINSHIM_MODE=optimize) pins a host "
    "buffer "
    "that is reused in place; it cannot help a new tensor or array every step.";
const char* kOptimizeWasOn =
    " Optimize mode was on in this run and left these copies pageable: \"pinshim's own "
    "pinning\" says why (a new buffer each step, or memory a framework sub-allocates).";

std::string PyTorchFix(const Finding& f, bool optimize) {
  const std::string& r = f.rule;
  if (r == "pageable-hot") {
    return "The copies read " + Where(f, "a pageable CPU tensor") +
           ". For batches from a DataLoader, construct it with DataLoader(..., pin_memory=True): "
           "its pin-memory thread pins each batch, and batch.to(\"cuda\", non_blocking=True) "
           "then copies at pinned speed. A tensor copied again and again is pinned once with "
           "tensor.pin_memory() (or made pinned: torch.empty(..., pin_memory=True)) and reused: "
           "keep one pinned buffer and refill it in place (buf.copy_(src)) rather than calling "
           "pin_memory() every step, which pins a new block each time." +
           std::string(optimize ? kOptimizeWasOn : kOptimizeReused);
  }
  if (r == "async-pageable") {
    return "non_blocking=True is asynchronous only from or to pinned memory: "
           "tensor.to(\"cuda\", non_blocking=True) from a pageable CPU tensor copies "
           "synchronously. Pin the host side first (DataLoader(pin_memory=True) for batches, or "
           "one buffer made with torch.empty(shape, dtype=..., pin_memory=True) and refilled "
           "with buf.copy_(src) each step); for device-to-host, copy into a pinned tensor "
           "(out.copy_(gpu_tensor, non_blocking=True)) and synchronize before reading it. "
           "Where no overlap is intended, drop non_blocking=True.";
  }
  if (r == "pinned-churn") {
    return "Pinned memory is allocated and released over and over: usually tensor.pin_memory() "
           "or torch.empty(..., pin_memory=True) every step on sizes the caching host allocator "
           "cannot reuse. Allocate one pinned buffer once and refill it in place "
           "(buf.copy_(src)), or let DataLoader(pin_memory=True) pin batches. "
           "torch.cuda.host_memory_stats() shows the host allocator's num_host_alloc and "
           "host_alloc_time; PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True,"
           "pinned_num_register_threads:8 makes the blocks it does pin cheaper "
           "(cudaHostRegister from several threads instead of cudaHostAlloc).";
  }
  if (r == "sync-copy-loop") {
    return "Each .cpu(), .item(), .numpy() or .to(device) without non_blocking waits for its "
           "copy. Keep values on the device inside the loop (accumulate there, read once at the "
           "end), or copy with non_blocking=True between pinned and device tensors on a "
           "torch.cuda.Stream and synchronize once (stream.synchronize() or an event) where the "
           "data is needed.";
  }
  if (r == "small-copies") {
    return "Many small tensors are copied one by one (or .item() is read in a loop, one small "
           "device-to-host copy each). Stack them on the host into one pinned tensor "
           "(torch.stack/torch.cat into a buffer made with pin_memory=True) and copy once, or "
           "keep the data on the device and index it there.";
  }
  if (r == "pinned-unused") {
    return "Pinned tensors that no copy uses: drop pin_memory=True / .pin_memory() where the "
           "data stays on the CPU. PyTorch's caching host allocator also keeps released pinned "
           "blocks for reuse; torch.cuda.host_memory_stats() (allocated_bytes against "
           "active_bytes) shows how much it holds.";
  }
  if (r == "over-pinning") {
    return "PyTorch pins through its caching host allocator, which rounds every pinned block up "
           "to a power of two and keeps released blocks cached: torch.cuda.host_memory_stats() "
           "(allocated_bytes against active_bytes) shows what it holds. Pin fewer batches at "
           "once (DataLoader num_workers x prefetch_factor bounds the pinned batches in "
           "flight), reuse pinned buffers, or cap pinning with pinshim's enforce mode "
           "(pinshim run --mode enforce --budget SIZE, or PINSHIM_MODE=enforce "
           "PINSHIM_BUDGET=SIZE).";
  }
  return "";
}

std::string CuPyFix(const Finding& f, bool optimize) {
  const std::string& r = f.rule;
  if (r == "pageable-hot") {
    return "The copies read " + Where(f, "a NumPy array in pageable memory") +
           " (through cupy.asarray, ndarray.set or cupy.asnumpy). Keep that host data in pinned "
           "memory: "
           "cupyx.empty_pinned(shape, dtype) (or cupyx.zeros_pinned) makes a NumPy array over "
           "pinned memory, and cupy.cuda.alloc_pinned_memory(nbytes) a pinned buffer to view "
           "with numpy.frombuffer; fill it in place every step (numpy.copyto) and copy from it." +
           std::string(optimize ? kOptimizeWasOn : kOptimizeReused);
  }
  if (r == "async-pageable") {
    return "gpu_array.set(host, stream=s) and gpu_array.get(stream=s) are asynchronous only "
           "with pinned host arrays: make them with cupyx.empty_pinned / cupyx.zeros_pinned "
           "(or over cupy.cuda.alloc_pinned_memory) instead of plain NumPy arrays.";
  }
  if (r == "pinned-churn") {
    return "Pinned memory is allocated and released over and over. cupyx.empty_pinned and "
           "cupy.cuda.alloc_pinned_memory draw from CuPy's pinned memory pool "
           "(cupy.get_default_pinned_memory_pool()); keep that pool on (not "
           "cupy.cuda.set_pinned_memory_allocator(None)) and reuse one pinned array per "
           "stream instead of making a new one per batch.";
  }
  if (r == "sync-copy-loop") {
    return "cupy.asnumpy(a) and a.get() without a stream wait for each copy. Copy on a "
           "cupy.cuda.Stream into pinned arrays (a.get(stream=s, out=pinned) with pinned from "
           "cupyx.empty_pinned) and call s.synchronize() once where the data is needed.";
  }
  if (r == "small-copies") {
    return "Many small arrays are copied one by one (or scalars read in a loop: float(a[i]), "
           "a[i].item()). Concatenate them on the host into one pinned array "
           "(cupyx.empty_pinned) and copy once, or keep the data on the device.";
  }
  if (r == "pinned-unused" || r == "over-pinning") {
    return "CuPy's pinned memory pool keeps released blocks for reuse: "
           "cupy.get_default_pinned_memory_pool().n_free_blocks() shows them and "
           "free_all_blocks() gives them back. Pin only the staging arrays copies go through, "
           "and reuse them.";
  }
  return "";
}

std::string JaxFix(const Finding& f, bool) {
  const std::string& r = f.rule;
  if (r == "pageable-hot") {
    return "The copies read " + Where(f, "host (NumPy) data in pageable memory") +
           ". Data that is reused belongs on the device: jax.device_put it once, outside the "
           "loop. For a stream of batches, put the next batch in pinned host memory ahead of "
           "time (jax.device_put(x, jax.sharding.SingleDeviceSharding(device, "
           "memory_kind=\"pinned_host\"))) or prefetch it while the current step runs "
           "(jax.device_put returns at once).";
  }
  if (r == "sync-copy-loop") {
    return "numpy.asarray(x), float(x), x.item() or x.block_until_ready() in a loop wait for "
           "each transfer. Keep values on the device and fetch them once, several together "
           "(jax.device_get on a tuple or pytree).";
  }
  if (r == "small-copies") {
    return "Many small transfers: put a whole pytree with one jax.device_put, or stack the "
           "pieces (numpy.stack) and transfer once; fetch results together with jax.device_get.";
  }
  return "";
}

std::string NumPyFix(const Finding& f, bool optimize) {
  const std::string& r = f.rule;
  if (r == "pageable-hot") {
    return "The copies read " + Where(f, "a NumPy array in pageable memory") +
           ". Allocate it pinned once and refill it in place (numpy.copyto(pinned, batch)): "
           "cupyx.empty_pinned(shape, dtype) if CuPy is installed, or cudaHostAlloc through "
           "cuda-python wrapped with numpy.frombuffer; or register the existing array once with "
           "cudaHostRegister(arr.ctypes.data, arr.nbytes, 0) and keep it alive while "
           "registered." +
           std::string(optimize ? kOptimizeWasOn : kOptimizeReused);
  }
  if (r == "async-pageable") {
    return "An asynchronous copy from a NumPy array in pageable memory runs synchronously: "
           "allocate the array pinned (cupyx.empty_pinned, or cudaHostAlloc + "
           "numpy.frombuffer) or register it once with cudaHostRegister(arr.ctypes.data, "
           "arr.nbytes, 0).";
  }
  return "";
}

std::string PythonFix(const Finding& f, bool optimize) {
  const std::string& r = f.rule;
  if (r == "pageable-hot") {
    return "The copies read " + Where(f, "a pageable buffer of Python's own") +
           " (ctypes.create_string_buffer, bytearray, array and the like are pageable). Allocate "
           "the buffer through the driver the program already calls (cuMemHostAlloc, or "
           "cudaHostAlloc) and view it from Python ((ctypes.c_char * n).from_address(ptr), or "
           "numpy.frombuffer), then refill it in place; or register the existing buffer once "
           "with cuMemHostRegister and keep it registered while it is reused." +
           std::string(optimize ? kOptimizeWasOn : kOptimizeReused);
  }
  if (r == "async-pageable") {
    return "An asynchronous copy from Python's own (pageable) buffer runs synchronously: copy "
           "from memory allocated with cuMemHostAlloc (viewed from Python with "
           "(ctypes.c_char * n).from_address(ptr)), or register the buffer once with "
           "cuMemHostRegister.";
  }
  return "";
}

}  // namespace

const char* FrameworkName(Framework f) {
  switch (f) {
    case Framework::kNone: return "";
    case Framework::kPython: return "python";
    case Framework::kPyTorch: return "pytorch";
    case Framework::kCuPy: return "cupy";
    case Framework::kJax: return "jax";
    case Framework::kNumPy: return "numpy";
  }
  return "";
}

Framework FrameworkOfStack(const std::vector<Frame>& stack) {
  Framework found = Framework::kNone;
  bool python = false;
  for (const Frame& f : stack) {
    python |= f.python;
    found = Strongest(found, OfFrame(f));
  }
  return found == Framework::kNone && python ? Framework::kPython : found;
}

Framework FrameworkOfFinding(const Finding& f) {
  Framework found = FrameworkOfStack(f.site.stack);
  if (found != Framework::kNone && found != Framework::kPython) return found;
  std::vector<const Site*> sites;
  SitesOf(f.evidence, &sites);
  for (const Site* s : sites) found = Strongest(found, FrameworkOfStack(s->stack));
  return found;
}

std::string FrameworkFix(Framework framework, const Finding& f, bool optimize_mode) {
  switch (framework) {
    case Framework::kPyTorch: return PyTorchFix(f, optimize_mode);
    case Framework::kCuPy: return CuPyFix(f, optimize_mode);
    case Framework::kJax: return JaxFix(f, optimize_mode);
    case Framework::kNumPy: return NumPyFix(f, optimize_mode);
    case Framework::kPython: return PythonFix(f, optimize_mode);
    case Framework::kNone: return "";
  }
  return "";
}

void ApplyFrameworkKnowledge(ProcessReport* report) {
  bool optimize = report->info.mode.find("optimize") != std::string::npos;
  for (Finding& f : report->findings) {
    Framework framework = FrameworkOfFinding(f);
    f.framework = FrameworkName(framework);
    std::string fix = FrameworkFix(framework, f, optimize);
    if (fix.empty()) continue;
    f.generic_fix = std::move(f.fix);
    f.fix = std::move(fix);
  }
}

}  // namespace report
}  // namespace pinshim
