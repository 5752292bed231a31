// ContainerRuntime: how the local backend runs a container on this host. One
// interface, two implementations: the process runtime (a child process under
// the process keeper, the instance tree at its host path) and bwrap
// (bubblewrap: the tree at /opt/ml in a sandbox). The provider and the
// supervisor (supervisor.h) see only this interface.
//
// A run is described by a RunSpec (what the provider decides, on the loop
// thread) and followed through a ContainerProc (its processes, shared by the
// supervisor thread, which starts and reaps them, and the thread that
// signals them).
//
// Internal to kiln::local: never installed. Implementations are thread-safe
// (they hold only settings fixed when they are made).
#ifndef KILN_LIB_LOCAL_CONTAINER_RUNTIME_H_
#define KILN_LIB_LOCAL_CONTAINER_RUNTIME_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kiln/object_store.h"
#include "local/instance_tree.h"
#include "local/internal/container_config.h"
#include "local/internal/spawn.h"
#include "local/log_stream.h"

namespace kiln::local::internal {

// PATH for a process when this one has none.
inline constexpr char kDefaultHostPath[] =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// One container run on one instance, shared by the thread that signals it
// (the loop thread) and its supervisor thread.
struct ContainerProc {
  ~ContainerProc() {
    if (thread.joinable()) thread.join();
  }
  absl::Mutex mu;
  pid_t pid ABSL_GUARDED_BY(mu) = -1;  // our child (entrypoint or bwrap) until reaped
  // `pid` is the process keeper (internal/process_keeper.h), which kills the
  // container when sent its end signal.
  bool kept ABSL_GUARDED_BY(mu) = false;
  bool reaped ABSL_GUARDED_BY(mu) = false;
  bool cancelled ABSL_GUARDED_BY(mu) = false;  // released or lost: no sync, no events
  int pending_signal ABSL_GUARDED_BY(mu) = 0;  // asked for before the process existed
  // bwrap: the sandbox's first process (its PID namespace's init).
  int sandbox_pidfd ABSL_GUARDED_BY(mu) = -1;
  pid_t sandbox_pid ABSL_GUARDED_BY(mu) = -1;
  std::string sandbox_ns ABSL_GUARDED_BY(mu);
  absl::Notification finished;  // the supervisor is done with the instance's files
  std::thread thread;           // the supervisor
};

// Sends `sig` to every process of the run (SIGKILL: the whole tree), or,
// before the run has a process, keeps it for when it has one.
void SignalLocked(ContainerProc& p, int sig) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu);

// Kills every process of the run; with `cancel`, the run reports nothing
// more (released or lost). Thread-safe.
void KillProc(ContainerProc& p, bool cancel);

// Everything one supervisor needs, copied out of the provider's state.
struct RunSpec {
  std::string host;
  // The instance's directories (paths.dir is trusted: nothing below it is
  // followed through a link).
  InstancePaths paths;
  std::shared_ptr<RunLog> log;
  ContainerConfig config;
  std::vector<std::string> argv;  // argv[0] still to be found on PATH
  std::string cwd;
  int netns_fd = -1;
  // The container user, when it is not this process's own.
  std::optional<Credentials> run_as;
  // What the container sees read-only (process runtime: the image, and the
  // FastFile sources that AttachViews adds).
  std::vector<std::string> readonly_paths;
  // Directories made fresh before the run, below paths.dir.
  std::vector<std::string> fresh_dirs;
  // Checkpoints.
  ObjectStore* checkpoint_store = nullptr;
  std::string checkpoint_uri;
  std::string checkpoint_dir;  // host path, below paths.dir
  absl::Duration sync_interval;
  absl::Duration drain_timeout;
  // The instance's earlier runs, which must be done with its files first.
  std::vector<std::shared_ptr<ContainerProc>> wait_for;
  // With a lease (LocalOptions::reattach_lease): the keeper's lease, and the
  // run's directory of records (run_record.h). 0 and "": the container ends
  // with this process.
  int64_t lease_ms = 0;
  std::string run_dir;
  // For Start, set by the supervisor when the run has a lease: the keeper's
  // exit record, output read end and lease file (process_keeper.h).
  // Borrowed.
  std::vector<int> keeper_fds;
  // A run an earlier process started, taken back (Reattach): its keeper's
  // pidfd and its output's read end (owned by the run from here on), and
  // its log stream.
  struct Adopted {
    int keeper_pidfd = -1;
    int output = -1;
    std::string stream;
  };
  std::optional<Adopted> adopted;
};

