// What scripts/thread_safety_check.sh must refuse: a member guarded by a
// lock read without it, and a function that needs the lock called without
// it. The check compiles this file and fails unless clang reports both, so
// a check that stopped checking (annotations expanding to nothing, the
// warning off) is caught. Never built into anything.
#include "shim/optimize/lock.h"

namespace pinshim {
namespace optimize {

class Counter {
 public:
  int ReadUnlocked() const { return value_; }  // must be refused
  void BumpUnlocked() { BumpLocked(); }        // must be refused
  void Bump() {
    MutexLock lock(&mu_);
    BumpLocked();
  }

 private:
  void BumpLocked() REQUIRES(mu_) { ++value_; }

  mutable Mutex mu_;
  int value_ GUARDED_BY(mu_) = 0;
};

}  // namespace optimize
}  // namespace pinshim
