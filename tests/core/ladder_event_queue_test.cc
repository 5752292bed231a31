// The ladder queue's look-ahead (internal/ladder_event_queue.h), which the event loop uses to
// prefetch upcoming callbacks. Its ordering is tested with every queue in event_queue_test.cc.
#include "core/internal/ladder_event_queue.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
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
    // Now and then an entry at the popped time: below the lane, into the bottom's heap.
    q.ReplaceTop(step % 97 == 0 ? QueuedEvent{top.time_ns, 1'000'000 + uint64_t(step), 0, 1}
                                : hold.Next(top.time_ns));
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

}  // namespace
}  // namespace kiln::internal
