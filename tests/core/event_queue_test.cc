// Conformance suite for EventQueue implementations (kiln/event_queue.h): every queue must hand
// entries back in (time_ns, seq) order, unchanged, with ReplaceTop equal to Pop then Push.
// Instantiated for each shipped queue (the heap, the ladder), and for the test-only reference queue, which
// validates the suite itself and EventQueue's default ReplaceTop.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/reference_event_queue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_queue.h"

namespace kiln {
namespace {

struct QueueImplementation {
  std::string name;
  std::function<std::unique_ptr<EventQueue>()> make;
};

class EventQueueConformanceTest : public ::testing::TestWithParam<QueueImplementation> {
 protected:
  void SetUp() override { queue_ = GetParam().make(); }

  QueuedEvent Make(int64_t time_ns, uint32_t slot = 0, uint32_t generation = 1) {
    return QueuedEvent{time_ns, next_seq_++, slot, generation};
  }

  // Pops everything, returning the seqs in pop order.
  std::vector<uint64_t> DrainSeqs() {
    std::vector<uint64_t> seqs;
    while (!queue_->Empty()) {
      seqs.push_back(queue_->Top().seq);
      queue_->Pop();
    }
    return seqs;
  }

  std::unique_ptr<EventQueue> queue_;
  uint64_t next_seq_ = 0;
};

// The reference order of a set of entries.
struct After {
  bool operator()(const QueuedEvent& a, const QueuedEvent& b) const { return EventBefore(b, a); }
};
using ReferenceQueue = std::priority_queue<QueuedEvent, std::vector<QueuedEvent>, After>;

TEST_P(EventQueueConformanceTest, NewQueueIsEmpty) {
  EXPECT_TRUE(queue_->Empty());
  EXPECT_EQ(queue_->Size(), 0u);
}

TEST_P(EventQueueConformanceTest, PushedEntriesPopInTimeOrder) {
  for (int64_t t : {50, 10, 40, 20, 30}) queue_->Push(Make(t));
  std::vector<int64_t> times;
  while (!queue_->Empty()) {
    times.push_back(queue_->Top().time_ns);
    queue_->Pop();
  }
  EXPECT_THAT(times, ::testing::ElementsAre(10, 20, 30, 40, 50));
}

TEST_P(EventQueueConformanceTest, EqualTimesPopFirstInFirstOut) {
  for (int i = 0; i < 20; ++i) queue_->Push(Make(7));
  std::vector<uint64_t> expected(20);
  for (uint64_t i = 0; i < 20; ++i) expected[i] = i;
  EXPECT_EQ(DrainSeqs(), expected);
}

TEST_P(EventQueueConformanceTest, EqualTimesOrderBySeqNotByPushOrder) {
  queue_->Push({5, 9, 0, 1});
  queue_->Push({5, 3, 0, 1});
  queue_->Push({5, 6, 0, 1});
  EXPECT_THAT(DrainSeqs(), ::testing::ElementsAre(3, 6, 9));
}

TEST_P(EventQueueConformanceTest, ExtremeAndNegativeTimesOrderAsSignedIntegers) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  for (int64_t t : {kMax, int64_t{0}, int64_t{-1}, kMin, int64_t{1}}) queue_->Push(Make(t));
  std::vector<int64_t> times;
  while (!queue_->Empty()) {
    times.push_back(queue_->Top().time_ns);
    queue_->Pop();
  }
  EXPECT_THAT(times, ::testing::ElementsAre(kMin, -1, 0, 1, kMax));
}

TEST_P(EventQueueConformanceTest, TopReturnsSlotAndGenerationUnchanged) {
  queue_->Push({100, 0, 123456, 0xdeadbeef});
  queue_->Push({200, 1, 7, 1});
  const QueuedEvent& top = queue_->Top();
  EXPECT_EQ(top.time_ns, 100);
  EXPECT_EQ(top.seq, 0u);
  EXPECT_EQ(top.slot, 123456u);
  EXPECT_EQ(top.generation, 0xdeadbeefu);
}

TEST_P(EventQueueConformanceTest, SizeCountsPushesMinusPops) {
  for (int i = 0; i < 10; ++i) queue_->Push(Make(i));
  EXPECT_EQ(queue_->Size(), 10u);
  queue_->Pop();
  queue_->Pop();
  EXPECT_EQ(queue_->Size(), 8u);
  EXPECT_FALSE(queue_->Empty());
}

TEST_P(EventQueueConformanceTest, ReplaceTopEqualsPopThenPush) {
  queue_->Push(Make(10));
  queue_->Push(Make(20));
  queue_->Push(Make(30));
  queue_->ReplaceTop(Make(25));  // removes 10
  queue_->ReplaceTop(Make(5));   // removes 20; 5 is the new top
  EXPECT_EQ(queue_->Size(), 3u);
  std::vector<int64_t> times;
  while (!queue_->Empty()) {
    times.push_back(queue_->Top().time_ns);
    queue_->Pop();
  }
  EXPECT_THAT(times, ::testing::ElementsAre(5, 25, 30));
}

TEST_P(EventQueueConformanceTest, LargeRandomQueueDrainsSorted) {
  std::mt19937_64 rng(1);
  std::vector<QueuedEvent> pushed;
  for (int i = 0; i < 100'000; ++i) {
    pushed.push_back(Make(static_cast<int64_t>(rng() % 1000), static_cast<uint32_t>(i)));
    queue_->Push(pushed.back());
  }
  std::sort(pushed.begin(), pushed.end(), EventBefore);
  for (const QueuedEvent& want : pushed) {
    ASSERT_FALSE(queue_->Empty());
    const QueuedEvent& got = queue_->Top();
    ASSERT_EQ(got.seq, want.seq);
    ASSERT_EQ(got.slot, want.slot);
    queue_->Pop();
  }
  EXPECT_TRUE(queue_->Empty());
}

// Random interleavings of Push, Pop and ReplaceTop, with many equal times, against
// std::priority_queue.
TEST_P(EventQueueConformanceTest, RandomOperationsMatchStdPriorityQueue) {
  std::mt19937_64 rng(2);
  ReferenceQueue reference;
  int64_t now = 0;
  for (int step = 0; step < 200'000; ++step) {
    const uint64_t op = rng() % 10;
    if (op < 5 || reference.empty()) {
      // Times at or after the last popped one, as an event loop schedules; few distinct values
      // so that ties are common.
      const QueuedEvent e = Make(now + static_cast<int64_t>(rng() % 8), static_cast<uint32_t>(step));
      queue_->Push(e);
      reference.push(e);
    } else if (op < 8) {
      ASSERT_EQ(queue_->Top().seq, reference.top().seq) << "step " << step;
      now = reference.top().time_ns;
      queue_->Pop();
      reference.pop();
    } else {
      ASSERT_EQ(queue_->Top().seq, reference.top().seq) << "step " << step;
      now = reference.top().time_ns;
      const QueuedEvent e = Make(now + static_cast<int64_t>(rng() % 8), static_cast<uint32_t>(step));
      queue_->ReplaceTop(e);
      reference.pop();
      reference.push(e);
    }
    ASSERT_EQ(queue_->Size(), reference.size());
  }
  while (!reference.empty()) {
    ASSERT_EQ(queue_->Top().seq, reference.top().seq);
    queue_->Pop();
    reference.pop();
  }
  EXPECT_TRUE(queue_->Empty());
}

// The way an event loop uses a queue: cancellation marks entries dead without touching the
// queue, and dead entries are skipped when they reach the top. The live entries must still come
// out in exact (time, seq) order: compared with a sorted std::set that erases cancelled ones.
TEST_P(EventQueueConformanceTest, LazyCancellationYieldsLiveEntriesInSortedOrder) {
  std::mt19937_64 rng(3);
  std::set<QueuedEvent, decltype(&EventBefore)> live(&EventBefore);
  std::set<uint64_t> cancelled;  // seqs
  std::vector<QueuedEvent> cancellable;
  int64_t now = 0;
  int popped_live = 0;
  for (int step = 0; step < 100'000; ++step) {
    const uint64_t op = rng() % 10;
    if (op < 4 || live.empty()) {
      const QueuedEvent e = Make(now + static_cast<int64_t>(rng() % 1000));
      queue_->Push(e);
      live.insert(e);
      cancellable.push_back(e);
    } else if (op < 6 && !cancellable.empty()) {
      // Cancel a random entry that may or may not still be pending.
      const size_t k = rng() % cancellable.size();
      const QueuedEvent e = cancellable[k];
      cancellable[k] = cancellable.back();
      cancellable.pop_back();
      if (live.erase(e) == 1) cancelled.insert(e.seq);
    } else {
      // Pop dead entries, then the next live one, which must be the reference's first.
      while (!queue_->Empty() && cancelled.count(queue_->Top().seq) == 1) {
        cancelled.erase(queue_->Top().seq);
        queue_->Pop();
      }
      ASSERT_FALSE(queue_->Empty());
      ASSERT_EQ(queue_->Top().seq, live.begin()->seq) << "step " << step;
      now = queue_->Top().time_ns;
      live.erase(live.begin());
      queue_->Pop();
      ++popped_live;
    }
    ASSERT_EQ(queue_->Size(), live.size() + cancelled.size());
  }
  EXPECT_GT(popped_live, 10'000);
}

// The hold model, the classic event-queue workload: a fixed population of pending entries, each
// pop followed by a push at the popped time plus a random increment (here spread over nine
// orders of magnitude, with some zero increments and some entries at the end of time), against
// std::priority_queue. Long enough for a ladder queue to go through many epochs and rungs.
TEST_P(EventQueueConformanceTest, HoldModelMatchesStdPriorityQueue) {
  std::mt19937_64 rng(4);
  ReferenceQueue reference;
  auto increment = [&rng]() -> int64_t {
    const uint64_t kind = rng() % 100;
    if (kind < 5) return 0;                                          // "now"
    if (kind == 5) return std::numeric_limits<int64_t>::max() / 4;  // far future
    return static_cast<int64_t>(rng() % (uint64_t{1} << (rng() % 31)));
  };
  for (int i = 0; i < 5'000; ++i) {
    const QueuedEvent e = Make(increment(), static_cast<uint32_t>(i));
    queue_->Push(e);
    reference.push(e);
  }
  for (int step = 0; step < 300'000; ++step) {
    ASSERT_EQ(queue_->Top().seq, reference.top().seq) << "step " << step;
    const int64_t now = reference.top().time_ns;
    int64_t t = now + increment();
    if (t < now) t = std::numeric_limits<int64_t>::max();  // saturate
    const QueuedEvent e = Make(t, static_cast<uint32_t>(step));
    if (step % 2 == 0) {
      queue_->ReplaceTop(e);
    } else {
      queue_->Pop();
      queue_->Push(e);
    }
    reference.pop();
    reference.push(e);
  }
  ASSERT_EQ(queue_->Size(), reference.size());
  while (!reference.empty()) {
    ASSERT_EQ(queue_->Top().seq, reference.top().seq);
    queue_->Pop();
    reference.pop();
  }
  EXPECT_TRUE(queue_->Empty());
}

// Pushes that a loop never makes but the interface allows: times before entries already popped,
// descending runs, the whole int64 range, bursts of one time; interleaved with pops, and the
// queue drained to empty and reused.
TEST_P(EventQueueConformanceTest, ArbitraryPushOrderMatchesStdPriorityQueue) {
  std::mt19937_64 rng(5);
  ReferenceQueue reference;
  auto random_time = [&rng]() -> int64_t {
    switch (rng() % 4) {
      case 0: return static_cast<int64_t>(rng());             // anywhere
      case 1: return static_cast<int64_t>(rng() % 1000) - 500;  // near zero
      case 2: return 1'000'000'000 - static_cast<int64_t>(rng() % 3);
      default: return static_cast<int64_t>(rng() % 1'000'000) * 1'000;
    }
  };
  for (int round = 0; round < 20; ++round) {
    const int pushes = static_cast<int>(rng() % 20'000);
    int64_t descending = random_time();
    for (int i = 0; i < pushes; ++i) {
      int64_t t = random_time();
      if (round % 3 == 0) t = descending--;  // a descending run
      const QueuedEvent e = Make(t, static_cast<uint32_t>(i));
      queue_->Push(e);
      reference.push(e);
      if (rng() % 3 == 0) {
        ASSERT_EQ(queue_->Top().seq, reference.top().seq) << "round " << round;
        queue_->Pop();
        reference.pop();
      }
    }
    // Drain some rounds to empty, others only halfway.
    const size_t keep = round % 2 == 0 ? 0 : reference.size() / 2;
    while (reference.size() > keep) {
      ASSERT_EQ(queue_->Top().seq, reference.top().seq) << "round " << round;
      queue_->Pop();
      reference.pop();
    }
    ASSERT_EQ(queue_->Size(), reference.size());
  }
}

// Times at many scales at once: uniform below 2^b ns, b one of 62, 57, ..., 7. Most entries
// crowd the start of any range, the worst case for bucketed queues (a ladder queue nests its
// rungs as deep as it may here).
TEST_P(EventQueueConformanceTest, MultiScaleTimesMatchStdPriorityQueue) {
  std::mt19937_64 rng(6);
  ReferenceQueue reference;
  auto multi_scale = [&rng]() -> int64_t {
    const int bits = 62 - 5 * static_cast<int>(rng() % 12);
    return static_cast<int64_t>(rng() & ((uint64_t{1} << bits) - 1));
  };
  for (int round = 0; round < 30; ++round) {
    const int n = 1'000 + static_cast<int>(rng() % 3'000);
    for (int i = 0; i < n; ++i) {
      const QueuedEvent e = Make(multi_scale(), static_cast<uint32_t>(i));
      queue_->Push(e);
      reference.push(e);
    }
    while (reference.size() > static_cast<size_t>(n / 4)) {
      ASSERT_EQ(queue_->Top().seq, reference.top().seq) << "round " << round;
      const int64_t now = reference.top().time_ns;
      queue_->Pop();
      reference.pop();
      if (rng() % 4 == 0) {  // a later push, as a loop makes
        const int64_t t = now + (multi_scale() >> 20);
        const QueuedEvent e = Make(t < now ? now : t, 0);
        queue_->Push(e);
        reference.push(e);
      }
    }
  }
  while (!reference.empty()) {
    ASSERT_EQ(queue_->Top().seq, reference.top().seq);
    queue_->Pop();
    reference.pop();
  }
  EXPECT_TRUE(queue_->Empty());
}

// Many entries of one time, pushed in seq order (timers armed at a fixed delay, posts), mixed
// with entries at the next few nanoseconds: first-in first-out within each time.
TEST_P(EventQueueConformanceTest, LargeEqualTimeBurstsPopFirstInFirstOut) {
  std::vector<QueuedEvent> pushed;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 30'000; ++i) {
      pushed.push_back(Make(1'000 * round + i % 3));
      queue_->Push(pushed.back());
    }
  }
  std::stable_sort(pushed.begin(), pushed.end(), EventBefore);
  for (const QueuedEvent& want : pushed) {
    ASSERT_EQ(queue_->Top().seq, want.seq);
    queue_->Pop();
  }
  EXPECT_TRUE(queue_->Empty());
}

// Crowded buckets of every shape a bucketed queue sorts in one go: hundreds to thousands of
// entries within a span, some spread evenly, some piled on a few times (with seqs pushed in
// shuffled order, so that entries of one time do not arrive in seq order), one entry far off
// so that the pile does not fill the whole span. Drained in rounds, each refilled from later
// times, as a loop does.
TEST_P(EventQueueConformanceTest, CrowdedSkewedBucketsMatchStdPriorityQueue) {
  std::mt19937_64 rng(7);
  ReferenceQueue reference;
  uint64_t seq = 0;
  int64_t base = 1'000'000'000;
  for (int round = 0; round < 12; ++round) {
    const int n = 200 + static_cast<int>(rng() % 6'000);
    std::vector<QueuedEvent> batch;
    for (int i = 0; i < n; ++i) {
      int64_t t;
      switch (rng() % 4) {
        case 0: t = base + static_cast<int64_t>(rng() % 100'000'000); break;  // even
        case 1: t = base + static_cast<int64_t>(rng() % 3); break;            // a pile
        case 2: t = base + 50'000'000 + static_cast<int64_t>(rng() % 40); break;
        default: t = base + static_cast<int64_t>(rng() % 1'000); break;
      }
      batch.push_back({t, seq++, static_cast<uint32_t>(i), 1});
    }
    batch.push_back({base + 4'000'000'000, seq++, 0, 1});  // far off
    std::shuffle(batch.begin(), batch.end(), rng);
    for (const QueuedEvent& e : batch) {
      queue_->Push(e);
      reference.push(e);
    }
    // Pop most of it, pushing now and then at the popped time or a little later.
    while (reference.size() > 100) {
      ASSERT_EQ(queue_->Top().seq, reference.top().seq) << "round " << round;
      const int64_t now = reference.top().time_ns;
      queue_->Pop();
      reference.pop();
      if (rng() % 8 == 0) {
        const QueuedEvent e{now + static_cast<int64_t>(rng() % 4), seq++, 0, 1};
        queue_->Push(e);
        reference.push(e);
      }
    }
    base += 5'000'000'000;
  }
  while (!reference.empty()) {
    ASSERT_EQ(queue_->Top().seq, reference.top().seq);
    queue_->Pop();
    reference.pop();
  }
  EXPECT_TRUE(queue_->Empty());
}

INSTANTIATE_TEST_SUITE_P(
    Implementations, EventQueueConformanceTest,
    ::testing::Values(QueueImplementation{"Heap", [] { return NewHeapEventQueue(); }},
                      QueueImplementation{"Ladder", [] { return NewLadderEventQueue(); }},
                      QueueImplementation{"Reference",
                                          [] {
                                            return std::unique_ptr<EventQueue>(
                                                std::make_unique<test::ReferenceEventQueue>());
                                          }}),
    [](const ::testing::TestParamInfo<QueueImplementation>& p) { return p.param.name; });

}  // namespace
}  // namespace kiln
