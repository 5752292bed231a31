#include "kiln/sim/workload.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/time_math.h"
#include "kiln/json.h"
#include "kiln/plugin/json_value.h"

namespace kiln::sim {
namespace {

// What a keyed draw of a generator is for.
enum Purpose : uint64_t {
  kWork = 1,
  kAlgorithmError = 2,
  kGap = 3,
  kArrival = 4,
  kThink = 5,
};

constexpr int64_t kMaxRuntimeSeconds = 2419200;  // 28 days, the service's limit

using SharedRequest = std::shared_ptr<const v1::CreateTrainingJobRequest>;

// A job of `t` (whose request is `request`) named `name`, its draws keyed by `key`.
SimJob MakeJob(const JobTemplate& t, const SharedRequest& request, std::string name, uint64_t key) {
  SimJob job;
  job.name = std::move(name);
  job.request = request;
  KeyedRng rng(MixKey(key, kWork));
  SimJobAttributes& a = job.attributes;
  // (Rounded to the millisecond.)
  const absl::Duration work = internal::Plus(t.work.Sample(rng), absl::Microseconds(500));
  a.work = std::max(absl::Seconds(1), internal::FloorTo(work, absl::Milliseconds(1)));
  a.checkpoint_interval = t.checkpoint_interval;
  a.image_bytes = t.image_bytes;
  a.data_bytes = t.data_bytes;
  a.epochs = t.epochs;
  if (t.deadline_slack > 0) {
    const absl::Duration deadline =
        internal::Plus(a.work * t.deadline_slack, absl::Milliseconds(500));
    a.deadline = internal::FloorTo(deadline, absl::Seconds(1));
  }
  a.spot_eligible = t.spot_eligible;
  if (t.algorithm_error_rate > 0) {
    KeyedRng err(MixKey(key, kAlgorithmError));
    if (err.Bernoulli(t.algorithm_error_rate)) a.exit_code = 1;
  }
  return job;
}

class HpoSweep final : public WorkloadGenerator {
 public:
  HpoSweep(HpoSweepOptions o, uint64_t seed)
      : o_(std::move(o)),
        seed_(MixKey(seed, HashName(o_.name))),
        request_(std::make_shared<const v1::CreateTrainingJobRequest>(o_.job.request)) {}

  void Start(WorkloadSink& sink) override {
    sink_ = &sink;
    const absl::Time start = sink.loop().Now();
    sweeps_.resize(static_cast<size_t>(std::max(0, o_.sweeps)));
    for (int32_t s = 0; s < o_.sweeps; ++s) {
      const absl::Time at = start + o_.first_start + o_.every * s;
      if (at >= sink.horizon_end()) break;
      sink.loop().ScheduleAt(at, [this, s] {
        for (int32_t i = 0; i < std::min(o_.parallelism, o_.trials); ++i) SubmitNext(s);
      });
    }
  }

  void OnJobEnded(uint64_t tag) override {
    const auto s = static_cast<int32_t>(tag);
    if (static_cast<size_t>(s) >= sweeps_.size() || sweeps_[s].next >= o_.trials) return;
    KeyedRng rng(MixKey(seed_, kGap, tag, static_cast<uint64_t>(++sweeps_[s].ended)));
    // Nothing is submitted at or after the horizon (the run's drain stops
    // jobs long after it, and each stop ends a trial here).
    const absl::Time at = sink_->loop().Now() + o_.gap.Sample(rng);
    if (at >= sink_->horizon_end()) return;
    sink_->loop().ScheduleAt(at, [this, s] { SubmitNext(s); });
  }

  int64_t ExpectedJobs() const override { return static_cast<int64_t>(o_.sweeps) * o_.trials; }

 private:
  struct Sweep {
    int32_t next = 0;   // trials submitted
    int32_t ended = 0;  // trials ended
  };

  void SubmitNext(int32_t s) {
    Sweep& sweep = sweeps_[s];
    if (sweep.next >= o_.trials) return;
    const int32_t trial = sweep.next++;
    sink_->Submit(MakeJob(o_.job, request_, absl::StrCat(o_.name, "-", s, "-", trial),
                          MixKey(seed_, static_cast<uint64_t>(s), static_cast<uint64_t>(trial))),
                  this, static_cast<uint64_t>(s));
  }

