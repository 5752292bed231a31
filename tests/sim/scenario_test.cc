// Scenarios: parsing (errors name the member), the shipped examples, the
// report formats, the choice of the best policy, and determinism (same seed,
// same bytes; another seed, other numbers).
#include "kiln/sim/scenario.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "kiln/sim/workload.h"
#include "sim/temp_files.h"

namespace kiln::sim {
namespace {

std::string Dir() { return KILN_SCENARIOS_DIR; }

// One job trace line: a valid request for `count` x `type` named `name`,
// arriving at `arrival` s, with the trace's "sim" members `sim`.
std::string TraceLine(int arrival, const std::string& name, const std::string& type,
                      const std::string& sim, int count = 1) {
  return absl::StrCat(
      R"({"arrival": )", arrival, R"(, "request": {"TrainingJobName": ")", name,
      R"(", "RoleArn": "arn:aws:iam::123456789012:role/R", )",
      R"("AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"}, )",
      R"("OutputDataConfig": {"S3OutputPath": "s3://bucket/out"}, )",
      R"("ResourceConfig": {"InstanceType": ")", type, R"(", "InstanceCount": )", count,
      R"(, "VolumeSizeInGB": 10}, )",
      R"("StoppingCondition": {"MaxRuntimeInSeconds": 86400}}, "sim": )", sim, "}\n");
}

// The error ParseScenario gives (empty when it parses).
std::string ParseError(std::string_view text, std::string_view base_dir = "") {
  return std::string(ParseScenario(text, base_dir).status().message());
}

// A scenario of one HPO sweep whose job template is `job` (members of the
// template), under the policies `policies`, with `models` and `horizon`.
std::string HpoScenario(const std::string& job, const std::string& policies = R"([{}])",
                        const std::string& models = "{}", const std::string& horizon = R"("1h")") {
  return absl::StrCat(
      R"({"horizon": )", horizon, R"(, "models": )", models,
      R"(, "workloads": [{"kind": "hpo", "name": "h", "trials": 2, "parallelism": 1, "job": )", job,
      R"(}], "policies": )", policies, "}");
}

constexpr char kSmall[] = R"({
  "name": "small",
  "seed": 5,
  "horizon": "12h",
  "workloads": [
    {"kind": "hpo", "name": "hpo", "trials": 30, "parallelism": 3, "sweeps": 2, "every": "4h",
     "job": {"instance_type": "ml.m5.xlarge", "keep_alive": "5m", "work": {"median": "10m", "sigma": 0.5}}},
    {"kind": "nightly", "name": "city", "cities": 6, "days": 1, "at": "1h",
     "job": {"instance_type": "ml.p3.2xlarge", "work": "1h", "deadline_slack": 2}}
  ],
  "policies": [
    {"keep_alive": "never"},
    {"keep_alive": "job_requested"},
    {"keep_alive": {"fixed": ["2m", "20m"]}},
    {"keep_alive": "job_requested", "spot": {"uniform_progress": {"checkpoint_every": "10m"}}}
  ],
  "baseline": "JobRequested",
  "report": {"slack_sweep": [1.5, 3]}
})";

TEST(ScenarioParseTest, ReadsWorkloadsPoliciesAndSweeps) {
  auto s = ParseScenario(kSmall, "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "small");
  EXPECT_EQ(s->seed, 5u);
  EXPECT_EQ(s->models->seed, 5u);
  EXPECT_EQ(s->horizon, absl::Hours(12));
  ASSERT_EQ(s->workloads.size(), 2u);
  EXPECT_FALSE(s->workloads[0].spot_eligible);
  EXPECT_TRUE(s->workloads[1].spot_eligible);  // nightly batches default to spot-eligible
  std::vector<std::string> names;
  for (const PolicySpec& p : s->policies) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"Never", "JobRequested", "Fixed(120s)", "Fixed(1200s)",
                                             "JobRequested + UniformProgress(ckpt 600s)"}));
  EXPECT_EQ(s->slack_sweep, (std::vector<double>{1.5, 3}));
}

TEST(ScenarioParseTest, ErrorsNameTheMember) {
  auto error = [](std::string_view text) { return std::string(ParseScenario(text, "").status().message()); };
  EXPECT_TRUE(absl::StrContains(error("{}"), "scenario.workloads: expected a non-empty array"));
  EXPECT_TRUE(absl::StrContains(error(R"({"workloads": [{"kind": "hpo"}], "policies": [{}]})"),
                                "scenario.workloads[0]: job is required"));
  EXPECT_TRUE(absl::StrContains(
      error(R"({"workloads": [{"kind": "hpo", "job": {"work": "1m", "instance_count": 0}}], "policies": [{}]})"),
      "scenario.workloads[0].job.instance_count: expected an integer in [1, 10000]"));
  EXPECT_TRUE(absl::StrContains(
      error(R"({"workloads": [{"kind": "hpo", "job": {"work": "1m", "instance_type": "ml.x9.huge"}}], "policies": [{}]})"),
      "no price for instance type 'ml.x9.huge'"));
  EXPECT_TRUE(absl::StrContains(
      error(R"({"workloads": [{"kind": "hpo", "job": {"work": "1m"}}], "policies": [{"keep_alive": "sometimes"}]})"),
      "scenario.policies[0].keep_alive: unknown keep-alive policy 'sometimes'"));
  EXPECT_TRUE(absl::StrContains(
      error(R"({"workloads": [{"kind": "hpo", "job": {"work": "1m"}}], "policies": [{}], "seeds": 1})"),
      "scenario.seeds: unknown member"));
  EXPECT_TRUE(absl::StrContains(
      error(R"({"workloads": [{"kind": "hpo", "job": {"work": "soon"}}], "policies": [{}]})"),
      "scenario.workloads[0].job.work: 'soon' is not a duration"));
  EXPECT_TRUE(absl::StrContains(
      error(R"({"models": {"instance_types": {"ml.m5.xlarge": {"spot": {"trace": "nope.json"}}}},
                "workloads": [{"kind": "hpo", "job": {"work": "1m"}}], "policies": [{}]})"),
      "scenario.models.instance_types.ml.m5.xlarge.spot.trace: cannot read 'nope.json'"));
  EXPECT_TRUE(absl::StrContains(
      error(R"({"workloads": [{"kind": "hpo", "job": {"work": "1m"}}], "policies": [{}, {}]})"),
      "policy name 'JobRequested' is used twice"));
}

TEST(ScenarioRunTest, ShippedExamplesParseAndRun) {
  for (const char* file : {"hpo_warm_pools.json", "spot_deadlines.json", "mixed_trace.json"}) {
    auto s = LoadScenario(absl::StrCat(Dir(), "/", file));
    ASSERT_TRUE(s.ok()) << file << ": " << s.status();
    RunOptions o;
    o.slack_sweep = false;
    auto r = RunScenario(*s, o);
    ASSERT_TRUE(r.ok()) << file << ": " << r.status();
    for (const PolicyResult& p : r->results) {
      EXPECT_GT(p.jobs, 0) << file << " " << p.policy;
      EXPECT_EQ(p.rejected, 0) << file << " " << p.policy << ": " << p.first_error;
      EXPECT_EQ(p.completed + p.failed + p.stopped, p.jobs) << file << " " << p.policy;
      EXPECT_GT(p.cost, 0);
    }
  }
}

