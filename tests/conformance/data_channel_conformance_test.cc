// The DataChannel conformance suite: the contract of kiln/data_channel.h,
// run against every implementation (the local backend's File, FastFile and
// Pipe modes on a real-time loop with file:// sources; the simulation
// backend's modelled channel in virtual time). Tests about the bytes a
// container reads run where the implementation delivers bytes.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <ostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/data_channel.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/sim/sim.h"
#include "local/internal/fs.h"
#include "local/local_test_util.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// One implementation under test, with the instances it delivers to.
class Harness {
 public:
  virtual ~Harness() = default;
  virtual EventLoop& loop() = 0;
  virtual DataChannel& channel() = 0;
  virtual void DestroyChannel() = 0;
  virtual std::string mode() const = 0;
  // Whether the channel delivers real bytes from real sources (else it
  // models the time only).
  virtual bool delivers_bytes() const = 0;
  virtual bool shards() const = 0;
  // Whether CheckChannel looks at the sources (the local channel does, in
  // every store).
  virtual bool checks_sources() const { return true; }
  // Writes the objects (key -> content) under a fresh prefix; returns the
  // prefix URI (with a trailing '/').
  virtual std::string WriteSource(const std::string& name,
                                  const std::map<std::string, std::string>& objects) = 0;
  // The objects instance `i` reads from channel `name`, as the container
  // would (File, FastFile: every file below the channel directory in path
  // order; Pipe: epoch 0, split into lines).
  virtual std::vector<std::string> Read(size_t i, const std::string& name) = 0;
  // Runs the loop until `done()` (false after a generous timeout).
  virtual bool RunUntil(const std::function<bool()>& done) = 0;
  // Runs the loop for a while (long enough for late callbacks to show).
  virtual void RunALittle() = 0;

  std::vector<Instance> instances;
  Cluster cluster;
  v1::CreateTrainingJobRequest request;
};

class LocalHarness : public Harness {
 public:
  // `remote`: sources in an in-memory store under mem:// (standing for
  // s3://: FastFile is then a FUSE view) instead of file:// folders.
  explicit LocalHarness(std::string mode, bool remote = false)
      : mode_(std::move(mode)), remote_(remote) {
    state_dir_ = tmp_.path() + "/state";
    loop_ = NewRealTimeEventLoop();
    store_ = NewFileObjectStore();
    stores_.Register("file", store_.get());
    stores_.Register("mem", mem_store_.get());
    channel_ = local::NewLocalDataChannel(*loop_, stores_, {.state_dir = state_dir_});
    for (int k = 1; k <= 3; ++k) {
      Instance inst;
      inst.host_name = absl::StrCat("algo-", k);
      inst.id = absl::StrCat("c1/", inst.host_name);
      inst.group_name = kHomogeneousGroupName;
      local::internal::MakeDirs(DataDir(k - 1)).IgnoreError();
      instances.push_back(inst);
    }
    cluster.id = "c1";
    cluster.instances = instances;
  }
  ~LocalHarness() override { channel_.reset(); }

  EventLoop& loop() override { return *loop_; }
  DataChannel& channel() override { return *channel_; }
  void DestroyChannel() override { channel_.reset(); }
  std::string mode() const override { return mode_; }
  bool delivers_bytes() const override { return true; }
  bool shards() const override { return mode_ != "FastFile"; }

  std::string WriteSource(const std::string& name,
                          const std::map<std::string, std::string>& objects) override {
    if (remote_) {
      for (const auto& [key, content] : objects) {
        mem_store_->Put(absl::StrCat("mem://src/", name, "/", key), content).IgnoreError();
      }
      return absl::StrCat("mem://src/", name, "/");
    }
    const std::string dir = absl::StrCat(tmp_.path(), "/src/", name);
    local::internal::MakeDirs(dir).IgnoreError();
    for (const auto& [key, content] : objects) local::testing::WriteFile(dir + "/" + key, content);
    return absl::StrCat("file://", dir, "/");
  }

