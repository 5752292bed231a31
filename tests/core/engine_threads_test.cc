// The engine from any thread, waiting for jobs, and observers after steps.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/requests.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"

namespace kiln {
namespace {

using sim::SimJobBehavior;

v1::DescribeTrainingJobRequest DescribeRequest(const std::string& name) {
  v1::DescribeTrainingJobRequest r;
  r.set_training_job_name(name);
  return r;
}

// One engine on a virtual or real-time loop with the simulated provider. On a real-time loop
// the simulated job takes `behavior`'s times in real time.
class EngineThreadsTest : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override { Build(GetParam()); }

  void Build(bool is_virtual, SimJobBehavior behavior = Quick()) {
    engine_.reset();
    channel_.reset();
    provider_.reset();
    loop_ = is_virtual ? NewVirtualEventLoop() : NewRealTimeEventLoop();
    sim::SimClusterOptions cluster_options;
    cluster_options.behavior = [behavior](std::string_view) { return behavior; };
    provider_ = sim::NewSimClusterProvider(*loop_, cluster_options);
    channel_ = sim::NewSimDataChannel(*loop_, {});
    EngineOptions options;
    options.loop = loop_.get();
    options.cluster_provider = provider_.get();
    options.data_channel = channel_.get();
    options.capacity_retry_initial = absl::Milliseconds(10);
    engine_ = NewEngine(std::move(options)).value();
  }

  // A job that ends in about 20 ms, with every timer of the engine (its MaxRuntimeInSeconds
  // above all) still far away then.
  static SimJobBehavior Quick() {
    SimJobBehavior b;
    b.provision_latency = absl::Milliseconds(5);
    b.image_preparation = absl::Milliseconds(5);
    b.run_duration = absl::Milliseconds(5);
    b.sigterm_exit_delay = absl::Milliseconds(1);
    b.upload_duration = absl::Milliseconds(5);
    return b;
  }

  void Create(const std::string& name) {
    ASSERT_TRUE(engine_->CreateTrainingJob(tests::MinimalRequest(name)).ok());
  }

  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<Engine> engine_;
};

TEST_P(EngineThreadsTest, CallsFromAnotherThreadWorkOnALoopThatNeverRan) {
  Create("a");
  std::thread([&] {
    absl::StatusOr<v1::DescribeTrainingJobResponse> d =
        engine_->DescribeTrainingJob(DescribeRequest("a"));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->training_job_status(), "InProgress");
    EXPECT_TRUE(engine_->CreateTrainingJob(tests::MinimalRequest("b")).ok());
    v1::StopTrainingJobRequest stop;
    stop.set_training_job_name("b");
    EXPECT_TRUE(engine_->StopTrainingJob(stop).ok());
  }).join();
  EXPECT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  EXPECT_EQ(engine_->DescribeTrainingJob(DescribeRequest("b"))->training_job_status(), "Stopped");
}

TEST_P(EngineThreadsTest, WaitReturnsWhenTheJobEndsNotWhenTheTimersRunOut) {
  Create("a");
  const absl::Time before = loop_->Now();
  absl::StatusOr<v1::DescribeTrainingJobResponse> d = engine_->WaitForTrainingJob("a");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->training_job_status(), "Completed");
  // The job's MaxRuntimeInSeconds timer (a day) is still pending: the loop did not run to it.
  EXPECT_LT(loop_->Now() - before, absl::Minutes(1));
  EXPECT_GT(loop_->pending_events(), 0u);
  EXPECT_EQ(engine_->active_jobs(), 0);
}

TEST_P(EngineThreadsTest, WaitForAnEndedJobReturnsAtOnceAndAnUnknownOneIsNotFound) {
  Create("a");
  ASSERT_TRUE(engine_->WaitForTrainingJob("a").ok());
  absl::StatusOr<v1::DescribeTrainingJobResponse> again = engine_->WaitForTrainingJob("a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->training_job_status(), "Completed");
  EXPECT_TRUE(absl::IsNotFound(engine_->WaitForTrainingJob("nobody").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->WaitForTrainingJob("bad name!").status()));
}

TEST_P(EngineThreadsTest, WaitUpToADeadlineOnTheLoopsClock) {
  SimJobBehavior slow = Quick();
  slow.run_duration = absl::Hours(1);
  Build(GetParam(), slow);
  Create("slow");
  const absl::Time deadline = loop_->Now() + absl::Milliseconds(50);
  absl::StatusOr<v1::DescribeTrainingJobResponse> d = engine_->WaitForTrainingJob("slow", deadline);
  EXPECT_TRUE(absl::IsDeadlineExceeded(d.status())) << d.status();
  EXPECT_GE(loop_->Now(), deadline);
  EXPECT_EQ(engine_->active_jobs(), 1);
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      engine_->WaitForAllTrainingJobs(loop_->Now() + absl::Milliseconds(10))));
}

