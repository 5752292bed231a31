// RunPolicy and RunScenario: a scenario's workloads through the real engine
// in virtual time, one policy at a time (RunScenario: several at once on
// threads of their own).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/select_ranks.h"
#include "base/slab.h"
#include "base/time_math.h"
#include "kiln/engine.h"
#include "kiln/sim/ideal.h"
#include "kiln/sim/scenario.h"
#include "kiln/sim/sim.h"

namespace kiln::sim {
namespace {

constexpr int64_t kMaxSeconds = 2419200;  // the service's MaxRuntimeInSeconds limit (28 days)
constexpr char kCheckpointPrefix[] = "s3://kiln-sim/checkpoints/";
constexpr absl::Duration kRetryDelay = absl::Seconds(30);
// How long after the horizon jobs may still run before the run stops them.
constexpr absl::Duration kDrainLimit = absl::Hours(24 * 30);

// (Debian's Abseil hashes absl::string_view, not std::string_view.)
absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// s == literal, with the bytes compared inline (string_view's == calls an
// out-of-line compare when the sizes match): status events come at every
// phase of every job.
template <size_t N>
bool Is(std::string_view s, const char (&literal)[N]) {
  return s.size() == N - 1 && std::memcmp(s.data(), literal, N - 1) == 0;
}

enum class End { kCompleted, kFailed, kStopped };

// One job as the workload submitted it.
struct Job {
  std::string logical;  // name as submitted
  std::string current;  // the engine's job: the same name
  WorkloadGenerator* from = nullptr;
  uint64_t tag = 0;
  std::shared_ptr<const v1::CreateTrainingJobRequest> request;  // the workload's, unnamed
  SimJobAttributes attributes;
  absl::Time arrival;
  std::optional<absl::Time> deadline;
  absl::Duration margin;
  double pace = 1;  // WorstCasePace
  // Where the sim provider keeps the progress of the work over all
  // attempts (SimJobBehavior::checkpoint_key); empty: no checkpoints.
  std::string checkpoint_key;
  bool on_spot = false;        // the capacity of its current (or last) attempt
  bool drain_stopped = false;  // the drain asked the engine to stop it
  // Its instances as Provision would be asked for them (the deadline
  // policies ask whether spot capacity is there for them).
  ClusterSpec spec;
  std::optional<absl::Time> first_training;
  bool warm = false;
  int64_t spot_interruptions = 0;
  int64_t node_failures = 0;
  absl::Duration lost_instance_time;
};

// Owns a Job made in a PolicyRun's slab (PolicyRun::NewJob): a run makes one
// per job, and a slab's slot is the most recently freed one, where a
// heap block of this size would often go through the allocator's slow path.
struct JobDeleter {
  internal::Slab<Job>* slab = nullptr;
  void operator()(Job* job) const { slab->Delete(job); }
};
using JobPtr = std::unique_ptr<Job, JobDeleter>;

double Hours(absl::Duration d) { return absl::ToDoubleHours(d); }

// The index of the nearest-rank p-quantile in `n` sorted values. REQUIRES: n > 0.
size_t NearestRankIndex(size_t n, double p) {
  const double rank = std::ceil(p * static_cast<double>(n));
  return static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(n))) - 1;
}

// The instances `r` asks for, as the engine asks Provision for them.
ClusterSpec SpecOf(const v1::CreateTrainingJobRequest& r) {
  ClusterSpec spec;
  const auto& rc = r.resource_config();
  if (rc.instance_groups_size() > 0) {
    for (const auto& g : rc.instance_groups()) {
      spec.groups.push_back({g.instance_group_name(), g.instance_type(), g.instance_count()});
    }
  } else {
    spec.groups.push_back({kHomogeneousGroupName, rc.instance_type(), rc.instance_count()});
  }
  spec.spot = true;
  spec.volume_size_in_gb = rc.volume_size_in_gb();
  return spec;
}

class PolicyRun final : public WorkloadSink, public JobObserver {
 public:
  PolicyRun(const Scenario& scenario, const PolicySpec& policy, const PolicyRunOptions& options)
      : scenario_(scenario), policy_(policy), options_(options) {}

