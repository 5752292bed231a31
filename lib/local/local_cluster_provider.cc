// LocalClusterProvider: the adapter from ClusterProvider calls to the local
// host runtime (see kiln/local/local.h for the contract it implements, and
// docs/local-backend.md for how the backend works). It keeps the clusters
// and their runs; the rooms do the work: state_dir.h, image_cache.h,
// instance_tree.h, container_runtime.h (process or bwrap), supervisor.h,
// artifacts.h, log_stream.h, and cluster_part.h for a part of a cluster that
// spans hosts.
//
// Threads. Every ClusterProvider method runs on the loop thread and only
// starts work: Provision, PrepareImage, UploadArtifacts and the clean-up after
// Release run as tasks on threads of their own (TaskRunner); each container
// has a supervisor thread (Supervise) that reports to a Reporter. Worker
// threads never touch the provider's state: they post to the loop, and the
// posted callbacks check that the provider is alive (a weak token) and that
// the cluster and run they belong to are still current before calling anyone.
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
#include "local/artifacts.h"
#include "local/cluster_part.h"
#include "local/container_runtime.h"
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
#include "local/run_record.h"
#include "local/state_dir.h"
#include "local/supervisor.h"
#include "local/view_registry.h"

namespace kiln::local {
namespace {

using internal::BuildContainerConfig;
using internal::ContainerConfig;
using internal::ContainerConfigInput;
using internal::ContainerProc;
using internal::KillProc;
using internal::RunSpec;
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

using internal::kDefaultHostPath;

// Held (weakly) by every posted callback: gone once the provider is.
struct Alive {};

// Ends a network-namespace holder when the last owner lets go.
struct NetnsGuard {
  internal::NetnsHolder holder;
  ~NetnsGuard() { internal::StopNetnsHolder(holder); }
};

// Where a job's checkpoints go: its store and the path the container sees
// them at (CheckpointConfig.LocalPath, cleaned); no store without a
// CheckpointConfig.
struct CheckpointPlace {
  ObjectStore* store = nullptr;
  std::string path;
};

// The checkpoint directory below the instance's directory: below /opt/ml,
// that place in the instance's tree; elsewhere (bwrap only) a directory of
// the instance mounted there.
std::string CheckpointRel(const std::string& path) {
  return IsUnderContainerBase(path)
             ? absl::StrCat("ml", internal::Av(std::string_view(path).substr(
                                      std::string_view(kContainerBase).size())))
             : "checkpoints-local";
}

// ---------------------------------------------------------------------------
// The provider

class LocalClusterProvider;

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
  // A part of a cluster that spans hosts (ProvisionPart): the whole cluster,
  // which the containers' configuration describes, and its hosts(5) text.
  std::optional<Cluster> whole;
  std::string part_hosts;
};

class LocalClusterProvider final : public LocalClusterProviderInterface {
 public:
  // `runtime` starts the containers; `run_as` is the container user when it
  // is not this process's own.
  LocalClusterProvider(EventLoop& loop, LocalOptions options,
                       std::unique_ptr<internal::ContainerRuntime> runtime,
                       std::optional<internal::Credentials> run_as)
      : loop_(loop),
        options_(std::move(options)),
        runtime_(std::move(runtime)),
        run_as_(run_as),
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
    const bool leased = options_.reattach_lease > absl::ZeroDuration() &&
                        options_.runtime == LocalRuntime::kProcess;
    auto stale = std::make_shared<internal::StaleFiles>(
        internal::StaleFiles::Claim(options_.state_dir, /*keep_live=*/leased));
    KeepAdoptable(stale->TakeLive());
    if (!stale->empty()) tasks_.Run([stale] { stale->Delete(); });
  }

  ~LocalClusterProvider() override {
    ending_.Notify();
    alive_.reset();
    for (auto& [id, cluster] : clusters_) Dispose(std::move(cluster));
    clusters_.clear();
    tasks_.JoinAll();
  }

  void Provision(const ClusterSpec& spec, ClusterCallback done) override;
  void ProvisionPart(const ClusterSpec& spec, const ClusterPart& part,
                     ClusterCallback done) override;
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
  absl::Status Reattach(const JobContext& job, ContainerEvents& events) override;

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
  // The keeper's lease in milliseconds, 0 without one (the bwrap runtime's
  // containers end with this process).
  int64_t LeaseMs() const {
    if (options_.runtime != LocalRuntime::kProcess) return 0;
    return std::max<int64_t>(0, absl::ToInt64Milliseconds(options_.reattach_lease));
  }

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

