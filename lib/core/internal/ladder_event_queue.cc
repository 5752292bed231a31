// The ladder queue's rarer operations (internal/ladder_event_queue.h).
#include "core/internal/ladder_event_queue.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kiln/event_queue.h"

namespace kiln::internal {
namespace {

constexpr int64_t kMinNs = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max();

// Insertion sort is the fastest for the few entries of a typical bucket.
constexpr size_t kInsertionSortMax = 24;

}  // namespace

LadderEventQueue::LadderEventQueue() : top_limit_(kMinNs) {}

void LadderEventQueue::Reset() {
  rung_count_ = 0;
  top_limit_ = kMinNs;
  lane_.clear();
  lane_head_ = 0;
}

void LadderEventQueue::HeapPush(const QueuedEvent& e) {
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(),
                 [](const QueuedEvent& a, const QueuedEvent& b) { return Before(b, a); });
}

void LadderEventQueue::HeapPop() {
  std::pop_heap(heap_.begin(), heap_.end(),
                [](const QueuedEvent& a, const QueuedEvent& b) { return Before(b, a); });
  heap_.pop_back();
}

void LadderEventQueue::SortIntoBottom(std::vector<QueuedEvent>& entries) {
  const size_t n = entries.size();
  if (n <= kInsertionSortMax) {
    QueuedEvent* v = entries.data();
    for (size_t i = 1; i < n; ++i) {
      const QueuedEvent e = v[i];
      const __int128 key = Key(e);
      size_t j = i;
      while (j > 0 && key < Key(v[j - 1])) {
        v[j] = v[j - 1];
        --j;
      }
      v[j] = e;
    }
  } else if (!std::is_sorted(entries.begin(), entries.end(), Before)) {
    std::sort(entries.begin(), entries.end(), Before);
  }
  lane_.clear();
  lane_.swap(entries);
  lane_head_ = 0;
}

void LadderEventQueue::AddRung(const std::vector<QueuedEvent>& entries, int64_t first,
                               int64_t last) {
  const int level = rung_count_++;
  Rung& rung = rungs_[level];
  const uint64_t span = static_cast<uint64_t>(last) - static_cast<uint64_t>(first);
  // About one bucket per entry: the smallest power-of-two width w with span / w < count.
  const uint32_t shift =
      std::min<uint32_t>(63, static_cast<uint32_t>(std::bit_width(span / entries.size())));
  const uint64_t buckets = (span >> shift) + 1;
  rung.start = first;
  rung.floor = first;
  rung.shift = shift;
  rung.cur = 0;
  rung.buckets = static_cast<uint32_t>(buckets);
  // The last time of the last bucket, saturated.
  const __int128 end = static_cast<__int128>(first) + (static_cast<__int128>(buckets) << shift) - 1;
  rung.last = end > kMaxNs ? kMaxNs : static_cast<int64_t>(end);
  std::vector<uint32_t>& heads = rung_heads_[level];
  heads.assign(buckets, kNil);
  rung.heads = heads.data();
  const uint64_t start = static_cast<uint64_t>(first);
  for (const QueuedEvent& e : entries) {
    Link(rung.heads[(static_cast<uint64_t>(e.time_ns) - start) >> shift], e);
  }
}

void LadderEventQueue::ConvertTop() {
  if (top_.size() <= kSplitThreshold || top_min_ == top_max_) {
    top_limit_ = top_max_;
    SortIntoBottom(top_);
    top_.clear();
    return;
  }
  AddRung(top_, top_min_, top_max_);
  top_limit_ = rungs_[0].last;
  top_.clear();
}

void LadderEventQueue::Refill() {
  for (;;) {
    if (rung_count_ == 0) {
      ConvertTop();
      if (!LaneEmpty() || !heap_.empty()) return;
      continue;  // (a rung was made)
    }
    Rung& rung = rungs_[rung_count_ - 1];
    uint32_t b = rung.cur;
    while (b < rung.buckets && rung.heads[b] == kNil) ++b;
    if (b == rung.buckets) {
      --rung_count_;  // used up: its range now belongs to the bottom
      continue;
    }
    uint32_t n = rung.heads[b];
    rung.heads[b] = kNil;
    const int64_t bucket_first = static_cast<int64_t>(
        static_cast<uint64_t>(rung.start) + (static_cast<uint64_t>(b) << rung.shift));
    const uint64_t width_minus_one = (uint64_t{1} << rung.shift) - 1;
    const int64_t bucket_last =
        static_cast<uint64_t>(rung.last) - static_cast<uint64_t>(bucket_first) < width_minus_one
            ? rung.last
            : static_cast<int64_t>(static_cast<uint64_t>(bucket_first) + width_minus_one);
    rung.cur = b + 1;
    if (rung.cur == rung.buckets) {
      --rung_count_;  // its last bucket: the bucket's range goes to a finer rung or the bottom
    } else {
      rung.floor = bucket_last + 1;
    }

    // Move the bucket's entries out, freeing its nodes.
    scratch_.clear();
    int64_t lo = kMaxNs;
    int64_t hi = kMinNs;
    while (n != kNil) {
      Node& node = nodes_[n];
      scratch_.push_back(node.e);
      lo = std::min(lo, node.e.time_ns);
      hi = std::max(hi, node.e.time_ns);
      const uint32_t next = node.next;
      node.next = free_;
      free_ = n;
      n = next;
    }
    if (scratch_.size() > kSplitThreshold && lo < hi && rung_count_ < kMaxRungs) {
      AddRung(scratch_, lo, bucket_last);
      continue;
    }
    SortIntoBottom(scratch_);
    return;
  }
}

}  // namespace kiln::internal
