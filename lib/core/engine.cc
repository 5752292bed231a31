#include "kiln/engine.h"

#include "core/internal/engine_impl.h"

namespace kiln {

// Lets the engine make PreparedTrainingJobs and read them back.
struct engine_internal::PreparedAccess {
  static PreparedTrainingJob Make(std::shared_ptr<const v1::CreateTrainingJobRequest> request,
                                  uint64_t engine_id) {
    return PreparedTrainingJob(std::move(request), engine_id);
  }
  static const std::shared_ptr<const v1::CreateTrainingJobRequest>& Request(
      const PreparedTrainingJob& p) {
    return p.request_;
  }
  static uint64_t EngineId(const PreparedTrainingJob& p) { return p.engine_id_; }
};

}  // namespace kiln

namespace kiln::engine_impl {

using engine_internal::PreparedAccess;

// ---------------------------------------------------------------------------
// API operations

absl::Status EngineImpl::Admit(const v1::CreateTrainingJobRequest& request) const {
  KILN_RETURN_IF_ERROR(ValidateCreateTrainingJobRequest(request, options_.validation));
  KILN_RETURN_IF_ERROR(CheckComponents(request));
  return CheckChannels(request);
}

absl::Status EngineImpl::CheckComponents(const v1::CreateTrainingJobRequest& request) const {
  if (request.input_data_config_size() > 0 && options_.data_channel == nullptr) {
    const std::string& name = request.training_job_name();
    return absl::FailedPreconditionError(
        absl::StrCat(name.empty() ? "" : absl::StrCat("job '", name, "': "),
                     "InputDataConfig needs a DataChannel, and this engine has none"));
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::CheckChannels(const v1::CreateTrainingJobRequest& request) const {
  for (const v1::Channel& channel : request.input_data_config()) {
    // What the service checks synchronously (an S3Prefix without objects).
    KILN_RETURN_IF_ERROR(
        options_.data_channel->CheckChannel(channel, EffectiveInputMode(request, channel)));
  }
  return absl::OkStatus();
}

absl::StatusOr<PreparedTrainingJob> EngineImpl::PrepareTrainingJob(
    const v1::CreateTrainingJobRequest& request) {
  auto prepared = std::make_shared<v1::CreateTrainingJobRequest>(request);
  // Validated under a name the service accepts, so that only the rest of the
  // request can fail; each job's name is validated when it is created.
  prepared->set_training_job_name("prepared");
  KILN_RETURN_IF_ERROR(ValidateCreateTrainingJobRequest(*prepared, options_.validation));
  prepared->clear_training_job_name();
  KILN_RETURN_IF_ERROR(CheckComponents(*prepared));
  return PreparedAccess::Make(std::move(prepared), id_);
}

absl::StatusOr<v1::CreateTrainingJobResponse> EngineImpl::CreateTrainingJob(
    const PreparedTrainingJob& prepared, std::string_view name) {
  const std::shared_ptr<const v1::CreateTrainingJobRequest>& shared =
      PreparedAccess::Request(prepared);
  if (shared == nullptr) {
    return absl::InvalidArgumentError(
        "CreateTrainingJob: the PreparedTrainingJob is empty (make one with PrepareTrainingJob)");
  }
  if (PreparedAccess::EngineId(prepared) != id_) {
    return absl::InvalidArgumentError(
        "CreateTrainingJob: the PreparedTrainingJob was prepared by another engine");
  }
  std::string job_name(name);
  KILN_RETURN_IF_ERROR(CheckName(job_name));
  KILN_RETURN_IF_ERROR(CheckChannels(*shared));
  return CreateDurably(std::move(job_name), shared);
}

absl::StatusOr<v1::CreateTrainingJobResponse> EngineImpl::CreateTrainingJob(
    const v1::CreateTrainingJobRequest& request) {
  // The checks that need no engine state, and the copy the job keeps, are
  // made on the caller's thread: the data channel's checks may wait for a
  // store, and must not hold up the loop.
  KILN_RETURN_IF_ERROR(Admit(request));
  std::shared_ptr<const v1::CreateTrainingJobRequest> copy = CopyForJob(request);
  return CreateDurably(request.training_job_name(), std::move(copy));
}

absl::StatusOr<v1::CreateTrainingJobResponse> EngineImpl::CreateDurably(
    std::string name, std::shared_ptr<const v1::CreateTrainingJobRequest> request) {
  uint64_t seq = 0;  // the job's, once accepted
  absl::StatusOr<v1::CreateTrainingJobResponse> created =
      Durably([&]() -> absl::StatusOr<v1::CreateTrainingJobResponse> {
        absl::StatusOr<v1::CreateTrainingJobResponse> response =
            Create(std::move(name), std::move(request));
        if (response.ok()) seq = next_seq_ - 1;
        return response;
      });
  if (!created.ok() && seq != 0) {
    // Accepted, but the journal could not record it: it must not run on
    // unrecorded (a restart would lose it), so it fails now.
    OnLoop([&] {
      Job* job = by_seq_.Find(seq);
      if (job != nullptr && !job->ended()) {
        Fail(*job, absl::StrCat("InternalServerError: the journal could not record the job: ",
                                created.status().message()));
      }
      return 0;
    });
  }
  return created;
}

absl::Status EngineImpl::CheckName(const std::string& name) const {
  // Checked against its shape, and a name that fails gets the error a whole
  // request with that name would get (its other fields are valid): a
  // request naming only the job has the same check, and words it the same
  // way. (A new job's name does not come again: not worth remembering.)
  if (!name_checker_.StringOk(name, name_shape_, internal::Pattern::Memo::kSkip)) {
    v1::DescribeTrainingJobRequest name_only;
    name_only.set_training_job_name(name);
    return ValidateRequest(name_only, options_.validation);
  }
  return absl::OkStatus();
}

absl::Status EngineImpl::CheckNewJob(const std::string& name) {
  if (FindJob(name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat(
        "Training job names must be unique within an AWS account and region, and a training "
        "job with this name already exists (",
        arn_prefix_, name, ")"));
  }
  if (next_seq_ > JobToken::kMaxSeq) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "This engine has created ", JobToken::kMaxSeq, " training jobs, as many as it can name"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::CreateTrainingJobResponse> EngineImpl::Create(
    std::string name, std::shared_ptr<const v1::CreateTrainingJobRequest> request) {
  KILN_RETURN_IF_ERROR(CheckNewJob(name));
  KILN_ASSIGN_OR_RETURN(const bool pooled, pools().OnJobCreated(WarmPoolJob{name, *request}));
  return Accept(jobs_.Add(*this, next_seq_++, std::move(name), std::move(request), Now()), pooled);
}

v1::CreateTrainingJobResponse EngineImpl::Accept(Job& ref, bool pooled) {
  const v1::CreateTrainingJobRequest& request = ref.request();
  for (const auto& def : request.algorithm_specification().metric_definitions()) {
    MetricState m;
    m.name = def.name();
    // Validation compiled it already; it cannot fail here.
    m.regex = internal::Regex::Compile(def.regex(), internal::Regex::Mode::kSearch, nullptr);
    ref.extras().metrics.push_back(std::move(m));
  }
  ref.next_retry_delay_ = options_.capacity_retry_initial;
  by_seq_.Add(ref.seq_, &ref);
  Journaled(ref, /*request=*/true);
  ref.warm_pool_ = pooled;
  ref.on_spot_ = request.enable_managed_spot_training();
  if (ref.on_spot_ && request.stopping_condition().has_max_wait_time_in_seconds()) {
    // MaxWaitTimeInSeconds: waiting and running together, from creation.
    ref.max_wait_deadline_ = max_wait_deadlines_.Add(
        Now() + absl::Seconds(request.stopping_condition().max_wait_time_in_seconds()), ref.seq_);
  }
  active_jobs_.fetch_add(1, std::memory_order_relaxed);
  SetStatus(ref, kInProgress, kStarting, kMsgLaunching);
  if (ref.on_spot_) {
    ref.on_spot_ = ReviewCapacity(ref, CapacityReview::When::kBeforeProvisioning);
    if (review_period_ > absl::ZeroDuration()) ScheduleReview(ref);
  }
  Provision(ref);
  v1::CreateTrainingJobResponse response;
  response.set_training_job_arn(Arn(ref));
  return response;
}

absl::StatusOr<v1::DescribeTrainingJobResponse> EngineImpl::Describe(
    const v1::DescribeTrainingJobRequest& request) {
  const Job* job = FindJob(request.training_job_name());
  if (job == nullptr) return NoSuchJob(request);

  v1::DescribeTrainingJobResponse d;
  v1::CreateTrainingJobRequest scratch;
  const v1::CreateTrainingJobRequest& request_echo = job->ReadRequest(scratch);
  EchoFields(request_echo, d);
  // The service shows these flags false when the request left them out.
  if (!d.has_enable_network_isolation()) d.set_enable_network_isolation(false);
  if (!d.has_enable_inter_container_traffic_encryption()) {
    d.set_enable_inter_container_traffic_encryption(false);
  }
  if (!d.has_enable_managed_spot_training()) d.set_enable_managed_spot_training(false);
  d.set_training_job_name(job->name());
  d.set_training_job_arn(Arn(*job));
  // An uncompressed model is uploaded file by file, under a prefix (the contract 6.1).
  const bool uncompressed = request_echo.output_data_config().compression_type() == "NONE";
  d.mutable_model_artifacts()->set_s3_model_artifacts(
      JoinUri(request_echo.output_data_config().s3_output_path(),
              absl::StrCat(job->name(), uncompressed ? "/output/model/" : "/output/model.tar.gz")));
  d.set_training_job_status(job->status_);
  d.set_secondary_status(job->transitions_.back().status);
  if (job->extras_ != nullptr && !job->extras_->failure_reason.empty()) {
    d.set_failure_reason(job->extras_->failure_reason);
  }
  if (!d.stopping_condition().has_max_runtime_in_seconds()) {
    d.mutable_stopping_condition()->set_max_runtime_in_seconds(kDefaultMaxRuntimeSeconds);
  }
  *d.mutable_creation_time() = ToProto(job->creation_time_);
  *d.mutable_last_modified_time() = ToProto(job->last_modified_);
  if (job->training_start_) *d.mutable_training_start_time() = ToProto(*job->training_start_);
  if (job->training_end_) {
    *d.mutable_training_end_time() = ToProto(*job->training_end_);
    // Training time is wall time from start to end; billable time only the
    // time instances were held (they differ when spot attempts waited).
    d.set_training_time_in_seconds(BilledSeconds(*job->training_end_ - *job->training_start_));
    d.set_billable_time_in_seconds(BilledSeconds(job->held_));
  }
  for (size_t i = 0; i < job->transitions_.size(); ++i) {
    const Transition& t = job->transitions_[i];
    auto* out = d.add_secondary_status_transitions();
    out->set_status(t.status);
    *out->mutable_start_time() = ToProto(t.start());
    if (t.ended()) *out->mutable_end_time() = ToProto(t.end());
    out->set_status_message(job->TransitionMessage(i));
  }
  if (job->warm_pool_) {
    if (auto status = pools().Status(job->name())) *d.mutable_warm_pool_status() = *status;
    const std::string reason = pools().NotKeptReason(job->name());
    if (!reason.empty() && job->ended()) {
      auto* last = d.mutable_secondary_status_transitions(d.secondary_status_transitions_size() - 1);
      last->set_status_message(absl::StrCat(last->status_message(), ". Warm pool not kept: ", reason));
    }
  }
  const std::vector<MetricState> no_metrics;
  for (const MetricState& m : job->extras_ != nullptr ? job->extras_->metrics : no_metrics) {
    if (!m.value) continue;
    auto* out = d.add_final_metric_data_list();
    out->set_metric_name(m.name);
    // The model's Value is a 32-bit float, as the service holds it: rounded
    // here (a value beyond float range becomes infinity, written "Infinity").
    out->set_value(static_cast<float>(*m.value));
    *out->mutable_timestamp() = ToProto(m.time);
  }
  return d;
}

v1::TrainingJobSummary EngineImpl::Summary(const Job& job) const {
  v1::TrainingJobSummary s;
  s.set_training_job_name(job.name());
  s.set_training_job_arn(Arn(job));
  *s.mutable_creation_time() = ToProto(job.creation_time_);
  if (job.training_end_) *s.mutable_training_end_time() = ToProto(*job.training_end_);
  *s.mutable_last_modified_time() = ToProto(job.last_modified_);
  s.set_training_job_status(job.status_);
  s.set_secondary_status(job.transitions_.back().status);
  if (job.warm_pool_) {
    if (auto status = pools().Status(job.name())) *s.mutable_warm_pool_status() = *status;
  }
  return s;
}

// A NextToken names the last job of the page it ends: its sort key and its
// creation sequence (which breaks ties), under the SortBy/SortOrder it was
// issued for. The next page starts strictly after that position, so jobs
// created meanwhile neither shift nor repeat what is returned.
struct Cursor {
  std::string sort_by;
  std::string sort_order;
  std::string key;
  uint64_t seq = 0;
};

std::string SortKey(const Job& job, std::string_view sort_by) {
  if (sort_by == "Name") return job.name();
  if (sort_by == "Status") return job.status_;
  // CreationTime: nanoseconds, zero-padded so that strings order as numbers.
  return absl::StrFormat("%020d", absl::ToUnixNanos(job.creation_time_));
}

std::string EncodeCursor(const Cursor& c) {
  return absl::WebSafeBase64Escape(
      absl::StrCat("kiln1\n", c.sort_by, "\n", c.sort_order, "\n", c.seq, "\n", c.key));
}

absl::StatusOr<Cursor> DecodeCursor(const std::string& token) {
  std::string raw;
  absl::Status invalid = absl::InvalidArgumentError("Invalid pagination token: NextToken '" +
                                                    token + "' was not issued by this engine");
  if (!absl::WebSafeBase64Unescape(token, &raw)) return invalid;
  std::vector<std::string> parts = absl::StrSplit(raw, absl::MaxSplits('\n', 4));
  if (parts.size() != 5 || parts[0] != "kiln1") return invalid;
  Cursor c;
  c.sort_by = parts[1];
  c.sort_order = parts[2];
  if (!absl::SimpleAtoi(parts[3], &c.seq)) return invalid;
  c.key = parts[4];
  return c;
}

absl::StatusOr<v1::ListTrainingJobsResponse> EngineImpl::List(
    const v1::ListTrainingJobsRequest& request) {
  KILN_RETURN_IF_ERROR(ValidateRequest(request, options_.validation));
  const std::string sort_by = request.has_sort_by() ? request.sort_by() : "CreationTime";
  const std::string sort_order = request.has_sort_order() ? request.sort_order() : "Ascending";
  const int32_t max_results = request.has_max_results() ? request.max_results() : kDefaultMaxResults;
  std::optional<Cursor> after;
  if (request.has_next_token() && !request.next_token().empty()) {
    KILN_ASSIGN_OR_RETURN(Cursor c, DecodeCursor(request.next_token()));
    if (c.sort_by != sort_by || c.sort_order != sort_order) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Invalid pagination token: it was issued for SortBy=", c.sort_by,
          " SortOrder=", c.sort_order, ", not SortBy=", sort_by, " SortOrder=", sort_order));
    }
    after = std::move(c);
  }
  const bool descending = sort_order == "Descending";
  auto strict = [](const google::protobuf::Timestamp& bound, absl::Time t, bool after_bound) {
    return after_bound ? t > FromProto(bound) : t < FromProto(bound);
  };

  std::vector<std::pair<std::pair<std::string, uint64_t>, const Job*>> rows;
  for (const Job& job : jobs_) {
    if (request.has_name_contains() && !absl::StrContains(job.name(), request.name_contains())) {
      continue;
    }
    if (request.has_status_equals() && request.status_equals() != job.status_) continue;
    if (request.has_warm_pool_status_equals()) {
      std::optional<v1::WarmPoolStatus> pool =
          job.warm_pool_ ? pools().Status(job.name()) : std::nullopt;
      if (!pool || pool->status() != request.warm_pool_status_equals()) continue;
    }
    if (request.has_creation_time_after() &&
        !strict(request.creation_time_after(), job.creation_time_, true)) {
      continue;
    }
    if (request.has_creation_time_before() &&
        !strict(request.creation_time_before(), job.creation_time_, false)) {
      continue;
    }
    if (request.has_last_modified_time_after() &&
        !strict(request.last_modified_time_after(), job.last_modified_, true)) {
      continue;
    }
    if (request.has_last_modified_time_before() &&
        !strict(request.last_modified_time_before(), job.last_modified_, false)) {
      continue;
    }
    std::pair<std::string, uint64_t> key{SortKey(job, sort_by), job.seq_};
    if (after) {
      std::pair<std::string, uint64_t> cursor{after->key, after->seq};
      if (descending ? !(key < cursor) : !(cursor < key)) continue;
    }
    rows.emplace_back(std::move(key), &job);
  }
  std::sort(rows.begin(), rows.end(), [descending](const auto& a, const auto& b) {
    return descending ? b.first < a.first : a.first < b.first;
  });
  v1::ListTrainingJobsResponse response;
  const size_t n = std::min<size_t>(rows.size(), static_cast<size_t>(max_results));
  for (size_t i = 0; i < n; ++i) *response.add_training_job_summaries() = Summary(*rows[i].second);
  if (rows.size() > n && n > 0) {
    response.set_next_token(
        EncodeCursor(Cursor{sort_by, sort_order, rows[n - 1].first.first, rows[n - 1].first.second}));
  }
  return response;
}

absl::Status EngineImpl::StopRequest(const v1::StopTrainingJobRequest& request) {
  Job* job = FindJob(request.training_job_name());
  if (job == nullptr) return NoSuchJob(request);
  if (job->status_ == kStopping) return absl::OkStatus();
  if (job->status_ != kInProgress) {
    return absl::FailedPreconditionError(
        absl::StrCat("The request was rejected because the training job is in status ",
                     job->status_, "."));
  }
  Stop(*job, StopCause::kUser);
  return absl::OkStatus();
}

absl::StatusOr<v1::UpdateTrainingJobResponse> EngineImpl::Update(
    const v1::UpdateTrainingJobRequest& request) {
  KILN_RETURN_IF_ERROR(ValidateRequest(request, options_.validation));
  Job* job = FindJob(request.training_job_name());
  if (job == nullptr) return NotFound(request.training_job_name());
  // Every check comes before the first change: a refused request changes nothing.
  const std::string secondary = job->transitions_.back().status;
  if (request.has_remote_debug_config() && secondary != kDownloadingStatus &&
      secondary != kTrainingStatus) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RemoteDebugConfig can only be updated while the training job's secondary status is "
        "Downloading or Training; it is ",
        secondary));
  }
  if (request.has_resource_config()) {
    if (!job->warm_pool_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "KeepAlivePeriodInSeconds can only be updated while the training job's warm pool is "
          "Available; training job '",
          job->name(), "' has no warm pool"));
    }
    // (The last check: it changes nothing when it fails.)
    KILN_RETURN_IF_ERROR(pools().UpdateKeepAlive(
        job->name(), absl::Seconds(request.resource_config().keep_alive_period_in_seconds())));
    job->last_modified_ = Now();
  }
  v1::CreateTrainingJobRequest scratch;
  auto updated = std::make_shared<v1::CreateTrainingJobRequest>(job->ReadRequest(scratch));
  if (request.has_resource_config()) {  // what Describe's ResourceConfig shows from now on
    updated->mutable_resource_config()->set_keep_alive_period_in_seconds(
        request.resource_config().keep_alive_period_in_seconds());
  }
  if (request.has_profiler_config()) {
    EchoFields(request.profiler_config(), *updated->mutable_profiler_config());
  }
  if (request.profiler_rule_configurations_size() > 0) {
    *updated->mutable_profiler_rule_configurations() = request.profiler_rule_configurations();
  }
  if (request.has_remote_debug_config()) {
    EchoFields(request.remote_debug_config(), *updated->mutable_remote_debug_config());
  }
  job->SetRequest(std::move(updated));
  job->last_modified_ = Now();
  Journaled(*job, /*request=*/true);
  v1::UpdateTrainingJobResponse response;
  response.set_training_job_arn(Arn(*job));
  return response;
}

