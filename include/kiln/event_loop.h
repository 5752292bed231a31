// EventLoop: Kiln's discrete-event core.
//
// Everything the engine does happens in callbacks run one at a time by an event loop, on one
// thread (the loop thread), so engine state needs no locks. A callback is either scheduled for
// a time (ScheduleAt / ScheduleAfter, cancellable through a TimerHandle) or posted (Post, the
// one entry that other threads may use). The same engine code runs on two kinds of loop:
//
//   * a virtual loop (NewVirtualEventLoop) keeps its own clock, which stands still while a
//     callback runs and jumps to the time of the next event: a simulated year runs in seconds,
//     and a run is reproducible bit for bit (nothing depends on the host's speed);
//   * a real-time loop (NewRealTimeEventLoop) reads a real clock (clock.h) and sleeps until its
//     next timer or until another thread posts (or busy-waits for a timer due soon, if asked:
//     EventLoopOptions::spin_before_due); real backends use it.
//
// Order. Events run in (time, seq) order, where seq is a per-loop counter taken when the event
// enters the queue: events due at the same time run first-in, first-out. A post gets its time
// and seq when the loop thread moves it from its inbox into the queue, which it does before
// taking each next event: a post therefore runs at the loop's time at that moment, after every
// event already scheduled for that time and before any event scheduled later. Posts keep their
// order among themselves. Scheduling in the past means "now, after what is already due".
//
// Cancellation is O(1) and lazy: Cancel() destroys the callback at once and marks its queue
// entry dead; dead entries are dropped when they reach the top (or when they outnumber the live
// ones, by a rebuild of the queue).
//
// Example (virtual time):
//   std::unique_ptr<kiln::EventLoop> loop = kiln::NewVirtualEventLoop();
//   kiln::TimerHandle t = loop->ScheduleAfter(absl::Minutes(5), [] { /* time out */ });
//   loop->ScheduleAfter(absl::Seconds(30), [&] { loop->Cancel(t); });
//   loop->RunUntilIdle();  // returns at start_time + 30 s; the time-out never ran
//
// Threading: the loop thread is the thread that holds the loop. A thread holds it while it runs
// Run*, or the body of TryHold, or a function RunOnLoop runs on the calling thread; one thread
// at a time holds it (Run* called meanwhile on another thread waits until it is released). While
// no thread holds it, the loop thread is the thread that held it last (before that, the thread
// that created it). Now(), is_virtual(), IsLoopThread(), clock(), Post(), AcquireWork(), Stop(),
// TryHold(), RunOnLoop(), AwaitReleaseOr() and WakeAwaiters() are thread-safe; everything else is
// loop thread only.

#ifndef KILN_EVENT_LOOP_H_
#define KILN_EVENT_LOOP_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "kiln/clock.h"
#include "kiln/event_queue.h"

namespace kiln {

class EventLoop;

// Storage for one scheduled callback, one cache line, for implementations of EventLoop: the
// implementation hands a slot out from ReserveAt/ReserveAfter (EventLoop's protected
// interface), ScheduleAt constructs the callable in it, and the implementation later invokes
// and destroys it there, in place: the callable is never moved. A callable of at most
// kInlineBytes bytes (aligned to at most 16) is kept in the slot itself, so scheduling it
// allocates nothing, and its destructor is not called at all when it is trivial; a larger one
// is kept in an EventLoop::Callback, which holds it on the heap.
// `owner_words` belong to the implementation that owns the slot (its bookkeeping for it, such
// as a generation and a free-list link): Construct, Invoke and Destroy never touch them.
// Thread-compatible.
class alignas(64) CallbackSlot {
 public:
  static constexpr size_t kInlineBytes = 40;
  using Callback = absl::AnyInvocable<void()>;  // EventLoop::Callback

  // Constructs the callable from `f`. If that throws, the slot holds no callable.
  // REQUIRES: the slot holds no callable.
  template <class F>
  void Construct(F&& f) {
    using D = std::decay_t<F>;
    if constexpr (sizeof(D) <= kInlineBytes && alignof(D) <= 16) {
      ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
      invoke_ = [](void* p) { std::invoke(*static_cast<D*>(p)); };
      if constexpr (std::is_trivially_destructible_v<D>) {
        destroy_ = nullptr;
      } else {
        destroy_ = [](void* p) { static_cast<D*>(p)->~D(); };
      }
    } else {
      static_assert(sizeof(Callback) <= kInlineBytes && alignof(Callback) <= 16);
      ::new (static_cast<void*>(storage_)) Callback(std::forward<F>(f));
      invoke_ = [](void* p) { (*static_cast<Callback*>(p))(); };
      destroy_ = [](void* p) { static_cast<Callback*>(p)->~Callback(); };
    }
  }

