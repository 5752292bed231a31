#include "kiln/warm_pool.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/time_math.h"

namespace kiln {
namespace {

constexpr char kInUse[] = "InUse";
constexpr char kAvailable[] = "Available";
constexpr char kReused[] = "Reused";
constexpr char kTerminated[] = "Terminated";

// Seconds a pool was retained, as the service bills them: rounded up.
int32_t RetainedSeconds(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  // In nanoseconds (saturating, beyond 292 years), not absl::Ceil, which
  // costs ~200 instructions on Debian's Abseil.
  const int64_t ns = internal::DurationNanos(d);
  const int64_t seconds = ns / 1000000000 + (ns % 1000000000 != 0 ? 1 : 0);
  return static_cast<int32_t>(std::min<int64_t>(seconds, INT32_MAX));
}

std::string SecondsText(absl::Duration d) { return absl::StrCat(absl::ToInt64Seconds(d), " s"); }

class JobRequestedKeepAlive final : public KeepAlivePolicy {
 public:
  absl::Duration KeepAlive(const KeepAliveQuery& q) override { return q.requested; }
  std::string Name() const override { return "JobRequested"; }
};

class FixedKeepAlive final : public KeepAlivePolicy {
 public:
  explicit FixedKeepAlive(absl::Duration d) : keep_alive_(d) {}
  bool Participates(const KeepAliveQuery&) override { return keep_alive_ > absl::ZeroDuration(); }
  absl::Duration KeepAlive(const KeepAliveQuery&) override { return keep_alive_; }
  std::string Name() const override {
    return absl::StrCat("Fixed(", SecondsText(keep_alive_), ")");
  }

 private:
  absl::Duration keep_alive_;
};

class NeverKeepAlive final : public KeepAlivePolicy {
 public:
  bool Participates(const KeepAliveQuery&) override { return false; }
  absl::Duration KeepAlive(const KeepAliveQuery&) override { return absl::ZeroDuration(); }
  std::string Name() const override { return "Never"; }
};

class AdaptiveHistogramKeepAlive final : public KeepAlivePolicy {
 public:
  explicit AdaptiveHistogramKeepAlive(AdaptiveHistogramOptions o) : options_(o) {
    bins_ = static_cast<size_t>(std::max<int64_t>(1, options_.range / options_.bin_width));
  }

  bool Participates(const KeepAliveQuery&) override { return true; }

  absl::Duration KeepAlive(const KeepAliveQuery& q) override {
    auto it = shapes_.find(q.shape.Key());
    if (it == shapes_.end() || it->second.samples < options_.min_samples) return options_.fallback;
    const Histogram& h = it->second;
    // The smallest bin edge below which `percentile` of the gaps fall. No
    // keep-alive this policy gives catches a gap of `range` or more, so those
    // gaps never make it keep longer: when fewer than `percentile` of the gaps
    // are shorter, it keeps until the longest of them. (When none is, one bin
    // rather than none: a pool not kept is never Available, so it would
    // measure no more gaps.)
    const double wanted = std::min(options_.percentile * static_cast<double>(h.samples),
                                   static_cast<double>(h.samples - h.beyond_range));
    // (The loop stops within `counts`: `wanted` is at most the gaps in it.)
    double seen = 0;
    size_t bin = 0;
    for (; bin < h.counts.size(); ++bin) {
      seen += h.counts[bin];
      if (seen >= wanted) break;
    }
    const absl::Duration edge = options_.bin_width * static_cast<int64_t>(bin + 1);
    return std::min(edge * (1.0 + options_.margin), options_.range);
  }

  void OnPoolAvailable(const PoolShape& shape, absl::Time time) override {
    shapes_[shape.Key()].open.push_back(time);
  }

