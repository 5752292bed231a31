// LocalClusterProvider, driven directly on a real-time loop, under both
// runtimes (the bwrap ones are skipped, saying so, where bubblewrap does not
// work). Containers are small scripts of a test image; the contract itself is
// checked from inside the container by tests/local/contract_check.py.
#define FUSE_USE_VERSION 34
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fs.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/plugin/json_value.h"
#include "local/internal/archive.h"
#include "local/internal/fs.h"
#include "local/internal/layout.h"
#include "local/internal/spawn.h"
#include "local/local_test_util.h"

namespace kiln::local {
namespace {

using ::kiln::JsonValue;
using ::kiln::WriteJson;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;
using testing::ListDir;
using testing::ReadFile;
using testing::Recorder;
using testing::RunUntil;
using testing::TempDir;
using testing::WriteFile;

constexpr char kArnPrefix[] = "arn:aws:sagemaker:us-east-1:000000000000:training-job/";

class LocalClusterProviderTest : public ::testing::TestWithParam<LocalRuntime> {
 protected:
  void SetUp() override {
    if (GetParam() == LocalRuntime::kBwrap && !testing::BwrapWorks()) {
      GTEST_SKIP() << testing::kNoBwrap;
    }
    ASSERT_FALSE(tmp_.path().empty());
    state_dir_ = tmp_.path() + "/state";
    image_dir_ = tmp_.path() + "/image";
    store_dir_ = tmp_.path() + "/store";
    loop_ = NewRealTimeEventLoop();
    file_store_ = NewFileObjectStore();
    stores_.Register("file", file_store_.get());
    WriteFile(image_dir_ + "/contract_check.py",
              ReadFile(KILN_LOCAL_TEST_DIR "/contract_check.py"), 0755);
    MakeProvider(LocalOptions());
  }

  void TearDown() override {
    channel_.reset();
    provider_.reset();
  }

  void MakeProvider(LocalOptions options) {
    provider_.reset();
    options.state_dir = state_dir_;
    options.runtime = GetParam();
    options.object_stores = &stores_;
    options.checkpoint_sync_interval = absl::Milliseconds(100);
    options_ = options;
    auto provider = NewLocalClusterProvider(*loop_, options);
    ASSERT_TRUE(provider.ok()) << provider.status();
    provider_ = *std::move(provider);
    provider_->SetListener(&listener_);
    channel_ = NewLocalDataChannel(*loop_, stores_, {.state_dir = state_dir_});
  }

  // Runs `body` in a child process with a mount namespace of its own
  // (testing::RunWithSmallDisks), on a provider made there with `options`:
  // for tests that mount (a tmpfs left inside a directory makes its deletion
  // fail with EBUSY). `body` writes its findings into `f` (the child's copy,
  // which is brought back): "SKIP" when the machine cannot do what the test
  // needs, "ERROR" when a step failed. Skips the test on "SKIP" (the caller
  // then returns: IsSkipped()); otherwise fails it when the child crashed or
  // found an error, and every failure of the test from then on shows `f`.
  // (The provider of SetUp goes first: this process keeps no thread to fork.)
  void RunInMountNamespace(testing::Facts& f, const std::function<void()>& body,
                           const LocalOptions& options = LocalOptions()) {
    channel_.reset();
    provider_.reset();
    f = testing::RunWithSmallDisks({}, [&] {
      MakeProvider(options);
      if (provider_ == nullptr) {
        f["ERROR"] = "no provider";
      } else {
        body();
      }
      return f;
    });
    if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
    std::string facts;
    for (const auto& [name, value] : f) absl::StrAppend(&facts, name, " = ", value, "\n");
    facts_trace_.emplace(__FILE__, __LINE__, facts);
    EXPECT_EQ(f["CHILD"], "");
    EXPECT_EQ(f["ERROR"], "");
  }

  // In RunInMountNamespace's `body`: mounts a small tmpfs at `dir` (made when
  // missing), which keeps the directories above it from being deleted
  // (EBUSY). False, with "SKIP" set in `f`, when it cannot.
  static bool MountInTheWay(testing::Facts& f, const std::string& dir) {
    if (MakeDirs(dir).ok() && mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0) {
      return true;
    }
    f["SKIP"] = "cannot mount a tmpfs at " + dir;
    return false;
  }

  bool bwrap() const { return GetParam() == LocalRuntime::kBwrap; }
  std::string runtime() const { return bwrap() ? "bwrap" : "process"; }

  // A shell script in the test image, run as /opt/program/<name>.
  void AddScript(const std::string& name, const std::string& body) {
    WriteFile(absl::StrCat(image_dir_, "/", name), absl::StrCat("#!/bin/sh\n", body), 0755);
  }

  static v1::CreateTrainingJobRequest Request(const std::string& name,
                                              std::vector<std::string> entrypoint) {
    v1::CreateTrainingJobRequest r;
    r.set_training_job_name(name);
    r.set_role_arn("arn:aws:iam::000000000000:role/test");
    auto* spec = r.mutable_algorithm_specification();
    spec->set_training_input_mode("File");
    for (const std::string& e : entrypoint) spec->add_container_entrypoint(e);
    r.mutable_output_data_config()->set_s3_output_path("file:///unused");
    return r;
  }

  absl::StatusOr<Cluster> Provision(const std::vector<InstanceGroupSpec>& groups,
                                    const std::string& job = "job") {
    ClusterSpec spec;
    spec.job_name = job;
    spec.groups = groups;
    std::optional<absl::StatusOr<Cluster>> result;
    provider_->Provision(spec, [&](absl::StatusOr<Cluster> c) { result = std::move(c); });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("Provision did not complete");
    }
    return *result;
  }

  // The id the provider's next cluster gets ("cluster-<pid>-<n>", numbered per
  // process): one more than that of a cluster provisioned, and released, now.
  // "" when that Provision fails.
  std::string NextClusterId() {
    absl::StatusOr<Cluster> probe = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
    if (!probe.ok()) return "";
    provider_->Release(*probe);
    const size_t dash = probe->id.rfind('-');
    return absl::StrCat(probe->id.substr(0, dash + 1), std::stoull(probe->id.substr(dash + 1)) + 1);
  }

  absl::Status Prepare(const Cluster& cluster, const std::string& image = "") {
    std::optional<absl::Status> result;
    provider_->PrepareImage(cluster, image.empty() ? image_dir_ : image,
                            [&](absl::Status s) { result = s; });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("PrepareImage did not complete");
    }
    return *result;
  }

  absl::Status Deliver(const v1::CreateTrainingJobRequest& request, const Cluster& cluster) {
    const std::string arn = kArnPrefix + request.training_job_name();
    JobContext job{request.training_job_name(), arn, request, cluster, 1};
    int pending = 0;
    absl::Status status;
    for (const v1::Channel& channel : request.input_data_config()) {
      std::vector<const Instance*> receivers;
      for (const Instance& i : cluster.instances) {
        if (ChannelReachesGroup(channel, i.group_name)) receivers.push_back(&i);
      }
      const std::string& mode = EffectiveInputMode(request, channel);
      ++pending;
      channel_->Deliver(ChannelDelivery{job, channel, mode, receivers}, [&](absl::Status s) {
        status.Update(s);
        --pending;
      });
    }
    if (!RunUntil(*loop_, [&] { return pending == 0; })) {
      return absl::DeadlineExceededError("Deliver did not complete");
    }
    return status;
  }

  // Starts the job's containers; OK once they run.
  absl::Status Start(const v1::CreateTrainingJobRequest& request, const Cluster& cluster,
                     Recorder& events) {
    const std::string arn = kArnPrefix + request.training_job_name();
    JobContext job{request.training_job_name(), arn, request, cluster, 1};
    std::optional<absl::Status> result;
    provider_->StartContainers(job, events, [&](absl::Status s) { result = s; });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("StartContainers did not complete");
    }
    return *result;
  }

  bool WaitExits(Recorder& events, size_t n, absl::Duration timeout = absl::Seconds(30)) {
    return RunUntil(*loop_, [&] { return events.exits.size() >= n; }, timeout);
  }

  absl::StatusOr<ArtifactsResult> Upload(const v1::CreateTrainingJobRequest& request,
                                         const Cluster& cluster) {
    const std::string arn = kArnPrefix + request.training_job_name();
    JobContext job{request.training_job_name(), arn, request, cluster, 1};
    std::optional<absl::StatusOr<ArtifactsResult>> result;
    provider_->UploadArtifacts(job, [&](absl::StatusOr<ArtifactsResult> r) { result = r; });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("UploadArtifacts did not complete");
    }
    return *result;
  }

  // Runs the contract check on a cluster of `groups` and expects it to pass
  // on every instance.
  void RunContract(const std::vector<InstanceGroupSpec>& groups, bool hetero) {
    // Input data: a FullyReplicated channel for everyone, a sharded one, and
    // (hetero) one for the second group only.
    WriteFile(store_dir_ + "/train/a.csv", "1,2\n");
    WriteFile(store_dir_ + "/train/sub/b.csv", "3,4\n");
    for (int i = 0; i < 4; ++i) WriteFile(absl::StrCat(store_dir_, "/shards/part-", i), "x");
    WriteFile(store_dir_ + "/eval/e.txt", "eval\n");

    v1::CreateTrainingJobRequest r =
        Request(hetero ? "contract-hetero" : "contract-homo",
                {testing::Python(), "/opt/program/contract_check.py"});
    (*r.mutable_hyper_parameters())["epochs"] = "10";
    (*r.mutable_hyper_parameters())["lr"] = "0.1";
    (*r.mutable_hyper_parameters())["tiny"] = "1e-5";
    (*r.mutable_hyper_parameters())["big"] = "1e16";
    (*r.mutable_hyper_parameters())["flag"] = "true";
    (*r.mutable_hyper_parameters())["name"] = "plain text";
    (*r.mutable_hyper_parameters())["quoted"] = "\"resnet\"";
    (*r.mutable_hyper_parameters())["nested"] = "{\"b\": [1, 2.50], \"a\": {\"z\": null}}";
    (*r.mutable_hyper_parameters())["unicode"] = "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"";
    (*r.mutable_hyper_parameters())["k"] = "3";
    (*r.mutable_hyper_parameters())["sagemaker_program"] = "\"train.py\"";
    (*r.mutable_hyper_parameters())["sagemaker_mpi_enabled"] = "true";
    (*r.mutable_hyper_parameters())["sagemaker_custom_flag"] = "7";
    (*r.mutable_environment())["MY_SETTING"] = "hello world";
    auto add_channel = [&](const std::string& name, const std::string& prefix,
                           const std::string& distribution,
                           const std::vector<std::string>& group_names,
                           const std::string& content_type) {
      v1::Channel* c = r.add_input_data_config();
      c->set_channel_name(name);
      auto* s3 = c->mutable_data_source()->mutable_s3_data_source();
      s3->set_s3_data_type("S3Prefix");
      s3->set_s3_uri("file://" + store_dir_ + "/" + prefix);
      if (!distribution.empty()) s3->set_s3_data_distribution_type(distribution);
      for (const std::string& g : group_names) s3->add_instance_group_names(g);
      if (!content_type.empty()) c->set_content_type(content_type);
    };
    add_channel("train", "train/", "", {}, "text/csv");
    add_channel("shards", "shards/", "ShardedByS3Key", {}, "");
    if (hetero) add_channel("eval", "eval/", "FullyReplicated", {groups[1].name}, "");

    // What the container must see.
    JsonValue expect = JsonValue::Object();
    expect.Set("job_name", JsonValue::String(r.training_job_name()))
        .Set("job_arn", JsonValue::String(kArnPrefix + r.training_job_name()))
        .Set("runtime", JsonValue::String(runtime()));
    JsonValue jgroups = JsonValue::Array();
    int host = 0;
    for (const InstanceGroupSpec& g : groups) {
      JsonValue hosts = JsonValue::Array();
      for (int i = 0; i < g.count; ++i) hosts.Push(JsonValue::String(absl::StrCat("algo-", ++host)));
      JsonValue jg = JsonValue::Object();
      jg.Set("name", JsonValue::String(g.name))
          .Set("type", JsonValue::String(g.instance_type))
          .Set("hosts", hosts);
      jgroups.Push(jg);
    }
    expect.Set("groups", jgroups);
    JsonValue channels = JsonValue::Object();
    {
      JsonValue files = JsonValue::Object();
      files.Set("a.csv", JsonValue::String("1,2\n")).Set("sub/b.csv", JsonValue::String("3,4\n"));
      JsonValue train = JsonValue::Object();
      train.Set("groups", JsonValue::Null())
          .Set("mode", JsonValue::String("File"))
          .Set("distribution", JsonValue::String("FullyReplicated"))
          .Set("content_type", JsonValue::String("text/csv"))
          .Set("files", files);
      channels.Set("train", train);
      JsonValue shards = JsonValue::Object();
      shards.Set("groups", JsonValue::Null())
          .Set("mode", JsonValue::String("File"))
          .Set("distribution", JsonValue::String("ShardedByS3Key"))
          .Set("content_type", JsonValue::Null());
      channels.Set("shards", shards);
      if (hetero) {
        JsonValue eval_files = JsonValue::Object();
        eval_files.Set("e.txt", JsonValue::String("eval\n"));
        JsonValue eval = JsonValue::Object();
        eval.Set("groups", JsonValue::Array().Push(JsonValue::String(groups[1].name)))
            .Set("mode", JsonValue::String("File"))
            .Set("distribution", JsonValue::String("FullyReplicated"))
            .Set("content_type", JsonValue::Null())
            .Set("files", eval_files);
        channels.Set("eval", eval);
      }
    }
    expect.Set("channels", channels);
    JsonValue hps = JsonValue::Object();
    for (const auto& [k, v] : r.hyper_parameters()) hps.Set(k, JsonValue::String(v));
    expect.Set("hyperparameters", hps);
    JsonValue env = JsonValue::Object();
    env.Set("MY_SETTING", JsonValue::String("hello world"));
    expect.Set("environment", env);
    expect.Set("hidden", JsonValue::Array().Push(JsonValue::String(state_dir_)));
    (*r.mutable_environment())["KILN_EXPECT"] = WriteJson(expect);
    // (KILN_EXPECT is itself part of the Environment map the script checks;
    // it checks only the entries listed under "environment".)

    auto cluster = Provision(groups, r.training_job_name());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    ASSERT_TRUE(Prepare(*cluster).ok());
    absl::Status delivered = Deliver(r, *cluster);
    ASSERT_TRUE(delivered.ok()) << delivered;
    Recorder events;
    absl::Status started = Start(r, *cluster, events);
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(WaitExits(events, cluster->instances.size())) << events.AllLines();
    for (const Instance& i : cluster->instances) {
      const ContainerExit& exit = events.exits[i.host_name];
      EXPECT_EQ(exit.exit_code, 0) << i.host_name << ": " << exit.failure_text << "\n"
                                   << events.AllLines();
      EXPECT_TRUE(events.HasLine(i.host_name, "CONTRACT OK " + i.host_name)) << events.AllLines();
    }
    // Sharding: the four shard objects are split among the instances,
    // disjointly and completely.
    std::vector<std::string> all;
    for (const Instance& i : cluster->instances) {
      for (const std::string& f :
           ListDir(absl::StrCat(state_dir_, "/instances/", i.id, "/ml/input/data/shards"))) {
        all.push_back(f);
      }
    }
    std::sort(all.begin(), all.end());
    EXPECT_THAT(all, ElementsAre("part-0", "part-1", "part-2", "part-3"));
    provider_->Release(*cluster);
  }

  TempDir tmp_;
  std::string state_dir_;
  std::string image_dir_;
  std::string store_dir_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ObjectStore> file_store_;
  ObjectStores stores_;
  LocalOptions options_;
  Recorder listener_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<DataChannel> channel_;
  std::optional<::testing::ScopedTrace> facts_trace_;  // (RunInMountNamespace)
};

