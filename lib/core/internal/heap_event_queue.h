// HeapEventQueue: the default EventQueue, a 4-ary implicit min-heap in a vector, with a
// first-in first-out fast lane for events that arrive in order.
//
// Declared here (not only behind NewHeapEventQueue()) so that the event loop can call it
// without virtual dispatch: the class is final and its hot methods are inline. Internal: never
// installed, never included from public headers.
//
// Heap: entry i has children 4i+1 .. 4i+4. A 4-ary heap is half as deep as a binary one and
// its four children are contiguous (96 bytes), which suits caches better. Removal uses Floyd's
// method: the hole left at the root walks down to a leaf along the smallest children (three
// comparisons per level, none against the moving entry), then the moving entry climbs back up
// from there, usually by a level or two at most, since it comes from the bottom.
//
// Lane: an entry that orders after every entry already in the lane is appended to the lane (a
// sorted ring) instead of the heap, in O(1); the top is the smaller of the lane's front and the
// heap's root. Timers set at a fixed delay from now (periodic polls, time-outs, keep-alives)
// arrive in order and never touch the heap; random times go to the heap as before, and the lane
// then only holds the occasional new maximum. The order is exactly EventBefore's either way.
//
// Threading: thread-compatible.
#ifndef KILN_LIB_CORE_INTERNAL_HEAP_EVENT_QUEUE_H_
#define KILN_LIB_CORE_INTERNAL_HEAP_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/event_queue.h"

namespace kiln::internal {

class HeapEventQueue final : public EventQueue {
 public:
  HeapEventQueue() = default;

  void Push(const QueuedEvent& e) override {
    if (FitsLane(e)) {
      lane_.push_back(e);
    } else {
      HeapPush(e);
    }
  }

  const QueuedEvent& Top() const override {
    return TopInLane() ? lane_[lane_head_] : heap_.front();
  }

  void Pop() override {
    if (TopInLane()) {
      LanePop();
    } else {
      HeapPop();
    }
  }

  void ReplaceTop(const QueuedEvent& e) override {
    if (TopInLane()) {
      LanePop();
      Push(e);
    } else if (FitsLane(e)) {
      HeapPop();
      lane_.push_back(e);
    } else {
      SiftDownFromRoot(e, heap_.size());
    }
  }

  bool Empty() const override { return heap_.empty() && LaneEmpty(); }
  size_t Size() const override { return heap_.size() + (lane_.size() - lane_head_); }

  // Returns the entry that will be on top once the current top is popped (if nothing is pushed
  // meanwhile), or null: the event loop prefetches the next callback with it while the current
  // one runs. Returns null on heaps small enough to stay in cache (below kPrefetchMinSize
  // entries), where prefetching only costs instructions.
  const QueuedEvent* RunnerUp() const {
    const size_t n = heap_.size();
    if (n < kPrefetchMinSize || TopInLane()) return nullptr;
    const QueuedEvent* h = heap_.data();
    size_t best = 1;
    for (size_t k = 2; k <= 4; ++k) {
      if (Before(h[k], h[best])) best = k;
    }
    if (!LaneEmpty() && Before(lane_[lane_head_], h[best])) return &lane_[lane_head_];
    return &h[best];
  }

 private:
  static constexpr size_t kPrefetchMinSize = 16384;

  // EventBefore() without branches: (time, seq) as one signed 128-bit key (signed time in the
  // high half, unsigned seq in the low half orders exactly like the pair).
  static __int128 Key(const QueuedEvent& e) {
    return static_cast<__int128>(static_cast<unsigned __int128>(e.time_ns) << 64 | e.seq);
  }
  static bool Before(const QueuedEvent& a, const QueuedEvent& b) { return Key(a) < Key(b); }

  bool LaneEmpty() const { return lane_head_ == lane_.size(); }

  // True if `e` orders after the lane's last entry (or the lane is empty).
  bool FitsLane(const QueuedEvent& e) const { return LaneEmpty() || Before(lane_.back(), e); }

  // True if the top entry is the lane's front. REQUIRES: !Empty().
  bool TopInLane() const {
    return !LaneEmpty() && (heap_.empty() || Before(lane_[lane_head_], heap_.front()));
  }

  void LanePop() {
    ++lane_head_;
    if (lane_head_ == lane_.size()) {
      lane_.clear();
      lane_head_ = 0;
    } else if (lane_head_ >= 4096 && lane_head_ * 2 >= lane_.size()) {
      // Reclaim the consumed prefix: amortized O(1) per entry.
      lane_.erase(lane_.begin(), lane_.begin() + static_cast<std::ptrdiff_t>(lane_head_));
      lane_head_ = 0;
    }
  }

  void HeapPush(const QueuedEvent& e) {
    const size_t i = heap_.size();
    heap_.push_back(e);
    SiftUp(heap_.data(), i, e);
  }

  void HeapPop() {
    const size_t n = heap_.size() - 1;
    if (n == 0) {
      heap_.pop_back();
      return;
    }
    const QueuedEvent last = heap_[n];
    heap_.pop_back();
    SiftDownFromRoot(last, n);
  }

  // Moves `e`, destined for hole `i`, up past its larger ancestors.
  static void SiftUp(QueuedEvent* h, size_t i, const QueuedEvent& e) {
    while (i > 0) {
      const size_t parent = (i - 1) >> 2;
      if (!Before(e, h[parent])) break;
      h[i] = h[parent];
      i = parent;
    }
    h[i] = e;
  }

  // Fills the root hole of a heap of `n` entries (hole included) with `e`.
  void SiftDownFromRoot(const QueuedEvent& e, size_t n) {
    QueuedEvent* h = heap_.data();
    const bool prefetch = n >= kPrefetchMinSize;
    size_t i = 0;
    for (;;) {
      const size_t c = 4 * i + 1;
      size_t best;
      if (c + 3 < n) {
        // The grandchildren of i (children of c .. c+3) are one contiguous block of 16
        // entries: on large heaps, start fetching it while the children are compared.
        const size_t g = 4 * c + 1;
        if (prefetch && g < n) {
          const char* p = reinterpret_cast<const char*>(h + g);
          for (size_t off = 0; off < 16 * sizeof(QueuedEvent); off += 64) {
            __builtin_prefetch(p + off);
          }
        }
        const size_t m01 = c + Before(h[c + 1], h[c]);
        const size_t m23 = c + 2 + Before(h[c + 3], h[c + 2]);
        best = Before(h[m23], h[m01]) ? m23 : m01;
      } else if (c < n) {
        best = c;
        for (size_t k = c + 1; k < n; ++k) {
          if (Before(h[k], h[best])) best = k;
        }
      } else {
        break;
      }
      h[i] = h[best];
      i = best;
    }
    SiftUp(h, i, e);
  }

  std::vector<QueuedEvent> heap_;
  std::vector<QueuedEvent> lane_;  // sorted; live entries are [lane_head_, size())
  size_t lane_head_ = 0;
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_HEAP_EVENT_QUEUE_H_
