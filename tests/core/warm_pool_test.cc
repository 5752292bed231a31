// Managed warm pools through the engine, in virtual time.
//
// Sim defaults: provisioning 60 s, image 30 s, run 600 s, upload 5 s, so a cold
// job created at t ends at t + 695 and a warm one (no provisioning, image
// cached) at t + 605.
#include "kiln/warm_pool.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kiln/data_channel.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"
#include "mocks/forwarding_provider.h"

namespace kiln {
namespace {

// Delivers nothing: every channel fails after 10 s (a client error).
class FailingChannel : public DataChannel {
 public:
  explicit FailingChannel(EventLoop& loop) : loop_(loop) {}
  void Deliver(const ChannelDelivery&, DoneCallback done) override {
    loop_.ScheduleAfter(absl::Seconds(10), [done = std::move(done)]() mutable {
      done(absl::NotFoundError("s3://bucket/data/: no such prefix"));
    });
  }

 private:
  EventLoop& loop_;
};

class WarmPoolTest : public testing::Test {
 protected:
  void SetUp() override { Build({}); }

  void Build(WarmPoolOptions options) {
    engine_.reset();
    channel_.reset();
    forward_.reset();
    provider_.reset();  // before its loop
    loop_ = NewVirtualEventLoop();
    start_ = loop_->Now();
    sim::SimClusterOptions sim_options;
    sim_options.behavior = [this](std::string_view job) {
      auto it = behaviors_.find(std::string(job));
      return it == behaviors_.end() ? sim::SimJobBehavior() : it->second;
    };
    provider_ = sim::NewSimClusterProvider(*loop_, sim_options);
    forward_ = std::make_unique<ForwardingProvider>(*provider_, *loop_);
    channel_ = std::make_unique<FailingChannel>(*loop_);
    EngineOptions engine_options;
    engine_options.loop = loop_.get();
    engine_options.cluster_provider = forward_.get();
    engine_options.data_channel = channel_.get();
    engine_options.warm_pools = std::move(options);
    engine_options.warm_pool_manager = manager_;
    engine_ = NewEngine(std::move(engine_options)).value();
  }

  static v1::CreateTrainingJobRequest Request(const std::string& name, int keep_alive = 600) {
    v1::CreateTrainingJobRequest r;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
        R"pb(
          role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
          algorithm_specification { training_image: "train:1" training_input_mode: "File" }
          output_data_config { s3_output_path: "s3://bucket/out" }
          resource_config { instance_type: "ml.m5.xlarge" instance_count: 2 volume_size_in_gb: 30 }
        )pb",
        &r));
    r.set_training_job_name(name);
    if (keep_alive >= 0) r.mutable_resource_config()->set_keep_alive_period_in_seconds(keep_alive);
    return r;
  }

  void CreateAt(int64_t second, const v1::CreateTrainingJobRequest& r) {
    loop_->RunUntil(start_ + absl::Seconds(second));
    auto created = engine_->CreateTrainingJob(r);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  void RunUntil(int64_t second) { loop_->RunUntil(start_ + absl::Seconds(second)); }

  v1::DescribeTrainingJobResponse Describe(const std::string& name) {
    v1::DescribeTrainingJobRequest r;
    r.set_training_job_name(name);
    auto d = engine_->DescribeTrainingJob(r);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : v1::DescribeTrainingJobResponse();
  }

  // "Available", "Reused by b after 105 s", "Terminated after 600 s", "none".
  std::string Pool(const std::string& name) {
    const auto d = Describe(name);
    if (!d.has_warm_pool_status()) return "none";
    const auto& w = d.warm_pool_status();
    std::string out = w.status();
    if (w.has_reused_by_job()) absl::StrAppend(&out, " by ", w.reused_by_job());
    if (w.has_resource_retained_billable_time_in_seconds()) {
      absl::StrAppend(&out, " after ", w.resource_retained_billable_time_in_seconds(), " s");
    }
    return out;
  }

  int64_t Offset(const google::protobuf::Timestamp& t) const {
    return absl::ToInt64Seconds(absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()) -
                                start_);
  }

  // Seconds from creation to the Training status: the job's start-up time.
  int64_t Startup(const std::string& name) {
    const auto d = Describe(name);
    for (const auto& t : d.secondary_status_transitions()) {
      if (t.status() == "Training") return Offset(t.start_time()) - Offset(d.creation_time());
    }
    return -1;
  }

  absl::Status Update(const std::string& name, int keep_alive) {
    v1::UpdateTrainingJobRequest u;
    u.set_training_job_name(name);
    u.mutable_resource_config()->set_keep_alive_period_in_seconds(keep_alive);
    return engine_->UpdateTrainingJob(u).status();
  }

  std::map<std::string, sim::SimJobBehavior> behaviors_;
  WarmPoolManager* manager_ = nullptr;  // the engine's own when null
  std::unique_ptr<EventLoop> loop_;
  absl::Time start_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<ForwardingProvider> forward_;  // what the engine calls
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(WarmPoolTest, JobWithoutKeepAliveHasNoWarmPoolStatus) {
  CreateAt(0, Request("a", -1));
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("a"), "none");
}

TEST_F(WarmPoolTest, PoolIsInUseThenAvailableThenTerminatedWithRetainedTime) {
  CreateAt(0, Request("a"));
  EXPECT_EQ(Pool("a"), "InUse");
  RunUntil(695);
  EXPECT_EQ(Describe("a").training_job_status(), "Completed");
  EXPECT_EQ(Pool("a"), "Available");  // no retained time until final
  RunUntil(1294);
  EXPECT_EQ(Pool("a"), "Available");
  RunUntil(1295);
  EXPECT_EQ(Pool("a"), "Terminated after 600 s");
}

TEST_F(WarmPoolTest, MatchingJobReusesThePoolAndStartsWithoutProvisioning) {
  CreateAt(0, Request("a"));
  CreateAt(800, Request("b", 300));
  EXPECT_EQ(Pool("a"), "Reused by b after 105 s");
  EXPECT_EQ(Pool("b"), "InUse");
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("a"), 90);  // provisioning 60 s + image 30 s
  EXPECT_EQ(Startup("b"), 0);   // neither
  const auto b = Describe("b");
  EXPECT_EQ(Offset(b.training_end_time()), 1405);
  EXPECT_EQ(b.billable_time_in_seconds(), 605);
  // b's own keep-alive (300 s) applies to the pool it carries on.
  EXPECT_EQ(Pool("b"), "Terminated after 300 s");
}

TEST_F(WarmPoolTest, JobArrivingAtTheExpiryInstantStartsCold) {
  CreateAt(0, Request("a"));
  CreateAt(1295, Request("b"));  // a's pool is Available during [695, 1295)
  EXPECT_EQ(Pool("a"), "Terminated after 600 s");
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("b"), 90);
}

TEST_F(WarmPoolTest, ExpiryInstantWinsWhateverTheEventOrder) {
  CreateAt(0, Request("a"));
  // This event was scheduled before the pool's expiry timer, so at 1295 it
  // runs first: the half-open window, not event order, refuses the pool.
  loop_->ScheduleAt(start_ + absl::Seconds(1295),
                    [this] { ASSERT_TRUE(engine_->CreateTrainingJob(Request("b")).ok()); });
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("a"), "Terminated after 600 s");
  EXPECT_EQ(Startup("b"), 90);
}

