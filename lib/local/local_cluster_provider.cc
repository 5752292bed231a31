// LocalClusterProvider: instances are directories, containers are process
// trees (see kiln/local/local.h for the contract it implements).
//
// Threads. Every ClusterProvider method runs on the loop thread and only
// starts work: Provision, PrepareImage, UploadArtifacts and the clean-up after
// Release run as tasks on threads of their own (TaskRunner); each container
// has a supervisor thread that prepares its run, starts it, reads its output,
// syncs its checkpoints, reaps it and reports its exit. Worker threads never
// touch the provider's state: they post to the loop, and the posted callbacks
// check that the provider is alive (a weak token) and that the cluster and
// run they belong to are still current before calling anyone.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kiln/checkpoint_sync.h"
#include "kiln/local/local.h"
#include "kiln/plugin/json_value.h"
#include "local/image_cache.h"
#include "local/instance_tree.h"
#include "local/internal/archive.h"
#include "local/internal/container_config.h"
#include "local/internal/fs.h"
#include "local/internal/layout.h"
#include "local/internal/process_keeper.h"
#include "local/internal/seccomp_filter.h"
#include "local/internal/spawn.h"
#include "local/internal/task_runner.h"
#include "local/log_stream.h"
#include "local/state_dir.h"

namespace kiln::local {
namespace {

using internal::BuildContainerConfig;
using internal::ContainerConfig;
using internal::ContainerConfigInput;
using internal::EmptyTrash;
using internal::FreshInstanceTree;
using internal::IsUnderContainerBase;
using internal::kContainerBase;
using internal::kContainerProgram;
using internal::kDefaultCheckpointPath;
using internal::kInstanceTmp;
using internal::Scrub;
using internal::kLeftForDispose;
using internal::kLeftForNextProvider;
using internal::LeftoverText;
using internal::LineSplitter;
using internal::LogStream;
using internal::NoteForRun;
using internal::RunLog;
using ::kiln::PathForMessage;

constexpr size_t kMaxFailureBytes = 1024;
constexpr char kDefaultHostPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Held (weakly) by every posted callback: gone once the provider is.
struct Alive {};

// Ends a network-namespace holder when the last owner lets go.
struct NetnsGuard {
  internal::NetnsHolder holder;
  ~NetnsGuard() { internal::StopNetnsHolder(holder); }
};

// One container run on one instance, shared by the loop thread (signals) and
// its supervisor thread.
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
  std::thread thread;
};

std::string ReadLink(const std::string& path) {
  char buf[256];
  ssize_t n = readlink(path.c_str(), buf, sizeof(buf));
  return n <= 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

// Sends `sig` to every process of the PID namespace `ns` but its init.
void SignalNamespace(const std::string& ns, pid_t init, int sig) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  while (struct dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == init || pid <= 1) continue;
    if (ReadLink(absl::StrCat("/proc/", pid, "/ns/pid")) == ns) kill(pid, sig);
  }
  closedir(proc);
}

void SignalLocked(ContainerProc& p, int sig) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p.mu) {
  if (p.reaped) return;
  if (p.pid <= 0) {
    if (sig == SIGKILL || p.pending_signal == 0) p.pending_signal = sig;
    return;
  }
  if (p.sandbox_pidfd >= 0) {
    if (sig == SIGKILL) {
      internal::PidfdSendSignal(p.sandbox_pidfd, SIGKILL);
      kill(-p.pid, SIGKILL);
    } else {
      SignalNamespace(p.sandbox_ns, p.sandbox_pid, sig);
    }
    return;
  }
  if (sig == SIGKILL && p.kept) {
    // The keeper kills the entrypoint, then every process left below it,
    // those that left the group too, then itself: a SIGKILL to the group
    // would kill the keeper first and miss those. (SIGCONT: in case the
    // group was stopped.)
    kill(p.pid, internal::KeeperEndSignal());
    kill(p.pid, SIGCONT);
    return;
  }
  kill(-p.pid, sig);
}

void KillProc(ContainerProc& p, bool cancel) {
  absl::MutexLock lock(&p.mu);
  if (cancel) p.cancelled = true;
  SignalLocked(p, SIGKILL);
}

// Cuts `text` to at most `max` bytes without splitting a UTF-8 sequence.
std::string TrimUtf8(std::string text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text;
}

// The log line for a checkpoint sync that failed: its error, which names the
// sync ("checkpoint sync: upload ..."; said once, not again in front of it),
// then what it uploaded and deleted all the same (a failed file does not stop
// the others). `final`: the sync after the container's exit, which the line
// says first ("final checkpoint sync: ...").
std::string CheckpointSyncFailure(bool final, const absl::Status& status,
                                  const CheckpointSyncStats& done) {
  return absl::StrCat(final ? "final " : "", status.message(),
                      " (done all the same: ", done.uploaded, " uploaded (", done.bytes_uploaded,
                      " bytes), ", done.deleted, " deleted)");
}

std::string JoinUri(std::string_view base, std::string_view tail) {
  return absl::StrCat(absl::StripSuffix(internal::Av(base), "/"), "/", internal::Av(tail));
}

// ---------------------------------------------------------------------------
// The provider

class LocalClusterProvider;

// Everything one supervisor needs, copied out of the loop thread's state.
struct LaunchSpec {
  std::string cluster_id;
  uint64_t run = 0;
  size_t index = 0;
  std::string host;
  // The instance's directories (paths.dir is trusted: nothing below it is
  // followed through a link).
  internal::InstancePaths paths;
  std::shared_ptr<RunLog> log;
  ContainerConfig config;
  std::vector<std::string> argv;  // argv[0] still to be found on PATH
  std::string cwd;
  bool bwrap = false;
  int netns_fd = -1;
  // The container user, when it is not this process's own.
  std::optional<internal::Credentials> run_as;
  // bwrap: the seccomp filter (BPF), shared by every run.
  std::shared_ptr<const std::string> seccomp;
  // process runtime: what the container sees read-only (the image, the
  // FastFile sources).
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
};

// bwrap: the data channel's FastFile views are symbolic links
// input/data/<channel> -> the source folder (local_data_channel.cc). Inside
// the sandbox each becomes a read-only bind mount of that folder at
// /opt/ml/input/data/<channel> (the link is replaced by the empty directory
// the mount needs): reads go to the source, writes fail with EROFS, and the
// folder is visible even where the sandbox hides the host's path (/tmp).
absl::Status MountFastFileViews(LaunchSpec& spec) {
  std::vector<std::string> binds;
  for (const std::string& ch : spec.config.channels) {
    const std::string path = absl::StrCat(spec.paths.ml_dir, "/input/data/", ch);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) continue;
    char target[PATH_MAX];
    ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) return internal::ErrnoStatus(errno, "readlink", path);
    target[n] = '\0';
    if (unlink(path.c_str()) != 0) return internal::ErrnoStatus(errno, "unlink", path);
    absl::Status s = MakeDirs(path);
    if (!s.ok()) return s;
    binds.insert(binds.end(),
                 {"--ro-bind", target, absl::StrCat(kContainerBase, "/input/data/", ch)});
  }
  if (binds.empty()) return absl::OkStatus();
  // After the tree's own bind (mounts apply in order).
  auto at = std::find(spec.argv.begin(), spec.argv.end(), "--unshare-pid");
  spec.argv.insert(at, binds.begin(), binds.end());
  return absl::OkStatus();
}

// process: the FastFile views are the same links; the container keeps them
// and gets a mount namespace of its own in which each link's target (the
// source folder, or the FUSE view of an s3:// prefix) is bind-mounted on
// itself read-only, so writes through the link, or through the folder's own
// path, fail with EROFS, while the host and other containers are untouched.
// Where this process can make no mount namespace (neither root nor
// unprivileged user namespaces) the links stay writable views, as documented
// in kiln/local/local.h.
absl::Status CollectReadOnlyViews(LaunchSpec& spec) {
  for (const std::string& ch : spec.config.channels) {
    const std::string path = absl::StrCat(spec.paths.ml_dir, "/input/data/", ch);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) continue;
    char target[PATH_MAX];
    if (realpath(path.c_str(), target) == nullptr) {
      return internal::ErrnoStatus(errno, "resolve the FastFile view", path);
    }
    if (std::find(spec.readonly_paths.begin(), spec.readonly_paths.end(), target) ==
        spec.readonly_paths.end()) {
      spec.readonly_paths.push_back(target);
    }
  }
  if (!spec.readonly_paths.empty() &&
      internal::GetMountNamespaceSupport() == internal::MountNamespaceSupport::kNone) {
    spec.readonly_paths.clear();
  }
  return absl::OkStatus();
}

