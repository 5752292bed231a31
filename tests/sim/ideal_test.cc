// The omniscient bound: cases worked out by hand, and windows of one trace
// against the independent reference (bench/spot_reference.py's ideal()).
#include "kiln/sim/ideal.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::sim {
namespace {

constexpr double kSpot = 0.9731, kOnDemand = 3.06;  // $/h, the reference's defaults

SpotTrace Trace(std::vector<int32_t> counts, absl::Duration gap = absl::Minutes(10)) {
  SpotTrace t;
  t.gap = gap;
  t.available = std::move(counts);
  return t;
}

IdealJob Job(absl::Duration work, absl::Duration deadline, absl::Duration changeover,
             absl::Duration start = absl::ZeroDuration()) {
  IdealJob j;
  j.start = start;
  j.work = work;
  j.deadline = deadline;
  j.changeover = changeover;
  j.spot_per_hour = kSpot;
  j.on_demand_per_hour = kOnDemand;
  return j;
}

TEST(IdealSpotCostTest, AlwaysThereCostsTheWorkAndOneChangeoverAtTheSpotPrice) {
  const auto c = IdealSpotCost(Trace({1}), Job(absl::Hours(4), absl::Hours(8), absl::Minutes(30)));
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(*c, kSpot * 4.5, 1e-9);
}

TEST(IdealSpotCostTest, NeverThereCostsOnDemandAndTooShortADeadlineIsInfeasible) {
  const IdealJob job = Job(absl::Hours(4), absl::Hours(8), absl::Minutes(30));
  const auto c = IdealSpotCost(Trace({0}), job);
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(*c, kOnDemand * 4.5, 1e-9);
  EXPECT_NEAR(IdealOnDemandCost(job), kOnDemand * 4.5, 1e-9);
  EXPECT_FALSE(
      IdealSpotCost(Trace({0}), Job(absl::Hours(4), absl::Minutes(269), absl::Minutes(30))));
  EXPECT_TRUE(
      IdealSpotCost(Trace({0}), Job(absl::Hours(4), absl::Minutes(270), absl::Minutes(30))));
}

// Spot for the first hour only, a job of 2 h due in 2 h 30 min with a 10-min
// changeover: spot for the hour (50 min of work), then on-demand for the
// remaining 70 min and its changeover; or on-demand throughout (2 h 10 min).
TEST(IdealSpotCostTest, SpotWhileItLastsThenOnDemand) {
  const auto c = IdealSpotCost(Trace({1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
                               Job(absl::Hours(2), absl::Minutes(150), absl::Minutes(10)));
  ASSERT_TRUE(c.has_value());
  const double split = kSpot * 1.0 + kOnDemand * 80.0 / 60;
  EXPECT_NEAR(*c, std::min(split, kOnDemand * 130.0 / 60), 1e-9);
}

// Windows of one trace (10-min ticks) against the reference's exact dynamic
// program, whose costs are pasted here.
TEST(IdealSpotCostTest, AgreesWithTheReference) {
  const SpotTrace t = Trace({0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0,
                             0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1,
                             1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0});
  struct Case {
    double work_h, deadline_h;
    int changeover_s, start_tick;
    double want;
  };
  for (const Case& c :
       {Case{6, 8, 720, 0, 14.964679999999994}, Case{5, 7, 360, 7, 10.610723333333329},
        Case{4, 4.5, 1200, 20, 13.259999999999996}}) {
    const auto got =
        IdealSpotCost(t, Job(absl::Hours(c.work_h), absl::Hours(c.deadline_h),
                             absl::Seconds(c.changeover_s), absl::Minutes(10) * c.start_tick));
    ASSERT_TRUE(got.has_value()) << c.start_tick;
    EXPECT_NEAR(*got, c.want, 1e-6) << c.start_tick;
  }
}

}  // namespace
}  // namespace kiln::sim
