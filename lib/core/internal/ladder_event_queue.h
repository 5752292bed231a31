// LadderEventQueue: an EventQueue with O(1) amortized Push and Pop for the usual event-time
// distributions, after the ladder queue of Tang, Goh and Thng (ACM TOMACS 15(3), 2005).
//
// Declared here (not only behind NewLadderEventQueue()) so that the event loop can call it
// without virtual dispatch: the class is final and its hot methods are inline; the rarer work
// (refilling the bottom, splitting buckets) is in ladder_event_queue.cc. Internal: never
// installed, never included from public headers.
//
// Three tiers, each holding later times than the one below it:
//
//   top     an unsorted vector of the entries beyond every rung (time > top_limit_), appended
//           in O(1); when everything below is used up it becomes rung 0, with about one bucket
//           per entry, its bucket width fitted to the entries' time span;
//   rungs   up to kMaxRungs arrays of buckets, each rung a power-of-two bucket width, rung r+1
//           the subdivision of one bucket of rung r (a bucket holding more than kSplitThreshold
//           entries is split into a finer rung rather than sorted). A bucket is an unsorted
//           singly linked list of pooled nodes: a push into a rung is an index computation and
//           a link, with no comparison;
//   bottom  the entries due first, sorted: a first-in first-out "lane" (a sorted vector read
//           from its head) plus a small binary heap for the rare entry that arrives out of
//           order (time below the finest rung's current bucket, e.g. an event "now"). The top
//           of the queue is the smaller of the two fronts. When the bottom runs empty it is
//           refilled with the next non-empty bucket of the finest rung, sorted.
//
// A bucket is never split finer than one nanosecond, and entries of one time in one bucket are
// sorted by seq, so the order is exactly EventBefore's, ties first-in first-out. Nothing here
// depends on the distribution for correctness: with an adversarial one (say, every push earlier
// than every pending entry), entries pile into the bottom's heap, O(log n) like a plain heap.
//
// Invariant: the bottom is non-empty whenever the queue is, so Top() is a load or two.
//
// Threading: thread-compatible.
#ifndef KILN_LIB_CORE_INTERNAL_LADDER_EVENT_QUEUE_H_
#define KILN_LIB_CORE_INTERNAL_LADDER_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/event_queue.h"

namespace kiln::internal {

class LadderEventQueue final : public EventQueue {
 public:
  LadderEventQueue();

  void Push(const QueuedEvent& e) override {
    ++size_;
    Place(e);
    if (LaneEmpty() && heap_.empty()) [[unlikely]] Refill();
  }

  const QueuedEvent& Top() const override {
    return TopInLane() ? lane_[lane_head_] : heap_.front();
  }

  void Pop() override {
    PopBottom();
    if (--size_ == 0) [[unlikely]] {
      Reset();
    } else if (LaneEmpty() && heap_.empty()) [[unlikely]] {
      Refill();
    }
  }

  void ReplaceTop(const QueuedEvent& e) override {
    PopBottom();
    Place(e);
    if (LaneEmpty() && heap_.empty()) [[unlikely]] Refill();
  }

  bool Empty() const override { return size_ == 0; }
  size_t Size() const override { return size_; }

  // Returns the entry that will be on top once the current top is popped, if it is already in
  // the bottom (and nothing is pushed meanwhile), or null: the event loop prefetches the next
  // callback with it while the current one runs.
  const QueuedEvent* RunnerUp() const {
    if (!heap_.empty() || lane_head_ + 1 >= lane_.size()) return nullptr;
    return &lane_[lane_head_ + 1];
  }

 private:
  static constexpr uint32_t kNil = std::numeric_limits<uint32_t>::max();
  // A bucket with more entries than this is split into a finer rung instead of being sorted
  // into the bottom (unless all its entries share one time, or kMaxRungs rungs exist).
  static constexpr size_t kSplitThreshold = 48;
  static constexpr int kMaxRungs = 8;

  struct Node {
    QueuedEvent e;
    uint32_t next;  // next node of the same bucket, or kNil
  };

  struct Rung {
    int64_t start = 0;  // first time of bucket 0
    int64_t floor = 0;  // first time of bucket `cur`: entries at or after it belong here
    int64_t last = 0;   // last time covered (saturated at int64's maximum)
    uint32_t shift = 0;  // bucket width is 2^shift nanoseconds
    uint32_t cur = 0;    // first bucket not yet moved down; buckets before it are empty
    uint32_t buckets = 0;
    uint32_t* heads = nullptr;  // buckets' first nodes, kNil if empty
  };

