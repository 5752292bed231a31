#include "kiln/engine.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "core/requests.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kiln/json.h"
#include "kiln/sim/sim.h"
#include "mocks/forwarding_provider.h"

namespace kiln {
namespace {

using sim::SimJobBehavior;

class RecordingObserver : public JobObserver {
 public:
  void OnStatusChange(const StatusEvent& e) override {
    statuses.push_back(absl::StrCat(std::string(e.job_name), ":", std::string(e.status), "/",
                                    std::string(e.secondary_status)));
  }
  void OnLogLine(std::string_view job, std::string_view host, std::string_view line,
                 absl::Time) override {
    lines.push_back(
        absl::StrCat(std::string(job), "@", std::string(host), ": ", std::string(line)));
  }
  void OnMetric(std::string_view job, std::string_view name, double value, absl::Time) override {
    metrics.push_back(absl::StrCat(std::string(job), ":", std::string(name), "=", value));
  }
  std::vector<std::string> statuses, lines, metrics;
};

class EngineTest : public testing::Test {
 protected:
  void SetUp() override { Build(); }

  void Build(absl::Duration grace = absl::Seconds(120)) {
    engine_.reset();
    channel_.reset();  // before their loop
    forward_.reset();
    provider_.reset();
    loop_ = NewVirtualEventLoop();
    start_ = loop_->Now();
    sim::SimClusterOptions cluster_options;
    cluster_options.behavior = [this](std::string_view job) {
      auto it = behaviors_.find(std::string(job));
      return it == behaviors_.end() ? SimJobBehavior() : it->second;
    };
    provider_ = sim::NewSimClusterProvider(*loop_, cluster_options);
    forward_ = std::make_unique<ForwardingProvider>(*provider_, *loop_);
    channel_ = sim::NewSimDataChannel(*loop_, {});
    EngineOptions options;
    options.loop = loop_.get();
    options.cluster_provider = forward_.get();
    options.data_channel = channel_.get();
    options.stop_grace_period = grace;
    engine_ = NewEngine(std::move(options)).value();
    engine_->AddObserver(&observer_);
  }

  static v1::CreateTrainingJobRequest Request(const std::string& name) {
    return tests::MinimalRequest(name);
  }

  // A request for a job `name` that logs a loss at 100 s, with a metric
  // definition for it, and is short of capacity once; its hyperparameters
  // `hyper` are set in the order given.
  v1::CreateTrainingJobRequest ReportingRequest(
      const std::string& name,
      const std::vector<std::pair<std::string, std::string>>& hyper = {{"lr", "0.1"}}) {
    SimJobBehavior b;
    b.log_lines = {{absl::Seconds(100), "epoch 1 loss=0.5;"}};
    b.capacity_failures = 1;
    behaviors_[name] = b;
    v1::CreateTrainingJobRequest r = Request(name);
    for (const auto& [key, value] : hyper) (*r.mutable_hyper_parameters())[key] = value;
    auto* loss = r.mutable_algorithm_specification()->add_metric_definitions();
    loss->set_name("train:loss");
    loss->set_regex("loss=(.*?);");
    r.mutable_stopping_condition()->set_max_runtime_in_seconds(3600);
    return r;
  }

  void Create(const v1::CreateTrainingJobRequest& r) {
    ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  }

  void RunUntilSecond(int64_t s) { loop_->RunUntil(start_ + absl::Seconds(s)); }

  v1::DescribeTrainingJobResponse Describe(const std::string& name) {
    v1::DescribeTrainingJobRequest r;
    r.set_training_job_name(name);
    auto d = engine_->DescribeTrainingJob(r);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : v1::DescribeTrainingJobResponse();
  }

  int64_t Offset(const google::protobuf::Timestamp& t) const {
    return absl::ToInt64Seconds(absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()) -
                                start_);
  }

  // "Starting[0,90) Downloading[90,90) ..." with times in seconds from the start.
  std::string Transitions(const std::string& name) {
    std::vector<std::string> out;
    const v1::DescribeTrainingJobResponse d = Describe(name);
    for (const auto& t : d.secondary_status_transitions()) {
      out.push_back(absl::StrCat(t.status(), "[", Offset(t.start_time()), ",",
                                 t.has_end_time() ? absl::StrCat(Offset(t.end_time())) : "", ")"));
    }
    return absl::StrJoin(out, " ");
  }

  absl::Status Stop(const std::string& name) {
    v1::StopTrainingJobRequest r;
    r.set_training_job_name(name);
    return engine_->StopTrainingJob(r);
  }

  std::map<std::string, SimJobBehavior> behaviors_;
  std::unique_ptr<EventLoop> loop_;
  absl::Time start_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<ForwardingProvider> forward_;  // what the engine calls
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<Engine> engine_;
  RecordingObserver observer_;
};

// Default sim behaviour: provision 60 s, image 30 s, run 600 s, upload 5 s.

TEST_F(EngineTest, HappyPathRunsEveryStatusWithTimesAndBilling) {
  Create(Request("job"));
  auto d = Describe("job");
  EXPECT_EQ(d.training_job_status(), "InProgress");
  EXPECT_EQ(d.secondary_status(), "Starting");
  loop_->RunUntilIdle();
  d = Describe("job");
  EXPECT_EQ(d.training_job_status(), "Completed");
  EXPECT_EQ(d.secondary_status(), "Completed");
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,690) Uploading[690,695) "
            "Completed[695,695)");
  EXPECT_EQ(d.secondary_status_transitions(0).status_message(),
            "Preparing the instances for training");
  EXPECT_EQ(Offset(d.creation_time()), 0);
  EXPECT_EQ(Offset(d.training_start_time()), 60);
  EXPECT_EQ(Offset(d.training_end_time()), 695);
  EXPECT_EQ(Offset(d.last_modified_time()), 695);
  EXPECT_EQ(d.training_time_in_seconds(), 635);
  EXPECT_EQ(d.billable_time_in_seconds(), 635);
  EXPECT_EQ(d.model_artifacts().s3_model_artifacts(), "s3://bucket/out/job/output/model.tar.gz");
  EXPECT_EQ(d.training_job_arn(), "arn:aws:sagemaker:us-east-1:000000000000:training-job/job");
  EXPECT_EQ(d.stopping_condition().max_runtime_in_seconds(), 86400);  // the default, shown
  EXPECT_EQ(d.resource_config().instance_type(), "ml.m5.xlarge");      // the request, echoed
  EXPECT_FALSE(d.has_failure_reason());
  EXPECT_EQ(observer_.statuses,
            (std::vector<std::string>{"job:InProgress/Starting", "job:InProgress/Starting",
                                      "job:InProgress/Downloading", "job:InProgress/Training",
                                      "job:InProgress/Uploading", "job:Completed/Completed"}));
  EXPECT_EQ(engine_->active_jobs(), 0);
}

TEST_F(EngineTest, DescribeEchoesTheRequest) {
  auto r = Request("job");
  (*r.mutable_hyper_parameters())["lr"] = "0.1";
  (*r.mutable_environment())["MODE"] = "fast";
  r.mutable_experiment_config()->set_experiment_name("exp");
  r.mutable_vpc_config()->add_subnets("subnet-1");
  r.mutable_vpc_config()->add_security_group_ids("sg-1");
  r.set_enable_network_isolation(false);
  auto* tag = r.add_tags();
  tag->set_key("team");
  tag->set_value("ml");
  Create(r);
  auto d = Describe("job");
  EXPECT_EQ(d.hyper_parameters().at("lr"), "0.1");
  EXPECT_EQ(d.environment().at("MODE"), "fast");
  EXPECT_EQ(d.experiment_config().experiment_name(), "exp");
  EXPECT_EQ(d.vpc_config().subnets(0), "subnet-1");
  EXPECT_TRUE(d.has_enable_network_isolation());
  EXPECT_EQ(d.algorithm_specification().training_image(), "train:latest");
  EXPECT_EQ(d.role_arn(), r.role_arn());
}

TEST_F(EngineTest, DownloadingLastsAsLongAsTheChannels) {
  auto r = Request("job");
  auto* c = r.add_input_data_config();
  c->set_channel_name("train");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://bucket/train/");
  Create(r);
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,100) Training[100,700) Uploading[700,705) "
            "Completed[705,705)");
}

