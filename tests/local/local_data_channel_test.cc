// LocalDataChannel on a real-time loop, with file:// sources, against
// instance trees laid out as the local provider lays them out.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "local/internal/fs.h"
#include "local/internal/pipe_stream.h"
#include "local/local_test_util.h"

namespace kiln::local {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::CountingStore;
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
    channel_->SetListener(&listener_);
    for (int i = 1; i <= 3; ++i) {
      Instance inst;
      inst.host_name = absl::StrCat("algo-", i);
      inst.id = absl::StrCat("c1/", inst.host_name);
      inst.group_name = kHomogeneousGroupName;
      inst.instance_type = "ml.m5.large";
      ASSERT_TRUE(MakeDirs(DataDir(inst.id)).ok());
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
    std::vector<const Instance*> receivers;
    for (const Instance& i : cluster_.instances) receivers.push_back(&i);
    return DeliverTo(channel, mode, std::move(receivers));
  }

  // Deliver to some of the instances only (a channel's InstanceGroupNames).
  absl::Status DeliverTo(const v1::Channel& channel, std::string_view mode,
                         std::vector<const Instance*> receivers) {
    JobContext job{"data-job", "arn:aws:sagemaker:us-east-1:000000000000:training-job/data-job",
                   request_, cluster_, 1};
    std::optional<absl::Status> result;
    channel_->Deliver(ChannelDelivery{job, channel, mode, receivers},
                      [&](absl::Status s) { result = s; });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("Deliver did not complete");
    }
    return *result;
  }

  // Runs `commands` in the source directory (they write gz/'s objects from
  // raw/), then delivers gz/ as the Gzip-compressed Pipe channel "z".
  void DeliverGzipPipe(const std::string& commands) {
    ASSERT_TRUE(MakeDirs(src_ + "/gz").ok());
    ASSERT_EQ(std::system(absl::StrCat("cd ", src_, " && ", commands).c_str()), 0) << commands;
    v1::Channel c = Channel("z", "S3Prefix", "file://" + src_ + "/gz/");
    c.set_compression_type("Gzip");
    ASSERT_TRUE(Deliver(c, "Pipe").ok());
  }

  std::string Fifo(const std::string& host, const std::string& channel, int epoch) const {
    return absl::StrCat(DataDir(absl::StrCat("c1/", host)), "/", channel, "_", epoch);
  }

  struct Listener : DataChannelListener {
    void OnChannelFailed(std::string_view job, int32_t attempt, absl::Status status) override {
      failures.push_back(absl::StrCat(internal::Av(job), "#", attempt, ": ", status.message()));
    }
    std::vector<std::string> failures;
  };

  TempDir tmp_;
  Listener listener_;
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

// A link planted in a file:// source folder that leads out of it (here to a
// file standing for /etc/shadow) brings nothing into the job, in any mode
// that reads the objects.
TEST_F(LocalDataChannelTest, ALinkOutOfTheSourceFolderIsNotFollowedInFileOrPipeMode) {
  WriteFile(tmp_.path() + "/shadow", "root:secret");
  WriteFile(src_ + "/train/a.csv", "a");
  ASSERT_EQ(symlink((tmp_.path() + "/shadow").c_str(), (src_ + "/train/shadow-link").c_str()), 0);
  for (std::string_view mode : {"File", "Pipe"}) {
    SCOPED_TRACE(mode);
    absl::Status s = Deliver(Channel("train", "S3Prefix", "file://" + src_ + "/train/"), mode);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("channel 'train'"));
    EXPECT_THAT(s.message(), HasSubstr(src_ + "/train/shadow-link"));
    EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/train/shadow-link"));
    EXPECT_FALSE(internal::Exists(Fifo("algo-1", "train", 0)));
  }
  channel_->EndJob("data-job");
}

TEST_F(LocalDataChannelTest, AManifestKeyThatIsALinkOutOfThePrefixFolderIsRefused) {
  WriteFile(tmp_.path() + "/shadow", "root:secret");
  WriteFile(src_ + "/m/ok", "1");
  ASSERT_EQ(symlink((tmp_.path() + "/shadow").c_str(), (src_ + "/m/shadow-link").c_str()), 0);
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"ok\", \"shadow-link\"]"));
  absl::Status s = Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json"));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("shadow-link"));
  EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/m/shadow-link"));
  EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/m/ok")) << "copied before refusing";
}

// A manifest over kMaxManifestBytes (a sparse file here) is refused without
// being read whole, in File and Pipe mode alike.
TEST_F(LocalDataChannelTest, AManifestOverTheLimitIsRefused) {
  const std::string manifest = src_ + "/huge-manifest.json";
  WriteFile(manifest, "[");
  ASSERT_EQ(truncate(manifest.c_str(), kMaxManifestBytes + 1), 0);
  for (std::string_view mode : {"File", "Pipe"}) {
    SCOPED_TRACE(mode);
    absl::Status s = Deliver(Channel("m", "ManifestFile", "file://" + manifest), mode);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("a manifest may hold at most 256 MiB"));
  }
}

// With the file store confined to a root, a source outside it (standing for
// file:///etc/shadow) is refused in every mode and by CheckChannel, and a
// link inside the root leads nowhere outside it.
TEST_F(LocalDataChannelTest, AConfinedFileStoreRefusesSourcesOutsideItsRoots) {
  const std::string root = tmp_.path() + "/root";
  ASSERT_TRUE(MakeDirs(root).ok());
  WriteFile(src_ + "/secret/shadow", "root:secret");
  absl::StatusOr<std::unique_ptr<ObjectStore>> confined =
      NewFileObjectStore(FileObjectStoreOptions{{root}});
  ASSERT_TRUE(confined.ok()) << confined.status();
  stores_.Register("file", confined->get());
  const std::string outside = "file://" + src_ + "/secret/";
  for (std::string_view mode : {"File", "FastFile", "Pipe"}) {
    SCOPED_TRACE(mode);
    absl::Status s = Deliver(Channel("s", "S3Prefix", outside), mode);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(root));
    EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/s"));
    s = channel_->CheckChannel(Channel("s", "S3Prefix", outside), mode);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  }
  absl::Status s = Deliver(Channel("s", "S3Prefix", "file://" + src_ + "/secret/shadow"));
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  // Inside the root, through a link leading out: refused too.
  ASSERT_EQ(symlink((src_ + "/secret").c_str(), (root + "/linked").c_str()), 0);
  for (std::string_view mode : {"File", "FastFile", "Pipe"}) {
    SCOPED_TRACE(mode);
    s = Deliver(Channel("l", "S3Prefix", "file://" + root + "/linked/"), mode);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/l"));
  }
  // What lies inside is delivered as before.
  WriteFile(root + "/train/a.csv", "a");
  EXPECT_TRUE(Deliver(Channel("train", "S3Prefix", "file://" + root + "/train/")).ok());
  EXPECT_EQ(ReadFile(DataDir("c1/algo-1") + "/train/a.csv"), "a");
  EXPECT_TRUE(Deliver(Channel("ff", "S3Prefix", "file://" + root + "/train/"), "FastFile").ok());
  EXPECT_EQ(ReadFile(DataDir("c1/algo-1") + "/ff/a.csv"), "a");
  channel_->EndJob("data-job");
  stores_.Register("file", file_store_.get());
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

// A DataChannel can be used without the engine's validation, so a channel's
// name, its input mode and its S3DataType can hold anything: the messages
// show them escaped and cut, as they show URIs and keys, so that none can add
// a line to a log or make the message long.
TEST_F(LocalDataChannelTest, ChannelNamesAndModesInErrorsAreShownEscapedAndCut) {
  WriteFile(src_ + "/d/a", "1");
  const std::string uri = "file://" + src_ + "/d/";
  const std::string odd = "a\nb'c\"d\xff" "e";
  const std::string shown = R"(a\nb'c"d\xFFe)";
  absl::Status s = Deliver(Channel("../" + odd, "S3Prefix", uri));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("channel '../", shown,
                                      "': the name would land outside /opt/ml/input/data"));
  s = Deliver(Channel("train", "S3Prefix", uri), odd);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("channel 'train': input mode '", shown,
                                      "' is not File, FastFile or Pipe"));
  s = Deliver(Channel(odd, odd, uri));
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("channel '", shown, "': S3DataType ", shown,
                                      " is not supported by the local backend yet"));
  s = channel_->CheckChannel(Channel(odd, "S3Prefix", "file://" + src_ + "/empty/"), "File");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("(channel '", shown, "')")));

  // A name of 300 bytes shows its first 200.
  const std::string long_name = std::string(300, 'n');
  s = Deliver(Channel("../" + long_name, "S3Prefix", uri));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("channel '../", long_name.substr(0, 197),
                                      "...': the name would land outside /opt/ml/input/data"));
}