  // A gap lasts until the job that would reuse the pool, had it been kept:
  // one job takes one pool, the one that became Available last (as the
  // manager gives them), and the others wait on for later jobs. A gap runs
  // on after its pool expires or is released: that is how gaps longer than
  // the keep-alive given are learnt. (Ending it with the pool would show the
  // policy only gaps shorter than the keep-alives it gives.)
  void OnJobArrived(const PoolShape& shape, absl::Time time) override {
    Histogram& h = shapes_[shape.Key()];
    if (h.open.empty()) return;
    const absl::Duration gap = time - h.open.back();
    h.open.pop_back();
    ++h.samples;
    if (gap >= options_.range) {
      ++h.beyond_range;
      return;
    }
    const size_t bin =
        static_cast<size_t>(std::clamp<int64_t>(gap / options_.bin_width, 0, bins_ - 1));
    if (bin >= h.counts.size()) {
      // Doubling, but never past the last bin.
      h.counts.reserve(std::min(bins_, std::max(bin + 1, 2 * h.counts.size())));
      h.counts.resize(bin + 1, 0);
    }
    ++h.counts[bin];
  }

  std::string Name() const override {
    if (options_.review_every > absl::ZeroDuration()) {
      return absl::StrCat("AdaptiveHistogram(p", options_.percentile * 100, ", review ",
                          SecondsText(options_.review_every), ")");
    }
    return absl::StrCat("AdaptiveHistogram(p", options_.percentile * 100, ")");
  }

  absl::Duration ReviewPeriod() const override { return options_.review_every; }

  // The keep-alive the histogram gives a pool of this shape now.
  std::optional<absl::Duration> Review(const KeepAliveReview& r) override {
    return KeepAlive({r.job_name, r.shape, r.requested, r.now});
  }

 private:
  struct Histogram {
    // Gaps shorter than `range`, by bin, up to the last bin with a gap: a
    // shape whose pools were never reused within the range holds none.
    std::vector<int64_t> counts;
    int64_t samples = 0;           // every gap
    int64_t beyond_range = 0;      // gaps of `range` or more, in no bin
    // When each pool whose gap no job has ended yet became Available, oldest
    // first; its pool may have ended since. Under the manager at most the
    // most jobs of the shape that ran at once: a job ends one gap as it
    // arrives, if there is one, and opens at most one when it ends.
    std::vector<absl::Time> open;
  };
  AdaptiveHistogramOptions options_;
  size_t bins_;
  absl::flat_hash_map<std::string, Histogram> shapes_;
};

// A request's shape before any PoolShape is built from it: the members as the
// request holds them. Only a request whose VPC lists are already sorted sets
// (ascending, no repeats) has a view (a PoolShape keeps them so); the others
// build their PoolShape.
struct ShapeView {
  const v1::CreateTrainingJobRequest* request;
};

template <typename Strings>
bool IsSortedSet(const Strings& strings) {
  return std::adjacent_find(strings.begin(), strings.end(),
                            [](const std::string& a, const std::string& b) { return a >= b; }) ==
         strings.end();
}

std::optional<ShapeView> ViewOf(const v1::CreateTrainingJobRequest& request) {
  if (!IsSortedSet(request.vpc_config().subnets()) ||
      !IsSortedSet(request.vpc_config().security_group_ids())) {
    return std::nullopt;
  }
  return ShapeView{&request};
}

// `strings` as a set: sorted, each once.
void SortedSet(std::vector<std::string>& strings) {
  std::sort(strings.begin(), strings.end());
  strings.erase(std::unique(strings.begin(), strings.end()), strings.end());
}

// One hash for a PoolShape and for the view of a request of that shape.
template <typename Strings>
size_t HashShape(std::string_view role_arn, std::string_view instance_type,
                 int32_t instance_count, int32_t volume_size_in_gb,
                 std::string_view volume_kms_key_id, const Strings& subnets,
                 const Strings& security_groups, bool encryption, bool isolation) {
  auto key = [](std::string_view s) { return absl::string_view(s.data(), s.size()); };
  size_t h = absl::HashOf(key(role_arn), key(instance_type), instance_count, volume_size_in_gb,
                          key(volume_kms_key_id), encryption, isolation,
                          static_cast<size_t>(subnets.size()),
                          static_cast<size_t>(security_groups.size()));
  for (const std::string& s : subnets) h = absl::HashOf(h, key(s));
  for (const std::string& s : security_groups) h = absl::HashOf(h, key(s));
  return h;
}

template <typename A, typename B>
bool SameStrings(const A& a, const B& b) {
  return static_cast<size_t>(a.size()) == static_cast<size_t>(b.size()) &&
         std::equal(a.begin(), a.end(), b.begin());
}

// Hashes and compares PoolShapes and ShapeViews alike, so that a job whose
// shape is interned already finds it without building one.
struct PoolShapeHash {
  using is_transparent = void;
  size_t operator()(const PoolShape& s) const {
    return HashShape(s.role_arn, s.instance_type, s.instance_count, s.volume_size_in_gb,
                     s.volume_kms_key_id, s.subnets, s.security_groups,
                     s.inter_container_traffic_encryption, s.network_isolation);
  }
  size_t operator()(const ShapeView& v) const {
    const v1::CreateTrainingJobRequest& r = *v.request;
    const auto& rc = r.resource_config();
    return HashShape(r.role_arn(), rc.instance_type(), rc.instance_count(),
                     rc.volume_size_in_gb(), rc.volume_kms_key_id(), r.vpc_config().subnets(),
                     r.vpc_config().security_group_ids(),
                     r.enable_inter_container_traffic_encryption(), r.enable_network_isolation());
  }
};

struct PoolShapeEq {
  using is_transparent = void;
  bool operator()(const PoolShape& a, const PoolShape& b) const { return a == b; }
  bool operator()(const PoolShape& s, const ShapeView& v) const {
    const v1::CreateTrainingJobRequest& r = *v.request;
    const auto& rc = r.resource_config();
    return s.role_arn == r.role_arn() && s.instance_type == rc.instance_type() &&
           s.instance_count == rc.instance_count() &&
           s.volume_size_in_gb == rc.volume_size_in_gb() &&
           s.volume_kms_key_id == rc.volume_kms_key_id() &&
           SameStrings(s.subnets, r.vpc_config().subnets()) &&
           SameStrings(s.security_groups, r.vpc_config().security_group_ids()) &&
           s.inter_container_traffic_encryption == r.enable_inter_container_traffic_encryption() &&
           s.network_isolation == r.enable_network_isolation();
  }
  bool operator()(const ShapeView& v, const PoolShape& s) const { return (*this)(s, v); }
};

class DefaultWarmPoolManager final : public WarmPoolManager {
 public:
  DefaultWarmPoolManager(EventLoop& loop, ClusterProvider& provider, WarmPoolOptions options)
      : loop_(loop), provider_(provider), options_(std::move(options)) {
    if (options_.policy == nullptr) options_.policy = NewJobRequestedKeepAlive();
    review_period_ = std::max(options_.policy->ReviewPeriod(), absl::ZeroDuration());
  }