  HpoSweepOptions o_;
  uint64_t seed_;
  SharedRequest request_;
  WorkloadSink* sink_ = nullptr;
  std::vector<Sweep> sweeps_;
};

class NightlyBatch final : public WorkloadGenerator {
 public:
  NightlyBatch(NightlyBatchOptions o, uint64_t seed)
      : o_(std::move(o)),
        seed_(MixKey(seed, HashName(o_.name))),
        request_(std::make_shared<const v1::CreateTrainingJobRequest>(o_.job.request)) {}

  void Start(WorkloadSink& sink) override {
    sink_ = &sink;
    start_ = sink.loop().Now();
    ScheduleDay(0);
  }

  int64_t ExpectedJobs() const override { return static_cast<int64_t>(o_.cities) * o_.days; }

 private:
  // One event per day, which schedules that day's arrivals.
  void ScheduleDay(int32_t day) {
    if (day >= o_.days) return;
    const absl::Time day_start = start_ + absl::Hours(24) * day;
    if (day_start + o_.at >= sink_->horizon_end()) return;
    sink_->loop().ScheduleAt(day_start + o_.at, [this, day, day_start] {
      for (int32_t c = 0; c < o_.cities; ++c) {
        KeyedRng rng(MixKey(seed_, kArrival, static_cast<uint64_t>(day), static_cast<uint64_t>(c)));
        const absl::Time at = day_start + o_.at + o_.spread * rng.Uniform();
        if (at >= sink_->horizon_end()) continue;
        sink_->loop().ScheduleAt(at, [this, day, c] {
          sink_->Submit(MakeJob(o_.job, request_, absl::StrCat(o_.name, "-d", day, "-", c),
                                MixKey(seed_, static_cast<uint64_t>(day), static_cast<uint64_t>(c))),
                        this, 0);
        });
      }
      ScheduleDay(day + 1);
    });
  }

  NightlyBatchOptions o_;
  uint64_t seed_;
  SharedRequest request_;
  WorkloadSink* sink_ = nullptr;
  absl::Time start_;
};

class Interactive final : public WorkloadGenerator {
 public:
  Interactive(InteractiveOptions o, uint64_t seed)
      : o_(std::move(o)),
        seed_(MixKey(seed, HashName(o_.name))),
        request_(std::make_shared<const v1::CreateTrainingJobRequest>(o_.job.request)) {}

  void Start(WorkloadSink& sink) override {
    sink_ = &sink;
    next_.assign(static_cast<size_t>(std::max(0, o_.users)), 0);
    const absl::Time start = sink.loop().Now();
    for (int32_t u = 0; u < o_.users; ++u) {
      KeyedRng rng(MixKey(seed_, kArrival, static_cast<uint64_t>(u)));
      const absl::Time at = start + o_.start_spread * rng.Uniform();
      if (at >= sink.horizon_end()) continue;
      sink.loop().ScheduleAt(at, [this, u] { Submit(u); });
    }
  }

  void OnJobEnded(uint64_t tag) override {
    const auto u = static_cast<int32_t>(tag);
    if (static_cast<size_t>(u) >= next_.size() || next_[u] >= o_.jobs_per_user) return;
    KeyedRng rng(MixKey(seed_, kThink, tag, static_cast<uint64_t>(next_[u])));
    const absl::Time at = sink_->loop().Now() + o_.think_time.Sample(rng);
    if (at >= sink_->horizon_end()) return;
    sink_->loop().ScheduleAt(at, [this, u] { Submit(u); });
  }

  int64_t ExpectedJobs() const override { return static_cast<int64_t>(o_.users) * o_.jobs_per_user; }

 private:
  void Submit(int32_t u) {
    const int32_t k = next_[u]++;
    sink_->Submit(MakeJob(o_.job, request_, absl::StrCat(o_.name, "-u", u, "-", k),
                          MixKey(seed_, static_cast<uint64_t>(u), static_cast<uint64_t>(k))),
                  this, static_cast<uint64_t>(u));
  }

  InteractiveOptions o_;
  uint64_t seed_;
  SharedRequest request_;
  WorkloadSink* sink_ = nullptr;
  std::vector<int32_t> next_;
};

class TraceReplay final : public WorkloadGenerator {
 public:
  explicit TraceReplay(std::vector<TraceEntry> entries) : entries_(std::move(entries)) {}

