// Engine: runs training jobs through the service's lifecycle.
//
// The engine takes CreateTrainingJob / Describe / List / Stop / Update /
// Delete requests in the SageMaker API's shape (kiln/v1/sagemaker.pb.h) and
// carries each job through its statuses (InProgress: Starting, Pending,
// Downloading, Training, Uploading; then Completed, Failed, Stopping/Stopped)
// by driving the pluggable components on one event loop. The same engine runs
// in virtual time (a virtual EventLoop and the simulation backend) and in real
// time (a real-time EventLoop and the local or AWS backend).
//
// Example (virtual time, simulation backend):
//   auto loop = kiln::NewVirtualEventLoop();
//   auto provider = kiln::sim::NewSimClusterProvider(*loop, {});
//   kiln::EngineOptions options;
//   options.loop = loop.get();
//   options.cluster_provider = provider.get();
//   auto engine = kiln::NewEngine(options).value();
//   kiln::v1::CreateTrainingJobRequest request = ...;
//   auto created = engine->CreateTrainingJob(request);   // InProgress/Starting
//   auto ended = engine->WaitForTrainingJob("my-job");   // runs the loop until the job ends
//   // ended->training_job_status() == "Completed"
//
// Errors use absl status codes, each standing for one of the service's errors:
// InvalidArgument = ValidationException (the message names the field and the
// rule), NotFound = ResourceNotFound, AlreadyExists = ResourceInUse (name
// taken), FailedPrecondition = the job's lifecycle state does not allow the
// call (the message says which state), ResourceExhausted = ResourceLimitExceeded.
// kiln/service_error.h words each as the service does, operation by operation.
//
// Threading: every public method may be called from any thread, at any time:
// while a thread runs the loop, while none does, or before any has. The
// engine's state belongs to the loop thread (EventLoop says which thread that
// is): a call from the loop thread, or from a thread while no thread holds the
// loop, runs at once on the calling thread; a call from another thread while
// one holds the loop runs on that thread between two callbacks, and the caller
// blocks until it has run (EventLoop::RunOnLoop). Calls are linearizable: each
// takes effect at one instant between its start and its return.
// The engine works in steps: a call, or a callback of the loop (a component's
// completion, a timer). Observers hear of what a step did after the step, on
// the loop thread, in order, and may call the engine then (JobObserver).
// The components (EngineOptions) are called on the loop thread from inside
// steps: a component must not call the engine from inside such a call (the
// engine is between two states of the job); one that wants to, e.g. a handler
// that stops a job, posts the call (EventLoop::Post) and it runs after the
// step.
//
// RunUntilIdle returns once nothing is left to run, and an engine in real time
// keeps a timer per running job (MaxRuntimeInSeconds): a program that waits for
// its jobs uses WaitForTrainingJob or WaitForAllTrainingJobs, which return as
// soon as the jobs have ended.
#ifndef KILN_ENGINE_H_
#define KILN_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/cluster_provider.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/journal.h"
#include "kiln/spot.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/validation.h"
#include "kiln/warm_pool.h"

