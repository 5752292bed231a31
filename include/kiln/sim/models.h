// Models of the simulation backend: what the cloud does to a training job
// when nothing runs for real. Randomness, instance types (provisioning
// latency, container start, image pull, prices, on-demand capacity), spot
// markets (SkyPilot-format availability traces, Poisson and bathtub
// preemption hazards, the 2-minute notice), node failures, and data-channel
// delivery per input mode.
//
// The defaults (DefaultModels()) are calibrated against published figures:
//
// - Startup. The service's warm-pool table gives startup P90s (job created
//   until training starts) for a 1.34 GB image and 2 GB of data:
//       cold: 136 s FSx for Lustre, 143 s FastFile, 176 s File
//       warm:  19 s FSx for Lustre,  21 s FastFile,  70 s File
//   A cold start here is provisioning + image pull + container start + data;
//   a warm start (a cluster reused from a warm pool: the engine skips
//   provisioning and the image is cached) is container start + data. With
//     provisioning     lognormal, median 81 s, sigma 0.20
//     image pull       1.34 GB at a lognormal rate, median 100 MB/s, sigma 0.20
//     container start  lognormal, median 14 s, sigma 0.12
//     FSx for Lustre   mount, lognormal median 2.5 s, sigma 0.30
//     FastFile         metadata only, lognormal median 4.5 s, sigma 0.30
//     File             2 s + bytes at a lognormal rate, median 50 MB/s, sigma 0.20
//     Pipe             FIFO set-up, lognormal median 1 s, sigma 0.30; the
//                      stream overlaps training (below)
//   the P90s come out within 4% of every cell (tests/sim/models_test.cc).
//   The File rate is what the table implies (70 s - 19 s for 2 GB, i.e. an
//   effective ~40-50 MB/s including listing, many objects and the EBS
//   write), well below the ~135 MB/s one large S3 object reaches: a workload
//   of few large objects should set a higher rate. Every lognormal draw is
//   clamped to [median / 3, median * 3], so latencies are bounded (a policy
//   can plan with DurationDist::Max()).
//
// - Pipe-mode streaming. A Pipe channel is not downloaded before training:
//   the training reads it from a FIFO while it runs, so a job cannot train
//   faster than its data streams. The service quotes Pipe mode at up to
//   ~450 MB/s (against ~135 MB/s for a large object in File mode); the
//   default stream rate is that figure, fixed (sigma 0), so the model gives
//   the shortest stream time the service allows. A run whose Pipe channels
//   stream B bytes per epoch over E epochs takes
//       max(work, B * E / rate)
//   of wall time (SimClusterProvider paces the work by that ratio, see
//   kiln/sim/sim.h); a job whose compute is slower than its stream is
//   unaffected. Channels stream in parallel, each at the rate, so B is the
//   largest Pipe channel's size.
//
// - Node failures. Jobs of ~100 / 1,000 / 10,000 machine-hours fail 7.8% /
//   13.7% / 24.7% of the time. A constant hazard cannot give that (fitted to
//   the first point it predicts 55% at 1,000 machine-hours): the failure
//   probability grows like a power of the job's size. The model is a
//   power-law (Weibull-type, Crow-AMSAA) failure process in the job's
//   machine-hours m: the expected number of failures by m is (m / scale)^shape,
//   so P(a job of M machine-hours fails) = 1 - exp(-(M / scale)^shape).
//   Least squares on log(-log(1 - p)) against log(M) over the three points
//   gives shape 0.2716 and scale 1.072e6 machine-hours, which predict 7.7% /
//   14.0% / 24.5%. A shape below 1 is a hazard that falls with age: a job
//   that has run cleanly for a while is less likely to fail per hour.
//   Below the table's range the power law is an extrapolation, and a
//   generous one: a 10-minute single-instance job fails 1.4% of the time.
//   Scenarios of many short jobs may want to set their own process (or
//   none); the exposure counts every machine-hour a job's containers run,
//   redone work included, across its attempts.
//
// Determinism: every draw comes from the scenario's seed through the
// generators below (distributions written here; std::*_distribution output
// differs between standard libraries). Rng is a sequential std::mt19937_64
// stream; KeyedRng is a SplitMix64 stream keyed by what it is for (a job, an
// attempt, a purpose), so a job's draws do not depend on the order in which
// a policy makes things happen: every policy sees the same provisioning
// latencies, failures and workload (common random numbers).
//
// Threading: the models are plain values (thread-compatible); generators
// are thread-compatible.
#ifndef KILN_SIM_MODELS_H_
#define KILN_SIM_MODELS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kiln::sim {

