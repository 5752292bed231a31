#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/prefetch.h"
#include "base/seq_window.h"
#include "base/time_math.h"
#include "kiln/sim/sim.h"

namespace kiln::sim {
namespace {

// What a keyed draw is for (part of its key). (7 is the data channel's.)
enum Purpose : uint64_t {
  kProvision = 1,
  kContainerStart = 2,  // and the image pull that follows it
  kSpotLifetime = 4,
  kFailure = 5,
  kFailedInstance = 6,
  kPipeStream = 8,
};

// Short, so that ids stay within std::string's inline buffer.
constexpr char kClusterPrefix[] = "sim-c";

// How a simulated container ends (its failure file, if any, is always read).
ContainerExit Exited(int exit_code, std::string failure_text = std::string()) {
  ContainerExit exit;
  exit.exit_code = exit_code;
  exit.failure_text = std::move(failure_text);
  return exit;
}

// The pieces joined, with the room reserved first. For the ids and URIs made
// per cluster and per job: absl::StrCat (Debian's build) zero-fills its
// result before copying into it, several times the cost of these appends.
std::string Join(std::initializer_list<std::string_view> pieces) {
  size_t size = 0;
  for (std::string_view p : pieces) size += p.size();
  std::string out;
  out.reserve(size);
  for (std::string_view p : pieces) out.append(p);
  return out;
}

// `n` in decimal, in `buffer`.
std::string_view Decimal(uint64_t n, char (&buffer)[20]) {
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, n);
  return std::string_view(buffer, static_cast<size_t>(result.ptr - buffer));
}

// (Debian's Abseil hashes absl::string_view, not std::string_view.)
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

class SimClusterProviderImpl final : public SimClusterProvider {
 public:
  SimClusterProviderImpl(EventLoop& loop, SimClusterOptions options)
      : loop_(loop),
        options_(std::move(options)),
        models_(options_.models.get()),
        origin_(loop.Now()),
        virtual_(loop.is_virtual()) {}

  // Every pending event that refers to the provider is cancelled: each is
  // tracked by its cluster (ScheduleTracked) or its instance type
  // (TypeState::tick). Events tracked by nothing hold no pointer to the
  // provider. The loop outlives the provider (sim.h).
  ~SimClusterProviderImpl() override {
    clusters_.ForEach([this](SimCluster& sim) { CancelAll(sim); });
    for (auto& [type, ts] : types_) {
      if (ts.armed) loop_.Cancel(ts.tick);
    }
  }

  // --- ClusterProvider

  void Provision(const ClusterSpec& spec, ClusterCallback done) override {
    JobState& js = JobFor(spec.job_id, spec.job_name);
    const int attempt = ++js.provision_attempts;
    // No capacity: refused before asking for the behaviour (a job waiting
    // for spot capacity asks again and again).
    if (models_ != nullptr && !Admit(spec)) {
      Refuse(spec.job_name, models_->capacity_error_latency, std::move(done));
      return;
    }
    // The job's behaviour: the callback's answer, or the defaults, read in
    // place (the cluster keeps what it needs later, below).
    std::optional<SimJobBehavior> asked;
    if (options_.behavior) asked.emplace(options_.behavior(spec.job_name));
    const SimJobBehavior& behavior = asked ? *asked : options_.defaults;
    if (attempt <= behavior.capacity_failures) {
      Refuse(spec.job_name, models_ != nullptr ? models_->capacity_error_latency : behavior.capacity_error_latency,
             std::move(done));
      return;
    }
    const uint64_t seq = ++next_cluster_;
    std::unique_ptr<SimCluster> owned = NewCluster();
    SimCluster& sim = *owned;
    sim.seq = seq;
    sim.behavior.Keep(behavior);
    SetOwner(sim, spec.job_name, js);
    char digits[20];
    sim.cluster.id.assign(kClusterPrefix).append(Decimal(seq, digits));
    sim.cluster.spot = spec.spot;
    size_t instances = 0;
    for (const InstanceGroupSpec& g : spec.groups) instances += static_cast<size_t>(std::max(0, g.count));
    // (A recycled cluster's instances are refilled: their strings keep their room.)
    sim.cluster.instances.resize(instances);
    size_t host = 0;
    for (const InstanceGroupSpec& g : spec.groups) {
      for (int i = 0; i < g.count; ++i) {
        Instance& instance = sim.cluster.instances[host++];
        const std::string_view number = Decimal(host, digits);
        instance.id.assign(sim.cluster.id).append("-i").append(number);
        instance.host_name.assign("algo-").append(number);
        instance.group_name.assign(g.name);
        instance.instance_type.assign(g.instance_type);
      }
      const TypeRef type = models_ != nullptr ? TypeOf(g.instance_type) : TypeRef{nullptr, nullptr};
      sim.groups.push_back(GroupUse{g.instance_type, g.count, type.model, type.state});
    }
    absl::Duration latency = behavior.provision_latency;
    if (models_ != nullptr) {
      Reserve(sim);
      latency = absl::ZeroDuration();
      for (size_t g = 0; g < sim.groups.size(); ++g) {
        KeyedRng rng(MixKey(models_->seed, js.key, kProvision, attempt, g));
        latency = std::max(latency, sim.groups[g].model->provisioning.Sample(rng));
      }
    }
    sim.provision_attempt = attempt;
    // The callback waits in the cluster, so that the event's callable (two
    // words) needs no allocation.
    sim.granted_callback = std::move(done);
    clusters_.Add(seq, std::move(owned));
    ScheduleTracked(&sim, latency, [this, seq] { Grant(seq); });
  }

  void PrepareImage(const Cluster& cluster, std::string_view image, DoneCallback done) override {
    SimCluster* sim = Find(cluster);
    absl::Duration d = absl::ZeroDuration();
    if (sim != nullptr) {
      // A second preparation is a new job on a retained cluster: the job
      // that ran on it before no longer holds it.
      if (sim->prepares++ > 0) {
        // Everything the previous job left pending is stale (and guarded):
        // drop it, so a long chain of reuses does not pile up handles.
        CancelTracked(*sim);
        if (!sim->owner_job.empty()) Freed(sim->owner_job);
      }
      SetIdle(*sim, false);
      // A cluster keeps the images it has prepared: a warm cluster reused for
      // the same image pays nothing for it.
      const uint64_t image_key = ImageKey(image);
      const bool cold = std::find(sim->images.begin(), sim->images.end(), image_key) == sim->images.end();
      if (cold) sim->images.push_back(image_key);
      if (models_ != nullptr) {
        KeyedRng rng(MixKey(models_->seed, sim->owner_key, kContainerStart,
                            sim->provision_attempt, sim->prepares));
        const InstanceTypeModel& type = *sim->groups.front().model;
        d = type.container_start.Sample(rng);
        if (cold) {
          d = internal::Plus(d, sim->behavior.image_bytes > 0
                                    ? type.image_pull.Time(sim->behavior.image_bytes, rng)
                                    : sim->behavior.image_preparation);
        }
      } else if (cold) {
        d = sim->behavior.image_preparation;
      }
    }
    ScheduleTracked(sim, d, [done = std::move(done)]() mutable { done(absl::OkStatus()); });
  }

