// Invariant walkers of the optimize engine (debug builds only).
//
// With PINSHIM_DEBUG_INVARIANTS defined (the engine's tests build
// //shim/optimize:optimize_checked, which defines it; the library the
// program preloads is built without), the pool, the registration cache,
// the arena, the stager and the pin account each have
//
//   InvariantReport CheckInvariants() const;
//
// which walks the structure (under its lock where it has one) and checks
// every invariant its header lists next to that declaration. The report is
// empty when all hold; otherwise it names each one that failed, with the
// values that show how.
//
// pre: no operation is in flight on the structure (between a test's calls,
// or after its threads joined). Counters that operations update outside the
// lock, and states that exist only inside a call (a registration under way,
// a block between the program's free and its list), are checked as they
// must be once every call returned.
#ifndef PINSHIM_SHIM_OPTIMIZE_INVARIANTS_H_
#define PINSHIM_SHIM_OPTIMIZE_INVARIANTS_H_

#include <cstddef>
#include <cstdint>

#include "shim/core/fixed_text.h"

// On each walker's definition. A walker reads at a quiescent point (under
// the structure's lock, or after its threads joined), so ThreadSanitizer
// has nothing to learn from its reads, and checking them made the tests
// that walk after every call minutes slower under it.
#define PINSHIM_INVARIANT_WALKER __attribute__((no_sanitize("thread")))

namespace pinshim {
namespace optimize {

// What a walker found: one line per invariant that does not hold (the
// first kMaxFailures in full, then "and more"; failures() counts them
// all). Plain data: safe to copy.
class InvariantReport {
 public:
  static constexpr int kMaxFailures = 8;

  // Records that invariant `id` ("P8 ...") does not hold; a and b are the
  // values that disagree (0 when there is nothing to show).
  void Fail(const char* id, uint64_t a = 0, uint64_t b = 0) {
    ++failures_;
    if (failures_ > kMaxFailures + 1) return;
    FixedText t(text_ + used_, sizeof(text_) - used_);
    if (used_ != 0) t.Append("; ");
    if (failures_ == kMaxFailures + 1) {
      used_ += t.Append("and more").size();
      return;
    }
    t.Append(id);
    if (a != 0 || b != 0) t.Append(" (").AppendUint(a).Append(" vs ").AppendUint(b).Append(")");
    used_ += t.size();
  }

  // Fail(id, a, b) unless `holds`.
  void Expect(bool holds, const char* id, uint64_t a = 0, uint64_t b = 0) {
    if (!holds) Fail(id, a, b);
  }

  bool ok() const { return failures_ == 0; }
  int failures() const { return failures_; }
  // "" when ok(); else the failures, "; "-separated.
  const char* text() const { return text_; }

 private:
  char text_[2048] = {};
  size_t used_ = 0;
  int failures_ = 0;
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_INVARIANTS_H_
