// ReferenceEventQueue: an obviously correct EventQueue (a std::set ordered by EventBefore),
// for tests only. It keeps EventQueue's default ReplaceTop (Pop then Push), so a loop running
// on it exercises the generic, non-heap code path. Thread-compatible.
#ifndef KILN_TESTS_CORE_REFERENCE_EVENT_QUEUE_H_
#define KILN_TESTS_CORE_REFERENCE_EVENT_QUEUE_H_

#include <cstddef>
#include <set>

#include "kiln/event_queue.h"

namespace kiln::test {

class ReferenceEventQueue : public EventQueue {
 public:
  void Push(const QueuedEvent& e) override { set_.insert(e); }
  const QueuedEvent& Top() const override { return *set_.begin(); }
  void Pop() override { set_.erase(set_.begin()); }
  bool Empty() const override { return set_.empty(); }
  size_t Size() const override { return set_.size(); }

 private:
  struct Less {
    bool operator()(const QueuedEvent& a, const QueuedEvent& b) const {
      return EventBefore(a, b);
    }
  };
  std::set<QueuedEvent, Less> set_;
};

}  // namespace kiln::test

#endif  // KILN_TESTS_CORE_REFERENCE_EVENT_QUEUE_H_