  void SetListener(ClusterListener* listener) override { listener_ = listener; }

  absl::Status InjectInterruption(std::string_view instance_id, InterruptionKind kind,
                                  absl::Duration notice) override {
    size_t i = 0;
    SimCluster* sim = clusters_.FindFirst([&](const SimCluster& c) {
      const std::vector<Instance>& instances = c.cluster.instances;
      for (i = 0; i < instances.size(); ++i) {
        if (instances[i].id == instance_id) return true;
      }
      return false;
    });
    if (sim == nullptr) {
      return absl::NotFoundError(absl::StrCat("no instance '", std::string(instance_id), "'"));
    }
    if (kind == InterruptionKind::kSpotNotice) {
      Notice(*sim, i, notice);
    } else {
      Lose(*sim, i, /*failure=*/true);
    }
    return absl::OkStatus();
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
    // previous run may reach the new job's events. (Without a callback, it is
    // the defaults, as at Provision.)
    std::optional<SimJobBehavior> asked;
    if (options_.behavior) {
      asked.emplace(options_.behavior(job.job_name));
      sim->behavior.Keep(*asked);
    }
    const SimJobBehavior& behavior = asked ? *asked : options_.defaults;
    for (TimerHandle h : sim->exit_timers) loop_.Cancel(h);
    SetIdle(*sim, false);
    const uint64_t run = ++sim->run;
    const size_t n = sim->cluster.instances.size();
    sim->events = &events;
    sim->running.assign(n, true);
    sim->exit_timers.assign(n, TimerHandle());
    sim->exits.resize(n);
    // The job's state: through the cluster's reference when the job that asked
    // for the cluster runs on it, else by the job's id (or name).
    JobState* owner = OwnerState(*sim);
    if (owner != nullptr && (job.job_id != 0 ? owner->job_id != job.job_id : sim->owner_job != job.job_name)) {
      owner = nullptr;
    }
    JobState& js = owner != nullptr ? *owner : JobFor(job.job_id, job.job_name);
    sim->job_name.assign(job.job_name);
    SetOwner(*sim, job.job_name, js);
    // The work model: resume from saved progress, if any.
    sim->progress_key.clear();
    if (job.request.has_checkpoint_config() && behavior.checkpoint_interval > absl::ZeroDuration()) {
      sim->progress_key = behavior.checkpoint_key.empty() ? job.request.checkpoint_config().s3_uri()
                                                          : behavior.checkpoint_key;
    }
    sim->run_base = absl::ZeroDuration();  // no checkpoint, or none saved yet
    if (!sim->progress_key.empty()) {
      // A lookup, not operator[]: a first run would otherwise add an entry (and
      // a copy of its key) only to read zero from it.
      auto saved = progress_.find(sim->progress_key);
      if (saved != progress_.end()) sim->run_base = saved->second;
    }
    sim->run_start = loop_.Now();
    sim->run_open = true;
    js.cluster_seq = sim->seq;
    const int attempt = ++js.attempts;
    js.stats.attempts = attempt;
    js.stats.instance_count = static_cast<int32_t>(n);
    if (attempt == 1 && sim->prepares > 1) js.stats.warm_start = true;
    Publish(sim->job_name, js);
    // The work left, and the wall time it takes at this attempt's pace.
    sim->run_work =
        std::max(absl::ZeroDuration(), internal::Minus(behavior.run_duration, sim->run_base));
    sim->pace = Pace(behavior, job, js.key, attempt);
    const absl::Duration remaining = sim->pace == 1.0 ? sim->run_work : sim->run_work * sim->pace;
    sim->run_wall = remaining;
    const uint64_t seq = sim->seq;
    if (static_cast<size_t>(attempt) <= behavior.spot_notices.size()) {
      const absl::Duration at = behavior.spot_notices[attempt - 1];
      if (at != absl::InfiniteDuration()) {
        ScheduleTracked(sim, at, [this, seq, run] {
          SimCluster* s = Find(seq);
          if (s != nullptr && s->run == run) Notice(*s, 0, s->behavior.spot_notice);
        });
      }
    }
    if (static_cast<size_t>(attempt) <= behavior.instance_losses.size()) {
      const absl::Duration at = behavior.instance_losses[attempt - 1];
      if (at != absl::InfiniteDuration()) {
        ScheduleTracked(sim, at, [this, seq, run] {
          SimCluster* s = Find(seq);
          if (s != nullptr && s->run == run) {
            Lose(*s, static_cast<size_t>(s->behavior.lost_instance) % s->cluster.instances.size(),
                 /*failure=*/true);
          }
        });
      }
    }
    if (models_ != nullptr && models_->failures.enabled) ScheduleFailure(*sim, js, remaining);
    ScheduleTracked(sim, absl::ZeroDuration(), [started = std::move(started)]() mutable {
      started(absl::OkStatus());
    });
    for (size_t i = 0; i < n; ++i) {
      for (const auto& [offset, line] : behavior.log_lines) {
        ScheduleTracked(sim, offset, [this, seq, i, run, line = line] {
          SimCluster* s = Find(seq);
          if (s != nullptr && s->run == run && s->running[i] && s->events != nullptr) {
            s->events->OnLogLine(s->cluster.instances[i], line);
          }
        });
      }
      const bool fails = static_cast<int>(i) == behavior.failing_instance;
      ScheduleExit(*sim, i, remaining,
                   Exited(fails ? behavior.exit_code : 0,
                          fails ? behavior.failure_text : std::string()));
    }
  }