TEST_F(LocalDataChannelTest, KeyWithAnEmptySegmentIsRefusedNamingTheKeyAndTheRule) {
  WriteFile(src_ + "/m/x/one", "1");
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"x/one\", \"x//one\"]"));
  const absl::Status s =
      Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json"));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat("channel 'm': object 'file://", src_, "/m/x//one' has the key 'x//one', "
                         "which is not a path below /opt/ml/input/data/m: it has an empty "
                         "segment ('//') (a key must be a relative path of segments that are "
                         "not empty, '.' or '..')"));
  EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/m/x/one")) << "copied before refusing";
}

// The job's request lists `channels` (name, InputMode or "" for the default).
void SetChannels(v1::CreateTrainingJobRequest& request, std::string_view default_mode,
                 const std::vector<std::pair<std::string, std::string>>& channels) {
  request.mutable_algorithm_specification()->set_training_input_mode(std::string(default_mode));
  request.clear_input_data_config();
  for (const auto& [name, mode] : channels) {
    v1::Channel* c = request.add_input_data_config();
    c->set_channel_name(name);
    if (!mode.empty()) c->set_input_mode(mode);
  }
}

TEST_F(LocalDataChannelTest, AFileChannelNamedAsAPipeChannelsFifoFailsNamingBoth) {
  WriteFile(src_ + "/d/x", "x");
  SetChannels(request_, "File", {{"a_1", ""}, {"a", "Pipe"}});
  const std::string expected =
      "channels 'a_1' (File mode) and 'a' (Pipe mode) collide in /opt/ml/input/data: 'a_1' is "
      "both the directory of channel 'a_1' and the FIFO of channel 'a' for epoch 1 (Pipe mode "
      "names its FIFOs <channel>_<epoch>); rename one of the channels";
  // Whichever is delivered first fails, before anything is made.
  const absl::Status pipe = Deliver(Channel("a", "S3Prefix", "file://" + src_ + "/d/"), "Pipe");
  EXPECT_TRUE(absl::IsInvalidArgument(pipe)) << pipe;
  EXPECT_EQ(pipe.message(), expected);
  EXPECT_FALSE(internal::Exists(Fifo("algo-1", "a", 0)));
  const absl::Status file = Deliver(Channel("a_1", "S3Prefix", "file://" + src_ + "/d/"));
  EXPECT_TRUE(absl::IsInvalidArgument(file)) << file;
  EXPECT_EQ(file.message(), expected);
  EXPECT_FALSE(internal::Exists(DataDir("c1/algo-1") + "/a_1"));
}

TEST_F(LocalDataChannelTest, AFastFileChannelCollidesWithThePipeChannelsFirstFifo) {
  WriteFile(src_ + "/d/x", "x");
  SetChannels(request_, "Pipe", {{"a", ""}, {"a_0", "FastFile"}});
  const absl::Status s =
      Deliver(Channel("a_0", "S3Prefix", "file://" + src_ + "/d/"), "FastFile");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channels 'a_0' (FastFile mode) and 'a' (Pipe mode)"));
  EXPECT_THAT(s.message(), HasSubstr("for epoch 0"));
}

TEST_F(LocalDataChannelTest, ChannelsWhoseNamesCannotMeetAreDelivered) {
  WriteFile(src_ + "/d/x", "x");
  // "a_1" as a Pipe channel makes a_1_<e>, never a_<e>; an epoch is written
  // without leading zero and is below 2^64.
  const std::vector<std::string> files = {"a_01", "a_x", "a_", "a_18446744073709551616"};
  std::vector<std::pair<std::string, std::string>> channels = {{"a", "Pipe"}, {"a_1", "Pipe"}};
  for (const std::string& f : files) channels.push_back({f, "File"});
  SetChannels(request_, "File", channels);
  for (const char* pipe : {"a", "a_1"}) {
    const absl::Status s = Deliver(Channel(pipe, "S3Prefix", "file://" + src_ + "/d/"), "Pipe");
    EXPECT_TRUE(s.ok()) << pipe << ": " << s;
  }
  for (const std::string& f : files) {
    const absl::Status s = Deliver(Channel(f, "S3Prefix", "file://" + src_ + "/d/"));
    EXPECT_TRUE(s.ok()) << f << ": " << s;
  }
  channel_->EndJob("data-job");
}

TEST_F(LocalDataChannelTest, ChannelsOfDisjointInstanceGroupsNeverCollide) {
  WriteFile(src_ + "/d/x", "x");
  cluster_.instances[0].group_name = "g1";
  cluster_.instances[1].group_name = "g2";
  cluster_.instances[2].group_name = "g2";
  SetChannels(request_, "File", {{"a_1", ""}, {"a", "Pipe"}});
  auto groups = [&](int channel, std::vector<std::string> names) {
    auto* s3 = request_.mutable_input_data_config(channel)
                   ->mutable_data_source()
                   ->mutable_s3_data_source();
    s3->clear_instance_group_names();
    for (const std::string& n : names) s3->add_instance_group_names(n);
  };
  groups(0, {"g1"});
  groups(1, {"g2"});
  v1::Channel file = Channel("a_1", "S3Prefix", "file://" + src_ + "/d/");
  const absl::Status s = DeliverTo(file, "File", {&cluster_.instances[0]});
  EXPECT_TRUE(s.ok()) << s;
  // Once the Pipe channel reaches g1 too, the two meet on algo-1.
  groups(1, {"g2", "g1"});
  EXPECT_TRUE(absl::IsInvalidArgument(DeliverTo(file, "File", {&cluster_.instances[0]})));
}

