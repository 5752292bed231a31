// Workloads for the simulation backend: streams of CreateTrainingJob
// submissions, generated or replayed, for kiln::sim::RunScenario
// (kiln/sim/scenario.h) or any other driver of an engine in virtual time.
//
// A WorkloadGenerator submits jobs to a WorkloadSink (the driver) by
// scheduling its own events on the sink's loop; closed-loop generators (an
// HPO sweep, a user who waits for a result before the next experiment) hear
// when their jobs end. Shipped generators:
// - NewHpoSweep: sweeps of N trials with P running at once; the tuner
//   submits the next trial a short gap after one ends.
// - NewNightlyBatch: one job per city, M cities, every day at a set time.
// - NewInteractive: U users, each submitting a job, waiting for it to end,
//   thinking (a lognormal think time), submitting the next.
// - NewTraceReplay: JSON Lines of {"arrival", "request", "sim"} (see
//   ParseJobTrace).
// A mix is several generators on one sink.
//
// Every draw a generator makes is keyed by the job it is for (its index in
// the generator), so a job looks the same under every policy even when
// policies change the order in which things happen.
//
// Threading: loop thread only.
#ifndef KILN_SIM_WORKLOAD_H_
#define KILN_SIM_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/event_loop.h"
#include "kiln/sim/models.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln::sim {

// The longest duration a scenario file or a job trace may give (3650 days,
// about 10 years). A virtual loop counts int64 nanoseconds from the Unix
// epoch (up to the year 2262) and starts in 2026: with every input duration
// this short, the start plus the horizon plus everything a run derives from
// them (the drain, a job's stages, a tuner's gap) stays far inside that range.
inline constexpr absl::Duration kMaxSimDuration = absl::Hours(24 * 3650);

// What the simulation needs to know about a job beyond its request.
struct SimJobAttributes {
  // Run time without interruptions (the job's work).
  absl::Duration work = absl::Minutes(10);
  // Progress is saved every this much work when the job has a
  // CheckpointConfig (a spot policy may set both); zero: no checkpoints.
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  int64_t image_bytes = 0;  // training image (cold pull)
  int64_t data_bytes = 0;   // per input channel
  // Passes over the data: a Pipe-mode job streams data_bytes this many
  // times during its work, and cannot run faster (SimJobBehavior::epochs).
  int32_t epochs = 1;
  // When the job must be done by, counted from its arrival (none: no deadline).
  std::optional<absl::Duration> deadline;
  // Whether a spot policy may run the job on spot capacity.
  bool spot_eligible = false;
  // Exit code of the training container (non-zero: an algorithm error at the
  // end of its work).
  int exit_code = 0;
  absl::Duration upload = absl::Seconds(5);
};

// One submission.
struct SimJob {
  std::string name;  // its TrainingJobName
  // The request, whatever its TrainingJobName says (the driver names it);
  // usually one template shared by all the jobs of a generator.
  std::shared_ptr<const v1::CreateTrainingJobRequest> request;
  SimJobAttributes attributes;
};

class WorkloadGenerator;

// Where generators submit jobs. Implemented by the driver.
class WorkloadSink {
 public:
  virtual ~WorkloadSink() = default;
  // The loop the generator schedules its events on.
  virtual EventLoop& loop() = 0;
  // Jobs arriving at or after this time are not submitted (generators stop).
  virtual absl::Time horizon_end() const = 0;
  // Creates the job now. `from` hears when it ends: OnJobEnded(tag).
  virtual void Submit(SimJob job, WorkloadGenerator* from, uint64_t tag) = 0;
};

class WorkloadGenerator {
 public:
  virtual ~WorkloadGenerator() = default;
  // Starts generating; `sink` must outlive the generator's events.
  virtual void Start(WorkloadSink& sink) = 0;
  // A job it submitted with `tag` ended (Completed, Failed or Stopped), now.
  virtual void OnJobEnded(uint64_t tag) {}
  // How many jobs it will submit before the horizon, if known (0: unknown).
  virtual int64_t ExpectedJobs() const { return 0; }
};

// What each generated job looks like.
struct JobTemplate {
  // The request; TrainingJobName is set per job. See DefaultRequest().
  v1::CreateTrainingJobRequest request;
  // Work per job (lognormal around the median; max_factor bounds it).
  DurationDist work{absl::Minutes(30), 0.5, 10};
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  int64_t image_bytes = 1340000000;  // the calibration table's 1.34 GB image
  int64_t data_bytes = 2000000000;   // and 2 GB of data
  int32_t epochs = 1;                // passes over the data (Pipe mode streams each)
  // > 0: deadline = deadline_slack * work after arrival.
  double deadline_slack = 0;
  bool spot_eligible = false;
  // Fraction of jobs that end with an algorithm error (exit code 1).
  double algorithm_error_rate = 0;
};