namespace kiln {

// A job's status changed (a new SecondaryStatusTransition began, or the
// running one's message changed).
struct StatusEvent {
  std::string_view job_name;
  std::string_view status;            // TrainingJobStatus
  std::string_view secondary_status;  // SecondaryStatus
  std::string_view message;           // the transition's StatusMessage
  absl::Time time;
};

// Sees what happens to jobs. Methods are called on the loop thread, in event
// order, after the engine step that made the event (the job may have moved on
// since, within the same step or by an earlier observer's call: Describe shows
// where it is now). They must not block. They may call the engine, except
// WaitForTrainingJob and WaitForAllTrainingJobs; what such a call makes is heard
// after the events already queued. An event's texts live during the call only.
// Default bodies do nothing.
class JobObserver {
 public:
  virtual ~JobObserver() = default;
  virtual void OnStatusChange(const StatusEvent& event) {}
  // A line a container wrote (stdout or stderr), without its newline.
  virtual void OnLogLine(std::string_view job_name, std::string_view host_name,
                         std::string_view line, absl::Time time) {}
  // A MetricDefinitions regex matched a log line; `value` is its first group.
  virtual void OnMetric(std::string_view job_name, std::string_view metric_name, double value,
                        absl::Time time) {}
};

namespace engine_internal {
struct PreparedAccess;
}  // namespace engine_internal

// A CreateTrainingJob request validated once for many jobs that differ only in
// their names: a sweep's trials, a nightly batch, a simulated workload. Made
// by Engine::PrepareTrainingJob, used by Engine::CreateTrainingJob(prepared,
// name). The jobs made from it share its request instead of each keeping a
// copy, and only their names are validated.
//
//   auto prepared = engine->PrepareTrainingJob(request).value();
//   for (int i = 0; i < 100; ++i) {
//     auto created = engine->CreateTrainingJob(prepared, absl::StrCat("trial-", i));
//   }
//
// Immutable once made; copies share one request (copying costs a reference
// count). The request lives as long as the last copy or job that uses it, so
// a PreparedTrainingJob may be dropped while its jobs run.
// Thread-safe: copies may be used from several threads at once.
class PreparedTrainingJob {
 public:
  // An empty one, which CreateTrainingJob refuses.
  PreparedTrainingJob() = default;

  // Whether it holds a prepared request.
  explicit operator bool() const { return request_ != nullptr; }

  // The request as prepared: validated, with TrainingJobName cleared (each
  // job gets its own). REQUIRES: non-empty.
  const v1::CreateTrainingJobRequest& request() const { return *request_; }

 private:
  friend struct engine_internal::PreparedAccess;
  PreparedTrainingJob(std::shared_ptr<const v1::CreateTrainingJobRequest> request,
                      uint64_t engine_id)
      : request_(std::move(request)), engine_id_(engine_id) {}

  std::shared_ptr<const v1::CreateTrainingJobRequest> request_;
  uint64_t engine_id_ = 0;  // the engine that validated it, under its ValidationOptions
};

struct EngineOptions {
  // The loop that drives everything. Required; must outlive the engine.
  EventLoop* loop = nullptr;
  // Where clusters come from. Required; must outlive the engine.
  ClusterProvider* cluster_provider = nullptr;
  // Delivers input channels. Optional; must outlive the engine. Without one,
  // a job with InputDataConfig is refused at CreateTrainingJob
  // (FailedPrecondition) rather than run without its data.
  DataChannel* data_channel = nullptr;

  // Used in ARNs: arn:aws:sagemaker:<region>:<account_id>:training-job/<name>.
  std::string region = "us-east-1";
  std::string account_id = "000000000000";

  // Time between SIGTERM and SIGKILL when a job is stopped (StopTrainingJob,
  // MaxRuntimeInSeconds). The service's is 120 s.
  absl::Duration stop_grace_period = absl::Seconds(120);

  // While capacity is short (Provision returns ResourceExhausted) the job is
  // Pending and the engine asks again after a delay that starts here and
  // doubles up to the maximum. MaxPendingTimeInSeconds, when the job sets it,
  // bounds the wait (the job then fails with a CapacityError); without it the
  // job waits until stopped.
  absl::Duration capacity_retry_initial = absl::Seconds(30);
  absl::Duration capacity_retry_max = absl::Minutes(5);

  // Managed warm pools. Optional; must outlive the engine. Null means the
  // engine's own NewWarmPoolManager(loop, cluster_provider, warm_pools).
  WarmPoolManager* warm_pool_manager = nullptr;
  // Options of the engine's own warm-pool manager (keep-alive policy, caps,
  // quota); ignored when warm_pool_manager is set.
  WarmPoolOptions warm_pools;

  // Decides what happens after a spot interruption or a lost instance.
  // Optional; must outlive the engine. Null means
  // NewDefaultSpotInterruptionHandler().
  SpotInterruptionHandler* spot_handler = nullptr;

  ValidationOptions validation;