TEST_P(LocalClusterProviderTest, ContractHoldsForHomogeneousCluster) {
  RunContract({{kHomogeneousGroupName, "ml.m5.large", 2}}, /*hetero=*/false);
}

TEST_P(LocalClusterProviderTest, ContractHoldsForHeterogeneousCluster) {
  RunContract({{"gpu_group", "ml.p4d.24xlarge", 1}, {"cpu_group", "ml.c5.18xlarge", 2}},
              /*hetero=*/true);
}

TEST_P(LocalClusterProviderTest, FailureFileAndExitCodeAreReported) {
  AddScript("fail.sh",
            "echo 'bad input: row 7' > \"$SAGEMAKER_BASE_DIR/output/failure\"\n"
            "echo failing\nexit 2\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("fails", {"/opt/program/fail.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 2);
  EXPECT_EQ(events.exits["algo-1"].failure_text, "bad input: row 7\n");
  EXPECT_TRUE(events.HasLine("algo-1", "failing"));
}

// A failure file that is there but cannot be read is named with the reason
// (not taken for a missing one, which has no reason).
TEST_P(LocalClusterProviderTest, FailureFileThatCannotBeReadIsNamedWithTheReason) {
  AddScript("fail.sh",
            "if [ \"$1\" = dir ]; then mkdir \"$SAGEMAKER_BASE_DIR/output/failure\"; fi\n"
            "exit 2\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  for (const std::string arg : {"dir", "none"}) {
    SCOPED_TRACE(arg);
    ASSERT_TRUE(Prepare(*cluster).ok());
    Recorder events;
    ASSERT_TRUE(
        Start(Request("fails-" + arg, {"/opt/program/fail.sh", arg}), *cluster, events).ok());
    ASSERT_TRUE(WaitExits(events, 1));
    EXPECT_EQ(events.exits["algo-1"].exit_code, 2);
    EXPECT_EQ(events.exits["algo-1"].failure_text, "");
    EXPECT_EQ(events.exits["algo-1"].failure_error,
              arg == "dir" ? "read 'algo-1:/opt/ml/output/failure': Is a directory" : "");
  }
}

TEST_P(LocalClusterProviderTest, FailureTextIsCutAt1024Bytes) {
  AddScript("long.sh",
            "head -c 5000 /dev/zero | tr '\\0' x > \"$SAGEMAKER_BASE_DIR/output/failure\"\n"
            "exit 1\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("long-failure", {"/opt/program/long.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 1);
  EXPECT_EQ(events.exits["algo-1"].failure_text, std::string(1024, 'x'));
}

TEST_P(LocalClusterProviderTest, SigtermIsTrappedThenSigkillEndsTheTree) {
  // The script and a child of it ignore SIGTERM (and say so); only SIGKILL ends them.
  AddScript("stubborn.sh",
            "trap 'echo got TERM' TERM\n"
            "sh -c 'trap \"echo child got TERM\" TERM; echo child ready; "
            "while true; do sleep 0.05; done' &\n"
            "echo ready\n"
            "while true; do sleep 0.05; done\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("stubborn", {"/opt/program/stubborn.sh"}), *cluster, events).ok());
  // Both have installed their traps.
  ASSERT_TRUE(RunUntil(*loop_, [&] {
    return events.HasLine("algo-1", "ready") && events.HasLine("algo-1", "child ready");
  }));
  provider_->Signal(*cluster, SIGTERM);
  ASSERT_TRUE(RunUntil(*loop_, [&] {
    return events.HasLine("algo-1", "got TERM") && events.HasLine("algo-1", "child got TERM");
  })) << events.AllLines();
  EXPECT_TRUE(events.exits.empty()) << "SIGTERM alone ended a container that traps it";
  provider_->Signal(*cluster, SIGKILL);
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 128 + SIGKILL);
}

TEST_P(LocalClusterProviderTest, SigtermHandlerSavesStateAndExits) {
  AddScript("graceful.sh",
            "trap 'echo saved > \"$SM_MODEL_DIR/state\"; exit 0' TERM\n"
            "echo ready\n"
            "while true; do sleep 0.05; done\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("graceful", {"/opt/program/graceful.sh"}), *cluster, events).ok());
  ASSERT_TRUE(RunUntil(*loop_, [&] { return events.HasLine("algo-1", "ready"); }));
  provider_->Signal(*cluster, SIGTERM);
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0);
  EXPECT_EQ(ReadFile(absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id,
                                  "/ml/model/state")),
            "saved\n");
}

TEST_P(LocalClusterProviderTest, ReleaseLeavesNoProcessOfTheJob) {
  AddScript("spawner.sh",
            "readlink /proc/self/ns/pid > \"$SM_OUTPUT_DATA_DIR/ns\"\n"
            "echo $$ > \"$SM_OUTPUT_DATA_DIR/pid\"\n"
            "sleep 1000 &\n"
            "sh -c 'sleep 1000 & sleep 1000' &\n"
            // One that leaves the job's process group (setsid).
            "setsid sleep 1000 &\n"
            "echo $! > \"$SM_OUTPUT_DATA_DIR/escaped\"\n"
            "echo ready\n"
            "wait\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("spawner", {"/opt/program/spawner.sh"}), *cluster, events).ok());
  ASSERT_TRUE(RunUntil(*loop_, [&] {
    return events.HasLine("algo-1", "ready") && events.HasLine("algo-2", "ready");
  }));
  std::vector<std::function<std::vector<int>()>> probes;
  for (const Instance& i : cluster->instances) {
    const std::string data = absl::StrCat(state_dir_, "/instances/", i.id, "/ml/output/data/");
    if (bwrap()) {
      std::string ns = ReadFile(data + "ns");
      ns.erase(ns.find_last_not_of('\n') + 1);
      probes.push_back([ns] { return testing::ProcessesInNamespace(ns); });
    } else {
      int pid = 0;
      ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(data + "pid")), &pid));
      // (The script's group is its keeper's: process_keeper.h.)
      const pid_t group = getpgid(pid);
      ASSERT_GT(group, 0);
      int escaped = 0;
      ASSERT_TRUE(
          absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(data + "escaped")), &escaped));
      probes.push_back([group, escaped] {
        std::vector<int> running = testing::ProcessesInGroup(group);
        if (testing::IsRunning(escaped)) running.push_back(escaped);
        return running;
      });
    }
    // The script, its sleep, the inner shell and its two sleeps, the one that
    // called setsid (and, in a sandbox, its init) once they have all
    // started.
    auto& probe = probes.back();
    ASSERT_TRUE(RunUntil(*loop_, [&] { return probe().size() >= 6; }, absl::Seconds(5)))
        << "the job's processes are not where the test looks: " << absl::StrJoin(probe(), " ");
  }
  const std::string cluster_dir = absl::StrCat(state_dir_, "/instances/", cluster->id);
  provider_->Release(*cluster);
  for (auto& probe : probes) {
    EXPECT_TRUE(RunUntil(*loop_, [&] { return probe().empty(); }, absl::Seconds(5)))
        << "still running: " << absl::StrJoin(probe(), " ");
  }
  EXPECT_TRUE(RunUntil(*loop_, [&] { return !internal::Exists(cluster_dir); }, absl::Seconds(5)));
  EXPECT_EQ(events.exit_calls, 0) << "a released cluster reported an exit";
  // The log streams are kept.
  EXPECT_EQ(ListDir(state_dir_ + "/logs/spawner").size(), 2u);
}