  PolicyResult Run() {
    loop_ = NewVirtualEventLoop();
    start_ = loop_->Now();
    horizon_end_ = start_ + scenario_.horizon;
    if (options_.deadline_slack && policy_.spot.kind == SpotChoice::Kind::kOnDemand) ideal_ = 0.0;
    SimClusterOptions provider_options;
    provider_options.models = scenario_.models;
    provider_options.behavior = [this](std::string_view job) { return Behavior(job); };
    provider_options.on_cluster_freed = [this](std::string_view job) { OnClusterFreed(job); };
    auto channel_bytes = [this](std::string_view job, std::string_view) -> int64_t {
      auto it = active_.find(Key(job));
      return it == active_.end() ? 0 : it->second->attributes.data_bytes;
    };
    provider_options.channel_bytes = channel_bytes;
    provider_ = NewSimClusterProvider(*loop_, std::move(provider_options));
    SimDataChannelOptions channel_options;
    channel_options.models = scenario_.models;
    channel_options.channel_bytes = channel_bytes;
    channel_ = NewSimDataChannel(*loop_, std::move(channel_options));
    if (DeadlinePolicy()) {
      DeadlineSpotOptions up;
      up.rules = policy_.spot.rules;
      up.rules.rule = policy_.spot.kind == SpotChoice::Kind::kGreedy
                          ? DeadlineSpotRules::Rule::kGreedy
                          : DeadlineSpotRules::Rule::kUniformProgress;
      up.retry_delay = kRetryDelay;
      up.spot_available = [this](std::string_view job) {
        auto it = active_.find(Key(job));
        return it != active_.end() && provider_->SpotAvailable(it->second->spec);
      };
      up.view = [this](std::string_view job) -> std::optional<ProgressView> {
        auto it = active_.find(Key(job));
        if (it == active_.end() || !it->second->deadline) return std::nullopt;
        return View(*it->second);
      };
      up.on_decision = [this](std::string_view job, bool use_spot) {
        if (auto it = active_.find(Key(job)); it != active_.end()) it->second->on_spot = use_spot;
      };
      handler_ = NewDeadlineSpotHandler(std::move(up));
    } else {
      handler_ = NewDefaultSpotInterruptionHandler({.retry_delay = kRetryDelay});
    }
    EngineOptions engine_options;
    engine_options.loop = loop_.get();
    engine_options.cluster_provider = provider_.get();
    engine_options.data_channel = channel_.get();
    engine_options.spot_handler = handler_.get();
    engine_options.warm_pools.policy = policy_.keep_alive.New();
    engine_ = NewEngine(std::move(engine_options)).value();
    engine_->AddObserver(this);

    for (const WorkloadSpec& w : scenario_.workloads) {
      if (options_.spot_eligible_only && !w.spot_eligible) continue;
      generators_.push_back(w.make(scenario_.seed));
      generators_.back()->Start(*this);
    }
    const absl::Duration chunk = std::max(absl::Minutes(1), scenario_.horizon / 200);
    while (loop_->pending_events() > 0) {
      loop_->RunUntil(loop_->Now() + chunk);
      if (loop_->Now() > horizon_end_ + kDrainLimit) Drain();
      if (options_.progress) {
        options_.progress(std::min(1.0, absl::FDivDuration(loop_->Now() - start_, scenario_.horizon)));
      }
    }
    return Collect();
  }

  // --- WorkloadSink

  EventLoop& loop() override { return *loop_; }
  absl::Time horizon_end() const override { return horizon_end_; }

  void Submit(SimJob sim_job, WorkloadGenerator* from, uint64_t tag) override {
    if (draining_) {
      // A generator that ignores the horizon: refused, and not told (so that
      // it cannot keep the run going).
      ++jobs_;
      ++rejected_;
      if (first_error_.empty()) {
        first_error_ = absl::StrCat(sim_job.name, ": submitted after the run stopped its jobs");
      }
      return;
    }
    JobPtr job = NewJob();
    Job& j = *job;
    j.logical = std::move(sim_job.name);
    j.current = j.logical;
    j.from = from;
    j.tag = tag;
    j.arrival = loop_->Now();
    j.attributes = sim_job.attributes;
    j.request = std::move(sim_job.request);
    SimJobAttributes& a = j.attributes;
    if (options_.deadline_slack && a.spot_eligible) {
      a.deadline = absl::Floor(a.work * *options_.deadline_slack + absl::Milliseconds(500), absl::Seconds(1));
    }
    if (a.deadline) j.deadline = j.arrival + *a.deadline;
    const bool spot_policy = a.spot_eligible && policy_.spot.kind != SpotChoice::Kind::kOnDemand;
    if (spot_policy) a.checkpoint_interval = policy_.spot.checkpoint_interval;
    if (a.checkpoint_interval > absl::ZeroDuration()) {
      j.checkpoint_key = absl::StrCat(kCheckpointPrefix, j.logical);
    }
    const bool deadline_policy = DeadlinePolicy();
    if (deadline_policy && j.deadline) {
      // The policy weighs saved progress; a restart costs the restart
      // itself, and the work since the last checkpoint a job on spot has
      // done when it is taken back.
      j.margin = policy_.spot.rules.changeover.value_or(
          RestartMargin(*scenario_.models, *j.request, a, a.checkpoint_interval, kRetryDelay));
      j.pace = WorstCasePace(*scenario_.models, *j.request, a);
    }
    // Greedy and Uniform Progress place each attempt themselves (the engine
    // asks them before each provisioning), and may move a job between
    // capacities: their jobs are managed-spot jobs.
    j.on_spot = spot_policy;
    if (deadline_policy && j.deadline) j.spec = SpecOf(*j.request);
    ++jobs_;
    Create(std::move(job));
  }

