#include <algorithm>
#include <csignal>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/sim/sim.h"

namespace kiln::sim {
namespace {

class SimClusterProvider final : public ClusterProvider {
 public:
  SimClusterProvider(EventLoop& loop, SimClusterOptions options)
      : loop_(loop), options_(std::move(options)) {}

  ~SimClusterProvider() override {
    for (auto& [id, cluster] : clusters_) CancelAll(cluster);
  }

  void Provision(const ClusterSpec& spec, ClusterCallback done) override {
    SimJobBehavior behavior =
        options_.behavior ? options_.behavior(spec.job_name) : options_.defaults;
    int attempt = ++provision_attempts_[spec.job_name];
    if (attempt <= behavior.capacity_failures) {
      loop_.ScheduleAfter(behavior.capacity_error_latency,
                          [done = std::move(done), job = spec.job_name]() mutable {
                            done(absl::ResourceExhaustedError(absl::StrCat(
                                "insufficient capacity for job '", job, "'")));
                          });
      return;
    }
    Cluster cluster;
    cluster.id = absl::StrCat("sim-cluster-", ++next_cluster_);
    cluster.spot = spec.spot;
    int host = 0;
    for (const InstanceGroupSpec& g : spec.groups) {
      for (int i = 0; i < g.count; ++i) {
        ++host;
        cluster.instances.push_back(Instance{absl::StrCat(cluster.id, "-i", host),
                                             absl::StrCat("algo-", host), g.name, g.instance_type});
      }
    }
    SimCluster& sim = clusters_[cluster.id];
    sim.behavior = std::move(behavior);
    sim.cluster = cluster;
    loop_.ScheduleAfter(sim.behavior.provision_latency,
                        [done = std::move(done), cluster = std::move(cluster)]() mutable {
                          done(std::move(cluster));
                        });
  }

  void PrepareImage(const Cluster& cluster, std::string_view image, DoneCallback done) override {
    SimCluster* sim = Find(cluster);
    absl::Duration d = absl::ZeroDuration();
    // A cluster keeps the images it has prepared: a warm cluster reused for
    // the same image pays nothing.
    if (sim != nullptr && sim->images.insert(std::string(image)).second) {
      d = sim->behavior.image_preparation;
    }
    Track(sim, loop_.ScheduleAfter(d, [done = std::move(done)]() mutable { done(absl::OkStatus()); }));
  }

  void SetListener(ClusterListener* listener) override { listener_ = listener; }

  absl::Status InjectInterruption(std::string_view instance_id, InterruptionKind kind,
                                  absl::Duration notice) override {
    for (auto& [id, sim] : clusters_) {
      for (size_t i = 0; i < sim.cluster.instances.size(); ++i) {
        if (sim.cluster.instances[i].id != instance_id) continue;
        if (kind == InterruptionKind::kSpotNotice) {
          Notice(sim, i, notice);
        } else {
          Lose(sim, i);
        }
        return absl::OkStatus();
      }
    }
    return absl::NotFoundError(absl::StrCat("no instance '", std::string(instance_id), "'"));
  }

