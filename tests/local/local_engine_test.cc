// The local backend under kiln::Engine on a real-time loop: real jobs, from
// CreateTrainingJob to the model in a file:// output path.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
    options.shared_image_cache = shared_image_cache_;
    options.log_dir = log_dir_;
    // (One state directory for both: the FastFile views the channel
    // publishes are the ones the provider's containers see read-only.)
    absl::StatusOr<LocalBackend> backend = NewLocalBackend(*loop_, stores_, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    provider_ = std::move(backend->cluster_provider);
    channel_ = std::move(backend->data_channel);
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
  bool shared_image_cache_ = false;  // (LocalOptions::shared_image_cache of UseRuntime)
  std::string log_dir_;               // (LocalOptions::log_dir of UseRuntime)
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

// A failure file that cannot be read: the FailureReason the service gives
// without one, and why it was not read.
TEST_F(LocalEngineTest, NonZeroExitWithAnUnreadableFailureFileSaysWhy) {
  AddScript("fail.sh",
            "mkdir \"$SAGEMAKER_BASE_DIR/output/failure\"\n"
            "exit 1\n");
  ASSERT_TRUE(engine_->CreateTrainingJob(Request("e2e-unreadable", "fail.sh")).ok());
  ASSERT_TRUE(WaitEnded("e2e-unreadable"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-unreadable");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_EQ(d.failure_reason(),
            "AlgorithmError: See job logs for more information (the failure file could not be "
            "read: read 'algo-1:/opt/ml/output/failure': Is a directory)");
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

// A spot job moved to on-demand while it trains (MigrateTrainingJob): its
// container gets SIGTERM and saves a checkpoint, which is synced; the next
// attempt, on on-demand capacity, finds it restored and finishes from there.
TEST_F(LocalEngineTest, AJobMovedToOnDemandResumesFromItsCheckpoint) {
  AddScript("resumable.sh",
            "ckpt=\"$SAGEMAKER_BASE_DIR/checkpoints\"\n"
            "if [ -f \"$ckpt/step\" ]; then\n"
            "  echo \"resumed at step $(cat \"$ckpt/step\")\"\n"
            "  echo done > \"$SM_MODEL_DIR/model.txt\"\n"
            "  exit 0\n"
            "fi\n"
            "trap 'echo 7 > \"$ckpt/step\"; exit 0' TERM\n"
            "echo running\n"
            "while true; do sleep 0.05; done\n");
  v1::CreateTrainingJobRequest r = Request("e2e-move", "resumable.sh");
  r.set_enable_managed_spot_training(true);
  r.mutable_stopping_condition()->set_max_wait_time_in_seconds(600);
  r.mutable_checkpoint_config()->set_s3_uri("file://" + tmp_.path() + "/ckpt/");
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(RunUntil(*loop_, [&] { return lines_.HasLine("algo-1", "running"); }));
  ASSERT_TRUE(engine_->MigrateTrainingJob("e2e-move", /*to_spot=*/false).ok());
  ASSERT_TRUE(WaitEnded("e2e-move"));
  v1::DescribeTrainingJobResponse d = Describe("e2e-move");
  EXPECT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
  EXPECT_TRUE(lines_.HasLine("algo-1", "resumed at step 7"));
  std::vector<std::string> statuses;
  for (const auto& t : d.secondary_status_transitions()) statuses.push_back(t.status());
  EXPECT_THAT(statuses, ::testing::ElementsAre("Starting", "Downloading", "Training", "Restarting",
                                               "Starting", "Downloading", "Training", "Uploading",
                                               "Completed"));
  EXPECT_EQ(ReadFile(tmp_.path() + "/ckpt/step"), "7\n");
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
  ASSERT_TRUE(MakeDirs(data_ + "/nothing").ok());
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
  // Refused by the read-only mount (EROFS), or first by the file's owner
  // (EACCES: as root, the container runs as nobody).
  EXPECT_EQ(std::count_if(lines_.lines.begin(), lines_.lines.end(),
                          [](const std::string& l) {
                            return l == "algo-1: write EROFS" || l == "algo-1: write EACCES";
                          }),
            3)
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

// ---------------------------------------------------------------------------
// A full disk. Each test runs its engine in a child process with a small
// tmpfs of its own (testing::RunWithSmallDisks) at the state directory or
// the output path: what does not fit fails the job, naming the file and the
// system's reason, leaves nothing half-written behind and does not stop the
// provider from running the next job.

class LocalEngineFullDiskTest : public LocalEngineTest {
 protected:
  void SetUp() override {
    LocalEngineTest::SetUp();
    // The engine runs in the child: this process keeps no thread to fork.
    engine_.reset();
    channel_.reset();
    provider_.reset();
  }

  std::string StateDir() const { return tmp_.path() + "/state"; }

  // Runs `body` with an engine whose state directory (and, with
  // `out_kib` > 0, output path) is a tmpfs of that many KiB.
  // `more_disks` are mounted too.
  testing::Facts OnSmallDisk(int state_kib, int out_kib,
                             const std::function<void(testing::Facts&)>& body,
                             int state_inodes = 0,
                             const std::vector<testing::SmallDisk>& more_disks = {}) {
    std::vector<testing::SmallDisk> disks = {{StateDir(), state_kib, state_inodes}};
    if (out_kib > 0) disks.push_back({out_, out_kib});
    disks.insert(disks.end(), more_disks.begin(), more_disks.end());
    testing::Facts facts = testing::RunWithSmallDisks(disks, [&] {
      testing::Facts f;
      UseRuntime(LocalRuntime::kProcess);
      if (engine_ == nullptr) {
        f["ERROR"] = "no engine";
        return f;
      }
      body(f);
      engine_.reset();
      channel_.reset();
      provider_.reset();
      return f;
    });
    return facts;
  }

  // Runs job `name` to its end; records its status and failure reason.
  void RunJob(const v1::CreateTrainingJobRequest& r, testing::Facts& f,
              absl::Duration timeout = absl::Seconds(20)) {
    const std::string& name = r.training_job_name();
    auto created = engine_->CreateTrainingJob(r);
    if (!created.ok()) {
      f[name + ".create"] = created.status().ToString();
      return;
    }
    if (!WaitEnded(name, timeout)) f[name + ".hang"] = Describe(name).secondary_status();
    v1::DescribeTrainingJobResponse d = Describe(name);
    f[name + ".status"] = d.training_job_status();
    f[name + ".reason"] = d.failure_reason();
  }

  // The facts, one a line (for failure messages).
  static std::string FactsText(const testing::Facts& f) {
    std::string out = "what the child found:\n";
    for (const auto& [name, value] : f) absl::StrAppend(&out, name, " = ", value, "\n");
    return out;
  }

  // The files below `dir`, one a line.
  static std::string Files(const std::string& dir) {
    std::string out;
    for (const std::string& file : testing::FilesBelow(dir)) absl::StrAppend(&out, file, "\n");
    return out;
  }

  // A job whose 200 KB model cannot be written (state_kib: a small state disk,
  // where the archive is packed; out_kib: a small output store, where it is
  // uploaded) fails naming the archive and the disk, leaves no partial file,
  // and the next job, whose model fits, completes.
  void ExpectAModelThatDoesNotFitToFailCleanly(const std::string& job, int state_kib,
                                                 int out_kib) {
    AddScript("model.sh", "head -c 200000 /dev/urandom > \"$SM_MODEL_DIR/model.bin\"\n");
    AddScript("small.sh", "echo ok > \"$SM_MODEL_DIR/model.txt\"\n");
    testing::Facts f = OnSmallDisk(state_kib, out_kib, [&](testing::Facts& got) {
      RunJob(Request(job, "model.sh"), got);
      got["tmp"] = Files(StateDir() + "/tmp");
      got["out"] = Files(out_);
      RunJob(Request("after-" + job, "small.sh"), got);
    });
    if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
    SCOPED_TRACE(FactsText(f));
    EXPECT_EQ(f["CHILD"], "");
    EXPECT_EQ(f[job + ".status"], "Failed");
    EXPECT_THAT(f[job + ".reason"],
                HasSubstr("could not upload the model artifacts: file://" + out_ + "/" + job +
                          "/output/model.tar.gz: "));
    EXPECT_THAT(f[job + ".reason"], HasSubstr("No space left on device"));
    EXPECT_EQ(f["tmp"], "");
    EXPECT_EQ(f["out"], "");
    EXPECT_EQ(f["after-" + job + ".status"], "Completed") << f["after-" + job + ".reason"];
  }
};

TEST_F(LocalEngineFullDiskTest, FileChannelThatDoesNotFitFailsTheJobNamingTheChannel) {
  WriteFile(data_ + "/big/data.bin", std::string(1 << 20, 'x'));
  WriteFile(data_ + "/small/rows.csv", "1\n2\n");
  AddScript("read.sh", "wc -l < \"$SM_CHANNEL_TRAIN/rows.csv\"\n");
  testing::Facts f = OnSmallDisk(512, 0, [&](testing::Facts& got) {
    v1::CreateTrainingJobRequest big = Request("full-channel", "read.sh");
    *big.add_input_data_config() = PrefixChannel("train", "file://" + data_ + "/big/");
    RunJob(big, got);
    // The failed job's files are gone once its cluster is released.
    RunUntil(*loop_, [&] { return testing::ListDir(StateDir() + "/instances").empty(); },
             absl::Seconds(5));
    got["left"] = Files(StateDir() + "/instances");
    v1::CreateTrainingJobRequest small = Request("after-full-channel", "read.sh");
    *small.add_input_data_config() = PrefixChannel("train", "file://" + data_ + "/small/");
    RunJob(small, got);
  });
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  SCOPED_TRACE(FactsText(f));
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["full-channel.status"], "Failed");
  // The service's words, then which object, which file and why.
  EXPECT_THAT(f["full-channel.reason"],
              HasSubstr("ClientError: channel 'train': Data download failed: Insufficient disk "
                        "space: object 'file://" + data_ + "/big/data.bin': write '"));
  EXPECT_THAT(f["full-channel.reason"],
              HasSubstr("/input/data/train/data.bin': No space left on device"));
  EXPECT_EQ(f["left"], "");
  EXPECT_EQ(f["after-full-channel.status"], "Completed") << f["after-full-channel.reason"];
}

TEST_F(LocalEngineFullDiskTest, ModelThatCannotBePackedFailsTheJobNamingTheArchive) {
  // The model fits in the instance's tree; the archive beside it does not.
  ExpectAModelThatDoesNotFitToFailCleanly("full-model", 384, 0);
}

TEST_F(LocalEngineFullDiskTest, FullOutputStoreFailsTheJobAndLeavesNoPartialObject) {
  ExpectAModelThatDoesNotFitToFailCleanly("full-out", 4096, 64);
}

TEST_F(LocalEngineFullDiskTest, CheckpointsThatDoNotFitFailTheJobNamingTheCheckpoint) {
  const std::string ckpt = tmp_.path() + "/ckpt";
  WriteFile(ckpt + "/step-1.bin", std::string(1 << 20, 'c'));
  AddScript("train.sh", "ls \"$SAGEMAKER_BASE_DIR/checkpoints\"\n");
  testing::Facts f = OnSmallDisk(512, 0, [&](testing::Facts& got) {
    v1::CreateTrainingJobRequest r = Request("full-ckpt", "train.sh");
    r.mutable_checkpoint_config()->set_s3_uri("file://" + ckpt + "/");
    RunJob(r, got);
    RunUntil(*loop_, [&] { return testing::ListDir(StateDir() + "/instances").empty(); },
             absl::Seconds(5));
    got["left"] = Files(StateDir() + "/instances");
    RunJob(Request("after-full-ckpt", "train.sh"), got);
  });
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  SCOPED_TRACE(FactsText(f));
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["full-ckpt.status"], "Failed");
  EXPECT_THAT(f["full-ckpt.reason"], HasSubstr("file://" + ckpt + "/step-1.bin"));
  EXPECT_THAT(f["full-ckpt.reason"], HasSubstr("No space left on device"));
  EXPECT_EQ(f["left"], "");
  EXPECT_EQ(f["after-full-ckpt.status"], "Completed") << f["after-full-ckpt.reason"];
  // The source is untouched.
  EXPECT_EQ(testing::FilesBelow(ckpt), std::vector<std::string>{"step-1.bin"});
}

TEST_F(LocalEngineFullDiskTest, FailureFileIsReadAndLinesArriveWhenTheContainerFillsTheDisk) {
  // Says why it fails, fills the disk, then writes lines that the log
  // stream (on the same disk) can no longer hold.
  AddScript("fill.sh",
            "echo 'disk full at step 3' > \"$SAGEMAKER_BASE_DIR/output/failure\"\n"
            "head -c 4000000 /dev/zero > \"$SM_MODEL_DIR/filler\" 2>/dev/null\n"
            "i=0; while [ $i -lt 100 ]; do echo \"line $i of a log nobody can store\"; "
            "i=$((i+1)); done\n"
            "exit 3\n");
  AddScript("small.sh", "echo ok > \"$SM_MODEL_DIR/model.txt\"\n");
  testing::Facts f = OnSmallDisk(384, 0, [&](testing::Facts& got) {
    RunJob(Request("full-container", "fill.sh"), got);
    got["last-line"] = lines_.HasLine("algo-1", "line 99 of a log nobody can store") ? "yes" : "no";
    RunJob(Request("after-full-container", "small.sh"), got);
  });
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  SCOPED_TRACE(FactsText(f));
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["full-container.status"], "Failed");
  EXPECT_EQ(f["full-container.reason"], "AlgorithmError: disk full at step 3\n");
  EXPECT_EQ(f["last-line"], "yes");
  EXPECT_EQ(f["after-full-container.status"], "Completed") << f["after-full-container.reason"];
}

TEST_F(LocalEngineFullDiskTest, FullStateDirectoryFailsTheJobInsteadOfKeepingItPending) {
  AddScript("small.sh", "echo ok > \"$SM_MODEL_DIR/model.txt\"\n");
  // Takes every inode (empty files), or every block (one file).
  auto fill = [&](bool inodes) {
    const std::string chunk(4096, 'f');
    for (int i = 0; i < 1000; ++i) {
      const std::string p = absl::StrCat(StateDir(), "/filler-", i);
      const int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return;
      while (!inodes && write(fd, chunk.data(), chunk.size()) > 0) {
      }
      close(fd);
      if (!inodes) return;
    }
  };
  auto unfill = [&] {
    for (const std::string& name : testing::ListDir(StateDir())) {
      if (absl::StartsWith(name, "filler-")) unlink((StateDir() + "/" + name).c_str());
    }
  };
  auto gone = [&](testing::Facts& f, const std::string& job) {
    RunUntil(*loop_, [&] { return testing::ListDir(StateDir() + "/instances").empty(); },
             absl::Seconds(5));
    f[job + ".left"] = Files(StateDir() + "/instances") + Files(StateDir() + "/locks") +
                       Files(StateDir() + "/tmp");
  };
  testing::Facts f = OnSmallDisk(256, 0, [&](testing::Facts& got) {
    // No file can be made: not even the cluster's lock.
    fill(/*inodes=*/true);
    RunJob(Request("no-inodes", "small.sh"), got, absl::Seconds(10));
    gone(got, "no-inodes");
    unfill();
    // No byte can be written: the image does not fit on the instance.
    fill(/*inodes=*/false);
    RunJob(Request("no-blocks", "small.sh"), got, absl::Seconds(10));
    gone(got, "no-blocks");
    unfill();
    RunJob(Request("room-again", "small.sh"), got);
  }, /*state_inodes=*/64);
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  SCOPED_TRACE(FactsText(f));
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["no-inodes.hang"], "");
  EXPECT_EQ(f["no-inodes.status"], "Failed");
  EXPECT_THAT(f["no-inodes.reason"],
              HasSubstr("InternalServerError: could not provision instances: could not create "
                        "local instances: "));
  EXPECT_THAT(f["no-inodes.reason"], HasSubstr("No space left on device"));
  EXPECT_EQ(f["no-inodes.left"], "");
  EXPECT_EQ(f["no-blocks.status"], "Failed");
  EXPECT_THAT(f["no-blocks.reason"],
              HasSubstr("ClientError: could not prepare training image 'file://" + image_));
  EXPECT_THAT(f["no-blocks.reason"], HasSubstr("small.sh': No space left on device"));
  EXPECT_EQ(f["no-blocks.left"], "");
  EXPECT_EQ(f["room-again.status"], "Completed") << f["room-again.reason"];
}