TEST_F(EngineTest, StopDuringTrainingSignalsUploadsAndEndsStopped) {
  Create(Request("job"));
  RunUntilSecond(200);
  ASSERT_TRUE(Stop("job").ok());
  EXPECT_EQ(Describe("job").training_job_status(), "Stopping");  // at once
  loop_->RunUntilIdle();
  auto d = Describe("job");
  EXPECT_EQ(d.training_job_status(), "Stopped");
  EXPECT_EQ(d.secondary_status(), "Stopped");
  // SIGTERM at 200, exit 1 s later, upload 5 s.
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,200) Stopping[200,206) "
            "Stopped[206,206)");
  EXPECT_EQ(d.training_time_in_seconds(), 146);
}

TEST_F(EngineTest, StopKillsAContainerThatIgnoresSigtermAfterTheGracePeriod) {
  Build(absl::Seconds(30));
  SimJobBehavior b;
  b.sigterm_exit_delay = absl::InfiniteDuration();
  behaviors_["job"] = b;
  Create(Request("job"));
  RunUntilSecond(200);
  ASSERT_TRUE(Stop("job").ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,200) Stopping[200,235) "
            "Stopped[235,235)");
}

TEST_F(EngineTest, DefaultGracePeriodIs120Seconds) {
  SimJobBehavior b;
  b.sigterm_exit_delay = absl::InfiniteDuration();
  behaviors_["job"] = b;
  Create(Request("job"));
  RunUntilSecond(200);
  ASSERT_TRUE(Stop("job").ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,200) Stopping[200,325) "
            "Stopped[325,325)");
}

TEST_F(EngineTest, StopTwiceIsOneStop) {
  Create(Request("job"));
  RunUntilSecond(200);
  ASSERT_TRUE(Stop("job").ok());
  RunUntilSecond(201);
  ASSERT_TRUE(Stop("job").ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,200) Stopping[200,206) "
            "Stopped[206,206)");
  absl::Status again = Stop("job");
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.message(),
            "The request was rejected because the training job is in status Stopped.");
}

TEST_F(EngineTest, StopDuringDownloadingEndsWithoutTraining) {
  auto r = Request("job");
  auto* c = r.add_input_data_config();
  c->set_channel_name("train");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://bucket/train/");
  Create(r);
  RunUntilSecond(95);
  ASSERT_TRUE(Stop("job").ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,95) Stopping[95,95) Stopped[95,95)");
  auto d = Describe("job");
  EXPECT_EQ(d.training_time_in_seconds(), 35);  // instances were held from 60 to 95
}

TEST_F(EngineTest, StopWhileStartingEndsAtOnceWithoutBilling) {
  Create(Request("job"));
  RunUntilSecond(30);  // provisioning in flight
  ASSERT_TRUE(Stop("job").ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"), "Starting[0,30) Stopping[30,30) Stopped[30,30)");
  auto d = Describe("job");
  EXPECT_FALSE(d.has_training_start_time());
  EXPECT_FALSE(d.has_billable_time_in_seconds());
}

TEST_F(EngineTest, CapacityShortageIsPendingWithBackoffThenRuns) {
  SimJobBehavior b;
  b.capacity_failures = 2;  // each answered after 5 s
  behaviors_["job"] = b;
  Create(Request("job"));
  loop_->RunUntilIdle();
  // Fail at 5, retry at 35 fails at 40, retry at 100 (backoff doubled) gets
  // instances at 160.
  EXPECT_EQ(Transitions("job"),
            "Starting[0,5) Pending[5,160) Starting[160,190) Downloading[190,190) "
            "Training[190,790) Uploading[790,795) Completed[795,795)");
  EXPECT_EQ(Describe("job").secondary_status_transitions(1).status_message(),
            "Insufficient capacity error from EC2 while launching instances, retrying!");
}

TEST_F(EngineTest, StopDuringPendingEnds) {
  SimJobBehavior b;
  b.capacity_failures = 100;
  behaviors_["job"] = b;
  Create(Request("job"));
  RunUntilSecond(50);
  ASSERT_TRUE(Stop("job").ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"), "Starting[0,5) Pending[5,50) Stopping[50,50) Stopped[50,50)");
  EXPECT_EQ(loop_->Now(), start_ + absl::Seconds(50));  // the retry timer was cancelled
}

TEST_F(EngineTest, MaxPendingTimeFailsWithCapacityError) {
  SimJobBehavior b;
  b.capacity_failures = 1000;
  behaviors_["job"] = b;
  auto r = Request("job");
  r.mutable_stopping_condition()->set_max_pending_time_in_seconds(7200);
  Create(r);
  loop_->RunUntilIdle();
  auto d = Describe("job");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_EQ(d.failure_reason(),
            "CapacityError: Unable to provision requested ML compute capacity within "
            "MaxPendingTimeInSeconds (7200 s)");
  // Pending from 5; the last request goes out when the budget ends (7205)
  // and is answered at 7210.
  EXPECT_EQ(Transitions("job"), "Starting[0,5) Pending[5,7210) Failed[7210,7210)");
}

TEST_F(EngineTest, MaxRuntimeStopsTheJobAsMaxRuntimeExceeded) {
  auto r = Request("job");
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(300);
  Create(r);
  loop_->RunUntilIdle();
  auto d = Describe("job");
  EXPECT_EQ(d.training_job_status(), "Stopped");
  EXPECT_EQ(d.secondary_status(), "MaxRuntimeExceeded");
  // Runtime counts from the instances (60): the limit hits at 360.
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,360) Stopping[360,366) "
            "MaxRuntimeExceeded[366,366)");
}

TEST_F(EngineTest, MaxRuntimeDuringDownloadingStopsWithoutTraining) {
  auto r = Request("job");
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(35);
  auto* c = r.add_input_data_config();
  c->set_channel_name("train");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://bucket/train/");
  Create(r);
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,95) Stopping[95,95) MaxRuntimeExceeded[95,95)");
}

TEST_F(EngineTest, NonZeroExitFailsWithTheFailureFile) {
  SimJobBehavior b;
  b.exit_code = 1;
  b.failure_text = "ValueError: bad learning rate";
  behaviors_["job"] = b;
  Create(Request("job"));
  loop_->RunUntilIdle();
  auto d = Describe("job");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_EQ(d.failure_reason(), "AlgorithmError: ValueError: bad learning rate");
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,690) Failed[690,690)");
  EXPECT_EQ(d.training_time_in_seconds(), 630);
}

TEST_F(EngineTest, FailureWithoutFailureFilePointsToTheLogs) {
  SimJobBehavior b;
  b.exit_code = 2;
  behaviors_["job"] = b;
  Create(Request("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("job").failure_reason(), "AlgorithmError: See job logs for more information");
}

TEST_F(EngineTest, FailureReasonIsCappedAt1024Characters) {
  SimJobBehavior b;
  b.exit_code = 1;
  b.failure_text = std::string(5000, 'x');
  behaviors_["job"] = b;
  Create(Request("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("job").failure_reason().size(), 1024u);
}

TEST_F(EngineTest, OneFailingInstanceOfThreeFailsTheJob) {
  SimJobBehavior b;
  b.exit_code = 3;
  b.failing_instance = 2;
  behaviors_["job"] = b;
  auto r = Request("job");
  r.mutable_resource_config()->set_instance_count(3);
  Create(r);
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("job").training_job_status(), "Failed");
}

TEST_F(EngineTest, MetricsAreExtractedFromLogLines) {
  SimJobBehavior b;
  b.log_lines = {{absl::Seconds(100), "epoch 1 loss=0.5;"},
                 {absl::Seconds(200), "epoch 2 loss=0.25; acc=0.9"},
                 {absl::Seconds(300), "no metric here"}};
  behaviors_["job"] = b;
  auto r = Request("job");
  auto* loss = r.mutable_algorithm_specification()->add_metric_definitions();
  loss->set_name("train:loss");
  loss->set_regex("loss=(.*?);");
  auto* acc = r.mutable_algorithm_specification()->add_metric_definitions();
  acc->set_name("acc");
  acc->set_regex("acc=([0-9.]+)");
  auto* never = r.mutable_algorithm_specification()->add_metric_definitions();
  never->set_name("never");
  never->set_regex("f1=([0-9.]+)");
  Create(r);
  loop_->RunUntilIdle();
  auto d = Describe("job");
  ASSERT_EQ(d.final_metric_data_list_size(), 2);
  EXPECT_EQ(d.final_metric_data_list(0).metric_name(), "train:loss");
  EXPECT_EQ(d.final_metric_data_list(0).value(), 0.25);
  EXPECT_EQ(Offset(d.final_metric_data_list(0).timestamp()), 290);
  EXPECT_EQ(d.final_metric_data_list(1).metric_name(), "acc");
  EXPECT_EQ(observer_.metrics,
            (std::vector<std::string>{"job:train:loss=0.5", "job:train:loss=0.25", "job:acc=0.9"}));
  EXPECT_EQ(observer_.lines.size(), 3u);
  EXPECT_EQ(observer_.lines[0], "job@algo-1: epoch 1 loss=0.5;");
}

TEST_F(EngineTest, DuplicateNameIsResourceInUse) {
  Create(Request("job"));
  auto again = engine_->CreateTrainingJob(Request("job"));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(),
            "Training job names must be unique within an AWS account and region, and a training "
            "job with this name already exists "
            "(arn:aws:sagemaker:us-east-1:000000000000:training-job/job)");
}

TEST_F(EngineTest, InvalidRequestIsRejectedAndNothingIsKept) {
  auto r = Request("bad_name");
  auto created = engine_->CreateTrainingJob(r);
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->ListTrainingJobs({}).value().training_job_summaries_size(), 0);
  EXPECT_EQ(loop_->pending_events(), 0u);
}

TEST_F(EngineTest, UnknownJobIsNotFound) {
  v1::DescribeTrainingJobRequest r;
  r.set_training_job_name("nope");
  auto d = engine_->DescribeTrainingJob(r);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.status().message(),
            "Requested resource not found: training job 'nope' does not exist.");
  EXPECT_EQ(Stop("nope").code(), absl::StatusCode::kNotFound);
}

