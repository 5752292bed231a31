// The ladder queue's own behaviour (internal/ladder_event_queue.h): the look-ahead the event
// loop prefetches upcoming callbacks with, and the order kept while the lane is topped up from
// the rungs and pushed into. The ordering every queue shares is tested in event_queue_test.cc.
#include "core/internal/ladder_event_queue.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/event_queue.h"

namespace kiln::internal {
namespace {

// The hold model on the queue: `pending` entries, each pop followed by a push at the popped
// time + Exp(1 ms).
class Hold {
 public:
  Hold(LadderEventQueue& q, int pending, uint32_t seed) : q_(q), rng_(seed) {
    for (int i = 0; i < pending; ++i) q_.Push(Next(0));
  }
  QueuedEvent Next(int64_t now) {
    const int64_t t = now + static_cast<int64_t>(std::llround(exp_(rng_) * 1e6));
    return {t, seq_++, static_cast<uint32_t>(seq_ & 0xffff), 1};
  }

 private:
  LadderEventQueue& q_;
  std::mt19937_64 rng_;
  std::exponential_distribution<double> exp_;
  uint64_t seq_ = 0;
};

// Upcoming(k), when not null, comes to the top k pops later if nothing is pushed meanwhile and
// no entry of the bottom's heap orders before it, and a few pops later if some do: checked for
// k up to 7 at every pop of a queue drained after a hold run (the rungs, the top and the
// bottom's heap all in use), the lane topped up from the rungs by Pop.
TEST(LadderEventQueueTest, UpcomingIsTheEntryOnTopKPopsLater) {
  LadderEventQueue q;
  Hold hold(q, 10000, /*seed=*/7);
  for (int step = 0; step < 20000; ++step) {
    const QueuedEvent top = q.Top();
    QueuedEvent e = hold.Next(top.time_ns);
    // Now and then an entry right after the lane's third: more than kMaxShift entries before
    // the lane's end when the lane is long, so into the bottom's heap; and now and then one at
    // the popped time, before the whole lane, into the room the pop leaves.
    const QueuedEvent* third = q.Upcoming(2);
    if (step % 97 == 0 && third != nullptr) e.time_ns = third->time_ns;
    if (step % 89 == 0) e.time_ns = top.time_ns;
    q.ReplaceTop(e);
  }
  std::vector<uint64_t> popped;                       // seq of each pop, in order
  std::vector<std::array<int64_t, 8>> predicted;      // per pop: Upcoming(k)'s seq, or -1
  size_t found = 0;
  while (!q.Empty()) {
    std::array<int64_t, 8> p;
    p.fill(-1);
    for (size_t k = 1; k < LadderEventQueue::kMinLane; ++k) {
      if (const QueuedEvent* u = q.Upcoming(k)) {
        p[k] = static_cast<int64_t>(u->seq);
        ++found;
      }
    }
    predicted.push_back(p);
    popped.push_back(q.Top().seq);
    q.Pop();
  }
  std::unordered_map<uint64_t, size_t> position;  // seq -> pop number
  for (size_t i = 0; i < popped.size(); ++i) position[popped[i]] = i;
  size_t exact = 0;
  for (size_t i = 0; i < popped.size(); ++i) {
    for (size_t k = 1; k < LadderEventQueue::kMinLane; ++k) {
      if (predicted[i][k] < 0) continue;
      const size_t j = position.at(static_cast<uint64_t>(predicted[i][k]));
      ASSERT_GE(j, i + k) << "pop " << i << ", k " << k;
      // (The bottom's heap spills into a rung past 64 entries.)
      ASSERT_LE(j, i + k + 64) << "pop " << i << ", k " << k;
      if (j == i + k) ++exact;
    }
  }
  EXPECT_GT(found, popped.size() * 6);  // most pops predicted for most k: the check checked
  EXPECT_GT(exact, found * 9 / 10);
}

// With the rungs holding more, the lane is kept at kMinLane entries or more, so that the loop
// finds an entry six ahead at every event. Without the top-up, the lane ran down to empty
// before each refill: at 10^4 pending, 97.3% of pops found one.
TEST(LadderEventQueueTest, LaneKeepsTheEntrySixAheadInSight) {
  LadderEventQueue q;
  Hold hold(q, 10000, /*seed=*/11);
  int found = 0;
  constexpr int kSteps = 200000;
  for (int step = 0; step < kSteps; ++step) {
    if (q.Upcoming(6) != nullptr) ++found;
    const QueuedEvent top = q.Top();
    q.ReplaceTop(hold.Next(top.time_ns));
  }
  EXPECT_EQ(found, kSteps);
}

// A LadderEventQueue beside a std::set of the same entries: Pop and ReplaceTop first check
// that the queue's top is the set's first entry (and the sizes agree).
class CheckedQueue {
 public:
  void Push(int64_t t) {
    const QueuedEvent e = Next(t);
    q_.Push(e);
    ref_.insert(e);
  }
  ::testing::AssertionResult Pop() {
    if (::testing::AssertionResult r = TopMatches(); !r) return r;
    q_.Pop();
    ref_.erase(ref_.begin());
    return ::testing::AssertionSuccess();
  }
  // Pops the top and pushes an entry at `t`, in one ReplaceTop.
  ::testing::AssertionResult ReplaceTop(int64_t t) {
    if (::testing::AssertionResult r = TopMatches(); !r) return r;
    ref_.erase(ref_.begin());
    const QueuedEvent e = Next(t);
    q_.ReplaceTop(e);
    ref_.insert(e);
    return ::testing::AssertionSuccess();
  }
  // Pops everything, checking each top; then the queue must be empty.
  ::testing::AssertionResult Drain() {
    while (!ref_.empty()) {
      if (::testing::AssertionResult r = Pop(); !r) return r;
    }
    if (!q_.Empty()) return ::testing::AssertionFailure() << "the queue holds more";
    return ::testing::AssertionSuccess();
  }

