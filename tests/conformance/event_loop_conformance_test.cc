// The EventLoop conformance suite: the contract of kiln/event_loop.h, run against every loop
// (virtual time with each shipped queue; real time, sleeping and busy-waiting before timers).
//
// Times are counted in ticks: a second on a virtual loop, a millisecond on a real-time one, so
// that the real-time instances finish in a fraction of a second. Where the contract gives a
// virtual loop an exact clock reading, ExpectTime checks it exactly there and only "not before"
// on a real-time loop. No test depends on how late a real-time loop runs a timer: an event
// that must not run before another is either due at a later absolute time than the other or,
// where "later" would be a margin, an hour away and cancelled by the last expected callback.
// Tests of one implementation stay in tests/core/event_loop_test.cc.
//
// A new loop joins by adding a line to the instantiation at the bottom. "Reference" is a loop
// written in the test tree from the header's contract alone (reference_event_loop.h).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "conformance/reference_event_loop.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"
#include "kiln/event_queue.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// One loop under test.
struct LoopKind {
  std::string name;
  std::function<std::unique_ptr<EventLoop>()> make;
  bool is_virtual;
  // One tick of the tests' timelines.
  absl::Duration tick;
};

void PrintTo(const LoopKind& k, std::ostream* os) { *os << k.name; }

// Another thread holds `loop` (EventLoop::TryHold) from construction until
// Release(): it runs nothing meanwhile, then `before_letting_go`, still
// holding the loop.
class HeldElsewhere {
 public:
  explicit HeldElsewhere(EventLoop& loop, std::function<void()> before_letting_go = {})
      : holder_([this, &loop, then = std::move(before_letting_go)] {
          loop.TryHold([&] {
            holding_ = true;
            while (!release_) std::this_thread::yield();
            if (then) then();
          });
        }) {
    while (!holding_) std::this_thread::yield();
  }
  ~HeldElsewhere() { Release(); }
  HeldElsewhere(const HeldElsewhere&) = delete;
  HeldElsewhere& operator=(const HeldElsewhere&) = delete;

  // Lets go of the loop and waits for the holder to end.
  void Release() {
    release_ = true;
    if (holder_.joinable()) holder_.join();
  }

 private:
  std::atomic<bool> holding_{false};
  std::atomic<bool> release_{false};
  std::thread holder_;  // last: it starts once the flags exist
};

class EventLoopConformanceTest : public ::testing::TestWithParam<LoopKind> {
 protected:
  std::unique_ptr<EventLoop> Make() const { return GetParam().make(); }
  absl::Duration Ticks(double n) const { return GetParam().tick * n; }
  absl::Time At(double n) const { return start_ + Ticks(n); }
  bool is_virtual() const { return loop_->is_virtual(); }

  // A callback that appends `label` to the trace.
  EventLoop::Callback Record(std::string label) {
    return [this, label = std::move(label)] { trace_.push_back(label); };
  }

  // A clock reading the contract pins to `expected` on a virtual loop; a real-time loop's
  // reading is only never earlier.
  void ExpectTime(absl::Time seen, absl::Time expected) const {
    if (is_virtual()) {
      EXPECT_EQ(seen, expected);
    } else {
      EXPECT_GE(seen, expected);
    }
  }

  // Whether a real-time loop's clock passed `earliest` while the test scheduled events due from
  // then on: the loop then moved those it got late to its time, in the order they were
  // scheduled, and a test whose expected order differs from that order cannot check it. (Only
  // a loaded machine takes a tick to schedule a few events; the test then skips, saying so.)
  // Such a test first restarts its timeline at the loop's time.
  void Restart() { start_ = loop_->Now(); }
  bool ScheduledLate(absl::Time earliest) const {
    return !is_virtual() && loop_->Now() >= earliest;
  }
  static constexpr char kLate[] =
      "this machine took longer than a tick to schedule the test's events";

  // An event an hour away: one that must run after others, without a margin on a real-time
  // loop. The last callback a test expects cancels it (CancelFar) so that the run ends.
  void ScheduleFar(std::string label) { far_ = loop_->ScheduleAfter(absl::Hours(1), Record(label)); }
  EventLoop::Callback CancelFar(std::string label) {
    return [this, label = std::move(label)] {
      trace_.push_back(label);
      EXPECT_TRUE(loop_->Cancel(far_));
    };
  }

  std::unique_ptr<EventLoop> loop_ = Make();
  absl::Time start_ = loop_->Now();
  std::vector<std::string> trace_;
  TimerHandle far_;
};

TEST_P(EventLoopConformanceTest, ClockReadsTheLoopsTime) {
  EXPECT_EQ(loop_->is_virtual(), GetParam().is_virtual);
  const absl::Time before = loop_->Now();
  const absl::Time clock_now = loop_->clock().Now();
  ExpectTime(clock_now, before);
  EXPECT_LE(clock_now, loop_->Now());
}