  // Whether `count` more instances fit under max_instances; if not, `done`
  // gets ResourceExhausted (later).
  bool Admit(const std::string& job_name, int64_t count, ClusterCallback& done);
  // A new cluster's id and directory.
  std::unique_ptr<LocalCluster> NewCluster(bool spot);
  // Adds a cluster's instance `host` (the next of `c`'s).
  void AddInstance(LocalCluster& c, std::string host, const std::string& group,
                   const std::string& type);
  // Makes the files of an admitted cluster on a task, then hands it to
  // `done`: its instances' trees, a network namespace (`want_netns`), and in
  // its directory `hosts` (the hosts file, when not empty) and `part_record`
  // (cluster_part.h, when not empty).
  void MakeCluster(std::unique_ptr<LocalCluster> cluster, bool want_netns, std::string hosts,
                   std::string part_record, ClusterCallback done);
  // Gives a cluster taken back (Reattach) what its part record says, when it
  // is a part's. Errors: the record's, naming it.
  absl::Status LoadPart(LocalCluster& c);

  // Stops everything of a cluster taken out of clusters_ and cleans up after
  // it on a task: kills now, waits and removes files later.
  void Dispose(std::unique_ptr<LocalCluster> cluster);

  // The checkpoint store and path of `request` (CheckpointPlace). Errors:
  // those StartContainers gives for a CheckpointConfig it cannot honour.
  absl::StatusOr<CheckpointPlace> CheckpointPlaceOf(const v1::CreateTrainingJobRequest& request);

  // With a lease: the clusters of processes that are gone whose containers
  // still ran when this provider was made, for Reattach to take. Those not
  // taken when the lease has run out are ended and deleted (a task that
  // waits for that, or for the provider's end).
  void KeepAdoptable(std::vector<internal::StaleFiles::Cluster> live);
  // Ends the containers of such a cluster and deletes it. Blocking.
  static void Discard(internal::StaleFiles::Cluster cluster);
  // Reattach of a warm pool's cluster (JobContext::warm_pool): its instances
  // again, for PrepareImage or Release next.
  absl::Status TakeBackPool(const JobContext& job, internal::StaleFiles::Cluster found);

  void LoseInstance(const std::string& cluster_id, size_t index);

  // Takes what a supervisor says about its run (internal::RunReporter) to the
  // loop, where it reaches the engine if the provider, the cluster and the
  // run are still there then.
  class Reporter final : public internal::RunReporter {
   public:
    Reporter(LocalClusterProvider* provider, std::string cluster_id, uint64_t run, size_t index,
             std::string host, std::shared_ptr<StartState> start)
        : provider_(provider),
          loop_(provider->loop_),
          alive_(provider->alive_),
          cluster_id_(std::move(cluster_id)),
          run_(run),
          index_(index),
          host_(std::move(host)),
          start_(std::move(start)) {}

    // The last of the cluster's runs to start reports them all.
    void OnStarted(absl::Status s) override {
      bool last = false;
      absl::Status result;
      {
        absl::MutexLock lock(&start_->mu);
        if (!s.ok() && start_->status.ok()) {
          start_->status = absl::Status(s.code(), absl::StrCat(host_, ": ", s.message()));
        }
        last = --start_->remaining == 0;
        result = start_->status;
      }
      if (!last) return;
      Post([provider = provider_, cluster_id = cluster_id_, run = run_, start = start_,
            result]() mutable {
        if (provider->IsCurrentRun(cluster_id, run) && start->started) {
          std::exchange(start->started, nullptr)(result);
        }
      });
    }

    void OnLines(std::vector<std::string> lines) override {
      Post([provider = provider_, cluster_id = cluster_id_, run = run_, index = index_,
            batch = std::move(lines)] { provider->DeliverLines(cluster_id, run, index, batch); });
    }

    void OnExit(ContainerExit exit) override {
      Post([provider = provider_, cluster_id = cluster_id_, run = run_, index = index_,
            exit = std::move(exit)] { provider->DeliverExit(cluster_id, run, index, exit); });
    }

   private:
    template <typename Fn>
    void Post(Fn fn) {
      loop_.Post([alive = alive_, fn = std::move(fn)]() mutable {
        if (alive.lock()) fn();
      });
    }

    LocalClusterProvider* const provider_;
    EventLoop& loop_;
    const std::weak_ptr<Alive> alive_;
    const std::string cluster_id_;
    const uint64_t run_;
    const size_t index_;
    const std::string host_;
    const std::shared_ptr<StartState> start_;
  };


