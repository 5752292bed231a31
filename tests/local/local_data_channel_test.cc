// LocalDataChannel on a real-time loop, with file:// sources, against
// instance trees laid out as the local provider lays them out.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "local/internal/fs.h"
#include "local/local_test_util.h"

namespace kiln::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ListDir;
using testing::ReadFile;
using testing::RunUntil;
using testing::TempDir;
using testing::WriteFile;

class LocalDataChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    state_dir_ = tmp_.path() + "/state";
    src_ = tmp_.path() + "/src";
    loop_ = NewRealTimeEventLoop();
    file_store_ = NewFileObjectStore();
    stores_.Register("file", file_store_.get());
    channel_ = NewLocalDataChannel(*loop_, stores_, {.state_dir = state_dir_, .copy_threads = 3});
    for (int i = 1; i <= 3; ++i) {
      Instance inst;
      inst.host_name = absl::StrCat("algo-", i);
      inst.id = absl::StrCat("c1/", inst.host_name);
      inst.group_name = kHomogeneousGroupName;
      inst.instance_type = "ml.m5.large";
      ASSERT_TRUE(internal::MakeDirs(DataDir(inst.id)).ok());
      cluster_.instances.push_back(inst);
    }
    cluster_.id = "c1";
    request_.set_training_job_name("data-job");
  }

  std::string DataDir(const std::string& id) const {
    return absl::StrCat(state_dir_, "/instances/", id, "/ml/input/data");
  }

  v1::Channel Channel(const std::string& name, const std::string& type, const std::string& uri,
                      const std::string& distribution = "") {
    v1::Channel c;
    c.set_channel_name(name);
    auto* s3 = c.mutable_data_source()->mutable_s3_data_source();
    s3->set_s3_data_type(type);
    s3->set_s3_uri(uri);
    if (!distribution.empty()) s3->set_s3_data_distribution_type(distribution);
    return c;
  }

  absl::Status Deliver(const v1::Channel& channel, std::string_view mode = "File") {
    JobContext job{"data-job", "arn:aws:sagemaker:us-east-1:000000000000:training-job/data-job",
                   request_, cluster_, 1};
    std::vector<const Instance*> receivers;
    for (const Instance& i : cluster_.instances) receivers.push_back(&i);
    std::optional<absl::Status> result;
    channel_->Deliver(ChannelDelivery{job, channel, mode, receivers},
                      [&](absl::Status s) { result = s; });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("Deliver did not complete");
    }
    return *result;
  }

  TempDir tmp_;
  std::string state_dir_;
  std::string src_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ObjectStore> file_store_;
  ObjectStores stores_;
  std::unique_ptr<DataChannel> channel_;
  Cluster cluster_;
  v1::CreateTrainingJobRequest request_;
};

TEST_F(LocalDataChannelTest, PrefixIsCopiedToEveryInstance) {
  WriteFile(src_ + "/train/a.csv", "a");
  WriteFile(src_ + "/train/deep/er/b.csv", "b");
  WriteFile(src_ + "/trainer-not-this/x", "x");
  ASSERT_TRUE(Deliver(Channel("train", "S3Prefix", "file://" + src_ + "/train/")).ok());
  for (const Instance& i : cluster_.instances) {
    EXPECT_EQ(ReadFile(DataDir(i.id) + "/train/a.csv"), "a");
    EXPECT_EQ(ReadFile(DataDir(i.id) + "/train/deep/er/b.csv"), "b");
    EXPECT_THAT(ListDir(DataDir(i.id) + "/train"), ElementsAre("a.csv", "deep"));
  }
}

TEST_F(LocalDataChannelTest, PartialPrefixKeepsPathsBelowItsDirectory) {
  WriteFile(src_ + "/data/train-1/a", "1");
  WriteFile(src_ + "/data/train-2/b", "2");
  WriteFile(src_ + "/data/test/c", "3");
  ASSERT_TRUE(Deliver(Channel("ch", "S3Prefix", "file://" + src_ + "/data/train")).ok());
  EXPECT_THAT(ListDir(DataDir("c1/algo-1") + "/ch"), ElementsAre("train-1", "train-2"));
}

