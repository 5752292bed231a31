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
//           in O(1); when everything below is used up it becomes rung 0, its bucket width
//           fitted to the entries' time span. (With no rung and an empty top, an entry beyond
//           everything goes straight to the bottom's lane instead, like the heap queue's
//           lane: timers armed at one fixed delay, say, never leave the lane.)
//   rungs   up to kMaxRungs arrays of at most kMaxBuckets buckets, each rung a power-of-two
//           bucket width, rung r+1 the subdivision of one bucket of rung r (a bucket holding
//           more than kSortMax entries is split into a finer rung rather than sorted).
//           A bucket is an unsorted vector: a push into a rung is an index computation and an
//           append, with no comparison;
//   bottom  the entries due first, sorted: a first-in first-out "lane" (a sorted vector read from
//           its head) plus a small binary heap. An entry that arrives below the finest rung's
//           current bucket and orders before the lane's end goes into the lane if that is cheap
//           (before the whole lane, into the room a pop left, as an event "now" does; or among its
//           last kMaxShift entries), else into the heap. The top of the queue is the smaller of the
//           two fronts. When the lane runs short (fewer than kMinLane entries: the event loop
//           prefetches the callback of the entry six ahead in it) it is topped up from the finest
//           rung, the entries taken appended to it: the next non-empty bucket, if it holds more
//           than kSmallBucket entries, by a counting sort on the high bits of the entries' times
//           (about one entry per digit; the runs of one digit are then sorted, by insertion when
//           short), else that bucket and the next small ones, each sorted by insertion as it is
//           copied, until kLaneFill entries are taken. (Topping up before the lane is empty, rather
//           than refilling it once empty, took the hold model through the loop to 0.86-0.95 of its
//           time at 10^5 pending and 0.72 at 10^6: the events before a refill had run with their
//           slots unprefetched.) (Splitting every crowded bucket into a finer rung of 1024 buckets
//           of one or two entries, as a first version did after the paper, moved each entry once
//           more, through block chains spread over the whole rung; the counting sort reads a bucket
//           twice and writes it once, in cache. At 10^5 pending, the hold model alone ran 15-16 M
//           events/s before, 19-20 M after, for nearly the same instruction count.) When its heap
//           grows past spill_at_ entries (many pushes below the bottom's range, as when a fresh
//           queue is filled), the whole bottom becomes a new finest rung.
//
// Unlike the paper's linked lists, buckets are contiguous and a rung has at most kMaxBuckets of
// them (the paper gives rung 0 one bucket per entry): the tails of all buckets of a rung stay
// in the first levels of cache, so that a push is an append to a cached line, and a bucket is
// read sequentially when it is moved down. Each entry is thus copied a few times (top, rung 0,
// perhaps rung 1, bottom), but never looked for in memory: with 10^5 or more pending entries,
// cache misses, not comparisons, are what a queue costs. (A first version with the paper's
// lists of pooled nodes spent over half its time at 10^5 pending walking those lists, one cache
// miss per node.) A bucket is a chain of 32-entry blocks from a pool that every bucket shares,
// so the queue holds about as much memory as a heap of its largest size (measured at 10^6
// pending: 25.8 bytes per entry, the heap 24.5) and allocates nothing in a steady state.
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
#include <memory>
#include <vector>

#include "kiln/event_queue.h"

namespace kiln::internal {

class LadderEventQueue final : public EventQueue {
 public:
  LadderEventQueue();
  LadderEventQueue(const LadderEventQueue&) = delete;
  LadderEventQueue& operator=(const LadderEventQueue&) = delete;

  void Push(const QueuedEvent& e) override {
    ++size_;
    Place(e);
    if (BottomEmpty()) [[unlikely]] Refill();
  }

  const QueuedEvent& Top() const override { return TopInLane() ? *lane_head_ : heap_.front(); }

  void Pop() override {
    PopBottom();
    if (--size_ == 0) [[unlikely]] {
      Reset();
    } else if (LaneShort()) [[unlikely]] {
      Refill();
    }
  }

  // Inlined into the event loop (as Top and Push are): a call would cost as much as its body.
  [[gnu::always_inline]] void ReplaceTop(const QueuedEvent& e) override {
    PopBottom();
    Place(e);
    if (LaneShort()) [[unlikely]] Refill();
  }