  EventLoop& loop_;
  LocalOptions options_;
  // Shared with the supervisor threads, which may outlive a cluster's
  // release (never the provider: its destruction joins them).
  std::shared_ptr<const internal::ContainerRuntime> runtime_;
  std::optional<internal::Credentials> run_as_;
  internal::ViewRegistry views_;
  std::string host_path_;
  std::string home_;
  int cpu_count_ = 1;
  ClusterListener* listener_ = nullptr;
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>();
  std::map<std::string, std::unique_ptr<LocalCluster>> clusters_;
  int64_t instances_in_use_ = 0;
  bool netns_unavailable_ = false;  // learned from a failed attempt
  // Clusters of processes that are gone, for Reattach (KeepAdoptable).
  absl::Mutex adoptable_mu_;
  std::map<std::string, internal::StaleFiles::Cluster> adoptable_ ABSL_GUARDED_BY(adoptable_mu_);
  absl::Notification ending_;  // the provider is being destroyed
  internal::ImageCache images_;
  internal::TaskRunner tasks_;      // last: joined first on destruction
};

bool LocalClusterProvider::Admit(const std::string& job_name, int64_t count,
                                 ClusterCallback& done) {
  if (options_.max_instances > 0 && instances_in_use_ + count > options_.max_instances) {
    PostIfAlive([done = std::move(done), job = job_name, count, in_use = instances_in_use_,
                 max = options_.max_instances]() mutable {
      done(absl::ResourceExhaustedError(
          absl::StrCat("job '", job, "' needs ", count, " local instances; ", in_use, " of ", max,
                       " are in use")));
    });
    return false;
  }
  instances_in_use_ += count;
  return true;
}

std::unique_ptr<LocalCluster> LocalClusterProvider::NewCluster(bool spot) {
  auto cluster = std::make_unique<LocalCluster>();
  // Numbered per process, not per provider: providers of one process may share a state
  // directory, where a second "cluster-<pid>-1" would wait for the first one's lock.
  static std::atomic<uint64_t> next_cluster{0};
  cluster->cluster.id = absl::StrCat("cluster-", getpid(), "-", next_cluster.fetch_add(1) + 1);
  cluster->cluster.spot = spot;
  cluster->dir = internal::ClusterDir(options_.state_dir, cluster->cluster.id);
  return cluster;
}

void LocalClusterProvider::AddInstance(LocalCluster& c, std::string host, const std::string& group,
                                       const std::string& type) {
  LocalInstance inst;
  inst.info.host_name = std::move(host);
  inst.info.id = internal::InstanceId(c.cluster.id, inst.info.host_name);
  inst.info.group_name = group;
  inst.info.instance_type = type;
  inst.paths = internal::InstancePaths::Of(options_.state_dir, inst.info.id);
  c.cluster.instances.push_back(inst.info);
  c.instances.push_back(std::move(inst));
}

void LocalClusterProvider::Provision(const ClusterSpec& spec, ClusterCallback done) {
  int64_t count = 0;
  for (const InstanceGroupSpec& g : spec.groups) count += std::max(0, g.count);
  if (count == 0) {
    PostIfAlive([done = std::move(done), job = spec.job_name]() mutable {
      done(absl::InvalidArgumentError(absl::StrCat("job '", job, "' asks for no instances")));
    });
    return;
  }
  if (!Admit(spec.job_name, count, done)) return;
  std::unique_ptr<LocalCluster> cluster = NewCluster(spec.spot);
  int host = 0;
  for (const InstanceGroupSpec& g : spec.groups) {
    for (int i = 0; i < g.count; ++i) {
      AddInstance(*cluster, absl::StrCat("algo-", ++host), g.name, g.instance_type);
    }
  }
  const bool bwrap = options_.runtime == LocalRuntime::kBwrap;
  std::string hosts;
  if (bwrap) {
    hosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
    for (size_t i = 0; i < cluster->instances.size(); ++i) {
      absl::StrAppend(&hosts, "127.0.1.", (i % 250) + 1, "\t", cluster->instances[i].info.host_name,
                      "\n");
    }
  }
  MakeCluster(std::move(cluster), bwrap && !netns_unavailable_, std::move(hosts), "",
              std::move(done));
}