TEST_P(LocalClusterProviderTest, DestroyingTheProviderLeavesNoProcess) {
  AddScript("spawner.sh",
            "readlink /proc/self/ns/pid > \"$SM_OUTPUT_DATA_DIR/ns\"\n"
            "echo $$ > \"$SM_OUTPUT_DATA_DIR/pid\"\n"
            "sleep 1000 &\n"
            "echo ready\n"
            "wait\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("spawner", {"/opt/program/spawner.sh"}), *cluster, events).ok());
  ASSERT_TRUE(RunUntil(*loop_, [&] { return events.HasLine("algo-1", "ready"); }));
  const std::string data =
      absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id, "/ml/output/data/");
  std::function<std::vector<int>()> probe;
  if (bwrap()) {
    std::string ns = ReadFile(data + "ns");
    ns.erase(ns.find_last_not_of('\n') + 1);
    probe = [ns] { return testing::ProcessesInNamespace(ns); };
  } else {
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(data + "pid")), &pid));
    const pid_t group = getpgid(pid);
    ASSERT_GT(group, 0);
    probe = [group] { return testing::ProcessesInGroup(group); };
  }
  ASSERT_FALSE(probe().empty());
  provider_.reset();  // kills, waits for its threads, removes its instances
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!probe().empty() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(probe().empty()) << "still running: " << absl::StrJoin(probe(), " ");
  EXPECT_FALSE(internal::Exists(absl::StrCat(state_dir_, "/instances/", cluster->id)));
}

// The script of the artifact tests: each host writes its own model file, a
// file every host writes (sub/common.txt), a symbolic link, and metrics.
constexpr char kModelScript[] =
    "echo \"weights of $SM_CURRENT_HOST\" > \"$SM_MODEL_DIR/$SM_CURRENT_HOST.bin\"\n"
    "mkdir -p \"$SM_MODEL_DIR/sub\"\n"
    "echo \"$SM_CURRENT_HOST\" > \"$SM_MODEL_DIR/sub/common.txt\"\n"
    "ln -s /etc/hostname \"$SM_MODEL_DIR/link\"\n"
    "echo metrics > \"$SM_OUTPUT_DATA_DIR/metrics-$SM_CURRENT_HOST.json\"\n";

TEST_P(LocalClusterProviderTest, ModelsOfAllInstancesAreMergedIntoModelTarGz) {
  AddScript("model.sh", kModelScript);
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  const std::string job = "model-gz";
  v1::CreateTrainingJobRequest r = Request(job, {"/opt/program/model.sh"});
  r.mutable_output_data_config()->set_s3_output_path("file://" + tmp_.path() + "/out/");
  Recorder events;
  ASSERT_TRUE(Start(r, *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 2));
  auto uploaded = Upload(r, *cluster);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  const std::string out = absl::StrCat(tmp_.path(), "/out/", job, "/output");
  EXPECT_EQ(uploaded->model_uri, absl::StrCat("file://", out, "/model.tar.gz"));
  auto model = internal::ReadArchive(out + "/model.tar.gz");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->filters, std::vector<std::string>{"gzip"});
  std::vector<std::string> names;
  for (const auto& [name, data] : model->files) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("algo-1.bin", "algo-2.bin", "sub/common.txt"));
  EXPECT_EQ(model->files["algo-1.bin"], "weights of algo-1\n");
  // Clashing names: the later host wins, as the service merges.
  EXPECT_EQ(model->files["sub/common.txt"], "algo-2\n");
  // A link is stored as a link, not as what it points to.
  EXPECT_EQ(model->symlinks["link"], "/etc/hostname");
  auto output = internal::ReadArchive(out + "/output.tar.gz");
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->filters, std::vector<std::string>{"gzip"});
  EXPECT_EQ(output->files.size(), 2u);
  EXPECT_EQ(output->files["metrics-algo-2.json"], "metrics\n");
}

// What no archive or upload can take (a FIFO, a socket) is named in the
// instance's log stream, for both kinds of model upload and for the output.
TEST_P(LocalClusterProviderTest, WhatTheUploadLeavesOutIsNamedInTheLogStream) {
  AddScript("fifo.sh",
            "echo weights > \"$SM_MODEL_DIR/model.bin\"\n"
            "mkfifo \"$SM_MODEL_DIR/queue\" \"$SM_OUTPUT_DATA_DIR/pipe\"\n");
  for (const char* compression : {"GZIP", "NONE"}) {
    SCOPED_TRACE(compression);
    auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
    ASSERT_TRUE(cluster.ok());
    ASSERT_TRUE(Prepare(*cluster).ok());
    const std::string job = absl::StrCat("left-out-", absl::AsciiStrToLower(compression));
    v1::CreateTrainingJobRequest r = Request(job, {"/opt/program/fifo.sh"});
    r.mutable_output_data_config()->set_s3_output_path("file://" + tmp_.path() + "/out/");
    r.mutable_output_data_config()->set_compression_type(compression);
    Recorder events;
    ASSERT_TRUE(Start(r, *cluster, events).ok());
    ASSERT_TRUE(WaitExits(events, 1));
    auto uploaded = Upload(r, *cluster);
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    const std::vector<std::string> streams = ListDir(state_dir_ + "/logs/" + job);
    ASSERT_EQ(streams.size(), 1u);
    const std::string log = ReadFile(absl::StrCat(state_dir_, "/logs/", job, "/", streams[0]));
    EXPECT_THAT(log, HasSubstr(absl::StrCat(
                         "[kiln] the model ", std::string(compression) == "NONE" ? "upload" : "archive",
                         " leaves out what is not a file, directory or link: "
                         "algo-1:/opt/ml/model/queue\n")));
    EXPECT_THAT(log, HasSubstr("[kiln] the output archive leaves out what is not a file, "
                               "directory or link: algo-1:/opt/ml/output/data/pipe\n"));
    provider_->Release(*cluster);
  }
}

// CompressionType NONE: the model's files are uploaded as they are, below
// <S3OutputPath>/<job>/output/model/, and that prefix is the model's URI;
// output.tar.gz stays a gzip-compressed archive.
TEST_P(LocalClusterProviderTest, UncompressedModelIsUploadedFileByFile) {
  AddScript("model.sh", kModelScript);
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  const std::string job = "model-none";
  v1::CreateTrainingJobRequest r = Request(job, {"/opt/program/model.sh"});
  r.mutable_output_data_config()->set_s3_output_path("file://" + tmp_.path() + "/out/");
  r.mutable_output_data_config()->set_compression_type("NONE");
  Recorder events;
  ASSERT_TRUE(Start(r, *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 2));
  auto uploaded = Upload(r, *cluster);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  const std::string out = absl::StrCat(tmp_.path(), "/out/", job, "/output");
  EXPECT_EQ(uploaded->model_uri, absl::StrCat("file://", out, "/model/"));
  EXPECT_FALSE(internal::Exists(out + "/model.tar.gz"));
  // Every regular file, merged (the later host wins); the link has no object.
  EXPECT_THAT(ListDir(out + "/model"), ElementsAre("algo-1.bin", "algo-2.bin", "sub"));
  EXPECT_THAT(ListDir(out + "/model/sub"), ElementsAre("common.txt"));
  EXPECT_EQ(ReadFile(out + "/model/algo-1.bin"), "weights of algo-1\n");
  EXPECT_EQ(ReadFile(out + "/model/sub/common.txt"), "algo-2\n");
  auto output = internal::ReadArchive(out + "/output.tar.gz");
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->filters, std::vector<std::string>{"gzip"});
  EXPECT_EQ(output->files.size(), 2u);
}

// An artifact upload that fails names the object: its URI holds
// S3OutputPath and the names of the files the container chose, shown escaped
// and cut (the store's own message, which the store escaped, follows as it
// is). Here a directory in the store stands where the object would go.
TEST_P(LocalClusterProviderTest, AFailedArtifactUploadShowsItsUriEscapedAndCut) {
  const std::string odd = "a\nb'c\"d\xff" "e";
  const std::string shown = R"(a\nb'c"d\xFFe)";
  AddScript("odd.sh", "printf w > \"$SM_MODEL_DIR/$(printf 'a\\nb\\047c\"d\\377e')\"\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  // Runs `r` and returns its upload's status.
  auto run = [&](const v1::CreateTrainingJobRequest& r) -> absl::Status {
    absl::Status s = Prepare(*cluster);
    Recorder events;
    if (s.ok()) s = Start(r, *cluster, events);
    if (s.ok() && (!WaitExits(events, 1) || events.exits["algo-1"].exit_code != 0)) {
      s = absl::InternalError(absl::StrCat("the job failed: ", events.AllLines()));
    }
    return s.ok() ? Upload(r, *cluster).status() : s;
  };
  auto one_line = [](absl::string_view message) {
    return message.find_first_of("\n\xff") == absl::string_view::npos;
  };

  // CompressionType NONE: the file goes up under the name the container chose.
  v1::CreateTrainingJobRequest r = Request("odd-name", {"/opt/program/odd.sh"});
  r.mutable_output_data_config()->set_s3_output_path("file://" + tmp_.path() + "/out/");
  r.mutable_output_data_config()->set_compression_type("NONE");
  const std::string model = tmp_.path() + "/out/odd-name/output/model/";
  WriteFile(model + odd + "/in-the-way", "x");
  absl::Status s = run(r);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(one_line(s.message())) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("file://", model, shown, ": ")));

  // model.tar.gz below an S3OutputPath of more than 1024 bytes holding the
  // same characters: its URI is cut.
  std::string out = absl::StrCat(tmp_.path(), "/", odd);
  for (int i = 0; i < 4; ++i) absl::StrAppend(&out, "/", std::string(250, 'o'));
  r = Request("long-path", {"/opt/program/odd.sh"});
  r.mutable_output_data_config()->set_s3_output_path("file://" + out + "/");
  const std::string uri = absl::StrCat("file://", out, "/long-path/output/model.tar.gz");
  WriteFile(uri.substr(7) + "/in-the-way", "x");
  s = run(r);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(one_line(s.message())) << s;
  const std::string head = absl::StrCat("file://", tmp_.path(), "/");
  const std::string kept = uri.substr(0, 1024).substr(head.size() + odd.size());
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(head, shown, kept, "...: ")));
}

// A container can replace /opt/ml/model, /opt/ml/output or
// /opt/ml/output/data by a symbolic link to anywhere on the host (under
// bwrap, to the state directory it cannot see). The upload follows none of
// them: it fails naming the tree, and nothing of the link's target is
// uploaded.
TEST_P(LocalClusterProviderTest, ATreeReplacedByALinkIsNotUploaded) {
  const std::string secret = tmp_.path() + "/secret";
  WriteFile(secret + "/secret.txt", "host secret");
  WriteFile(secret + "/data/secret.txt", "host secret");
  AddScript("plant.sh",
            absl::StrCat("echo weights > \"$SAGEMAKER_BASE_DIR/model/w.bin\"\n"
                         "rm -rf \"$SAGEMAKER_BASE_DIR/$1\"\n"
                         "ln -s '", secret, "' \"$SAGEMAKER_BASE_DIR/$1\"\n"));
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  for (const std::string victim : {"model", "output", "output/data"}) {
    SCOPED_TRACE(victim);
    ASSERT_TRUE(Prepare(*cluster).ok());
    const std::string job = absl::StrCat("plant-", victim == "output/data" ? "data" : victim);
    v1::CreateTrainingJobRequest r = Request(job, {"/opt/program/plant.sh", victim});
    r.mutable_output_data_config()->set_s3_output_path("file://" + tmp_.path() + "/out/");
    Recorder events;
    ASSERT_TRUE(Start(r, *cluster, events).ok());
    ASSERT_TRUE(WaitExits(events, 1));
    ASSERT_EQ(events.exits["algo-1"].exit_code, 0) << events.AllLines();
    auto uploaded = Upload(r, *cluster);
    EXPECT_EQ(uploaded.status().code(), absl::StatusCode::kFailedPrecondition)
        << uploaded.status();
    EXPECT_THAT(uploaded.status().message(), HasSubstr("algo-1:/opt/ml/" + victim));
    EXPECT_THAT(uploaded.status().message(), HasSubstr("symbolic link"));
    const std::string out = absl::StrCat(tmp_.path(), "/out/", job, "/output");
    for (const std::string& name : ListDir(out)) {
      auto archive = internal::ReadArchive(absl::StrCat(out, "/", name));
      ASSERT_TRUE(archive.ok()) << archive.status();
      for (const auto& [path, data] : archive->files) {
        EXPECT_NE(data, "host secret") << name << " holds " << path;
      }
    }
  }
}