  bool Empty() const override { return size_ == 0; }
  size_t Size() const override { return size_; }

  // Pop and ReplaceTop keep at least this many entries in the bottom's lane while the rungs or
  // the top hold more (they top the lane up from there once it holds fewer), so that
  // Upcoming(k) finds an entry for any k below it, not only when the lane happens to be long.
  static constexpr size_t kMinLane = 8;

  // Returns the entry `k` places after the head of the bottom's lane, or null if the lane holds
  // no more than `k` entries: the event loop prefetches upcoming callbacks with it. If nothing
  // is pushed meanwhile, it comes to the top after k pops plus one for each entry of the
  // bottom's heap that orders before it (the heap holds the few entries pushed below the
  // lane's end, usually none).
  const QueuedEvent* Upcoming(size_t k) const {
    return LaneBytes() > k * sizeof(QueuedEvent) ? lane_head_ + k : nullptr;
  }

 private:
  // A bucket of at most this many entries (one block) is small: a refill sorts it by insertion,
  // with the next small ones, rather than by a counting sort.
  static constexpr size_t kSmallBucket = 32;
  static constexpr int kMaxRungs = 8;
  // Buckets per rung at most: their tails (one cache line each) and headers stay in cache.
  static constexpr size_t kMaxBuckets = 1024;
  // A refill takes buckets until the lane holds at least this many entries.
  static constexpr size_t kLaneFill = 16;
  // A bucket of more than kSmallBucket and at most this many entries is counting-sorted into
  // the lane when its turn comes; a bigger one is split into a finer rung first (unless all
  // its entries share one time, or kMaxRungs rungs exist).
  static constexpr size_t kSortMax = 4096;
  // The counting sort uses at most 2^kMaxDigitBits digits.
  static constexpr uint32_t kMaxDigitBits = 12;
  // An entry pushed below the lane's end enters the lane if that moves at most this many of
  // its entries (LaneInsert), else the bottom's heap.
  static constexpr size_t kMaxShift = 8;
  // The bottom's heap spills into a rung when it grows past this many entries.
  static constexpr size_t kSpillThreshold = 2 * kSmallBucket;

  // Buckets are chains of fixed-size blocks from a pool shared by all buckets: an append
  // writes into the last block, and an emptied bucket gives its blocks back in O(1), so the
  // memory held follows the number of entries (growable arrays that keep their capacity would
  // each grow to the largest size their bucket ever had: 300 bytes per entry at 10^6 pending).
  static constexpr size_t kBlockEntries = 32;
  struct Block {
    Block* next;
    QueuedEvent entries[kBlockEntries];
  };
  static_assert(kSmallBucket == kBlockEntries, "a bucket is small iff it fits one block");

  // An unsorted chain of blocks, all full but the last (the tail).
  struct Bucket {
    Block* head = nullptr;
    Block* tail = nullptr;
    QueuedEvent* end = nullptr;    // one past the tail's last entry
    QueuedEvent* limit = nullptr;  // the end of the tail's storage; null when empty
    bool empty() const { return head == nullptr; }
    // True if the bucket holds at most kBlockEntries entries (none included).
    bool small() const { return head == tail; }
  };

  struct Rung {
    int64_t start = 0;  // first time of bucket 0
    int64_t floor = 0;  // first time of bucket `cur`: entries at or after it belong here
    int64_t last = 0;   // last time covered (saturated at int64's maximum)
    uint32_t shift = 0;  // bucket width is 2^shift nanoseconds
    uint32_t cur = 0;    // first bucket not yet moved down; buckets before it are empty
    uint32_t count = 0;  // number of buckets
    Bucket* buckets = nullptr;
  };

