// What scripts/thread_safety_check.sh must refuse of the node ledger, whose
// lock is taken by a Lock() that may fail: a *Locked function called with no
// Lock() at all, and one called on the path where Lock() returned false. The
// check fails unless clang reports both, so the ledger's annotations
// (shim/budget/ledger.h) are proved to bind. Never built into anything.
#include "shim/budget/ledger.h"

namespace pinshim {
namespace budget {

uint32_t ReclaimUnlocked(Ledger& ledger) {
  return ledger.ReclaimDeadLocked();  // must be refused
}

uint32_t ReclaimWhenLockFailed(Ledger& ledger) {
  if (!ledger.Lock()) return ledger.ReclaimDeadLocked();  // must be refused
  const uint32_t n = ledger.ReclaimDeadLocked();
  ledger.Unlock();
  return n;
}

}  // namespace budget
}  // namespace pinshim
