// Policies compared by the simulation: how long to keep warm pools
// (KeepAliveChoice, over kiln/warm_pool.h's policies) and where to run
// deadline-bound jobs (SpotChoice: on-demand only, spot with checkpoints, or
// Uniform Progress).
//
// Uniform Progress is the deadline-aware policy of "Can't Be Late: Optimizing
// Spot Instance Savings under Deadlines" (Wu et al., NSDI'24): draw the line
// from (arrival, no progress) to (deadline, all work); while the job's
// saved progress is on or above the line, use spot; when it falls behind,
// use on-demand; go back to spot only once it is `hysteresis` ahead of the
// line. On top, the safety net that makes it never miss a deadline that
// on-demand alone would meet: whenever the time left minus the work left
// falls below the job's margin (the worst-case cost of one more preemption:
// lost work since the last checkpoint, the notice, the retry delay and a
// worst-case cold restart), on-demand it is.
//
// Kiln's engine lets a policy choose the capacity type at two points: when a
// job is created (EnableManagedSpotTraining) and at each interruption
// (InterruptionDecision::use_spot, from a SpotInterruptionHandler).
// NewUniformProgressHandler is the second; kiln::sim::RunScenario does the
// first and, for a spot job left waiting for capacity past its safety point,
// stops it and resubmits the rest of its work on on-demand from its
// checkpoint (the engine has no call to switch a running or pending job's
// capacity type; see the simulation README for the hook that would replace
// this).
//
// Threading: loop thread only.
#ifndef KILN_SIM_POLICIES_H_
#define KILN_SIM_POLICIES_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "kiln/sim/models.h"
#include "kiln/sim/workload.h"
#include "kiln/spot.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/warm_pool.h"

namespace kiln::sim {

struct KeepAliveChoice {
  enum class Kind { kNever, kJobRequested, kFixed, kAdaptive };
  Kind kind = Kind::kJobRequested;
  absl::Duration fixed = absl::Minutes(10);  // kFixed
  AdaptiveHistogramOptions adaptive;         // kAdaptive

  // "Never", "JobRequested", "Fixed(600s)", "AdaptiveHistogram(p99)".
  std::string Name() const;
  // A new policy of this kind, with no history (AdaptiveHistogram learns
  // from the jobs of the run it is given to): one per simulated engine.
  std::shared_ptr<KeepAlivePolicy> New() const;
};

struct SpotChoice {
  enum class Kind { kOnDemand, kSpot, kUniformProgress };
  Kind kind = Kind::kOnDemand;
  // kSpot, kUniformProgress: progress is saved every this much work.
  absl::Duration checkpoint_interval = absl::Minutes(10);
  // kUniformProgress: how far ahead of the line a job on on-demand must be
  // to go back to spot.
  absl::Duration hysteresis = absl::Minutes(10);

  // "OnDemand", "Spot(ckpt 600s)", "UniformProgress(ckpt 600s)".
  std::string Name() const;
};

// Where a deadline-bound job stands.
struct ProgressView {
  absl::Time arrival;
  absl::Time deadline;
  absl::Duration work;      // total
  absl::Duration progress;  // saved
  absl::Duration margin;    // see the file comment; RestartMargin()
  bool on_spot = true;      // the capacity type of its current (or last) attempt
  // Wall time per unit of work at the slowest the job may run (>= 1): a
  // Pipe-mode job cannot train faster than its data streams. WorstCasePace().
  double pace = 1;
};

// (deadline - now) - (work - progress) * pace - margin: how much more time
// the job can lose and still finish on on-demand.
absl::Duration SafetyExcess(const ProgressView& view, absl::Time now);

// The Uniform Progress decision at `now` (see the file comment).
bool UniformProgressUsesSpot(const ProgressView& view, absl::Time now, absl::Duration hysteresis);

// The wall time per unit of work a job needs at worst: 1, or more when its
// Pipe-mode channels stream (data_bytes * epochs at the slowest pipe_rate
// the models allow) for longer than its work takes.
double WorstCasePace(const SimModels& models, const v1::CreateTrainingJobRequest& request,
                     const SimJobAttributes& attributes);

// The margin of a job: the worst case of what one more preemption costs on
// the way to finishing on on-demand: `checkpoint_interval` of lost work (at
// WorstCasePace), the notice, the engine's retry delay, a cold restart at the
// models' maxima (provisioning, container start, image pull, data of every
// channel) and the upload.
absl::Duration RestartMargin(const SimModels& models, const v1::CreateTrainingJobRequest& request,
                             const SimJobAttributes& attributes, absl::Duration checkpoint_interval,
                             absl::Duration retry_delay);

struct UniformProgressOptions {
  absl::Duration hysteresis = absl::Minutes(10);
  // Delay before asking for capacity again after an interruption.
  absl::Duration retry_delay = absl::Seconds(30);
  // Where a job stands now; nullopt for a job without a deadline (it is
  // treated like the default handler: spot stays spot).
  std::function<std::optional<ProgressView>(std::string_view job)> view;
  // Hears each decision (optional).
  std::function<void(std::string_view job, bool use_spot)> on_decision;
};

// The SpotInterruptionHandler of Uniform Progress. Spot preemptions: retry,
// on the capacity the policy chooses. Lost instances: retry within
// RetryStrategy (as the default handler), on the capacity the policy
// chooses; beyond it the job fails.
std::unique_ptr<SpotInterruptionHandler> NewUniformProgressHandler(UniformProgressOptions options);

}  // namespace kiln::sim

#endif  // KILN_SIM_POLICIES_H_
