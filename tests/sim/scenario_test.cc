// Scenarios: parsing (errors name the member), the shipped examples, the
// report formats, the choice of the best policy, and determinism (same seed,
// same bytes; another seed, other numbers).
#include "kiln/sim/scenario.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "kiln/sim/workload.h"

namespace kiln::sim {
namespace {

std::string Dir() { return KILN_SCENARIOS_DIR; }

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

TEST(ScenarioRunTest, JobsThatCanNeverStartAreStoppedLongAfterTheHorizon) {
  auto s = ParseScenario(R"({
    "horizon": "1h",
    "models": {"instance_types": {"ml.m5.xlarge": {"capacity": 0}}},
    "workloads": [{"kind": "nightly", "cities": 3, "days": 1, "at": "0s",
                   "job": {"instance_type": "ml.m5.xlarge", "work": "10m", "spot_eligible": false}}],
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
    return absl::StrCat(
        R"({"arrival": )", arrival, R"(, "request": {"TrainingJobName": ")", name,
        R"(", "RoleArn": "arn:aws:iam::123456789012:role/R", )",
        R"("AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"}, )",
        R"("OutputDataConfig": {"S3OutputPath": "s3://bucket/out"}, )",
        R"("ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10}, )",
        R"("StoppingCondition": {"MaxRuntimeInSeconds": 3600}}, "sim": {"work": 1200}})", "\n");
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
  for (const char* section : {"Startup latency CDF", "Cost against keep-alive T", "Spot savings against deadline slack"}) {
    EXPECT_TRUE(absl::StrContains(html, section)) << section;
  }
  size_t svgs = 0;
  for (size_t pos = html.find("<svg "); pos != std::string::npos; pos = html.find("<svg ", pos + 1)) ++svgs;
  EXPECT_EQ(svgs, 3u);
}

}  // namespace
}  // namespace kiln::sim
