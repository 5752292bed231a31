#include "journal_sqlite/internal/record_codec.h"

#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln::journal_sqlite::internal {
namespace {

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void U8(unsigned char v) { out_.push_back(static_cast<char>(v)); }
  void I64(int64_t v) {
    uint64_t u = static_cast<uint64_t>(v);
    char bytes[8];
    for (char& b : bytes) {
      b = static_cast<char>(u & 0xff);
      u >>= 8;
    }
    out_.append(bytes, sizeof bytes);
  }
  void Size(size_t n) {
    while (n >= 0x80) {
      U8(static_cast<unsigned char>(n | 0x80));
      n >>= 7;
    }
    U8(static_cast<unsigned char>(n));
  }
  void Str(std::string_view s) {
    Size(s.size());
    out_.append(s);
  }
  void Time(absl::Time t) {
    if (t == absl::InfinitePast()) return I64(std::numeric_limits<int64_t>::min());
    if (t == absl::InfiniteFuture()) return I64(std::numeric_limits<int64_t>::max());
    I64(absl::ToUnixNanos(t));
  }
  void Double(double d) {
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    I64(bits);
  }

 private:
  std::string& out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool done() const { return in_.empty(); }
  unsigned char U8() {
    if (in_.empty()) return Fail(), 0;
    const auto v = static_cast<unsigned char>(in_[0]);
    in_.remove_prefix(1);
    return v;
  }
  int64_t I64() {
    if (in_.size() < 8) return Fail(), 0;
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = u << 8 | static_cast<unsigned char>(in_[i]);
    in_.remove_prefix(8);
    return static_cast<int64_t>(u);
  }
  size_t Size() {
    size_t n = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const unsigned char b = U8();
      if (!ok_) return 0;
      n |= static_cast<size_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return n;
    }
    return Fail(), 0;
  }
  std::string Str() {
    const size_t n = Size();
    if (!ok_ || n > in_.size()) return Fail(), std::string();
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  absl::Time Time() {
    const int64_t ns = I64();
    if (ns == std::numeric_limits<int64_t>::min()) return absl::InfinitePast();
    if (ns == std::numeric_limits<int64_t>::max()) return absl::InfiniteFuture();
    return absl::FromUnixNanos(ns);
  }
  double Double() {
    const int64_t bits = I64();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  // A count of items of at least `min_bytes` each: more than the bytes left
  // could hold is malformed (and must not size a vector).
  size_t Count(size_t min_bytes) {
    const size_t n = Size();
    if (n > in_.size() / min_bytes) return Fail(), 0;
    return n;
  }

 private:
  void Fail() { ok_ = false; }
  std::string_view in_;
  bool ok_ = true;
};

enum Flags : unsigned char {
  kOnSpot = 1,
  kWarmPool = 2,
  kContainersRunning = 4,
  kHasCluster = 8,
  kClusterSpot = 16,
  kHasPool = 32,
};

// A warm-pool record's flags.
enum PoolFlags : unsigned char {
  kPoolHasCluster = 1,
  kPoolClusterSpot = 2,
  kPoolKeepAliveUpdated = 4,
  kPoolHasRetained = 8,
};

void EncodeCluster(Writer& w, const Cluster& c) {
  w.Str(c.id);
  w.Size(c.instances.size());
  for (const Instance& i : c.instances) {
    w.Str(i.id);
    w.Str(i.host_name);
    w.Str(i.group_name);
    w.Str(i.instance_type);
  }
}

void DecodeCluster(Reader& in, Cluster& c) {
  c.id = in.Str();
  c.instances.resize(in.Count(/*min_bytes=*/4));
  for (Instance& i : c.instances) {
    i.id = in.Str();
    i.host_name = in.Str();
    i.group_name = in.Str();
    i.instance_type = in.Str();
  }
}

}  // namespace