  // Block pool.
  void Append(Bucket& bucket, const QueuedEvent& e) {
    if (bucket.end == bucket.limit) [[unlikely]] AddBlock(bucket);
    *bucket.end++ = e;
  }
  void AddBlock(Bucket& bucket);
  // Empties `bucket`, giving its blocks back to the pool.
  void Release(Bucket& bucket) {
    if (bucket.head != nullptr) {
      bucket.tail->next = free_blocks_;
      free_blocks_ = bucket.head;
    }
    bucket = Bucket();
  }
  static size_t Count(const Bucket& bucket);
  // Calls f(entry) for each entry of `bucket`, in no particular order.
  template <class F>
  static void ForEach(const Bucket& bucket, F f) {
    for (const Block* b = bucket.head; b != nullptr; b = b->next) {
      const QueuedEvent* end = b == bucket.tail ? bucket.end : b->entries + kBlockEntries;
      for (const QueuedEvent* e = b->entries; e != end; ++e) f(*e);
    }
  }
  // ForEach, then Release, giving each block back as soon as it is read: `f` may append to
  // other buckets, reusing them, so that moving n entries holds about n entries' blocks, not
  // twice that.
  template <class F>
  void Drain(Bucket& bucket, F f) {
    Block* b = bucket.head;
    const Block* const tail = bucket.tail;
    const QueuedEvent* const tail_end = bucket.end;
    bucket = Bucket();
    while (b != nullptr) {
      const QueuedEvent* end = b == tail ? tail_end : b->entries + kBlockEntries;
      for (const QueuedEvent* e = b->entries; e != end; ++e) f(*e);
      Block* const next = b->next;
      b->next = free_blocks_;
      free_blocks_ = b;
      b = next;
    }
  }

  // (time, seq) as one signed 128-bit key: signed time in the high half, unsigned seq in the
  // low half orders exactly like EventBefore.
  static __int128 Key(const QueuedEvent& e) {
    return static_cast<__int128>(static_cast<unsigned __int128>(e.time_ns) << 64 | e.seq);
  }
  static bool Before(const QueuedEvent& a, const QueuedEvent& b) { return Key(a) < Key(b); }

  bool LaneEmpty() const { return lane_head_ == lane_end_; }
  bool BottomEmpty() const { return LaneEmpty() && heap_.empty(); }
  // True if the lane holds fewer than kMinLane entries and the rungs or the top hold more. (If
  // the bottom is empty in a non-empty queue, they do: this is true whenever the invariant
  // needs a refill.)
  bool LaneShort() const {
    return LaneBytes() < kMinLane * sizeof(QueuedEvent) && (rung_count_ != 0 || !top_.empty());
  }
  // The lane's size in bytes: compared with a multiple of sizeof(QueuedEvent), this spares the
  // division that a count of entries (a pointer difference) costs.
  size_t LaneBytes() const {
    return reinterpret_cast<uintptr_t>(lane_end_) - reinterpret_cast<uintptr_t>(lane_head_);
  }
  bool TopInLane() const {
    return heap_.empty() || (!LaneEmpty() && Before(*lane_head_, heap_.front()));
  }

  // Adds `e` to the tier its time belongs to. Does not restore the invariant.
  [[gnu::always_inline]] void Place(const QueuedEvent& e) {
    const int64_t t = e.time_ns;
    if (t > top_limit_) {
      if (rung_count_ == 0 && top_.empty()) {
        // Later than everything (the bottom holds all): the bottom takes it, as the heap's
        // lane does, so that timers armed at one fixed delay never leave the lane.
        top_limit_ = t;
        LaneAppend(e);
      } else {
        PushTop(e);
      }
      return;
    }
    for (int r = 0; r < rung_count_; ++r) {
      Rung& rung = rungs_[r];
      if (t >= rung.floor) {
        const uint64_t b = (static_cast<uint64_t>(t) - static_cast<uint64_t>(rung.start)) >>
                           rung.shift;
        Append(rung.buckets[b], e);
        return;
      }
    }
    PushBottom(e);
  }

  [[gnu::noinline]] void PushTop(const QueuedEvent& e) {
    if (top_.empty()) {
      top_min_ = top_max_ = e.time_ns;
    } else {
      if (e.time_ns < top_min_) top_min_ = e.time_ns;
      if (e.time_ns > top_max_) top_max_ = e.time_ns;
    }
    Append(top_, e);
  }

  [[gnu::noinline]] void PushBottom(const QueuedEvent& e) {
    if (LaneEmpty() || Before(lane_end_[-1], e)) {
      LaneAppend(e);
    } else if (!LaneInsert(e)) {
      HeapPush(e);
    }
  }