TEST_F(LocalDataChannelTest, ObjectMissingFromAManifestFailsNamingChannelAndObject) {
  // Named by the manifest, never there.
  WriteFile(src_ + "/m/here", "1");
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"here\", \"gone\"]"));
  absl::Status s = Deliver(Channel("vanish", "ManifestFile", "file://" + src_ + "/manifest.json"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 'vanish'"));
  EXPECT_THAT(s.message(), HasSubstr(src_ + "/m/gone' named by the manifest: "));
  // It never was there: not "disappeared", which a listed object does.
  EXPECT_THAT(s.message(), Not(HasSubstr("disappeared")));
}

TEST_F(LocalDataChannelTest, EmptyPrefixIsNotFound) {
  ASSERT_TRUE(MakeDirs(src_ + "/empty").ok());
  absl::Status s = Deliver(Channel("e", "S3Prefix", "file://" + src_ + "/empty/"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("No S3 objects found under S3 URL"));
  EXPECT_THAT(s.message(), HasSubstr("channel 'e'"));
}

TEST_F(LocalDataChannelTest, UnknownSchemeFailsNamingTheChannel) {
  absl::Status s = Deliver(Channel("s3", "S3Prefix", "s3://bucket/prefix/"));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("channel 's3'"));
}


// ---------------------------------------------------------------------------
// FastFile

TEST_F(LocalDataChannelTest, FastFileIsAViewOfTheSourceNotACopy) {
  WriteFile(src_ + "/ff/a.csv", "a");
  WriteFile(src_ + "/ff/deep/b.csv", "b");
  ASSERT_TRUE(Deliver(Channel("ff", "S3Prefix", "file://" + src_ + "/ff/"), "FastFile").ok());
  for (const Instance& i : cluster_.instances) {
    EXPECT_EQ(ReadFile(DataDir(i.id) + "/ff/a.csv"), "a");
    EXPECT_EQ(ReadFile(DataDir(i.id) + "/ff/deep/b.csv"), "b");
  }
  // Read when read: a change to the source shows through at once.
  WriteFile(src_ + "/ff/later.csv", "later");
  EXPECT_EQ(ReadFile(DataDir("c1/algo-2") + "/ff/later.csv"), "later");
  struct stat st;
  ASSERT_EQ(lstat((DataDir("c1/algo-1") + "/ff").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

TEST_F(LocalDataChannelTest, FastFileOfAnEmptyFolderIsNotFound) {
  ASSERT_TRUE(MakeDirs(src_ + "/empty/sub").ok());
  absl::Status s = Deliver(Channel("e", "S3Prefix", "file://" + src_ + "/empty/"), "FastFile");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("No S3 objects found"));
}

TEST_F(LocalDataChannelTest, FastFileRefusesManifestsAndSharding) {
  WriteFile(src_ + "/d/a", "1");
  WriteFile(src_ + "/manifest.json", absl::StrCat("[{\"prefix\": \"file://", src_, "/d/\"}, \"a\"]"));
  absl::Status s = Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json"), "FastFile");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  s = Deliver(Channel("d", "S3Prefix", "file://" + src_ + "/d/", "ShardedByS3Key"), "FastFile");
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
}

TEST_F(LocalDataChannelTest, FastFileOverAnUnregisteredSchemeFailsNamingTheChannel) {
  absl::Status s = Deliver(Channel("s3", "S3Prefix", "s3://bucket/prefix/"), "FastFile");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 's3'"));
}


bool MountedBelow(const std::string& dir) {
  return ReadFile("/proc/self/mountinfo").find(dir + "/") != std::string::npos;
}

// These mount FUSE file systems: they need /dev/fuse and root, and fail
// (saying so in the status) without them.
TEST_F(LocalDataChannelTest, FastFileOverARemoteStoreIsAFuseViewReadWhenRead) {
  CountingStore remote;
  stores_.Register("mem", &remote);
  ASSERT_TRUE(remote.Put("mem://bucket/ds/a.csv", "a").ok());
  ASSERT_TRUE(remote.Put("mem://bucket/ds/deep/b.csv", "bb").ok());
  ASSERT_TRUE(remote.Put("mem://bucket/dsx/not-this", "x").ok());
  absl::Status s = Deliver(Channel("ff", "S3Prefix", "mem://bucket/ds/"), "FastFile");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(remote.reads(), 0);  // Deliver lists; it reads nothing
  EXPECT_TRUE(MountedBelow(state_dir_ + "/fastfile"));
  for (const Instance& i : cluster_.instances) {
    struct stat st;
    ASSERT_EQ(lstat((DataDir(i.id) + "/ff").c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_THAT(ListDir(DataDir(i.id) + "/ff"), ElementsAre("a.csv", "deep"));
    EXPECT_EQ(ReadFile(DataDir(i.id) + "/ff/a.csv"), "a");
    EXPECT_EQ(ReadFile(DataDir(i.id) + "/ff/deep/b.csv"), "bb");
  }
  // One view for the three instances: each object read once.
  EXPECT_EQ(remote.reads(), 2);
  EXPECT_EQ(open((DataDir("c1/algo-1") + "/ff/new").c_str(), O_WRONLY | O_CREAT, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  // EndJob unmounts (in the background) and removes the mount point.
  channel_->EndJob("data-job");
  EXPECT_TRUE(RunUntil(*loop_, [&] { return !MountedBelow(state_dir_ + "/fastfile"); }));
  EXPECT_TRUE(RunUntil(*loop_, [&] { return ListDir(state_dir_ + "/fastfile").empty(); }));
  channel_.reset();
  stores_.Register("mem", nullptr);
}

TEST_F(LocalDataChannelTest, FastFileViewsAreUnmountedWhenTheChannelGoes) {
  CountingStore remote;
  stores_.Register("mem", &remote);
  ASSERT_TRUE(remote.Put("mem://bucket/ds/a.csv", "a").ok());
  absl::Status s = Deliver(Channel("ff", "S3Prefix", "mem://bucket/ds/"), "FastFile");
  ASSERT_TRUE(s.ok()) << s;
  // A file still open does not keep the mount.
  int fd = open((DataDir("c1/algo-1") + "/ff/a.csv").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  channel_.reset();
  EXPECT_FALSE(MountedBelow(state_dir_ + "/fastfile"));
  close(fd);
  stores_.Register("mem", nullptr);
}

TEST_F(LocalDataChannelTest, FastFileOverAnEmptyRemotePrefixIsNotFound) {
  CountingStore remote;
  stores_.Register("mem", &remote);
  absl::Status s = Deliver(Channel("ff", "S3Prefix", "mem://bucket/none/"), "FastFile");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("No S3 objects found"));
  EXPECT_FALSE(MountedBelow(state_dir_ + "/fastfile"));
  channel_.reset();
  stores_.Register("mem", nullptr);
}

// ---------------------------------------------------------------------------
// CheckChannel (CreateTrainingJob's synchronous check)

TEST_F(LocalDataChannelTest, CheckChannelRejectsAnEmptyFilePrefix) {
  ASSERT_TRUE(MakeDirs(src_ + "/empty/deeper").ok());
  WriteFile(src_ + "/full/x/y", "1");
  absl::Status s = channel_->CheckChannel(Channel("e", "S3Prefix", "file://" + src_ + "/empty/"), "File");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("No S3 objects found under S3 URL \"file://", src_,
                                                  "/empty/\" given in input data source")));
  s = channel_->CheckChannel(Channel("n", "S3Prefix", "file://" + src_ + "/nowhere/"), "Pipe");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(channel_->CheckChannel(Channel("f", "S3Prefix", "file://" + src_ + "/full/"), "File").ok());
  // A partial name: "fu" matches "full/...".
  EXPECT_TRUE(channel_->CheckChannel(Channel("f", "S3Prefix", "file://" + src_ + "/fu"), "File").ok());
  // A scheme no store serves is refused too, naming the channel and scheme.
  s = channel_->CheckChannel(Channel("s", "S3Prefix", "s3://b/p/"), "File");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 's'"));
  EXPECT_THAT(s.message(), HasSubstr("s3"));
}

TEST_F(LocalDataChannelTest, CheckChannelLooksIntoAnyStoreAndChecksManifestsExist) {
  std::unique_ptr<ObjectStore> mem = NewInMemoryObjectStore();
  stores_.Register("mem", mem.get());
  ASSERT_TRUE(mem->Put("mem://b/data/part-0", "x").ok());
  ASSERT_TRUE(mem->Put("mem://b/train.manifest", "[]").ok());
  WriteFile(src_ + "/local.manifest", "[]");
  EXPECT_TRUE(channel_->CheckChannel(Channel("d", "S3Prefix", "mem://b/data/"), "File").ok());
  EXPECT_TRUE(channel_->CheckChannel(Channel("d", "S3Prefix", "mem://b/da"), "Pipe").ok());
  absl::Status s = channel_->CheckChannel(Channel("e", "S3Prefix", "mem://b/empty/"), "File");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("No S3 objects found under S3 URL \"mem://b/empty/\""));
  EXPECT_THAT(s.message(), HasSubstr("channel 'e'"));
  // Manifests: the object itself must exist, in any store.
  EXPECT_TRUE(channel_->CheckChannel(Channel("m", "ManifestFile", "mem://b/train.manifest"), "File").ok());
  EXPECT_TRUE(
      channel_->CheckChannel(Channel("m", "ManifestFile", "file://" + src_ + "/local.manifest"), "File").ok());
  for (const std::string& uri : {std::string("mem://b/train"), std::string("mem://b/none.manifest"),
                                "file://" + src_ + "/local"}) {
    s = channel_->CheckChannel(Channel("m", "ManifestFile", uri), "File");
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << uri << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("the ManifestFile '", uri, "' does not exist")));
  }
  s = channel_->CheckChannel(Channel("a", "AugmentedManifestFile", "mem://b/none"), "Pipe");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  stores_.Register("mem", nullptr);
}

// S3 can hold objects "a" and "a/b"; a directory cannot hold both. File
// mode finds it before copying anything, naming both objects, instead of
// failing halfway with a file-system error. An instance whose share holds
// only one of them is not refused for the other's.
TEST_F(LocalDataChannelTest, FileModeRefusesAKeyThatIsAlsoAFolderBeforeCopying) {
  std::unique_ptr<ObjectStore> mem = NewInMemoryObjectStore();
  stores_.Register("mem", mem.get());
  for (const char* key : {"a", "a.txt", "a/b", "z"}) {
    ASSERT_TRUE(mem->Put(absl::StrCat("mem://b/data/", key), key).ok());
  }
  absl::Status s = Deliver(Channel("clash", "S3Prefix", "mem://b/data/"), "File");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 'clash'"));
  EXPECT_THAT(s.message(), HasSubstr("'mem://b/data/a'"));
  EXPECT_THAT(s.message(), HasSubstr("'mem://b/data/a/b'"));
  for (const Instance& i : cluster_.instances) {
    EXPECT_THAT(ListDir(DataDir(i.id) + "/clash"), ::testing::IsEmpty()) << i.id;
  }
  // Sharded over two instances, "a" and "a/b" may go to different ones.
  ASSERT_TRUE(mem->Delete("mem://b/data/a.txt").ok());
  ASSERT_TRUE(mem->Delete("mem://b/data/z").ok());
  std::vector<const Instance*> two = {&cluster_.instances[0], &cluster_.instances[1]};
  s = DeliverTo(Channel("shard", "S3Prefix", "mem://b/data/", "ShardedByS3Key"), "File", two);
  EXPECT_TRUE(s.ok()) << s;
  stores_.Register("mem", nullptr);
}

// ---------------------------------------------------------------------------
// Pipe

// Reads the FIFO at `path` to end of file once it exists (or "" after
// `timeout`).
std::string ReadFifo(const std::string& path, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!internal::Exists(path)) {
    if (absl::Now() > deadline) return "<no " + path + ">";
    absl::SleepFor(absl::Milliseconds(1));
  }
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<open failed>";
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

int OpenFdCount() { return static_cast<int>(ListDir("/proc/self/fd").size()); }

TEST_F(LocalDataChannelTest, PipeStreamsObjectsInOrderEpochAfterEpoch) {
  const std::string big(3 << 20, 'z');  // larger than the pipe: backpressure
  WriteFile(src_ + "/p/a", "first;");
  WriteFile(src_ + "/p/b/c", big);
  WriteFile(src_ + "/p/d", "last");
  ASSERT_TRUE(Deliver(Channel("train", "S3Prefix", "file://" + src_ + "/p/"), "Pipe").ok());
  EXPECT_TRUE(internal::Exists(Fifo("algo-1", "train", 0)));
  EXPECT_FALSE(internal::Exists(Fifo("algo-1", "train", 1)));
  const std::string expected = "first;" + big + "last";
  for (int epoch = 0; epoch < 3; ++epoch) {
    const std::string got = ReadFifo(Fifo("algo-1", "train", epoch));
    EXPECT_EQ(got.size(), expected.size()) << "epoch " << epoch;
    EXPECT_TRUE(got == expected) << "epoch " << epoch;
    // Each epoch has its own FIFO; the one read is removed.
    EXPECT_TRUE(RunUntil(*loop_, [&] { return !internal::Exists(Fifo("algo-1", "train", epoch)); }));
  }
  // Other instances got every object too.
  EXPECT_TRUE(ReadFifo(Fifo("algo-3", "train", 0)) == expected);
  channel_->EndJob("data-job");
  EXPECT_TRUE(listener_.failures.empty());
}

TEST_F(LocalDataChannelTest, PipeShuffleGivesADeterministicOrderPerEpoch) {
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) {
    keys.push_back(absl::StrCat("k", i < 10 ? "0" : "", i));
    WriteFile(absl::StrCat(src_, "/s/", keys.back()), keys.back() + "\n");
  }
  v1::Channel c = Channel("sh", "S3Prefix", "file://" + src_ + "/s/");
  c.mutable_shuffle_config()->set_seed(42);
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  std::vector<std::string> epochs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::string got = ReadFifo(Fifo("algo-1", "sh", epoch));
    std::string expected;
    for (size_t j : internal::EpochOrder(20, true, 42, epoch, false, 0, 3)) {
      absl::StrAppend(&expected, keys[j], "\n");
    }
    EXPECT_EQ(got, expected) << "epoch " << epoch;
    std::vector<std::string> lines = absl::StrSplit(got, '\n', absl::SkipEmpty());
    std::sort(lines.begin(), lines.end());
    EXPECT_EQ(lines, keys) << "epoch " << epoch << " is not a permutation";
    epochs.push_back(got);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  // Another instance, same seed and epoch: the same order.
  EXPECT_EQ(ReadFifo(Fifo("algo-2", "sh", 0)), epochs[0]);
}

TEST_F(LocalDataChannelTest, PipeShardedByS3KeyGivesEachInstanceADisjointShare) {
  std::vector<std::string> all;
  for (int i = 0; i < 7; ++i) {
    WriteFile(absl::StrCat(src_, "/s/part-", i), absl::StrCat("p", i, "\n"));
    all.push_back(absl::StrCat("p", i));
  }
  v1::Channel c = Channel("s", "S3Prefix", "file://" + src_ + "/s/", "ShardedByS3Key");
  c.mutable_shuffle_config()->set_seed(3);
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::string> seen;
    for (const char* host : {"algo-1", "algo-2", "algo-3"}) {
      std::vector<std::string> part = absl::StrSplit(ReadFifo(Fifo(host, "s", epoch)), '\n', absl::SkipEmpty());
      EXPECT_GE(part.size(), 2u) << host;
      seen.insert(seen.end(), part.begin(), part.end());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, all) << "epoch " << epoch;
  }
}