TEST_F(LocalDataChannelTest, ShardedByS3KeyGivesDisjointDeterministicShares) {
  for (int i = 0; i < 7; ++i) WriteFile(absl::StrCat(src_, "/s/part-", i), "x");
  ASSERT_TRUE(
      Deliver(Channel("s", "S3Prefix", "file://" + src_ + "/s/", "ShardedByS3Key")).ok());
  EXPECT_THAT(ListDir(DataDir("c1/algo-1") + "/s"), ElementsAre("part-0", "part-3", "part-6"));
  EXPECT_THAT(ListDir(DataDir("c1/algo-2") + "/s"), ElementsAre("part-1", "part-4"));
  EXPECT_THAT(ListDir(DataDir("c1/algo-3") + "/s"), ElementsAre("part-2", "part-5"));
}

TEST_F(LocalDataChannelTest, ManifestListsKeysBelowItsPrefix) {
  WriteFile(src_ + "/m/x/one", "1");
  WriteFile(src_ + "/m/y/two", "2");
  WriteFile(src_ + "/m/z/not-listed", "3");
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"x/one\", \"y/two\"]"));
  ASSERT_TRUE(Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json")).ok());
  EXPECT_THAT(ListDir(DataDir("c1/algo-2") + "/m"), ElementsAre("x", "y"));
  EXPECT_EQ(ReadFile(DataDir("c1/algo-2") + "/m/y/two"), "2");
}

TEST_F(LocalDataChannelTest, KeyWithDotDotIsRefusedAndNothingEscapes) {
  WriteFile(src_ + "/m/ok", "1");
  WriteFile(src_ + "/escape", "evil");
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"ok\", \"../escape\"]"));
  absl::Status s = Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json"));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 'm'"));
  EXPECT_THAT(s.message(), HasSubstr("../escape"));
  EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/escape"));
  EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/m/ok")) << "copied before refusing";
}

TEST_F(LocalDataChannelTest, AbsoluteKeyIsRefused) {
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"/etc/passwd\"]"));
  absl::Status s = Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json"));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

TEST_F(LocalDataChannelTest, ChannelNamedDotDotIsRefused) {
  WriteFile(src_ + "/d/a", "1");
  absl::Status s = Deliver(Channel("..", "S3Prefix", "file://" + src_ + "/d/"));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_FALSE(internal::Exists(absl::StrCat(state_dir_, "/instances/c1/algo-1/ml/input/a")));
}

TEST_F(LocalDataChannelTest, ObjectThatDisappearsFailsNamingChannelAndObject) {
  // Listed in the manifest, gone when copied.
  WriteFile(src_ + "/m/here", "1");
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"here\", \"gone\"]"));
  absl::Status s = Deliver(Channel("vanish", "ManifestFile", "file://" + src_ + "/manifest.json"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 'vanish'"));
  EXPECT_THAT(s.message(), HasSubstr(src_ + "/m/gone"));
}

TEST_F(LocalDataChannelTest, EmptyPrefixIsNotFound) {
  ASSERT_TRUE(internal::MakeDirs(src_ + "/empty").ok());
  absl::Status s = Deliver(Channel("e", "S3Prefix", "file://" + src_ + "/empty/"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("no objects found"));
}

TEST_F(LocalDataChannelTest, PipeAndFastFileAreUnimplemented) {
  WriteFile(src_ + "/d/a", "1");
  for (const char* mode : {"Pipe", "FastFile"}) {
    absl::Status s = Deliver(Channel("p", "S3Prefix", "file://" + src_ + "/d/"), mode);
    EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(mode));
  }
}

TEST_F(LocalDataChannelTest, UnknownSchemeFailsNamingTheChannel) {
  absl::Status s = Deliver(Channel("s3", "S3Prefix", "s3://bucket/prefix/"));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("channel 's3'"));
}

}  // namespace
}  // namespace kiln::local