  void Start(WorkloadSink& sink) override {
    sink_ = &sink;
    start_ = sink.loop().Now();
    ScheduleNext();
  }

  int64_t ExpectedJobs() const override { return static_cast<int64_t>(entries_.size()); }

 private:
  // One pending arrival at a time.
  void ScheduleNext() {
    if (next_ >= entries_.size()) return;
    const absl::Time at = start_ + entries_[next_].arrival;
    if (at >= sink_->horizon_end()) return;
    sink_->loop().ScheduleAt(at, [this] {
      sink_->Submit(entries_[next_].job, this, next_);
      ++next_;
      ScheduleNext();
    });
  }

  std::vector<TraceEntry> entries_;
  WorkloadSink* sink_ = nullptr;
  absl::Time start_;
  size_t next_ = 0;
};

absl::Status LineError(size_t line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("job trace line ", line, ": ", std::string(what)));
}

// A non-negative number of seconds, at most kMaxSimDuration.
absl::StatusOr<absl::Duration> Seconds(const JsonValue& v, size_t line, std::string_view name) {
  auto d = v.AsDouble();
  if (!d.ok() || !(*d >= 0) || !std::isfinite(*d) || absl::Seconds(*d) > kMaxSimDuration) {
    return LineError(line, absl::StrCat(std::string(name), " must be a number of seconds in [0, ",
                                        absl::ToInt64Seconds(kMaxSimDuration), "]"));
  }
  return absl::Seconds(*d);
}

absl::StatusOr<int64_t> Count(const JsonValue& v, size_t line, std::string_view name) {
  auto n = v.AsInt64();
  if (!n.ok() || *n < 0) return LineError(line, absl::StrCat(std::string(name), " must be a non-negative integer"));
  return *n;
}

}  // namespace

v1::CreateTrainingJobRequest DefaultRequest(std::string_view instance_type, int32_t count,
                                            std::string_view input_mode, int32_t keep_alive_seconds) {
  v1::CreateTrainingJobRequest r;
  r.set_role_arn("arn:aws:iam::123456789012:role/SageMakerRole");
  auto* algo = r.mutable_algorithm_specification();
  algo->set_training_image("123456789012.dkr.ecr.us-east-1.amazonaws.com/train:latest");
  const bool fsx = input_mode == "FSx";
  algo->set_training_input_mode(fsx ? "File" : std::string(input_mode));
  v1::Channel* channel = r.add_input_data_config();
  channel->set_channel_name("train");
  if (fsx) {
    auto* fs = channel->mutable_data_source()->mutable_file_system_data_source();
    fs->set_file_system_id("fs-0123456789abcdef0");
    fs->set_file_system_access_mode("ro");
    fs->set_file_system_type("FSxLustre");
    fs->set_directory_path("/fsx/train");
    r.mutable_vpc_config()->add_subnets("subnet-0123456789abcdef0");
    r.mutable_vpc_config()->add_security_group_ids("sg-0123456789abcdef0");
  } else {
    auto* s3 = channel->mutable_data_source()->mutable_s3_data_source();
    s3->set_s3_data_type("S3Prefix");
    s3->set_s3_uri("s3://kiln-sim/data/train/");
  }
  r.mutable_output_data_config()->set_s3_output_path("s3://kiln-sim/output");
  auto* rc = r.mutable_resource_config();
  rc->set_instance_type(std::string(instance_type));
  rc->set_instance_count(count);
  rc->set_volume_size_in_gb(50);
  if (keep_alive_seconds > 0) rc->set_keep_alive_period_in_seconds(keep_alive_seconds);
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(kMaxRuntimeSeconds);
  return r;
}

std::unique_ptr<WorkloadGenerator> NewHpoSweep(HpoSweepOptions options, uint64_t seed) {
  return std::make_unique<HpoSweep>(std::move(options), seed);
}
std::unique_ptr<WorkloadGenerator> NewNightlyBatch(NightlyBatchOptions options, uint64_t seed) {
  return std::make_unique<NightlyBatch>(std::move(options), seed);
}
std::unique_ptr<WorkloadGenerator> NewInteractive(InteractiveOptions options, uint64_t seed) {
  return std::make_unique<Interactive>(std::move(options), seed);
}
std::unique_ptr<WorkloadGenerator> NewTraceReplay(std::vector<TraceEntry> entries) {
  return std::make_unique<TraceReplay>(std::move(entries));
}