// A name that names no job is validated first: a malformed or missing one is
// the request's error, not NotFound.
TEST_F(EngineTest, NameOnlyRequestsWithABadNameFailValidation) {
  ASSERT_TRUE(engine_->CreateTrainingJob(Request("job-1")).ok());
  for (const std::string& name :
       std::vector<std::string>{"not a name", "-job-1", std::string(64, 'a'), ""}) {
    SCOPED_TRACE(name);
    v1::DescribeTrainingJobRequest d;
    v1::StopTrainingJobRequest s;
    v1::DeleteTrainingJobRequest del;
    if (!name.empty()) {
      d.set_training_job_name(name);
      s.set_training_job_name(name);
      del.set_training_job_name(name);
    }
    EXPECT_TRUE(absl::IsInvalidArgument(engine_->DescribeTrainingJob(d).status()));
    EXPECT_TRUE(absl::IsInvalidArgument(engine_->StopTrainingJob(s)));
    EXPECT_TRUE(absl::IsInvalidArgument(engine_->DeleteTrainingJob(del)));
  }
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("job-1");
  EXPECT_TRUE(engine_->DescribeTrainingJob(d).ok());
}

// The engine copies the request: the caller may change and submit it again,
// and what an ended job describes stays as it was, through later jobs,
// updates and deletions of others.
TEST_F(EngineTest, EndedJobsKeepTheRequestTheyWereGiven) {
  auto r = Request("job-0");
  (*r.mutable_hyper_parameters())["lr"] = "0.1";
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(7200);
  Create(r);
  loop_->RunUntilIdle();
  const v1::DescribeTrainingJobResponse before = Describe("job-0");
  ASSERT_EQ(before.training_job_status(), "Completed");
  // Later jobs from the same request object, renamed and changed.
  for (int i = 1; i <= 20; ++i) {
    r.set_training_job_name(absl::StrCat("job-", i));
    (*r.mutable_hyper_parameters())["lr"] = absl::StrCat("0.", i);
    Create(r);
  }
  loop_->RunUntilIdle();
  const v1::DescribeTrainingJobResponse after = Describe("job-0");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(before, after))
      << before.DebugString() << "\nvs\n" << after.DebugString();
  EXPECT_EQ(Describe("job-20").training_job_name(), "job-20");
  EXPECT_EQ(Describe("job-20").hyper_parameters().at("lr"), "0.20");
  EXPECT_EQ(Describe("job-1").stopping_condition().max_runtime_in_seconds(), 7200);

  // UpdateTrainingJob on an ended job keeps what it sets, and only there.
  v1::UpdateTrainingJobRequest update;
  update.set_training_job_name("job-0");
  update.mutable_profiler_config()->set_s3_output_path("s3://bucket/profiles");
  ASSERT_TRUE(engine_->UpdateTrainingJob(update).ok());
  const v1::DescribeTrainingJobResponse updated = Describe("job-0");
  EXPECT_EQ(updated.profiler_config().s3_output_path(), "s3://bucket/profiles");
  EXPECT_EQ(updated.hyper_parameters().at("lr"), "0.1");
  EXPECT_FALSE(Describe("job-1").has_profiler_config());

  v1::DeleteTrainingJobRequest del;
  del.set_training_job_name("job-1");
  ASSERT_TRUE(engine_->DeleteTrainingJob(del).ok());
  EXPECT_EQ(Describe("job-2").hyper_parameters().at("lr"), "0.2");
  EXPECT_EQ(engine_->active_jobs(), 0);
}

// --- Prepared requests

// A job made from a PreparedTrainingJob runs, reports and describes exactly
// as one made from the whole request.
TEST_F(EngineTest, PreparedJobsRunAndDescribeAsWholeRequestsDo) {
  auto r = ReportingRequest("job");
  r.set_enable_managed_spot_training(true);
  r.mutable_stopping_condition()->set_max_wait_time_in_seconds(7200);

  Create(r);
  loop_->RunUntilIdle();
  const std::string whole = ToJson(Describe("job"));
  const std::vector<std::string> whole_statuses = observer_.statuses;
  const std::vector<std::string> whole_metrics = observer_.metrics;

  Build();
  observer_ = RecordingObserver();
  r.set_training_job_name("not a valid name, and ignored");
  auto prepared = engine_->PrepareTrainingJob(r);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_FALSE(prepared->request().has_training_job_name());
  ASSERT_TRUE(engine_->CreateTrainingJob(*prepared, "job").ok());
  loop_->RunUntilIdle();
  EXPECT_EQ(ToJson(Describe("job")), whole);
  EXPECT_EQ(observer_.statuses, whole_statuses);
  EXPECT_EQ(observer_.metrics, whole_metrics);
  EXPECT_FALSE(whole_metrics.empty());
}

// Only the name is left to check per job, and it fails as it would in a
// whole request; nothing is kept.
TEST_F(EngineTest, PreparedJobNamesFailAsInAWholeRequest) {
  auto prepared = engine_->PrepareTrainingJob(Request("")).value();
  for (const std::string& name :
       std::vector<std::string>{"not a name", "-job-1", std::string(64, 'a'), ""}) {
    SCOPED_TRACE(name);
    const absl::Status whole = engine_->CreateTrainingJob(Request(name)).status();
    ASSERT_TRUE(absl::IsInvalidArgument(whole)) << whole;
    EXPECT_EQ(engine_->CreateTrainingJob(prepared, name).status(), whole);
  }
  EXPECT_EQ(engine_->ListTrainingJobs({}).value().training_job_summaries_size(), 0);
  EXPECT_EQ(loop_->pending_events(), 0u);

  ASSERT_TRUE(engine_->CreateTrainingJob(prepared, "job").ok());
  const absl::Status again = engine_->CreateTrainingJob(prepared, "job").status();
  EXPECT_EQ(again, engine_->CreateTrainingJob(Request("job")).status());
  EXPECT_TRUE(absl::IsAlreadyExists(again)) << again;
}

TEST_F(EngineTest, PrepareValidatesAllButTheName) {
  auto r = Request("job");
  r.mutable_resource_config()->set_instance_count(0);
  r.mutable_resource_config()->set_volume_size_in_gb(0);
  const absl::Status whole = engine_->CreateTrainingJob(r).status();
  ASSERT_TRUE(absl::IsInvalidArgument(whole)) << whole;
  EXPECT_EQ(engine_->PrepareTrainingJob(r).status(), whole);
  r.set_training_job_name("bad name");  // ignored: the same two errors, no third
  EXPECT_EQ(engine_->PrepareTrainingJob(r).status(), whole);
}

TEST_F(EngineTest, EmptyOrForeignPreparedJobsAreRefused) {
  auto empty = engine_->CreateTrainingJob(PreparedTrainingJob(), "job");
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status())) << empty.status();

  EngineOptions options;
  options.loop = loop_.get();
  options.cluster_provider = provider_.get();
  auto other = NewEngine(std::move(options)).value();
  const PreparedTrainingJob foreign = other->PrepareTrainingJob(Request("job")).value();
  auto refused = engine_->CreateTrainingJob(foreign, "job");
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("another engine"), std::string::npos);
  EXPECT_EQ(engine_->ListTrainingJobs({}).value().training_job_summaries_size(), 0);
}