TEST_P(EventLoopConformanceTest, EventsRunInTimeOrderNeverBeforeTheirTime) {
  Restart();
  std::vector<int> order;
  std::vector<absl::Time> seen;
  for (int n : {3, 1, 2}) {
    loop_->ScheduleAt(At(n), [this, n, &order, &seen] {
      order.push_back(n);
      seen.push_back(loop_->Now());
      ExpectTime(loop_->clock().Now(), At(n));
    });
  }
  if (ScheduledLate(At(1))) GTEST_SKIP() << kLate;
  loop_->RunUntilIdle();
  EXPECT_THAT(order, ElementsAre(1, 2, 3));
  ASSERT_EQ(seen.size(), 3u);
  for (int n = 1; n <= 3; ++n) ExpectTime(seen[n - 1], At(n));
  ExpectTime(loop_->Now(), At(3));
}

TEST_P(EventLoopConformanceTest, EqualTimesRunFirstInFirstOut) {
  for (int i = 0; i < 10; ++i) loop_->ScheduleAt(At(1), Record(std::to_string(i)));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"));
}

TEST_P(EventLoopConformanceTest, ScheduleAfterIsRelativeToTheCurrentEvent) {
  absl::Time outer = absl::InfinitePast();
  absl::Time inner = absl::InfinitePast();
  loop_->ScheduleAfter(Ticks(10), [&] {
    outer = loop_->Now();
    loop_->ScheduleAfter(Ticks(5), [&] { inner = loop_->Now(); });
  });
  loop_->RunUntilIdle();
  ExpectTime(outer, At(10));
  ExpectTime(inner, outer + Ticks(5));
}

TEST_P(EventLoopConformanceTest, ScheduleAfterANegativeDelayRunsNowAfterEventsAlreadyDue) {
  absl::Time outer;
  loop_->ScheduleAt(At(1), [&] {
    outer = loop_->Now();
    loop_->ScheduleAfter(-Ticks(30), CancelFar("negative"));
  });
  loop_->ScheduleAt(At(1), Record("due"));
  ScheduleFar("far");
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("due", "negative"));
  ExpectTime(outer, At(1));
}

TEST_P(EventLoopConformanceTest, InfiniteDelayStaysPendingPastAFiniteDeadline) {
  loop_->ScheduleAfter(absl::InfiniteDuration(), Record("never"));
  loop_->ScheduleAt(absl::InfiniteFuture(), Record("never-either"));
  loop_->RunUntil(At(10));
  EXPECT_TRUE(trace_.empty());
  EXPECT_EQ(loop_->pending_events(), 2u);
}

TEST_P(EventLoopConformanceTest, ScheduleNeverRunsInline) {
  loop_->ScheduleAt(start_, Record("at"));
  loop_->ScheduleAt(absl::InfinitePast(), Record("past"));
  loop_->ScheduleAfter(absl::ZeroDuration(), Record("after"));
  EXPECT_TRUE(trace_.empty());
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("at", "past", "after"));
}

TEST_P(EventLoopConformanceTest, PastTimeRunsNowAfterEventsAlreadyDue) {
  Restart();
  loop_->ScheduleAt(At(5), [&] {
    trace_.push_back("first");
    loop_->ScheduleAt(start_, CancelFar("past"));  // 5 ticks in the past
  });
  loop_->ScheduleAt(At(5), Record("second"));
  ScheduleFar("later");
  loop_->ScheduleAt(absl::InfinitePast(), Record("infinite-past"));
  if (ScheduledLate(At(5))) GTEST_SKIP() << kLate;
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("infinite-past", "first", "second", "past"));
}

TEST_P(EventLoopConformanceTest, CancelPendingEventReturnsTrueAndItNeverRuns) {
  TimerHandle h = loop_->ScheduleAt(At(1), Record("cancelled"));
  loop_->ScheduleAt(At(2), Record("kept"));
  EXPECT_TRUE(h.valid());
  EXPECT_EQ(loop_->pending_events(), 2u);
  EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_EQ(loop_->pending_events(), 1u);
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("kept"));
  EXPECT_EQ(loop_->executed_events(), 1u);
}

TEST_P(EventLoopConformanceTest, CancelAfterRunReturnsFalse) {
  TimerHandle h = loop_->ScheduleAt(At(1), Record("ran"));
  loop_->RunUntilIdle();
  EXPECT_FALSE(loop_->Cancel(h));
  EXPECT_THAT(trace_, ElementsAre("ran"));
}

TEST_P(EventLoopConformanceTest, CancelTwiceReturnsFalseTheSecondTime) {
  TimerHandle h = loop_->ScheduleAt(At(1), Record("x"));
  EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_FALSE(loop_->Cancel(h));
  loop_->RunUntilIdle();
  EXPECT_TRUE(trace_.empty());
}