  // Puts `e` in its place in the lane if it orders before the whole lane and a pop has left
  // room there (an event due "now" takes the place of the one just run), or if at most
  // kMaxShift entries order after it (they move one place toward the back). Returns false,
  // changing nothing, otherwise.
  // REQUIRES: the lane is not empty and its last entry orders after `e`.
  bool LaneInsert(const QueuedEvent& e);

  // REQUIRES: `e` orders after every entry of the lane.
  void LaneAppend(const QueuedEvent& e) {
    if (lane_end_ == LaneCapacityEnd()) [[unlikely]] GrowLane(1);
    *lane_end_++ = e;
  }

  // Removes the bottom's first entry. REQUIRES: the bottom is not empty. Inlined into
  // ReplaceTop, on the loop's hot path, where GCC would otherwise call it.
  [[gnu::always_inline]] void PopBottom() {
    if (TopInLane()) {
      if (++lane_head_ == lane_end_) lane_head_ = lane_end_ = lane_buf_.data();
    } else {
      HeapPop();
    }
  }

  QueuedEvent* LaneCapacityEnd() { return lane_buf_.data() + lane_buf_.size(); }
  // Makes room for `n` more entries at the lane's end.
  void GrowLane(size_t n);
  // Appends `entries` to the lane, sorted among themselves, and empties `entries`.
  // REQUIRES: they all order after the lane's entries.
  void AppendSorted(Bucket& entries);

  // Sorts the `n` entries of `bucket`, all in [first, first + 2^shift), into the empty lane, and
  // empties `bucket`.
  void SortIntoLane(Bucket& bucket, size_t n, uint64_t first, uint32_t shift);
  // Sorts [first, last) by Before.
  static void SortRun(QueuedEvent* first, QueuedEvent* last);

  void HeapPush(const QueuedEvent& e);
  void HeapPop();
  // Turns the bottom into a new finest rung and refills it from there; if the bottom cannot be
  // split (one time, or kMaxRungs rungs), lets its heap grow to twice its size first.
  void Spill();

  // Moves the next entries from the rungs or the top to the end of the lane (they order after
  // everything in the bottom). REQUIRES: size_ > 0; LaneShort().
  void Refill();
  // Makes the top into rung 0, or, if it is small or of one time, into the bottom (after the
  // lane's entries, which all order before the top's).
  // REQUIRES: no rung; the top is not empty.
  void ConvertTop();
  // Adds a rung covering [first, last] for `entries` (all within it) and moves them there,
  // emptying `entries`.
  // REQUIRES: rung_count_ < kMaxRungs, first < last, !entries.empty(), `entries` is no bucket
  // of a rung.
  void AddRung(Bucket& entries, int64_t first, int64_t last);
  // Forgets the rungs and the tier limits of an empty queue.
  void Reset();

  size_t size_ = 0;

  // Top tier.
  Bucket top_;
  int64_t top_limit_;  // entries later than this go to the top
  int64_t top_min_ = 0;
  int64_t top_max_ = 0;

  // Rungs, coarsest first; rung_buckets_[r] backs rungs_[r].buckets. Buckets beyond the live
  // rungs, and before each rung's `cur`, are empty (their capacity is kept for reuse).
  Rung rungs_[kMaxRungs];
  int rung_count_ = 0;
  std::vector<Bucket> rung_buckets_[kMaxRungs];

  // Bottom tier: the lane, sorted entries [lane_head_, lane_end_) in lane_buf_ (whose size is
  // the lane's capacity), and a binary min-heap of late arrivals.
  std::vector<QueuedEvent> lane_buf_;
  QueuedEvent* lane_head_ = nullptr;
  QueuedEvent* lane_end_ = nullptr;
  std::vector<QueuedEvent> heap_;
  size_t spill_at_ = kSpillThreshold;

  std::vector<uint32_t> digit_counts_;  // SortIntoLane's counters
  Bucket scratch_;  // a bucket being split, or the bottom being spilled

  Block* free_blocks_ = nullptr;  // the pool's free blocks, chained
  std::vector<std::unique_ptr<Block[]>> slabs_;  // the pool's storage
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_LADDER_EVENT_QUEUE_H_