  // Runs the callable. REQUIRES: constructed.
  void Invoke() { invoke_(storage_); }
  // Destroys the callable. REQUIRES: constructed; afterwards the slot holds no callable.
  void Destroy() {
    if (destroy_ != nullptr) destroy_(storage_);
  }

 private:
  alignas(16) unsigned char storage_[kInlineBytes];
  void (*invoke_)(void*) = nullptr;
  void (*destroy_)(void*) = nullptr;  // null: nothing to destroy

 public:
  uint32_t owner_words[2] = {0, 0};
};
static_assert(sizeof(CallbackSlot) == 64);

// Opaque handle to one scheduled callback, returned by EventLoop::ScheduleAt and used only to
// cancel it. Default-constructed = invalid. Copyable; holding a handle keeps nothing alive.
// A handle stays safe to use after its event ran or was cancelled (Cancel then returns false):
// the loop reuses the callback's slot but bumps the slot's generation, which the handle
// records. (A handle kept across 2^31 reuses of one slot could alias a new event.)
// Thread-compatible.
class TimerHandle {
 public:
  TimerHandle() = default;

  // Returns true if the handle came from ScheduleAt/ScheduleAfter, whether or not its event is
  // still pending; false for a default-constructed handle.
  bool valid() const { return generation_ != 0; }

  friend bool operator==(const TimerHandle& a, const TimerHandle& b) {
    return a.slot_ == b.slot_ && a.generation_ == b.generation_;
  }
  friend bool operator!=(const TimerHandle& a, const TimerHandle& b) { return !(a == b); }

 private:
  friend class EventLoop;
  TimerHandle(uint32_t slot, uint32_t generation) : slot_(slot), generation_(generation) {}

  uint32_t slot_ = 0;
  uint32_t generation_ = 0;  // 0 only in invalid handles
};

// Options of NewVirtualEventLoop / NewRealTimeEventLoop.
struct EventLoopOptions {
  // The virtual clock's reading before the first event runs. Ignored by real-time loops,
  // whose clock is the real one. Default: 2026-01-01T00:00:00Z.
  absl::Time start_time = absl::FromUnixSeconds(1767225600);
  // The pending-event structure; null means NewLadderEventQueue(). Must be empty. The loop takes
  // ownership.
  std::unique_ptr<EventQueue> queue;
  // Real-time loops: once the next timer (or RunUntil's deadline) is due within this long, the
  // loop thread busy-waits for it (reading the clock, and still taking posts and Stop() at
  // once) instead of sleeping in the kernel. On hosts that are slow to wake a sleeping thread,
  // virtual machines above all, this trades a CPU kept busy for up to this long before each
  // timer for timers that run closer to their due times (bench/event_loop_bench.cc,
  // BM_RealTimeLateness, measures both). absl::InfiniteDuration(): never sleep while a timer is
  // pending. Zero or less (the default): always sleep. Ignored by virtual loops.
  absl::Duration spin_before_due = absl::ZeroDuration();
};

// A discrete-event loop, virtual or real-time (see the file comment).
// Implemented by the two factories below. Loop thread only, except where a method says
// thread-safe.
class EventLoop {
 public:
  // A callback run exactly once by the loop (or destroyed unrun if cancelled, or when the loop
  // is destroyed). It may schedule, cancel (itself too: a no-op returning false) and post.
  using Callback = absl::AnyInvocable<void()>;

  class WorkGuard;

  virtual ~EventLoop() = default;

  // Returns the loop's time: for a virtual loop the time of the event running (or of the last
  // one run, or start_time, or the last RunUntil deadline); for a real-time loop the real
  // clock's reading.
  // Thread-safe.
  virtual absl::Time Now() const = 0;

  // Returns true for a virtual loop, false for a real-time one.
  // Thread-safe.
  virtual bool is_virtual() const = 0;

