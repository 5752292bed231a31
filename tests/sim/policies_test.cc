// Policies: the greedy and Uniform Progress decisions, the spot savings
// formula, both against on-demand on the shipped sample traces, and the
// adaptive keep-alive against Fixed on sweeps far apart.
#include "kiln/sim/policies.h"

#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/sim/scenario.h"
#include "kiln/sim/sim.h"

namespace kiln::sim {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1767225600);

// A 10-hour job due 20 hours after it arrived, with a 1-hour margin.
ProgressView Job(absl::Duration progress, bool on_spot) {
  ProgressView v;
  v.arrival = kT0;
  v.deadline = kT0 + absl::Hours(20);
  v.work = absl::Hours(10);
  v.progress = progress;
  v.margin = absl::Hours(1);
  v.on_spot = on_spot;
  return v;
}

DeadlineSpotRules Rules(DeadlineSpotRules::Rule rule = DeadlineSpotRules::Rule::kUniformProgress) {
  DeadlineSpotRules r;
  r.rule = rule;
  r.tick = absl::Minutes(10);
  return r;
}

CapacityNow Capacity(bool holding, bool spot_available) {
  CapacityNow c;
  c.holding = holding;
  c.spot_available = spot_available;
  c.next_decision = absl::Minutes(10);
  return c;
}

constexpr auto kGreedy = DeadlineSpotRules::Rule::kGreedy;

// Spot held is kept until preempted, whatever the line says; spot that is
// there is taken.
TEST(DeadlineSpotTest, SpotHeldIsKeptAndSpotThereIsTaken) {
  const absl::Time now = kT0 + absl::Hours(8);  // the line is at 4 h of work
  for (const auto& rules : {Rules(), Rules(kGreedy)}) {
    EXPECT_TRUE(DeadlineSpotUsesSpot(Job(absl::Hours(3), true), now, rules, Capacity(true, false)));
    EXPECT_TRUE(DeadlineSpotUsesSpot(Job(absl::Hours(3), true), now, rules, Capacity(false, true)));
  }
}

// Without spot, a Uniform Progress job on or above the line waits for it;
// behind the line it goes on-demand at once. Greedy waits either way.
TEST(DeadlineSpotTest, IdleAndBehindTheLineGoesOnDemand) {
  const absl::Time now = kT0 + absl::Hours(8);
  const CapacityNow idle = Capacity(false, false);
  EXPECT_TRUE(DeadlineSpotUsesSpot(Job(absl::Hours(4), true), now, Rules(), idle));
  EXPECT_TRUE(DeadlineSpotUsesSpot(Job(absl::Hours(6), true), now, Rules(), idle));
  EXPECT_FALSE(DeadlineSpotUsesSpot(Job(absl::Hours(3.9), true), now, Rules(), idle));
  EXPECT_TRUE(DeadlineSpotUsesSpot(Job(absl::Hours(3.9), true), now, Rules(kGreedy), idle));
}

// Uniform Progress leaves on-demand only when spot is there and the job's
// progress reaches the line at now + 2d (d: the 1-hour margin), whether it
// holds its on-demand instances or still asks for them; with the factor at
// 0, as soon as spot is there. Greedy never leaves on-demand.
TEST(DeadlineSpotTest, BackToSpotOnlyWhenThereWithTheHysteresisAhead) {
  const absl::Time now = kT0 + absl::Hours(8);  // the line at now + 2 h: 5 h
  DeadlineSpotRules plain = Rules();
  plain.hysteresis_factor = 0;
  for (bool holding : {false, true}) {
    EXPECT_FALSE(
        DeadlineSpotUsesSpot(Job(absl::Hours(4.9), false), now, Rules(), Capacity(holding, true)));
    EXPECT_TRUE(
        DeadlineSpotUsesSpot(Job(absl::Hours(5), false), now, Rules(), Capacity(holding, true)));
    EXPECT_FALSE(
        DeadlineSpotUsesSpot(Job(absl::Hours(9), false), now, Rules(), Capacity(holding, false)));
    EXPECT_TRUE(
        DeadlineSpotUsesSpot(Job(absl::Hours(3), false), now, plain, Capacity(holding, true)));
    EXPECT_FALSE(DeadlineSpotUsesSpot(Job(absl::Hours(9), false), now, Rules(kGreedy),
                                      Capacity(holding, true)));
  }
}

