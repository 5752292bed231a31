// Real jobs on the local backend with s3:// everything: File-mode channels
// read from S3, checkpoints synced to S3 across an injected spot
// interruption, the model uploaded to S3 (multipart) and read back with the
// aws CLI. moto is the S3 endpoint, with signature checking on.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "aws/internal/s3_client.h"
#include "aws/moto_server.h"
#include "aws/tests_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/aws/s3.h"
#include "kiln/engine.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/spot.h"
#include "local/internal/archive.h"
#include "local/local_test_util.h"

namespace kiln::aws {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::MotoServer;
using testing::RandomBytes;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// Log lines and statuses as the engine's observers see them (loop thread).
struct Recorder : JobObserver {
  void OnLogLine(std::string_view, std::string_view, std::string_view line, absl::Time) override {
    lines.emplace_back(line);
  }
  bool Has(const std::string& line) const {
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  }
  std::vector<std::string> lines;
};

class S3LocalEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_moto_ = new MotoServer;
    *start_status_ = shared_moto_->Start();
  }
  static void TearDownTestSuite() {
    delete shared_moto_;
    shared_moto_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(start_status_->ok()) << *start_status_;
    auto key = moto_.Reset();
    ASSERT_TRUE(key.ok()) << key.status();
    key_ = *key;
    internal::S3ClientOptions c;
    c.endpoint = moto_.endpoint();
    c.credentials = {key_.access_key_id, key_.secret_access_key, ""};
    internal::S3Client direct(c);
    // Channels, checkpoints and models in buckets of their own, at the top
    // level: moto's signature check cannot take an escaped '/' in a listing
    // prefix (see MotoServer::Reset).
    for (const char* b : {"kiln-train", "kiln-ckpt", "kiln-out"}) {
      ASSERT_TRUE(direct.CreateBucket(b).ok());
    }
    S3Options o = moto_.Options(key_);
    o.part_size = 5 << 20;
    o.multipart_threshold = 5 << 20;
    auto s3 = NewS3ObjectStore(o);
    ASSERT_TRUE(s3.ok()) << s3.status();
    s3_ = *std::move(s3);
    stores_.Register("s3", s3_.get());
    Build(local::LocalRuntime::kProcess);
  }

  // The loop, provider, channel and engine, for containers of `runtime`.
  void Build(local::LocalRuntime runtime) {
    TearDown();
    loop_ = NewRealTimeEventLoop();
    local::LocalOptions options;
    options.runtime = runtime;
    options.state_dir = tmp_.path() + "/state";
    options.object_stores = &stores_;
    options.checkpoint_sync_interval = absl::Milliseconds(200);
    auto provider = local::NewLocalClusterProvider(*loop_, options);
    ASSERT_TRUE(provider.ok()) << provider.status();
    provider_ = *std::move(provider);
    channel_ = local::NewLocalDataChannel(*loop_, stores_, {.state_dir = options.state_dir});
    spot_ = NewDefaultSpotInterruptionHandler({.retry_delay = absl::Milliseconds(100)});
    EngineOptions e;
    e.loop = loop_.get();
    e.cluster_provider = provider_.get();
    e.data_channel = channel_.get();
    e.spot_handler = spot_.get();
    e.stop_grace_period = absl::Seconds(2);
    auto engine = NewEngine(e);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    engine_->AddObserver(&recorder_);
  }

  void TearDown() override {
    engine_.reset();
    channel_.reset();
    provider_.reset();
    spot_.reset();
    loop_.reset();
  }

  // Whether a FUSE file system is mounted below the test's directory.
  bool FuseMountedBelowTmp() {
    const std::string mounts = ReadFile("/proc/self/mountinfo");
    return absl::StrContains(mounts, tmp_.path() + "/");
  }

  // A FastFile job over s3://kiln-train/ (a.csv, sub/b.csv and a 16 MiB
  // big.bin) whose container checks what it sees; returns after checking
  // the model it wrote and that the view is unmounted.
  void RunFastFileJob(const std::string& name) {
    const std::string big = RandomBytes((16 << 20) + 3, 11);
    WriteFile(tmp_.path() + "/seed/a.csv", "1\n2\n3\n");
    WriteFile(tmp_.path() + "/seed/sub/b.csv", "4\n5\n");
    WriteFile(tmp_.path() + "/seed/big.bin", big);
    ASSERT_NO_FATAL_FAILURE(SeedTrainBucket());
    v1::CreateTrainingJobRequest r = Request(
        name,
        "d=\"$SM_CHANNEL_TRAIN\"\n"
        "echo \"fs=$(stat -f -c %T \"$d/\")\"\n"
        "echo \"files=$(cd \"$d\" && find . -type f | sort | tr '\\n' ' ')\"\n"
        "echo \"rows=$(cat \"$d/a.csv\" \"$d/sub/b.csv\" | wc -l)\"\n"
        "if touch \"$d/new\" 2>/dev/null; then echo writable; else echo read-only; fi\n"
        "if rm -f \"$d/a.csv\" 2>/dev/null && [ ! -e \"$d/a.csv\" ]; then echo removable; fi\n"
        "cp \"$d/big.bin\" \"$SM_MODEL_DIR/big.bin\"\n");
    r.mutable_algorithm_specification()->set_training_input_mode("FastFile");
    ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
    ASSERT_TRUE(WaitEnded(name));
    v1::DescribeTrainingJobResponse d = Describe(name);
    ASSERT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
    // coreutils names FUSE's magic number "fuseblk" (older ones "fuse").
    EXPECT_TRUE(recorder_.Has("fs=fuseblk") || recorder_.Has("fs=fuse")) << "the channel is not a FUSE mount; the log:\n"
                                          << absl::StrJoin(recorder_.lines, "\n");
    EXPECT_TRUE(recorder_.Has("files=./a.csv ./big.bin ./sub/b.csv "));
    EXPECT_TRUE(recorder_.Has("rows=5"));
    EXPECT_TRUE(recorder_.Has("read-only"));
    EXPECT_FALSE(recorder_.Has("writable"));
    EXPECT_FALSE(recorder_.Has("removable"));
    auto model = ModelOf(d);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_TRUE(model->files["big.bin"] == big) << "big.bin differs";
    // The job is over: its view is unmounted (in the background).
    EXPECT_TRUE(RunUntil([&] { return !FuseMountedBelowTmp(); }, absl::Seconds(20)))
        << "a FUSE mount is left below " << tmp_.path();
  }

  v1::CreateTrainingJobRequest Request(const std::string& name, const std::string& script) {
    WriteFile(tmp_.path() + "/image/train.sh", absl::StrCat("#!/bin/sh\nset -e\n", script));
    v1::CreateTrainingJobRequest r;
    r.set_training_job_name(name);
    r.set_role_arn("arn:aws:iam::000000000000:role/local-role");
    auto* spec = r.mutable_algorithm_specification();
    spec->set_training_image("file://" + tmp_.path() + "/image");
    spec->set_training_input_mode("File");
    spec->add_container_entrypoint("/bin/sh");
    spec->add_container_entrypoint("/opt/program/train.sh");
    r.mutable_output_data_config()->set_s3_output_path("s3://kiln-out/models");
    auto* rc = r.mutable_resource_config();
    rc->set_instance_type("ml.m5.large");
    rc->set_instance_count(1);
    rc->set_volume_size_in_gb(10);
    r.mutable_stopping_condition()->set_max_runtime_in_seconds(300);
    v1::Channel* ch = r.add_input_data_config();
    ch->set_channel_name("train");
    ch->mutable_data_source()->mutable_s3_data_source()->set_s3_data_type("S3Prefix");
    ch->mutable_data_source()->mutable_s3_data_source()->set_s3_uri("s3://kiln-train/");
    return r;
  }

  v1::DescribeTrainingJobResponse Describe(const std::string& name) {
    v1::DescribeTrainingJobRequest d;
    d.set_training_job_name(name);
    auto r = engine_->DescribeTrainingJob(d);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::DescribeTrainingJobResponse();
  }

  // Uploads tmp_/seed to s3://kiln-train/ with the aws CLI.
  void SeedTrainBucket() {
    std::string out;
    ASSERT_EQ(moto_.Aws(key_, {"s3", "cp", "--quiet", "--recursive", tmp_.path() + "/seed",
                               "s3://kiln-train/"},
                        &out),
              0)
        << out;
  }

  // The job's model, downloaded with the aws CLI (an independent client) and
  // unpacked.
  absl::StatusOr<local::internal::ArchiveContents> ModelOf(const v1::DescribeTrainingJobResponse& d) {
    std::string out;
    const std::string path = tmp_.path() + "/model.tar.gz";
    if (moto_.Aws(key_, {"s3", "cp", "--quiet", d.model_artifacts().s3_model_artifacts(), path},
                  &out) != 0) {
      return absl::InternalError("aws s3 cp of the model failed: " + out);
    }
    return local::internal::ReadArchive(path);
  }

  // Runs the loop until `done` or the timeout.
  bool RunUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (done()) return true;
      loop_->RunUntil(loop_->Now() + absl::Milliseconds(20));
    }
    return done();
  }
  bool WaitEnded(const std::string& name) {
    return RunUntil([&] {
      const std::string s = Describe(name).training_job_status();
      return s == "Completed" || s == "Failed" || s == "Stopped";
    });
  }

  static MotoServer* shared_moto_;
  static absl::Status* start_status_;
  MotoServer& moto_ = *shared_moto_;
  AwsCredentials key_;
  TempDir tmp_;
  Recorder recorder_;
  std::unique_ptr<ObjectStore> s3_;
  ObjectStores stores_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ClusterProvider> provider_;
  std::unique_ptr<DataChannel> channel_;
  std::unique_ptr<SpotInterruptionHandler> spot_;
  std::unique_ptr<Engine> engine_;
};