  ~DefaultWarmPoolManager() override { ReleaseAll(); }

  absl::StatusOr<bool> OnJobCreated(const WarmPoolJob& job) override {
    // Before anything else: replacing a record would leave its pool (owned
    // by name) billing the new job, and drop its shape under that pool.
    // (An engine whose jobs take no part keeps no record: no name to hash.)
    if (auto it = jobs_.empty() ? jobs_.end() : jobs_.find(Key(job.name)); it != jobs_.end()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "the warm-pool manager already holds a record of training job '",
          std::string(job.name), "' (", it->second.status,
          "); a job name is unique until OnJobDeleted",
          it->second.status == kAvailable ? ", which needs the Available pool released first"
                                          : ""));
    }
    const auto& rc = job.request.resource_config();
    // Heterogeneous clusters and spot jobs never use warm pools.
    if (rc.instance_groups_size() > 0 || job.request.enable_managed_spot_training()) return false;
    // The interned shape when there is one (usually: jobs come in sweeps and
    // series), else the one built last if the job has it (jobs that take
    // no part have no interned shape); built only for a new shape.
    Shape interned = nullptr;
    const std::optional<ShapeView> view = ViewOf(job.request);
    if (view && !shapes_.empty()) {
      auto found = shapes_.find(*view);
      if (found != shapes_.end()) interned = &*found;
    }
    if (interned == nullptr && !(view && last_built_ && PoolShapeEq()(*last_built_, *view))) {
      last_built_ = PoolShape::Of(job.request);
    }
    const PoolShape& shape = interned != nullptr ? interned->first : *last_built_;
    const absl::Duration requested = absl::Seconds(rc.keep_alive_period_in_seconds());
    if (!options_.policy->Participates({job.name, shape, requested, loop_.Now()})) return false;
    options_.policy->OnJobArrived(shape, loop_.Now());
    JobState& s = jobs_[std::string(job.name)];  // new: refused above otherwise
    s.shape = interned != nullptr ? Retain(interned) : InternShape(*last_built_);
    s.requested = requested;
    s.status = kInUse;
    return true;
  }