  void Signal(const Cluster& cluster, int signal) override {
    SimCluster* sim = Find(cluster);
    if (sim == nullptr) return;
    for (size_t i = 0; i < sim->running.size(); ++i) {
      if (!sim->running[i]) continue;
      if (signal == SIGKILL) {
        ScheduleExit(*sim, i, absl::ZeroDuration(), Exited(128 + SIGKILL));
      } else if (signal == SIGTERM && sim->behavior.sigterm_exit_delay != absl::InfiniteDuration()) {
        ScheduleExit(*sim, i, sim->behavior.sigterm_exit_delay, Exited(0));
      }
    }
  }

  void UploadArtifacts(const JobContext& job, ArtifactsCallback done) override {
    SimCluster* sim = Find(job.cluster);
    absl::Duration d = sim != nullptr ? sim->behavior.upload_duration : absl::ZeroDuration();
    if (sim != nullptr) SetIdle(*sim, false);
    // As the local backend names it: model.tar.gz, or with CompressionType
    // NONE the prefix the model's files go under.
    const v1::OutputDataConfig& out = job.request.output_data_config();
    std::string_view path = out.s3_output_path();
    if (!path.empty() && path.back() == '/') path.remove_suffix(1);
    const bool uncompressed = out.compression_type() == "NONE";  // (validated: GZIP or NONE)
    std::string uri = Join({path, "/", job.job_name,
                            uncompressed ? "/output/model/" : "/output/model.tar.gz"});
    if (sim == nullptr) {
      // Tracked by nothing: the callable must not refer to the provider.
      loop_.ScheduleAfter(d, [done = std::move(done), uri = std::move(uri)]() mutable {
        done(ArtifactsResult{std::move(uri)});
      });
      return;
    }
    if (sim->upload_done != nullptr) {  // (an upload of a job stopped meanwhile is pending)
      ScheduleTracked(sim, d, [this, seq = sim->seq, done = std::move(done),
                               uri = std::move(uri)]() mutable {
        if (SimCluster* s = Find(seq)) SetIdle(*s, true);
        done(ArtifactsResult{std::move(uri)});
      });
      return;
    }
    // The callback and the URI wait in the cluster, so that the event's
    // callable (two words) needs no allocation; releasing the cluster drops
    // them with the event.
    sim->upload_done = std::move(done);
    sim->upload_uri = std::move(uri);
    ScheduleTracked(sim, d, [this, seq = sim->seq] {
      SimCluster* s = Find(seq);
      if (s == nullptr) return;  // (tracked: the event goes with the cluster)
      SetIdle(*s, true);
      ArtifactsCallback upload_done = std::move(s->upload_done);
      s->upload_done = nullptr;
      upload_done(ArtifactsResult{std::move(s->upload_uri)});
    });
  }

  void Release(const Cluster& cluster) override {
    const uint64_t seq = SeqOf(cluster);
    std::unique_ptr<SimCluster> sim = clusters_.Take(seq);
    if (sim == nullptr) return;
    EndRun(*sim);
    CancelAll(*sim);
    CloseAccounting(*sim);
    Unreserve(*sim);
    if (!sim->owner_job.empty()) Freed(sim->owner_job);
    KeepSpare(std::move(sim));
  }

  // --- SimClusterProvider

  SimJobStats JobStats(std::string_view job) const override {
    IndexNames();
    auto it = by_name_.find(Key(job));
    return it == by_name_.end() ? SimJobStats() : job_states_[it->second].stats;
  }

  absl::Duration SavedProgress(std::string_view job) const override {
    IndexNames();
    auto it = by_name_.find(Key(job));
    if (it == by_name_.end()) return absl::ZeroDuration();
    const JobState& js = job_states_[it->second];
    const SimCluster* sim = Find(js.cluster_seq);
    if (sim != nullptr && sim->run_open && sim->job_name == job) {
      const RunState r = RunNow(*sim);
      if (r.completed || !sim->progress_key.empty()) return r.saved;
    }
    return js.stats.progress;
  }

  bool SpotAvailable(const ClusterSpec& spec) override {
    if (models_ == nullptr) return true;
    return Admit(spec, /*spot=*/true);
  }

  SimJobStats ForgetJob(std::string_view job) override {
    IndexNames();
    auto it = by_name_.find(Key(job));
    if (it == by_name_.end()) return SimJobStats();
    JobState& js = job_states_[it->second];
    // Nothing of a forgotten job may reach its (possibly deleted) events.
    if (SimCluster* sim = Find(js.cluster_seq); sim != nullptr && sim->job_name == job) {
      EndRun(*sim);
      sim->events = nullptr;
      for (TimerHandle h : sim->exit_timers) loop_.Cancel(h);
      std::fill(sim->running.begin(), sim->running.end(), false);
    }
    SimJobStats stats = js.stats;
    if (const SimCluster* sim = Find(js.cluster_seq)) {
      stats.holds_cluster = sim->owner_job == job;
    }
    // The slot's next generation: a cluster's reference to the forgotten job
    // no longer reaches the slot, whoever takes it next.
    js.generation = js.generation == UINT32_MAX ? 1 : js.generation + 1;
    free_job_slots_.push_back(it->second);
    by_name_.erase(it);
    if (js.job_id != 0) by_id_.Take(js.job_id);
    js.live = false;
    return stats;
  }

  void ForgetCheckpoint(std::string_view key) override { progress_.erase(Key(key)); }

  SimAccounting Accounting() const override {
    SimAccounting a = accounting_;
    clusters_.ForEach([&](const SimCluster& sim) {
      if (sim.granted) AddInterval(sim, loop_.Now() - sim.since, a);
    });
    return a;
  }

 private:
  struct TypeState;
  struct GroupUse {
    std::string instance_type;
    int32_t count = 0;
    const InstanceTypeModel* model = nullptr;  // with models only
    TypeState* state = nullptr;                // with models only (std::map nodes stay put)
  };

  // Room for a cluster's tracked events inside the cluster.
  static constexpr size_t kTrackedInline = 6;
  // An event scheduled for a cluster, and when it is due (Unix nanoseconds:
  // 16 bytes an entry rather than 24, in every cluster).
  struct Tracked {
    TimerHandle handle;
    int64_t due_ns;
  };

  // What a cluster keeps of a job's SimJobBehavior between calls: the
  // behaviour of the job that asked for it (Provision), then, with a
  // behaviour callback, of the job whose containers ran on it last
  // (StartContainers). The rest of the behaviour (log lines, notices, exit
  // codes, checkpoint key, provisioning) is used where it is read and not
  // kept: a cluster holds a few words instead of a copy with its strings and
  // vectors, which every cluster's recycling would touch.
  struct KeptBehavior {
    absl::Duration image_preparation;
    int64_t image_bytes = 0;
    absl::Duration run_duration;
    absl::Duration checkpoint_interval;
    absl::Duration upload_duration;
    absl::Duration sigterm_exit_delay;
    absl::Duration spot_notice;
    int lost_instance = 0;

