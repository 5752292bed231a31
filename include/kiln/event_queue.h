// EventQueue: the pending-event structure inside an event loop.
//
// An event loop keeps every scheduled callback in a slot table and puts one small QueuedEvent
// per callback into an EventQueue, which hands them back in (time_ns, seq) order. The queue
// knows nothing about callbacks or cancellation: the loop cancels lazily, leaving dead entries
// in the queue and skipping them when they reach the top, so a queue only needs Push, Top and
// Pop. As in ns-3, the structure is an interface so that implementations (a heap, a ladder
// queue, ...) can be swapped and benchmarked against each other (bench/event_loop_bench.cc);
// tests/core/event_queue_test.cc is the conformance suite every implementation must pass.
//
// Kiln ships two implementations. Both pop exactly the same sequence (the order is total), so
// the choice changes speed and nothing else:
//   * NewLadderEventQueue(), the default of every event loop: O(1) amortized per event;
//   * NewHeapEventQueue(): a 4-ary heap, O(log n).
// A user may pass either, or their own, through EventLoopOptions::queue.
//
// How they compare on the hold model and on SimGrid's sleepers pattern: bench/event_loop_bench.cc
// and bench/simgrid_sleepers.cc, with the current figures in docs/performance.md.
//
//   std::unique_ptr<kiln::EventQueue> q = kiln::NewLadderEventQueue();
//   q->Push({.time_ns = 2, .seq = 0, .slot = 7, .generation = 1});
//   q->Push({.time_ns = 1, .seq = 1, .slot = 8, .generation = 1});
//   q->Top().slot;  // 8: earlier time first
//   q->Pop();
//
// Threading: queues are thread-compatible (an event loop uses its queue on its loop thread only).

#ifndef KILN_EVENT_QUEUE_H_
#define KILN_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln {

// One pending event as the queue sees it. Plain data, 24 bytes.
struct QueuedEvent {
  // When the event is due, in nanoseconds since the Unix epoch (an integer, like ns-3's time,
  // so that ordering is exact; absl::Time is used at the API).
  int64_t time_ns;
  // Tie-breaker, unique per loop and increasing in scheduling order: events due at the same
  // time run first-in, first-out.
  uint64_t seq;
  // Where the loop keeps the callback, and which use of that slot this event is. Opaque to the
  // queue, which must hand both back unchanged.
  uint32_t slot;
  uint32_t generation;
};

// Returns true if `a` must run before `b`: earlier time, or the same time and a smaller seq.
// Every EventQueue orders its entries by this relation.
inline bool EventBefore(const QueuedEvent& a, const QueuedEvent& b) {
  return a.time_ns < b.time_ns || (a.time_ns == b.time_ns && a.seq < b.seq);
}

// A priority queue of QueuedEvents ordered by EventBefore (time, then seq). Because seq is
// unique, the order is total and every implementation pops the same sequence from the same
// pushes: a virtual-time run does not depend on which queue it uses.
// Implemented by the ladder and the heap below; others may be plugged in through
// EventLoopOptions::queue.
// Thread-compatible.
class EventQueue {
 public:
  virtual ~EventQueue() = default;

  // Adds `e`. The queue copies it. Amortized O(log n) for the heap, O(1) for the ladder.
  // REQUIRES: no entry with the same seq is in the queue.
  virtual void Push(const QueuedEvent& e) = 0;

  // Returns the entry that orders first. The reference is valid until the next Push, Pop or
  // ReplaceTop.
  // REQUIRES: !Empty().
  virtual const QueuedEvent& Top() const = 0;

  // Removes the entry Top() returns.
  // REQUIRES: !Empty().
  virtual void Pop() = 0;

  // Removes the entry Top() returns and adds `e`, as Pop() then Push(e) would. An event loop
  // calls it when a running callback schedules its first event, which the heap does in one
  // pass instead of two. Override it only to be faster; the default calls Pop() and Push().
  // REQUIRES: !Empty(); no other entry has e.seq.
  virtual void ReplaceTop(const QueuedEvent& e) {
    Pop();
    Push(e);
  }

  // Returns true if the queue holds no entry.
  virtual bool Empty() const = 0;

  // Returns the number of entries, dead ones (cancelled by the loop) included.
  virtual size_t Size() const = 0;
};

// Returns an empty 4-ary implicit min-heap in a vector, with a first-in first-out fast lane:
// an entry that orders after the lane's last entry (as timers set at a fixed delay from now
// do) is appended to the lane in O(1) instead of entering the heap. O(log n) Push, Pop and
// ReplaceTop at worst, O(1) Top, no allocation per event once the vectors have grown. The
// caller owns the result.
std::unique_ptr<EventQueue> NewHeapEventQueue();

// Returns an empty ladder queue (after Tang, Goh and Thng 2005), the default queue of every
// event loop: entries far ahead wait unsorted in a top vector, nearer ones in rungs of time
// buckets (unsorted, a crowded bucket split into a finer rung when its turn comes), and only
// the next few, the bottom, are kept sorted. O(1) amortized Push, Pop and ReplaceTop for the
// usual event-time distributions (its cost hardly grows with the number pending:
// bench/event_loop_bench.cc), O(log n) amortized at worst; O(1) Top. Timers armed at one fixed
// delay stay in a first-in first-out lane, as in the heap. No allocation per event in a steady
// state. The caller owns the result.
std::unique_ptr<EventQueue> NewLadderEventQueue();

}  // namespace kiln

#endif  // KILN_EVENT_QUEUE_H_