  // --- JobObserver

  void OnStatusChange(const StatusEvent& e) override {
    const std::string_view status = e.status;
    const bool ended = Is(status, "Completed") || Is(status, "Failed") || Is(status, "Stopped");
    // The first Training (startup latency), moves between capacities and
    // the end. (Most events need no lookup.)
    const std::string_view s = e.secondary_status;
    const bool training = Is(s, "Training");
    const bool moving = Is(s, "Restarting");
    if (!ended && !training && !moving) return;
    auto it = active_.find(Key(e.job_name));
    if (it == active_.end()) return;
    Job& j = *it->second;
    if (training && !j.first_training) j.first_training = e.time;
    if (ended) {
      const End end = Is(status, "Completed") ? End::kCompleted
                      : Is(status, "Failed")  ? End::kFailed
                                              : End::kStopped;
      // Not inline: the engine is in the middle of ending the job. (A job
      // leaves active_ only in Finalize, and ends once, so
      // `j` is still there then; Finalize checks it is.)
      loop_->ScheduleAfter(absl::ZeroDuration(), [this, job = &j, end] { Finalize(*job, end); });
      return;
    }
    if (moving) ++migrations_;
  }

 private:
  SimJobBehavior Behavior(std::string_view name) const {
    SimJobBehavior b;
    auto it = active_.find(Key(name));
    if (it == active_.end()) return b;
    const SimJobAttributes& a = it->second->attributes;
    b.run_duration = a.work;
    b.checkpoint_interval = a.checkpoint_interval;
    b.checkpoint_key = it->second->checkpoint_key;
    b.epochs = a.epochs;
    b.image_bytes = a.image_bytes;
    b.exit_code = a.exit_code;
    if (a.exit_code != 0) b.failure_text = "the training script exited with an error";
    b.upload_duration = a.upload;
    return b;
  }

  // Adds `j`, ended in an on-demand run of the slack sweep, to the run's
  // omniscient bound, or gives the bound up for a job it cannot be computed
  // for.
  void AddIdeal(const Job& j) {
    const auto& rc = j.request->resource_config();
    std::string type = rc.instance_type();
    int32_t count = rc.instance_count();
    if (rc.instance_groups_size() > 0) {
      type = rc.instance_groups(0).instance_type();
      count = 0;
      for (const auto& g : rc.instance_groups()) {
        if (g.instance_type() != type) {
          ideal_.reset();
          return;
        }
        count += g.instance_count();
      }
    }
    const InstanceTypeModel& model = scenario_.models->Type(type);
    const SpotTrace* trace = &model.spot.trace;
    if (model.spot.kind == SpotMarket::Kind::kNone) {
      trace = &always_there_;
    } else if (model.spot.kind != SpotMarket::Kind::kTrace) {
      ideal_.reset();
      return;
    }
    IdealJob job;
    job.start = j.arrival - start_;
    job.work = j.attributes.work;
    job.deadline = *j.deadline - j.arrival;
    // A changeover: what starting took this job on on-demand (provisioning,
    // image, container, data); the worst case for one that never trained.
    job.changeover = j.first_training ? *j.first_training - j.arrival
                                      : RestartMargin(*scenario_.models, *j.request, j.attributes,
                                                      absl::ZeroDuration(), absl::ZeroDuration());
    job.instances = count;
    job.spot_per_hour = model.spot_per_hour * count;
    job.on_demand_per_hour = model.on_demand_per_hour * count;
    const double on_demand = IdealOnDemandCost(job);
    ideal_on_demand_ += on_demand;
    if (const std::optional<double> cost = IdealSpotCost(*trace, job)) {
      *ideal_ += *cost;
    } else {
      *ideal_ += on_demand;
      ++ideal_infeasible_;
    }
  }

