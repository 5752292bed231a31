// Managed spot training and fault tolerance, in virtual time.
//
// Sim defaults: provisioning 60 s, image 30 s, run 600 s of work, upload 5 s,
// SIGTERM handled in 1 s; the default handler retries 30 s after an
// interruption. A notice at offset T of an attempt comes T after its Training
// began.
#include "kiln/spot.h"

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/text_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"

namespace kiln {
namespace {

constexpr absl::Duration kNone = absl::InfiniteDuration();

class SpotTest : public testing::Test {
 protected:
  void SetUp() override { Build(); }

  void Build() {
    engine_.reset();
    provider_.reset();  // before its loop
    stats_.clear();
    loop_ = NewVirtualEventLoop();
    start_ = loop_->Now();
    sim::SimClusterOptions options;
    options.behavior = [this](std::string_view job) {
      auto it = behaviors_.find(std::string(job));
      return it == behaviors_.end() ? sim::SimJobBehavior() : it->second;
    };
    options.stats = &stats_;
    auto sim = sim::NewSimClusterProvider(*loop_, options);
    sim_ = sim.get();
    provider_ = std::move(sim);
    EngineOptions engine_options;
    engine_options.loop = loop_.get();
    engine_options.cluster_provider = provider_.get();
    engine_options.spot_handler = handler_;
    engine_ = NewEngine(std::move(engine_options)).value();
  }

  static v1::CreateTrainingJobRequest Spot(const std::string& name, int max_runtime = 3600,
                                           int max_wait = 7200) {
    v1::CreateTrainingJobRequest r;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
        R"pb(
          role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
          algorithm_specification { training_image: "train:1" training_input_mode: "File" }
          output_data_config { s3_output_path: "s3://bucket/out" }
          resource_config { instance_type: "ml.p3.2xlarge" instance_count: 1 volume_size_in_gb: 50 }
          enable_managed_spot_training: true
        )pb",
        &r));
    r.set_training_job_name(name);
    r.mutable_stopping_condition()->set_max_runtime_in_seconds(max_runtime);
    r.mutable_stopping_condition()->set_max_wait_time_in_seconds(max_wait);
    return r;
  }

  static v1::CreateTrainingJobRequest OnDemand(const std::string& name, int retries = 0) {
    v1::CreateTrainingJobRequest r = Spot(name);
    r.clear_enable_managed_spot_training();
    r.mutable_stopping_condition()->clear_max_wait_time_in_seconds();
    if (retries > 0) r.mutable_retry_strategy()->set_maximum_retry_attempts(retries);
    return r;
  }

  void Create(const v1::CreateTrainingJobRequest& r) {
    auto created = engine_->CreateTrainingJob(r);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  // Creates `r`, lets it run for `run_for`, stops it and runs until it has ended.
  void RunThenStop(const v1::CreateTrainingJobRequest& r, absl::Duration run_for) {
    Create(r);
    loop_->RunUntil(loop_->Now() + run_for);
    v1::StopTrainingJobRequest stop;
    stop.set_training_job_name(r.training_job_name());
    ASSERT_TRUE(engine_->StopTrainingJob(stop).ok());
    loop_->RunUntilIdle();
  }

  v1::DescribeTrainingJobResponse Describe(const std::string& name) {
    v1::DescribeTrainingJobRequest r;
    r.set_training_job_name(name);
    return engine_->DescribeTrainingJob(r).value();
  }

  int64_t Offset(const google::protobuf::Timestamp& t) const {
    return absl::ToInt64Seconds(absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()) -
                                start_);
  }

  std::string Transitions(const std::string& name) {
    const auto d = Describe(name);
    std::vector<std::string> out;
    for (const auto& t : d.secondary_status_transitions()) {
      out.push_back(absl::StrCat(t.status(), "[", Offset(t.start_time()), ",",
                                 t.has_end_time() ? absl::StrCat(Offset(t.end_time())) : "", ")"));
    }
    return absl::StrJoin(out, " ");
  }

  std::string Final(const std::string& name) {
    const auto d = Describe(name);
    return absl::StrCat(d.training_job_status(), "/", d.secondary_status());
  }

  std::string LastMessage(const std::string& name) {
    return Describe(name).secondary_status_transitions().rbegin()->status_message();
  }

  std::map<std::string, sim::SimJobBehavior> behaviors_;
  std::map<std::string, sim::SimJobStats> stats_;
  std::unique_ptr<EventLoop> loop_;
  absl::Time start_;
  std::unique_ptr<ClusterProvider> provider_;
  sim::SimClusterProvider* sim_ = nullptr;      // provider_
  SpotInterruptionHandler* handler_ = nullptr;  // null: the engine's default
  std::unique_ptr<Engine> engine_;
};

