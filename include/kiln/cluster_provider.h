// ClusterProvider: where a training job's instances come from and where its
// containers run.
//
// The engine asks a provider for a cluster (one or more instance groups, spot
// or on-demand), has it prepare the training image on every instance, run the
// container on every instance, signal the containers, upload the artifacts and
// release the cluster. Implementations: the simulation backend
// (kiln/sim/sim.h: modelled latencies in virtual time) and the local backend
// (kiln/local/local.h: instances are directories on this host, containers are
// processes).
//
// Threading: every method is called on the engine's loop thread and must not
// block: a provider that does blocking work does it on its own threads and
// posts the completion to the loop (EventLoop::Post). Every completion callback
// runs on the loop thread, exactly once, and never inline inside the call that
// started the work.
#ifndef KILN_CLUSTER_PROVIDER_H_
#define KILN_CLUSTER_PROVIDER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln {

// The group name a homogeneous cluster's instances report, as the service's
// training toolkit does.
inline constexpr char kHomogeneousGroupName[] = "homogeneousCluster";

// One instance group of a cluster request.
struct InstanceGroupSpec {
  std::string name;           // InstanceGroupName, or kHomogeneousGroupName
  std::string instance_type;  // e.g. "ml.m5.xlarge"
  int32_t count = 0;
};

// What the engine asks for.
struct ClusterSpec {
  std::string job_name;
  std::vector<InstanceGroupSpec> groups;  // in the request's order
  bool spot = false;
  int32_t volume_size_in_gb = 0;
  // The job's number in its engine (see JobContext::job_id), 0 if none.
  uint64_t job_id = 0;
};

// One instance of a provisioned cluster. Host names are algo-1 .. algo-N,
// numbered across all groups in group order.
struct Instance {
  std::string id;  // provider-specific, unique within the provider
  std::string host_name;
  std::string group_name;
  std::string instance_type;
};

// The input mode `channel` of `request` is delivered in: the channel's own InputMode, or the
// algorithm's TrainingInputMode when it names none ("File", "Pipe" or "FastFile" in a valid
// request). The reference lives as long as `request`.
inline const std::string& EffectiveInputMode(const v1::CreateTrainingJobRequest& request,
                                             const v1::Channel& channel) {
  return channel.has_input_mode() ? channel.input_mode()
                                  : request.algorithm_specification().training_input_mode();
}

// Whether the instances of group `group_name` receive `channel`: all instances do when the
// channel's S3DataSource names no InstanceGroupNames, otherwise those of the groups it names.
inline bool ChannelReachesGroup(const v1::Channel& channel, std::string_view group_name) {
  const auto& groups = channel.data_source().s3_data_source().instance_group_names();
  if (groups.empty()) return true;
  for (const std::string& g : groups) {
    if (g == group_name) return true;
  }
  return false;
}

struct Cluster {
  std::string id;  // provider-specific, unique within the provider
  std::vector<Instance> instances;
  bool spot = false;
};

// How one container ended. Later versions may add fields: set them by name
// (`ContainerExit exit; exit.exit_code = 1;`) rather than by position, which
// -Wextra then reports as missing initializers.
struct ContainerExit {
  int exit_code = 0;  // the process's exit status; 128 + signal when killed by one
  // Contents of /opt/ml/output/failure (the engine keeps the first 1024
  // characters), empty when the container wrote none.
  std::string failure_text;
  // Why /opt/ml/output/failure is there but could not be read, naming it and
  // the reason (e.g. "read 'algo-1:/opt/ml/output/failure': Is a directory");
  // empty when it was read or does not exist. The engine adds it to what the
  // FailureReason says without the file.
  std::string failure_error;
};

// What a container run needs to know about its job. References are valid only
// during the call that receives them: copy what you keep.
struct JobContext {
  std::string_view job_name;
  std::string_view job_arn;
  // The job's request, without its TrainingJobName: the engine keeps one
  // request for all the jobs made from a PreparedTrainingJob (kiln/engine.h),
  // and every job's request the same way. The job's name is job_name.
  const v1::CreateTrainingJobRequest& request;
  const Cluster& cluster;
  int32_t attempt = 1;  // 1 for the first run, +1 per restart
  // The job's number in its engine: given at CreateTrainingJob, never given
  // to another job of that engine (a job deleted and created again under its
  // name gets a new one), and larger for later jobs. A provider that keeps
  // state per job can key it by this number instead of hashing names. 0 when
  // the caller is not an engine and gives none.
  uint64_t job_id = 0;
  // Reattach only: `cluster` is one a warm pool kept after the job ended
  // (ClusterProvider::Recycle); no container of the job runs on it.
  bool warm_pool = false;
};

// Receives what happens to the containers of one StartContainers call. Loop
// thread only. Implemented by the engine; it outlives the containers (until
// the provider's Release of the cluster returns).
class ContainerEvents {
 public:
  virtual ~ContainerEvents() = default;
  // A line the container wrote to stdout or stderr, without its newline.
  virtual void OnLogLine(const Instance& instance, std::string_view line) = 0;
  // The container on `instance` ended. Called once per instance.
  virtual void OnExit(const Instance& instance, const ContainerExit& exit) = 0;
};

// What happens to instances outside any one call: spot interruption notices
// and instances lost to a failure. The engine sets one listener per provider.
// Loop thread only.
class ClusterListener {
 public:
  virtual ~ClusterListener() = default;
  // The instance will be taken back at `deadline` (the service gives 2 minutes).
  virtual void OnInterruptionNotice(const Cluster& cluster, const Instance& instance,
                                    absl::Time deadline) = 0;
  // The instance is gone (node failure, or the end of a spot notice): its
  // container, if any, will not report an exit.
  virtual void OnInstanceLost(const Cluster& cluster, const Instance& instance) = 0;
};