TEST_P(EventLoopConformanceTest, StaleHandleDoesNotCancelALaterEvent) {
  TimerHandle old_handle = loop_->ScheduleAt(At(1), Record("old"));
  loop_->RunUntilIdle();
  TimerHandle new_handle = loop_->ScheduleAt(At(2), Record("new"));
  ASSERT_NE(old_handle, new_handle);
  EXPECT_FALSE(loop_->Cancel(old_handle));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("old", "new"));
}

TEST_P(EventLoopConformanceTest, StaleHandleOfCancelledEventDoesNotCancelLaterEvents) {
  TimerHandle cancelled = loop_->ScheduleAt(At(1), Record("cancelled"));
  ASSERT_TRUE(loop_->Cancel(cancelled));
  loop_->RunUntilIdle();
  loop_->ScheduleAt(At(2), Record("new"));
  EXPECT_FALSE(loop_->Cancel(cancelled));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("new"));
}

TEST_P(EventLoopConformanceTest, InvalidHandleIsRejected) {
  TimerHandle none;
  EXPECT_FALSE(none.valid());
  EXPECT_FALSE(loop_->Cancel(none));
}

TEST_P(EventLoopConformanceTest, CancelDestroysTheCallbackAtOnce) {
  auto token = std::make_shared<int>(0);
  TimerHandle h = loop_->ScheduleAt(At(1), [token] {});
  EXPECT_EQ(token.use_count(), 2);
  loop_->Cancel(h);
  EXPECT_EQ(token.use_count(), 1);
}

TEST_P(EventLoopConformanceTest, CallbackIsDestroyedRightAfterItRuns) {
  auto token = std::make_shared<int>(0);
  long count_after = -1;
  loop_->ScheduleAt(At(1), [token] {});
  loop_->ScheduleAt(At(2), [&] { count_after = token.use_count(); });
  loop_->RunUntilIdle();
  EXPECT_EQ(count_after, 1);
}

TEST_P(EventLoopConformanceTest, DestroyingTheLoopDestroysPendingCallbacksAndPosts) {
  auto token = std::make_shared<int>(0);
  {
    std::unique_ptr<EventLoop> loop = Make();
    loop->ScheduleAfter(Ticks(1), [token] {});
    loop->ScheduleAfter(absl::Hours(1), [token] {});
    loop->Post([token] {});
    EXPECT_EQ(token.use_count(), 4);
  }
  EXPECT_EQ(token.use_count(), 1);
}

// A callable of exactly `kBytes` bytes that counts its runs and holds `token` while it lives.
template <size_t kBytes>
struct SizedCallable {
  static_assert(kBytes > sizeof(std::shared_ptr<int>) + sizeof(int*));
  std::shared_ptr<int> token;
  int* runs;
  char padding[kBytes - sizeof(std::shared_ptr<int>) - sizeof(int*)] = {};
  void operator()() const { ++*runs; }
};

TEST_P(EventLoopConformanceTest, CallablesOfEverySizeRunOnceAndAreDestroyedOnce) {
  // Small callables are kept in place, larger ones in a Callback on the heap. Either way each
  // runs once and is destroyed once: after running, when cancelled, or with the loop.
  auto token = std::make_shared<int>(0);
  int runs = 0;
  auto schedule_all = [&](EventLoop& loop, absl::Duration at) {
    std::vector<TimerHandle> handles;
    handles.push_back(loop.ScheduleAfter(at, SizedCallable<32>{token, &runs}));
    handles.push_back(loop.ScheduleAfter(at, SizedCallable<40>{token, &runs}));
    handles.push_back(loop.ScheduleAfter(at, SizedCallable<48>{token, &runs}));
    handles.push_back(loop.ScheduleAfter(at, SizedCallable<200>{token, &runs}));
    handles.push_back(
        loop.ScheduleAfter(at, EventLoop::Callback(SizedCallable<32>{token, &runs})));
    handles.push_back(loop.ScheduleAfter(at, [&runs] { ++runs; }));  // trivially destructible
    return handles;
  };
  schedule_all(*loop_, Ticks(1));
  EXPECT_EQ(token.use_count(), 6);
  loop_->RunUntilIdle();
  EXPECT_EQ(runs, 6);
  EXPECT_EQ(token.use_count(), 1);

  for (TimerHandle h : schedule_all(*loop_, Ticks(1))) EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_EQ(token.use_count(), 1);
  loop_->RunUntilIdle();
  EXPECT_EQ(runs, 6);

  {
    std::unique_ptr<EventLoop> loop = Make();
    schedule_all(*loop, absl::Hours(1));
    EXPECT_EQ(token.use_count(), 6);
  }
  EXPECT_EQ(token.use_count(), 1);
  EXPECT_EQ(runs, 6);
}