  std::optional<Cluster> Acquire(std::string_view job) override {
    JobState* s = FindInUse(job);
    if (s == nullptr) return std::nullopt;
    const absl::Time now = loop_.Now();
    auto available = available_.find(s->shape);
    if (available == available_.end()) return std::nullopt;
    // The pool available most recently (ties: the older pool) and not expired
    // yet. Ids ascend, and so do the times they became available: from the
    // back, the first unexpired pool has the latest time, and the ones just
    // before it with the same time are older.
    Pool* best = nullptr;
    const std::vector<uint64_t>& ids = available->second;
    for (auto id = ids.rbegin(); id != ids.rend(); ++id) {
      Pool& pool = pools_.at(*id);
      if (now >= pool.expires_at) continue;  // its expiry is due now and has not run yet
      if (best != nullptr && pool.available_since < best->available_since) break;
      best = &pool;
    }
    if (best == nullptr) return std::nullopt;
    JobState& owner = jobs_.at(best->owner_job);
    owner.status = kReused;
    owner.reused_by = std::string(job);
    owner.retained_seconds = RetainedSeconds(internal::Minus(now, best->available_since));
    loop_.Cancel(best->expiry);
    loop_.Cancel(best->review);
    s->chain_start = best->chain_start;
    Cluster cluster = std::move(best->cluster);
    Changed(best->owner_job);
    Changed(job);
    ErasePool(best->id);
    return cluster;
  }

  void OnClusterLaunched(std::string_view job, const Cluster& cluster) override {
    if (JobState* s = FindInUse(job)) {
      s->chain_start = loop_.Now();
      Changed(job);
    }
  }

  bool OnJobEnded(std::string_view job, std::optional<Cluster>& cluster, bool healthy) override {
    JobState* s = FindInUse(job);
    if (s == nullptr) return false;
    const absl::Time now = loop_.Now();
    auto terminate = [&](std::string reason) {
      s->status = kTerminated;
      s->retained_seconds = 0;
      s->not_kept_reason = std::move(reason);
      Changed(job);
      return false;
    };
    if (!cluster || !healthy) return terminate("");
    const absl::Duration keep =
        std::min(options_.policy->KeepAlive({job, s->shape->first, s->requested, now}),
                 options_.max_keep_alive);
    if (keep <= absl::ZeroDuration()) return terminate("");
    const absl::Time chain_end = internal::Plus(s->chain_start, options_.max_chain_life);
    if (chain_end <= now) {
      return terminate(absl::StrCat("the cluster reached the maximum warm-pool life of ",
                                    SecondsText(options_.max_chain_life)));
    }
    const PoolShape& shape = s->shape->first;
    auto quota = options_.quota_instances.find(shape.instance_type);
    if (quota != options_.quota_instances.end()) {
      int64_t held = 0;
      for (const auto& [id, pool] : pools_) {
        if (pool.shape->first.instance_type == shape.instance_type) {
          held += pool.shape->first.instance_count;
        }
      }
      if (held + shape.instance_count > quota->second) {
        return terminate(absl::StrCat("the warm-pool quota for ", shape.instance_type, " (",
                                      quota->second, " instances) is in use"));
      }
    }
    const uint64_t id = ++next_pool_;
    Pool& pool = pools_[id];
    pool.id = id;
    pool.cluster = std::move(*cluster);
    cluster.reset();
    pool.shape = s->shape;
    pool.owner_job = std::string(job);
    pool.available_since = now;
    pool.chain_start = s->chain_start;
    available_[s->shape].push_back(id);  // ids ascend: the list stays sorted
    s->status = kAvailable;
    s->retained_seconds.reset();  // (final once Reused or Terminated)
    s->pool_id = id;
    Schedule(pool, std::min(internal::Plus(now, keep), chain_end));
    ScheduleReview(pool);
    provider_.Recycle(pool.cluster);
    options_.policy->OnPoolAvailable(shape, now);
    Changed(job);
    return true;
  }