    void Keep(const SimJobBehavior& b) {
      image_preparation = b.image_preparation;
      image_bytes = b.image_bytes;
      run_duration = b.run_duration;
      checkpoint_interval = b.checkpoint_interval;
      upload_duration = b.upload_duration;
      sigterm_exit_delay = b.sigterm_exit_delay;
      spot_notice = b.spot_notice;
      lost_instance = b.lost_instance;
    }
  };

  struct SimCluster {
    uint64_t seq = 0;
    KeptBehavior behavior;
    Cluster cluster;
    absl::InlinedVector<GroupUse, 1> groups;  // (usually one: no heap block)
    int provision_attempt = 0;
    ContainerEvents* events = nullptr;
    // Per instance, inline for the usual small clusters: whether its
    // container runs, its exit's event, and the exit that event reports.
    absl::InlinedVector<bool, 8> running;
    absl::InlinedVector<TimerHandle, 4> exit_timers;
    absl::InlinedVector<ContainerExit, 1> exits;
    // Everything else pending on this cluster (a usual cluster's life
    // schedules about six; on a virtual loop those that have run are
    // dropped when the inline room is full).
    absl::InlinedVector<Tracked, kTrackedInline> timers;
    ClusterCallback granted_callback;  // Provision's, until Grant
    ArtifactsCallback upload_done;     // UploadArtifacts', until the upload ends
    std::string upload_uri;            // and the model's URI it reports
    // Prepared on this cluster (its image cache), by HashName.
    absl::InlinedVector<uint64_t, 2> images;
    uint64_t run = 0;                 // StartContainers calls so far
    int prepares = 0;                 // PrepareImage calls so far (> 1: reused)
    // The job that holds the cluster: the one that asked for it, then the one
    // whose containers ran on it last.
    std::string owner_job;
    uint64_t owner_key = 0;  // HashName(owner_job)
    // Its state: job_states_[owner_slot] while that slot's generation is
    // owner_generation (0: none; see OwnerState).
    uint32_t owner_slot = 0;
    uint32_t owner_generation = 0;
    // The run in progress, for the work model.
    std::string job_name;
    std::string progress_key;  // the checkpoint key (or CheckpointConfig.S3Uri), or empty
    absl::Duration run_base;   // progress when the run started
    absl::Duration run_work;   // work left when the run started
    absl::Duration run_wall;   // wall time to do it (run_work * pace)
    double pace = 1;           // wall time per unit of work (> 1: the Pipe stream is slower)
    absl::Time run_start;
    bool run_open = false;
    // Accounting: granted clusters are busy or idle since `since`.
    bool granted = false;
    bool idle = false;
    absl::Time since;
    bool reserved = false;  // counted in the capacity of its types
    bool doomed = false;    // a spot notice was given by the market
    uint64_t grant_no = 0;  // trace markets: its place in TypeState::spot_clusters (0: none)
  };

  // A job's state, from its first Provision or StartContainers until
  // ForgetJob. It stays in its slot of job_states_; the slot is reused after
  // ForgetJob under the next generation. Found by the job's id (by_id_), or
  // by its name (by_name_).
  // What a new job starts from (JobFor resets this part of a reused slot).
  struct JobRecord {
    uint64_t key = 0;     // HashName(job)
    uint64_t job_id = 0;  // the engine's number for the job (JobContext::job_id), or 0
    int provision_attempts = 0;
    int attempts = 0;
    SimJobStats stats;
    uint64_t cluster_seq = 0;      // the cluster its containers ran on last
    double exposure_hours = 0;     // machine-hours run so far (failure process)
    double next_failure_hazard = 0;  // cumulative hazard of the next failure; 0: not drawn
    double next_failure_hours = 0;   // MachineHoursAt(next_failure_hazard)
    int failures_drawn = 0;
  };
  struct JobState : JobRecord {
    uint32_t generation = 1;
    uint32_t slot = 0;
    bool live = false;  // made by JobFor, not forgotten yet
    std::string name;   // (its string keeps its room when the slot is reused)
  };

  // Capacity in use per instance type, and the spot clusters a trace may take back.
  struct TypeState {
    int64_t on_demand = 0;         // instances reserved or held
    int64_t spot = 0;              // spot instances reserved or held
    int64_t spot_doomed = 0;       // of those, under a market notice
    // Trace markets: the spot clusters granted, by grant number (grant order).
    std::map<uint64_t, uint64_t> spot_clusters;
    std::vector<int32_t> next_change;     // trace: ticks to the next different count (0: never)
    TimerHandle tick;
    bool armed = false;
  };

  // The state of the job numbered `job_id` (when not 0) or named `job`, added
  // if new. A job with an id is found without hashing its name; one without
  // (a caller that is not an engine) by its name.
  JobState& JobFor(uint64_t job_id, std::string_view job) {
    if (job_id != 0) {
      if (JobState* js = by_id_.Find(job_id)) return *js;
    } else {
      IndexNames();
      if (auto it = by_name_.find(Key(job)); it != by_name_.end()) return job_states_[it->second];
    }
    uint32_t slot;
    if (free_job_slots_.empty()) {
      slot = static_cast<uint32_t>(job_states_.size());
      job_states_.emplace_back();
    } else {
      slot = free_job_slots_.back();
      free_job_slots_.pop_back();
    }
    JobState& js = job_states_[slot];
    static_cast<JobRecord&>(js) = JobRecord();
    js.slot = slot;
    js.key = HashName(job);
    js.job_id = job_id;
    js.live = true;
    js.name.assign(job);
    if (job_id != 0) by_id_.Put(job_id, &js);
    if (names_indexed_) IndexName(js);
    return js;
  }

  // Builds the index by name at its first use: a provider whose jobs all
  // come with ids (an engine's) and that nobody asks about by name never
  // hashes a name (JobFor).
  void IndexNames() const {
    if (names_indexed_) return;
    names_indexed_ = true;
    for (const JobState& js : job_states_) {
      if (js.live) IndexName(js);
    }
  }