// Holds a callback's capture whose destructor uses the loop: it cancels `victims` (enough for
// a loop to want to tidy its queue) and schedules as many new events, then reads its own
// members, which must still be its own: the cancelled event's storage may not be reused
// while its callable is being destroyed.
struct ReentrantOnDestruction {
  EventLoop* loop = nullptr;
  std::vector<TimerHandle>* victims = nullptr;
  int* seen = nullptr;
  absl::Duration delay;
  int value = 0;
  ReentrantOnDestruction(EventLoop* l, std::vector<TimerHandle>* v, int* s, absl::Duration d)
      : loop(l), victims(v), seen(s), delay(d), value(42) {}
  ReentrantOnDestruction(ReentrantOnDestruction&& o) noexcept
      : loop(o.loop),
        victims(std::exchange(o.victims, nullptr)),
        seen(o.seen),
        delay(o.delay),
        value(o.value) {}
  ~ReentrantOnDestruction() {
    if (victims == nullptr) return;  // moved from
    for (TimerHandle h : *victims) loop->Cancel(h);
    for (size_t i = 0; i < victims->size(); ++i) {
      // Callables as large as a loop may keep in place, each filled with a pattern.
      loop->ScheduleAfter(delay, [a = int64_t{-1}, b = int64_t{-1}, c = int64_t{-1},
                                  d = int64_t{-1}, e = int64_t{-1}] { (void)(a + b + c + d + e); });
    }
    *seen = value;
  }
};

TEST_P(EventLoopConformanceTest, ACancelledCallbacksDestructorMayCancelAndScheduleMore) {
  std::vector<TimerHandle> victims;
  for (int i = 0; i < 3000; ++i) victims.push_back(loop_->ScheduleAt(At(2), [] {}));
  int seen = 0;
  TimerHandle h = loop_->ScheduleAt(
      At(1), [r = ReentrantOnDestruction(loop_.get(), &victims, &seen, Ticks(3))] {});
  const absl::Time cancelled_at = loop_->Now();
  EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_EQ(seen, 42);
  EXPECT_EQ(loop_->pending_events(), 3000u);  // the new ones
  loop_->RunUntilIdle();
  EXPECT_EQ(loop_->executed_events(), 3000u);
  ExpectTime(loop_->Now(), cancelled_at + Ticks(3));
}

// A callable that counts how often it is copied and moved.
struct CountingCallable {
  int* copies;
  int* moves;
  CountingCallable(int* c, int* m) : copies(c), moves(m) {}
  CountingCallable(const CountingCallable& o) : copies(o.copies), moves(o.moves) { ++*copies; }
  CountingCallable(CountingCallable&& o) noexcept : copies(o.copies), moves(o.moves) { ++*moves; }
  void operator()() const {}
};

TEST_P(EventLoopConformanceTest, ScheduledCallableIsMovedOnceAndNeverCopied) {
  int copies = 0;
  int moves = 0;
  loop_->ScheduleAfter(Ticks(1), CountingCallable(&copies, &moves));
  loop_->ScheduleAt(At(2), CountingCallable(&copies, &moves));
  EXPECT_EQ(copies, 0);
  EXPECT_EQ(moves, 2);  // once each, into the loop's storage
  loop_->RunUntilIdle();
  EXPECT_EQ(loop_->executed_events(), 2u);
}

// A callable whose copy throws, as a large one's allocation may.
struct ThrowsWhenCopied {
  ThrowsWhenCopied() = default;
  ThrowsWhenCopied(const ThrowsWhenCopied&) { throw std::runtime_error("no copy"); }
  ThrowsWhenCopied(ThrowsWhenCopied&&) noexcept = default;
  void operator()() const {}
};