void LocalClusterProvider::ProvisionPart(const ClusterSpec& spec, const ClusterPart& part,
                                         ClusterCallback done) {
  absl::StatusOr<internal::PartLayout> layout = internal::LayOutPart(spec, part);
  if (!layout.ok()) {
    PostIfAlive([done = std::move(done), job = spec.job_name, s = layout.status()]() mutable {
      done(absl::InvalidArgumentError(absl::StrCat("job '", job, "': ", s.message())));
    });
    return;
  }
  if (!Admit(spec.job_name, static_cast<int64_t>(layout->here.size()), done)) return;
  std::unique_ptr<LocalCluster> cluster = NewCluster(spec.spot);
  for (size_t k : layout->here) {
    const Instance& in = layout->whole.instances[k];
    AddInstance(*cluster, in.host_name, in.group_name, in.instance_type);
  }
  cluster->part_hosts = layout->hosts;
  cluster->whole = std::move(layout->whole);
  // The peers are on other hosts: the host's network, never a namespace of
  // the cluster's own.
  MakeCluster(std::move(cluster), /*want_netns=*/false, std::move(layout->hosts),
              internal::PartRecordText(part), std::move(done));
}

void LocalClusterProvider::MakeCluster(std::unique_ptr<LocalCluster> cluster, bool want_netns,
                                       std::string hosts, std::string part_record,
                                       ClusterCallback done) {
  const bool bwrap = options_.runtime == LocalRuntime::kBwrap;
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, cluster = std::move(cluster), done = std::move(done), want_netns, bwrap,
              hosts = std::move(hosts), part_record = std::move(part_record), guard,
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
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
    if (status.ok() && !hosts.empty()) {
      cluster->hosts_file = absl::StrCat(cluster->dir, "/hosts");
      status = internal::WriteFileAtomic(cluster->hosts_file, hosts);
    }
    if (status.ok() && !part_record.empty()) {
      status = internal::WriteFileAtomic(absl::StrCat(cluster->dir, "/", internal::kPartRecordFile),
                                         part_record);
    }
    cluster->netns = std::move(netns);
    cluster->host_network = bwrap && cluster->netns == nullptr;
    // A failed attempt's files go now, off the loop thread and before the
    // caller hears of it.
    if (!status.ok()) dirs.reset();
    // (The status moves: this thread keeps no reference to its shared
    // message, which the loop thread then drops alone.)
    loop_.Post([this, alive, cluster = std::move(cluster), done = std::move(done),
                status = std::move(status), dirs = std::move(dirs), netns_denied]() mutable {
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
      LocalCluster* live = Find(id);
      if (live == nullptr) return;  // released meanwhile: dropped
      absl::Status status;
      for (size_t i = 0; i < work->size() && i < live->instances.size(); ++i) {
        const Work& w = (*work)[i];
        if (!w.status.ok()) {
          if (status.ok()) {
            status = absl::Status(w.status.code(), absl::StrCat(live->instances[i].info.host_name,
                                                                ": ", w.status.message()));
          }
          continue;
        }
        live->instances[i].image_root = w.image_root;
        live->instances[i].program_dir = w.program_dir;
        live->instances[i].tree_fresh = true;
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
  absl::StatusOr<CheckpointPlace> checkpoints = CheckpointPlaceOf(request);
  if (!checkpoints.ok()) {
    fail(checkpoints.status());
    return;
  }
  ObjectStore* const checkpoint_store = checkpoints->store;
  const std::string& checkpoint_path = checkpoints->path;
  const auto& spec = request.algorithm_specification();
  const bool isolated = request.enable_network_isolation();

  c->run++;
  // (No longer a pool's: its runs say what may be taken back.)
  if (LeaseMs() > 0) unlink(absl::StrCat(c->dir, "/", internal::kRetainedFile).c_str());
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
    RunSpec ls;
    ls.host = inst.info.host_name;
    ls.paths = inst.paths;
    ls.log = std::exchange(inst.next_log, nullptr);
    if (ls.log == nullptr) ls.log = std::make_shared<RunLog>();
    ls.log->Name(
        absl::StrCat(options_.log_dir, "/", log_job, "/", inst.info.host_name, "-", epoch));
    ls.run_as = run_as_;
    ls.sync_interval = options_.checkpoint_sync_interval;
    ls.drain_timeout = options_.output_drain_timeout;
    ls.wait_for = inst.retired;
    ls.lease_ms = LeaseMs();
    if (ls.lease_ms > 0) ls.run_dir = internal::RunDir(c->dir, inst.info.host_name);
    internal::CommandInput cmd;
    cmd.host = inst.info.host_name;
    cmd.paths = inst.paths;
    cmd.program_dir = inst.program_dir;
    cmd.image_root = inst.image_root;
    cmd.state_dir = options_.state_dir;
    cmd.log_dir = options_.log_dir;
    cmd.hosts_file = c->hosts_file;
    cmd.netns_fd = c->netns != nullptr ? c->netns->holder.ns_fd : -1;
    cmd.isolated = isolated;
    ContainerConfigInput in;
    in.request = &request;
    in.job_name = std::string(job.job_name);
    in.job_arn = std::string(job.job_arn);
    // (A part's containers are told of the whole cluster.)
    in.cluster = c->whole.has_value() ? &*c->whole : &c->cluster;
    in.instance = &inst.info;
    in.cpu_count = cpu_count_;
    in.network_interface_name = options_.network_interface_name;
    in.host_path = host_path_;
    runtime_->FillPaths(cmd, home_, in);
    ls.config = BuildContainerConfig(in);
    if (!c->part_hosts.empty()) {
      ls.config.hosts = c->part_hosts;
      ls.config.env[internal::kHostsFileVariable] =
          absl::StrCat(in.base_dir, "/", internal::kHostsFileRel);
    }
    // The command line, as the container sees it.
    if (spec.container_entrypoint_size() > 0) {
      cmd.command.assign(spec.container_entrypoint().begin(), spec.container_entrypoint().end());
    } else {
      cmd.command.push_back(absl::StrCat(kContainerProgram, "/train"));
    }
    cmd.command.insert(cmd.command.end(), spec.container_arguments().begin(),
                       spec.container_arguments().end());
    // Directories a run must find empty: already so when PrepareImage made the
    // tree and nothing ran since (the engine's way), else emptied now.
    // (Paths below the instance's directory: a run may have planted links
    // there, which are replaced, never followed.)
    if (!inst.tree_fresh) {
      ls.fresh_dirs = {"ml/model", "ml/output", "ml/output/data", "ml/output/intermediate",
                       kInstanceTmp};
    }
    if (checkpoint_store != nullptr) {
      const bool in_tree = IsUnderContainerBase(checkpoint_path);
      const std::string checkpoint_rel = CheckpointRel(checkpoint_path);
      const std::string checkpoint_host = absl::StrCat(inst.paths.dir, "/", checkpoint_rel);
      ls.checkpoint_store = checkpoint_store;
      ls.checkpoint_uri = request.checkpoint_config().s3_uri();
      ls.checkpoint_dir = checkpoint_host;
      if (!in_tree) {
        cmd.checkpoint_host = checkpoint_host;
        cmd.checkpoint_path = checkpoint_path;
      }
      // (A fresh tree has /opt/ml/checkpoints, empty, and nothing else of this.)
      if (!inst.tree_fresh || checkpoint_rel != "ml/checkpoints") {
        ls.fresh_dirs.push_back(checkpoint_rel);
      }
    } else if (!inst.tree_fresh) {
      ls.fresh_dirs.push_back("ml/checkpoints");
    }
    inst.tree_fresh = false;
    runtime_->BuildCommand(cmd, ls);
    auto proc = std::make_shared<ContainerProc>();
    ContainerProc* raw = proc.get();
    inst.current = proc;
    inst.last_log = ls.log;
    auto reporter = std::make_unique<Reporter>(this, c->cluster.id, c->run, i,
                                               inst.info.host_name, start);
    raw->thread = std::thread([runtime = runtime_, views = views_, ls = std::move(ls), raw,
                               reporter = std::move(reporter),
                               guard = loop_.AcquireWork()]() mutable {
      internal::Supervise(*runtime, views, std::move(ls), *raw, *reporter);
      guard.Reset();
    });
  }
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
    internal::SignalLocked(*inst.current, signal);
  }
}

void LocalClusterProvider::UploadArtifacts(const JobContext& job, ArtifactsCallback done) {
  LocalCluster* c = Find(job.cluster.id);
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
  const auto& out = job.request.output_data_config();
  internal::ArtifactsPlan plan;
  plan.base_uri = internal::ArtifactsBaseUri(out.s3_output_path(), job.job_name);
  plan.compress_model = absl::AsciiStrToUpper(out.compression_type()) != "NONE";
  for (const LocalInstance& inst : c->instances) {
    plan.instances.push_back({inst.paths.dir, inst.info.host_name, inst.last_log});
  }
  // (Numbered per process: providers of one process may share a state directory.)
  static std::atomic<uint64_t> next_upload{0};
  plan.scratch_base = absl::StrCat(options_.state_dir, "/tmp/upload-", getpid(), "-",
                                   next_upload.fetch_add(1) + 1);
  auto guard = std::make_shared<EventLoop::WorkGuard>(loop_.AcquireWork());
  tasks_.Run([this, id = c->cluster.id, plan = std::move(plan), done = std::move(done), guard,
              alive = std::weak_ptr<Alive>(alive_)]() mutable {
    absl::StatusOr<ArtifactsResult> result =
        internal::UploadArtifacts(*options_.object_stores, plan);
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
    LocalCluster* live = Find(cluster_id);
    if (live == nullptr || listener_ == nullptr || live->instances[index].lost) return;
    listener_->OnInterruptionNotice(live->cluster, live->instances[index].info, deadline);
  });
  inst.loss_timer = loop_.ScheduleAfter(notice, [this, cluster_id, index,
                                                 alive = std::weak_ptr<Alive>(alive_)] {
    if (!alive.lock()) return;
    LocalCluster* live = Find(cluster_id);
    if (live == nullptr || live->instances[index].lost) return;
    live->instances[index].loss_timer = TimerHandle();
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
    LocalCluster* live = Find(cluster_id);
    if (live == nullptr || listener_ == nullptr) return;
    listener_->OnInstanceLost(live->cluster, live->instances[index].info);
  });
}

void LocalClusterProvider::Recycle(const Cluster& cluster) {
  LocalCluster* c = Find(cluster.id);
  if (c == nullptr) return;
  // With a lease, a provider made later may take the pool back (Reattach).
  if (LeaseMs() > 0) {
    const std::string marker = absl::StrCat(c->dir, "/", internal::kRetainedFile);
    const int fd = open(marker.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
  }
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

absl::StatusOr<CheckpointPlace> LocalClusterProvider::CheckpointPlaceOf(
    const v1::CreateTrainingJobRequest& request) {
  CheckpointPlace place;
  if (!request.has_checkpoint_config()) return place;
  if (options_.object_stores == nullptr) {
    return absl::FailedPreconditionError(
        "CheckpointConfig needs LocalOptions.object_stores, and this provider has none");
  }
  absl::StatusOr<ObjectStore*> store =
      options_.object_stores->For(request.checkpoint_config().s3_uri());
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("CheckpointConfig.S3Uri: ", store.status().message()));
  }
  place.store = *store;
  place.path = request.checkpoint_config().local_path();
  while (place.path.size() > 1 && place.path.back() == '/') place.path.pop_back();
  if (place.path.empty()) place.path = kDefaultCheckpointPath;
  if (place.path[0] != '/' ||
      !internal::IsSafeRelativePath(std::string_view(place.path).substr(1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckpointConfig.LocalPath '", PathForMessage(place.path),
                     "' must be an absolute path without '.', '..' or empty components"));
  }
  if (absl::Status s = runtime_->CheckCheckpointPath(place.path); !s.ok()) return s;
  return place;
}

void LocalClusterProvider::KeepAdoptable(std::vector<internal::StaleFiles::Cluster> live) {
  if (live.empty()) return;
  {
    absl::MutexLock lock(&adoptable_mu_);
    for (internal::StaleFiles::Cluster& c : live) adoptable_[c.id] = std::move(c);
  }
  // (No work guard: nothing is posted back, and the loop need not wait.)
  tasks_.Run([this] {
    ending_.WaitForNotificationWithTimeout(options_.reattach_lease);
    std::map<std::string, internal::StaleFiles::Cluster> left;
    {
      absl::MutexLock lock(&adoptable_mu_);
      left.swap(adoptable_);
    }
    for (auto& [id, c] : left) Discard(std::move(c));
  });
}

void LocalClusterProvider::Discard(internal::StaleFiles::Cluster cluster) {
  const std::string runs = absl::StrCat(cluster.dir, "/runs");
  std::vector<internal::UniqueFd> keepers;
  if (DIR* d = opendir(runs.c_str()); d != nullptr) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      absl::StatusOr<internal::RunRecord> r =
          internal::ReadRunRecord(absl::StrCat(runs, "/", e->d_name));
      if (!r.ok()) continue;
      internal::UniqueFd keeper = internal::OpenKeeper(*r);
      if (!keeper.valid()) continue;
      // The keeper ends its container, then itself.
      internal::PidfdSendSignal(keeper.get(), internal::KeeperEndSignal());
      internal::PidfdSendSignal(keeper.get(), SIGCONT);
      keepers.push_back(std::move(keeper));
    }
    closedir(d);
  }
  for (const internal::UniqueFd& k : keepers) {
    struct pollfd fd = {k.get(), POLLIN, 0};
    poll(&fd, 1, 5000);
  }
  if (!internal::RemoveTree(cluster.dir).ok()) cluster.lock->KeepFile();
  cluster.lock.reset();
}