// --- The four flows of the service (contract §5)

TEST_F(SpotTest, NoInterruption) {
  Create(Spot("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,690) Uploading[690,695) "
            "Completed[695,695)");
  const auto d = Describe("job");
  EXPECT_EQ(d.training_time_in_seconds(), 635);
  EXPECT_EQ(d.billable_time_in_seconds(), 635);
  EXPECT_EQ(LastMessage("job"), "Training job completed. Managed spot training savings: 0.0%");
}

TEST_F(SpotTest, OneInterruptionThenCapacityFound) {
  sim::SimJobBehavior b;
  b.spot_notices = {absl::Seconds(100)};
  behaviors_["job"] = b;
  Create(Spot("job"));
  loop_->RunUntilIdle();
  // Notice at 190; containers exit at 191 and the instance is given back;
  // capacity is asked for again at 221 and found at 281; no checkpoints, so
  // all 600 s of work run again.
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,190) Interrupted[190,221) "
            "Starting[221,311) Downloading[311,311) Training[311,911) Uploading[911,916) "
            "Completed[916,916)");
  const auto d = Describe("job");
  EXPECT_EQ(Final("job"), "Completed/Completed");
  // Training time: 60 -> 916. Billable: held 60 -> 191 and 281 -> 916.
  EXPECT_EQ(d.training_time_in_seconds(), 856);
  EXPECT_EQ(d.billable_time_in_seconds(), 131 + 635);
  EXPECT_EQ(LastMessage("job"),
            "Training job completed. Managed spot training savings: 10.5%. 1 spot "
            "interruption(s), 0 lost instance(s) over 2 attempt(s)");
  EXPECT_EQ(d.secondary_status_transitions(3).status_message(),
            "Spot interruption: training was interrupted. Spot interruption 1 (instance algo-1); "
            "preemptions count against MaxWaitTimeInSeconds only");
}

// An observer sees each transition with the message Describe reports for it,
// appended texts (the interruption's, the final savings line) included.
TEST_F(SpotTest, ObserversSeeEachTransitionsWholeMessage) {
  struct Messages : JobObserver {
    void OnStatusChange(const StatusEvent& e) override {
      seen.push_back(absl::StrCat(std::string(e.secondary_status), ": ", std::string(e.message)));
    }
    std::vector<std::string> seen;
  } observer;
  engine_->AddObserver(&observer);
  sim::SimJobBehavior b;
  b.spot_notices = {absl::Seconds(100)};
  behaviors_["job"] = b;
  Create(Spot("job"));
  loop_->RunUntilIdle();
  std::vector<std::string> described;
  const v1::DescribeTrainingJobResponse d = Describe("job");
  for (const auto& t : d.secondary_status_transitions()) {
    described.push_back(absl::StrCat(t.status(), ": ", t.status_message()));
  }
  // Each described transition was reported as it is described, in order (a
  // message changed later, as Pending's is, was reported again).
  size_t next = 0;
  for (const std::string& m : observer.seen) {
    if (next < described.size() && m == described[next]) ++next;
  }
  EXPECT_EQ(next, described.size()) << "not reported: " << described[next] << "\nreported:\n"
                                    << absl::StrJoin(observer.seen, "\n");
  EXPECT_EQ(observer.seen.back(),
            "Completed: Training job completed. Managed spot training savings: 10.5%. 1 spot "
            "interruption(s), 0 lost instance(s) over 2 attempt(s)");
  engine_->RemoveObserver(&observer);
}