  // Where the engine records what it promises (kiln/journal.h). Optional;
  // must outlive the engine. Null: jobs live in this engine's memory only,
  // and no record is ever built (the simulator runs so).
  // With a journal, NewEngine first rebuilds every job the journal holds:
  // ended jobs are described and listed as before; a job that was InProgress
  // or Stopping goes on, on the loop, once it runs: the cluster provider is
  // asked to take its running containers back (ClusterProvider::Reattach),
  // and when it cannot, the attempt ends as a lost instance ends one (the
  // job's RetryStrategy, through the SpotInterruptionHandler, decides between
  // a new attempt and Failed; a Stopping job ends Stopped). With a read-only
  // journal the jobs are shown as recorded, none goes on, and every call
  // that changes something is refused (FailedPrecondition).
  // NewEngine fails, keeping nothing, when the journal cannot be read back
  // (its Recover's error) or holds a job the engine cannot rebuild (DataLoss).
  // CreateTrainingJob, StopTrainingJob, UpdateTrainingJob and
  // DeleteTrainingJob return OK only once their record is durable, and the
  // journal's error otherwise (the change was made in this engine but is not
  // durable; a job whose creation was not recorded is failed at once).
  // Called from inside a callback of the loop, they do not wait (see
  // kiln/journal.h).
  Journal* journal = nullptr;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Validates and accepts a job; it starts at once (InProgress/Starting).
  // Errors: InvalidArgument (the ValidationException text, all violations;
  // or the data channel's refusal of a channel, e.g. an S3Prefix with no
  // objects); AlreadyExists when a job of that name exists (ResourceInUse,
  // with the service's wording); FailedPrecondition when the engine lacks a
  // component the job needs (e.g. a DataChannel); what else the data
  // channel's CheckChannel returns (e.g. Unavailable for an unreachable
  // store), and what a custom WarmPoolManager's OnJobCreated returns.
  // Nothing is kept on error.
  // Threading: validation and each channel's DataChannel::CheckChannel run on
  // the caller's thread, which they may block for a bounded look at the
  // sources (the local backend sends one listing request per s3:// channel);
  // the rest runs on the loop, as for every method.
  // The engine copies what it keeps; the caller keeps `request` and may
  // change and submit it again, e.g. a template under a new TrainingJobName.
  // Every request is validated whole; to validate and copy a template once
  // for many jobs, use PrepareTrainingJob.
  virtual absl::StatusOr<v1::CreateTrainingJobResponse> CreateTrainingJob(
      const v1::CreateTrainingJobRequest& request) = 0;

  // Validates `request` once, for CreateTrainingJob(prepared, name) to create
  // jobs from: every check CreateTrainingJob makes except those that belong
  // to each job, which are the name and the data channel's CheckChannel (a
  // source may change between jobs). TrainingJobName is ignored and may be
  // empty. Copies the request once; the caller keeps `request`.
  // Errors: InvalidArgument (the ValidationException text, all violations)
  // and FailedPrecondition (a component the request needs is missing), as
  // CreateTrainingJob words them. Nothing is kept on error.
  // Threading: any thread, at any time; it reads no job state and does not
  // wait for the loop.
  virtual absl::StatusOr<PreparedTrainingJob> PrepareTrainingJob(
      const v1::CreateTrainingJobRequest& request) = 0;

  // Creates the job `name` from `prepared`: what CreateTrainingJob does with
  // prepared.request() under TrainingJobName `name` (the same statuses,
  // events and Describe output), without validating or copying the request
  // again. The job shares the prepared request: the JobContext that
  // components get carries it, with an empty TrainingJobName (JobContext's
  // job_name is the name).
  // Errors: InvalidArgument for a name the service refuses (worded as
  // CreateTrainingJob words it), an empty `prepared`, or one another engine
  // prepared (whose validation options may differ); otherwise as
  // CreateTrainingJob: AlreadyExists, and CheckChannel's errors.
  // Threading: as CreateTrainingJob.
  virtual absl::StatusOr<v1::CreateTrainingJobResponse> CreateTrainingJob(
      const PreparedTrainingJob& prepared, std::string_view name) = 0;

