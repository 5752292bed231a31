#include "kiln/sim/models.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/time_math.h"
#include "kiln/plugin/json_value.h"

namespace kiln::sim {
namespace {

constexpr double kTwoPi = 6.283185307179586;
constexpr double kTwoTo53 = 9007199254740992.0;

double Clamp(double factor, double max_factor) {
  if (max_factor <= 1) return factor;
  return std::clamp(factor, 1.0 / max_factor, max_factor);
}

}  // namespace

uint64_t HashName(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t KeyedRng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double RandomStream::Uniform() { return static_cast<double>(Next() >> 11) / kTwoTo53; }

double RandomStream::UniformOpen() { return (static_cast<double>(Next() >> 11) + 1.0) / kTwoTo53; }

int64_t RandomStream::UniformInt(int64_t n) {
  // Multiply-shift: bias below 2^-64 * n, irrelevant here.
  return static_cast<int64_t>((static_cast<unsigned __int128>(Next()) * static_cast<uint64_t>(n)) >> 64);
}

bool RandomStream::Bernoulli(double p) { return Uniform() < p; }

double RandomStream::Exponential(double mean) { return -mean * std::log(UniformOpen()); }

double RandomStream::Normal() {
  const double u1 = UniformOpen();
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

double RandomStream::LogNormal(double median, double sigma) {
  return median * std::exp(sigma * Normal());
}

double RandomStream::Weibull(double scale, double shape) {
  return scale * std::pow(-std::log(UniformOpen()), 1.0 / shape);
}

absl::Duration DurationDist::Sample(RandomStream& rng) const {
  if (sigma <= 0) return median;
  const double factor = Clamp(std::exp(sigma * rng.Normal()), max_factor);
  // In whole nanoseconds, inline: absl's Duration * double is a call to an
  // exact but slow scaling, a few percent of a simulation.
  const int64_t ns = internal::DurationNanos(median);
  const double scaled = static_cast<double>(ns) * factor;
  if (ns <= 0 || !(scaled < 0x1p62)) return median * factor;  // (also infinite)
  return absl::Nanoseconds(static_cast<int64_t>(scaled + 0.5));
}

absl::Duration DurationDist::Max() const {
  return sigma <= 0 || max_factor <= 1 ? median : median * max_factor;
}

double RateDist::Sample(RandomStream& rng) const {
  if (sigma <= 0) return median_mb_per_s;
  return median_mb_per_s * Clamp(std::exp(sigma * rng.Normal()), max_factor);
}

absl::Duration RateDist::Time(int64_t bytes, RandomStream& rng) const {
  if (bytes <= 0) return absl::ZeroDuration();
  return absl::Seconds(static_cast<double>(bytes) / 1e6 / Sample(rng));
}

absl::Duration RateDist::MaxTime(int64_t bytes) const {
  if (bytes <= 0) return absl::ZeroDuration();
  const double slowest = sigma <= 0 || max_factor <= 1 ? median_mb_per_s : median_mb_per_s / max_factor;
  return absl::Seconds(static_cast<double>(bytes) / 1e6 / slowest);
}

int64_t SpotTrace::TickAt(absl::Duration since_start) const {
  if (since_start <= absl::ZeroDuration()) return 0;
  return absl::IDivDuration(since_start, gap, &since_start);
}

int32_t SpotTrace::AvailableAt(absl::Duration since_start) const {
  if (available.empty()) return 0;
  return available[static_cast<size_t>(TickAt(since_start) % static_cast<int64_t>(available.size()))];
}

double SpotTrace::FractionAtLeast(int32_t n) const {
  if (available.empty()) return 0;
  const auto count = std::count_if(available.begin(), available.end(), [n](int32_t v) { return v >= n; });
  return static_cast<double>(count) / static_cast<double>(available.size());
}

absl::StatusOr<SpotTrace> ParseSpotTrace(std::string_view json, bool invert) {
  auto doc = ParseJsonValue(json);
  if (!doc.ok()) return absl::InvalidArgumentError(absl::StrCat("spot trace: ", doc.status().message()));
  if (!doc->is_object()) return absl::InvalidArgumentError("spot trace: expected a JSON object");
  SpotTrace trace;
  const JsonValue* metadata = doc->Find("metadata");
  const JsonValue* gap = metadata != nullptr ? metadata->Find("gap_seconds") : nullptr;
  if (gap == nullptr || !gap->is_number()) {
    return absl::InvalidArgumentError("spot trace: metadata.gap_seconds must be a positive number");
  }
  auto gap_seconds = gap->AsDouble();
  if (!gap_seconds.ok() || !(*gap_seconds > 0)) {
    return absl::InvalidArgumentError("spot trace: metadata.gap_seconds must be a positive number");
  }
  trace.gap = absl::Seconds(*gap_seconds);
  const JsonValue* data = doc->Find("data");
  if (data == nullptr || !data->is_array() || data->elements().empty()) {
    return absl::InvalidArgumentError("spot trace: data must be a non-empty array of counts");
  }
  trace.available.reserve(data->elements().size());
  for (size_t i = 0; i < data->elements().size(); ++i) {
    auto v = data->elements()[i].AsInt64();
    if (!v.ok() || *v < 0 || *v > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("spot trace: data[", i, "] must be a non-negative integer count"));
    }
    int32_t count = static_cast<int32_t>(*v);
    if (invert) count = count == 0 ? 1 : 0;
    trace.available.push_back(count);
  }
  return trace;
}

double BathtubModel::Cdf(absl::Duration age) const {
  if (age >= cap) return 1.0;
  const double t = absl::ToDoubleSeconds(age);
  const double f = a * (1.0 - std::exp(-t / absl::ToDoubleSeconds(tau1)) +
                        std::exp((t - absl::ToDoubleSeconds(b)) / absl::ToDoubleSeconds(tau2)));
  return std::clamp(f, 0.0, 1.0);
}

absl::Duration BathtubModel::Sample(RandomStream& rng) const {
  const double u = rng.Uniform();
  if (u >= Cdf(cap - absl::Nanoseconds(1))) return cap;
  // F rises monotonically on [0, cap): bisect to a millisecond.
  absl::Duration lo = absl::ZeroDuration(), hi = cap;
  while (hi - lo > absl::Milliseconds(1)) {
    const absl::Duration mid = lo + (hi - lo) / 2;
    if (Cdf(mid) < u) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return hi;
}

double FailureModel::FailureProbability(double machine_hours) const {
  if (!enabled || machine_hours <= 0) return 0;
  return 1.0 - std::exp(-std::pow(machine_hours / scale_machine_hours, shape));
}

double FailureModel::MachineHoursAt(double cumulative_hazard) const {
  return scale_machine_hours * std::pow(cumulative_hazard, 1.0 / shape);
}

absl::Duration DataModel::Sample(std::string_view mode, int64_t bytes, RandomStream& rng) const {
  if (mode == "FSx") return fsx.Sample(rng);
  if (mode == "FastFile") return fast_file.Sample(rng);
  if (mode == "Pipe") return pipe.Sample(rng);
  const absl::Duration setup = file_setup.Sample(rng);
  return setup + file_rate.Time(bytes, rng);
}

absl::Duration DataModel::Max(std::string_view mode, int64_t bytes) const {
  if (mode == "FSx") return fsx.Max();
  if (mode == "FastFile") return fast_file.Max();
  if (mode == "Pipe") return pipe.Max();
  return file_setup.Max() + file_rate.MaxTime(bytes);
}

const InstanceTypeModel& SimModels::Type(std::string_view instance_type) const {
  auto it = types.find(instance_type);
  return it == types.end() ? default_type : it->second;
}

SimModels DefaultModels() {
  SimModels m;
  // Illustrative on-demand list prices per hour (SageMaker training,
  // us-east-1); spot at 30% of on-demand, a typical managed-spot saving.
  const std::pair<const char*, double> prices[] = {
      {"ml.m5.large", 0.115},     {"ml.m5.xlarge", 0.23},      {"ml.m5.2xlarge", 0.461},
      {"ml.m5.4xlarge", 0.922},   {"ml.c5.xlarge", 0.204},     {"ml.c5.2xlarge", 0.408},
      {"ml.c5.4xlarge", 0.816},   {"ml.g4dn.xlarge", 0.7364},  {"ml.g5.xlarge", 1.408},
      {"ml.g5.2xlarge", 1.515},   {"ml.p3.2xlarge", 3.825},    {"ml.p3.8xlarge", 14.688},
      {"ml.p3.16xlarge", 28.152}, {"ml.p4d.24xlarge", 37.688},
  };
  for (const auto& [name, price] : prices) {
    InstanceTypeModel t;
    t.on_demand_per_hour = price;
    t.spot_per_hour = price * 0.3;
    m.types.emplace(name, t);
  }
  m.default_type.on_demand_per_hour = 1.0;
  m.default_type.spot_per_hour = 0.3;
  return m;
}

}  // namespace kiln::sim