TEST_F(LocalEngineFullDiskTest, ImageTarballThatDoesNotFitIsNotCachedCutShort) {
  // A tarball image whose program checks the weights beside it against
  // their checksum (random bytes: the tarball is as large as they are).
  // (libarchive extends a file cut short by a failed write to its full
  // size with zeros: only the contents tell.)
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  std::string weights(300000, '\0');
  urandom.read(weights.data(), static_cast<std::streamsize>(weights.size()));
  WriteFile(image_ + "/weights.bin", weights);
  AddScript("train.sh",
            "cd \"$(dirname \"$0\")\"\n"
            "if cksum weights.bin | cmp -s - weights.cksum; then echo weights intact; "
            "else echo weights corrupt; fi\n");
  const std::string tarball = tmp_.path() + "/image.tar.gz";
  ASSERT_EQ(std::system(("cd " + image_ + " && cksum weights.bin > weights.cksum && tar -czf " +
                         tarball + " .").c_str()),
            0);
  // One unpack serves every later job of the provider: a cut one would too.
  shared_image_cache_ = true;
  testing::Facts f = OnSmallDisk(1024, 0, [&](testing::Facts& got) {
    // Leaves about 200 KiB.
    const std::string filler = StateDir() + "/filler";
    {
      std::ofstream(filler, std::ios::binary) << std::string(800 << 10, 'f');
    }
    v1::CreateTrainingJobRequest r = Request("full-image", "train.sh");
    r.mutable_algorithm_specification()->set_training_image("file://" + tarball);
    RunJob(r, got);
    got["full-image.weights"] = lines_.lines.empty() ? "" : lines_.lines.back();
    unlink(filler.c_str());
    RunUntil(*loop_, [&] { return testing::ListDir(StateDir() + "/instances").empty(); },
             absl::Seconds(5));
    got["cache"] = Files(StateDir() + "/image-cache");
    lines_.lines.clear();
    r.set_training_job_name("room-for-image");
    RunJob(r, got);
    got["room-for-image.weights"] = lines_.lines.empty() ? "" : lines_.lines.back();
  });
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  SCOPED_TRACE(FactsText(f));
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["full-image.status"], "Failed");
  EXPECT_THAT(f["full-image.reason"],
              HasSubstr("ClientError: could not prepare training image 'file://" + tarball +
                        "': "));
  EXPECT_THAT(f["full-image.reason"], HasSubstr("/weights.bin': No space left on device"));
  EXPECT_EQ(f["cache"], "");
  EXPECT_EQ(f["room-for-image.status"], "Completed") << f["room-for-image.reason"];
  EXPECT_EQ(f["room-for-image.weights"], "algo-1: weights intact");
}

