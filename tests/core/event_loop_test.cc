// Tests of the virtual and real-time event loops (kiln/event_loop.h) and the real clock
// (kiln/clock.h). Virtual-loop tests never sleep; the few real-time tests use short timers.
#include "kiln/event_loop.h"

#if defined(__linux__)
#include <sys/prctl.h>
#include <time.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/reference_event_queue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/clock.h"
#include "kiln/event_queue.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;

class EventLoopTest : public ::testing::Test {
 protected:
  // A callback that appends `label` to the trace.
  EventLoop::Callback Record(std::string label) {
    return [this, label = std::move(label)] { trace_.push_back(label); };
  }

  std::unique_ptr<EventLoop> loop_ = NewVirtualEventLoop();
  const absl::Time start_ = loop_->Now();
  std::vector<std::string> trace_;
};

TEST_F(EventLoopTest, VirtualLoopStartsAtDefaultStartTime) {
  EXPECT_TRUE(loop_->is_virtual());
  EXPECT_EQ(loop_->Now(), absl::FromUnixSeconds(1767225600));  // 2026-01-01T00:00:00Z
  EXPECT_EQ(loop_->clock().Now(), loop_->Now());
}

TEST_F(EventLoopTest, VirtualLoopStartsAtGivenStartTime) {
  EventLoopOptions options;
  options.start_time = absl::FromUnixSeconds(1000);
  std::unique_ptr<EventLoop> loop = NewVirtualEventLoop(std::move(options));
  EXPECT_EQ(loop->Now(), absl::FromUnixSeconds(1000));
}

TEST_F(EventLoopTest, EventsRunInTimeOrderWithTheClockAtEachEventTime) {
  std::vector<absl::Duration> seen;
  for (int s : {3, 1, 2}) {
    loop_->ScheduleAt(start_ + absl::Seconds(s), [this, &seen] { seen.push_back(loop_->Now() - start_); });
  }
  loop_->RunUntilIdle();
  EXPECT_THAT(seen, ElementsAre(absl::Seconds(1), absl::Seconds(2), absl::Seconds(3)));
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(3));
  EXPECT_EQ(loop_->clock().Now(), start_ + absl::Seconds(3));
}

TEST_F(EventLoopTest, EqualTimesRunFirstInFirstOut) {
  for (int i = 0; i < 10; ++i) loop_->ScheduleAfter(absl::Seconds(1), Record(std::to_string(i)));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("0", "1", "2", "3", "4", "5", "6", "7", "8", "9"));
}

TEST_F(EventLoopTest, ScheduleAfterIsRelativeToTheCurrentEvent) {
  absl::Time inner = absl::InfinitePast();
  loop_->ScheduleAfter(absl::Seconds(10), [&] {
    loop_->ScheduleAfter(absl::Seconds(5), [&] { inner = loop_->Now(); });
  });
  loop_->RunUntilIdle();
  EXPECT_EQ(inner, start_ + absl::Seconds(15));
}

TEST_F(EventLoopTest, ScheduleAfterANegativeDelayRunsNowAfterEventsAlreadyDue) {
  loop_->ScheduleAfter(absl::Seconds(1), [&] {
    loop_->ScheduleAfter(absl::Seconds(-30), [&] {
      trace_.push_back("negative");
      EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(1));
    });
  });
  loop_->ScheduleAfter(absl::Seconds(1), Record("due"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("due", "negative"));
}

TEST_F(EventLoopTest, ScheduleAfterAnInfiniteDelayStaysPendingPastAnyFiniteDeadline) {
  loop_->ScheduleAfter(absl::InfiniteDuration(), Record("never"));
  loop_->ScheduleAt(absl::InfiniteFuture(), Record("never-either"));
  loop_->RunUntil(start_ + absl::Hours(24 * 365 * 100));
  EXPECT_TRUE(trace_.empty());
  EXPECT_EQ(loop_->pending_events(), 2u);
}

TEST_F(EventLoopTest, ScheduleAfterAVeryLongDelayIsExactToTheNanosecond) {
  // Beyond 2^33 s (272 years), where converting the delay takes absl's general path.
  EventLoopOptions options;
  options.start_time = absl::UnixEpoch();
  std::unique_ptr<EventLoop> loop = NewVirtualEventLoop(std::move(options));
  const absl::Duration delay = absl::Seconds(int64_t{1} << 33) + absl::Nanoseconds(123'456'789);
  absl::Time ran_at;
  loop->ScheduleAfter(delay, [&] { ran_at = loop->Now(); });
  loop->RunUntilIdle();
  EXPECT_EQ(ran_at, absl::UnixEpoch() + delay);
}