absl::Status LocalClusterProvider::TakeBackPool(const JobContext& job,
                                                internal::StaleFiles::Cluster found) {
  auto c = std::make_unique<LocalCluster>();
  c->cluster = job.cluster;
  c->dir = found.dir;
  for (const Instance& info : job.cluster.instances) {
    LocalInstance inst;
    inst.info = info;
    inst.paths = internal::InstancePaths::Of(options_.state_dir, info.id);
    if (!internal::IsDirectory(inst.paths.dir) ||
        access(absl::StrCat(c->dir, "/", internal::kRetainedFile).c_str(), F_OK) != 0) {
      tasks_.Run([cluster = std::make_shared<internal::StaleFiles::Cluster>(std::move(found))] {
        Discard(std::move(*cluster));
      });
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot take back local cluster '", job.cluster.id, "': it is not a warm pool's"));
    }
    c->instances.push_back(std::move(inst));
  }
  if (absl::Status s = LoadPart(*c); !s.ok()) {
    tasks_.Run([cluster = std::make_shared<internal::StaleFiles::Cluster>(std::move(found))] {
      Discard(std::move(*cluster));
    });
    return absl::FailedPreconditionError(
        absl::StrCat("cannot take back local cluster '", job.cluster.id, "': ", s.message()));
  }
  c->lock = std::move(found.lock);
  instances_in_use_ += static_cast<int64_t>(c->instances.size());
  clusters_[c->cluster.id] = std::move(c);
  return absl::OkStatus();
}