absl::Status EngineImpl::Delete(const v1::DeleteTrainingJobRequest& request) {
  Job* found = FindJob(request.training_job_name());
  if (found == nullptr) return NoSuchJob(request);
  Job& job = *found;
  const char* const status = job.status_;  // one of the status constants
  if (status == kInProgress || status == kStopping) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Training job '", job.name(), "' cannot be deleted while its status is ", status,
        "; stop it and wait for it to end"));
  }
  if (job.warm_pool_) KILN_RETURN_IF_ERROR(pools().OnJobDeleted(job.name()));
  if (journal_ != nullptr) journal_ticket_ = journal_->Erase(job.seq_);
  by_seq_.Take(job.seq_);
  jobs_.Erase(job);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Events after steps, and waiters

bool IsEnd(std::string_view status) {
  return status == kCompleted || status == kFailed || status == kStopped;
}

void EngineImpl::Deliver() {
  events_.Deliver([this](const StatusEvent& event) {
    if (waiters_.empty()) return;
    const bool ended = IsEnd(event.status);
    const bool none_active = active_jobs_.load(std::memory_order_relaxed) == 0;
    if (!ended && !none_active) return;
    for (Waiter* w : waiters_) {
      if (w->state.load(std::memory_order_relaxed) != Waiter::kWaiting) continue;
      if (w->name.empty() ? none_active : ended && w->name == event.job_name) {
        EndWait(*w, Waiter::kEnded);
      }
    }
  });
}