TEST_F(EventLoopTest, ScheduleNeverRunsInline) {
  loop_->ScheduleAt(start_, Record("a"));
  EXPECT_TRUE(trace_.empty());
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("a"));
}

TEST_F(EventLoopTest, PastTimeRunsNowAfterEventsAlreadyDue) {
  loop_->ScheduleAfter(absl::Seconds(5), [&] {
    trace_.push_back("first");
    loop_->ScheduleAt(start_, Record("past"));  // 5 s in the past
  });
  loop_->ScheduleAfter(absl::Seconds(5), Record("second"));
  loop_->ScheduleAfter(absl::Seconds(6), Record("later"));
  loop_->ScheduleAt(absl::InfinitePast(), Record("infinite-past"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("infinite-past", "first", "second", "past", "later"));
}

TEST_F(EventLoopTest, CancelPendingEventReturnsTrueAndItNeverRuns) {
  TimerHandle h = loop_->ScheduleAfter(absl::Seconds(1), Record("cancelled"));
  loop_->ScheduleAfter(absl::Seconds(2), Record("kept"));
  EXPECT_TRUE(h.valid());
  EXPECT_EQ(loop_->pending_events(), 2u);
  EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_EQ(loop_->pending_events(), 1u);
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("kept"));
  EXPECT_EQ(loop_->executed_events(), 1u);
}

TEST_F(EventLoopTest, CancelledEventDoesNotMoveTheClock) {
  TimerHandle h = loop_->ScheduleAfter(absl::Hours(1), Record("cancelled"));
  loop_->ScheduleAfter(absl::Seconds(1), Record("kept"));
  loop_->Cancel(h);
  loop_->RunUntilIdle();
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(1));
}

TEST_F(EventLoopTest, CancelAfterRunReturnsFalse) {
  TimerHandle h = loop_->ScheduleAfter(absl::Seconds(1), Record("ran"));
  loop_->RunUntilIdle();
  EXPECT_FALSE(loop_->Cancel(h));
  EXPECT_THAT(trace_, ElementsAre("ran"));
}

TEST_F(EventLoopTest, CancelTwiceReturnsFalseTheSecondTime) {
  TimerHandle h = loop_->ScheduleAfter(absl::Seconds(1), Record("x"));
  EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_FALSE(loop_->Cancel(h));
  loop_->RunUntilIdle();
  EXPECT_TRUE(trace_.empty());
}

TEST_F(EventLoopTest, StaleHandleDoesNotCancelTheEventThatReusedItsSlot) {
  TimerHandle old_handle = loop_->ScheduleAfter(absl::Seconds(1), Record("old"));
  loop_->RunUntilIdle();
  // The slot is free again: the next event takes it (the free list is LIFO).
  TimerHandle new_handle = loop_->ScheduleAfter(absl::Seconds(1), Record("new"));
  ASSERT_NE(old_handle, new_handle);
  EXPECT_FALSE(loop_->Cancel(old_handle));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("old", "new"));
}

TEST_F(EventLoopTest, StaleHandleOfCancelledEventDoesNotCancelLaterEvents) {
  TimerHandle cancelled = loop_->ScheduleAfter(absl::Seconds(1), Record("cancelled"));
  ASSERT_TRUE(loop_->Cancel(cancelled));
  loop_->RunUntilIdle();  // drops the dead entry, freeing the slot
  loop_->ScheduleAfter(absl::Seconds(1), Record("new"));
  EXPECT_FALSE(loop_->Cancel(cancelled));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("new"));
}

TEST_F(EventLoopTest, InvalidHandleIsRejected) {
  TimerHandle none;
  EXPECT_FALSE(none.valid());
  EXPECT_FALSE(loop_->Cancel(none));
}

TEST_F(EventLoopTest, HandleFromAnotherLoopWithFewerSlotsIsRejected) {
  std::unique_ptr<EventLoop> other = NewVirtualEventLoop();
  TimerHandle h;
  for (int i = 0; i < 5; ++i) h = other->ScheduleAfter(absl::Seconds(1), [] {});
  EXPECT_FALSE(loop_->Cancel(h));  // slot index beyond this loop's table
}

TEST_F(EventLoopTest, CancelDestroysTheCallbackAtOnce) {
  auto token = std::make_shared<int>(0);
  TimerHandle h = loop_->ScheduleAfter(absl::Seconds(1), [token] {});
  EXPECT_EQ(token.use_count(), 2);
  loop_->Cancel(h);
  EXPECT_EQ(token.use_count(), 1);
}