TEST(ScenarioRunTest, SameSeedGivesTheSameBytesAndAnotherSeedOtherNumbers) {
  auto s = ParseScenario(kSmall, "");
  ASSERT_TRUE(s.ok());
  const SimulationReport a = RunScenario(*s).value();
  const SimulationReport b = RunScenario(*s).value();
  EXPECT_EQ(FormatTable(a), FormatTable(b));
  EXPECT_EQ(FormatJson(a), FormatJson(b));
  EXPECT_EQ(FormatCsv(a), FormatCsv(b));
  EXPECT_EQ(FormatHtml(a), FormatHtml(b));
  Scenario other = *s;
  other.seed = 6;
  auto models = std::make_shared<SimModels>(*other.models);
  models->seed = 6;
  other.models = models;
  const SimulationReport c = RunScenario(other).value();
  EXPECT_NE(FormatJson(a), FormatJson(c));
  EXPECT_NE(FormatHtml(a), FormatHtml(c));
}

TEST(ScenarioRunTest, BestIsTheCheapestPolicyNoWorseThanTheBaseline) {
  auto s = LoadScenario(absl::StrCat(Dir(), "/hpo_warm_pools.json"));
  ASSERT_TRUE(s.ok());
  const SimulationReport r = RunScenario(*s).value();
  const PolicyResult& base = r.results[r.baseline];
  const PolicyResult& best = r.results[r.best];
  EXPECT_EQ(base.policy, "JobRequested");
  auto no_worse = [&](const PolicyResult& p) {
    return p.startup_p90 <= base.startup_p90 && p.deadline_misses <= base.deadline_misses &&
           p.completed >= base.completed;
  };
  EXPECT_TRUE(no_worse(best));
  for (const PolicyResult& p : r.results) {
    if (no_worse(p)) {
      EXPECT_GE(p.cost, best.cost) << p.policy;
    }
  }
  // Keeping clusters warm longer costs more idle time and never slows starts.
  const PolicyResult* shortest = nullptr;
  const PolicyResult* longest = nullptr;
  for (const PolicyResult& p : r.results) {
    if (!p.fixed_keep_alive) continue;
    if (shortest == nullptr || *p.fixed_keep_alive < *shortest->fixed_keep_alive) shortest = &p;
    if (longest == nullptr || *p.fixed_keep_alive > *longest->fixed_keep_alive) longest = &p;
  }
  ASSERT_NE(shortest, longest);
  EXPECT_LT(shortest->warm_retained_instance_hours, longest->warm_retained_instance_hours);
  EXPECT_LE(shortest->warm_hit_rate, longest->warm_hit_rate);
  EXPECT_GE(shortest->startup_p90, longest->startup_p90);
  const PolicyResult& never = r.results[0];
  EXPECT_EQ(never.policy, "Never");
  EXPECT_EQ(never.warm_hits, 0);
  EXPECT_EQ(never.warm_retained_instance_hours, 0);
}

// (Spot-eligible jobs: on-demand-only ones that can never start are an
// error at load; these could start on spot, but the policy is on-demand.)
TEST(ScenarioRunTest, JobsThatCanNeverStartAreStoppedLongAfterTheHorizon) {
  auto s = ParseScenario(R"({
    "horizon": "1h",
    "models": {"instance_types": {"ml.m5.xlarge": {"capacity": 0}}},
    "workloads": [{"kind": "nightly", "cities": 3, "days": 1, "at": "0s",
                   "job": {"instance_type": "ml.m5.xlarge", "work": "10m", "spot_eligible": true}}],
    "policies": [{}]})", "");
  ASSERT_TRUE(s.ok()) << s.status();
  const SimulationReport r = RunScenario(*s).value();
  EXPECT_EQ(r.results[0].jobs, 3);
  EXPECT_EQ(r.results[0].stopped, 3);
  EXPECT_EQ(r.results[0].started, 0);
}

// A workload request the engine refuses is counted, with the first refusal's
// message (which names the job), and the run goes on: the sweep submits its
// next trial. Valid trials of another sweep in the same run are unaffected.
TEST(ScenarioRunTest, RefusedRequestsAreCountedWithTheFirstMessage) {
  Scenario s;
  s.horizon = absl::Hours(6);
  s.models = std::make_shared<SimModels>(DefaultModels());
  auto sweep = [&](const std::string& name, const std::string& role) {
    HpoSweepOptions hpo;
    hpo.name = name;
    hpo.trials = 5;
    hpo.parallelism = 2;
    hpo.sweeps = 1;
    hpo.job.request = DefaultRequest("ml.m5.xlarge", 1, "File", 0);
    hpo.job.request.set_role_arn(role);
    hpo.job.work = {absl::Minutes(10), 0, 1};
    s.workloads.push_back(
        {name, "hpo", false, [hpo](uint64_t seed) { return NewHpoSweep(hpo, seed); }});
  };
  sweep("bad", "not-a-role");  // RoleArn has a pattern
  sweep("good", "arn:aws:iam::123456789012:role/SageMakerRole");
  s.policies.push_back(PolicySpec());
  const PolicyResult r = RunPolicy(s, s.policies[0]);
  EXPECT_EQ(r.jobs, 10);
  EXPECT_EQ(r.rejected, 5);
  EXPECT_EQ(r.completed, 5);
  EXPECT_TRUE(absl::StartsWith(r.first_error, "bad-")) << r.first_error;
  EXPECT_TRUE(absl::StrContains(r.first_error, "2 validation errors detected")) << r.first_error;
  EXPECT_TRUE(absl::StrContains(r.first_error, "'roleArn'")) << r.first_error;
}

// A trace may name two jobs alike. While the first runs, the second is
// refused as the service refuses it (the name is in use), and the first runs
// to its end untouched; once the first is gone, the name is free again.
TEST(ScenarioRunTest, ASecondJobOfARunningJobsNameIsRefusedAndTheFirstRunsOn) {
  auto line = [](int arrival, const std::string& name) {
    return TraceLine(arrival, name, "ml.m5.xlarge", R"({"work": 1200})");
  };
  // "a" runs from 0 s for 20 minutes plus its start-up; the second "a" comes
  // at 600 s, while it runs; the third a day later, long after it ended.
  auto entries = ParseJobTrace(absl::StrCat(line(0, "a"), line(600, "a"), line(700, "b"),
                                            line(86400, "a")));
  ASSERT_TRUE(entries.ok()) << entries.status();
  Scenario s;
  s.horizon = absl::Hours(48);
  SimModels models = DefaultModels();
  models.failures.enabled = false;
  s.models = std::make_shared<SimModels>(models);
  s.workloads.push_back({"trace", "trace", false, [e = *entries](uint64_t) { return NewTraceReplay(e); }});
  s.policies.push_back(PolicySpec());
  const PolicyResult r = RunPolicy(s, s.policies[0]);
  EXPECT_EQ(r.jobs, 4);
  EXPECT_EQ(r.rejected, 1);
  EXPECT_EQ(r.completed, 3);
  EXPECT_TRUE(absl::StartsWith(r.first_error, "a: ")) << r.first_error;
  EXPECT_TRUE(absl::StrContains(r.first_error, "already exists")) << r.first_error;
}