  // Adds `js` to the index by name. A job deleted and made again under its
  // name, not forgotten in between, has two states: the name finds the newer
  // job's (the larger id), the older is found by its id only.
  void IndexName(const JobState& js) const {
    auto [it, inserted] = by_name_.try_emplace(Key(js.name), js.slot);
    if (!inserted && job_states_[it->second].job_id < js.job_id) {
      by_name_.erase(it);
      by_name_.emplace(Key(js.name), js.slot);
    }
  }

  // The state of the job that holds `sim`, or null once that job is forgotten.
  JobState* OwnerState(const SimCluster& sim) {
    if (sim.owner_generation == 0) return nullptr;
    JobState& js = job_states_[sim.owner_slot];
    return js.generation == sim.owner_generation ? &js : nullptr;
  }

  // `job`, whose state is `js`, holds `sim` from now on.
  static void SetOwner(SimCluster& sim, std::string_view job, const JobState& js) {
    sim.owner_job = job;
    sim.owner_key = js.key;
    sim.owner_slot = js.slot;
    sim.owner_generation = js.generation;
  }

  void Publish(const std::string& job, const JobState& js) {
    if (options_.stats != nullptr) (*options_.stats)[job] = js.stats;
  }

  void Freed(const std::string& job) {
    if (options_.on_cluster_freed) options_.on_cluster_freed(job);
  }

  void Refuse(std::string_view job, absl::Duration latency, ClusterCallback done) {
    ++accounting_.capacity_refusals;
    loop_.ScheduleAfter(latency, [done = std::move(done), job = std::string(job)]() mutable {
      done(absl::ResourceExhaustedError(absl::StrCat("insufficient capacity for job '", job, "'")));
    });
  }

  // --- Capacity (with models)

  // An instance type's model and capacity state. A provisioned cluster asks for
  // the same type several times in a row (Admit, then each group), and a
  // workload uses few types: the last answer is kept, saving two lookups by
  // name in ordered maps. REQUIRES: models_.
  struct TypeRef {
    const InstanceTypeModel* model;
    TypeState* state;  // a node of types_, which never erases one
  };
  TypeRef TypeOf(std::string_view type) {
    if (last_type_.state == nullptr || type != last_type_name_) {
      last_type_name_.assign(type);
      last_type_ = TypeRef{&models_->Type(type), &types_[last_type_name_]};
    }
    return last_type_;
  }

  // Instances the spec needs, per type, and whether they are there now.
  bool Admit(const ClusterSpec& spec) { return Admit(spec, spec.spot); }
  bool Admit(const ClusterSpec& spec, bool spot) {
    const auto& groups = spec.groups;
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::string& type = groups[i].instance_type;
      bool seen = false;
      int64_t count = 0;
      for (size_t k = 0; k < groups.size(); ++k) {
        if (groups[k].instance_type != type) continue;
        if (k < i) seen = true;
        count += groups[k].count;
      }
      if (seen) continue;  // counted with its first group
      const auto [m, state] = TypeOf(type);
      const InstanceTypeModel& model = *m;
      if (!spot) {
        if (model.capacity && state->on_demand + count > *model.capacity) return false;
      } else if (model.spot.kind == SpotMarket::Kind::kTrace) {
        if (state->spot + count > model.spot.trace.AvailableAt(loop_.Now() - origin_)) return false;
      } else if (model.spot.capacity && state->spot + count > *model.spot.capacity) {
        return false;
      }
    }
    return true;
  }

  void Reserve(SimCluster& sim) {
    sim.reserved = true;
    for (const GroupUse& g : sim.groups) (sim.cluster.spot ? g.state->spot : g.state->on_demand) += g.count;
  }

  void Unreserve(SimCluster& sim) {
    if (!sim.reserved) return;
    sim.reserved = false;
    for (const GroupUse& g : sim.groups) {
      TypeState& ts = *g.state;
      if (!sim.cluster.spot) {
        ts.on_demand -= g.count;
        continue;
      }
      ts.spot -= g.count;
      if (sim.doomed) ts.spot_doomed -= g.count;
      if (sim.grant_no != 0) ts.spot_clusters.erase(sim.grant_no);
      if (ts.spot == 0 && ts.armed) {
        loop_.Cancel(ts.tick);
        ts.armed = false;
      }
    }
  }

  // The provisioning latency has passed: hand the cluster over, unless a
  // spot trace took the capacity back meanwhile.
  void Grant(uint64_t seq) {
    SimCluster* sim = Find(seq);
    if (sim == nullptr) return;
    ClusterCallback done = std::move(sim->granted_callback);
    if (models_ != nullptr && sim->cluster.spot && !TraceStillHolds(*sim)) {
      std::unique_ptr<SimCluster> owned = clusters_.Take(seq);
      CancelAll(*owned);
      Unreserve(*owned);
      ++accounting_.capacity_refusals;
      const std::string job = std::move(owned->owner_job);
      KeepSpare(std::move(owned));
      done(absl::ResourceExhaustedError(
          absl::StrCat("spot capacity for job '", job, "' was taken back while launching")));
      return;
    }
    sim->granted = true;
    sim->idle = false;
    sim->since = loop_.Now();
    ++accounting_.clusters;
    if (models_ != nullptr && sim->cluster.spot) {
      for (const GroupUse& g : sim->groups) {
        TypeState& ts = *g.state;
        // (Only trace markets take clusters back by grant order.)
        if (g.model->spot.kind != SpotMarket::Kind::kTrace) continue;
        if (sim->grant_no == 0) sim->grant_no = ++next_grant_;
        ts.spot_clusters.emplace(sim->grant_no, seq);
        ArmTrace(g.instance_type);
      }
      ScheduleSpotLifetime(*sim);
    }
    done(sim->cluster);
  }

  bool TraceStillHolds(const SimCluster& sim) {
    for (const GroupUse& g : sim.groups) {
      if (g.model->spot.kind != SpotMarket::Kind::kTrace) continue;
      const TypeState& ts = *g.state;
      if (ts.spot - ts.spot_doomed > g.model->spot.trace.AvailableAt(loop_.Now() - origin_)) return false;
    }
    return true;
  }