TEST_P(EventLoopConformanceTest, CallbackWhoseConstructionThrowsIsNotScheduled) {
  loop_->ScheduleAt(At(1), Record("before"));
  const ThrowsWhenCopied throws;
  EXPECT_THROW(loop_->ScheduleAfter(Ticks(1), throws), std::runtime_error);
  EXPECT_THROW(loop_->ScheduleAt(start_, throws), std::runtime_error);
  EXPECT_EQ(loop_->pending_events(), 1u);
  loop_->ScheduleAt(At(2), Record("after"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("before", "after"));
  EXPECT_EQ(loop_->executed_events(), 2u);
  ExpectTime(loop_->Now(), At(2));
}

TEST_P(EventLoopConformanceTest, CallbackMayScheduleMoreEvents) {
  int remaining = 50;
  absl::Time last;
  std::function<void()> tick = [&] {
    last = loop_->Now();
    if (--remaining > 0) loop_->ScheduleAfter(Ticks(1), [&] { tick(); });
  };
  loop_->ScheduleAt(At(1), [&] { tick(); });
  loop_->RunUntilIdle();
  EXPECT_EQ(remaining, 0);
  ExpectTime(last, At(50));
  EXPECT_EQ(loop_->executed_events(), 50u);
}

TEST_P(EventLoopConformanceTest, CallbackScheduledForNowRunsAfterEventsAlreadyDueNow) {
  loop_->ScheduleAt(At(1), [&] {
    trace_.push_back("a");
    loop_->ScheduleAfter(absl::ZeroDuration(), Record("a-child"));
    loop_->ScheduleAfter(Ticks(1), Record("a-later"));
  });
  loop_->ScheduleAt(At(1), Record("b"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("a", "b", "a-child", "a-later"));
}

TEST_P(EventLoopConformanceTest, CallbackMayCancelAnotherPendingEvent) {
  Restart();
  TimerHandle victim = loop_->ScheduleAt(At(2), Record("victim"));
  bool cancelled = false;
  loop_->ScheduleAt(At(1), [&] { cancelled = loop_->Cancel(victim); });
  if (ScheduledLate(At(1))) GTEST_SKIP() << kLate;
  loop_->RunUntilIdle();
  EXPECT_TRUE(cancelled);
  EXPECT_TRUE(trace_.empty());
}

TEST_P(EventLoopConformanceTest, CallbackCancellingItselfIsANoOp) {
  TimerHandle self;
  bool result = true;
  self = loop_->ScheduleAt(At(1), [&] {
    result = loop_->Cancel(self);
    trace_.push_back("ran");
  });
  loop_->RunUntilIdle();
  EXPECT_FALSE(result);
  EXPECT_THAT(trace_, ElementsAre("ran"));
}

TEST_P(EventLoopConformanceTest, CallbackMayPostAndThePostRunsAtTheLoopsTime) {
  absl::Time timer_time;
  absl::Time post_time;
  loop_->ScheduleAt(At(1), [&] {
    trace_.push_back("timer");
    timer_time = loop_->Now();
    loop_->Post([&] {
      post_time = loop_->Now();
      CancelFar("post")();
    });
  });
  ScheduleFar("later");
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("timer", "post"));
  ExpectTime(post_time, timer_time);
}

TEST_P(EventLoopConformanceTest, PostsRunInOrderAfterEventsAlreadyScheduledForNow) {
  // Posts get their place when the loop thread takes them (when the run starts here): after
  // both timers due now, before anything scheduled later.
  loop_->ScheduleAt(start_, Record("timer-1"));
  loop_->Post(Record("post-1"));
  loop_->ScheduleAt(start_, Record("timer-2"));
  loop_->Post(CancelFar("post-2"));
  ScheduleFar("later");
  EXPECT_EQ(loop_->pending_events(), 5u);
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("timer-1", "timer-2", "post-1", "post-2"));
}

TEST_P(EventLoopConformanceTest, RunUntilRunsDueEventsAndReturnsAtTheDeadline) {
  Restart();
  for (int n : {1, 2, 3}) loop_->ScheduleAt(At(n), Record(std::to_string(n)));
  if (ScheduledLate(At(2))) GTEST_SKIP() << kLate;
  loop_->RunUntil(At(2.5));
  EXPECT_THAT(trace_, ElementsAre("1", "2"));
  ExpectTime(loop_->Now(), At(2.5));
  EXPECT_EQ(loop_->pending_events(), 1u);
  loop_->RunUntil(At(3));  // the deadline is inclusive
  EXPECT_THAT(trace_, ElementsAre("1", "2", "3"));
  ExpectTime(loop_->Now(), At(3));
}

TEST_P(EventLoopConformanceTest, RunUntilOnAnEmptyLoopReachesTheDeadline) {
  loop_->RunUntil(At(2));
  ExpectTime(loop_->Now(), At(2));
  EXPECT_EQ(loop_->executed_events(), 0u);
}

TEST_P(EventLoopConformanceTest, RunUntilInThePastNeverMovesTheClockBack) {
  loop_->RunUntil(At(1));
  const absl::Time after = loop_->Now();
  loop_->RunUntil(start_);
  EXPECT_GE(loop_->Now(), after);
}

TEST_P(EventLoopConformanceTest, RunUntilIgnoresWorkGuards) {
  Restart();
  EventLoop::WorkGuard guard = loop_->AcquireWork();
  loop_->ScheduleAt(At(1), Record("due"));
  if (ScheduledLate(At(2))) GTEST_SKIP() << kLate;
  loop_->RunUntil(At(2));
  EXPECT_THAT(trace_, ElementsAre("due"));
  ExpectTime(loop_->Now(), At(2));
}

