// Managed warm pools: after a job, keep its cluster for a while so that the
// next matching job starts on it without provisioning or image download.
//
// Two pluggable parts:
// - KeepAlivePolicy decides how long a finished job's cluster is kept. Ship:
//   JobRequested (the service's behaviour: the job's KeepAlivePeriodInSeconds),
//   Fixed(T), Never, and AdaptiveHistogram (learns the idle gaps per cluster
//   shape; see NewAdaptiveHistogramKeepAlive).
// - WarmPoolManager holds the retained clusters: matches new jobs to them,
//   retains clusters after jobs, expires them, reports each job's
//   WarmPoolStatus and bills retained time. NewWarmPoolManager is the default;
//   the engine uses it unless EngineOptions names another.
//
// Semantics (the service's managed warm pools):
// - A job takes part in warm pools when the policy says so (JobRequested: when
//   it sets KeepAlivePeriodInSeconds > 0) and its cluster can be pooled
//   (homogeneous, not spot). Its WarmPoolStatus is InUse while it runs; when it
//   Completes, is Stopped after its cluster launched, or Fails with an
//   algorithm or client error, its cluster becomes Available for the policy's
//   keep-alive; then Reused (ReusedByJob = the job that took it) or Terminated
//   (expired, released by UpdateTrainingJob KeepAlive 0, ended by the
//   policy's review, lost an instance, or not kept). A job whose cluster never
//   launched, or that failed in a way that may leave the cluster unhealthy,
//   shows Terminated at once. A job
//   whose attempt ends early (a lost instance, then a RetryStrategy retry)
//   stays InUse: its next attempt takes another cluster. ResourceRetainedBillableTimeInSeconds
//   (seconds Available, rounded up) is filled in once Reused or Terminated.
// - A pool is reused only by a job whose matching criteria are all identical:
//   RoleArn, InstanceType, InstanceCount, VolumeSizeInGB, VolumeKmsKeyId,
//   VpcConfig subnets and security groups (as sets),
//   EnableInterContainerTrafficEncryption, EnableNetworkIsolation.
// - When several pools match, the one that became Available last is taken
//   (ties: the older pool), so idle pools age out and fewer are billed.
// - A pool is Available during [available_since, available_since + keep-alive):
//   a job arriving at exactly the end does not get it.
//
// Threading: loop thread only, like every engine component.
#ifndef KILN_WARM_POOL_H_
#define KILN_WARM_POOL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/cluster_provider.h"
#include "kiln/event_loop.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln {

// What must be identical for a job to reuse a pool.
struct PoolShape {
  std::string role_arn;
  std::string instance_type;
  int32_t instance_count = 0;
  int32_t volume_size_in_gb = 0;
  std::string volume_kms_key_id;
  std::vector<std::string> subnets;          // sorted, no repeats (a set)
  std::vector<std::string> security_groups;  // sorted, no repeats (a set)
  bool inter_container_traffic_encryption = false;
  bool network_isolation = false;

  // The shape of a request. REQUIRES: a homogeneous request (InstanceType).
  static PoolShape Of(const v1::CreateTrainingJobRequest& request);
  // A stable text form, usable as a map key.
  std::string Key() const;
  // Member by member: true exactly when the Key()s are equal.
  friend bool operator==(const PoolShape& a, const PoolShape& b) {
    return a.role_arn == b.role_arn && a.instance_type == b.instance_type &&
           a.instance_count == b.instance_count && a.volume_size_in_gb == b.volume_size_in_gb &&
           a.volume_kms_key_id == b.volume_kms_key_id && a.subnets == b.subnets &&
           a.security_groups == b.security_groups &&
           a.inter_container_traffic_encryption == b.inter_container_traffic_encryption &&
           a.network_isolation == b.network_isolation;
  }
};

// What a policy is asked about.
struct KeepAliveQuery {
  std::string_view job_name;
  const PoolShape& shape;
  // The job's KeepAlivePeriodInSeconds, zero when it set none.
  absl::Duration requested;
  absl::Time now;
};

// What a policy is asked about when it reviews a waiting pool
// (KeepAlivePolicy::Review).
struct KeepAliveReview {
  // The job whose cluster the pool holds (the pool's owner).
  std::string_view job_name;
  const PoolShape& shape;
  // The job's KeepAlivePeriodInSeconds, zero when it set none.
  absl::Duration requested;
  // When the pool became Available.
  absl::Time available_since;
  // The keep-alive in force, counted from available_since, as the manager
  // applies it (after its limits): the pool ends at available_since +
  // keep_alive unless a job takes it first.
  absl::Duration keep_alive;
  absl::Time now;
};

