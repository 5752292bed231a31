#include "core/internal/deadline_queue.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"

namespace kiln::internal {
namespace {

// Owners that keep one deadline token each, as the engine's jobs do, and a
// log of what fired: (owner, seconds since the start).
class DeadlineQueueTest : public ::testing::Test {
 protected:
  absl::Time Start() const { return start_; }
  absl::Time At(double seconds) const { return start_ + absl::Seconds(seconds); }
  void Add(uint64_t owner, double seconds) { tokens_[owner] = queue_.Add(At(seconds), owner); }
  void Cancel(uint64_t owner) { tokens_.erase(owner); }

  std::unique_ptr<EventLoop> loop_ = NewVirtualEventLoop();
  const absl::Time start_ = loop_->Now();
  absl::flat_hash_map<uint64_t, uint64_t> tokens_;  // owner -> live token
  std::vector<std::pair<uint64_t, double>> fired_;
  // Runs in fire(), then cleared: lets a test add deadlines from there.
  absl::AnyInvocable<void(uint64_t)> on_fire_;
  DeadlineQueue queue_{
      *loop_,
      [this](uint64_t owner, uint64_t token) {
        auto it = tokens_.find(owner);
        return it != tokens_.end() && it->second == token;
      },
      [this](uint64_t owner, uint64_t) {
        tokens_.erase(owner);
        fired_.emplace_back(owner, absl::ToDoubleSeconds(loop_->Now() - start_));
        if (on_fire_) on_fire_(owner);
      }};
};

using Fired = std::vector<std::pair<uint64_t, double>>;

TEST_F(DeadlineQueueTest, FiresAtTheDueTimesInDueOrderWhateverTheOrderAdded) {
  // In due order (the FIFO), then earlier ones (the heap), and ties.
  Add(1, 10);
  Add(2, 20);
  Add(3, 30);
  Add(4, 5);
  Add(5, 25);
  Add(6, 20);  // after owner 2: added later
  Add(7, 20);
  loop_->RunUntilIdle();
  EXPECT_EQ(fired_, (Fired{{4, 5}, {1, 10}, {2, 20}, {6, 20}, {7, 20}, {5, 25}, {3, 30}}));
  EXPECT_EQ(queue_.size(), 0u);
}

TEST_F(DeadlineQueueTest, CancelledDeadlinesNeverFireAndCostAtMostOneWakeUp) {
  for (uint64_t owner = 1; owner <= 1000; ++owner) Add(owner, static_cast<double>(owner));
  Add(5000, 2000);  // a heap entry would go here if any were out of order
  for (uint64_t owner = 1; owner <= 1000; ++owner) Cancel(owner);
  const uint64_t before = loop_->executed_events();
  loop_->RunUntilIdle();
  EXPECT_EQ(fired_, (Fired{{5000, 2000}}));
  // The timer armed for owner 1, then the one for owner 5000.
  EXPECT_LE(loop_->executed_events() - before, 2u);
}

TEST_F(DeadlineQueueTest, AddingDropsTheCancelledOnesAhead) {
  for (uint64_t owner = 1; owner <= 100; ++owner) Add(owner, static_cast<double>(owner));
  for (uint64_t owner = 1; owner <= 100; ++owner) Cancel(owner);
  Add(1000, 1000);
  EXPECT_EQ(queue_.size(), 1u);
}

TEST_F(DeadlineQueueTest, AnEarlierDeadlineRearmsTheTimer) {
  Add(1, 100);
  loop_->RunUntil(At(10));
  Add(2, 50);  // into the heap, ahead of the armed timer
  Add(3, 20);
  loop_->RunUntilIdle();
  EXPECT_EQ(fired_, (Fired{{3, 20}, {2, 50}, {1, 100}}));
}

TEST_F(DeadlineQueueTest, ADeadlineCancelledAfterTheTimerWasArmedForItDoesNotFire) {
  Add(1, 10);
  Add(2, 30);
  loop_->RunUntil(At(5));
  Cancel(1);
  loop_->RunUntilIdle();
  EXPECT_EQ(fired_, (Fired{{2, 30}}));
}

TEST_F(DeadlineQueueTest, FireMayAddDeadlinesDueNowOrLater) {
  Add(1, 10);
  Add(2, 10);
  on_fire_ = [this](uint64_t owner) {
    if (owner == 1) {
      Add(3, 10);  // due now: fires in this pass, after the one already due
      Add(4, 15);
    }
  };
  loop_->RunUntilIdle();
  EXPECT_EQ(fired_, (Fired{{1, 10}, {2, 10}, {3, 10}, {4, 15}}));
}

TEST(DeadlineQueueLifetimeTest, DestroyingTheQueueCancelsItsTimer) {
  std::unique_ptr<EventLoop> loop = NewVirtualEventLoop();
  bool fired = false;
  {
    DeadlineQueue queue(
        *loop, [](uint64_t, uint64_t) { return true; },
        [&](uint64_t, uint64_t) { fired = true; });
    queue.Add(loop->Now() + absl::Seconds(1), 1);
    EXPECT_EQ(loop->pending_events(), 1u);
  }
  loop->RunUntilIdle();
  EXPECT_FALSE(fired);
  EXPECT_EQ(loop->pending_events(), 0u);
}

}  // namespace
}  // namespace kiln::internal