  // Returns true if the calling thread is the loop thread (see "Threading" above): it holds
  // the loop, or no thread holds it and it held it last.
  // Thread-safe.
  bool IsLoopThread() const;
  // Returns true if the calling thread holds the loop now: it runs Run*, the body of TryHold or
  // a function RunOnLoop runs on it (a callback of the loop among them). Such a thread must not
  // wait for anything the loop would have to run meanwhile.
  // Thread-safe.
  bool HeldByCaller() const;

  // If no thread holds the loop, or the calling thread does, runs `body` on the calling thread
  // holding the loop (it is the loop thread meanwhile, and may call Run*, schedule and cancel)
  // and returns true. Otherwise returns false at once without running `body`.
  // Thread-safe. REQUIRES: not called from inside a callback of this loop's Run* on another
  // loop's thread that this loop's thread waits for (as for any lock).
  bool TryHold(absl::FunctionRef<void()> body);

  // Runs `fn` as the loop thread and returns once it has run, exactly once, between two
  // callbacks: on the calling thread at once if that thread holds the loop or no thread does
  // (holding it meanwhile); otherwise `fn` is posted and the caller blocks until the loop
  // thread has run it, or until the loop is released before that, when the caller runs `fn`
  // itself as above. Code callable from any thread uses it to reach state the loop thread owns.
  // Thread-safe. The caller must not hold anything the loop thread may wait for.
  void RunOnLoop(absl::FunctionRef<void()> fn);

  // Blocks the calling thread until `ready()` is true or no thread holds the loop, and
  // returns ready(). `ready` runs on the calling thread under a lock of the loop's: it must be
  // quick, must not block and must not call the loop. Whoever makes ready() true calls
  // WakeAwaiters() afterwards. For code that waits for something the loop thread does and
  // must run the loop itself once no other thread does (an engine's waiters).
  // Thread-safe.
  bool AwaitReleaseOr(absl::FunctionRef<bool()> ready);

  // Makes every thread in AwaitReleaseOr check its `ready` again.
  // Thread-safe.
  void WakeAwaiters();

  // Returns a Clock whose Now() is this loop's Now(), for code that takes a `const Clock&`.
  // The clock is owned by the loop and lives as long as it.
  // Thread-safe.
  virtual const Clock& clock() const = 0;

  // Schedules `cb` to run once at `when`, or at Now() if `when` is in the past (then after the
  // events already due). Never runs `cb` inline. Times outside the nanosecond range of int64
  // (years 1677..2262, e.g. absl::InfiniteFuture()) are clamped into it. Returns a handle for
  // Cancel(). The loop owns `cb` until it runs it or destroys it (on Cancel or on destruction).
  // `cb` is any callable a Callback can be made from (a lambda, a Callback, ...). It is moved
  // (or copied) once, into the loop's own slot for the event, where it stays until it runs: a
  // callable of at most 40 bytes (aligned to at most 16) is kept there as it is, with no
  // allocation (a lambda capturing a Callback and a pointer fits), and a larger one is wrapped
  // in a Callback, which allocates. If that construction throws, the event is dropped and the
  // exception propagates.
  // Loop thread only (or before the loop first runs). REQUIRES: constructing the callable from
  // `cb` does not use the loop.
  template <class F, class = std::enable_if_t<std::is_constructible_v<Callback, F&&>>>
  TimerHandle ScheduleAt(absl::Time when, F&& cb) {
    return Emplace(ReserveAt(when), std::forward<F>(cb));
  }

  // ScheduleAt(Now() + delay, cb). A negative delay means now.
  // Loop thread only (or before the loop first runs).
  template <class F, class = std::enable_if_t<std::is_constructible_v<Callback, F&&>>>
  TimerHandle ScheduleAfter(absl::Duration delay, F&& cb) {
    return Emplace(ReserveAfter(delay), std::forward<F>(cb));
  }

  // Cancels the event of `h` in O(1): destroys its callback now and leaves a dead queue entry
  // that is skipped later. Returns true if the event was pending; false if it already ran, is
  // running, was cancelled, or `h` is invalid or stale.
  // Loop thread only.
  virtual bool Cancel(TimerHandle h) = 0;