// bwrap: bubblewrap's own process gets an empty environment, and its
// options, among them the container's variables as --setenv pairs and the
// seccomp filter's descriptor (5), come from a memory file (descriptor 4);
// only the command stays on its command line (bubblewrap reads no command
// from that file). Nothing of the job reaches bubblewrap itself, neither a
// variable its loader would honour (LD_PRELOAD) nor a secret in its
// /proc/<pid>/cmdline. `fds` gets the descriptors to hand over, after the
// info pipe's (3).
absl::Status PrepareBwrapCommand(const LaunchSpec& spec, std::vector<std::string>& argv,
                                 std::vector<std::string>& env,
                                 std::vector<UniqueFd>& fds) {
  auto command = std::find(argv.begin() + 1, argv.end(), "--");
  std::vector<std::string> options(argv.begin() + 1, command);
  for (const auto& [k, v] : spec.config.env) options.insert(options.end(), {"--setenv", k, v});
  if (spec.seccomp != nullptr) options.insert(options.end(), {"--seccomp", "5"});
  std::string text;
  for (const std::string& a : options) {
    if (a.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("a container variable holds a NUL byte");
    }
    text.append(a);
    text.push_back('\0');
  }
  absl::StatusOr<UniqueFd> args = internal::MemoryFile("kiln-bwrap-args", text);
  if (!args.ok()) return args.status();
  fds.push_back(*std::move(args));
  if (spec.seccomp != nullptr) {
    absl::StatusOr<UniqueFd> filter = internal::MemoryFile("kiln-seccomp", *spec.seccomp);
    if (!filter.ok()) return filter.status();
    fds.push_back(*std::move(filter));
  }
  std::vector<std::string> short_argv = {argv[0], "--args", "4"};
  short_argv.insert(short_argv.end(), command, argv.end());
  argv = std::move(short_argv);
  env.clear();
  return absl::OkStatus();
}

struct StartState {
  absl::Mutex mu;
  int remaining ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  ClusterProvider::DoneCallback started;
};

struct LocalInstance {
  Instance info;
  internal::InstancePaths paths;
  std::string image_root;   // set by PrepareImage
  std::string program_dir;  // set by PrepareImage
  std::shared_ptr<RunLog> last_log;  // the log stream of the latest run (set by StartContainers)
  // The log stream of the run PrepareImage prepares the instance for, until
  // StartContainers names it and makes it last_log.
  std::shared_ptr<RunLog> next_log;
  bool lost = false;
  TimerHandle loss_timer;
  std::shared_ptr<ContainerProc> current;
  std::vector<std::shared_ptr<ContainerProc>> retired;
  // Set by Recycle, taken by the next PrepareImage; Dispose waits for it.
  std::shared_ptr<Scrub> scrub;
  // PrepareImage made the tree fresh and no container has run on it since.
  bool tree_fresh = false;
};

struct LocalCluster {
  std::unique_ptr<internal::ClusterLock> lock;  // (destroyed last)
  Cluster cluster;
  std::string dir;
  std::vector<LocalInstance> instances;
  ContainerEvents* events = nullptr;
  uint64_t run = 0;
  std::shared_ptr<NetnsGuard> netns;  // bwrap with a per-cluster network namespace
  bool host_network = false;          // bwrap without one: names via /etc/hosts only
  std::string hosts_file;
};

// How containers are started, settled when the provider is made.
struct RuntimeSetup {
  std::string bwrap_program;  // bwrap: the program's path
  // The container user, when it is not this process's own.
  std::optional<internal::Credentials> run_as;
  // bwrap: the seccomp filter handed to every sandbox.
  std::shared_ptr<const std::string> seccomp;
};

// bubblewrap's options for who the container is: in a user namespace of its
// own, root inside with no power over the host and no nested namespace,
// unless the sandbox is started by root itself (LocalOptions::container_user
// root), which keeps root but drops every capability.
std::vector<std::string> BwrapIdentityArgs(const std::optional<internal::Credentials>& run_as) {
  if (run_as.has_value() || geteuid() != 0) {
    return {"--unshare-user", "--disable-userns", "--uid", "0", "--gid", "0"};
  }
  return {"--cap-drop", "ALL"};
}

class LocalClusterProvider final : public ClusterProvider {
 public:
  LocalClusterProvider(EventLoop& loop, LocalOptions options, RuntimeSetup runtime)
      : loop_(loop),
        options_(std::move(options)),
        bwrap_program_(std::move(runtime.bwrap_program)),
        run_as_(runtime.run_as),
        seccomp_(std::move(runtime.seccomp)),
        images_(options_.state_dir, options_.shared_image_cache) {
    if (options_.log_dir.empty()) options_.log_dir = absl::StrCat(options_.state_dir, "/logs");
    const char* path = std::getenv("PATH");
    host_path_ = path != nullptr && *path != '\0' ? path : kDefaultHostPath;
    const char* home = std::getenv("HOME");
    home_ = home != nullptr ? home : "/root";
    cpu_count_ = options_.cpu_count > 0 ? options_.cpu_count
                                        : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    if (cpu_count_ <= 0) cpu_count_ = 1;
    // What a crashed process left in the state directory goes, in the
    // background (a job's files can take a while to delete).
    auto stale = std::make_shared<internal::StaleFiles>(
        internal::StaleFiles::Claim(options_.state_dir));
    if (!stale->empty()) tasks_.Run([stale] { stale->Delete(); });
  }

  ~LocalClusterProvider() override {
    alive_.reset();
    for (auto& [id, cluster] : clusters_) Dispose(std::move(cluster));
    clusters_.clear();
    tasks_.JoinAll();
  }

  void Provision(const ClusterSpec& spec, ClusterCallback done) override;
  void PrepareImage(const Cluster& cluster, std::string_view image, DoneCallback done) override;
  void StartContainers(const JobContext& job, ContainerEvents& events,
                       DoneCallback started) override;
  void Signal(const Cluster& cluster, int signal) override;
  void UploadArtifacts(const JobContext& job, ArtifactsCallback done) override;
  void SetListener(ClusterListener* listener) override { listener_ = listener; }
  absl::Status InjectInterruption(std::string_view instance_id, InterruptionKind kind,
                                  absl::Duration notice) override;
  void Recycle(const Cluster& cluster) override;
  void Release(const Cluster& cluster) override;

  // --- Called by posted callbacks (loop thread, provider alive).
  void DeliverLines(const std::string& cluster_id, uint64_t run, size_t index,
                    const std::vector<std::string>& lines);
  void DeliverExit(const std::string& cluster_id, uint64_t run, size_t index,
                   const ContainerExit& exit);
  bool IsCurrentRun(const std::string& cluster_id, uint64_t run) {
    LocalCluster* c = Find(cluster_id);
    return c != nullptr && c->run == run;
  }

 private:
  LocalCluster* Find(const std::string& id) {
    auto it = clusters_.find(id);
    return it == clusters_.end() ? nullptr : it->second.get();
  }

  // Runs `fn` on the loop later (never inline), if the provider is alive then.
  template <typename Fn>
  void PostIfAlive(Fn fn) {
    loop_.Post([alive = std::weak_ptr<Alive>(alive_), fn = std::move(fn)]() mutable {
      if (alive.lock()) fn();
    });
  }

  // Stops everything of a cluster taken out of clusters_ and cleans up after
  // it on a task: kills now, waits and removes files later.
  void Dispose(std::unique_ptr<LocalCluster> cluster);

  void LoseInstance(const std::string& cluster_id, size_t index);

  static void Supervise(EventLoop* loop, std::weak_ptr<Alive> alive,
                        LocalClusterProvider* provider, LaunchSpec spec,
                        std::shared_ptr<StartState> start, ContainerProc* proc,
                        EventLoop::WorkGuard guard);

  EventLoop& loop_;
  LocalOptions options_;
  std::string bwrap_program_;
  std::optional<internal::Credentials> run_as_;
  std::shared_ptr<const std::string> seccomp_;
  std::string host_path_;
  std::string home_;
  int cpu_count_ = 1;
  ClusterListener* listener_ = nullptr;
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();
  std::map<std::string, std::unique_ptr<LocalCluster>> clusters_;
  int64_t instances_in_use_ = 0;
  bool netns_unavailable_ = false;  // learned from a failed attempt
  internal::ImageCache images_;
  internal::TaskRunner tasks_;      // last: joined first on destruction
};