TEST_F(WarmPoolTest, JobArrivingJustBeforeExpiryGetsThePool) {
  CreateAt(0, Request("a"));
  loop_->RunUntil(start_ + absl::Seconds(1295) - absl::Nanoseconds(1));
  ASSERT_TRUE(engine_->CreateTrainingJob(Request("b")).ok());
  EXPECT_EQ(Pool("a"), "Reused by b after 600 s");  // 599.999999999 s, rounded up
}

TEST_F(WarmPoolTest, ChainOfFiveJobsEachReusingThePrevious) {
  // Each job is created 100 s after the previous one ended.
  int64_t t = 0;
  for (int i = 1; i <= 5; ++i) {
    CreateAt(t, Request(absl::StrCat("j", i)));
    t += (i == 1 ? 695 : 605) + 100;
  }
  loop_->RunUntilIdle();
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(Pool(absl::StrCat("j", i)), absl::StrCat("Reused by j", i + 1, " after 100 s"));
  }
  EXPECT_EQ(Pool("j5"), "Terminated after 600 s");
  EXPECT_EQ(Startup("j1"), 90);
  for (int i = 2; i <= 5; ++i) EXPECT_EQ(Startup(absl::StrCat("j", i)), 0);
}

TEST_F(WarmPoolTest, TwoConcurrentMatchingJobsTakeOnePoolAndMakeASecond) {
  CreateAt(0, Request("a"));
  CreateAt(700, Request("b"));
  CreateAt(700, Request("c"));
  EXPECT_EQ(Pool("a"), "Reused by b after 5 s");
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("b"), 0);
  EXPECT_EQ(Startup("c"), 90);
  // Both became pools of their own and expired.
  EXPECT_EQ(Pool("b"), "Terminated after 600 s");
  EXPECT_EQ(Pool("c"), "Terminated after 600 s");
}

TEST_F(WarmPoolTest, NewestPoolIsTakenWhenSeveralMatch) {
  CreateAt(0, Request("a"));
  CreateAt(100, Request("b"));  // both cold (a's cluster is busy)
  CreateAt(900, Request("c"));  // a Available since 695, b since 795
  EXPECT_EQ(Pool("b"), "Reused by c after 105 s");
  EXPECT_EQ(Pool("a"), "Available");
}

TEST_F(WarmPoolTest, OfPoolsAvailableSinceTheSameTimeTheOlderIsTaken) {
  CreateAt(0, Request("a"));
  CreateAt(0, Request("b"));    // both Available at 695, a's pool first
  CreateAt(800, Request("c"));
  EXPECT_EQ(Pool("a"), "Reused by c after 105 s");
  EXPECT_EQ(Pool("b"), "Available");
}

TEST_F(WarmPoolTest, AShapeForgottenWithItsLastJobMatchesAgainLater) {
  CreateAt(0, Request("a", /*keep_alive=*/60));
  RunUntil(800);  // a's pool expired at 755
  EXPECT_EQ(Pool("a"), "Terminated after 60 s");
  v1::DeleteTrainingJobRequest del;
  del.set_training_job_name("a");
  ASSERT_TRUE(engine_->DeleteTrainingJob(del).ok());  // no job has the shape now
  CreateAt(900, Request("b"));   // cold: nothing to reuse
  CreateAt(1700, Request("c"));  // b Available since 1595
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("b"), 90);
  EXPECT_EQ(Startup("c"), 0);
  EXPECT_EQ(Pool("b"), "Reused by c after 105 s");
}

TEST_F(WarmPoolTest, AnExpiredPoolLeavesTheNewerOnesOfItsShapeFindable) {
  CreateAt(0, Request("a", /*keep_alive=*/60));  // Available 695, expires 755
  CreateAt(100, Request("b"));                   // Available 795
  CreateAt(200, Request("c", /*keep_alive=*/60));  // Available 895, expires 955
  CreateAt(1000, Request("d"));
  EXPECT_EQ(Pool("a"), "Terminated after 60 s");
  EXPECT_EQ(Pool("c"), "Terminated after 60 s");
  EXPECT_EQ(Pool("b"), "Reused by d after 205 s");
}

TEST_F(WarmPoolTest, AnotherRoleNeverGetsThePool) {
  CreateAt(0, Request("a"));
  auto other = Request("b");
  other.set_role_arn("arn:aws:iam::123456789012:role/OtherTeam");
  CreateAt(800, other);
  EXPECT_EQ(Pool("a"), "Available");
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("b"), 90);
}

// The manager remembers the shape it built last, for jobs that take no part
// (they intern none): each job must still get its own shape.
TEST_F(WarmPoolTest, AShapeBuiltForAJobThatTakesNoPartIsNotAnotherJobs) {
  auto other_role = [](const std::string& name, int keep_alive) {
    auto r = Request(name, keep_alive);
    r.set_role_arn("arn:aws:iam::123456789012:role/OtherTeam");
    return r;
  };
  CreateAt(0, other_role("x", -1));  // no part: its shape is only remembered
  CreateAt(0, Request("a"));
  CreateAt(800, other_role("y", 600));
  CreateAt(801, Request("b"));
  EXPECT_EQ(Pool("x"), "none");
  EXPECT_EQ(Pool("a"), "Reused by b after 106 s");
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("y"), 90);  // cold: a's pool is of another role
  EXPECT_EQ(Startup("b"), 0);
}

TEST_F(WarmPoolTest, EachMatchingCriterionChangedAlonePreventsReuse) {
  const std::vector<std::pair<std::string, std::function<void(v1::CreateTrainingJobRequest&)>>>
      changes = {
          {"role", [](auto& r) { r.set_role_arn("arn:aws:iam::123456789012:role/Other"); }},
          {"type",
           [](auto& r) { r.mutable_resource_config()->set_instance_type("ml.m5.2xlarge"); }},
          {"count", [](auto& r) { r.mutable_resource_config()->set_instance_count(3); }},
          {"volume", [](auto& r) { r.mutable_resource_config()->set_volume_size_in_gb(31); }},
          {"kms", [](auto& r) { r.mutable_resource_config()->set_volume_kms_key_id("key-1"); }},
          {"subnets",
           [](auto& r) {
             r.mutable_vpc_config()->add_subnets("subnet-2");
             r.mutable_vpc_config()->add_security_group_ids("sg-1");
           }},
          {"groups",
           [](auto& r) {
             r.mutable_vpc_config()->add_subnets("subnet-1");
             r.mutable_vpc_config()->add_security_group_ids("sg-2");
           }},
          {"encryption", [](auto& r) { r.set_enable_inter_container_traffic_encryption(true); }},
          {"isolation", [](auto& r) { r.set_enable_network_isolation(true); }},
      };
  for (const auto& [what, change] : changes) {
    SCOPED_TRACE(what);
    Build({});
    auto base = Request("a");
    base.mutable_vpc_config()->add_subnets("subnet-1");
    base.mutable_vpc_config()->add_security_group_ids("sg-1");
    if (what == "subnets" || what == "groups") base.clear_vpc_config();
    CreateAt(0, base);
    auto changed = what == "subnets" || what == "groups" ? Request("b") : base;
    changed.set_training_job_name("b");
    change(changed);
    CreateAt(800, changed);
    EXPECT_EQ(Pool("a"), "Available");
  }
  // And with nothing changed (VPC lists in another order), it is reused.
  Build({});
  auto base = Request("a");
  base.mutable_vpc_config()->add_subnets("subnet-1");
  base.mutable_vpc_config()->add_subnets("subnet-2");
  base.mutable_vpc_config()->add_security_group_ids("sg-1");
  CreateAt(0, base);
  auto same = base;
  same.set_training_job_name("b");
  same.mutable_vpc_config()->clear_subnets();
  same.mutable_vpc_config()->add_subnets("subnet-2");
  same.mutable_vpc_config()->add_subnets("subnet-1");
  same.mutable_hyper_parameters()->insert({"lr", "0.2"});  // may differ
  same.mutable_algorithm_specification()->set_training_image("train:2");  // may differ
  CreateAt(800, same);
  EXPECT_EQ(Pool("a"), "Reused by b after 105 s");
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("b"), 30);  // no provisioning, but the new image is fetched
  // The other way round: the first job's lists out of order, the second's
  // sorted (the manager then compares the request itself with the shape).
  Build({});
  CreateAt(0, same);
  base.set_training_job_name("c");
  CreateAt(800, base);
  EXPECT_EQ(Pool("b"), "Reused by c after 105 s");
}

