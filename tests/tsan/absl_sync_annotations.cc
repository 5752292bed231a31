// Happens-before annotations for Debian's uninstrumented Abseil
// synchronization library, linked into every executable of a
// KILN_SANITIZE_THREAD build (cmake/KilnCompileOptions.cmake).
//
// libabsl_synchronization.so was built without ThreadSanitizer, and
// absl::Mutex waits with raw futex calls that TSan does not intercept, so TSan
// sees no ordering between two threads that take the same absl::Mutex and
// reports every field it guards as a race. The definitions below take the
// place of the library's entry points (an executable's symbols come before a
// shared library's), call the library's own through dlsym(RTLD_NEXT), and tell
// TSan what they mean: a release on the mutex before it is given up, an
// acquire after it is held again.
//
// A Condition is evaluated inside the library, with the mutex held there, by
// the waiter or by whichever thread unlocks: each Condition given to a
// replaced entry point is wrapped so that its evaluation acquires the mutex
// first and releases it after. A waiter releases the mutex before it waits,
// so that the evaluating thread sees the Condition and what the waiter wrote.
//
// Notification::Notify releases both the Notification and its atomic flag:
// HasBeenNotified() is an inline acquire load of the flag (the flag follows
// the Notification's Mutex).

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

// The library's definition of the symbol this file replaces.
template <typename Fn>
Fn Next(const char* symbol) {
  void* fn = dlsym(RTLD_NEXT, symbol);
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_sync_annotations: %s not found: %s\n", symbol, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Each replaced entry point keeps the library's function in a local static.
#define KILN_NEXT(type, mangled) static const auto next = Next<type>(mangled)

void Acquire(const void* addr) { __tsan_acquire(const_cast<void*>(addr)); }
void Release(const void* addr) { __tsan_release(const_cast<void*>(addr)); }

// A waiter's Condition and its mutex, for the library to evaluate through
// EvalAnnotated.
struct Annotated {
  const absl::Condition* cond;
  const absl::Mutex* mu;
};

// Not instrumented itself: it may run on a thread that has not yet acquired
// `mu` in TSan's eyes, and reads only the Annotated on the waiter's stack.
__attribute__((no_sanitize_thread)) bool EvalAnnotated(void* arg) {
  const Annotated* a = static_cast<const Annotated*>(arg);
  Acquire(a->mu);
  const bool met = a->cond->Eval();
  Release(a->mu);
  return met;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// Notify() annotates the flag where it is: after the Notification's Mutex.
static_assert(sizeof(Notification) == 2 * sizeof(Mutex), "Notification is {Mutex, flag}");

using MutexFn = void (*)(Mutex*);
using MutexTryFn = bool (*)(Mutex*);
using MutexCondFn = void (*)(Mutex*, const Condition&);
using MutexCondDurationFn = bool (*)(Mutex*, const Condition&, Duration);
using MutexCondTimeFn = bool (*)(Mutex*, const Condition&, Time);

void Mutex::Lock() {
  KILN_NEXT(MutexFn, "_ZN4absl7debian35Mutex4LockEv");
  next(this);
  Acquire(this);
}

void Mutex::ReaderLock() {
  KILN_NEXT(MutexFn, "_ZN4absl7debian35Mutex10ReaderLockEv");
  next(this);
  Acquire(this);
}

bool Mutex::TryLock() {
  KILN_NEXT(MutexTryFn, "_ZN4absl7debian35Mutex7TryLockEv");
  bool locked = next(this);
  if (locked) Acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  KILN_NEXT(MutexTryFn, "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  bool locked = next(this);
  if (locked) Acquire(this);
  return locked;
}

void Mutex::Unlock() {
  KILN_NEXT(MutexFn, "_ZN4absl7debian35Mutex6UnlockEv");
  Release(this);
  next(this);
}

void Mutex::ReaderUnlock() {
  KILN_NEXT(MutexFn, "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(this);
  next(this);
}

void Mutex::LockWhen(const Condition& cond) {
  KILN_NEXT(MutexCondFn, "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  Annotated annotated{&cond, this};
  Release(this);
  next(this, Condition(&EvalAnnotated, &annotated));
  Acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  KILN_NEXT(MutexCondFn, "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Annotated annotated{&cond, this};
  Release(this);
  next(this, Condition(&EvalAnnotated, &annotated));
  Acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  KILN_NEXT(MutexCondDurationFn,
            "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Annotated annotated{&cond, this};
  Release(this);
  bool met = next(this, Condition(&EvalAnnotated, &annotated), timeout);
  Acquire(this);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  KILN_NEXT(MutexCondTimeFn,
            "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Annotated annotated{&cond, this};
  Release(this);
  bool met = next(this, Condition(&EvalAnnotated, &annotated), deadline);
  Acquire(this);
  return met;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  KILN_NEXT(MutexCondDurationFn,
            "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Annotated annotated{&cond, this};
  Release(this);
  bool met = next(this, Condition(&EvalAnnotated, &annotated), timeout);
  Acquire(this);
  return met;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  KILN_NEXT(MutexCondTimeFn,
            "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Annotated annotated{&cond, this};
  Release(this);
  bool met = next(this, Condition(&EvalAnnotated, &annotated), deadline);
  Acquire(this);
  return met;
}

// Await gives the mutex up while it waits and holds it again on return.
void Mutex::Await(const Condition& cond) {
  KILN_NEXT(MutexCondFn, "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Annotated annotated{&cond, this};
  Release(this);
  next(this, Condition(&EvalAnnotated, &annotated));
  Acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  KILN_NEXT(MutexCondDurationFn,
            "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Annotated annotated{&cond, this};
  Release(this);
  bool met = next(this, Condition(&EvalAnnotated, &annotated), timeout);
  Acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  KILN_NEXT(MutexCondTimeFn,
            "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Annotated annotated{&cond, this};
  Release(this);
  bool met = next(this, Condition(&EvalAnnotated, &annotated), deadline);
  Acquire(this);
  return met;
}

// CondVar waits give the mutex up and hold it again on return.
void CondVar::Wait(Mutex* mu) {
  KILN_NEXT(void (*)(CondVar*, Mutex*), "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  next(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  KILN_NEXT(bool (*)(CondVar*, Mutex*, Duration),
            "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  bool timed_out = next(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  KILN_NEXT(bool (*)(CondVar*, Mutex*, Time),
            "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  bool timed_out = next(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  KILN_NEXT(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  Release(this);
  Release(reinterpret_cast<const char*>(this) + sizeof(Mutex));  // notified_yet_
  next(this);
}

void Notification::WaitForNotification() const {
  KILN_NEXT(void (*)(const Notification*),
            "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  next(this);
  Acquire(this);
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  KILN_NEXT(bool (*)(const Notification*, Duration),
            "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  bool notified = next(this, timeout);
  Acquire(this);
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  KILN_NEXT(bool (*)(const Notification*, Time),
            "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  bool notified = next(this, deadline);
  Acquire(this);
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
