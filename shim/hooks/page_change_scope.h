// Around every interposed call that may change which pages back a range
// (mmap MAP_FIXED, munmap, mremap, madvise and its relatives, shmat, brk):
// in optimize mode, pinshim's pinning of that range is dropped, retired or
// re-established (optimize/page_change.h) before the call takes effect.
// Outside optimize mode, and for calls pinshim makes itself, it is one load.
#ifndef PINSHIM_SHIM_HOOKS_PAGE_CHANGE_SCOPE_H_
#define PINSHIM_SHIM_HOOKS_PAGE_CHANGE_SCOPE_H_

#include <cstddef>
#include <cstdint>

#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"

namespace pinshim {

// Construct BEFORE the real call, destroy after it.
class PageChangeScope {
 public:
  PageChangeScope(const void* addr, size_t len, const optimize::PageChange& what) {
    if (PINSHIM_LIKELY(!g_optimize) || Reentered(Reentry::kHook) || len == 0) return;
    active_ = true;
    ReentryGuard guard(Reentry::kHook);
    optimize::Optimizer::Process().BeforePageChange(reinterpret_cast<uintptr_t>(addr), len, what,
                                                    &ticket_);
  }
  ~PageChangeScope() {
    if (!active_) return;
    ReentryGuard guard(Reentry::kHook);
    optimize::Optimizer::Process().AfterPageChange(&ticket_);
  }
  PageChangeScope(const PageChangeScope&) = delete;
  PageChangeScope& operator=(const PageChangeScope&) = delete;

 private:
  bool active_ = false;
  optimize::PageChangeTicket ticket_;
};

// The PageChange of each call kind other than madvise (PageChangeOfAdvice).
inline optimize::PageChange PageChangeOf(OwnPinReason reason, uint32_t detail,
                                         bool stays_anonymous) {
  optimize::PageChange c;
  c.reason = reason;
  c.detail = detail;
  c.replaces_private = true;
  c.replaces_shared = true;
  c.stays_anonymous = stays_anonymous;
  return c;
}

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_PAGE_CHANGE_SCOPE_H_
