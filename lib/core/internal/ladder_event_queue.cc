// The ladder queue's rarer operations (internal/ladder_event_queue.h).
#include "core/internal/ladder_event_queue.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kiln/event_queue.h"

namespace kiln::internal {
namespace {

constexpr int64_t kMinNs = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max();

// Buckets up to this size are sorted by insertion as they are copied into the lane.
constexpr size_t kInsertionSortMax = 32;

// The lane's first capacity, in entries. Refills append to the lane's end, which moves through
// its buffer; GrowLane slides the lane back to the front once it is at most half full.
constexpr size_t kInitialLane = 256;

// The min-heap order of the bottom's heap, for std::push_heap and std::pop_heap.
struct After {
  bool operator()(const QueuedEvent& a, const QueuedEvent& b) const {
    return EventBefore(b, a);
  }
};

}  // namespace

LadderEventQueue::LadderEventQueue() : top_limit_(kMinNs) {
  // Room for several refills from small buckets (Refill) before the lane slides to the front.
  lane_buf_.resize(kInitialLane);
  lane_head_ = lane_end_ = lane_buf_.data();
}

void LadderEventQueue::AddBlock(Bucket& bucket) {
  if (free_blocks_ == nullptr) {
    // A new slab of blocks, all free.
    constexpr size_t kSlabBlocks = 64;
    slabs_.push_back(std::make_unique<Block[]>(kSlabBlocks));
    Block* slab = slabs_.back().get();
    for (size_t i = 0; i + 1 < kSlabBlocks; ++i) slab[i].next = &slab[i + 1];
    slab[kSlabBlocks - 1].next = nullptr;
    free_blocks_ = slab;
  }
  Block* block = free_blocks_;
  free_blocks_ = block->next;
  block->next = nullptr;
  if (bucket.tail == nullptr) {
    bucket.head = block;
  } else {
    bucket.tail->next = block;
  }
  bucket.tail = block;
  bucket.end = block->entries;
  bucket.limit = block->entries + kBlockEntries;
}

size_t LadderEventQueue::Count(const Bucket& bucket) {
  if (bucket.head == nullptr) return 0;
  size_t n = 0;
  for (const Block* b = bucket.head; b != bucket.tail; b = b->next) n += kBlockEntries;
  return n + static_cast<size_t>(bucket.end - bucket.tail->entries);
}

void LadderEventQueue::Reset() {
  rung_count_ = 0;
  top_limit_ = kMinNs;
  lane_head_ = lane_end_ = lane_buf_.data();
  spill_at_ = kSpillThreshold;
}

void LadderEventQueue::GrowLane(size_t n) {
  const size_t live = static_cast<size_t>(lane_end_ - lane_head_);
  const size_t capacity = lane_buf_.size();
  if (live + n <= capacity / 2) {
    // At most half full: slide the entries to the front (amortized O(1) per pop).
    std::memmove(static_cast<void*>(lane_buf_.data()), lane_head_, live * sizeof(QueuedEvent));
  } else {
    std::vector<QueuedEvent> bigger(std::max({2 * capacity, live + n, size_t{64}}));
    std::copy(lane_head_, lane_end_, bigger.data());
    lane_buf_.swap(bigger);
  }
  lane_head_ = lane_buf_.data();
  lane_end_ = lane_head_ + live;
}

bool LadderEventQueue::LaneInsert(const QueuedEvent& e) {
  const __int128 key = Key(e);
  if (key < Key(*lane_head_)) {
    // Due before the whole lane, as an event "now" usually is: into the room a pop left.
    if (lane_head_ == lane_buf_.data()) return false;
    *--lane_head_ = e;
    return true;
  }
  // Among the last kMaxShift entries: those after it move one place toward the back. (The
  // head orders before e, so the scan stops there at the latest.)
  if (lane_end_ == LaneCapacityEnd()) return false;
  QueuedEvent* p = lane_end_ - 1;  // orders after e
  for (size_t moved = 1; key < Key(p[-1]); ++moved) {
    if (moved == kMaxShift) return false;
    --p;
  }
  for (QueuedEvent* q = lane_end_; q != p; --q) *q = q[-1];
  *p = e;
  ++lane_end_;
  return true;
}

void LadderEventQueue::AppendSorted(Bucket& bucket) {
  const size_t n = Count(bucket);
  if (static_cast<size_t>(LaneCapacityEnd() - lane_end_) < n) GrowLane(n);
  QueuedEvent* const first = lane_end_;
  QueuedEvent* end = first;
  if (n <= kInsertionSortMax) {
    Drain(bucket, [first, &end](const QueuedEvent& e) {
      const __int128 key = Key(e);
      QueuedEvent* j = end;
      while (j > first && key < Key(j[-1])) {
        *j = j[-1];
        --j;
      }
      *j = e;
      ++end;
    });
  } else {
    Drain(bucket, [&end](const QueuedEvent& e) { *end++ = e; });
    // Entries of one time pushed in seq order (the common reason for a big unsplit bucket)
    // are sorted already.
    if (!std::is_sorted(first, end, Before)) std::sort(first, end, Before);
  }
  lane_end_ = end;
}

void LadderEventQueue::HeapPush(const QueuedEvent& e) {
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), After());
  if (heap_.size() > spill_at_) [[unlikely]] Spill();
}