TEST_F(SpotTest, InterruptedUntilMaxWaitRanOut) {
  sim::SimJobBehavior b;
  b.spot_notices = std::vector<absl::Duration>(10, absl::Seconds(100));
  behaviors_["job"] = b;
  Create(Spot("job", 1000, 1000));
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,190) Interrupted[190,221) "
            "Starting[221,311) Downloading[311,311) Training[311,411) Interrupted[411,442) "
            "Starting[442,532) Downloading[532,532) Training[532,632) Interrupted[632,663) "
            "Starting[663,753) Downloading[753,753) Training[753,853) Interrupted[853,884) "
            "Starting[884,974) Downloading[974,974) Training[974,1000) Stopping[1000,1006) "
            "MaxWaitTimeExceeded[1006,1006)");
  EXPECT_EQ(Final("job"), "Stopped/MaxWaitTimeExceeded");
}

TEST_F(SpotTest, CapacityNeverObtained) {
  sim::SimJobBehavior b;
  b.capacity_failures = 1000;
  behaviors_["job"] = b;
  Create(Spot("job", 3600, 3600));
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"), "Starting[0,3600) Stopping[3600,3600) MaxWaitTimeExceeded[3600,3600)");
  EXPECT_EQ(Final("job"), "Stopped/MaxWaitTimeExceeded");
  EXPECT_EQ(Describe("job").secondary_status_transitions(0).status_message(),
            "Waiting for Spot capacity");
  EXPECT_FALSE(Describe("job").has_billable_time_in_seconds());
}

TEST_F(SpotTest, MaxWaitRunsOutWhileInterrupted) {
  sim::SimJobBehavior b;
  b.spot_notices = {absl::Seconds(100)};
  behaviors_["job"] = b;
  Create(Spot("job", 200, 200));
  loop_->RunUntilIdle();
  // Interrupted at 190, waiting to ask for capacity again at 221: MaxWait at 200.
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,190) Interrupted[190,200) "
            "Stopping[200,200) MaxWaitTimeExceeded[200,200)");
}

// --- Lost instances and RetryStrategy

TEST_F(SpotTest, LostInstanceWithoutRetryStrategyFails) {
  sim::SimJobBehavior b;
  b.instance_losses = {absl::Seconds(100)};
  behaviors_["job"] = b;
  Create(OnDemand("job"));
  loop_->RunUntilIdle();
  const auto d = Describe("job");
  EXPECT_EQ(Final("job"), "Failed/Failed");
  EXPECT_EQ(d.failure_reason(),
            "InternalServerError: instance algo-1 was lost; the job has no RetryStrategy");
  EXPECT_EQ(Transitions("job"), "Starting[0,90) Downloading[90,90) Training[90,190) Failed[190,190)");
}

TEST_F(SpotTest, LostInstanceIsRetriedWithinRetryStrategy) {
  sim::SimJobBehavior b;
  b.instance_losses = {absl::Seconds(100), absl::Seconds(50)};
  behaviors_["job"] = b;
  Create(OnDemand("job", 2));
  loop_->RunUntilIdle();
  EXPECT_EQ(Final("job"), "Completed/Completed");
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,190) Starting[190,310) "
            "Downloading[310,310) Training[310,360) Starting[360,480) Downloading[480,480) "
            "Training[480,1080) Uploading[1080,1085) Completed[1085,1085)");
  // The Starting message changes in place once instances are ready; the
  // restart's cause stays with it.
  EXPECT_EQ(Describe("job").secondary_status_transitions(3).status_message(),
            "Preparing the instances for training. Instance algo-1 was lost; "
            "infrastructure retry 1 of 2 (RetryStrategy)");
  EXPECT_EQ(stats_["job"].attempts, 3);
}

