// What every EventLoop shares: which thread holds the loop, and the calls that take it from
// any thread (TryHold, RunOnLoop, AwaitReleaseOr) or wait for it (Run*).

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "kiln/event_loop.h"

namespace kiln {

bool EventLoop::IsLoopThread() const {
  const std::thread::id me = std::this_thread::get_id();
  const std::thread::id holder = holder_.load(std::memory_order_acquire);
  if (holder == me) return true;
  return holder == std::thread::id() && last_holder_.load(std::memory_order_acquire) == me;
}

bool EventLoop::HeldByCaller() const {
  return holder_.load(std::memory_order_acquire) == std::this_thread::get_id();
}

void EventLoop::Hold() {
  const std::thread::id me = std::this_thread::get_id();
  std::unique_lock<std::mutex> lock(hold_mu_);
  if (holder_.load(std::memory_order_relaxed) == me) {
    ++hold_depth_;
    return;
  }
  hold_cv_.wait(lock, [&] { return holder_.load(std::memory_order_relaxed) == std::thread::id(); });
  holder_.store(me, std::memory_order_release);
  hold_depth_ = 1;
}

void EventLoop::Release() {
  {
    std::lock_guard<std::mutex> lock(hold_mu_);
    if (--hold_depth_ > 0) return;
    last_holder_.store(std::this_thread::get_id(), std::memory_order_release);
    holder_.store(std::thread::id(), std::memory_order_release);
  }
  hold_cv_.notify_all();
}

bool EventLoop::TryHold(absl::FunctionRef<void()> body) {
  const std::thread::id me = std::this_thread::get_id();
  {
    std::lock_guard<std::mutex> lock(hold_mu_);
    const std::thread::id holder = holder_.load(std::memory_order_relaxed);
    if (holder == me) {
      ++hold_depth_;
    } else if (holder == std::thread::id()) {
      holder_.store(me, std::memory_order_release);
      hold_depth_ = 1;
    } else {
      return false;
    }
  }
  ThenRelease(body);
  return true;
}

void EventLoop::RunOnLoop(absl::FunctionRef<void()> fn) {
  if (TryHold(fn)) return;
  // Another thread holds the loop: post, and wait for the post to run, or for the loop to be
  // released first (a RunUntil that returned, a TryHold body that ended), whichever comes
  // first. Whoever runs `fn` claims it first, so that it runs once: the loop thread through
  // the post, or this thread holding the loop, after which the post does nothing (it may run
  // later, or never: it does not touch `fn` or this frame).
  enum : int { kPosted, kClaimed, kDone };
  struct Call {
    std::atomic<int> state{kPosted};
    absl::FunctionRef<void()> fn;
    explicit Call(absl::FunctionRef<void()> f) : fn(f) {}
  };
  auto call = std::make_shared<Call>(fn);
  Post([this, call] {
    int expected = kPosted;
    if (!call->state.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) {
      return;
    }
    call->fn();
    call->state.store(kDone, std::memory_order_release);
    WakeAwaiters();
  });
  for (;;) {
    if (AwaitReleaseOr([&] { return call->state.load(std::memory_order_acquire) == kDone; })) {
      return;
    }
    bool done = false;
    TryHold([&] {
      // Holding the loop: the post is not running, so it has run (kDone) or has not started.
      int expected = kPosted;
      if (call->state.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) {
        fn();
        call->state.store(kDone, std::memory_order_release);
      }
      done = true;
    });
    if (done) return;
    // Another thread took the loop first: wait again.
  }
}

bool EventLoop::AwaitReleaseOr(absl::FunctionRef<bool()> ready) {
  std::unique_lock<std::mutex> lock(hold_mu_);
  hold_cv_.wait(lock, [&] {
    return ready() || holder_.load(std::memory_order_relaxed) == std::thread::id();
  });
  return ready();
}

void EventLoop::WakeAwaiters() {
  { std::lock_guard<std::mutex> lock(hold_mu_); }
  hold_cv_.notify_all();
}

void EventLoop::ThenRelease(absl::FunctionRef<void()> body) {
  struct Releaser {
    EventLoop* loop;
    ~Releaser() { loop->Release(); }
  } releaser{this};
  body();
}

void EventLoop::RunUntilIdle() {
  Hold();
  ThenRelease([this] { DoRunUntilIdle(); });
}

void EventLoop::RunUntil(absl::Time deadline) {
  Hold();
  ThenRelease([this, deadline] { DoRunUntil(deadline); });
}

void EventLoop::Run() {
  Hold();
  ThenRelease([this] { DoRun(); });
}

}  // namespace kiln
