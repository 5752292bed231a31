// Workload generators and trace replay, against a sink that ends every job
// a fixed time after it was submitted.
#include "kiln/sim/workload.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/validation.h"

namespace kiln::sim {
namespace {

class FakeSink : public WorkloadSink {
 public:
  explicit FakeSink(absl::Duration run, absl::Duration horizon = absl::Hours(24 * 30))
      : loop_(NewVirtualEventLoop()), start_(loop_->Now()), run_(run), horizon_(horizon) {}

  EventLoop& loop() override { return *loop_; }
  absl::Time horizon_end() const override { return start_ + horizon_; }

  void Submit(SimJob job, WorkloadGenerator* from, uint64_t tag) override {
    Submission s{job.name, loop_->Now() - start_, job.attributes, tag};
    submissions.push_back(s);
    const std::string key = absl::StrCat(tag);
    running[key]++;
    max_running[key] = std::max(max_running[key], running[key]);
    v1::CreateTrainingJobRequest request = *job.request;
    request.set_training_job_name(job.name);
    EXPECT_TRUE(ValidateCreateTrainingJobRequest(request).ok()) << s.name;
    loop_->ScheduleAfter(run_, [this, from, tag, key] {
      running[key]--;
      from->OnJobEnded(tag);
    });
  }

  struct Submission {
    std::string name;
    absl::Duration at;
    SimJobAttributes attributes;
    uint64_t tag;
  };
  std::vector<Submission> submissions;
  std::map<std::string, int> running, max_running;
  std::unique_ptr<EventLoop> loop_;
  absl::Time start_;
  absl::Duration run_;
  absl::Duration horizon_;
};

JobTemplate Template() {
  JobTemplate t;
  t.request = DefaultRequest("ml.m5.xlarge", 1, "File", 600);
  t.work = {absl::Minutes(30), 0.5, 10};
  return t;
}

TEST(HpoSweepTest, RunsEveryTrialWithAtMostParallelismAtOnce) {
  FakeSink sink(absl::Minutes(10));
  HpoSweepOptions o;
  o.job = Template();
  o.trials = 25;
  o.parallelism = 4;
  o.sweeps = 3;
  o.every = absl::Minutes(30);
  auto g = NewHpoSweep(o, 1);
  g->Start(sink);
  sink.loop().RunUntilIdle();
  ASSERT_EQ(sink.submissions.size(), 75u);
  EXPECT_EQ(g->ExpectedJobs(), 75);
  for (const auto& [sweep, n] : sink.max_running) EXPECT_EQ(n, 4) << "sweep " << sweep;
  std::map<std::string, absl::Duration> at;
  for (const auto& s : sink.submissions) at[s.name] = s.at;
  EXPECT_EQ(sink.submissions[0].name, "hpo-0-0");
  EXPECT_EQ(at.at("hpo-1-0"), absl::Minutes(30));  // sweep 1 starts while sweep 0 runs
  // The fifth trial comes a tuner gap after the first one ends.
  EXPECT_GT(at.at("hpo-0-4"), absl::Minutes(10));
  EXPECT_LT(at.at("hpo-0-4"), absl::Minutes(12));
}

// Trials that would come at or after the horizon are not submitted: a
// 30-minute trial at a time, a 45-minute horizon, two trials of twenty.
TEST(HpoSweepTest, SubmitsNoTrialAtOrAfterTheHorizon) {
  FakeSink sink(absl::Minutes(30), absl::Minutes(45));
  HpoSweepOptions o;
  o.job = Template();
  o.trials = 20;
  o.parallelism = 1;
  auto g = NewHpoSweep(o, 1);
  g->Start(sink);
  sink.loop().RunUntilIdle();
  ASSERT_EQ(sink.submissions.size(), 2u);
  for (const auto& s : sink.submissions) EXPECT_LT(s.at, absl::Minutes(45)) << s.name;
}

TEST(HpoSweepTest, AJobIsTheSameWhateverTheOrderOfEvents) {
  HpoSweepOptions o;
  o.job = Template();
  o.trials = 20;
  o.parallelism = 5;
  std::map<std::string, absl::Duration> fast, slow;
  for (auto [run, out] : {std::make_pair(absl::Minutes(1), &fast), std::make_pair(absl::Minutes(50), &slow)}) {
    FakeSink sink(run);
    auto g = NewHpoSweep(o, 9);
    g->Start(sink);
    sink.loop().RunUntilIdle();
    for (const auto& s : sink.submissions) (*out)[s.name] = s.attributes.work;
  }
  EXPECT_EQ(fast, slow);
  EXPECT_NE(fast.at("hpo-0-0"), fast.at("hpo-0-1"));
}

TEST(NightlyBatchTest, OneJobPerCityEveryDayInTheWindow) {
  FakeSink sink(absl::Hours(1), absl::Hours(24 * 3));
  NightlyBatchOptions o;
  o.job = Template();
  o.job.deadline_slack = 2;
  o.job.spot_eligible = true;
  o.cities = 10;
  o.days = 5;  // the horizon allows three
  o.at = absl::Hours(2);
  o.spread = absl::Minutes(30);
  auto g = NewNightlyBatch(o, 3);
  g->Start(sink);
  sink.loop().RunUntilIdle();
  ASSERT_EQ(sink.submissions.size(), 30u);
  std::map<int64_t, int> per_day;
  for (const auto& s : sink.submissions) {
    const int64_t day = s.at / absl::Hours(24);
    ++per_day[day];
    const absl::Duration in_day = s.at - absl::Hours(24) * day;
    EXPECT_GE(in_day, absl::Hours(2));
    EXPECT_LT(in_day, absl::Hours(2) + absl::Minutes(30));
    ASSERT_TRUE(s.attributes.deadline.has_value());
    EXPECT_EQ(*s.attributes.deadline, absl::Floor(s.attributes.work * 2 + absl::Milliseconds(500), absl::Seconds(1)));
    EXPECT_TRUE(s.attributes.spot_eligible);
  }
  EXPECT_EQ(per_day, (std::map<int64_t, int>{{0, 10}, {1, 10}, {2, 10}}));
}

TEST(InteractiveTest, EachUserWaitsForAResultAndThinksBeforeTheNextJob) {
  FakeSink sink(absl::Minutes(20));
  InteractiveOptions o;
  o.job = Template();
  o.users = 3;
  o.jobs_per_user = 5;
  o.think_time = {absl::Minutes(5), 1.0, 20};
  auto g = NewInteractive(o, 4);
  g->Start(sink);
  sink.loop().RunUntilIdle();
  ASSERT_EQ(sink.submissions.size(), 15u);
  std::map<uint64_t, std::vector<absl::Duration>> by_user;
  for (const auto& s : sink.submissions) by_user[s.tag].push_back(s.at);
  for (const auto& [user, times] : by_user) {
    ASSERT_EQ(times.size(), 5u);
    for (size_t k = 1; k < times.size(); ++k) {
      EXPECT_GE(times[k] - times[k - 1], absl::Minutes(20) + absl::Seconds(15));  // run + think (>= median/20)
    }
  }
}

TEST(JobTraceTest, ParsesLinesSortsByArrivalAndReplays) {
  const std::string trace = absl::StrCat(
      R"({"arrival": 600, "request": {"TrainingJobName": "b", "RoleArn": "arn:aws:iam::123456789012:role/R", )",
      R"("AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"}, )",
      R"("OutputDataConfig": {"S3OutputPath": "s3://bucket/out"}, )",
      R"("ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10}, )",
      R"("StoppingCondition": {"MaxRuntimeInSeconds": 3600}}, "sim": {"work": 1200, "deadline": 3600, "spot_eligible": true}})",
      "\n\n",
      R"({"arrival": 60, "request": {"TrainingJobName": "a", "RoleArn": "arn:aws:iam::123456789012:role/R", )",
      R"("AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"}, )",
      R"("OutputDataConfig": {"S3OutputPath": "s3://bucket/out"}, )",
      R"("ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10}, )",
      R"("StoppingCondition": {"MaxRuntimeInSeconds": 3600}}})", "\n");
  auto entries = ParseJobTrace(trace);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].job.name, "a");
  EXPECT_EQ((*entries)[0].job.request->training_job_name(), "a");
  EXPECT_EQ((*entries)[1].job.attributes.work, absl::Seconds(1200));
  EXPECT_EQ((*entries)[1].job.attributes.deadline, absl::Seconds(3600));
  EXPECT_TRUE((*entries)[1].job.attributes.spot_eligible);
  FakeSink sink(absl::Minutes(1));
  auto g = NewTraceReplay(std::move(*entries));
  g->Start(sink);
  sink.loop().RunUntilIdle();
  ASSERT_EQ(sink.submissions.size(), 2u);
  EXPECT_EQ(sink.submissions[0].at, absl::Seconds(60));
  EXPECT_EQ(sink.submissions[1].at, absl::Seconds(600));
}

