// SimClusterProvider with models: capacity, spot markets, keyed draws,
// accounting, and its own controls (JobStats, ForgetJob).
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"
#include "kiln/sim/workload.h"

namespace kiln::sim {
namespace {

// Hears notices and losses.
class Listener : public ClusterListener {
 public:
  void OnInterruptionNotice(const Cluster& cluster, const Instance& instance, absl::Time deadline) override {
    notices.push_back({cluster.id, deadline});
  }
  void OnInstanceLost(const Cluster& cluster, const Instance& instance) override { lost.push_back(cluster.id); }
  std::vector<std::pair<std::string, absl::Time>> notices;
  std::vector<std::string> lost;
};

class SimClusterProviderTest : public testing::Test {
 protected:
  SimClusterProviderTest() {
    models_.failures.enabled = false;
    InstanceTypeModel t;
    t.on_demand_per_hour = 3.6;  // a dollar per 1,000 s
    t.spot_per_hour = 0.36;
    t.provisioning = {absl::Seconds(60), 0};
    t.container_start = {absl::Seconds(10), 0};
    models_.types["ml.c5.xlarge"] = t;
  }

  void Build() {
    provider_.reset();
    loop_ = NewVirtualEventLoop();
    start_ = loop_->Now();
    SimClusterOptions options;
    options.models = std::make_shared<const SimModels>(models_);
    provider_ = NewSimClusterProvider(*loop_, options);
    provider_->SetListener(&listener_);
  }

  // Provisions now; the result lands in the returned slot when granted.
  std::shared_ptr<std::optional<absl::StatusOr<Cluster>>> Provision(const std::string& job, int count, bool spot) {
    auto slot = std::make_shared<std::optional<absl::StatusOr<Cluster>>>();
    ClusterSpec spec;
    spec.job_name = job;
    spec.spot = spot;
    spec.groups.push_back({kHomogeneousGroupName, "ml.c5.xlarge", count});
    provider_->Provision(spec, [slot](absl::StatusOr<Cluster> c) { *slot = std::move(c); });
    return slot;
  }

  void RunFor(absl::Duration d) { loop_->RunUntil(loop_->Now() + d); }

  // A provider with the fixture's models and `options`' behaviour, in place
  // of Build()'s, and an engine over it with `eo`'s other options.
  // REQUIRES: Build().
  std::unique_ptr<Engine> EngineOver(SimClusterOptions options, EngineOptions eo = {}) {
    options.models = std::make_shared<const SimModels>(models_);
    provider_.reset();
    provider_ = NewSimClusterProvider(*loop_, options);
    eo.loop = loop_.get();
    eo.cluster_provider = provider_.get();
    return NewEngine(std::move(eo)).value();
  }