// The failure file is read below the instance's directory: through a link
// planted in place of /opt/ml/output nothing is read.
TEST_P(LocalClusterProviderTest, FailureFileIsNotReadThroughAPlantedLink) {
  const std::string outside = tmp_.path() + "/outside";
  WriteFile(outside + "/failure", "host secret");
  AddScript("plant.sh", absl::StrCat("rm -rf \"$SAGEMAKER_BASE_DIR/output\"\n"
                                     "ln -s '", outside, "' \"$SAGEMAKER_BASE_DIR/output\"\n"
                                     "exit 3\n"));
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("plant-failure", {"/opt/program/plant.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 3);
  EXPECT_EQ(events.exits["algo-1"].failure_text, "");
  // ...and says so, rather than reading as if there were no file.
  EXPECT_THAT(events.exits["algo-1"].failure_error,
              HasSubstr("algo-1:/opt/ml/output/failure is not read: '"));
  EXPECT_THAT(events.exits["algo-1"].failure_error,
              HasSubstr("/ml/output' is a symbolic link, which is never followed"));
}

// Checkpoint sync follows no link: a link to a host file inside the
// checkpoint directory is not uploaded, and once the container replaced the
// directory itself by a link, a sync uploads and deletes nothing and says why
// in the log stream.
TEST_P(LocalClusterProviderTest, CheckpointSyncFollowsNoPlantedLink) {
  const std::string secret = tmp_.path() + "/secret";
  WriteFile(secret + "/stolen.pt", "host secret");
  // The container replaces its checkpoint directory once the test, having
  // seen own.pt synced, puts input/go in its tree.
  AddScript("plant.sh",
            absl::StrCat("ckpt=\"$SAGEMAKER_BASE_DIR/checkpoints\"\n"
                         "echo mine > \"$ckpt/own.pt\"\n"
                         "ln -s '", secret, "/stolen.pt' \"$ckpt/link.pt\"\n"
                         "i=0\n"
                         "while [ ! -e \"$SAGEMAKER_BASE_DIR/input/go\" ] && [ $i -lt 600 ]; do\n"
                         "  sleep 0.05; i=$((i+1))\n"
                         "done\n"
                         "rm -rf \"$ckpt\" && ln -s '", secret, "' \"$ckpt\"\n"
                         "sleep 0.3\n"));
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("plant-ckpt", {"/opt/program/plant.sh"});
  r.mutable_checkpoint_config()->set_s3_uri("file://" + store_dir_ + "/ckpt/");
  Recorder events;
  ASSERT_TRUE(Start(r, *cluster, events).ok());
  const std::string own = store_dir_ + "/ckpt/own.pt";
  const bool synced = RunUntil(*loop_, [&] { return internal::Exists(own); });
  WriteFile(absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id, "/ml/input/go"), "");
  ASSERT_TRUE(synced);
  ASSERT_TRUE(WaitExits(events, 1));
  ASSERT_EQ(events.exits["algo-1"].exit_code, 0) << events.AllLines();
  // own.pt was synced before the directory was replaced, and is not deleted;
  // neither the link inside it nor what the replacing link shows is synced.
  EXPECT_THAT(ListDir(store_dir_ + "/ckpt"), ElementsAre("own.pt"));
  EXPECT_EQ(ReadFile(own), "mine\n");
  const std::vector<std::string> streams = ListDir(state_dir_ + "/logs/plant-ckpt");
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_THAT(ReadFile(state_dir_ + "/logs/plant-ckpt/" + streams[0]),
              HasSubstr("is a symbolic link, which is not followed"));
}

// A run on an instance whose tree was not made fresh by PrepareImage empties
// its directories itself: links an earlier run planted on the way (here in
// place of /opt/ml/input and of the directory above a checkpoint LocalPath)
// are replaced, not followed out of the instance's directory.
TEST_P(LocalClusterProviderTest, APlantedLinkIsNotFollowedWhenTheNextRunIsMadeFresh) {
  const std::string outside = tmp_.path() + "/outside";
  WriteFile(outside + "/ckpt/precious", "keep");
  AddScript("plant.sh", absl::StrCat("for d in deep input; do\n"
                                     "  rm -rf \"$SAGEMAKER_BASE_DIR/$d\"\n"
                                     "  ln -s '", outside, "' \"$SAGEMAKER_BASE_DIR/$d\"\n"
                                     "done\n"));
  AddScript("after.sh", "ls \"$SAGEMAKER_BASE_DIR/deep/ckpt\"\necho ran\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest a = Request("plant-a", {"/opt/program/plant.sh"});
  a.mutable_checkpoint_config()->set_s3_uri("file://" + store_dir_ + "/ckpt-a/");
  a.mutable_checkpoint_config()->set_local_path("/opt/ml/deep/ckpt");
  Recorder events_a;
  ASSERT_TRUE(Start(a, *cluster, events_a).ok());
  ASSERT_TRUE(WaitExits(events_a, 1));
  ASSERT_EQ(events_a.exits["algo-1"].exit_code, 0) << events_a.AllLines();
  // (Nor did job A's checkpoint sync upload what its link shows.)
  EXPECT_FALSE(internal::Exists(store_dir_ + "/ckpt-a/precious"));

  v1::CreateTrainingJobRequest b = Request("plant-b", {"/opt/program/after.sh"});
  b.mutable_checkpoint_config()->set_s3_uri("file://" + store_dir_ + "/ckpt-b/");
  b.mutable_checkpoint_config()->set_local_path("/opt/ml/deep/ckpt");
  Recorder events_b;
  ASSERT_TRUE(Start(b, *cluster, events_b).ok());  // no PrepareImage in between
  ASSERT_TRUE(WaitExits(events_b, 1));
  EXPECT_EQ(events_b.exits["algo-1"].exit_code, 0) << events_b.AllLines();
  EXPECT_EQ(events_b.lines.size(), 1u) << events_b.AllLines();  // "ran": an empty directory
  EXPECT_EQ(ReadFile(outside + "/ckpt/precious"), "keep");
  EXPECT_THAT(ListDir(outside), ElementsAre("ckpt"));  // no config/ written there
}

// On the process runtime a CheckpointConfig.LocalPath outside /opt/ml would
// be that host directory itself, shared by every job and never emptied: such
// a job is refused before anything runs. bwrap mounts a directory of the
// instance there, and the host's directory of that name is not used.
TEST_P(LocalClusterProviderTest, CheckpointLocalPathOutsideOptMlIsRefusedOnTheProcessRuntime) {
  const std::string host_dir = tmp_.path() + "/host-ckpt";
  WriteFile(host_dir + "/earlier-job.pt", "old");
  WriteFile(store_dir_ + "/ckpt/restored.pt", "new");
  AddScript("ls.sh", absl::StrCat("ls '", host_dir, "'\n"));
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("ckpt-outside", {"/opt/program/ls.sh"});
  r.mutable_checkpoint_config()->set_s3_uri("file://" + store_dir_ + "/ckpt/");
  r.mutable_checkpoint_config()->set_local_path(host_dir);
  Recorder events;
  const absl::Status started = Start(r, *cluster, events);
  if (bwrap()) {
    ASSERT_TRUE(started.ok()) << started;
    ASSERT_TRUE(WaitExits(events, 1));
    std::vector<std::string> texts;
    for (const auto& l : events.lines) texts.push_back(l.text);
    EXPECT_THAT(texts, ElementsAre("restored.pt"));
  } else {
    EXPECT_EQ(started.code(), absl::StatusCode::kInvalidArgument) << started;
    EXPECT_THAT(started.message(), HasSubstr(absl::StrCat("CheckpointConfig.LocalPath '",
                                                          host_dir, "' is outside /opt/ml")));
    EXPECT_EQ(events.exit_calls, 0);
  }
  EXPECT_THAT(ListDir(host_dir), ElementsAre("earlier-job.pt"));
  EXPECT_THAT(ListDir(store_dir_ + "/ckpt"), ElementsAre("restored.pt"));
}

// bwrap's /tmp is the instance's scratch directory on disk (not a tmpfs in
// memory), emptied before the next run like the rest of the instance.
TEST_P(LocalClusterProviderTest, BwrapTmpIsTheInstancesScratchDirectory) {
  if (!bwrap()) GTEST_SKIP() << "the process runtime's scratch is TMPDIR; /tmp is the host's";
  AddScript("tmp.sh", "echo scratch > /tmp/marker\necho \"$TMPDIR\"\n");
  AddScript("empty.sh", "[ -z \"$(ls -A /tmp)\" ] && echo empty\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("tmp-a", {"/opt/program/tmp.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_TRUE(events.HasLine("algo-1", "/tmp")) << events.AllLines();
  const std::string tmp =
      absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id, "/tmp");
  EXPECT_EQ(ReadFile(tmp + "/marker"), "scratch\n");
  Recorder again;
  ASSERT_TRUE(Start(Request("tmp-b", {"/opt/program/empty.sh"}), *cluster, again).ok());
  ASSERT_TRUE(WaitExits(again, 1));
  EXPECT_TRUE(again.HasLine("algo-1", "empty")) << again.AllLines();
}

TEST_P(LocalClusterProviderTest, LogLinesReachTheEventsAndTheLogStream) {
  AddScript("chatty.sh",
            "echo 'epoch 1 loss=0.5'\n"
            "echo 'to stderr' >&2\n"
            "printf 'no newline at the end'\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("chatty", {"/opt/program/chatty.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  std::vector<std::string> texts;
  for (const auto& l : events.lines) texts.push_back(l.text);
  EXPECT_THAT(texts, ElementsAre("epoch 1 loss=0.5", "to stderr", "no newline at the end"));
  const std::vector<std::string> streams = ListDir(state_dir_ + "/logs/chatty");
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(streams[0], "algo-1-")) << streams[0];
  // The container's output, then Kiln's own note (resource use) on a line of its own.
  const std::string stream = ReadFile(state_dir_ + "/logs/chatty/" + streams[0]);
  EXPECT_TRUE(absl::StartsWith(stream, "epoch 1 loss=0.5\nto stderr\nno newline at the end\n[kiln] "))
      << stream;
  EXPECT_THAT(stream, HasSubstr("algo-1 exited with 0: cpu "));
}

// Where the process keeper cannot run (it fell back: a memory file could not
// be executed), the container still runs, and its log stream says what it
// lacks. (The keeper is made unusable for this test only.)
TEST_P(LocalClusterProviderTest, AContainerWithoutItsKeeperSaysSoInItsLog) {
  if (bwrap()) GTEST_SKIP() << "bubblewrap needs no keeper";
  AddScript("plain.sh", "echo ran\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  internal::SetKeeperUnusableForTesting(true);
  const absl::Status started =
      Start(Request("plain", {"/opt/program/plain.sh"}), *cluster, events);
  const bool exited = started.ok() && WaitExits(events, 1);
  internal::SetKeeperUnusableForTesting(false);
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(exited);
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0);
  const std::vector<std::string> streams = ListDir(state_dir_ + "/logs/plain");
  ASSERT_EQ(streams.size(), 1u);
  const std::string stream = ReadFile(state_dir_ + "/logs/plain/" + streams[0]);
  EXPECT_THAT(stream, HasSubstr("[kiln] the process keeper cannot run here"));
}

// Job B on job A's warm instance finds nothing of A, whether the tree is made
// fresh by PrepareImage or ahead of it by Recycle (as the engine does when a
// warm pool keeps the cluster); Release after Recycle waits for the clean-up.
TEST_P(LocalClusterProviderTest, WarmInstanceKeepsOnlyItsImageCache) {
  // Job A leaves something everywhere it can write.
  AddScript("job_a.sh",
            "echo a > \"$SM_MODEL_DIR/model-a\"\n"
            "echo a > \"$SAGEMAKER_BASE_DIR/checkpoints/ckpt-a\"\n"
            "echo a > \"$SM_OUTPUT_DATA_DIR/out-a\"\n"
            "echo a > \"$SAGEMAKER_BASE_DIR/output/intermediate/int-a\"\n"
            "echo a > \"$SAGEMAKER_BASE_DIR/code/code-a\"\n"
            "echo a > \"$SAGEMAKER_BASE_DIR/input/scratch-a\"\n"
            "echo a > \"${TMPDIR:-/tmp}/tmp-a\"\n"
            "echo 'failed' > \"$SAGEMAKER_BASE_DIR/output/failure\"\n");
  // Job B finds none of it.
  AddScript("job_b.sh",
            "found=$(find \"$SAGEMAKER_BASE_DIR\" \"${TMPDIR:-/tmp}\" -name '*-a' -o -name failure "
            "2>/dev/null)\n"
            "if [ -n \"$found\" ]; then echo \"LEAK: $found\"; exit 1; fi\n"
            "ls \"$SAGEMAKER_BASE_DIR/input/data\"\n"
            "echo clean\n");
  WriteFile(store_dir_ + "/a-data/secret-a", "a");
  for (const bool recycle : {false, true}) {
    SCOPED_TRACE(recycle ? "recycled" : "not recycled");
    auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
    ASSERT_TRUE(cluster.ok());
    ASSERT_TRUE(Prepare(*cluster).ok());
    const std::string cache = absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id,
                                           "/image-cache");
    ASSERT_EQ(ListDir(cache).size(), 1u);
    struct stat before;
    ASSERT_EQ(stat(absl::StrCat(cache, "/", ListDir(cache)[0]).c_str(), &before), 0);

    v1::CreateTrainingJobRequest a = Request("job-a", {"/opt/program/job_a.sh"});
    v1::Channel* ch = a.add_input_data_config();
    ch->set_channel_name("private");
    ch->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
    ch->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("file://" + store_dir_ + "/a-data/");
    ASSERT_TRUE(Deliver(a, *cluster).ok());
    Recorder events_a;
    ASSERT_TRUE(Start(a, *cluster, events_a).ok());
    ASSERT_TRUE(WaitExits(events_a, 1));
    ASSERT_EQ(events_a.exits["algo-1"].exit_code, 0);

    // The same cluster, kept warm, runs job B.
    if (recycle) provider_->Recycle(*cluster);
    ASSERT_TRUE(Prepare(*cluster).ok());
    Recorder events_b;
    ASSERT_TRUE(Start(Request("job-b", {"/opt/program/job_b.sh"}), *cluster, events_b).ok());
    ASSERT_TRUE(WaitExits(events_b, 1));
    EXPECT_EQ(events_b.exits["algo-1"].exit_code, 0) << events_b.AllLines();
    EXPECT_TRUE(events_b.HasLine("algo-1", "clean")) << events_b.AllLines();
    // The image was not unpacked again.
    struct stat after;
    ASSERT_EQ(ListDir(cache).size(), 1u);
    ASSERT_EQ(stat(absl::StrCat(cache, "/", ListDir(cache)[0]).c_str(), &after), 0);
    EXPECT_EQ(before.st_ino, after.st_ino);
    EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
    provider_->Recycle(*cluster);
    provider_->Release(*cluster);
  }
}

TEST_P(LocalClusterProviderTest, TarballImageRunsItsTrainProgram) {
  // An image as a tarball with opt/program/train and code in opt/ml/code.
  const std::string src = tmp_.path() + "/tar-src";
  WriteFile(src + "/opt/program/train",
            "#!/bin/sh\necho \"train says $1 $2\"\ncat \"$SAGEMAKER_BASE_DIR/code/hello.txt\"\n",
            0755);
  WriteFile(src + "/opt/ml/code/hello.txt", "hello from code\n");
  const std::string tarball = tmp_.path() + "/image.tar.gz";
  ASSERT_EQ(std::system(absl::StrCat("tar -czf ", tarball, " -C ", src, " opt").c_str()), 0);
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster, "file://" + tarball).ok());
  v1::CreateTrainingJobRequest r = Request("tarball", {});
  r.mutable_algorithm_specification()->add_container_arguments("--alpha");
  r.mutable_algorithm_specification()->add_container_arguments("0.5");
  Recorder events;
  absl::Status started = Start(r, *cluster, events);
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-1", "train says --alpha 0.5")) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-1", "hello from code")) << events.AllLines();
}