// Jobs share the prepared request, which may go before they end. An update
// gives the updated job a request of its own; the other jobs and the
// prepared request keep theirs.
TEST_F(EngineTest, PreparedJobsShareTheRequestUntilOneIsUpdated) {
  auto r = Request("template");
  (*r.mutable_hyper_parameters())["lr"] = "0.1";
  PreparedTrainingJob kept;
  {
    auto prepared = engine_->PrepareTrainingJob(r).value();
    ASSERT_TRUE(engine_->CreateTrainingJob(prepared, "a").ok());
    ASSERT_TRUE(engine_->CreateTrainingJob(prepared, "b").ok());
    kept = prepared;
  }
  r.mutable_hyper_parameters()->clear();  // the engine kept its own copy
  loop_->RunUntilIdle();
  const v1::DescribeTrainingJobResponse b_before = Describe("b");
  EXPECT_EQ(b_before.hyper_parameters().at("lr"), "0.1");
  EXPECT_EQ(b_before.training_job_name(), "b");

  v1::UpdateTrainingJobRequest update;
  update.set_training_job_name("a");
  update.mutable_profiler_config()->set_s3_output_path("s3://bucket/profiles");
  ASSERT_TRUE(engine_->UpdateTrainingJob(update).ok());
  EXPECT_EQ(Describe("a").profiler_config().s3_output_path(), "s3://bucket/profiles");
  EXPECT_EQ(Describe("a").hyper_parameters().at("lr"), "0.1");
  EXPECT_FALSE(Describe("b").has_profiler_config());
  EXPECT_FALSE(kept.request().has_profiler_config());

  // The jobs keep the request when the last PreparedTrainingJob goes.
  kept = PreparedTrainingJob();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(Describe("b"), b_before));
  EXPECT_EQ(Describe("a").profiler_config().s3_output_path(), "s3://bucket/profiles");
}

TEST_F(EngineTest, DeleteOnlyEndedJobsAndTheNameBecomesFree) {
  Create(Request("job"));
  v1::DeleteTrainingJobRequest del;
  del.set_training_job_name("job");
  absl::Status refused = engine_->DeleteTrainingJob(del);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.message(),
            "Training job 'job' cannot be deleted while its status is InProgress; stop it and "
            "wait for it to end");
  loop_->RunUntilIdle();
  ASSERT_TRUE(engine_->DeleteTrainingJob(del).ok());
  v1::DescribeTrainingJobRequest describe;
  describe.set_training_job_name("job");
  EXPECT_EQ(engine_->DescribeTrainingJob(describe).status().code(), absl::StatusCode::kNotFound);
  Create(Request("job"));  // the name is free again
}