// The safety net, in multiples of the margin: it overrides the line and spot
// that is there, but not spot held. A job without spot waits only while it
// keeps the net's slack until the next decision.
TEST(DeadlineSpotTest, SafetyNetOverridesTheLineButNotSpotHeld) {
  // 9 h of work left, 11.5 h to go, a 1-hour margin: 2.5 h of slack.
  ProgressView v = Job(absl::Hours(1), true);
  v.arrival = kT0 + absl::Hours(8);  // the line would say "ahead"
  const absl::Time now = kT0 + absl::Hours(8.5);
  EXPECT_EQ(Slack(v, now), absl::Hours(2.5));
  DeadlineSpotRules two = Rules(), three = Rules();
  three.safety_factor = 3;
  EXPECT_TRUE(DeadlineSpotUsesSpot(v, now, two, Capacity(false, true)));
  EXPECT_FALSE(DeadlineSpotUsesSpot(v, now, three, Capacity(false, true)));
  EXPECT_TRUE(DeadlineSpotUsesSpot(v, now, three, Capacity(true, false)));
  // Waiting: 2.5 h - 20 min leaves 2 h 10 min >= 2 h; 2.5 h - 40 min does not.
  CapacityNow wait = Capacity(false, false);
  wait.next_decision = absl::Minutes(20);
  EXPECT_TRUE(DeadlineSpotUsesSpot(v, now, two, wait));
  wait.next_decision = absl::Minutes(40);
  EXPECT_FALSE(DeadlineSpotUsesSpot(v, now, two, wait));
  EXPECT_FALSE(DeadlineSpotUsesSpot(v, now, Rules(kGreedy), wait));
  // On on-demand, inside the net: it stays there, spot or not.
  v.on_spot = false;
  v.progress = absl::Hours(9);
  EXPECT_FALSE(DeadlineSpotUsesSpot(v, kT0 + absl::Hours(19.5), two, Capacity(true, true)));
}

TEST(DeadlineSpotTest, HandlerDecidesAtInterruptionsAndReviewsAndKeepsTheRetryBudget) {
  std::map<std::string, bool> decisions;
  DeadlineSpotOptions o;
  o.rules = Rules();
  o.rules.tick = absl::Minutes(7);
  bool spot_there = false;
  o.view = [](std::string_view job) -> std::optional<ProgressView> {
    if (job == "behind") return Job(absl::Hours(1), true);
    if (job == "ahead") return Job(absl::Hours(9), true);
    return std::nullopt;
  };
  o.spot_available = [&](std::string_view) { return spot_there; };
  o.on_decision = [&](std::string_view job, bool spot) { decisions[std::string(job)] = spot; };
  auto handler = NewDeadlineSpotHandler(o);
  EXPECT_EQ(handler->ReviewPeriod(), absl::Minutes(7));
  InterruptionContext c;
  c.preempted = true;
  c.on_spot = true;
  c.now = kT0 + absl::Hours(8);
  c.job_name = "behind";
  EXPECT_FALSE(handler->OnInterruption(c).use_spot);
  c.job_name = "ahead";
  EXPECT_TRUE(handler->OnInterruption(c).use_spot);
  c.job_name = "no-deadline";
  EXPECT_TRUE(handler->OnInterruption(c).use_spot);
  EXPECT_EQ(decisions, (std::map<std::string, bool>{
                           {"ahead", true}, {"behind", false}, {"no-deadline", true}}));
  // Reviews: a job behind the line that holds spot keeps it; waiting, it
  // goes on-demand unless spot is there.
  CapacityReview r;
  r.job_name = "behind";
  r.on_spot = true;
  r.now = c.now;
  r.creation_time = kT0;
  r.when = CapacityReview::When::kRunning;
  EXPECT_TRUE(handler->Review(r));
  r.when = CapacityReview::When::kWaiting;
  EXPECT_FALSE(handler->Review(r));
  spot_there = true;
  EXPECT_TRUE(handler->Review(r));
  // A lost instance beyond RetryStrategy ends the job, as the default handler does.
  c.preempted = false;
  c.infrastructure_failures = 1;
  c.max_retry_attempts = 0;
  const InterruptionDecision d = handler->OnInterruption(c);
  EXPECT_EQ(d.action, InterruptionDecision::Action::kGiveUp);
  EXPECT_TRUE(absl::StrContains(d.failure_reason, "no RetryStrategy"));
}