void LadderEventQueue::HeapPop() {
  std::pop_heap(heap_.begin(), heap_.end(), After());
  heap_.pop_back();
}

void LadderEventQueue::Spill() {
  // Everything in the bottom lies in [lo, limit]: below the finest rung's floor, or up to
  // top_limit_ when there is no rung. (floor - 1 cannot overflow: every rung has moved at
  // least its first non-empty bucket down, by the end of the Refill that made it.)
  const int64_t limit = rung_count_ > 0 ? rungs_[rung_count_ - 1].floor - 1 : top_limit_;
  const int64_t lo = Top().time_ns;
  if (rung_count_ == kMaxRungs || lo == limit) {
    spill_at_ = 2 * heap_.size();
    return;
  }
  for (const QueuedEvent* e = lane_head_; e != lane_end_; ++e) Append(scratch_, *e);
  for (const QueuedEvent& e : heap_) Append(scratch_, e);
  lane_head_ = lane_end_ = lane_buf_.data();
  heap_.clear();
  spill_at_ = kSpillThreshold;
  AddRung(scratch_, lo, limit);
  Refill();
}

void LadderEventQueue::AddRung(Bucket& entries, int64_t first, int64_t last) {
  const int level = rung_count_++;
  Rung& rung = rungs_[level];
  const uint64_t span = static_cast<uint64_t>(last) - static_cast<uint64_t>(first);
  // About one bucket per entry, kMaxBuckets at most: the smallest power-of-two width w with
  // span / w < that many buckets.
  const uint64_t target = std::min<uint64_t>(Count(entries), kMaxBuckets);
  const uint32_t shift =
      std::min<uint32_t>(63, static_cast<uint32_t>(std::bit_width(span / target)));
  const uint64_t count = (span >> shift) + 1;
  rung.start = first;
  rung.floor = first;
  rung.shift = shift;
  rung.cur = 0;
  rung.count = static_cast<uint32_t>(count);
  // The last time of the last bucket, saturated.
  const __int128 end = static_cast<__int128>(first) + (static_cast<__int128>(count) << shift) - 1;
  rung.last = end > kMaxNs ? kMaxNs : static_cast<int64_t>(end);
  std::vector<Bucket>& buckets = rung_buckets_[level];
  if (buckets.size() < count) buckets.resize(count);
  rung.buckets = buckets.data();
  const uint64_t start = static_cast<uint64_t>(first);
  Bucket* const to = rung.buckets;
  Drain(entries, [this, to, start, shift](const QueuedEvent& e) {
    Append(to[(static_cast<uint64_t>(e.time_ns) - start) >> shift], e);
  });
}

void LadderEventQueue::ConvertTop() {
  if (top_.small() || top_min_ == top_max_) {
    top_limit_ = top_max_;
    AppendSorted(top_);
    return;
  }
  AddRung(top_, top_min_, top_max_);
  top_limit_ = rungs_[0].last;
}

void LadderEventQueue::SortIntoLane(Bucket& bucket, size_t n, uint64_t first, uint32_t shift) {
  if (static_cast<size_t>(LaneCapacityEnd() - lane_end_) < n) GrowLane(n);
  // Counting sort on the high bits of the offset from `first`: about one entry per digit, so
  // that the runs of one digit, sorted afterwards, are mostly of one or two entries.
  const uint32_t bits = std::min<uint32_t>(
      {shift, kMaxDigitBits, static_cast<uint32_t>(std::bit_width(n)) - 1});
  const uint32_t low = shift - bits;
  const size_t digits = size_t{1} << bits;
  if (digit_counts_.size() < digits) digit_counts_.resize(size_t{1} << kMaxDigitBits);
  uint32_t* const count = digit_counts_.data();
  std::fill(count, count + digits, 0);
  ForEach(bucket, [count, first, low](const QueuedEvent& e) {
    ++count[(static_cast<uint64_t>(e.time_ns) - first) >> low];
  });
  uint32_t sum = 0;
  for (size_t d = 0; d < digits; ++d) sum += std::exchange(count[d], sum);
  QueuedEvent* const lane = lane_end_;
  Drain(bucket, [lane, count, first, low](const QueuedEvent& e) {
    lane[count[(static_cast<uint64_t>(e.time_ns) - first) >> low]++] = e;
  });
  // count[d] is now the end of digit d's run. Most runs hold one entry or two.
  uint32_t start = 0;
  for (size_t d = 0; d < digits; ++d) {
    const uint32_t end = count[d];
    if (end - start == 2) {
      QueuedEvent* const p = lane + start;
      if (Before(p[1], p[0])) std::swap(p[0], p[1]);
    } else if (end - start > 2) {
      SortRun(lane + start, lane + end);
    }
    start = end;
  }
  lane_end_ = lane + n;
}