// VpcConfig's lists are compared as sets: a subnet or group named twice is
// the same set as one naming it once, whichever job's list is sorted.
TEST_F(WarmPoolTest, VpcListsWithARepeatedEntryMatchAsSets) {
  auto once = Request("a");
  once.mutable_vpc_config()->add_subnets("subnet-1");
  once.mutable_vpc_config()->add_subnets("subnet-2");
  once.mutable_vpc_config()->add_security_group_ids("sg-1");
  auto twice = once;
  twice.set_training_job_name("b");
  twice.mutable_vpc_config()->add_subnets("subnet-2");  // sorted, with a repeat
  twice.mutable_vpc_config()->add_security_group_ids("sg-1");
  CreateAt(0, once);
  CreateAt(800, twice);
  EXPECT_EQ(Pool("a"), "Reused by b after 105 s");
  // The other way round, and with the repeat out of order.
  Build({});
  twice.mutable_vpc_config()->add_subnets("subnet-1");
  twice.set_training_job_name("c");
  CreateAt(0, twice);
  once.set_training_job_name("d");
  CreateAt(800, once);
  EXPECT_EQ(Pool("c"), "Reused by d after 105 s");
}

TEST_F(WarmPoolTest, ReusingJobWithoutKeepAliveDoesNotTakeThePool) {
  CreateAt(0, Request("a"));
  CreateAt(800, Request("b", -1));
  EXPECT_EQ(Pool("a"), "Available");
  EXPECT_EQ(Pool("b"), "none");
}

TEST_F(WarmPoolTest, AlgorithmErrorKeepsThePoolAndStoppedAfterLaunchToo) {
  sim::SimJobBehavior fails;
  fails.exit_code = 1;
  behaviors_["a"] = fails;
  CreateAt(0, Request("a"));
  CreateAt(0, Request("b"));
  RunUntil(200);
  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("b");
  ASSERT_TRUE(engine_->StopTrainingJob(stop).ok());
  RunUntil(700);
  EXPECT_EQ(Describe("a").training_job_status(), "Failed");
  EXPECT_EQ(Pool("a"), "Available");
  EXPECT_EQ(Describe("b").training_job_status(), "Stopped");
  EXPECT_EQ(Pool("b"), "Available");
}

// The contract (4.3): a pool is kept after an algorithm or a client error.
TEST_F(WarmPoolTest, ClientErrorKeepsThePool) {
  v1::CreateTrainingJobRequest r = Request("a");
  v1::Channel* c = r.add_input_data_config();
  c->set_channel_name("train");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://bucket/data/");
  CreateAt(0, r);
  RunUntil(200);
  const auto d = Describe("a");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_EQ(d.failure_reason(), "ClientError: s3://bucket/data/: no such prefix");
  EXPECT_EQ(Pool("a"), "Available");
}

// An instance lost while the pool waits makes it unhealthy: it ends at once,
// billed until then, and the next matching job starts cold.
TEST_F(WarmPoolTest, APoolThatLosesAnInstanceEndsAndIsNotReused) {
  CreateAt(0, Request("a"));
  RunUntil(800);
  ASSERT_EQ(Pool("a"), "Available");
  ASSERT_EQ(forward_->recycled.size(), 1u);
  ASSERT_TRUE(provider_
                  ->InjectInterruption(forward_->recycled[0].instances[1].id,
                                       InterruptionKind::kInstanceLoss, absl::ZeroDuration())
                  .ok());
  RunUntil(810);
  EXPECT_EQ(Pool("a"), "Terminated after 105 s");
  CreateAt(900, Request("b"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("b").training_job_status(), "Completed");
  EXPECT_EQ(Startup("b"), 90);  // provisioned (60 s) and prepared (30 s) anew
  EXPECT_EQ(Pool("b"), "Terminated after 600 s");
}

// A lost instance ends an attempt, not the job: with RetryStrategy the job
// stays InUse while it restarts, and its cluster is kept when it completes.
TEST_F(WarmPoolTest, ARetriedJobStaysInUseUntilItEnds) {
  sim::SimJobBehavior loses;
  loses.instance_losses = {absl::Seconds(100)};
  behaviors_["a"] = loses;
  v1::CreateTrainingJobRequest r = Request("a");
  r.mutable_retry_strategy()->set_maximum_retry_attempts(2);
  CreateAt(0, r);
  RunUntil(250);
  EXPECT_EQ(Describe("a").secondary_status(), "Starting");
  EXPECT_EQ(Pool("a"), "InUse");
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("a").training_job_status(), "Completed");
  EXPECT_EQ(Pool("a"), "Terminated after 600 s");  // kept its whole keep-alive
}

// An observer hears of a job's start after the step that created it, and in that step the job
// took the matching pool: a stop then ends a job that holds the pool's cluster, and the job keeps
// it as its own pool.
TEST_F(WarmPoolTest, AJobStoppedByAnObserverAsItStartsKeepsThePoolItTook) {
  CreateAt(0, Request("a"));
  RunUntil(800);
  struct Stopper : JobObserver {
    Engine* engine = nullptr;
    void OnStatusChange(const StatusEvent& e) override {
      if (e.job_name != "b" || e.secondary_status != "Starting") return;
      v1::StopTrainingJobRequest r;
      r.set_training_job_name("b");
      EXPECT_TRUE(engine->StopTrainingJob(r).ok());
    }
  } stopper;
  stopper.engine = engine_.get();
  engine_->AddObserver(&stopper);
  CreateAt(800, Request("b"));
  RunUntil(810);
  engine_->RemoveObserver(&stopper);
  EXPECT_EQ(Describe("b").training_job_status(), "Stopped");
  EXPECT_EQ(Pool("a"), "Reused by b after 105 s");
  EXPECT_EQ(Pool("b"), "Available");
}