  bool DeadlinePolicy() const {
    return policy_.spot.kind == SpotChoice::Kind::kGreedy ||
           policy_.spot.kind == SpotChoice::Kind::kUniformProgress;
  }

  ProgressView View(const Job& j) const {
    ProgressView v;
    v.arrival = j.arrival;
    v.deadline = j.deadline.value_or(absl::InfiniteFuture());
    v.work = j.attributes.work;
    v.progress = provider_->SavedProgress(j.current);
    v.margin = j.margin;
    v.pace = j.pace;
    v.on_spot = j.on_spot;
    return v;
  }

  static void SetCapacity(v1::CreateTrainingJobRequest& r, bool spot) {
    auto* sc = r.mutable_stopping_condition();
    if (spot) {
      r.set_enable_managed_spot_training(true);
      r.mutable_resource_config()->clear_keep_alive_period_in_seconds();
      if (!sc->has_max_runtime_in_seconds()) sc->set_max_runtime_in_seconds(kMaxSeconds);
      sc->set_max_wait_time_in_seconds(std::max<int64_t>(kMaxSeconds, sc->max_runtime_in_seconds()));
    } else {
      r.clear_enable_managed_spot_training();
      sc->clear_max_wait_time_in_seconds();
    }
  }

  JobPtr NewJob() { return JobPtr(job_slab_.New(), JobDeleter{&job_slab_}); }

  void Create(JobPtr job) {
    Job& j = *job;
    // Keyed by a view of the job's own name: `current` does not change while
    // the job is in active_ (Resubmit renames it after Finalize took it out).
    auto [entry, inserted] = active_.try_emplace(Key(j.current));
    if (!inserted) {
      // A job of this name is running (a trace may name two jobs alike): the
      // service refuses the second, and the first runs on untouched.
      Reject(std::move(job), "a training job with this name already exists");
      return;
    }
    entry->second = std::move(job);
    auto created = CreateInEngine(j);
    if (!created.ok()) {
      auto it = active_.find(Key(j.current));
      JobPtr refused = std::move(it->second);
      active_.erase(it);
      Reject(std::move(refused), created.status().message());
    }
  }

  // A submission the engine refused: counted, and its generator told.
  void Reject(JobPtr job, absl::string_view why) {
    if (first_error_.empty()) first_error_ = absl::StrCat(job->current, ": ", why);
    ++rejected_;
    if (job->from != nullptr) {
      WorkloadGenerator* from = job->from;
      const uint64_t tag = job->tag;
      loop_->ScheduleAfter(absl::ZeroDuration(), [from, tag] { from->OnJobEnded(tag); });
    }
  }

  struct Scratch;  // below, with the other members

  // Creates `j`'s job in the engine from a PreparedTrainingJob, prepared
  // once per workload request and variant (RequestFor): the engine validates
  // and keeps one request for all the jobs of a variant, and checks each
  // job's name.
  absl::StatusOr<v1::CreateTrainingJobResponse> CreateInEngine(const Job& j) {
    Scratch::Prepared& p =
        ScratchFor(j).prepared[(j.on_spot ? 1 : 0) + (j.checkpoint_key.empty() ? 0 : 2)];
    if (!p.tried) {
      p.tried = true;
      if (auto prepared = engine_->PrepareTrainingJob(RequestFor(j)); prepared.ok()) {
        p.job = *std::move(prepared);
      }
    }
    if (p.job) return engine_->CreateTrainingJob(p.job, j.current);
    // The engine refused the request: sent whole under the job's name, it
    // fails as such.
    v1::CreateTrainingJobRequest r = RequestFor(j);
    r.set_training_job_name(j.current);
    return engine_->CreateTrainingJob(r);
  }

  // The prepared requests of `j`'s workload request, most recently used
  // first: new ones (or the least recently used, reset) when it has none.
  Scratch& ScratchFor(const Job& j) {
    auto found = std::find_if(scratches_.begin(), scratches_.end(),
                              [&](const auto& s) { return s->source == j.request; });
    if (found == scratches_.end()) {
      if (scratches_.size() < kScratches) {
        scratches_.push_back(std::make_unique<Scratch>());
      }
      found = scratches_.end() - 1;  // a new one, or the least recently used
      **found = Scratch();
      (*found)->source = j.request;  // held, so the address cannot be reused
    }
    std::rotate(scratches_.begin(), found, found + 1);
    return *scratches_.front();
  }