absl::StatusOr<std::vector<TraceEntry>> ParseJobTrace(std::string_view jsonl) {
  std::vector<TraceEntry> entries;
  size_t line_number = 0;
  for (absl::string_view raw : absl::StrSplit(absl::string_view(jsonl.data(), jsonl.size()), '\n')) {
    ++line_number;
    const std::string_view line(raw.data(), raw.size());
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto doc = ParseJsonValue(line);
    if (!doc.ok()) return LineError(line_number, std::string(doc.status().message()));
    if (!doc->is_object()) return LineError(line_number, "expected a JSON object");
    for (const auto& [key, value] : doc->members()) {
      if (key != "arrival" && key != "request" && key != "sim") {
        // The key is input: escaped and cut, it cannot break the message's line.
        return LineError(line_number,
                         absl::StrCat("unknown member '", TextForMessage(key),
                                      "' (arrival, request, sim)"));
      }
    }
    TraceEntry entry;
    entry.line = static_cast<int64_t>(line_number);
    const JsonValue* arrival = doc->Find("arrival");
    if (arrival == nullptr) return LineError(line_number, "arrival is required");
    auto at = Seconds(*arrival, line_number, "arrival");
    if (!at.ok()) return at.status();
    entry.arrival = *at;
    const JsonValue* request = doc->Find("request");
    if (request == nullptr || !request->is_object()) {
      return LineError(line_number, "request must be a CreateTrainingJob request object");
    }
    v1::CreateTrainingJobRequest parsed_request;
    absl::Status parsed = ParseJson(WriteJson(*request), parsed_request);
    if (!parsed.ok()) return LineError(line_number, absl::StrCat("request: ", std::string(parsed.message())));
    if (parsed_request.training_job_name().empty()) {
      return LineError(line_number, "request.TrainingJobName is required");
    }
    entry.job.name = parsed_request.training_job_name();
    entry.job.request = std::make_shared<const v1::CreateTrainingJobRequest>(std::move(parsed_request));
    if (const JsonValue* sim = doc->Find("sim")) {
      if (!sim->is_object()) return LineError(line_number, "sim must be an object");
      SimJobAttributes& a = entry.job.attributes;
      for (const auto& [key, value] : sim->members()) {
        if (key == "work" || key == "checkpoint_every" || key == "deadline" || key == "upload") {
          auto d = Seconds(value, line_number, absl::StrCat("sim.", key));
          if (!d.ok()) return d.status();
          if (key == "work") a.work = *d;
          if (key == "checkpoint_every") a.checkpoint_interval = *d;
          if (key == "deadline") a.deadline = *d;
          if (key == "upload") a.upload = *d;
        } else if (key == "image_bytes" || key == "data_bytes" || key == "exit_code" || key == "epochs") {
          auto n = Count(value, line_number, absl::StrCat("sim.", key));
          if (!n.ok()) return n.status();
          if (key == "image_bytes") a.image_bytes = *n;
          if (key == "data_bytes") a.data_bytes = *n;
          if (key == "exit_code") a.exit_code = static_cast<int>(std::min<int64_t>(*n, 255));
          if (key == "epochs") {
            if (*n < 1 || *n > 1000000) return LineError(line_number, "sim.epochs must be in [1, 1000000]");
            a.epochs = static_cast<int32_t>(*n);
          }
        } else if (key == "spot_eligible") {
          if (!value.is_bool()) return LineError(line_number, "sim.spot_eligible must be true or false");
          a.spot_eligible = value.bool_value();
        } else {
          return LineError(line_number,
                           absl::StrCat("unknown member 'sim.", TextForMessage(key),
                                        "' (work, checkpoint_every, image_bytes, data_bytes, epochs, "
                                        "deadline, spot_eligible, exit_code, upload)"));
        }
      }
    }
    entries.push_back(std::move(entry));
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const TraceEntry& a, const TraceEntry& b) { return a.arrival < b.arrival; });
  return entries;
}

}  // namespace kiln::sim
