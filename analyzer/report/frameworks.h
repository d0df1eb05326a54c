// What the report knows about the frameworks Python programs copy through:
// which one a finding's stack shows, and the fix in that framework's own
// terms (a PyTorch user is told about DataLoader(pin_memory=True) and
// tensor.pin_memory(), not cudaMallocHost). The rules write the generic
// fix; this replaces it where the framework has a better one and keeps the
// generic text beside it.
//
// A stack shows a framework by its native modules (libtorch*, libc10*,
// CuPy's and jaxlib's extension modules, NumPy's _multiarray_umath), its
// C++ namespaces (at::, c10::, torch::, xla::) or its Python files (under
// torch/, cupy/, cupyx/, jax/, jaxlib/, numpy/). PyTorch, CuPy and JAX win
// over NumPy, which they all use. A Python program that shows none of them
// is "python" (its own buffers, e.g. through ctypes).
#ifndef PINSHIM_ANALYZER_REPORT_FRAMEWORKS_H_
#define PINSHIM_ANALYZER_REPORT_FRAMEWORKS_H_

#include <string>
#include <vector>

#include "analyzer/report/analysis.h"
#include "analyzer/report/finding.h"

namespace pinshim {
namespace report {

enum class Framework : uint8_t { kNone, kPython, kPyTorch, kCuPy, kJax, kNumPy };

// "pytorch", "cupy", "jax", "numpy", "python"; "" for kNone.
const char* FrameworkName(Framework f);

// The framework `stack` shows (kNone when none and no Python frame).
Framework FrameworkOfStack(const std::vector<Frame>& stack);

// The framework of a finding: its site's stack, else the stacks of the
// sites in its evidence (where the buffer was allocated, say).
Framework FrameworkOfFinding(const Finding& f);

// The fix for `f` in `framework`'s terms; "" when the generic fix is as
// good. `optimize_mode`: the process ran under optimize mode.
std::string FrameworkFix(Framework framework, const Finding& f, bool optimize_mode);

// Sets each finding's framework and, where FrameworkFix has one, moves its
// generic fix to generic_fix and puts the framework's in fix. Call after
// symbolization (the sites must be resolved).
void ApplyFrameworkKnowledge(ProcessReport* report);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_FRAMEWORKS_H_