  // Queues `cb` to run on the loop thread at the loop's current time (see "Order" above),
  // first-in first-out among posts, and wakes a loop that is waiting (real-time or idle).
  // The loop owns `cb`; posts never run are destroyed with the loop.
  // Thread-safe.
  virtual void Post(Callback cb) = 0;

  // Returns a token that keeps RunUntilIdle() from returning while work goes on off the loop:
  // a real backend's worker thread holds one until it has posted its completion, so the loop
  // does not go idle in between. Run(), RunUntil() and Stop() ignore guards.
  // Thread-safe. REQUIRES: the loop outlives the guard.
  virtual WorkGuard AcquireWork() = 0;

  // Runs events until none remains: no live scheduled event, no post and no work guard.
  // Virtual: runs events in (time, seq) order, jumping the clock to each event's time; when
  // only work guards remain, it waits (in real time, the clock standing still) for a post or
  // for the last guard to go, like a real loop. Real-time: waits for each timer until it is
  // due on the real clock, and for posts and guards the same way, however far the last timer
  // is: code that waits for particular work (an engine's jobs) waits for that instead
  // (Engine::WaitForTrainingJob).
  // Returns early, after the running callback, if Stop() was called (and clears the request).
  // The calling thread holds the loop meanwhile, once no other thread does.
  // Thread-safe. REQUIRES: not called from inside a callback of this loop (not reentrant).
  void RunUntilIdle();

  // Runs every event due at or before `deadline` (posts included), then returns. A virtual
  // loop then sets its clock to `deadline` (if later than Now() and finite); a real-time loop
  // returns once the real clock reaches `deadline`, running posts and timers meanwhile.
  // Work guards do not keep it running past `deadline`. Returns early on Stop(), without
  // moving the virtual clock to `deadline`. Holds the loop as RunUntilIdle does.
  // Thread-safe. REQUIRES: not called from inside a callback of this loop.
  void RunUntil(absl::Time deadline);

  // Runs events, and waits for more when there are none, until Stop() is called. Holds the
  // loop as RunUntilIdle does.
  // Thread-safe. REQUIRES: not called from inside a callback of this loop.
  void Run();

  // Makes the running Run(), RunUntil() or RunUntilIdle() return after the current callback
  // (or wakes it if it is waiting). A Stop() while no Run* is running makes the next Run*
  // return at once; each Run* that returns because of Stop() clears the request.
  // Thread-safe.
  virtual void Stop() = 0;

  // Returns the number of callbacks that will still run: scheduled events neither run nor
  // cancelled, plus posts not yet run.
  // Loop thread only.
  virtual size_t pending_events() const = 0;

  // Returns the number of callbacks (scheduled and posted) run so far.
  // Loop thread only.
  virtual uint64_t executed_events() const = 0;

 protected:
  static TimerHandle MakeHandle(uint32_t slot, uint32_t generation) {
    return TimerHandle(slot, generation);
  }
  static uint32_t HandleSlot(TimerHandle h) { return h.slot_; }
  static uint32_t HandleGeneration(TimerHandle h) { return h.generation_; }
  // Returns an active guard on this loop; the implementation has already counted it.
  WorkGuard MakeWorkGuard();

  // What an implementation provides, besides the public pure virtual functions: the bodies of
  // RunUntilIdle, RunUntil and Run, which EventLoop calls holding the loop (an implementation
  // keeps no notion of its own of which thread runs it), storage for the callbacks of scheduled
  // events, and handles for them.
  virtual void DoRunUntilIdle() = 0;
  virtual void DoRunUntil(absl::Time deadline) = 0;
  virtual void DoRun() = 0;

  //
  // Storage for one scheduled callback, not yet constructed, and the handle of its event.
  struct Reservation {
    CallbackSlot* callback;
    TimerHandle handle;
  };

  // ScheduleAt's and ScheduleAfter's bodies: an implementation queues an event at `when` (or at
  // Now() + delay, without a detour through absl::Time), and returns a slot that holds no
  // callable, which it owns and keeps in place until the event's callback is destroyed, and
  // the event's handle (MakeHandle, with numbers of the implementation's choosing). The caller
  // constructs the callback there at once (Emplace), or, if that throws, calls
  // AbandonReservation; until then the implementation must not touch that storage. When the
  // event is due, the implementation runs the callback (CallbackSlot::Invoke) and then destroys
  // it (Destroy); when it is cancelled, or the loop is destroyed first, it only destroys it.
  virtual Reservation ReserveAt(absl::Time when) = 0;
  virtual Reservation ReserveAfter(absl::Duration delay) = 0;
  // Drops the event of a reservation whose callback could not be constructed: as Cancel(), but
  // without destroying a callback.
  virtual void AbandonReservation(TimerHandle h) = 0;