// A scenario's epochs and pipe_rate reach the run: Pipe jobs streaming 9
// epochs of 2 GB at 20 MB/s (900 s) for 600 s of work take 300 s longer
// than the same jobs reading one epoch, and nothing else changes.
TEST(ScenarioRunTest, PipeJobsAreNoFasterThanTheirStream) {
  auto run = [](int epochs) {
    auto s = ParseScenario(absl::StrCat(R"({
      "horizon": "2h",
      "models": {"node_failures": false, "data": {"pipe_rate": 20}},
      "workloads": [{"kind": "nightly", "cities": 3, "days": 1, "at": "0s",
                     "job": {"instance_type": "ml.m5.xlarge", "input_mode": "Pipe", "work": "10m",
                             "data_bytes": 2000000000, "epochs": )", epochs, R"(, "spot_eligible": false}}],
      "policies": [{}]})"), "");
    EXPECT_TRUE(s.ok()) << s.status();
    PolicyRunOptions o;
    o.keep_outcomes = true;
    return RunPolicy(*s, s->policies[0], o);
  };
  const PolicyResult one = run(1), nine = run(9);
  ASSERT_EQ(one.outcomes.size(), 3u);
  ASSERT_EQ(nine.outcomes.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(nine.outcomes[i].completed);
    EXPECT_EQ(nine.outcomes[i].startup, one.outcomes[i].startup);
    EXPECT_EQ(nine.outcomes[i].duration - one.outcomes[i].duration, absl::Seconds(300)) << nine.outcomes[i].name;
  }
}

// A sweep submits nothing at or after the horizon: one 30-minute trial of a
// 10-minute horizon, not the twenty the sweep would otherwise run after it.
TEST(ScenarioRunTest, AnHpoSweepSubmitsNothingAtOrAfterTheHorizon) {
  auto s = ParseScenario(R"({"horizon": "10m",
    "workloads": [{"kind": "hpo", "name": "h", "trials": 20, "parallelism": 1,
                   "job": {"instance_type": "ml.g5.xlarge", "work": "30m"}}],
    "policies": [{}]})", "");
  ASSERT_TRUE(s.ok()) << s.status();
  const PolicyResult r = RunScenario(*s).value().results[0];
  EXPECT_EQ(r.jobs, 1);
  EXPECT_EQ(r.completed, 1);
}

// Trials that wait for capacity that never comes (on-demand capacity 0 under
// an on-demand policy) are stopped long after the horizon, and the stopped
// trial does not make the sweep submit the next one: the run ends. (Without
// the horizon check the run never ends.)
TEST(ScenarioRunTest, ASweepWhoseTrialsNeverStartEndsAfterTheDrain) {
  auto s = ParseScenario(R"({"horizon": "1h",
    "models": {"instance_types": {"ml.g5.xlarge": {"capacity": 0}}},
    "workloads": [{"kind": "hpo", "name": "h", "trials": 3, "parallelism": 1,
                   "job": {"instance_type": "ml.g5.xlarge", "work": "10m", "spot_eligible": true}}],
    "policies": [{"spot": "on_demand"}]})", "");
  ASSERT_TRUE(s.ok()) << s.status();
  const PolicyResult r = RunScenario(*s).value().results[0];
  EXPECT_EQ(r.jobs, 1);
  EXPECT_EQ(r.stopped, 1);
  EXPECT_EQ(r.started, 0);
}

// A job needing more instances of a type than the type could ever give it
// is an error at load, naming the member.
// The deadline policies' parameters: each named, each where it applies.
TEST(ScenarioParseTest, DeadlinePolicyParameters) {
  const std::string job = R"({"work": "1h"})";
  auto s = ParseScenario(HpoScenario(job, R"([{"spot": "greedy"},
      {"spot": {"uniform_progress": {"checkpoint_every": "5m", "hysteresis_factor": 0,
                                     "safety_factor": 3, "tick": "10m", "changeover": "6m"}}}])"),
                         "");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->policies.size(), 2u);
  EXPECT_EQ(s->policies[0].spot.kind, SpotChoice::Kind::kGreedy);
  EXPECT_EQ(s->policies[0].name, "Greedy(ckpt 600s)");
  const DeadlineSpotRules& r = s->policies[1].spot.rules;
  EXPECT_EQ(r.hysteresis_factor, 0);
  EXPECT_EQ(r.safety_factor, 3);
  EXPECT_EQ(r.tick, absl::Minutes(10));
  EXPECT_EQ(r.changeover, absl::Minutes(6));
  EXPECT_EQ(s->policies[1].name,
            "UniformProgress(ckpt 300s, hysteresis 0, safety 3, tick 600s, d 360s)");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"greedy": {"hysteresis_factor": 2}})",
       "spot.greedy.hysteresis_factor: only for uniform_progress"},
      {R"({"spot": {"tick": "5m"}})", "spot.spot.tick: only for greedy and uniform_progress"},
      {R"({"spot": {"changeover": "5m"}})",
       "spot.spot.changeover: only for greedy and uniform_progress"},
      {R"({"uniform_progress": {"safety_factor": -1}})",
       "safety_factor: must be a number in [0, 100]"},
      {R"({"uniform_progress": {"hysteresis_factor": "2"}})",
       "hysteresis_factor: expected a number"},
      {R"({"uniform_progress": {"tick": "0s"}})", "uniform_progress.tick: must be at least 1 s"},
      {R"({"uniform_progress": {"hysteresis": "10m"}})",
       "uniform_progress.hysteresis: unknown member"},
      {R"("greed")", "unknown spot policy 'greed' (on_demand, spot, greedy, uniform_progress)"},
  };
  for (const auto& [policy, want] : bad) {
    const std::string error =
        ParseError(HpoScenario(job, absl::StrCat(R"([{"spot": )", policy, "}]")));
    EXPECT_TRUE(absl::StrContains(error, want)) << policy << ": " << error;
  }
}

// The best policy is chosen on the figures as the table prints them: a cost
// cheaper by less than a cent, or a P90 that rounds to the baseline's, is no
// difference; a P90 that rounds above it is worse.
TEST(BestPolicyTest, ComparesCostAndP90AsTheTablePrintsThem) {
  auto result = [](double cost, std::optional<double> p90, int64_t misses = 0) {
    PolicyResult r;
    r.cost = cost;
    r.startup_p90 = p90;
    r.completed = 10;
    r.deadline_misses = misses;
    return r;
  };
  std::vector<PolicyResult> results = {
      result(100.00, 170.4),     // the baseline
      result(99.996, 170.4),     // $100.00 as printed: not cheaper
      result(99.98, 170.6),      // P90 171 s as printed: slower
      result(50, std::nullopt),  // no job began training
      result(40, 100, 1),        // a deadline missed
      result(99.99, 170.49),     // $99.99, P90 170 s: the best
  };
  EXPECT_EQ(BestPolicy(results, 0), 5u);
  results.pop_back();
  EXPECT_EQ(BestPolicy(results, 0), 0u);
  results[1].cost = 99.994;  // $99.99 as printed
  EXPECT_EQ(BestPolicy(results, 0), 1u);
}