void LocalClusterProvider::Provision(const ClusterSpec& spec, ClusterCallback done) {
  int64_t count = 0;
  for (const InstanceGroupSpec& g : spec.groups) count += std::max(0, g.count);
  if (count == 0) {
    PostIfAlive([done = std::move(done), job = spec.job_name]() mutable {
      done(absl::InvalidArgumentError(absl::StrCat("job '", job, "' asks for no instances")));
    });
    return;
  }
  if (options_.max_instances > 0 && instances_in_use_ + count > options_.max_instances) {
    PostIfAlive([done = std::move(done), job = spec.job_name, count,
                 in_use = instances_in_use_, max = options_.max_instances]() mutable {
      done(absl::ResourceExhaustedError(
          absl::StrCat("job '", job, "' needs ", count, " local instances; ", in_use, " of ", max,
                       " are in use")));
    });
    return;
  }
  instances_in_use_ += count;
  auto cluster = std::make_unique<LocalCluster>();
  // Numbered per process, not per provider: providers of one process may share a state
  // directory, where a second "cluster-<pid>-1" would wait for the first one's lock.
  static std::atomic<uint64_t> next_cluster{0};
  cluster->cluster.id = absl::StrCat("cluster-", getpid(), "-", next_cluster.fetch_add(1) + 1);
  cluster->cluster.spot = spec.spot;
  cluster->dir = internal::ClusterDir(options_.state_dir, cluster->cluster.id);
  int host = 0;
  for (const InstanceGroupSpec& g : spec.groups) {
    for (int i = 0; i < g.count; ++i) {
      ++host;
      LocalInstance inst;
      inst.info.host_name = absl::StrCat("algo-", host);
      inst.info.id = internal::InstanceId(cluster->cluster.id, inst.info.host_name);
      inst.info.group_name = g.name;
      inst.info.instance_type = g.instance_type;
      inst.paths = internal::InstancePaths::Of(options_.state_dir, inst.info.id);
      cluster->cluster.instances.push_back(inst.info);
      cluster->instances.push_back(std::move(inst));
    }
  }
  const bool want_netns = options_.runtime == LocalRuntime::kBwrap && !netns_unavailable_;
  const bool bwrap = options_.runtime == LocalRuntime::kBwrap;
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, cluster = std::move(cluster), done = std::move(done), want_netns, bwrap,
              guard, alive = std::weak_ptr<Alive>(alive_)]() mutable {
    auto dirs = std::make_unique<internal::ProvisionedDirs>();
    dirs->dir = cluster->dir;
    absl::Status status;
    const std::string lock_path =
        internal::ClusterLockPath(options_.state_dir, cluster->cluster.id);
    if (absl::StatusOr<std::unique_ptr<internal::ClusterLock>> lock = internal::ClusterLock::Take(lock_path);
        lock.ok()) {
      dirs->lock = *std::move(lock);
    } else {
      status = lock.status();
    }
    if (status.ok()) status = internal::RemoveTree(cluster->dir);
    for (const LocalInstance& inst : cluster->instances) {
      if (status.ok()) status = internal::MakeInstanceTree(inst.paths);
    }
    std::shared_ptr<NetnsGuard> netns;
    bool netns_denied = false;
    if (status.ok() && want_netns) {
      absl::StatusOr<internal::NetnsHolder> holder = internal::StartNetnsHolder();
      if (holder.ok()) {
        netns = std::make_shared<NetnsGuard>();
        netns->holder = *holder;
      } else {
        netns_denied = true;
      }
    }
    if (status.ok() && bwrap) {
      std::string hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
      for (size_t i = 0; i < cluster->instances.size(); ++i) {
        absl::StrAppend(&hosts, "127.0.1.", (i % 250) + 1, "\t",
                        cluster->instances[i].info.host_name, "\n");
      }
      cluster->hosts_file = absl::StrCat(cluster->dir, "/hosts");
      status = internal::WriteFileAtomic(cluster->hosts_file, hosts);
    }
    cluster->netns = std::move(netns);
    cluster->host_network = bwrap && cluster->netns == nullptr;
    // A failed attempt's files go now, off the loop thread and before the
    // caller hears of it.
    if (!status.ok()) dirs.reset();
    loop_.Post([this, alive, cluster = std::move(cluster), done = std::move(done), status,
                dirs = std::move(dirs), netns_denied]() mutable {
      if (!alive.lock()) return;  // the provider is gone: `dirs` cleans up
      if (netns_denied) netns_unavailable_ = true;
      if (!status.ok()) {
        instances_in_use_ -= static_cast<int64_t>(cluster->instances.size());
        // ResourceExhausted tells the engine that capacity is short and to
        // ask again later, keeping the job Pending: a full file system is
        // not that, and asking again would keep the job Pending for as long
        // as the disk stays full.
        const absl::StatusCode code = absl::IsResourceExhausted(status)
                                          ? absl::StatusCode::kFailedPrecondition
                                          : status.code();
        done(absl::Status(code, absl::StrCat("could not create local instances: ",
                                             status.message())));
        return;
      }
      cluster->lock = std::move(dirs->lock);
      Cluster result = cluster->cluster;
      clusters_[result.id] = std::move(cluster);
      done(std::move(result));
    });
    guard->Reset();
  });
}

void LocalClusterProvider::PrepareImage(const Cluster& cluster, std::string_view image,
                                        DoneCallback done) {
  LocalCluster* c = Find(cluster.id);
  if (c == nullptr) {
    PostIfAlive([done = std::move(done), id = cluster.id]() mutable {
      done(absl::FailedPreconditionError(absl::StrCat("unknown local cluster '", id, "'")));
    });
    return;
  }
  struct Work {
    internal::InstancePaths paths;
    std::vector<std::shared_ptr<ContainerProc>> wait_for;
    std::shared_ptr<Scrub> scrub;  // the tree is being made fresh already
    std::vector<std::string> trash;  // the old tree, to delete once `done` has run
    std::shared_ptr<RunLog> last_log;  // where to say what of it cannot be deleted
    std::shared_ptr<RunLog> next_log;  // ... and what preparing the next run leaves
    std::string image_root, program_dir;
    absl::Status status;
  };
  auto work = std::make_shared<std::vector<Work>>();
  for (LocalInstance& inst : c->instances) {
    Work w;
    w.paths = inst.paths;
    w.last_log = inst.last_log;
    if (inst.next_log == nullptr) inst.next_log = std::make_shared<RunLog>();
    w.next_log = inst.next_log;
    if (inst.current) w.wait_for.push_back(inst.current);
    for (auto& r : inst.retired) w.wait_for.push_back(r);
    w.scrub = std::move(inst.scrub);
    inst.scrub.reset();
    work->push_back(std::move(w));
  }
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, work, image = std::string(image), id = cluster.id, done = std::move(done),
              guard,
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
    std::vector<std::shared_ptr<RunLog>> runs;
    for (const Work& w : *work) runs.push_back(w.next_log);
    absl::StatusOr<internal::ImageSource> src = images_.Resolve(image, runs);
    auto prepare = [&](Work& w) {
      // Nothing of an earlier job survives: the whole /opt/ml tree and the
      // scratch space are made anew; the image cache stays.
      for (auto& p : w.wait_for) p->finished.WaitForNotification();
      bool fresh = false;
      if (w.scrub != nullptr) {
        // Recycled: made fresh after the last job (and nothing ran since).
        w.scrub->done.WaitForNotification();
        fresh = w.scrub->status.ok();
      }
      if (!fresh) w.status = FreshInstanceTree(w.paths, w.trash);
      if (!w.status.ok()) return;
      if (!src.ok()) {
        w.status = src.status();
        return;
      }
      absl::StatusOr<internal::InstalledImage> installed =
          images_.Install(*src, w.paths.dir, w.last_log, w.next_log);
      if (!installed.ok()) {
        w.status = installed.status();
        return;
      }
      w.image_root = installed->root;
      w.program_dir = installed->program_dir;
      const std::string code = absl::StrCat(installed->root, "/opt/ml/code");
      if (internal::IsDirectory(code)) {
        w.status = internal::CopyTree(code, absl::StrCat(w.paths.ml_dir, "/code"));
      }
    };
    std::vector<std::thread> threads;
    for (size_t i = 1; i < work->size(); ++i) threads.emplace_back(prepare, std::ref((*work)[i]));
    if (!work->empty()) prepare((*work)[0]);
    for (std::thread& t : threads) t.join();
    // (last_log, trash)
    std::vector<std::pair<std::shared_ptr<RunLog>, std::vector<std::string>>> trash;
    for (Work& w : *work) trash.emplace_back(w.last_log, std::move(w.trash));
    loop_.Post([this, alive, work, id, done = std::move(done)]() mutable {
      if (!alive.lock()) return;
      LocalCluster* c = Find(id);
      if (c == nullptr) return;  // released meanwhile: dropped
      absl::Status status;
      for (size_t i = 0; i < work->size() && i < c->instances.size(); ++i) {
        const Work& w = (*work)[i];
        if (!w.status.ok()) {
          if (status.ok()) {
            status = absl::Status(w.status.code(), absl::StrCat(c->instances[i].info.host_name,
                                                                ": ", w.status.message()));
          }
          continue;
        }
        c->instances[i].image_root = w.image_root;
        c->instances[i].program_dir = w.program_dir;
        c->instances[i].tree_fresh = true;
      }
      done(status);
    });
    // The earlier job's files, once the job in hand has its fresh tree.
    for (auto& [last_log, files] : trash) EmptyTrash(last_log, files);
    guard->Reset();
  });
}