// Managed spot training reports savings = 1 - BillableTime / TrainingTime;
// the provider bills exactly the billable time at the spot price, so the
// saving against on-demand is 1 - (spot price x spot billable) /
// (on-demand price x on-demand billable).
TEST(SpotSavingsTest, SavingsFollowTheFormulaFromBillableTimeAndPrices) {
  SimModels models = DefaultModels();
  models.failures.enabled = false;
  InstanceTypeModel& t = models.types["ml.p3.2xlarge"];
  t.provisioning = {absl::Seconds(60), 0};
  t.container_start = {absl::Seconds(10), 0};
  auto run = [&](bool spot) {
    auto loop = NewVirtualEventLoop();
    SimClusterOptions options;
    options.models = std::make_shared<const SimModels>(models);
    options.behavior = [spot](std::string_view) {
      SimJobBehavior b;
      b.run_duration = absl::Hours(1);
      b.checkpoint_interval = absl::Minutes(10);
      if (spot) b.spot_notices = {absl::Seconds(1000)};  // 1,000 s into the first attempt
      return b;
    };
    auto provider = NewSimClusterProvider(*loop, options);
    EngineOptions eo;
    eo.loop = loop.get();
    eo.cluster_provider = provider.get();
    auto engine = NewEngine(std::move(eo)).value();
    v1::CreateTrainingJobRequest r = DefaultRequest("ml.p3.2xlarge", 1, "File", 0);
    r.clear_input_data_config();
    r.set_training_job_name("job");
    r.mutable_checkpoint_config()->set_s3_uri("s3://bucket/ckpt/job");
    if (spot) {
      r.set_enable_managed_spot_training(true);
      r.mutable_stopping_condition()->set_max_wait_time_in_seconds(2419200);
    }
    EXPECT_TRUE(engine->CreateTrainingJob(r).ok());
    loop->RunUntilIdle();
    v1::DescribeTrainingJobRequest d;
    d.set_training_job_name("job");
    return std::make_pair(engine->DescribeTrainingJob(d).value(), provider->Accounting());
  };
  const auto [spot, spot_bill] = run(true);
  const auto [od, od_bill] = run(false);
  // Spot: provisioned at 60 s, training at 100 s (30 s image + 10 s start),
  // notice at 1,100 s, exit at 1,101 s with 600 s saved; retry at 1,131 s,
  // training again at 1,231 s, 3,000 s left, done at 4,231 s, uploaded at
  // 4,236 s. Billable: (1,101 - 60) + (4,236 - 1,191) = 4,086 s; training
  // time 4,236 - 60 = 4,176 s.
  EXPECT_EQ(spot.training_job_status(), "Completed");
  EXPECT_EQ(spot.billable_time_in_seconds(), 4086);
  EXPECT_EQ(spot.training_time_in_seconds(), 4176);
  const double reported = 1.0 - 4086.0 / 4176.0;
  EXPECT_TRUE(absl::StrContains(spot.secondary_status_transitions().rbegin()->status_message(),
                                absl::StrFormat("Managed spot training savings: %.1f%%", reported * 100)));
  EXPECT_EQ(spot_bill.spot_busy, absl::Seconds(4086));
  const double spot_price = models.types["ml.p3.2xlarge"].spot_per_hour;
  const double od_price = models.types["ml.p3.2xlarge"].on_demand_per_hour;
  EXPECT_NEAR(spot_bill.cost, 4086 * spot_price / 3600, 1e-9);
  // On-demand: 3,600 s of training plus 40 s preparation and 5 s upload.
  EXPECT_EQ(od.billable_time_in_seconds(), 3645);
  EXPECT_NEAR(od_bill.cost, 3645 * od_price / 3600, 1e-9);
  const double saving = 1.0 - spot_bill.cost / od_bill.cost;
  EXPECT_NEAR(saving, 1.0 - (spot_price * 4086) / (od_price * 3645), 1e-12);
  EXPECT_NEAR(saving, 0.6637, 0.0001);  // spot at 30% of on-demand, 12% more instance time
}

