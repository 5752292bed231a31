// Eight threads call every public method of one engine at once, for a few seconds, against a
// real-time loop that a ninth thread runs and against one that no thread runs (every call then
// takes the loop for itself). What must hold: no call hangs or crashes, every answer is one the
// contract allows, and the engine's bookkeeping adds up at the end. Built to run under
// ThreadSanitizer too, which checks that the calls share the engine's state without a race.

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/requests.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"

namespace kiln {
namespace {

constexpr int kThreads = 8;
constexpr int kNames = 24;  // names shared by the threads, so that their calls collide

// How long each configuration runs: KILN_STRESS_SECONDS, or 2 s.
absl::Duration StressTime() {
  const char* env = std::getenv("KILN_STRESS_SECONDS");
  double seconds = 2;
  if (env != nullptr) seconds = std::atof(env);
  return absl::Seconds(seconds > 0 ? seconds : 2);
}

// Counts what it hears; it checks that the engine calls it on one thread at a time.
class CountingObserver : public JobObserver {
 public:
  void OnStatusChange(const StatusEvent& e) override {
    EXPECT_FALSE(inside_.exchange(true)) << "two observer calls at once";
    if (e.status == "Completed" || e.status == "Stopped" || e.status == "Failed") ++ended_;
    inside_ = false;
  }
  int ended() const { return ended_; }