  // Hazard markets: when the first instance of the cluster is taken back.
  void ScheduleSpotLifetime(SimCluster& sim) {
    absl::Duration first = absl::InfiniteDuration();
    KeyedRng rng(MixKey(models_->seed, sim.owner_key, kSpotLifetime, sim.provision_attempt));
    for (const GroupUse& g : sim.groups) {
      const SpotMarket& market = g.model->spot;
      if (market.kind == SpotMarket::Kind::kPoisson && market.preemptions_per_instance_hour > 0) {
        first = std::min(first, absl::Hours(rng.Exponential(1.0 / (market.preemptions_per_instance_hour *
                                                                   static_cast<double>(g.count)))));
      } else if (market.kind == SpotMarket::Kind::kBathtub) {
        for (int32_t i = 0; i < g.count; ++i) first = std::min(first, market.bathtub.Sample(rng));
      }
    }
    if (first == absl::InfiniteDuration()) return;
    const uint64_t seq = sim.seq;
    ScheduleTracked(&sim, first, [this, seq] {
      if (SimCluster* s = Find(seq); s != nullptr && !s->doomed) Doom(*s);
    });
  }

  // The market takes the cluster back: a notice now, the instance lost at its end.
  void Doom(SimCluster& sim) {
    sim.doomed = true;
    for (const GroupUse& g : sim.groups) g.state->spot_doomed += g.count;
    Notice(sim, 0, sim.groups.front().model->spot_notice);
  }

  // Trace markets: wake at the next tick whose count differs, while spot
  // instances of the type are held.
  void ArmTrace(const std::string& type) {
    const auto [m, state] = TypeOf(type);
    TypeState& ts = *state;
    const InstanceTypeModel& model = *m;
    if (ts.armed || ts.spot == 0 || model.spot.kind != SpotMarket::Kind::kTrace) return;
    const SpotTrace& trace = model.spot.trace;
    if (trace.available.empty()) return;
    if (ts.next_change.empty()) ts.next_change = NextChanges(trace.available);
    const int64_t tick = trace.TickAt(loop_.Now() - origin_);
    const int32_t step = ts.next_change[static_cast<size_t>(tick % static_cast<int64_t>(trace.available.size()))];
    if (step == 0) return;
    ts.armed = true;
    ts.tick = loop_.ScheduleAt(origin_ + trace.gap * (tick + step), [this, type] { OnTick(type); });
  }

  void OnTick(const std::string& type) {
    const auto [m, state] = TypeOf(type);
    TypeState& ts = *state;
    ts.armed = false;
    const InstanceTypeModel& model = *m;
    const int64_t available = model.spot.trace.AvailableAt(loop_.Now() - origin_);
    // Take back the newest clusters first until what is held fits.
    for (auto it = ts.spot_clusters.rbegin(); it != ts.spot_clusters.rend() && ts.spot - ts.spot_doomed > available;
         ++it) {
      SimCluster* sim = Find(it->second);
      if (sim == nullptr || sim->doomed) continue;
      Doom(*sim);
    }
    ArmTrace(type);
  }

  static std::vector<int32_t> NextChanges(const std::vector<int32_t>& v) {
    const size_t n = v.size();
    std::vector<int32_t> next(n, 0);
    // Two passes backwards around the cycle.
    int64_t last_change = -1;  // index (in the doubled sequence) where the value changes next
    for (int64_t k = static_cast<int64_t>(2 * n) - 1; k >= 0; --k) {
      const size_t i = static_cast<size_t>(k) % n;
      const size_t j = static_cast<size_t>(k + 1) % n;
      if (v[i] != v[j]) last_change = k + 1;
      if (k < static_cast<int64_t>(n)) next[i] = last_change < 0 ? 0 : static_cast<int32_t>(last_change - k);
    }
    return next;
  }

  // --- Failures (with models)

  void ScheduleFailure(SimCluster& sim, JobState& js, absl::Duration remaining) {
    const FailureModel& f = models_->failures;
    if (js.next_failure_hazard == 0) {
      KeyedRng rng(MixKey(models_->seed, js.key, kFailure, 0));
      js.next_failure_hazard = rng.Exponential(1.0);
      js.next_failure_hours = f.MachineHoursAt(js.next_failure_hazard);
    }
    const double instances = static_cast<double>(sim.cluster.instances.size());
    const double left_hours = std::max(0.0, js.next_failure_hours - js.exposure_hours) / instances;
    if (left_hours * 3600.0 >= absl::ToDoubleSeconds(remaining)) return;
    const uint64_t seq = sim.seq;
    const uint64_t run = sim.run;
    ScheduleTracked(&sim, absl::Seconds(left_hours * 3600.0), [this, seq, run] {
      SimCluster* s = Find(seq);
      if (s == nullptr || s->run != run || !s->run_open) return;
      JobState* const owner = OwnerState(*s);  // (the running job's)
      if (owner == nullptr) return;
      JobState& j = *owner;
      ++j.failures_drawn;
      KeyedRng rng(MixKey(models_->seed, j.key, kFailure, j.failures_drawn));
      j.next_failure_hazard += rng.Exponential(1.0);
      j.next_failure_hours = models_->failures.MachineHoursAt(j.next_failure_hazard);
      KeyedRng pick(MixKey(models_->seed, j.key, kFailedInstance, j.failures_drawn));
      Lose(*s, static_cast<size_t>(pick.UniformInt(static_cast<int64_t>(s->cluster.instances.size()))),
           /*failure=*/true);
    });
  }

  // --- Runs

  // Wall time per unit of work for this attempt: above 1 when the job's
  // Pipe-mode channels cannot stream its epochs within its work (see
  // SimJobBehavior::epochs).
  double Pace(const SimJobBehavior& b, const JobContext& job, uint64_t job_key, int attempt) const {
    if (!options_.channel_bytes || b.epochs <= 0 || b.run_duration <= absl::ZeroDuration()) return 1.0;
    const v1::CreateTrainingJobRequest& r = job.request;
    int64_t bytes = 0;
    for (const v1::Channel& c : r.input_data_config()) {
      if (c.data_source().has_file_system_data_source()) continue;
      if (EffectiveInputMode(r, c) != "Pipe") continue;
      bytes = std::max(bytes, options_.channel_bytes(job.job_name, c.channel_name()));
    }
    if (bytes <= 0) return 1.0;
    double rate = b.pipe_mb_per_s;
    if (models_ != nullptr) {
      KeyedRng rng(MixKey(models_->seed, job_key, kPipeStream, static_cast<uint64_t>(attempt)));
      rate = models_->data.pipe_rate.Sample(rng);
    }
    if (rate <= 0) return 1.0;
    const double stream_seconds = static_cast<double>(bytes) * b.epochs / (rate * 1e6);
    return std::max(1.0, stream_seconds / absl::ToDoubleSeconds(b.run_duration));
  }

