// RunScenario on several threads: the same report, byte for byte in every
// format, as one after another; progress on the calling thread, never going
// back. In the ThreadSanitizer set: the runs share the scenario.
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/sim/scenario.h"

namespace kiln::sim {
namespace {

// Four policies (one on spot, with Uniform Progress, one on spot with
// checkpoints) and a slack sweep of two slacks: ten runs. A spot market from
// a shipped trace, so that the runs share the models' trace too.
constexpr char kScenario[] = R"({
  "name": "threads",
  "seed": 11,
  "horizon": "12h",
  "models": {
    "instance_types": {
      "ml.p3.2xlarge": {"spot": {"trace": "traces/volatile_1.json"}}
    }
  },
  "workloads": [
    {"kind": "hpo", "name": "hpo", "trials": 12, "parallelism": 3, "sweeps": 2, "every": "4h",
     "job": {"instance_type": "ml.m5.xlarge", "keep_alive": "5m", "work": {"median": "10m", "sigma": 0.5}}},
    {"kind": "nightly", "name": "city", "cities": 4, "days": 1, "at": "1h",
     "job": {"instance_type": "ml.p3.2xlarge", "work": "1h", "deadline_slack": 2}}
  ],
  "policies": [
    {"keep_alive": "never"},
    {"keep_alive": "job_requested"},
    {"keep_alive": "job_requested", "spot": {"spot": {"checkpoint_every": "10m"}}},
    {"keep_alive": "job_requested", "spot": {"uniform_progress": {"checkpoint_every": "10m"}}}
  ],
  "baseline": "JobRequested",
  "report": {"slack_sweep": [1.5, 3]}
})";

Scenario Parsed() {
  auto s = ParseScenario(kScenario, KILN_SCENARIOS_DIR);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : Scenario{};
}

SimulationReport RunOn(const Scenario& s, int threads) {
  RunOptions o;
  o.threads = threads;
  auto r = RunScenario(s, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : SimulationReport{};
}

TEST(SimulateThreadsTest, ReportIsByteIdenticalWhateverTheThreads) {
  const Scenario s = Parsed();
  const SimulationReport serial = RunOn(s, 1);
  ASSERT_EQ(serial.results.size(), 4u);
  ASSERT_EQ(serial.slack.size(), 6u);  // 2 slacks x (2 spot policies + the bound)
  for (int threads : {4, 0}) {
    const SimulationReport parallel = RunOn(s, threads);
    EXPECT_EQ(FormatTable(parallel), FormatTable(serial)) << threads << " threads";
    EXPECT_EQ(FormatJson(parallel), FormatJson(serial)) << threads << " threads";
    EXPECT_EQ(FormatCsv(parallel), FormatCsv(serial)) << threads << " threads";
    EXPECT_EQ(FormatHtml(parallel), FormatHtml(serial)) << threads << " threads";
  }
}

TEST(SimulateThreadsTest, MoreThreadsThanRunsGiveTheSameReport) {
  Scenario s = Parsed();
  s.slack_sweep.clear();
  EXPECT_EQ(FormatJson(RunOn(s, 16)), FormatJson(RunOn(s, 1)));
}

TEST(SimulateThreadsTest, ProgressComesOnTheCallingThreadAndNeverGoesBack) {
  const Scenario s = Parsed();
  for (int threads : {1, 3}) {
    const std::thread::id caller = std::this_thread::get_id();
    std::vector<double> seen;
    bool other_thread = false;
    RunOptions o;
    o.threads = threads;
    o.progress = [&](double f) {
      if (std::this_thread::get_id() != caller) other_thread = true;
      seen.push_back(f);
    };
    ASSERT_TRUE(RunScenario(s, o).ok());
    EXPECT_FALSE(other_thread) << threads << " threads";
    ASSERT_FALSE(seen.empty()) << threads << " threads";
    EXPECT_EQ(seen.back(), 1.0) << threads << " threads";
    for (size_t i = 1; i < seen.size(); ++i) {
      EXPECT_LE(seen[i - 1], seen[i]) << threads << " threads, call " << i;
    }
    EXPECT_GE(seen.front(), 0.0);
  }
}

TEST(SimulateThreadsTest, NegativeThreadsAreRefused) {
  const Scenario s = Parsed();
  RunOptions o;
  o.threads = -1;
  auto r = RunScenario(s, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("threads"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace kiln::sim
