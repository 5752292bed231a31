// The engine with a journal (EngineOptions::journal), on the virtual clock:
// what it records, what a new engine on the same journal rebuilds, and how
// jobs that were running when the first engine went carry on.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/requests.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/sim/sim.h"
#include "mocks/forwarding_provider.h"
#include "mocks/memory_journal.h"

namespace kiln {
namespace {

using sim::SimJobBehavior;

// A provider that takes back the containers of an earlier engine: they run
// on for `remaining` and exit 0; their cluster uploads at once.
class ReattachingProvider : public ForwardingProvider {
 public:
  ReattachingProvider(ClusterProvider& to, EventLoop& loop)
      : ForwardingProvider(to, loop), loop_(loop) {}

  absl::Status Reattach(const JobContext& job, ContainerEvents& events) override {
    if (job.warm_pool) {
      if (!reattach_pools) return absl::FailedPreconditionError("the pool's instances are gone");
      reattached_pools.push_back(std::string(job.job_name));
      return absl::OkStatus();
    }
    reattached.push_back(std::string(job.job_name));
    cluster_id_ = job.cluster.id;
    for (const Instance& instance : job.cluster.instances) {
      loop_.ScheduleAfter(remaining,
                          [&events, instance] { events.OnExit(instance, ContainerExit()); });
    }
    return absl::OkStatus();
  }
  void UploadArtifacts(const JobContext& job, ArtifactsCallback done) override {
    if (job.cluster.id != cluster_id_)
      return ForwardingProvider::UploadArtifacts(job, std::move(done));
    loop_.Post([done = std::move(done)]() mutable { done(ArtifactsResult{"s3://bucket/out/m"}); });
  }
  void Release(const Cluster& cluster) override {
    if (crashed) {
      // A controller that crashes releases nothing: its pools' clusters stay.
      for (const Cluster& kept : recycled) {
        if (kept.id == cluster.id) return;
      }
    }
    if (cluster.id != cluster_id_) ForwardingProvider::Release(cluster);
  }

  absl::Duration remaining = absl::Minutes(3);
  std::vector<std::string> reattached;
  std::vector<std::string> reattached_pools;  // owners of the pools taken back
  bool reattach_pools = true;
  bool crashed = false;

 private:
  EventLoop& loop_;
  std::string cluster_id_;
};

class EngineJournalTest : public testing::Test {
 protected:
  void SetUp() override {
    loop_ = NewVirtualEventLoop();
    sim::SimClusterOptions cluster_options;
    cluster_options.behavior = [this](std::string_view job) {
      auto it = behaviors_.find(std::string(job));
      return it == behaviors_.end() ? SimJobBehavior() : it->second;
    };
    sim_ = sim::NewSimClusterProvider(*loop_, cluster_options);
    provider_ = std::make_unique<ReattachingProvider>(*sim_, *loop_);
    plain_ = std::make_unique<ForwardingProvider>(*sim_, *loop_);
    ASSERT_TRUE(Start().ok());
  }
  void TearDown() override { engine_.reset(); }

  // A new engine on the same journal (the earlier one is gone first), with
  // the provider that reattaches, or (`plain`) one that cannot.
  absl::Status Start(bool read_only = false, bool plain = false) {
    engine_.reset();
    journal_.set_read_only(read_only);
    EngineOptions options;
    options.loop = loop_.get();
    options.cluster_provider = read_only ? nullptr
                               : plain   ? static_cast<ClusterProvider*>(plain_.get())
                                         : provider_.get();
    options.journal = &journal_;
    absl::StatusOr<std::unique_ptr<Engine>> engine = NewEngine(std::move(options));
    if (!engine.ok()) return engine.status();
    engine_ = *std::move(engine);
    return absl::OkStatus();
  }