  // Where the open run of `sim` stands now: the work it did, whether that
  // is all of it, and the progress saved (its last checkpoint, or everything
  // when it ran to the end).
  struct RunState {
    absl::Duration executed;
    absl::Duration saved;
    bool completed = false;
  };
  RunState RunNow(const SimCluster& sim) const {
    RunState r;
    const absl::Duration total = sim.behavior.run_duration;
    const absl::Duration elapsed = internal::Minus(loop_.Now(), sim.run_start);
    // (Exactly the work left once the run's wall time is over, whatever the
    // rounding of the pace.)
    r.executed = elapsed >= sim.run_wall ? sim.run_work
                 : sim.pace == 1.0       ? elapsed
                                         : std::min(sim.run_work, elapsed / sim.pace);
    r.completed = internal::Plus(sim.run_base, r.executed) >= total;
    r.saved = sim.run_base;
    if (r.completed) {
      r.saved = total;
    } else if (!sim.progress_key.empty()) {
      const absl::Duration k = sim.behavior.checkpoint_interval;
      absl::Duration unsaved;  // (IDivDuration requires somewhere to put the remainder)
      r.saved =
          std::max(sim.run_base, k * absl::IDivDuration(sim.run_base + r.executed, k, &unsaved));
    }
    return r;
  }

  // Ends the current run of `sim` once: the work it did, and the progress it
  // saved (its last checkpoint, or everything when it ran to the end).
  void EndRun(SimCluster& sim) {
    if (!sim.run_open) return;
    sim.run_open = false;
    const absl::Duration elapsed = internal::Minus(loop_.Now(), sim.run_start);
    const RunState r = RunNow(sim);
    const absl::Duration executed = r.executed;
    const bool completed = r.completed;
    const absl::Duration saved = r.saved;
    if (!sim.progress_key.empty()) progress_[sim.progress_key] = saved;
    JobState* const owner = OwnerState(sim);  // (the running job's)
    if (owner == nullptr) return;
    JobState& js = *owner;
    js.exposure_hours +=
        internal::HoursDouble(elapsed) * static_cast<double>(sim.cluster.instances.size());
    SimJobStats& st = js.stats;
    st.work_executed = internal::Plus(st.work_executed, executed);
    st.progress = sim.progress_key.empty() && !completed ? absl::ZeroDuration() : saved;
    st.completed = completed;
    Publish(sim.job_name, js);
  }

  // A spot notice for instance `i`: the listener hears now, the instance is
  // lost after `notice` unless the cluster is released first.
  void Notice(SimCluster& sim, size_t i, absl::Duration notice) {
    ++accounting_.spot_preemptions;
    if (JobState* owner = OwnerState(sim); owner != nullptr) {
      ++owner->stats.spot_interruptions;
      Publish(sim.owner_job, *owner);
    }
    if (listener_ != nullptr) {
      listener_->OnInterruptionNotice(sim.cluster, sim.cluster.instances[i], loop_.Now() + notice);
    }
    ScheduleTracked(&sim, notice, [this, seq = sim.seq, i, run = sim.run] {
      SimCluster* s = Find(seq);
      if (s != nullptr && s->run == run) Lose(*s, i, /*failure=*/false);
    });
  }

  // Instance `i` is gone: its container ends without an exit report.
  // `failure`: a node failure (not the end of a spot notice).
  void Lose(SimCluster& sim, size_t i, bool failure) {
    if (failure) {
      ++accounting_.node_failures;
      if (JobState* owner = OwnerState(sim); owner != nullptr) {
        ++owner->stats.instance_failures;
        Publish(sim.owner_job, *owner);
      }
    }
    if (i < sim.running.size() && sim.running[i]) {
      EndRun(sim);
      sim.running[i] = false;
      loop_.Cancel(sim.exit_timers[i]);
      if (std::none_of(sim.running.begin(), sim.running.end(), [](bool r) { return r; })) SetIdle(sim, true);
    }
    if (listener_ != nullptr) listener_->OnInstanceLost(sim.cluster, sim.cluster.instances[i]);
  }

  // (Re)schedules the exit of container `i`: a signal replaces the natural
  // end of the run.
  void ScheduleExit(SimCluster& sim, size_t i, absl::Duration after, ContainerExit exit) {
    loop_.Cancel(sim.exit_timers[i]);
    // The exit waits in the cluster, so that the event's callable (four
    // words) needs no allocation.
    sim.exits[i] = std::move(exit);
    sim.exit_timers[i] = loop_.ScheduleAfter(after, [this, seq = sim.seq, i, run = sim.run] {
      SimCluster* s = Find(seq);
      if (s == nullptr) return;
      // The end of a run reads most of the cluster and its job's state, long untouched: all
      // their lines at once rather than one miss after another (prefetch.h).
      internal::PrefetchObject(s, sizeof(SimCluster));
      if (s->run != run || !s->running[i]) return;
      if (s->owner_slot < job_states_.size()) {
        internal::PrefetchObject(&job_states_[s->owner_slot], sizeof(JobState));
      }
      EndRun(*s);
      s->running[i] = false;
      s->exit_timers[i] = TimerHandle();
      if (std::none_of(s->running.begin(), s->running.end(), [](bool r) { return r; })) SetIdle(*s, true);
      if (s->events != nullptr) s->events->OnExit(s->cluster.instances[i], s->exits[i]);
    });
  }

  // --- Accounting

  void AddInterval(const SimCluster& sim, absl::Duration d, SimAccounting& a) const {
    if (d <= absl::ZeroDuration()) return;
    const double seconds = internal::SecondsDouble(d);
    for (const GroupUse& g : sim.groups) {
      const absl::Duration instance_time = internal::Times(d, g.count);
      const double od_price = g.model != nullptr ? g.model->on_demand_per_hour : 0;
      const double spot_price = g.model != nullptr ? g.model->spot_per_hour : 0;
      if (sim.idle) {
        a.warm_idle = internal::Plus(a.warm_idle, instance_time);
        a.cost += seconds * g.count * od_price / 3600.0;
      } else if (sim.cluster.spot) {
        a.spot_busy = internal::Plus(a.spot_busy, instance_time);
        a.cost += seconds * g.count * spot_price / 3600.0;
      } else {
        a.on_demand_busy = internal::Plus(a.on_demand_busy, instance_time);
        a.cost += seconds * g.count * od_price / 3600.0;
      }
    }
  }