// Decides how long a finished job's cluster is kept Available: once, when the
// pool becomes Available (KeepAlive), and, for a policy that reviews its
// choices, again while the pool waits (Review). Policies see only the past:
// what they are told through the On* calls.
// Loop thread only.
class KeepAlivePolicy {
 public:
  virtual ~KeepAlivePolicy() = default;
  // Whether the job takes part in warm pools at all (may reuse a pool, shows
  // a WarmPoolStatus). Default: it requested a keep-alive, as the service does.
  virtual bool Participates(const KeepAliveQuery& query) {
    return query.requested > absl::ZeroDuration();
  }
  // How long to keep the job's cluster; zero releases it at once.
  virtual absl::Duration KeepAlive(const KeepAliveQuery& query) = 0;
  // A pool of `shape` became Available at `time`.
  virtual void OnPoolAvailable(const PoolShape& shape, absl::Time time) {}
  // A participating job of `shape` arrived at `time` (whether or not it found
  // a pool).
  virtual void OnJobArrived(const PoolShape& shape, absl::Time time) {}
  // A short name for reports ("JobRequested", "Fixed(600s)", ...).
  virtual std::string Name() const = 0;

  // How often the manager reviews each Available pool: every ReviewPeriod()
  // on the loop's clock, counted from when the pool became Available, for as
  // long as it stays Available. Zero (the default) or negative: never; a pool
  // keeps the keep-alive KeepAlive gave it. Read once, when the manager is
  // made.
  virtual absl::Duration ReviewPeriod() const { return absl::ZeroDuration(); }
  // A new keep-alive for a waiting pool, counted from review.available_since
  // (not from now), or nullopt to keep review.keep_alive. Asked at each
  // ReviewPeriod() while the pool is Available and its end is still ahead; a
  // review due at or after the pool's end, or after it was Reused,
  // Terminated or given a keep-alive by WarmPoolManager::UpdateKeepAlive
  // (UpdateTrainingJob: the user's choice is not revised), is not asked.
  // The manager applies the answer within the limits KeepAlive's answer
  // gets: at most WarmPoolOptions::max_keep_alive, never past the cluster's
  // WarmPoolOptions::max_chain_life. A policy bound
  // to the job's request (as JobRequested is) answers at most
  // review.requested. An answer of zero or less, or one whose end is already
  // past, ends the pool at once: its owner shows Terminated, billed for the
  // time it was Available, until now. The default keeps every keep-alive.
  virtual std::optional<absl::Duration> Review(const KeepAliveReview& review) {
    return std::nullopt;
  }
};

// The service's behaviour: keep for the job's own KeepAlivePeriodInSeconds.
std::unique_ptr<KeepAlivePolicy> NewJobRequestedKeepAlive();
// Every eligible job takes part and is kept for `keep_alive`.
std::unique_ptr<KeepAlivePolicy> NewFixedKeepAlive(absl::Duration keep_alive);
// No warm pools at all.
std::unique_ptr<KeepAlivePolicy> NewNeverKeepAlive();

struct AdaptiveHistogramOptions {
  // Histogram bins of idle gaps, and its range. Gaps of `range` or more are
  // counted in no bin: no keep-alive this policy gives catches them.
  absl::Duration bin_width = absl::Minutes(1);
  absl::Duration range = absl::Hours(6);
  // Keep until this percentile of the observed gaps, plus the margin; when
  // fewer than that are shorter than `range`, until the longest that is.
  double percentile = 0.99;
  double margin = 0.10;
  // Until a shape has this many observed gaps, keep for `fallback`.
  int min_samples = 10;
  absl::Duration fallback = absl::Minutes(10);
  // When positive, a waiting pool's keep-alive is decided again every
  // `review_every` (KeepAlivePolicy::Review) from the histogram as it stands
  // then, so pools kept under gaps that have since shifted follow the new
  // ones. Zero: decided once, when the pool becomes Available.
  absl::Duration review_every = absl::ZeroDuration();