  size_t size() const { return ref_.size(); }
  bool empty() const { return ref_.empty(); }
  int64_t first_time() const { return ref_.begin()->time_ns; }
  int64_t last_time() const { return ref_.rbegin()->time_ns; }

 private:
  static bool Before(const QueuedEvent& a, const QueuedEvent& b) { return EventBefore(a, b); }
  QueuedEvent Next(int64_t t) { return {t, seq_++, 0, 1}; }
  ::testing::AssertionResult TopMatches() const {
    if (q_.Size() != ref_.size()) {
      return ::testing::AssertionFailure() << "size " << q_.Size() << ", expected " << ref_.size();
    }
    const QueuedEvent& top = q_.Top();
    const QueuedEvent& first = *ref_.begin();
    if (top.seq != first.seq) {
      return ::testing::AssertionFailure() << "top: seq " << top.seq << " at " << top.time_ns
                                           << ", expected seq " << first.seq << " at "
                                           << first.time_ns;
    }
    return ::testing::AssertionSuccess();
  }

  LadderEventQueue q_;
  std::set<QueuedEvent, bool (*)(const QueuedEvent&, const QueuedEvent&)> ref_{&Before};
  uint64_t seq_ = 0;
};

// Random fills (half of them with far crowds), then pops and ReplaceTops near the top (among the
// lane's entries), further, and around the latest entry, against a std::set: the queue pops in
// EventBefore order throughout, its lane topped up and pushed into in every way.
TEST(LadderEventQueueTest, RandomPushesAndPopsMatchASortedSet) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 100; ++round) {
    CheckedQueue q;
    int n = 20 + static_cast<int>(rng() % 300);
    int64_t span = 1 + static_cast<int64_t>(rng() % 1'000'000);
    for (int i = 0; i < n; ++i) q.Push(static_cast<int64_t>(rng() % span));
    if (round % 2 == 1) {
      // Crowds far apart, some more than a bucket can sort at once (kSortMax): coarse rungs,
      // crowded buckets split into finer rungs that reach past their entries.
      for (int c = static_cast<int>(rng() % 3); c >= 0; --c) {
        const int64_t center = static_cast<int64_t>(rng() % (uint64_t{1} << 40));
        const int64_t width = 1 + static_cast<int64_t>(rng() % 2000);
        const int count = static_cast<int>(rng() % 6000);
        for (int i = 0; i < count; ++i) q.Push(center + static_cast<int64_t>(rng() % width));
        n += count;
      }
      span = static_cast<int64_t>(uint64_t{1} << 20);
    }
    for (int step = 0; step < 2 * n && !q.empty(); ++step) {
      const uint64_t r = rng() % 8;
      if (r < 3) {
        ASSERT_TRUE(q.Pop()) << "round " << round << ", step " << step;
        continue;
      }
      // Near the popped time (among the lane's entries), or further, or around the latest entry.
      const int64_t now = q.first_time();
      const int64_t near_latest = q.last_time() - 8 + static_cast<int64_t>(rng() % 16);
      const int64_t t = r < 5 ? now + static_cast<int64_t>(rng() % 64)
                        : r < 7 ? now + static_cast<int64_t>(rng() % (span + 1))
                                : std::max(now, near_latest);
      ASSERT_TRUE(q.ReplaceTop(t)) << "round " << round << ", step " << step;
    }
    ASSERT_TRUE(q.Drain()) << "round " << round;
  }
}

// A queue filled in falling time order spills its bottom into a rung with nothing in the top.
// Popping then tops the lane up until that rung holds nothing more, while the lane still holds
// entries; entries pushed then, between the lane's and past them, must still pop in order.
TEST(LadderEventQueueTest, PushesAfterTheLastRungIsUsedUpKeepTheOrder) {
  for (int kept = 1; kept < 12; ++kept) {
    CheckedQueue q;
    for (int64_t t = 1000; t > 0; t -= 5) q.Push(t);
    while (q.size() > static_cast<size_t>(kept)) ASSERT_TRUE(q.Pop()) << "kept " << kept;
    // Between the remaining entries, and past them.
    const int64_t last = q.last_time();
    for (int64_t t = last - 12; t <= last + 12; t += 3) q.Push(t);
    ASSERT_TRUE(q.Drain()) << "kept " << kept;
  }
}

// The last rung can be used up while the lane still holds entries: here a crowded last bucket
// of rung 0 is split into a finer rung that reaches far past its entries, and an entry pushed
// into rung 0 after the top became it lies past the top's old maximum. When the lane is topped
// up and finds the rungs empty, entries pushed between the lane's must still go before its
// last, not be appended after it.
TEST(LadderEventQueueTest, AToppedUpLaneWithNoRungLeftStillOrdersNewPushes) {
  CheckedQueue q;
  constexpr int64_t kFar = int64_t{1} << 40;
  q.Push(1000);                                      // the lane
  for (int64_t t = 999; t >= 900; --t) q.Push(t);    // the bottom's heap, spilled into a rung
  q.Push(int64_t{1} << 20);                          // the top, and far from ...
  for (int64_t t = kFar - 10000; t < kFar; ++t) q.Push(t);  // ... a crowd in one bucket
  while (q.first_time() < kFar - 10000) ASSERT_TRUE(q.Pop());  // the top is rung 0 now
  q.Push(kFar + 5);                                  // into rung 0, past the top's maximum
  while (q.size() > 3) ASSERT_TRUE(q.Pop());
  q.Push(kFar + 2);                                  // between the lane's last two
  q.Push(kFar + 7);
  ASSERT_TRUE(q.Drain());
}

}  // namespace
}  // namespace kiln::internal
