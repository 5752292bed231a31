// Policies compared by the simulation: how long to keep warm pools
// (KeepAliveChoice, over kiln/warm_pool.h's policies) and where to run
// deadline-bound jobs (SpotChoice: on-demand only, spot with checkpoints, or
// Uniform Progress).
//
// Uniform Progress is the deadline-aware policy of "Can't Be Late: Optimizing
// Spot Instance Savings under Deadlines" (Wu et al., NSDI'24). Draw the line
// from (arrival, no progress) to (deadline, all work). Take spot whenever it
// is there and stay on it until preempted; while the job has no instances and
// spot is not there, wait while the saved progress is on or above the line,
// and go on-demand as soon as it falls behind; leave on-demand for spot only
// when spot is there and the job is `hysteresis` ahead of the line. On top,
// the safety net that makes it never miss a deadline that on-demand alone
// would meet: whenever the time left minus the work left falls below
// `safety_restarts` restarts (the paper's 2d: d is the job's margin, the
// worst-case cost of one more restart: lost work since the last checkpoint,
// the notice, the retry delay and a cold restart), on-demand it is.
//
// The policy decides at every step the engine offers a SpotInterruptionHandler:
// before each provisioning, at each interruption, and every `tick` while the
// job waits or runs (SpotInterruptionHandler::Review). A decision to change
// capacity moves the job (Engine::MigrateTrainingJob): a running job stops
// its attempt, syncs its checkpoint and restarts on the other capacity.
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
  // to go back to spot; the safety net in restarts; how often it decides.
  absl::Duration hysteresis = absl::Minutes(10);
  double safety_restarts = 1;
  absl::Duration tick = absl::Minutes(5);

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

// (deadline - now) - (work - progress) * pace - restarts * margin: how much
// more time the job can lose and still finish on on-demand after `restarts`
// more restarts.
absl::Duration SafetyExcess(const ProgressView& view, absl::Time now, double restarts = 1);

struct UniformProgressParams {
  // How far ahead of the line a job on on-demand must be to go back to spot.
  absl::Duration hysteresis = absl::Minutes(10);
  // The safety net, in restarts of the job's margin. The paper's is 2d, with
  // d its changeover overhead; a Kiln margin is already a worst case (the
  // work lost since the last checkpoint, the notice and a cold restart at the
  // models' maxima), so one is the default.
  double safety_restarts = 1;
};

// The Uniform Progress decision at `now` (see the file comment): true for
// spot. `holding`: the job's current attempt holds instances (on
// view.on_spot capacity); `spot_available`: a spot request for the job's
// instances would be granted now.
bool UniformProgressUsesSpot(const ProgressView& view, absl::Time now,
                             const UniformProgressParams& params, bool holding,
                             bool spot_available);

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
  UniformProgressParams params;
  // How often the engine asks the policy while a job waits or runs
  // (SpotInterruptionHandler::ReviewPeriod); positive.
  absl::Duration tick = absl::Minutes(5);
  // Delay before asking for capacity again after an interruption.
  absl::Duration retry_delay = absl::Seconds(30);
  // Where a job stands now; nullopt for a job without a deadline (it is
  // treated like the default handler: spot stays spot).
  std::function<std::optional<ProgressView>(std::string_view job)> view;
  // Whether spot capacity for the job's instances is there now.
  std::function<bool(std::string_view job)> spot_available;
  // Hears each decision (optional).
  std::function<void(std::string_view job, bool use_spot)> on_decision;
};

// The SpotInterruptionHandler of Uniform Progress. Spot preemptions: retry,
// on the capacity the policy chooses. Lost instances: retry within
// RetryStrategy (as the default handler), on the capacity the policy
// chooses; beyond it the job fails. Reviews: the policy's decision, every
// `tick` and before each provisioning.
std::unique_ptr<SpotInterruptionHandler> NewUniformProgressHandler(UniformProgressOptions options);

}  // namespace kiln::sim

#endif  // KILN_SIM_POLICIES_H_
