// The engine and its journal (EngineOptions::journal): a job's record as the
// journal keeps it, and the engine rebuilt from those records at start.
#include "core/internal/engine_impl.h"

namespace kiln::engine_impl {
namespace {

absl::Time OrPast(const MaybeTime& t) { return t ? *t : absl::InfinitePast(); }

// Every status and message the engine words, by text: a recovered
// transition points at the engine's own constant, as a live one does.
const char* const kTexts[] = {
    kInProgress,
    kCompleted,
    kFailed,
    kStopping,
    kStopped,
    kStarting,
    kPending,
    kDownloadingStatus,
    kTrainingStatus,
    kUploadingStatus,
    kMaxRuntimeExceeded,
    kInterrupted,
    kMaxWaitTimeExceeded,
    kRestarting,
    kMsgLaunching,
    kMsgPreparing,
    kMsgInsufficientCapacity,
    kMsgDownloading,
    kMsgTraining,
    kMsgUploading,
    kMsgCompleted,
    kMsgStopping,
    kMsgStopped,
    kMsgMaxRuntime,
    kMsgFailed,
    kMsgSpotCapacity,
    kMsgInterrupted,
    kMsgRestarting,
    kMsgMaxWait,
    kMsgMovingToSpot,
    kMsgMovingToOnDemand,
};

const char* StopCauseName(StopCause cause) {
  switch (cause) {
    case StopCause::kNone:
      return "";
    case StopCause::kUser:
      return "User";
    case StopCause::kMaxRuntime:
      return "MaxRuntime";
    case StopCause::kMaxWait:
      return "MaxWait";
  }
  return "";
}

// A provider without instances, for an engine that only shows what a
// read-only journal holds.
class NoClusterProvider final : public ClusterProvider {
 public:
  void Provision(const ClusterSpec& spec, ClusterCallback done) override {
    done(absl::FailedPreconditionError("this engine shows a read-only journal: no instances"));
  }
  void PrepareImage(const Cluster&, std::string_view, DoneCallback done) override {
    done(absl::FailedPreconditionError("no instances"));
  }
  void StartContainers(const JobContext&, ContainerEvents&, DoneCallback started) override {
    started(absl::FailedPreconditionError("no instances"));
  }
  void Signal(const Cluster&, int) override {}
  void UploadArtifacts(const JobContext&, ArtifactsCallback done) override {
    done(absl::FailedPreconditionError("no instances"));
  }
  void Release(const Cluster&) override {}
};

}  // namespace

std::unique_ptr<ClusterProvider> NewNoClusterProvider() {
  return std::make_unique<NoClusterProvider>();
}

absl::Status EngineImpl::ReadOnlyError() const {
  return absl::FailedPreconditionError(
      "this engine shows a journal opened read-only: it changes no training job");
}

// ---------------------------------------------------------------------------
// Records

JobRecord EngineImpl::MakeRecord(Job& job) {
  JobRecord r;
  r.id = job.seq_;
  r.name = job.name();
  if (job.journal_request_) {
    if (job.request_ != nullptr) {
      r.request = job.request_;
    } else {  // kept serialized since the job ended (Job::Keep)
      auto parsed = std::make_shared<v1::CreateTrainingJobRequest>();
      parsed->ParseFromString(job.request_bytes_);
      r.request = std::move(parsed);
    }
  }
  r.creation_time = job.creation_time_;
  r.last_modified_time = job.last_modified_;
  r.status = job.status_;
  r.transitions.reserve(job.transitions_.size());
  for (size_t i = 0; i < job.transitions_.size(); ++i) {
    const Transition& t = job.transitions_[i];
    JournalTransition& out = r.transitions.emplace_back();
    out.status = t.status;
    out.message = t.message;
    if (job.extras_ != nullptr) {
      for (const auto& [index, detail] : job.extras_->details) {
        if (index == i) {
          out.detail = detail;  // the first, as TransitionMessage shows it
          break;
        }
      }
    }
    out.start = t.start();
    if (t.ended()) out.end = t.end();
  }
  r.training_start_time = OrPast(job.training_start_);
  r.training_end_time = OrPast(job.training_end_);
  if (job.extras_ != nullptr) {
    r.failure_reason = job.extras_->failure_reason;
    for (const MetricState& m : job.extras_->metrics) {
      if (m.value) r.metrics.push_back(JournalMetric{m.name, *m.value, m.time});
    }
  }
  r.held = job.held_;
  r.held_since = OrPast(job.held_since_);
  if (job.held_since_) r.held_until = Now();
  r.attempt = job.attempt_;
  r.spot_interruptions = job.spot_interruptions_;
  r.infrastructure_failures = job.infrastructure_failures_;
  r.on_spot = job.on_spot_;
  r.warm_pool = job.warm_pool_;
  r.stop_cause = StopCauseName(job.stop_cause_);
  r.cluster = job.cluster_;
  r.containers_running = job.phase_ == Phase::kTraining && job.containers_running_ > 0;
  if (job.warm_pool_) r.pool = pools().Save(job.name());
  return r;
}

void EngineImpl::PoolChanged(std::string_view name) {
  const Step step(*this);
  if (Job* job = FindJob(name)) Journaled(*job);
}

void EngineImpl::ArmBillingMark() {
  if (billing_mark_period_ <= absl::ZeroDuration()) return;
  billing_mark_armed_ = true;
  billing_mark_ = loop_.ScheduleAfter(billing_mark_period_, [this] { WriteBillingMarks(); });
}

void EngineImpl::WriteBillingMarks() {
  billing_mark_armed_ = false;
  if (cluster_owners_.empty()) return;
  // (A timer runs between steps: every change is appended already, so each
  // job that holds instances per its latest record holds them now.)
  journal_->Mark(Now());
  ArmBillingMark();
}

void EngineImpl::RecordDirtyJobs() {
  // (A job deleted in the step has no record to write: its erasure is queued.)
  std::vector<uint64_t> dirty;
  dirty.swap(journal_dirty_);
  for (uint64_t seq : dirty) {
    Job* job = by_seq_.Find(seq);
    if (job == nullptr || !job->journal_dirty_) continue;
    JobRecord record = MakeRecord(*job);
    job->journal_dirty_ = false;
    job->journal_request_ = false;
    journal_ticket_ = journal_->Append(std::move(record));
  }
  dirty.clear();
  if (journal_dirty_.empty()) journal_dirty_.swap(dirty);  // keeps the room
}

// ---------------------------------------------------------------------------
// Recovery

const char* EngineImpl::InternText(const std::string& text) {
  for (const char* known : kTexts) {
    if (text == known) return known;
  }
  for (const auto& kept : interned_) {
    if (*kept == text) return kept->c_str();
  }
  interned_.push_back(std::make_unique<std::string>(text));
  return interned_.back()->c_str();
}

absl::Status EngineImpl::RecoverJobs() {
  KILN_RETURN_IF_ERROR(options_.journal->Recover(
      [this](JobRecord&& record) { return RecoverJob(std::move(record)); }));
  return RestorePools();
}

namespace {
// Receives nothing: a warm pool's cluster runs no container.
class NoContainerEvents final : public ContainerEvents {
 public:
  void OnLogLine(const Instance&, std::string_view) override {}
  void OnExit(const Instance&, const ContainerExit&) override {}
};
}  // namespace

absl::Status EngineImpl::RestorePools() {
  // Available pools in the order they became Available (ties: the older
  // job's first), as the manager made them; the others in any order.
  auto since = [](const WarmPoolRecord& r) {
    return r.status == "Available" ? r.available_since : absl::InfinitePast();
  };
  std::stable_sort(pending_pools_.begin(), pending_pools_.end(),
                   [&](const auto& a, const auto& b) { return since(a.second) < since(b.second); });
  static NoContainerEvents no_events;
  std::vector<std::pair<uint64_t, WarmPoolRecord>> pending;
  pending.swap(pending_pools_);
  v1::CreateTrainingJobRequest scratch;  // an ended job's request (Job::Keep)
  for (auto& [seq, record] : pending) {
    Job& job = *by_seq_.Find(seq);
    const v1::CreateTrainingJobRequest& request = job.ReadRequest(scratch);
    if (record.cluster && journal_ != nullptr) {
      // The pool's cluster is taken back from the provider, or lost.
      const ArnText arn = ContextArn(job);
      JobContext context{job.name(), arn.view(), request, *record.cluster, job.attempt_, job.seq_};
      context.warm_pool = true;
      if (!provider_.Reattach(context, no_events).ok()) record.cluster.reset();
    }
    absl::Status restored = pools().Restore(WarmPoolJob{job.name(), request}, std::move(record));
    if (absl::IsUnimplemented(restored)) {
      // A manager that keeps no records across engines: a job that goes on
      // is new to it; an ended one shows no WarmPoolStatus.
      if (job.ended() || options_.journal->read_only()) continue;
      absl::StatusOr<bool> pooled = pools().OnJobCreated(WarmPoolJob{job.name(), request});
      job.warm_pool_ = pooled.ok() && *pooled;
      continue;
    }
    if (!restored.ok()) {
      return absl::DataLossError(
          absl::StrCat("journal: job ", job.seq_, " ('", TextForMessage(job.name()),
                       "'): its warm pool cannot be restored: ", restored.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::RecoverJob(JobRecord&& r) {
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(
        absl::StrCat("journal: job ", r.id, " ('", TextForMessage(r.name), "'): ", why));
  };
  if (r.id < next_seq_ || r.id > JobToken::kMaxSeq) {
    return corrupt("its id is out of order or out of range");
  }
  if (r.name.empty() || FindJob(r.name) != nullptr) return corrupt("its name is empty or taken");
  if (r.request == nullptr) return corrupt("it has no request");
  if (r.transitions.empty()) return corrupt("it has no status transitions");
  const char* status = InternText(r.status);
  if (status != kInProgress && status != kCompleted && status != kFailed && status != kStopping &&
      status != kStopped) {
    return corrupt(absl::StrCat("unknown TrainingJobStatus '", TextForMessage(r.status), "'"));
  }
  StopCause cause = StopCause::kNone;
  if (r.stop_cause == "User") {
    cause = StopCause::kUser;
  } else if (r.stop_cause == "MaxRuntime") {
    cause = StopCause::kMaxRuntime;
  } else if (r.stop_cause == "MaxWait") {
    cause = StopCause::kMaxWait;
  } else if (!r.stop_cause.empty()) {
    return corrupt(absl::StrCat("unknown stop cause '", TextForMessage(r.stop_cause), "'"));
  }

  Job& job = jobs_.Add(*this, r.id, std::move(r.name), std::move(r.request), r.creation_time);
  by_seq_.Add(job.seq_, &job);
  next_seq_ = job.seq_ + 1;
  job.last_modified_ = r.last_modified_time;
  job.status_ = status;
  for (size_t i = 0; i < r.transitions.size(); ++i) {
    const JournalTransition& t = r.transitions[i];
    Transition& out = job.transitions_.emplace_back(
        Transition{InternText(t.status), InternText(t.message), internal::UnixNanos(t.start)});
    if (t.end != absl::InfiniteFuture()) out.end_ns = internal::UnixNanos(t.end);
    if (!t.detail.empty()) job.extras().details.emplace_back(i, t.detail);
  }
  if (r.training_start_time != absl::InfinitePast()) job.training_start_ = r.training_start_time;
  if (r.training_end_time != absl::InfinitePast()) job.training_end_ = r.training_end_time;
  if (!r.failure_reason.empty()) job.extras().failure_reason = std::move(r.failure_reason);
  job.held_ = r.held;
  if (r.held_since != absl::InfinitePast()) job.held_since_ = r.held_since;
  job.attempt_ = r.attempt;
  job.spot_interruptions_ = r.spot_interruptions;
  job.infrastructure_failures_ = r.infrastructure_failures;
  job.on_spot_ = r.on_spot;
  job.warm_pool_ = r.warm_pool;
  job.stop_cause_ = cause;
  if (job.warm_pool_ && r.pool) {
    pending_pools_.emplace_back(job.seq_, std::move(*r.pool));
  }

  if (job.ended() || options_.journal->read_only()) {
    // Shown as recorded: the metrics that had values, nothing running.
    for (JournalMetric& m : r.metrics) {
      MetricState state;
      state.name = std::move(m.name);
      state.value = m.value;
      state.time = m.time;
      job.extras().metrics.push_back(std::move(state));
    }
    job.phase_ = Phase::kEnded;
    job.held_since_.reset();
    if (job.ended()) job.Keep();
    return absl::OkStatus();
  }

  // A job that goes on: as Accept sets one up, then its attempt is resumed
  // (ResumeRecovered) once the loop runs.
  const v1::CreateTrainingJobRequest& request = job.request();
  if (absl::Status needs = CheckComponents(request); !needs.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("journal: training job '", job.name(),
                     "' is unfinished and cannot go on: ", needs.message()));
  }
  for (const auto& def : request.algorithm_specification().metric_definitions()) {
    MetricState m;
    m.name = def.name();
    m.regex = internal::Regex::Compile(def.regex(), internal::Regex::Mode::kSearch, nullptr);
    if (m.regex == nullptr)
      return corrupt(absl::StrCat("metric '", def.name(), "' has a bad regex"));
    for (const JournalMetric& had : r.metrics) {
      if (had.name == m.name) {
        m.value = had.value;
        m.time = had.time;
      }
    }
    job.extras().metrics.push_back(std::move(m));
  }
  job.next_retry_delay_ = options_.capacity_retry_initial;
  if (job.warm_pool_ && !r.pool) {
    // Recorded without its warm-pool record (a manager that saves none): the
    // manager hears of the job again.
    absl::StatusOr<bool> pooled = pools().OnJobCreated(WarmPoolJob{job.name(), request});
    job.warm_pool_ = pooled.ok() && *pooled;
  }
  if (request.enable_managed_spot_training() &&
      request.stopping_condition().has_max_wait_time_in_seconds()) {
    // From creation: a deadline that passed while no engine ran stops the
    // job as soon as the loop runs.
    job.max_wait_deadline_ = max_wait_deadlines_.Add(
        job.creation_time_ + absl::Seconds(request.stopping_condition().max_wait_time_in_seconds()),
        job.seq_);
  }
  active_jobs_.fetch_add(1, std::memory_order_relaxed);
  if (job.on_spot_ && review_period_ > absl::ZeroDuration()) ScheduleReview(job);
  loop_.ScheduleAfter(absl::ZeroDuration(),
                      [this, token = TokenOf(job), cluster = std::move(r.cluster),
                       running = r.containers_running, until = r.held_until]() mutable {
                        const Step step(*this);
                        if (Job* j = Resume(token))
                          ResumeRecovered(*j, std::move(cluster), running, until);
                      });
  return absl::OkStatus();
}

void EngineImpl::ResumeRecovered(Job& job, std::optional<Cluster> cluster, bool containers_running,
                                 absl::Time held_until) {
  if (job.phase_ != Phase::kProvisioning || job.cluster_) return;  // moved on meanwhile
  if (cluster && containers_running) {
    const ArnText arn = ContextArn(job);
    const JobContext context{job.name(), arn.view(),   job.request(),
                             *cluster,   job.attempt_, job.seq_};
    if (provider_.Reattach(context, job).ok()) {
      // The containers run on: the attempt goes on where it was, billed
      // from when it took its instances.
      const MaybeTime since = job.held_since_;
      AttachCluster(job, std::move(*cluster));
      if (since) job.held_since_ = *since;
      const size_t n = job.cluster_->instances.size();
      job.phase_ = Phase::kTraining;
      job.running_.assign(n, true);
      job.containers_running_ = static_cast<int>(n);
      const auto& sc = job.request().stopping_condition();
      const int64_t max_runtime =
          sc.has_max_runtime_in_seconds() ? sc.max_runtime_in_seconds() : kDefaultMaxRuntimeSeconds;
      job.runtime_deadline_ = runtime_deadlines_.Add(
          internal::Plus(*job.held_since_, internal::Minus(absl::Seconds(max_runtime), job.held_)),
          job.seq_);
      if (job.status_ == kStopping) {
        SignalStop(job);  // the stop goes on
      }
      return;
    }
  }
  // The attempt's instances are lost with the engine that held them: billed
  // until its last billing mark (or until now, for a record without one),
  // then the job goes on as after a lost instance.
  if (job.held_since_ && held_until != absl::InfinitePast()) {
    const absl::Time until = std::clamp(held_until, *job.held_since_, Now());
    job.held_ = internal::Plus(job.held_, internal::Minus(until, *job.held_since_));
    job.held_since_.reset();
    Journaled(job);
  }
  if (job.status_ == kStopping) {
    job.interrupting_ = true;  // EndInterruption ends a stopping job Stopped
  } else {
    job.interrupting_ = true;
    job.interrupt_preempted_ = false;
    job.lost_to_restart_ = true;
    ++job.infrastructure_failures_;
    job.extras().interrupted_host =
        cluster && !cluster->instances.empty() ? cluster->instances[0].host_name : "algo-1";
  }
  EndInterruption(job);
}

}  // namespace kiln::engine_impl