  void SetIdle(SimCluster& sim, bool idle) {
    if (!sim.granted || sim.idle == idle) return;
    const absl::Time now = loop_.Now();
    AddInterval(sim, internal::Minus(now, sim.since), accounting_);
    sim.idle = idle;
    sim.since = now;
  }

  void CloseAccounting(SimCluster& sim) {
    if (!sim.granted) return;
    AddInterval(sim, internal::Minus(loop_.Now(), sim.since), accounting_);
    sim.granted = false;
  }

  // --- Cluster records

  // A cluster record as new: a released one if any is kept (its block and its
  // instances' strings are reused), else a new one.
  std::unique_ptr<SimCluster> NewCluster() {
    if (spare_.empty()) return std::make_unique<SimCluster>();
    std::unique_ptr<SimCluster> sim = std::move(spare_.back());
    spare_.pop_back();
    return sim;
  }

  // Keeps the record of a released cluster for a later Provision (a run
  // releases about as many clusters as it provisions, so a few suffice; the
  // rest are freed). It is emptied at once: what it held (callbacks, the
  // job's names) goes now, as it would with the record; only its instances
  // stay, to be refilled.
  void KeepSpare(std::unique_ptr<SimCluster> sim) {
    if (spare_.size() >= kMaxSpareClusters) return;
    std::vector<Instance> instances = std::move(sim->cluster.instances);
    // Destroyed and made anew in its block. (Its constructor allocates
    // nothing; were it to throw, the block is freed, not destroyed twice.)
    SimCluster* const block = sim.release();
    block->~SimCluster();
    try {
      new (block) SimCluster();
    } catch (...) {
      ::operator delete(block);
      throw;
    }
    sim.reset(block);
    sim->cluster.instances = std::move(instances);
    spare_.push_back(std::move(sim));
  }

  // --- Lookup

  // The sequence number in a cluster id "sim-c<seq>" (0: not one of ours).
  // Called for every provider call on a cluster: digits by hand.
  static uint64_t SeqOf(const Cluster& cluster) {
    std::string_view id = cluster.id;
    constexpr size_t kPrefix = sizeof(kClusterPrefix) - 1;
    if (id.size() <= kPrefix || id.size() > kPrefix + 19 || id.substr(0, kPrefix) != kClusterPrefix) return 0;
    uint64_t seq = 0;
    for (size_t i = kPrefix; i < id.size(); ++i) {
      const char c = id[i];
      if (c < '0' || c > '9') return 0;
      seq = seq * 10 + static_cast<uint64_t>(c - '0');
    }
    return seq;
  }

  uint64_t ImageKey(std::string_view image) {
    if (image != last_image_ || last_image_key_ == 0) {
      last_image_.assign(image);
      last_image_key_ = HashName(image);
    }
    return last_image_key_;
  }
  SimCluster* Find(const Cluster& cluster) { return Find(SeqOf(cluster)); }
  SimCluster* Find(uint64_t seq) const { return clusters_.Find(seq); }

  // Schedules `fn` after `delay`; with a cluster, as one of its events
  // (CancelTracked cancels those still pending).
  template <typename F>
  void ScheduleTracked(SimCluster* sim, absl::Duration delay, F&& fn) {
    const TimerHandle h = loop_.ScheduleAfter(delay, std::forward<F>(fn));
    if (sim == nullptr) return;
    const absl::Time now = loop_.Now();
    const int64_t now_ns = internal::UnixNanos(now);
    // On a virtual loop every event due before now has run: when the inline
    // room is full, forget those.
    if (virtual_ && sim->timers.size() == kTrackedInline) {
      sim->timers.erase(std::remove_if(sim->timers.begin(), sim->timers.end(),
                                       [now_ns](const Tracked& t) { return t.due_ns < now_ns; }),
                        sim->timers.end());
    }
    // (Truncated to the nanosecond, as the loop schedules it.)
    const int64_t due_ns =
        delay > absl::ZeroDuration() ? internal::UnixNanos(internal::Plus(now, delay)) : now_ns;
    sim->timers.push_back(Tracked{h, due_ns});
  }

  // Cancels the cluster's events still pending. (On a virtual loop, one due
  // before now has run: cancelling it would only read its slot, likely a
  // cache miss.)
  void CancelTracked(SimCluster& sim) {
    const int64_t now_ns = internal::UnixNanos(loop_.Now());
    for (const Tracked& t : sim.timers) {
      if (!virtual_ || t.due_ns >= now_ns) loop_.Cancel(t.handle);
    }
    sim.timers.clear();
    sim.upload_done = nullptr;  // its event was one of them
  }

  void CancelAll(SimCluster& sim) {
    CancelTracked(sim);
    for (TimerHandle h : sim.exit_timers) loop_.Cancel(h);
  }

  EventLoop& loop_;
  SimClusterOptions options_;
  const SimModels* models_;
  const absl::Time origin_;  // spot traces start here
  const bool virtual_;       // loop_.is_virtual()
  internal::SeqWindow<std::unique_ptr<SimCluster>> clusters_;  // by seq
  // Released cluster records, emptied, for NewCluster (at most kMaxSpareClusters).
  static constexpr size_t kMaxSpareClusters = 64;
  std::vector<std::unique_ptr<SimCluster>> spare_;
  // Jobs' state (JobState): in slots that stay put (a deque's), by id and by
  // name (keys are views of JobState::name; built at the first look-up by
  // name: IndexNames).
  std::deque<JobState> job_states_;
  std::vector<uint32_t> free_job_slots_;
  internal::SeqWindow<JobState*> by_id_;
  mutable absl::flat_hash_map<absl::string_view, uint32_t> by_name_;  // -> slot in job_states_
  mutable bool names_indexed_ = false;
  absl::flat_hash_map<std::string, absl::Duration> progress_;  // saved work per checkpoint S3Uri
  std::map<std::string, TypeState> types_;
  std::string last_type_name_;  // TypeOf's last answer
  TypeRef last_type_{nullptr, nullptr};
  SimAccounting accounting_;
  ClusterListener* listener_ = nullptr;
  uint64_t next_cluster_ = 0;
  uint64_t next_grant_ = 0;
  // The last image hashed (a workload uses few images, one after another).
  std::string last_image_;
  uint64_t last_image_key_ = 0;
};

}  // namespace

std::unique_ptr<SimClusterProvider> NewSimClusterProvider(EventLoop& loop, SimClusterOptions options) {
  return std::make_unique<SimClusterProviderImpl>(loop, std::move(options));
}

}  // namespace kiln::sim