TEST_F(LocalDataChannelTest, PipeGunzipsObjectsWhenCompressionTypeIsGzip) {
  std::string big;
  for (int i = 0; i < 200000; ++i) absl::StrAppend(&big, i, ",");
  WriteFile(src_ + "/raw/a", "alpha\n");
  WriteFile(src_ + "/raw/b", big);
  WriteFile(src_ + "/raw/c1", "one-");
  WriteFile(src_ + "/raw/c2", "two");
  // gzip(1) writes the objects; c is two gzip members back to back.
  ASSERT_NO_FATAL_FAILURE(DeliverGzipPipe("gzip -c raw/a > gz/a.gz && gzip -c raw/b > gz/b.gz"
                                          " && gzip -c raw/c1 > gz/c.gz && gzip -c raw/c2 >> gz/c.gz"));
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::string got = ReadFifo(Fifo("algo-1", "z", epoch));
    EXPECT_TRUE(got == "alpha\n" + big + "one-two") << "epoch " << epoch << " size " << got.size();
  }
}

// gzip -d reads zero bytes after a member as padding (tape blocks); so does
// the Pipe stream.
TEST_F(LocalDataChannelTest, PipeGzipReadsZeroPaddingAfterAMember) {
  WriteFile(src_ + "/raw/a", "alpha\n");
  ASSERT_NO_FATAL_FAILURE(DeliverGzipPipe("gzip -c raw/a > gz/a.gz && head -c 4 /dev/zero >> gz/a.gz"));
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "z", 0)), "alpha\n");
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "z", 1)), "alpha\n");
  channel_->EndJob("data-job");
  EXPECT_TRUE(listener_.failures.empty()) << listener_.failures[0];
}

// A manifest's objects stream in the manifest's order, not in key order.
TEST_F(LocalDataChannelTest, PipeManifestStreamsItsObjectsInItsOwnOrder) {
  for (const char* key : {"z", "a", "m"}) WriteFile(src_ + "/m/" + key, key);
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"z\", \"a\", \"m\"]"));
  ASSERT_TRUE(
      Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json"), "Pipe").ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "m", 0)), "zam");
  channel_->EndJob("data-job");
}

TEST_F(LocalDataChannelTest, AManifestThatListsNoObjectIsNotFound) {
  WriteFile(src_ + "/manifest.json", absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}]"));
  const absl::Status s = Deliver(Channel("m", "ManifestFile", "file://" + src_ + "/manifest.json"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 'm': manifest file://"));
  EXPECT_THAT(s.message(), HasSubstr("lists no object"));
}

// An object replaced by a FIFO after the listing: the writer must not block
// opening it (nothing would ever end the job); the channel fails, naming it.
TEST_F(LocalDataChannelTest, PipeObjectReplacedByAFifoFailsTheChannelInsteadOfHanging) {
  WriteFile(src_ + "/p/a", "alpha\n");
  WriteFile(src_ + "/p/b", "beta\n");
  ASSERT_TRUE(Deliver(Channel("p", "S3Prefix", "file://" + src_ + "/p/"), "Pipe").ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "p", 0)), "alpha\nbeta\n");
  ASSERT_EQ(unlink((src_ + "/p/b").c_str()), 0);
  ASSERT_EQ(mkfifo((src_ + "/p/b").c_str(), 0600), 0);
  ReadFifo(Fifo("algo-1", "p", 1));
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.failures.empty(); }));
  EXPECT_THAT(listener_.failures[0], HasSubstr("channel 'p'"));
  EXPECT_THAT(listener_.failures[0], HasSubstr("/p/b"));
  channel_->EndJob("data-job");
}