  // The request of `j`'s variant, unnamed: its workload's request with the
  // policy's capacity and, when the job keeps checkpoints, a CheckpointConfig
  // (the workload's, or one under kCheckpointPrefix). The job's progress is
  // kept apart from other jobs' by its checkpoint key, not by the request.
  v1::CreateTrainingJobRequest RequestFor(const Job& j) const {
    v1::CreateTrainingJobRequest r = *j.request;
    if (!j.checkpoint_key.empty() && !r.has_checkpoint_config()) {
      r.mutable_checkpoint_config()->set_s3_uri(kCheckpointPrefix);
    }
    SetCapacity(r, j.on_spot);
    return r;
  }

  void Finalize(const Job& ended, End end) {
    auto it = active_.find(Key(ended.current));
    if (it == active_.end() || it->second.get() != &ended) return;
    JobPtr job = std::move(it->second);
    active_.erase(it);
    Job& j = *job;
    const std::string& name = j.current;
    const SimJobStats st = provider_->ForgetJob(name);
    j.spot_interruptions += st.spot_interruptions;
    j.node_failures += st.instance_failures;
    if (st.work_executed > st.progress) {
      const absl::Duration lost = internal::Minus(st.work_executed, st.progress);
      j.lost_instance_time =
          internal::Plus(j.lost_instance_time, internal::Times(lost, st.instance_count));
    }
    if (st.warm_start) j.warm = true;
    if (st.holds_cluster) {
      // In a warm pool: the engine would refuse the delete until the pool
      // lets the cluster go, which the provider reports (OnClusterFreed).
      awaiting_delete_.insert(name);
    } else {
      Delete(name);
    }
    Record(j, end);
    if (ideal_ && j.deadline && j.attributes.spot_eligible) AddIdeal(j);
    if (!j.checkpoint_key.empty()) provider_->ForgetCheckpoint(j.checkpoint_key);
    if (j.from != nullptr) j.from->OnJobEnded(j.tag);
  }

  // Past the drain limit: stops every job still there (each once). Jobs
  // still there long after the horizon wait for capacity that never comes
  // (e.g. more spot instances than a trace ever has). Called after every
  // chunk from then on, so a job created meanwhile is stopped too.
  void Drain() {
    draining_ = true;
    std::vector<std::string> names;
    for (const auto& [name, job] : active_) {
      if (!job->drain_stopped) names.emplace_back(name);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      auto it = active_.find(Key(name));
      if (it == active_.end()) continue;
      it->second->drain_stopped = true;
      v1::StopTrainingJobRequest stop;
      stop.set_training_job_name(name);
      (void)engine_->StopTrainingJob(stop);
    }
  }

  void Delete(const std::string& name) {
    // (Never re-entered: OnClusterFreed defers its delete to an event.)
    delete_request_.set_training_job_name(name);  // reuses the name's buffer
    // FailedPrecondition: its warm pool is Available; deleted once the
    // provider says the cluster moved on.
    if (absl::IsFailedPrecondition(engine_->DeleteTrainingJob(delete_request_))) {
      awaiting_delete_.insert(name);
    }
  }

  void OnClusterFreed(std::string_view job) {
    auto it = awaiting_delete_.find(Key(job));
    if (it == awaiting_delete_.end()) return;
    // Moved out of the set, and into the event (which holds it inline).
    std::string name = std::move(awaiting_delete_.extract(it).value());
    loop_->ScheduleAfter(absl::ZeroDuration(), [this, name = std::move(name)] { Delete(name); });
  }

  void Record(const Job& j, End end) {
    const absl::Time now = loop_->Now();
    switch (end) {
      case End::kCompleted:
        ++completed_;
        break;
      case End::kFailed:
        ++failed_;
        break;
      case End::kStopped:
        ++stopped_;
        break;
    }
    if (j.first_training) {
      const absl::Duration startup = internal::Minus(*j.first_training, j.arrival);
      startups_.push_back(static_cast<float>(internal::SecondsDouble(startup)));
      if (j.warm) ++warm_hits_;
    }
    spot_interruptions_ += j.spot_interruptions;
    node_failures_ += j.node_failures;
    lost_instance_time_ = internal::Plus(lost_instance_time_, j.lost_instance_time);
    bool met = true;
    if (j.deadline) {
      ++deadline_jobs_;
      met = end == End::kCompleted && now <= *j.deadline;
      if (!met) ++deadline_misses_;
    }
    if (options_.keep_outcomes) {
      JobOutcome o;
      o.name = j.logical;
      o.completed = end == End::kCompleted;
      o.has_deadline = j.deadline.has_value();
      o.met_deadline = j.deadline && met;
      o.startup = j.first_training ? *j.first_training - j.arrival : absl::ZeroDuration();
      o.duration = now - j.arrival;
      outcomes_.push_back(std::move(o));
    }
  }