void LocalClusterProvider::StartContainers(const JobContext& job, ContainerEvents& events,
                                           DoneCallback started) {
  auto fail = [&](absl::Status s) {
    PostIfAlive([started = std::move(started), s]() mutable { started(s); });
  };
  LocalCluster* c = Find(job.cluster.id);
  if (c == nullptr) {
    fail(absl::FailedPreconditionError(
        absl::StrCat("unknown local cluster '", job.cluster.id, "'")));
    return;
  }
  for (const LocalInstance& inst : c->instances) {
    if (inst.lost) {
      fail(absl::FailedPreconditionError(
          absl::StrCat("instance ", inst.info.host_name, " of cluster '", c->cluster.id,
                       "' was lost")));
      return;
    }
    if (inst.program_dir.empty()) {
      fail(absl::FailedPreconditionError(absl::StrCat(
          "instance ", inst.info.host_name, ": the training image was not prepared")));
      return;
    }
    if (job.request.algorithm_specification().container_entrypoint_size() == 0 &&
        access(absl::StrCat(inst.program_dir, "/train").c_str(), X_OK) != 0) {
      fail(absl::FailedPreconditionError(absl::StrCat(
          "the image has no executable train program (looked for ", inst.program_dir,
          "/train); give one, or set AlgorithmSpecification.ContainerEntrypoint")));
      return;
    }
  }
  const v1::CreateTrainingJobRequest& request = job.request;
  const bool bwrap = options_.runtime == LocalRuntime::kBwrap;
  // Checkpoints.
  ObjectStore* checkpoint_store = nullptr;
  std::string checkpoint_path;  // as the container sees it
  if (request.has_checkpoint_config()) {
    if (options_.object_stores == nullptr) {
      fail(absl::FailedPreconditionError(
          "CheckpointConfig needs LocalOptions.object_stores, and this provider has none"));
      return;
    }
    absl::StatusOr<ObjectStore*> store =
        options_.object_stores->For(request.checkpoint_config().s3_uri());
    if (!store.ok()) {
      fail(absl::Status(store.status().code(),
                        absl::StrCat("CheckpointConfig.S3Uri: ", store.status().message())));
      return;
    }
    checkpoint_store = *store;
    checkpoint_path = request.checkpoint_config().local_path();
    while (checkpoint_path.size() > 1 && checkpoint_path.back() == '/') checkpoint_path.pop_back();
    if (checkpoint_path.empty()) checkpoint_path = kDefaultCheckpointPath;
    if (checkpoint_path[0] != '/' ||
        !internal::IsSafeRelativePath(std::string_view(checkpoint_path).substr(1))) {
      fail(absl::InvalidArgumentError(
          absl::StrCat("CheckpointConfig.LocalPath '", PathForMessage(checkpoint_path),
                       "' must be an absolute path without '.', '..' or empty components")));
      return;
    }
    // The process runtime cannot show the container another directory at a
    // host path: the path itself would be used, shared by every instance and
    // every job, and never emptied (a later job would restore an earlier
    // one's checkpoints). Only /opt/ml, which it maps to the instance's tree.
    if (!bwrap && !IsUnderContainerBase(checkpoint_path)) {
      fail(absl::InvalidArgumentError(absl::StrCat(
          "CheckpointConfig.LocalPath '", PathForMessage(checkpoint_path),
          "' is outside /opt/ml: on the local backend's process runtime it must be under "
          "/opt/ml (the default is /opt/ml/checkpoints), which maps to each instance's own "
          "directory; the bwrap runtime maps any path")));
      return;
    }
  }
  const auto& spec = request.algorithm_specification();
  const bool isolated = request.enable_network_isolation();

  c->run++;
  c->events = &events;
  auto start = std::make_shared<StartState>();
  {
    absl::MutexLock lock(&start->mu);
    start->remaining = static_cast<int>(c->instances.size());
  }
  start->started = std::move(started);
  const std::string epoch = absl::StrCat(absl::ToUnixSeconds(absl::Now()));
  // The job's log directory name (the engine's job names are safe already).
  std::string log_job(job.job_name);
  std::replace(log_job.begin(), log_job.end(), '/', '_');
  if (!internal::IsSafeRelativePath(log_job)) {
    log_job = absl::StrCat("job-", internal::StableHashHex(log_job));
  }
  for (size_t i = 0; i < c->instances.size(); ++i) {
    LocalInstance& inst = c->instances[i];
    // Join earlier runs that have finished; keep the others for the new run
    // to wait for.
    if (inst.current) inst.retired.push_back(std::move(inst.current));
    inst.retired.erase(std::remove_if(inst.retired.begin(), inst.retired.end(),
                                      [](const std::shared_ptr<ContainerProc>& p) {
                                        if (!p->finished.HasBeenNotified()) return false;
                                        if (p->thread.joinable()) p->thread.join();
                                        return true;
                                      }),
                       inst.retired.end());
    LaunchSpec ls;
    ls.cluster_id = c->cluster.id;
    ls.run = c->run;
    ls.index = i;
    ls.host = inst.info.host_name;
    ls.paths = inst.paths;
    ls.log = std::exchange(inst.next_log, nullptr);
    if (ls.log == nullptr) ls.log = std::make_shared<RunLog>();
    ls.log->Name(
        absl::StrCat(options_.log_dir, "/", log_job, "/", inst.info.host_name, "-", epoch));
    ls.bwrap = bwrap;
    ls.run_as = run_as_;
    if (bwrap) {
      ls.seccomp = seccomp_;
    } else {
      // The image, read-only to the container (with the FastFile sources
      // CollectReadOnlyViews adds): a job cannot change what the instance's
      // next job runs.
      char real[PATH_MAX];
      if (realpath(inst.image_root.c_str(), real) != nullptr) ls.readonly_paths.push_back(real);
    }
    ls.sync_interval = options_.checkpoint_sync_interval;
    ls.drain_timeout = options_.output_drain_timeout;
    ls.wait_for = inst.retired;
    ContainerConfigInput in;
    in.request = &request;
    in.job_name = std::string(job.job_name);
    in.job_arn = std::string(job.job_arn);
    in.cluster = &c->cluster;
    in.instance = &inst.info;
    in.base_dir = bwrap ? kContainerBase : inst.paths.ml_dir;
    in.program_dir = bwrap ? kContainerProgram : inst.program_dir;
    in.tmp_dir = bwrap ? "/tmp" : inst.paths.tmp_dir;
    in.cpu_count = cpu_count_;
    in.network_interface_name = options_.network_interface_name;
    in.host_path = host_path_;
    // (The container user of the process runtime gets a home it may write:
    // the instance's scratch space.)
    in.home = run_as_.has_value() && !bwrap ? inst.paths.tmp_dir : home_;
    ls.config = BuildContainerConfig(in);
    // The command line, as the container sees it.
    std::vector<std::string> command;
    if (spec.container_entrypoint_size() > 0) {
      command.assign(spec.container_entrypoint().begin(), spec.container_entrypoint().end());
    } else {
      command.push_back(absl::StrCat(kContainerProgram, "/train"));
    }
    command.insert(command.end(), spec.container_arguments().begin(),
                   spec.container_arguments().end());
    // Directories a run must find empty: already so when PrepareImage made the
    // tree and nothing ran since (the engine's way), else emptied now.
    // (Paths below the instance's directory: a run may have planted links
    // there, which are replaced, never followed.)
    if (!inst.tree_fresh) {
      ls.fresh_dirs = {"ml/model", "ml/output", "ml/output/data", "ml/output/intermediate",
                       kInstanceTmp};
    }
    std::string checkpoint_host;
    if (checkpoint_store != nullptr) {
      // Below /opt/ml: that place in the instance's tree; elsewhere (bwrap
      // only) a directory of the instance mounted there.
      const std::string checkpoint_rel =
          IsUnderContainerBase(checkpoint_path)
              ? absl::StrCat("ml", internal::Av(std::string_view(checkpoint_path).substr(
                                       std::string_view(kContainerBase).size())))
              : "checkpoints-local";
      checkpoint_host = absl::StrCat(inst.paths.dir, "/", checkpoint_rel);
      ls.checkpoint_store = checkpoint_store;
      ls.checkpoint_uri = request.checkpoint_config().s3_uri();
      ls.checkpoint_dir = checkpoint_host;
      // (A fresh tree has /opt/ml/checkpoints, empty, and nothing else of this.)
      if (!inst.tree_fresh || checkpoint_rel != "ml/checkpoints") {
        ls.fresh_dirs.push_back(checkpoint_rel);
      }
    } else if (!inst.tree_fresh) {
      ls.fresh_dirs.push_back("ml/checkpoints");
    }
    inst.tree_fresh = false;
    if (bwrap) {
      std::vector<std::string>& a = ls.argv;
      // /tmp is the instance's scratch directory on disk (emptied between
      // runs, like the rest of the tree), not memory.
      a = {bwrap_program_};
      const std::vector<std::string> identity = BwrapIdentityArgs(run_as_);
      a.insert(a.end(), identity.begin(), identity.end());
      a.insert(a.end(), {"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind",
                         inst.paths.tmp_dir, "/tmp"});
      // Hide Kiln's own files (other instances, logs, caches); what is below
      // the host's /tmp is hidden already.
      for (const std::string& hide : {options_.state_dir, options_.log_dir}) {
        if (!absl::StartsWith(hide, "/tmp/") &&
            (hide == options_.state_dir || !absl::StartsWith(hide, options_.state_dir + "/"))) {
          a.insert(a.end(), {"--tmpfs", hide});
        }
      }
      a.insert(a.end(), {"--tmpfs", "/opt", "--bind", inst.paths.ml_dir, kContainerBase, "--ro-bind",
                         inst.program_dir, kContainerProgram});
      if (!c->hosts_file.empty()) a.insert(a.end(), {"--ro-bind", c->hosts_file, "/etc/hosts"});
      if (checkpoint_store != nullptr && !IsUnderContainerBase(checkpoint_path)) {
        a.insert(a.end(), {"--bind", checkpoint_host, checkpoint_path});
      }
      a.insert(a.end(), {"--unshare-pid", "--unshare-ipc", "--unshare-uts"});
      if (c->netns != nullptr) {
        ls.netns_fd = c->netns->holder.ns_fd;
      } else if (isolated) {
        a.push_back("--unshare-net");
      }
      a.insert(a.end(), {"--hostname", inst.info.host_name, "--die-with-parent", "--new-session",
                         "--info-fd", "3", "--chdir", kContainerBase, "--"});
      a.insert(a.end(), command.begin(), command.end());
      ls.cwd = inst.paths.ml_dir;
    } else {
      // The container paths, on this host.
      for (std::string& arg : command) {
        arg = internal::Rebase(arg, kContainerBase, inst.paths.ml_dir);
        arg = internal::Rebase(arg, kContainerProgram, inst.program_dir);
      }
      ls.argv = std::move(command);
      ls.cwd = inst.paths.ml_dir;
    }
    auto proc = std::make_shared<ContainerProc>();
    ContainerProc* raw = proc.get();
    inst.current = proc;
    inst.last_log = ls.log;
    raw->thread = std::thread(&LocalClusterProvider::Supervise, &loop_,
                              std::weak_ptr<Alive>(alive_), this, std::move(ls), start, raw,
                              loop_.AcquireWork());
  }
}

