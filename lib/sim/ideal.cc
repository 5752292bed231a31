#include "kiln/sim/ideal.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

namespace kiln::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Tick {
  int64_t length = 0;  // units
  bool spot = false;   // spot there during the tick
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

double IdealOnDemandCost(const IdealJob& job) {
  return job.on_demand_per_hour * absl::ToDoubleHours(job.work + job.changeover);
}

std::optional<double> IdealSpotCost(const SpotTrace& trace, const IdealJob& job) {
  const int64_t gap = std::max<int64_t>(1, absl::ToInt64Seconds(trace.gap));
  const int64_t unit = std::gcd(gap, int64_t{60});
  const int64_t start_s =
      CeilDiv(std::max<int64_t>(0, absl::ToInt64Seconds(absl::Ceil(job.start, absl::Seconds(1)))),
              unit) *
      unit;
  const int64_t end_s =
      absl::ToInt64Seconds(absl::Floor(job.start + job.deadline, absl::Seconds(1)));
  const int64_t horizon = (end_s - start_s) / unit;  // units of time
  const int64_t work = CeilDiv(absl::ToInt64Seconds(absl::Ceil(job.work, absl::Seconds(1))), unit);
  const int64_t d =
      CeilDiv(absl::ToInt64Seconds(absl::Ceil(job.changeover, absl::Seconds(1))), unit);
  if (work <= 0) return 0.0;
  if (horizon <= 0) return std::nullopt;

  // The job's ticks: the trace's, cut at the job's start and deadline.
  std::vector<Tick> ticks;
  for (int64_t t = 0; t < horizon;) {
    const int64_t at = start_s + t * unit;
    const int64_t next = (at / gap + 1) * gap;
    Tick k;
    k.length = std::min((next - at) / unit, horizon - t);
    k.spot = trace.AvailableAt(absl::Seconds(at)) >= job.instances;
    ticks.push_back(k);
    t += k.length;
  }
  // The changeover left at a tick start: d less whole ticks spent on it.
  std::set<int64_t> lefts = {0, d};
  for (bool grew = true; grew;) {
    grew = false;
    for (int64_t x : std::vector<int64_t>(lefts.begin(), lefts.end())) {
      for (const Tick& k : ticks) grew |= lefts.insert(std::max<int64_t>(0, x - k.length)).second;
    }
  }
  const std::vector<int64_t> left_values(lefts.begin(), lefts.end());
  const auto left_index = [&](int64_t left) {
    return std::lower_bound(left_values.begin(), left_values.end(), left) - left_values.begin();
  };
  // States: idle, then (spot, left) and (on-demand, left) for each left.
  enum Mode { kIdle = 0, kSpot = 1, kOnDemand = 2 };
  const int64_t n_left = static_cast<int64_t>(left_values.size());
  const int64_t states = 1 + 2 * n_left;
  const auto state = [&](int mode, int64_t left) {
    return mode == kIdle ? 0 : 1 + (mode - 1) * n_left + left_index(left);
  };
  const double per_unit[] = {0, job.spot_per_hour * static_cast<double>(unit) / 3600,
                             job.on_demand_per_hour * static_cast<double>(unit) / 3600};

  // value[s * (work + 1) + w]: the least cost from a tick start in state s
  // with w units of work left. After the last tick only "nothing left" is free.
  const int64_t row = work + 1;
  std::vector<double> next(static_cast<size_t>(states * row), kInf), value(next.size());
  for (int64_t s = 0; s < states; ++s) next[static_cast<size_t>(s * row)] = 0;
  for (auto k = ticks.rbegin(); k != ticks.rend(); ++k) {
    for (int mode = kIdle; mode <= kOnDemand; ++mode) {
      for (int64_t li = 0; li < (mode == kIdle ? 1 : n_left); ++li) {
        int held = mode;
        int64_t left = mode == kIdle ? 0 : left_values[static_cast<size_t>(li)];
        const int64_t s = state(mode, left);
        if (held == kSpot && !k->spot) held = kIdle, left = 0;  // taken back
        double* out = &value[static_cast<size_t>(s * row)];
        out[0] = 0;
        const double* idle = &next[0];
        for (int64_t w = 1; w <= work; ++w) out[w] = idle[w];
        for (int to = kSpot; to <= kOnDemand; ++to) {
          if (to == kSpot && !k->spot) continue;
          const int64_t delay = held == to ? left : d;
          const int64_t spent = std::min(delay, k->length);
          const int64_t progress = k->length - spent;
          const double* after = &next[static_cast<size_t>(state(to, delay - spent) * row)];
          const double tick_cost = per_unit[to] * static_cast<double>(k->length);
          for (int64_t w = 1; w <= work; ++w) {
            const double c = w <= progress ? per_unit[to] * static_cast<double>(spent + w)
                                           : tick_cost + after[w - progress];
            out[w] = std::min(out[w], c);
          }
        }
      }
    }
    std::swap(next, value);
  }
  const double best = next[static_cast<size_t>(work)];  // idle, all the work left
  if (best == kInf) return std::nullopt;
  return best;
}

}  // namespace kiln::sim