void EngineImpl::EndWait(Waiter& w, Waiter::State state) {
  loop_.Cancel(w.timer);
  w.state.store(state, std::memory_order_release);
  if (w.driving) loop_.Stop();  // the waiting thread's RunUntilIdle returns after this step
  loop_.WakeAwaiters();
}

absl::Status EngineImpl::Await(Waiter& w, absl::Time deadline, const std::string& what) {
  auto waiting = [&w] { return w.state.load(std::memory_order_acquire) == Waiter::kWaiting; };
  bool stopped = false;  // the loop this thread ran returned with the wait not over
  while (waiting() && !stopped) {
    const bool held = loop_.TryHold([&] {
      if (!waiting()) return;
      w.driving = true;
      loop_.RunUntilIdle();
      w.driving = false;
      stopped = waiting();
    });
    if (!held) loop_.AwaitReleaseOr([&] { return !waiting(); });
  }
  // Unregistered on the loop: its deadline timer may not outlive `w`.
  OnLoop([&] {
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &w));
    loop_.Cancel(w.timer);
    return 0;
  });
  switch (w.state.load(std::memory_order_acquire)) {
    case Waiter::kEnded:
      return absl::OkStatus();
    case Waiter::kTimedOut:
      return absl::DeadlineExceededError(absl::StrCat(
          what, " had not ended when the loop's clock reached ", absl::FormatTime(deadline)));
    default:
      return absl::CancelledError(absl::StrCat(
          "the event loop returned (Stop(), or nothing left to run) before ", what, " ended"));
  }
}