TEST(ScenarioParseTest, AJobThatCouldNeverStartIsAnError) {
  const std::string capacity2 =
      R"({"instance_types": {"ml.g5.xlarge": {"capacity": 2, "spot_capacity": 3}}})";
  auto error = [&](int count, bool spot_eligible) {
    return ParseError(HpoScenario(
        absl::StrCat(R"({"instance_type": "ml.g5.xlarge", "work": "10m", "instance_count": )",
                     count, R"(, "spot_eligible": )", spot_eligible ? "true" : "false", "}"),
        "[{}]", capacity2));
  };
  EXPECT_TRUE(absl::StrContains(error(4, false),
                                "scenario.workloads[0].job.instance_count: needs 4 x ml.g5.xlarge, "
                                "more than the type's on-demand capacity (2)"))
      << error(4, false);
  EXPECT_EQ(error(2, false), "");
  // On spot it could start if the market has the instances.
  EXPECT_TRUE(absl::StrContains(error(4, true), "and than its spot market ever has (3)"))
      << error(4, true);
  EXPECT_EQ(error(3, true), "");
  // A trace's job too, by its line.
  const TempFiles files(TempFiles::Files{
      {"t.jsonl", absl::StrCat(TraceLine(0, "a", "ml.g5.xlarge", "{}"),
                               TraceLine(5, "b", "ml.g5.xlarge", "{}", 3))}});
  const std::string& dir = files.dir();
  const std::string trace_error = ParseError(
      absl::StrCat(R"({"models": )", capacity2,
                   R"(, "workloads": [{"kind": "trace", "file": "t.jsonl"}], "policies": [{}]})"),
      dir);
  EXPECT_TRUE(absl::StrContains(trace_error, "scenario.workloads[0].file: ")) << trace_error;
  EXPECT_TRUE(absl::StrContains(trace_error,
                                "t.jsonl: job trace line 2: job 'b': needs 3 x ml.g5.xlarge"))
      << trace_error;
}

// Stage times derived from byte counts and rates are bounded like the
// durations a scenario gives: an image or a data set that would take more
// than 3650 days at the models' slowest rate is an error at load, naming the
// member (it used to overflow the clock, and bytes x epochs overflowed int64).
TEST(ScenarioParseTest, StagesDerivedFromBytesAreBounded) {
  const std::string image = ParseError(HpoScenario(R"({"work": "10m", "image_bytes": 9000000000000000000})"));
  EXPECT_TRUE(absl::StrContains(image, "scenario.workloads[0].job.image_bytes: pulling "))
      << image;
  EXPECT_TRUE(absl::StrContains(image, "at most 3650 days")) << image;
  const std::string file = ParseError(HpoScenario(R"({"work": "10m", "data_bytes": 9000000000000000000})"));
  EXPECT_TRUE(absl::StrContains(file, "scenario.workloads[0].job.data_bytes: ")) << file;
  // A Pipe stream is data_bytes once per epoch: each alone fits, their
  // product does not (nor in int64).
  const std::string pipe = ParseError(HpoScenario(
      R"({"work": "10m", "input_mode": "Pipe", "data_bytes": 10000000000000, "epochs": 1000000})"));
  EXPECT_TRUE(absl::StrContains(pipe, "scenario.workloads[0].job.data_bytes: streaming "))
      << pipe;
  EXPECT_EQ(ParseError(HpoScenario(
                R"({"work": "10m", "input_mode": "Pipe", "data_bytes": 10000000000000, "epochs": 10})")),
            "");
  EXPECT_EQ(ParseError(HpoScenario(R"({"work": "10m", "image_bytes": 1000000000000, "data_bytes": 1000000000000})")),
            "");
  // A trace's job too, by its line.
  const TempFiles files(TempFiles::Files{
      {"t.jsonl", absl::StrCat(TraceLine(0, "a", "ml.m5.xlarge", "{}"),
                               TraceLine(5, "b", "ml.m5.xlarge", R"({"image_bytes": 9000000000000000000})"))}});
  const std::string trace_error = ParseError(
      R"({"workloads": [{"kind": "trace", "file": "t.jsonl"}], "policies": [{}]})", files.dir());
  EXPECT_TRUE(absl::StrContains(trace_error,
                                "t.jsonl: job trace line 2: job 'b': sim.image_bytes: pulling "))
      << trace_error;
}

// The adaptive keep-alive's histogram is allocated per cluster shape: its
// bin count is bounded at load (an infinite range, or 1-ns bins over a week,
// used to abort the run).
TEST(ScenarioParseTest, AdaptiveHistogramBinsAreBounded) {
  const std::string job = R"({"work": "10m"})";
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(job, R"([{"keep_alive": {"adaptive": {"range": "inf"}}}])")),
      "scenario.policies[0].keep_alive.adaptive.range: a duration must be finite"));
  const std::string tiny = ParseError(
      HpoScenario(job, R"([{"keep_alive": {"adaptive": {"bin_width": "1ns", "range": "7d"}}}])"));
  EXPECT_TRUE(absl::StrContains(tiny,
                                "scenario.policies[0].keep_alive.adaptive: range / bin_width is "
                                "604800000000000 histogram bins; at most 10000"))
      << tiny;
  EXPECT_EQ(ParseError(HpoScenario(
                job, R"([{"keep_alive": {"adaptive": {"bin_width": "1m", "range": "6h"}}}])")),
            "");
}