  PolicyResult Collect() {
    PolicyResult r;
    r.policy = policy_.name;
    r.keep_alive = policy_.keep_alive.Name();
    r.spot = policy_.spot.Name();
    if (policy_.keep_alive.kind == KeepAliveChoice::Kind::kFixed) r.fixed_keep_alive = policy_.keep_alive.fixed;
    r.uses_spot = policy_.spot.kind != SpotChoice::Kind::kOnDemand;
    r.jobs = jobs_;
    r.completed = completed_;
    r.failed = failed_;
    r.stopped = stopped_;
    r.rejected = rejected_;
    r.first_error = first_error_;
    const SimAccounting a = provider_->Accounting();
    r.cost = a.cost;
    r.billable_instance_hours = Hours(a.on_demand_busy + a.spot_busy);
    r.spot_instance_hours = Hours(a.spot_busy);
    r.warm_retained_instance_hours = Hours(a.warm_idle);
    r.started = static_cast<int64_t>(startups_.size());
    r.warm_hits = warm_hits_;
    r.warm_hit_rate = r.started > 0 ? static_cast<double>(warm_hits_) / static_cast<double>(r.started) : 0;
    if (!startups_.empty()) {
      // Percentiles 0 (the least) to 100, by nearest rank: order statistics, selected rather
      // than sorted (a million startups take a tenth of a second to sort).
      const size_t n = startups_.size();
      std::vector<size_t> indices;
      for (int q = 0; q <= 100; ++q) indices.push_back(q == 0 ? 0 : NearestRankIndex(n, q / 100.0));
      internal::SelectRanks(startups_, indices);
      for (size_t i : indices) r.startup_quantiles.push_back(startups_[i]);
      r.startup_p50 = r.startup_quantiles[50];
      r.startup_p90 = r.startup_quantiles[90];
      r.startup_p99 = r.startup_quantiles[99];
    }
    r.spot_interruptions = spot_interruptions_;
    r.node_failures = node_failures_;
    r.migrations = migrations_;
    r.lost_work_instance_hours = Hours(lost_instance_time_);
    r.deadline_jobs = deadline_jobs_;
    r.deadline_misses = deadline_misses_;
    r.ideal_cost = ideal_;
    r.ideal_on_demand_cost = ideal_on_demand_;
    r.ideal_infeasible = ideal_infeasible_;
    r.outcomes = std::move(outcomes_);
    r.events = loop_->executed_events();
    return r;
  }

  const Scenario& scenario_;
  const PolicySpec& policy_;
  const PolicyRunOptions& options_;

  std::vector<std::unique_ptr<WorkloadGenerator>> generators_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<SimClusterProvider> provider_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<SpotInterruptionHandler> handler_;
  std::unique_ptr<Engine> engine_;
  absl::Time start_;
  absl::Time horizon_end_;
  bool draining_ = false;  // past the drain limit: remaining jobs are being stopped

  internal::Slab<Job> job_slab_;  // before active_: outlives its jobs
  // By the engine's name: a view of the job's own `current`.
  absl::flat_hash_map<absl::string_view, JobPtr> active_;
  absl::flat_hash_set<std::string> awaiting_delete_;
  // What is kept per workload request `source` (the few most recent,
  // ScratchFor): its prepared variants, for on-demand [0] and spot [1] jobs,
  // without and with [+2] checkpoints.
  struct Scratch {
    struct Prepared {
      bool tried = false;       // PrepareTrainingJob was called
      PreparedTrainingJob job;  // empty when the engine refused the request
    };
    std::shared_ptr<const v1::CreateTrainingJobRequest> source;
    Prepared prepared[4];
  };
  static constexpr size_t kScratches = 8;
  std::vector<std::unique_ptr<Scratch>> scratches_;
  v1::DeleteTrainingJobRequest delete_request_;  // Delete's