// A valid request for `count` x `instance_type`, one channel "train" in
// `input_mode` ("File", "FastFile", "Pipe", or "FSx" for an FSx for Lustre
// FileSystemDataSource read in File mode), KeepAlivePeriodInSeconds
// `keep_alive_seconds` (0: none), MaxRuntimeInSeconds 28 days.
v1::CreateTrainingJobRequest DefaultRequest(std::string_view instance_type, int32_t count,
                                            std::string_view input_mode, int32_t keep_alive_seconds);

struct HpoSweepOptions {
  std::string name = "hpo";  // job names: <name>-<sweep>-<trial>
  JobTemplate job;
  int32_t trials = 100;
  int32_t parallelism = 10;
  int32_t sweeps = 1;
  absl::Duration first_start = absl::ZeroDuration();  // after the sink's start
  absl::Duration every = absl::Hours(24);             // between sweep starts
  // The tuner's delay between a trial's end and the next submission.
  DurationDist gap{absl::Seconds(10), 0.5};
};
// An HPO tuner: `sweeps` sweeps, `every` apart; each submits `trials` jobs,
// at most `parallelism` running at once, the next one `gap` after a trial
// ends. Like every generator, it submits nothing at or after the sink's
// horizon_end(): a sweep still short of `trials` then stops there. The jobs
// and every draw depend on the seed alone; when they are submitted, also on
// when trials end.
std::unique_ptr<WorkloadGenerator> NewHpoSweep(HpoSweepOptions options, uint64_t seed);

struct NightlyBatchOptions {
  std::string name = "nightly";  // job names: <name>-d<day>-<city>
  JobTemplate job;
  int32_t cities = 50;
  int32_t days = 7;
  absl::Duration at = absl::Hours(2);       // after the start of each day
  absl::Duration spread = absl::Minutes(30);  // arrivals uniform in [at, at + spread)
};
// A nightly batch: every day for `days` days, one job per city, arriving in
// [at, at + spread) after the day's start, whether or not yesterday's ended.
// The same seed gives the same jobs at the same times.
std::unique_ptr<WorkloadGenerator> NewNightlyBatch(NightlyBatchOptions options, uint64_t seed);

struct InteractiveOptions {
  std::string name = "dev";  // job names: <name>-u<user>-<k>
  JobTemplate job;
  int32_t users = 10;
  int32_t jobs_per_user = 20;
  absl::Duration start_spread = absl::Hours(1);  // first jobs uniform in [0, spread)
  DurationDist think_time{absl::Minutes(5), 1.0, 20};
};
// Interactive experimentation: each of `users` users submits
// `jobs_per_user` jobs one after another, the next `think_time` after the
// previous one ended. The jobs and every draw depend on the seed alone; when
// they are submitted, also on when jobs end.
std::unique_ptr<WorkloadGenerator> NewInteractive(InteractiveOptions options, uint64_t seed);

// One line of a job trace.
struct TraceEntry {
  absl::Duration arrival;  // after the sink's start
  SimJob job;
  int64_t line = 0;  // its line in the text ParseJobTrace read (from 1)
};

// Parses JSON Lines, one job per line (blank lines skipped):
//   {"arrival": 120, "request": {<CreateTrainingJob JSON>},
//    "sim": {"work": 1800, "checkpoint_every": 300, "image_bytes": 1340000000,
//            "data_bytes": 2000000000, "epochs": 1, "deadline": 7200, "spot_eligible": true,
//            "exit_code": 0, "upload": 5}}
// `arrival` is seconds after the start; "sim" and each of its members are
// optional (defaults of SimJobAttributes). Every duration (arrival, work,
// checkpoint_every, deadline, upload) is at most kMaxSimDuration. The request
// is read with kiln::ParseJson (which refuses an empty list where the model
// requires elements, with the request's other violations); it must name the
// job, and is not validated otherwise (a replay shows how the engine refuses
// invalid requests; kiln::sim::ParseScenario validates them at load). Entries are returned
// sorted by arrival (ties keep file order).
// Errors: InvalidArgument naming the line and the problem.
absl::StatusOr<std::vector<TraceEntry>> ParseJobTrace(std::string_view jsonl);

// Replays `entries` (as ParseJobTrace returns them: sorted by arrival): each
// job is submitted at its arrival after the sink's start; entries past the
// horizon are not.
std::unique_ptr<WorkloadGenerator> NewTraceReplay(std::vector<TraceEntry> entries);

}  // namespace kiln::sim

#endif  // KILN_SIM_WORKLOAD_H_