TEST_F(EventLoopTest, CallbackIsDestroyedRightAfterItRuns) {
  auto token = std::make_shared<int>(0);
  long count_after = -1;
  loop_->ScheduleAfter(absl::Seconds(1), [token] {});
  loop_->ScheduleAfter(absl::Seconds(2), [&] { count_after = token.use_count(); });
  loop_->RunUntilIdle();
  EXPECT_EQ(count_after, 1);
}

TEST_F(EventLoopTest, DestroyingTheLoopDestroysPendingCallbacksAndPosts) {
  auto token = std::make_shared<int>(0);
  {
    std::unique_ptr<EventLoop> loop = NewVirtualEventLoop();
    loop->ScheduleAfter(absl::Seconds(1), [token] {});
    loop->ScheduleAfter(absl::Seconds(2), [token] {});
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

TEST_F(EventLoopTest, CallablesOfEverySizeRunOnceAndAreDestroyedOnce) {
  // Up to 40 bytes a callable is kept in the event's slot; past that, in a Callback on the
  // heap. Either way it runs once and is destroyed once: after running, when cancelled, or
  // with the loop.
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
  schedule_all(*loop_, absl::Seconds(1));
  EXPECT_EQ(token.use_count(), 6);
  loop_->RunUntilIdle();
  EXPECT_EQ(runs, 6);
  EXPECT_EQ(token.use_count(), 1);

  for (TimerHandle h : schedule_all(*loop_, absl::Seconds(1))) EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_EQ(token.use_count(), 1);
  loop_->RunUntilIdle();
  EXPECT_EQ(runs, 6);

  {
    std::unique_ptr<EventLoop> loop = NewVirtualEventLoop();
    schedule_all(*loop, absl::Seconds(1));
    EXPECT_EQ(token.use_count(), 6);
  }
  EXPECT_EQ(token.use_count(), 1);
  EXPECT_EQ(runs, 6);
}

// Holds a callback's capture whose destructor uses the loop: it cancels `victims` (enough for
// the loop to want to compact its queue) and schedules as many new events, then reads its own
// members, which must still be its own: the cancelled event's slot may not be reused while
// its callable is being destroyed.
struct ReentrantOnDestruction {
  EventLoop* loop = nullptr;
  std::vector<TimerHandle>* victims = nullptr;
  int* seen = nullptr;
  int value = 0;
  ReentrantOnDestruction(EventLoop* l, std::vector<TimerHandle>* v, int* s)
      : loop(l), victims(v), seen(s), value(42) {}
  ReentrantOnDestruction(ReentrantOnDestruction&& o) noexcept
      : loop(o.loop), victims(std::exchange(o.victims, nullptr)), seen(o.seen), value(o.value) {}
  ~ReentrantOnDestruction() {
    if (victims == nullptr) return;  // moved from
    for (TimerHandle h : *victims) loop->Cancel(h);
    for (size_t i = 0; i < victims->size(); ++i) {
      // Callables as large as the slot allows, each filled with a pattern.
      loop->ScheduleAfter(absl::Seconds(3), [a = int64_t{-1}, b = int64_t{-1}, c = int64_t{-1},
                                             d = int64_t{-1}, e = int64_t{-1}] {
        (void)(a + b + c + d + e);
      });
    }
    *seen = value;
  }
};

TEST_F(EventLoopTest, ACancelledCallbacksDestructorMayCancelAndScheduleMore) {
  std::vector<TimerHandle> victims;
  for (int i = 0; i < 3000; ++i) {
    victims.push_back(loop_->ScheduleAfter(absl::Seconds(2), [] {}));
  }
  int seen = 0;
  TimerHandle h = loop_->ScheduleAfter(
      absl::Seconds(1), [r = ReentrantOnDestruction(loop_.get(), &victims, &seen)] {});
  EXPECT_TRUE(loop_->Cancel(h));
  EXPECT_EQ(seen, 42);
  EXPECT_EQ(loop_->pending_events(), 3000u);  // the new ones
  loop_->RunUntilIdle();
  EXPECT_EQ(loop_->executed_events(), 3000u);
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(3));
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

TEST_F(EventLoopTest, ScheduledCallableIsMovedOnceAndNeverCopied) {
  int copies = 0;
  int moves = 0;
  loop_->ScheduleAfter(absl::Seconds(1), CountingCallable(&copies, &moves));
  loop_->ScheduleAt(start_ + absl::Seconds(2), CountingCallable(&copies, &moves));
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

TEST_F(EventLoopTest, CallbackWhoseConstructionThrowsIsNotScheduled) {
  loop_->ScheduleAfter(absl::Seconds(1), Record("before"));
  const ThrowsWhenCopied throws;
  EXPECT_THROW(loop_->ScheduleAfter(absl::Seconds(1), throws), std::runtime_error);
  EXPECT_THROW(loop_->ScheduleAt(start_, throws), std::runtime_error);
  EXPECT_EQ(loop_->pending_events(), 1u);
  loop_->ScheduleAfter(absl::Seconds(2), Record("after"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("before", "after"));
  EXPECT_EQ(loop_->executed_events(), 2u);
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(2));
}

TEST_F(EventLoopTest, CallbackMayScheduleMoreEvents) {
  int remaining = 100;
  std::function<void()> tick = [&] {
    if (--remaining > 0) loop_->ScheduleAfter(absl::Seconds(1), [&] { tick(); });
  };
  loop_->ScheduleAfter(absl::Seconds(1), [&] { tick(); });
  loop_->RunUntilIdle();
  EXPECT_EQ(remaining, 0);
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(100));
  EXPECT_EQ(loop_->executed_events(), 100u);
}

TEST_F(EventLoopTest, CallbackScheduledForNowRunsAfterEventsAlreadyDueNow) {
  loop_->ScheduleAfter(absl::Seconds(1), [&] {
    trace_.push_back("a");
    loop_->ScheduleAfter(absl::ZeroDuration(), Record("a-child"));
    loop_->ScheduleAfter(absl::Seconds(1), Record("a-later"));
  });
  loop_->ScheduleAfter(absl::Seconds(1), Record("b"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("a", "b", "a-child", "a-later"));
}

TEST_F(EventLoopTest, CallbackMayCancelAnotherPendingEvent) {
  TimerHandle victim = loop_->ScheduleAfter(absl::Seconds(2), Record("victim"));
  bool cancelled = false;
  loop_->ScheduleAfter(absl::Seconds(1), [&] { cancelled = loop_->Cancel(victim); });
  loop_->RunUntilIdle();
  EXPECT_TRUE(cancelled);
  EXPECT_TRUE(trace_.empty());
}

TEST_F(EventLoopTest, CallbackCancellingItselfIsANoOp) {
  TimerHandle self;
  bool result = true;
  self = loop_->ScheduleAfter(absl::Seconds(1), [&] {
    result = loop_->Cancel(self);
    trace_.push_back("ran");
  });
  loop_->RunUntilIdle();
  EXPECT_FALSE(result);
  EXPECT_THAT(trace_, ElementsAre("ran"));
}

TEST_F(EventLoopTest, CallbackMayPostAndThePostRunsAtTheSameTime) {
  absl::Time post_time;
  loop_->ScheduleAfter(absl::Seconds(1), [&] {
    trace_.push_back("timer");
    loop_->Post([&] {
      trace_.push_back("post");
      post_time = loop_->Now();
    });
  });
  loop_->ScheduleAfter(absl::Seconds(2), Record("later"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("timer", "post", "later"));
  EXPECT_EQ(post_time, start_ + absl::Seconds(1));
}

TEST_F(EventLoopTest, PostsRunInOrderAfterEventsAlreadyScheduledForNow) {
  // Posts get their place when the loop thread moves them into the queue (when the run starts
  // here): after both timers due now, before nothing else.
  loop_->ScheduleAt(start_, Record("timer-1"));
  loop_->Post(Record("post-1"));
  loop_->ScheduleAt(start_, Record("timer-2"));
  loop_->Post(Record("post-2"));
  loop_->ScheduleAfter(absl::Nanoseconds(1), Record("next-nanosecond"));
  EXPECT_EQ(loop_->pending_events(), 5u);
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("timer-1", "timer-2", "post-1", "post-2", "next-nanosecond"));
}

TEST_F(EventLoopTest, RunUntilRunsDueEventsAndSetsTheClockToTheDeadline) {
  for (int s : {1, 2, 3}) loop_->ScheduleAfter(absl::Seconds(s), Record(std::to_string(s)));
  loop_->RunUntil(start_ + absl::Milliseconds(2500));
  EXPECT_THAT(trace_, ElementsAre("1", "2"));
  EXPECT_EQ(loop_->Now(), start_ + absl::Milliseconds(2500));
  EXPECT_EQ(loop_->pending_events(), 1u);
  loop_->RunUntil(start_ + absl::Seconds(3));  // the deadline is inclusive
  EXPECT_THAT(trace_, ElementsAre("1", "2", "3"));
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(3));
}

TEST_F(EventLoopTest, RunUntilOnAnEmptyLoopAdvancesTheClock) {
  loop_->RunUntil(start_ + absl::Hours(2));
  EXPECT_EQ(loop_->Now(), start_ + absl::Hours(2));
  EXPECT_EQ(loop_->executed_events(), 0u);
}

TEST_F(EventLoopTest, RunUntilInThePastNeverMovesTheClockBack) {
  loop_->RunUntil(start_ + absl::Hours(1));
  loop_->RunUntil(start_);
  EXPECT_EQ(loop_->Now(), start_ + absl::Hours(1));
}

TEST_F(EventLoopTest, RunUntilInfiniteFutureRunsEverythingAndLeavesTheClockAtTheLastEvent) {
  loop_->ScheduleAfter(absl::Seconds(7), Record("x"));
  loop_->RunUntil(absl::InfiniteFuture());
  EXPECT_THAT(trace_, ElementsAre("x"));
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(7));
}

TEST_F(EventLoopTest, StopInACallbackReturnsAfterThatCallbackAndRunResumesLater) {
  loop_->ScheduleAfter(absl::Seconds(1), [&] {
    trace_.push_back("stopper");
    loop_->Stop();
  });
  loop_->ScheduleAfter(absl::Seconds(1), Record("same-time"));
  loop_->ScheduleAfter(absl::Seconds(2), Record("later"));
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("stopper"));
  EXPECT_EQ(loop_->pending_events(), 2u);
  loop_->RunUntilIdle();  // the request was cleared
  EXPECT_THAT(trace_, ElementsAre("stopper", "same-time", "later"));
}