TEST_F(EngineTest, JobWithChannelsNeedsADataChannel) {
  EngineOptions options;
  options.loop = loop_.get();
  options.cluster_provider = provider_.get();
  auto engine = NewEngine(std::move(options)).value();
  auto r = Request("job");
  auto* c = r.add_input_data_config();
  c->set_channel_name("train");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://bucket/train/");
  EXPECT_EQ(engine->CreateTrainingJob(r).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->PrepareTrainingJob(r).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(EngineTest, UpdateKeepAliveWithoutWarmPoolIsRefused) {
  Create(Request("job"));
  v1::UpdateTrainingJobRequest u;
  u.set_training_job_name("job");
  u.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
  EXPECT_EQ(engine_->UpdateTrainingJob(u).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::UpdateTrainingJobRequest profiler;
  profiler.set_training_job_name("job");
  profiler.mutable_profiler_config()->set_disable_profiler(true);
  ASSERT_TRUE(engine_->UpdateTrainingJob(profiler).ok());
  EXPECT_TRUE(Describe("job").profiler_config().disable_profiler());
}

// --- ListTrainingJobs

class EngineListTest : public EngineTest {
 protected:
  // Jobs created 10 s apart: c-job at 0, a-job at 10, ...
  void CreateJobs(const std::vector<std::string>& names) {
    for (const auto& name : names) {
      Create(Request(name));
      loop_->RunUntil(loop_->Now() + absl::Seconds(10));
    }
  }
  std::vector<std::string> Names(const v1::ListTrainingJobsResponse& r) {
    std::vector<std::string> out;
    for (const auto& s : r.training_job_summaries()) out.push_back(s.training_job_name());
    return out;
  }
};

TEST_F(EngineListTest, DefaultsToCreationTimeAscending) {
  CreateJobs({"c-job", "a-job", "b-job"});
  auto r = engine_->ListTrainingJobs({}).value();
  EXPECT_EQ(Names(r), (std::vector<std::string>{"c-job", "a-job", "b-job"}));
  EXPECT_EQ(r.training_job_summaries(0).training_job_status(), "InProgress");
  EXPECT_FALSE(r.has_next_token());
}

TEST_F(EngineListTest, SortsByNameDescendingAndFilters) {
  CreateJobs({"c-job", "a-job", "b-job", "other"});
  v1::ListTrainingJobsRequest req;
  req.set_sort_by("Name");
  req.set_sort_order("Descending");
  req.set_name_contains("job");
  EXPECT_EQ(Names(engine_->ListTrainingJobs(req).value()),
            (std::vector<std::string>{"c-job", "b-job", "a-job"}));
}

TEST_F(EngineListTest, FiltersByStatusAndStrictTimeBounds) {
  CreateJobs({"j1", "j2", "j3"});
  ASSERT_TRUE(Stop("j2").ok());
  loop_->RunUntil(loop_->Now() + absl::Seconds(1));
  v1::ListTrainingJobsRequest req;
  req.set_status_equals("Stopped");
  EXPECT_EQ(Names(engine_->ListTrainingJobs(req).value()), (std::vector<std::string>{"j2"}));
  v1::ListTrainingJobsRequest times;
  *times.mutable_creation_time_after() = google::protobuf::Timestamp();
  times.mutable_creation_time_after()->set_seconds(absl::ToUnixSeconds(start_ + absl::Seconds(10)));
  // Strictly after 10 s: j3 (at 20 s), not j2 (at exactly 10 s).
  EXPECT_EQ(Names(engine_->ListTrainingJobs(times).value()), (std::vector<std::string>{"j3"}));
}

TEST_F(EngineListTest, PaginationStaysCorrectWhileJobsAreAdded) {
  CreateJobs({"j1", "j2", "j3", "j4", "j5"});
  v1::ListTrainingJobsRequest req;
  req.set_max_results(2);
  auto page1 = engine_->ListTrainingJobs(req).value();
  EXPECT_EQ(Names(page1), (std::vector<std::string>{"j1", "j2"}));
  ASSERT_TRUE(page1.has_next_token());
  CreateJobs({"j6"});  // added between pages: it comes at the end, nothing repeats
  req.set_next_token(page1.next_token());
  auto page2 = engine_->ListTrainingJobs(req).value();
  EXPECT_EQ(Names(page2), (std::vector<std::string>{"j3", "j4"}));
  req.set_next_token(page2.next_token());
  auto page3 = engine_->ListTrainingJobs(req).value();
  EXPECT_EQ(Names(page3), (std::vector<std::string>{"j5", "j6"}));
  EXPECT_FALSE(page3.has_next_token());
}

TEST_F(EngineListTest, PaginationByNameIsNotConfusedByNewEarlierNames) {
  CreateJobs({"b", "d", "f"});
  v1::ListTrainingJobsRequest req;
  req.set_sort_by("Name");
  req.set_max_results(2);
  auto page1 = engine_->ListTrainingJobs(req).value();
  EXPECT_EQ(Names(page1), (std::vector<std::string>{"b", "d"}));
  CreateJobs({"a", "e"});  // "a" sorts before the cursor: not returned; "e" after: returned
  req.set_next_token(page1.next_token());
  EXPECT_EQ(Names(engine_->ListTrainingJobs(req).value()), (std::vector<std::string>{"e", "f"}));
}

TEST_F(EngineListTest, ForeignOrMismatchedTokensAreRejected) {
  CreateJobs({"j1", "j2", "j3"});
  v1::ListTrainingJobsRequest req;
  req.set_next_token("not-a-token");
  EXPECT_EQ(engine_->ListTrainingJobs(req).status().code(), absl::StatusCode::kInvalidArgument);
  v1::ListTrainingJobsRequest first;
  first.set_max_results(1);
  auto page = engine_->ListTrainingJobs(first).value();
  v1::ListTrainingJobsRequest other;
  other.set_sort_by("Name");
  other.set_next_token(page.next_token());
  EXPECT_EQ(engine_->ListTrainingJobs(other).status().message(),
            "Invalid pagination token: it was issued for SortBy=CreationTime "
            "SortOrder=Ascending, not SortBy=Name SortOrder=Ascending");
}

// --- Determinism

std::string RunScenario() {
  auto loop = NewVirtualEventLoop();
  sim::SimClusterOptions options;
  options.behavior = [](std::string_view job) {
    SimJobBehavior b;
    b.run_duration = absl::Seconds(100 + 37 * static_cast<int>(job.size()));
    b.capacity_failures = static_cast<int>(job.size() % 3);
    b.exit_code = job.size() % 4 == 0 ? 1 : 0;
    return b;
  };
  auto provider = sim::NewSimClusterProvider(*loop, options);
  EngineOptions engine_options;
  engine_options.loop = loop.get();
  engine_options.cluster_provider = provider.get();
  auto engine = NewEngine(std::move(engine_options)).value();
  std::string out;
  for (int i = 0; i < 12; ++i) {
    v1::CreateTrainingJobRequest r;
    google::protobuf::TextFormat::ParseFromString(
        R"pb(
          role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
          algorithm_specification { training_image: "train:latest" training_input_mode: "File" }
          output_data_config { s3_output_path: "s3://bucket/out" }
          resource_config { instance_type: "ml.m5.xlarge" instance_count: 2 }
        )pb",
        &r);
    r.set_training_job_name(absl::StrCat("job-", std::string(i % 5, 'x'), i));
    EXPECT_TRUE(engine->CreateTrainingJob(r).ok());
    loop->RunUntil(loop->Now() + absl::Seconds(7));
  }
  loop->RunUntilIdle();
  v1::ListTrainingJobsRequest list;
  list.set_max_results(100);
  const v1::ListTrainingJobsResponse listed = engine->ListTrainingJobs(list).value();
  for (const auto& s : listed.training_job_summaries()) {
    v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(s.training_job_name());
    absl::StrAppend(&out, ToJson(engine->DescribeTrainingJob(d).value()), "\n");
  }
  return out;
}

TEST(EngineDeterminismTest, IdenticalRunsGiveIdenticalDescribeJson) {
  std::string a = RunScenario();
  std::string b = RunScenario();
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}


// A DataChannel that records what the engine asks of it, delivering through
// the simulated channel.
class RecordingDataChannel : public DataChannel {
 public:
  explicit RecordingDataChannel(DataChannel& inner) : inner_(inner) {}
  void Deliver(const ChannelDelivery& d, DoneCallback done) override {
    std::vector<std::string> hosts;
    for (const Instance* i : d.instances) hosts.push_back(i->host_name);
    receivers[d.channel.channel_name()] = absl::StrJoin(hosts, ",");
    inner_.Deliver(d, std::move(done));
  }
  absl::Status CheckChannel(const v1::Channel& channel, std::string_view mode) override {
    if (channel.channel_name() == "refused" ||
        channel.data_source().s3_data_source().s3_uri() == emptied_uri) {
      return absl::InvalidArgumentError("No S3 objects found");
    }
    return absl::OkStatus();
  }
  void EndJob(std::string_view job) override { ended.push_back(std::string(job)); }
  void SetListener(DataChannelListener* l) override { listener = l; }

  std::map<std::string, std::string> receivers;
  std::vector<std::string> ended;
  DataChannelListener* listener = nullptr;
  std::string emptied_uri;  // a source whose objects are gone: refused

 private:
  DataChannel& inner_;
};

class EngineDataChannelTest : public EngineTest {
 protected:
  void SetUp() override {
    loop_ = NewVirtualEventLoop();
    start_ = loop_->Now();
    provider_ = sim::NewSimClusterProvider(*loop_, {});
    channel_ = sim::NewSimDataChannel(*loop_, {});
    recording_ = std::make_unique<RecordingDataChannel>(*channel_);
    EngineOptions options;
    options.loop = loop_.get();
    options.cluster_provider = provider_.get();
    options.data_channel = recording_.get();
    engine_ = NewEngine(std::move(options)).value();
  }
  void TearDown() override {
    engine_.reset();
    EXPECT_EQ(recording_->listener, nullptr) << "the engine left its listener set";
  }
  static v1::Channel Prefix(const std::string& name, std::vector<std::string> groups = {}) {
    v1::Channel c;
    c.set_channel_name(name);
    c.mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
    c.mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://bucket/" + name + "/");
    for (const std::string& g : groups) {
      c.mutable_data_source()->mutable_s3_data_source()->add_instance_group_names(g);
    }
    return c;
  }
  // Makes `r` a heterogeneous cluster of two groups: "gpu" of 2 instances
  // (algo-1, algo-2), then "cpu" of 1 (algo-3).
  static void UseGpuAndCpuGroups(v1::CreateTrainingJobRequest& r) {
    auto* rc = r.mutable_resource_config();
    rc->clear_instance_type();
    rc->clear_instance_count();
    for (const auto& [name, type, count] : {std::tuple<const char*, const char*, int>{
                                                "gpu", "ml.p3.2xlarge", 2},
                                            {"cpu", "ml.c5.xlarge", 1}}) {
      auto* g = rc->add_instance_groups();
      g->set_instance_group_name(name);
      g->set_instance_type(type);
      g->set_instance_count(count);
    }
  }
  std::unique_ptr<RecordingDataChannel> recording_;
};

TEST_F(EngineDataChannelTest, ChannelsReachOnlyTheirInstanceGroupsAndEndWithTheContainers) {
  v1::CreateTrainingJobRequest r = Request("hetero");
  UseGpuAndCpuGroups(r);
  *r.add_input_data_config() = Prefix("all");
  *r.add_input_data_config() = Prefix("cpu-only", {"cpu"});
  Create(r);
  RunUntilSecond(200);
  EXPECT_EQ(recording_->receivers["all"], "algo-1,algo-2,algo-3");
  EXPECT_EQ(recording_->receivers["cpu-only"], "algo-3");
  EXPECT_TRUE(recording_->ended.empty()) << "ended while training";
  RunUntilSecond(3600);
  EXPECT_EQ(Describe("hetero").training_job_status(), "Completed");
  ASSERT_FALSE(recording_->ended.empty());
  EXPECT_EQ(recording_->ended[0], "hetero");
}

// The engine refills the cluster spec and the receivers of the call before:
// a job after a larger one gets its own groups and instances, no more.
TEST_F(EngineDataChannelTest, AJobAfterALargerOneGetsOnlyItsOwnGroupsAndReceivers) {
  v1::CreateTrainingJobRequest hetero = Request("hetero");
  UseGpuAndCpuGroups(hetero);
  *hetero.add_input_data_config() = Prefix("all");
  Create(hetero);
  v1::CreateTrainingJobRequest single = Request("single");
  *single.add_input_data_config() = Prefix("one");
  Create(single);
  RunUntilSecond(200);
  EXPECT_EQ(recording_->receivers["all"], "algo-1,algo-2,algo-3");
  EXPECT_EQ(recording_->receivers["one"], "algo-1");
  RunUntilSecond(3600);
  EXPECT_EQ(Describe("single").training_job_status(), "Completed");
}

TEST_F(EngineDataChannelTest, CheckChannelRefusalFailsCreateTrainingJob) {
  v1::CreateTrainingJobRequest r = Request("refused-job");
  *r.add_input_data_config() = Prefix("refused");
  auto created = engine_->CreateTrainingJob(r);
  EXPECT_TRUE(absl::IsInvalidArgument(created.status())) << created.status();
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("refused-job");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status()));
}

// CheckChannel looks at the sources as each job is created, not when the
// request is prepared.
TEST_F(EngineDataChannelTest, PreparedJobsCheckTheirChannelsAtEachCreate) {
  v1::CreateTrainingJobRequest r = Request("");
  *r.add_input_data_config() = Prefix("refused");
  auto prepared = engine_->PrepareTrainingJob(r);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto created = engine_->CreateTrainingJob(*prepared, "refused-job");
  EXPECT_EQ(created.status(), absl::InvalidArgumentError("No S3 objects found"));
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("refused-job");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status()));
}