TEST_F(WarmPoolTest, NoClusterMeansTerminatedAtOnce) {
  sim::SimJobBehavior short_of_capacity;
  short_of_capacity.capacity_failures = 100;
  behaviors_["a"] = short_of_capacity;
  CreateAt(0, Request("a"));
  RunUntil(50);
  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("a");
  ASSERT_TRUE(engine_->StopTrainingJob(stop).ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("a"), "Terminated after 0 s");
}

TEST_F(WarmPoolTest, UpdateKeepAliveOnlyWhileAvailable) {
  CreateAt(0, Request("a"));
  absl::Status in_use = Update("a", 60);
  EXPECT_EQ(in_use.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(in_use.message(),
            "KeepAlivePeriodInSeconds can only be updated while the training job's warm pool is "
            "Available; the warm pool of training job 'a' is InUse");
  RunUntil(700);
  // Extend: counted from when it became Available (695).
  ASSERT_TRUE(Update("a", 1000).ok());
  // Describe shows the job's resource configuration as updated.
  EXPECT_EQ(Describe("a").resource_config().keep_alive_period_in_seconds(), 1000);
  RunUntil(1600);
  EXPECT_EQ(Pool("a"), "Available");
  RunUntil(1695);
  EXPECT_EQ(Pool("a"), "Terminated after 1000 s");
  EXPECT_EQ(Update("a", 60).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(WarmPoolTest, UpdateToZeroReleasesNowAndShorterPastEndToo) {
  CreateAt(0, Request("a"));
  CreateAt(0, Request("b"));
  RunUntil(800);
  ASSERT_TRUE(Update("a", 0).ok());
  EXPECT_EQ(Pool("a"), "Terminated after 105 s");
  ASSERT_TRUE(Update("b", 60).ok());  // 695 + 60 is already past
  EXPECT_EQ(Pool("b"), "Terminated after 105 s");
  CreateAt(801, Request("c"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("c"), 90);  // nothing left to reuse
}

// UpdateTrainingJob checks the whole request before it changes anything.
TEST_F(WarmPoolTest, ARefusedUpdateChangesNothing) {
  CreateAt(0, Request("a"));
  RunUntil(800);
  v1::UpdateTrainingJobRequest u;
  u.set_training_job_name("a");
  u.mutable_resource_config()->set_keep_alive_period_in_seconds(0);
  u.mutable_remote_debug_config()->set_enable_remote_debug(true);  // only while training
  const auto before = Describe("a").last_modified_time();
  EXPECT_EQ(engine_->UpdateTrainingJob(u).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Pool("a"), "Available");
  EXPECT_EQ(Describe("a").last_modified_time().seconds(), before.seconds());
}

TEST_F(WarmPoolTest, UpdateOfReusedPoolIsRefused) {
  CreateAt(0, Request("a"));
  CreateAt(800, Request("b"));
  EXPECT_EQ(Update("a", 60).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(WarmPoolTest, ListFiltersByWarmPoolStatusAndDeleteWaitsForRelease) {
  CreateAt(0, Request("a"));
  CreateAt(0, Request("b", -1));
  RunUntil(700);
  v1::ListTrainingJobsRequest list;
  list.set_warm_pool_status_equals("Available");
  auto listed = engine_->ListTrainingJobs(list).value();
  ASSERT_EQ(listed.training_job_summaries_size(), 1);
  EXPECT_EQ(listed.training_job_summaries(0).training_job_name(), "a");
  EXPECT_EQ(listed.training_job_summaries(0).warm_pool_status().status(), "Available");
  v1::DeleteTrainingJobRequest del;
  del.set_training_job_name("a");
  EXPECT_EQ(engine_->DeleteTrainingJob(del).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Update("a", 0).ok());
  EXPECT_TRUE(engine_->DeleteTrainingJob(del).ok());
}

TEST_F(WarmPoolTest, MaxKeepAliveCapsTheRequest) {
  WarmPoolOptions options;
  options.max_keep_alive = absl::Seconds(120);
  Build(options);
  CreateAt(0, Request("a", 21600));
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("a"), "Terminated after 120 s");
}

TEST_F(WarmPoolTest, ChainLifeCapEndsThePool) {
  WarmPoolOptions options;
  options.max_chain_life = absl::Seconds(1500);  // from a's launch at 60 s: until 1560
  Build(options);
  CreateAt(0, Request("a"));
  CreateAt(800, Request("b"));  // ends at 1405; pool until min(1405 + 600, 1560)
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("b"), "Terminated after 155 s");
  Build(options);
  CreateAt(0, Request("a"));
  CreateAt(1000, Request("b"));  // ends at 1605, past the chain's end
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("b"), "Terminated after 0 s");
  EXPECT_NE(Describe("b").secondary_status_transitions().rbegin()->status_message().find(
                "Warm pool not kept: the cluster reached the maximum warm-pool life of 1500 s"),
            std::string::npos);
}

TEST_F(WarmPoolTest, QuotaPerInstanceTypeLimitsRetainedInstances) {
  WarmPoolOptions options;
  options.quota_instances["ml.m5.xlarge"] = 3;  // each job holds 2
  Build(options);
  CreateAt(0, Request("a"));
  CreateAt(10, Request("b"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("a"), "Terminated after 600 s");
  EXPECT_EQ(Pool("b"), "Terminated after 0 s");
  EXPECT_EQ(Describe("b").secondary_status_transitions().rbegin()->status_message(),
            "Training job completed. Warm pool not kept: the warm-pool quota for ml.m5.xlarge "
            "(3 instances) is in use");
}

TEST_F(WarmPoolTest, HeterogeneousAndSpotJobsNeverPool) {
  WarmPoolOptions options;
  options.policy = NewFixedKeepAlive(absl::Seconds(600));  // would pool every eligible job
  Build(options);
  auto spot = Request("spot", -1);
  spot.set_enable_managed_spot_training(true);
  spot.mutable_stopping_condition()->set_max_wait_time_in_seconds(86400);
  CreateAt(0, spot);
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("spot"), "none");
}

TEST_F(WarmPoolTest, FixedPolicyPoolsJobsThatAskedForNothing) {
  WarmPoolOptions options;
  options.policy = NewFixedKeepAlive(absl::Seconds(200));
  Build(options);
  CreateAt(0, Request("a", -1));
  CreateAt(800, Request("b", -1));
  EXPECT_EQ(Pool("a"), "Reused by b after 105 s");
}

TEST_F(WarmPoolTest, NeverPolicyPoolsNothing) {
  WarmPoolOptions options;
  options.policy = NewNeverKeepAlive();
  Build(options);
  CreateAt(0, Request("a"));
  CreateAt(800, Request("b"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Pool("a"), "none");
  EXPECT_EQ(Startup("b"), 90);
}

// AdaptiveHistogram learns a gap from a pool it let expire: the gap runs on
// until the job that would have reused the pool, so a workload whose gaps
// are longer than the fallback teaches the policy to keep its clusters long
// enough. (Were a pool's gap dropped when the pool ends, the policy would
// only ever see gaps shorter than the keep-alive it gives.)
TEST_F(WarmPoolTest, AdaptivePolicyLearnsTheGapsOfPoolsThatExpiredUnreused) {
  AdaptiveHistogramOptions adaptive;
  adaptive.min_samples = 3;
  adaptive.fallback = absl::Seconds(300);
  WarmPoolOptions options;
  options.policy = NewAdaptiveHistogramKeepAlive(adaptive);
  Build(options);
  // Each job is created 30 min after the previous one ended (cold: 695 s).
  int64_t t = 0;
  for (int i = 1; i <= 4; ++i) {
    CreateAt(t, Request(absl::StrCat("j", i)));
    t += 695 + 1800;
  }
  // j1-j3 were kept for the fallback and expired; j2-j4's arrivals closed
  // their three 30-min gaps, so j4 is kept for the bin [30, 31) min + 10%.
  CreateAt(t, Request("j5"));
  loop_->RunUntilIdle();
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Pool(absl::StrCat("j", i)), "Terminated after 300 s");
  EXPECT_EQ(Pool("j4"), "Reused by j5 after 1800 s");
  EXPECT_EQ(Startup("j5"), 0);
}

// Keeps each pool for `keep_alive` and reviews it every `period`, answering
// from `answers` by review time (seconds since the pool became Available);
// records every review it is asked.
class ScriptedReviewKeepAlive : public KeepAlivePolicy {
 public:
  ScriptedReviewKeepAlive(absl::Duration keep_alive, absl::Duration period,
                          std::map<int64_t, absl::Duration> answers)
      : keep_alive_(keep_alive), period_(period), answers_(std::move(answers)) {}
  absl::Duration KeepAlive(const KeepAliveQuery&) override { return keep_alive_; }
  std::string Name() const override { return "Scripted"; }
  absl::Duration ReviewPeriod() const override { return period_; }
  std::optional<absl::Duration> Review(const KeepAliveReview& r) override {
    const int64_t waited = absl::ToInt64Seconds(r.now - r.available_since);
    asked.push_back(absl::StrCat(std::string(r.job_name), "@", waited, " keep ",
                                 absl::ToInt64Seconds(r.keep_alive)));
    auto it = answers_.find(waited);
    if (it == answers_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::string> asked;

 private:
  absl::Duration keep_alive_, period_;
  std::map<int64_t, absl::Duration> answers_;
};

class WarmPoolReviewTest : public WarmPoolTest {
 protected:
  ScriptedReviewKeepAlive& Use(absl::Duration period, std::map<int64_t, absl::Duration> answers,
                               WarmPoolOptions options = {}) {
    auto policy =
        std::make_shared<ScriptedReviewKeepAlive>(absl::Seconds(600), period, std::move(answers));
    options.policy = policy;
    Build(options);
    return *policy;
  }
};

TEST_F(WarmPoolReviewTest, AReviewShortensAWaitingPoolWhichEndsAtItsNewEnd) {
  // a's pool: Available at 695 for 600 s; reviewed every 100 s.
  auto& policy = Use(absl::Seconds(100), {{200, absl::Seconds(300)}});
  CreateAt(0, Request("a"));
  RunUntil(994);
  EXPECT_EQ(Pool("a"), "Available");
  RunUntil(995);  // 695 + 300
  EXPECT_EQ(Pool("a"), "Terminated after 300 s");
  loop_->RunUntilIdle();
  // Asked at 100 and 200 s; not at 300 s, the pool's new end.
  EXPECT_THAT(policy.asked, testing::ElementsAre("a@100 keep 600", "a@200 keep 600"));
}

TEST_F(WarmPoolReviewTest, AReviewWhoseEndIsPastEndsThePoolAtOnceBilledUntilNow) {
  auto& policy = Use(absl::Seconds(100), {{200, absl::Seconds(150)}});
  CreateAt(0, Request("a"));
  RunUntil(894);
  EXPECT_EQ(Pool("a"), "Available");
  RunUntil(895);  // the review at 200 s: 150 s is past, so the pool ends now
  EXPECT_EQ(Pool("a"), "Terminated after 200 s");
  const auto a = Describe("a");
  EXPECT_EQ(a.training_job_status(), "Completed");
  EXPECT_EQ(a.warm_pool_status().resource_retained_billable_time_in_seconds(), 200);
  // A job arriving after the end starts cold.
  CreateAt(900, Request("b"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("b"), 90);
  EXPECT_EQ(Pool("a"), "Terminated after 200 s");
  EXPECT_EQ(Pool("b"), "Terminated after 200 s");  // its own pool, reviewed alike
  EXPECT_THAT(policy.asked, testing::ElementsAre("a@100 keep 600", "a@200 keep 600",
                                                 "b@100 keep 600", "b@200 keep 600"));
}

TEST_F(WarmPoolReviewTest, AZeroAnswerEndsThePoolAtOnce) {
  Use(absl::Seconds(100), {{100, absl::ZeroDuration()}});
  CreateAt(0, Request("a"));
  RunUntil(795);
  EXPECT_EQ(Pool("a"), "Terminated after 100 s");
}

TEST_F(WarmPoolReviewTest, AReviewLengthensThePoolButNeverPastMaxKeepAlive) {
  WarmPoolOptions options;
  options.max_keep_alive = absl::Seconds(900);
  auto& policy = Use(absl::Seconds(100), {{300, absl::Hours(2)}}, options);
  CreateAt(0, Request("a"));
  RunUntil(1594);  // past the first keep-alive's end (1295)
  EXPECT_EQ(Pool("a"), "Available");
  RunUntil(1595);  // 695 + 900
  EXPECT_EQ(Pool("a"), "Terminated after 900 s");
  loop_->RunUntilIdle();
  // Reviews follow the new end, and see the keep-alive in force (capped).
  ASSERT_EQ(policy.asked.size(), 8u);
  EXPECT_EQ(policy.asked[3], "a@400 keep 900");
  EXPECT_EQ(policy.asked[7], "a@800 keep 900");
}

TEST_F(WarmPoolReviewTest, AReviewNeverLengthensAPoolPastItsChainLife) {
  WarmPoolOptions options;
  options.max_chain_life = absl::Seconds(1500);  // from a's launch at 60 s: until 1560
  Use(absl::Seconds(100), {{100, absl::Hours(2)}}, options);
  CreateAt(0, Request("a"));
  RunUntil(1559);
  EXPECT_EQ(Pool("a"), "Available");
  RunUntil(1560);
  EXPECT_EQ(Pool("a"), "Terminated after 865 s");
}

TEST_F(WarmPoolReviewTest, ALengthenedPoolIsReusedAfterItsFirstEnd) {
  Use(absl::Seconds(100), {{300, absl::Seconds(1000)}});
  CreateAt(0, Request("a"));
  CreateAt(1500, Request("b"));  // 805 s after a's pool became Available
  EXPECT_EQ(Pool("a"), "Reused by b after 805 s");
  loop_->RunUntilIdle();
  EXPECT_EQ(Startup("b"), 0);
}

TEST_F(WarmPoolReviewTest, ReviewsStopWhenThePoolIsTakenOrTheUserSetsItsKeepAlive) {
  auto& policy = Use(absl::Seconds(100), {});
  CreateAt(0, Request("a"));
  CreateAt(950, Request("b"));  // takes a's pool after 255 s: reviewed at 100 and 200 s
  EXPECT_THAT(policy.asked, testing::ElementsAre("a@100 keep 600", "a@200 keep 600"));
  RunUntil(950 + 605 + 150);  // b's pool: Available at 1555, reviewed at 100 s
  ASSERT_TRUE(Update("b", 400).ok());
  loop_->RunUntilIdle();
  EXPECT_THAT(policy.asked,
              testing::ElementsAre("a@100 keep 600", "a@200 keep 600", "b@100 keep 600"));
  EXPECT_EQ(Pool("b"), "Terminated after 400 s");  // the user's keep-alive, unrevised
}

TEST_F(WarmPoolReviewTest, NoReviewsWithoutAPeriod) {
  auto& policy = Use(absl::ZeroDuration(), {{100, absl::ZeroDuration()}});
  CreateAt(0, Request("a"));
  loop_->RunUntilIdle();
  EXPECT_TRUE(policy.asked.empty());
  EXPECT_EQ(Pool("a"), "Terminated after 600 s");
}

// Four pools become Available together while AdaptiveHistogram has no
// samples yet, so each is kept for the fallback (2 h). Three jobs then reuse
// three of them after 1, 2 and 3 min, which teaches the histogram to keep
// pools about 3 min. A review (every 5 min) ends the fourth pool at its first
// review; without one it waits the full fallback.
TEST_F(WarmPoolTest, AdaptiveReviewEndsAPoolKeptUnderGapsThatHaveSinceShortened) {
  for (const bool review : {false, true}) {
    SCOPED_TRACE(review ? "with review" : "without review");
    AdaptiveHistogramOptions adaptive;
    adaptive.min_samples = 3;
    adaptive.fallback = absl::Hours(2);
    if (review) adaptive.review_every = absl::Minutes(5);
    WarmPoolOptions options;
    options.policy = NewAdaptiveHistogramKeepAlive(adaptive);
    Build(options);
    for (int i = 1; i <= 4; ++i) CreateAt(0, Request(absl::StrCat("a", i)));
    for (int i = 1; i <= 3; ++i) CreateAt(695 + 60 * i, Request(absl::StrCat("b", i)));
    loop_->RunUntilIdle();
    std::vector<std::string> pools;
    for (int i = 1; i <= 4; ++i) pools.push_back(Pool(absl::StrCat("a", i)));
    EXPECT_THAT(pools, testing::UnorderedElementsAre(
                           "Reused by b1 after 60 s", "Reused by b2 after 120 s",
                           "Reused by b3 after 180 s",
                           review ? "Terminated after 300 s" : "Terminated after 7200 s"));
  }
}

// A manager that refuses every job with one status; the engine's own for nothing.
class RefusingManager : public WarmPoolManager {
 public:
  absl::StatusOr<bool> OnJobCreated(const WarmPoolJob& job) override {
    return absl::ResourceExhaustedError(
        absl::StrCat("no warm-pool record left for '", std::string(job.name), "'"));
  }
  std::optional<Cluster> Acquire(std::string_view) override { return std::nullopt; }
  void OnClusterLaunched(std::string_view, const Cluster&) override {}
  bool OnJobEnded(std::string_view, std::optional<Cluster>&, bool) override { return false; }
  void OnClusterLost(const Cluster&) override {}
  absl::Status UpdateKeepAlive(std::string_view, absl::Duration) override {
    return absl::FailedPreconditionError("no pools");
  }
  std::optional<v1::WarmPoolStatus> Status(std::string_view) const override {
    return std::nullopt;
  }
  absl::Status OnJobDeleted(std::string_view) override { return absl::OkStatus(); }
  void ReleaseAll() override {}
};

TEST_F(WarmPoolTest, AManagerRefusingAJobFailsCreateTrainingJobAndLeavesNoJob) {
  RefusingManager refusing;
  manager_ = &refusing;
  Build({});
  const absl::Status created = engine_->CreateTrainingJob(Request("a")).status();
  EXPECT_EQ(created, absl::ResourceExhaustedError("no warm-pool record left for 'a'"));
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("a");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status()));
  loop_->RunUntilIdle();
  EXPECT_EQ(forward_->containers_started, 0);
  manager_ = nullptr;
  Build({});  // the engine goes before `refusing`
}

// The default manager called directly, as a custom orchestrator may: calls
// that do not fit a job's record are refused or ignored, never corrupt it.
class RecordingProvider : public ClusterProvider {
 public:
  void Provision(const ClusterSpec&, ClusterCallback) override {}
  void PrepareImage(const Cluster&, std::string_view, DoneCallback) override {}
  void StartContainers(const JobContext&, ContainerEvents&, DoneCallback) override {}
  void Signal(const Cluster&, int) override {}
  void UploadArtifacts(const JobContext&, ArtifactsCallback) override {}
  void Release(const Cluster& cluster) override { released.push_back(cluster.id); }
  std::vector<std::string> released;
};

class WarmPoolManagerTest : public testing::Test {
 protected:
  static v1::CreateTrainingJobRequest Request(int instance_count = 2) {
    v1::CreateTrainingJobRequest r;
    r.set_role_arn("arn:aws:iam::123456789012:role/SageMakerRole");
    r.mutable_resource_config()->set_instance_type("ml.m5.xlarge");
    r.mutable_resource_config()->set_instance_count(instance_count);
    r.mutable_resource_config()->set_keep_alive_period_in_seconds(600);
    return r;
  }
  static std::optional<Cluster> ClusterNamed(const std::string& id) {
    Cluster c;
    c.id = id;
    return c;
  }
  absl::StatusOr<bool> Create(const std::string& name, int instance_count = 2) {
    const v1::CreateTrainingJobRequest r = Request(instance_count);
    return manager_->OnJobCreated(WarmPoolJob{name, r});
  }
  // Creates `name`, which takes part.
  void Join(const std::string& name) {
    const absl::StatusOr<bool> joined = Create(name);
    ASSERT_TRUE(joined.ok()) << joined.status();
    ASSERT_TRUE(*joined) << name << " takes no part";
  }
  // Creates `name` and ends it with cluster `cluster_id`: its pool is Available.
  void MakeAvailable(const std::string& name, const std::string& cluster_id) {
    ASSERT_NO_FATAL_FAILURE(Join(name));
    manager_->OnClusterLaunched(name, *ClusterNamed(cluster_id));
    std::optional<Cluster> cluster = ClusterNamed(cluster_id);
    ASSERT_TRUE(manager_->OnJobEnded(name, cluster, /*healthy=*/true));
    ASSERT_EQ(State(name), "Available");
  }
  void RunFor(absl::Duration d) { loop_->RunUntil(loop_->Now() + d); }
  // "Available", "Reused by b", "Terminated after 600 s", "none".
  std::string State(const std::string& name) const {
    std::optional<v1::WarmPoolStatus> w = manager_->Status(name);
    if (!w) return "none";
    std::string out = w->status();
    if (w->has_reused_by_job()) absl::StrAppend(&out, " by ", w->reused_by_job());
    if (w->has_resource_retained_billable_time_in_seconds()) {
      absl::StrAppend(&out, " after ", w->resource_retained_billable_time_in_seconds(), " s");
    }
    return out;
  }

  std::unique_ptr<EventLoop> loop_ = NewVirtualEventLoop();
  RecordingProvider provider_;
  std::unique_ptr<WarmPoolManager> manager_ = NewWarmPoolManager(*loop_, provider_);
};

TEST_F(WarmPoolManagerTest, CreatingANameTwiceIsAlreadyExistsAndKeepsTheFirstRecord) {
  MakeAvailable("a", "c1");
  // Another shape: replacing the record would also forget the shape the pool is filed under.
  const absl::StatusOr<bool> again = Create("a", 4);
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_THAT(std::string(again.status().message()),
              testing::HasSubstr("training job 'a' (Available)"));
  EXPECT_EQ(State("a"), "Available");
  ASSERT_NO_FATAL_FAILURE(Join("b"));
  std::optional<Cluster> taken = manager_->Acquire("b");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->id, "c1");
  EXPECT_EQ(State("a"), "Reused by b after 0 s");
  // InUse (b) and final (a) records are refused the same way.
  EXPECT_TRUE(absl::IsAlreadyExists(Create("b").status()));
  EXPECT_TRUE(absl::IsAlreadyExists(Create("a").status()));
  EXPECT_EQ(State("b"), "InUse");
  EXPECT_EQ(State("a"), "Reused by b after 0 s");
}

TEST_F(WarmPoolManagerTest, ANameCanBeCreatedAgainOnceDeleted) {
  MakeAvailable("a", "c1");
  EXPECT_TRUE(absl::IsFailedPrecondition(manager_->OnJobDeleted("a")));
  ASSERT_TRUE(manager_->UpdateKeepAlive("a", absl::ZeroDuration()).ok());
  EXPECT_EQ(provider_.released, std::vector<std::string>{"c1"});
  ASSERT_TRUE(manager_->OnJobDeleted("a").ok());
  EXPECT_EQ(State("a"), "none");
  ASSERT_NO_FATAL_FAILURE(Join("a"));
  EXPECT_EQ(State("a"), "InUse");
}

TEST_F(WarmPoolManagerTest, ASecondEndMakesNoSecondPoolAndKeepsTheFinalStatus) {
  MakeAvailable("a", "c1");
  std::optional<Cluster> other = ClusterNamed("c2");
  EXPECT_FALSE(manager_->OnJobEnded("a", other, /*healthy=*/true));
  ASSERT_TRUE(other.has_value()) << "taken although refused";
  EXPECT_EQ(other->id, "c2");
  ASSERT_NO_FATAL_FAILURE(Join("b"));
  std::optional<Cluster> taken = manager_->Acquire("b");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->id, "c1");
  ASSERT_NO_FATAL_FAILURE(Join("c"));
  EXPECT_FALSE(manager_->Acquire("c").has_value()) << "a second pool of a's";
  RunFor(absl::Seconds(700));  // past every keep-alive a's end could have set
  EXPECT_EQ(State("a"), "Reused by b after 0 s");
  EXPECT_TRUE(provider_.released.empty());
  // Ending a job after its pool is Terminated does not make it Available again.
  EXPECT_TRUE(absl::IsFailedPrecondition(manager_->UpdateKeepAlive("a", absl::Seconds(1))));
  std::optional<Cluster> c3 = ClusterNamed("c3");
  std::optional<Cluster> c4 = ClusterNamed("c4");
  ASSERT_TRUE(manager_->OnJobEnded("b", c3, /*healthy=*/true));
  ASSERT_TRUE(manager_->UpdateKeepAlive("b", absl::ZeroDuration()).ok());
  EXPECT_EQ(State("b"), "Terminated after 0 s");
  EXPECT_FALSE(manager_->OnJobEnded("b", c4, /*healthy=*/true));
  EXPECT_EQ(State("b"), "Terminated after 0 s");
}

TEST_F(WarmPoolManagerTest, AnEndedJobCannotAcquireAPoolNotEvenItsOwn) {
  MakeAvailable("a", "c1");
  EXPECT_FALSE(manager_->Acquire("a").has_value());
  EXPECT_EQ(State("a"), "Available");
  ASSERT_NO_FATAL_FAILURE(Join("b"));
  std::optional<Cluster> taken = manager_->Acquire("b");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(State("a"), "Reused by b after 0 s");
}

TEST_F(WarmPoolManagerTest, CallsForAnUnknownJobChangeNothing) {
  MakeAvailable("a", "c1");
  EXPECT_FALSE(manager_->Acquire("x").has_value());
  manager_->OnClusterLaunched("x", *ClusterNamed("c9"));
  std::optional<Cluster> c9 = ClusterNamed("c9");
  EXPECT_FALSE(manager_->OnJobEnded("x", c9, /*healthy=*/true));
  ASSERT_TRUE(c9.has_value());
  EXPECT_EQ(c9->id, "c9");
  const absl::Status update = manager_->UpdateKeepAlive("x", absl::Seconds(60));
  EXPECT_TRUE(absl::IsFailedPrecondition(update)) << update;
  EXPECT_THAT(std::string(update.message()), testing::HasSubstr("'x' is absent"));
  EXPECT_EQ(State("x"), "none");
  EXPECT_TRUE(manager_->OnJobDeleted("x").ok());
  EXPECT_TRUE(manager_->OnJobDeleted("x").ok());  // twice
  EXPECT_EQ(State("a"), "Available");
  EXPECT_TRUE(provider_.released.empty());
  // a's pool is still there for a matching job.
  ASSERT_NO_FATAL_FAILURE(Join("b"));
  EXPECT_TRUE(manager_->Acquire("b").has_value());
}

TEST(AdaptiveHistogramTest, FallsBackUntilEnoughSamplesThenKeepsTheTailPercentile) {
  AdaptiveHistogramOptions o;
  o.min_samples = 5;
  o.fallback = absl::Minutes(10);
  o.percentile = 0.8;
  o.margin = 0.1;
  auto policy = NewAdaptiveHistogramKeepAlive(o);
  PoolShape shape;
  shape.instance_type = "ml.m5.xlarge";
  const absl::Time t0 = absl::FromUnixSeconds(0);
  KeepAliveQuery q{"job", shape, absl::ZeroDuration(), t0};
  EXPECT_TRUE(policy->Participates(q));
  EXPECT_EQ(policy->KeepAlive(q), absl::Minutes(10));
  // Five gaps: 2, 3, 3, 7 and 30 minutes (each: pool Available, next job arrives).
  absl::Time t = t0;
  for (int minutes : {2, 3, 3, 7, 30}) {
    policy->OnPoolAvailable(shape, t);
    t += absl::Minutes(minutes) + absl::Seconds(1);
    policy->OnJobArrived(shape, t);
  }
  // The 80th percentile falls in the bin [7, 8) min: keep 8 min + 10%.
  EXPECT_EQ(policy->KeepAlive(q), absl::Minutes(8) * 1.1);
  PoolShape other = shape;
  other.instance_count = 4;
  EXPECT_EQ(policy->KeepAlive({"job", other, absl::ZeroDuration(), t}), absl::Minutes(10));
}

// Gaps of `range` or more (here: between sweeps) are beyond any keep-alive
// the policy gives: keeping clusters for the whole range would catch none of
// them, so the keep-alive follows the gaps it can catch.
TEST(AdaptiveHistogramTest, GapsBeyondTheRangeNeverLengthenTheKeepAlive) {
  AdaptiveHistogramOptions o;
  o.range = absl::Hours(6);
  o.percentile = 0.99;
  o.margin = 0.1;
  o.min_samples = 1;
  auto policy = NewAdaptiveHistogramKeepAlive(o);
  PoolShape shape;
  shape.instance_type = "ml.g5.xlarge";
  absl::Time t = absl::FromUnixSeconds(0);
  const KeepAliveQuery q{"job", shape, absl::ZeroDuration(), t};
  auto gap = [&](absl::Duration d) {
    policy->OnPoolAvailable(shape, t);
    t += d;
    policy->OnJobArrived(shape, t);
  };
  // Only gaps beyond the range: the shortest keep-alive, one bin (+10%).
  gap(absl::Hours(12));
  EXPECT_EQ(policy->KeepAlive(q), absl::Minutes(1) * 1.1);
  // 18 gaps of 2 min 30 s and 2 of 12 h (so 10% beyond the range): keep
  // until the longest gap within it, the bin [2, 3) min.
  for (int i = 0; i < 18; ++i) gap(absl::Seconds(150));
  gap(absl::Hours(12));
  EXPECT_EQ(policy->KeepAlive(q), absl::Minutes(3) * 1.1);
  // A gap in the last bin within the range is caught by keeping the range.
  gap(absl::Hours(6) - absl::Seconds(1));
  EXPECT_EQ(policy->KeepAlive(q), absl::Hours(6));
}

// With several pools of a shape Available, a job reuses one of them (the
// newest, as the manager gives them); the others' gaps run on until the
// jobs that take them.
TEST(AdaptiveHistogramTest, AJobEndsTheGapOfThePoolItWouldReuseOnly) {
  AdaptiveHistogramOptions o;
  o.percentile = 0.99;
  o.margin = 0.1;
  o.min_samples = 10;
  auto policy = NewAdaptiveHistogramKeepAlive(o);
  PoolShape shape;
  shape.instance_type = "ml.m5.2xlarge";
  absl::Time t = absl::FromUnixSeconds(0);
  const KeepAliveQuery q{"job", shape, absl::ZeroDuration(), t};
  // Five times: two pools become Available a second apart; one job comes
  // 2 min later, the next 50 min later. Gaps: 1 min 59 s (the newer pool)
  // and 50 min (the older).
  for (int i = 0; i < 5; ++i) {
    policy->OnPoolAvailable(shape, t);
    policy->OnPoolAvailable(shape, t + absl::Seconds(1));
    policy->OnJobArrived(shape, t + absl::Minutes(2));
    policy->OnJobArrived(shape, t + absl::Minutes(50));
    t += absl::Hours(1);
  }
  // Ten gaps, five in the bin [50, 51) min: p99 keeps 51 min + 10%.
  EXPECT_EQ(policy->KeepAlive(q), absl::Minutes(51) * 1.1);
  // A job that finds no pool Available ends no gap.
  policy->OnJobArrived(shape, t);
  EXPECT_EQ(policy->KeepAlive(q), absl::Minutes(51) * 1.1);
}

// Bytes this process has resident (Linux: /proc/self/statm).
int64_t ResidentBytes() {
  long size = 0, pages = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &size, &pages) != 2) pages = 0;
    std::fclose(f);
  }
  return int64_t{pages} * sysconf(_SC_PAGESIZE);
}

