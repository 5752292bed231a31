#include "kiln/engine.h"

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
#include "kiln/plugin/json_value.h"
#include "kiln/plugin/status_macros.h"

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

namespace {

using engine_internal::PreparedAccess;

// Engine ids, which tell a PreparedTrainingJob's engine from others: unique in
// the process (an address could be reused by a later engine), never 0.
std::atomic<uint64_t> next_engine_id{1};

// Statuses, as the service spells them.
constexpr char kInProgress[] = "InProgress";
constexpr char kCompleted[] = "Completed";
constexpr char kFailed[] = "Failed";
constexpr char kStopping[] = "Stopping";
constexpr char kStopped[] = "Stopped";

constexpr char kStarting[] = "Starting";
constexpr char kPending[] = "Pending";
constexpr char kDownloadingStatus[] = "Downloading";
constexpr char kTrainingStatus[] = "Training";
constexpr char kUploadingStatus[] = "Uploading";
constexpr char kMaxRuntimeExceeded[] = "MaxRuntimeExceeded";
constexpr char kInterrupted[] = "Interrupted";
constexpr char kMaxWaitTimeExceeded[] = "MaxWaitTimeExceeded";
constexpr char kRestarting[] = "Restarting";

// Status messages, worded as the service words them.
constexpr char kMsgLaunching[] = "Launching requested ML instances";
constexpr char kMsgPreparing[] = "Preparing the instances for training";
constexpr char kMsgInsufficientCapacity[] =
    "Insufficient capacity error from EC2 while launching instances, retrying!";
constexpr char kMsgDownloading[] = "Downloading input data";
constexpr char kMsgTraining[] = "Training image download completed. Training in progress.";
constexpr char kMsgUploading[] = "Uploading generated training model";
constexpr char kMsgCompleted[] = "Training job completed";
constexpr char kMsgStopping[] = "Stopping the training job";
constexpr char kMsgStopped[] = "Training job stopped";
constexpr char kMsgMaxRuntime[] = "Training job stopped because it reached MaxRuntimeInSeconds";
constexpr char kMsgFailed[] = "Training job failed";
constexpr char kMsgSpotCapacity[] = "Waiting for Spot capacity";
constexpr char kMsgInterrupted[] = "Spot interruption: training was interrupted";
constexpr char kMsgRestarting[] = "Restarting training after a lost instance";
constexpr char kMsgMaxWait[] = "Training job stopped because it reached MaxWaitTimeInSeconds";
constexpr char kMsgMovingToSpot[] = "Moving the training job to Spot capacity";
constexpr char kMsgMovingToOnDemand[] = "Moving the training job to on-demand capacity";

constexpr int64_t kDefaultMaxRuntimeSeconds = 86400;
constexpr int32_t kDefaultMaxResults = 10;
constexpr size_t kMaxFailureReason = 1024;

// A time as a response shows it: in whole milliseconds, cut toward the past,
// as the service keeps its timestamps (1795253152.163). What the engine
// compares (List's filters and cursors) uses the exact time instead.
google::protobuf::Timestamp ToProto(absl::Time t) {
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

absl::Time FromProto(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// Whole seconds as the service reports durations: at least 1, rounded up.
int32_t BilledSeconds(absl::Duration d) {
  int64_t s = absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)));
  return static_cast<int32_t>(std::clamp<int64_t>(s, 1, INT32_MAX));
}

std::string JoinUri(const std::string& base, const std::string& tail) {
  std::string out(absl::StripSuffix(base, "/"));
  absl::StrAppend(&out, "/", tail);
  return out;
}

// Copies every field of `from` whose json_name also names a field of the same
// type in `to`: the Describe response echoes the request this way, member for
// member, with no list to keep in step with the model.
void EchoFields(const google::protobuf::Message& from, google::protobuf::Message& to) {
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

absl::Status NotFound(const std::string& name) {
  return absl::NotFoundError(
      absl::StrCat("Requested resource not found: training job '",
                   TextForMessage(name), "' does not exist."));
}

class EngineImpl;

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
std::shared_ptr<const v1::CreateTrainingJobRequest> CopyForJob(
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

  // Attempts. A spot interruption or a lost instance ends an attempt; the
  // SpotInterruptionHandler may start another.
  int attempt_ = 1;
  int spot_interruptions_ = 0;
  int infrastructure_failures_ = 0;
  bool on_spot_ = false;                  // capacity type of the current attempt
  absl::Duration held_;                   // instance time of ended attempts (billable)
  MaybeTime held_since_;  // the current attempt's cluster is held since
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
        provider_(*options_.cluster_provider),
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
    provider_.SetListener(this);
    if (options_.data_channel != nullptr) options_.data_channel->SetListener(this);
  }

  ~EngineImpl() override {
    // Give back every cluster still held (nothing is waited for); the engine's
    // own warm-pool manager releases its pools as it goes.
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
    return OnLoop([&] { return StopRequest(request); });
  }
  absl::StatusOr<v1::UpdateTrainingJobResponse> UpdateTrainingJob(
      const v1::UpdateTrainingJobRequest& request) override {
    return OnLoop([&] { return Update(request); });
  }
  absl::Status DeleteTrainingJob(const v1::DeleteTrainingJobRequest& request) override {
    return OnLoop([&] { return Delete(request); });
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
        return absl::FailedPreconditionError(absl::StrCat(
            "training job '", std::string(job), "' holds no instances now (status ", j->status_,
            "/", j->transitions_.back().status, ")"));
      }
      for (const Instance& instance : j->cluster_->instances) {
        if (instance.host_name == host) {
          return provider_.InjectInterruption(instance.id, kind, notice);
        }
      }
      return absl::NotFoundError(absl::StrCat("training job '", std::string(job),
                                              "' has no instance '",
                                              TextForMessage(host), "'"));
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
      if (--engine_.step_depth_ == 0 && !engine_.events_.empty()) engine_.Deliver();
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
  const uint64_t id_ = next_engine_id.fetch_add(1, std::memory_order_relaxed);
};

