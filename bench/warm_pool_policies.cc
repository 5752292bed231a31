// Keep-alive policies side by side on one workload, in virtual time.
//
// 1,000 sequential HPO-style jobs of one cluster shape (2 x ml.m5.xlarge):
// each job is submitted a gap after the previous one ended, the gaps drawn
// (seeded) from a fixed mixture: 70% Exp(mean 2 min), 25% Exp(mean 20 min),
// 5% Exp(mean 3 h). The sim provider's defaults apply (provisioning 60 s,
// image 30 s, run 10 min, upload 5 s). Every job asks for KeepAlive 600 s,
// which only JobRequested honours as such.
//
// Prints, per policy: startup P50/P90 (submission -> Training), warm-hit
// rate, and retained (idle, billed) instance-hours.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "kiln/engine.h"
#include "kiln/sim/sim.h"
#include "kiln/warm_pool.h"

namespace {

constexpr int kJobs = 1000;

struct Result {
  std::string policy;
  double p50 = 0, p90 = 0, warm_rate = 0, retained_instance_hours = 0;
};

// Exponential with the given mean from a uniform in (0, 1].
absl::Duration Exponential(std::mt19937_64& rng, absl::Duration mean) {
  const double u = (static_cast<double>(rng() >> 11) + 1.0) / 9007199254740992.0;
  return mean * -std::log(u);
}

absl::Duration Gap(std::mt19937_64& rng) {
  const double pick = static_cast<double>(rng() >> 11) / 9007199254740992.0;
  if (pick < 0.70) return Exponential(rng, absl::Minutes(2));
  if (pick < 0.95) return Exponential(rng, absl::Minutes(20));
  return Exponential(rng, absl::Hours(3));
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

class Submitter : public kiln::JobObserver {
 public:
  Submitter(kiln::EventLoop& loop, kiln::Engine& engine) : loop_(loop), engine_(engine), rng_(42) {
    google::protobuf::TextFormat::ParseFromString(R"pb(
      role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
      algorithm_specification { training_image: "hpo:1" training_input_mode: "File" }
      output_data_config { s3_output_path: "s3://bucket/hpo" }
      resource_config {
        instance_type: "ml.m5.xlarge" instance_count: 2 volume_size_in_gb: 30
        keep_alive_period_in_seconds: 600
      }
    )pb", &template_);
  }
  void Submit() {
    kiln::v1::CreateTrainingJobRequest r = template_;
    r.set_training_job_name(absl::StrCat("trial-", submitted_++));
    if (!engine_.CreateTrainingJob(std::move(r)).ok()) std::abort();
  }
  void OnStatusChange(const kiln::StatusEvent& e) override {
    if (e.status == "Completed" && submitted_ < kJobs) {
      loop_.ScheduleAfter(Gap(rng_), [this] { Submit(); });
    }
  }

 private:
  kiln::EventLoop& loop_;
  kiln::Engine& engine_;
  std::mt19937_64 rng_;
  kiln::v1::CreateTrainingJobRequest template_;
  int submitted_ = 0;
};

Result Run(std::shared_ptr<kiln::KeepAlivePolicy> policy) {
  auto loop = kiln::NewVirtualEventLoop();
  auto provider = kiln::sim::NewSimClusterProvider(*loop);
  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.warm_pools.policy = policy;
  auto engine = kiln::NewEngine(std::move(options)).value();
  Submitter submitter(*loop, *engine);
  engine->AddObserver(&submitter);
  submitter.Submit();
  loop->RunUntilIdle();

  Result result;
  result.policy = policy->Name();
  std::vector<double> startups;
  int warm = 0;
  double retained_seconds = 0;
  for (int i = 0; i < kJobs; ++i) {
    kiln::v1::DescribeTrainingJobRequest request;
    request.set_training_job_name(absl::StrCat("trial-", i));
    const auto d = engine->DescribeTrainingJob(request).value();
    for (const auto& t : d.secondary_status_transitions()) {
      if (t.status() == "Training") {
        const double s = (t.start_time().seconds() - d.creation_time().seconds()) +
                         (t.start_time().nanos() - d.creation_time().nanos()) / 1e9;
        startups.push_back(s);
        if (s < 60) ++warm;
      }
    }
    retained_seconds += d.warm_pool_status().resource_retained_billable_time_in_seconds() *
                        d.resource_config().instance_count();
  }
  result.p50 = Percentile(startups, 0.5);
  result.p90 = Percentile(startups, 0.9);
  result.warm_rate = static_cast<double>(warm) / kJobs;
  result.retained_instance_hours = retained_seconds / 3600;
  return result;
}

}  // namespace

int main() {
  std::vector<std::shared_ptr<kiln::KeepAlivePolicy>> policies = {
      kiln::NewNeverKeepAlive(),
      kiln::NewJobRequestedKeepAlive(),
      kiln::NewFixedKeepAlive(absl::Minutes(1)),
      kiln::NewFixedKeepAlive(absl::Minutes(5)),
      kiln::NewFixedKeepAlive(absl::Minutes(30)),
      kiln::NewFixedKeepAlive(absl::Hours(2)),
      kiln::NewAdaptiveHistogramKeepAlive(),
      kiln::NewAdaptiveHistogramKeepAlive({.percentile = 0.9}),
  };
  std::printf("%d sequential jobs, 2 x ml.m5.xlarge, gaps 70%% Exp(2 min) / 25%% Exp(20 min) / "
              "5%% Exp(3 h), seed 42\n\n",
              kJobs);
  std::printf("%-26s %12s %12s %9s %26s\n", "policy", "startup P50", "startup P90", "warm hits",
              "retained instance-hours");
  for (const auto& policy : policies) {
    const Result r = Run(policy);
    std::printf("%-26s %11.0fs %11.0fs %8.1f%% %26.1f\n", r.policy.c_str(), r.p50, r.p90,
                r.warm_rate * 100, r.retained_instance_hours);
  }
  return 0;
}
