// Kiln quickstart: three small training jobs on this machine, the second and
// third reusing the first one's warm pool.
//
// It writes a tiny training image (a directory with a `train` script), a
// data set and three CreateTrainingJob requests in SageMaker's JSON, runs
// them one after another on the local backend in real time, and prints each
// job's start-up time (submission to the entrypoint's first line) and final
// statuses. Public headers only.
//
//   quickstart [WORK_DIR]      (default: a new directory under /tmp)
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"

namespace {

constexpr char kTrainScript[] = R"sh(#!/bin/sh
# A tiny "training" program: reads its hyperparameters and data, "trains",
# writes a model, and reports a metric the job's MetricDefinitions pick up.
echo "started on $SM_CURRENT_HOST of $SM_HOSTS"
epochs=$(sed -n 's/.*"epochs": *"\([0-9]*\)".*/\1/p' "$SM_INPUT_CONFIG_DIR/hyperparameters.json")
rows=$(cat "$SM_CHANNEL_TRAIN"/*.csv | wc -l)
i=1
while [ "$i" -le "${epochs:-1}" ]; do
  echo "epoch=$i rows=$rows loss=$(awk "BEGIN { print 1 / ($i + 1) }")"
  i=$((i + 1))
done
echo "weights trained on $rows rows" > "$SM_MODEL_DIR/model.txt"
)sh";

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string JobJson(const std::string& name, const std::filesystem::path& work) {
  return absl::StrCat(R"json({
    "TrainingJobName": ")json", name, R"json(",
    "RoleArn": "arn:aws:iam::000000000000:role/quickstart",
    "AlgorithmSpecification": {
      "TrainingImage": ")json", (work / "image").string(), R"json(",
      "TrainingInputMode": "File",
      "MetricDefinitions": [{"Name": "train:loss", "Regex": "loss=([0-9.]+)"}]
    },
    "HyperParameters": {"epochs": "3"},
    "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
      "S3DataType": "S3Prefix", "S3Uri": "file://)json", (work / "data").string(), R"json(/"}}}],
    "OutputDataConfig": {"S3OutputPath": "file://)json", (work / "output").string(), R"json("},
    "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 1,
                       "KeepAlivePeriodInSeconds": 60},
    "StoppingCondition": {"MaxRuntimeInSeconds": 300}
  })json");
}

// Prints what happens to the jobs, and records when each job's entrypoint first spoke.
class Quickstart : public kiln::JobObserver {
 public:
  void OnStatusChange(const kiln::StatusEvent& e) override {
    std::printf("  %-8s %s/%s\n", std::string(e.job_name).c_str(), std::string(e.status).c_str(),
                std::string(e.secondary_status).c_str());
  }

  void OnLogLine(std::string_view job, std::string_view host, std::string_view line,
                 absl::Time time) override {
    std::printf("  %-8s [%s] %s\n", std::string(job).c_str(), std::string(host).c_str(),
                std::string(line).c_str());
    first_line_.emplace(std::string(job), time);  // keeps the first line's time
  }

  void Submitted(const std::string& job, absl::Time time) {
    names_.push_back(job);
    submitted_[job] = time;
  }
  const std::vector<std::string>& names() const { return names_; }
  absl::Duration Startup(const std::string& job) {
    return first_line_[job] - submitted_[job];
  }

 private:
  std::vector<std::string> names_;
  std::map<std::string, absl::Time> submitted_;
  std::map<std::string, absl::Time> first_line_;
};

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path work;
  if (argc > 1) {
    work = argv[1];
  } else {
    char pattern[] = "/tmp/kiln-quickstart-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return 1;
    // (Searchable: run as root, the containers run as nobody.)
    chmod(pattern, 0755);
    work = pattern;
  }
  work = std::filesystem::absolute(work);
  WriteFile(work / "image" / "train", kTrainScript);
  chmod((work / "image" / "train").c_str(), 0755);
  WriteFile(work / "data" / "iris.csv", "5.1,3.5,1.4,0.2,setosa\n7.0,3.2,4.7,1.4,versicolor\n"
                                        "6.3,3.3,6.0,2.5,virginica\n");
  std::filesystem::create_directories(work / "output");
  std::printf("Kiln quickstart in %s\n\n", work.c_str());

  auto loop = kiln::NewRealTimeEventLoop();
  auto files = kiln::NewFileObjectStore();
  kiln::ObjectStores stores;
  stores.Register("file", files.get());
  kiln::local::LocalOptions local_options;
  local_options.state_dir = (work / "state").string();
  local_options.object_stores = &stores;
  auto provider = kiln::local::NewLocalClusterProvider(*loop, local_options);
  if (!provider.ok()) {
    std::cerr << provider.status() << "\n";
    return 1;
  }
  auto channel = kiln::local::NewLocalDataChannel(*loop, stores, {.state_dir = local_options.state_dir});
  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider->get();
  options.data_channel = channel.get();
  auto engine = kiln::NewEngine(std::move(options));
  if (!engine.ok()) {
    std::cerr << engine.status() << "\n";
    return 1;
  }
  Quickstart quickstart;
  (*engine)->AddObserver(&quickstart);
  // One job after the other: each finds the cluster the one before kept warm.
  for (const std::string& json :
       {JobJson("first", work), JobJson("second", work), JobJson("third", work)}) {
    kiln::v1::CreateTrainingJobRequest request;
    absl::Status parsed = kiln::ParseJson(json, request);
    if (!parsed.ok()) {
      std::cerr << parsed << "\n";
      return 1;
    }
    quickstart.Submitted(request.training_job_name(), loop->Now());
    auto created = (*engine)->CreateTrainingJob(request);
    if (!created.ok()) {
      std::cerr << created.status() << "\n";
      return 1;
    }
    // Runs the loop on this thread until the job has ended.
    auto ended = (*engine)->WaitForTrainingJob(request.training_job_name());
    if (!ended.ok()) {
      std::cerr << ended.status() << "\n";
      return 1;
    }
  }

  std::printf("\n%-8s %-10s %-12s %-26s %s\n", "job", "status", "startup", "warm pool", "model");
  bool ok = true;
  for (const std::string& name : quickstart.names()) {
    kiln::v1::DescribeTrainingJobRequest request;
    request.set_training_job_name(name);
    auto d = (*engine)->DescribeTrainingJob(request);
    if (!d.ok()) return 1;
    std::string pool = d->warm_pool_status().status();
    if (d->warm_pool_status().has_reused_by_job()) pool += " by " + d->warm_pool_status().reused_by_job();
    std::printf("%-8s %-10s %9.1f ms %-26s %s\n", name.c_str(), d->training_job_status().c_str(),
                absl::ToDoubleMilliseconds(quickstart.Startup(name)), pool.c_str(),
                d->model_artifacts().s3_model_artifacts().c_str());
    ok = ok && d->training_job_status() == "Completed";
  }
  return ok ? 0 : 1;
}