TEST_F(SpotTest, RetryBudgetRunsOut) {
  sim::SimJobBehavior b;
  b.instance_losses = {absl::Seconds(100), absl::Seconds(100)};
  behaviors_["job"] = b;
  Create(OnDemand("job", 1));
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("job").failure_reason(),
            "InternalServerError: instance algo-1 was lost; RetryStrategy.MaximumRetryAttempts "
            "(1) is used up");
}

TEST_F(SpotTest, PreemptionsDoNotCountAgainstRetryStrategy) {
  sim::SimJobBehavior b;
  b.spot_notices = {absl::Seconds(100), absl::Seconds(100), absl::Seconds(100)};
  behaviors_["job"] = b;
  auto r = Spot("job", 3600, 86400);
  r.mutable_retry_strategy()->set_maximum_retry_attempts(1);
  Create(r);
  loop_->RunUntilIdle();
  EXPECT_EQ(Final("job"), "Completed/Completed");
  EXPECT_EQ(stats_["job"].attempts, 4);
}

TEST_F(SpotTest, ThreeInstanceJobLosingOneRestartsTogether) {
  sim::SimJobBehavior b;
  b.instance_losses = {absl::Seconds(100)};
  b.lost_instance = 2;
  behaviors_["job"] = b;
  auto r = OnDemand("job", 1);
  r.mutable_resource_config()->set_instance_count(3);
  Create(r);
  loop_->RunUntilIdle();
  EXPECT_EQ(Final("job"), "Completed/Completed");
  EXPECT_NE(Describe("job").secondary_status_transitions(3).status_message().find("algo-3 was lost"),
            std::string::npos);
  EXPECT_EQ(stats_["job"].attempts, 2);
}

TEST_F(SpotTest, InjectedNoticeThroughThePublicApi) {
  Create(Spot("job"));
  loop_->RunUntil(start_ + absl::Seconds(200));
  ASSERT_TRUE(engine_->InjectInterruption("job", "algo-1", InterruptionKind::kSpotNotice,
                                          absl::Minutes(2))
                  .ok());
  EXPECT_EQ(Describe("job").secondary_status(), "Interrupted");
  EXPECT_EQ(engine_->InjectInterruption("job", "algo-9", InterruptionKind::kSpotNotice,
                                        absl::Minutes(2))
                .code(),
            absl::StatusCode::kNotFound);
  // Names from the caller (a CLI argument) are shown escaped: none adds a line.
  for (const auto& [job, host] : {std::pair<std::string, std::string>{"job", "algo-1\nforged"},
                                  {"no\nsuch", "algo-1"}}) {
    const absl::Status s =
        engine_->InjectInterruption(job, host, InterruptionKind::kSpotNotice, absl::Minutes(2));
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;
    EXPECT_THAT(std::string(s.message()),
                ::testing::AnyOf(::testing::HasSubstr("'algo-1\\nforged'"),
                                 ::testing::HasSubstr("'no\\nsuch'")));
  }
  loop_->RunUntilIdle();
  EXPECT_EQ(Final("job"), "Completed/Completed");
}

// --- Checkpoints in the work model

TEST_F(SpotTest, CheckpointsLimitLostWorkAndANewJobResumesFromTheSameUri) {
  sim::SimJobBehavior b;
  b.checkpoint_interval = absl::Seconds(100);
  b.spot_notices = {absl::Seconds(350)};
  behaviors_["a"] = b;
  auto a = Spot("a");
  a.mutable_checkpoint_config()->set_s3_uri("s3://bucket/ckpt/shared/");
  Create(a);
  loop_->RunUntilIdle();
  // Attempt 1 ran 351 s (SIGTERM handled in 1 s) and saved 300 s; attempt 2 ran 300 s.
  EXPECT_EQ(stats_["a"].work_executed, absl::Seconds(651));
  EXPECT_TRUE(stats_["a"].completed);
  // A new job pointed at the same S3Uri after a (simulated) partial run resumes too.
  sim::SimJobBehavior partial = b;
  partial.spot_notices = {absl::Seconds(250)};
  behaviors_["c"] = partial;
  auto c = Spot("c");
  c.mutable_checkpoint_config()->set_s3_uri("s3://bucket/ckpt/other/");
  RunThenStop(c, absl::Seconds(345));  // interrupted at 340, saved 200 s
  EXPECT_EQ(stats_["c"].progress, absl::Seconds(200));
  behaviors_["d"] = b;
  behaviors_["d"].spot_notices.clear();
  auto d = Spot("d");
  d.mutable_checkpoint_config()->set_s3_uri("s3://bucket/ckpt/other/");
  Create(d);
  loop_->RunUntilIdle();
  EXPECT_EQ(stats_["d"].work_executed, absl::Seconds(400));
  EXPECT_EQ(Final("d"), "Completed/Completed");
}