  // The most bins a histogram may have (range / bin_width): at most 8 MiB of counts per cluster
  // shape. A shape holds counts only up to the bin of its longest gap shorter than `range`.
  static constexpr int64_t kMaxBins = int64_t{1} << 20;
  // OK, or InvalidArgument naming the first member out of its range: bin_width and range finite
  // and positive, range at least bin_width and at most kMaxBins bins, percentile in (0, 1],
  // margin finite and not negative, min_samples not negative, fallback and review_every finite
  // and not negative. NewAdaptiveHistogramKeepAlive requires options that pass.
  absl::Status Check() const;
};
// Per cluster shape, a histogram of the idle gaps between a pool becoming
// Available and the arrival of the job of that shape that would reuse it: the
// next job for the pool that became Available last (the manager gives the
// newest pool), a later one for each older pool. A gap runs on when its pool
// expires or is released before that job, so gaps longer than the keep-alive
// given are learnt too. Keeps a cluster until a tail percentile of that
// histogram (the hybrid-histogram policy of "Serverless in the Wild", ATC'20,
// applied to clusters). With options.review_every, a waiting pool's
// keep-alive follows the histogram as it changes. Every eligible job takes
// part. REQUIRES:
// options.Check() is OK (checked: a failing one aborts with its message,
// rather than sizing a histogram from nonsense).
std::unique_ptr<KeepAlivePolicy> NewAdaptiveHistogramKeepAlive(
    AdaptiveHistogramOptions options = {});

// What the engine tells the manager about a job, at creation.
struct WarmPoolJob {
  std::string_view name;
  // The job's request, without its TrainingJobName (the name is `name`).
  const v1::CreateTrainingJobRequest& request;
};

// A job's record in a WarmPoolManager as plain data (WarmPoolManager::Save),
// for a journal (kiln/journal.h) to keep and a later engine to restore
// (WarmPoolManager::Restore).
struct WarmPoolRecord {
  std::string status;  // WarmPoolStatus.Status: InUse, Available, Reused or Terminated
  // ResourceRetainedBillableTimeInSeconds, once Reused or Terminated.
  std::optional<int32_t> retained_seconds;
  std::string reused_by;        // ReusedByJob
  std::string not_kept_reason;  // NotKeptReason
  // When the cluster the job holds or held was launched cold (the start of
  // its WarmPoolOptions::max_chain_life); InfinitePast: not launched yet.
  absl::Time chain_start = absl::InfinitePast();
  // Available only: the retained cluster, when it became Available, when its
  // keep-alive ends, and whether that end was set by UpdateKeepAlive (then
  // the policy does not review it).
  std::optional<Cluster> cluster;
  absl::Time available_since = absl::InfinitePast();
  absl::Time expires_at = absl::InfinitePast();
  bool keep_alive_updated = false;
};

// Holds retained clusters. The engine calls it at each step of a job; a
// custom orchestrator may call it directly, in any order.
//
// Records: the manager keeps one record per job name, from an OnJobCreated
// that returns true until OnJobDeleted. A record is InUse until the job ends,
// then Available, Reused or Terminated; it never goes back to InUse. A call
// naming a job with no record (never created, taking no part, or deleted) is
// answered as each method says and changes nothing; so is a call that does
// not fit the record's state (a second OnJobEnded, Acquire after the end).
// Loop thread only.
class WarmPoolManager {
 public:
  virtual ~WarmPoolManager() = default;

  // A job was accepted. Returns whether it takes part in warm pools (true: the
  // manager now holds its record, InUse).
  // Errors: AlreadyExists when the manager holds a record of `job.name`, in
  // any state (a name is unique until OnJobDeleted, as the service's are):
  // nothing changes; delete the earlier job first (releasing an Available
  // pool first, as OnJobDeleted requires). The engine never makes this call
  // for a name it holds; it fails CreateTrainingJob with any error returned.
  virtual absl::StatusOr<bool> OnJobCreated(const WarmPoolJob& job) = 0;

  // For a taking-part job about to provision: returns a retained cluster that
  // matches (now InUse by `job`; the previous owner shows Reused), or nullopt.
  // Also nullopt, changing nothing, when `job` has no InUse record (unknown,
  // or already ended). A job whose attempt ended early may call it again for
  // its next attempt.
  virtual std::optional<Cluster> Acquire(std::string_view job) = 0;

  // The job's cluster was provisioned cold. Ignored unless `job` has an InUse
  // record.
  virtual void OnClusterLaunched(std::string_view job, const Cluster& cluster) = 0;

  // The job ended. `cluster` is its cluster (empty if it never had one);
  // `healthy` is false when the cluster may be unhealthy. Returns true when the
  // manager keeps the cluster: it is then Available, the manager has taken it
  // (moved it out of `cluster`, leaving it empty) and told the provider
  // (ClusterProvider::Recycle), and it releases it with the provider when the
  // pool ends. Returns false, with `cluster` untouched, when the engine should
  // release it. Only the first end counts: for a job with no InUse record
  // (unknown, or ended already) it returns false and changes nothing, so a
  // second call never makes a second pool or revives a final status.
  virtual bool OnJobEnded(std::string_view job, std::optional<Cluster>& cluster,
                          bool healthy) = 0;