TEST(JobTraceTest, ErrorsNameTheLineAndTheProblem) {
  EXPECT_TRUE(absl::StrContains(ParseJobTrace("{}\n").status().message(), "line 1: arrival is required"));
  EXPECT_TRUE(absl::StrContains(ParseJobTrace("\n{\"arrival\": -1}").status().message(), "line 2: arrival must be"));
  EXPECT_TRUE(absl::StrContains(ParseJobTrace("{\"arrival\": 1, \"request\": {\"Bogus\": 1}}").status().message(),
                                "line 1: request: "));
  EXPECT_TRUE(absl::StrContains(ParseJobTrace("{\"arrival\": 1, \"x\": 2}").status().message(), "unknown member 'x'"));
  EXPECT_TRUE(absl::StrContains(ParseJobTrace("not json").status().message(), "line 1:"));
}

// Unknown members are input: escaped and cut, they cannot add a line to the
// message or make it long.
TEST(JobTraceTest, UnknownMembersAreShownEscapedAndCut) {
  const std::string top(ParseJobTrace("{\"arrival\": 1, \"x\\ny\\u0085\": 2}").status().message());
  EXPECT_TRUE(absl::StrContains(top, R"(line 1: unknown member 'x\ny\u0085' (arrival, )")) << top;
  const std::string sim(
      ParseJobTrace(absl::StrCat("{\"arrival\": 1, \"request\": {\"TrainingJobName\": \"a\"}, ",
                                 "\"sim\": {\"w\\r\\nforged\": 1}}"))
          .status()
          .message());
  EXPECT_TRUE(absl::StrContains(sim, R"(unknown member 'sim.w\r\nforged' (work, )")) << sim;
  const std::string huge(
      ParseJobTrace(absl::StrCat("{\"", std::string(100000, 'k'), "\": 1}")).status().message());
  EXPECT_TRUE(absl::StrContains(huge, std::string(200, 'k') + "...' (arrival")) << huge.size();
  EXPECT_LT(huge.size(), 400u);
}

TEST(JobTraceTest, DurationsAreAtMostTenYears) {
  EXPECT_TRUE(absl::StrContains(ParseJobTrace("{\"arrival\": 1e300}").status().message(),
                                "line 1: arrival must be a number of seconds in [0, 315360000]"));
}

}  // namespace
}  // namespace kiln::sim