// With a checkpoint key, progress is kept under the key, whatever the S3Uri:
// jobs that share one S3Uri keep theirs apart, and a job with the key of an
// earlier one resumes from it under another S3Uri.
TEST_F(SpotTest, CheckpointKeysKeepProgressApartUnderOneUri) {
  sim::SimJobBehavior b;
  b.checkpoint_interval = absl::Seconds(100);
  b.spot_notices = {absl::Seconds(250)};
  b.checkpoint_key = "first";
  behaviors_["c"] = b;
  auto c = Spot("c");
  c.mutable_checkpoint_config()->set_s3_uri("s3://bucket/ckpt/shared/");
  RunThenStop(c, absl::Seconds(345));  // interrupted at 340, saved 200 s
  EXPECT_EQ(stats_["c"].progress, absl::Seconds(200));

  // A job run to its end without interruptions, under `key` and `uri`: the work it did.
  auto work_done = [&](const std::string& name, const std::string& key, const std::string& uri) {
    sim::SimJobBehavior whole = b;
    whole.spot_notices.clear();
    whole.checkpoint_key = key;
    behaviors_[name] = whole;
    auto r = Spot(name);
    r.mutable_checkpoint_config()->set_s3_uri(uri);
    Create(r);
    loop_->RunUntilIdle();
    EXPECT_EQ(Final(name), "Completed/Completed");
    return stats_[name].work_executed;
  };
  EXPECT_EQ(work_done("d", "second", "s3://bucket/ckpt/shared/"), absl::Seconds(600));  // from 0
  EXPECT_EQ(work_done("e", "first", "s3://bucket/ckpt/elsewhere/"), absl::Seconds(400));  // 200 s
}

// Property: a training run that checkpoints every k seconds of work,
// interrupted at random times, always ends Completed with the same final
// state as an uninterrupted run, and never redoes more than k of work per
// interruption.
TEST_F(SpotTest, RandomInterruptionsNeverLoseMoreThanOneCheckpointInterval) {
  std::mt19937_64 rng(20261121);
  const absl::Duration k = absl::Seconds(45);
  for (int run = 0; run < 200; ++run) {
    SCOPED_TRACE(absl::StrCat("run ", run));
    Build();
    sim::SimJobBehavior b;
    b.checkpoint_interval = k;
    b.run_duration = absl::Seconds(300 + static_cast<int64_t>(rng() % 900));
    const int interruptions = static_cast<int>(rng() % 5);
    for (int i = 0; i < interruptions; ++i) {
      b.spot_notices.push_back(absl::Seconds(1 + static_cast<int64_t>(rng() % 400)));
    }
    behaviors_["job"] = b;
    auto r = Spot("job", 86400, 86400 * 2);
    r.mutable_checkpoint_config()->set_s3_uri(absl::StrCat("s3://bucket/ckpt/", run, "/"));
    Create(r);
    loop_->RunUntilIdle();
    ASSERT_EQ(Final("job"), "Completed/Completed");
    const sim::SimJobStats& st = stats_["job"];
    EXPECT_TRUE(st.completed);
    EXPECT_EQ(st.progress, b.run_duration);  // the same final state
    const int actual_interruptions = st.attempts - 1;
    EXPECT_LE(actual_interruptions, interruptions);
    EXPECT_LE(st.work_executed - b.run_duration, k * actual_interruptions);
  }
}