// What an injected fault stands for.
enum class InterruptionKind {
  kSpotNotice,    // a spot interruption notice; the instance is lost at its deadline
  kInstanceLoss,  // the instance fails now (a node failure)
};

// Where the artifacts went.
struct ArtifactsResult {
  // e.g. s3://bucket/out/job/output/model.tar.gz; with OutputDataConfig
  // CompressionType NONE the prefix the model's files went under,
  // s3://bucket/out/job/output/model/
  std::string model_uri;
};

class ClusterProvider {
 public:
  using ClusterCallback = absl::AnyInvocable<void(absl::StatusOr<Cluster>)>;
  using DoneCallback = absl::AnyInvocable<void(absl::Status)>;
  using ArtifactsCallback = absl::AnyInvocable<void(absl::StatusOr<ArtifactsResult>)>;

  virtual ~ClusterProvider() = default;

  // Obtains instances for `spec`. `done` receives the cluster, or:
  // ResourceExhausted when capacity is short right now (the engine shows
  // Pending and asks again later); any other error fails the job with the
  // status's message. Called exactly once.
  virtual void Provision(const ClusterSpec& spec, ClusterCallback done) = 0;

  // Makes the training image `image` ready on every instance of `cluster`
  // (fetch and unpack on a cold instance; nothing on a warm one that has it).
  // `done` gets OK or an error that fails the job. Called exactly once.
  virtual void PrepareImage(const Cluster& cluster, std::string_view image, DoneCallback done) = 0;

  // Starts the job's container on every instance of the cluster. `started`
  // gets OK once every entrypoint is running, or an error that fails the job.
  // Afterwards `events` gets the log lines and exactly one OnExit per
  // instance (unless the cluster is released first or the instance is lost).
  // `events` must outlive the containers, i.e. until Release(cluster)
  // returns or the next StartContainers on the cluster.
  // When the request has a CheckpointConfig, the provider restores the
  // checkpoints into LocalPath before each entrypoint starts, syncs them to
  // S3Uri while it runs, and completes a last sync before reporting OnExit
  // (see kiln/checkpoint_sync.h). A cluster reused from a warm pool starts
  // every job with fresh input, model, output and checkpoint directories.
  virtual void StartContainers(const JobContext& job, ContainerEvents& events,
                               DoneCallback started) = 0;

  // Sends `signal` (SIGTERM, SIGKILL) to the containers of `cluster` that are
  // still running; a no-op for those that have ended.
  virtual void Signal(const Cluster& cluster, int signal) = 0;

  // Uploads /opt/ml/model and /opt/ml/output/data of the cluster's instances to
  // <S3OutputPath>/<job>/output/ (model.tar.gz, output.tar.gz; with
  // OutputDataConfig.CompressionType NONE the model's files as they are,
  // below model/). Called exactly once; an error fails the job.
  virtual void UploadArtifacts(const JobContext& job, ArtifactsCallback done) = 0;

  // Sets the listener for interruption notices and lost instances of every
  // cluster of this provider. `listener` must outlive the provider's clusters.
  // Default: the provider never reports such events.
  virtual void SetListener(ClusterListener* listener) {}

  // Injects a fault into the instance `instance_id` of a provisioned cluster,
  // as if the platform had caused it: a spot notice with `notice` until the
  // instance is lost, or an instance loss now. For tests and chaos drills.
  // Errors: NotFound for an unknown instance; Unimplemented by default.
  virtual absl::Status InjectInterruption(std::string_view instance_id, InterruptionKind kind,
                                          absl::Duration notice) {
    return absl::UnimplementedError("this ClusterProvider does not support injected interruptions");
  }

  // Takes back the running containers of a job that an earlier engine
  // started (the engine recovered it from its journal, kiln/journal.h):
  // `job.cluster` is the cluster as that engine held it, and `job.attempt`
  // the attempt its containers belong to. Returns OK when the provider has
  // them again: `events` then receives their log lines and exactly one
  // OnExit per instance, as after StartContainers, and the cluster is the
  // engine's again (Signal, UploadArtifacts, Release). Any error means it
  // cannot (FailedPrecondition by default, which every provider may return):
  // the engine counts the attempt's instances as lost and never uses the
  // cluster. With job.warm_pool, the engine asks for the cluster of a warm
  // pool that was Available: OK means the cluster is the engine's again, as
  // after Recycle (PrepareImage, StartContainers or Release come next), and
  // `events` is never called. Loop thread only; must not block.
  virtual absl::Status Reattach(const JobContext& job, ContainerEvents& events) {
    return absl::FailedPreconditionError(
        "this ClusterProvider cannot take back the containers of an earlier engine");
  }

  // Says that `cluster` stays provisioned for a later job: a warm pool kept it
  // after its job ended (UploadArtifacts has completed). A provider may make
  // the instances ready for the next job now, in the background (e.g. reset
  // their file trees), so that the next PrepareImage has less to do; the next
  // call on the cluster is PrepareImage or Release, and either must wait for
  // such work. Default: nothing.
  virtual void Recycle(const Cluster& cluster) {}

  // Gives the cluster back: stops anything still running on it (containers,
  // copies) and frees its instances. After Release returns, `events` of the
  // cluster's containers is never called again; completion callbacks of work
  // still in flight may run or be dropped, and the engine ignores them. Never
  // fails from the engine's point of view (a provider retries its own clean-up).
  virtual void Release(const Cluster& cluster) = 0;
};

}  // namespace kiln

#endif  // KILN_CLUSTER_PROVIDER_H_