// A shape holds counts only up to its longest gap within the range: one whose
// pools were never reused holds none. A trace of many cluster shapes (roles,
// volume sizes), each seen once or twice, costs the policy a little per shape,
// not range / bin_width counts (here the most allowed: 8 MiB).
TEST(AdaptiveHistogramTest, AShapeHoldsCountsOnlyUpToItsLongestGap) {
  AdaptiveHistogramOptions o;
  o.bin_width = absl::Seconds(1);
  o.range = o.bin_width * AdaptiveHistogramOptions::kMaxBins;
  o.min_samples = 1;
  auto policy = NewAdaptiveHistogramKeepAlive(o);
  const int64_t before = ResidentBytes();
  absl::Time t = absl::FromUnixSeconds(0);
  auto shape = [](std::string team) {
    PoolShape s;
    s.role_arn = "arn:aws:iam::123456789012:role/" + team;
    s.instance_type = "ml.m5.xlarge";
    return s;
  };
  for (int i = 0; i < 16; ++i) {
    // One job, its pool never reused.
    const PoolShape once = shape(absl::StrCat("once-", i));
    policy->OnJobArrived(once, t);
    policy->OnPoolAvailable(once, t + absl::Minutes(10));
    // Two jobs, the second 2 min after the first's pool became Available.
    const PoolShape twice = shape(absl::StrCat("twice-", i));
    policy->OnJobArrived(twice, t);
    policy->OnPoolAvailable(twice, t + absl::Minutes(10));
    policy->OnJobArrived(twice, t + absl::Minutes(12));
    policy->OnPoolAvailable(twice, t + absl::Minutes(22));
    t += absl::Hours(1);
  }
  // 32 shapes in less than one full histogram.
  EXPECT_LT(ResidentBytes() - before, 8 << 20);
  // A 2-min gap, in the bin [120, 121) s: kept 121 s + 10%.
  EXPECT_EQ(policy->KeepAlive({"job", shape("twice-0"), absl::ZeroDuration(), t}),
            absl::Seconds(121) * 1.1);
}