void LocalClusterProvider::Supervise(EventLoop* loop, std::weak_ptr<Alive> alive,
                                     LocalClusterProvider* provider, LaunchSpec spec,
                                     std::shared_ptr<StartState> start, ContainerProc* proc,
                                     EventLoop::WorkGuard guard) {
  const std::string cluster_id = spec.cluster_id;
  const uint64_t run = spec.run;
  const size_t index = spec.index;
  auto post = [&](auto fn) {
    loop->Post([alive, fn = std::move(fn)]() mutable {
      if (alive.lock()) fn();
    });
  };
  auto report_start = [&](absl::Status s) {
    bool last = false;
    absl::Status result;
    {
      absl::MutexLock lock(&start->mu);
      if (!s.ok() && start->status.ok()) {
        start->status = absl::Status(s.code(), absl::StrCat(spec.host, ": ", s.message()));
      }
      last = --start->remaining == 0;
      result = start->status;
    }
    if (!last) return;
    post([provider, cluster_id, run, start, result]() mutable {
      if (provider->IsCurrentRun(cluster_id, run) && start->started) {
        std::exchange(start->started, nullptr)(result);
      }
    });
  };
  auto finish = [&] {
    proc->finished.Notify();
    guard.Reset();
  };
  // Lines for observers, posted in batches.
  std::vector<std::string> lines;
  auto post_lines = [&] {
    if (lines.empty()) return;
    post([provider, cluster_id, run, index, batch = std::move(lines)] {
      provider->DeliverLines(cluster_id, run, index, batch);
    });
    lines.clear();
  };
  LogStream log(*spec.log);
  auto log_platform = [&](std::string_view text) {
    // A line of Kiln's own: in the log stream only, while it can be written.
    // Once it cannot, observers get it instead: nothing Kiln says is lost.
    // (Before the stream is opened, a start failure says it all.)
    if (!log.broken()) {
      std::string broke = log.AppendPlatformLine(text);
      if (broke.empty()) return;
      lines.push_back(std::move(broke));
    }
    lines.push_back(absl::StrCat("[kiln] ", internal::Av(text)));
    post_lines();
  };

  for (auto& p : spec.wait_for) p->finished.WaitForNotification();
  spec.wait_for.clear();

  // A fresh run: model, output, scratch (and checkpoints) empty; the config
  // files written.
  absl::Status status;
  status = internal::PrepareRunTree(spec.paths, spec.fresh_dirs, spec.config);
  if (status.ok()) status = spec.bwrap ? MountFastFileViews(spec) : CollectReadOnlyViews(spec);
  std::unique_ptr<CheckpointSync> sync;
  if (status.ok() && spec.checkpoint_store != nullptr) {
    sync = std::make_unique<CheckpointSync>(*spec.checkpoint_store, spec.checkpoint_uri,
                                            spec.checkpoint_dir, spec.paths.dir);
    // Its errors say "checkpoint restore" and name the object or folder.
    status = sync->Restore();
  }
  if (status.ok() && spec.run_as.has_value()) status = internal::GiveTreeToContainer(spec.paths.dir, spec.checkpoint_dir, *spec.run_as);
  std::string program;
  if (status.ok()) {
    auto path_it = spec.config.env.find("PATH");
    absl::StatusOr<std::string> found = internal::FindProgram(
        spec.argv[0], path_it == spec.config.env.end() ? "" : path_it->second);
    if (found.ok()) {
      program = *found;
      spec.argv[0] = program;
    } else {
      status = found.status();
    }
  }
  {
    absl::MutexLock lock(&proc->mu);
    if (status.ok() && proc->cancelled) status = absl::AbortedError("the cluster was released");
  }
  if (status.ok()) {
    // A log stream that cannot be written does not fail the job (as it does
    // not mid-run): observers are told, and get every line.
    std::string broke = log.Open();
    if (!broke.empty()) {
      lines.push_back(std::move(broke));
      post_lines();
    }
  }
  // What preparing the instance for this run left (NoteForRun): the stream's
  // first lines, or observers' when the run ends before it has a stream.
  for (const std::string& note : spec.log->TakeQueued()) {
    if (status.ok()) {
      log_platform(note);
    } else {
      lines.push_back(absl::StrCat("[kiln] ", note));
    }
  }
  post_lines();
  int out[2] = {-1, -1};
  int info[2] = {-1, -1};
  if (status.ok() && pipe2(out, O_CLOEXEC) != 0) {
    status = internal::ErrnoStatus(errno, "pipe", "output");
  }
  if (status.ok() && spec.bwrap && pipe2(info, O_CLOEXEC) != 0) {
    status = internal::ErrnoStatus(errno, "pipe", "bwrap info");
  }
  auto close_fd = [](int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  };
  auto close_all = [&] {
    close_fd(out[0]);
    close_fd(out[1]);
    close_fd(info[0]);
    close_fd(info[1]);
    std::string broke = log.Close();
    if (!broke.empty()) {
      lines.push_back(std::move(broke));
      post_lines();
    }
  };
  pid_t pid = -1;
  bool kept = false;
  if (status.ok()) {
    internal::SpawnSpec ss;
    ss.argv = spec.argv;
    for (const auto& [k, v] : spec.config.env) ss.env.push_back(absl::StrCat(k, "=", v));
    ss.cwd = spec.cwd;
    ss.output_fd = out[1];
    ss.netns_fd = spec.netns_fd;
    ss.run_as = spec.run_as;
    ss.readonly_paths = spec.readonly_paths;
    // bwrap ends its sandbox with this process (--die-with-parent and a PID
    // namespace); the process runtime has the keeper do it.
    ss.keeper = !spec.bwrap;
    std::vector<UniqueFd> bwrap_fds;
    absl::StatusOr<pid_t> spawned = absl::UnknownError("not started");
    if (spec.bwrap) {
      ss.fds.push_back(info[1]);
      absl::Status prepared = PrepareBwrapCommand(spec, ss.argv, ss.env, bwrap_fds);
      for (const UniqueFd& fd : bwrap_fds) ss.fds.push_back(fd.get());
      spawned = prepared.ok() ? internal::Spawn(ss) : absl::StatusOr<pid_t>(prepared);
    } else {
      spawned = internal::Spawn(ss);
    }
    bwrap_fds.clear();
    close_fd(out[1]);
    close_fd(info[1]);
    if (spawned.ok()) {
      pid = *spawned;
      // (A spawn that ran the program directly marked the keeper unusable
      // first.)
      kept = ss.keeper && !internal::KeeperUnusable();
      if (ss.keeper && !kept) {
        log_platform(
            "the process keeper cannot run here (a memory file cannot be executed): the "
            "container's processes would outlive a crash of the process running Kiln");
      }
    } else {
      status = spawned.status();
    }
  }
  if (!status.ok()) {
    log_platform(absl::StrCat("could not start the container: ", status.message()));
    close_all();
    report_start(status);
    finish();
    return;
  }
  const int pidfd = internal::PidfdOpen(pid);
  {
    absl::MutexLock lock(&proc->mu);
    proc->pid = pid;
    proc->kept = kept;
  }
  LineSplitter splitter;
  auto handle_output = [&](std::string_view chunk) {
    // (Observers learn that the stream broke before the lines it lacks.)
    std::string broke = log.AppendOutput(chunk);
    if (!broke.empty()) lines.push_back(std::move(broke));
    splitter.Add(chunk, lines);
  };
  char buf[1 << 16];
  // bwrap: wait until the sandbox is set up (it reports its init's pid).
  bool sandbox_up = !spec.bwrap;
  if (spec.bwrap) {
    // One JSON object; read until it parses (or the pipe closes).
    std::string info_text;
    absl::StatusOr<kiln::JsonValue> doc = absl::NotFoundError("no sandbox information");
    while (true) {
      ssize_t n = read(info[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      info_text.append(buf, static_cast<size_t>(n));
      doc = kiln::ParseJsonValue(info_text);
      if (doc.ok()) break;
    }
    close_fd(info[0]);
    const kiln::JsonValue* child = doc.ok() ? doc->Find("child-pid") : nullptr;
    absl::StatusOr<int64_t> child_pid =
        child != nullptr ? child->AsInt64() : absl::StatusOr<int64_t>(absl::NotFoundError(""));
    if (child_pid.ok()) {
      const pid_t sandbox = static_cast<pid_t>(*child_pid);
      const int sandbox_fd = internal::PidfdOpen(sandbox);
      const std::string ns = ReadLink(absl::StrCat("/proc/", sandbox, "/ns/pid"));
      absl::MutexLock lock(&proc->mu);
      proc->sandbox_pid = sandbox;
      proc->sandbox_pidfd = sandbox_fd;
      proc->sandbox_ns = ns;
      sandbox_up = sandbox_fd >= 0 && !ns.empty();
    }
  }
  {
    absl::MutexLock lock(&proc->mu);
    if (proc->cancelled) SignalLocked(*proc, SIGKILL);
    if (proc->pending_signal != 0) SignalLocked(*proc, std::exchange(proc->pending_signal, 0));
  }

  // Reads output until the main process exits, syncing checkpoints meanwhile.
  auto read_until_exit = [&] {
    bool out_open = true;
    absl::Time next_sync = sync ? absl::Now() + spec.sync_interval : absl::InfiniteFuture();
    while (true) {
      int timeout = -1;
      if (sync) {
        timeout = static_cast<int>(
            std::max<int64_t>(0, absl::ToInt64Milliseconds(next_sync - absl::Now()) + 1));
      }
      if (pidfd < 0) {
        // No pidfd (an old kernel): look for the exit now and then.
        siginfo_t info;
        info.si_pid = 0;
        if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == pid) {
          break;
        }
        timeout = timeout < 0 ? 50 : std::min(timeout, 50);
      }
      struct pollfd fds[2] = {{pidfd, POLLIN, 0}, {out[0], POLLIN, 0}};
      const int r = poll(fds, out_open ? 2 : 1, timeout);
      if (r < 0 && errno != EINTR) break;
      if (out_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
        ssize_t n = read(out[0], buf, sizeof(buf));
        if (n > 0) {
          handle_output(std::string_view(buf, static_cast<size_t>(n)));
          post_lines();
        } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          out_open = false;
        }
      }
      if (pidfd >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) break;
      if (sync && absl::Now() >= next_sync) {
        CheckpointSyncStats done;
        absl::Status s = sync->SyncOnce(&done);
        if (!s.ok()) log_platform(CheckpointSyncFailure(/*final=*/false, s, done));
        next_sync = absl::Now() + spec.sync_interval;
      }
    }
  };
  struct rusage usage;
  std::memset(&usage, 0, sizeof(usage));
  auto reap = [&]() -> int {
    int wstatus = 0;
    absl::MutexLock lock(&proc->mu);
    // What the main process left behind ends with it, as in a container.
    kill(-pid, SIGKILL);
    if (proc->sandbox_pidfd >= 0) internal::PidfdSendSignal(proc->sandbox_pidfd, SIGKILL);
    while (wait4(pid, &wstatus, 0, &usage) < 0 && errno == EINTR) {
    }
    proc->reaped = true;
    if (proc->sandbox_pidfd >= 0) close(proc->sandbox_pidfd);
    proc->sandbox_pidfd = -1;
    if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
    return 1;
  };
  auto drain = [&] {
    const absl::Time deadline = absl::Now() + spec.drain_timeout;
    while (out[0] >= 0) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) break;
      struct pollfd fd = {out[0], POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(left)) <= 0) break;
      ssize_t n = read(out[0], buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      handle_output(std::string_view(buf, static_cast<size_t>(n)));
    }
    splitter.Flush(lines);
  };

  if (!sandbox_up) {
    // bubblewrap could not set the sandbox up: its message is in the output.
    // The output is anything a program printed (escape sequences, bytes that
    // are not UTF-8, pages of it): shown escaped and cut, as input is.
    const int code = reap();
    drain();
    std::string output;
    for (const std::string& l : lines) absl::StrAppend(&output, output.empty() ? "" : "; ", l);
    lines.clear();
    const std::string text = kiln::TextForMessage(output, kMaxFailureBytes);
    log_platform(absl::StrCat("bubblewrap failed (exit ", code, "): ", text));
    if (pidfd >= 0) close(pidfd);
    close_all();
    report_start(absl::InternalError(absl::StrCat("bubblewrap could not start the container (exit ",
                                                  code, "): ", text)));
    finish();
    return;
  }
  report_start(absl::OkStatus());
  read_until_exit();
  ContainerExit exit;
  exit.exit_code = reap();
  if (pidfd >= 0) close(pidfd);
  drain();
  post_lines();
  // Resource use of the container's process tree (what it waited for), in
  // the log stream.
  log_platform(absl::StrFormat(
      "%s exited with %d: cpu %.3f s user, %.3f s system; max resident set %d KiB", spec.host,
      exit.exit_code, usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6,
      usage.ru_stime.tv_sec + usage.ru_stime.tv_usec / 1e6, usage.ru_maxrss));
  absl::StatusOr<std::string> failure =
      internal::ReadFilePrefixBelow(spec.paths.dir, "ml/output/failure",
                                    absl::StrCat(spec.host, ":/opt/ml/output/failure"),
                                    kMaxFailureBytes + 4);
  if (failure.ok()) {
    exit.failure_text = TrimUtf8(*std::move(failure), kMaxFailureBytes);
  } else if (!absl::IsNotFound(failure.status())) {
    // There, but not read: the FailureReason says why rather than reading as
    // if the container had written none.
    exit.failure_error = std::string(failure.status().message());
  }
  bool cancelled;
  {
    absl::MutexLock lock(&proc->mu);
    cancelled = proc->cancelled;
  }
  if (sync && !cancelled) {
    CheckpointSyncStats done;
    absl::Status s = sync->SyncOnce(&done);
    if (!s.ok()) log_platform(CheckpointSyncFailure(/*final=*/true, s, done));
  }
  close_all();
  if (!cancelled) {
    post([provider, cluster_id, run, index, exit] {
      provider->DeliverExit(cluster_id, run, index, exit);
    });
  }
  finish();
}

