// The simulation backend: components that model instead of doing, for running
// the engine in virtual time. Nothing here blocks or starts a thread; every
// completion is an event scheduled on the engine's loop.
//
// SimClusterProvider models provisioning latency, capacity shortage, image
// preparation, a container run (duration, paced by Pipe-mode streaming,
// log lines, exit code, failure
// file, reaction to SIGTERM), spot interruptions, node failures and artifact
// upload, per job, and keeps the bill (instance time and cost of every
// cluster, busy or idle in a warm pool). SimDataChannel models channel
// delivery time per input mode: File downloads the channel before training
// (set-up + size / rate), FastFile and FSx pay their metadata or mount time,
// Pipe its FIFO set-up; a Pipe stream's time counts in the run itself
// (SimJobBehavior::epochs).
//
// Two levels of modelling, which combine:
// - Per job, SimJobBehavior says exactly what happens (fixed latencies, a
//   scripted list of spot notices and node losses per attempt). Tests use it
//   to script a flow to the second.
// - With SimClusterOptions::models set (kiln/sim/models.h), the provider
//   draws from the models instead: cold provisioning latency, container start
//   and image pull per instance type; on-demand capacity limits; spot
//   availability and preemptions (traces or hazards) with their notice;
//   node failures from the failure process; prices. Draws are keyed by job
//   and attempt (KeyedRng), so they do not depend on what else runs.
//
// Threading: loop thread only, like every component.
#ifndef KILN_SIM_SIM_H_
#define KILN_SIM_SIM_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "kiln/cluster_provider.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/sim/models.h"

namespace kiln::sim {

// How one simulated job behaves.
struct SimJobBehavior {
  // Cold provisioning. With models, drawn from the instance type instead.
  absl::Duration provision_latency = absl::Seconds(60);
  // The first `capacity_failures` Provision calls of the job report
  // insufficient capacity (ResourceExhausted), each after this latency
  // (with models: after SimModels::capacity_error_latency).
  int capacity_failures = 0;
  absl::Duration capacity_error_latency = absl::Seconds(5);
  // Image preparation on a cluster that does not have the image yet. With
  // models: the pull of `image_bytes` (this value when image_bytes is 0) plus
  // the container start drawn from the instance type; a cluster that has the
  // image (a warm-pool reuse) pays the container start only.
  absl::Duration image_preparation = absl::Seconds(30);
  int64_t image_bytes = 0;
  // From entrypoint start to exit.
  absl::Duration run_duration = absl::Minutes(10);
  // Exit code of the instance at `failing_instance` (0-based, in cluster
  // order); the other instances exit 0 at the same time.
  int exit_code = 0;
  int failing_instance = 0;
  std::string failure_text;  // what that instance wrote to /opt/ml/output/failure
  // After SIGTERM a container exits 0 after this delay; InfiniteDuration()
  // means it ignores SIGTERM and only SIGKILL ends it (exit code 137).
  absl::Duration sigterm_exit_delay = absl::Seconds(1);
  // Lines every container writes, at these offsets from its start.
  std::vector<std::pair<absl::Duration, std::string>> log_lines;
  absl::Duration upload_duration = absl::Seconds(5);

  // Spot interruption notices, as offsets from the start of each attempt's
  // containers: entry k applies to attempt k+1 (InfiniteDuration(): none).
  // The instance (the first) is lost `spot_notice` after its notice.
  std::vector<absl::Duration> spot_notices;
  absl::Duration spot_notice = absl::Minutes(2);
  // Node failures, in the same form: instance `lost_instance` fails then.
  std::vector<absl::Duration> instance_losses;
  int lost_instance = 0;

  // Work model: run_duration is the job's total work. With a CheckpointConfig
  // in the request and a positive interval, progress is saved every
  // `checkpoint_interval` of work, under `checkpoint_key`, or the
  // CheckpointConfig's S3Uri when that is empty: a restarted attempt, or a
  // new job with the same key, resumes from the last saved progress.
  // Otherwise a restart starts from nothing. (A key lets jobs that share one
  // request, e.g. from a PreparedTrainingJob, keep their progress apart.)
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  std::string checkpoint_key;

  // Streamed input: a run whose request reads channels in Pipe mode (the
  // channel's InputMode, else AlgorithmSpecification.TrainingInputMode; not
  // FileSystemDataSource channels) cannot train faster than they stream.
  // With SimClusterOptions::channel_bytes set, every attempt streams the
  // largest Pipe channel's bytes `epochs` times at the Pipe rate (with
  // models: SimModels::data.pipe_rate, drawn per job and attempt; without:
  // `pipe_mb_per_s`), and the run's work is paced so that the whole work
  // takes max(run_duration, bytes * epochs / rate) of wall time. Progress,
  // checkpoints and restarts stay in units of work: a restarted attempt
  // streams the share of the epochs it has left.
  int32_t epochs = 1;
  double pipe_mb_per_s = 450;
};

// What the simulation did for one job, for tests and reports.
struct SimJobStats {
  int attempts = 0;                 // StartContainers calls
  absl::Duration work_executed;     // work run over all attempts, redone work included
  absl::Duration progress;          // saved progress when the last attempt ended
  bool completed = false;           // the last attempt ran all remaining work
  int spot_interruptions = 0;       // spot notices given to the job's clusters
  int instance_failures = 0;        // instances lost to node failures
  bool warm_start = false;          // the first attempt ran on a cluster reused from a warm pool
  int32_t instance_count = 0;       // instances of the job's last cluster
  // The job still holds its last cluster: the engine kept it in a warm pool
  // (set by ForgetJob; on_cluster_freed names the job when it lets go).
  bool holds_cluster = false;