  int64_t jobs_ = 0, completed_ = 0, failed_ = 0, stopped_ = 0, rejected_ = 0;
  std::string first_error_;
  std::vector<float> startups_;
  int64_t warm_hits_ = 0, spot_interruptions_ = 0, node_failures_ = 0, migrations_ = 0;
  // The omniscient bound, in the slack sweep's on-demand runs (AddIdeal).
  std::optional<double> ideal_;
  double ideal_on_demand_ = 0;
  int64_t ideal_infeasible_ = 0;
  SpotTrace always_there_{absl::Minutes(5), {std::numeric_limits<int32_t>::max()}};
  int64_t deadline_jobs_ = 0, deadline_misses_ = 0;
  absl::Duration lost_instance_time_;
  std::vector<JobOutcome> outcomes_;
};

// One run of RunScenario: a policy (the scenario's, or one of the slack
// sweep's, which outlive the run) and its options.
struct PlannedRun {
  const PolicySpec* policy;
  PolicyRunOptions options;
};

// The number of threads RunScenario runs `runs` runs on.
size_t ThreadsFor(const RunOptions& options, size_t runs) {
  size_t threads = static_cast<size_t>(options.threads);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  return std::min(threads, runs);
}

// Runs every run, the results in the runs' order: one after another on this
// thread, or on ThreadsFor(...) threads of their own, each taking the next
// run not yet taken, while this thread reports the progress. Each run
// builds its own loop, provider and engine and only reads the scenario, so
// the results do not depend on the number of threads.
std::vector<PolicyResult> RunAll(const Scenario& scenario, std::vector<PlannedRun>& runs,
                                 const RunOptions& options) {
  const size_t n = runs.size();
  std::vector<PolicyResult> results(n);
  const double total = static_cast<double>(n);
  const size_t threads = ThreadsFor(options, n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) {
      if (options.progress) {
        runs[i].options.progress = [&options, i, total](double f) {
          options.progress((static_cast<double>(i) + f) / total);
        };
      }
      results[i] = RunPolicy(scenario, *runs[i].policy, runs[i].options);
    }
    return results;
  }

  // Each run's fraction done, written by the thread running it; summed by
  // this one (each only grows, so the sum does too).
  std::unique_ptr<std::atomic<double>[]> fractions(new std::atomic<double>[n]);
  for (size_t i = 0; i < n; ++i) fractions[i].store(0, std::memory_order_relaxed);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable all_done;
  size_t finished = 0;  // guarded by mu
  auto work = [&] {
    while (true) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      if (options.progress) {
        runs[i].options.progress = [&fractions, i](double f) {
          fractions[i].store(f, std::memory_order_relaxed);
        };
      }
      try {
        results[i] = RunPolicy(scenario, *runs[i].policy, runs[i].options);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      fractions[i].store(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      all_done.notify_one();
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (size_t t = 0; t < threads; ++t) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: those started take every run
    }
  }
  if (workers.empty()) work();
  if (options.progress) {
    constexpr auto kEvery = std::chrono::milliseconds(100);
    std::unique_lock<std::mutex> lock(mu);
    while (!all_done.wait_for(lock, kEvery, [&] { return finished == n; })) {
      lock.unlock();
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += fractions[i].load(std::memory_order_relaxed);
      options.progress(std::min(1.0, sum / total));
      lock.lock();
    }
  }
  for (std::thread& t : workers) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results;
}

}  // namespace

PolicyResult RunPolicy(const Scenario& scenario, const PolicySpec& policy, const PolicyRunOptions& options) {
  PolicyRun run(scenario, policy, options);
  return run.Run();
}

size_t BestPolicy(const std::vector<PolicyResult>& results, size_t baseline) {
  const PolicyResult& base = results[baseline];
  // Cost and P90 compared as FormatTable prints them (to the cent, to the
  // second): a reader sees no difference the choice rests on that the table hides.
  auto as_printed = [](double x, int decimals) {
    return std::strtod(absl::StrFormat("%.*f", decimals, x).c_str(), nullptr);
  };
  size_t best = baseline;
  for (size_t i = 0; i < results.size(); ++i) {
    const PolicyResult& r = results[i];
    // No startup P90 (no job began training) is worse than any.
    const bool latency_ok =
        !base.startup_p90 ||
        (r.startup_p90 && as_printed(*r.startup_p90, 0) <= as_printed(*base.startup_p90, 0));
    if (latency_ok && r.deadline_misses <= base.deadline_misses && r.completed >= base.completed &&
        as_printed(r.cost, 2) < as_printed(results[best].cost, 2)) {
      best = i;
    }
  }
  return best;
}