  std::vector<std::string> Read(size_t i, const std::string& name) override {
    std::vector<std::string> out;
    if (mode_ == "Pipe") {
      const std::string fifo = absl::StrCat(DataDir(i), "/", name, "_0");
      int fd = open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return {"<no FIFO>"};
      std::string data;
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) data.append(buf, static_cast<size_t>(n));
      close(fd);
      for (absl::string_view line : absl::StrSplit(data, '\n', absl::SkipEmpty())) {
        out.emplace_back(line);
      }
      return out;
    }
    Walk(absl::StrCat(DataDir(i), "/", name), out);
    return out;
  }

  bool RunUntil(const std::function<bool()>& done) override {
    return local::testing::RunUntil(*loop_, done);
  }
  void RunALittle() override { loop_->RunUntil(loop_->Now() + absl::Milliseconds(200)); }

 private:
  std::string DataDir(size_t i) const {
    return absl::StrCat(state_dir_, "/instances/c1/algo-", i + 1, "/ml/input/data");
  }
  // Contents of the files below `dir` (following links), in path order,
  // without their trailing newline.
  static void Walk(const std::string& dir, std::vector<std::string>& out) {
    for (const std::string& e : local::testing::ListDir(dir)) {
      const std::string path = dir + "/" + e;
      struct stat st;
      if (stat(path.c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        Walk(path, out);
      } else {
        std::string c = local::testing::ReadFile(path);
        if (!c.empty() && c.back() == '\n') c.pop_back();
        out.push_back(c);
      }
    }
  }

  std::string mode_;
  bool remote_ = false;
  local::testing::TempDir tmp_;
  std::string state_dir_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<ObjectStore> mem_store_ = NewInMemoryObjectStore();
  ObjectStores stores_;
  std::unique_ptr<DataChannel> channel_;
};

class SimHarness : public Harness {
 public:
  explicit SimHarness(std::string mode) : mode_(std::move(mode)) {
    loop_ = NewVirtualEventLoop();
    sim::SimDataChannelOptions options;
    options.models = std::make_shared<const sim::SimModels>(sim::DefaultModels());
    options.channel_bytes = [](std::string_view, std::string_view) -> int64_t { return 2'000'000'000; };
    channel_ = sim::NewSimDataChannel(*loop_, options);
    for (int k = 1; k <= 3; ++k) {
      Instance inst;
      inst.host_name = absl::StrCat("algo-", k);
      inst.id = absl::StrCat("sim/", inst.host_name);
      instances.push_back(inst);
    }
    cluster.id = "sim";
    cluster.instances = instances;
  }
  EventLoop& loop() override { return *loop_; }
  DataChannel& channel() override { return *channel_; }
  void DestroyChannel() override { channel_.reset(); }
  std::string mode() const override { return mode_; }
  bool delivers_bytes() const override { return false; }
  bool shards() const override { return false; }
  std::string WriteSource(const std::string& name,
                          const std::map<std::string, std::string>&) override {
    return absl::StrCat("s3://bucket/", name, "/");
  }
  std::vector<std::string> Read(size_t, const std::string&) override { return {}; }
  bool RunUntil(const std::function<bool()>& done) override {
    const absl::Time deadline = loop_->Now() + absl::Hours(1);
    while (!done() && loop_->Now() < deadline) loop_->RunUntil(loop_->Now() + absl::Seconds(1));
    return done();
  }
  void RunALittle() override { loop_->RunUntil(loop_->Now() + absl::Hours(1)); }

 private:
  std::string mode_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<DataChannel> channel_;
};

struct Implementation {
  std::string name;
  std::function<std::unique_ptr<Harness>()> make;
};

void PrintTo(const Implementation& i, std::ostream* os) { *os << i.name; }

class DataChannelConformanceTest : public ::testing::TestWithParam<Implementation> {
 protected:
  void SetUp() override {
    h_ = GetParam().make();
    h_->request.set_training_job_name("conformance");
  }
  void TearDown() override {
    if (!h_) return;
    h_->channel().EndJob("conformance");
    h_.reset();
  }

  v1::Channel Channel(const std::string& name, const std::string& uri,
                      const std::string& distribution = "FullyReplicated",
                      const std::string& type = "S3Prefix") {
    v1::Channel c;
    c.set_channel_name(name);
    c.set_input_mode(h_->mode());
    auto* s3 = c.mutable_data_source()->mutable_s3_data_source();
    s3->set_s3_data_type(type);
    s3->set_s3_uri(uri);
    s3->set_s3_data_distribution_type(distribution);
    return c;
  }