  // Work run that did not end up in the final progress (redone after an
  // interruption, or lost with a job that did not complete).
  absl::Duration lost_work() const {
    return work_executed > progress ? work_executed - progress : absl::ZeroDuration();
  }
};

// The bill of a provider: instance time (instance-seconds as durations) and
// cost of every cluster from the moment Provision granted it until Release.
struct SimAccounting {
  absl::Duration on_demand_busy;  // on-demand instance time used by jobs
  absl::Duration spot_busy;       // spot instance time used by jobs
  absl::Duration warm_idle;       // instance time kept idle between jobs (warm pools)
  double cost = 0;                // dollars: busy time at its price, idle at on-demand
  int64_t clusters = 0;           // clusters granted
  int64_t capacity_refusals = 0;  // Provision calls answered ResourceExhausted
  int64_t spot_preemptions = 0;   // notices given by the spot market or the behaviour
  int64_t node_failures = 0;      // instances lost to node failures
};

struct SimClusterOptions {
  SimJobBehavior defaults;
  // Returns the behaviour of the named job; null means `defaults` for all.
  // Called at each Provision (with models: each one the capacity admits)
  // and StartContainers of the job.
  std::function<SimJobBehavior(std::string_view job_name)> behavior;
  // When set, filled per job name. Must outlive the provider.
  std::map<std::string, SimJobStats>* stats = nullptr;
  // The models (see the file comment); null: SimJobBehavior alone decides.
  std::shared_ptr<const SimModels> models;
  // Called, on the loop thread, when the cluster a job ran on last is
  // released or taken over by another job (a warm-pool reuse): from then on
  // the job holds no warm pool. Must not call the provider or the engine
  // inline (schedule that on the loop).
  std::function<void(std::string_view job_name)> on_cluster_freed;
  // Size in bytes of a job's input channel, for Pipe-mode streaming (see
  // SimJobBehavior::epochs); null: no channel is streamed (Pipe costs its
  // set-up only). Use the same function as SimDataChannelOptions.
  std::function<int64_t(std::string_view job_name, std::string_view channel_name)> channel_bytes;
};

// The simulated provider: a ClusterProvider plus the simulation's own
// controls. The engine sees only the ClusterProvider part.
class SimClusterProvider : public ClusterProvider {
 public:
  // What the provider recorded for `job` so far (zero for an unknown job).
  // A job is known by the job id an engine gives it (ClusterSpec::job_id,
  // JobContext::job_id), or by its name for a caller that gives none. A job
  // deleted and created again under its name starts afresh, and its name then
  // finds the newer job.
  // Loop thread only, like every method of the provider.
  virtual SimJobStats JobStats(std::string_view job) const = 0;

  // The progress `job` has saved by now: its running attempt's last
  // checkpoint (all of its work once the attempt has run it), or what its
  // last attempt saved; zero for an unknown job. Unlike
  // JobStats().progress, it moves while an attempt runs.
  virtual absl::Duration SavedProgress(std::string_view job) const = 0;

  // Whether Provision would grant spot capacity for `spec` now (its groups'
  // instance types and counts; spec.spot is ignored): what a policy that
  // takes spot whenever it is there asks. Always true without models, whose
  // spot capacity never runs short.
  virtual bool SpotAvailable(const ClusterSpec& spec) = 0;

  // Ends what the provider keeps about `job` (attempt counts, failure
  // process, statistics) and returns its final statistics. Call it once the
  // job has ended, before a job of the same name is created again (else the
  // older job's state stays until the provider goes). Saved
  // progress under the job's checkpoint key is kept (see ForgetCheckpoint).
  // What happens afterwards on a cluster the job held (a warm pool's: a spot
  // notice, a lost instance) counts for no job until another job runs on it;
  // not for a later job of the same name.
  virtual SimJobStats ForgetJob(std::string_view job) = 0;

  // Drops the progress saved under a checkpoint key
  // (SimJobBehavior::checkpoint_key, or a CheckpointConfig S3Uri).
  virtual void ForgetCheckpoint(std::string_view key) = 0;

  // The bill so far: released clusters, plus clusters still held up to now.
  virtual SimAccounting Accounting() const = 0;
};

// Returns a simulated ClusterProvider on `loop`, which must outlive it (destroy
// the provider first: its destructor cancels the events it still has pending
// on the loop, and a completion it owed is then never called). Spot
// availability traces start at the loop's time when the provider is created.
std::unique_ptr<SimClusterProvider> NewSimClusterProvider(EventLoop& loop,
                                                          SimClusterOptions options = {});

struct SimDataChannelOptions {
  // Time to deliver one channel (all channels of a job are delivered in
  // parallel). `duration`, when set, decides per job and channel.
  absl::Duration per_channel = absl::Seconds(10);
  std::function<absl::Duration(std::string_view job_name, std::string_view channel_name)> duration;
  // With models (and no `duration`): the time is drawn from
  // SimModels::data for the channel's input mode ("FSx" for a
  // FileSystemDataSource) and its size from `channel_bytes` (0 when unset),
  // keyed by job, attempt and channel.
  std::shared_ptr<const SimModels> models;
  std::function<int64_t(std::string_view job_name, std::string_view channel_name)> channel_bytes;
};

// Returns a simulated DataChannel on `loop`, which must outlive it.
std::unique_ptr<DataChannel> NewSimDataChannel(EventLoop& loop, SimDataChannelOptions options = {});

}  // namespace kiln::sim

#endif  // KILN_SIM_SIM_H_