void LocalClusterProvider::DeliverLines(const std::string& cluster_id, uint64_t run, size_t index,
                                        const std::vector<std::string>& lines) {
  LocalCluster* c = Find(cluster_id);
  if (c == nullptr || c->run != run || c->events == nullptr || index >= c->instances.size()) return;
  const LocalInstance& inst = c->instances[index];
  if (inst.lost) return;
  for (const std::string& line : lines) {
    // The observer may release the cluster; stop then.
    c = Find(cluster_id);
    if (c == nullptr || c->run != run || c->instances[index].lost) return;
    c->events->OnLogLine(c->instances[index].info, line);
  }
}

void LocalClusterProvider::DeliverExit(const std::string& cluster_id, uint64_t run, size_t index,
                                       const ContainerExit& exit) {
  LocalCluster* c = Find(cluster_id);
  if (c == nullptr || c->run != run || c->events == nullptr || index >= c->instances.size()) return;
  if (c->instances[index].lost) return;
  c->events->OnExit(c->instances[index].info, exit);
}

void LocalClusterProvider::Signal(const Cluster& cluster, int signal) {
  LocalCluster* c = Find(cluster.id);
  if (c == nullptr) return;
  for (LocalInstance& inst : c->instances) {
    if (inst.current == nullptr) continue;
    absl::MutexLock lock(&inst.current->mu);
    SignalLocked(*inst.current, signal);
  }
}

