// The ladder queue's look-ahead (internal/ladder_event_queue.h), which the event loop uses to
// prefetch upcoming callbacks. Its ordering is tested with every queue in event_queue_test.cc.
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

// Random fills (half of them with far crowds), then pops and ReplaceTops near the top (among the
// lane's entries), further, and around the latest entry, against a std::set: the queue pops in
// EventBefore order throughout, its lane topped up and pushed into in every way.
TEST(LadderEventQueueTest, RandomPushesAndPopsMatchASortedSet) {
  std::mt19937_64 rng(5);
  auto before = [](const QueuedEvent& a, const QueuedEvent& b) { return EventBefore(a, b); };
  for (int round = 0; round < 100; ++round) {
    LadderEventQueue q;
    std::set<QueuedEvent, decltype(before)> ref(before);
    uint64_t seq = 0;
    int64_t now = 0;
    auto push = [&](int64_t t) {
      const QueuedEvent e{t, seq++, 0, 1};
      q.Push(e);
      ref.insert(e);
    };
    int n = 20 + static_cast<int>(rng() % 300);
    int64_t span = 1 + static_cast<int64_t>(rng() % 1'000'000);
    for (int i = 0; i < n; ++i) push(static_cast<int64_t>(rng() % span));
    if (round % 2 == 1) {
      // Crowds far apart, some more than a bucket can sort at once (kSortMax): coarse rungs,
      // crowded buckets split into finer rungs that reach past their entries.
      for (int c = static_cast<int>(rng() % 3); c >= 0; --c) {
        const int64_t center = static_cast<int64_t>(rng() % (uint64_t{1} << 40));
        const int64_t width = 1 + static_cast<int64_t>(rng() % 2000);
        const int count = static_cast<int>(rng() % 6000);
        for (int i = 0; i < count; ++i) push(center + static_cast<int64_t>(rng() % width));
        n += count;
      }
      span = static_cast<int64_t>(uint64_t{1} << 20);
    }
    for (int step = 0; step < 2 * n && !ref.empty(); ++step) {
      ASSERT_EQ(q.Size(), ref.size());
      const QueuedEvent top = q.Top();
      ASSERT_EQ(top.seq, ref.begin()->seq) << "round " << round << ", step " << step;
      now = top.time_ns;
      ref.erase(ref.begin());
      const uint64_t r = rng() % 8;
      if (r < 3) {
        q.Pop();
      } else {
        // Near now (among the lane's entries), or further, or around the latest entry.
        const int64_t latest = ref.empty() ? now : ref.rbegin()->time_ns;
        const int64_t t = r < 5 ? now + static_cast<int64_t>(rng() % 64)
                          : r < 7 ? now + static_cast<int64_t>(rng() % (span + 1))
                                  : std::max(now, latest - 8 + static_cast<int64_t>(rng() % 16));
        const QueuedEvent e{t, seq++, 0, 1};
        q.ReplaceTop(e);
        ref.insert(e);
      }
    }
    while (!ref.empty()) {
      ASSERT_EQ(q.Top().seq, ref.begin()->seq) << "round " << round << ", drain";
      q.Pop();
      ref.erase(ref.begin());
    }
    EXPECT_TRUE(q.Empty());
  }
}

// A queue filled in falling time order spills its bottom into a rung with nothing in the top.
// Popping then tops the lane up until that rung holds nothing more, while the lane still holds
// entries; entries pushed then, between the lane's and past them, must still pop in order.
TEST(LadderEventQueueTest, PushesAfterTheLastRungIsUsedUpKeepTheOrder) {
  for (int kept = 1; kept < 12; ++kept) {
    LadderEventQueue q;
    auto before = [](const QueuedEvent& a, const QueuedEvent& b) { return EventBefore(a, b); };
    std::set<QueuedEvent, decltype(before)> ref(before);
    uint64_t seq = 0;
    auto push = [&](int64_t t) {
      const QueuedEvent e{t, seq++, 0, 1};
      q.Push(e);
      ref.insert(e);
    };
    for (int64_t t = 1000; t > 0; t -= 5) push(t);
    while (ref.size() > static_cast<size_t>(kept)) {
      ASSERT_EQ(q.Top().seq, ref.begin()->seq);
      q.Pop();
      ref.erase(ref.begin());
    }
    // Between the remaining entries, and past them.
    const int64_t last = ref.rbegin()->time_ns;
    for (int64_t t = last - 12; t <= last + 12; t += 3) push(t);
    while (!ref.empty()) {
      ASSERT_EQ(q.Top().seq, ref.begin()->seq) << "kept " << kept;
      q.Pop();
      ref.erase(ref.begin());
    }
  }
}

// The last rung can be used up while the lane still holds entries: here a crowded last bucket
// of rung 0 is split into a finer rung that reaches far past its entries, and an entry pushed
// into rung 0 after the top became it lies past the top's old maximum. When the lane is topped
// up and finds the rungs empty, entries pushed between the lane's must still go before its
// last, not be appended after it.
TEST(LadderEventQueueTest, AToppedUpLaneWithNoRungLeftStillOrdersNewPushes) {
  LadderEventQueue q;
  auto before = [](const QueuedEvent& a, const QueuedEvent& b) { return EventBefore(a, b); };
  std::set<QueuedEvent, decltype(before)> ref(before);
  uint64_t seq = 0;
  auto push = [&](int64_t t) {
    const QueuedEvent e{t, seq++, 0, 1};
    q.Push(e);
    ref.insert(e);
  };
  auto pop = [&] {
    ASSERT_EQ(q.Top().seq, ref.begin()->seq) << "time " << ref.begin()->time_ns;
    q.Pop();
    ref.erase(ref.begin());
  };
  constexpr int64_t kFar = int64_t{1} << 40;
  push(1000);                                      // the lane
  for (int64_t t = 999; t >= 900; --t) push(t);    // the bottom's heap, spilled into a rung
  push(int64_t{1} << 20);                          // the top, and far from ...
  for (int64_t t = kFar - 10000; t < kFar; ++t) push(t);  // ... a crowd in one bucket
  while (ref.begin()->time_ns < kFar - 10000) pop();      // the top is rung 0 now
  push(kFar + 5);                                  // into rung 0, past the top's maximum
  while (ref.size() > 3) pop();
  push(kFar + 2);                                  // between the lane's last two
  push(kFar + 7);
  while (!ref.empty()) pop();
  EXPECT_TRUE(q.Empty());
}

}  // namespace
}  // namespace kiln::internal