  // Returns the job as the service describes it (statuses, transitions,
  // times, billing, metrics, the request echoed back). As the service does,
  // it shows EnableNetworkIsolation, EnableInterContainerTrafficEncryption and
  // EnableManagedSpotTraining false when the request left them out, and every
  // time (here and in ListTrainingJobs' summaries) in whole milliseconds, cut
  // toward the past; ListTrainingJobs' filters and order use the exact times.
  // Errors: InvalidArgument for a malformed name; NotFound for an unknown job
  // ("Requested resource not found.", which the service sends as a
  // ValidationException).
  virtual absl::StatusOr<v1::DescribeTrainingJobResponse> DescribeTrainingJob(
      const v1::DescribeTrainingJobRequest& request) = 0;

  // Lists job summaries with the service's filters (NameContains,
  // StatusEquals, WarmPoolStatusEquals, creation and modification time
  // bounds, strict), SortBy (CreationTime default, Name, Status), SortOrder
  // (Ascending default), MaxResults (default 10) and NextToken. A NextToken
  // names the position after the last job returned, so paging stays correct
  // while jobs are added: no job is returned twice or skipped. Under
  // SortBy=Status the position is a status, and a job whose status changes
  // between two pages moves with it: it may be listed twice or not at all
  // (the other orders use what never changes: name, creation time).
  // Errors: InvalidArgument for a bad request or a NextToken this engine did
  // not issue for the same SortBy/SortOrder.
  virtual absl::StatusOr<v1::ListTrainingJobsResponse> ListTrainingJobs(
      const v1::ListTrainingJobsRequest& request) = 0;

  // Stops an InProgress job: it becomes Stopping/Stopping at once; running
  // containers get SIGTERM, then SIGKILL after the grace period; artifacts
  // written so far are uploaded; it ends Stopped/Stopped. Stopping a job that
  // is already Stopping is a no-op.
  // Errors: NotFound; FailedPrecondition if the job has ended.
  virtual absl::Status StopTrainingJob(const v1::StopTrainingJobRequest& request) = 0;

  // Updates what the service lets one update: ProfilerConfig and
  // ProfilerRuleConfigurations (echoed back, not acted on), RemoteDebugConfig
  // (while Downloading or Training), and ResourceConfig.KeepAlivePeriodInSeconds
  // (only while the job's warm pool is Available: counted from when it became
  // Available; 0 releases the pool now).
  // Errors: InvalidArgument; NotFound; FailedPrecondition when the job's state
  // does not allow a change the request asks for (the message says why). A
  // refused request changes nothing.
  virtual absl::StatusOr<v1::UpdateTrainingJobResponse> UpdateTrainingJob(
      const v1::UpdateTrainingJobRequest& request) = 0;

  // Erases an ended job (Completed, Failed, Stopped); its name can be used
  // again. Errors: NotFound; FailedPrecondition while it is InProgress or
  // Stopping, or while its warm pool is Available (the service answers this
  // call's refusal with ResourceInUse, which a wire layer maps it to). An
  // observer may delete the job it is being told has ended: the other
  // observers still hear that event.
  virtual absl::Status DeleteTrainingJob(const v1::DeleteTrainingJobRequest& request) = 0;

  // Waits until the job `name` has ended (Completed, Failed or Stopped), or
  // until the loop's clock reaches `deadline`, and returns the job as
  // DescribeTrainingJob describes it then. It returns as soon as the job has
  // ended: timers still pending (other jobs' deadlines) do not hold it.
  // While no other thread runs the loop, the calling thread runs it (it holds
  // the loop, and observers are called on it, as on any loop thread); while
  // another thread does, the caller sleeps until the job ends, and runs the
  // loop itself if that thread stops running it first. A virtual loop's clock
  // advances as the caller runs it; `deadline` is on the loop's clock.
  // Errors: as DescribeTrainingJob for the name (InvalidArgument, NotFound);
  // DeadlineExceeded when the loop's clock reaches `deadline` first (the job
  // runs on); Cancelled when the loop the caller runs returns first (its
  // Stop(), or nothing left to run while the job has not ended: a component
  // that never completes); FailedPrecondition when called from an observer or
  // from inside one of the engine's steps (the caller would wait for itself).
  // Threading: any thread, except from inside a callback of the loop (which
  // may not run the loop: EventLoop's Run* are not reentrant).
  virtual absl::StatusOr<v1::DescribeTrainingJobResponse> WaitForTrainingJob(
      std::string_view name, absl::Time deadline = absl::InfiniteFuture()) = 0;

