// Spot trace conventions, through the scenario loader: available-instance
// counts (SkyPilot's format, the default) and a 0/1 log of failed launches or
// preemptions (1 = nothing available), which a scenario reads with
// "invert": true. The same availability written either way must read, and
// run, the same; each read the other way round must not.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kiln/sim/models.h"
#include "kiln/sim/scenario.h"
#include "sim/temp_files.h"

namespace kiln::sim {
namespace {

constexpr char kType[] = "ml.p3.2xlarge";

// One availability, 5 of 8 ticks, written both ways. The counts file carries
// a `prices` member as some of skypilot-org/spot-traces' files do.
constexpr char kCounts[] = R"({"metadata": {"gap_seconds": 300}, "data": [1, 1, 0, 1, 0, 0, 1, 1],)"
                           R"( "prices": [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]})";
constexpr char kLaunchFailed[] =
    R"({"metadata": {"gap_seconds": 300}, "data": [0, 0, 1, 0, 1, 1, 0, 0]})";

// Spot-eligible jobs on kType with deadlines, under plain spot.
std::string ScenarioText(const std::string& trace, bool invert) {
  return absl::StrCat(
      R"({"seed": 3, "horizon": "6h", "models": {"node_failures": false, "instance_types": {")",
      kType, R"(": {"spot": {"trace": ")", trace, R"(", "invert": )", invert ? "true" : "false",
      R"(}}}}, "workloads": [{"kind": "hpo", "name": "h", "trials": 12, "parallelism": 2, "job": )",
      R"({"instance_type": ")", kType, R"(", "work": "20m", "spot_eligible": true, )",
      R"("deadline_slack": 4}}], "policies": [{"spot": {"spot": {"checkpoint_every": "5m"}}}]})");
}

const SpotTrace& TraceOf(const Scenario& s) { return s.models->Type(kType).spot.trace; }

TEST(SpotTraceConventionTest, CountsAndAnInvertedFailureLogReadTheSame) {
  const TempFiles files(
      TempFiles::Files{{"counts.json", kCounts}, {"launch_failed.json", kLaunchFailed}});
  auto counts = ParseScenario(ScenarioText("counts.json", false), files.dir());
  auto failed = ParseScenario(ScenarioText("launch_failed.json", true), files.dir());
  ASSERT_TRUE(counts.ok()) << counts.status();
  ASSERT_TRUE(failed.ok()) << failed.status();
  ASSERT_EQ(counts->models->Type(kType).spot.kind, SpotMarket::Kind::kTrace);
  ASSERT_EQ(failed->models->Type(kType).spot.kind, SpotMarket::Kind::kTrace);

  const std::vector<int32_t> expected = {1, 1, 0, 1, 0, 0, 1, 1};
  EXPECT_EQ(TraceOf(*counts).available, expected);
  EXPECT_EQ(TraceOf(*failed).available, expected);
  EXPECT_EQ(TraceOf(*counts).gap, absl::Seconds(300));
  EXPECT_DOUBLE_EQ(TraceOf(*counts).FractionAtLeast(1), 0.625);
  EXPECT_DOUBLE_EQ(TraceOf(*failed).FractionAtLeast(1), 0.625);
  // data[2] (the third tick) says 0 available, and "launch failed".
  EXPECT_EQ(TraceOf(*counts).AvailableAt(absl::Seconds(2 * 300 + 1)), 0);
  EXPECT_EQ(TraceOf(*failed).AvailableAt(absl::Seconds(2 * 300 + 1)), 0);
  EXPECT_EQ(TraceOf(*failed).AvailableAt(absl::Seconds(3 * 300)), 1);

  // Same availability, same run.
  const PolicyResult a = RunPolicy(*counts, counts->policies[0]);
  const PolicyResult b = RunPolicy(*failed, failed->policies[0]);
  EXPECT_GT(a.completed, 2) << a.first_error;
  EXPECT_GT(a.spot_interruptions, 0);
  EXPECT_GT(a.spot_instance_hours, 0);
  EXPECT_EQ(b.jobs, a.jobs);
  EXPECT_EQ(b.completed, a.completed);
  EXPECT_EQ(b.spot_interruptions, a.spot_interruptions);
  EXPECT_EQ(b.deadline_misses, a.deadline_misses);
  EXPECT_DOUBLE_EQ(b.cost, a.cost);
  EXPECT_DOUBLE_EQ(b.spot_instance_hours, a.spot_instance_hours);
}

// Each file read with the other convention flips every tick: the mistake
// of setting "invert" on a counts trace (or forgetting it on a failure log).
TEST(SpotTraceConventionTest, EitherReadTheOtherWayRoundFlipsAvailability) {
  const TempFiles files(
      TempFiles::Files{{"counts.json", kCounts}, {"launch_failed.json", kLaunchFailed}});
  auto counts_inverted = ParseScenario(ScenarioText("counts.json", true), files.dir());
  auto failed_as_counts = ParseScenario(ScenarioText("launch_failed.json", false), files.dir());
  ASSERT_TRUE(counts_inverted.ok()) << counts_inverted.status();
  ASSERT_TRUE(failed_as_counts.ok()) << failed_as_counts.status();
  const std::vector<int32_t> flipped = {0, 0, 1, 0, 1, 1, 0, 0};
  EXPECT_EQ(TraceOf(*counts_inverted).available, flipped);
  EXPECT_EQ(TraceOf(*failed_as_counts).available, flipped);
  EXPECT_DOUBLE_EQ(TraceOf(*counts_inverted).FractionAtLeast(1), 0.375);
}

// A counts trace of a multi-node market keeps its counts; "invert" is for
// 0/1 failure logs only and would read any count as nothing available.
TEST(SpotTraceConventionTest, CountsAboveOneAreInstancesAvailable) {
  const TempFiles files(TempFiles::Files{
      {"four.json", R"({"metadata": {"gap_seconds": 300}, "data": [4, 3, 0, 2]})"}});
  auto s = ParseScenario(ScenarioText("four.json", false), files.dir());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(TraceOf(*s).available, (std::vector<int32_t>{4, 3, 0, 2}));
  EXPECT_DOUBLE_EQ(TraceOf(*s).FractionAtLeast(3), 0.5);
}

// The shipped sample traces are counts, say so, and the shipped scenario
// reads them as counts.
TEST(SpotTraceConventionTest, ShippedTracesAreCountsReadAsCounts) {
  auto s = LoadScenario(absl::StrCat(KILN_SCENARIOS_DIR, "/spot_deadlines.json"));
  ASSERT_TRUE(s.ok()) << s.status();
  for (const auto& [type, file] : std::vector<std::pair<std::string, std::string>>{
           {"ml.p3.2xlarge", "steady_8.json"}, {"ml.g5.2xlarge", "volatile_1.json"}}) {
    std::ifstream in(absl::StrCat(KILN_SCENARIOS_DIR, "/traces/", file));
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_TRUE(absl::StrContains(text.str(), "available-instance counts (not inverted)")) << file;
    auto raw = ParseSpotTrace(text.str(), /*invert=*/false);
    ASSERT_TRUE(raw.ok()) << file << ": " << raw.status();
    const SpotMarket& market = s->models->Type(type).spot;
    ASSERT_EQ(market.kind, SpotMarket::Kind::kTrace) << type;
    EXPECT_EQ(market.trace.available, raw->available) << file;
    EXPECT_GT(market.trace.FractionAtLeast(1), 0.5) << file;
  }
}

}  // namespace
}  // namespace kiln::sim