TEST_P(LocalClusterProviderTest, ImageWithoutTrainProgramFailsToStart) {
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  absl::Status started = Start(Request("no-train", {}), *cluster, events);
  EXPECT_TRUE(absl::IsFailedPrecondition(started)) << started;
  EXPECT_THAT(started.message(), HasSubstr("train"));
}

TEST_P(LocalClusterProviderTest, SharedImageCacheIsUnpackedOnceForAllInstances) {
  LocalOptions options;
  options.shared_image_cache = true;
  MakeProvider(options);
  AddScript("hi.sh", "echo hi\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  const std::vector<std::string> shared = ListDir(state_dir_ + "/image-cache");
  ASSERT_EQ(shared.size(), 1u);
  for (const Instance& i : cluster->instances) {
    const std::string entry = absl::StrCat(state_dir_, "/instances/", i.id, "/image-cache/", shared[0]);
    struct stat st;
    ASSERT_EQ(lstat(entry.c_str(), &st), 0) << entry;
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << entry << " is not a link to the shared cache";
  }
  Recorder events;
  ASSERT_TRUE(Start(Request("shared", {"/opt/program/hi.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 2));
  EXPECT_TRUE(events.HasLine("algo-1", "hi") && events.HasLine("algo-2", "hi")) << events.AllLines();
  // Releasing the cluster keeps the shared copy.
  provider_->Release(*cluster);
  EXPECT_TRUE(RunUntil(*loop_, [&] {
    return !internal::Exists(absl::StrCat(state_dir_, "/instances/", cluster->id));
  }));
  EXPECT_EQ(ListDir(state_dir_ + "/image-cache"), shared);
}

TEST_P(LocalClusterProviderTest, UnknownImageFailsPrepare) {
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  absl::Status s = Prepare(*cluster, "123456789012.dkr.ecr.us-west-2.amazonaws.com/x:1");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = Prepare(*cluster, tmp_.path() + "/no-such-image");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
}

// Paths of the request are input: the errors that echo them show them
// escaped, so that none can add a line to a message or a log.
TEST_P(LocalClusterProviderTest, RequestPathsInErrorsAreEscaped) {
  auto one_line = [](const auto& message) {
    return std::string(message.data(), message.size()).find_first_of("\n\x0b\x1b") ==
           std::string::npos;
  };
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  absl::Status s = Prepare(*cluster, "img\n\x1b[31mforged");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(one_line(s.message())) << s;
  EXPECT_THAT(s.message(), HasSubstr(R"(image 'img\n\u001b[31mforged' is not a local image)"));
  s = Prepare(*cluster, tmp_.path() + "/no\nsuch");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_TRUE(one_line(s.message())) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("'", tmp_.path(), R"(/no\nsuch': )")));
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("ckpt-escaped", {"/bin/true"});
  r.mutable_checkpoint_config()->set_s3_uri("file://" + store_dir_ + "/ckpt/");
  r.mutable_checkpoint_config()->set_local_path("/opt/ml/../x\x0b");
  Recorder events;
  s = Start(r, *cluster, events);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(one_line(s.message())) << s;
  EXPECT_THAT(s.message(), HasSubstr(R"(CheckpointConfig.LocalPath '/opt/ml/../x\u000b' must be)"));
  EXPECT_EQ(events.exit_calls, 0);
}

// A start that bubblewrap fails quotes bwrap's output, which is a program's
// output like any other: shown escaped and cut, so that it can neither break
// the message's line nor make it long.
TEST_P(LocalClusterProviderTest, AFailedBwrapStartShowsItsOutputEscapedAndCut) {
  if (!bwrap()) GTEST_SKIP() << "the process runtime runs no bubblewrap";
  // A stand-in for bwrap: it passes the factory's probe, then fails every
  // start before the sandbox is up, printing an escape sequence, a carriage
  // return and a byte that is not UTF-8, then 5000 bytes more.
  const std::string fake = tmp_.path() + "/fake-bwrap";
  WriteFile(fake,
            "#!/bin/sh\n"
            "case \"$*\" in *'--ro-bind / / true') exit 0 ;; esac\n"
            "printf 'bwrap: \\033[31mforged\\rline \\377\\n' >&2\n"
            "head -c 5000 /dev/zero | tr '\\0' x >&2\n"
            "exit 1\n",
            0755);
  LocalOptions options;
  options.bwrap_path = fake;
  MakeProvider(options);
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  absl::Status s = Start(Request("fake-bwrap", {"/bin/true"}), *cluster, events);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(R"(bwrap: \u001b[31mforged\rline \xFF; xxx)"));
  EXPECT_EQ(s.message().find_first_of("\x1b\r\xff"), absl::string_view::npos) << s;
  EXPECT_TRUE(absl::EndsWith(s.message(), "xxx...")) << s;
  EXPECT_LT(s.message().size(), 1024u + 100u) << s;
}

TEST_P(LocalClusterProviderTest, SpotNoticeThenLossKillsTheInstanceWithoutExit) {
  AddScript("long.sh",
            "echo ready\n"
            "while true; do sleep 0.05; done\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("spot", {"/opt/program/long.sh"}), *cluster, events).ok());
  ASSERT_TRUE(RunUntil(*loop_, [&] {
    return events.HasLine("algo-1", "ready") && events.HasLine("algo-2", "ready");
  }));
  EXPECT_TRUE(absl::IsNotFound(
      provider_->InjectInterruption("nope/algo-1", InterruptionKind::kSpotNotice, absl::Seconds(1))));
  const absl::Time injected = loop_->Now();
  ASSERT_TRUE(provider_
                  ->InjectInterruption(cluster->instances[1].id, InterruptionKind::kSpotNotice,
                                       absl::Milliseconds(300))
                  .ok());
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.notices.empty(); }));
  EXPECT_EQ(listener_.notices[0].first, "algo-2");
  EXPECT_GE(listener_.notices[0].second, injected + absl::Milliseconds(300));
  EXPECT_TRUE(listener_.lost.empty()) << "lost before the notice ran out";
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.lost.empty(); }));
  EXPECT_GE(loop_->Now(), injected + absl::Milliseconds(300));
  EXPECT_THAT(listener_.lost, ElementsAre("algo-2"));
  // The lost instance's container is gone and reports no exit; the other runs on.
  loop_->RunUntil(loop_->Now() + absl::Milliseconds(300));
  EXPECT_TRUE(events.exits.empty());
  EXPECT_TRUE(absl::IsFailedPrecondition(provider_->InjectInterruption(
      cluster->instances[1].id, InterruptionKind::kInstanceLoss, absl::ZeroDuration())));
  // An instance loss is immediate.
  ASSERT_TRUE(provider_
                  ->InjectInterruption(cluster->instances[0].id, InterruptionKind::kInstanceLoss,
                                       absl::ZeroDuration())
                  .ok());
  ASSERT_TRUE(RunUntil(*loop_, [&] { return listener_.lost.size() == 2; }));
  EXPECT_THAT(listener_.lost, ElementsAre("algo-2", "algo-1"));
  loop_->RunUntil(loop_->Now() + absl::Milliseconds(200));
  EXPECT_TRUE(events.exits.empty());
  // A cluster with a lost instance cannot run containers any more.
  Recorder again;
  EXPECT_TRUE(absl::IsFailedPrecondition(Start(Request("spot-2", {"/opt/program/long.sh"}), *cluster, again)));
}

