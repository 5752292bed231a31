// Managed spot training and fault tolerance: what to do when an attempt of a
// job is interrupted.
//
// An attempt is interrupted by a spot interruption notice (the instance is
// taken back at a deadline) or by a lost instance (a node failure). The engine
// does the mechanics the same way for both: SIGTERM to the job's containers,
// a wait for them to exit (their last checkpoint sync included) until the
// deadline, release of the instances, then, if the handler says so, a new
// attempt: Starting, checkpoints restored, Downloading, Training... In a
// multi-instance or heterogeneous job one interrupted instance interrupts the
// whole job: all instances stop and restart together.
//
// The SpotInterruptionHandler decides: retry (on spot or on-demand capacity,
// after a delay) or give up. Kiln keeps a separate budget per cause:
// - spot preemptions: bounded by MaxWaitTimeInSeconds (the engine's timer ends
//   the job Stopped/MaxWaitTimeExceeded), never by RetryStrategy;
// - infrastructure failures (lost instances): bounded by
//   RetryStrategy.MaximumRetryAttempts (none: the job fails);
// - algorithm errors (non-zero exit): never retried.
// Describe's status messages and FailureReason say which budget applied.
//
// Threading: loop thread only.
#ifndef KILN_SPOT_H_
#define KILN_SPOT_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"

namespace kiln {

struct InterruptionContext {
  std::string_view job_name;
  std::string_view host_name;       // the interrupted instance
  bool preempted = false;           // a spot notice (true) or a lost instance (false)
  bool on_spot = false;             // the interrupted attempt ran on spot capacity
  int attempt = 1;                  // the interrupted attempt, from 1
  int spot_interruptions = 0;       // so far, this one included
  int infrastructure_failures = 0;  // so far, this one included
  int max_retry_attempts = 0;       // RetryStrategy.MaximumRetryAttempts; 0 = none
  absl::Time now;
  std::optional<absl::Time> max_wait_deadline;  // creation + MaxWaitTimeInSeconds, spot jobs
  absl::Duration run_time_used;     // instance time of all attempts so far
  absl::Duration max_runtime;       // MaxRuntimeInSeconds (over all attempts)
};

struct InterruptionDecision {
  enum class Action { kRetry, kGiveUp };
  Action action = Action::kRetry;
  bool use_spot = true;             // capacity type of the next attempt
  absl::Duration delay;             // before asking for capacity again
  std::string failure_reason;       // kGiveUp: the job's FailureReason
};

// A review of where a job with EnableManagedSpotTraining runs
// (SpotInterruptionHandler::Review).
struct CapacityReview {
  enum class When {
    kBeforeProvisioning,  // the engine is about to ask for the attempt's instances
    kWaiting,             // periodic: the attempt waits for capacity (Starting, Pending)
    kRunning,  // periodic: the attempt holds instances (preparing, Downloading, Training)
  };
  std::string_view job_name;
  When when = When::kBeforeProvisioning;
  bool on_spot = true;  // the capacity the attempt uses, or is about to ask for
  int attempt = 1;      // from 1
  absl::Time now;
  absl::Time creation_time;
  std::optional<absl::Time> max_wait_deadline;  // creation + MaxWaitTimeInSeconds
  absl::Duration run_time_used;  // instance time of all attempts, the current one included
  absl::Duration max_runtime;    // MaxRuntimeInSeconds (over all attempts)
};

// Decides where a managed-spot job runs: after each interruption
// (OnInterruption), and, for a handler that reviews its choices, before each
// provisioning and periodically (Review). The default handler only answers
// interruptions.
class SpotInterruptionHandler {
 public:
  virtual ~SpotInterruptionHandler() = default;
  // Called once per interruption, after the containers have stopped and the
  // instances were released.
  virtual InterruptionDecision OnInterruption(const InterruptionContext& context) = 0;
  // A short name for reports.
  virtual std::string Name() const = 0;

  // How often the engine reviews each job with EnableManagedSpotTraining
  // while the job is InProgress: every ReviewPeriod() on the loop's clock,
  // from its creation. Zero (the default): reviews come only before each
  // provisioning. Read once, when the engine is made.
  virtual absl::Duration ReviewPeriod() const { return absl::ZeroDuration(); }
  // Where the job should run: true for spot capacity, false for on-demand.
  // Called for jobs with EnableManagedSpotTraining only: before each
  // provisioning (the first, and each retry while capacity is short; not
  // after an interruption, which OnInterruption decided), and every
  // ReviewPeriod() while the job waits for capacity or holds instances; never
  // while an interruption or a stop is being handled, nor once training is
  // over (Uploading). An answer other than context.on_spot moves the job, as
  // Engine::MigrateTrainingJob does, except before the first provisioning,
  // where it only sets the first attempt's capacity. A periodic review that
  // keeps a job waiting out a capacity back-off (Pending) where it is makes
  // the engine ask for that capacity again at once. The default keeps the
  // job where it is.
  virtual bool Review(const CapacityReview& context) { return context.on_spot; }
};

struct DefaultSpotHandlerOptions {
  // Delay before asking for capacity again after an interruption.
  absl::Duration retry_delay = absl::Seconds(30);
};

// The service's behaviour: a preempted spot attempt is retried on spot until
// MaxWaitTimeInSeconds runs out; a lost instance is retried within
// RetryStrategy, else the job fails with an InternalServerError naming the
// instance and the budget. Its decisions are DefaultInterruptionDecision's.
std::unique_ptr<SpotInterruptionHandler> NewDefaultSpotInterruptionHandler(
    DefaultSpotHandlerOptions options = {});

// Returns the service's decision for interruption `context`: retry on the
// same capacity type (use_spot = context.on_spot) after `retry_delay`, except
// for a lost instance (not preempted) once its failures exceed
// max_retry_attempts: give up, with the service's FailureReason
// ("InternalServerError: instance algo-1 was lost; ..."). A preempted attempt
// is always retried: MaxWaitTimeInSeconds bounds it, which the engine
// enforces. A handler that only places attempts differently (spot or
// on-demand) starts from this decision and changes use_spot when it retries.
// Pure function; any thread.
InterruptionDecision DefaultInterruptionDecision(const InterruptionContext& context,
                                                 absl::Duration retry_delay);

}  // namespace kiln

#endif  // KILN_SPOT_H_