// Durations are finite and at most 3650 days, so the virtual clock (int64
// nanoseconds, to the year 2262) never overflows; keep-alives are at most
// the engine's 6 hours.
// AdaptiveHistogram's review_every re-decides a waiting pool's keep-alive.
// Four jobs end together before the histogram has any sample, so their pools
// are kept for the fallback (2 h); three later jobs reuse three of them after
// about 17-19 min, which teaches the histogram to keep pools about 22 min.
// Reviewed every 5 min, the fourth pool ends at its first review past that;
// decided once, it waits the whole 2 h. Same reuse, less idle time billed.
TEST(ScenarioRunTest, AdaptiveReviewEndsPoolsKeptUnderGapsThatShiftedSince) {
  auto line = [](int arrival, const std::string& name) {
    return TraceLine(arrival, name, "ml.m5.xlarge", R"({"work": 600})");
  };
  std::string trace;
  for (int i = 1; i <= 4; ++i) trace += line(0, absl::StrCat("a", i));
  for (int i = 1; i <= 3; ++i) trace += line(1800 + 60 * i, absl::StrCat("b", i));
  const TempFiles files(TempFiles::Files{{"shift.jsonl", trace}});
  const std::string adaptive = R"("min_samples": 3, "fallback": "2h")";
  auto s = ParseScenario(absl::StrCat(R"({"horizon": "6h", "models": {"node_failures": false},
                       "workloads": [{"kind": "trace", "file": "shift.jsonl"}],
                       "policies": [{"keep_alive": {"adaptive": {)",
                                      adaptive, R"(}}},
                                    {"keep_alive": {"adaptive": {)",
                                      adaptive, R"(, "review_every": "5m"}}}]})"),
                         files.dir());
  ASSERT_TRUE(s.ok()) << s.status();
  const SimulationReport r = RunScenario(*s).value();
  ASSERT_EQ(r.results.size(), 2u);
  const PolicyResult& once = r.results[0];
  const PolicyResult& reviewed = r.results[1];
  EXPECT_EQ(once.policy, "AdaptiveHistogram(p99)");
  EXPECT_EQ(reviewed.policy, "AdaptiveHistogram(p99, review 300s)");
  EXPECT_EQ(once.completed, 7);
  EXPECT_EQ(reviewed.completed, 7);
  EXPECT_EQ(once.warm_hits, 3);
  EXPECT_EQ(reviewed.warm_hits, 3);
  // The fourth pool: 2 h decided once, at most ~30 min reviewed.
  EXPECT_GT(once.warm_retained_instance_hours - reviewed.warm_retained_instance_hours, 1.4)
      << once.warm_retained_instance_hours << " vs " << reviewed.warm_retained_instance_hours;
  EXPECT_LT(reviewed.cost, once.cost);
}

TEST(ScenarioParseTest, AdaptiveReviewIsOffOrAtLeastOneSecond) {
  const std::string job = R"({"work": "10m"})";
  EXPECT_EQ(ParseError(HpoScenario(job, R"([{"keep_alive": {"adaptive": {"review_every": 0}}}])")),
            "");
  EXPECT_EQ(
      ParseError(HpoScenario(job, R"([{"keep_alive": {"adaptive": {"review_every": "1s"}}}])")),
      "");
  EXPECT_EQ(
      ParseError(HpoScenario(job, R"([{"keep_alive": {"adaptive": {"review_every": "10ms"}}}])")),
      "scenario.policies[0].keep_alive.adaptive.review_every: must be 0 (no reviews) or at least "
      "1 s");
}

TEST(ScenarioParseTest, DurationsAreFiniteAndBounded) {
  const std::string job = R"({"work": "10m"})";
  for (const char* horizon :
       {R"("inf")", R"("infd")", "1e300", R"("1e300d")", R"("100000d")", R"("3651d")"}) {
    EXPECT_TRUE(absl::StrContains(ParseError(HpoScenario(job, "[{}]", "{}", horizon)),
                                  "scenario.horizon: a duration must be finite and at most 3650d"))
        << horizon << ": " << ParseError(HpoScenario(job, "[{}]", "{}", horizon));
  }
  EXPECT_EQ(ParseError(HpoScenario(job, "[{}]", "{}", R"("3650d")")), "");
  EXPECT_TRUE(absl::StrContains(
      ParseError(
          R"({"workloads": [{"kind": "hpo", "gap": "100000d", "job": {"work": "1m"}}],
              "policies": [{}]})"),
      "scenario.workloads[0].gap: a duration must be finite"));
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(job, R"([{"spot": {"spot": {"checkpoint_every": "inf"}}}])")),
      "scenario.policies[0].spot.spot.checkpoint_every: a duration must be finite"));
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(R"({"work": {"median": "1000d", "sigma": 0.5, "max_factor": 10}})")),
      "scenario.workloads[0].job.work: median x max_factor (the longest draw) must be at most "
      "3650d"));
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(job, R"([{"keep_alive": {"fixed": ["1h", "7h"]}}])")),
      "scenario.policies[0].keep_alive.fixed[1]: at most 21600 s (6 h)"));
  EXPECT_EQ(ParseError(HpoScenario(job, R"([{"keep_alive": {"fixed": "6h"}}])")), "");
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(job, R"([{"keep_alive": {"adaptive": {"fallback": "7h"}}}])")),
      "scenario.policies[0].keep_alive.adaptive.fallback: at most 21600 s (6 h)"));
}

// RunScenario checks the horizon of a scenario built in code too.
TEST(ScenarioRunTest, RunScenarioRefusesAHorizonBeyondTheBound) {
  auto s = ParseScenario(HpoScenario(R"({"work": "10m"})"), "");
  ASSERT_TRUE(s.ok()) << s.status();
  s->horizon = absl::Hours(24 * 3651);
  auto r = RunScenario(*s);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
}

// Uniform Progress moves a spot job that falls behind its line while it
// waits for spot to on-demand: the same job under the same name (a
// 62-character name, and a trace that also has "a-m1", are no trouble),
// counted to its end, the move counted as a migration.
TEST(ScenarioRunTest, AJobMovedToOnDemandKeepsItsNameAndIsCountedToItsEnd) {
  const std::string long_name(62, 'j');
  const std::string spot = R"({"work": 1800, "deadline": 7200, "spot_eligible": true})";
  const TempFiles files(TempFiles::Files{
      {"zeros.json", R"({"metadata": {"gap_seconds": 300}, "data": [0, 0, 0]})"},
      {"t.jsonl", absl::StrCat(TraceLine(10, long_name, "ml.p3.2xlarge", spot),
                               TraceLine(20, "a", "ml.p3.2xlarge", spot),
                               TraceLine(30, "a-m1", "ml.m5.xlarge", R"({"work": 3000})"))}});
  const std::string& dir = files.dir();
  auto s = ParseScenario(R"({"horizon": "1h",
    "models": {"node_failures": false,
               "instance_types": {"ml.p3.2xlarge": {"spot": {"trace": "zeros.json"}}}},
    "workloads": [{"kind": "trace", "file": "t.jsonl"}],
    "policies": [{"spot": "on_demand"},
                 {"spot": {"uniform_progress": {"checkpoint_every": "10m"}}}]})",
                         dir);
  ASSERT_TRUE(s.ok()) << s.status();
  PolicyRunOptions o;
  o.keep_outcomes = true;
  for (const PolicySpec& policy : s->policies) {
    const PolicyResult r = RunPolicy(*s, policy, o);
    EXPECT_EQ(r.jobs, 3) << policy.name;
    EXPECT_EQ(r.completed, 3) << policy.name << ": " << r.first_error;
    EXPECT_EQ(r.rejected, 0) << policy.name << ": " << r.first_error;
    EXPECT_EQ(r.deadline_jobs, 2) << policy.name;
    EXPECT_EQ(r.deadline_misses, 0) << policy.name;
    std::vector<std::string> names;
    for (const JobOutcome& j : r.outcomes) names.push_back(j.name);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"a", "a-m1", long_name})) << policy.name;
  }
  EXPECT_EQ(RunPolicy(*s, s->policies[0]).migrations, 0);
  EXPECT_EQ(RunPolicy(*s, s->policies[1]).migrations, 2);
}