TEST_P(EngineThreadsTest, WaitForAllWaitsForJobsCreatedMeanwhile) {
  // An observer chains three jobs, each created when the one before ends.
  struct Chainer : JobObserver {
    Engine* engine = nullptr;
    int created = 1;
    void OnStatusChange(const StatusEvent& e) override {
      if (e.status != "Completed" || created == 3) return;
      ++created;
      EXPECT_TRUE(
          engine->CreateTrainingJob(tests::MinimalRequest(absl::StrCat("job-", created))).ok());
    }
  } chainer;
  chainer.engine = engine_.get();
  engine_->AddObserver(&chainer);
  Create("job-1");
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  EXPECT_EQ(chainer.created, 3);
  EXPECT_EQ(engine_->DescribeTrainingJob(DescribeRequest("job-3"))->training_job_status(),
            "Completed");
  engine_->RemoveObserver(&chainer);
}

TEST_P(EngineThreadsTest, WaitersOnOtherThreadsSleepWhileOneThreadRunsTheLoop) {
  for (int i = 0; i < 4; ++i) Create(absl::StrCat("job-", i));
  std::vector<std::thread> waiters;
  std::atomic<int> completed{0};
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] {
      absl::StatusOr<v1::DescribeTrainingJobResponse> d =
          engine_->WaitForTrainingJob(absl::StrCat("job-", i));
      if (d.ok() && d->training_job_status() == "Completed") ++completed;
    });
  }
  // This thread runs the loop too: whoever holds it, the others wait, and each takes over
  // when the one running it returns.
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(completed, 4);
}

TEST_P(EngineThreadsTest, AWaitFromAnObserverIsRefused) {
  struct Waiting : JobObserver {
    Engine* engine = nullptr;
    absl::Status status = absl::UnknownError("not called");
    void OnStatusChange(const StatusEvent& e) override {
      if (!absl::IsUnknown(status)) return;
      status = engine->WaitForTrainingJob(e.job_name).status();
    }
  } waiting;
  waiting.engine = engine_.get();
  engine_->AddObserver(&waiting);
  Create("a");
  EXPECT_TRUE(absl::IsFailedPrecondition(waiting.status)) << waiting.status;
  EXPECT_TRUE(engine_->WaitForTrainingJob("a").ok());
  engine_->RemoveObserver(&waiting);
}

// The loop the waiter runs returns before the job ends (here its Stop(), from an
// observer at Training): the wait is Cancelled, the job runs on, and a new wait
// sees it to its end.
TEST_P(EngineThreadsTest, AWaitWhoseLoopIsStoppedIsCancelled) {
  struct Stopper : JobObserver {
    EventLoop* loop = nullptr;
    void OnStatusChange(const StatusEvent& e) override {
      if (e.secondary_status == "Training") loop->Stop();
    }
  } stopper;
  stopper.loop = loop_.get();
  engine_->AddObserver(&stopper);
  Create("a");
  const absl::Status cancelled = engine_->WaitForTrainingJob("a").status();
  EXPECT_TRUE(absl::IsCancelled(cancelled)) << cancelled;
  EXPECT_NE(cancelled.message().find("training job 'a'"), std::string::npos) << cancelled;
  engine_->RemoveObserver(&stopper);
  EXPECT_EQ(engine_->DescribeTrainingJob(DescribeRequest("a"))->training_job_status(),
            "InProgress");
  absl::StatusOr<v1::DescribeTrainingJobResponse> ended = engine_->WaitForTrainingJob("a");
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->training_job_status(), "Completed");
}

TEST_P(EngineThreadsTest, ActiveJobsInsideTheEndEventNoLongerCountsTheJob) {
  struct Counter : JobObserver {
    Engine* engine = nullptr;
    int at_end = -1;
    void OnStatusChange(const StatusEvent& e) override {
      if (e.status == "Completed") at_end = engine->active_jobs();
    }
  } counter;
  counter.engine = engine_.get();
  engine_->AddObserver(&counter);
  Create("a");
  ASSERT_TRUE(engine_->WaitForTrainingJob("a").ok());
  EXPECT_EQ(counter.at_end, 0);
  engine_->RemoveObserver(&counter);
}

TEST_P(EngineThreadsTest, AnObserverMayDeleteTheJobItHearsHasEnded) {
  struct Deleter : JobObserver {
    Engine* engine = nullptr;
    bool deletes = false;
    std::vector<std::string> heard;
    void OnStatusChange(const StatusEvent& e) override {
      heard.push_back(absl::StrCat(std::string(e.job_name), ":", std::string(e.status), "/",
                                   std::string(e.secondary_status)));
      if (!deletes || e.status != "Completed") return;
      v1::DeleteTrainingJobRequest r;
      r.set_training_job_name(std::string(e.job_name));
      EXPECT_TRUE(engine->DeleteTrainingJob(r).ok());
    }
  };
  Deleter first, second;  // the second still hears the event, with its texts whole
  first.engine = second.engine = engine_.get();
  first.deletes = true;
  engine_->AddObserver(&first);
  engine_->AddObserver(&second);
  Create("a");
  EXPECT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  ASSERT_FALSE(second.heard.empty());
  EXPECT_EQ(second.heard.back(), "a:Completed/Completed");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(DescribeRequest("a")).status()));
  engine_->RemoveObserver(&first);
  engine_->RemoveObserver(&second);
}

INSTANTIATE_TEST_SUITE_P(Loops, EngineThreadsTest, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "Virtual" : "RealTime";
                         });

}  // namespace
}  // namespace kiln
