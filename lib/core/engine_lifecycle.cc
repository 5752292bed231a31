// A job's path through the engine: provisioning, image, channels,
// training, upload, and its end.
#include "core/internal/engine_impl.h"

namespace kiln::engine_impl {

void Job::OnLogLine(const Instance& instance, std::string_view line) {
  engine_.HandleLogLine(*this, instance, line);
}
void Job::OnExit(const Instance& instance, const ContainerExit& exit) {
  engine_.HandleExit(*this, instance, exit);
}
// ---------------------------------------------------------------------------
// Lifecycle

void EngineImpl::SetStatus(Job& job, std::string_view status, std::string_view secondary,
                           std::string_view message, std::string detail) {
  const absl::Time now = Now();
  const int64_t now_ns = internal::UnixNanos(now);
  if (!job.transitions_.empty()) job.transitions_.back().end_ns = now_ns;
  job.status_ = status.data();
  job.transitions_.push_back(Transition{secondary.data(), message.data(), now_ns});
  job.last_modified_ = now;
  Journaled(job);
  if (!detail.empty()) {
    job.extras().details.emplace_back(job.transitions_.size() - 1, std::move(detail));
  }
  if (!listening()) return;
  std::string scratch;  // the event's message: TransitionMessage() of the new transition
  events_.Status(job.name(), status.data(), secondary.data(),
                 job.TransitionMessage(job.transitions_.size() - 1, scratch), now);
}

void EngineImpl::SetMessage(Job& job, std::string_view message) {
  Transition& t = job.transitions_.back();
  t.message = message.data();
  job.last_modified_ = Now();
  Journaled(job);
  if (!listening()) return;
  std::string scratch;
  events_.Status(job.name(), job.status_, t.status,
                 job.TransitionMessage(job.transitions_.size() - 1, scratch), Now());
}

void EngineImpl::Provision(Job& job) {
  job.phase_ = Phase::kProvisioning;
  if (job.warm_pool_) {
    if (std::optional<Cluster> warm = pools().Acquire(job.name())) {
      // A retained cluster: no provisioning; its image cache is warm.
      AttachCluster(job, std::move(*warm));
      OnClusterReady(job);
      return;
    }
  }
  // The last call's spec, refilled: its vector and strings keep their room.
  // (A provider reads the spec during the call only.)
  ClusterSpec spec = std::exchange(spec_scratch_, ClusterSpec());
  spec.job_name.assign(job.name());
  const auto& rc = job.request().resource_config();
  auto set_group = [&spec](size_t i, std::string_view name, std::string_view type, int32_t count) {
    if (spec.groups.size() <= i) spec.groups.resize(i + 1);
    InstanceGroupSpec& g = spec.groups[i];
    g.name.assign(name);
    g.instance_type.assign(type);
    g.count = count;
  };
  size_t groups = 0;
  if (rc.instance_groups_size() > 0) {
    for (const auto& g : rc.instance_groups()) {
      set_group(groups++, g.instance_group_name(), g.instance_type(), g.instance_count());
    }
  } else {
    set_group(groups++, kHomogeneousGroupName, rc.instance_type(), rc.instance_count());
  }
  spec.groups.resize(groups);
  spec.spot = job.on_spot_;
  spec.volume_size_in_gb = rc.volume_size_in_gb();
  spec.job_id = job.seq_;
  provider_.Provision(spec, [this, token = TokenOf(job)](absl::StatusOr<Cluster> cluster) {
    const Step step(*this);
    OnProvisioned(token, std::move(cluster));
  });
  spec_scratch_ = std::move(spec);
}

void EngineImpl::OnProvisioned(const JobToken& token, absl::StatusOr<Cluster>&& cluster) {
  Job* resumed = Resume(token);
  if (resumed == nullptr || resumed->phase_ != Phase::kProvisioning) {
    // The job moved on (stopped) while the request was in flight.
    if (cluster.ok()) provider_.Release(*cluster);
    return;
  }
  Job& job = *resumed;
  if (!cluster.ok()) {
    if (!absl::IsResourceExhausted(cluster.status())) {
      RetryOrFail(job, cluster.status());
      return;
    }
    const absl::Time now = Now();
    if (!job.pending_since_) {
      job.pending_since_ = now;
      // Spot capacity shortage stays within Starting, as the service shows it.
      if (job.on_spot_) {
        SetMessage(job, kMsgSpotCapacity);
      } else {
        SetStatus(job, kInProgress, kPending, kMsgInsufficientCapacity);
      }
    }
    const auto& sc = job.request().stopping_condition();
    if (sc.has_max_pending_time_in_seconds() &&
        now - *job.pending_since_ >= absl::Seconds(sc.max_pending_time_in_seconds())) {
      Fail(job, absl::StrCat("CapacityError: Unable to provision requested ML compute capacity "
                             "within MaxPendingTimeInSeconds (",
                             sc.max_pending_time_in_seconds(), " s)"));
      return;
    }
    absl::Time retry_at = now + job.next_retry_delay_;
    if (sc.has_max_pending_time_in_seconds()) {
      // Ask one last time exactly when the pending budget runs out.
      retry_at =
          std::min(retry_at, *job.pending_since_ + absl::Seconds(sc.max_pending_time_in_seconds()));
    }
    job.next_retry_delay_ = std::min(job.next_retry_delay_ * 2, options_.capacity_retry_max);
    job.retry_timer_ = loop_.ScheduleAt(retry_at, [this, token = TokenOf(job)] {
      const Step step(*this);
      if (Job* j = Resume(token)) ProvisionAgain(*j);
    });
    return;
  }
  AttachCluster(job, std::move(*cluster));
  if (job.warm_pool_) pools().OnClusterLaunched(job.name(), *job.cluster_);
  OnClusterReady(job);
}

void EngineImpl::RetryOrFail(Job& job, const absl::Status& error) {
  // The service retries only on InternalServerError, and only as many times as
  // RetryStrategy.MaximumRetryAttempts allows; lost instances count too
  // (EndInterruption).
  const int32_t max_retries = job.request().retry_strategy().maximum_retry_attempts();
  if (job.infrastructure_failures_ >= max_retries) {
    Fail(job,
         absl::StrCat("InternalServerError: could not provision instances: ", error.message()));
    return;
  }
  ++job.infrastructure_failures_;
  ++job.attempt_;
  job.pending_since_.reset();
  job.next_retry_delay_ = options_.capacity_retry_initial;
  SetStatus(job, kInProgress, kStarting, kMsgLaunching,
            absl::StrCat("InternalServerError: could not provision instances: ", error.message(),
                         "; infrastructure retry ", job.infrastructure_failures_, " of ",
                         max_retries, " (RetryStrategy)"));
  job.retry_timer_ =
      loop_.ScheduleAfter(options_.capacity_retry_initial, [this, token = TokenOf(job)] {
        const Step step(*this);
        if (Job* j = Resume(token)) Provision(*j);
      });
}

void EngineImpl::OnClusterReady(Job& job) {
  if (!job.training_start_) job.training_start_ = Now();
  job.pending_since_.reset();
  if (job.transitions_.back().status != kStarting) {
    SetStatus(job, kInProgress, kStarting, kMsgPreparing);
  } else {
    SetMessage(job, kMsgPreparing);
  }
  // MaxRuntimeInSeconds counts instance time over all attempts.
  const auto& sc = job.request().stopping_condition();
  const int64_t max_runtime =
      sc.has_max_runtime_in_seconds() ? sc.max_runtime_in_seconds() : kDefaultMaxRuntimeSeconds;
  job.runtime_deadline_ = runtime_deadlines_.Add(
      internal::Plus(Now(), internal::Minus(absl::Seconds(max_runtime), job.held_)), job.seq_);
  job.phase_ = Phase::kPreparing;
  provider_.PrepareImage(*job.cluster_, job.request().algorithm_specification().training_image(),
                         [this, token = TokenOf(job)](absl::Status s) {
                           const Step step(*this);
                           if (Job* j = Resume(token)) OnImageReady(*j, std::move(s));
                         });
}

void EngineImpl::OnImageReady(Job& job, absl::Status status) {
  if (job.phase_ != Phase::kPreparing) return;
  if (!status.ok()) {
    Fail(job,
         absl::StrCat("ClientError: could not prepare training image '",
                      job.request().algorithm_specification().training_image(),
                      "': ", status.message()),
         /*healthy=*/true);
    return;
  }
  StartDownloads(job);
}

void EngineImpl::StartDownloads(Job& job) {
  job.phase_ = Phase::kDownloading;
  SetStatus(job, kInProgress, kDownloadingStatus, kMsgDownloading);
  const auto& channels = job.request().input_data_config();
  if (channels.empty()) {
    StartTraining(job);
    return;
  }
  job.channels_left_ = channels.size();
  const ArnText arn = ContextArn(job);
  JobContext context{job.name(), arn.view(), job.request(), *job.cluster_, job.attempt_, job.seq_};
  for (const v1::Channel& channel : channels) {
    // The last delivery's vector, refilled (a channel reads the delivery
    // during the call only).
    std::vector<const Instance*> receivers = std::exchange(receivers_scratch_, {});
    receivers.clear();
    for (const Instance& instance : job.cluster_->instances) {
      if (ChannelReachesGroup(channel, instance.group_name)) receivers.push_back(&instance);
    }
    ChannelDelivery delivery{context, channel, EffectiveInputMode(job.request(), channel),
                             std::move(receivers)};
    options_.data_channel->Deliver(delivery, [this, token = TokenOf(job)](absl::Status s) {
      const Step step(*this);
      if (Job* j = Resume(token)) OnChannelDelivered(*j, std::move(s));
    });
    receivers_scratch_ = std::move(delivery.instances);
  }
}

void EngineImpl::OnChannelDelivered(Job& job, absl::Status status) {
  if (job.phase_ != Phase::kDownloading) return;
  if (!status.ok()) {
    Fail(job, absl::StrCat("ClientError: ", status.message()), /*healthy=*/true);
    return;
  }
  if (--job.channels_left_ == 0) StartTraining(job);
}

void EngineImpl::StartTraining(Job& job) {
  SetStatus(job, kInProgress, kTrainingStatus, kMsgTraining);
  job.phase_ = Phase::kTraining;
  job.containers_running_ = static_cast<int>(job.cluster_->instances.size());
  job.running_.assign(job.cluster_->instances.size(), true);
  const ArnText arn = ContextArn(job);
  JobContext context{job.name(), arn.view(), job.request(), *job.cluster_, job.attempt_, job.seq_};
  provider_.StartContainers(context, job, [this, token = TokenOf(job)](absl::Status s) {
    const Step step(*this);
    if (Job* j = Resume(token)) OnContainersStarted(*j, std::move(s));
  });
}

void EngineImpl::OnContainersStarted(Job& job, absl::Status status) {
  if (job.phase_ != Phase::kTraining) return;
  if (!status.ok()) {
    Fail(job,
         absl::StrCat("ClientError: could not start the training container: ", status.message()),
         /*healthy=*/true);
  }
}

void EngineImpl::HandleLogLine(Job& job, const Instance& instance, std::string_view line) {
  const Step step(*this);
  const absl::Time now = Now();
  if (events_.has_observers()) events_.LogLine(job.name(), instance.host_name, line, now);
  if (job.extras_ == nullptr || job.ended()) return;  // (no metrics, or none from now on)
  std::string group;
  for (MetricState& m : job.extras_->metrics) {
    double value = 0;
    if (m.regex->Search(line, &group) && absl::SimpleAtod(group, &value)) {
      m.value = value;
      m.time = now;
      if (events_.has_observers()) events_.Metric(job.name(), m.name, value, now);
    }
  }
}

void EngineImpl::HandleExit(Job& job, const Instance& instance, const ContainerExit& exit) {
  // A container's exit comes minutes after the job was last touched, and ending the run reads
  // most of the job: all its lines at once (prefetch.h).
  internal::PrefetchObject(&job, sizeof(Job));
  const Step step(*this);
  if (job.phase_ != Phase::kTraining) return;
  if (job.interrupting_) {
    // Stopping for an interruption: exit codes say nothing about the algorithm.
    ContainerGone(job, instance.host_name);
    return;
  }
  if (!job.ContainerEnded(instance.host_name)) return;
  if (exit.exit_code != 0 && job.stop_cause_ == StopCause::kNone && !job.algorithm_failed_) {
    // One instance failing fails the job; the others are stopped with the
    // cluster.
    job.algorithm_failed_ = true;
    std::string text =
        exit.failure_text.empty() ? "See job logs for more information" : exit.failure_text;
    if (!exit.failure_error.empty()) {
      absl::StrAppend(&text, " (the failure file could not be read: ", exit.failure_error, ")");
    }
    Fail(job, absl::StrCat("AlgorithmError: ", text), /*healthy=*/true);
    return;
  }
  if (job.containers_running_ > 0) return;
  loop_.Cancel(job.kill_timer_);
  StartUpload(job);
}

void EngineImpl::StartUpload(Job& job) {
  job.phase_ = Phase::kUploading;
  if (job.stop_cause_ == StopCause::kNone) {
    // The algorithm ended by itself: MaxRuntimeInSeconds and MaxWaitTimeInSeconds bound the
    // training, not the upload after it (the contract caps the whole job at 30 days, upload
    // included, because a stop's upload runs past those limits).
    job.runtime_deadline_ = 0;
    job.max_wait_deadline_ = 0;
  }
  EndChannels(job);
  if (job.status_ == kInProgress) SetStatus(job, kInProgress, kUploadingStatus, kMsgUploading);
  const ArnText arn = ContextArn(job);
  JobContext context{job.name(), arn.view(), job.request(), *job.cluster_, job.attempt_, job.seq_};
  provider_.UploadArtifacts(context,
                            [this, token = TokenOf(job)](absl::StatusOr<ArtifactsResult> r) {
                              const Step step(*this);
                              if (Job* j = Resume(token)) OnUploaded(*j, std::move(r));
                            });
}

void EngineImpl::OnUploaded(Job& job, absl::StatusOr<ArtifactsResult> result) {
  if (job.phase_ != Phase::kUploading) return;
  if (!result.ok()) {
    Fail(job,
         absl::StrCat("ClientError: could not upload the model artifacts: ",
                      result.status().message()),
         /*healthy=*/true);
    return;
  }
  switch (job.stop_cause_) {
    case StopCause::kNone:
      Finish(job, kCompleted, kCompleted, kMsgCompleted);
      break;
    case StopCause::kUser:
      Finish(job, kStopped, kStopped, kMsgStopped);
      break;
    case StopCause::kMaxRuntime:
      Finish(job, kStopped, kMaxRuntimeExceeded, kMsgMaxRuntime);
      break;
    case StopCause::kMaxWait:
      Finish(job, kStopped, kMaxWaitTimeExceeded, kMsgMaxWait);
      break;
  }
}

void EngineImpl::SignalStop(Job& job) {
  provider_.Signal(*job.cluster_, SIGTERM);
  job.kill_timer_ = loop_.ScheduleAfter(options_.stop_grace_period, [this, &job] {
    const Step step(*this);
    job.kill_timer_ = TimerHandle();
    if (job.phase_ == Phase::kTraining) provider_.Signal(*job.cluster_, SIGKILL);
  });
}

void EngineImpl::Stop(Job& job, StopCause cause) {
  job.stop_cause_ = cause;
  SetStatus(job, kStopping, kStopping, kMsgStopping);
  const char* secondary = cause == StopCause::kMaxRuntime ? kMaxRuntimeExceeded
                          : cause == StopCause::kMaxWait  ? kMaxWaitTimeExceeded
                                                          : kStopped;
  const char* message = cause == StopCause::kMaxRuntime ? kMsgMaxRuntime
                        : cause == StopCause::kMaxWait  ? kMsgMaxWait
                                                        : kMsgStopped;
  if (job.interrupting_) {
    // The containers are already stopping for an interruption; when they are
    // gone the job ends instead of retrying (EndInterruption).
    return;
  }
  switch (job.phase_) {
    case Phase::kTraining:
      // When the last container has exited, its artifacts are uploaded.
      SignalStop(job);
      return;
    case Phase::kUploading:
      return;  // the upload in flight ends the job, as Stopped
    case Phase::kProvisioning:
    case Phase::kPreparing:
    case Phase::kDownloading: {
      // Nothing ran: abandon the work in flight and end without artifacts
      // (Finish gives the cluster back, or to a warm pool).
      ++job.generation_;
      CancelTimers(job);
      job.phase_ = Phase::kEnded;
      loop_.ScheduleAfter(absl::ZeroDuration(), [this, &job, secondary, message] {
        const Step step(*this);
        Finish(job, kStopped, secondary, message);
      });
      return;
    }
    case Phase::kEnded:
      return;
  }
}

void EngineImpl::Fail(Job& job, std::string_view reason, bool healthy) {
  // FailureReason holds 1024 characters; a container's text may have any bytes.
  job.extras().failure_reason = internal::Utf8Prefix(reason, kMaxFailureReason);
  Finish(job, kFailed, kFailed, kMsgFailed, healthy);
}

void EngineImpl::Finish(Job& job, std::string_view status, std::string_view secondary,
                        std::string_view message, bool healthy) {
  ++job.generation_;
  CancelTimers(job);
  loop_.Cancel(job.review_timer_);
  job.max_wait_deadline_ = 0;
  if (job.training_start_) job.training_end_ = Now();
  const bool containers_running = job.phase_ == Phase::kTraining && job.containers_running_ > 0;
  job.phase_ = Phase::kEnded;
  job.interrupting_ = false;
  if (containers_running) provider_.Signal(*job.cluster_, SIGKILL);
  ReturnCluster(job, healthy);
  std::string detail;
  if (job.request().enable_managed_spot_training() && job.training_end_) {
    const int32_t training = BilledSeconds(*job.training_end_ - *job.training_start_);
    const int32_t billable = BilledSeconds(job.held_);
    detail = absl::StrFormat("Managed spot training savings: %.1f%%",
                             (1.0 - static_cast<double>(billable) / training) * 100);
  }
  if (job.spot_interruptions_ + job.infrastructure_failures_ > 0) {
    absl::StrAppend(&detail, detail.empty() ? "" : ". ", job.spot_interruptions_,
                    " spot interruption(s), ", job.infrastructure_failures_,
                    " lost instance(s) over ", job.attempt_, " attempt(s)");
  }
  SetStatus(job, status, secondary, message, std::move(detail));
  job.transitions_.back().end_ns = job.transitions_.back().start_ns;
  if (job.extras_ != nullptr) {
    for (MetricState& m : job.extras_->metrics) m.regex.reset();
  }
  job.Keep();
  active_jobs_.fetch_sub(1, std::memory_order_relaxed);
}

void EngineImpl::ReturnCluster(Job& job, bool healthy, bool job_ended) {
  EndChannels(job);
  if (job.held_since_) {
    job.held_ = internal::Plus(job.held_, internal::Minus(Now(), *job.held_since_));
    job.held_since_.reset();
  }
  if (job.cluster_) cluster_owners_.erase(job.cluster_->id);
  if (billing_mark_armed_ && cluster_owners_.empty()) {
    loop_.Cancel(billing_mark_);  // no instances held: nothing to bill
    billing_mark_armed_ = false;
  }
  Journaled(job);
  // A kept cluster is the manager's now (it recycles it with the provider).
  const bool kept =
      job_ended && job.warm_pool_ && pools().OnJobEnded(job.name(), job.cluster_, healthy);
  if (!kept && job.cluster_) provider_.Release(*job.cluster_);
  job.cluster_.reset();
}

void EngineImpl::CancelTimers(Job& job) {
  loop_.Cancel(job.retry_timer_);
  job.runtime_deadline_ = 0;
  loop_.Cancel(job.kill_timer_);
}

}  // namespace kiln::engine_impl