TEST_F(LocalDataChannelTest, PipeGzipOfAnObjectThatIsNotGzipFailsTheJob) {
  WriteFile(src_ + "/gz/a.gz", "this is not gzip at all");
  v1::Channel c = Channel("z", "S3Prefix", "file://" + src_ + "/gz/");
  c.set_compression_type("Gzip");
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  ReadFifo(Fifo("algo-1", "z", 0));
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.failures.empty(); }));
  EXPECT_THAT(listener_.failures[0], HasSubstr("data-job#1: channel 'z': object 'file://"));
  EXPECT_THAT(listener_.failures[0], HasSubstr("gzip"));
}

// Parses dmlc RecordIO (written independently of the writer: header words,
// continuation flags joined with the magic number, padding).
std::vector<std::string> ParseRecordIO(const std::string& data, std::string* error) {
  std::vector<std::string> records;
  size_t pos = 0;
  std::string current;
  auto word = [&](size_t at) {
    return static_cast<uint32_t>(static_cast<unsigned char>(data[at])) |
           static_cast<uint32_t>(static_cast<unsigned char>(data[at + 1])) << 8 |
           static_cast<uint32_t>(static_cast<unsigned char>(data[at + 2])) << 16 |
           static_cast<uint32_t>(static_cast<unsigned char>(data[at + 3])) << 24;
  };
  while (pos < data.size()) {
    if (pos + 8 > data.size() || word(pos) != 0xced7230a) {
      *error = absl::StrCat("bad header at ", pos);
      return records;
    }
    const uint32_t lrec = word(pos + 4);
    const uint32_t cflag = lrec >> 29, len = lrec & ((1u << 29) - 1);
    pos += 8;
    if (pos + len > data.size()) {
      *error = "short record";
      return records;
    }
    current.append(data, pos, len);
    pos += (len + 3) / 4 * 4;
    if (cflag == 0 || cflag == 3) {
      records.push_back(current);
      current.clear();
    } else {
      current.append("\x0a\x23\xd7\xce", 4);  // the split point held the magic number
    }
  }
  return records;
}

TEST_F(LocalDataChannelTest, PipeRecordIOWrapsEachObjectInARecord) {
  const std::string with_magic = std::string("abcd\x0a\x23\xd7\xce" "efgh\x0a\x23\xd7\xce" "ij", 18);
  WriteFile(src_ + "/r/1", "hello");
  WriteFile(src_ + "/r/2", with_magic);
  WriteFile(src_ + "/r/3", "");
  WriteFile(src_ + "/r/4", std::string(100000, 'q'));
  v1::Channel c = Channel("rec", "S3Prefix", "file://" + src_ + "/r/");
  c.set_record_wrapper_type("RecordIO");
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::string got = ReadFifo(Fifo("algo-1", "rec", epoch));
    // The first record exactly: magic, length 5, data, 3 bytes of padding.
    EXPECT_EQ(got.substr(0, 16), std::string("\x0a\x23\xd7\xce\x05\0\0\0hello\0\0\0", 16));
    std::string error;
    EXPECT_THAT(ParseRecordIO(got, &error),
                ElementsAre("hello", with_magic, "", std::string(100000, 'q')));
    EXPECT_EQ(error, "");
  }
}

TEST_F(LocalDataChannelTest, PipeGzipAndRecordIOTogetherFrameTheDecompressedObject) {
  WriteFile(src_ + "/raw/x", "payload-x");
  ASSERT_TRUE(MakeDirs(src_ + "/gz").ok());
  ASSERT_EQ(std::system(absl::StrCat("gzip -c ", src_, "/raw/x > ", src_, "/gz/x.gz").c_str()), 0);
  v1::Channel c = Channel("gr", "S3Prefix", "file://" + src_ + "/gz/");
  c.set_compression_type("Gzip");
  c.set_record_wrapper_type("RecordIO");
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  std::string error;
  EXPECT_THAT(ParseRecordIO(ReadFifo(Fifo("algo-1", "gr", 0)), &error), ElementsAre("payload-x"));
  EXPECT_EQ(error, "");
}

TEST_F(LocalDataChannelTest, PipeReaderClosingEarlyGetsTheNextEpoch) {
  const std::string big(8 << 20, 'e');
  WriteFile(src_ + "/p/big", big);
  ASSERT_TRUE(Deliver(Channel("early", "S3Prefix", "file://" + src_ + "/p/"), "Pipe").ok());
  {
    int fd = open(Fifo("algo-1", "early", 0).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    char buf[100];
    ASSERT_EQ(read(fd, buf, sizeof(buf)), 100);
    close(fd);
  }
  EXPECT_TRUE(ReadFifo(Fifo("algo-1", "early", 1)) == big);
  EXPECT_TRUE(listener_.failures.empty());
}

TEST_F(LocalDataChannelTest, EndJobStopsWritersWaitingForAReaderOrBlockedOnAFullPipe) {
  const int fds_before = OpenFdCount();
  WriteFile(src_ + "/p/big", std::string(8 << 20, 'b'));
  ASSERT_TRUE(Deliver(Channel("blk", "S3Prefix", "file://" + src_ + "/p/"), "Pipe").ok());
  // algo-1: a reader that reads a little and then stalls (the writer blocks
  // on the full pipe); algo-2 and algo-3: nobody ever opens the FIFO.
  int fd = open(Fifo("algo-1", "blk", 0).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  char buf[4096];
  ASSERT_GT(read(fd, buf, sizeof(buf)), 0);
  // Once the pipe holds all it can (but for a few pages the writer may have
  // filled in part), the writer is blocked on it.
  const int full = fcntl(fd, F_GETPIPE_SZ) - (64 << 10);
  ASSERT_GT(full, 0);
  int queued = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while ((ioctl(fd, FIONREAD, &queued) != 0 || queued < full) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_GE(queued, full) << "the writer never filled the pipe";
  channel_->EndJob("data-job");
  // The stalled reader gets end of file (the writer closed its end) well
  // before it could have read 8 MiB.
  int64_t rest = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    rest += n;
  }
  close(fd);
  EXPECT_LT(rest, 8 << 20);
  // The writers end, their FIFOs go, and nothing is left open.
  EXPECT_TRUE(RunUntil(*loop_, [&] { return !internal::Exists(Fifo("algo-2", "blk", 0)); }));
  auto destroyed = std::async(std::launch::async, [&] { channel_.reset(); });
  ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a writer did not stop";
  EXPECT_EQ(OpenFdCount(), fds_before);
}

TEST_F(LocalDataChannelTest, DestroyingTheChannelStopsItsWriters) {
  WriteFile(src_ + "/p/a", "a");
  ASSERT_TRUE(Deliver(Channel("d", "S3Prefix", "file://" + src_ + "/p/"), "Pipe").ok());
  auto destroyed = std::async(std::launch::async, [&] { channel_.reset(); });
  ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

TEST_F(LocalDataChannelTest, PipeObjectMissingFromAManifestFailsTheJobNamingIt) {
  WriteFile(src_ + "/m/here", "here");
  WriteFile(src_ + "/manifest.json",
            absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"here\", \"then-gone\"]"));
  ASSERT_TRUE(Deliver(Channel("v", "ManifestFile", "file://" + src_ + "/manifest.json"), "Pipe").ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "v", 0)), "here");
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.failures.empty(); }));
  EXPECT_THAT(listener_.failures[0],
              HasSubstr("channel 'v': object 'file://" + src_ + "/m/then-gone' named by the manifest"));
  EXPECT_THAT(listener_.failures[0], Not(HasSubstr("disappeared")));
}

TEST_F(LocalDataChannelTest, PipeObjectThatDisappearsBetweenEpochsFailsTheJobNamingIt) {
  WriteFile(src_ + "/p/a", "a");
  WriteFile(src_ + "/p/b", "b");
  ASSERT_TRUE(Deliver(Channel("v", "S3Prefix", "file://" + src_ + "/p/"), "Pipe").ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "v", 0)), "ab");
  ASSERT_EQ(std::remove((src_ + "/p/b").c_str()), 0);
  ReadFifo(Fifo("algo-1", "v", 1));
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.failures.empty(); }));
  EXPECT_THAT(listener_.failures[0], HasSubstr("channel 'v': object 'file://" + src_ +
                                               "/p/b' disappeared during the stream (epoch 1)"));
}

TEST_F(LocalDataChannelTest, PipeOfAnEmptyPrefixFailsTheDelivery) {
  ASSERT_TRUE(MakeDirs(src_ + "/none").ok());
  absl::Status s = Deliver(Channel("e", "S3Prefix", "file://" + src_ + "/none/"), "Pipe");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_FALSE(internal::Exists(Fifo("algo-1", "e", 0)));
}

