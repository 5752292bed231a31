// Runs a few simulated jobs (completed, failed, stopped, with metrics) and
// prints the engine's responses as wire JSON, one per line:
//   DescribeTrainingJob <json>   for every job
//   ListTrainingJobs <json>      one page of two, with a NextToken
// tests/check_wire_output.py feeds them to botocore's response parser.
#include <iostream>
#include <string>

#include "google/protobuf/text_format.h"
#include "kiln/engine.h"
#include "kiln/json.h"
#include "kiln/sim/sim.h"

int main() {
  auto loop = kiln::NewVirtualEventLoop();
  kiln::sim::SimClusterOptions cluster_options;
  cluster_options.behavior = [](std::string_view job) {
    kiln::sim::SimJobBehavior b;
    b.log_lines = {{absl::Seconds(30), "epoch=1 loss=0.731;"}};
    if (job == "failing") {
      b.exit_code = 1;
      b.failure_text = "ValueError: NaN loss";
    }
    return b;
  };
  auto provider = kiln::sim::NewSimClusterProvider(*loop, cluster_options);
  auto channel = kiln::sim::NewSimDataChannel(*loop);
  kiln::EngineOptions options;
  options.loop = loop.get();
  options.cluster_provider = provider.get();
  options.data_channel = channel.get();
  auto engine = kiln::NewEngine(std::move(options)).value();

  for (const char* name : {"completed", "failing", "stopped"}) {
    kiln::v1::CreateTrainingJobRequest r;
    google::protobuf::TextFormat::ParseFromString(R"pb(
      role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
      hyper_parameters { key: "lr" value: "0.1" }
      algorithm_specification {
        training_image: "train:1"
        training_input_mode: "File"
        metric_definitions { name: "train:loss" regex: "loss=(.*?);" }
      }
      input_data_config {
        channel_name: "train"
        data_source { s3_data_source { s3_data_type: "S3Prefix" s3_uri: "s3://b/train/" } }
      }
      output_data_config { s3_output_path: "s3://b/out" }
      resource_config { instance_type: "ml.m5.xlarge" instance_count: 2 volume_size_in_gb: 30 }
      stopping_condition { max_runtime_in_seconds: 3600 }
      tags { key: "team" value: "ml" }
    )pb", &r);
    r.set_training_job_name(name);
    if (!engine->CreateTrainingJob(r).ok()) return 1;
  }
  loop->RunUntil(loop->Now() + absl::Seconds(200));
  kiln::v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("stopped");
  if (!engine->StopTrainingJob(stop).ok()) return 1;
  loop->RunUntilIdle();

  for (const char* name : {"completed", "failing", "stopped"}) {
    kiln::v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(name);
    std::cout << "DescribeTrainingJob " << kiln::ToJson(engine->DescribeTrainingJob(d).value())
              << "\n";
  }
  kiln::v1::ListTrainingJobsRequest list;
  list.set_max_results(2);
  std::cout << "ListTrainingJobs " << kiln::ToJson(engine->ListTrainingJobs(list).value()) << "\n";
  return 0;
}
