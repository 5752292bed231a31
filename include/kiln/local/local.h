// The local backend: real training containers on this machine, with the
// SageMaker container contract. How it works (the state directory, the
// runtimes, supervision, FastFile views) is in docs/local-backend.md; what
// each runtime isolates, and what it does not, in docs/security.md.
//
// The provider's instances are directories on this host, one per machine of
// a cluster; a container is the job's entrypoint run as a process tree on
// its instance, as a child process (LocalRuntime::kProcess) or inside
// bubblewrap (kBwrap), with the service's /opt/ml tree and SM_* environment.
// The data channel delivers input channels from the stores of an
// ObjectStores into /opt/ml/input/data, in File, FastFile and Pipe mode.
// Both work over one state directory; NewLocalBackend makes the pair.
//
//   auto loop = kiln::NewRealTimeEventLoop();
//   auto file_store = kiln::NewFileObjectStore();
//   kiln::ObjectStores stores;
//   stores.Register("file", file_store.get());
//   kiln::local::LocalOptions options;
//   options.state_dir = "/var/lib/kiln";
//   auto backend = kiln::local::NewLocalBackend(*loop, stores, options).value();
//   // kiln::EngineOptions{.loop = loop.get(),
//   //                     .cluster_provider = backend.cluster_provider.get(),
//   //                     .data_channel = backend.data_channel.get()} ...
//
// What the provider's calls report to the engine, besides the errors of
// ObjectStore and of the file system (which name the path):
// - Provision: ResourceExhausted beyond max_instances, and only then (the
//   engine keeps the job Pending and asks again); FailedPrecondition, naming
//   the file and the system's reason, when the state directory has no room
//   for the cluster's files (the engine fails the job).
// - PrepareImage: InvalidArgument for an image that is not a local directory
//   or tarball (an absolute path or file:// URI), NotFound when it does not
//   exist. A warm cluster's PrepareImage waits for its earlier containers and
//   makes the instance's /opt/ml tree and scratch space anew: nothing of an
//   earlier job is readable by the next.
// - StartContainers: FailedPrecondition for an image without an executable
//   `train` (in <image>/opt/program, else the image's top directory) when no
//   ContainerEntrypoint is set, for a cluster with a lost instance, or for
//   CheckpointConfig without object_stores; InvalidArgument naming
//   CheckpointConfig.LocalPath for one that is not a clean absolute path,
//   and, on the process runtime, for one outside /opt/ml; NotFound /
//   PermissionDenied when the entrypoint cannot be executed; Internal, with
//   bubblewrap's own message, when the sandbox cannot be set up.
// - UploadArtifacts: writes <S3OutputPath>/<job>/output/model.tar.gz (with
//   CompressionType NONE, each file of the model below .../output/model/,
//   the model's URI being that prefix) and output.tar.gz, merged over the
//   instances (later hosts win). FailedPrecondition naming the path (e.g.
//   "algo-1:/opt/ml/model") when a container replaced /opt/ml/model,
//   /opt/ml/output or /opt/ml/output/data, or a directory on the way, by a
//   symbolic link or a file; nothing of that tree is read.
// - OnExit: ContainerExit::failure_error names /opt/ml/output/failure and the
//   reason when it is there but not read (a link, a directory, an error).
//
// Signals: Signal(SIGTERM) reaches every process of the container (on the
// process runtime, those still in its process group); SIGKILL ends the whole
// tree. A container's end, Release and the provider's destruction kill every
// process of the container; so does the death of the process running the
// provider, at once, or, with a `reattach_lease`, once the lease has run out
// without a provider taking the container back (Reattach).
//
// Reattach: with a `reattach_lease`, a provider made on the state directory
// takes back the containers of a cluster that a process now gone started
// (JobContext::cluster names it), when their keepers still run: log lines
// and OnExit reach the new `events`, the log stream goes on in the same file
// (no line lost or repeated), checkpoints are synced on; a warm pool's
// cluster (JobContext::warm_pool, kept by Recycle) is the engine's again for
// its next job. FailedPrecondition
// when it cannot (no lease, the bwrap runtime, a cluster it does not have,
// an instance whose container is gone). The clusters of processes that are
// gone that no Reattach takes within the lease are deleted then.
//
// Logs: a container's stdout and stderr reach ContainerEvents::OnLogLine line
// by line (without the newline; a line longer than 64 KiB comes in pieces)
// and the log stream <log_dir>/<job>/algo-<k>-<epoch>[-<n>], one file per
// run, which also holds Kiln's own lines, prefixed "[kiln] ". A log stream
// that cannot be written never fails the job: observers get every line, and
// one line starting "[kiln] the log stream cannot be written: " naming the
// file and the reason. The time each line was written is kept beside it,
// under <log_dir>/.times/ (NewLocalLogReader reads both).
//
// Checkpoints: with CheckpointConfig, LocalPath (default /opt/ml/checkpoints)
// is restored from S3Uri before the entrypoint starts, synced every
// `checkpoint_sync_interval` while it runs and once more before OnExit, and
// made empty before every job. A sync error does not fail the job; it is a
// "[kiln] checkpoint sync" line in the log stream.
//
// Threading: the provider and the data channel are loop thread only, like
// every component; they do their blocking work on their own threads and post
// completions to the loop. The factories are thread-safe.
#ifndef KILN_LOCAL_LOCAL_H_
#define KILN_LOCAL_LOCAL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/cluster_provider.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/log_reader.h"
#include "kiln/object_store.h"