TEST_P(EventLoopConformanceTest, StopInACallbackReturnsAfterThatCallbackAndRunResumesLater) {
  loop_->ScheduleAt(At(1), [&] {
    trace_.push_back("stopper");
    loop_->Stop();
  });
  loop_->ScheduleAt(At(1), Record("same-time"));
  loop_->ScheduleAt(At(2), Record("later"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("stopper"));
  EXPECT_EQ(loop_->pending_events(), 2u);
  loop_->RunUntilIdle();  // the request was cleared
  EXPECT_THAT(trace_, ElementsAre("stopper", "same-time", "later"));
}

TEST_P(EventLoopConformanceTest, StopBeforeRunMakesTheNextRunReturnAtOnceThenClears) {
  loop_->ScheduleAt(start_, Record("x"));
  loop_->Stop();
  loop_->RunUntilIdle();
  EXPECT_TRUE(trace_.empty());
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("x"));
}

TEST_P(EventLoopConformanceTest, StopDuringRunUntilReturnsBeforeTheDeadline) {
  absl::Time stopped_at;
  loop_->ScheduleAt(At(1), [&] {
    stopped_at = loop_->Now();
    loop_->Stop();
  });
  loop_->ScheduleAt(At(2), Record("after-stop"));
  loop_->RunUntil(start_ + absl::Hours(1));
  EXPECT_TRUE(trace_.empty());
  EXPECT_LT(loop_->Now(), start_ + absl::Hours(1));
  ExpectTime(loop_->Now(), stopped_at);  // a virtual clock stays at the stopping event
}

TEST_P(EventLoopConformanceTest, RunReturnsOnlyWhenStopped) {
  loop_->ScheduleAt(At(1), Record("a"));
  loop_->ScheduleAt(At(5), [&] {
    trace_.push_back("stop");
    loop_->Stop();
  });
  loop_->ScheduleAt(At(9), Record("after-stop"));
  loop_->Run();
  EXPECT_THAT(trace_, ElementsAre("a", "stop"));
  EXPECT_EQ(loop_->pending_events(), 1u);
}

TEST_P(EventLoopConformanceTest, RunWaitsForPostsUntilStoppedFromAnotherThread) {
  std::thread stopper;
  loop_->Post([&] {
    trace_.push_back("started");
    // Run() has nothing left: it waits until this thread's Stop() wakes it.
    stopper = std::thread([this] { loop_->Stop(); });
  });
  loop_->Run();
  stopper.join();
  EXPECT_THAT(trace_, ElementsAre("started"));
}

TEST_P(EventLoopConformanceTest, PostFromAnotherThreadWakesAWaitingRun) {
  std::thread poster;
  loop_->Post([&] {
    poster = std::thread([this] {
      loop_->Post([this] {
        trace_.push_back("posted");
        loop_->Stop();
      });
    });
  });
  loop_->Run();
  poster.join();
  EXPECT_THAT(trace_, ElementsAre("posted"));
}

TEST_P(EventLoopConformanceTest, CountersTrackPendingAndExecutedEvents) {
  TimerHandle h = loop_->ScheduleAt(At(1), [] {});
  loop_->ScheduleAt(At(2), [] {});
  loop_->Post([] {});
  EXPECT_EQ(loop_->pending_events(), 3u);
  EXPECT_EQ(loop_->executed_events(), 0u);
  loop_->Cancel(h);
  loop_->RunUntilIdle();
  EXPECT_EQ(loop_->pending_events(), 0u);
  EXPECT_EQ(loop_->executed_events(), 2u);
}

TEST_P(EventLoopConformanceTest, MassCancellationKeepsTheSurvivorsInOrder) {
  Restart();
  // 20,000 events a thousandth of a tick apart, due in the reverse of scheduling order, from
  // 100 ticks on.
  constexpr int kEvents = 20'000;
  constexpr double kLead = 100;
  std::vector<TimerHandle> handles;
  std::vector<int> ran;
  for (int i = 0; i < kEvents; ++i) {
    handles.push_back(
        loop_->ScheduleAt(At(kLead + (kEvents - i) / 1000.0), [&ran, i] { ran.push_back(i); }));
  }
  if (ScheduledLate(At(kLead))) {
    GTEST_SKIP() << "scheduling " << kEvents << " events took more than " << Ticks(kLead);
  }
  std::vector<int> expected;
  for (int i = 0; i < kEvents; ++i) {
    if (i % 10 == 3) {
      expected.push_back(i);
    } else {
      ASSERT_TRUE(loop_->Cancel(handles[i]));
    }
  }
  EXPECT_EQ(loop_->pending_events(), 2'000u);
  loop_->RunUntilIdle();
  std::reverse(expected.begin(), expected.end());  // later i are due earlier
  EXPECT_EQ(ran, expected);
  for (int i = 0; i < kEvents; i += 1000) EXPECT_FALSE(loop_->Cancel(handles[i]));
}

TEST_P(EventLoopConformanceTest, PostsFromManyThreadsAllRunInPerThreadOrder) {
  constexpr int kThreads = 8;
  constexpr int kPostsPerThread = 2000;
  std::vector<std::vector<int>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // Each thread holds a work guard until it has posted everything, so the loop cannot go
    // idle before all posts arrive.
    threads.emplace_back([this, &seen, t, guard = loop_->AcquireWork()]() mutable {
      for (int i = 0; i < kPostsPerThread; ++i) {
        loop_->Post([&seen, t, i] { seen[t].push_back(i); });
      }
      guard.Reset();
    });
  }
  loop_->RunUntilIdle();
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kPostsPerThread)) << "thread " << t;
    for (int i = 0; i < kPostsPerThread; ++i) ASSERT_EQ(seen[t][i], i) << "thread " << t;
  }
  EXPECT_EQ(loop_->executed_events(), static_cast<uint64_t>(kThreads * kPostsPerThread));
  ExpectTime(loop_->Now(), start_);  // posts run at the loop's current time
}