  // (time, seq) as one signed 128-bit key: signed time in the high half, unsigned seq in the
  // low half orders exactly like EventBefore.
  static __int128 Key(const QueuedEvent& e) {
    return static_cast<__int128>(static_cast<unsigned __int128>(e.time_ns) << 64 | e.seq);
  }
  static bool Before(const QueuedEvent& a, const QueuedEvent& b) { return Key(a) < Key(b); }

  bool LaneEmpty() const { return lane_head_ == lane_.size(); }
  bool TopInLane() const {
    return heap_.empty() || (!LaneEmpty() && Before(lane_[lane_head_], heap_.front()));
  }

  // Adds `e` to the tier its time belongs to. Does not restore the invariant.
  void Place(const QueuedEvent& e) {
    const int64_t t = e.time_ns;
    if (t > top_limit_) {
      PushTop(e);
      return;
    }
    for (int r = 0; r < rung_count_; ++r) {
      Rung& rung = rungs_[r];
      if (t >= rung.floor) {
        const uint64_t b = (static_cast<uint64_t>(t) - static_cast<uint64_t>(rung.start)) >>
                           rung.shift;
        Link(rung.heads[b], e);
        return;
      }
    }
    PushBottom(e);
  }

  void PushTop(const QueuedEvent& e) {
    if (top_.empty()) {
      top_min_ = top_max_ = e.time_ns;
    } else {
      if (e.time_ns < top_min_) top_min_ = e.time_ns;
      if (e.time_ns > top_max_) top_max_ = e.time_ns;
    }
    top_.push_back(e);
  }

  // Prepends `e` to the bucket list whose head is `head`.
  void Link(uint32_t& head, const QueuedEvent& e) {
    uint32_t n = free_;
    if (n != kNil) {
      free_ = nodes_[n].next;
    } else {
      n = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    Node& node = nodes_[n];
    node.e = e;
    node.next = head;
    head = n;
  }

  void PushBottom(const QueuedEvent& e) {
    if (LaneEmpty() || Before(lane_.back(), e)) {
      lane_.push_back(e);
    } else {
      HeapPush(e);
    }
  }

  // Removes the bottom's first entry. REQUIRES: the bottom is not empty.
  void PopBottom() {
    if (TopInLane()) {
      if (++lane_head_ == lane_.size()) {
        lane_.clear();
        lane_head_ = 0;
      }
    } else {
      HeapPop();
    }
  }

  void HeapPush(const QueuedEvent& e);
  void HeapPop();

  // Moves the next entries into the empty bottom. REQUIRES: size_ > 0, the bottom is empty.
  void Refill();
  // Makes the top into rung 0, or, if it is small or of one time, into the bottom.
  // REQUIRES: no rung, the bottom is empty, the top is not.
  void ConvertTop();
  // Adds a rung covering [first, last] for `entries` (all within it) and distributes them.
  // REQUIRES: rung_count_ < kMaxRungs, first < last, !entries.empty().
  void AddRung(const std::vector<QueuedEvent>& entries, int64_t first, int64_t last);
  // Sorts `entries` (taken by swap) into the empty bottom's lane.
  void SortIntoBottom(std::vector<QueuedEvent>& entries);
  // Forgets the rungs and the tier limits of an empty queue.
  void Reset();

  size_t size_ = 0;

  // Top tier.
  std::vector<QueuedEvent> top_;
  int64_t top_limit_;  // entries later than this go to the top
  int64_t top_min_ = 0;
  int64_t top_max_ = 0;

  // Rungs, coarsest first; rung_heads_[r] backs rungs_[r].heads.
  Rung rungs_[kMaxRungs];
  int rung_count_ = 0;
  std::vector<uint32_t> rung_heads_[kMaxRungs];
  std::vector<Node> nodes_;  // bucket lists' nodes; free ones are chained from free_
  uint32_t free_ = kNil;

  // Bottom tier: lane_[lane_head_..] sorted, plus a binary min-heap of late arrivals.
  std::vector<QueuedEvent> lane_;
  size_t lane_head_ = 0;
  std::vector<QueuedEvent> heap_;

  std::vector<QueuedEvent> scratch_;  // a bucket being moved down
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_LADDER_EVENT_QUEUE_H_