TEST_F(EventLoopTest, StopBeforeRunMakesTheNextRunReturnAtOnceThenClears) {
  loop_->ScheduleAfter(absl::Seconds(1), Record("x"));
  loop_->Stop();
  loop_->RunUntilIdle();
  EXPECT_TRUE(trace_.empty());
  loop_->RunUntilIdle();
  EXPECT_THAT(trace_, ElementsAre("x"));
}

TEST_F(EventLoopTest, StopDuringRunUntilLeavesTheClockAtTheStoppingEvent) {
  loop_->ScheduleAfter(absl::Seconds(1), [&] { loop_->Stop(); });
  loop_->RunUntil(start_ + absl::Hours(1));
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(1));
}

TEST_F(EventLoopTest, RunReturnsOnlyWhenStopped) {
  loop_->ScheduleAfter(absl::Seconds(1), Record("a"));
  loop_->ScheduleAfter(absl::Seconds(5), [&] {
    trace_.push_back("stop");
    loop_->Stop();
  });
  loop_->ScheduleAfter(absl::Seconds(9), Record("after-stop"));
  loop_->Run();
  EXPECT_THAT(trace_, ElementsAre("a", "stop"));
}

TEST_F(EventLoopTest, RunWaitsForPostsUntilStoppedFromAnotherThread) {
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

TEST_F(EventLoopTest, CountersTrackPendingAndExecutedEvents) {
  TimerHandle h = loop_->ScheduleAfter(absl::Seconds(1), [] {});
  loop_->ScheduleAfter(absl::Seconds(2), [] {});
  loop_->Post([] {});
  EXPECT_EQ(loop_->pending_events(), 3u);
  EXPECT_EQ(loop_->executed_events(), 0u);
  loop_->Cancel(h);
  loop_->RunUntilIdle();
  EXPECT_EQ(loop_->pending_events(), 0u);
  EXPECT_EQ(loop_->executed_events(), 2u);
}

TEST_F(EventLoopTest, MassCancellationKeepsTheSurvivorsInOrder) {
  // Cancelling most events makes the loop rebuild its queue without the dead entries.
  std::vector<TimerHandle> handles;
  std::vector<int> ran;
  for (int i = 0; i < 20'000; ++i) {
    handles.push_back(loop_->ScheduleAfter(absl::Seconds(20'000 - i), [&ran, i] { ran.push_back(i); }));
  }
  std::vector<int> expected;
  for (int i = 0; i < 20'000; ++i) {
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
  for (int i = 0; i < 20'000; i += 1000) EXPECT_FALSE(loop_->Cancel(handles[i]));
}

// More events pending than the first slot chunks hold (the table then grows in 2 MiB
// blocks): every callback runs once and in order, or is destroyed once, unrun, with the loop.
TEST(EventLoopLargeTableTest, EveryCallbackRunsOrIsDestroyedOnce) {
  constexpr int kEvents = 150'000;
  auto alive = std::make_shared<int>(0);
  std::vector<int> ran;
  {
    auto loop = NewVirtualEventLoop();
    for (int i = 0; i < kEvents; ++i) {
      // Due in the reverse of scheduling order; a non-trivial capture, destroyed with the slot.
      loop->ScheduleAfter(absl::Seconds(kEvents - i), [&ran, i, alive] { ran.push_back(i); });
    }
    EXPECT_EQ(alive.use_count(), kEvents + 1);
    loop->RunUntil(loop->Now() + absl::Seconds(kEvents / 2));
    EXPECT_EQ(alive.use_count(), kEvents - kEvents / 2 + 1);
  }
  EXPECT_EQ(alive.use_count(), 1);  // the rest destroyed unrun with the loop
  ASSERT_EQ(ran.size(), static_cast<size_t>(kEvents / 2));
  for (size_t k = 0; k < ran.size(); ++k) ASSERT_EQ(ran[k], kEvents - 1 - static_cast<int>(k));
}

TEST_F(EventLoopTest, PostsFromManyThreadsAllRunInPerThreadOrder) {
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
  EXPECT_EQ(loop_->Now(), start_);  // posts run at the current virtual time
}

TEST_F(EventLoopTest, WorkGuardKeepsAVirtualLoopWaitingForTheWorkersPost) {
  EventLoop::WorkGuard guard = loop_->AcquireWork();
  EXPECT_TRUE(guard.active());
  std::thread worker([this, guard = std::move(guard)]() mutable {
    loop_->Post(Record("completion"));
    guard.Reset();
  });
  loop_->ScheduleAfter(absl::Seconds(1), Record("timer"));
  loop_->RunUntilIdle();
  worker.join();
  EXPECT_THAT(trace_, ::testing::UnorderedElementsAre("timer", "completion"));
}

TEST_F(EventLoopTest, MovedFromWorkGuardIsInactive) {
  EventLoop::WorkGuard a = loop_->AcquireWork();
  EventLoop::WorkGuard b = std::move(a);
  EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move): testing the moved-from state
  EXPECT_TRUE(b.active());
  b = EventLoop::WorkGuard();  // releases
  EXPECT_FALSE(b.active());
  loop_->RunUntilIdle();  // would wait forever if a guard were still counted
  EXPECT_EQ(loop_->executed_events(), 0u);
}

TEST_F(EventLoopTest, IsLoopThreadIsTrueOnTheRunningThreadOnly) {
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

TEST_F(EventLoopTest, CustomQueueIsUsed) {
  EventLoopOptions options;
  auto queue = std::make_unique<test::ReferenceEventQueue>();
  test::ReferenceEventQueue* raw = queue.get();
  options.queue = std::move(queue);
  std::unique_ptr<EventLoop> loop = NewVirtualEventLoop(std::move(options));
  loop->ScheduleAfter(absl::Seconds(1), [] {});
  EXPECT_EQ(raw->Size(), 1u);
  loop->RunUntilIdle();
  EXPECT_EQ(raw->Size(), 0u);
}

// A random workload: events that schedule (often at equal times), cancel and post, driven by a
// seeded generator. Its trace is (virtual time, event id) per callback run.
class RandomWorkload {
 public:
  RandomWorkload(EventLoop& loop, uint64_t seed) : loop_(loop), rng_(seed) {}

  std::vector<std::pair<int64_t, int>> Run(int initial, int budget) {
    budget_ = budget;
    for (int i = 0; i < initial; ++i) Schedule();
    loop_.RunUntilIdle();
    return trace_;
  }

 private:
  void Schedule() {
    if (budget_-- <= 0) return;
    const int id = next_id_++;
    static constexpr int64_t kDelaysMs[] = {0, 0, 1, 1, 5, 100, 1000};
    const int64_t delay_ms = kDelaysMs[rng_() % 7];
    handles_.push_back(loop_.ScheduleAfter(absl::Milliseconds(delay_ms), [this, id] { Fire(id); }));
  }

  void Fire(int id) {
    trace_.emplace_back(absl::ToUnixNanos(loop_.Now()), id);
    const uint64_t action = rng_() % 10;
    if (action < 7) Schedule();
    if (action < 4) Schedule();
    if (action == 7 && !handles_.empty()) loop_.Cancel(handles_[rng_() % handles_.size()]);
    if (action == 8) {
      const int post_id = -(next_id_++);
      loop_.Post([this, post_id] { Fire(post_id); });
    }
  }

  EventLoop& loop_;
  std::mt19937_64 rng_;
  std::vector<TimerHandle> handles_;
  std::vector<std::pair<int64_t, int>> trace_;
  int next_id_ = 0;
  int budget_ = 0;
};

std::vector<std::pair<int64_t, int>> RandomTrace(uint64_t seed,
                                                 std::unique_ptr<EventQueue> queue = nullptr) {
  EventLoopOptions options;
  options.queue = std::move(queue);
  std::unique_ptr<EventLoop> loop = NewVirtualEventLoop(std::move(options));
  return RandomWorkload(*loop, seed).Run(/*initial=*/50, /*budget=*/20'000);
}

TEST_F(EventLoopTest, IdenticalSeededRunsGiveIdenticalTraces) {
  const auto first = RandomTrace(/*seed=*/11);
  const auto second = RandomTrace(/*seed=*/11);
  ASSERT_GT(first.size(), 5'000u);
  EXPECT_EQ(first, second);
  EXPECT_NE(first, RandomTrace(/*seed=*/12));  // the trace does depend on the seed
}

TEST_F(EventLoopTest, TraceDoesNotDependOnTheQueueImplementation) {
  const auto reference = RandomTrace(/*seed=*/13, std::make_unique<test::ReferenceEventQueue>());
  EXPECT_EQ(RandomTrace(/*seed=*/13), reference);  // the default queue
  EXPECT_EQ(RandomTrace(/*seed=*/13, NewHeapEventQueue()), reference);
  EXPECT_EQ(RandomTrace(/*seed=*/13, NewLadderEventQueue()), reference);
}

TEST_F(EventLoopTest, MassCancellationOnEveryShippedQueueKeepsTheSurvivorsInOrder) {
  for (auto make_queue : {&NewHeapEventQueue, &NewLadderEventQueue}) {
    EventLoopOptions options;
    options.queue = make_queue();
    std::unique_ptr<EventLoop> loop = NewVirtualEventLoop(std::move(options));
    std::vector<TimerHandle> handles;
    std::vector<int> ran;
    std::mt19937_64 rng(7);
    for (int i = 0; i < 20'000; ++i) {
      const absl::Duration delay = absl::Milliseconds(static_cast<int64_t>(rng() % 100'000));
      handles.push_back(loop->ScheduleAfter(delay, [&ran, i] { ran.push_back(i); }));
    }
    for (int i = 0; i < 20'000; ++i) {
      if (i % 10 != 3) {
        ASSERT_TRUE(loop->Cancel(handles[i]));
      }
    }
    loop->RunUntilIdle();
    ASSERT_EQ(ran.size(), 2'000u);
    EXPECT_EQ(loop->executed_events(), 2'000u);
    for (int i : ran) EXPECT_EQ(i % 10, 3);
  }
}

// --- Real-time loop --------------------------------------------------------------------------

TEST(RealClockTest, ReadsWallClockTimeAndNeverGoesBackwards) {
  std::unique_ptr<Clock> clock = NewRealClock();
  const absl::Time first = clock->Now();
  EXPECT_LT(absl::AbsDuration(first - absl::Now()), absl::Seconds(1));
  absl::Time previous = first;
  for (int i = 0; i < 10'000; ++i) {
    const absl::Time now = clock->Now();
    ASSERT_GE(now, previous);
    previous = now;
  }
}

TEST(RealTimeEventLoopTest, TimerFiresNotBeforeItsDueTime) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  EXPECT_FALSE(loop->is_virtual());
  const auto started = std::chrono::steady_clock::now();
  const absl::Time due = loop->Now() + absl::Milliseconds(20);
  std::chrono::steady_clock::duration fired_after{};
  absl::Time fired_at;
  loop->ScheduleAt(due, [&] {
    fired_after = std::chrono::steady_clock::now() - started;
    fired_at = loop->Now();
  });
  loop->RunUntilIdle();
  EXPECT_GE(fired_after, std::chrono::milliseconds(20));
  EXPECT_GE(fired_at, due);
  EXPECT_LT(fired_after, std::chrono::seconds(5));  // generous: shared CI machines
}

#if defined(__linux__)
// A real-time loop waits with a 1 ns timer slack (Linux's default of 50 us would add to every
// timer's lateness) and gives the thread its own slack back when Run* returns; a virtual loop
// leaves it alone.
TEST(RealTimeEventLoopTest, TightensTimerSlackOnlyWhileRunning) {
  const int before = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  ASSERT_GT(before, 1) << "the test needs a thread whose slack is not already 1 ns";
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  int during = -1;
  auto read_slack = [&] { during = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0); };
  loop->ScheduleAfter(absl::Milliseconds(1), read_slack);
  loop->RunUntilIdle();
  EXPECT_EQ(during, 1);
  EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), before);

  std::unique_ptr<EventLoop> virtual_loop = NewVirtualEventLoop();
  virtual_loop->ScheduleAfter(absl::Seconds(1), read_slack);
  virtual_loop->RunUntilIdle();
  EXPECT_EQ(during, before);
}
#endif

TEST(RealTimeEventLoopTest, TimersRunInDueOrder) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::vector<int> order;
  const absl::Time now = loop->Now();
  loop->ScheduleAt(now + absl::Milliseconds(6), [&] { order.push_back(2); });
  loop->ScheduleAt(now + absl::Milliseconds(3), [&] { order.push_back(1); });
  loop->ScheduleAt(now + absl::Milliseconds(6), [&] { order.push_back(3); });
  loop->RunUntilIdle();
  EXPECT_THAT(order, ElementsAre(1, 2, 3));
}

TEST(RealTimeEventLoopTest, WorkGuardKeepsTheLoopRunningUntilTheWorkerPosts) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::atomic<bool> completion_ran{false};
  std::thread worker;
  loop->Post([&] {
    // Start blocking work off the loop, as a real backend does.
    worker = std::thread([&, guard = loop->AcquireWork()]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      loop->Post([&] { completion_ran = true; });
      guard.Reset();
    });
  });
  loop->RunUntilIdle();
  worker.join();
  EXPECT_TRUE(completion_ran);
}

TEST(RealTimeEventLoopTest, PostFromAnotherThreadWakesAWaitingLoop) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  // A far timer keeps the loop waiting; the post must not wait for it.
  loop->ScheduleAfter(absl::Hours(1), [] {});
  const auto started = std::chrono::steady_clock::now();
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    loop->Post([&] { loop->Stop(); });
  });
  loop->Run();
  poster.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(loop->pending_events(), 1u);
}

TEST(RealTimeEventLoopTest, RunUntilReturnsAtTheDeadline) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  const absl::Time deadline = loop->Now() + absl::Milliseconds(15);
  bool early = false;
  bool late = false;
  loop->ScheduleAt(deadline - absl::Milliseconds(5), [&] { early = true; });
  loop->ScheduleAt(deadline + absl::Seconds(10), [&] { late = true; });
  loop->RunUntil(deadline);
  EXPECT_GE(loop->Now(), deadline);
  EXPECT_TRUE(early);
  EXPECT_FALSE(late);
}

std::unique_ptr<EventLoop> SpinningLoop(absl::Duration spin) {
  EventLoopOptions options;
  options.spin_before_due = spin;
  return NewRealTimeEventLoop(std::move(options));
}

// CPU time the calling thread has used.
absl::Duration ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

TEST(RealTimeEventLoopTest, SpinningLoopRunsTimersInOrderAndNeverEarly) {
  std::unique_ptr<EventLoop> loop = SpinningLoop(absl::InfiniteDuration());
  std::vector<int> order;
  std::vector<absl::Duration> lateness;
  const absl::Time now = loop->Now();
  auto at = [&](absl::Duration offset, int id) {
    const absl::Time due = now + offset;
    loop->ScheduleAt(due, [&, due, id] {
      order.push_back(id);
      lateness.push_back(loop->Now() - due);
    });
  };
  at(absl::Milliseconds(6), 2);
  at(absl::Milliseconds(3), 1);
  at(absl::Milliseconds(6), 3);
  at(absl::Milliseconds(12), 4);
  loop->RunUntilIdle();
  EXPECT_THAT(order, ElementsAre(1, 2, 3, 4));
  for (const absl::Duration late : lateness) EXPECT_GE(late, absl::ZeroDuration());
}

// Busy-waiting for a timer an hour away, the loop still takes a post from another thread at
// once, and Stop() from it.
TEST(RealTimeEventLoopTest, SpinningLoopTakesAPostAndStopAtOnce) {
  std::unique_ptr<EventLoop> loop = SpinningLoop(absl::InfiniteDuration());
  loop->ScheduleAfter(absl::Hours(1), [] {});
  bool posted_ran = false;
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    loop->Post([&] { posted_ran = true; });
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    loop->Stop();
  });
  const auto started = std::chrono::steady_clock::now();
  loop->Run();
  poster.join();
  EXPECT_TRUE(posted_ran);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(loop->pending_events(), 1u);
}

// With a short spin, the loop sleeps until the spin begins: a timer 300 ms away costs the
// thread about the spin in CPU time, not 300 ms. (Load on the machine can only lower the CPU
// time a spinning thread gets, so the bound cannot fail for that reason.)
TEST(RealTimeEventLoopTest, ShortSpinSleepsUntilTheSpinBegins) {
  std::unique_ptr<EventLoop> loop = SpinningLoop(absl::Milliseconds(5));
  const absl::Time due = loop->Now() + absl::Milliseconds(300);
  absl::Time ran_at;
  loop->ScheduleAt(due, [&] { ran_at = loop->Now(); });
  const absl::Duration cpu_before = ThreadCpuTime();
  loop->RunUntilIdle();
  const absl::Duration cpu = ThreadCpuTime() - cpu_before;
  EXPECT_GE(ran_at, due);
  EXPECT_LT(cpu, absl::Milliseconds(100));
}

}  // namespace
}  // namespace kiln