void EncodeState(const JobRecord& r, std::string& out) {
  Writer w(out);
  w.U8(kStateVersion);
  w.Time(r.creation_time);
  w.Time(r.last_modified_time);
  w.Str(r.status);
  w.Size(r.transitions.size());
  for (const JournalTransition& t : r.transitions) {
    w.Str(t.status);
    w.Str(t.message);
    w.Str(t.detail);
    w.Time(t.start);
    w.Time(t.end);
  }
  w.Time(r.training_start_time);
  w.Time(r.training_end_time);
  w.Str(r.failure_reason);
  w.Size(r.metrics.size());
  for (const JournalMetric& m : r.metrics) {
    w.Str(m.name);
    w.Double(m.value);
    w.Time(m.time);
  }
  w.I64(absl::ToInt64Nanoseconds(r.held));
  w.Time(r.held_since);
  w.Time(r.held_until);
  w.I64(r.attempt);
  w.I64(r.spot_interruptions);
  w.I64(r.infrastructure_failures);
  w.U8((r.on_spot ? kOnSpot : 0) | (r.warm_pool ? kWarmPool : 0) |
       (r.containers_running ? kContainersRunning : 0) | (r.cluster ? kHasCluster : 0) |
       (r.cluster && r.cluster->spot ? kClusterSpot : 0) | (r.pool ? kHasPool : 0));
  w.Str(r.stop_cause);
  if (r.cluster) EncodeCluster(w, *r.cluster);
  if (r.pool) {
    const WarmPoolRecord& p = *r.pool;
    w.U8((p.cluster ? kPoolHasCluster : 0) | (p.cluster && p.cluster->spot ? kPoolClusterSpot : 0) |
         (p.keep_alive_updated ? kPoolKeepAliveUpdated : 0) |
         (p.retained_seconds ? kPoolHasRetained : 0));
    w.Str(p.status);
    w.I64(p.retained_seconds.value_or(0));
    w.Str(p.reused_by);
    w.Str(p.not_kept_reason);
    w.Time(p.chain_start);
    w.Time(p.available_since);
    w.Time(p.expires_at);
    if (p.cluster) EncodeCluster(w, *p.cluster);
  }
}

bool DecodeState(std::string_view bytes, JobRecord& r) {
  Reader in(bytes);
  const unsigned char version = in.U8();
  if (version < 1 || version > kStateVersion) return false;
  r.creation_time = in.Time();
  r.last_modified_time = in.Time();
  r.status = in.Str();
  r.transitions.resize(in.Count(/*min_bytes=*/19));
  for (JournalTransition& t : r.transitions) {
    t.status = in.Str();
    t.message = in.Str();
    t.detail = in.Str();
    t.start = in.Time();
    t.end = in.Time();
  }
  r.training_start_time = in.Time();
  r.training_end_time = in.Time();
  r.failure_reason = in.Str();
  r.metrics.resize(in.Count(/*min_bytes=*/17));
  for (JournalMetric& m : r.metrics) {
    m.name = in.Str();
    m.value = in.Double();
    m.time = in.Time();
  }
  r.held = absl::Nanoseconds(in.I64());
  r.held_since = in.Time();
  r.held_until = version >= 2 ? in.Time() : absl::InfinitePast();
  r.attempt = static_cast<int32_t>(in.I64());
  r.spot_interruptions = static_cast<int32_t>(in.I64());
  r.infrastructure_failures = static_cast<int32_t>(in.I64());
  const unsigned char flags = in.U8();
  r.on_spot = flags & kOnSpot;
  r.warm_pool = flags & kWarmPool;
  r.containers_running = flags & kContainersRunning;
  r.stop_cause = in.Str();
  r.cluster.reset();
  if (flags & kHasCluster) {
    Cluster& c = r.cluster.emplace();
    c.spot = flags & kClusterSpot;
    DecodeCluster(in, c);
  }
  r.pool.reset();
  if (flags & kHasPool) {
    if (version < 2) return false;
    WarmPoolRecord& p = r.pool.emplace();
    const unsigned char pool_flags = in.U8();
    p.status = in.Str();
    const int64_t retained = in.I64();
    if (pool_flags & kPoolHasRetained) p.retained_seconds = static_cast<int32_t>(retained);
    p.reused_by = in.Str();
    p.not_kept_reason = in.Str();
    p.chain_start = in.Time();
    p.available_since = in.Time();
    p.expires_at = in.Time();
    p.keep_alive_updated = pool_flags & kPoolKeepAliveUpdated;
    if (pool_flags & kPoolHasCluster) {
      Cluster& c = p.cluster.emplace();
      c.spot = pool_flags & kPoolClusterSpot;
      DecodeCluster(in, c);
    }
  }
  return in.ok() && in.done();
}

}  // namespace kiln::journal_sqlite::internal