TEST_P(EventLoopConformanceTest, WorkGuardKeepsRunUntilIdleWaitingForTheWorkersPost) {
  std::thread worker;
  std::atomic<bool> worker_may_finish{false};
  loop_->Post([&] {
    // Start work off the loop, as a real backend does; it finishes once the loop has nothing
    // else left to run.
    worker = std::thread([&, guard = loop_->AcquireWork()]() mutable {
      while (!worker_may_finish.load()) std::this_thread::yield();
      loop_->Post(Record("completion"));
      guard.Reset();
    });
  });
  loop_->ScheduleAt(At(1), [&] {
    trace_.push_back("timer");
    worker_may_finish = true;
  });
  loop_->RunUntilIdle();
  worker.join();
  EXPECT_THAT(trace_, ElementsAre("timer", "completion"));
}

TEST_P(EventLoopConformanceTest, WorkGuardReleasedOnAnotherThreadLetsTheLoopGoIdle) {
  EventLoop::WorkGuard guard = loop_->AcquireWork();
  EXPECT_TRUE(guard.active());
  std::thread worker([this, guard = std::move(guard)]() mutable {
    loop_->Post(Record("completion"));
    guard.Reset();
  });
  loop_->ScheduleAt(At(1), Record("timer"));
  loop_->RunUntilIdle();
  worker.join();
  EXPECT_THAT(trace_, UnorderedElementsAre("timer", "completion"));
}

TEST_P(EventLoopConformanceTest, MovedFromWorkGuardIsInactive) {
  EventLoop::WorkGuard a = loop_->AcquireWork();
  EventLoop::WorkGuard b = std::move(a);
  EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move): testing the moved-from state
  EXPECT_TRUE(b.active());
  b = EventLoop::WorkGuard();  // releases
  EXPECT_FALSE(b.active());
  loop_->RunUntilIdle();  // would wait forever if a guard were still counted
  EXPECT_EQ(loop_->executed_events(), 0u);
}

TEST_P(EventLoopConformanceTest, IsLoopThreadIsTrueOnTheRunningThreadOnly) {
  EXPECT_TRUE(loop_->IsLoopThread());  // the creating thread, before any run
  bool inside = false;
  bool from_other_thread = true;
  loop_->Post([&] {
    inside = loop_->IsLoopThread();
    std::thread([&] { from_other_thread = loop_->IsLoopThread(); }).join();
  });
  loop_->RunUntilIdle();
  EXPECT_TRUE(inside);
  EXPECT_FALSE(from_other_thread);

  // Run from another thread: that thread becomes the loop thread.
  bool on_runner = false;
  loop_->Post([&] { on_runner = loop_->IsLoopThread(); });
  std::thread([&] { loop_->RunUntilIdle(); }).join();
  EXPECT_TRUE(on_runner);
  EXPECT_FALSE(loop_->IsLoopThread());
}

// --- Holding the loop from any thread ---------------------------------------------------------

TEST_P(EventLoopConformanceTest, TryHoldMakesAnIdleLoopsCallerTheLoopThread) {
  std::thread([&] {
    EXPECT_FALSE(loop_->IsLoopThread());
    bool inside = false;
    EXPECT_TRUE(loop_->TryHold([&] {
      inside = loop_->IsLoopThread();
      loop_->ScheduleAfter(absl::ZeroDuration(), [] {});  // loop-thread work is allowed
      EXPECT_TRUE(loop_->TryHold([] {}));                 // the holder may take it again
    }));
    EXPECT_TRUE(inside);
    EXPECT_TRUE(loop_->IsLoopThread());  // it held the loop last
  }).join();
  EXPECT_FALSE(loop_->IsLoopThread());
  loop_->RunUntilIdle();
  EXPECT_EQ(loop_->executed_events(), 1u);
  EXPECT_TRUE(loop_->IsLoopThread());
}

TEST_P(EventLoopConformanceTest, TryHoldFailsWhileAnotherThreadRunsTheLoop) {
  std::atomic<bool> tried{false};
  bool held = true;
  loop_->Post([&] {
    std::thread([&] {
      held = loop_->TryHold([] {});
      tried = true;
    }).join();
  });
  loop_->RunUntilIdle();
  EXPECT_TRUE(tried);
  EXPECT_FALSE(held);
}