TEST_P(LocalClusterProviderTest, ProvisionBeyondMaxInstancesIsResourceExhausted) {
  LocalOptions options;
  options.max_instances = 3;
  MakeProvider(options);
  auto first = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  ASSERT_TRUE(first.ok());
  auto second = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  EXPECT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  provider_->Release(*first);
  auto third = Provision({{kHomogeneousGroupName, "ml.m5.large", 3}});
  EXPECT_TRUE(third.ok()) << third.status();
  // Host names run across groups in group order.
  std::vector<std::string> hosts;
  for (const Instance& i : third->instances) hosts.push_back(i.host_name);
  EXPECT_THAT(hosts, ElementsAre("algo-1", "algo-2", "algo-3"));
}

TEST_P(LocalClusterProviderTest, CheckpointsAreRestoredBeforeTheRunAndSyncedAfter) {
  WriteFile(store_dir_ + "/ckpt/epoch-1.pt", "one");
  AddScript("ckpt.sh",
            "cat \"$SAGEMAKER_BASE_DIR/checkpoints/epoch-1.pt\" && echo\n"
            "echo two > \"$SAGEMAKER_BASE_DIR/checkpoints/epoch-2.pt\"\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("ckpt", {"/opt/program/ckpt.sh"});
  r.mutable_checkpoint_config()->set_s3_uri("file://" + store_dir_ + "/ckpt/");
  Recorder events;
  ASSERT_TRUE(Start(r, *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-1", "one")) << events.AllLines();
  // The last sync completed before the exit was reported.
  EXPECT_EQ(ReadFile(store_dir_ + "/ckpt/epoch-2.pt"), "two\n");
}

// A store whose listing fails, as one out of reach does.
class UnreachableStore final : public ObjectStore {
 public:
  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view) override {
    return absl::UnavailableError("connection refused");
  }
  absl::StatusOr<std::string> Get(std::string_view) override { return Unreachable(); }
  absl::Status Put(std::string_view, std::string_view) override { return Unreachable(); }
  absl::Status Delete(std::string_view) override { return Unreachable(); }
  absl::Status Read(std::string_view,
                    absl::FunctionRef<absl::Status(std::string_view)>) override {
    return Unreachable();
  }

 private:
  static absl::Status Unreachable() { return absl::UnavailableError("connection refused"); }
};

// Two providers of one process may share a state directory: their clusters
// have ids of their own, so neither waits for the other's cluster lock (a
// second "cluster-<pid>-1" would until the first was released).
TEST_P(LocalClusterProviderTest, TwoProvidersOfOneProcessShareAStateDirectory) {
  auto first = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(first.ok()) << first.status();
  LocalOptions options = options_;
  auto second = NewLocalClusterProvider(*loop_, options);
  ASSERT_TRUE(second.ok()) << second.status();
  ClusterSpec spec;
  spec.job_name = "other";
  spec.groups = {{kHomogeneousGroupName, "ml.m5.large", 1}};
  std::optional<absl::StatusOr<Cluster>> result;
  (*second)->Provision(spec, [&](absl::StatusOr<Cluster> c) { result = std::move(c); });
  ASSERT_TRUE(RunUntil(*loop_, [&] { return result.has_value(); }, absl::Seconds(5)))
      << "the second provider's Provision waits";
  ASSERT_TRUE(result->ok()) << result->status();
  EXPECT_NE((*result)->id, first->id);
  // Both clusters' directories are there, each its own.
  EXPECT_TRUE(internal::IsDirectory(internal::ClusterDir(state_dir_, first->id)));
  EXPECT_TRUE(internal::IsDirectory(internal::ClusterDir(state_dir_, (*result)->id)));
  second->reset();
}

// A restore that fails keeps the container from running, and the error names
// the restore once (CheckpointSync's message names it, and what it listed).
TEST_P(LocalClusterProviderTest, AFailedCheckpointRestoreNamesItOnce) {
  static UnreachableStore down;  // outlives the provider, which may hold it
  stores_.Register("down", &down);
  AddScript("ckpt.sh", "echo ran\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("ckpt-restore", {"/opt/program/ckpt.sh"});
  r.mutable_checkpoint_config()->set_s3_uri("down://bucket/ckpt/");
  Recorder events;
  const absl::Status started = Start(r, *cluster, events);
  std::string said(started.message());
  if (started.ok()) {
    ASSERT_TRUE(WaitExits(events, 1));
    EXPECT_NE(events.exits["algo-1"].exit_code, 0);
    said = events.AllLines() + events.exits["algo-1"].failure_text;
  }
  EXPECT_FALSE(events.HasLine("algo-1", "ran")) << said;
  EXPECT_THAT(said, HasSubstr("checkpoint restore: list 'down://bucket/ckpt/': connection refused"))
      << said;
  EXPECT_THAT(said, Not(HasSubstr("restoring checkpoints"))) << said;
}

// A checkpoint sync that fails for one file still uploads the others, and
// its line in the log stream says so, naming the sync once (the error names
// it already). Here sub/b.pt cannot go up (a FIFO in the store stands where
// its folder would be); it is written before a.pt, so every sync that sees
// a.pt fails.
TEST_P(LocalClusterProviderTest, AFailedCheckpointSyncLogsWhatItUploadedAllTheSame) {
  ASSERT_TRUE(MakeDirs(store_dir_ + "/ckpt").ok());
  ASSERT_EQ(::mkfifo((store_dir_ + "/ckpt/sub").c_str(), 0644), 0);
  AddScript("ckpt.sh",
            "mkdir \"$SAGEMAKER_BASE_DIR/checkpoints/sub\"\n"
            "echo b > \"$SAGEMAKER_BASE_DIR/checkpoints/sub/b.pt\"\n"
            "echo a > \"$SAGEMAKER_BASE_DIR/checkpoints/a.pt\"\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("ckpt-fails", {"/opt/program/ckpt.sh"});
  r.mutable_checkpoint_config()->set_s3_uri("file://" + store_dir_ + "/ckpt/");
  Recorder events;
  ASSERT_TRUE(Start(r, *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0) << events.AllLines();
  EXPECT_EQ(ReadFile(store_dir_ + "/ckpt/a.pt"), "a\n");
  const std::vector<std::string> streams = ListDir(state_dir_ + "/logs/ckpt-fails");
  ASSERT_EQ(streams.size(), 1u);
  const std::string log = ReadFile(state_dir_ + "/logs/ckpt-fails/" + streams[0]);
  EXPECT_THAT(log, HasSubstr(store_dir_ + "/ckpt/sub"));
  EXPECT_THAT(log, HasSubstr("(done all the same: 1 uploaded (2 bytes), 0 deleted)"));
  EXPECT_THAT(log, HasSubstr("final checkpoint sync: upload '"));
  EXPECT_THAT(log, Not(HasSubstr("checkpoint sync: checkpoint sync")));
}

TEST_P(LocalClusterProviderTest, SandboxedPeersReachEachOtherByHostNameAndNothingElse) {
  if (!bwrap()) {
    GTEST_SKIP() << "the process runtime shares the host's network and does not resolve "
                    "algo-<k> (documented in kiln/local/local.h)";
  }
  // algo-1 serves on its own address; algo-2 connects by host name. Neither
  // has a route off the host.
  WriteFile(image_dir_ + "/net.py", R"(
import errno, os, socket, sys, time
me = os.environ["SM_CURRENT_HOST"]
try:
    socket.create_connection(("10.255.255.1", 80), timeout=2)
    print("outside reachable"); sys.exit(1)
except OSError as e:
    print("outside: " + ("unreachable" if e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) else repr(e)))
if me == "algo-1":
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((socket.gethostbyname("algo-1"), 47311)); srv.listen(1)
    conn, _ = srv.accept()
    print("algo-1 got " + conn.recv(100).decode(), flush=True)
else:
    deadline = time.time() + 10
    while True:
        try:
            c = socket.create_connection(("algo-1", 47311), timeout=1); break
        except OSError:
            if time.time() > deadline: raise
            time.sleep(0.02)
    c.sendall(b"hello from " + me.encode()); c.close()
    print("sent", flush=True)
)",
            0755);
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 2}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("net", {testing::Python(), "/opt/program/net.py"});
  r.set_enable_network_isolation(true);
  Recorder events;
  ASSERT_TRUE(Start(r, *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 2)) << events.AllLines();
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0) << events.AllLines();
  EXPECT_EQ(events.exits["algo-2"].exit_code, 0) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-1", "algo-1 got hello from algo-2")) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-1", "outside: unreachable")) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-2", "outside: unreachable")) << events.AllLines();
}

TEST_P(LocalClusterProviderTest, SignalBeforeTheProcessExistsIsNotLost) {
  AddScript("slow.sh", "echo started\nwhile true; do sleep 0.05; done\n");
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE(Prepare(*cluster).ok());
  v1::CreateTrainingJobRequest r = Request("early-kill", {"/opt/program/slow.sh"});
  const std::string arn = kArnPrefix + r.training_job_name();
  JobContext job{r.training_job_name(), arn, r, *cluster, 1};
  Recorder events;
  provider_->StartContainers(job, events, [](absl::Status) {});
  provider_->Signal(*cluster, SIGKILL);  // at once, before the supervisor has spawned anything
  ASSERT_TRUE(WaitExits(events, 1, absl::Seconds(10)));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 128 + SIGKILL);
}

// A FUSE file system of one flat directory whose files take writes and whose
// close() fails with `flush_error`: a deferred write error, as NFS or a FUSE
// file system that stores data at the end reports it. Served on a thread of
// its own until destroyed (which unmounts it).
class CloseFailingFs {
 public:
  // Mounts it at `dir` (an existing empty directory); null when FUSE cannot
  // be mounted here (no /dev/fuse, no right to mount).
  static std::unique_ptr<CloseFailingFs> Mount(const std::string& dir, int flush_error) {
    auto fs = std::unique_ptr<CloseFailingFs>(new CloseFailingFs(flush_error));
    static const fuse_lowlevel_ops ops = [] {
      fuse_lowlevel_ops o;
      std::memset(&o, 0, sizeof(o));
      o.lookup = Lookup;
      o.getattr = Getattr;
      o.create = Create;
      o.open = Open;
      o.write = Write;
      o.flush = Flush;
      return o;
    }();
    char name[] = "kiln-test";
    char* argv[] = {name};
    fuse_args args = FUSE_ARGS_INIT(1, argv);
    fs->fuse_ = fuse_session_new(&args, &ops, sizeof(ops), fs.get());
    fuse_opt_free_args(&args);
    if (fs->fuse_ == nullptr) return nullptr;
    if (fuse_session_mount(fs->fuse_, dir.c_str()) != 0) {
      fuse_session_destroy(fs->fuse_);
      fs->fuse_ = nullptr;
      return nullptr;
    }
    fs->stop_fd_ = eventfd(0, EFD_CLOEXEC);
    fs->thread_ = std::thread([raw = fs.get()] { raw->Serve(); });
    return fs;
  }