  void OnClusterLost(const Cluster& cluster) override {
    for (const auto& [id, pool] : pools_) {
      if (pool.cluster.id == cluster.id) {
        Expire(id);
        return;
      }
    }
  }

  absl::Status UpdateKeepAlive(std::string_view job, absl::Duration keep_alive) override {
    JobState* s = Find(job);
    if (s == nullptr || s->status != kAvailable) {
      return absl::FailedPreconditionError(absl::StrCat(
          "KeepAlivePeriodInSeconds can only be updated while the training job's warm pool is "
          "Available; the warm pool of training job '",
          std::string(job), "' is ", s == nullptr ? "absent" : s->status));
    }
    Pool& pool = pools_.at(s->pool_id);
    const absl::Time expires =
        std::min(pool.available_since + std::min(keep_alive, options_.max_keep_alive),
                 pool.chain_start + options_.max_chain_life);
    if (keep_alive <= absl::ZeroDuration() || expires <= loop_.Now()) {
      Expire(pool.id);
      return absl::OkStatus();
    }
    loop_.Cancel(pool.expiry);
    loop_.Cancel(pool.review);  // the user's keep-alive is not revised
    pool.keep_alive_updated = true;
    Schedule(pool, expires);
    Changed(job);
    return absl::OkStatus();
  }

  std::optional<v1::WarmPoolStatus> Status(std::string_view job) const override {
    auto it = jobs_.find(Key(job));
    if (it == jobs_.end()) return std::nullopt;
    const JobState& s = it->second;
    v1::WarmPoolStatus status;
    status.set_status(s.status);
    if (s.retained_seconds) {
      status.set_resource_retained_billable_time_in_seconds(*s.retained_seconds);
    }
    if (!s.reused_by.empty()) status.set_reused_by_job(s.reused_by);
    return status;
  }

  std::string NotKeptReason(std::string_view job) const override {
    auto it = jobs_.find(Key(job));
    return it == jobs_.end() ? "" : it->second.not_kept_reason;
  }