  // Starts a delivery to every instance; `result` is set by the callback.
  void Start(const v1::Channel& channel, std::optional<absl::Status>& result, int& calls) {
    JobContext job{"conformance", "arn:aws:sagemaker:us-east-1:000000000000:training-job/conformance",
                   h_->request, h_->cluster, 1};
    std::vector<const Instance*> receivers;
    for (const Instance& i : h_->cluster.instances) receivers.push_back(&i);
    h_->channel().Deliver(ChannelDelivery{job, channel, h_->mode(), receivers},
                          [&result, &calls](absl::Status s) {
                            result = s;
                            ++calls;
                          });
  }

  absl::Status Deliver(const v1::Channel& channel) {
    std::optional<absl::Status> result;
    int calls = 0;
    Start(channel, result, calls);
    if (!h_->RunUntil([&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("Deliver did not complete");
    }
    return *result;
  }

  std::unique_ptr<Harness> h_;
};

TEST_P(DataChannelConformanceTest, DoneIsCalledExactlyOnceAndNeverInline) {
  const std::string uri = h_->WriteSource("once", {{"a", "alpha\n"}, {"b", "beta\n"}});
  std::optional<absl::Status> result;
  int calls = 0;
  Start(Channel("once", uri), result, calls);
  EXPECT_EQ(calls, 0) << "called inside Deliver";
  ASSERT_TRUE(h_->RunUntil([&] { return calls > 0; }));
  EXPECT_TRUE(result->ok()) << *result;
  // Give a second call every chance to happen.
  h_->RunALittle();
  EXPECT_EQ(calls, 1);
}

TEST_P(DataChannelConformanceTest, EveryInstanceReadsTheSourceOnceReady) {
  if (!h_->delivers_bytes()) GTEST_SKIP() << "models time only";
  const std::string uri =
      h_->WriteSource("all", {{"a", "alpha\n"}, {"b/c", "beta\n"}, {"d/e/f", "delta\n"}});
  ASSERT_TRUE(Deliver(Channel("all", uri)).ok());
  for (size_t i = 0; i < h_->instances.size(); ++i) {
    EXPECT_THAT(h_->Read(i, "all"), ElementsAre("alpha", "beta", "delta")) << "instance " << i;
  }
}

TEST_P(DataChannelConformanceTest, ShardedByS3KeySplitsTheObjectsExactly) {
  if (!h_->delivers_bytes() || !h_->shards()) GTEST_SKIP() << "does not shard";
  std::map<std::string, std::string> objects;
  std::vector<std::string> all;
  for (int k = 0; k < 8; ++k) {
    objects[absl::StrCat("part-", k)] = absl::StrCat("object-", k, "\n");
    all.push_back(absl::StrCat("object-", k));
  }
  ASSERT_TRUE(Deliver(Channel("sh", h_->WriteSource("sh", objects), "ShardedByS3Key")).ok());
  std::vector<std::string> seen;
  for (size_t i = 0; i < h_->instances.size(); ++i) {
    std::vector<std::string> part = h_->Read(i, "sh");
    EXPECT_FALSE(part.empty()) << "instance " << i;
    seen.insert(seen.end(), part.begin(), part.end());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, all);  // every object once: disjoint, and together all
}

TEST_P(DataChannelConformanceTest, EmptyPrefixFailsTheDeliveryNamingTheChannel) {
  if (!h_->delivers_bytes()) GTEST_SKIP() << "models time only";
  const std::string uri = h_->WriteSource("nothing", {});
  absl::Status s = Deliver(Channel("nothing", uri));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("channel 'nothing'"));
  EXPECT_THAT(s.message(), HasSubstr("No S3 objects found under S3 URL"));
  if (h_->checks_sources()) {
    EXPECT_TRUE(absl::IsInvalidArgument(h_->channel().CheckChannel(Channel("nothing", uri), h_->mode())));
  }
}

TEST_P(DataChannelConformanceTest, KeysThatEscapeTheChannelDirectoryAreRefused) {
  if (!h_->delivers_bytes()) GTEST_SKIP() << "models time only";
  const std::string uri = h_->WriteSource("esc", {{"m/ok", "ok\n"}});
  const std::string manifest = h_->WriteSource(
      "esc-manifest", {{"manifest.json", absl::StrCat("[{\"prefix\": \"", uri, "m/\"}, \"ok\", \"../../x\"]")}});
  absl::Status s = Deliver(Channel("esc", manifest + "manifest.json", "FullyReplicated", "ManifestFile"));
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

TEST_P(DataChannelConformanceTest, AugmentedManifestStreamsTheNamedAttributesInLineOrder) {
  if (!h_->delivers_bytes() || h_->mode() != "Pipe") {
    GTEST_SKIP() << "augmented manifests are streamed in Pipe mode";
  }
  const std::string uri = h_->WriteSource("aug", {{"a", "alpha\n"}, {"b", "beta\n"}});
  // Lines in the manifest's order (not the objects'), attributes in
  // AttributeNames order (not the line's); "note" is not asked for.
  const std::string manifest = h_->WriteSource(
      "aug-manifest",
      {{"train.manifest",
        absl::StrCat("{\"label\": \"second\\n\", \"doc-ref\": \"", uri, "b\", \"note\": 1}\n",
                     "{\"doc-ref\": \"", uri, "a\", \"label\": \"first\\n\"}\n")}});
  v1::Channel c = Channel("aug", manifest + "train.manifest", "FullyReplicated", "AugmentedManifestFile");
  c.mutable_data_source()->mutable_s3_data_source()->add_attribute_names("doc-ref");
  c.mutable_data_source()->mutable_s3_data_source()->add_attribute_names("label");
  absl::Status s = Deliver(c);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < h_->instances.size(); ++i) {
    EXPECT_THAT(h_->Read(i, "aug"), ElementsAre("beta", "second", "alpha", "first")) << "instance " << i;
  }
}

TEST_P(DataChannelConformanceTest, CheckChannelAcceptsAPrefixWithObjects) {
  const std::string uri = h_->WriteSource("check", {{"a", "alpha\n"}});
  EXPECT_TRUE(h_->channel().CheckChannel(Channel("check", uri), h_->mode()).ok());
}

TEST_P(DataChannelConformanceTest, EndJobIsHarmlessForUnknownJobsAndWhenRepeated) {
  h_->channel().EndJob("never-seen");
  const std::string uri = h_->WriteSource("end", {{"a", "alpha\n"}});
  ASSERT_TRUE(Deliver(Channel("end", uri)).ok());
  h_->channel().EndJob("conformance");
  h_->channel().EndJob("conformance");
  h_->RunALittle();  // nothing more happens, nothing breaks
}

TEST_P(DataChannelConformanceTest, DestroyingTheChannelWithADeliveryInFlightIsSafe) {
  const std::string uri = h_->WriteSource("gone", {{"a", "alpha\n"}, {"b", "beta\n"}});
  std::optional<absl::Status> result;
  int calls = 0;
  Start(Channel("gone", uri), result, calls);
  h_->DestroyChannel();
  // The callback may be dropped or run; the loop goes on either way.
  h_->RunALittle();
  EXPECT_LE(calls, 1);
  h_.reset();
}

INSTANTIATE_TEST_SUITE_P(
    AllImplementations, DataChannelConformanceTest,
    ::testing::Values(
        Implementation{"LocalFile", [] { return std::make_unique<LocalHarness>("File"); }},
        Implementation{"LocalFastFile", [] { return std::make_unique<LocalHarness>("FastFile"); }},
        // A FUSE view: needs /dev/fuse and root (fails without them).
        Implementation{"LocalFastFileRemote",
                       [] { return std::make_unique<LocalHarness>("FastFile", true); }},
        Implementation{"LocalPipe", [] { return std::make_unique<LocalHarness>("Pipe"); }},
        Implementation{"SimFile", [] { return std::make_unique<SimHarness>("File"); }},
        Implementation{"SimFastFile", [] { return std::make_unique<SimHarness>("FastFile"); }},
        Implementation{"SimPipe", [] { return std::make_unique<SimHarness>("Pipe"); }}),
    [](const ::testing::TestParamInfo<Implementation>& p) { return p.param.name; });

}  // namespace
}  // namespace kiln