  // Waits until no job is InProgress or Stopping (active_jobs() == 0; jobs
  // created meanwhile are waited for too), or until the loop's clock reaches
  // `deadline`, running the loop as WaitForTrainingJob does.
  // Errors: DeadlineExceeded, Cancelled and FailedPrecondition, as
  // WaitForTrainingJob. Threading: as WaitForTrainingJob.
  virtual absl::Status WaitForAllTrainingJobs(absl::Time deadline = absl::InfiniteFuture()) = 0;

  // Adds an observer: from now on it sees every job's transitions, log lines
  // and metrics, on the loop thread. The engine does not own it; `observer`
  // must outlive the engine or be removed first. Adding one twice makes it
  // hear everything twice. Added during an observer's call, it hears from the
  // next event on.
  virtual void AddObserver(JobObserver* observer) = 0;
  // Removes an observer (every registration of it); a no-op for one never
  // added. Removed during an observer's call (its own included), it hears
  // nothing more, not even the rest of the event being told; the other
  // observers still hear that event.
  virtual void RemoveObserver(JobObserver* observer) = 0;

  // Returns the number of jobs that are InProgress or Stopping. Inside an
  // observer's call it counts the jobs as they are after the step that made
  // the event: a job whose end is being heard is not counted.
  virtual int active_jobs() const = 0;

  // Kiln's extension of the service's API: moves an InProgress job with
  // EnableManagedSpotTraining to spot capacity (`to_spot`) or to on-demand
  // capacity. A job waiting for capacity asks for the other capacity at once
  // (a request in flight is abandoned, and what it brings is released). A
  // job that holds instances ends its attempt as an interruption does,
  // without counting one against any budget: its containers get SIGTERM and
  // sync their checkpoints (SIGKILL after the stop grace period), its
  // instances are released, and a new attempt starts on the other capacity,
  // restoring the last checkpoint. Describe shows the move as a transition
  // to SecondaryStatus Restarting (a status the service's model lists
  // without a meaning), whose message names the capacity, then Starting.
  // MaxRuntimeInSeconds and MaxWaitTimeInSeconds count on over the attempts,
  // as they do across interruptions. A job already on that capacity is left
  // as it is (OK).
  // Threading: any thread, as every method.
  // Errors: InvalidArgument for a malformed name; NotFound for an unknown
  // job; FailedPrecondition when the job is not InProgress, does not have
  // EnableManagedSpotTraining, is handling an interruption or another move,
  // or has finished training (Uploading).
  virtual absl::Status MigrateTrainingJob(std::string_view job_name, bool to_spot) = 0;

  // Injects a fault into the instance `host_name` (algo-1, ...) of the job's
  // current cluster, as the platform would cause it: a spot interruption
  // notice with `notice` before the instance is taken back, or an instance
  // loss now. For tests and chaos drills.
  // Errors: NotFound for an unknown job or host; FailedPrecondition when the
  // job holds no instances now; Unimplemented when the cluster provider cannot
  // inject faults.
  virtual absl::Status InjectInterruption(std::string_view job_name, std::string_view host_name,
                                          InterruptionKind kind, absl::Duration notice) = 0;
};

// Creates an engine. Errors: InvalidArgument when a required option is missing
// (cluster_provider may be null only with a read-only journal); with a
// journal, what recovery returns (see EngineOptions::journal).
absl::StatusOr<std::unique_ptr<Engine>> NewEngine(EngineOptions options);

}  // namespace kiln

#endif  // KILN_ENGINE_H_