MotoServer* S3LocalEngineTest::shared_moto_ = nullptr;
absl::Status* S3LocalEngineTest::start_status_ = new absl::Status;

TEST_F(S3LocalEngineTest, SpotJobReadsS3ChannelsCheckpointsToS3AndUploadsItsModelToS3) {
  // The channel, seeded by the aws CLI: two small files and one that is
  // downloaded as parallel ranges.
  const std::string big = RandomBytes((11 << 20) + 7, 9);
  WriteFile(tmp_.path() + "/seed/a.csv", "1\n2\n3\n");
  WriteFile(tmp_.path() + "/seed/sub/b.csv", "4\n5\n");
  WriteFile(tmp_.path() + "/seed/big.bin", big);
  ASSERT_NO_FATAL_FAILURE(SeedTrainBucket());

  v1::CreateTrainingJobRequest r = Request(
      "s3-spot",
      "ck=\"$SAGEMAKER_BASE_DIR/checkpoints\"\n"
      "rows=$(cat \"$SM_CHANNEL_TRAIN/a.csv\" \"$SM_CHANNEL_TRAIN/sub/b.csv\" | wc -l)\n"
      "if [ -f \"$ck/state\" ]; then\n"
      "  echo \"resumed from $(cat \"$ck/state\")\"\n"
      "  echo \"rows=$rows resumed=$(cat \"$ck/state\")\" > \"$SM_MODEL_DIR/model.txt\"\n"
      "  cp \"$SM_CHANNEL_TRAIN/big.bin\" \"$SM_MODEL_DIR/weights.bin\"\n"
      "  exit 0\n"
      "fi\n"
      "echo epoch-1 > \"$ck/state.tmp\"\n"
      "mv \"$ck/state.tmp\" \"$ck/state\"\n"
      "echo checkpointed\n"
      "while true; do sleep 0.05; done\n");
  r.set_enable_managed_spot_training(true);
  r.mutable_stopping_condition()->set_max_wait_time_in_seconds(600);
  r.mutable_checkpoint_config()->set_s3_uri("s3://kiln-ckpt/");
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(RunUntil([&] { return recorder_.Has("checkpointed"); }));
  ASSERT_TRUE(engine_->InjectInterruption("s3-spot", "algo-1", InterruptionKind::kSpotNotice,
                                          absl::Seconds(2))
                  .ok());
  ASSERT_TRUE(WaitEnded("s3-spot"));
  v1::DescribeTrainingJobResponse d = Describe("s3-spot");
  ASSERT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
  std::vector<std::string> statuses;
  for (const auto& t : d.secondary_status_transitions()) statuses.push_back(t.status());
  EXPECT_THAT(statuses, Contains("Interrupted"));
  EXPECT_TRUE(recorder_.Has("resumed from epoch-1"));

  // The checkpoint, read with the aws CLI.
  std::string out;
  ASSERT_EQ(moto_.Aws(key_, {"s3", "cp", "--quiet", "s3://kiln-ckpt/state", tmp_.path() + "/ckpt-state"},
                      &out),
            0)
      << out;
  EXPECT_EQ(ReadFile(tmp_.path() + "/ckpt-state"), "epoch-1\n");

  // The model, read with the aws CLI and compared byte for byte.
  EXPECT_EQ(d.model_artifacts().s3_model_artifacts(),
            "s3://kiln-out/models/s3-spot/output/model.tar.gz");
  auto model = ModelOf(d);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->files["model.txt"], "rows=5 resumed=epoch-1\n");
  EXPECT_TRUE(model->files["weights.bin"] == big) << "weights.bin differs";
}