// --- Moves between spot and on-demand capacity (MigrateTrainingJob, reviews)

// A spot job moved to on-demand while it trains: its containers stop and sync
// a checkpoint, the spot instances go, and the next attempt runs on on-demand
// from that checkpoint. No interruption is counted.
TEST_F(SpotTest, AJobMovedToOnDemandWhileTrainingResumesFromItsCheckpoint) {
  sim::SimJobBehavior b;
  b.checkpoint_interval = absl::Seconds(100);
  behaviors_["job"] = b;
  auto r = Spot("job");
  r.mutable_checkpoint_config()->set_s3_uri("s3://bucket/ckpt/job/");
  Create(r);
  loop_->RunUntil(start_ + absl::Seconds(340));  // 250 s of work done, 200 s saved
  ASSERT_TRUE(engine_->MigrateTrainingJob("job", /*to_spot=*/false).ok());
  EXPECT_EQ(Final("job"), "InProgress/Restarting");
  EXPECT_EQ(LastMessage("job"), "Moving the training job to on-demand capacity");
  loop_->RunUntilIdle();
  // SIGTERM handled at 341; the on-demand attempt provisions at once and
  // runs the 400 s left.
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,340) Restarting[340,341) "
            "Starting[341,431) Downloading[431,431) Training[431,831) Uploading[831,836) "
            "Completed[836,836)");
  EXPECT_EQ(stats_["job"].work_executed, absl::Seconds(651));
  EXPECT_EQ(stats_["job"].spot_interruptions, 0);
  EXPECT_TRUE(stats_["job"].completed);
  const sim::SimAccounting bill = sim_->Accounting();
  EXPECT_EQ(bill.spot_busy, absl::Seconds(281));       // held 60 -> 341
  EXPECT_EQ(bill.on_demand_busy, absl::Seconds(435));  // held 401 -> 836
  // Billable: instance time over both attempts (not the 60 s between them);
  // training time 60 -> 836. No interruption in the message.
  EXPECT_EQ(Describe("job").billable_time_in_seconds(), 281 + 435);
  EXPECT_EQ(Describe("job").training_time_in_seconds(), 776);
  EXPECT_EQ(LastMessage("job"), "Training job completed. Managed spot training savings: 7.7%");
}

// A job waiting for spot capacity moves at once: what it asked for is
// abandoned and on-demand capacity is asked for; it never holds spot.
TEST_F(SpotTest, AJobWaitingForSpotCapacityMovesAtOnce) {
  sim::SimJobBehavior b;
  b.capacity_failures = 1;  // the first request is refused at 5 s
  behaviors_["job"] = b;
  Create(Spot("job"));
  loop_->RunUntil(start_ + absl::Seconds(10));
  EXPECT_EQ(LastMessage("job"), "Waiting for Spot capacity");
  ASSERT_TRUE(engine_->MigrateTrainingJob("job", /*to_spot=*/false).ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,10) Restarting[10,10) Starting[10,100) Downloading[100,100) "
            "Training[100,700) Uploading[700,705) Completed[705,705)");
  const sim::SimAccounting bill = sim_->Accounting();
  EXPECT_EQ(bill.spot_busy, absl::ZeroDuration());
  EXPECT_EQ(bill.on_demand_busy, absl::Seconds(635));
}

