// A second EventLoop, written only from kiln/event_loop.h's contract: a virtual-time loop on
// ordinary containers (an ordered set of (time, seq, id) and a map of slots), with none of the
// shipped loops' machinery. The conformance suite runs it beside the shipped loops, which shows
// that the interface can be met by an implementation other than Kiln's own, and gives the
// suite a plain model to be checked against.
#ifndef KILN_TESTS_CONFORMANCE_REFERENCE_EVENT_LOOP_H_
#define KILN_TESTS_CONFORMANCE_REFERENCE_EVENT_LOOP_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/time/time.h"
#include "kiln/clock.h"
#include "kiln/event_loop.h"

namespace kiln {

class ReferenceEventLoop final : public EventLoop {
 public:
  explicit ReferenceEventLoop(absl::Time start) : now_ns_(ToNs(start)), clock_(*this) {}
  ~ReferenceEventLoop() override {
    for (auto& [id, event] : events_) event.slot->Destroy();
  }

  absl::Time Now() const override {
    return absl::FromUnixNanos(now_ns_.load(std::memory_order_relaxed));
  }
  bool is_virtual() const override { return true; }
  const Clock& clock() const override { return clock_; }

  bool Cancel(TimerHandle h) override {
    auto it = events_.find(HandleSlot(h));
    if (!h.valid() || it == events_.end()) return false;
    order_.erase({it->second.time_ns, it->second.seq, it->first});
    std::unique_ptr<CallbackSlot> slot = std::move(it->second.slot);
    events_.erase(it);
    slot->Destroy();
    return true;
  }

  void Post(Callback cb) override {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(cb));
    cv_.notify_all();
  }

  WorkGuard AcquireWork() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++work_;
    return MakeWorkGuard();
  }

  void DoRunUntilIdle() override {
    RunLoop(std::numeric_limits<int64_t>::max(), /*until_idle=*/true);
  }
  void DoRunUntil(absl::Time deadline) override {
    if (RunLoop(ToNs(deadline), /*until_idle=*/false) && deadline != absl::InfiniteFuture()) {
      now_ns_.store(std::max(now_ns_.load(), ToNs(deadline)));
    }
  }
  void DoRun() override {
    for (;;) {
      if (!RunLoop(std::numeric_limits<int64_t>::max(), /*until_idle=*/false)) return;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !inbox_.empty() || stop_; });
    }
  }

  void Stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }

  size_t pending_events() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size() + inbox_.size();
  }
  uint64_t executed_events() const override { return executed_; }

 protected:
  Reservation ReserveAt(absl::Time when) override {
    const int64_t t = std::max(ToNs(when), now_ns_.load());
    const uint32_t id = next_id_++;
    Event& event = events_[id];
    event.time_ns = t;
    event.seq = next_seq_++;
    event.slot = std::make_unique<CallbackSlot>();
    order_.insert({t, event.seq, id});
    return {event.slot.get(), MakeHandle(id, 1)};
  }
  Reservation ReserveAfter(absl::Duration delay) override {
    return ReserveAt(Now() + std::max(delay, absl::ZeroDuration()));
  }
  void AbandonReservation(TimerHandle h) override {
    auto it = events_.find(HandleSlot(h));
    if (it == events_.end()) return;
    order_.erase({it->second.time_ns, it->second.seq, it->first});
    events_.erase(it);
  }

 private:
  struct Event {
    int64_t time_ns = 0;
    uint64_t seq = 0;
    std::unique_ptr<CallbackSlot> slot;
  };

  // A clock that reads the loop's time.
  class LoopClock final : public Clock {
   public:
    explicit LoopClock(const ReferenceEventLoop& loop) : loop_(loop) {}
    absl::Time Now() const override { return loop_.Now(); }

   private:
    const ReferenceEventLoop& loop_;
  };

  static int64_t ToNs(absl::Time t) { return absl::ToUnixNanos(t); }

  void ReleaseWork() override {
    std::lock_guard<std::mutex> lock(mu_);
    --work_;
    cv_.notify_all();
  }

  // Moves posts into the queue at the current time, in order.
  void DrainInbox() {
    std::deque<Callback> posts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      posts.swap(inbox_);
    }
    for (Callback& cb : posts) ScheduleAt(Now(), std::move(cb));
  }

  // Runs due events until none is due at or before `deadline_ns`; with `until_idle`, waits for
  // posts while work guards remain. Returns false if it returned because of Stop().
  bool RunLoop(int64_t deadline_ns, bool until_idle) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) {
          stop_ = false;
          return false;
        }
      }
      DrainInbox();
      if (!order_.empty() && std::get<0>(*order_.begin()) <= deadline_ns) {
        const auto [t, seq, id] = *order_.begin();
        order_.erase(order_.begin());
        auto it = events_.find(id);
        std::unique_ptr<CallbackSlot> slot = std::move(it->second.slot);
        events_.erase(it);
        now_ns_.store(std::max(now_ns_.load(), t));
        ++executed_;
        slot->Invoke();
        slot->Destroy();
        continue;
      }
      if (!until_idle) return true;
      std::unique_lock<std::mutex> lock(mu_);
      if (!inbox_.empty() || stop_) continue;
      if (work_ == 0) return true;
      cv_.wait(lock, [&] { return !inbox_.empty() || stop_ || work_ == 0; });
    }
  }

  std::atomic<int64_t> now_ns_;
  LoopClock clock_;
  std::map<uint32_t, Event> events_;
  std::set<std::tuple<int64_t, uint64_t, uint32_t>> order_;
  uint32_t next_id_ = 1;
  uint64_t next_seq_ = 0;
  uint64_t executed_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Callback> inbox_;
  int work_ = 0;
  bool stop_ = false;
};

}  // namespace kiln

#endif  // KILN_TESTS_CONFORMANCE_REFERENCE_EVENT_LOOP_H_