  // Constructs the callback of reservation `r` from `cb` and returns the event's handle; if the
  // construction throws, abandons the reservation and rethrows. Loop thread only.
  template <class F>
  TimerHandle Emplace(Reservation r, F&& cb) {
#if defined(__cpp_exceptions)
    try {
      r.callback->Construct(std::forward<F>(cb));
    } catch (...) {
      AbandonReservation(r.handle);
      throw;
    }
#else
    r.callback->Construct(std::forward<F>(cb));
#endif
    return r.handle;
  }

 private:
  // Called once per active guard when it is released, on any thread.
  virtual void ReleaseWork() = 0;

  // Takes the loop for the calling thread, waiting while another thread holds it; Release
  // gives it back. Nested takes by the holder count.
  void Hold();
  void Release();
  // Runs `body`, then Release (also if `body` throws). REQUIRES: the caller holds the loop.
  void ThenRelease(absl::FunctionRef<void()> body);

  mutable std::mutex hold_mu_;
  std::condition_variable hold_cv_;  // the loop was released, or WakeAwaiters
  int hold_depth_ = 0;               // guarded by hold_mu_
  // The holding thread (id() when none) and the last one; written under hold_mu_.
  std::atomic<std::thread::id> holder_{};
  std::atomic<std::thread::id> last_holder_{std::this_thread::get_id()};
};

// RAII token from EventLoop::AcquireWork(): while an active guard exists, RunUntilIdle() does
// not return. Releasing the last guard (destruction, move-assignment over it, or Reset()) wakes
// the loop. Movable, not copyable; a moved-from or default-constructed guard is inactive.
// AcquireWork and releases are thread-safe: a guard may be created on one thread and released
// on another. One guard object is thread-compatible.
class EventLoop::WorkGuard {
 public:
  WorkGuard() = default;
  WorkGuard(WorkGuard&& other) noexcept : loop_(std::exchange(other.loop_, nullptr)) {}
  WorkGuard& operator=(WorkGuard&& other) noexcept {
    if (this != &other) {
      Reset();
      loop_ = std::exchange(other.loop_, nullptr);
    }
    return *this;
  }
  WorkGuard(const WorkGuard&) = delete;
  WorkGuard& operator=(const WorkGuard&) = delete;
  ~WorkGuard() { Reset(); }

  // Releases the guard now (a no-op if inactive). Post the work's completion before this, so
  // that the loop sees the post before it can go idle.
  void Reset() {
    if (loop_ != nullptr) std::exchange(loop_, nullptr)->ReleaseWork();
  }

  // Returns true until the guard is released or moved from.
  bool active() const { return loop_ != nullptr; }

 private:
  friend class EventLoop;
  explicit WorkGuard(EventLoop* loop) : loop_(loop) {}

  EventLoop* loop_ = nullptr;
};

inline EventLoop::WorkGuard EventLoop::MakeWorkGuard() { return WorkGuard(this); }

// Returns a virtual-time loop whose clock starts at options.start_time. The caller owns it;
// callbacks still pending at destruction are destroyed unrun (on the destroying thread).
std::unique_ptr<EventLoop> NewVirtualEventLoop(EventLoopOptions options = {});

// Returns a real-time loop on a new real clock (NewRealClock()); options.start_time is ignored.
// The caller owns it; callbacks still pending at destruction are destroyed unrun.
// On Linux, while one of its Run* runs, the loop thread's timer slack is 1 ns rather than the
// default 50 us (so that the kernel does not defer a timer's wake-up to batch it with others);
// the thread's own value is restored when Run* returns. Callbacks that sleep inherit it.
// REQUIRES: no work guard outlives it.
std::unique_ptr<EventLoop> NewRealTimeEventLoop(EventLoopOptions options = {});

}  // namespace kiln

#endif  // KILN_EVENT_LOOP_H_