  SimModels models_ = DefaultModels();
  Listener listener_;
  std::unique_ptr<EventLoop> loop_;
  absl::Time start_;
  std::unique_ptr<SimClusterProvider> provider_;
};

TEST_F(SimClusterProviderTest, OnDemandCapacityRefusesUntilInstancesAreReleased) {
  models_.types["ml.c5.xlarge"].capacity = 3;
  Build();
  auto a = Provision("a", 2, false);
  auto b = Provision("b", 2, false);
  RunFor(absl::Seconds(59));
  ASSERT_TRUE(b->has_value());  // refused after the capacity-error latency
  EXPECT_TRUE(absl::IsResourceExhausted(b->value().status()));
  EXPECT_FALSE(a->has_value());  // still launching
  RunFor(absl::Seconds(1));
  ASSERT_TRUE(a->has_value() && a->value().ok());
  EXPECT_EQ(a->value()->instances.size(), 2u);
  provider_->Release(a->value().value());
  auto c = Provision("b", 2, false);
  RunFor(absl::Seconds(60));
  ASSERT_TRUE(c->has_value());
  EXPECT_TRUE(c->value().ok());
  EXPECT_EQ(provider_->Accounting().capacity_refusals, 1);
}

TEST_F(SimClusterProviderTest, SpotTraceAdmitsUpToTheAvailableCount) {
  models_.types["ml.c5.xlarge"].spot.kind = SpotMarket::Kind::kTrace;
  models_.types["ml.c5.xlarge"].spot.trace = ParseSpotTrace(R"({"metadata":{"gap_seconds":300},"data":[3,3,3,3]})").value();
  Build();
  auto a = Provision("a", 2, true);
  auto b = Provision("b", 2, true);
  auto c = Provision("c", 1, true);
  RunFor(absl::Seconds(60));
  EXPECT_TRUE(a->value().ok());
  EXPECT_TRUE(absl::IsResourceExhausted(b->value().status()));
  EXPECT_TRUE(c->value().ok());
}

TEST_F(SimClusterProviderTest, SpotTraceDropTakesBackTheNewestClusterWithATwoMinuteNotice) {
  models_.types["ml.c5.xlarge"].spot.kind = SpotMarket::Kind::kTrace;
  models_.types["ml.c5.xlarge"].spot.trace = ParseSpotTrace(R"({"metadata":{"gap_seconds":300},"data":[2,2,1,1]})").value();
  Build();
  auto older = Provision("older", 1, true);
  RunFor(absl::Seconds(10));
  auto newer = Provision("newer", 1, true);
  RunFor(absl::Seconds(100));
  ASSERT_TRUE(older->value().ok() && newer->value().ok());
  RunFor(absl::Seconds(600) - (loop_->Now() - start_));  // tick 2: one instance left
  ASSERT_EQ(listener_.notices.size(), 1u);
  EXPECT_EQ(listener_.notices[0].first, newer->value()->id);
  EXPECT_EQ(listener_.notices[0].second, start_ + absl::Seconds(600) + absl::Minutes(2));
  EXPECT_TRUE(listener_.lost.empty());
  RunFor(absl::Minutes(2));
  EXPECT_EQ(listener_.lost, std::vector<std::string>{newer->value()->id});
  EXPECT_EQ(provider_->Accounting().spot_preemptions, 1);
  // The trace wraps: back to two at tick 4, and no further notices.
  provider_->Release(newer->value().value());
  RunFor(absl::Hours(1));
  EXPECT_EQ(listener_.notices.size(), 1u);
}

TEST_F(SimClusterProviderTest, PoissonPreemptionsComeAtTheModelledRate) {
  models_.types["ml.c5.xlarge"].spot.kind = SpotMarket::Kind::kPoisson;
  models_.types["ml.c5.xlarge"].spot.preemptions_per_instance_hour = 0.5;
  Build();
  constexpr int kClusters = 4000;
  for (int i = 0; i < kClusters; ++i) Provision(absl::StrCat("job-", i), 2, true);
  RunFor(absl::Seconds(60));
  // Two instances at 0.5 per instance-hour: the first notice after 1 h on average.
  RunFor(absl::Hours(1));
  const double fraction = static_cast<double>(listener_.notices.size()) / kClusters;
  EXPECT_NEAR(fraction, 1 - std::exp(-1.0), 0.02);
}

TEST_F(SimClusterProviderTest, DrawsAreKeyedByJobNotByOrder) {
  models_.types["ml.c5.xlarge"].provisioning = {absl::Seconds(60), 0.5};
  // The latency job "x" is granted after, alone or after ten others.
  auto latency_of_x = [&](int others) {
    Build();
    for (int i = 0; i < others; ++i) Provision(absl::StrCat("other-", i), 1, false);
    const absl::Time asked = loop_->Now();
    std::optional<absl::Time> granted;
    ClusterSpec spec;
    spec.job_name = "x";
    spec.groups.push_back({kHomogeneousGroupName, "ml.c5.xlarge", 1});
    provider_->Provision(spec, [&](absl::StatusOr<Cluster>) { granted = loop_->Now(); });
    loop_->RunUntilIdle();
    return *granted - asked;
  };
  const absl::Duration alone = latency_of_x(0);
  EXPECT_EQ(latency_of_x(10), alone);
  EXPECT_NE(alone, absl::Seconds(60));  // drawn, not the median
}

TEST_F(SimClusterProviderTest, ForgetJobReturnsItsStatsAndDropsThem) {
  Build();
  SimClusterOptions options;
  options.defaults.run_duration = absl::Minutes(5);
  auto engine = EngineOver(std::move(options));
  v1::CreateTrainingJobRequest r = DefaultRequest("ml.c5.xlarge", 2, "File", 0);
  r.clear_input_data_config();
  r.set_training_job_name("job");
  ASSERT_TRUE(engine->CreateTrainingJob(r).ok());
  loop_->RunUntilIdle();
  const SimJobStats stats = provider_->ForgetJob("job");
  EXPECT_EQ(stats.attempts, 1);
  EXPECT_TRUE(stats.completed);
  EXPECT_EQ(stats.work_executed, absl::Minutes(5));
  EXPECT_EQ(stats.instance_count, 2);
  EXPECT_EQ(provider_->JobStats("job").attempts, 0);
}

// A forgotten job's cluster still answers for that job, not for a later job of the same name.
TEST_F(SimClusterProviderTest, ForgottenJobsClusterDoesNotCountAgainstANewJobOfItsName) {
  Build();
  auto first = Provision("a", 1, false);
  RunFor(absl::Seconds(60));
  ASSERT_TRUE(first->has_value() && first->value().ok());
  provider_->ForgetJob("a");
  auto second = Provision("a", 1, false);
  RunFor(absl::Seconds(60));
  ASSERT_TRUE(second->has_value() && second->value().ok());
  ASSERT_TRUE(provider_
                  ->InjectInterruption(first->value()->instances[0].id,
                                       InterruptionKind::kInstanceLoss, absl::ZeroDuration())
                  .ok());
  EXPECT_EQ(provider_->JobStats("a").instance_failures, 0);
  ASSERT_TRUE(provider_
                  ->InjectInterruption(second->value()->instances[0].id,
                                       InterruptionKind::kInstanceLoss, absl::ZeroDuration())
                  .ok());
  EXPECT_EQ(provider_->JobStats("a").instance_failures, 1);
  EXPECT_EQ(provider_->Accounting().node_failures, 2);
}

// A job deleted and made again under its name is a new job to the provider
// too (the engine gives it a new job id): its Provision calls and attempts
// count from zero, and its name finds the new job's stats.
TEST_F(SimClusterProviderTest, AJobMadeAgainUnderItsNameStartsAfresh) {
  Build();
  SimClusterOptions options;
  options.defaults.run_duration = absl::Minutes(5);
  options.defaults.capacity_failures = 1;  // each job's first Provision is refused
  auto engine = EngineOver(std::move(options));
  for (int round = 1; round <= 2; ++round) {
    v1::CreateTrainingJobRequest r = DefaultRequest("ml.c5.xlarge", 1, "File", 0);
    r.clear_input_data_config();
    r.set_training_job_name("a");
    ASSERT_TRUE(engine->CreateTrainingJob(r).ok()) << round;
    loop_->RunUntilIdle();
    v1::DescribeTrainingJobRequest d;
    d.set_training_job_name("a");
    EXPECT_EQ(engine->DescribeTrainingJob(d)->training_job_status(), "Completed") << round;
    EXPECT_EQ(provider_->Accounting().capacity_refusals, round);
    EXPECT_EQ(provider_->JobStats("a").attempts, 1) << round;
    v1::DeleteTrainingJobRequest del;
    del.set_training_job_name("a");
    ASSERT_TRUE(engine->DeleteTrainingJob(del).ok()) << round;
  }
  EXPECT_EQ(provider_->ForgetJob("a").attempts, 1);
}

// What kiln simulate relies on to delete a job only once its warm pool has let the
// cluster go, instead of asking the engine and being refused.
TEST_F(SimClusterProviderTest, ForgetJobSaysWhetherAWarmPoolStillHoldsTheJobsCluster) {
  Build();
  SimClusterOptions options;
  options.defaults.run_duration = absl::Minutes(5);
  std::vector<std::string> freed;
  options.on_cluster_freed = [&](std::string_view job) { freed.emplace_back(job); };
  auto engine = EngineOver(std::move(options));  // keeps what a job asks for
  using NameAndKeepAlive = std::pair<std::string, int>;
  for (const auto& [name, keep_alive] : {NameAndKeepAlive{"kept", 900}, {"released", 0}}) {
    v1::CreateTrainingJobRequest r = DefaultRequest("ml.c5.xlarge", 2, "File", keep_alive);
    r.clear_input_data_config();
    r.set_training_job_name(name);
    ASSERT_TRUE(engine->CreateTrainingJob(r).ok());
  }
  RunFor(absl::Minutes(10));  // both ended; the first one's cluster waits in its pool
  EXPECT_TRUE(provider_->ForgetJob("kept").holds_cluster);
  EXPECT_FALSE(provider_->ForgetJob("released").holds_cluster);
  EXPECT_EQ(freed, std::vector<std::string>{"released"});
  loop_->RunUntilIdle();  // the pool expires
  EXPECT_EQ(freed, (std::vector<std::string>{"released", "kept"}));
}

// Busy time is what jobs hold (the engine's BillableTimeInSeconds), at the
// capacity's price; time in a warm pool is idle, at the on-demand price.
TEST_F(SimClusterProviderTest, AccountingBillsBusyAndWarmIdleTime) {
  Build();
  SimClusterOptions options;
  options.defaults.run_duration = absl::Minutes(10);
  options.defaults.upload_duration = absl::Seconds(5);
  EngineOptions eo;
  eo.warm_pools.policy = NewFixedKeepAlive(absl::Minutes(15));
  auto engine = EngineOver(std::move(options), std::move(eo));
  v1::CreateTrainingJobRequest r = DefaultRequest("ml.c5.xlarge", 2, "File", 0);
  r.clear_input_data_config();
  r.set_training_job_name("job");
  ASSERT_TRUE(engine->CreateTrainingJob(r).ok());
  loop_->RunUntilIdle();
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("job");
  const auto described = engine->DescribeTrainingJob(d).value();
  const SimAccounting a = provider_->Accounting();
  // Image time: 30 s (no image size) + 10 s container start; run 600 s; upload 5 s.
  EXPECT_EQ(described.billable_time_in_seconds(), 645);
  EXPECT_EQ(a.on_demand_busy, absl::Seconds(645) * 2);
  EXPECT_EQ(a.warm_idle, absl::Minutes(15) * 2);
  EXPECT_EQ(described.warm_pool_status().resource_retained_billable_time_in_seconds(), 900);
  EXPECT_NEAR(a.cost, (645 + 900) * 2 / 1000.0, 1e-9);
  EXPECT_EQ(a.spot_busy, absl::ZeroDuration());
}

// Each upload reports its own job's URI once, even when a second one starts
// on the cluster while the first is pending (the first job was stopped); a
// released cluster's upload never reports.
TEST_F(SimClusterProviderTest, UploadsReportTheirOwnUrisOnceAndNotAfterRelease) {
  Build();
  SimClusterOptions options;  // no models: the behaviour's upload time
  options.defaults.upload_duration = absl::Seconds(5);
  provider_.reset();
  provider_ = NewSimClusterProvider(*loop_, options);
  auto granted = Provision("a", 1, false);
  loop_->RunUntilIdle();
  ASSERT_TRUE(granted->has_value() && (*granted)->ok());
  const Cluster cluster = ***granted;
  v1::CreateTrainingJobRequest request;
  request.mutable_output_data_config()->set_s3_output_path("s3://b/out");
  std::vector<std::pair<absl::Time, std::string>> reported;
  auto upload = [&](std::string_view job) {
    provider_->UploadArtifacts(JobContext{job, "arn", request, cluster, 1},
                               [&](absl::StatusOr<ArtifactsResult> r) {
                                 ASSERT_TRUE(r.ok());
                                 reported.emplace_back(loop_->Now(), r->model_uri);
                               });
  };
  const absl::Time t0 = loop_->Now();
  upload("a");
  RunFor(absl::Seconds(2));
  upload("b");
  loop_->RunUntilIdle();
  EXPECT_EQ(reported, (std::vector<std::pair<absl::Time, std::string>>{
                          {t0 + absl::Seconds(5), "s3://b/out/a/output/model.tar.gz"},
                          {t0 + absl::Seconds(7), "s3://b/out/b/output/model.tar.gz"}}));
  upload("c");  // and the same cluster again, once nothing is pending
  loop_->RunUntilIdle();
  ASSERT_EQ(reported.size(), 3u);
  EXPECT_EQ(reported[2].second, "s3://b/out/c/output/model.tar.gz");
  upload("d");
  RunFor(absl::Seconds(1));
  provider_->Release(cluster);
  loop_->RunUntilIdle();
  EXPECT_EQ(reported.size(), 3u);
}

// The model's URI is named as the engine and the local backend name it: a
// trailing '/' of S3OutputPath is not doubled, and with CompressionType NONE
// the model is the prefix its files go under, not model.tar.gz.
TEST_F(SimClusterProviderTest, ModelUriFollowsOutputPathAndCompressionType) {
  Build();
  auto granted = Provision("a", 1, false);
  loop_->RunUntilIdle();
  ASSERT_TRUE(granted->has_value() && (*granted)->ok());
  const Cluster cluster = ***granted;
  auto model_uri = [&](const std::string& job, const std::string& compression) {
    v1::CreateTrainingJobRequest request;
    request.mutable_output_data_config()->set_s3_output_path("s3://b/out/");
    v1::OutputDataConfig* out = request.mutable_output_data_config();
    if (!compression.empty()) out->set_compression_type(compression);
    std::optional<absl::StatusOr<ArtifactsResult>> result;
    provider_->UploadArtifacts(JobContext{job, "arn", request, cluster, 1},
                               [&](absl::StatusOr<ArtifactsResult> r) { result = std::move(r); });
    loop_->RunUntilIdle();
    EXPECT_TRUE(result.has_value() && result->ok());
    return result.has_value() && result->ok() ? (*result)->model_uri : std::string();
  };
  EXPECT_EQ(model_uri("a", ""), "s3://b/out/a/output/model.tar.gz");
  EXPECT_EQ(model_uri("b", "GZIP"), "s3://b/out/b/output/model.tar.gz");
  EXPECT_EQ(model_uri("c", "NONE"), "s3://b/out/c/output/model/");
  provider_->Release(cluster);
  loop_->RunUntilIdle();
}

// A released cluster's record is reused for the next Provision: the new
// cluster must come out exactly as a new one would, whatever the old one had.
TEST_F(SimClusterProviderTest, AClusterAfterAReleaseIsMadeAsNew) {
  Build();
  auto provision = [&](const std::string& job, std::vector<InstanceGroupSpec> groups) {
    ClusterSpec spec;
    spec.job_name = job;
    spec.groups = std::move(groups);
    auto slot = std::make_shared<std::optional<absl::StatusOr<Cluster>>>();
    provider_->Provision(spec, [slot](absl::StatusOr<Cluster> c) { *slot = std::move(c); });
    RunFor(absl::Minutes(5));
    EXPECT_TRUE(slot->has_value() && (*slot)->ok());
    return slot->has_value() && (*slot)->ok() ? ***slot : Cluster();
  };
  auto ids = [](const Cluster& c) {
    std::vector<std::string> out;
    for (const Instance& i : c.instances) {
      out.push_back(absl::StrCat(i.id, " ", i.host_name, " ", i.group_name, " ", i.instance_type));
    }
    return out;
  };
  const Cluster a = provision("a", {{"a-group-with-a-long-name", "ml.c5.xlarge", 3}});
  EXPECT_EQ(ids(a), (std::vector<std::string>{
                        "sim-c1-i1 algo-1 a-group-with-a-long-name ml.c5.xlarge",
                        "sim-c1-i2 algo-2 a-group-with-a-long-name ml.c5.xlarge",
                        "sim-c1-i3 algo-3 a-group-with-a-long-name ml.c5.xlarge"}));
  provider_->Release(a);
  const Cluster b = provision("b", {{"g", "ml.c5.xlarge", 1}});
  EXPECT_EQ(ids(b), (std::vector<std::string>{"sim-c2-i1 algo-1 g ml.c5.xlarge"}));
  EXPECT_FALSE(b.spot);
  provider_->Release(b);
  const Cluster c = provision("c", {{"x", "ml.c5.xlarge", 2}, {"y", "ml.c5.xlarge", 2}});
  EXPECT_EQ(ids(c), (std::vector<std::string>{
                        "sim-c3-i1 algo-1 x ml.c5.xlarge", "sim-c3-i2 algo-2 x ml.c5.xlarge",
                        "sim-c3-i3 algo-3 y ml.c5.xlarge", "sim-c3-i4 algo-4 y ml.c5.xlarge"}));
  // Nothing of the released clusters is billed after their release, nor
  // counted against capacity: c is billed from its grant, for its 4 instances.
  const SimAccounting before = provider_->Accounting();
  RunFor(absl::Seconds(100));
  const SimAccounting after = provider_->Accounting();
  EXPECT_EQ(after.on_demand_busy - before.on_demand_busy, absl::Seconds(400));
  EXPECT_EQ(after.clusters, 3);
  // A job that ran on a released cluster does not see the new cluster's runs.
  EXPECT_EQ(provider_->JobStats("a").attempts, 0);
  EXPECT_EQ(provider_->JobStats("c").attempts, 0);
}

}  // namespace
}  // namespace kiln::sim