  absl::Status OnJobDeleted(std::string_view job) override {
    auto it = jobs_.find(Key(job));
    if (it == jobs_.end()) return absl::OkStatus();
    if (it->second.status == kAvailable) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Training job '", std::string(job),
          "' cannot be deleted while its warm pool is Available; release it first "
          "(UpdateTrainingJob with KeepAlivePeriodInSeconds 0)"));
    }
    ReleaseShape(it->second.shape);
    jobs_.erase(it);
    return absl::OkStatus();
  }

  void ReleaseAll() override {
    std::vector<uint64_t> ids;
    for (const auto& [id, pool] : pools_) ids.push_back(id);
    for (uint64_t id : ids) Expire(id);
  }

  [[gnu::cold]] std::optional<WarmPoolRecord> Save(std::string_view job) const override {
    auto it = jobs_.find(Key(job));
    if (it == jobs_.end()) return std::nullopt;
    const JobState& s = it->second;
    WarmPoolRecord r;
    r.status = s.status;
    r.retained_seconds = s.retained_seconds;
    r.reused_by = s.reused_by;
    r.not_kept_reason = s.not_kept_reason;
    r.chain_start = s.chain_start;
    if (s.status == kAvailable) {
      const Pool& pool = pools_.at(s.pool_id);
      r.cluster = pool.cluster;
      r.available_since = pool.available_since;
      r.expires_at = pool.expires_at;
      r.keep_alive_updated = pool.keep_alive_updated;
    }
    return r;
  }

  [[gnu::cold]] absl::Status Restore(const WarmPoolJob& job, WarmPoolRecord r) override {
    if (auto it = jobs_.find(Key(job.name)); it != jobs_.end()) {
      return absl::AlreadyExistsError(
          absl::StrCat("the warm-pool manager already holds a record of training job '",
                       std::string(job.name), "' (", it->second.status, ")"));
    }
    const char* status = nullptr;
    for (const char* known : {kInUse, kAvailable, kReused, kTerminated}) {
      if (r.status == known) status = known;
    }
    if (status == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("warm pool of training job '",
                                                     std::string(job.name), "': unknown status '",
                                                     r.status, "'"));
    }
    if (job.request.resource_config().instance_groups_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "warm pool of training job '", std::string(job.name),
          "': a heterogeneous cluster (InstanceGroups) never takes part in warm pools"));
    }
    Shape shape = nullptr;
    if (const std::optional<ShapeView> view = ViewOf(job.request); view && !shapes_.empty()) {
      auto found = shapes_.find(*view);
      if (found != shapes_.end()) shape = Retain(&*found);
    }
    if (shape == nullptr) shape = InternShape(PoolShape::Of(job.request));
    const std::string name(job.name);
    JobState& s = jobs_[name];
    s.shape = shape;
    s.requested = absl::Seconds(job.request.resource_config().keep_alive_period_in_seconds());
    s.status = status;
    s.retained_seconds = r.retained_seconds;
    s.reused_by = std::move(r.reused_by);
    s.not_kept_reason = std::move(r.not_kept_reason);
    s.chain_start = r.chain_start;
    if (status != kAvailable) return absl::OkStatus();
    const absl::Time now = loop_.Now();
    if (!r.cluster) {
      // Its instances are gone: ended as a lost cluster ends.
      s.status = kTerminated;
      s.retained_seconds =
          RetainedSeconds(internal::Minus(std::min(now, r.expires_at), r.available_since));
      Changed(name);
      return absl::OkStatus();
    }
    const uint64_t id = ++next_pool_;
    Pool& pool = pools_[id];
    pool.id = id;
    pool.cluster = std::move(*r.cluster);
    pool.shape = shape;
    pool.owner_job = name;
    pool.available_since = r.available_since;
    pool.chain_start = r.chain_start;
    pool.keep_alive_updated = r.keep_alive_updated;
    available_[shape].push_back(id);  // ids ascend: the list stays sorted
    s.pool_id = id;
    s.retained_seconds.reset();
    Schedule(pool, r.expires_at);
    if (r.expires_at <= now) {
      Expire(id);  // its keep-alive ran out meanwhile: billed until then
      return absl::OkStatus();
    }
    if (!pool.keep_alive_updated && review_period_ > absl::ZeroDuration()) {
      // The next review of its cadence, counted from when it became Available.
      const int64_t periods = (now - pool.available_since) / review_period_ + 1;
      const absl::Time at = internal::Plus(pool.available_since, review_period_ * periods);
      if (at < pool.expires_at) {
        pool.review = loop_.ScheduleAt(at, [this, id] { Review(id); });
      }
    }
    return absl::OkStatus();
  }

  void SetChangeListener(std::function<void(std::string_view job)> listener) override {
    listener_ = std::move(listener);
  }

  // Tells the listener (set: an engine with a journal) of a change to job's
  // record. The call is out of line, off the simulator's path.
  void Changed(std::string_view job) {
    if (listener_) [[unlikely]]
      Notify(job);
  }
  [[gnu::cold, gnu::noinline]] void Notify(std::string_view job) { listener_(job); }

 private:
  // An interned shape: its entry in shapes_ (the shape, and how many jobs in
  // jobs_ have it).
  using Shape = std::pair<const PoolShape, int64_t>*;

  struct JobState {
    Shape shape = nullptr;
    absl::Duration requested;
    const char* status = kInUse;
    std::optional<int32_t> retained_seconds;
    std::string reused_by;
    std::string not_kept_reason;
    absl::Time chain_start;
    uint64_t pool_id = 0;
  };
  struct Pool {
    uint64_t id = 0;
    Cluster cluster;
    Shape shape = nullptr;  // its owner's
    std::string owner_job;
    absl::Time available_since;
    absl::Time expires_at;
    absl::Time chain_start;
    bool keep_alive_updated = false;  // by UpdateKeepAlive: not reviewed
    TimerHandle expiry;
    TimerHandle review;  // the next review, if the policy reviews
  };

  // (Debian's Abseil hashes absl::string_view, not std::string_view.)
  static absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

  // The interned copy of `shape`, counted as one more job's.
  Shape InternShape(PoolShape shape) {
    auto it = shapes_.try_emplace(std::move(shape), 0).first;
    ++it->second;
    return &*it;
  }
  // `shape`, interned already, counted as one more job's.
  Shape Retain(Shape shape) {
    ++shape->second;
    return shape;
  }

  // Drops one job's count of `shape`; forgets the shape with the last. A
  // pool's shape is its owner's, whose state outlives the pool.
  void ReleaseShape(Shape shape) {
    if (shape == nullptr || --shape->second > 0) return;
    shapes_.erase(shape->first);
  }

  // Removes pool `id` from pools_ and from its shape's available list.
  void ErasePool(uint64_t id) {
    auto it = pools_.find(id);
    auto list = available_.find(it->second.shape);
    std::vector<uint64_t>& ids = list->second;
    ids.erase(std::lower_bound(ids.begin(), ids.end(), id));
    if (ids.empty()) available_.erase(list);
    pools_.erase(it);
  }

  JobState* Find(std::string_view job) {
    auto it = jobs_.find(Key(job));
    return it == jobs_.end() ? nullptr : &it->second;
  }
  // The job's record while the job runs: only then may it take a pool, launch
  // or end (an ended job's record is final, and an Available one owns a pool).
  JobState* FindInUse(std::string_view job) {
    JobState* s = Find(job);
    return s != nullptr && s->status == kInUse ? s : nullptr;
  }

  void Schedule(Pool& pool, absl::Time expires) {
    pool.expires_at = expires;
    pool.expiry = loop_.ScheduleAt(expires, [this, id = pool.id] { Expire(id); });
  }

  // Schedules the pool's next review, one period from now, unless the policy
  // does not review or the pool ends by then.
  void ScheduleReview(Pool& pool) {
    if (review_period_ <= absl::ZeroDuration()) return;
    const absl::Time at = internal::Plus(loop_.Now(), review_period_);
    if (at >= pool.expires_at) return;
    pool.review = loop_.ScheduleAt(at, [this, id = pool.id] { Review(id); });
  }

  // Asks the policy about Available pool `id` again and applies its answer
  // within the limits of a first decision.
  void Review(uint64_t id) {
    auto it = pools_.find(id);
    if (it == pools_.end()) return;
    Pool& pool = it->second;
    const JobState& owner = jobs_.at(pool.owner_job);
    const absl::Time now = loop_.Now();
    const std::optional<absl::Duration> answer = options_.policy->Review(
        {pool.owner_job, pool.shape->first, owner.requested, pool.available_since,
         pool.expires_at - pool.available_since, now});
    if (answer) {
      const absl::Time expires =
          std::min(internal::Plus(pool.available_since, std::min(*answer, options_.max_keep_alive)),
                   internal::Plus(pool.chain_start, options_.max_chain_life));
      if (*answer <= absl::ZeroDuration() || expires <= now) {
        Expire(id);  // billed until now
        return;
      }
      if (expires != pool.expires_at) {
        loop_.Cancel(pool.expiry);
        Schedule(pool, expires);
        Changed(pool.owner_job);
      }
    }
    ScheduleReview(pool);
  }

  // Terminates a pool: releases its cluster and bills its owner.
  void Expire(uint64_t id) {
    auto it = pools_.find(id);
    if (it == pools_.end()) return;
    Pool& pool = it->second;
    loop_.Cancel(pool.expiry);
    loop_.Cancel(pool.review);
    const absl::Time end = std::min(loop_.Now(), pool.expires_at);
    if (JobState* owner = Find(pool.owner_job)) {
      owner->status = kTerminated;
      owner->retained_seconds = RetainedSeconds(end - pool.available_since);
      Changed(pool.owner_job);
    }
    provider_.Release(pool.cluster);
    ErasePool(id);
  }

  EventLoop& loop_;
  ClusterProvider& provider_;
  WarmPoolOptions options_;
  absl::Duration review_period_;  // the policy's ReviewPeriod(); zero: no reviews
  absl::flat_hash_map<std::string, JobState> jobs_;
  std::map<uint64_t, Pool> pools_;  // by id: iteration order is creation order
  // Interned shapes -> the number of jobs in jobs_ with each. The map's nodes
  // do not move, so an entry's address names its shape: jobs and pools
  // compare shapes by pointer.
  absl::node_hash_map<PoolShape, int64_t, PoolShapeHash, PoolShapeEq> shapes_;
  // The shape OnJobCreated built last (for a job that did not find it interned).
  std::optional<PoolShape> last_built_;
  // Per shape, the ids of its pools in pools_, ascending.
  absl::flat_hash_map<Shape, std::vector<uint64_t>> available_;
  uint64_t next_pool_ = 0;
  std::function<void(std::string_view job)> listener_;  // SetChangeListener
};

}  // namespace