absl::StatusOr<SimulationReport> RunScenario(const Scenario& scenario, const RunOptions& options) {
  if (scenario.workloads.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("scenario '", scenario.name, "' has no workloads"));
  }
  if (scenario.policies.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("scenario '", scenario.name, "' has no policies"));
  }
  if (scenario.horizon <= absl::ZeroDuration() || scenario.horizon > kMaxSimDuration) {
    return absl::InvalidArgumentError(
        absl::StrCat("scenario '", scenario.name, "': horizon must be positive and at most ",
                     absl::ToInt64Hours(kMaxSimDuration) / 24, " days"));
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunOptions.threads must be 0 (one per hardware thread) or positive, not ",
                     options.threads));
  }
  SimulationReport report;
  report.scenario = scenario.name;
  report.description = scenario.description;
  report.seed = scenario.seed;
  report.horizon = scenario.horizon;
  if (!scenario.baseline.empty()) {
    auto it = std::find_if(scenario.policies.begin(), scenario.policies.end(),
                           [&](const PolicySpec& p) { return p.name == scenario.baseline; });
    if (it == scenario.policies.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("scenario '", scenario.name, "': baseline '", scenario.baseline, "' names no policy"));
    }
    report.baseline = static_cast<size_t>(it - scenario.policies.begin());
  }

  // The slack sweep: on-demand, and each distinct spot policy, per slack.
  std::vector<PolicySpec> sweep_policies;
  if (options.slack_sweep && !scenario.slack_sweep.empty()) {
    for (const PolicySpec& p : scenario.policies) {
      if (p.spot.kind == SpotChoice::Kind::kOnDemand) continue;
      const bool seen = std::any_of(sweep_policies.begin(), sweep_policies.end(),
                                    [&](const PolicySpec& q) { return q.spot.Name() == p.spot.Name(); });
      if (!seen) sweep_policies.push_back(PolicySpec{p.spot.Name(), scenario.policies[report.baseline].keep_alive, p.spot});
    }
  }
  const PolicySpec on_demand{"OnDemand", scenario.policies[report.baseline].keep_alive,
                             SpotChoice{}};

  // Every run, in the report's order: the policies, then per slack on-demand
  // and each spot policy. No run depends on another's result.
  std::vector<PlannedRun> runs;
  for (const PolicySpec& p : scenario.policies) runs.push_back(PlannedRun{&p, {}});
  if (!sweep_policies.empty()) {
    for (double slack : scenario.slack_sweep) {
      PolicyRunOptions o;
      o.deadline_slack = slack;
      o.spot_eligible_only = true;
      runs.push_back(PlannedRun{&on_demand, o});
      for (const PolicySpec& p : sweep_policies) runs.push_back(PlannedRun{&p, o});
    }
  }
  std::vector<PolicyResult> results = RunAll(scenario, runs, options);

  report.results.assign(
      std::make_move_iterator(results.begin()),
      std::make_move_iterator(results.begin() + static_cast<ptrdiff_t>(scenario.policies.size())));
  report.best = BestPolicy(report.results, report.baseline);

  size_t next = scenario.policies.size();
  if (!sweep_policies.empty()) {
    for (double slack : scenario.slack_sweep) {
      const PolicyResult& od = results[next++];
      for (const PolicySpec& p : sweep_policies) {
        const PolicyResult& r = results[next++];
        SlackPoint point;
        point.slack = slack;
        point.policy = p.name;
        point.cost = r.cost;
        point.on_demand_cost = od.cost;
        point.savings = od.cost > 0 ? 1.0 - r.cost / od.cost : 0;
        point.deadline_misses = r.deadline_misses;
        point.on_demand_misses = od.deadline_misses;
        report.slack.push_back(point);
      }
      if (od.ideal_cost) {
        // The omniscient bound, against on-demand in its own model.
        SlackPoint point;
        point.slack = slack;
        point.policy = kIdealBoundName;
        point.cost = *od.ideal_cost;
        point.on_demand_cost = od.ideal_on_demand_cost;
        point.savings =
            od.ideal_on_demand_cost > 0 ? 1.0 - *od.ideal_cost / od.ideal_on_demand_cost : 0;
        point.deadline_misses = od.ideal_infeasible;
        point.on_demand_misses = od.deadline_misses;
        report.slack.push_back(point);
      }
    }
  }
  if (options.progress) options.progress(1.0);
  return report;
}

}  // namespace kiln::sim
