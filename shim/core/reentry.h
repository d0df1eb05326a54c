// What pinshim is in the middle of on a thread, for the code that must not
// enter itself again. One per-thread count per purpose, taken by RAII
// (ReentryGuard) and read with Reentered(); a function that needs a purpose
// held takes the guard as an argument, so it cannot be called without it.
//
// The purposes:
// - kHook: inside a hook, the driver under it, or pinshim's own work (its
//   threads, start-up, exit). A hook entered while it is held forwards
//   without counting or tracking, so each call of the program counts once.
// - kLibcLookup, kReadLookup: looking up the real libc functions
//   (state.cc) or the real read functions (wc_hooks.cc); what the lookup
//   allocates is served from the bootstrap pool.
// - kRecorder: inside the trace recorder; nothing it does is recorded.
// - kLedger: holding or taking the node ledger's lock (budget.cc); a signal
//   handler that interrupted it there is refused, not deadlocked.
// - kEvictor: running the budget's evictor; no eviction from inside one.
//
// A vfork child runs on its parent's thread-local storage: the code there
// (process_hooks.cc) leaves the counts as they are.
#ifndef PINSHIM_SHIM_CORE_REENTRY_H_
#define PINSHIM_SHIM_CORE_REENTRY_H_

#include <cstdint>

#include "shim/core/macros.h"

namespace pinshim {

enum class Reentry : uint8_t {
  kHook = 0,
  kLibcLookup,
  kReadLookup,
  kRecorder,
  kLedger,
  kEvictor,
  kCount,
};

// The counts (initial-exec: reading one never calls into the loader). Not
// exported from the preloaded library: shim/exports.lds lists what is.
extern PINSHIM_TLS int t_reentry[static_cast<int>(Reentry::kCount)];

inline bool Reentered(Reentry what) { return t_reentry[static_cast<int>(what)] != 0; }

class ReentryGuard {
 public:
  struct FirstEntry {};
  static constexpr FirstEntry kFirstEntry{};

  // Holds `what` until destroyed (nesting counts).
  explicit ReentryGuard(Reentry what) : what_(what) { ++t_reentry[static_cast<int>(what)]; }
  // Holds `what` only when this thread did not hold it yet; held() says.
  ReentryGuard(Reentry what, FirstEntry) : what_(Reentered(what) ? Reentry::kCount : what) {
    if (held()) ++t_reentry[static_cast<int>(what_)];
  }
  ~ReentryGuard() {
    if (held()) --t_reentry[static_cast<int>(what_)];
  }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;

  bool held() const { return what_ != Reentry::kCount; }
  Reentry what() const { return what_; }

  // This thread holds `what` for the rest of its life: pinshim's own
  // threads, and a process that is ending.
  static void HoldForever(Reentry what) { ++t_reentry[static_cast<int>(what)]; }
  // In a fork child: the forking thread's count of `what`, a stale copy of
  // a moment when it did not hold it, is cleared.
  static void ClearAfterFork(Reentry what) { t_reentry[static_cast<int>(what)] = 0; }

 private:
  Reentry what_;
};

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_REENTRY_H_