void LocalClusterProvider::UploadArtifacts(const JobContext& job, ArtifactsCallback done) {
  LocalCluster* c = Find(job.cluster.id);
  const auto& out = job.request.output_data_config();
  const std::string base =
      JoinUri(out.s3_output_path(), absl::StrCat(internal::Av(job.job_name), "/output"));
  // CompressionType NONE: the model's files as they are, below model/ (the
  // model's URI is that prefix); otherwise model.tar.gz. output.tar.gz is
  // gzip-compressed either way.
  const bool compress_model = absl::AsciiStrToUpper(out.compression_type()) != "NONE";
  const std::string model_uri = absl::StrCat(base, compress_model ? "/model.tar.gz" : "/model/");
  const std::string output_uri = absl::StrCat(base, "/output.tar.gz");
  absl::Status error;
  if (c == nullptr) {
    error = absl::FailedPreconditionError(
        absl::StrCat("unknown local cluster '", job.cluster.id, "'"));
  } else if (options_.object_stores == nullptr) {
    error = absl::FailedPreconditionError(
        "uploading artifacts needs LocalOptions.object_stores, and this provider has none");
  }
  if (!error.ok()) {
    PostIfAlive([done = std::move(done), error]() mutable { done(error); });
    return;
  }
  // The trees are read below each instance's directory, never through a
  // link the container planted (internal::TreeRoot).
  std::vector<internal::TreeRoot> model_roots, data_roots;
  std::vector<std::shared_ptr<RunLog>> logs;  // each instance's last run's, by root
  for (const LocalInstance& inst : c->instances) {
    logs.push_back(inst.last_log);
    const std::string& host = inst.info.host_name;
    model_roots.push_back({inst.paths.dir, "ml/model", absl::StrCat(host, ":/opt/ml/model")});
    data_roots.push_back({inst.paths.dir, "ml/output/data", absl::StrCat(host, ":/opt/ml/output/data")});
  }
  // (Numbered per process: providers of one process may share a state directory.)
  static std::atomic<uint64_t> next_upload{0};
  const std::string tmp_base = absl::StrCat(options_.state_dir, "/tmp/upload-", getpid(), "-",
                                            next_upload.fetch_add(1) + 1);
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, id = c->cluster.id, model_roots, data_roots, compress_model, tmp_base,
              model_uri, output_uri, logs, done = std::move(done), guard,
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
    // What the archives and the upload cannot take (FIFOs, sockets, device
    // nodes) is named in the instance's log stream rather than dropped
    // without a word.
    std::vector<internal::LeftOut> left_out;
    auto note_left_out = [&](std::string_view what) {
      std::map<size_t, std::vector<std::string>> by_root;
      for (internal::LeftOut& l : left_out) by_root[l.root].push_back(std::move(l.display));
      left_out.clear();
      for (auto& [root, names] : by_root) {
        if (root >= logs.size()) continue;
        const size_t shown = std::min<size_t>(names.size(), 10);
        NoteForRun(logs[root],
                   absl::StrCat(internal::Av(what), " leaves out what is not a file, directory or link: ",
                                PathForMessage(absl::StrJoin(names.begin(),
                                                             names.begin() + shown, ", ")),
                                names.size() > shown
                                    ? absl::StrCat(" and ", names.size() - shown, " more")
                                    : ""));
      }
    };
    auto upload_tar = [&](const std::vector<internal::TreeRoot>& roots, const std::string& uri,
                          const std::string& what) -> absl::Status {
      const std::string tmp = absl::StrCat(tmp_base, "-", what);
      absl::Status s = MakeDirs(internal::DirName(tmp));
      // Locked while it exists: a provider made meanwhile on this state
      // directory leaves it alone (StaleFiles).
      absl::StatusOr<UniqueFd> fd = UniqueFd();
      if (s.ok()) fd = internal::MakeLockedScratch(tmp, /*dir=*/false);
      if (!fd.ok()) s = fd.status();
      if (s.ok()) s = internal::WriteTar(roots, fd->get(), tmp, /*gzip=*/true, &left_out);
      note_left_out(absl::StrCat("the ", what, " archive"));
      if (s.ok()) {
        absl::StatusOr<ObjectStore*> store = options_.object_stores->For(uri);
        s = store.ok() ? (*store)->PutFromFile(uri, tmp) : store.status();
      }
      if (fd.ok()) unlink(tmp.c_str());  // (then the lock goes)
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat(PathForMessage(uri), ": ", s.message()));
      }
      return s;
    };
    auto upload_files = [&](const std::vector<internal::TreeRoot>& roots,
                            const std::string& prefix) -> absl::Status {
      absl::StatusOr<ObjectStore*> store = options_.object_stores->For(prefix);
      if (!store.ok()) {
        return absl::Status(store.status().code(),
                            absl::StrCat(PathForMessage(prefix), ": ", store.status().message()));
      }
      // Each file goes from the descriptor it was opened as (its /proc
      // name), never from a path a container could have changed since.
      absl::Status s = internal::ForEachMergedFile(
          roots,
          [&](const std::string& rel, int fd, int64_t) -> absl::Status {
            const std::string uri = absl::StrCat(prefix, rel);
            absl::Status s = (*store)->PutFromFile(uri, absl::StrCat("/proc/self/fd/", fd));
            if (!s.ok()) {
              return absl::Status(s.code(), absl::StrCat(PathForMessage(uri), ": ", s.message()));
            }
            return s;
          },
          &left_out);
      note_left_out("the model upload");
      return s;
    };
    absl::Status s = compress_model ? upload_tar(model_roots, model_uri, "model")
                                    : upload_files(model_roots, model_uri);
    if (s.ok()) s = upload_tar(data_roots, output_uri, "output");
    absl::StatusOr<ArtifactsResult> result =
        s.ok() ? absl::StatusOr<ArtifactsResult>(ArtifactsResult{model_uri}) : s;
    loop_.Post([this, alive, id, result = std::move(result), done = std::move(done)]() mutable {
      if (!alive.lock() || Find(id) == nullptr) return;
      done(std::move(result));
    });
    guard->Reset();
  });
}