  v1::DescribeTrainingJobResponse Describe(const std::string& name) {
    v1::DescribeTrainingJobRequest r;
    r.set_training_job_name(name);
    return engine_->DescribeTrainingJob(r).value();
  }
  std::string DescribeJson(const std::string& name) { return ToJson(Describe(name)); }
  std::string ListJson() {
    v1::ListTrainingJobsRequest r;
    r.set_max_results(100);
    return ToJson(engine_->ListTrainingJobs(r).value());
  }
  void Create(const v1::CreateTrainingJobRequest& request) {
    ASSERT_TRUE(engine_->CreateTrainingJob(request).ok());
  }
  // Ends the engine as a crash would (its pools' clusters are not released)
  // and starts a new one on the same journal, as Start does.
  absl::Status Restart(bool plain = false) {
    provider_->crashed = true;
    engine_.reset();
    provider_->crashed = false;
    return Start(/*read_only=*/false, plain);
  }
  static v1::CreateTrainingJobRequest Pooled(const std::string& name, int keep_alive_seconds) {
    v1::CreateTrainingJobRequest r = tests::MinimalRequest(name);
    r.mutable_resource_config()->set_keep_alive_period_in_seconds(keep_alive_seconds);
    return r;
  }
  // Runs the loop until `when` after now.
  void RunFor(absl::Duration d) { loop_->RunUntil(loop_->Now() + d); }