// ---------------------------------------------------------------------------
// AugmentedManifestFile (Pipe)

v1::Channel Augmented(const std::string& name, const std::string& uri,
                      std::vector<std::string> attributes) {
  v1::Channel c;
  c.set_channel_name(name);
  auto* s3 = c.mutable_data_source()->mutable_s3_data_source();
  s3->set_s3_data_type("AugmentedManifestFile");
  s3->set_s3_uri(uri);
  for (std::string& a : attributes) s3->add_attribute_names(std::move(a));
  return c;
}

TEST_F(LocalDataChannelTest, AugmentedManifestStreamsEachAttributeAsOneRecord) {
  const std::string img1("\x89PNG\x0a\x23\xd7\xce-one", 12);  // holds the RecordIO magic
  WriteFile(src_ + "/img/1.png", img1);
  WriteFile(src_ + "/img/2.png", "two");
  // Attributes in any order in the line, unlisted ones ignored, a blank line
  // and a CRLF line end tolerated; the manifest's order, not the keys'.
  WriteFile(src_ + "/train.manifest",
            absl::StrCat("{\"is-a-cat\": 1, \"source-ref\": \"file://", src_,
                         "/img/2.png\", \"note\": \"x\"}\r\n\n",
                         "{\"source-ref\": \"file://", src_, "/img/1.png\", \"is-a-cat\": 0}\n"));
  v1::Channel c = Augmented("am", "file://" + src_ + "/train.manifest", {"source-ref", "is-a-cat"});
  c.set_record_wrapper_type("RecordIO");
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  for (const Instance& i : cluster_.instances) {
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::string error;
      EXPECT_THAT(ParseRecordIO(ReadFifo(Fifo(i.host_name, "am", epoch)), &error),
                  ElementsAre("two", "1", img1, "0"))
          << i.host_name << " epoch " << epoch;
      EXPECT_EQ(error, "");
    }
  }
  EXPECT_THAT(listener_.failures, ElementsAre());
}

TEST_F(LocalDataChannelTest, AugmentedManifestWithoutRecordIOStreamsTheBytesBackToBack) {
  WriteFile(src_ + "/o/a", "AAA");
  WriteFile(src_ + "/o/b.gz.src", "BBB");
  ASSERT_EQ(std::system(absl::StrCat("gzip -c ", src_, "/o/b.gz.src > ", src_, "/o/b.gz").c_str()), 0);
  ASSERT_EQ(std::system(absl::StrCat("gzip -c ", src_, "/o/a > ", src_, "/o/a.gz").c_str()), 0);
  // Strings stream their characters, other values their compact JSON.
  WriteFile(src_ + "/m.jsonl",
            absl::StrCat("{\"line\": \"Call me Ishmael\", \"book\": {\"t\": [1, 2.50]}, \"data-ref\": \"file://",
                         src_, "/o/a.gz\"}\n",
                         "{\"data-ref\": \"file://", src_, "/o/b.gz\", \"book\": null, \"line\": \"\\u00e9\"}\n"));
  v1::Channel c = Augmented("plain", "file://" + src_ + "/m.jsonl", {"line", "data-ref", "book"});
  c.set_compression_type("Gzip");  // applies to the objects a -ref names
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-2", "plain", 0)),
            "Call me IshmaelAAA{\"t\":[1,2.50]}\xc3\xa9" "BBBnull");
}

TEST_F(LocalDataChannelTest, AugmentedManifestShardsAndShufflesLines) {
  std::string manifest;
  std::vector<std::string> all;
  for (int k = 0; k < 9; ++k) {
    absl::StrAppend(&manifest, "{\"id\": \"line-", k, ";\"}\n");
    all.push_back(absl::StrCat("line-", k));
  }
  WriteFile(src_ + "/ids.manifest", manifest);
  v1::Channel c = Augmented("ids", "file://" + src_ + "/ids.manifest", {"id"});
  c.mutable_data_source()->mutable_s3_data_source()->set_s3_data_distribution_type("ShardedByS3Key");
  c.mutable_shuffle_config()->set_seed(7);
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  std::vector<std::string> seen;
  for (const Instance& i : cluster_.instances) {
    std::vector<std::string> share =
        absl::StrSplit(ReadFifo(Fifo(i.host_name, "ids", 0)), ';', absl::SkipEmpty());
    EXPECT_EQ(share.size(), 3u) << i.host_name;
    seen.insert(seen.end(), share.begin(), share.end());
  }
  EXPECT_NE(seen, all);  // shuffled (seed 7 does not give the identity)
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, all);  // every line exactly once
}

TEST_F(LocalDataChannelTest, AugmentedManifestErrorsNameChannelLineAndAttribute) {
  const std::string uri = "file://" + src_ + "/bad.manifest";
  WriteFile(src_ + "/bad.manifest", "{\"a\": 1, \"b\": 2}\n{\"a\": 3}\n");
  absl::Status s = Deliver(Augmented("bad", uri, {"a", "b"}), "Pipe");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("channel 'bad': augmented manifest ", uri,
                                                  " line 2 has no attribute 'b'")));

  WriteFile(src_ + "/bad.manifest", "{\"a\": 1}\n\n{\"a\": 2,}\n");
  s = Deliver(Augmented("bad", uri, {"a"}), "Pipe");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(" line 3 is not valid JSON"));

  WriteFile(src_ + "/bad.manifest", "[1]\n");
  s = Deliver(Augmented("bad", uri, {"a"}), "Pipe");
  EXPECT_THAT(s.message(), HasSubstr(" line 1 must be a JSON object, not array"));

  WriteFile(src_ + "/bad.manifest", "{\"x-ref\": 5}\n");
  s = Deliver(Augmented("bad", uri, {"x-ref"}), "Pipe");
  EXPECT_THAT(s.message(), HasSubstr(" line 1: attribute 'x-ref' must be a string"));

  s = Deliver(Augmented("bad", uri, {}), "Pipe");
  EXPECT_THAT(s.message(), HasSubstr("channel 'bad': S3DataType AugmentedManifestFile needs AttributeNames"));

  s = Deliver(Augmented("bad", "file://" + src_ + "/missing.manifest", {"a"}), "Pipe");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 'bad': reading augmented manifest"));

  s = Deliver(Augmented("bad", uri, {"x-ref"}), "File");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("Pipe input mode only"));
  EXPECT_FALSE(internal::Exists(Fifo("algo-1", "bad", 0)));
}

TEST_F(LocalDataChannelTest, AugmentedManifestRefToAMissingObjectFailsTheJobNamingIt) {
  WriteFile(src_ + "/o/here", "here");
  WriteFile(src_ + "/r.manifest", absl::StrCat("{\"src-ref\": \"file://", src_, "/o/here\"}\n",
                                               "{\"src-ref\": \"file://", src_, "/o/nothing\"}\n"));
  ASSERT_TRUE(Deliver(Augmented("r", "file://" + src_ + "/r.manifest", {"src-ref"}), "Pipe").ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "r", 0)), "here");
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.failures.empty(); }));
  EXPECT_THAT(listener_.failures[0],
              HasSubstr(absl::StrCat("data-job#1: channel 'r': augmented manifest file://", src_,
                                     "/r.manifest line 2 (epoch 0): attribute 'src-ref': object 'file://",
                                     src_, "/o/nothing' does not exist")));
}