// ---------------------------------------------------------------------------
// Randomness

// 64-bit FNV-1a of `text`: a stable key for a name.
uint64_t HashName(std::string_view text);

// Mixes values into one key (SplitMix64's finalizer over a running sum).
// Inline: a simulated job mixes a few keys at each of its random draws.
inline uint64_t MixKey(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t MixKey(uint64_t a, uint64_t b, uint64_t c, uint64_t d = 0, uint64_t e = 0) {
  return MixKey(MixKey(MixKey(MixKey(a, b), c), d), e);
}

// A source of 64-bit random words with the distributions Kiln uses.
class RandomStream {
 public:
  virtual ~RandomStream() = default;
  // The next 64 random bits.
  virtual uint64_t Next() = 0;

  // Uniform in [0, 1), 53 bits.
  double Uniform();
  // Uniform in (0, 1].
  double UniformOpen();
  // Uniform integer in [0, n). REQUIRES: n > 0.
  int64_t UniformInt(int64_t n);
  // True with probability p.
  bool Bernoulli(double p);
  // Exponential with the given mean.
  double Exponential(double mean);
  // Standard normal (Box-Muller, one value per call).
  double Normal();
  // exp(N(log(median), sigma^2)).
  double LogNormal(double median, double sigma);
  // Weibull with scale and shape (inverse transform).
  double Weibull(double scale, double shape);
};

// A sequential stream: std::mt19937_64, whose output the C++ standard fixes.
class Rng final : public RandomStream {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t Next() override { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// A stream keyed by what it is for: SplitMix64 started at `key` (e.g.
// MixKey(seed, HashName(job), kPurpose, attempt)). Cheap to create.
class KeyedRng final : public RandomStream {
 public:
  explicit KeyedRng(uint64_t key) : state_(key) {}
  uint64_t Next() override;

 private:
  uint64_t state_;
};

// A duration drawn from a lognormal distribution around `median`, clamped to
// [median / max_factor, median * max_factor]. sigma 0: always the median.
struct DurationDist {
  absl::Duration median = absl::ZeroDuration();
  double sigma = 0;
  double max_factor = 3;

  absl::Duration Sample(RandomStream& rng) const;
  // The largest value Sample() returns.
  absl::Duration Max() const;
};

// A transfer rate in MB/s (10^6 bytes per second), lognormal and clamped like
// DurationDist. Time(bytes) = bytes / rate.
struct RateDist {
  double median_mb_per_s = 100;
  double sigma = 0;
  double max_factor = 3;

  double Sample(RandomStream& rng) const;
  // Time to move `bytes` at a drawn rate; zero for no bytes.
  absl::Duration Time(int64_t bytes, RandomStream& rng) const;
  // The longest Time(bytes) can be.
  absl::Duration MaxTime(int64_t bytes) const;
};

// ---------------------------------------------------------------------------
// Spot markets

// A SkyPilot-format availability trace:
//   {"metadata": {"gap_seconds": 300}, "data": [3, 3, 2, 0, ...]}
// data[i] is the number of spot instances of one type available during
// [i * gap, (i + 1) * gap) after the provider started; after the last tick
// the trace repeats from the first.
struct SpotTrace {
  absl::Duration gap = absl::Minutes(5);
  std::vector<int32_t> available;

  // The count at `since_start` (>= 0).
  int32_t AvailableAt(absl::Duration since_start) const;
  // The tick index at `since_start`, not wrapped.
  int64_t TickAt(absl::Duration since_start) const;
  // Fraction of ticks with at least `n` instances available.
  double FractionAtLeast(int32_t n) const;
};

// Parses a trace. `invert` reads 0/1 logs whose 1 marks a failed launch or
// a preempted tick: 1 becomes 0 available and 0 one. (SkyPilot's published
// traces hold counts: read them without it.)
// Errors: InvalidArgument naming what is wrong (not JSON, no positive
// metadata.gap_seconds, data not an array of non-negative integers, empty).
absl::StatusOr<SpotTrace> ParseSpotTrace(std::string_view json, bool invert = false);

// Time until a 24-hour-capped preemptible VM is preempted: the bathtub CDF of
// Kadupitiya, Jadhao and Sharma ("Modeling the temporally constrained
// preemptions of transient cloud VMs", HPDC'20),
//   F(t) = a * (1 - exp(-t / tau1) + exp((t - b) / tau2)),
// many preemptions in the first hours, few in the middle, a rise before the
// cap; every VM still alive at `cap` is preempted then. The defaults are
// illustrative (shape of the paper's fits), not a fit to one provider.
struct BathtubModel {
  double a = 0.45;
  absl::Duration tau1 = absl::Hours(1);
  absl::Duration tau2 = absl::Minutes(48);
  absl::Duration b = absl::Hours(24);
  absl::Duration cap = absl::Hours(24);

  // The probability that a VM is preempted by `age`: near 0 at age 0, 1 from
  // `cap` on.
  double Cdf(absl::Duration age) const;
  // A VM lifetime drawn by inverting the CDF (bisection), at most `cap`.
  absl::Duration Sample(RandomStream& rng) const;
};

struct SpotMarket {
  enum class Kind {
    kNone,     // spot capacity is always there and never taken back
    kTrace,    // availability follows `trace`; instances beyond it are preempted
    kPoisson,  // each instance is preempted at a constant rate
    kBathtub,  // each instance's lifetime follows `bathtub`
  };
  Kind kind = Kind::kNone;
  SpotTrace trace;
  double preemptions_per_instance_hour = 0;
  BathtubModel bathtub;
  // For kNone, kPoisson, kBathtub: at most this many spot instances of the
  // type at once (unset: no limit).
  std::optional<int32_t> capacity;
};

// ---------------------------------------------------------------------------
// Instance types, failures, data

struct InstanceTypeModel {
  // Prices per instance-hour, in dollars.
  double on_demand_per_hour = 0;
  double spot_per_hour = 0;
  // On-demand instances of the type that can exist at once, warm pools
  // included (unset: no limit). Beyond it Provision reports
  // ResourceExhausted and the engine shows Pending.
  std::optional<int32_t> capacity;
  // Cold provisioning (a cluster that comes from a warm pool skips it).
  DurationDist provisioning{absl::Seconds(81), 0.20};
  // Starting the training container, on every start (cold and warm).
  DurationDist container_start{absl::Seconds(14), 0.12};
  // Pulling and unpacking the training image on a cold instance.
  RateDist image_pull{100, 0.20};
  SpotMarket spot;
  // Time between a spot interruption notice and the loss of the instance.
  absl::Duration spot_notice = absl::Minutes(2);
};

// The node failure process (see the file comment).
struct FailureModel {
  bool enabled = true;
  double shape = 0.2716;
  double scale_machine_hours = 1.072e6;

  // P(at least one failure within `machine_hours` of a job's run).
  double FailureProbability(double machine_hours) const;
  // Machine-hours at which the expected number of failures reaches
  // `cumulative_hazard` (the inverse of (m / scale)^shape).
  double MachineHoursAt(double cumulative_hazard) const;
};

// Delivery time of one input channel to one instance, per input mode.
struct DataModel {
  DurationDist file_setup{absl::Seconds(2), 0};
  RateDist file_rate{50, 0.20};
  DurationDist fast_file{absl::Seconds(4.5), 0.30};  // metadata only
  DurationDist fsx{absl::Seconds(2.5), 0.30};        // FileSystemDataSource: mount
  DurationDist pipe{absl::Seconds(1), 0.30};         // FIFOs; the stream overlaps training
  // Pipe-mode stream throughput per channel and instance, drawn per attempt:
  // the training cannot consume data faster (see the file comment).
  RateDist pipe_rate{450, 0};

  // Time from delivery start until training may start. `mode`: "File",
  // "FastFile", "Pipe" or "FSx" (a FileSystemDataSource channel, whatever
  // its input mode). Unknown modes are treated as File. For Pipe this is
  // the set-up only; the stream itself paces the run (pipe_rate).
  absl::Duration Sample(std::string_view mode, int64_t bytes, RandomStream& rng) const;
  // The longest Sample(mode, bytes, ...) can be.
  absl::Duration Max(std::string_view mode, int64_t bytes) const;
};

// Everything the simulation backend models, shared (read-only) by the
// provider and the data channel of one run.
struct SimModels {
  uint64_t seed = 1;
  // Types without an entry in `types` use `default_type`.
  InstanceTypeModel default_type;
  std::map<std::string, InstanceTypeModel, std::less<>> types;
  FailureModel failures;
  DataModel data;
  // How long Provision takes to report insufficient capacity.
  absl::Duration capacity_error_latency = absl::Seconds(5);

  // The model of `instance_type`: its entry in `types`, else default_type.
  // The reference lives as long as this SimModels and is not changed by it.
  const InstanceTypeModel& Type(std::string_view instance_type) const;
};

// The calibrated defaults (see the file comment), with illustrative list
// prices (us-east-1 on-demand, spot at 30% of it) for common ml.* types.
SimModels DefaultModels();

}  // namespace kiln::sim

#endif  // KILN_SIM_MODELS_H_