  ~CloseFailingFs() {
    if (fuse_ == nullptr) return;
    const uint64_t one = 1;
    EXPECT_EQ(write(stop_fd_, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
    thread_.join();
    close(stop_fd_);
    fuse_session_unmount(fuse_);
    fuse_session_destroy(fuse_);
  }

  // The files' names, in order of creation.
  std::vector<std::string> Names() {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> names;
    for (const File& f : files_) names.push_back(f.name);
    return names;
  }

  // Every byte written to the file `name`.
  std::string Contents(const std::string& name) {
    absl::MutexLock lock(&mu_);
    for (const File& f : files_) {
      if (f.name == name) return f.data;
    }
    return "";
  }

 private:
  struct File {
    std::string name;
    std::string data;
  };

  explicit CloseFailingFs(int flush_error) : flush_error_(flush_error) {}

  static CloseFailingFs& Self(fuse_req_t req) {
    return *static_cast<CloseFailingFs*>(fuse_req_userdata(req));
  }

  // Inode 1 is the directory; file i is inode i + 2.
  fuse_entry_param EntryLocked(fuse_ino_t ino) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));
    e.ino = ino;
    e.attr.st_ino = ino;
    e.attr.st_nlink = 1;
    if (ino == FUSE_ROOT_ID) {
      e.attr.st_mode = S_IFDIR | 0755;
    } else {
      e.attr.st_mode = S_IFREG | 0644;
      e.attr.st_size = static_cast<off_t>(files_[ino - 2].data.size());
    }
    return e;
  }

  void Serve() {
    const int fd = fuse_session_fd(fuse_);
    fuse_buf buf;
    std::memset(&buf, 0, sizeof(buf));
    for (;;) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0 && errno == EINTR) continue;
      if (fds[1].revents != 0 || (fds[0].revents & POLLIN) == 0) break;
      const int res = fuse_session_receive_buf(fuse_, &buf);
      if (res == -EINTR || res == -EAGAIN || res == -ENOENT) continue;
      if (res <= 0) break;
      fuse_session_process_buf(fuse_, &buf);
    }
    free(buf.mem);
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    CloseFailingFs& fs = Self(req);
    absl::MutexLock lock(&fs.mu_);
    for (size_t i = 0; parent == FUSE_ROOT_ID && i < fs.files_.size(); ++i) {
      if (fs.files_[i].name == name) {
        const fuse_entry_param e = fs.EntryLocked(i + 2);
        fuse_reply_entry(req, &e);
        return;
      }
    }
    fuse_reply_err(req, ENOENT);
  }
  static void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
    CloseFailingFs& fs = Self(req);
    absl::MutexLock lock(&fs.mu_);
    if (ino != FUSE_ROOT_ID && ino - 2 >= fs.files_.size()) {
      fuse_reply_err(req, ENOENT);
      return;
    }
    const fuse_entry_param e = fs.EntryLocked(ino);
    fuse_reply_attr(req, &e.attr, 0);
  }
  static void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t,
                     fuse_file_info* fi) {
    CloseFailingFs& fs = Self(req);
    absl::MutexLock lock(&fs.mu_);
    fs.files_.push_back(File{name, ""});
    const fuse_entry_param e = fs.EntryLocked(fs.files_.size() + 1);
    fuse_reply_create(req, &e, fi);
  }
  static void Open(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) { fuse_reply_open(req, fi); }
  static void Write(fuse_req_t req, fuse_ino_t ino, const char* data, size_t size, off_t off,
                    fuse_file_info*) {
    CloseFailingFs& fs = Self(req);
    absl::MutexLock lock(&fs.mu_);
    std::string& file = fs.files_[ino - 2].data;
    const size_t at = static_cast<size_t>(off);
    if (file.size() < at + size) file.resize(at + size);
    file.replace(at, size, data, size);
    fuse_reply_write(req, size);
  }
  static void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
    fuse_reply_err(req, Self(req).flush_error_);
  }

  const int flush_error_;
  fuse_session* fuse_ = nullptr;
  int stop_fd_ = -1;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<File> files_ ABSL_GUARDED_BY(mu_);
};

// A log stream whose close() fails (a write the file system refused after
// it returned) is treated as one whose write failed: observers are told,
// naming the file and the reason, before the exit, and the job is not failed.
TEST_P(LocalClusterProviderTest, LogStreamWhoseCloseFailsIsSaidToObservers) {
  AddScript("hello.sh", "echo hello\n");
  const std::string log_dir = tmp_.path() + "/logs";
  ASSERT_TRUE(MakeDirs(log_dir + "/close-fails").ok());
  std::unique_ptr<CloseFailingFs> fs = CloseFailingFs::Mount(log_dir + "/close-fails", EIO);
  if (fs == nullptr) GTEST_SKIP() << "a FUSE file system cannot be mounted here";
  LocalOptions options;
  options.log_dir = log_dir;
  MakeProvider(options);
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("close-fails", {"/opt/program/hello.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  // (The lines were posted before the exit: they are all in.)
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0);
  EXPECT_TRUE(events.HasLine("algo-1", "hello")) << events.AllLines();
  const std::vector<std::string> streams = fs->Names();
  ASSERT_EQ(streams.size(), 1u);
  EXPECT_THAT(fs->Contents(streams[0]), HasSubstr("hello\n[kiln] algo-1 exited with 0: cpu "));
  EXPECT_TRUE(events.HasLine(
      "algo-1", absl::StrCat("[kiln] the log stream cannot be written: close '", log_dir,
                             "/close-fails/", streams[0],
                             "': Input/output error; it may lack some of this container's "
                             "output, which reached the job's observers")))
      << events.AllLines();
  provider_->Release(*cluster);
  provider_.reset();
}

// Files a clean-up cannot delete (a mount left inside them: EBUSY) are named
// with the reason in the log stream of the run they belong to: the run's
// tree when the instance is recycled, its image when the next job brings
// another, and whatever is left when the cluster is released, which then
// keeps its lock file so that the next provider made on the state directory
// tries again (and, the mounts gone, deletes it all).
TEST_P(LocalClusterProviderTest, FilesThatCannotBeDeletedAreNamedInTheRunsLogStream) {
  AddScript("hello.sh", "echo hello\n");
  const std::string image_b = tmp_.path() + "/image-b";
  WriteFile(image_b + "/hello.sh", "#!/bin/sh\necho hello\n", 0755);
  testing::Facts f;
  RunInMountNamespace(f, [&] {
    absl::StatusOr<Cluster> cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
    if (!cluster.ok()) {
      f["ERROR"] = cluster.status().ToString();
      return;
    }
    Recorder events;
    absl::Status s = Prepare(*cluster);
    if (s.ok()) s = Start(Request("leaky", {"/opt/program/hello.sh"}), *cluster, events);
    if (s.ok() && !WaitExits(events, 1)) s = absl::DeadlineExceededError("no exit");
    if (!s.ok()) {
      f["ERROR"] = s.ToString();
      return;
    }
    const std::string dir = absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id);
    f["dir"] = dir;
    const std::string image_a = ListDir(dir + "/image-cache").at(0);
    f["image"] = image_a;
    for (const std::string& busy :
         {absl::StrCat(dir, "/image-cache/", image_a, "/busy"), dir + "/ml/model/busy"}) {
      if (!MountInTheWay(f, busy)) return;
    }
    provider_->Recycle(*cluster);  // the run's tree goes
    s = Prepare(*cluster, image_b);  // the run's image goes
    if (!s.ok()) f["prepare"] = s.ToString();
    provider_->Release(*cluster);  // the rest goes
    provider_.reset();             // (waits for the clean-up)
    const std::vector<std::string> streams = ListDir(state_dir_ + "/logs/leaky");
    if (streams.size() == 1) f["stream"] = ReadFile(state_dir_ + "/logs/leaky/" + streams[0]);
    const std::string lock = absl::StrCat(state_dir_, "/locks/", cluster->id, ".lock");
    f["lock"] = internal::Exists(lock) ? "kept" : "gone";
    // The mounts gone, the next provider made here deletes what is left.
    for (absl::string_view line : absl::StrSplit(ReadFile("/proc/self/mountinfo"), '\n')) {
      const std::vector<std::string> fields = absl::StrSplit(line, ' ');
      if (fields.size() > 4 && absl::StartsWith(fields[4], dir + "/")) {
        umount2(fields[4].c_str(), MNT_DETACH);
      }
    }
    MakeProvider(LocalOptions());
    provider_.reset();
    f["left"] = absl::StrJoin(ListDir(state_dir_ + "/instances"), " ");
    f["lock.after"] = internal::Exists(lock) ? "kept" : "gone";
  });
  if (IsSkipped()) return;
  EXPECT_EQ(f["prepare"], "");
  const std::string busy = "busy': Device or resource busy";
  EXPECT_THAT(f["stream"],
              HasSubstr("\n[kiln] the files of this run could not all be deleted: remove "
                        "directory '" + f["dir"] + "/trash-"));
  EXPECT_THAT(f["stream"], HasSubstr("/model/" + busy +
                                     "; what is left is deleted with the cluster\n"));
  EXPECT_THAT(f["stream"],
              HasSubstr("\n[kiln] the instance's earlier images could not all be deleted: remove "
                        "directory '" + f["dir"] + "/image-cache/"));
  EXPECT_THAT(f["stream"], HasSubstr("/image-cache/" + f["image"] + "/" + busy +
                                     "; what is left is deleted with the cluster\n"));
  EXPECT_THAT(f["stream"],
              HasSubstr("\n[kiln] the instance's files could not all be deleted when its cluster "
                        "was released: remove directory '" + f["dir"] + "/"));
  EXPECT_THAT(f["stream"], HasSubstr(busy + "; a provider made later on this state directory "
                                            "tries again\n"));
  EXPECT_EQ(f["lock"], "kept");
  EXPECT_EQ(f["left"], "");
  EXPECT_EQ(f["lock.after"], "gone");
}

// Two runs of one job on one host that start in the same second (here the
// job's next attempt, on a cluster of its own, as the engine starts it after
// a lost instance) have a log stream each, the later one "<name>-2": what is
// said about a run after it ended, here that its released cluster's files
// could not all be deleted (a mount left inside: EBUSY), is in that run's
// stream and not in the other's.
TEST_P(LocalClusterProviderTest, ARunInTheSameSecondAsAnotherOfItsJobHasAStreamOfItsOwn) {
  AddScript("say.sh", "echo \"$1\"\n");
  testing::Facts f;
  RunInMountNamespace(f, [&] {
    // Both runs start within one second (each takes a fraction of one):
    // tried again, from a fresh start, when a busy machine made the second
    // one miss it, so that the assertion below always holds and is always
    // made.
    absl::StatusOr<Cluster> first, second;
    absl::Status s;
    bool same_second = false;
    for (int attempt = 0; attempt < 5 && s.ok() && !same_second; ++attempt) {
      if (attempt > 0) {
        provider_->Release(*first);
        provider_->Release(*second);
        s = internal::RemoveTree(state_dir_ + "/logs/rerun");
      }
      first = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}}, "rerun");
      second = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}}, "rerun");
      if (s.ok()) s = first.ok() ? second.status() : first.status();
      if (s.ok()) s = Prepare(*first);
      if (s.ok()) s = Prepare(*second);
      const absl::Time now = absl::Now();
      const absl::Time next_second = absl::FromUnixSeconds(absl::ToUnixSeconds(now) + 1);
      if (next_second - now < absl::Milliseconds(800)) absl::SleepFor(next_second - now);
      const int64_t started_in = absl::ToUnixSeconds(absl::Now());
      Recorder events_1, events_2;
      if (s.ok()) {
        s = Start(Request("rerun", {"/opt/program/say.sh", "attempt 1"}), *first, events_1);
      }
      if (s.ok() && !WaitExits(events_1, 1)) s = absl::DeadlineExceededError("no exit");
      if (s.ok()) {
        s = Start(Request("rerun", {"/opt/program/say.sh", "attempt 2"}), *second, events_2);
      }
      same_second = absl::ToUnixSeconds(absl::Now()) == started_in;
      if (s.ok() && !WaitExits(events_2, 1)) s = absl::DeadlineExceededError("no exit");
    }
    f["same second"] = same_second ? "yes" : "no";
    if (!s.ok()) {
      f["ERROR"] = s.ToString();
      return;
    }
    const std::string busy =
        absl::StrCat(state_dir_, "/instances/", first->instances[0].id, "/busy");
    if (!MountInTheWay(f, busy)) return;
    provider_->Release(*first);
    provider_->Release(*second);
    provider_.reset();  // (waits for the clean-up)
    const std::string logs = state_dir_ + "/logs/rerun";
    for (const std::string& name : ListDir(logs)) f["stream " + name] = ReadFile(logs + "/" + name);
  });
  if (IsSkipped()) return;
  std::vector<std::string> names;
  for (const auto& [key, value] : f) {
    if (absl::StartsWith(key, "stream ")) names.push_back(key.substr(7));
  }
  ASSERT_EQ(f["same second"], "yes") << "five attempts missed the second";
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], names[0] + "-2");
  const std::string& stream_1 = f["stream " + names[0]];
  const std::string& stream_2 = f["stream " + names[1]];
  EXPECT_TRUE(absl::StartsWith(stream_1, "attempt 1\n[kiln] algo-1 exited with 0: cpu "));
  EXPECT_THAT(stream_1, HasSubstr("\n[kiln] the instance's files could not all be deleted when "
                                  "its cluster was released: remove directory '"));
  EXPECT_THAT(stream_1, HasSubstr("/busy': Device or resource busy; a provider made later on this "
                                  "state directory tries again\n"));
  // The later run's stream holds its own two lines and nothing else.
  EXPECT_TRUE(absl::StartsWith(stream_2, "attempt 2\n[kiln] algo-1 exited with 0: cpu "));
  EXPECT_EQ(std::count(stream_2.begin(), stream_2.end(), '\n'), 2);
}