  void StartContainers(const JobContext& job, ContainerEvents& events,
                       DoneCallback started) override {
    SimCluster* sim = Find(job.cluster);
    if (sim == nullptr) {
      loop_.ScheduleAfter(absl::ZeroDuration(), [started = std::move(started)]() mutable {
        started(absl::FailedPreconditionError("unknown cluster"));
      });
      return;
    }
    // A reused cluster: the behaviour is the new job's, and nothing of the
    // previous run may reach the new job's events.
    if (options_.behavior) sim->behavior = options_.behavior(job.job_name);
    for (TimerHandle h : sim->exit_timers) loop_.Cancel(h);
    const uint64_t run = ++sim->run;
    sim->events = &events;
    sim->running.assign(sim->cluster.instances.size(), true);
    sim->exit_timers.assign(sim->cluster.instances.size(), TimerHandle());
    // The work model: resume from saved progress, if any.
    sim->job_name = std::string(job.job_name);
    sim->progress_key.clear();
    if (job.request.has_checkpoint_config() && sim->behavior.checkpoint_interval > absl::ZeroDuration()) {
      sim->progress_key = job.request.checkpoint_config().s3_uri();
    }
    sim->run_base = sim->progress_key.empty() ? absl::ZeroDuration() : progress_[sim->progress_key];
    sim->run_start = loop_.Now();
    sim->run_open = true;
    const int attempt = ++attempts_[sim->job_name];
    if (options_.stats != nullptr) (*options_.stats)[sim->job_name].attempts = attempt;
    const absl::Duration remaining =
        std::max(absl::ZeroDuration(), sim->behavior.run_duration - sim->run_base);
    if (static_cast<size_t>(attempt) <= sim->behavior.spot_notices.size()) {
      const absl::Duration at = sim->behavior.spot_notices[attempt - 1];
      if (at != absl::InfiniteDuration()) {
        Track(sim, loop_.ScheduleAfter(at, [this, id = sim->cluster.id, run] {
          SimCluster* s = Find(id);
          if (s != nullptr && s->run == run) Notice(*s, 0, s->behavior.spot_notice);
        }));
      }
    }
    if (static_cast<size_t>(attempt) <= sim->behavior.instance_losses.size()) {
      const absl::Duration at = sim->behavior.instance_losses[attempt - 1];
      if (at != absl::InfiniteDuration()) {
        Track(sim, loop_.ScheduleAfter(at, [this, id = sim->cluster.id, run] {
          SimCluster* s = Find(id);
          if (s != nullptr && s->run == run) {
            Lose(*s, static_cast<size_t>(s->behavior.lost_instance) % s->cluster.instances.size());
          }
        }));
      }
    }
    Track(sim, loop_.ScheduleAfter(absl::ZeroDuration(), [started = std::move(started)]() mutable {
      started(absl::OkStatus());
    }));
    const std::string id = sim->cluster.id;
    for (size_t i = 0; i < sim->cluster.instances.size(); ++i) {
      for (const auto& [offset, line] : sim->behavior.log_lines) {
        Track(sim, loop_.ScheduleAfter(offset, [this, id, i, run, line = line] {
          if (SimCluster* s = Find(id); s != nullptr && s->run == run && s->running[i]) {
            s->events->OnLogLine(s->cluster.instances[i], line);
          }
        }));
      }
      const bool fails = static_cast<int>(i) == sim->behavior.failing_instance;
      ScheduleExit(*sim, i, remaining,
                   ContainerExit{fails ? sim->behavior.exit_code : 0,
                                 fails ? sim->behavior.failure_text : std::string()});
    }
  }

  void Signal(const Cluster& cluster, int signal) override {
    SimCluster* sim = Find(cluster);
    if (sim == nullptr) return;
    for (size_t i = 0; i < sim->running.size(); ++i) {
      if (!sim->running[i]) continue;
      if (signal == SIGKILL) {
        ScheduleExit(*sim, i, absl::ZeroDuration(), ContainerExit{128 + SIGKILL, ""});
      } else if (signal == SIGTERM && sim->behavior.sigterm_exit_delay != absl::InfiniteDuration()) {
        ScheduleExit(*sim, i, sim->behavior.sigterm_exit_delay, ContainerExit{0, ""});
      }
    }
  }

  void UploadArtifacts(const JobContext& job, ArtifactsCallback done) override {
    SimCluster* sim = Find(job.cluster);
    absl::Duration d = sim != nullptr ? sim->behavior.upload_duration : absl::ZeroDuration();
    std::string uri = absl::StrCat(job.request.output_data_config().s3_output_path(), "/",
                                   std::string(job.job_name), "/output/model.tar.gz");
    Track(sim, loop_.ScheduleAfter(d, [done = std::move(done), uri = std::move(uri)]() mutable {
      done(ArtifactsResult{std::move(uri)});
    }));
  }

  void Release(const Cluster& cluster) override {
    auto it = clusters_.find(cluster.id);
    if (it == clusters_.end()) return;
    EndRun(it->second);
    CancelAll(it->second);
    clusters_.erase(it);
  }

 private:
  struct SimCluster {
    SimJobBehavior behavior;
    Cluster cluster;
    ContainerEvents* events = nullptr;
    std::vector<bool> running;
    std::vector<TimerHandle> exit_timers;
    std::vector<TimerHandle> timers;  // everything else pending on this cluster
    std::set<std::string> images;     // prepared on this cluster (its image cache)
    uint64_t run = 0;                 // StartContainers calls so far
    // The run in progress, for the work model.
    std::string job_name;
    std::string progress_key;         // CheckpointConfig.S3Uri, or empty
    absl::Duration run_base;          // progress when the run started
    absl::Time run_start;
    bool run_open = false;
  };