// A source may change between jobs: a request sent again has its channels
// checked again.
TEST_F(EngineDataChannelTest, ARequestSentAgainHasItsChannelsCheckedAgain) {
  v1::CreateTrainingJobRequest r = Request("first");
  *r.add_input_data_config() = Prefix("train");
  Create(r);
  recording_->emptied_uri = "s3://bucket/train/";
  r.set_training_job_name("second");
  EXPECT_EQ(engine_->CreateTrainingJob(r).status(),
            absl::InvalidArgumentError("No S3 objects found"));
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("second");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status()));
  recording_->emptied_uri.clear();
  Create(r);
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("second").training_job_status(), "Completed");
}

// A File channel named as a Pipe channel's FIFO is refused with the request,
// whole or prepared, whatever the backend: the job never exists. Channels of
// disjoint instance groups never meet, and run.
TEST_F(EngineDataChannelTest, ChannelsThatMeetInTheContainerAreRefusedBeforeTheJobExists) {
  v1::CreateTrainingJobRequest r = Request("clash");
  *r.add_input_data_config() = Prefix("a");
  r.mutable_input_data_config(0)->set_input_mode("Pipe");
  *r.add_input_data_config() = Prefix("a_1");
  const absl::Status whole = engine_->CreateTrainingJob(r).status();
  EXPECT_TRUE(absl::IsInvalidArgument(whole)) << whole;
  EXPECT_NE(whole.message().find("at 'inputDataConfig.2.member.channelName': channels 'a_1' "
                                 "(File mode) and 'a' (Pipe mode) collide"),
            std::string::npos)
      << whole;
  EXPECT_EQ(engine_->ListTrainingJobs({}).value().training_job_summaries_size(), 0);
  EXPECT_EQ(loop_->pending_events(), 0u);
  EXPECT_EQ(engine_->PrepareTrainingJob(r).status(), whole);

  UseGpuAndCpuGroups(r);
  for (const auto& [channel, group] : {std::pair<int, const char*>{0, "gpu"}, {1, "cpu"}}) {
    r.mutable_input_data_config(channel)
        ->mutable_data_source()
        ->mutable_s3_data_source()
        ->add_instance_group_names(group);
  }
  Create(r);
  RunUntilSecond(200);
  EXPECT_EQ(recording_->receivers["a"], "algo-1,algo-2");
  EXPECT_EQ(recording_->receivers["a_1"], "algo-3");
}

// A DataChannel whose CheckChannel blocks until released, as a check that
// waits for a slow store would.
class BlockingCheckChannel : public DataChannel {
 public:
  void Deliver(const ChannelDelivery&, DoneCallback) override {}
  absl::Status CheckChannel(const v1::Channel&, std::string_view) override {
    checked_on = std::this_thread::get_id();
    entered.Notify();
    release.WaitForNotification();
    return absl::OkStatus();
  }
  std::thread::id checked_on;
  absl::Notification entered;
  absl::Notification release;
};