TEST_F(S3LocalEngineTest, FastFileChannelIsALazyReadOnlyFuseViewOfTheBucket) {
  RunFastFileJob("s3-fastfile");
}

TEST_F(S3LocalEngineTest, FastFileChannelUnderBwrapIsTheSameView) {
  if (!local::testing::BwrapWorks()) {
    GTEST_SKIP() << local::testing::kNoBwrap;
  }
  Build(local::LocalRuntime::kBwrap);
  RunFastFileJob("s3-fastfile-bwrap");
}

TEST_F(S3LocalEngineTest, PipeJobStreamsAnAugmentedManifestFromS3) {
  // Two objects and a manifest naming them, seeded with the aws CLI.
  WriteFile(tmp_.path() + "/seed/img/1.bin", "ONE");
  WriteFile(tmp_.path() + "/seed/img/2.bin", "TWO");
  WriteFile(tmp_.path() + "/seed/train.manifest",
            "{\"label\": \"b\", \"image-ref\": \"s3://kiln-train/img/2.bin\"}\n"
            "{\"image-ref\": \"s3://kiln-train/img/1.bin\", \"label\": 7, \"x\": 0}\n");
  ASSERT_NO_FATAL_FAILURE(SeedTrainBucket());
  v1::CreateTrainingJobRequest r = Request(
      "s3-augmented", "cat \"$SAGEMAKER_BASE_DIR/input/data/train_0\" > \"$SM_MODEL_DIR/stream\"\n");
  r.mutable_algorithm_specification()->set_training_input_mode("Pipe");
  auto* s3 = r.mutable_input_data_config(0)->mutable_data_source()->mutable_s3_data_source();
  s3->set_s3_data_type("AugmentedManifestFile");
  s3->set_s3_uri("s3://kiln-train/train.manifest");
  s3->add_attribute_names("image-ref");
  s3->add_attribute_names("label");
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  ASSERT_TRUE(WaitEnded("s3-augmented"));
  v1::DescribeTrainingJobResponse d = Describe("s3-augmented");
  ASSERT_EQ(d.training_job_status(), "Completed") << d.failure_reason();
  auto model = ModelOf(d);
  ASSERT_TRUE(model.ok()) << model.status();
  // The manifest's order, AttributeNames' order, no wrapping.
  EXPECT_EQ(model->files["stream"], "TWObONE7");
}