// On the shipped sample traces, across deadline slacks: every job that
// on-demand alone finishes by its deadline, greedy and Uniform Progress
// finish by it too, for less money. Plain spot, for contrast, misses some.
TEST(DeadlineSpotScenarioTest, NeverMissesADeadlineThatOnDemandMeets) {
  auto scenario = LoadScenario(absl::StrCat(KILN_SCENARIOS_DIR, "/spot_deadlines.json"));
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  const PolicySpec on_demand{"OnDemand", {}, {}};
  std::vector<PolicySpec> up;
  for (absl::Duration k : {absl::Minutes(10), absl::Minutes(30)}) {
    SpotChoice greedy;
    greedy.kind = SpotChoice::Kind::kGreedy;
    greedy.checkpoint_interval = k;
    up.push_back({greedy.Name(), {}, greedy});
    for (double h : {0.0, 2.0}) {
      SpotChoice c;
      c.kind = SpotChoice::Kind::kUniformProgress;
      c.checkpoint_interval = k;
      c.rules.hysteresis_factor = h;
      up.push_back({c.Name(), {}, c});
    }
  }
  SpotChoice plain;
  plain.kind = SpotChoice::Kind::kSpot;
  int64_t plain_misses = 0, checked = 0;
  for (double slack : {1.1, 1.25, 1.5, 2.0, 3.0}) {
    PolicyRunOptions o;
    o.deadline_slack = slack;
    o.spot_eligible_only = true;
    o.keep_outcomes = true;
    const PolicyResult od = RunPolicy(*scenario, on_demand, o);
    std::map<std::string, bool> od_met;
    for (const JobOutcome& j : od.outcomes) od_met[j.name] = j.met_deadline;
    for (const PolicySpec& p : up) {
      const PolicyResult r = RunPolicy(*scenario, p, o);
      ASSERT_EQ(r.outcomes.size(), od.outcomes.size());
      for (const JobOutcome& j : r.outcomes) {
        ASSERT_TRUE(j.has_deadline);
        if (od_met.at(j.name)) {
          EXPECT_TRUE(j.met_deadline) << p.name << " slack " << slack << ": " << j.name;
          ++checked;
        }
      }
      EXPECT_LE(r.cost, od.cost) << p.name << " slack " << slack;
      if (slack >= 1.5) {
        EXPECT_LT(r.cost, 0.9 * od.cost) << p.name << " slack " << slack;
      }
    }
    plain_misses += RunPolicy(*scenario, {"Spot", {}, plain}, o).deadline_misses;
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(plain_misses, 0);
}

// The slack sweep's omniscient bound: one point per slack, saving at least
// what greedy and Uniform Progress save there without missing a deadline;
// looser deadlines can only help it. No bound where a market is not a trace.
TEST(DeadlineSpotScenarioTest, TheSweepShowsTheOmniscientBound) {
  auto scenario = LoadScenario(absl::StrCat(KILN_SCENARIOS_DIR, "/spot_deadlines.json"));
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  auto report = RunScenario(*scenario);
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<double, double> bound;
  std::map<double, double> best_policy;
  for (const SlackPoint& p : report->slack) {
    if (p.policy == kIdealBoundName) {
      EXPECT_EQ(bound.count(p.slack), 0u);
      bound[p.slack] = p.savings;
      EXPECT_EQ(p.deadline_misses, 0) << p.slack;
      EXPECT_GT(p.on_demand_cost, 0);
    } else if (p.deadline_misses == 0) {
      best_policy[p.slack] = std::max(best_policy[p.slack], p.savings);
    }
  }
  ASSERT_EQ(bound.size(), scenario->slack_sweep.size());
  double last = 0;
  for (const auto& [slack, savings] : bound) {
    EXPECT_GE(savings, best_policy[slack]) << slack;
    EXPECT_LT(savings, 1.0) << slack;
    EXPECT_GE(savings, last) << slack;
    last = savings;
  }
  // A Poisson market has no trace to know in advance.
  SimModels models = *scenario->models;
  SpotMarket& market = models.types["ml.g5.2xlarge"].spot;
  market.kind = SpotMarket::Kind::kPoisson;
  market.preemptions_per_instance_hour = 0.1;
  scenario->models = std::make_shared<SimModels>(models);
  auto poisson = RunScenario(*scenario);
  ASSERT_TRUE(poisson.ok()) << poisson.status();
  for (const SlackPoint& p : poisson->slack) EXPECT_NE(p.policy, kIdealBoundName);
}

// Pipe-mode jobs whose stream is slower than their compute run at the
// stream's pace: the plan must count the work left in wall time at that pace,
// or the safety net comes too late. The city jobs of the sample scenario,
// made to stream 500 GB ten times over (~3 h at the model's 450 MB/s, against
// ~2 h of work).
TEST(DeadlineSpotScenarioTest, StreamBoundPipeJobsMeetTheDeadlinesOnDemandMeets) {
  std::ifstream in(absl::StrCat(KILN_SCENARIOS_DIR, "/spot_deadlines.json"));
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string file_mode = "\"input_mode\": \"File\"";
  ASSERT_NE(json.find(file_mode), std::string::npos);
  json.replace(json.find(file_mode), file_mode.size(),
               "\"input_mode\": \"Pipe\", \"data_bytes\": 500000000000, \"epochs\": 10");
  auto scenario = ParseScenario(json, KILN_SCENARIOS_DIR);
  ASSERT_TRUE(scenario.ok()) << scenario.status();

  v1::CreateTrainingJobRequest pipe_job;
  pipe_job.mutable_algorithm_specification()->set_training_input_mode("Pipe");
  pipe_job.add_input_data_config()->set_channel_name("train");
  SimJobAttributes a;
  a.work = absl::Hours(2);
  a.data_bytes = 500000000000;
  a.epochs = 10;
  EXPECT_NEAR(WorstCasePace(*scenario->models, pipe_job, a), 5e12 / 450e6 / 7200, 1e-9);
  a.epochs = 1;  // a stream faster than the compute does not slow the job
  EXPECT_EQ(WorstCasePace(*scenario->models, pipe_job, a), 1.0);

  SpotChoice c;
  c.kind = SpotChoice::Kind::kUniformProgress;
  c.checkpoint_interval = absl::Minutes(10);
  const PolicySpec up{c.Name(), {}, c};
  int64_t checked = 0;
  for (double slack : {1.5, 2.0, 3.0}) {
    PolicyRunOptions o;
    o.deadline_slack = slack;
    o.spot_eligible_only = true;
    o.keep_outcomes = true;
    const PolicyResult od = RunPolicy(*scenario, {"OnDemand", {}, {}}, o);
    std::map<std::string, bool> od_met;
    for (const JobOutcome& j : od.outcomes) od_met[j.name] = j.met_deadline;
    const PolicyResult r = RunPolicy(*scenario, up, o);
    ASSERT_EQ(r.outcomes.size(), od.outcomes.size());
    for (const JobOutcome& j : r.outcomes) {
      if (!od_met.at(j.name)) continue;
      ++checked;
      EXPECT_TRUE(j.met_deadline) << "slack " << slack << ": " << j.name;
    }
  }
  EXPECT_GT(checked, 100);
}

// HPO sweeps 12 h apart: within a sweep a trial's cluster is reused seconds
// after it is freed; between sweeps every pool waits 12 h, longer than any
// keep-alive (at most 6 h) catches. AdaptiveHistogram(p99) catches the reuses
// within sweeps as a short Fixed keep-alive does, and does not keep the last
// pools of each sweep for its whole range (6 h) for nothing.
TEST(AdaptiveKeepAliveScenarioTest, PoolsAreNotKeptForGapsBeyondTheRange) {
  auto scenario = ParseScenario(R"({
    "seed": 3, "horizon": "2d",
    "workloads": [{"kind": "hpo", "name": "hpo", "trials": 20, "parallelism": 3, "sweeps": 4,
                   "every": "12h", "job": {"instance_type": "ml.m5.xlarge",
                                           "work": {"median": "10m", "sigma": 0.5}}}],
    "policies": [{"keep_alive": {"fixed": "5m"}}, {"keep_alive": "adaptive"}]})",
                                "");
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  const SimulationReport r = RunScenario(*scenario).value();
  ASSERT_EQ(r.results.size(), 2u);
  const PolicyResult& fixed = r.results[0];
  const PolicyResult& adaptive = r.results[1];
  ASSERT_EQ(adaptive.policy, "AdaptiveHistogram(p99)");
  EXPECT_GT(fixed.warm_hits, 0);
  EXPECT_EQ(adaptive.warm_hits, fixed.warm_hits);
  EXPECT_LE(adaptive.warm_retained_instance_hours, fixed.warm_retained_instance_hours);
}

}  // namespace
}  // namespace kiln::sim
