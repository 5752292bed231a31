// What JobObservers hear, queued while the engine takes a step and delivered after it.
//
// The engine queues an event wherever a step makes one (a status change, a log line, a metric)
// and delivers the queue once the step is over, when the engine's state is whole: an observer
// may then call the engine (stop or delete the job it hears of, create another) without finding
// a job between two states. Events are delivered in the order they were queued; events queued
// by an observer's calls are delivered after the batch being delivered.
//
// The events' texts are copied into one buffer per batch, which keeps its room from one step to
// the next: a batch allocates nothing once the buffers have grown. Not thread-safe: the engine
// calls it on its loop thread.
#ifndef KILN_LIB_CORE_INTERNAL_OBSERVER_QUEUE_H_
#define KILN_LIB_CORE_INTERNAL_OBSERVER_QUEUE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "kiln/engine.h"

namespace kiln::internal {

class ObserverQueue {
 public:
  // Adds an observer; one added while a batch is delivered hears from the next event on.
  void Add(JobObserver* observer) { observers_.push_back(observer); }
  // Removes every registration of `observer`. One removed while a batch is delivered hears
  // nothing more, not even the rest of the event being delivered.
  void Remove(JobObserver* observer) {
    if (delivering_) {
      std::replace(observers_.begin(), observers_.end(), observer,
                   static_cast<JobObserver*>(nullptr));
      removed_ = true;
    } else {
      observers_.erase(std::remove(observers_.begin(), observers_.end(), observer),
                       observers_.end());
    }
  }
  bool has_observers() const { return !observers_.empty(); }
  bool delivering() const { return delivering_; }
  bool empty() const { return events_.empty(); }

  // Queues a status change. `status` and `secondary` are the engine's constants (they outlive
  // every batch); the other texts are copied.
  void Status(std::string_view job, const char* status, const char* secondary,
              std::string_view message, absl::Time time) {
    Event& e = Push(Kind::kStatus, job, time);
    e.status = status;
    e.secondary = secondary;
    e.a = Copy(message);
  }
  void LogLine(std::string_view job, std::string_view host, std::string_view line,
               absl::Time time) {
    Event& e = Push(Kind::kLogLine, job, time);
    e.a = Copy(host);
    e.b = Copy(line);
  }
  void Metric(std::string_view job, std::string_view metric, double value, absl::Time time) {
    Event& e = Push(Kind::kMetric, job, time);
    e.a = Copy(metric);
    e.value = value;
  }

  // Delivers every queued event, and those queued meanwhile, to the observers, then calls
  // `after(event)` for each status event (the engine's waiters). Reentrant calls (from an
  // observer, through the engine) return at once: the outer call delivers what they queue.
  template <class After>
  void Deliver(After after) {
    if (delivering_) return;
    delivering_ = true;
    while (!events_.empty()) {
      std::swap(events_, batch_);
      std::swap(text_, batch_text_);
      for (const Event& e : batch_) {
        const std::string_view job = View(e.job);
        const size_t n = observers_.size();  // (added meanwhile: from the next event on)
        switch (e.kind) {
          case Kind::kStatus: {
            const StatusEvent event{job, e.status, e.secondary, View(e.a), e.time};
            for (size_t i = 0; i < n; ++i) {
              if (JobObserver* o = observers_[i]) o->OnStatusChange(event);
            }
            after(event);
            break;
          }
          case Kind::kLogLine:
            for (size_t i = 0; i < n; ++i) {
              if (JobObserver* o = observers_[i]) o->OnLogLine(job, View(e.a), View(e.b), e.time);
            }
            break;
          case Kind::kMetric:
            for (size_t i = 0; i < n; ++i) {
              if (JobObserver* o = observers_[i]) o->OnMetric(job, View(e.a), e.value, e.time);
            }
            break;
        }
      }
      batch_.clear();
      batch_text_.clear();
    }
    if (removed_) {
      removed_ = false;
      observers_.erase(std::remove(observers_.begin(), observers_.end(), nullptr),
                       observers_.end());
    }
    delivering_ = false;
  }

 private:
  enum class Kind : uint8_t { kStatus, kLogLine, kMetric };
  struct Text {
    uint32_t at = 0;
    uint32_t size = 0;
  };
  struct Event {
    Kind kind;
    absl::Time time;
    Text job;
    Text a;  // status: the message; log line: the host; metric: its name
    Text b;  // log line: the line
    const char* status = nullptr;
    const char* secondary = nullptr;
    double value = 0;
  };

  Event& Push(Kind kind, std::string_view job, absl::Time time) {
    Event& e = events_.emplace_back();
    e.kind = kind;
    e.time = time;
    e.job = Copy(job);
    return e;
  }
  Text Copy(std::string_view s) {
    Text t{static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(s.size())};
    text_.append(s);
    return t;
  }
  // A text of the batch being delivered (whose buffer no longer grows).
  std::string_view View(Text t) const { return std::string_view(batch_text_).substr(t.at, t.size); }

  std::vector<JobObserver*> observers_;  // null: removed while delivering
  bool removed_ = false;                 // observers_ holds nulls to drop
  bool delivering_ = false;
  std::vector<Event> events_;  // queued
  std::string text_;           // their texts
  std::vector<Event> batch_;   // being delivered
  std::string batch_text_;     // their texts
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_OBSERVER_QUEUE_H_