// A move keeps the job's request: a request valid as a spot job only (its
// KeepAlivePeriodInSeconds, which the spot variant drops, is not allowed
// with InstanceGroups; a trace replayed through the API is not checked at
// load) still completes on on-demand after the move.
TEST(ScenarioRunTest, AMovedJobKeepsItsRequest) {
  std::string line = absl::StrCat(
      R"({"arrival": 10, "request": {"TrainingJobName": "g", )",
      R"("RoleArn": "arn:aws:iam::123456789012:role/R", )",
      R"("AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"}, )",
      R"("OutputDataConfig": {"S3OutputPath": "s3://bucket/out"}, )",
      R"("ResourceConfig": {"InstanceGroups": [{"InstanceGroupName": "g1", )",
      R"("InstanceType": "ml.p3.2xlarge", )",
      R"("InstanceCount": 1}], "VolumeSizeInGB": 10, "KeepAlivePeriodInSeconds": 600}, )",
      R"("StoppingCondition": {"MaxRuntimeInSeconds": 86400}}, )",
      R"("sim": {"work": 1800, "deadline": 7200, "spot_eligible": true}})", "\n");
  auto entries = ParseJobTrace(line);
  ASSERT_TRUE(entries.ok()) << entries.status();
  Scenario s;
  s.horizon = absl::Hours(1);
  SimModels models = DefaultModels();
  models.failures.enabled = false;
  SpotMarket& market = models.types["ml.p3.2xlarge"].spot;
  market.kind = SpotMarket::Kind::kTrace;
  market.trace.gap = absl::Minutes(5);
  market.trace.available = {0};
  s.models = std::make_shared<SimModels>(models);
  s.workloads.push_back(
      {"trace", "trace", true, [e = *entries](uint64_t) { return NewTraceReplay(e); }});
  PolicySpec policy;
  policy.spot.kind = SpotChoice::Kind::kUniformProgress;
  const PolicyResult r = RunPolicy(s, policy);
  EXPECT_EQ(r.jobs, 1);
  EXPECT_EQ(r.migrations, 1);
  EXPECT_EQ(r.rejected, 0);
  EXPECT_EQ(r.failed, 0) << r.first_error;
  EXPECT_EQ(r.completed, 1);
  EXPECT_EQ(r.deadline_misses, 0);
}

// Every instance type a job uses needs a price, the types of its
// InstanceGroups too.
TEST(ScenarioParseTest, EveryInstanceGroupNeedsAPrice) {
  const std::string groups =
      R"({"InstanceGroups": [
            {"InstanceGroupName": "g1", "InstanceType": "ml.m5.xlarge", "InstanceCount": 1},
            {"InstanceGroupName": "g2", "InstanceType": "ml.r5.24xlarge", "InstanceCount": 2}],
          "VolumeSizeInGB": 10})";
  const std::string request = absl::StrCat(
      R"({"RoleArn": "arn:aws:iam::123456789012:role/R",
          "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
          "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"}, "ResourceConfig": )", groups,
      R"(, "StoppingCondition": {"MaxRuntimeInSeconds": 3600}})");
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(absl::StrCat(R"({"work": "10m", "request": )", request, "}"))),
      "scenario.workloads[0].job.request: no price for instance type 'ml.r5.24xlarge'"));
  std::string line =
      absl::StrCat(R"({"arrival": 10, "request": )", request.substr(0, request.size() - 1),
                   R"(, "TrainingJobName": "g"}})");
  std::replace(line.begin(), line.end(), '\n', ' ');  // one line
  line += "\n";
  const TempFiles files(TempFiles::Files{{"t.jsonl", line}});
  const std::string& dir = files.dir();
  const std::string error = ParseError(
      R"({"workloads": [{"kind": "trace", "file": "t.jsonl"}], "policies": [{}]})", dir);
  EXPECT_TRUE(absl::StrContains(
      error, "job trace line 1: job 'g': no price for instance type 'ml.r5.24xlarge'"))
      << error;
}

// models.default_type with a price of its own covers the types not listed
// (the README's promise); without one, such a type is an error.
TEST(ScenarioParseTest, APricedDefaultTypeCoversTypesNotListed) {
  const std::string job = R"({"instance_type": "ml.r5.xlarge", "work": "1h"})";
  EXPECT_TRUE(
      absl::StrContains(ParseError(HpoScenario(job)), "no price for instance type 'ml.r5.xlarge'"));
  const std::string priced =
      R"({"node_failures": false, "default_type": {"on_demand_per_hour": 2.5}})";
  auto s = ParseScenario(HpoScenario(job, "[{}]", priced), "");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->models->Type("ml.r5.xlarge").on_demand_per_hour, 2.5);
  const PolicyResult r = RunScenario(*s).value().results[0];
  EXPECT_EQ(r.completed, 1);
  EXPECT_NEAR(r.cost, 2.5 * r.billable_instance_hours, 1e-6);
  // A type listed without a price takes the default's.
  const std::string listed = R"({"default_type": {"on_demand_per_hour": 2.5},
                                 "instance_types": {"ml.r5.xlarge": {"capacity": 3}}})";
  EXPECT_EQ(ParseError(HpoScenario(job, "[{}]", listed)), "");
}

// A trace's requests are validated at load, as a template's are, and the
// error names the file and the line.
TEST(ScenarioParseTest, TraceRequestsAreValidatedAtLoad) {
  std::string bad = TraceLine(20, "b", "ml.m5.xlarge", "{}");
  bad.replace(bad.find("arn:aws:iam::123456789012:role/R"), 32, "x");
  const TempFiles files(TempFiles::Files{
      {"t.jsonl", absl::StrCat(TraceLine(10, "a", "ml.m5.xlarge", "{}"), bad)}});
  const std::string& dir = files.dir();
  const std::string error = ParseError(
      R"({"workloads": [{"kind": "trace", "file": "t.jsonl"}], "policies": [{}]})", dir);
  EXPECT_TRUE(absl::StrContains(error, "scenario.workloads[0].file: ")) << error;
  EXPECT_TRUE(
      absl::StrContains(error, "t.jsonl: job trace line 2: job 'b': the request is not valid: "))
      << error;
  EXPECT_TRUE(absl::StrContains(error, "roleArn")) << error;
}