absl::StatusOr<v1::DescribeTrainingJobResponse> EngineImpl::WaitForTrainingJob(
    std::string_view name, absl::Time deadline) {
  if (InsideStep()) {
    return absl::FailedPreconditionError(
        "WaitForTrainingJob: called from an observer or inside an engine step, which the wait "
        "would hold up");
  }
  Waiter w;
  w.name.assign(name);
  absl::Status found;
  bool registered = false;
  OnLoop([&] {
    Job* job = FindJob(w.name);
    if (job == nullptr) {
      v1::DescribeTrainingJobRequest request;
      request.set_training_job_name(w.name);
      found = NoSuchJob(request);
    } else if (!job->ended()) {
      Register(w, deadline);
      registered = true;
    }
    return 0;
  });
  KILN_RETURN_IF_ERROR(found);
  if (registered) {
    // (Even if the job has ended meanwhile: Await unregisters `w`.)
    KILN_RETURN_IF_ERROR(
        Await(w, deadline, absl::StrCat("training job '", TextForMessage(w.name), "'")));
  }
  v1::DescribeTrainingJobRequest request;
  request.set_training_job_name(w.name);
  return DescribeTrainingJob(request);
}

absl::Status EngineImpl::WaitForAllTrainingJobs(absl::Time deadline) {
  if (InsideStep()) {
    return absl::FailedPreconditionError(
        "WaitForAllTrainingJobs: called from an observer or inside an engine step, which the "
        "wait would hold up");
  }
  Waiter w;
  bool registered = false;
  OnLoop([&] {
    if (active_jobs_.load(std::memory_order_relaxed) == 0) return 0;
    Register(w, deadline);
    registered = true;
    return 0;
  });
  if (!registered) return absl::OkStatus();
  return Await(w, deadline, "every training job");
}

}  // namespace kiln::engine_impl

namespace kiln {

absl::StatusOr<std::unique_ptr<Engine>> NewEngine(EngineOptions options) {
  if (options.loop == nullptr) return absl::InvalidArgumentError("EngineOptions.loop is required");
  if (options.cluster_provider == nullptr &&
      (options.journal == nullptr || !options.journal->read_only())) {
    return absl::InvalidArgumentError(
        "EngineOptions.cluster_provider is required (unless the journal is read-only)");
  }
  const bool journaled = options.journal != nullptr;
  auto engine = std::make_unique<engine_impl::EngineImpl>(std::move(options));
  if (journaled) KILN_RETURN_IF_ERROR(engine->Recover());
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace kiln