// What cannot move, and a move to where the job is already.
TEST_F(SpotTest, MovesThatCannotBeMadeAreRefusedAndChangeNothing) {
  EXPECT_TRUE(absl::IsNotFound(engine_->MigrateTrainingJob("nobody", false)));
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->MigrateTrainingJob("not a name", false)));
  Create(OnDemand("od"));
  const absl::Status od = engine_->MigrateTrainingJob("od", true);
  EXPECT_TRUE(absl::IsFailedPrecondition(od)) << od;
  EXPECT_NE(od.message().find("EnableManagedSpotTraining"), std::string::npos) << od;

  sim::SimJobBehavior b;
  b.spot_notices = {absl::Seconds(100)};
  behaviors_["job"] = b;
  Create(Spot("job"));
  EXPECT_TRUE(engine_->MigrateTrainingJob("job", /*to_spot=*/true).ok());  // already there
  loop_->RunUntil(start_ + absl::Seconds(190));  // the notice: stopping for it
  EXPECT_EQ(Final("job"), "InProgress/Interrupted");
  const absl::Status interrupted = engine_->MigrateTrainingJob("job", false);
  EXPECT_TRUE(absl::IsFailedPrecondition(interrupted)) << interrupted;
  EXPECT_NE(interrupted.message().find("being interrupted"), std::string::npos) << interrupted;
  loop_->RunUntilIdle();
  EXPECT_EQ(Final("job"), "Completed/Completed");
  EXPECT_EQ(Transitions("job").find("Restarting"), std::string::npos);
  const absl::Status ended = engine_->MigrateTrainingJob("job", false);
  EXPECT_TRUE(absl::IsFailedPrecondition(ended)) << ended;
  EXPECT_NE(ended.message().find("its status is Completed"), std::string::npos) << ended;
}

// A handler that reviews: it is asked before the first provisioning and then
// every period, with what the engine knows, and its answer moves the job.
class ScriptedReviews final : public SpotInterruptionHandler {
 public:
  InterruptionDecision OnInterruption(const InterruptionContext& c) override {
    return DefaultInterruptionDecision(c, absl::Seconds(30));
  }
  std::string Name() const override { return "Scripted"; }
  absl::Duration ReviewPeriod() const override { return absl::Seconds(50); }
  bool Review(const CapacityReview& c) override {
    const char* when = c.when == CapacityReview::When::kBeforeProvisioning ? "before"
                       : c.when == CapacityReview::When::kWaiting          ? "waiting"
                                                                           : "running";
    seen.push_back(absl::StrCat(absl::ToInt64Seconds(c.now - c.creation_time), ":", when, ":",
                                c.on_spot ? "spot" : "od", ":", c.attempt, ":",
                                absl::ToInt64Seconds(c.run_time_used)));
    return c.now - c.creation_time < move_at ? first_spot : !first_spot;
  }
  std::vector<std::string> seen;
  bool first_spot = true;
  absl::Duration move_at = absl::Seconds(200);
};

TEST_F(SpotTest, AReviewingHandlerIsAskedEachPeriodAndItsAnswerMovesTheJob) {
  ScriptedReviews reviews;
  handler_ = &reviews;
  Build();
  Create(Spot("job"));
  loop_->RunUntilIdle();
  // Reviews at 50, 100, 150 keep it on spot; the one at 200 moves it (SIGTERM
  // handled at 201); the on-demand attempt is reviewed on and stays.
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,200) Restarting[200,201) "
            "Starting[201,291) Downloading[291,291) Training[291,891) Uploading[891,896) "
            "Completed[896,896)");
  ASSERT_GE(reviews.seen.size(), 6u);
  EXPECT_EQ(reviews.seen[0], "0:before:spot:1:0");
  EXPECT_EQ(reviews.seen[1], "50:waiting:spot:1:0");
  EXPECT_EQ(reviews.seen[2], "100:running:spot:1:40");
  EXPECT_EQ(reviews.seen[4], "200:running:spot:1:140");
  EXPECT_EQ(reviews.seen[5], "250:waiting:od:2:141");
  // No review once training is over (Uploading from 891).
  EXPECT_EQ(reviews.seen.back(), "850:running:od:2:730");  // on-demand held since 261
  EXPECT_EQ(sim_->Accounting().spot_busy, absl::Seconds(141));
}

