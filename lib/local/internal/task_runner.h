// TaskRunner: runs one-off blocking tasks of the local backend, each on a
// thread of its own, and joins them (finished ones as new ones start, all of
// them on JoinAll or destruction).
//
// Internal to kiln::local: never installed. Thread-safe.
#ifndef KILN_LIB_LOCAL_INTERNAL_TASK_RUNNER_H_
#define KILN_LIB_LOCAL_INTERNAL_TASK_RUNNER_H_

#include <atomic>
#include <list>
#include <memory>
#include <thread>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace kiln::local::internal {

class TaskRunner {
 public:
  TaskRunner() = default;
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;
  ~TaskRunner() { JoinAll(); }

  // Starts `fn` on a new thread.
  void Run(absl::AnyInvocable<void()> fn) {
    absl::MutexLock lock(&mu_);
    Reap();
    auto task = std::make_unique<Task>();
    Task* t = task.get();
    t->thread = std::thread([t, fn = std::move(fn)]() mutable {
      fn();
      fn = nullptr;  // destroy what it holds before saying so
      t->done.store(true);
    });
    tasks_.push_back(std::move(task));
  }

  // Waits for every task, including tasks started meanwhile.
  void JoinAll() {
    while (true) {
      std::list<std::unique_ptr<Task>> tasks;
      {
        absl::MutexLock lock(&mu_);
        tasks.swap(tasks_);
      }
      if (tasks.empty()) return;
      for (auto& t : tasks) t->thread.join();
    }
  }

 private:
  struct Task {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        it = tasks_.erase(it);
      } else {
        ++it;
      }
    }
  }
  absl::Mutex mu_;
  std::list<std::unique_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INTERNAL_TASK_RUNNER_H_
