// The engine's implementation: a job's record and state (Job) and the
// engine (EngineImpl), shared by the files that implement it:
//   engine.cc           the API operations, observers' events and waiters;
//   engine_lifecycle.cc a job's path from provisioning to its end;
//   engine_attempts.cc  interruptions, and moves between spot and on-demand.
// Internal to kiln::core: not a public header.
#ifndef KILN_CORE_INTERNAL_ENGINE_IMPL_H_
#define KILN_CORE_INTERNAL_ENGINE_IMPL_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/prefetch.h"
#include "base/seq_window.h"
#include "base/time_math.h"
#include "core/internal/deadline_queue.h"
#include "core/internal/keyed_set.h"
#include "core/internal/observer_queue.h"
#include "core/internal/regex.h"
#include "core/internal/shapes.h"
#include "core/internal/utf8.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/timestamp.pb.h"
#include "kiln/engine.h"
#include "kiln/plugin/json_value.h"
#include "kiln/plugin/status_macros.h"

namespace kiln::engine_impl {

// Engine ids, which tell a PreparedTrainingJob's engine from others: unique in
// the process (an address could be reused by a later engine), never 0.
inline std::atomic<uint64_t> next_engine_id{1};

// Statuses, as the service spells them.
inline constexpr char kInProgress[] = "InProgress";
inline constexpr char kCompleted[] = "Completed";
inline constexpr char kFailed[] = "Failed";
inline constexpr char kStopping[] = "Stopping";
inline constexpr char kStopped[] = "Stopped";

inline constexpr char kStarting[] = "Starting";
inline constexpr char kPending[] = "Pending";
inline constexpr char kDownloadingStatus[] = "Downloading";
inline constexpr char kTrainingStatus[] = "Training";
inline constexpr char kUploadingStatus[] = "Uploading";
inline constexpr char kMaxRuntimeExceeded[] = "MaxRuntimeExceeded";
inline constexpr char kInterrupted[] = "Interrupted";
inline constexpr char kMaxWaitTimeExceeded[] = "MaxWaitTimeExceeded";
inline constexpr char kRestarting[] = "Restarting";

// Status messages, worded as the service words them.
inline constexpr char kMsgLaunching[] = "Launching requested ML instances";
inline constexpr char kMsgPreparing[] = "Preparing the instances for training";
inline constexpr char kMsgInsufficientCapacity[] =
    "Insufficient capacity error from EC2 while launching instances, retrying!";
inline constexpr char kMsgDownloading[] = "Downloading input data";
inline constexpr char kMsgTraining[] = "Training image download completed. Training in progress.";
inline constexpr char kMsgUploading[] = "Uploading generated training model";
inline constexpr char kMsgCompleted[] = "Training job completed";
inline constexpr char kMsgStopping[] = "Stopping the training job";
inline constexpr char kMsgStopped[] = "Training job stopped";
inline constexpr char kMsgMaxRuntime[] =
    "Training job stopped because it reached MaxRuntimeInSeconds";
inline constexpr char kMsgFailed[] = "Training job failed";
inline constexpr char kMsgSpotCapacity[] = "Waiting for Spot capacity";
inline constexpr char kMsgInterrupted[] = "Spot interruption: training was interrupted";
inline constexpr char kMsgRestarting[] = "Restarting training after a lost instance";
inline constexpr char kMsgMaxWait[] =
    "Training job stopped because it reached MaxWaitTimeInSeconds";
inline constexpr char kMsgMovingToSpot[] = "Moving the training job to Spot capacity";
inline constexpr char kMsgMovingToOnDemand[] = "Moving the training job to on-demand capacity";

inline constexpr int64_t kDefaultMaxRuntimeSeconds = 86400;
inline constexpr int32_t kDefaultMaxResults = 10;
inline constexpr size_t kMaxFailureReason = 1024;

// A time as a response shows it: in whole milliseconds, cut toward the past,
// as the service keeps its timestamps (1795253152.163). What the engine
// compares (List's filters and cursors) uses the exact time instead.
inline google::protobuf::Timestamp ToProto(absl::Time t) {
  google::protobuf::Timestamp ts;
  const int64_t ms = absl::ToUnixMillis(t);  // rounds toward the past
  int64_t seconds = ms / 1000;
  int64_t millis = ms % 1000;
  if (millis < 0) {
    millis += 1000;
    --seconds;
  }
  ts.set_seconds(seconds);
  ts.set_nanos(static_cast<int32_t>(millis * 1000000));
  return ts;
}

inline absl::Time FromProto(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// Whole seconds as the service reports durations: at least 1, rounded up.
inline int32_t BilledSeconds(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)));
  return static_cast<int32_t>(std::clamp<int64_t>(s, 1, INT32_MAX));
}

inline std::string JoinUri(const std::string& base, const std::string& tail) {
  std::string out(absl::StripSuffix(base, "/"));
  absl::StrAppend(&out, "/", tail);
  return out;
}

