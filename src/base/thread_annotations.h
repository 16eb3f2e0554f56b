// Clang thread-safety analysis attributes (-Wthread-safety).  Annotating which
// mutex guards which member, and which functions must or must not hold it,
// turns the locking rules of the engine and server threads into compile-time
// checks: a Clang build with -Wthread-safety -Werror (the sanitizer and fuzz
// configurations, docs/architecture.md "Rules held by tools") rejects an
// unguarded access.  Under GCC the macros expand to nothing.
#pragma once

#if defined(__clang__)
#define DSV4_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DSV4_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (Mutex below).
#define CAPABILITY(name) DSV4_THREAD_ANNOTATION(capability(name))
// An RAII type that holds a lock for its lifetime (MutexLock below).
#define SCOPED_CAPABILITY DSV4_THREAD_ANNOTATION(scoped_lockable)
// The member is read and written only with the lock held.
#define GUARDED_BY(x) DSV4_THREAD_ANNOTATION(guarded_by(x))
// The pointee is read and written only with the lock held.
#define PT_GUARDED_BY(x) DSV4_THREAD_ANNOTATION(pt_guarded_by(x))
// The caller must hold the lock(s).
#define REQUIRES(...) DSV4_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// The caller must not hold the lock(s) (the function takes them itself).
#define EXCLUDES(...) DSV4_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) DSV4_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) DSV4_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) DSV4_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) DSV4_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) DSV4_THREAD_ANNOTATION(lock_returned(x))
// Opts one function out of the analysis; every use says why.
#define NO_THREAD_SAFETY_ANALYSIS DSV4_THREAD_ANNOTATION(no_thread_safety_analysis)