// Files a scenario names, and the scenario file itself, must be regular
// files within their limits: a device, a FIFO or a directory is refused at
// once (never waited on or read), a file too large by its size.
TEST(ScenarioParseTest, TracesMustBeRegularFilesWithinTheLimit) {
  const TempFiles files(TempFiles::Files{});
  const std::string& dir = files.dir();
  const std::string fifo = dir + "/fifo";
  const std::string subdir = dir + "/d";
  const std::string big = dir + "/big.jsonl";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(mkdir(subdir.c_str(), 0755), 0);
  {
    std::ofstream out(big);
  }
  ASSERT_EQ(truncate(big.c_str(), kMaxTraceFileBytes + 1), 0);  // sparse: nothing is read
  auto job_trace = [&](const std::string& file) {
    return ParseError(absl::StrCat(R"({"workloads": [{"kind": "trace", "file": ")", file,
                                   R"("}], "policies": [{}]})"),
                      dir);
  };
  auto spot_trace = [&](const std::string& file) {
    return ParseError(
        absl::StrCat(R"({"models": {"instance_types": {"ml.m5.xlarge": {"spot": {"trace": ")", file,
                     R"("}}}}, "workloads": [{"kind": "hpo", "job": {"work": "1m"}}], )",
                     R"("policies": [{}]})"),
        dir);
  };
  const std::string not_regular = ", not a regular file; a trace file must be a regular file";
  EXPECT_EQ(job_trace("/dev/zero"),
            absl::StrCat("scenario.workloads[0].file: cannot read '/dev/zero': a character device",
                         not_regular));
  EXPECT_EQ(spot_trace("/dev/zero"),
            absl::StrCat("scenario.models.instance_types.ml.m5.xlarge.spot.trace: cannot read "
                         "'/dev/zero': a character device",
                         not_regular));
  EXPECT_EQ(job_trace("fifo"),
            absl::StrCat("scenario.workloads[0].file: cannot read '", fifo, "': a FIFO",
                         not_regular));
  EXPECT_EQ(spot_trace("fifo"),
            absl::StrCat("scenario.models.instance_types.ml.m5.xlarge.spot.trace: cannot read '",
                         fifo, "': a FIFO", not_regular));
  EXPECT_EQ(job_trace("d"), absl::StrCat("scenario.workloads[0].file: cannot read '", subdir,
                                         "': a directory", not_regular));
  EXPECT_EQ(job_trace("big.jsonl"),
            absl::StrCat("scenario.workloads[0].file: cannot read '", big, "': ",
                         kMaxTraceFileBytes + 1, " bytes; a trace file may hold at most 256 MiB (",
                         kMaxTraceFileBytes, " bytes)"));

  // The scenario file itself.
  auto load = [](const std::string& path) {
    return std::string(LoadScenario(path).status().message());
  };
  const std::string scenario_rule = ", not a regular file; a scenario file must be a regular file";
  EXPECT_EQ(load("/dev/zero"),
            absl::StrCat("cannot read '/dev/zero': a character device", scenario_rule));
  EXPECT_EQ(load(fifo), absl::StrCat("cannot read '", fifo, "': a FIFO", scenario_rule));
  EXPECT_EQ(load(subdir), absl::StrCat("cannot read '", subdir, "': a directory", scenario_rule));
  ASSERT_EQ(truncate(big.c_str(), kMaxScenarioFileBytes + 1), 0);
  EXPECT_EQ(load(big), absl::StrCat("cannot read '", big, "': ", kMaxScenarioFileBytes + 1,
                                    " bytes; a scenario file may hold at most 16 MiB (",
                                    kMaxScenarioFileBytes, " bytes)"));
  EXPECT_EQ(LoadScenario(dir + "/missing.json").status().code(), absl::StatusCode::kNotFound);
  unlink(fifo.c_str());
  unlink(big.c_str());
  rmdir(subdir.c_str());
}

// A trace that gives the run no job (empty, or every arrival at or after the
// horizon) is an error.
TEST(ScenarioParseTest, ATraceWithNoJobBeforeTheHorizonIsAnError) {
  const TempFiles files(TempFiles::Files{
      {"empty.jsonl", "\n"},
      {"late.jsonl", TraceLine(3600, "a", "ml.m5.xlarge", "{}")},
      {"ok.jsonl", TraceLine(3599, "a", "ml.m5.xlarge", "{}")}});
  const std::string& dir = files.dir();
  auto scenario = [](const std::string& file) {
    return absl::StrCat(R"({"horizon": "1h", "workloads": [{"kind": "trace", "file": ")", file,
                        R"("}], "policies": [{}]})");
  };
  EXPECT_TRUE(absl::StrContains(ParseError(scenario("empty.jsonl"), dir), "empty.jsonl: no jobs"));
  EXPECT_TRUE(
      absl::StrContains(ParseError(scenario("late.jsonl"), dir),
                        "late.jsonl: no job arrives before the horizon (3600 s); the first arrives "
                        "at 3600 s"))
      << ParseError(scenario("late.jsonl"), dir);
  EXPECT_EQ(ParseError(scenario("ok.jsonl"), dir), "");
}

// Input the errors echo (keys, values, names, file names) is escaped and cut:
// no scenario can add a line to a message or make it long.
TEST(ScenarioParseTest, InputEchoedInErrorsIsEscapedAndCut) {
  const std::string job = R"({"work": "10m"})";
  // Whether `error` holds `want` and no character that breaks a line.
  auto one_line = [](const std::string& error, const std::string& want) {
    if (error.find_first_of("\n\r\x0b\x0c") != std::string::npos ||
        absl::StrContains(error, "\xE2\x80\xA8")) {
      return testing::AssertionFailure() << "a line break in: " << error;
    }
    if (!absl::StrContains(error, want)) {
      return testing::AssertionFailure() << "no '" << want << "' in: " << error;
    }
    return testing::AssertionSuccess();
  };
  // Keys in a path: quoted as JSON when they need escaping.
  EXPECT_TRUE(one_line(ParseError(R"({"a\nforged: b": 1})"),
                       R"(scenario."a\nforged: b": unknown member)"));
  const std::string type = R"({"ml.x\u0001": {"on_demand_per_hour": 1, "capacity": -1}})";
  EXPECT_TRUE(one_line(
      ParseError(HpoScenario(job, "[{}]", absl::StrCat(R"({"instance_types": )", type, "}"))),
      R"(scenario.models.instance_types."ml.x\u0001".capacity: expected an integer)"));
  EXPECT_TRUE(one_line(ParseError(HpoScenario(job, R"([{"keep_alive": {"never": {"x\r": 1}}}])")),
                       R"(scenario.policies[0].keep_alive.never."x\r": unknown member)"));
  // Values and names: escaped in their single quotes.
  EXPECT_TRUE(one_line(ParseError(HpoScenario(R"({"work": "1\nforged"})")),
                       R"(job.work: '1\nforged' is not a duration)"));
  EXPECT_TRUE(one_line(ParseError(HpoScenario(job, R"([{"keep_alive": "x\u2028y"}])")),
                       R"(unknown keep-alive policy 'x\u2028y')"));
  EXPECT_TRUE(one_line(ParseError(HpoScenario(job, R"([{"spot": "x\u000by"}])")),
                       R"(unknown spot policy 'x\u000by')"));
  EXPECT_TRUE(one_line(
      ParseError(R"({"workloads": [{"kind": "a\nb", "job": {"work": "1m"}}], "policies": [{}]})"),
      R"(unknown kind 'a\nb')"));
  EXPECT_TRUE(one_line(ParseError(HpoScenario(job, R"([{"name": "p\nq"}, {"name": "p\nq"}])")),
                       R"(policy name 'p\nq' is used twice)"));
  EXPECT_TRUE(one_line(ParseError(R"({"workloads": [{"kind": "hpo", "job": {"work": "1m"}}],
                                      "policies": [{}], "baseline": "b\fc"})"),
                       R"('b\fc' names no policy)"));
  EXPECT_TRUE(one_line(ParseError(HpoScenario(R"({"work": "1m", "instance_type": "ml.\nx"})")),
                       R"(no price for instance type 'ml.\nx')"));
  EXPECT_TRUE(one_line(ParseError(R"({"workloads": [{"kind": "trace", "file": "no\nsuch.jsonl"}],
                                      "policies": [{}]})"),
                       R"(cannot read 'no\nsuch.jsonl')"));
  // A trace's job name, in the error about its request.
  const TempFiles files(TempFiles::Files{{"t.jsonl", TraceLine(1, "a\\nb", "ml.x9.huge", "{}")}});
  EXPECT_TRUE(one_line(
      ParseError(R"({"workloads": [{"kind": "trace", "file": "t.jsonl"}], "policies": [{}]})",
                 files.dir()),
      R"(job trace line 1: job 'a\nb': no price for instance type 'ml.x9.huge')"));
  // Huge input is cut: the message stays short.
  const std::string huge(100000, 'k');
  const std::string error = ParseError(absl::StrCat(R"({")", huge, R"(": 1})"));
  EXPECT_TRUE(one_line(error, R"(scenario.")" + std::string(199, 'k') + R"(...: unknown member)"));
  EXPECT_LT(error.size(), 400u);
}