  // An instance of `cluster`, which no job holds, was lost
  // (ClusterListener::OnInstanceLost). If the cluster is one the manager
  // retains, its pool is no longer healthy: the manager ends it at once (its
  // owner shows Terminated, billed until now) and releases the cluster with
  // the provider; a later job never gets it. A no-op for any other cluster.
  virtual void OnClusterLost(const Cluster& cluster) = 0;

  // UpdateTrainingJob: sets the keep-alive of the job's Available pool,
  // counted from when it became Available; zero (or a time already past)
  // terminates it now. Errors: FailedPrecondition when the job's pool is not
  // Available, or the job has no record (the message says which).
  virtual absl::Status UpdateKeepAlive(std::string_view job, absl::Duration keep_alive) = 0;

  // The job's WarmPoolStatus, or nullopt when it has no record (takes no
  // part, unknown, or deleted).
  virtual std::optional<v1::WarmPoolStatus> Status(std::string_view job) const = 0;

  // Why the job's cluster was not kept, when a cap or quota prevented it
  // (empty otherwise). Describe shows it in the final status message.
  virtual std::string NotKeptReason(std::string_view job) const { return ""; }

  // The job's record is being erased (DeleteTrainingJob); its name may then
  // be created again. OK, changing nothing, for a job with no record (unknown,
  // or deleted already). Errors: FailedPrecondition while the job's pool is
  // Available (nothing changes; release it with UpdateKeepAlive 0 first).
  virtual absl::Status OnJobDeleted(std::string_view job) = 0;

  // Releases every retained cluster (engine shutdown).
  virtual void ReleaseAll() = 0;

  // Durable warm pools (an engine with a journal, kiln/journal.h). A manager
  // that does not support them keeps the defaults: Save gives nothing,
  // Restore is Unimplemented, and its pools do not outlive its engine.

  // The job's record as plain data, or nullopt when it has none.
  virtual std::optional<WarmPoolRecord> Save(std::string_view job) const { return std::nullopt; }

  // Takes back the record `record` of job `job` that an earlier manager
  // saved (Save), without asking the policy (the job arrived before). An
  // Available record with its cluster becomes an Available pool again: the
  // cluster is the manager's (the caller has taken it back from the
  // provider, ClusterProvider::Reattach), matched and expired as before,
  // ending at record.expires_at; if that is not after now, it ends at once,
  // Terminated, billed until record.expires_at, and the cluster is released.
  // An Available record without a cluster (its instances could not be taken
  // back) ends Terminated at once, as after OnClusterLost: billed until now,
  // or until record.expires_at when that is earlier. Other records are kept
  // as they are. Pools restored in the order they became Available are
  // matched as if they had never left (the caller restores them so).
  // Errors: AlreadyExists as OnJobCreated; InvalidArgument for a status this
  // manager does not know; Unimplemented by default. Nothing changes on error.
  virtual absl::Status Restore(const WarmPoolJob& job, WarmPoolRecord record) {
    return absl::UnimplementedError("this WarmPoolManager does not restore warm pools");
  }

  // Sets the function called with a job's name each time its record changes
  // in a way Save shows, other than through OnJobCreated or Restore (e.g. a
  // pool expires on a timer, or another job reuses it); null stops it. Called
  // on the loop thread, from inside the manager's call or timer: it must not
  // call the manager. Default: the manager never calls it.
  virtual void SetChangeListener(std::function<void(std::string_view job)> listener) {}
};

struct WarmPoolOptions {
  // Null means NewJobRequestedKeepAlive().
  std::shared_ptr<KeepAlivePolicy> policy;
  // The longest keep-alive one job gets (the model's maximum by default).
  absl::Duration max_keep_alive = absl::Seconds(21600);
  // The longest one cluster stays pooled across a chain of reusing jobs,
  // counted from its cold launch.
  absl::Duration max_chain_life = absl::Hours(28 * 24);
  // Warm-pool quota in instances per instance type; types not listed have no
  // limit. A pool that would exceed it is not kept.
  std::map<std::string, int32_t> quota_instances;
};

// The default manager. `loop` and `provider` must outlive it; it releases
// expired clusters through `provider`. Acquire's cost does not grow with the
// number of Available pools of other shapes than the job's, however many are
// retained.
std::unique_ptr<WarmPoolManager> NewWarmPoolManager(EventLoop& loop, ClusterProvider& provider,
                                                    WarmPoolOptions options = {});

}  // namespace kiln

#endif  // KILN_WARM_POOL_H_