absl::Status LocalClusterProvider::InjectInterruption(std::string_view instance_id,
                                                      InterruptionKind kind,
                                                      absl::Duration notice) {
  const size_t slash = instance_id.find('/');
  LocalCluster* c = slash == std::string_view::npos
                        ? nullptr
                        : Find(std::string(instance_id.substr(0, slash)));
  size_t index = 0;
  if (c != nullptr) {
    while (index < c->instances.size() && c->instances[index].info.id != instance_id) ++index;
  }
  if (c == nullptr || index == c->instances.size()) {
    return absl::NotFoundError(absl::StrCat("no local instance '", internal::Av(instance_id), "'"));
  }
  LocalInstance& inst = c->instances[index];
  if (inst.lost) {
    return absl::FailedPreconditionError(
        absl::StrCat("instance '", internal::Av(instance_id), "' is already lost"));
  }
  const std::string cluster_id = c->cluster.id;
  if (kind == InterruptionKind::kInstanceLoss) {
    LoseInstance(cluster_id, index);
    return absl::OkStatus();
  }
  if (inst.loss_timer.valid()) loop_.Cancel(inst.loss_timer);
  const absl::Time deadline = loop_.Now() + notice;
  PostIfAlive([this, cluster_id, index, deadline] {
    LocalCluster* c = Find(cluster_id);
    if (c == nullptr || listener_ == nullptr || c->instances[index].lost) return;
    listener_->OnInterruptionNotice(c->cluster, c->instances[index].info, deadline);
  });
  inst.loss_timer = loop_.ScheduleAfter(notice, [this, cluster_id, index,
                                                 alive = std::weak_ptr<Alive>(alive_)] {
    if (!alive.lock()) return;
    LocalCluster* c = Find(cluster_id);
    if (c == nullptr || c->instances[index].lost) return;
    c->instances[index].loss_timer = TimerHandle();
    LoseInstance(cluster_id, index);
  });
  return absl::OkStatus();
}

void LocalClusterProvider::LoseInstance(const std::string& cluster_id, size_t index) {
  LocalCluster* c = Find(cluster_id);
  if (c == nullptr) return;
  LocalInstance& inst = c->instances[index];
  inst.lost = true;
  if (inst.current) KillProc(*inst.current, /*cancel=*/true);
  PostIfAlive([this, cluster_id, index] {
    LocalCluster* c = Find(cluster_id);
    if (c == nullptr || listener_ == nullptr) return;
    listener_->OnInstanceLost(c->cluster, c->instances[index].info);
  });
}

void LocalClusterProvider::Recycle(const Cluster& cluster) {
  LocalCluster* c = Find(cluster.id);
  if (c == nullptr) return;
  for (LocalInstance& inst : c->instances) {
    if (inst.scrub != nullptr || inst.lost) continue;
    auto scrub = std::make_shared<Scrub>();
    inst.scrub = scrub;
    std::vector<std::shared_ptr<ContainerProc>> wait_for = inst.retired;
    if (inst.current) wait_for.push_back(inst.current);
    // The job's files go now rather than when the next job starts. No work
    // guard: nothing is posted back; PrepareImage and Dispose wait for it.
    tasks_.Run([scrub, wait_for = std::move(wait_for), paths = inst.paths,
                last_log = inst.last_log] {
      for (auto& p : wait_for) p->finished.WaitForNotification();
      std::vector<std::string> trash;
      scrub->status = FreshInstanceTree(paths, trash);
      scrub->done.Notify();
      EmptyTrash(last_log, trash);
      scrub->trash_gone.Notify();
    });
  }
}

void LocalClusterProvider::Release(const Cluster& cluster) {
  auto it = clusters_.find(cluster.id);
  if (it == clusters_.end()) return;
  std::unique_ptr<LocalCluster> c = std::move(it->second);
  clusters_.erase(it);
  Dispose(std::move(c));
}

void LocalClusterProvider::Dispose(std::unique_ptr<LocalCluster> c) {
  instances_in_use_ -= static_cast<int64_t>(c->instances.size());
  for (LocalInstance& inst : c->instances) {
    if (inst.loss_timer.valid()) loop_.Cancel(inst.loss_timer);
    if (inst.current) KillProc(*inst.current, /*cancel=*/true);
    for (auto& p : inst.retired) KillProc(*p, /*cancel=*/true);
  }
  // Waiting for the supervisors and removing the files can take a moment:
  // not on the loop thread.
  tasks_.Run([c = std::move(c)]() mutable {
    for (LocalInstance& inst : c->instances) {
      if (inst.scrub != nullptr) inst.scrub->trash_gone.WaitForNotification();
      if (inst.current) inst.retired.push_back(std::move(inst.current));
      for (auto& p : inst.retired) {
        p->finished.WaitForNotification();
        if (p->thread.joinable()) p->thread.join();
      }
    }
    c->netns.reset();
    // What cannot be deleted (trash and images that already resisted
    // included) is said in each instance's last log stream, and stays for a
    // provider made later on the state directory to try again.
    bool left = false;
    for (const LocalInstance& inst : c->instances) {
      absl::Status s = internal::RemoveTree(inst.paths.dir);
      if (s.ok()) continue;
      left = true;
      NoteForRun(inst.last_log, LeftoverText("the instance's files could not all be deleted "
                                             "when its cluster was released",
                                             s, kLeftForNextProvider));
    }
    if (!internal::RemoveTree(c->dir).ok()) left = true;
    if (left && c->lock != nullptr) c->lock->KeepFile();
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterProvider>> NewLocalClusterProvider(EventLoop& loop,
                                                                         LocalOptions options) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("LocalOptions.state_dir is required");
  }
  absl::StatusOr<std::string> state_dir = internal::OpenStateDir(options.state_dir);
  if (!state_dir.ok()) return state_dir.status();
  options.state_dir = *std::move(state_dir);
  absl::Status s;
  char real[PATH_MAX];
  if (!options.log_dir.empty()) {
    s = MakeDirs(options.log_dir);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("LocalOptions.log_dir: ", s.message()));
    }
    if (realpath(options.log_dir.c_str(), real) != nullptr) options.log_dir = real;
  }
  RuntimeSetup runtime;
  // Who the containers are: another user than this process's own needs root.
  const uid_t euid = geteuid();
  const gid_t egid = getegid();
  const ContainerUser user = options.container_user.value_or(
      euid == 0 ? ContainerUser{} : ContainerUser{static_cast<uint32_t>(euid),
                                                  static_cast<uint32_t>(egid)});
  if (user.uid != euid || user.gid != egid) {
    if (euid != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "LocalOptions.container_user %d:%d: only a provider running as root can run "
          "containers as another user than its own (%d:%d)",
          user.uid, user.gid, euid, egid));
    }
    runtime.run_as = internal::Credentials{static_cast<uid_t>(user.uid),
                                           static_cast<gid_t>(user.gid)};
    for (const auto& [field, dir] :
         {std::pair<const char*, const std::string&>{"state_dir", options.state_dir},
          {"log_dir", options.log_dir}}) {
      if (dir.empty()) continue;
      s = internal::CheckSearchable(dir, user.uid, user.gid);
      if (!s.ok()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "LocalOptions.%s '%s': the container user %d:%d cannot reach it: %s; make it "
            "searchable (chmod o+x), choose another directory, or set "
            "LocalOptions.container_user",
            field, PathForMessage(dir), user.uid, user.gid, s.message()));
      }
    }
  }
  if (options.runtime == LocalRuntime::kBwrap) {
    const char* path = std::getenv("PATH");
    absl::StatusOr<std::string> found =
        internal::FindProgram(options.bwrap_path, path != nullptr ? path : kDefaultHostPath);
    if (!found.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the bwrap runtime needs bubblewrap: ", found.status().message()));
    }
    runtime.bwrap_program = *found;
    absl::StatusOr<std::string> filter = internal::ContainerSeccompFilter();
    if (!filter.ok()) return absl::FailedPreconditionError(filter.status().message());
    runtime.seccomp = std::make_shared<const std::string>(*std::move(filter));
    // It must actually work here (user namespaces, mounts), as the
    // container user.
    internal::SpawnSpec probe;
    probe.argv = {runtime.bwrap_program};
    const std::vector<std::string> identity = BwrapIdentityArgs(runtime.run_as);
    probe.argv.insert(probe.argv.end(), identity.begin(), identity.end());
    probe.argv.insert(probe.argv.end(), {"--ro-bind", "/", "/", "true"});
    probe.run_as = runtime.run_as;
    int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    probe.output_fd = null_fd;
    absl::StatusOr<pid_t> pid = internal::Spawn(probe);
    close(null_fd);
    int wstatus = 0;
    if (pid.ok()) {
      while (waitpid(*pid, &wstatus, 0) < 0 && errno == EINTR) {
      }
    }
    if (!pid.ok() || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the bwrap runtime needs a working bubblewrap: '", absl::StrJoin(probe.argv, " "),
          "' failed", runtime.run_as.has_value() ? absl::StrCat(" as user ", user.uid) : "",
          pid.ok() ? "" : absl::StrCat(": ", pid.status().message())));
    }
  }
  return std::unique_ptr<ClusterProvider>(
      new LocalClusterProvider(loop, std::move(options), std::move(runtime)));
}

}  // namespace kiln::local
