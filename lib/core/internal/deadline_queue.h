// Far-future deadlines of many owners, almost all cancelled long before they
// are due: the engine's MaxRuntimeInSeconds and MaxWaitTimeInSeconds.
//
// A loop timer per deadline costs, for one that is cancelled, a cache miss on
// its cold slot at Cancel and a dead entry in the loop's queue until it is
// compacted away. Here one loop timer serves the whole queue, armed for the
// earliest live deadline, and a deadline is cancelled by its owner alone: the
// owner forgets the token. The queue asks whether its earliest deadline is
// still live whenever it arms the timer, and drops it if not: a cancelled
// deadline costs a wake-up only if it was the earliest live one when the
// timer was armed. The deadlines added with one delay (the common case: jobs
// of one request share their stopping condition) are due in the order they
// were added, and go to a FIFO; the rest go to a heap. Cancelled deadlines
// queued behind a live one stay until it is due or cancelled too: 24 bytes
// each, about one per job created over the longest live delay.
#ifndef KILN_LIB_CORE_INTERNAL_DEADLINE_QUEUE_H_
#define KILN_LIB_CORE_INTERNAL_DEADLINE_QUEUE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "kiln/event_loop.h"

namespace kiln::internal {

class DeadlineQueue {
 public:
  // `live(owner, token)` tells whether a deadline is still wanted (its owner
  // has not forgotten the token); it must not call back into the queue.
  // `fire(owner, token)` runs on the loop thread for each deadline that is
  // live once due, in due order (deadlines due at the same time: in the order
  // they were added); it may call Add. `loop` must outlive the queue.
  using LiveCheck = absl::AnyInvocable<bool(uint64_t owner, uint64_t token) const>;
  using Callback = absl::AnyInvocable<void(uint64_t owner, uint64_t token)>;
  DeadlineQueue(EventLoop& loop, LiveCheck live, Callback fire)
      : loop_(loop), live_(std::move(live)), fire_(std::move(fire)) {}
  ~DeadlineQueue() { loop_.Cancel(timer_); }
  DeadlineQueue(const DeadlineQueue&) = delete;
  DeadlineQueue& operator=(const DeadlineQueue&) = delete;

  // Queues a deadline for `owner` at `due`; returns its token: above 0, and
  // above every token returned before. `live` is asked about it only after
  // Add returns (the owner has the token to tell by). Loop thread only.
  uint64_t Add(absl::Time due, uint64_t owner) {
    DropCancelled();
    const Entry e{absl::ToUnixNanos(due), ++last_token_, owner};
    if (fifo_.empty() || e.due_ns >= fifo_.back().due_ns) {
      fifo_.push_back(e);
    } else {
      heap_.push_back(e);
      std::push_heap(heap_.begin(), heap_.end(), Later);
    }
    if (!firing_) ArmFor(Top().due_ns);
    return e.token;
  }

  // Deadlines queued, including cancelled ones not dropped yet.
  size_t size() const { return fifo_.size() + heap_.size(); }

 private:
  struct Entry {
    int64_t due_ns;
    uint64_t token;  // in the order added: breaks ties
    uint64_t owner;
  };
  static bool Later(const Entry& a, const Entry& b) {
    return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.token > b.token;
  }

  // REQUIRES: size() > 0.
  bool TopInFifo() const { return heap_.empty() || (!fifo_.empty() && Later(heap_[0], fifo_[0])); }
  const Entry& Top() const { return TopInFifo() ? fifo_.front() : heap_.front(); }
  void Pop() {
    if (TopInFifo()) {
      fifo_.pop_front();
    } else {
      std::pop_heap(heap_.begin(), heap_.end(), Later);
      heap_.pop_back();
    }
  }

  // Drops the cancelled deadlines ahead of the earliest live one.
  void DropCancelled() {
    while (size() > 0 && !live_(Top().owner, Top().token)) Pop();
  }

  // Arms the timer for `due_ns`, unless it is armed for then or earlier.
  void ArmFor(int64_t due_ns) {
    if (timer_.valid() && armed_ns_ <= due_ns) return;
    loop_.Cancel(timer_);
    armed_ns_ = due_ns;
    timer_ = loop_.ScheduleAt(absl::FromUnixNanos(due_ns), [this] { OnTimer(); });
  }

  void OnTimer() {
    timer_ = TimerHandle();
    // What the timer was armed for is due, whatever a real-time clock reads.
    const int64_t now_ns = std::max(absl::ToUnixNanos(loop_.Now()), armed_ns_);
    firing_ = true;
    while (size() > 0 && Top().due_ns <= now_ns) {
      const Entry e = Top();
      Pop();
      if (live_(e.owner, e.token)) fire_(e.owner, e.token);
    }
    firing_ = false;
    DropCancelled();
    if (size() > 0) ArmFor(Top().due_ns);
  }

  EventLoop& loop_;
  LiveCheck live_;
  Callback fire_;
  std::deque<Entry> fifo_;   // due times in order
  std::vector<Entry> heap_;  // a min-heap by (due_ns, token)
  uint64_t last_token_ = 0;
  TimerHandle timer_;
  int64_t armed_ns_ = 0;  // when timer_ is due
  bool firing_ = false;
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_DEADLINE_QUEUE_H_
