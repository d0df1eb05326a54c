// dl_iterate_phdr for pinshim's own calls, safe across fork.
//
// glibc (measured: bench/RESULTS.md, "2026-12-01, evening", fork and module
// walks) does not reset the lock behind dl_iterate_phdr in a fork child: a
// thread inside dl_iterate_phdr when another thread forks leaves the child's
// first dl_iterate_phdr (its own, or libunwind's while it unwinds) blocked
// forever. pinshim calls it from its sampler thread and from the program's
// threads (module changes, site capture), where the program never would, so
// every such call goes through IteratePhdr: a fork handler waits until none
// is inside before the fork proceeds (invariant 2, shim/INVARIANTS.md).
#ifndef PINSHIM_SHIM_CORE_PHDR_H_
#define PINSHIM_SHIM_CORE_PHDR_H_

#include <link.h>

#include <cstddef>

namespace pinshim {

using PhdrCallback = int (*)(struct dl_phdr_info* info, size_t size, void* data);

// dl_iterate_phdr(callback, data), with fork held off while it runs. Not
// from a signal handler (it takes a lock). A call from inside a callback
// runs unguarded (the outer call already holds fork off).
int IteratePhdr(PhdrCallback callback, void* data);

// Registers the fork handlers (IteratePhdr does on its first call). Call it
// early (the library's start-up does) and before starting a thread that
// will iterate, so that no fork can come between a first call and the
// registration. Safe to re-enter from an allocation hook while it runs.
void InstallPhdrForkGuard();

// For a process that registers one fork handler for all its parts (the
// library's, shim/hooks/fork_handlers.cc): true when the guard had not
// registered itself, in which case it never will, and the caller runs
// PhdrForkPrepare in its prepare handler and PhdrAfterFork in its parent's
// and child's handlers, in the places the guard's own registration at
// that moment would have given them (prepare last, the others first).
// False when the guard registered itself already: the caller runs neither.
bool ClaimPhdrForkGuard();
void PhdrForkPrepare();
void PhdrAfterFork();

}  // namespace pinshim

#endif  // PINSHIM_SHIM_CORE_PHDR_H_