  // Ends the current run of `sim` once: the work it did, and the progress it
  // saved (its last checkpoint, or everything when it ran to the end).
  void EndRun(SimCluster& sim) {
    if (!sim.run_open) return;
    sim.run_open = false;
    const absl::Duration total = sim.behavior.run_duration;
    const absl::Duration executed =
        std::min(loop_.Now() - sim.run_start, std::max(absl::ZeroDuration(), total - sim.run_base));
    const bool completed = sim.run_base + executed >= total;
    absl::Duration saved = sim.run_base;
    if (completed) {
      saved = total;
    } else if (!sim.progress_key.empty()) {
      const absl::Duration k = sim.behavior.checkpoint_interval;
      absl::Duration unsaved;  // (IDivDuration requires somewhere to put the remainder)
      saved = std::max(sim.run_base, k * absl::IDivDuration(sim.run_base + executed, k, &unsaved));
    }
    if (!sim.progress_key.empty()) progress_[sim.progress_key] = saved;
    if (options_.stats != nullptr) {
      SimJobStats& st = (*options_.stats)[sim.job_name];
      st.work_executed += executed;
      st.progress = sim.progress_key.empty() && !completed ? absl::ZeroDuration() : saved;
      st.completed = completed;
    }
  }

  // A spot notice for instance `i`: the listener hears now, the instance is
  // lost after `notice` unless the cluster is released first.
  void Notice(SimCluster& sim, size_t i, absl::Duration notice) {
    if (listener_ != nullptr) {
      listener_->OnInterruptionNotice(sim.cluster, sim.cluster.instances[i], loop_.Now() + notice);
    }
    Track(&sim, loop_.ScheduleAfter(notice, [this, id = sim.cluster.id, i, run = sim.run] {
      SimCluster* s = Find(id);
      if (s != nullptr && s->run == run) Lose(*s, i);
    }));
  }

  // Instance `i` is gone: its container ends without an exit report.
  void Lose(SimCluster& sim, size_t i) {
    if (i < sim.running.size() && sim.running[i]) {
      EndRun(sim);
      sim.running[i] = false;
      loop_.Cancel(sim.exit_timers[i]);
    }
    if (listener_ != nullptr) listener_->OnInstanceLost(sim.cluster, sim.cluster.instances[i]);
  }

  SimCluster* Find(const Cluster& cluster) { return Find(cluster.id); }
  SimCluster* Find(const std::string& id) {
    auto it = clusters_.find(id);
    return it == clusters_.end() ? nullptr : &it->second;
  }

  void Track(SimCluster* sim, TimerHandle h) {
    if (sim != nullptr) sim->timers.push_back(h);
  }

  void CancelAll(SimCluster& sim) {
    for (TimerHandle h : sim.timers) loop_.Cancel(h);
    for (TimerHandle h : sim.exit_timers) loop_.Cancel(h);
    sim.timers.clear();
  }

  // (Re)schedules the exit of container `i`: a signal replaces the natural
  // end of the run.
  void ScheduleExit(SimCluster& sim, size_t i, absl::Duration after, ContainerExit exit) {
    loop_.Cancel(sim.exit_timers[i]);
    const std::string id = sim.cluster.id;
    sim.exit_timers[i] = loop_.ScheduleAfter(after, [this, id, i, run = sim.run,
                                                     exit = std::move(exit)] {
      SimCluster* s = Find(id);
      if (s == nullptr || s->run != run || !s->running[i]) return;
      EndRun(*s);
      s->running[i] = false;
      s->exit_timers[i] = TimerHandle();
      s->events->OnExit(s->cluster.instances[i], exit);
    });
  }

  EventLoop& loop_;
  SimClusterOptions options_;
  std::map<std::string, SimCluster> clusters_;
  std::map<std::string, int> provision_attempts_;
  std::map<std::string, int> attempts_;                  // StartContainers per job
  std::map<std::string, absl::Duration> progress_;       // saved work per checkpoint S3Uri
  ClusterListener* listener_ = nullptr;
  uint64_t next_cluster_ = 0;
};

class SimDataChannel final : public DataChannel {
 public:
  SimDataChannel(EventLoop& loop, SimDataChannelOptions options)
      : loop_(loop), options_(std::move(options)) {}

  void Deliver(const ChannelDelivery& delivery, DoneCallback done) override {
    absl::Duration d = options_.duration
                           ? options_.duration(delivery.job.job_name, delivery.channel.channel_name())
                           : options_.per_channel;
    loop_.ScheduleAfter(d, [done = std::move(done)]() mutable { done(absl::OkStatus()); });
  }

 private:
  EventLoop& loop_;
  SimDataChannelOptions options_;
};

}  // namespace

std::unique_ptr<ClusterProvider> NewSimClusterProvider(EventLoop& loop, SimClusterOptions options) {
  return std::make_unique<SimClusterProvider>(loop, std::move(options));
}

std::unique_ptr<DataChannel> NewSimDataChannel(EventLoop& loop, SimDataChannelOptions options) {
  return std::make_unique<SimDataChannel>(loop, std::move(options));
}

}  // namespace kiln::sim