TEST_F(S3LocalEngineTest, AnEmptyS3PrefixOrAMissingManifestIsRefusedByCreateTrainingJob) {
  // Top-level keys and prefixes without '/' (see MotoServer::Reset).
  WriteFile(tmp_.path() + "/seed/present.csv", "1\n");
  ASSERT_NO_FATAL_FAILURE(SeedTrainBucket());
  v1::DescribeTrainingJobRequest d;
  d.set_training_job_name("s3-refused");
  // An empty prefix: no object starts with it.
  v1::CreateTrainingJobRequest r = Request("s3-refused", "echo never\n");
  auto* s3 = r.mutable_input_data_config(0)->mutable_data_source()->mutable_s3_data_source();
  s3->set_s3_uri("s3://kiln-train/nothing-here");
  absl::StatusOr<v1::CreateTrainingJobResponse> created = engine_->CreateTrainingJob(r);
  EXPECT_TRUE(absl::IsInvalidArgument(created.status())) << created.status();
  EXPECT_THAT(created.status().message(), HasSubstr("channel 'train'"));
  EXPECT_THAT(created.status().message(),
              HasSubstr("No S3 objects found under S3 URL \"s3://kiln-train/nothing-here\""));
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status())) << "a job was kept";
  // A manifest that does not exist, though objects start with its name.
  s3->set_s3_data_type("ManifestFile");
  s3->set_s3_uri("s3://kiln-train/pres");
  created = engine_->CreateTrainingJob(r);
  EXPECT_TRUE(absl::IsInvalidArgument(created.status())) << created.status();
  EXPECT_THAT(created.status().message(),
              HasSubstr("the ManifestFile 's3://kiln-train/pres' does not exist"));
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status())) << "a job was kept";
  // A bucket the store cannot list keeps the store's error, naming the channel.
  s3->set_s3_data_type("S3Prefix");
  s3->set_s3_uri("s3://kiln-no-such-bucket/train/");
  created = engine_->CreateTrainingJob(r);
  EXPECT_FALSE(created.ok());
  EXPECT_THAT(created.status().message(), HasSubstr("channel 'train'"));
  EXPECT_TRUE(absl::IsNotFound(engine_->DescribeTrainingJob(d).status())) << "a job was kept";
  // A prefix with an object is accepted.
  s3->set_s3_uri("s3://kiln-train/pres");
  created = engine_->CreateTrainingJob(r);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(WaitEnded("s3-refused"));
}

TEST_F(S3LocalEngineTest, ObjectsDeletedAfterCreateTrainingJobFailTheDownloadNamingTheChannel) {
  WriteFile(tmp_.path() + "/seed/a.csv", "1\n");
  ASSERT_NO_FATAL_FAILURE(SeedTrainBucket());
  v1::CreateTrainingJobRequest r = Request("s3-vanished", "echo never\n");
  ASSERT_TRUE(engine_->CreateTrainingJob(r).ok());
  // Accepted; the loop has not run yet, so nothing was downloaded. The
  // objects go before the download starts.
  std::string out;
  ASSERT_EQ(moto_.Aws(key_, {"s3", "rm", "--quiet", "--recursive", "s3://kiln-train/"}, &out), 0)
      << out;
  ASSERT_TRUE(WaitEnded("s3-vanished"));
  v1::DescribeTrainingJobResponse d = Describe("s3-vanished");
  EXPECT_EQ(d.training_job_status(), "Failed");
  EXPECT_THAT(d.failure_reason(), HasSubstr("channel 'train'"));
  EXPECT_FALSE(recorder_.Has("never"));
}

}  // namespace
}  // namespace kiln::aws
