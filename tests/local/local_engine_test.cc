// The local backend under kiln::Engine on a real-time loop: real jobs, from
// CreateTrainingJob to the model in a file:// output path.
#include <signal.h>

#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/engine.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "local/internal/archive.h"
#include "local/internal/fs.h"
#include "local/internal/spawn.h"
#include "local/local_test_util.h"

namespace kiln::local {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::RunUntil;
using testing::TempDir;
using testing::WriteFile;

class LocalEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    image_ = tmp_.path() + "/image";
    data_ = tmp_.path() + "/data";
    out_ = tmp_.path() + "/out";
    loop_ = NewRealTimeEventLoop();
    file_store_ = NewFileObjectStore();
    stores_.Register("file", file_store_.get());
    UseRuntime(LocalRuntime::kProcess);
  }

  // A new engine, provider and data channel with `runtime`.
  void UseRuntime(LocalRuntime runtime) {
    engine_.reset();
    channel_.reset();
    provider_.reset();
    LocalOptions options;
    options.state_dir = tmp_.path() + "/state";
    options.object_stores = &stores_;
    options.runtime = runtime;
    auto provider = NewLocalClusterProvider(*loop_, options);
    ASSERT_TRUE(provider.ok()) << provider.status();
    provider_ = *std::move(provider);
    channel_ = NewLocalDataChannel(*loop_, stores_, {.state_dir = options.state_dir});
    EngineOptions engine_options;
    engine_options.loop = loop_.get();
    engine_options.cluster_provider = provider_.get();
    engine_options.data_channel = channel_.get();
    engine_options.stop_grace_period = absl::Milliseconds(500);
    auto engine = NewEngine(engine_options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    engine_->AddObserver(&lines_);
  }

  void TearDown() override {
    engine_.reset();
    channel_.reset();
    provider_.reset();
  }

  void AddScript(const std::string& name, const std::string& body) {
    WriteFile(absl::StrCat(image_, "/", name), absl::StrCat("#!/bin/sh\n", body), 0755);
  }

  v1::CreateTrainingJobRequest Request(const std::string& name, const std::string& script) {
    v1::CreateTrainingJobRequest r;
    r.set_training_job_name(name);
    r.set_role_arn("arn:aws:iam::000000000000:role/local-role");
    auto* spec = r.mutable_algorithm_specification();
    spec->set_training_image("file://" + image_);
    spec->set_training_input_mode("File");
    spec->add_container_entrypoint("/bin/sh");
    spec->add_container_entrypoint("/opt/program/" + script);
    r.mutable_output_data_config()->set_s3_output_path("file://" + out_);
    auto* rc = r.mutable_resource_config();
    rc->set_instance_type("ml.m5.large");
    rc->set_instance_count(1);
    rc->set_volume_size_in_gb(10);
    r.mutable_stopping_condition()->set_max_runtime_in_seconds(600);
    return r;
  }

  v1::DescribeTrainingJobResponse Describe(const std::string& name) {
    v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(name);
    auto r = engine_->DescribeTrainingJob(d);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::DescribeTrainingJobResponse();
  }

  bool WaitEnded(const std::string& name, absl::Duration timeout = absl::Seconds(30)) {
    return RunUntil(*loop_, [&] {
      const std::string s = Describe(name).training_job_status();
      return s == "Completed" || s == "Failed" || s == "Stopped";
    }, timeout);
  }

  // Log lines the engine's observers see.
  struct Lines : JobObserver {
    void OnLogLine(std::string_view job, std::string_view host, std::string_view line,
                   absl::Time) override {
      lines.push_back(absl::StrCat(internal::Av(host), ": ", internal::Av(line)));
    }
    bool HasLine(std::string_view host, std::string_view line) const {
      return std::find(lines.begin(), lines.end(), absl::StrCat(internal::Av(host), ": ", internal::Av(line))) != lines.end();
    }
    std::vector<std::string> lines;
  };

  TempDir tmp_;
  Lines lines_;
  std::string image_, data_, out_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ObjectStore> file_store_;
  ObjectStores stores_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(LocalEngineTest, FileChannelJobCompletesWithModelInTheOutputPath) {
  WriteFile(data_ + "/train/rows.csv", "1\n2\n3\n");
  AddScript("train.sh",
            "rows=$(wc -l < \"$SM_CHANNEL_TRAIN/rows.csv\")\n"
            "echo \"read $rows rows, alpha=$SM_HP_ALPHA\"\n"
            "echo 'epoch=1 loss=0.75'\n"
            "echo 'epoch=2 loss=0.25'\n"
            "echo \"model trained on $rows rows\" > \"$SM_MODEL_DIR/model.txt\"\n");
  v1::CreateTrainingJobRequest r = Request("e2e-file", "train.sh");
  (*r.mutable_hyper_parameters())["alpha"] = "0.5";
  auto* metric = r.mutable_algorithm_specification()->add_metric_definitions();
  metric->set_name("train:loss");
  metric->set_regex("loss=([0-9.]+)");
  v1::Channel* ch = r.add_input_data_config();
  ch->set_channel_name("train");
  ch->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  ch->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("file://" + data_ + "/train/");
  auto created = engine_->CreateTrainingJob(r);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(WaitEnded("e2e-file"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-file");
  EXPECT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
  EXPECT_EQ(d.secondary_status(), "Completed");
  std::vector<std::string> statuses;
  for (const auto& t : d.secondary_status_transitions()) statuses.push_back(t.status());
  EXPECT_THAT(statuses, ::testing::ElementsAre("Starting", "Downloading", "Training", "Uploading",
                                               "Completed"));
  EXPECT_EQ(d.model_artifacts().s3_model_artifacts(),
            absl::StrCat("file://", out_, "/e2e-file/output/model.tar.gz"));
  auto model = internal::ReadArchive(out_ + "/e2e-file/output/model.tar.gz");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->files["model.txt"], "model trained on 3 rows\n");
  ASSERT_EQ(d.final_metric_data_list_size(), 1);
  EXPECT_EQ(d.final_metric_data_list(0).metric_name(), "train:loss");
  EXPECT_DOUBLE_EQ(d.final_metric_data_list(0).value(), 0.25);
  EXPECT_TRUE(lines_.HasLine("algo-1", "read 3 rows, alpha=0.5"));
}

TEST_F(LocalEngineTest, NonZeroExitFailsWithTheFailureFile) {
  AddScript("fail.sh",
            "echo 'ValueError: no rows' > \"$SAGEMAKER_BASE_DIR/output/failure\"\n"
            "exit 1\n");
  ASSERT_TRUE(engine_->CreateTrainingJob(Request("e2e-fail", "fail.sh")).ok());
  ASSERT_TRUE(WaitEnded("e2e-fail"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-fail");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_EQ(d.failure_reason(), "AlgorithmError: ValueError: no rows\n");
}

TEST_F(LocalEngineTest, StopSendsSigtermAndUploadsWhatWasSaved) {
  AddScript("stoppable.sh",
            "trap 'echo partial > \"$SM_MODEL_DIR/partial.txt\"; exit 0' TERM\n"
            "echo running\n"
            "while true; do sleep 0.05; done\n");
  ASSERT_TRUE(engine_->CreateTrainingJob(Request("e2e-stop", "stoppable.sh")).ok());
  // Stop once the entrypoint runs (it traps TERM first thing).
  ASSERT_TRUE(RunUntil(*loop_, [&] { return lines_.HasLine("algo-1", "running"); }));
  v1::StopTrainingJobRequest stop;
  stop.set_training_job_name("e2e-stop");
  ASSERT_TRUE(engine_->StopTrainingJob(stop).ok());
  ASSERT_TRUE(WaitEnded("e2e-stop"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-stop");
  EXPECT_EQ(d.training_job_status(), "Stopped");
  auto model = internal::ReadArchive(out_ + "/e2e-stop/output/model.tar.gz");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->files["partial.txt"], "partial\n");
}

TEST_F(LocalEngineTest, MaxRuntimeStopsTheJobWithSigtermThenSigkill) {
  AddScript("forever.sh",
            "trap 'echo ignoring TERM' TERM\n"
            "echo running\n"
            "while true; do sleep 0.05; done\n");
  v1::CreateTrainingJobRequest r = Request("e2e-max", "forever.sh");
  r.mutable_stopping_condition()->set_max_runtime_in_seconds(1);
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(WaitEnded("e2e-max", absl::Seconds(20)));
  v1::DescribeTrainingJobResponse d = Describe("e2e-max");
  EXPECT_EQ(d.training_job_status(), "Stopped");
  EXPECT_EQ(d.secondary_status(), "MaxRuntimeExceeded");
  EXPECT_TRUE(lines_.HasLine("algo-1", "ignoring TERM"));
}

TEST_F(LocalEngineTest, WarmPoolReuseRunsTheNextJobOnCleanDirectories) {
  AddScript("a.sh", "echo secret > \"$SM_MODEL_DIR/secret-a\"\n");
  AddScript("b.sh",
            "if [ -e \"$SM_MODEL_DIR/secret-a\" ]; then echo leak > "
            "\"$SAGEMAKER_BASE_DIR/output/failure\"; exit 1; fi\n"
            "echo \"$SAGEMAKER_BASE_DIR\" > \"$SM_MODEL_DIR/where\"\n");
  v1::CreateTrainingJobRequest a = Request("e2e-warm-a", "a.sh");
  a.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
  ASSERT_TRUE(engine_->CreateTrainingJob(a).ok());
  ASSERT_TRUE(WaitEnded("e2e-warm-a"));
  ASSERT_EQ(Describe("e2e-warm-a").training_job_status(), "Completed");
  v1::CreateTrainingJobRequest b = Request("e2e-warm-b", "b.sh");
  b.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
  ASSERT_TRUE(engine_->CreateTrainingJob(b).ok());
  ASSERT_TRUE(WaitEnded("e2e-warm-b"));
  v1::DescribeTrainingJobResponse db = Describe("e2e-warm-b");
  EXPECT_EQ(db.training_job_status(), "Completed") << db.failure_reason();
  EXPECT_EQ(Describe("e2e-warm-a").warm_pool_status().status(), "Reused");
  // Both ran on the same instance.
  auto ma = internal::ReadArchive(out_ + "/e2e-warm-a/output/model.tar.gz");
  auto mb = internal::ReadArchive(out_ + "/e2e-warm-b/output/model.tar.gz");
  ASSERT_TRUE(ma.ok() && mb.ok());
  EXPECT_EQ(mb->files.count("secret-a"), 0u);
}

TEST_F(LocalEngineTest, JobWithAnotherRoleNeverLandsOnTheWarmInstance) {
  AddScript("a.sh", "echo secret > \"$SM_MODEL_DIR/secret-a\"\n");
  AddScript("b.sh", "echo \"$SAGEMAKER_BASE_DIR\" > \"$SM_MODEL_DIR/where\"\n");
  v1::CreateTrainingJobRequest a = Request("e2e-role-a", "a.sh");
  a.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
  ASSERT_TRUE(engine_->CreateTrainingJob(a).ok());
  ASSERT_TRUE(WaitEnded("e2e-role-a"));
  ASSERT_EQ(Describe("e2e-role-a").warm_pool_status().status(), "Available");
  v1::CreateTrainingJobRequest b = Request("e2e-role-b", "b.sh");
  b.set_role_arn("arn:aws:iam::000000000000:role/another-role");
  b.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
  ASSERT_TRUE(engine_->CreateTrainingJob(b).ok());
  ASSERT_TRUE(WaitEnded("e2e-role-b"));
  EXPECT_EQ(Describe("e2e-role-b").training_job_status(), "Completed");
  EXPECT_EQ(Describe("e2e-role-a").warm_pool_status().status(), "Available");
  // B ran on an instance tree of its own.
  auto mb = internal::ReadArchive(out_ + "/e2e-role-b/output/model.tar.gz");
  ASSERT_TRUE(mb.ok()) << mb.status();
  const std::string where = mb->files["where"];
  EXPECT_EQ(testing::ListDir(tmp_.path() + "/state/instances").size(), 2u);
  EXPECT_EQ(mb->files.count("secret-a"), 0u);
  EXPECT_FALSE(where.empty());
}


v1::Channel PrefixChannel(const std::string& name, const std::string& uri) {
  v1::Channel ch;
  ch.set_channel_name(name);
  ch.mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
  ch.mutable_data_source()->mutable_s3_data_source()->set_s3_uri(uri);
  return ch;
}

TEST_F(LocalEngineTest, PipeChannelIsReadEpochByEpochByTheContainer) {
  WriteFile(data_ + "/train/a", "a1;");
  WriteFile(data_ + "/train/b", "b2;");
  // Reads three epochs as an algorithm does: open <channel>_<e>, read to end
  // of file, wait for the next one.
  AddScript("pipe.sh",
            "for e in 0 1 2; do\n"
            "  f=\"$SAGEMAKER_BASE_DIR/input/data/train_$e\"\n"
            "  while [ ! -p \"$f\" ]; do sleep 0.01; done\n"
            "  echo \"epoch $e: $(cat \"$f\")\"\n"
            "done\n"
            "cat \"$SAGEMAKER_BASE_DIR/input/config/inputdataconfig.json\"; echo\n");
  v1::CreateTrainingJobRequest r = Request("e2e-pipe", "pipe.sh");
  r.mutable_algorithm_specification()->set_training_input_mode("Pipe");
  *r.add_input_data_config() = PrefixChannel("train", "file://" + data_ + "/train/");
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(WaitEnded("e2e-pipe"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-pipe");
  EXPECT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
  for (int e = 0; e < 3; ++e) {
    EXPECT_TRUE(lines_.HasLine("algo-1", absl::StrCat("epoch ", e, ": a1;b2;"))) << e;
  }
  EXPECT_TRUE(lines_.HasLine(
      "algo-1",
      "{\"train\":{\"TrainingInputMode\":\"Pipe\",\"S3DistributionType\":\"FullyReplicated\","
      "\"RecordWrapperType\":\"None\"}}"));
}

TEST_F(LocalEngineTest, ContainerThatExitsWhileTheWriterWaitsEndsTheWriter) {
  WriteFile(data_ + "/train/big", std::string(4 << 20, 'x'));
  // Reads a little of epoch 0 and exits: the writer is blocked on a full
  // pipe, then waiting for a reader of epoch 1 that never comes.
  AddScript("quit.sh", "head -c 10 \"$SAGEMAKER_BASE_DIR/input/data/train_0\" > /dev/null\n");
  v1::CreateTrainingJobRequest r = Request("e2e-quit", "quit.sh");
  r.mutable_algorithm_specification()->set_training_input_mode("Pipe");
  *r.add_input_data_config() = PrefixChannel("train", "file://" + data_ + "/train/");
  // Kept warm, so the instance's tree stays and shows what the writer does.
  r.mutable_resource_config()->set_keep_alive_period_in_seconds(60);
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(WaitEnded("e2e-quit"));
  EXPECT_EQ(Describe("e2e-quit").training_job_status(), "Completed");
  const std::vector<std::string> clusters = testing::ListDir(tmp_.path() + "/state/instances");
  ASSERT_EQ(clusters.size(), 1u);
  const std::string data =
      absl::StrCat(tmp_.path(), "/state/instances/", clusters[0], "/algo-1/ml/input/data");
  // The engine ended the job's channels: the writer stopped and removed the
  // FIFO it was offering (epoch 1, after the early close of epoch 0).
  EXPECT_TRUE(RunUntil(*loop_, [&] {
    for (const std::string& f : testing::ListDir(data)) {
      if (absl::StartsWith(f, "train_")) return false;
    }
    return true;
  }, absl::Seconds(10)));
}

TEST_F(LocalEngineTest, EmptyPrefixIsRejectedByCreateTrainingJob) {
  ASSERT_TRUE(internal::MakeDirs(data_ + "/nothing").ok());
  AddScript("noop.sh", "true\n");
  v1::CreateTrainingJobRequest r = Request("e2e-empty", "noop.sh");
  *r.add_input_data_config() = PrefixChannel("train", "file://" + data_ + "/nothing/");
  auto created = engine_->CreateTrainingJob(r);
  EXPECT_TRUE(absl::IsInvalidArgument(created.status())) << created.status();
  EXPECT_THAT(created.status().message(), HasSubstr("No S3 objects found under S3 URL"));
  v1::DescribeTrainingJobRequest describe;
  describe.set_training_job_name("e2e-empty");
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(describe).status()));
}

TEST_F(LocalEngineTest, FastFileChannelIsReadOnlyInsideTheBwrapSandbox) {
  if (!testing::BwrapWorks()) GTEST_SKIP() << "bubblewrap does not work here";
  UseRuntime(LocalRuntime::kBwrap);
  WriteFile(data_ + "/ff/rows.csv", "1\n2\n");
  AddScript("ff.sh",
            "echo \"rows $(wc -l < /opt/ml/input/data/ff/rows.csv)\"\n"
            "if echo x > /opt/ml/input/data/ff/new 2>/dev/null; then echo wrote; else echo "
            "read-only; fi\n");
  v1::CreateTrainingJobRequest r = Request("e2e-ff", "ff.sh");
  r.mutable_algorithm_specification()->set_training_input_mode("FastFile");
  *r.add_input_data_config() = PrefixChannel("ff", "file://" + data_ + "/ff/");
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(WaitEnded("e2e-ff"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-ff");
  EXPECT_EQ(d.training_job_status(), "Completed") << d.failure_reason() << lines_.lines.size();
  EXPECT_TRUE(lines_.HasLine("algo-1", "rows 2")) << ::testing::PrintToString(lines_.lines);
  EXPECT_TRUE(lines_.HasLine("algo-1", "read-only"));
  EXPECT_FALSE(internal::Exists(data_ + "/ff/new"));
}


TEST_F(LocalEngineTest, FastFileChannelIsReadOnlyUnderTheProcessRuntime) {
  if (internal::GetMountNamespaceSupport() == internal::MountNamespaceSupport::kNone) {
    GTEST_SKIP() << "this process may create neither mount nor user namespaces: the process "
                    "runtime's FastFile view stays a writable link here (documented)";
  }
  WriteFile(data_ + "/ff/rows.csv", "1\n2\n");
  // Writes through the channel's link and through the source's own path.
  AddScript("ff.sh",
            absl::StrCat("echo \"rows $(wc -l < \"$SAGEMAKER_BASE_DIR/input/data/ff/rows.csv\")\"\n",
                         testing::Python(), " - <<'EOF'\n"
                         "import errno, os\n"
                         "for p in (os.environ['SAGEMAKER_BASE_DIR'] + '/input/data/ff/new', '",
                         data_, "/ff/new2', '", data_, "/ff/rows.csv'):\n"
                         "    try:\n"
                         "        open(p, 'a').write('x')\n"
                         "        print('wrote', p)\n"
                         "    except OSError as e:\n"
                         "        print('write', errno.errorcode[e.errno])\n"
                         "EOF\n"));
  v1::CreateTrainingJobRequest r = Request("e2e-ff-process", "ff.sh");
  r.mutable_algorithm_specification()->set_training_input_mode("FastFile");
  *r.add_input_data_config() = PrefixChannel("ff", "file://" + data_ + "/ff/");
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(WaitEnded("e2e-ff-process"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-ff-process");
  EXPECT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
  EXPECT_TRUE(lines_.HasLine("algo-1", "rows 2")) << ::testing::PrintToString(lines_.lines);
  EXPECT_EQ(std::count(lines_.lines.begin(), lines_.lines.end(), "algo-1: write EROFS"), 3)
      << ::testing::PrintToString(lines_.lines);
  EXPECT_FALSE(internal::Exists(data_ + "/ff/new"));
  EXPECT_FALSE(internal::Exists(data_ + "/ff/new2"));
  EXPECT_EQ(ReadFile(data_ + "/ff/rows.csv"), "1\n2\n");
  // Only the container's view was read-only: the host's folder is not.
  WriteFile(data_ + "/ff/host-can", "yes");
  EXPECT_EQ(ReadFile(data_ + "/ff/host-can"), "yes");
  EXPECT_EQ(ReadFile("/proc/self/mountinfo").find(data_), std::string::npos);
}


TEST_F(LocalEngineTest, PipeObjectThatVanishesFailsTheRunningJobNamingIt) {
  WriteFile(data_ + "/m/first", "1");
  WriteFile(data_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", data_, "/m/\"}, \"first\", \"second\"]"));
  // Reads epoch 0 (the writer fails at the missing object), then waits.
  AddScript("wait.sh",
            "cat \"$SAGEMAKER_BASE_DIR/input/data/train_0\" > /dev/null\n"
            "while true; do sleep 0.05; done\n");
  v1::CreateTrainingJobRequest r = Request("e2e-vanish", "wait.sh");
  r.mutable_algorithm_specification()->set_training_input_mode("Pipe");
  v1::Channel ch = PrefixChannel("train", "file://" + data_ + "/manifest.json");
  ch.mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("ManifestFile");
  *r.add_input_data_config() = ch;
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(WaitEnded("e2e-vanish"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-vanish");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_THAT(d.failure_reason(), HasSubstr("ClientError: channel 'train': object 'file://" + data_ + "/m/second'"));
}

}  // namespace
}  // namespace kiln::local