 private:
  std::atomic<bool> inside_{false};
  int ended_ = 0;  // read after the threads are joined
};

class EngineStressTest : public testing::TestWithParam<bool> {};

TEST_P(EngineStressTest, EightThreadsCallEveryMethodAtOnce) {
  const bool loop_running = GetParam();
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  sim::SimClusterOptions cluster_options;
  cluster_options.behavior = [](std::string_view) {
    sim::SimJobBehavior b;
    b.provision_latency = absl::Milliseconds(2);
    b.image_preparation = absl::Milliseconds(1);
    b.run_duration = absl::Milliseconds(5);
    b.sigterm_exit_delay = absl::Milliseconds(1);
    b.upload_duration = absl::Milliseconds(1);
    b.log_lines = {{absl::Milliseconds(1), "loss=0.5;"}};
    return b;
  };
  std::unique_ptr<ClusterProvider> provider = sim::NewSimClusterProvider(*loop, cluster_options);
  std::unique_ptr<DataChannel> channel = sim::NewSimDataChannel(*loop, {});
  EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.data_channel = channel.get();
  options.stop_grace_period = absl::Milliseconds(5);
  std::unique_ptr<Engine> engine = NewEngine(std::move(options)).value();
  CountingObserver observer;
  engine->AddObserver(&observer);
  const PreparedTrainingJob prepared =
      engine->PrepareTrainingJob(tests::MinimalRequest("template")).value();

  std::thread runner;
  if (loop_running) runner = std::thread([&] { loop->Run(); });

  std::atomic<bool> stop{false};
  std::atomic<int> created{0};
  std::atomic<int> deleted{0};
  std::atomic<int> unexpected{0};
  auto expect = [&](const absl::Status& s, std::initializer_list<absl::StatusCode> allowed,
                    const char* what) {
    if (s.ok()) return;
    for (absl::StatusCode c : allowed) {
      if (s.code() == c) return;
    }
    ADD_FAILURE() << what << ": " << s;
    ++unexpected;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (!stop.load(std::memory_order_relaxed)) {
        const std::string name = absl::StrCat("job-", rng() % kNames);
        using absl::StatusCode;
        switch (rng() % 10) {
          case 0: {
            // Half of them managed-spot jobs, which MigrateTrainingJob may move.
            v1::CreateTrainingJobRequest request = tests::MinimalRequest(name);
            if (rng() % 2 == 0) {
              request.set_enable_managed_spot_training(true);
              request.mutable_stopping_condition()->set_max_runtime_in_seconds(3600);
              request.mutable_stopping_condition()->set_max_wait_time_in_seconds(7200);
            }
            absl::Status s = engine->CreateTrainingJob(request).status();
            if (s.ok()) ++created;
            expect(s, {StatusCode::kAlreadyExists}, "CreateTrainingJob");
            break;
          }
          case 1: {
            absl::Status s = engine->CreateTrainingJob(prepared, name).status();
            if (s.ok()) ++created;
            expect(s, {StatusCode::kAlreadyExists}, "CreateTrainingJob(prepared)");
            break;
          }
          case 2: {
            v1::DescribeTrainingJobRequest r;
            r.set_training_job_name(name);
            expect(engine->DescribeTrainingJob(r).status(), {StatusCode::kNotFound},
                   "DescribeTrainingJob");
            break;
          }
          case 3: {
            v1::ListTrainingJobsRequest r;
            r.set_max_results(5);
            absl::StatusOr<v1::ListTrainingJobsResponse> page = engine->ListTrainingJobs(r);
            expect(page.status(), {}, "ListTrainingJobs");
            if (page.ok() && page->has_next_token()) {
              r.set_next_token(page->next_token());
              expect(engine->ListTrainingJobs(r).status(), {}, "ListTrainingJobs(next)");
            }
            break;
          }
          case 4: {
            v1::UpdateTrainingJobRequest r;
            r.set_training_job_name(name);
            r.mutable_profiler_config()->set_profiling_interval_in_milliseconds(1000);
            expect(engine->UpdateTrainingJob(r).status(), {StatusCode::kNotFound},
                   "UpdateTrainingJob");
            break;
          }
          case 5: {
            v1::StopTrainingJobRequest r;
            r.set_training_job_name(name);
            expect(engine->StopTrainingJob(r),
                   {StatusCode::kNotFound, StatusCode::kFailedPrecondition}, "StopTrainingJob");
            break;
          }
          case 6: {
            v1::DeleteTrainingJobRequest r;
            r.set_training_job_name(name);
            absl::Status s = engine->DeleteTrainingJob(r);
            if (s.ok()) ++deleted;
            expect(s, {StatusCode::kNotFound, StatusCode::kFailedPrecondition},
                   "DeleteTrainingJob");
            break;
          }
          case 7: {
            absl::Status s =
                engine->WaitForTrainingJob(name, loop->Now() + absl::Milliseconds(20)).status();
            expect(s, {StatusCode::kNotFound, StatusCode::kDeadlineExceeded}, "WaitForTrainingJob");
            break;
          }
          case 9: {
            expect(engine->MigrateTrainingJob(name, rng() % 2 == 0),
                   {StatusCode::kNotFound, StatusCode::kFailedPrecondition}, "MigrateTrainingJob");
            break;
          }
          case 8: {
            const int active = engine->active_jobs();
            if (active < 0 || active > kNames) {
              ADD_FAILURE() << "active_jobs() = " << active;
              ++unexpected;
            }
            break;
          }
        }
      }
    });
  }
  absl::SleepFor(StressTime());
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(engine->WaitForAllTrainingJobs(loop->Now() + absl::Seconds(30)).ok());
  if (runner.joinable()) {
    loop->Stop();
    runner.join();
  }
  EXPECT_EQ(unexpected, 0);
  EXPECT_GT(created, 0);
  EXPECT_EQ(engine->active_jobs(), 0);
  // Every job created ended once; each is either deleted or still listed.
  EXPECT_EQ(observer.ended(), created.load());
  v1::ListTrainingJobsRequest all;
  all.set_max_results(100);
  EXPECT_EQ(engine->ListTrainingJobs(all)->training_job_summaries_size(),
            created.load() - deleted.load());
  engine->RemoveObserver(&observer);
}

INSTANTIATE_TEST_SUITE_P(Loop, EngineStressTest, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "Running" : "Idle";
                         });

}  // namespace
}  // namespace kiln
