// Clang's thread-safety attributes, so that the compiler checks what the
// `...Locked` names promise: which lock guards which member, and which
// functions must (or must not) be called with it held. Under clang with
// -Wthread-safety (scripts/thread_safety_check.sh, run by scripts/test.sh)
// a missing lock is an error; under GCC, which builds the library, they
// expand to nothing. Header-only, no dependencies.
#ifndef PINSHIM_SHIM_CORE_THREAD_ANNOTATIONS_H_
#define PINSHIM_SHIM_CORE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define PINSHIM_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define PINSHIM_THREAD_ATTRIBUTE(x)
#endif

// A type whose objects are locks.
#define CAPABILITY(name) PINSHIM_THREAD_ATTRIBUTE(capability(name))
// A type whose objects hold a lock from construction to destruction.
#define SCOPED_CAPABILITY PINSHIM_THREAD_ATTRIBUTE(scoped_lockable)
// A member read or written only with the lock held.
#define GUARDED_BY(lock) PINSHIM_THREAD_ATTRIBUTE(guarded_by(lock))
// A pointer member whose pointee is read or written only with the lock held.
#define PT_GUARDED_BY(lock) PINSHIM_THREAD_ATTRIBUTE(pt_guarded_by(lock))
// A function called only with the locks held.
#define REQUIRES(...) PINSHIM_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
// A function that takes the locks and returns with them held.
#define ACQUIRE(...) PINSHIM_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
// A function that takes the locks when it returns `result`.
#define TRY_ACQUIRE(...) PINSHIM_THREAD_ATTRIBUTE(try_acquire_capability(__VA_ARGS__))
// A function that releases locks it was called with.
#define RELEASE(...) PINSHIM_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
// A function called only without the locks (it takes them itself).
#define EXCLUDES(...) PINSHIM_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
// A function that returns a reference to the given lock.
#define RETURN_CAPABILITY(x) PINSHIM_THREAD_ATTRIBUTE(lock_returned(x))
// A function whose locking the analysis cannot follow (each use says why).
#define NO_THREAD_SAFETY_ANALYSIS PINSHIM_THREAD_ATTRIBUTE(no_thread_safety_analysis)

#endif  // PINSHIM_SHIM_CORE_THREAD_ANNOTATIONS_H_
