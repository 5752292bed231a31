// WorkerPool: a fixed set of threads running queued tasks, and TaskGroup, a
// set of tasks whose caller waits for all of them and keeps the first error.
// A backend that does blocking work (transfers, file copies) off the event
// loop thread runs it here, so the work in flight is bounded for the whole
// backend, however many callers there are (the S3 store runs its parts so).
//
// Part of the plugin kit (docs/plugins.md). Thread-safe.
#ifndef KILN_PLUGIN_WORKER_POOL_H_
#define KILN_PLUGIN_WORKER_POOL_H_

#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  // Runs the tasks still queued, then joins.
  ~WorkerPool() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }

  // Queues `task`. REQUIRES: tasks never wait for other tasks of this pool.
  void Submit(absl::AnyInvocable<void()> task) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }

 private:
  void Work() {
    while (true) {
      absl::AnyInvocable<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](WorkerPool* p) ABSL_NO_THREAD_SAFETY_ANALYSIS { return p->stop_ || !p->queue_.empty(); },
            this));
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Tasks run on a pool; Wait returns once all have run, with the first error.
// After an error, tasks that have not started yet are skipped.
class TaskGroup {
 public:
  explicit TaskGroup(WorkerPool& pool) : pool_(pool) {}
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;
  ~TaskGroup() { Wait().IgnoreError(); }

  void Run(absl::AnyInvocable<absl::Status()> task) {
    {
      absl::MutexLock lock(&mu_);
      ++pending_;
    }
    pool_.Submit([this, task = std::move(task)]() mutable {
      bool skip;
      {
        absl::MutexLock lock(&mu_);
        skip = !first_error_.ok();
      }
      absl::Status s = skip ? absl::OkStatus() : task();
      absl::MutexLock lock(&mu_);
      if (!s.ok() && first_error_.ok()) first_error_ = std::move(s);
      --pending_;
    });
  }

  // Whether a task has failed (tasks may check it to stop early).
  bool failed() {
    absl::MutexLock lock(&mu_);
    return !first_error_.ok();
  }

  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* pending) { return *pending == 0; }, &pending_));
    return first_error_;
  }

 private:
  WorkerPool& pool_;
  absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln

#endif  // KILN_PLUGIN_WORKER_POOL_H_