// Sets or clears the append-only flag (chattr +a) of the directory `dir`:
// files can be made in it, none renamed or deleted. False (with errno) when
// the file system or this process cannot.
bool SetAppendOnly(const std::string& dir, bool on) {
  const UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int flags = 0;
  if (!fd.valid() || ioctl(fd.get(), FS_IOC_GETFLAGS, &flags) != 0) return false;
  flags = on ? (flags | FS_APPEND_FL) : (flags & ~FS_APPEND_FL);
  return ioctl(fd.get(), FS_IOC_SETFLAGS, &flags) == 0;
}

// The scratch copy an image is unpacked into in the shared image cache, when
// it can be neither renamed into place nor deleted (here the cache is
// append-only), is named with the reason in the error of the PrepareImage
// that failed and in the first lines of the log stream of the instance's next
// run, like the other files a clean-up leaves; a provider made later on the
// state directory deletes it.
TEST_P(LocalClusterProviderTest, AnImageScratchCopyThatCannotBeDeletedIsNamedInTheNextRunsStream) {
  LocalOptions options;
  options.shared_image_cache = true;
  MakeProvider(options);
  AddScript("hello.sh", "echo hello\n");
  const std::string cache = state_dir_ + "/image-cache";
  ASSERT_TRUE(MakeDirs(cache).ok());
  if (!SetAppendOnly(cache, true)) {
    GTEST_SKIP() << "cannot make " << cache << " append-only: " << std::strerror(errno);
  }
  struct Unflag {
    std::string dir;
    ~Unflag() { SetAppendOnly(dir, false); }  // (or the test's directory could not go)
  } unflag{cache};
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const absl::Status failed = Prepare(*cluster);
  const std::vector<std::string> left = ListDir(cache);
  ASSERT_TRUE(SetAppendOnly(cache, false)) << std::strerror(errno);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_THAT(left[0], HasSubstr(".tmp-"));
  const std::string note = absl::StrCat(
      "the scratch copy of the image in the shared image cache could not all be deleted: remove "
      "directory '", cache, "/", left[0], "': Operation not permitted; a provider made later on "
      "this state directory tries again");
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.message()), HasSubstr(absl::StrCat("rename '", cache, "/")));
  EXPECT_THAT(std::string(failed.message()), HasSubstr("': Operation not permitted; " + note));

  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("after-leftover", {"/opt/program/hello.sh"}), *cluster, events).ok());
  ASSERT_TRUE(WaitExits(events, 1));
  const std::string logs = state_dir_ + "/logs/after-leftover";
  const std::vector<std::string> streams = ListDir(logs);
  ASSERT_EQ(streams.size(), 1u);
  const std::string stream = ReadFile(logs + "/" + streams[0]);
  EXPECT_TRUE(absl::StartsWith(stream, absl::StrCat("[kiln] ", note, "\nhello\n"))) << stream;
  provider_->Release(*cluster);
  MakeProvider(options);
  provider_.reset();  // (waits for the clean-up it started)
  EXPECT_THAT(ListDir(cache), Not(::testing::Contains(left[0])));
}

// A Provision that fails deletes what it made while it holds the cluster's
// lock; what it cannot delete (here a mount left in a directory of the
// same name: EBUSY, which also fails the Provision) keeps the lock file, so
// that the next provider made on the state directory tries again (and, the
// mount gone, deletes it all).
TEST_P(LocalClusterProviderTest, AFailedProvisionKeepsTheLockFileOfWhatItCannotDelete) {
  testing::Facts f;
  RunInMountNamespace(f, [&] {
    // The provider's next cluster, by name.
    const std::string id = NextClusterId();
    if (id.empty()) {
      f["ERROR"] = "no cluster to learn the next id from";
      return;
    }
    const std::string busy = absl::StrCat(state_dir_, "/instances/", id, "/algo-1/busy");
    if (!MountInTheWay(f, busy)) return;
    absl::StatusOr<Cluster> cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
    f["provision"] = cluster.status().ToString();
    provider_.reset();
    const std::string lock = absl::StrCat(state_dir_, "/locks/", id, ".lock");
    f["lock"] = internal::Exists(lock) ? "kept" : "gone";
    umount2(busy.c_str(), MNT_DETACH);
    MakeProvider(LocalOptions());
    provider_.reset();
    f["left"] = absl::StrJoin(ListDir(state_dir_ + "/instances"), " ");
    f["lock.after"] = internal::Exists(lock) ? "kept" : "gone";
  });
  if (IsSkipped()) return;
  EXPECT_THAT(f["provision"], HasSubstr("could not create local instances: remove directory '"));
  EXPECT_THAT(f["provision"], HasSubstr("/algo-1/busy': Device or resource busy"));
  EXPECT_EQ(f["lock"], "kept");
  EXPECT_EQ(f["left"], "");
  EXPECT_EQ(f["lock.after"], "gone");
}

// A Provision that cannot take the cluster's lock (here its file's name is
// taken by a directory) deletes nothing: the directory of that name may be a
// live cluster's, made in another PID namespace sharing the state directory.
TEST_P(LocalClusterProviderTest, AProvisionWithoutTheLockDeletesNothing) {
  const std::string id = NextClusterId();
  ASSERT_NE(id, "");
  const std::string weights = absl::StrCat(state_dir_, "/instances/", id, "/algo-1/ml/model/w");
  WriteFile(weights, "another's");
  ASSERT_TRUE(MakeDirs(absl::StrCat(state_dir_, "/locks/", id, ".lock")).ok());
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  EXPECT_THAT(cluster.status().message(),
              HasSubstr("could not create local instances: create the lock file '"))
      << cluster.status();
  provider_.reset();  // (waits for its tasks)
  EXPECT_EQ(ReadFile(weights), "another's");
}

INSTANTIATE_TEST_SUITE_P(Runtimes, LocalClusterProviderTest,
                         ::testing::Values(LocalRuntime::kProcess, LocalRuntime::kBwrap),
                         testing::RuntimeName);

TEST(LocalClusterProviderFactoryTest, StateDirIsRequired) {
  auto loop = NewRealTimeEventLoop();
  auto provider = NewLocalClusterProvider(*loop, LocalOptions());
  EXPECT_TRUE(absl::IsInvalidArgument(provider.status())) << provider.status();
}

TEST(LocalClusterProviderFactoryTest, MissingBwrapIsFailedPrecondition) {
  TempDir tmp;
  auto loop = NewRealTimeEventLoop();
  LocalOptions options;
  options.state_dir = tmp.path();
  options.runtime = LocalRuntime::kBwrap;
  options.bwrap_path = "/nonexistent/bwrap";
  auto provider = NewLocalClusterProvider(*loop, options);
  EXPECT_TRUE(absl::IsFailedPrecondition(provider.status())) << provider.status();
}

// Makes a provider on the state directory `state` and destroys it, which waits
// for the clean-up it starts in the background.
void MakeProviderOn(const std::string& state) {
  auto loop = NewRealTimeEventLoop();
  LocalOptions options;
  options.state_dir = state;
  auto provider = NewLocalClusterProvider(*loop, options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  provider->reset();
}

// A process that crashed (its Release never ran) left clusters in the state
// directory: the next provider made there deletes those whose lock nobody
// holds, and leaves a cluster whose lock is held (another provider's, alive)
// and a directory that has no lock at all.
TEST(LocalClusterProviderFactoryTest, AProviderDeletesTheClustersOfACrashedProcess) {
  TempDir tmp;
  const std::string state = tmp.path() + "/state";
  WriteFile(state + "/instances/cluster-crashed-1/algo-1/ml/model/weights", "left behind");
  WriteFile(state + "/locks/cluster-crashed-1.lock", "");
  WriteFile(state + "/instances/cluster-alive-1/algo-1/ml/model/weights", "in use");
  WriteFile(state + "/locks/cluster-alive-1.lock", "");
  WriteFile(state + "/instances/no-lock/file", "unknown");
  const int held = open((state + "/locks/cluster-alive-1.lock").c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX), 0);

  MakeProviderOn(state);
  EXPECT_FALSE(internal::Exists(state + "/instances/cluster-crashed-1"));
  EXPECT_FALSE(internal::Exists(state + "/locks/cluster-crashed-1.lock"));
  EXPECT_TRUE(internal::Exists(state + "/instances/cluster-alive-1/algo-1/ml/model/weights"));
  EXPECT_TRUE(internal::Exists(state + "/locks/cluster-alive-1.lock"));
  EXPECT_TRUE(internal::Exists(state + "/instances/no-lock/file"));
  close(held);
}

// Scratch a crashed process left in the state directory (an archive being
// uploaded, an image half unpacked into the shared cache) goes with the next
// provider made there; scratch whose lock is held (a live process's) stays,
// and so does a complete cached image.
TEST(LocalClusterProviderFactoryTest, AProviderDeletesTheScratchOfACrashedProcess) {
  TempDir tmp;
  const std::string state = tmp.path() + "/state";
  WriteFile(state + "/tmp/upload-4242-1-output", "half an archive");
  WriteFile(state + "/tmp/upload-4343-1-model", "being written");
  WriteFile(state + "/image-cache/0123456789abcdef.tmp-4242-4242/opt/program/train", "half");
  WriteFile(state + "/image-cache/fedcba9876543210.tmp-4343-4344/opt/program/train", "going");
  WriteFile(state + "/image-cache/00000000000000ff/opt/program/train", "complete");
  const int held_file = open((state + "/tmp/upload-4343-1-model").c_str(), O_RDWR | O_CLOEXEC);
  const int held_dir = open((state + "/image-cache/fedcba9876543210.tmp-4343-4344").c_str(),
                            O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(held_file, 0);
  ASSERT_GE(held_dir, 0);
  ASSERT_EQ(flock(held_file, LOCK_EX), 0);
  ASSERT_EQ(flock(held_dir, LOCK_EX), 0);

  MakeProviderOn(state);
  EXPECT_THAT(ListDir(state + "/tmp"), ElementsAre("upload-4343-1-model"));
  EXPECT_THAT(ListDir(state + "/image-cache"),
              ElementsAre("00000000000000ff", "fedcba9876543210.tmp-4343-4344"));
  EXPECT_EQ(ReadFile(state + "/image-cache/fedcba9876543210.tmp-4343-4344/opt/program/train"),
            "going");
  close(held_file);
  close(held_dir);
}

// A provider's own clusters hold their lock while they live, and give it up
// (the file goes) with the cluster.
TEST_P(LocalClusterProviderTest, AClusterHoldsItsLockWhileItLives) {
  auto cluster = Provision({{kHomogeneousGroupName, "ml.m5.large", 1}});
  ASSERT_TRUE(cluster.ok());
  const std::string lock = absl::StrCat(state_dir_, "/locks/", cluster->id, ".lock");
  const int fd = open(lock.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0) << lock;
  EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0) << "nobody holds the lock of a live cluster";
  close(fd);
  provider_->Release(*cluster);
  provider_.reset();
  EXPECT_FALSE(internal::Exists(lock));
}

}  // namespace
}  // namespace kiln::local
