// The local backend: real training containers on this machine, with the
// SageMaker container contract.
//
// LocalClusterProvider: an instance is a directory on this host standing for
// one machine of a cluster; a container is the job's entrypoint run as a
// process tree on that instance, either as a plain child process (the
// `process` runtime) or inside bubblewrap (the `bwrap` runtime). Every
// container gets the service's /opt/ml tree (hyperparameters.json,
// inputdataconfig.json, resourceconfig.json, input/data, model, output,
// checkpoints, code), the SM_* environment the training toolkit derives,
// TRAINING_JOB_NAME, TRAINING_JOB_ARN and the job's Environment map.
// LocalDataChannel delivers input channels from any store of an ObjectStores
// (file://, and s3:// once a store serves it) into /opt/ml/input/data, in
// File, FastFile and Pipe mode.
//
//   auto loop = kiln::NewRealTimeEventLoop();
//   auto file_store = kiln::NewFileObjectStore();
//   kiln::ObjectStores stores;
//   stores.Register("file", file_store.get());
//   kiln::local::LocalOptions options;
//   options.state_dir = "/var/lib/kiln";
//   options.object_stores = &stores;
//   auto provider = kiln::local::NewLocalClusterProvider(*loop, options).value();
//   auto channel = kiln::local::NewLocalDataChannel(*loop, stores, {.state_dir = "/var/lib/kiln"});
//   // kiln::EngineOptions{.loop = loop.get(), .cluster_provider = provider.get(),
//   //                     .data_channel = channel.get()} ...
//
// On-disk layout under `state_dir`:
//   instances/<cluster-id>/algo-<k>/ml/           the instance's /opt/ml tree
//   instances/<cluster-id>/algo-<k>/image-cache/  the instance's own image cache
//   instances/<cluster-id>/algo-<k>/tmp/          scratch (TMPDIR; /tmp under bwrap)
//   locks/<cluster-id>.lock                       held (flock) while the cluster lives
//   tmp/upload-*                                  archives being uploaded (flock held)
//   logs/<job>/algo-<k>-<epoch>[-<n>]             log streams (kept after Release)
//   image-cache/                                  host-wide image cache (opt-in); images
//                                                 being unpacked in *.tmp-* (flock held)
//   fastfile/<pid>-<n>-<channel>/                 FastFile FUSE mounts (s3:// sources)
// An Instance's id is "<cluster-id>/algo-<k>". A provider made on a state
// directory deletes, in the background, the clusters there whose lock no
// process holds: what a process that crashed left behind (its Release never
// ran). The lock is the kernel's (flock), so it is dropped however the
// process ends, and it holds across PID namespaces sharing the directory.
// Likewise the scratch a provider holds locked while it writes it (archives
// in tmp/, half-unpacked images in image-cache/): the same provider deletes,
// in the same background task, the scratch whose lock no process holds, and
// leaves a live process's alone. What a clean-up cannot delete (a mount left
// inside, a failing disk) is never dropped silently: when an instance is
// reused, the earlier run's files and images that resist are named, with the
// system's reason, in a "[kiln] " line added to that run's log stream, and go
// with the cluster; at Release, what still resists is named in each
// instance's last log stream, and the cluster keeps its lock file (as does
// one whose Provision failed, for what that left), so that the next provider
// made on the state directory tries again (scratch is tried again the same
// way, found by its name). The scratch copy an image is unpacked into (in
// the shared image cache or the instance's) is named the same way when it
// resists: in the first lines of the instance's next log stream, and, when
// the unpack failed, in PrepareImage's error too (that job never runs); the
// shared cache's is tried again by the next provider, the instance's with
// the cluster.
//
// Images. TrainingImage names a directory or a tarball (.tar, .tar.gz, .tgz,
// any compression libarchive reads) by absolute path or file:// URI. It is
// unpacked (or copied) into the instance's content-addressed cache, keyed by
// the source's path, size and modification times: a warm instance that has the
// image does nothing. The image's program directory is `<image>/opt/program`
// when that exists, else the image's top directory. The container runs
// ContainerEntrypoint + ContainerArguments when the job sets an entrypoint,
// else the program directory's `train` followed by ContainerArguments (the
// image's `train` stands in for the service's `docker run <image> train`). The
// image's `opt/ml/code/`, if any, is copied into /opt/ml/code for every job.
// The host's root file system provides the operating system (python3, sh...):
// an image is the program, not a root file system.
//
// Warm reuse. Every PrepareImage (the engine calls it for each job, on a cold
// or a warm cluster) first waits for the cluster's earlier containers to be
// done, then makes the instance's whole /opt/ml tree and its scratch space
// anew; only the image cache stays. Nothing of an earlier job is readable.
// When a warm pool keeps a cluster (ClusterProvider::Recycle), that clean-up
// starts at once, in the background, so that the next job's PrepareImage
// finds the tree ready and only checks its image.
//
// Errors the engine sees (besides those of ObjectStore and the file system,
// which name the path): Provision: ResourceExhausted beyond max_instances,
// and only then (the engine keeps the job Pending and asks again): a state
// directory without room for the cluster's files is FailedPrecondition,
// naming the file and the system's reason (the engine fails the job).
// PrepareImage: InvalidArgument for an image that is not a local directory or
// tarball, NotFound when it does not exist. StartContainers:
// FailedPrecondition for an image without an executable `train` when no
// ContainerEntrypoint is set, for a cluster with a lost instance, or for
// CheckpointConfig without object_stores; InvalidArgument naming
// CheckpointConfig.LocalPath for one that is not a clean absolute path, and,
// on the process runtime, for one outside /opt/ml (see Checkpoints);
// NotFound / PermissionDenied when the entrypoint cannot be executed (process
// runtime); Internal, with bubblewrap's own message, when the sandbox cannot
// be set up. UploadArtifacts: FailedPrecondition naming the path when a
// container replaced /opt/ml/model, /opt/ml/output or /opt/ml/output/data by
// a symbolic link or a file (see Artifacts); the engine fails the job with
// it (ClientError).
//
// Runtimes.
// - process: the entrypoint runs as a child process in its own session and
//   process group, with SAGEMAKER_BASE_DIR and every SM_* path pointing at the
//   instance's tree (`.../ml`), the working directory there and TMPDIR at the
//   instance's tmp/. Arguments of the entrypoint that start with /opt/ml or
//   /opt/program are rewritten to the instance tree and the program directory,
//   so jobs written for the container paths run unchanged. Not a sandbox: the
//   process sees the host as the container user (LocalOptions::container_user)
//   does, and host names algo-<k> do not resolve. The image is read-only to it
//   wherever Kiln can give it a mount namespace, and so are FastFile
//   channels: containers start in a mount namespace of their own (as root;
//   otherwise inside a user namespace that maps only Kiln's uid and gid to
//   themselves, where the kernel allows unprivileged ones, so files of other
//   users show as the overflow uid there) in which the image and each
//   channel's source are bind-mounted on themselves read-only. Where neither
//   can be made, they stay writable to a container running as Kiln's own
//   user.
// - bwrap: bubblewrap, started with an empty environment (the container's
//   variables reach only the entrypoint), as the container user, in a user
//   namespace of its own in which that user is root without any power over
//   the host (as root with LocalOptions::container_user root: every
//   capability dropped), with no_new_privs and a seccomp filter that refuses
//   what a container never needs (mounts, namespaces, modules, kexec,
//   keyrings, the clock, BPF, ...: docs/security.md); a read-only host root,
//   the instance's own tmp/
//   directory (on disk, not memory; emptied between jobs like the /opt/ml
//   tree) bound at /tmp, the state directory hidden, the instance tree bound
//   at /opt/ml (SAGEMAKER_BASE_DIR is /opt/ml), the program directory bound
//   read-only at /opt/program, its own PID, IPC and UTS namespaces (host
//   name algo-<k>). Networking: when Kiln may
//   create network namespaces (root), every cluster gets one network namespace
//   holding only a loopback interface; instance algo-<k> is 127.0.1.<k> in an
//   /etc/hosts bound into each sandbox, so instances reach each other by host
//   name and nothing outside (with or without EnableNetworkIsolation, which
//   this satisfies). Without that privilege, EnableNetworkIsolation gives each
//   instance a network namespace of its own (no peers: a documented
//   limitation), and other jobs share the host's network with the same
//   /etc/hosts names. Limitation: the instances of a cluster share one port
//   space (one namespace, each its own address), so a server that every host
//   runs on one port bound to 0.0.0.0 (sshd for MPI, a parameter server on
//   each host) starts on the first host only; bound to the host's own address
//   (algo-<k>) it starts on each. The process runtime shares the host's
//   network, with the same limitation.
//
// Signals. Signal(SIGTERM) reaches every process of the container (the process
// runtime signals the process group, bwrap every process in the sandbox);
// SIGKILL ends the whole tree. When a container's main process exits, whatever
// it left running is killed, as a container's end does. Release and the
// provider's destruction kill every process of their clusters. So does the
// death of the process that runs the provider (a crash, SIGKILL, the OOM
// killer): bwrap ends its sandbox with it (--die-with-parent), and on the
// process runtime every container runs under a small keeper process (built
// into the library, nothing to install), which starts the entrypoint, passes
// its exit status on, and is the subreaper of everything below it: when the
// entrypoint ends, when the container is killed and when the keeper's parent
// dies, it kills every process of the container, those that left its group
// or session (setsid, a daemon's double fork) too. Such a process still
// misses Signal(SIGTERM), which goes to the group; bwrap's PID namespace has
// no such gap. A start costs the keeper's process (about 0.5 ms on this VM,
// bench/spawn_bench.cc). Where the keeper cannot run (a policy forbids
// executing a memory file), containers run without it, and each one's log
// stream says so in a "[kiln] " line.
//
// Logs. A container's stdout and stderr (one stream, in order) reach
// ContainerEvents::OnLogLine line by line (without the newline; a line longer
// than 64 KiB comes in pieces) and the log stream
// <log_dir>/<job>/algo-<k>-<epoch>, which also holds lines of Kiln's own,
// prefixed "[kiln] ": why a container could not start, checkpoint sync errors,
// and at exit the container's CPU time and peak resident memory. Every run
// has a stream of its own: one of the same job on the same host that starts
// in the same second as another (a rerun, the job's next attempt, a provider
// of another process on the same log directory) gets algo-<k>-<epoch>-2, or
// -3, ..., the first name free (each file is made exclusively, O_EXCL).
// A log stream that cannot be written (a full disk) never fails the job, and
// observers still get every line. When a write fails, the file is cut back to
// its last whole line and ends with "[kiln] the log stream stops here: ..."
// when that fits; nothing more is written to it, so it never holds a cut
// line or two lines joined. Observers get, once, a line starting "[kiln] the
// log stream cannot be written: " that names the file and the system's
// reason, no later than the first line the file lacks; the same line tells
// them when the stream cannot be created at all, and, before the container's
// exit, when closing the file fails (some file systems, NFS or FUSE ones,
// report a failed write only there). From then on, the Kiln lines the stream
// would have held go to observers, with their "[kiln] " prefix.
//
// Checkpoints. With CheckpointConfig, LocalPath (default /opt/ml/checkpoints)
// is restored from S3Uri before the entrypoint starts, synced every
// `checkpoint_sync_interval` while it runs and once more after it exits,
// before OnExit is reported (kiln/checkpoint_sync.h), and made empty before
// every job. A LocalPath under /opt/ml is that place in the instance's tree.
// One outside /opt/ml is, for bwrap, a directory of the instance mounted
// there; the process runtime cannot show a container another directory at a
// host path, so StartContainers refuses such a job (InvalidArgument naming
// CheckpointConfig.LocalPath: it must be under /opt/ml there) rather than use
// or empty a host directory of the user's. The directory is read and written
// below the instance's directory only: symbolic links in it are skipped,
// never followed, and when the container replaced it (or a directory on the
// way) by a link, the sync of that round refuses (a "[kiln] checkpoint sync"
// line in the log stream names the link) and uploads and deletes nothing.
// A sync error does not fail the job.
//
// Artifacts. UploadArtifacts writes the merged /opt/ml/model of all instances
// (later hosts overwrite files of the same name) as
// <S3OutputPath>/<job>/output/model.tar.gz and /opt/ml/output/data as
// output.tar.gz, both gzip-compressed tar archives, through
// ObjectStore::PutFromFile. With OutputDataConfig.CompressionType NONE the
// model is uploaded uncompressed, as the service does it: each regular file
// of the merged tree is the object <S3OutputPath>/<job>/output/model/<path>
// and the model's URI (ArtifactsResult) is that prefix; symbolic links and
// empty directories have no object there (output.tar.gz is unchanged).
// The trees are the container's: they are read below the instance's
// directory by file descriptor, never through a symbolic link. A link inside
// a tree is archived as a link (and left out of an uncompressed model). A
// tree the container deleted is empty; one it replaced, or a directory on
// the way to it, by a symbolic link or a file fails the upload with
// FailedPrecondition naming it (e.g. "algo-1:/opt/ml/model"), and nothing of
// that tree is read. The failure file (/opt/ml/output/failure) is read the
// same way: through a link it is not read at all. One that is there but is
// not read (a link, a directory, a read error) is named with the reason in
// ContainerExit::failure_error, which the engine adds to the FailureReason.
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

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/cluster_provider.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/object_store.h"

namespace kiln::local {

enum class LocalRuntime {
  kProcess,  // a child process with SAGEMAKER_BASE_DIR (default)
  kBwrap,    // bubblewrap, the tree mounted at /opt/ml
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
// object; with a seed the shares change every epoch). FullyReplicated gives
// every instance everything. file:// paths are taken from the store
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
//   read fetches the 1 MiB blocks it touches with ObjectStore::ReadRange
//   (32 blocks cached per channel), writes fail with EROFS, a failed fetch is
//   EIO. The view shows the listing of Deliver's time (an object changed
//   later may read short). EndJob unmounts the job's views (lazily: a
//   process still holding a file open gets ENOTCONN), in the background; so
//   does the channel's destruction, before it returns. FUSE needs /dev/fuse
//   and the right to mount (root, or CAP_SYS_ADMIN): without them Deliver
//   fails with FailedPrecondition naming the mount point.
//   ShardedByS3Key over more than one instance: Unimplemented (a view cannot
//   shard; a single instance sees the whole folder, its share). ManifestFile:
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

}  // namespace kiln::local

#endif  // KILN_LOCAL_LOCAL_H_
