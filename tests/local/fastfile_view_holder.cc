// A helper of local_data_channel_test: a process that mounts a FastFile FUSE
// view the way a Kiln process does, says where, and then waits to be killed
// (the test SIGKILLs it to leave a dead mount behind, as a crash would).
//
//   fastfile_view_holder STATE_DIR
//
// Prints "mounted" on stdout once the view is up, or "failed: <status>" and
// exits 1.
//
//   fastfile_view_holder --clean STATE_DIR
//
// Makes a LocalDataChannel on STATE_DIR (which cleans up what crashed
// processes left there), prints "cleaned" and exits: run in a new PID
// namespace, it has the PID a crashed holder had.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "local/internal/fs.h"

int main(int argc, char** argv) {
  const bool clean = argc == 3 && std::string(argv[1]) == "--clean";
  if (argc != 2 && !clean) {
    std::fprintf(stderr, "usage: %s [--clean] STATE_DIR\n", argv[0]);
    return 2;
  }
  const std::string state_dir = argv[argc - 1];
  auto loop = kiln::NewRealTimeEventLoop();
  if (clean) {
    kiln::ObjectStores none;
    auto channel = kiln::local::NewLocalDataChannel(*loop, none, {.state_dir = state_dir});
    std::printf("cleaned\n");
    return 0;
  }
  auto store = kiln::NewInMemoryObjectStore();
  kiln::ObjectStores stores;
  stores.Register("mem", store.get());
  absl::Status put = store->Put("mem://bucket/ds/a.csv", "a");
  kiln::Instance inst;
  inst.host_name = "algo-1";
  inst.id = "c1/algo-1";
  inst.group_name = kiln::kHomogeneousGroupName;
  inst.instance_type = "ml.m5.large";
  kiln::Cluster cluster;
  cluster.id = "c1";
  cluster.instances.push_back(inst);
  absl::Status made = kiln::local::internal::MakeDirs(
      absl::StrCat(state_dir, "/instances/c1/algo-1/ml/input/data"));
  auto channel = kiln::local::NewLocalDataChannel(*loop, stores, {.state_dir = state_dir});
  kiln::v1::CreateTrainingJobRequest request;
  request.set_training_job_name("holder");
  kiln::v1::Channel c;
  c.set_channel_name("ff");
  auto* s3 = c.mutable_data_source()->mutable_s3_data_source();
  s3->set_s3_data_type("S3Prefix");
  s3->set_s3_uri("mem://bucket/ds/");
  kiln::JobContext job{"holder", "arn:aws:sagemaker:us-east-1:000000000000:training-job/holder",
                       request, cluster, 1};
  std::vector<const kiln::Instance*> receivers = {&cluster.instances[0]};
  std::optional<absl::Status> result = put.ok() ? made : put;
  if (result->ok()) {
    result.reset();
    channel->Deliver(kiln::ChannelDelivery{job, c, "FastFile", receivers},
                     [&](absl::Status s) { result = s; });
    while (!result.has_value()) loop->RunUntil(loop->Now() + absl::Milliseconds(10));
  }
  if (!result->ok()) {
    std::printf("failed: %s\n", result->ToString().c_str());
    return 1;
  }
  std::printf("mounted\n");
  std::fflush(stdout);
  for (;;) pause();
}