// Policies without options take none: a body with members is an error.
TEST(ScenarioParseTest, PoliciesWithoutOptionsRefuseMembers) {
  const std::string job = R"({"work": "10m"})";
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(job, R"([{"spot": {"on_demand": {"checkpoint_every": "bogus"}}}])")),
      "scenario.policies[0].spot.on_demand.checkpoint_every: unknown member"));
  EXPECT_TRUE(
      absl::StrContains(ParseError(HpoScenario(job, R"([{"keep_alive": {"never": {"typo": 1}}}])")),
                        "scenario.policies[0].keep_alive.never.typo: unknown member"));
  EXPECT_TRUE(absl::StrContains(
      ParseError(HpoScenario(job, R"([{"keep_alive": {"job_requested": "10m"}}])")),
      "scenario.policies[0].keep_alive.job_requested: this policy takes no options"));
  EXPECT_EQ(ParseError(HpoScenario(
                job, R"([{"keep_alive": {"never": {}}}, {"spot": {"on_demand": {}}}])")),
            "");
}

// Under a policy where no job began training there is no startup latency:
// "-" in the table, null in JSON, empty in CSV; and such a policy is not
// the best, however cheap (here: every job fails with an algorithm error
// on-demand, and never starts on spot, so both complete none).
TEST(ScenarioFormatTest, APolicyWhereNoJobStartedHasNoStartupLatency) {
  const TempFiles files(
      TempFiles::Files{{"zeros.json", R"({"metadata": {"gap_seconds": 300}, "data": [0]})"}});
  const std::string& dir = files.dir();
  auto s = ParseScenario(R"({"horizon": "1h",
    "models": {"node_failures": false,
               "instance_types": {"ml.p3.2xlarge": {"spot": {"trace": "zeros.json"}}}},
    "workloads": [{"kind": "nightly", "cities": 2, "days": 1, "at": "0s",
                   "job": {"instance_type": "ml.p3.2xlarge", "work": "10m",
                           "algorithm_error_rate": 1}}],
    "policies": [{"spot": "on_demand"}, {"spot": "spot"}]})",
                         dir);
  ASSERT_TRUE(s.ok()) << s.status();
  RunOptions o;
  o.slack_sweep = false;
  const SimulationReport r = RunScenario(*s, o).value();
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[1].started, 0);
  EXPECT_EQ(r.results[0].completed, r.results[1].completed);
  EXPECT_LT(r.results[1].cost, r.results[0].cost);
  EXPECT_EQ(r.best, 0u);  // not the policy that started nothing
  const std::string table = FormatTable(r), json = FormatJson(r), csv = FormatCsv(r);
  const std::vector<std::string> rows = absl::StrSplit(table, '\n');
  ASSERT_GE(rows.size(), 4u);
  const std::vector<std::string> cells = absl::StrSplit(rows[3], ' ', absl::SkipEmpty());
  ASSERT_EQ(cells.size(), 14u) << rows[3];  // the policy's name is two
  EXPECT_EQ(cells[8], "-");
  EXPECT_EQ(cells[9], "-");
  EXPECT_EQ(cells[10], "-");
  EXPECT_TRUE(absl::StrContains(json, R"("startup_p50_seconds": null)")) << json;
  EXPECT_TRUE(absl::StrContains(json, R"("startup_p99_seconds": null)")) << json;
  const std::vector<std::string> lines = absl::StrSplit(csv, '\n');
  const std::vector<std::string> fields = absl::StrSplit(lines[2], ',');
  ASSERT_EQ(fields.size(), 22u) << lines[2];
  EXPECT_EQ(fields[13], "");
  EXPECT_EQ(fields[14], "");
  EXPECT_EQ(fields[15], "");
}

// JSON numbers are written with a fixed number of decimals (not a rounded
// double's 4.0200000000000005), and a CSV field holding \r is quoted.
TEST(ScenarioFormatTest, JsonHasFixedDecimalsAndCsvQuotesCarriageReturns) {
  SimulationReport r;
  r.scenario = "s";
  PolicyResult p;
  p.policy = "a\rb";
  p.cost = 4.02;
  p.billable_instance_hours = 2.966;
  p.startup_p50 = 118.3;
  p.startup_p90 = 143.9;
  p.startup_p99 = 143.9;
  r.results.push_back(p);
  const std::string json = FormatJson(r);
  EXPECT_TRUE(absl::StrContains(json, R"("cost": 4.02,)")) << json;
  EXPECT_TRUE(absl::StrContains(json, R"("billable_instance_hours": 2.966,)")) << json;
  EXPECT_TRUE(absl::StrContains(json, R"("startup_p50_seconds": 118.3,)")) << json;
  EXPECT_TRUE(absl::StrContains(json, R"("warm_hit_rate": 0.0000,)")) << json;
  EXPECT_TRUE(absl::StrContains(FormatCsv(r), "\n\"a\rb\",")) << FormatCsv(r);
}

TEST(ScenarioFormatTest, TableCsvJsonAndHtmlCarryEveryPolicy) {
  auto s = ParseScenario(kSmall, "");
  ASSERT_TRUE(s.ok());
  const SimulationReport r = RunScenario(*s).value();
  const std::string table = FormatTable(r), csv = FormatCsv(r), json = FormatJson(r), html = FormatHtml(r);
  const std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), r.results.size() + 1);
  const size_t fields = std::count(lines[0].begin(), lines[0].end(), ',');
  for (const std::string& line : lines) EXPECT_EQ(std::count(line.begin(), line.end(), ','), fields) << line;
  for (const PolicyResult& p : r.results) {
    EXPECT_TRUE(absl::StrContains(table, p.policy));
    EXPECT_TRUE(absl::StrContains(json, absl::StrCat("\"policy\": \"", p.policy, "\"")));
    EXPECT_TRUE(absl::StrContains(html, p.policy));
  }
  EXPECT_TRUE(absl::StrContains(table, "Best by cost at equal or better latency"));
  EXPECT_TRUE(absl::StrContains(table, "Spot savings against deadline slack"));
  // Self-contained: inline SVG charts, no scripts, styles or images from elsewhere.
  EXPECT_EQ(std::count(html.begin(), html.end(), '<') - std::count(html.begin(), html.end(), '>'), 0);
  for (const char* bad : {"<script", "<link", "src=", "@import", "url("}) {
    EXPECT_FALSE(absl::StrContains(html, bad)) << bad;
  }
  for (const char* section : {"Startup latency CDF", "Cost against startup P90",
                              "Cost against keep-alive T", "Spot savings against deadline slack"}) {
    EXPECT_TRUE(absl::StrContains(html, section)) << section;
  }
  size_t svgs = 0;
  for (size_t pos = html.find("<svg "); pos != std::string::npos; pos = html.find("<svg ", pos + 1)) ++svgs;
  EXPECT_EQ(svgs, 5u);  // latency CDF, cost against P90, Fixed(T), savings and misses against slack
}

}  // namespace
}  // namespace kiln::sim