absl::Status LocalClusterProvider::LoadPart(LocalCluster& c) {
  const std::string path = absl::StrCat(c.dir, "/", internal::kPartRecordFile);
  // (A record is a few hundred bytes an instance.)
  absl::StatusOr<std::string> text = internal::ReadFilePrefix(path, size_t{16} << 20);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();  // not a part's
  if (!text.ok()) return text.status();
  absl::StatusOr<ClusterPart> part = internal::ParsePartRecord(*text);
  absl::StatusOr<internal::PartLayout> layout =
      part.ok() ? internal::LayOutPart(ClusterSpec{}, *part)
                : absl::StatusOr<internal::PartLayout>(part.status());
  if (!layout.ok()) {
    return absl::Status(layout.status().code(),
                        absl::StrCat(PathForMessage(path), ": ", layout.status().message()));
  }
  layout->whole.spot = c.cluster.spot;
  c.part_hosts = layout->hosts;
  c.whole = std::move(layout->whole);
  c.hosts_file = absl::StrCat(c.dir, "/hosts");
  c.host_network = options_.runtime == LocalRuntime::kBwrap;
  return absl::OkStatus();
}

absl::Status LocalClusterProvider::Reattach(const JobContext& job, ContainerEvents& events) {
  if (LeaseMs() == 0) {
    return absl::FailedPreconditionError(
        options_.runtime == LocalRuntime::kProcess
            ? "the local provider has no LocalOptions.reattach_lease: containers end with the "
              "process that started them"
            : "the bwrap runtime's containers end with the process that started them");
  }
  std::optional<internal::StaleFiles::Cluster> found;
  {
    absl::MutexLock lock(&adoptable_mu_);
    auto it = adoptable_.find(job.cluster.id);
    if (it != adoptable_.end()) {
      found = std::move(it->second);
      adoptable_.erase(it);
    }
  }
  if (!found.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no container of local cluster '", job.cluster.id,
                     "' still runs on this state directory (they ended, or their lease ran out)"));
  }
  if (job.warm_pool) return TakeBackPool(job, std::move(*found));
  absl::StatusOr<CheckpointPlace> checkpoints = CheckpointPlaceOf(job.request);
  auto c = std::make_unique<LocalCluster>();
  c->cluster = job.cluster;
  c->dir = found->dir;
  c->run = 1;
  c->events = &events;
  std::vector<RunSpec> specs;
  std::vector<internal::UniqueFd> keepers;
  absl::Status status = checkpoints.status();
  if (status.ok()) status = LoadPart(*c);
  for (const Instance& info : job.cluster.instances) {
    if (!status.ok()) break;
    LocalInstance inst;
    inst.info = info;
    inst.paths = internal::InstancePaths::Of(options_.state_dir, info.id);
    RunSpec ls;
    ls.host = info.host_name;
    ls.paths = inst.paths;
    ls.run_dir = internal::RunDir(c->dir, info.host_name);
    ls.lease_ms = LeaseMs();
    ls.sync_interval = options_.checkpoint_sync_interval;
    ls.drain_timeout = options_.output_drain_timeout;
    absl::StatusOr<internal::RunRecord> record = internal::ReadRunRecord(ls.run_dir);
    if (!record.ok()) {
      status = record.status();
      break;
    }
    internal::UniqueFd keeper = internal::OpenKeeper(*record);
    if (!keeper.valid()) {
      status = absl::FailedPreconditionError(
          absl::StrCat(info.host_name, ": its container no longer runs"));
      break;
    }
    internal::UniqueFd output(internal::PidfdGetfd(keeper.get(), internal::kKeeperOutputFd));
    if (!output.valid()) {
      status = internal::ErrnoStatus(errno, "take the output of",
                                     absl::StrCat(info.host_name, "'s container"));
      break;
    }
    ls.log = std::make_shared<RunLog>();
    status = ls.log->Adopt(record->stream);
    if (!status.ok()) break;
    if (checkpoints->store != nullptr) {
      ls.checkpoint_store = checkpoints->store;
      ls.checkpoint_uri = job.request.checkpoint_config().s3_uri();
      ls.checkpoint_dir = absl::StrCat(inst.paths.dir, "/", CheckpointRel(checkpoints->path));
    }
    auto proc = std::make_shared<ContainerProc>();
    {
      absl::MutexLock lock(&proc->mu);
      proc->pid = record->keeper;
      proc->kept = true;
    }
    ls.adopted = RunSpec::Adopted{dup(keeper.get()), output.release(), record->stream};
    inst.current = std::move(proc);
    inst.last_log = ls.log;
    keepers.push_back(std::move(keeper));
    specs.push_back(std::move(ls));
    c->instances.push_back(std::move(inst));
  }
  if (!status.ok()) {
    for (RunSpec& ls : specs) {
      close(ls.adopted->keeper_pidfd);
      close(ls.adopted->output);
    }
    tasks_.Run([cluster = std::make_shared<internal::StaleFiles::Cluster>(
                    std::move(*found))]() mutable { Discard(std::move(*cluster)); });
    return absl::FailedPreconditionError(
        absl::StrCat("cannot take back local cluster '", job.cluster.id, "': ", status.message()));
  }
  c->lock = std::move(found->lock);
  for (size_t i = 0; i < c->instances.size(); ++i) {
    LocalInstance& inst = c->instances[i];
    ContainerProc* raw = inst.current.get();
    auto reporter =
        std::make_unique<Reporter>(this, c->cluster.id, c->run, i, inst.info.host_name, nullptr);
    raw->thread =
        std::thread([runtime = runtime_, views = views_, ls = std::move(specs[i]), raw,
                     reporter = std::move(reporter), guard = loop_.AcquireWork()]() mutable {
          internal::Supervise(*runtime, views, std::move(ls), *raw, *reporter);
          guard.Reset();
        });
  }
  instances_in_use_ += static_cast<int64_t>(c->instances.size());
  clusters_[c->cluster.id] = std::move(c);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterProvider>> NewLocalClusterProvider(EventLoop& loop,
                                                                         LocalOptions options) {
  absl::StatusOr<std::unique_ptr<LocalClusterProviderInterface>> provider =
      NewLocalClusterProviderWithParts(loop, std::move(options));
  if (!provider.ok()) return provider.status();
  return std::unique_ptr<ClusterProvider>(*std::move(provider));
}