TEST_P(EventLoopConformanceTest, RunWaitsWhileAnotherThreadHoldsTheLoop) {
  std::atomic<int> step{1};
  HeldElsewhere held(*loop_, [&] { step = 2; });
  int step_when_run = 0;
  loop_->Post([&] { step_when_run = step; });
  std::thread runner([&] { loop_->RunUntilIdle(); });
  held.Release();
  runner.join();
  EXPECT_EQ(step_when_run, 2);  // the post ran only after the holder let go
}

TEST_P(EventLoopConformanceTest, RunOnLoopOnAnIdleLoopRunsOnTheCaller) {
  std::thread::id ran_on;
  std::thread caller([&] {
    loop_->RunOnLoop([&] {
      ran_on = std::this_thread::get_id();
      EXPECT_TRUE(loop_->IsLoopThread());
    });
    EXPECT_EQ(ran_on, std::this_thread::get_id());
  });
  caller.join();
  EXPECT_EQ(loop_->pending_events(), 0u);
}

TEST_P(EventLoopConformanceTest, RunOnLoopWhileTheLoopRunsRunsOnTheLoopThread) {
  std::thread::id ran_on;
  std::atomic<bool> called{false};
  std::thread caller;
  loop_->Post([&] {
    caller = std::thread([&] {
      loop_->RunOnLoop([&] { ran_on = std::this_thread::get_id(); });
      called = true;
      loop_->Stop();
    });
  });
  loop_->Run();  // until the caller's Stop()
  caller.join();
  EXPECT_TRUE(called);
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // the thread running Run()
}

TEST_P(EventLoopConformanceTest, RunOnLoopRunsItselfWhenTheHolderLetsGoFirst) {
  // A holder that runs no posts: the caller's post waits, then the caller runs its function
  // itself once the holder lets go, and the post does nothing when it runs later.
  HeldElsewhere held(*loop_);
  int runs = 0;
  std::thread::id ran_on;
  std::thread caller([&] {
    loop_->RunOnLoop([&] {
      ++runs;
      ran_on = std::this_thread::get_id();
    });
  });
  while (loop_->pending_events() == 0) std::this_thread::yield();  // (read racily; only a hint)
  const std::thread::id caller_id = caller.get_id();
  held.Release();
  caller.join();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(ran_on, caller_id);
  loop_->RunUntilIdle();  // the stale post
  EXPECT_EQ(runs, 1);
}

TEST_P(EventLoopConformanceTest, AwaitReleaseOrWakesOnReadyAndOnRelease) {
  // Ready: made true by the loop thread, which then wakes the awaiter.
  std::atomic<bool> ready{false};
  std::atomic<bool> woke{false};
  loop_->Post([&] {
    std::thread awaiter([&] {
      EXPECT_TRUE(loop_->AwaitReleaseOr([&] { return ready.load(); }));
      woke = true;
    });
    ready = true;
    loop_->WakeAwaiters();
    awaiter.join();
  });
  loop_->RunUntilIdle();
  EXPECT_TRUE(woke);

  // Release: nothing becomes ready, but the holder lets go.
  HeldElsewhere held(*loop_);
  std::thread awaiter([&] { EXPECT_FALSE(loop_->AwaitReleaseOr([] { return false; })); });
  held.Release();
  awaiter.join();
}

// --- The loops --------------------------------------------------------------------------------

template <std::unique_ptr<EventQueue> (*kQueue)()>
std::unique_ptr<EventLoop> VirtualOn() {
  EventLoopOptions options;
  options.queue = kQueue();
  return NewVirtualEventLoop(std::move(options));
}

std::unique_ptr<EventLoop> RealTimeSpinning() {
  EventLoopOptions options;
  options.spin_before_due = absl::Milliseconds(1);
  return NewRealTimeEventLoop(std::move(options));
}

INSTANTIATE_TEST_SUITE_P(
    Loops, EventLoopConformanceTest,
    ::testing::Values(
        LoopKind{"Virtual", [] { return NewVirtualEventLoop(); }, true, absl::Seconds(1)},
        LoopKind{"VirtualHeapQueue", &VirtualOn<&NewHeapEventQueue>, true, absl::Seconds(1)},
        LoopKind{"RealTime", [] { return NewRealTimeEventLoop(); }, false, absl::Milliseconds(1)},
        LoopKind{"RealTimeSpinning", &RealTimeSpinning, false, absl::Milliseconds(1)},
        LoopKind{"Reference",
                 [] { return std::make_unique<ReferenceEventLoop>(EventLoopOptions{}.start_time); },
                 true, absl::Seconds(1)}),
    [](const ::testing::TestParamInfo<LoopKind>& p) { return p.param.name; });

}  // namespace
}  // namespace kiln
