#include "base/time_math.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kiln::internal {
namespace {

// Durations on both sides of every boundary of the fast path: whole and fractional
// nanoseconds, negative values, the ~2^33 s edge, int64 nanoseconds' edge, infinities.
std::vector<absl::Duration> Samples() {
  const int64_t edge_s = int64_t{1} << 33;
  std::vector<absl::Duration> v = {
      absl::ZeroDuration(),
      absl::Nanoseconds(1),
      absl::Nanoseconds(-1),
      absl::Nanoseconds(999'999'999),
      absl::Nanoseconds(-999'999'999),
      absl::Seconds(1),
      absl::Seconds(-1),
      absl::Milliseconds(1500),
      absl::Milliseconds(-1500),
      absl::Hours(24 * 365),
      absl::Seconds(edge_s - 1) + absl::Nanoseconds(999'999'999),
      absl::Seconds(edge_s),
      absl::Seconds(-edge_s),
      absl::Seconds(-edge_s) - absl::Nanoseconds(1),
      absl::Nanoseconds(std::numeric_limits<int64_t>::max()),
      absl::Nanoseconds(std::numeric_limits<int64_t>::min()),
      absl::Seconds(std::numeric_limits<int64_t>::max() / 2),
      absl::Seconds(std::numeric_limits<int64_t>::max() / 2) + absl::Milliseconds(700),
      absl::Seconds(std::numeric_limits<int64_t>::max()) - absl::Seconds(1) +
          absl::Milliseconds(600),
      absl::Seconds(std::numeric_limits<int64_t>::min()) + absl::Milliseconds(300),
      absl::Nanoseconds(1) / 4,           // a quarter nanosecond
      -absl::Nanoseconds(1) / 4,
      absl::Seconds(3) + absl::Nanoseconds(1) / 2,
      absl::Seconds(-3) - absl::Nanoseconds(3) / 4,
      absl::InfiniteDuration(),
      -absl::InfiniteDuration(),
  };
  return v;
}

TEST(TimeMathTest, DurationArithmeticIsAbseilsExactly) {
  const std::vector<absl::Duration> samples = Samples();
  for (absl::Duration a : samples) {
    EXPECT_EQ(DurationNanos(a), absl::ToInt64Nanoseconds(a)) << a;
    EXPECT_EQ(SecondsDouble(a), absl::ToDoubleSeconds(a)) << a;
    EXPECT_EQ(HoursDouble(a), absl::ToDoubleHours(a)) << a;
    for (absl::Duration b : samples) {
      if ((a == absl::InfiniteDuration() && b == -absl::InfiniteDuration()) ||
          (a == -absl::InfiniteDuration() && b == absl::InfiniteDuration())) {
        continue;  // inf - inf: Abseil's own answer, whichever it is
      }
      EXPECT_EQ(Plus(a, b), a + b) << a << " + " << b;
      EXPECT_EQ(Minus(a, b), a - b) << a << " - " << b;
    }
    for (absl::Duration unit : {absl::Nanoseconds(1), absl::Milliseconds(1), absl::Seconds(1),
                                absl::Seconds(7), absl::Hours(1), absl::Nanoseconds(1) / 4,
                                -absl::Seconds(1), absl::ZeroDuration(), absl::InfiniteDuration()}) {
      EXPECT_EQ(FloorTo(a, unit), absl::Floor(a, unit)) << a << " floor " << unit;
    }
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{3}, int64_t{1'000'000},
                      std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
      EXPECT_EQ(Times(a, k), a * k) << a << " * " << k;
    }
  }
}

// The same doubles as Abseil's, to the last bit, over many durations (the simulator's costs
// are sums of them: a different rounding would change its reports).
TEST(TimeMathTest, DoublesAreAbseilsToTheBit) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200'000; ++i) {
    int64_t ns = static_cast<int64_t>(rng() >> 4) - (int64_t{1} << 59);
    if (i % 3 == 0) ns %= 100'000'000'000;
    absl::Duration d = absl::Nanoseconds(ns) + absl::Nanoseconds(1) / 4 * (i % 4);
    ASSERT_EQ(SecondsDouble(d), absl::ToDoubleSeconds(d)) << d;
    ASSERT_EQ(HoursDouble(d), absl::ToDoubleHours(d)) << d;
  }
}

TEST(TimeMathTest, TimeArithmeticIsAbseilsExactly) {
  const std::vector<absl::Duration> samples = Samples();
  std::vector<absl::Time> times = {absl::UnixEpoch(), absl::FromUnixSeconds(1767225600),
                                   absl::FromUnixNanos(-1), absl::InfiniteFuture(),
                                   absl::InfinitePast()};
  for (absl::Duration d : samples) times.push_back(absl::UnixEpoch() + d);
  for (absl::Time t : times) {
    if (t != absl::InfiniteFuture() && t != absl::InfinitePast()) {
      EXPECT_EQ(UnixNanos(t), absl::ToUnixNanos(t)) << t;
    }
    for (absl::Duration d : samples) {
      if ((t == absl::InfiniteFuture() && d == -absl::InfiniteDuration()) ||
          (t == absl::InfinitePast() && d == absl::InfiniteDuration())) {
        continue;
      }
      EXPECT_EQ(Plus(t, d), t + d) << t << " + " << d;
    }
    for (absl::Time u : times) {
      if ((t == absl::InfiniteFuture() && u == absl::InfiniteFuture()) ||
          (t == absl::InfinitePast() && u == absl::InfinitePast())) {
        continue;
      }
      EXPECT_EQ(Minus(t, u), t - u) << t << " - " << u;
    }
  }
}

}  // namespace
}  // namespace kiln::internal