PoolShape PoolShape::Of(const v1::CreateTrainingJobRequest& request) {
  PoolShape s;
  const auto& rc = request.resource_config();
  s.role_arn = request.role_arn();
  s.instance_type = rc.instance_type();
  s.instance_count = rc.instance_count();
  s.volume_size_in_gb = rc.volume_size_in_gb();
  s.volume_kms_key_id = rc.volume_kms_key_id();
  s.subnets.assign(request.vpc_config().subnets().begin(), request.vpc_config().subnets().end());
  s.security_groups.assign(request.vpc_config().security_group_ids().begin(),
                           request.vpc_config().security_group_ids().end());
  SortedSet(s.subnets);
  SortedSet(s.security_groups);
  s.inter_container_traffic_encryption = request.enable_inter_container_traffic_encryption();
  s.network_isolation = request.enable_network_isolation();
  return s;
}

std::string PoolShape::Key() const {
  // '\n' cannot occur in any member (the model's patterns exclude it), so the
  // text is unambiguous.
  return absl::StrCat(role_arn, "\n", instance_type, "\n", instance_count, "\n",
                      volume_size_in_gb, "\n", volume_kms_key_id, "\n",
                      absl::StrJoin(subnets, ","), "\n", absl::StrJoin(security_groups, ","), "\n",
                      inter_container_traffic_encryption ? 1 : 0, network_isolation ? 1 : 0);
}