void Job::OnLogLine(const Instance& instance, std::string_view line) {
  engine_.HandleLogLine(*this, instance, line);
}
void Job::OnExit(const Instance& instance, const ContainerExit& exit) {
  engine_.HandleExit(*this, instance, exit);
}

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
  return OnLoop([&] { return Create(std::move(job_name), shared); });
}

absl::StatusOr<v1::CreateTrainingJobResponse> EngineImpl::CreateTrainingJob(
    const v1::CreateTrainingJobRequest& request) {
  // The checks that need no engine state, and the copy the job keeps, are
  // made on the caller's thread: the data channel's checks may wait for a
  // store, and must not hold up the loop.
  KILN_RETURN_IF_ERROR(Admit(request));
  std::shared_ptr<const v1::CreateTrainingJobRequest> copy = CopyForJob(request);
  return OnLoop([&] { return Create(request.training_job_name(), std::move(copy)); });
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
      retry_at = std::min(retry_at,
                          *job.pending_since_ + absl::Seconds(sc.max_pending_time_in_seconds()));
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
    Fail(job, absl::StrCat("InternalServerError: could not provision instances: ",
                           error.message()));
    return;
  }
  ++job.infrastructure_failures_;
  ++job.attempt_;
  job.pending_since_.reset();
  job.next_retry_delay_ = options_.capacity_retry_initial;
  SetStatus(job, kInProgress, kStarting, kMsgLaunching,
            absl::StrCat("InternalServerError: could not provision instances: ",
                         error.message(), "; infrastructure retry ",
                         job.infrastructure_failures_, " of ", max_retries, " (RetryStrategy)"));
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
  job.runtime_deadline_ =
      runtime_deadlines_.Add(
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
  JobContext context{job.name(), arn.view(), job.request(), *job.cluster_, job.attempt_,
                     job.seq_};
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
  JobContext context{job.name(), arn.view(), job.request(), *job.cluster_, job.attempt_,
                     job.seq_};
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
    std::string text = exit.failure_text.empty() ? "See job logs for more information"
                                                 : exit.failure_text;
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
  JobContext context{job.name(), arn.view(), job.request(), *job.cluster_, job.attempt_,
                     job.seq_};
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

void EngineImpl::Stop(Job& job, StopCause cause) {
  job.stop_cause_ = cause;
  SetStatus(job, kStopping, kStopping, kMsgStopping);
  const char* secondary = cause == StopCause::kMaxRuntime ? kMaxRuntimeExceeded
                          : cause == StopCause::kMaxWait ? kMaxWaitTimeExceeded
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
      // The containers get SIGTERM now and SIGKILL after the grace period;
      // when the last one has exited, its artifacts are uploaded.
      provider_.Signal(*job.cluster_, SIGTERM);
      job.kill_timer_ = loop_.ScheduleAfter(options_.stop_grace_period, [this, &job] {
        const Step step(*this);
        job.kill_timer_ = TimerHandle();
        if (job.phase_ == Phase::kTraining) provider_.Signal(*job.cluster_, SIGKILL);
      });
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
    Finish(job, kStopped, max_wait ? kMaxWaitTimeExceeded
                                   : job.stop_cause_ == StopCause::kMaxRuntime ? kMaxRuntimeExceeded
                                                                               : kStopped,
           max_wait ? kMsgMaxWait
                    : job.stop_cause_ == StopCause::kMaxRuntime ? kMsgMaxRuntime : kMsgStopped,
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
  context.max_runtime = absl::Seconds(
      sc.has_max_runtime_in_seconds() ? sc.max_runtime_in_seconds() : kDefaultMaxRuntimeSeconds);
  const InterruptionDecision decision = options_.spot_handler->OnInterruption(context);
  if (decision.action == InterruptionDecision::Action::kGiveUp) {
    Fail(job, decision.failure_reason, /*healthy=*/false);
    return;
  }
  const bool preempted = job.interrupt_preempted_;
  if (!preempted) {
    // A retry after a lost instance goes back to Starting at once.
    SetStatus(job, kInProgress, kStarting, kMsgRestarting,
              absl::StrCat("Instance ", job.extras().interrupted_host,
                           " was lost; infrastructure retry ", job.infrastructure_failures_, " of ",
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
  return OnLoop([&]() -> absl::Status {
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
    if (spot != j->on_spot_) Move(*j, spot);
  });
}
}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> NewEngine(EngineOptions options) {
  if (options.loop == nullptr) return absl::InvalidArgumentError("EngineOptions.loop is required");
  if (options.cluster_provider == nullptr) {
    return absl::InvalidArgumentError("EngineOptions.cluster_provider is required");
  }
  return std::unique_ptr<Engine>(new EngineImpl(std::move(options)));
}

}  // namespace kiln