// What a runtime needs to know to build a run's command line.
struct CommandInput {
  std::string host;                  // algo-<k>: bwrap's host name
  InstancePaths paths;
  std::string program_dir;           // the image's program directory on the host
  std::string image_root;            // the instance's unpacked image on the host
  std::vector<std::string> command;  // the entrypoint and its arguments, as the container sees them
  std::string state_dir;             // hidden from the container where the runtime can
  std::string log_dir;
  std::string hosts_file;            // the cluster's /etc/hosts ("" for none)
  // The checkpoint directory, when the container sees it outside /opt/ml:
  // its host directory and its container path ("" for none).
  std::string checkpoint_host;
  std::string checkpoint_path;
  int netns_fd = -1;                 // the cluster's network namespace (-1: none)
  bool isolated = false;             // EnableNetworkIsolation
};

// What Start learned about the run it started.
struct Started {
  pid_t pid = -1;
  // The run's processes are up and can be signalled. False: bwrap could not
  // set up its sandbox (its message is in the output); the caller reaps
  // `pid` and reports the failure.
  bool up = true;
};

// The Spawn of `spec`'s command line, environment, directory, user, network
// namespace and read-only paths, its output going to `output_fd`; the runtime
// adds what is its own (the keeper, extra descriptors).
SpawnSpec SpawnSpecFor(const RunSpec& spec, int output_fd);

class ContainerRuntime {
 public:
  virtual ~ContainerRuntime() = default;

  // Whether the container sees its tree at /opt/ml (a mount) rather than at
  // the instance's host path.
  virtual bool MountsTree() const = 0;

  // Checks that the runtime can show the container its checkpoint directory
  // at `path` (clean and absolute). InvalidArgument naming
  // CheckpointConfig.LocalPath when it cannot.
  virtual absl::Status CheckCheckpointPath(const std::string& path) const = 0;

  // Fills the container's view of the instance: base, program and scratch
  // directories and home.
  virtual void FillPaths(const CommandInput& in, const std::string& home,
                         ContainerConfigInput& config) const = 0;

  // Sets spec.argv, spec.cwd, spec.netns_fd and the read-only paths for
  // `in`.
  virtual void BuildCommand(const CommandInput& in, RunSpec& spec) const = 0;

  // Makes the run's read-only views `views` (host paths of channel
  // directories below input/data that the data channel registered: symbolic
  // links to the source) read-only to the container. Errors: the file
  // system's, naming the path. Supervisor thread.
  virtual absl::Status AttachViews(RunSpec& spec, const std::vector<std::string>& views) const = 0;

  // Starts the run with its output (stdout and stderr) to `output` (the
  // write end of a pipe, closed once the run has it) and records its
  // processes in `proc`. `log_platform` takes the "[kiln] " lines the
  // runtime has to say (that the keeper cannot run). Errors: the spawn's
  // (NotFound / PermissionDenied for an entrypoint that cannot run).
  // Supervisor thread.
  virtual absl::StatusOr<Started> Start(RunSpec& spec, UniqueFd output, ContainerProc& proc,
                                        absl::FunctionRef<void(std::string_view)> log_platform)
      const = 0;
};

// The PID namespace of `pid` (the link /proc/<pid>/ns/pid), "" when gone.
std::string PidNamespaceOf(pid_t pid);

// The process runtime: `run_as` is the container user when it is not this
// process's own.
std::unique_ptr<ContainerRuntime> NewProcessRuntime(std::optional<Credentials> run_as);

// The bwrap runtime: finds `bwrap_path` on PATH, builds the seccomp filter,
// and checks that bubblewrap can run a sandbox here as the container user.
// Errors: FailedPrecondition naming what is missing.
absl::StatusOr<std::unique_ptr<ContainerRuntime>> NewBwrapRuntime(
    const std::string& bwrap_path, std::optional<Credentials> run_as);

// bubblewrap's options for who the container is (see bwrap_runtime.cc).
std::vector<std::string> BwrapIdentityArgs(const std::optional<Credentials>& run_as);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_CONTAINER_RUNTIME_H_