// The log stream shares the state directory's disk, which fills while the
// container runs and has room again later. The file ends on its last whole
// line and says why it stops; it never holds a cut line or one joined to a
// later one; observers are told once, and get every line.
TEST_F(LocalEngineFullDiskTest, LogStreamOnAFullDiskEndsOnAWholeLineAndObserversAreTold) {
  // (On the host's disk, not the small one: they must be made on a full disk.)
  const std::string flags = tmp_.path() + "/flags";
  ASSERT_TRUE(MakeDirs(flags).ok());
  // Waits for the test between its lines: "first" is in the stream before the
  // disk fills up; of the long line, only what the stream's last page holds
  // fits; "after" comes when there is room again.
  AddScript("chatty.sh",
            "echo first\n"
            "while [ ! -e '" + flags + "/full' ]; do sleep 0.01; done\n"
            "echo \"long $(printf '%6000s' '' | tr ' ' x)\"\n"
            "while [ ! -e '" + flags + "/room' ]; do sleep 0.01; done\n"
            "echo after\n");
  const std::string long_line = "long " + std::string(6000, 'x');
  auto touch = [](const std::string& path) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
  };
  testing::Facts f = OnSmallDisk(512, 0, [&](testing::Facts& got) {
    auto created = engine_->CreateTrainingJob(Request("full-log", "chatty.sh"));
    if (!created.ok()) {
      got["create"] = created.status().ToString();
      return;
    }
    if (!RunUntil(*loop_, [&] { return lines_.HasLine("algo-1", "first"); })) {
      got["first"] = "never came";
    }
    // (The stream has "first": observers get a line after it is written.)
    const std::string filler = StateDir() + "/filler";
    const int fd = open(filler.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    const std::string chunk(4096, 'f');
    while (fd >= 0 && write(fd, chunk.data(), chunk.size()) > 0) {
    }
    if (fd >= 0) close(fd);
    touch(flags + "/full");
    if (!RunUntil(*loop_, [&] { return lines_.HasLine("algo-1", long_line); })) {
      got["long"] = "never came";
    }
    unlink(filler.c_str());
    touch(flags + "/room");
    if (!WaitEnded("full-log")) got["hang"] = Describe("full-log").secondary_status();
    got["status"] = Describe("full-log").training_job_status();
    const std::string logs = StateDir() + "/logs/full-log";
    const std::vector<std::string> streams = testing::ListDir(logs);
    got["streams"] = absl::StrCat(streams.size());
    if (streams.size() == 1) {
      got["stream.name"] = streams[0];
      got["stream"] = ReadFile(logs + "/" + streams[0]);
    }
    for (const std::string& line : lines_.lines) absl::StrAppend(&got["observed"], line, "\n");
  });
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  SCOPED_TRACE(FactsText(f));
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["status"], "Completed");
  ASSERT_EQ(f["streams"], "1");
  EXPECT_EQ(f["stream"],
            "first\n[kiln] the log stream stops here: write failed: No space left on device; "
            "the rest of the output reached the job's observers only\n");
  // Every line reached observers; the note that the stream broke came once,
  // before the line the stream lacks; and Kiln's own lines came after it.
  const std::vector<std::string> observed = absl::StrSplit(f["observed"], '\n');
  const std::string note =
      absl::StrCat("algo-1: [kiln] the log stream cannot be written: write '", StateDir(),
                   "/logs/full-log/", f["stream.name"],
                   "': No space left on device; it ends with the last whole line that fit, and "
                   "the rest of this container's output reaches the job's observers only");
  ASSERT_GE(observed.size(), 5u);
  EXPECT_EQ(observed[0], "algo-1: first");
  EXPECT_EQ(observed[1], note);
  EXPECT_EQ(observed[2], "algo-1: " + long_line);
  EXPECT_EQ(observed[3], "algo-1: after");
  EXPECT_THAT(observed[4], HasSubstr("algo-1: [kiln] algo-1 exited with 0: cpu "));
  EXPECT_EQ(std::count(observed.begin(), observed.end(), note), 1);
}