  std::unique_ptr<EventLoop> loop_;
  std::map<std::string, SimJobBehavior> behaviors_;
  std::unique_ptr<ClusterProvider> sim_;
  std::unique_ptr<ReattachingProvider> provider_;
  std::unique_ptr<ForwardingProvider> plain_;
  MemoryJournal journal_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineJournalTest, EndedJobsAreDescribedAndListedAsBeforeTheRestart) {
  v1::CreateTrainingJobRequest done = tests::MinimalRequest("done");
  auto* metric = done.mutable_algorithm_specification()->add_metric_definitions();
  metric->set_name("loss");
  metric->set_regex("loss=([0-9.]+)");
  behaviors_["done"].log_lines = {{absl::Seconds(30), "loss=0.25"}};
  behaviors_["broken"].exit_code = 3;
  behaviors_["broken"].failure_text = "bad input";
  behaviors_["stopped"].run_duration = absl::Hours(5);
  Create(done);
  Create(tests::MinimalRequest("broken"));
  Create(tests::MinimalRequest("stopped"));
  RunFor(absl::Minutes(5));
  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("stopped");
  ASSERT_TRUE(engine_->StopTrainingJob(stop).ok());
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  ASSERT_EQ(Describe("done").final_metric_data_list_size(), 1);
  ASSERT_EQ(Describe("broken").training_job_status(), "Failed");
  ASSERT_EQ(Describe("stopped").training_job_status(), "Stopped");
  std::map<std::string, std::string> before;
  for (const char* name : {"done", "broken", "stopped"}) before[name] = DescribeJson(name);
  const std::string list_before = ListJson();

  RunFor(absl::Hours(1));
  ASSERT_TRUE(Start().ok());
  for (const auto& [name, json] : before) EXPECT_EQ(DescribeJson(name), json) << name;
  EXPECT_EQ(ListJson(), list_before);
  EXPECT_EQ(engine_->active_jobs(), 0);
  // A name that exists is refused as before.
  absl::StatusOr<v1::CreateTrainingJobResponse> again =
      engine_->CreateTrainingJob(tests::MinimalRequest("done"));
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
}

TEST_F(EngineJournalTest, NewJobsAfterTheRestartListAfterTheRecoveredOnes) {
  Create(tests::MinimalRequest("first"));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  ASSERT_TRUE(Start().ok());
  Create(tests::MinimalRequest("second"));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  v1::ListTrainingJobsRequest r;
  const v1::ListTrainingJobsResponse list = engine_->ListTrainingJobs(r).value();
  ASSERT_EQ(list.training_job_summaries_size(), 2);
  EXPECT_EQ(list.training_job_summaries(0).training_job_name(), "first");
  EXPECT_EQ(list.training_job_summaries(1).training_job_name(), "second");
  EXPECT_EQ(list.training_job_summaries(1).training_job_status(), "Completed");
}

TEST_F(EngineJournalTest, RunningJobWithoutRetryStrategyFailsSayingTheControllerRestarted) {
  behaviors_["long"].run_duration = absl::Hours(2);
  Create(tests::MinimalRequest("long"));
  RunFor(absl::Minutes(30));
  ASSERT_EQ(Describe("long").secondary_status(), "Training");
  ASSERT_TRUE(Start(/*read_only=*/false, /*plain=*/true).ok());
  EXPECT_EQ(engine_->active_jobs(), 1);
  const v1::DescribeTrainingJobResponse ended = engine_->WaitForTrainingJob("long").value();
  EXPECT_EQ(ended.training_job_status(), "Failed");
  EXPECT_NE(ended.failure_reason().find("the controller restarted"), std::string::npos)
      << ended.failure_reason();
  EXPECT_NE(ended.failure_reason().find("were lost"), std::string::npos) << ended.failure_reason();
  // Billed for the instance time held before the restart (30 min less provisioning).
  EXPECT_GE(ended.billable_time_in_seconds(), 25 * 60);
}

TEST_F(EngineJournalTest, RunningJobWithRetryStrategyStartsAgainAndCompletes) {
  v1::CreateTrainingJobRequest request = tests::MinimalRequest("retried");
  request.mutable_retry_strategy()->set_maximum_retry_attempts(1);
  behaviors_["retried"].run_duration = absl::Hours(1);
  Create(request);
  RunFor(absl::Minutes(20));
  const int started = plain_->containers_started;
  ASSERT_TRUE(Start(/*read_only=*/false, /*plain=*/true).ok());
  const v1::DescribeTrainingJobResponse ended = engine_->WaitForTrainingJob("retried").value();
  EXPECT_EQ(ended.training_job_status(), "Completed") << ended.failure_reason();
  bool restarted = false;
  for (const auto& t : ended.secondary_status_transitions()) {
    if (t.status_message().find("The controller restarted and the instances were lost") !=
        std::string::npos) {
      restarted = true;
    }
  }
  EXPECT_TRUE(restarted) << ToJson(ended);
  // Started once after the restart: never two attempts at once.
  EXPECT_EQ(plain_->containers_started, started + 1);
}

TEST_F(EngineJournalTest, ProviderThatReattachesLetsTheJobCompleteWithoutAnotherAttempt) {
  behaviors_["kept"].run_duration = absl::Hours(2);
  Create(tests::MinimalRequest("kept"));
  RunFor(absl::Minutes(30));
  const int started = provider_->containers_started;
  ASSERT_TRUE(Start().ok());
  const v1::DescribeTrainingJobResponse ended = engine_->WaitForTrainingJob("kept").value();
  EXPECT_EQ(ended.training_job_status(), "Completed") << ended.failure_reason();
  EXPECT_EQ(provider_->reattached, std::vector<std::string>{"kept"});
  EXPECT_EQ(provider_->containers_started, started);
  // Billed from the first attempt's start to the end: about 30 + 3 minutes.
  EXPECT_GE(ended.billable_time_in_seconds(), 30 * 60);
  EXPECT_LE(ended.billable_time_in_seconds(), 35 * 60);
}

TEST_F(EngineJournalTest, StoppingJobEndsStoppedAfterTheRestart) {
  behaviors_["halting"].run_duration = absl::Hours(2);
  behaviors_["halting"].sigterm_exit_delay = absl::InfiniteDuration();
  Create(tests::MinimalRequest("halting"));
  RunFor(absl::Minutes(10));
  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("halting");
  ASSERT_TRUE(engine_->StopTrainingJob(stop).ok());
  RunFor(absl::Seconds(10));
  ASSERT_EQ(Describe("halting").training_job_status(), "Stopping");
  ASSERT_TRUE(Start(/*read_only=*/false, /*plain=*/true).ok());
  const v1::DescribeTrainingJobResponse ended = engine_->WaitForTrainingJob("halting").value();
  EXPECT_EQ(ended.training_job_status(), "Stopped");
  EXPECT_EQ(ended.secondary_status(), "Stopped");
}

TEST_F(EngineJournalTest, DeletedJobIsGoneAfterTheRestart) {
  Create(tests::MinimalRequest("gone"));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  v1::DeleteTrainingJobRequest del;
  del.set_training_job_name("gone");
  ASSERT_TRUE(engine_->DeleteTrainingJob(del).ok());
  ASSERT_TRUE(Start().ok());
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("gone");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status()));
  EXPECT_EQ(journal_.size(), 0u);
}

TEST_F(EngineJournalTest, CreateFailsAndTheJobFailsWhenTheJournalCannotWrite) {
  journal_.Fail(absl::ResourceExhaustedError("journal /x/journal.sqlite: disk full"));
  absl::StatusOr<v1::CreateTrainingJobResponse> created =
      engine_->CreateTrainingJob(tests::MinimalRequest("unrecorded"));
  EXPECT_TRUE(absl::IsResourceExhausted(created.status())) << created.status();
  const v1::DescribeTrainingJobResponse d = Describe("unrecorded");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_NE(d.failure_reason().find("the journal could not record the job"), std::string::npos);
  EXPECT_EQ(engine_->active_jobs(), 0);
}