TEST(AdaptiveHistogramTest, CheckNamesTheMemberOutOfRange) {
  EXPECT_TRUE(AdaptiveHistogramOptions().Check().ok());
  auto message = [](auto change) {
    AdaptiveHistogramOptions o;
    change(o);
    const absl::Status s = o.Check();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_EQ(message([](auto& o) { o.bin_width = absl::ZeroDuration(); }),
            "AdaptiveHistogramOptions.bin_width must be finite and positive");
  EXPECT_EQ(message([](auto& o) { o.range = absl::InfiniteDuration(); }),
            "AdaptiveHistogramOptions.range must be finite and at least bin_width");
  EXPECT_EQ(message([](auto& o) {
              o.bin_width = absl::Nanoseconds(1);
              o.range = absl::Hours(24 * 7);
            }),
            "AdaptiveHistogramOptions.range must be at most 1048576 times bin_width");
  EXPECT_EQ(message([](auto& o) { o.percentile = 0; }),
            "AdaptiveHistogramOptions.percentile must be in (0, 1]");
  EXPECT_EQ(message([](auto& o) { o.margin = -1; }),
            "AdaptiveHistogramOptions.margin must be finite and not negative");
  EXPECT_EQ(message([](auto& o) { o.fallback = absl::InfiniteDuration(); }),
            "AdaptiveHistogramOptions.fallback must be finite and not negative");
  EXPECT_EQ(message([](auto& o) { o.review_every = absl::Seconds(-1); }),
            "AdaptiveHistogramOptions.review_every must be finite and not negative");
}

TEST(AdaptiveHistogramDeathTest, BadOptionsAbortWithTheirMessage) {
  AdaptiveHistogramOptions o;
  o.bin_width = absl::Nanoseconds(1);
  EXPECT_DEATH(NewAdaptiveHistogramKeepAlive(o), "range must be at most");
}

}  // namespace
}  // namespace kiln
