// pinshim's one fork handler (pthread_atfork, registered at start-up), and
// the ordered list of what it does. Each part holds something across the
// fork (a lock taken in prepare and released in the parent and the child)
// or resets something in the child, or both.
//
// kForkParts lists the parts outermost first. Prepare runs down the list;
// the parent's and the child's handlers run up it, so that each lock is
// released in the reverse of the order it was taken, and every child-only
// part runs after the locks are released. The places are those the
// separate registrations had (pthread_atfork runs prepare handlers in the
// reverse of the order they were registered, the others in that order):
// the module iteration guard innermost, then the registries, the optimize
// engine, and the child-only resets, the process budget's last.
//
// The module iteration guard (shim/core/phdr.h) and the process budget
// (shim/budget/budget.h) register themselves where no such handler takes
// them over (their own tests, a module iteration before start-up): their
// parts here then do nothing.
#include <pthread.h>

#include <atomic>

#include "shim/budget/budget.h"
#include "shim/core/phdr.h"
#include "shim/core/stats.h"
#include "shim/hooks/state.h"
#include "shim/optimize/optimizer.h"
#include "shim/trace/recorder.h"

namespace pinshim {
namespace {

// Whether this handler runs the module iteration guard's part (it claimed
// the guard before the guard registered itself).
bool g_runs_phdr_guard = false;

struct ForkPart {
  void (*prepare)();  // null: nothing to hold across the fork
  void (*parent)();   // null: nothing to release in the parent
  void (*child)();    // null: nothing to release or reset in the child
};

// --- the parts, in the order of kForkParts ------------------------------------

// The child enforces its own share: restart at zero, a fresh ledger slot.
void BudgetChild() { budget::Budget::ProcessAfterForkChild(); }

// The child's metrics file is written by a thread of its own.
void MetricsChild() { StartMetricsThread(); }

// The child records into a trace of its own.
void RecorderChild() { trace::RecorderAfterForkInChild(); }

// The child reports its own calls only; the memory layout it inherited
// (and so the registries) stays valid.
void StatsChild() { ResetStats(); }

// The child captures no allocation sites (optimize mode is off there).
void CaptureSitesChild() { g_capture_sites = false; }

// Optimize mode's engine: its parts' locks, and in the child the engine off
// (its own parts in order: Optimizer::PrepareFork, AfterForkParent and
// AfterForkChild, optimizer.cc).
void OptimizerPrepare() {
  if (g_optimize) optimize::Optimizer::Process().PrepareFork();
}
void OptimizerParent() {
  if (g_optimize) optimize::Optimizer::Process().AfterForkParent();
}
void OptimizerChild() {
  if (g_optimize) optimize::Optimizer::Process().AfterForkChild();
}

// The registry of tracked allocations.
void AllocationsPrepare() { g_allocations.LockForFork(); }
void AllocationsAfter() { g_allocations.UnlockAfterFork(); }

// The registry of the program's registrations.
void RegistrationsPrepare() { g_registrations.LockForFork(); }
void RegistrationsAfter() { g_registrations.UnlockAfterFork(); }

// No thread of the parent is inside dl_iterate_phdr while it forks.
void PhdrPrepare() {
  if (g_runs_phdr_guard) PhdrForkPrepare();
}
void PhdrAfter() {
  if (g_runs_phdr_guard) PhdrAfterFork();
}

const ForkPart kForkParts[] = {
    {nullptr, nullptr, BudgetChild},
    {nullptr, nullptr, MetricsChild},
    {nullptr, nullptr, RecorderChild},
    {nullptr, nullptr, StatsChild},
    {nullptr, nullptr, CaptureSitesChild},
    {OptimizerPrepare, OptimizerParent, OptimizerChild},
    {AllocationsPrepare, AllocationsAfter, AllocationsAfter},
    {RegistrationsPrepare, RegistrationsAfter, RegistrationsAfter},
    {PhdrPrepare, PhdrAfter, PhdrAfter},
};
constexpr int kForkPartCount = sizeof(kForkParts) / sizeof(kForkParts[0]);

void Prepare() {
  for (int i = 0; i < kForkPartCount; ++i) {
    if (kForkParts[i].prepare != nullptr) kForkParts[i].prepare();
  }
}

void Parent() {
  for (int i = kForkPartCount - 1; i >= 0; --i) {
    if (kForkParts[i].parent != nullptr) kForkParts[i].parent();
  }
}

void Child() {
  for (int i = kForkPartCount - 1; i >= 0; --i) {
    if (kForkParts[i].child != nullptr) kForkParts[i].child();
  }
}

}  // namespace

void InstallForkHandlers() {
  g_runs_phdr_guard = ClaimPhdrForkGuard();
  budget::Budget::ClaimProcessForkChild();
  pthread_atfork(Prepare, Parent, Child);
}

}  // namespace pinshim