namespace kiln::local {

enum class LocalRuntime {
  // A child process in a process group of its own, with SAGEMAKER_BASE_DIR
  // and the SM_* paths at the instance's tree on this host (arguments that
  // start with /opt/ml or /opt/program are rewritten to it). Not a sandbox:
  // the container sees the host as the container user does, and host names
  // algo-<k> do not resolve (a part of a cluster that spans hosts names a
  // hosts file instead: ProvisionPart). The image and FastFile channels are
  // read-only to it where this process can make a mount namespace. The
  // default.
  kProcess,
  // bubblewrap: a sandbox as the container user, the tree mounted at
  // /opt/ml, a read-only host root, the state directory hidden, host names
  // algo-<k> resolving to the cluster's instances.
  kBwrap,
};

// A user and group of this host.
struct ContainerUser {
  uint32_t uid = 65534;
  uint32_t gid = 65534;
};

struct LocalOptions {
  // Where instances, logs and caches live. Required; created when missing.
  // When the containers run as another user than this process, it and every
  // directory above it must be searchable by that user.
  std::string state_dir;
  // Who the containers' processes are on this host. Unset: nobody and nogroup
  // (65534) when this process runs as root, this process's own user
  // otherwise. Only root may name another user than its own; naming root
  // (0) runs containers as root, with every capability dropped under bwrap
  // (not a safe choice for jobs of others). The container user owns what a
  // run may write (/opt/ml/model, output, checkpoints, code, tmp) and must be
  // able to read the image and the job's file:// FastFile sources.
  std::optional<ContainerUser> container_user;
  LocalRuntime runtime = LocalRuntime::kProcess;
  // Serves checkpoint sync (CheckpointConfig.S3Uri) and artifact upload
  // (S3OutputPath). Optional; must outlive the provider. Without it a job that
  // needs either fails with FailedPrecondition.
  ObjectStores* object_stores = nullptr;
  // The bubblewrap program, for the bwrap runtime.
  std::string bwrap_path = "bwrap";
  // How many instances may exist at once, over all clusters; Provision beyond
  // it reports ResourceExhausted (the engine shows Pending). 0: no limit.
  int32_t max_instances = 0;
  // Where log streams go; empty means <state_dir>/logs.
  std::string log_dir;
  // Opt-in speed-up: unpack each image once into <state_dir>/image-cache and
  // give instances a link to it, so a cold instance does not pay the unpack
  // again. Off by default: an instance stands for a machine of its own.
  bool shared_image_cache = false;
  // How often a running container's checkpoint directory is synced.
  absl::Duration checkpoint_sync_interval = absl::Seconds(1);
  // SM_NUM_CPUS; 0 means the host's count. SM_NUM_GPUS is always 0.
  int32_t cpu_count = 0;
  // resourceconfig.json's network_interface_name and SM_NETWORK_INTERFACE_NAME:
  // the interface peers are reached through (loopback on this host).
  std::string network_interface_name = "lo";
  // How long the output of a container whose main process has exited is
  // still read (processes it left behind are killed first). The time between
  // SIGTERM and SIGKILL on a stop is the engine's
  // (EngineOptions::stop_grace_period): the provider only delivers signals.
  absl::Duration output_drain_timeout = absl::Seconds(2);
  // How long a container on the process runtime outlives the process running
  // the provider, for a provider made later on the same state directory to
  // take it back (Reattach, for an engine that recovers its jobs from a
  // journal). Zero: containers end with that process. Otherwise each
  // container's process keeper ends the container once no provider has held
  // it for this long; while none does, its output waits (up to the pipe's
  // size, then the container's writes wait too), and its exit status is kept
  // in the state directory. The bwrap runtime's containers always end with
  // the process (Reattach cannot take them back). At least one second.
  absl::Duration reattach_lease = absl::ZeroDuration();
};

// Returns a local ClusterProvider on `loop`, which must outlive it. The
// provider's destruction kills every container it started, waits for its
// threads and removes its instances (logs are kept).
// Errors: InvalidArgument when state_dir is empty or cannot be created (the
// message names the path), or when container_user names another user while
// this process is not root; FailedPrecondition when the container user cannot
// reach state_dir or log_dir (the message names the directory in the way),
// and for the bwrap runtime when `bwrap_path` cannot run a sandbox as the
// container user, or the seccomp filter cannot be built.
// Thread-safe.
absl::StatusOr<std::unique_ptr<ClusterProvider>> NewLocalClusterProvider(EventLoop& loop,
                                                                         LocalOptions options);

// A cluster spread over several hosts, of which one provider runs some
// instances (each host's `kiln agent` runs its own this way).
struct ClusterPart {
  // Every instance of the whole cluster in host order: instances[k] has
  // host_name "algo-<k+1>", its group_name and instance_type (ids are
  // ignored), and addresses[k] is the IPv4 or IPv6 address of the host it
  // runs on, where its peers reach it.
  std::vector<Instance> instances;
  std::vector<std::string> addresses;
  // The host names (algo-<k>) of the instances this provider runs: at least
  // one, each once.
  std::vector<std::string> here;
};

// A local ClusterProvider that can also run a part of a cluster that spans
// hosts.
class LocalClusterProviderInterface : public ClusterProvider {
 public:
  // Provision for the instances `part.here` of the cluster `part` describes.
  // `spec` gives the job's name and spot; its groups, when it has any, must
  // be the whole cluster's (instances of each group in order, with their
  // types and counts). The Cluster `done` gets lists only the part's
  // instances (ids unique in the provider, host names those of `part`), and
  // only they count against max_instances. It behaves as any local cluster
  // (PrepareImage, StartContainers, Signal, UploadArtifacts of the part's
  // instances, Recycle, Release, Reattach), except that:
  // - each container's resourceconfig.json and SM_* variables (SM_HOSTS,
  //   SM_CURRENT_HOST, SM_CURRENT_INSTANCE_GROUP_HOSTS, SM_INSTANCE_GROUPS,
  //   ...) describe the whole cluster, and their interface is
  //   LocalOptions::network_interface_name;
  // - host names resolve to `addresses`: a hosts(5) file (localhost lines,
  //   then "<address>\t<host>" for every instance of the whole cluster) is
  //   /opt/ml/input/config/hosts in each instance's tree, and the variable
  //   KILN_HOSTS_FILE names it as the container sees it (on the process
  //   runtime, where names do not resolve by themselves, below the
  //   instance's tree on this host). The bwrap runtime also binds it at
  //   /etc/hosts, and runs the part on the host's network, not a private
  //   one (its peers are on other hosts);
  // - ShardedByS3Key channels are the data channel's to split over the whole
  //   cluster: see ChannelDelivery::shard_count and shard_positions.
  // Errors, before anything is made: InvalidArgument naming the field and
  // the rule for a part whose instances are none or not algo-1 .. algo-N in
  // order, without a group or type, of a number other than its addresses,
  // with an address that is not IPv4 or IPv6, an empty `here`, a name in
  // `here` that is not one of the instances or given twice, or groups that
  // differ from `spec`'s; otherwise Provision's errors. Loop thread only,
  // like every call of the provider; `done` runs later on the loop, never
  // inline.
  virtual void ProvisionPart(const ClusterSpec& spec, const ClusterPart& part,
                             ClusterCallback done) = 0;
};

// NewLocalClusterProvider (same options, errors and ownership), as a provider
// that can also run parts. Thread-safe.
absl::StatusOr<std::unique_ptr<LocalClusterProviderInterface>> NewLocalClusterProviderWithParts(
    EventLoop& loop, LocalOptions options);

// The most bytes a ManifestFile or AugmentedManifestFile may hold: 256 MiB
// (read whole before the channel is delivered). A larger one fails the
// delivery with InvalidArgument.
inline constexpr int64_t kMaxManifestBytes = int64_t{256} << 20;

struct LocalDataChannelOptions {
  // The provider's state_dir: instances are found there by their id. Required.
  std::string state_dir;
  // Objects copied at once per Deliver.
  int32_t copy_threads = 4;
};

// Returns a local DataChannel on `loop`, reading sources through `stores`;
// both must outlive it. Before it returns, it detaches and removes FastFile
// mounts that crashed processes left in <state_dir>/fastfile (mounts whose
// FUSE server is gone, "Transport endpoint is not connected", and empty mount
// points of processes that no longer exist); live mounts of other processes
// are left alone. Thread-safe.
//
// Sources: S3Prefix (every object whose URI starts with S3Uri; its path below
// the prefix's directory is its path below the channel) or ManifestFile (a
// JSON array whose first element is {"prefix": URI} and whose other elements
// are keys relative to it; one that lists no key is NotFound), or
// AugmentedManifestFile (Pipe mode only; see Pipe below). A prefix's objects
// are taken in URI order, a manifest's objects and an augmented manifest's
// lines in the manifest's order; with
// ShuffleConfig.Seed that order is shuffled (per epoch in Pipe mode, the same
// for the same seed and epoch everywhere). ShardedByS3Key gives instance i of
// n the positions i, i+n, ... of that order (disjoint shares, together every
// object; with a seed the shares change every epoch); i and n are
// ChannelDelivery::shard_positions and shard_count when the delivery names
// them (a part of a cluster that spans hosts), else the instance's index in
// the delivery and their number. Deliver refuses positions that are out of
// range, repeated or not one per instance with InvalidArgument.
// FullyReplicated gives every instance everything. file:// paths are taken from the store
// (ObjectStore::LocalPath), so a confined file store's roots apply to every
// mode and to CheckChannel; a listing, or a manifest's keys, that lead through
// a symbolic link out of the source folder fail the delivery with
// PermissionDenied naming the link. A manifest holds at most kMaxManifestBytes.
//
// Modes:
// - File: the objects are copied (`copy_threads` at a time) into
//   /opt/ml/input/data/<channel>/ before Deliver reports ready.
// - FastFile (S3Prefix, FullyReplicated): the channel directory becomes a
//   read-only view of the source at once; no byte is copied before training.
//   file:// naming a folder: a symbolic link to it, which the bwrap runtime
//   turns into a read-only bind mount (writes fail with EROFS); under the
//   process runtime the container sees the folder bind-mounted on itself
//   read-only in a mount namespace of its own, so writes through the link or
//   the folder's own path fail with EROFS (where this process can make no
//   mount namespace, the link stays writable: see Runtimes). The folder is
//   shown as it is: under the process runtime a symbolic link inside it
//   leads where it points, writable if that place is (only the folder is
//   bound read-only; bwrap's read-only root covers the rest). Any other
//   scheme (s3://): Deliver lists
//   the prefix once and mounts a read-only FUSE file system of that listing
//   at <state_dir>/fastfile/..., shared by the job's instances on this host;
//   the channel directory is a link to it (a read-only bind mount of it under
//   bwrap). Start time grows with the number of objects, not their bytes: a
//   read fetches what it touches with ObjectStore::ReadRange, writes fail
//   with EROFS, a failed fetch is EIO. The view shows the listing of
//   Deliver's time (an object changed later may read short). EndJob unmounts
//   the job's views (lazily: a process still holding a file open gets
//   ENOTCONN), in the background; so does the channel's destruction, before
//   it returns. FUSE needs /dev/fuse
//   and the right to mount (root, or CAP_SYS_ADMIN): without them Deliver
//   fails with FailedPrecondition naming the mount point.
//   ShardedByS3Key over more than one instance of the whole cluster
//   (ChannelDelivery::shard_count): Unimplemented (a view cannot shard; a
//   single instance sees the whole folder, its share). ManifestFile:
//   InvalidArgument.
// - Pipe: Deliver makes the FIFO /opt/ml/input/data/<channel>_0 on every
//   instance; a writer thread per instance then streams the instance's
//   objects into it, in order, with the pipe grown to 1 MiB and the reader's
//   pace (backpressure). When the reader has read the epoch to its end, or
//   closed it early, <channel>_<e+1> appears and the old FIFO is removed; this
//   goes on until EndJob. CompressionType Gzip: objects are gunzipped on the
//   way (concatenated members too, and zero bytes after a member as padding,
//   as gzip -d reads them). An object that is no longer a regular file when
//   its turn comes (a FIFO put in its place) fails that instance's stream,
//   never blocks it. RecordWrapperType RecordIO: each object
//   (after gunzip) is one dmlc/MXNet RecordIO record (objects of 2^29 bytes or
//   more are refused: the format's limit); such objects are held in memory
//   while framed. A failure after Deliver (an object that vanished, corrupt
//   gzip) goes to the DataChannelListener naming channel and object, and that
//   instance's stream stops.
//   AugmentedManifestFile: S3Uri names a JSON Lines manifest (one JSON object
//   a line; blank lines skipped), read and checked whole by Deliver. Each
//   line streams the attributes AttributeNames lists, in that order (other
//   attributes are ignored): an attribute whose name ends in "-ref" holds an
//   object URI (any store of `stores`) whose bytes are streamed (gunzipped
//   with CompressionType Gzip), any other streams its value (a string's
//   characters, any other value its compact JSON text). With RecordIO each
//   attribute is one record; without, the bytes follow each other with
//   nothing between them, as the service sends them. ShuffleConfig and
//   ShardedByS3Key order and split lines. Deliver refuses (InvalidArgument
//   naming the channel, the line and the attribute) a line that is not a
//   JSON object, a missing attribute, a "-ref" that is not a string, and
//   no AttributeNames; a "-ref" object that does not exist fails the stream
//   when reached (NotFound to the listener, naming channel, line, attribute
//   and object).
//
// Errors of Deliver, each InvalidArgument unless said:
// - A key that is not a relative path of segments other than empty, "." and
//   "..", in any mode, naming the object, the key and why: one that would
//   land outside the channel's directory ("..", absolute), and one the file
//   system would read as another key ("a//b" is "a/b", "a/./b" too; "a/" is
//   no file). Such keys are legal in S3, but File and FastFile write each
//   object at its key: mapping them would show the object under a name it
//   does not have, and "a//b" and "a/b" would race for one file.
// - In File mode, two objects of one instance's share where one's key is a
//   folder of the other's ("a" and "a/b": S3 holds both, a directory cannot),
//   naming both, before anything is copied. (FastFile's view refuses them
//   too, naming one.)
// - A channel whose directory (File, FastFile) has the name of a Pipe
//   channel's FIFO on an instance that receives both: File channel "a_1" and
//   Pipe channel "a" (its epoch 1). The error names both channels, whichever
//   of the two is delivered, before any data moves, rather than when that
//   epoch comes (the service's behaviour is not documented). Channels that
//   cannot meet ("a_01", "a_x", two Pipe channels, disjoint
//   InstanceGroupNames) are delivered. Through the engine such a job never
//   gets here: CreateTrainingJob's validation refuses it with the same words.
// - A File-mode copy that does not fit on the disk is ResourceExhausted
//   naming channel, object and file ("Data download failed: Insufficient disk
//   space", the service's words, then the system's "No space left on
//   device"), leaving no half-written file (each object is copied through a
//   temporary file).
// - A prefix with no objects is NotFound ("No S3 objects found under S3 URL
//   ..."); an object that disappears during the copy is NotFound naming
//   channel and object; AugmentedManifestFile in File or FastFile mode is
//   InvalidArgument; sources other than S3DataSource are Unimplemented.
//
// CheckChannel (at CreateTrainingJob, on its caller's thread) refuses as
// InvalidArgument an S3Prefix without objects (the service's "No S3 objects
// found under S3 URL ..." naming the channel) and a ManifestFile or
// AugmentedManifestFile that does not exist, in any store of `stores`: a
// file:// prefix is looked at up to its first object, any other URI with one
// ObjectStore::ListFirst(uri, 1) (for s3://, one ListObjectsV2 with
// max-keys 1). A URI no store serves is FailedPrecondition, and a failed
// listing keeps the store's code (Unavailable, PermissionDenied), each
// naming the channel. EndJob stops the job's
// Pipe writers wherever they wait (for a reader, on a full pipe) and
// unmounts its FastFile views. The destruction stops copies and writers in
// flight, waits for them and unmounts every view.
std::unique_ptr<DataChannel> NewLocalDataChannel(EventLoop& loop, ObjectStores& stores,
                                                 LocalDataChannelOptions options);

// A local provider and a local data channel over one state directory: the
// channel finds the provider's instances there, and the FastFile views it
// publishes there are the ones the provider's containers see read-only.
struct LocalBackend {
  std::unique_ptr<LocalClusterProviderInterface> cluster_provider;
  std::unique_ptr<DataChannel> data_channel;  // (destroyed first)
};

// Returns a provider (NewLocalClusterProvider with `options`) and a data
// channel (NewLocalDataChannel with options.state_dir and `copy_threads`)
// on `loop`, reading sources through `stores`. When options.object_stores is
// null, the provider uses `stores` too. `loop` and `stores` must outlive
// both. Errors: NewLocalClusterProvider's. Thread-safe.
absl::StatusOr<LocalBackend> NewLocalBackend(EventLoop& loop, ObjectStores& stores,
                                             LocalOptions options, int32_t copy_threads = 4);

// The log streams under `log_dir` (a provider's LocalOptions::log_dir) as
// CloudWatch Logs shows them (kiln/log_reader.h): the stream
// <log_dir>/<job>/algo-<k>-<epoch>[-<n>] is "<job>/algo-<k>-<epoch>[-<n>]",
// created at <epoch>, each line an event with the time it was written (a
// stream written without its times, or lines written after them, take the
// file's modification time). Streams of providers in other processes are
// read too, also while they are written. Thread-safe.
std::unique_ptr<LogReader> NewLocalLogReader(std::string log_dir);

}  // namespace kiln::local

#endif  // KILN_LOCAL_LOCAL_H_
