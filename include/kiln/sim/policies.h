// Policies compared by the simulation: how long to keep warm pools
// (KeepAliveChoice, over kiln/warm_pool.h's policies) and where to run
// deadline-bound jobs (SpotChoice: on-demand only, spot with checkpoints,
// greedy, or Uniform Progress).
//
// Greedy and Uniform Progress are the deadline-aware policies of "Can't Be
// Late: Optimizing Spot Instance Savings under Deadlines" (Wu et al.,
// NSDI'24, Sec. 3-5). A job's slack is the time left to its deadline minus
// the work left (at its worst-case pace), its progress what it has saved
// (its last checkpoint), and d its margin: the worst case of one more restart
// (RestartMargin). Both policies:
//   - take spot whenever it is there (and the safety net allows), and keep
//     it until it is taken back (the Exploitation Rule);
//   - the safety net: once a job that does not hold spot has less than
//     safety_factor x d of slack, on-demand, for good; a job without spot
//     waits only while it would still have that much slack when the policy
//     next decides (the next tick, or the retry after an interruption).
// Greedy waits for spot otherwise. Uniform Progress draws the line from
// (arrival, no progress) to (deadline, all work), and in addition:
//   - a job without instances and without spot goes on-demand as soon as its
//     progress is behind the line;
//   - a job on on-demand leaves it for spot only once its progress reaches
//     the line at now + hysteresis_factor x d (hysteresis).
//
// The policies decide at every step the engine offers a
// SpotInterruptionHandler: before each provisioning, at each interruption,
// and every `tick` while the job waits or runs (SpotInterruptionHandler::
// Review). A decision to change capacity moves the job
// (Engine::MigrateTrainingJob): a running job stops its attempt and restarts
// on the other capacity from its checkpoint.
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

// The rules of the deadline-aware spot policies of "Can't Be Late" (Wu et
// al., NSDI'24; see the file comment). Factors count the job's margin d
// (ProgressView::margin).
struct DeadlineSpotRules {
  enum class Rule {
    kGreedy,           // spot whenever it is there, else wait; the safety net
    kUniformProgress,  // as kGreedy, and on-demand when behind the line
  };
  Rule rule = Rule::kUniformProgress;
  // kUniformProgress: a job on on-demand stays there until its progress
  // reaches the line at now + hysteresis_factor x d (the paper's 2d); 0
  // leaves on-demand as soon as spot is there (the paper's "plain" variant).
  double hysteresis_factor = 2;
  // The safety net: a job that does not hold spot and has less than
  // safety_factor x d of slack (time left minus work left) goes on-demand,
  // and stays there (the paper's 2d).
  double safety_factor = 2;
  // How often the policy decides while a job waits or runs; positive.
  absl::Duration tick = absl::Minutes(5);
  // The paper's d, when given: what the rules take one restart to cost.
  // Unset: each job's RestartMargin, a worst case from the models. A d
  // below what a restart really takes can make a job miss its deadline.
  std::optional<absl::Duration> changeover;
};

struct SpotChoice {
  enum class Kind { kOnDemand, kSpot, kGreedy, kUniformProgress };
  Kind kind = Kind::kOnDemand;
  // kSpot, kGreedy, kUniformProgress: progress is saved every this much work.
  absl::Duration checkpoint_interval = absl::Minutes(10);
  // kGreedy, kUniformProgress: their parameters (`kind` decides the rule;
  // rules.rule is not read).
  DeadlineSpotRules rules;

  // "OnDemand", "Spot(ckpt 600s)", "Greedy(ckpt 600s)",
  // "UniformProgress(ckpt 600s)"; parameters other than the defaults follow
  // the interval: "UniformProgress(ckpt 600s, hysteresis 0, tick 600s)".
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

// (deadline - now) - (work - progress) * pace: the job's slack, the time it
// can still lose and finish on on-demand.
absl::Duration Slack(const ProgressView& view, absl::Time now);

// What a job holds and sees when a deadline policy decides.
struct CapacityNow {
  // Its current attempt holds instances, on ProgressView::on_spot capacity
  // (a job asking for on-demand capacity counts as holding it).
  bool holding = false;
  // A spot request for its instances would be granted now.
  bool spot_available = false;
  // The longest it can be until the policy decides again.
  absl::Duration next_decision;
};

// The decision of `rules` at `now` (see the file comment): true for spot.
bool DeadlineSpotUsesSpot(const ProgressView& view, absl::Time now, const DeadlineSpotRules& rules,
                          const CapacityNow& capacity);

// The wall time per unit of work a job needs at worst: 1, or more when its
// Pipe-mode channels stream (data_bytes * epochs at the slowest pipe_rate
// the models allow) for longer than its work takes.
double WorstCasePace(const SimModels& models, const v1::CreateTrainingJobRequest& request,
                     const SimJobAttributes& attributes);

// The margin of a job: the worst case of what one more preemption costs on
// the way to finishing on on-demand: `checkpoint_interval` of lost work (at
// WorstCasePace), the notice, the engine's retry delay, one round of
// capacity error and retry when on-demand capacity of the job's types is
// limited, a cold restart at the models' maxima (provisioning, container
// start, image pull, data of every channel) and the upload.
absl::Duration RestartMargin(const SimModels& models, const v1::CreateTrainingJobRequest& request,
                             const SimJobAttributes& attributes, absl::Duration checkpoint_interval,
                             absl::Duration retry_delay);

struct DeadlineSpotOptions {
  DeadlineSpotRules rules;
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

// The SpotInterruptionHandler of greedy and Uniform Progress. Spot
// preemptions: retry, on the capacity the rules choose. Lost instances:
// retry within RetryStrategy (as the default handler), on the capacity the
// rules choose; beyond it the job fails. Reviews (before each provisioning,
// and every rules.tick while a job waits or runs): the rules' decision.
std::unique_ptr<SpotInterruptionHandler> NewDeadlineSpotHandler(DeadlineSpotOptions options);

}  // namespace kiln::sim

#endif  // KILN_SIM_POLICIES_H_
