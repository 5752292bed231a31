// Interruptions (spot notices, lost instances) and moves between spot and
// on-demand capacity: how an attempt ends and the next begins.
#include "core/internal/engine_impl.h"

namespace kiln::engine_impl {

// ---------------------------------------------------------------------------
// Interruptions: spot notices and lost instances end the current attempt.

void EngineImpl::OnInterruptionNotice(const Cluster& cluster, const Instance& instance,
                                      absl::Time deadline) {
  const Step step(*this);
  Job* job = OwnerOf(cluster);
  if (job == nullptr || job->status_ != kInProgress || job->interrupting_ ||
      job->phase_ == Phase::kUploading) {
    return;  // nothing of a job to save (or the upload is already under way)
  }
  Interrupt(*job, instance.host_name, /*preempted=*/true);
}

void EngineImpl::OnInstanceLost(const Cluster& cluster, const Instance& instance) {
  const Step step(*this);
  Job* job = OwnerOf(cluster);
  if (job == nullptr) {
    pools().OnClusterLost(cluster);  // a retained cluster, if any: its pool ends
    return;
  }
  if (job->phase_ == Phase::kEnded) return;
  if (job->interrupting_ || job->status_ == kStopping) {
    // Its container will never report an exit.
    ContainerGone(*job, instance.host_name);
    return;
  }
  if (job->phase_ == Phase::kUploading) return;  // the upload reports its own failure
  Interrupt(*job, instance.host_name, /*preempted=*/false);
  ContainerGone(*job, instance.host_name);
}

void EngineImpl::Interrupt(Job& job, const std::string& host, bool preempted) {
  job.interrupting_ = true;
  job.interrupt_preempted_ = preempted;
  job.extras().interrupted_host = host;
  if (preempted) {
    ++job.spot_interruptions_;
    SetStatus(job, kInProgress, kInterrupted, kMsgInterrupted,
              absl::StrCat("Spot interruption ", job.spot_interruptions_, " (instance ", host,
                           "); preemptions count against MaxWaitTimeInSeconds only"));
  } else {
    ++job.infrastructure_failures_;
  }
  EndAttempt(job);
}

void EngineImpl::EndAttempt(Job& job) {
  job.runtime_deadline_ = 0;
  if (job.phase_ == Phase::kTraining && job.containers_running_ > 0) {
    // The containers get SIGTERM (and save what they can); once they have
    // exited, with their last checkpoint sync, the attempt ends.
    provider_.Signal(*job.cluster_, SIGTERM);
    loop_.Cancel(job.kill_timer_);
    job.kill_timer_ = loop_.ScheduleAfter(options_.stop_grace_period, [this, &job] {
      const Step step(*this);
      job.kill_timer_ = TimerHandle();
      if (job.interrupting_ && job.cluster_) provider_.Signal(*job.cluster_, SIGKILL);
    });
    return;
  }
  // Nothing runs yet: abandon the work in flight.
  ++job.generation_;
  loop_.ScheduleAfter(absl::ZeroDuration(), [this, token = TokenOf(job)] {
    const Step step(*this);
    if (Job* j = Resume(token); j != nullptr && j->interrupting_) EndInterruption(*j);
  });
}

void EngineImpl::ContainerGone(Job& job, const std::string& host) {
  if (!job.ContainerEnded(host)) return;
  if (job.containers_running_ > 0) return;
  if (job.interrupting_) {
    EndInterruption(job);
  } else if (job.status_ == kStopping && job.phase_ == Phase::kTraining) {
    loop_.Cancel(job.kill_timer_);
    StartUpload(job);
  }
}

void EngineImpl::EndInterruption(Job& job) {
  ++job.generation_;
  CancelTimers(job);
  job.interrupting_ = false;
  ReturnCluster(job, /*healthy=*/false, /*job_ended=*/false);
  job.running_.clear();
  job.containers_running_ = 0;
  if (job.stop_cause_ != StopCause::kNone) {
    // Stopped (or MaxWait) while the interruption was handled: end here.
    const bool max_wait = job.stop_cause_ == StopCause::kMaxWait;
    Finish(job, kStopped,
           max_wait                                    ? kMaxWaitTimeExceeded
           : job.stop_cause_ == StopCause::kMaxRuntime ? kMaxRuntimeExceeded
                                                       : kStopped,
           max_wait                                    ? kMsgMaxWait
           : job.stop_cause_ == StopCause::kMaxRuntime ? kMsgMaxRuntime
                                                       : kMsgStopped,
           /*healthy=*/false);
    return;
  }
  if (job.moving_to_spot_) {
    // A move: no handler to ask, and no budget counts it.
    const bool spot = *std::exchange(job.moving_to_spot_, std::nullopt);
    NextAttempt(job, spot, absl::ZeroDuration(), /*set_starting=*/true);
    return;
  }
  const auto& sc = job.request().stopping_condition();
  InterruptionContext context;
  context.job_name = job.name();
  context.host_name = job.extras().interrupted_host;
  context.preempted = job.interrupt_preempted_;
  context.on_spot = job.on_spot_;
  context.attempt = job.attempt_;
  context.spot_interruptions = job.spot_interruptions_;
  context.infrastructure_failures = job.infrastructure_failures_;
  context.max_retry_attempts = job.request().retry_strategy().maximum_retry_attempts();
  context.now = Now();
  if (job.request().enable_managed_spot_training() && sc.has_max_wait_time_in_seconds()) {
    context.max_wait_deadline = job.creation_time_ + absl::Seconds(sc.max_wait_time_in_seconds());
  }
  context.run_time_used = job.held_;
  context.max_runtime = absl::Seconds(sc.has_max_runtime_in_seconds() ? sc.max_runtime_in_seconds()
                                                                      : kDefaultMaxRuntimeSeconds);
  const InterruptionDecision decision = options_.spot_handler->OnInterruption(context);
  const bool restarted = std::exchange(job.lost_to_restart_, false);
  if (decision.action == InterruptionDecision::Action::kGiveUp) {
    Fail(job,
         restarted ? absl::StrCat("InternalServerError: the controller restarted and the "
                                  "instances of attempt ",
                                  job.attempt_, " were lost (", decision.failure_reason, ")")
                   : decision.failure_reason,
         /*healthy=*/false);
    return;
  }
  const bool preempted = job.interrupt_preempted_;
  if (!preempted) {
    // A retry after a lost instance goes back to Starting at once.
    SetStatus(job, kInProgress, kStarting, kMsgRestarting,
              absl::StrCat(
                  restarted ? "The controller restarted and the instances were lost"
                            : absl::StrCat("Instance ", job.extras().interrupted_host, " was lost"),
                  "; infrastructure retry ", job.infrastructure_failures_, " of ",
                  context.max_retry_attempts, " (RetryStrategy)"));
  }
  NextAttempt(job, decision.use_spot, decision.delay, /*set_starting=*/preempted);
}

void EngineImpl::NextAttempt(Job& job, bool spot, absl::Duration delay, bool set_starting) {
  ++job.attempt_;
  job.on_spot_ = spot;
  job.phase_ = Phase::kProvisioning;
  job.algorithm_failed_ = false;
  job.pending_since_.reset();
  job.next_retry_delay_ = options_.capacity_retry_initial;
  if (delay <= absl::ZeroDuration()) {
    if (set_starting) SetStatus(job, kInProgress, kStarting, kMsgLaunching);
    Provision(job);
    return;
  }
  job.retry_timer_ = loop_.ScheduleAfter(delay, [this, token = TokenOf(job), set_starting] {
    const Step step(*this);
    Job* j = Resume(token);
    if (j == nullptr) return;
    if (set_starting) SetStatus(*j, kInProgress, kStarting, kMsgLaunching);
    Provision(*j);
  });
}

// ---------------------------------------------------------------------------
// Moves between spot and on-demand capacity, and the reviews that decide them.

absl::Status EngineImpl::MigrateTrainingJob(std::string_view job_name, bool to_spot) {
  v1::DescribeTrainingJobRequest named;
  named.set_training_job_name(std::string(job_name));
  return Durably([&]() -> absl::Status {
    Job* job = FindJob(named.training_job_name());
    if (job == nullptr) return NoSuchJob(named);
    auto refuse = [&](const std::string& why) {
      return absl::FailedPreconditionError(
          absl::StrCat("MigrateTrainingJob: training job '", job->name(), "' cannot move to ",
                       to_spot ? "Spot" : "on-demand", " capacity: ", why));
    };
    if (job->status_ != kInProgress) {
      return refuse(absl::StrCat("its status is ", job->status_));
    }
    if (!job->request().enable_managed_spot_training()) {
      return refuse("it does not have EnableManagedSpotTraining, so it runs on on-demand only");
    }
    if (job->interrupting_) {
      return refuse(job->moving_to_spot_ ? "it is moving already" : "it is being interrupted");
    }
    if (job->phase_ == Phase::kUploading) return refuse("it has finished training (Uploading)");
    Move(*job, to_spot);
    return absl::OkStatus();
  });
}

void EngineImpl::Move(Job& job, bool to_spot) {
  if (job.on_spot_ == to_spot) return;
  SetStatus(job, kInProgress, kRestarting, to_spot ? kMsgMovingToSpot : kMsgMovingToOnDemand);
  if (job.phase_ == Phase::kProvisioning) {
    // Nothing held: what is in flight is abandoned (OnProvisioned releases
    // what it brings), and the other capacity is asked for now.
    ++job.generation_;
    loop_.Cancel(job.retry_timer_);
    --job.attempt_;  // no attempt ran
    NextAttempt(job, to_spot, absl::ZeroDuration(), /*set_starting=*/true);
    return;
  }
  job.interrupting_ = true;
  job.interrupt_preempted_ = false;
  job.moving_to_spot_ = to_spot;
  EndAttempt(job);
}

bool EngineImpl::ReviewCapacity(const Job& job, CapacityReview::When when) {
  const auto& sc = job.request().stopping_condition();
  CapacityReview review;
  review.job_name = job.name();
  review.when = when;
  review.on_spot = job.on_spot_;
  review.attempt = job.attempt_;
  review.now = Now();
  review.creation_time = job.creation_time_;
  if (sc.has_max_wait_time_in_seconds()) {
    review.max_wait_deadline = job.creation_time_ + absl::Seconds(sc.max_wait_time_in_seconds());
  }
  review.run_time_used = job.held_;
  if (job.held_since_) {
    review.run_time_used = internal::Plus(review.run_time_used, Now() - *job.held_since_);
  }
  review.max_runtime = absl::Seconds(sc.has_max_runtime_in_seconds() ? sc.max_runtime_in_seconds()
                                                                     : kDefaultMaxRuntimeSeconds);
  return options_.spot_handler->Review(review);
}

void EngineImpl::ProvisionAgain(Job& job) {
  if (job.request().enable_managed_spot_training()) {
    const bool spot = ReviewCapacity(job, CapacityReview::When::kBeforeProvisioning);
    if (spot != job.on_spot_) {
      Move(job, spot);
      return;
    }
  }
  Provision(job);
}

void EngineImpl::ScheduleReview(Job& job) {
  job.review_timer_ = loop_.ScheduleAfter(review_period_, [this, seq = job.seq_] {
    const Step step(*this);
    Job* j = by_seq_.Find(seq);
    if (j == nullptr) return;
    j->review_timer_ = TimerHandle();
    if (j->status_ != kInProgress) return;  // Stopping: no more reviews
    ScheduleReview(*j);
    if (j->interrupting_ || j->phase_ == Phase::kUploading) return;
    const bool spot = ReviewCapacity(
        *j, j->cluster_ ? CapacityReview::When::kRunning : CapacityReview::When::kWaiting);
    if (spot != j->on_spot_) {
      Move(*j, spot);
    } else if (j->pending_since_ && loop_.Cancel(j->retry_timer_)) {
      // Waiting out a capacity back-off for the capacity the review keeps:
      // ask now (the review may come as capacity appears); the back-off
      // goes on from here if it is still short.
      Provision(*j);
    }
  });
}

}  // namespace kiln::engine_impl
