// The write-combined page guard (opt-in): catches plain CPU loads from
// write-combined memory, which no hook sees. Now and then one sampled page of
// a write-combined range is made inaccessible; the SIGSEGV handler tells a
// read fault from a write fault (x86-64 page-fault error code), reports a
// read with the faulting stack, makes the page accessible again and lets the
// access retry. Faults that are not the guard's go to the handler the program
// had (or to the default action).
//
// Protected pages and system calls: the kernel answers EFAULT instead of
// faulting when a system call touches a protected page, which would change
// what the program sees. Hence at most one page is guarded at a time, for a
// short window, and hooks of calls that hand memory to the kernel call
// WcGuardDisarmFor first. Calls the hooks do not wrap (raw syscall(2)) can
// still meet a guarded page during its window; that is why the guard is
// opt-in. It does not arm while the program's own SIGSEGV handler has
// replaced pinshim's.
//
// x86-64 only (elsewhere StartWcGuard and StartCopyGuard return false).
#ifndef PINSHIM_SHIM_TRACE_WC_GUARD_H_
#define PINSHIM_SHIM_TRACE_WC_GUARD_H_

#include <cstddef>
#include <cstdint>

#include "shim/trace/copy_watch.h"

namespace pinshim {
namespace trace {

// Called from the signal handler for each guarded read; must be
// async-signal-safe.
using WcGuardReadFn = void (*)(void* ucontext, uintptr_t fault_address);

// Installs the SIGSEGV handler. Returns false with a reason in err.
bool StartWcGuard(WcGuardReadFn on_read, char* err, size_t err_len);

// From the sampler thread, every tick: ends a window that has lasted
// `window_ms`, and every `every_ms` arms a page of a write-combined range.
void WcGuardTick(uint64_t now_ns, uint32_t every_ms, uint32_t window_ms);

// Unprotects the guarded page if it overlaps [ptr, ptr + len).
// One load when no page is guarded. Async-signal-safe.
void WcGuardDisarmFor(const void* ptr, size_t len);

// The copy guard (copy_watch.h) shares the SIGSEGV handler: a fault on a
// page it protects is handed to CopyGuardFault first, and an access to
// report goes to `on_access` (async-signal-safe). It also installs a
// SIGTRAP handler for its single steps (chaining traps that are not its
// own to the program's handler). Returns false with a reason in err when
// the SIGSEGV handler cannot be installed.
using CopyGuardAccessFn = void (*)(void* ucontext, uintptr_t fault_address, bool write);
bool StartCopyGuard(CopyGuardAccessFn on_access, char* err, size_t err_len);

// True while pinshim's SIGSEGV handler is the one installed (a program that
// replaced it would get the guard's faults; nothing is protected then).
bool GuardHandlerInPlace();

// The pages the copy guard may protect now: kAll while both of pinshim's
// handlers are in place, kWhole while only the SIGSEGV one is (a program
// that replaced the SIGTRAP handler would get the steps' traps), else
// kNone.
GuardPages CopyGuardPagesNow();

// Unprotects any guarded page and stops arming (StopRecorder, fork child).
// The handler stays installed: a fault already on its way must find it.
void StopWcGuard();

// Guarded reads seen since start (tests).
uint64_t WcGuardReads();

// Instructions next to a guarded copy stepped over since start (tests).
uint64_t CopyGuardSteps();

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_WC_GUARD_H_