// Keys, URIs and values of manifests are input: the errors that echo them
// show them escaped and cut, so no manifest can add a line to a job's
// FailureReason or a log, or make it huge.
TEST_F(LocalDataChannelTest, ManifestContentEchoedInErrorsIsEscapedAndCut) {
  auto one_line = [](const auto& message) {  // (absl's or std's string_view, or a string)
    const std::string m(message.data(), message.size());
    return m.find_first_of("\n\r\x01") == std::string::npos &&
           m.find("\xC2\x85") == std::string::npos;
  };
  const std::string manifest = "file://" + src_ + "/manifest.json";
  // An unsafe key ('..'), with control characters.
  WriteFile(src_ + "/manifest.json", absl::StrCat("[{\"prefix\": \"file://", src_,
                                                  "/m/\"}, \"../x\\u0001\\nforged\"]"));
  absl::Status s = Deliver(Channel("m", "ManifestFile", manifest));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(one_line(s.message())) << s.message();
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("object 'file://", src_, R"(/m/../x\u0001\nforged')",
                                     R"( has the key '../x\u0001\nforged', which)")));
  // A huge one is cut.
  WriteFile(src_ + "/manifest.json", absl::StrCat("[{\"prefix\": \"file://", src_, "/m/\"}, \"../",
                                                  std::string(100000, 'k'), "\"]"));
  s = Deliver(Channel("m", "ManifestFile", manifest));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("kkk...' has the key '../kkk"));
  EXPECT_LT(s.message().size(), 2500u);
  // A key that is also a folder of another.
  WriteFile(src_ + "/manifest.json", absl::StrCat("[{\"prefix\": \"file://", src_,
                                                  "/m/\"}, \"a\\u0085\", \"a\\u0085/b\"]"));
  s = Deliver(Channel("m", "ManifestFile", manifest));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_TRUE(one_line(s.message())) << s.message();
  EXPECT_THAT(s.message(),
              HasSubstr(R"(key 'a\u0085' would be a file and the folder holding key)"));
  // An augmented manifest's "-ref" naming a missing object, and an attribute
  // name the lines lack.
  const std::string augmented = "file://" + src_ + "/r.manifest";
  WriteFile(src_ + "/r.manifest",
            absl::StrCat("{\"src-ref\": \"file://", src_, "/o/no\\nthing\"}\n"));
  ASSERT_TRUE(Deliver(Augmented("r", augmented, {"src-ref"}), "Pipe").ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-1", "r", 0)), "");
  ASSERT_TRUE(RunUntil(*loop_, [&] { return !listener_.failures.empty(); }));
  EXPECT_TRUE(one_line(listener_.failures[0])) << listener_.failures[0];
  EXPECT_THAT(listener_.failures[0],
              HasSubstr(absl::StrCat("attribute 'src-ref': object 'file://", src_,
                                     R"(/o/no\nthing' does not exist: open ')", src_,
                                     R"(/o/no\nthing': )")));
  s = Deliver(Augmented("r", augmented, {"src-ref", "b\x01"}), "Pipe");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(R"(line 1 has no attribute 'b\u0001' (AttributeNames))"));
}

TEST_F(LocalDataChannelTest, AugmentedManifestInARemoteStoreReadsRefsThroughTheStores) {
  CountingStore remote;
  stores_.Register("mem", &remote);
  ASSERT_TRUE(remote.Put("mem://bucket/x/1.bin", "one").ok());
  ASSERT_TRUE(remote.Put("mem://bucket/x/2.bin", "two").ok());
  WriteFile(src_ + "/local.bin", "three");
  ASSERT_TRUE(remote.Put("mem://bucket/train.manifest",
                         absl::StrCat("{\"b-ref\": \"mem://bucket/x/1.bin\", \"label\": \"a\"}\n"
                                      "{\"b-ref\": \"mem://bucket/x/2.bin\", \"label\": \"b\"}\n"
                                      "{\"b-ref\": \"file://", src_, "/local.bin\", \"label\": \"c\"}\n"))
                  .ok());
  v1::Channel c = Augmented("rm", "mem://bucket/train.manifest", {"label", "b-ref"});
  c.set_record_wrapper_type("RecordIO");
  ASSERT_TRUE(Deliver(c, "Pipe").ok());
  std::string error;
  EXPECT_THAT(ParseRecordIO(ReadFifo(Fifo("algo-3", "rm", 0)), &error),
              ElementsAre("a", "one", "b", "two", "c", "three"));
  EXPECT_EQ(error, "");
  // A -ref whose scheme has no store is refused at Deliver.
  ASSERT_TRUE(remote.Put("mem://bucket/bad.manifest", "{\"b-ref\": \"gs://b/k\"}\n").ok());
  absl::Status s = Deliver(Augmented("rm2", "mem://bucket/bad.manifest", {"b-ref"}), "Pipe");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("line 1: attribute 'b-ref': "));
  channel_.reset();
  stores_.Register("mem", nullptr);
}

// ---------------------------------------------------------------------------
// Clean-up after a crash

#ifndef KILN_FASTFILE_VIEW_HOLDER
#define KILN_FASTFILE_VIEW_HOLDER "fastfile_view_holder"
#endif

// Runs `argv` (its program looked up in PATH), and returns its pid and the
// first line it writes on stdout (with the newline; what it wrote if it ended
// or said nothing more within 20 s).
std::pair<pid_t, std::string> SpawnAndReadLine(std::vector<std::string> argv) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return {-1, "pipe2 failed"};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string said;
  struct pollfd p = {out[0], POLLIN, 0};
  while (pid > 0 && said.find('\n') == std::string::npos && poll(&p, 1, 20000) == 1) {
    char buf[256];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    said.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  return {pid, said};
}

// Needs FUSE (root and /dev/fuse), like the other FUSE tests.
TEST_F(LocalDataChannelTest, MountsOfAKilledProcessAreCleanedUpByTheNextChannel) {
  const auto [pid, said] = SpawnAndReadLine({KILN_FASTFILE_VIEW_HOLDER, state_dir_});
  ASSERT_GT(pid, 0);
  const std::string fastfile = state_dir_ + "/fastfile";
  const bool mounted = said == "mounted\n";
  std::vector<std::string> left = ListDir(fastfile);
  kill(pid, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(mounted) << said;
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind(absl::StrCat(pid, "-"), 0), 0u) << left[0];
  // What a crash leaves: a mount whose server is gone.
  struct stat st;
  EXPECT_EQ(stat((fastfile + "/" + left[0]).c_str(), &st), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_TRUE(MountedBelow(fastfile));
  // Also an empty mount point of the dead process, and one of this (live)
  // process, which must stay.
  const std::string dead_empty = absl::StrCat(pid, "-77-empty");
  const std::string mine = absl::StrCat(getpid(), "-77-mine");
  ASSERT_TRUE(MakeDirs(fastfile + "/" + dead_empty).ok());
  ASSERT_TRUE(MakeDirs(fastfile + "/" + mine).ok());

  channel_ = NewLocalDataChannel(*loop_, stores_, {.state_dir = state_dir_});
  EXPECT_FALSE(MountedBelow(fastfile)) << ReadFile("/proc/self/mountinfo");
  EXPECT_THAT(ListDir(fastfile), ElementsAre(mine));
}

// A host process in a container often has the same PID from one start to the
// next, and processes of two PID namespaces may share a state directory. Each
// holder here runs as PID 1 of a new PID namespace (`unshare`): the second
// must mount its view beside the first's live one, not over it (which would
// hide it), and a cleaner with the same PID must still clean up both dead
// mounts. Needs FUSE and the right to make PID namespaces (root).
TEST_F(LocalDataChannelTest, ViewsOfProcessesWithTheSamePidNeitherCollideNorOutliveThem) {
  const std::string fastfile = state_dir_ + "/fastfile";
  auto holder = [&](const std::string& mode) {
    std::vector<std::string> argv = {"unshare", "--pid", "--fork", "--kill-child",
                                     KILN_FASTFILE_VIEW_HOLDER};
    if (!mode.empty()) argv.push_back(mode);
    argv.push_back(state_dir_);
    return SpawnAndReadLine(argv);
  };
  // Kills the holder (unshare's child; --kill-child would be too late to
  // wait for) and waits for unshare, which waits for it.
  auto end = [](pid_t pid) {
    const std::string children = ReadFile(absl::StrCat("/proc/", pid, "/task/", pid, "/children"));
    int64_t child = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(children), &child)) {
      kill(static_cast<pid_t>(child), SIGKILL);
    } else {
      kill(pid, SIGKILL);
    }
    int status;
    return waitpid(pid, &status, 0) == pid;
  };
  const auto [first, first_said] = holder("");
  ASSERT_GT(first, 0);
  if (first_said != "mounted\n") {
    end(first);
    GTEST_SKIP() << "no PID namespace with a FUSE view here: " << first_said;
  }
  const auto [second, second_said] = holder("");
  const std::vector<std::string> both = ListDir(fastfile);
  const bool second_mounted = second_said == "mounted\n";
  // Reading a view leaves its root's attributes in the kernel's cache, from
  // which stat answers even after its server is gone.
  for (const std::string& name : both) {
    struct stat st;
    EXPECT_EQ(stat((fastfile + "/" + name).c_str(), &st), 0) << name;
  }
  ASSERT_TRUE(end(first));
  ASSERT_TRUE(end(second));
  ASSERT_TRUE(second_mounted) << second_said;
  // Both are PID 1 in their namespaces, each with a mount point of its own.
  ASSERT_EQ(both.size(), 2u);
  for (const std::string& name : both) EXPECT_EQ(name.rfind("1-", 0), 0u) << name;
  // What a crash leaves: mounts whose server is gone (statfs, unlike stat,
  // always asks the server).
  for (const std::string& name : both) {
    struct statfs fs;
    EXPECT_EQ(statfs((fastfile + "/" + name).c_str(), &fs), -1) << name;
    EXPECT_TRUE(errno == ENOTCONN || errno == ECONNABORTED) << name << ": " << errno;
  }
  // The cleaner is PID 1 too.
  const auto [cleaner, cleaner_said] = holder("--clean");
  ASSERT_GT(cleaner, 0);
  int status;
  ASSERT_EQ(waitpid(cleaner, &status, 0), cleaner);
  EXPECT_EQ(cleaner_said, "cleaned\n");
  EXPECT_FALSE(MountedBelow(fastfile)) << ReadFile("/proc/self/mountinfo");
  EXPECT_THAT(ListDir(fastfile), ElementsAre());
}