TEST_F(EngineJournalTest, CallsFromInsideTheLoopDoNotWaitForTheJournal) {
  Create(tests::MinimalRequest("outside"));
  EXPECT_EQ(journal_.waits, 1);
  bool created = false;
  loop_->ScheduleAfter(absl::Seconds(1), [&] {
    created = engine_->CreateTrainingJob(tests::MinimalRequest("inside")).ok();
  });
  RunFor(absl::Seconds(2));
  EXPECT_TRUE(created);
  EXPECT_EQ(journal_.waits, 1);
}

TEST_F(EngineJournalTest, ReadOnlyJournalShowsJobsAndRefusesChanges) {
  behaviors_["running"].run_duration = absl::Hours(2);
  Create(tests::MinimalRequest("running"));
  RunFor(absl::Minutes(10));
  const std::string before = DescribeJson("running");
  ASSERT_TRUE(Start(/*read_only=*/true).ok());
  EXPECT_EQ(DescribeJson("running"), before);
  EXPECT_EQ(engine_->active_jobs(), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      engine_->CreateTrainingJob(tests::MinimalRequest("new")).status()));
  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("running");
  EXPECT_TRUE(absl::IsFailedPrecondition(engine_->StopTrainingJob(stop)));
}

TEST_F(EngineJournalTest, JournalThatCannotBeReadFailsNewEngine) {
  Create(tests::MinimalRequest("job"));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  engine_.reset();
  // A record an engine cannot rebuild: an unknown status.
  JobRecord bad = *journal_.Find(1);
  bad.status = "Exploded";
  journal_.Append(std::move(bad));
  absl::Status started = Start();
  EXPECT_TRUE(absl::IsDataLoss(started)) << started;
  EXPECT_NE(started.message().find("Exploded"), std::string::npos);
}

TEST_F(EngineJournalTest, JobsWithWarmPoolsAreDescribedAsBeforeTheRestart) {
  Create(Pooled("first", 600));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  RunFor(absl::Minutes(2));
  Create(Pooled("reuser", 3600));  // takes first's pool
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  v1::CreateTrainingJobRequest other = Pooled("brief", 60);
  other.mutable_resource_config()->set_instance_count(2);
  Create(other);
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  RunFor(absl::Minutes(2));  // brief's pool expires
  ASSERT_EQ(Describe("first").warm_pool_status().status(), "Reused");
  ASSERT_EQ(Describe("reuser").warm_pool_status().status(), "Available");
  ASSERT_EQ(Describe("brief").warm_pool_status().status(), "Terminated");
  ASSERT_EQ(Describe("brief").warm_pool_status().resource_retained_billable_time_in_seconds(), 60);
  std::map<std::string, std::string> before;
  for (const char* name : {"first", "reuser", "brief"}) before[name] = DescribeJson(name);
  const std::string list_before = ListJson();

  ASSERT_TRUE(Restart().ok());
  for (const auto& [name, json] : before) EXPECT_EQ(DescribeJson(name), json) << name;
  EXPECT_EQ(ListJson(), list_before);
  EXPECT_EQ(provider_->reattached_pools, std::vector<std::string>{"reuser"});
}

TEST_F(EngineJournalTest, AvailablePoolSurvivesTheRestartAndIsReused) {
  Create(Pooled("first", 600));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  RunFor(absl::Minutes(2));
  ASSERT_TRUE(Restart().ok());
  RunFor(absl::Minutes(3));
  EXPECT_EQ(Describe("first").warm_pool_status().status(), "Available");
  EXPECT_EQ(provider_->reattached_pools, std::vector<std::string>{"first"});

  const int started = provider_->containers_started;
  const size_t recycled = provider_->recycled.size();
  Create(Pooled("second", 600));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  const v1::DescribeTrainingJobResponse first = Describe("first");
  EXPECT_EQ(first.warm_pool_status().status(), "Reused");
  EXPECT_EQ(first.warm_pool_status().reused_by_job(), "second");
  // Billed for the time it was Available, across the restart.
  EXPECT_EQ(first.warm_pool_status().resource_retained_billable_time_in_seconds(), 5 * 60);
  EXPECT_EQ(Describe("second").training_job_status(), "Completed");
  EXPECT_EQ(provider_->containers_started, started + 1);
  // The second job ran on the first's cluster, which the pool then kept again.
  ASSERT_EQ(provider_->recycled.size(), recycled + 1);
  EXPECT_EQ(provider_->recycled.back().id, provider_->recycled.front().id);
  EXPECT_EQ(Describe("second").warm_pool_status().status(), "Available");
}