// A log directory without room for a job's stream: the job runs all the
// same, and observers are told why there is no stream, and get every line.
TEST_F(LocalEngineFullDiskTest, LogStreamThatCannotBeCreatedIsSaidAndTheJobRuns) {
  AddScript("hello.sh", "echo hello\n");
  log_dir_ = tmp_.path() + "/logs";
  // Inodes for the root, one job's directory and a filler: none left.
  const std::vector<testing::SmallDisk> logs = {{log_dir_, 64, 3}};
  testing::Facts f = OnSmallDisk(4096, 0, [&](testing::Facts& got) {
    if (!MakeDirs(log_dir_ + "/no-file").ok()) got["setup"] = "no directory";
    const int fd = open((log_dir_ + "/filler").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) got["setup"] = "no filler";
    if (fd >= 0) close(fd);
    for (const char* job : {"no-file", "no-dir"}) {
      lines_.lines.clear();
      RunJob(Request(job, "hello.sh"), got);
      for (const std::string& line : lines_.lines) {
        absl::StrAppend(&got[absl::StrCat(job, ".observed")], line, "\n");
      }
    }
  }, 0, logs);
  if (f.count("SKIP")) GTEST_SKIP() << f["SKIP"];
  SCOPED_TRACE(FactsText(f));
  EXPECT_EQ(f["CHILD"], "");
  EXPECT_EQ(f["setup"], "");
  EXPECT_EQ(f["no-file.status"], "Completed") << f["no-file.reason"];
  EXPECT_THAT(f["no-file.observed"],
              HasSubstr("algo-1: [kiln] the log stream cannot be written: create '" + log_dir_ +
                        "/no-file/algo-1-"));
  EXPECT_EQ(f["no-dir.status"], "Completed") << f["no-dir.reason"];
  EXPECT_THAT(f["no-dir.observed"],
              HasSubstr("algo-1: [kiln] the log stream cannot be written: create directory '" +
                        log_dir_ + "/no-dir': No space left on device; this container's output "
                        "reaches the job's observers only\nalgo-1: hello\n"));
  for (const char* job : {"no-file", "no-dir"}) {
    const std::string observed = f[absl::StrCat(job, ".observed")];
    EXPECT_THAT(observed, HasSubstr("': No space left on device; this container's output reaches "
                                    "the job's observers only\nalgo-1: hello\n"))
        << job;
    EXPECT_THAT(observed, HasSubstr("algo-1: [kiln] algo-1 exited with 0: cpu ")) << job;
  }
}

}  // namespace
}  // namespace kiln::local