TEST_F(EngineTest, CheckChannelRunsOnTheCallersThreadAndTheLoopGoesOnMeanwhile) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::unique_ptr<ClusterProvider> provider = sim::NewSimClusterProvider(*loop, {});
  BlockingCheckChannel channel;
  EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.data_channel = &channel;
  std::unique_ptr<Engine> engine = NewEngine(std::move(options)).value();
  std::thread::id loop_thread;
  std::thread runner([&] {
    loop->Post([&] { loop_thread = std::this_thread::get_id(); });
    loop->Run();
  });

  v1::CreateTrainingJobRequest r = Request("slow-check");
  v1::Channel* c = r.add_input_data_config();
  c->set_channel_name("train");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  c->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://bucket/train/");
  absl::StatusOr<v1::CreateTrainingJobResponse> created;
  std::thread::id caller_thread;
  std::thread caller([&] {
    caller_thread = std::this_thread::get_id();
    created = engine->CreateTrainingJob(r);
  });
  channel.entered.WaitForNotification();
  // The check is under way: the loop still runs what is posted to it, and
  // the engine answers other calls; the job does not exist yet.
  absl::Notification ran;
  loop->Post([&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the loop waited for the data channel's check";
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("slow-check");
  EXPECT_TRUE(absl::IsNotFound(engine->DescribeTrainingJob(d).status()));
  channel.release.Notify();
  caller.join();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(channel.checked_on, caller_thread);
  EXPECT_NE(channel.checked_on, loop_thread);
  EXPECT_EQ(engine->DescribeTrainingJob(d)->training_job_status(), "InProgress");
  loop->Stop();
  runner.join();
  engine.reset();
}

TEST_F(EngineDataChannelTest, ChannelFailureAfterDeliveryFailsTheRunningAttemptOnly) {
  v1::CreateTrainingJobRequest r = Request("streaming");
  *r.add_input_data_config() = Prefix("train");
  Create(r);
  RunUntilSecond(200);
  ASSERT_EQ(Describe("streaming").secondary_status(), "Training");
  ASSERT_NE(recording_->listener, nullptr);
  // A stale report (another attempt) and an unknown job change nothing.
  recording_->listener->OnChannelFailed("streaming", 2, absl::NotFoundError("stale"));
  recording_->listener->OnChannelFailed("nobody", 1, absl::NotFoundError("x"));
  RunUntilSecond(201);
  EXPECT_EQ(Describe("streaming").secondary_status(), "Training");
  recording_->listener->OnChannelFailed("streaming", 1,
                                        absl::NotFoundError("channel 'train': object 'k' vanished"));
  RunUntilSecond(300);
  v1::DescribeTrainingJobResponse d = Describe("streaming");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_EQ(d.failure_reason(), "ClientError: channel 'train': object 'k' vanished");
}

// Observers may call the engine (engine.h), the observer list included: one
// that leaves during an event, or adds another, changes nothing for the
// others; the one added hears from the next event on.
TEST_F(EngineTest, ObserversMayComeAndGoDuringAnEvent) {
  struct Leaver : JobObserver {
    Engine* engine = nullptr;
    JobObserver* to_add = nullptr;
    int heard = 0;
    void OnStatusChange(const StatusEvent&) override {
      ++heard;
      if (to_add != nullptr) engine->AddObserver(std::exchange(to_add, nullptr));
      engine->RemoveObserver(this);
    }
  };
  Leaver leaver;
  leaver.engine = engine_.get();
  RecordingObserver after, added;
  leaver.to_add = &added;
  engine_->RemoveObserver(&observer_);
  engine_->AddObserver(&leaver);  // [leaver, observer_, after]
  engine_->AddObserver(&observer_);
  engine_->AddObserver(&after);
  Create(Request("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(leaver.heard, 1);
  ASSERT_FALSE(observer_.statuses.empty());
  EXPECT_EQ(observer_.statuses.front(), "job:InProgress/Starting");
  EXPECT_EQ(after.statuses, observer_.statuses);  // each event once, none skipped
  ASSERT_EQ(added.statuses.size() + 1, observer_.statuses.size());
  EXPECT_TRUE(std::equal(added.statuses.begin(), added.statuses.end(),
                         observer_.statuses.begin() + 1));
}

// An observer may delete a job the moment it ends: the other observers still
// hear that event whole, and the engine finishes the job's end safely.
TEST_F(EngineTest, AnObserverMayDeleteTheJobThatJustEnded) {
  struct Deleter : JobObserver {
    Engine* engine = nullptr;
    absl::Status deleted = absl::UnknownError("never called");
    void OnStatusChange(const StatusEvent& e) override {
      if (e.status != "Completed") return;
      v1::DeleteTrainingJobRequest r;
      r.set_training_job_name(std::string(e.job_name));
      deleted = engine->DeleteTrainingJob(r);
    }
  };
  Deleter deleter;
  deleter.engine = engine_.get();
  RecordingObserver after;
  engine_->AddObserver(&deleter);
  engine_->AddObserver(&after);
  Create(Request("job"));
  loop_->RunUntilIdle();
  EXPECT_TRUE(deleter.deleted.ok()) << deleter.deleted;
  ASSERT_FALSE(after.statuses.empty());
  EXPECT_EQ(after.statuses.back(), "job:Completed/Completed");
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("job");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status()));
  // The name is free again.
  Create(Request("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(after.statuses.back(), "job:Completed/Completed");
}

// An observer may start the next job the moment one ends (a chain, as a
// pipeline does), even under the same name once it deleted the old one.
TEST_F(EngineTest, AnObserverMayStartTheNextJobWhenOneEnds) {
  struct Chainer : JobObserver {
    Engine* engine = nullptr;
    int started = 1;
    std::vector<absl::Status> results;
    void OnStatusChange(const StatusEvent& e) override {
      if (e.status != "Completed" || started == 4) return;
      v1::DeleteTrainingJobRequest del;
      del.set_training_job_name(std::string(e.job_name));
      results.push_back(engine->DeleteTrainingJob(del));
      v1::CreateTrainingJobRequest next = EngineTest::Request("chain");
      next.mutable_hyper_parameters()->insert({"step", absl::StrCat(++started)});
      results.push_back(engine->CreateTrainingJob(next).status());
    }
  };
  Chainer chainer;
  chainer.engine = engine_.get();
  engine_->AddObserver(&chainer);
  Create(Request("chain"));
  loop_->RunUntilIdle();
  for (const absl::Status& s : chainer.results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(chainer.started, 4);
  const v1::DescribeTrainingJobResponse d = Describe("chain");
  EXPECT_EQ(d.training_job_status(), "Completed");
  EXPECT_EQ(d.hyper_parameters().at("step"), "4");
  // Each job ran its whole course, one after the other: 695 s each (60 + 30 +
  // 600 + 5).
  EXPECT_EQ(Offset(d.creation_time()), 3 * 695);
  EXPECT_EQ(Offset(d.training_end_time()), 4 * 695);
}

// An observer may stop the job it is being told about, at each of its
// statuses: the job ends Stopped (a stop during Uploading lets the upload
// finish, then ends Stopped), its transitions in order, nothing left running.
// Observers hear of a step's events after the step, so a stop takes effect
// where the job is then: a job without input channels goes from Downloading
// to Training in one step, and is Training (its container started) when its
// Downloading event is heard.
TEST_F(EngineTest, AnObserverMayStopTheJobAtEachStatus) {
  const std::map<std::string, std::string> expected = {
      {"Starting", "Starting[0,0) Stopping[0,0) Stopped[0,0)"},
      {"Downloading",
       "Starting[0,90) Downloading[90,90) Training[90,90) Stopping[90,96) Stopped[96,96)"},
      {"Training",
       "Starting[0,90) Downloading[90,90) Training[90,90) Stopping[90,96) Stopped[96,96)"},
      {"Uploading",
       "Starting[0,90) Downloading[90,90) Training[90,690) Uploading[690,690) "
       "Stopping[690,695) Stopped[695,695)"},
  };
  for (const auto& [at, transitions] : expected) {
    SCOPED_TRACE(at);
    Build();
    struct Stopper : JobObserver {
      Engine* engine = nullptr;
      std::string at;
      absl::Status stopped = absl::UnknownError("not called");
      void OnStatusChange(const StatusEvent& e) override {
        if (e.secondary_status != at || !absl::IsUnknown(stopped)) return;
        v1::StopTrainingJobRequest r;
        r.set_training_job_name(std::string(e.job_name));
        stopped = engine->StopTrainingJob(r);
      }
    };
    Stopper stopper;
    stopper.engine = engine_.get();
    stopper.at = at;
    engine_->AddObserver(&stopper);
    Create(Request("job"));
    loop_->RunUntilIdle();
    EXPECT_TRUE(stopper.stopped.ok()) << stopper.stopped;
    const v1::DescribeTrainingJobResponse d = Describe("job");
    EXPECT_EQ(d.training_job_status(), "Stopped") << Transitions("job");
    EXPECT_EQ(Transitions("job"), transitions);
    EXPECT_EQ(engine_->active_jobs(), 0);
    // A container runs unless the stop came while the job was Starting.
    EXPECT_EQ(forward_->containers_started, at == "Starting" ? 0 : 1);
    for (int i = 1; i < d.secondary_status_transitions_size(); ++i) {
      const auto& prev = d.secondary_status_transitions(i - 1);
      const auto& t = d.secondary_status_transitions(i);
      EXPECT_TRUE(prev.has_end_time()) << Transitions("job");
      EXPECT_LE(Offset(prev.start_time()), Offset(t.start_time())) << Transitions("job");
    }
  }
}

// An observer that stops a job the moment it turns Pending: the engine asks
// for no more capacity for it.
TEST_F(EngineTest, AnObserverMayStopAPendingJob) {
  SimJobBehavior b;
  b.capacity_failures = 3;
  behaviors_["job"] = b;
  struct Stopper : JobObserver {
    Engine* engine = nullptr;
    void OnStatusChange(const StatusEvent& e) override {
      if (e.secondary_status != "Pending") return;
      v1::StopTrainingJobRequest r;
      r.set_training_job_name(std::string(e.job_name));
      EXPECT_TRUE(engine->StopTrainingJob(r).ok());
    }
  } stopper;
  stopper.engine = engine_.get();
  engine_->AddObserver(&stopper);
  Create(Request("job"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Transitions("job"), "Starting[0,5) Pending[5,5) Stopping[5,5) Stopped[5,5)");
  EXPECT_EQ(loop_->Now() - start_, absl::Seconds(5));  // no retry was left pending
}

// The service retries on InternalServerError only, as often as RetryStrategy
// allows; provisioning is the first place it can happen.
TEST_F(EngineTest, InternalErrorWhileProvisioningIsRetriedUnderRetryStrategy) {
  v1::CreateTrainingJobRequest r = Request("job");
  r.mutable_retry_strategy()->set_maximum_retry_attempts(2);
  forward_->FailProvisions(2, absl::UnavailableError("RunInstances: internal error"));
  Create(r);
  loop_->RunUntilIdle();
  const v1::DescribeTrainingJobResponse d = Describe("job");
  EXPECT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
  // Each retry waits capacity_retry_initial (30 s); the third call provisions
  // (60 s, then the image 30 s).
  EXPECT_EQ(Transitions("job"),
            "Starting[0,0) Starting[0,30) Starting[30,150) Downloading[150,150) "
            "Training[150,750) Uploading[750,755) Completed[755,755)");
  EXPECT_EQ(d.secondary_status_transitions(1).status_message(),
            "Launching requested ML instances. InternalServerError: could not provision "
            "instances: RunInstances: internal error; infrastructure retry 1 of 2 "
            "(RetryStrategy)");
}

TEST_F(EngineTest, InternalErrorWhileProvisioningFailsWhenNoRetryIsLeft) {
  for (const int retries : {0, 1}) {
    SCOPED_TRACE(retries);
    Build();
    v1::CreateTrainingJobRequest r = Request("job");
    if (retries > 0) r.mutable_retry_strategy()->set_maximum_retry_attempts(retries);
    forward_->FailProvisions(retries + 1, absl::UnavailableError("RunInstances: internal error"));
    Create(r);
    loop_->RunUntilIdle();
    const v1::DescribeTrainingJobResponse d = Describe("job");
    EXPECT_EQ(d.training_job_status(), "Failed");
    EXPECT_EQ(d.failure_reason(),
              "InternalServerError: could not provision instances: RunInstances: internal error");
    EXPECT_EQ(loop_->Now() - start_, absl::Seconds(30 * retries));
  }
}

// MaxRuntimeInSeconds bounds the training: a deadline that falls during the
// upload after the algorithm ended by itself leaves the job Completed.
TEST_F(EngineTest, MaxRuntimeDuringTheUploadLeavesTheJobCompleted) {
  SimJobBehavior b;
  b.upload_duration = absl::Seconds(60);
  behaviors_["job"] = b;
  v1::CreateTrainingJobRequest r = Request("job");
  // Instances at 60 s, so the deadline is at 710 s: training ends at 690 s,
  // the upload at 750 s.
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(650);
  Create(r);
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("job").training_job_status(), "Completed");
  EXPECT_EQ(Transitions("job"),
            "Starting[0,90) Downloading[90,90) Training[90,690) Uploading[690,750) "
            "Completed[750,750)");
}

// FailureReason is the first 1024 characters (not bytes), as well-formed
// UTF-8 whatever the failure file held.
TEST_F(EngineTest, FailureReasonKeepsWholeCharactersAndWellFormedText) {
  SimJobBehavior b;
  b.exit_code = 1;
  std::string e_acute_20;
  for (int i = 0; i < 20; ++i) e_acute_20 += "\xC3\xA9";
  b.failure_text = std::string(1007, 'a') + e_acute_20;  // 16 + 1007 + 1 = 1024 characters
  behaviors_["utf8"] = b;
  b.failure_text = "bad \xFF byte, cut \xE2\x82";
  behaviors_["bytes"] = b;
  Create(Request("utf8"));
  Create(Request("bytes"));
  loop_->RunUntilIdle();
  EXPECT_EQ(Describe("utf8").failure_reason(),
            "AlgorithmError: " + std::string(1007, 'a') + "\xC3\xA9");
  EXPECT_EQ(Describe("bytes").failure_reason(),
            "AlgorithmError: bad \xEF\xBF\xBD byte, cut \xEF\xBF\xBD\xEF\xBF\xBD");
}

// The model's location: a tarball, or a prefix of files when uncompressed.
TEST_F(EngineTest, ModelArtifactsNameTheTarballOrTheUncompressedPrefix) {
  Create(Request("gzip"));
  v1::CreateTrainingJobRequest r = Request("none");
  r.mutable_output_data_config()->set_compression_type("NONE");
  Create(r);
  EXPECT_EQ(Describe("gzip").model_artifacts().s3_model_artifacts(),
            "s3://bucket/out/gzip/output/model.tar.gz");
  EXPECT_EQ(Describe("none").model_artifacts().s3_model_artifacts(),
            "s3://bucket/out/none/output/model/");
}

// --- What Describe and List show as the service does

TEST_F(EngineTest, DescribeShowsTheEnableFlagsTheRequestLeftOutAsFalse) {
  Create(Request("unset"));
  auto set = Request("set");
  set.set_enable_network_isolation(true);
  Create(set);
  const v1::DescribeTrainingJobResponse d = Describe("unset");
  EXPECT_TRUE(d.has_enable_network_isolation());
  EXPECT_FALSE(d.enable_network_isolation());
  EXPECT_TRUE(d.has_enable_inter_container_traffic_encryption());
  EXPECT_FALSE(d.enable_inter_container_traffic_encryption());
  EXPECT_TRUE(d.has_enable_managed_spot_training());
  EXPECT_FALSE(d.enable_managed_spot_training());
  const std::string json = ToJson(d);
  EXPECT_NE(json.find("\"EnableNetworkIsolation\":false"), std::string::npos) << json;
  EXPECT_NE(json.find("\"EnableInterContainerTrafficEncryption\":false"), std::string::npos);
  EXPECT_NE(json.find("\"EnableManagedSpotTraining\":false"), std::string::npos);
  EXPECT_TRUE(Describe("set").enable_network_isolation());  // what was set is echoed
}

// True if `t` is `exact` cut toward the past to a whole millisecond.
testing::AssertionResult Millis(const google::protobuf::Timestamp& t, absl::Time exact) {
  const absl::Time shown = absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
  const absl::Time want = absl::FromUnixMillis(absl::ToUnixMillis(exact));
  if (t.nanos() % 1000000 == 0 && shown == want) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << "shown " << absl::FormatTime(shown) << ", want " << absl::FormatTime(want) << " (exact "
         << absl::FormatTime(exact) << ")";
}

TEST_F(EngineTest, EveryTimeShownIsInWholeMillisecondsCutTowardThePast) {
  // Created 1.2345678 s in: every time of the job falls inside a millisecond.
  const absl::Time created = start_ + absl::Nanoseconds(1'234'567'800);
  loop_->RunUntil(created);
  Create(ReportingRequest("job"));
  loop_->RunUntilIdle();
  const v1::DescribeTrainingJobResponse d = Describe("job");
  ASSERT_EQ(d.training_job_status(), "Completed");
  EXPECT_TRUE(Millis(d.creation_time(), created));
  EXPECT_EQ(d.creation_time().nanos(), 234'000'000);
  std::vector<const google::protobuf::Timestamp*> shown = {
      &d.last_modified_time(), &d.training_start_time(), &d.training_end_time()};
  for (const auto& t : d.secondary_status_transitions()) {
    shown.push_back(&t.start_time());
    shown.push_back(&t.end_time());
  }
  ASSERT_EQ(d.final_metric_data_list_size(), 1);
  shown.push_back(&d.final_metric_data_list(0).timestamp());
  for (const google::protobuf::Timestamp* t : shown) {
    EXPECT_EQ(t->nanos() % 1000000, 0) << t->ShortDebugString();
    // Every event of the job came a whole number of seconds after its creation.
    EXPECT_EQ(t->nanos(), 234'000'000) << t->ShortDebugString();
  }
  const v1::ListTrainingJobsResponse list = engine_->ListTrainingJobs({}).value();
  ASSERT_EQ(list.training_job_summaries_size(), 1);
  const v1::TrainingJobSummary& s = list.training_job_summaries(0);
  EXPECT_TRUE(Millis(s.creation_time(), created));
  EXPECT_EQ(s.last_modified_time().nanos(), 234'000'000);
  EXPECT_EQ(s.training_end_time().nanos(), 234'000'000);
  EXPECT_EQ(ToJson(s).find("1.234567"), std::string::npos);
}

TEST(EngineTimesTest, ATimeBeforeTheEpochIsCutTowardThePastToo) {
  // A job created at -0.5004 s shows -0.501 s: seconds -1, nanos 499000000.
  EventLoopOptions loop_options;
  loop_options.start_time = absl::FromUnixNanos(-500'400'000);
  auto loop = NewVirtualEventLoop(std::move(loop_options));
  auto provider = sim::NewSimClusterProvider(*loop, {});
  EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  auto engine = NewEngine(std::move(options)).value();
  ASSERT_TRUE(engine->CreateTrainingJob(tests::MinimalRequest("early")).ok());
  v1::DescribeTrainingJobRequest r;
  r.set_training_job_name("early");
  const v1::DescribeTrainingJobResponse d = engine->DescribeTrainingJob(r).value();
  EXPECT_EQ(d.creation_time().seconds(), -1);
  EXPECT_EQ(d.creation_time().nanos(), 499'000'000);
}

TEST_F(EngineTest, ListOrdersAndFiltersByTheExactCreationTime) {
  // Three jobs created in one millisecond show the same CreationTime, yet
  // List keeps them apart: the cursor and the strict bounds use exact times.
  const absl::Time base = start_ + absl::Seconds(5);
  for (int i = 0; i < 3; ++i) {
    loop_->RunUntil(base + absl::Microseconds(100 * i));
    Create(Request(absl::StrCat("j", i)));
  }
  v1::ListTrainingJobsRequest req;
  req.set_max_results(1);
  std::vector<std::string> names;
  std::set<std::string> shown_times;
  for (int page = 0; page < 4; ++page) {
    auto r = engine_->ListTrainingJobs(req).value();
    for (const auto& s : r.training_job_summaries()) {
      names.push_back(s.training_job_name());
      shown_times.insert(s.creation_time().ShortDebugString());
    }
    if (!r.has_next_token()) break;
    req.set_next_token(r.next_token());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"j0", "j1", "j2"}));
  EXPECT_EQ(shown_times.size(), 1u);  // one millisecond for all three
  v1::ListTrainingJobsRequest after;
  const absl::Time bound = base + absl::Microseconds(150);  // between j1 and j2
  const int64_t bound_seconds = absl::ToUnixSeconds(bound);
  after.mutable_creation_time_after()->set_seconds(bound_seconds);
  after.mutable_creation_time_after()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(bound - absl::FromUnixSeconds(bound_seconds))));
  EXPECT_EQ(engine_->ListTrainingJobs(after).value().training_job_summaries_size(), 1);
  EXPECT_EQ(engine_->ListTrainingJobs(after).value().training_job_summaries(0).training_job_name(),
            "j2");
}

// The public helpers providers and data channels use to read a request's
// channels the engine's way.
TEST(ChannelHelpersTest, EffectiveInputModeAndTheGroupsAChannelReaches) {
  v1::CreateTrainingJobRequest r;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    algorithm_specification { training_input_mode: "File" }
    input_data_config { channel_name: "train" input_mode: "Pipe" }
    input_data_config {
      channel_name: "eval"
      data_source { s3_data_source { instance_group_names: "a" instance_group_names: "b" } }
    }
  )pb", &r));
  EXPECT_EQ(EffectiveInputMode(r, r.input_data_config(0)), "Pipe");
  EXPECT_EQ(EffectiveInputMode(r, r.input_data_config(1)), "File");
  EXPECT_TRUE(ChannelReachesGroup(r.input_data_config(0), "c"));  // no groups named: every one
  EXPECT_TRUE(ChannelReachesGroup(r.input_data_config(1), "b"));
  EXPECT_FALSE(ChannelReachesGroup(r.input_data_config(1), "c"));
  EXPECT_FALSE(ChannelReachesGroup(r.input_data_config(1), kHomogeneousGroupName));
}

}  // namespace
}  // namespace kiln