std::unique_ptr<KeepAlivePolicy> NewJobRequestedKeepAlive() {
  return std::make_unique<JobRequestedKeepAlive>();
}
std::unique_ptr<KeepAlivePolicy> NewFixedKeepAlive(absl::Duration keep_alive) {
  return std::make_unique<FixedKeepAlive>(keep_alive);
}
std::unique_ptr<KeepAlivePolicy> NewNeverKeepAlive() { return std::make_unique<NeverKeepAlive>(); }
absl::Status AdaptiveHistogramOptions::Check() const {
  auto bad = [](absl::string_view member, absl::string_view rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdaptiveHistogramOptions.", member, " must be ", rule));
  };
  const absl::Duration inf = absl::InfiniteDuration();
  if (bin_width <= absl::ZeroDuration() || bin_width == inf) {
    return bad("bin_width", "finite and positive");
  }
  if (range == inf || range < bin_width) return bad("range", "finite and at least bin_width");
  if (range / bin_width > kMaxBins) {
    return bad("range", absl::StrCat("at most ", kMaxBins, " times bin_width"));
  }
  if (!(percentile > 0 && percentile <= 1)) return bad("percentile", "in (0, 1]");
  if (!(margin >= 0 && margin < std::numeric_limits<double>::infinity())) {
    return bad("margin", "finite and not negative");
  }
  if (min_samples < 0) return bad("min_samples", "not negative");
  if (fallback < absl::ZeroDuration() || fallback == inf) {
    return bad("fallback", "finite and not negative");
  }
  if (review_every < absl::ZeroDuration() || review_every == inf) {
    return bad("review_every", "finite and not negative");
  }
  return absl::OkStatus();
}

std::unique_ptr<KeepAlivePolicy> NewAdaptiveHistogramKeepAlive(AdaptiveHistogramOptions options) {
  if (absl::Status checked = options.Check(); !checked.ok()) {
    std::fprintf(stderr, "kiln::NewAdaptiveHistogramKeepAlive: %s\n",
                 std::string(checked.message()).c_str());
    std::abort();
  }
  return std::make_unique<AdaptiveHistogramKeepAlive>(options);
}

std::unique_ptr<WarmPoolManager> NewWarmPoolManager(EventLoop& loop, ClusterProvider& provider,
                                                    WarmPoolOptions options) {
  return std::make_unique<DefaultWarmPoolManager>(loop, provider, std::move(options));
}

}  // namespace kiln