TEST_F(EngineJournalTest, PoolWhoseKeepAliveRanOutDuringTheOutageIsBilledToItsEnd) {
  Create(Pooled("expired", 300));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  RunFor(absl::Minutes(1));
  provider_->crashed = true;
  engine_.reset();
  provider_->crashed = false;
  RunFor(absl::Minutes(30));  // no controller runs
  ASSERT_TRUE(Start().ok());
  const v1::WarmPoolStatus pool = Describe("expired").warm_pool_status();
  EXPECT_EQ(pool.status(), "Terminated");
  EXPECT_EQ(pool.resource_retained_billable_time_in_seconds(), 300);
  // Recorded so: the next engine shows the same.
  ASSERT_TRUE(Start().ok());
  EXPECT_EQ(Describe("expired").warm_pool_status().resource_retained_billable_time_in_seconds(),
            300);
}

TEST_F(EngineJournalTest, PoolWhoseClusterCannotBeTakenBackEndsTerminatedAtTheRestart) {
  Create(Pooled("lost", 600));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  RunFor(absl::Minutes(2));
  provider_->reattach_pools = false;
  ASSERT_TRUE(Restart().ok());
  const v1::WarmPoolStatus pool = Describe("lost").warm_pool_status();
  EXPECT_EQ(pool.status(), "Terminated");
  EXPECT_EQ(pool.resource_retained_billable_time_in_seconds(), 120);
  // A later matching job provisions a cluster of its own.
  Create(Pooled("later", 600));
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  EXPECT_EQ(Describe("lost").warm_pool_status().status(), "Terminated");
  EXPECT_FALSE(Describe("lost").warm_pool_status().has_reused_by_job());
}

TEST_F(EngineJournalTest, LostAttemptIsBilledUntilItsLastBillingMark) {
  behaviors_["long"].run_duration = absl::Hours(2);
  Create(tests::MinimalRequest("long"));
  RunFor(absl::Minutes(30) + absl::Seconds(7));
  const JobRecord* record = journal_.Find(1);
  ASSERT_NE(record, nullptr);
  const absl::Time held_since = record->held_since;
  ASSERT_NE(held_since, absl::InfinitePast());
  const absl::Time crash = loop_->Now();
  // Marked within the last period, long after the record was made.
  EXPECT_GT(journal_.mark(), crash - journal_.billing_mark_period());
  EXPECT_LE(journal_.mark(), crash);
  EXPECT_LT(record->held_until, crash - absl::Minutes(20));
  engine_.reset();
  RunFor(absl::Hours(1));  // no controller runs
  ASSERT_TRUE(Start(/*read_only=*/false, /*plain=*/true).ok());
  const v1::DescribeTrainingJobResponse ended = engine_->WaitForTrainingJob("long").value();
  ASSERT_EQ(ended.training_job_status(), "Failed");
  // Billed to the last mark: within one period of the crash, never past it.
  const int64_t held = absl::ToInt64Seconds(absl::Ceil(crash - held_since, absl::Seconds(1)));
  EXPECT_LE(ended.billable_time_in_seconds(), held);
  EXPECT_GE(ended.billable_time_in_seconds(),
            held - absl::ToInt64Seconds(journal_.billing_mark_period()));
}

TEST_F(EngineJournalTest, OneBillingMarkPerPeriodForAllTheJobsHoldingInstances) {
  for (const char* name : {"a", "b", "c"}) {
    behaviors_[name].run_duration = absl::Hours(1);
    Create(tests::MinimalRequest(name));
  }
  RunFor(absl::Minutes(5));
  const int appended = journal_.appended;
  const int marks = journal_.marks;
  RunFor(absl::Seconds(60));
  EXPECT_EQ(journal_.marks - marks, 6);
  EXPECT_EQ(journal_.appended, appended);  // nothing else changed meanwhile
  ASSERT_TRUE(engine_->WaitForAllTrainingJobs().ok());
  // None once no instances are held.
  const int after = journal_.marks;
  RunFor(absl::Minutes(5));
  EXPECT_EQ(journal_.marks, after);
}

}  // namespace
}  // namespace kiln