void LadderEventQueue::SortRun(QueuedEvent* first, QueuedEvent* last) {
  if (last - first <= static_cast<ptrdiff_t>(kInsertionSortMax)) {
    for (QueuedEvent* i = first + 1; i != last; ++i) {
      const QueuedEvent e = *i;
      const __int128 key = Key(e);
      QueuedEvent* j = i;
      while (j > first && key < Key(j[-1])) {
        *j = j[-1];
        --j;
      }
      *j = e;
    }
  } else if (!std::is_sorted(first, last, Before)) {
    // Entries of one time pushed in seq order (the common reason for a big run) are sorted
    // already.
    std::sort(first, last, Before);
  }
}

void LadderEventQueue::Refill() {
  // What the lane still holds stays first (a top-up): the entries taken are appended to it,
  // GrowLane sliding it to the front of its buffer when the room after it runs short.
  for (;;) {
    if (rung_count_ == 0) {
      // Nothing left above the lane (its last rungs were used up): top_limit_ stays, at or
      // past every entry of the bottom. (ConvertTop would set it to the maximum of an earlier
      // top, which entries pushed into the rungs since may exceed.)
      if (top_.empty()) return;
      ConvertTop();
      if (rung_count_ == 0) return;  // the top went to the lane
      continue;                      // the top became a rung
    }
    Rung& rung = rungs_[rung_count_ - 1];
    uint32_t b = rung.cur;
    while (b < rung.count && rung.buckets[b].empty()) ++b;
    if (b == rung.count) {
      --rung_count_;  // used up: its range now belongs to the bottom
      continue;
    }
    Bucket& bucket = rung.buckets[b];
    const bool last_bucket = b + 1 == rung.count;
    const uint64_t bucket_first =
        static_cast<uint64_t>(rung.start) + (static_cast<uint64_t>(b) << rung.shift);
    if (!bucket.small()) {
      const size_t n = Count(bucket);
      if (n > kSortMax && (last_bucket || rung_count_ < kMaxRungs)) {
        int64_t lo = kMaxNs;
        int64_t hi = kMinNs;
        ForEach(bucket, [&lo, &hi](const QueuedEvent& e) {
          lo = std::min(lo, e.time_ns);
          hi = std::max(hi, e.time_ns);
        });
        if (lo < hi) {
          // Too many to sort at once: split the bucket into a finer rung, which takes this
          // rung's place if this was its last bucket.
          const int64_t bucket_last =
              last_bucket ? rung.last
                          : static_cast<int64_t>(bucket_first +
                                                 (uint64_t{1} << rung.shift) - 1);
          rung.cur = b + 1;
          if (last_bucket) {
            --rung_count_;
          } else {
            rung.floor = bucket_last + 1;
          }
          std::swap(scratch_, bucket);  // the new rung may reuse this rung's buckets
          AddRung(scratch_, lo, bucket_last);
          continue;
        }
      }
      SortIntoLane(bucket, n, bucket_first, rung.shift);
      ++b;
    } else {
      // Sort this bucket into the lane by insertion as it is copied, and the next ones while
      // fewer than kLaneFill have been taken and they are small; b ends as the first bucket
      // not taken. This copies fewer than kLaneFill + kSmallBucket entries after the lane's.
      if (static_cast<size_t>(LaneCapacityEnd() - lane_end_) < kLaneFill + kSmallBucket) {
        GrowLane(kLaneFill + kSmallBucket);
      }
      QueuedEvent* const lane = lane_end_;
      QueuedEvent* end = lane;
      for (;;) {
        Bucket& taken = rung.buckets[b];  // one block
        QueuedEvent* const first = end;
        for (const QueuedEvent* e = taken.head->entries; e != taken.end; ++e) {
          const __int128 key = Key(*e);
          QueuedEvent* j = end;
          while (j > first && key < Key(j[-1])) {
            *j = j[-1];
            --j;
          }
          *j = *e;
          ++end;
        }
        Release(taken);
        ++b;
        if (static_cast<size_t>(end - lane) >= kLaneFill) break;
        uint32_t next = b;
        while (next < rung.count && rung.buckets[next].empty()) ++next;
        if (next == rung.count || !rung.buckets[next].small()) break;
        b = next;
      }
      lane_end_ = end;
    }
    if (b == rung.count) {
      --rung_count_;
    } else {
      rung.cur = b;
      rung.floor = static_cast<int64_t>(static_cast<uint64_t>(rung.start) +
                                        (static_cast<uint64_t>(b) << rung.shift));
    }
    return;
  }
}

}  // namespace kiln::internal