// Copies every field of `from` whose json_name also names a field of the same
// type in `to`: the Describe response echoes the request this way, member for
// member, with no list to keep in step with the model.
inline void EchoFields(const google::protobuf::Message& from, google::protobuf::Message& to) {
  const auto* to_desc = to.GetDescriptor();
  const auto* from_refl = from.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> present;
  from_refl->ListFields(from, &present);
  for (const auto* f : present) {
    const auto* t = to_desc->FindFieldByName(f->name());
    if (t == nullptr || t->json_name() != f->json_name() || t->type() != f->type() ||
        t->is_repeated() != f->is_repeated() || t->is_map() != f->is_map() ||
        (!f->is_map() && f->message_type() != t->message_type())) {
      continue;
    }
    const auto* to_refl = to.GetReflection();
    if (f->is_map()) {
      // Each message has its own map-entry type: copy entries member by member.
      to_refl->ClearField(&to, t);
      for (int i = 0; i < from_refl->FieldSize(from, f); ++i) {
        EchoFields(from_refl->GetRepeatedMessage(from, f, i), *to_refl->AddMessage(&to, t));
      }
      continue;
    }
    if (f->is_repeated()) {
      to_refl->ClearField(&to, t);
      for (int i = 0; i < from_refl->FieldSize(from, f); ++i) {
        if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
          to_refl->AddMessage(&to, t)->CopyFrom(from_refl->GetRepeatedMessage(from, f, i));
        } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
          to_refl->AddString(&to, t, from_refl->GetRepeatedString(from, f, i));
        }
      }
      continue;
    }
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE:
        to_refl->MutableMessage(&to, t)->CopyFrom(from_refl->GetMessage(from, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
        to_refl->SetString(&to, t, from_refl->GetString(from, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
        to_refl->SetBool(&to, t, from_refl->GetBool(from, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
        to_refl->SetInt32(&to, t, from_refl->GetInt32(from, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
        to_refl->SetInt64(&to, t, from_refl->GetInt64(from, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
        to_refl->SetDouble(&to, t, from_refl->GetDouble(from, f));
        break;
      default:
        break;
    }
  }
}

inline absl::Status NotFound(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("Requested resource not found: training job '",
                                          TextForMessage(name), "' does not exist."));
}

class EngineImpl;

// A ClusterProvider with no instances: every Provision fails. What an engine
// over a read-only journal uses when given no provider (engine_journal.cc).
std::unique_ptr<ClusterProvider> NewNoClusterProvider();

// Where a job is in its path. Ended jobs keep only their record.
enum class Phase {
  kProvisioning,  // Provision called, or waiting to call it again (Pending)
  kPreparing,     // PrepareImage called
  kDownloading,   // channels being delivered
  kTraining,      // containers running
  kUploading,     // UploadArtifacts called
  kEnded,
};

enum class StopCause { kNone, kUser, kMaxRuntime, kMaxWait };

// One SecondaryStatusTransition. Statuses and messages are the constants
// above, so a transition holds pointers, not copies; the rare text appended to
// a message (Job::Extras::details) is kept apart, which keeps a transition at 32
// bytes.
struct Transition {
  const char* status;
  const char* message;
  int64_t start_ns;          // Unix nanoseconds
  int64_t end_ns = kOpenNs;  // kOpenNs: not ended

  static constexpr int64_t kOpenNs = INT64_MAX;
  absl::Time start() const { return absl::FromUnixNanos(start_ns); }
  absl::Time end() const { return absl::FromUnixNanos(end_ns); }
  bool ended() const { return end_ns != kOpenNs; }
};

// A time that may be unset, in the size of an absl::Time (a std::optional's
// flag would pad it by 8 bytes in every job): unset is absl::InfinitePast(),
// which no event of the engine happens at. The subset of std::optional's
// interface the engine uses.
class MaybeTime {
 public:
  MaybeTime& operator=(absl::Time t) {
    t_ = t;
    return *this;
  }
  explicit operator bool() const { return t_ != absl::InfinitePast(); }
  absl::Time operator*() const { return t_; }
  void reset() { t_ = absl::InfinitePast(); }

 private:
  absl::Time t_ = absl::InfinitePast();
};

struct MetricState {
  std::string name;
  std::unique_ptr<internal::Regex> regex;  // released when the job ends (Finish)
  std::optional<double> value;
  absl::Time time;
};

// A copy of a CreateTrainingJob request for a job to keep, without its
// TrainingJobName, on a protobuf arena that the returned pointer owns: one
// allocation holds a usual request whole, and copying costs bump allocations
// rather than one heap allocation per field.
inline std::shared_ptr<const v1::CreateTrainingJobRequest> CopyForJob(
    const v1::CreateTrainingJobRequest& request) {
  struct OnArena {
    OnArena() : arena(block, sizeof block) {}
    google::protobuf::Arena arena;
    alignas(16) char block[2048];
  };
  auto owner = std::make_shared<OnArena>();
  auto* copy = google::protobuf::Arena::CreateMessage<v1::CreateTrainingJobRequest>(&owner->arena);
  copy->CopyFrom(request);
  copy->clear_training_job_name();
  return std::shared_ptr<const v1::CreateTrainingJobRequest>(std::move(owner), copy);
}

// A job: its record (what Describe reports), plus, while it runs, the state
// of the work in flight.
//
// A job's request is immutable and shared: the PreparedTrainingJob's it was
// made from, or the engine's copy of a CreateTrainingJob request (CopyForJob).
// Either way it has no TrainingJobName (name_ is the name). An
// UpdateTrainingJob gives the job a new request; the one it replaced stays
// whole for whoever else holds it.
//
// Once the job has ended, a request that no other job or PreparedTrainingJob
// holds is kept serialized instead (Job::Keep): a finished job stays until
// deleted, and a parsed request takes several times the bytes of its
// serialized form.
class Job final : public ContainerEvents {
 public:
  // A job `name` whose request is `request` (without a TrainingJobName).
  Job(EngineImpl& engine, uint64_t seq, std::string name,
      std::shared_ptr<const v1::CreateTrainingJobRequest> request, absl::Time now)
      : engine_(engine),
        seq_(seq),
        name_(std::move(name)),
        request_(std::move(request)),
        creation_time_(now),
        last_modified_(now) {}
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  void OnLogLine(const Instance& instance, std::string_view line) override;
  void OnExit(const Instance& instance, const ContainerExit& exit) override;

  const std::string& name() const { return name_; }
  // Whether the job has ended (Completed, Failed or Stopped).
  bool ended() const { return status_ == kCompleted || status_ == kFailed || status_ == kStopped; }
  // The request, without its TrainingJobName, while the job runs.
  // REQUIRES: !ended() (or Keep() not called since it ended).
  const v1::CreateTrainingJobRequest& request() const { return *request_; }
  // The request at any time: request(), or, once it is kept serialized, a
  // copy parsed into `scratch`.
  const v1::CreateTrainingJobRequest& ReadRequest(v1::CreateTrainingJobRequest& scratch) const {
    if (request_ != nullptr) return *request_;
    scratch.ParseFromString(request_bytes_);
    return scratch;
  }
  // Replaces the request (UpdateTrainingJob); an ended job keeps it as Keep
  // says.
  void SetRequest(std::shared_ptr<const v1::CreateTrainingJobRequest> request) {
    request_ = std::move(request);
    request_bytes_.clear();
    if (ended()) Keep();
  }
  // Called when the job has ended: keeps the request serialized when no
  // other holder shares it (use_count() 1 is exact: only this job, on the
  // loop thread, can copy the reference), and drops what only a running job
  // needs.
  void Keep() {
    if (request_ != nullptr && request_.use_count() == 1) {
      request_->SerializeToString(&request_bytes_);
      request_.reset();
    }
  }

  // The StatusMessage of transition `i`: its message, and its detail if any.
  std::string TransitionMessage(size_t i) const {
    std::string text;
    return std::string(TransitionMessage(i, text));
  }
  // The same without a copy when there is no detail; `scratch` holds the
  // text otherwise.
  std::string_view TransitionMessage(size_t i, std::string& scratch) const {
    const char* message = transitions_[i].message;
    if (extras_ == nullptr) return message;
    for (const auto& [index, detail] : extras_->details) {
      if (index == i) return scratch = absl::StrCat(message, ". ", detail);
    }
    return message;
  }

  // Index of the instance `host` in the current cluster, or -1.
  int InstanceIndex(std::string_view host) const {
    if (!cluster_) return -1;
    for (size_t i = 0; i < cluster_->instances.size(); ++i) {
      if (cluster_->instances[i].host_name == host) return static_cast<int>(i);
    }
    return -1;
  }
  // Marks the container of `host` gone; returns false if it was not running.
  bool ContainerEnded(std::string_view host) {
    const int i = InstanceIndex(host);
    if (i < 0 || static_cast<size_t>(i) >= running_.size() || !running_[i]) return false;
    running_[i] = false;
    --containers_running_;
    return true;
  }

  EngineImpl& engine_;
  const uint64_t seq_;  // creation order; unique
  const std::string name_;
  // The request, without its TrainingJobName; null once kept serialized.
  std::shared_ptr<const v1::CreateTrainingJobRequest> request_;
  std::string request_bytes_;  // the request, once kept serialized (Keep)
  const absl::Time creation_time_;
  absl::Time last_modified_;

  const char* status_ = kInProgress;
  // Starting, Downloading, Training, Uploading and the end, with room for a
  // Pending, in the job itself: no allocation on the usual path.
  absl::InlinedVector<Transition, 6> transitions_;
  MaybeTime training_start_;
  MaybeTime training_end_;

  Phase phase_ = Phase::kProvisioning;
  StopCause stop_cause_ = StopCause::kNone;
  // Bumped whenever the engine abandons the work in flight (stop, failure):
  // completions that carry an older generation are ignored.
  uint64_t generation_ = 0;
  std::optional<Cluster> cluster_;
  MaybeTime pending_since_;
  absl::Duration next_retry_delay_;
  TimerHandle retry_timer_;
  uint64_t runtime_deadline_ = 0;  // token in EngineImpl::runtime_deadlines_, or 0
  TimerHandle kill_timer_;
  TimerHandle review_timer_;  // the next SpotInterruptionHandler::Review
  int channels_left_ = 0;
  int containers_running_ = 0;
  bool algorithm_failed_ = false;
  bool warm_pool_ = false;  // takes part in warm pools
  // The journal (EngineOptions::journal): the job changed since its last
  // record (it is in EngineImpl::journal_dirty_), and its request too.
  bool journal_dirty_ = false;
  bool journal_request_ = false;
  // The current attempt was lost because the engine restarted (recovery).
  bool lost_to_restart_ = false;

  // Attempts. A spot interruption or a lost instance ends an attempt; the
  // SpotInterruptionHandler may start another.
  int attempt_ = 1;
  int spot_interruptions_ = 0;
  int infrastructure_failures_ = 0;
  bool on_spot_ = false;            // capacity type of the current attempt
  absl::Duration held_;             // instance time of ended attempts (billable)
  MaybeTime held_since_;            // the current attempt's cluster is held since
  uint64_t max_wait_deadline_ = 0;  // token in EngineImpl::max_wait_deadlines_, or 0
  // running_[i]: the container of cluster_->instances[i] has not exited.
  // containers_running_ counts the true ones.
  absl::InlinedVector<bool, 8> running_;
  // An interruption being handled: containers are stopping.
  bool interrupting_ = false;
  bool interrupt_preempted_ = false;
  // The interruption being handled is a move (MigrateTrainingJob) to this
  // capacity.
  std::optional<bool> moving_to_spot_;

  // What few jobs have, apart from the record (allocated when first set):
  // a usual job keeps none of it, and a finished job's record stays smaller
  // by 104 bytes (the engine keeps every finished job until deleted).
  struct Extras {
    // Text appended to some transitions' messages: (transition index, text).
    std::vector<std::pair<size_t, std::string>> details;
    std::string failure_reason;
    std::vector<MetricState> metrics;  // the request's MetricDefinitions
    std::string interrupted_host;      // the host of the interruption being handled
  };
  Extras& extras() {
    if (extras_ == nullptr) extras_ = std::make_unique<Extras>();
    return *extras_;
  }
  std::unique_ptr<Extras> extras_;
};

// A job's ARN in a buffer on the stack (on the heap only for the longest
// names): what a JobContext lends a provider for one call.
class ArnText {
 public:
  ArnText(std::string_view prefix, std::string_view name) {
    const size_t n = prefix.size() + name.size();
    char* out = buffer_;
    if (n > sizeof buffer_) {
      heap_.resize(n);
      out = heap_.data();
    }
    std::memcpy(out, prefix.data(), prefix.size());
    std::memcpy(out + prefix.size(), name.data(), name.size());
    view_ = std::string_view(out, n);
  }
  ArnText(const ArnText&) = delete;
  ArnText& operator=(const ArnText&) = delete;

  std::string_view view() const { return view_; }

 private:
  char buffer_[160];
  std::string heap_;
  std::string_view view_;
};

// Names one job at one generation. Completions carry a token instead of a
// pointer: the job may have ended (and even been deleted) by the time they run.
// Packed in one word, so that a completion capturing the engine and a token
// (16 bytes) fits in an AnyInvocable's inline storage instead of costing a heap
// allocation per call: the job's seq in the high 40 bits (Create refuses the
// 2^40th job), its generation modulo 2^24 in the low 24. A stale completion is
// only mistaken for a current one if exactly a multiple of 2^24 abandonments of
// that job happened while it was in flight.
class JobToken {
 public:
  static constexpr int kGenerationBits = 24;
  static constexpr uint64_t kGenerationMask = (uint64_t{1} << kGenerationBits) - 1;
  static constexpr uint64_t kMaxSeq = (uint64_t{1} << (64 - kGenerationBits)) - 1;

  JobToken(uint64_t seq, uint64_t generation)
      : bits_(seq << kGenerationBits | (generation & kGenerationMask)) {}
  uint64_t seq() const { return bits_ >> kGenerationBits; }
  // The generation modulo 2^24.
  uint64_t generation() const { return bits_ & kGenerationMask; }

 private:
  uint64_t bits_;
};
static_assert(sizeof(JobToken) == 8);

// EngineImpl::jobs_ keys a job by its name.
struct JobName {
  std::string_view operator()(const Job& job) const { return job.name(); }
};

// Jobs by seq (creation order): an ended job that stays (until deleted)
// keeps the window open behind it, 8 bytes per job created since.
using JobsBySeq = internal::SeqWindow<Job*>;

class EngineImpl final : public Engine, public ClusterListener, public DataChannelListener {
 public:
  explicit EngineImpl(EngineOptions options)
      : options_(std::move(options)),
        loop_(*options_.loop),
        owned_provider_(options_.cluster_provider == nullptr ? NewNoClusterProvider() : nullptr),
        provider_(owned_provider_ != nullptr ? *owned_provider_ : *options_.cluster_provider),
        name_checker_(options_.validation),
        name_shape_(*internal::FindShape("TrainingJobName")),
        arn_prefix_(absl::StrCat("arn:aws:sagemaker:", options_.region, ":", options_.account_id,
                                 ":training-job/")) {
    if (options_.warm_pool_manager == nullptr) {
      owned_pools_ = NewWarmPoolManager(loop_, provider_, options_.warm_pools);
      options_.warm_pool_manager = owned_pools_.get();
    }
    if (options_.spot_handler == nullptr) {
      owned_spot_handler_ = NewDefaultSpotInterruptionHandler();
      options_.spot_handler = owned_spot_handler_.get();
    }
    review_period_ = options_.spot_handler->ReviewPeriod();
    // (A read-only journal gets no records: the engine changes nothing.)
    if (options_.journal != nullptr && !options_.journal->read_only()) {
      journal_ = options_.journal;
      billing_mark_period_ = journal_->billing_mark_period();
      // A pool that changes on its own (expires, is reused) is recorded too.
      pools().SetChangeListener([this](std::string_view job) { PoolChanged(job); });
    }
    provider_.SetListener(this);
    if (options_.data_channel != nullptr) options_.data_channel->SetListener(this);
  }

  ~EngineImpl() override {
    // Give back every cluster still held (nothing is waited for); the engine's
    // own warm-pool manager releases its pools as it goes (unrecorded: they
    // outlive this engine in its journal).
    if (journal_ != nullptr) {
      pools().SetChangeListener(nullptr);
      loop_.Cancel(billing_mark_);
    }
    provider_.SetListener(nullptr);
    if (options_.data_channel != nullptr) options_.data_channel->SetListener(nullptr);
    for (Job& job : jobs_) {
      if (job.phase_ != Phase::kEnded) EndChannels(job);
      if (job.cluster_.has_value()) provider_.Release(*job.cluster_);
    }
  }

  absl::StatusOr<v1::CreateTrainingJobResponse> CreateTrainingJob(
      const v1::CreateTrainingJobRequest& request) override;
  absl::StatusOr<PreparedTrainingJob> PrepareTrainingJob(
      const v1::CreateTrainingJobRequest& request) override;
  absl::StatusOr<v1::CreateTrainingJobResponse> CreateTrainingJob(
      const PreparedTrainingJob& prepared, std::string_view name) override;
  absl::StatusOr<v1::DescribeTrainingJobResponse> DescribeTrainingJob(
      const v1::DescribeTrainingJobRequest& request) override {
    return OnLoop([&] { return Describe(request); });
  }
  absl::StatusOr<v1::ListTrainingJobsResponse> ListTrainingJobs(
      const v1::ListTrainingJobsRequest& request) override {
    return OnLoop([&] { return List(request); });
  }
  absl::Status StopTrainingJob(const v1::StopTrainingJobRequest& request) override {
    return Durably([&] { return StopRequest(request); });
  }
  absl::StatusOr<v1::UpdateTrainingJobResponse> UpdateTrainingJob(
      const v1::UpdateTrainingJobRequest& request) override {
    return Durably([&] { return Update(request); });
  }
  absl::Status DeleteTrainingJob(const v1::DeleteTrainingJobRequest& request) override {
    return Durably([&] { return Delete(request); });
  }
  absl::StatusOr<v1::DescribeTrainingJobResponse> WaitForTrainingJob(std::string_view name,
                                                                     absl::Time deadline) override;
  absl::Status WaitForAllTrainingJobs(absl::Time deadline) override;
  void AddObserver(JobObserver* observer) override {
    OnLoop([&] {
      events_.Add(observer);
      return 0;
    });
  }
  void RemoveObserver(JobObserver* observer) override {
    OnLoop([&] {
      events_.Remove(observer);
      return 0;
    });
  }
  int active_jobs() const override { return active_jobs_.load(std::memory_order_relaxed); }

  absl::Status MigrateTrainingJob(std::string_view job, bool to_spot) override;

  absl::Status InjectInterruption(std::string_view job, std::string_view host,
                                  InterruptionKind kind, absl::Duration notice) override {
    return OnLoop([&]() -> absl::Status {
      Job* j = FindJob(job);
      if (j == nullptr) return NotFound(std::string(job));
      if (!j->cluster_) {
        return absl::FailedPreconditionError(
            absl::StrCat("training job '", std::string(job), "' holds no instances now (status ",
                         j->status_, "/", j->transitions_.back().status, ")"));
      }
      for (const Instance& instance : j->cluster_->instances) {
        if (instance.host_name == host) {
          return provider_.InjectInterruption(instance.id, kind, notice);
        }
      }
      return absl::NotFoundError(absl::StrCat("training job '", std::string(job),
                                              "' has no instance '", TextForMessage(host), "'"));
    });
  }

  // ClusterListener
  void OnInterruptionNotice(const Cluster& cluster, const Instance& instance,
                            absl::Time deadline) override;
  void OnInstanceLost(const Cluster& cluster, const Instance& instance) override;

  // --- called by Job (loop thread)
  void HandleLogLine(Job& job, const Instance& instance, std::string_view line);
  void HandleExit(Job& job, const Instance& instance, const ContainerExit& exit);

 private:
  // One step of the engine (see engine.h): a public call, or a callback of
  // the loop. Every entry into the engine's state opens one; when the
  // outermost closes, what the step queued for observers and waiters is
  // delivered.
  class Step {
   public:
    explicit Step(EngineImpl& engine) : engine_(engine) { ++engine_.step_depth_; }
    ~Step() {
      if (--engine_.step_depth_ > 0) return;
      if (!engine_.journal_dirty_.empty()) engine_.RecordDirtyJobs();
      if (!engine_.events_.empty()) engine_.Deliver();
    }
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;

   private:
    EngineImpl& engine_;
  };

  // Runs `fn` as a step on the loop thread, from any thread, and returns its
  // result (see the threading note in engine.h).
  template <typename Fn>
  auto OnLoop(Fn fn) -> decltype(fn()) {
    std::optional<decltype(fn())> result;
    loop_.RunOnLoop([&] {
      const Step step(*this);
      result.emplace(fn());
    });
    return std::move(*result);
  }

  // OnLoop for a call that changes something the journal records
  // (EngineOptions::journal): refused with a read-only journal; with a
  // journal, returns once what the step recorded is durable, or the
  // journal's error, unless the caller holds the loop (a callback of it),
  // which must not wait.
  template <typename Fn>
  auto Durably(Fn fn) -> decltype(fn()) {
    if (options_.journal != nullptr && options_.journal->read_only()) return ReadOnlyError();
    if (journal_ == nullptr) return OnLoop(std::move(fn));
    const bool may_wait = !loop_.HeldByCaller();
    std::optional<decltype(fn())> result;
    Journal::Ticket ticket = 0;
    loop_.RunOnLoop([&] {
      {
        const Step step(*this);
        result.emplace(fn());
      }
      ticket = journal_ticket_;
    });
    if (result->ok() && may_wait) {
      if (absl::Status durable = journal_->Wait(ticket); !durable.ok()) return durable;
    }
    return std::move(*result);
  }
  absl::Status ReadOnlyError() const;

  // The journal (engine_journal.cc). Marks the job changed: its record is
  // appended when the step ends (RecordDirtyJobs). `request`: its request
  // changed too.
  void Journaled(Job& job, bool request = false) {
    if (journal_ == nullptr) return;
    job.journal_request_ |= request;
    if (job.journal_dirty_) return;
    job.journal_dirty_ = true;
    journal_dirty_.push_back(job.seq_);
  }
  // Appends the record of every job changed in the step that ends.
  void RecordDirtyJobs();
  // The warm-pool manager changed job `name`'s record (SetChangeListener).
  void PoolChanged(std::string_view name);
  // Billing marks: while jobs hold instances, Journal::Mark every
  // billing_mark_period_.
  void ArmBillingMark();
  void WriteBillingMarks();
  JobRecord MakeRecord(Job& job);
  // NewEngine's recovery: rebuilds every job of the journal.
  absl::Status RecoverJobs();
  absl::Status RecoverJob(JobRecord&& record);
  // Carries on with a job that was InProgress or Stopping when the engine
  // that recorded it ended: reattaches its containers, or ends the attempt.
  void ResumeRecovered(Job& job, std::optional<Cluster> cluster, bool containers_running,
                       absl::Time held_until);
  // Gives the warm-pool manager back the records of the recovered jobs
  // (pending_pools_), Available pools in the order they became Available.
  absl::Status RestorePools();
  // A status, secondary status or message as the engine's constant, or kept
  // in interned_ (a wording this engine does not use).
  const char* InternText(const std::string& text);

 public:
  // NewEngine's second half, with a journal.
  absl::Status Recover() {
    return OnLoop([&] { return RecoverJobs(); });
  }

 private:
  // Whether anyone hears of events: observers or waiters. Events are queued
  // only then.
  bool listening() const { return events_.has_observers() || !waiters_.empty(); }
  // Delivers the events queued by the step that just ended (Step).
  void Deliver();

  // A thread in WaitForTrainingJob or WaitForAllTrainingJobs. Registered on
  // the loop thread; `state` is read by the waiting thread.
  struct Waiter {
    enum State : int { kWaiting, kEnded, kTimedOut };
    std::string name;  // empty: every job
    std::atomic<int> state{kWaiting};
    bool driving = false;  // the waiting thread runs the loop (loop thread only)
    TimerHandle timer;     // its deadline, if finite
  };
  // Registers `w`, with a timer that ends its wait at `deadline` (if finite).
  void Register(Waiter& w, absl::Time deadline) {
    waiters_.push_back(&w);
    if (deadline == absl::InfiniteFuture()) return;
    w.timer = loop_.ScheduleAt(deadline, [this, &w] {
      const Step step(*this);
      EndWait(w, Waiter::kTimedOut);
    });
  }
  // Whether the calling thread is inside a step or an observer's call. (Read
  // holding the loop: a thread that does not hold it cannot be inside one.)
  bool InsideStep() {
    bool inside = false;
    loop_.TryHold([&] { inside = step_depth_ > 0 || events_.delivering(); });
    return inside;
  }
  // Ends a waiter's wait with `state`: wakes its thread, and stops the loop it
  // runs.
  void EndWait(Waiter& w, Waiter::State state);
  // Runs the loop or sleeps, as WaitForTrainingJob says, until `w` is no
  // longer kWaiting or the loop it ran returned (Cancelled); then unregisters
  // `w`. REQUIRES: `w` is registered.
  absl::Status Await(Waiter& w, absl::Time deadline, const std::string& what);

  absl::Time Now() const { return loop_.Now(); }

  // DataChannelListener: a Pipe writer of a running attempt failed.
  void OnChannelFailed(std::string_view job_name, int32_t attempt, absl::Status status) override {
    const Step step(*this);
    Job* job = FindJob(job_name);
    if (job == nullptr || job->attempt_ != attempt || job->status_ != kInProgress) return;
    if (job->phase_ != Phase::kDownloading && job->phase_ != Phase::kTraining) return;
    Fail(*job, absl::StrCat("ClientError: ", status.message()));
  }

  // Tells the data channel the job's containers are gone (Pipe writers end).
  void EndChannels(const Job& job) {
    if (options_.data_channel != nullptr && job.request().input_data_config_size() > 0) {
      options_.data_channel->EndJob(job.name());
    }
  }

  // One allocation of the exact size (`prefix + name` copies the prefix, then grows it).
  std::string Arn(const Job& job) const {
    std::string arn;
    arn.reserve(arn_prefix_.size() + job.name().size());
    arn.append(arn_prefix_).append(job.name());
    return arn;
  }
  // The ARN for a JobContext, which only lends it for the call: on the stack.
  ArnText ContextArn(const Job& job) const { return ArnText(arn_prefix_, job.name()); }

  // The error for a request that has only a name, when the name names no
  // job: the request's validation error, or NotFound. (A name that names a
  // job needs no validation: it was validated, under the same options, when
  // the job was created.)
  template <typename Request>
  absl::Status NoSuchJob(const Request& request) const {
    KILN_RETURN_IF_ERROR(ValidateRequest(request, options_.validation));
    return NotFound(request.training_job_name());
  }

  Job* FindJob(std::string_view name) { return jobs_.Find(name); }

  static JobToken TokenOf(const Job& job) { return JobToken(job.seq_, job.generation_); }

  // The job a completion belongs to, or null when the completion is stale
  // (the job ended, was deleted, or abandoned that work).
  Job* Resume(const JobToken& token) {
    Job* job = by_seq_.Find(token.seq());
    if (job == nullptr || (job->generation_ & JobToken::kGenerationMask) != token.generation()) {
      return nullptr;
    }
    return job;
  }

  // CreateTrainingJob's checks of the request alone, on the caller's thread:
  // validation, the components the request needs (CheckComponents), then
  // each channel's CheckChannel (CheckChannels).
  absl::Status Admit(const v1::CreateTrainingJobRequest& request) const;
  // FailedPrecondition when the request needs a component the engine lacks.
  absl::Status CheckComponents(const v1::CreateTrainingJobRequest& request) const;
  // Each channel's DataChannel::CheckChannel, in order; the first error.
  absl::Status CheckChannels(const v1::CreateTrainingJobRequest& request) const;
  // InvalidArgument, worded as for a whole request, when `name` is not a
  // TrainingJobName the service accepts.
  absl::Status CheckName(const std::string& name) const;
  // CreateTrainingJob on the loop, for an admitted request: the name must be
  // free (CheckNewJob); then the job `name` is accepted with `request`
  // (without a TrainingJobName), which it keeps.
  absl::StatusOr<v1::CreateTrainingJobResponse> Create(
      std::string name, std::shared_ptr<const v1::CreateTrainingJobRequest> request);
  // Create as a call from any thread: on the loop, then durably (Durably).
  absl::StatusOr<v1::CreateTrainingJobResponse> CreateDurably(
      std::string name, std::shared_ptr<const v1::CreateTrainingJobRequest> request);
  // AlreadyExists when `name` is taken; ResourceExhausted when the engine
  // can number no more jobs.
  absl::Status CheckNewJob(const std::string& name);
  // Starts an accepted job (in jobs_): records it and asks for its cluster.
  // `pooled`: what the warm-pool manager's OnJobCreated answered, asked
  // before the job was added so that its error leaves nothing behind.
  v1::CreateTrainingJobResponse Accept(Job& job, bool pooled);
  absl::StatusOr<v1::DescribeTrainingJobResponse> Describe(
      const v1::DescribeTrainingJobRequest& request);
  absl::StatusOr<v1::ListTrainingJobsResponse> List(const v1::ListTrainingJobsRequest& request);
  absl::Status StopRequest(const v1::StopTrainingJobRequest& request);
  absl::StatusOr<v1::UpdateTrainingJobResponse> Update(const v1::UpdateTrainingJobRequest& request);
  absl::Status Delete(const v1::DeleteTrainingJobRequest& request);

  // Lifecycle steps. Statuses and messages are the constants above (a
  // transition keeps their data(), NUL-terminated); as views, their lengths
  // are known where they are named instead of counted at each event.
  void SetStatus(Job& job, std::string_view status, std::string_view secondary,
                 std::string_view message, std::string detail = "");
  void SetMessage(Job& job, std::string_view message);
  void Provision(Job& job);
  void OnProvisioned(const JobToken& token, absl::StatusOr<Cluster>&& cluster);
  // Provisioning failed with `error`, not for lack of capacity: provisions
  // again after capacity_retry_initial while RetryStrategy allows, fails the
  // job as an InternalServerError otherwise.
  void RetryOrFail(Job& job, const absl::Status& error);
  void OnClusterReady(Job& job);
  void OnImageReady(Job& job, absl::Status status);
  void StartDownloads(Job& job);
  void OnChannelDelivered(Job& job, absl::Status status);
  void StartTraining(Job& job);
  void OnContainersStarted(Job& job, absl::Status status);
  void StartUpload(Job& job);
  void OnUploaded(Job& job, absl::StatusOr<ArtifactsResult> result);
  void Stop(Job& job, StopCause cause);
  // A training job's containers get SIGTERM now and SIGKILL after the stop
  // grace period if the job is still training then.
  void SignalStop(Job& job);
  // `healthy`: whether the cluster may be kept in a warm pool afterwards (an
  // algorithm or client error leaves it healthy; infrastructure failures may
  // not).
  // `reason` becomes FailureReason: its first 1024 characters, each ill-formed UTF-8 byte
  // replaced by U+FFFD.
  void Fail(Job& job, std::string_view reason, bool healthy = false);
  void Finish(Job& job, std::string_view status, std::string_view secondary,
              std::string_view message, bool healthy = true);
  // Gives the job's cluster back: to the warm-pool manager when the job has
  // ended (`job_ended`: it decides whether to keep it), else to the provider.
  void ReturnCluster(Job& job, bool healthy, bool job_ended = true);
  void CancelTimers(Job& job);

  v1::TrainingJobSummary Summary(const Job& job) const;

  Job* OwnerOf(const Cluster& cluster) {
    auto it = cluster_owners_.find(cluster.id);
    if (it == cluster_owners_.end()) return nullptr;
    return by_seq_.Find(it->second);
  }
  // (By reference: a cluster is moved into its job once, not through copies.)
  void AttachCluster(Job& job, Cluster&& cluster) {
    cluster_owners_[cluster.id] = job.seq_;
    job.cluster_ = std::move(cluster);
    job.held_since_ = Now();
    Journaled(job);
    if (journal_ != nullptr && !billing_mark_armed_) ArmBillingMark();
  }
  void Interrupt(Job& job, const std::string& host, bool preempted);
  // Ends the attempt of a job that holds instances, for an interruption
  // (Interrupt) or a move (Move): its containers get SIGTERM, or the work
  // in flight is abandoned when none run; EndInterruption follows.
  void EndAttempt(Job& job);
  void EndInterruption(Job& job);
  // Starts attempt attempt_ + 1 on spot capacity (`spot`) or on-demand:
  // Starting, then Provision after `delay`.
  void NextAttempt(Job& job, bool spot, absl::Duration delay, bool set_starting);
  // Moves an InProgress job that is not handling an interruption and has not
  // finished training to the other capacity (see MigrateTrainingJob).
  void Move(Job& job, bool to_spot);
  // SpotInterruptionHandler::Review of a job with EnableManagedSpotTraining.
  bool ReviewCapacity(const Job& job, CapacityReview::When when);
  // Provision, after a review, for a job whose last request found capacity
  // short: a review that moves the job provisions it itself.
  void ProvisionAgain(Job& job);
  // Arms the job's next periodic review.
  void ScheduleReview(Job& job);
  void ContainerGone(Job& job, const std::string& host);

  // Deadlines that stop a job with `cause`; a job's `token` member holds the
  // token of its deadline, or 0.
  internal::DeadlineQueue JobDeadlines(uint64_t Job::*token, StopCause cause) {
    return internal::DeadlineQueue(
        loop_,
        [this, token](uint64_t seq, uint64_t t) {
          const Job* job = by_seq_.Find(seq);
          return job != nullptr && job->*token == t;
        },
        [this, token, cause](uint64_t seq, uint64_t) {
          const Step step(*this);
          Job& job = *by_seq_.Find(seq);
          job.*token = 0;
          if (job.status_ == kInProgress) Stop(job, cause);
        });
  }

  WarmPoolManager& pools() { return *options_.warm_pool_manager; }
  const WarmPoolManager& pools() const { return *options_.warm_pool_manager; }

  EngineOptions options_;
  EventLoop& loop_;
  // A provider that provides nothing, for an engine over a read-only journal
  // given none (NewEngine allows it only then).
  std::unique_ptr<ClusterProvider> owned_provider_;
  ClusterProvider& provider_;
  // A prepared job's name: its shape, and a checker (options_.validation).
  const internal::ShapeChecker name_checker_;
  const internal::Shape& name_shape_;
  // Room kept between calls (see Provision, StartDownloads).
  ClusterSpec spec_scratch_;
  std::vector<const Instance*> receivers_scratch_;
  std::unique_ptr<WarmPoolManager> owned_pools_;
  std::unique_ptr<SpotInterruptionHandler> owned_spot_handler_;
  absl::Duration review_period_;                               // the spot handler's ReviewPeriod()
  absl::flat_hash_map<std::string, uint64_t> cluster_owners_;  // cluster id -> job seq
  // Observers, and the events the current step queued for them.
  internal::ObserverQueue events_;
  int step_depth_ = 0;            // Steps open
  std::vector<Waiter*> waiters_;  // registered waiters, in the order they came
  // Every job, by its own name. No behaviour depends on the iteration order
  // of these (List sorts).
  internal::KeyedSet<Job, JobName> jobs_;
  JobsBySeq by_seq_;
  // MaxRuntimeInSeconds and MaxWaitTimeInSeconds of every job: nearly always
  // cancelled (by the job's end), a day or more after they were set.
  internal::DeadlineQueue runtime_deadlines_ =
      JobDeadlines(&Job::runtime_deadline_, StopCause::kMaxRuntime);
  internal::DeadlineQueue max_wait_deadlines_ =
      JobDeadlines(&Job::max_wait_deadline_, StopCause::kMaxWait);
  std::string arn_prefix_;  // arn:aws:sagemaker:<region>:<account>:training-job/
  uint64_t next_seq_ = 1;
  std::atomic<int> active_jobs_{0};
  // The journal (options_.journal unless read-only; may be null), the jobs changed in the
  // step under way (by seq), and the ticket of the last record appended.
  Journal* journal_ = nullptr;
  std::vector<uint64_t> journal_dirty_;
  Journal::Ticket journal_ticket_ = 0;
  std::vector<std::unique_ptr<std::string>> interned_;
  // Billing marks (ArmBillingMark): the period, and the timer while armed.
  absl::Duration billing_mark_period_;
  TimerHandle billing_mark_;
  bool billing_mark_armed_ = false;
  // Recovery: the warm-pool records of the recovered jobs, by job seq, until
  // RestorePools.
  std::vector<std::pair<uint64_t, WarmPoolRecord>> pending_pools_;
  const uint64_t id_ = next_engine_id.fetch_add(1, std::memory_order_relaxed);
};

}  // namespace kiln::engine_impl

#endif  // KILN_CORE_INTERNAL_ENGINE_IMPL_H_