absl::StatusOr<std::unique_ptr<LocalClusterProviderInterface>> NewLocalClusterProviderWithParts(
    EventLoop& loop, LocalOptions options) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("LocalOptions.state_dir is required");
  }
  absl::StatusOr<std::string> state_dir = internal::OpenStateDir(options.state_dir);
  if (!state_dir.ok()) return state_dir.status();
  options.state_dir = *std::move(state_dir);
  absl::Status s;
  char real[PATH_MAX];
  if (!options.log_dir.empty()) {
    s = internal::MakeDirs(options.log_dir);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("LocalOptions.log_dir: ", s.message()));
    }
    if (realpath(options.log_dir.c_str(), real) != nullptr) options.log_dir = real;
  }
  std::optional<internal::Credentials> run_as;
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
    run_as = internal::Credentials{static_cast<uid_t>(user.uid),
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
  std::unique_ptr<internal::ContainerRuntime> runtime;
  if (options.runtime == LocalRuntime::kBwrap) {
    absl::StatusOr<std::unique_ptr<internal::ContainerRuntime>> bwrap =
        internal::NewBwrapRuntime(options.bwrap_path, run_as);
    if (!bwrap.ok()) return bwrap.status();
    runtime = *std::move(bwrap);
  } else {
    runtime = internal::NewProcessRuntime(run_as);
  }
  return std::unique_ptr<LocalClusterProviderInterface>(
      new LocalClusterProvider(loop, std::move(options), std::move(runtime), run_as));
}

}  // namespace kiln::local