// --- A part of a cluster that spans hosts: algo-2 and algo-3 of this host
// hold positions of a channel sharded over more instances than they are.

absl::Status DeliverPart(DataChannel& channel, EventLoop& loop, const JobContext& job,
                         const v1::Channel& c, std::string_view mode,
                         std::vector<const Instance*> receivers, int32_t count,
                         std::vector<int32_t> positions) {
  ChannelDelivery delivery{job, c, mode, std::move(receivers)};
  delivery.shard_count = count;
  delivery.shard_positions = std::move(positions);
  std::optional<absl::Status> result;
  channel.Deliver(delivery, [&](absl::Status s) { result = s; });
  if (!RunUntil(loop, [&] { return result.has_value(); })) {
    return absl::DeadlineExceededError("Deliver did not complete");
  }
  return *result;
}

class LocalDataChannelPartTest : public LocalDataChannelTest {
 protected:
  absl::Status DeliverToPart(const v1::Channel& c, std::string_view mode,
                             std::vector<int32_t> positions, int32_t count = 3,
                             std::vector<std::string> hosts = {"algo-2", "algo-3"}) {
    std::vector<const Instance*> receivers;
    for (const std::string& h : hosts) {
      for (const Instance& i : cluster_.instances) {
        if (i.host_name == h) receivers.push_back(&i);
      }
    }
    JobContext job{"data-job", "arn:aws:sagemaker:us-east-1:000000000000:training-job/data-job",
                   request_, cluster_, 1};
    return DeliverPart(*channel_, *loop_, job, c, mode, std::move(receivers), count,
                       std::move(positions));
  }
};

TEST_F(LocalDataChannelPartTest, FileModeGivesAPartExactlyItsPositionsShares) {
  for (int i = 0; i < 7; ++i) WriteFile(absl::StrCat(src_, "/s/part-", i), "x");
  const v1::Channel c = Channel("s", "S3Prefix", "file://" + src_ + "/s/", "ShardedByS3Key");
  ASSERT_TRUE(DeliverToPart(c, "File", {1, 2}).ok());
  EXPECT_THAT(ListDir(DataDir("c1/algo-1") + "/s"), ElementsAre());  // (elsewhere)
  EXPECT_THAT(ListDir(DataDir("c1/algo-2") + "/s"), ElementsAre("part-1", "part-4"));
  EXPECT_THAT(ListDir(DataDir("c1/algo-3") + "/s"), ElementsAre("part-2", "part-5"));
  // Positions are not indices: algo-2 at position 2, algo-3 at 0.
  const v1::Channel t = Channel("t", "S3Prefix", "file://" + src_ + "/s/", "ShardedByS3Key");
  ASSERT_TRUE(DeliverToPart(t, "File", {2, 0}).ok());
  EXPECT_THAT(ListDir(DataDir("c1/algo-2") + "/t"), ElementsAre("part-2", "part-5"));
  EXPECT_THAT(ListDir(DataDir("c1/algo-3") + "/t"), ElementsAre("part-0", "part-3", "part-6"));
  // FullyReplicated: everything, whatever the positions.
  const v1::Channel f = Channel("f", "S3Prefix", "file://" + src_ + "/s/");
  ASSERT_TRUE(DeliverToPart(f, "File", {1, 2}).ok());
  EXPECT_EQ(ListDir(DataDir("c1/algo-2") + "/f").size(), 7u);
  EXPECT_EQ(ListDir(DataDir("c1/algo-3") + "/f").size(), 7u);
}

TEST_F(LocalDataChannelPartTest, PipeModeGivesAPartTheSharesTheWholeClusterWouldGive) {
  for (int i = 0; i < 7; ++i) {
    WriteFile(absl::StrCat(src_, "/s/part-", i), absl::StrCat("p", i, "\n"));
  }
  v1::Channel plain = Channel("plain", "S3Prefix", "file://" + src_ + "/s/", "ShardedByS3Key");
  ASSERT_TRUE(DeliverToPart(plain, "Pipe", {1, 2}).ok());
  EXPECT_EQ(ReadFifo(Fifo("algo-2", "plain", 0)), "p1\np4\n");
  EXPECT_EQ(ReadFifo(Fifo("algo-3", "plain", 0)), "p2\np5\n");
  EXPECT_FALSE(internal::Exists(Fifo("algo-1", "plain", 0)));
  // Shuffled per epoch: the part's streams are those of the same positions
  // in a delivery to the whole cluster, epoch after epoch.
  v1::Channel whole = Channel("whole", "S3Prefix", "file://" + src_ + "/s/", "ShardedByS3Key");
  whole.mutable_shuffle_config()->set_seed(11);
  v1::Channel part = whole;
  part.set_channel_name("part");
  ASSERT_TRUE(Deliver(whole, "Pipe").ok());
  ASSERT_TRUE(DeliverToPart(part, "Pipe", {1, 2}).ok());
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const char* host : {"algo-2", "algo-3"}) {
      const std::string expected = ReadFifo(Fifo(host, "whole", epoch));
      EXPECT_FALSE(expected.empty()) << host << " epoch " << epoch;
      EXPECT_EQ(ReadFifo(Fifo(host, "part", epoch)), expected) << host << " epoch " << epoch;
    }
  }
}

TEST_F(LocalDataChannelPartTest, FastFileShardingCountsTheWholeCluster) {
  WriteFile(src_ + "/d/a", "1");
  const v1::Channel c = Channel("d", "S3Prefix", "file://" + src_ + "/d/", "ShardedByS3Key");
  // One instance here, three in the cluster: a view cannot shard.
  absl::Status s = DeliverToPart(c, "FastFile", {1}, 3, {"algo-2"});
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  // The only instance of the channel: its share is everything.
  s = DeliverToPart(c, "FastFile", {0}, 1, {"algo-2"});
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(LocalDataChannelPartTest, BadShardsAreRefusedNamingTheFieldAndTheRule) {
  WriteFile(src_ + "/s/a", "1");
  const v1::Channel c = Channel("s", "S3Prefix", "file://" + src_ + "/s/", "ShardedByS3Key");
  struct Case {
    std::vector<int32_t> positions;
    int32_t count;
    const char* says;
  };
  for (const Case& bad : {
           Case{{1}, 3, "shard_positions has 1 positions for 2 instances"},
           Case{{1, 3}, 3, "position 3 is not in [0, 3)"},
           Case{{-1, 0}, 3, "position -1 is not in [0, 3)"},
           Case{{1, 1}, 3, "position 1 is given twice"},
           Case{{0, 1}, 1, "shard_count 1 must be 0 or at least the number of instances (2)"},
           Case{{0, 1}, -2, "shard_count -2"},
           Case{{}, 3, "shard_positions must name the position of each of the 2 instances"},
       }) {
    for (const char* mode : {"File", "Pipe", "FastFile"}) {
      absl::Status s = DeliverToPart(c, mode, bad.positions, bad.count);
      EXPECT_TRUE(absl::IsInvalidArgument(s)) << mode << ": " << s;
      EXPECT_THAT(s.message(), HasSubstr(bad.says)) << mode;
      EXPECT_THAT(s.message(), HasSubstr("channel 's'")) << mode;
    }
  }
  // Nothing was made.
  EXPECT_THAT(ListDir(DataDir("c1/algo-2")), ElementsAre());
  // The defaults are today's: positions 0 .. n-1 of n.
  EXPECT_TRUE(DeliverToPart(c, "File", {}, 0).ok());
  EXPECT_THAT(ListDir(DataDir("c1/algo-2") + "/s"), ElementsAre("a"));
}

}  // namespace
}  // namespace kiln::local
