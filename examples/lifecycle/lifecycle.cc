// Kiln's engine in virtual time: three training jobs on the simulation
// backend, one that completes, one whose container fails, one stopped by its
// MaxRuntimeInSeconds. Prints every status change as it happens (with the
// virtual time since submission) and each job's final DescribeTrainingJob.
// Runs in milliseconds although the jobs take simulated minutes.
//
// Public headers only.
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/sim/sim.h"

namespace {

class Printer : public kiln::JobObserver {
 public:
  explicit Printer(absl::Time start) : start_(start) {}
  void OnStatusChange(const kiln::StatusEvent& e) override {
    std::cout << absl::StrFormat("[%6.0fs] %-10s %-10s %-18s %s\n",
                                 absl::ToDoubleSeconds(e.time - start_), std::string(e.job_name),
                                 std::string(e.status), std::string(e.secondary_status),
                                 std::string(e.message));
  }
  void OnMetric(std::string_view job, std::string_view metric, double value, absl::Time t) override {
    std::cout << absl::StrFormat("[%6.0fs] %-10s metric %s = %g\n", absl::ToDoubleSeconds(t - start_),
                                 std::string(job), std::string(metric), value);
  }

 private:
  absl::Time start_;
};

kiln::v1::CreateTrainingJobRequest Job(const std::string& name) {
  kiln::v1::CreateTrainingJobRequest request;
  const std::string json = R"json({
    "TrainingJobName": ")json" + name + R"json(",
    "RoleArn": "arn:aws:iam::123456789012:role/SageMakerRole",
    "AlgorithmSpecification": {
      "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
      "TrainingInputMode": "File",
      "MetricDefinitions": [{"Name": "train:loss", "Regex": "loss=([0-9.]+)"}]
    },
    "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
      "S3DataType": "S3Prefix", "S3Uri": "s3://bucket/train/"}}}],
    "OutputDataConfig": {"S3OutputPath": "s3://bucket/output"},
    "ResourceConfig": {"InstanceType": "ml.g5.2xlarge", "InstanceCount": 2, "VolumeSizeInGB": 50},
    "StoppingCondition": {"MaxRuntimeInSeconds": 1800}
  })json";
  absl::Status status = kiln::ParseJson(json, request);
  if (!status.ok()) std::cerr << status << "\n";
  return request;
}

}  // namespace

int main() {
  auto loop = kiln::NewVirtualEventLoop();
  kiln::sim::SimClusterOptions cluster;
  cluster.behavior = [](std::string_view job) {
    kiln::sim::SimJobBehavior b;  // 60 s provisioning, 30 s image, 5 s upload
    b.run_duration = absl::Minutes(12);
    b.log_lines = {{absl::Minutes(4), "epoch=1 loss=0.82"}, {absl::Minutes(8), "epoch=2 loss=0.41"}};
    if (job == "diverges") {
      b.exit_code = 1;
      b.failure_text = "RuntimeError: loss is NaN at step 1200";
    }
    if (job == "too-slow") b.run_duration = absl::Hours(2);
    return b;
  };
  auto provider = kiln::sim::NewSimClusterProvider(*loop, cluster);
  auto channel = kiln::sim::NewSimDataChannel(*loop);  // 10 s per channel

  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.data_channel = channel.get();
  auto engine = kiln::NewEngine(std::move(options));
  if (!engine.ok()) {
    std::cerr << engine.status() << "\n";
    return 1;
  }
  Printer printer(loop->Now());
  (*engine)->AddObserver(&printer);

  for (const char* name : {"converges", "diverges", "too-slow"}) {
    auto created = (*engine)->CreateTrainingJob(Job(name));
    if (!created.ok()) {
      std::cerr << created.status() << "\n";
      return 1;
    }
  }
  // Virtual time: the jobs run to their end at once.
  if (absl::Status s = (*engine)->WaitForAllTrainingJobs(); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }

  std::cout << "\nDescribeTrainingJob of each job:\n";
  for (const char* name : {"converges", "diverges", "too-slow"}) {
    kiln::v1::DescribeTrainingJobRequest request;
    request.set_training_job_name(name);
    auto described = (*engine)->DescribeTrainingJob(request);
    if (!described.ok()) return 1;
    std::cout << kiln::ToJson(*described) << "\n";
  }
  return 0;
}