// Before the first provisioning a review only places the first attempt.
TEST_F(SpotTest, AReviewBeforeTheFirstProvisioningPlacesTheFirstAttempt) {
  ScriptedReviews reviews;
  reviews.first_spot = false;
  reviews.move_at = absl::InfiniteDuration();
  handler_ = &reviews;
  Build();
  Create(Spot("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,690) Uploading[690,695) "
            "Completed[695,695)");
  EXPECT_EQ(sim_->Accounting().spot_busy, absl::ZeroDuration());
  EXPECT_EQ(reviews.seen[0], "0:before:spot:1:0");
  EXPECT_EQ(reviews.seen[1], "50:waiting:od:1:0");
}

// A review that keeps a job waiting out a capacity back-off where it is asks
// for the capacity at once: refused at 5 s and at 40 s, the job would ask
// again at 100 s; the review at 50 s asks then.
TEST_F(SpotTest, AReviewOfAJobWaitingForCapacityAsksAgainAtOnce) {
  ScriptedReviews reviews;
  reviews.move_at = absl::InfiniteDuration();
  handler_ = &reviews;
  Build();
  sim::SimJobBehavior b;
  b.capacity_failures = 2;
  behaviors_["job"] = b;
  Create(Spot("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,140) Downloading[140,140) Training[140,740) Uploading[740,745) "
            "Completed[745,745)");
  ASSERT_GE(reviews.seen.size(), 3u);
  EXPECT_EQ(reviews.seen[1], "35:before:spot:1:0");  // the back-off's own retry
  EXPECT_EQ(reviews.seen[2], "50:waiting:spot:1:0");
}

TEST(DefaultSpotHandlerTest, DecidesByCauseAndBudget) {
  auto handler = NewDefaultSpotInterruptionHandler();
  InterruptionContext c;
  c.host_name = "algo-2";
  c.preempted = true;
  c.on_spot = true;
  c.spot_interruptions = 50;
  EXPECT_EQ(handler->OnInterruption(c).action, InterruptionDecision::Action::kRetry);
  EXPECT_TRUE(handler->OnInterruption(c).use_spot);
  c.preempted = false;
  c.infrastructure_failures = 2;
  c.max_retry_attempts = 2;
  EXPECT_EQ(handler->OnInterruption(c).action, InterruptionDecision::Action::kRetry);
  c.infrastructure_failures = 3;
  const auto give_up = handler->OnInterruption(c);
  EXPECT_EQ(give_up.action, InterruptionDecision::Action::kGiveUp);
  EXPECT_EQ(give_up.failure_reason,
            "InternalServerError: instance algo-2 was lost; RetryStrategy.MaximumRetryAttempts "
            "(2) is used up");
}

// The function the default handler (and the Uniform Progress policy) decide
// with: the delay it is given, the same capacity type, and the message for a
// job without a RetryStrategy.
TEST(DefaultSpotHandlerTest, DefaultInterruptionDecisionKeepsCapacityTypeAndDelay) {
  InterruptionContext c;
  c.host_name = "algo-1";
  c.on_spot = false;
  c.infrastructure_failures = 1;
  const InterruptionDecision d = DefaultInterruptionDecision(c, absl::Seconds(7));
  EXPECT_EQ(d.action, InterruptionDecision::Action::kGiveUp);
  EXPECT_FALSE(d.use_spot);
  EXPECT_EQ(d.delay, absl::Seconds(7));
  EXPECT_EQ(d.failure_reason,
            "InternalServerError: instance algo-1 was lost; the job has no RetryStrategy");
  c.preempted = true;
  c.on_spot = true;
  const InterruptionDecision retry = DefaultInterruptionDecision(c, absl::Seconds(7));
  EXPECT_EQ(retry.action, InterruptionDecision::Action::kRetry);
  EXPECT_TRUE(retry.use_spot);
  EXPECT_EQ(retry.delay, absl::Seconds(7));
  EXPECT_TRUE(retry.failure_reason.empty());
  // The handler decides the same, with its default 30 s delay.
  const InterruptionDecision by_handler =
      NewDefaultSpotInterruptionHandler()->OnInterruption(c);
  EXPECT_EQ(by_handler.delay, absl::Seconds(30));
  EXPECT_EQ(by_handler.action, retry.action);
}

}  // namespace
}  // namespace kiln
