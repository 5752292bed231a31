// The ClusterProvider conformance suite: the contract of kiln/cluster_provider.h, run against
// every provider: the simulation backend's on a virtual loop, the local backend's on a real-time
// loop (process runtime, small shell entrypoints), and the tests' forwarding double.
//
// Every completion is checked to come later (never inline inside the call that started the
// work) and on the loop thread, and every ContainerEvents and ClusterListener call to come on
// the loop thread. A container's behaviour is one of a few kinds (Behavior below); each harness
// makes a job of that kind in its own terms (a SimJobBehavior, a shell script).
//
// A provider joins by writing a Harness (a loop, the provider, an image, a request per
// behaviour, and how to run the loop) and adding a line to the INSTANTIATE at the bottom.
#include <signal.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/cluster_provider.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/sim/sim.h"
#include "local/local_test_util.h"
#include "mocks/forwarding_provider.h"

namespace kiln {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// What the container of a job does on every instance.
enum class Behavior {
  kLogThenExit,    // writes the line "hello", then exits 0
  kFail,           // algo-1 writes "boom" to /opt/ml/output/failure and exits 3; others exit 0
  kRunUntilTerm,   // writes "ready", then runs until SIGTERM, then exits 0
  kIgnoreTerm,     // writes "ready", then runs, ignoring SIGTERM, until SIGKILL (exit 137)
};

// One provider under test.
class Harness {
 public:
  virtual ~Harness() = default;
  virtual EventLoop& loop() = 0;
  virtual ClusterProvider& provider() = 0;
  // An image PrepareImage accepts.
  virtual std::string image() = 0;
  // An image PrepareImage must refuse; empty when the provider accepts any image.
  virtual std::string bad_image() { return ""; }
  // A request for job `name` whose containers do `behavior`. Its S3OutputPath is output_path().
  virtual v1::CreateTrainingJobRequest Request(const std::string& name, Behavior behavior) = 0;
  virtual std::string output_path() = 0;
  // The notice a spot interruption is injected with: short on a real-time loop.
  virtual absl::Duration spot_notice() = 0;
  // A spec the provider has no capacity for right now (Provision: ResourceExhausted).
  virtual ClusterSpec SpecBeyondCapacity() = 0;
  // Runs the loop until `done()`; false after a generous timeout.
  virtual bool RunUntil(const std::function<bool()>& done) = 0;
  // Runs the loop for a while: long enough for a late or stray callback to show.
  virtual void RunALittle() = 0;
};

// The simulation backend, in virtual time.
class SimHarness : public Harness {
 public:
  SimHarness() {
    sim::SimClusterOptions options;
    options.behavior = [this](std::string_view job) {
      auto it = behaviors_.find(std::string(job));
      return it == behaviors_.end() ? sim::SimJobBehavior() : it->second;
    };
    provider_ = sim::NewSimClusterProvider(*loop_, std::move(options));
  }
  ~SimHarness() override { provider_.reset(); }

  EventLoop& loop() override { return *loop_; }
  ClusterProvider& provider() override { return *provider_; }
  std::string image() override { return "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"; }
  std::string output_path() override { return "s3://bucket/out"; }
  absl::Duration spot_notice() override { return absl::Minutes(2); }
  ClusterSpec SpecBeyondCapacity() override {
    sim::SimJobBehavior b;
    b.capacity_failures = 1;
    behaviors_["over-capacity"] = b;
    return ClusterSpec{"over-capacity", {{kHomogeneousGroupName, "ml.m5.large", 1}}};
  }

  v1::CreateTrainingJobRequest Request(const std::string& name, Behavior behavior) override {
    sim::SimJobBehavior b;
    b.run_duration = absl::Minutes(10);
    switch (behavior) {
      case Behavior::kLogThenExit:
        b.log_lines = {{absl::Seconds(1), "hello"}};
        break;
      case Behavior::kFail:
        b.exit_code = 3;
        b.failing_instance = 0;
        b.failure_text = "boom";
        break;
      case Behavior::kRunUntilTerm:
        b.run_duration = absl::Hours(1000);
        b.log_lines = {{absl::Seconds(1), "ready"}};
        break;
      case Behavior::kIgnoreTerm:
        b.run_duration = absl::Hours(1000);
        b.log_lines = {{absl::Seconds(1), "ready"}};
        b.sigterm_exit_delay = absl::InfiniteDuration();
        break;
    }
    behaviors_[name] = b;
    v1::CreateTrainingJobRequest r;
    r.set_training_job_name(name);
    r.mutable_algorithm_specification()->set_training_image(image());
    r.mutable_algorithm_specification()->set_training_input_mode("File");
    r.mutable_output_data_config()->set_s3_output_path(output_path());
    return r;
  }

  bool RunUntil(const std::function<bool()>& done) override {
    const absl::Time deadline = loop_->Now() + absl::Hours(24);
    while (!done()) {
      if (loop_->Now() >= deadline) return false;
      loop_->RunUntil(loop_->Now() + absl::Seconds(1));
    }
    return true;
  }
  void RunALittle() override { loop_->RunUntil(loop_->Now() + absl::Hours(1)); }

 protected:
  std::unique_ptr<EventLoop> loop_ = NewVirtualEventLoop();
  std::map<std::string, sim::SimJobBehavior> behaviors_;
  std::unique_ptr<sim::SimClusterProvider> provider_;
};

// The tests' forwarding double (tests/mocks/forwarding_provider.h) over the simulated provider.
class ForwardingHarness : public SimHarness {
 public:
  ClusterProvider& provider() override { return forwarding_; }
  // The double's own made-up failure, which must come later too.
  ClusterSpec SpecBeyondCapacity() override {
    forwarding_.FailProvisions(1, absl::ResourceExhaustedError("no capacity"));
    return ClusterSpec{"over-capacity", {{kHomogeneousGroupName, "ml.m5.large", 1}}};
  }

 private:
  ForwardingProvider forwarding_{*provider_, *loop_};
};

// The local backend: a real-time loop, the process runtime, shell entrypoints.
class LocalHarness : public Harness {
 public:
  LocalHarness() {
    using local::testing::WriteFile;
    image_dir_ = tmp_.path() + "/image";
    WriteFile(image_dir_ + "/log-then-exit.sh", "#!/bin/sh\necho hello\n", 0755);
    WriteFile(image_dir_ + "/fail.sh",
              "#!/bin/sh\n"
              "if [ \"$CURRENT_HOST\" = algo-1 ]; then\n"
              "  printf boom > \"$SAGEMAKER_BASE_DIR/output/failure\"\n"
              "  exit 3\n"
              "fi\n",
              0755);
    WriteFile(image_dir_ + "/run-until-term.sh",
              "#!/bin/sh\ntrap 'exit 0' TERM\necho ready\nwhile :; do sleep 1 & wait; done\n",
              0755);
    WriteFile(image_dir_ + "/ignore-term.sh",
              "#!/bin/sh\ntrap '' TERM\necho ready\nwhile :; do sleep 1; done\n", 0755);
    store_ = NewFileObjectStore();
    stores_.Register("file", store_.get());
    local::LocalOptions options;
    options.state_dir = tmp_.path() + "/state";
    options.object_stores = &stores_;
    options.runtime = local::LocalRuntime::kProcess;
    options.max_instances = kMaxInstances;
    auto provider = local::NewLocalClusterProvider(*loop_, std::move(options));
    EXPECT_TRUE(provider.ok()) << provider.status();
    if (provider.ok()) provider_ = *std::move(provider);
  }
  ~LocalHarness() override { provider_.reset(); }

  EventLoop& loop() override { return *loop_; }
  ClusterProvider& provider() override { return *provider_; }
  std::string image() override { return image_dir_; }
  std::string bad_image() override { return tmp_.path() + "/no-such-image"; }
  std::string output_path() override { return "file://" + tmp_.path() + "/out"; }
  absl::Duration spot_notice() override { return absl::Milliseconds(300); }
  ClusterSpec SpecBeyondCapacity() override {
    return ClusterSpec{"over-capacity", {{kHomogeneousGroupName, "ml.m5.large", kMaxInstances + 1}}};
  }

  v1::CreateTrainingJobRequest Request(const std::string& name, Behavior behavior) override {
    const char* script = "";
    switch (behavior) {
      case Behavior::kLogThenExit:
        script = "log-then-exit.sh";
        break;
      case Behavior::kFail:
        script = "fail.sh";
        break;
      case Behavior::kRunUntilTerm:
        script = "run-until-term.sh";
        break;
      case Behavior::kIgnoreTerm:
        script = "ignore-term.sh";
        break;
    }
    v1::CreateTrainingJobRequest r;
    r.set_training_job_name(name);
    r.set_role_arn("arn:aws:iam::000000000000:role/test");
    r.mutable_algorithm_specification()->set_training_input_mode("File");
    r.mutable_algorithm_specification()->add_container_entrypoint(
        absl::StrCat("/opt/program/", script));
    r.mutable_output_data_config()->set_s3_output_path(output_path());
    return r;
  }

  bool RunUntil(const std::function<bool()>& done) override {
    return local::testing::RunUntil(*loop_, done, absl::Seconds(30));
  }
  void RunALittle() override { loop_->RunUntil(loop_->Now() + absl::Milliseconds(300)); }

 private:
  static constexpr int kMaxInstances = 4;  // more than any test holds at once
  local::testing::TempDir tmp_;
  std::string image_dir_;
  std::unique_ptr<EventLoop> loop_ = NewRealTimeEventLoop();
  std::unique_ptr<ObjectStore> store_;
  ObjectStores stores_;
  std::unique_ptr<ClusterProvider> provider_;
};

struct Implementation {
  std::string name;
  std::function<std::unique_ptr<Harness>()> make;
};

void PrintTo(const Implementation& i, std::ostream* os) { *os << i.name; }

// Records container and cluster events, checking that each comes on the loop thread.
class Events : public ContainerEvents, public ClusterListener {
 public:
  void Attach(EventLoop& loop) { loop_ = &loop; }

  void OnLogLine(const Instance& instance, std::string_view line) override {
    EXPECT_TRUE(loop_->IsLoopThread()) << "OnLogLine off the loop thread";
    EXPECT_EQ(exits.count(instance.host_name), 0u)
        << instance.host_name << " logged '" << line << "' after its exit";
    lines[instance.host_name].emplace_back(line);
  }
  void OnExit(const Instance& instance, const ContainerExit& exit) override {
    EXPECT_TRUE(loop_->IsLoopThread()) << "OnExit off the loop thread";
    EXPECT_EQ(exits.count(instance.host_name), 0u) << instance.host_name << " exited twice";
    exits[instance.host_name] = exit;
  }
  void OnInterruptionNotice(const Cluster& cluster, const Instance& instance,
                            absl::Time deadline) override {
    EXPECT_TRUE(loop_->IsLoopThread()) << "OnInterruptionNotice off the loop thread";
    notices.emplace_back(instance.host_name, deadline);
  }
  void OnInstanceLost(const Cluster& cluster, const Instance& instance) override {
    EXPECT_TRUE(loop_->IsLoopThread()) << "OnInstanceLost off the loop thread";
    lost.push_back(instance.host_name);
  }

  bool Logged(const std::string& host, const std::string& line) const {
    auto it = lines.find(host);
    return it != lines.end() && std::find(it->second.begin(), it->second.end(), line) != it->second.end();
  }

  std::map<std::string, std::vector<std::string>> lines;
  std::map<std::string, ContainerExit> exits;
  std::vector<std::pair<std::string, absl::Time>> notices;
  std::vector<std::string> lost;

 private:
  EventLoop* loop_ = nullptr;
};

class ClusterProviderConformanceTest : public ::testing::TestWithParam<Implementation> {
 protected:
  void SetUp() override {
    h_ = GetParam().make();
    events_.Attach(loop());
    provider().SetListener(&events_);
  }
  void TearDown() override { h_.reset(); }

  EventLoop& loop() { return h_->loop(); }
  ClusterProvider& provider() { return h_->provider(); }

  // Runs `call` with a completion that must come later, on the loop thread, exactly once;
  // returns what it got (nullopt if it never came).
  template <class T, class Call>
  std::optional<T> Await(const Call& call) {
    std::optional<T> result;
    int calls = 0;
    bool returned = false;
    call([&](T value) {
      EXPECT_TRUE(returned) << "completion called inline";
      EXPECT_TRUE(loop().IsLoopThread()) << "completion off the loop thread";
      ++calls;
      result = std::move(value);
    });
    returned = true;
    if (!h_->RunUntil([&] { return result.has_value(); })) return std::nullopt;
    h_->RunALittle();
    EXPECT_EQ(calls, 1) << "completion not called exactly once";
    return result;
  }

  absl::StatusOr<Cluster> Provision(std::vector<InstanceGroupSpec> groups,
                                    const std::string& job = "job", bool spot = false) {
    ClusterSpec spec;
    spec.job_name = job;
    spec.groups = std::move(groups);
    spec.spot = spot;
    auto r = Await<absl::StatusOr<Cluster>>(
        [&](auto done) { provider().Provision(spec, std::move(done)); });
    return r ? *r : absl::DeadlineExceededError("Provision did not complete");
  }
  absl::StatusOr<Cluster> ProvisionOne(int count = 1, const std::string& job = "job") {
    return Provision({{kHomogeneousGroupName, "ml.m5.large", count}}, job);
  }

  absl::Status Prepare(const Cluster& cluster, const std::string& image) {
    auto r = Await<absl::Status>(
        [&](auto done) { provider().PrepareImage(cluster, image, std::move(done)); });
    return r ? *r : absl::DeadlineExceededError("PrepareImage did not complete");
  }

  // A job's context; its name, ARN and request are kept by the fixture.
  JobContext Job(const std::string& name, Behavior behavior, const Cluster& cluster) {
    auto [it, added] = requests_.insert_or_assign(name, h_->Request(name, behavior));
    const std::string& arn = arns_[name] =
        "arn:aws:sagemaker:us-east-1:000000000000:training-job/" + name;
    return JobContext{it->first, arn, it->second, cluster, 1};
  }

  absl::Status Start(const JobContext& job, ContainerEvents& events) {
    auto r = Await<absl::Status>(
        [&](auto done) { provider().StartContainers(job, events, std::move(done)); });
    return r ? *r : absl::DeadlineExceededError("StartContainers did not complete");
  }

  // Provisions `count` instances, prepares the image and starts a job of `behavior`.
  absl::StatusOr<Cluster> Running(Behavior behavior, int count, const std::string& name = "job") {
    absl::StatusOr<Cluster> cluster = ProvisionOne(count, name);
    if (!cluster.ok()) return cluster.status();
    if (absl::Status s = Prepare(*cluster, h_->image()); !s.ok()) return s;
    if (absl::Status s = Start(Job(name, behavior, *cluster), events_); !s.ok()) return s;
    return cluster;
  }

  bool AllLogged(const Cluster& cluster, const std::string& line) {
    return h_->RunUntil([&] {
      for (const Instance& i : cluster.instances) {
        if (!events_.Logged(i.host_name, line)) return false;
      }
      return true;
    });
  }
  bool AllExited(const Cluster& cluster) {
    return h_->RunUntil([&] { return events_.exits.size() >= cluster.instances.size(); });
  }

  std::unique_ptr<Harness> h_;
  Events events_;
  std::map<std::string, v1::CreateTrainingJobRequest> requests_;
  std::map<std::string, std::string> arns_;
};

TEST_P(ClusterProviderConformanceTest, ProvisionGivesTheInstancesOfEachGroupInOrder) {
  absl::StatusOr<Cluster> cluster =
      Provision({{"a", "ml.m5.large", 2}, {"b", "ml.c5.xlarge", 1}}, "groups");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_FALSE(cluster->id.empty());
  ASSERT_EQ(cluster->instances.size(), 3u);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"a", "ml.m5.large"}, {"a", "ml.m5.large"}, {"b", "ml.c5.xlarge"}};
  std::set<std::string> ids;
  for (size_t k = 0; k < 3; ++k) {
    const Instance& i = cluster->instances[k];
    EXPECT_EQ(i.host_name, absl::StrCat("algo-", k + 1));
    EXPECT_EQ(i.group_name, expected[k].first) << i.host_name;
    EXPECT_EQ(i.instance_type, expected[k].second) << i.host_name;
    EXPECT_FALSE(i.id.empty()) << i.host_name;
    ids.insert(i.id);
  }
  EXPECT_EQ(ids.size(), 3u) << "instance ids must be unique";
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, ProvisionBeyondCapacityIsResourceExhaustedLater) {
  const ClusterSpec spec = h_->SpecBeyondCapacity();
  auto result = Await<absl::StatusOr<Cluster>>(
      [&](auto done) { provider().Provision(spec, std::move(done)); });
  ASSERT_TRUE(result.has_value()) << "Provision did not complete";
  EXPECT_TRUE(absl::IsResourceExhausted(result->status())) << result->status();
}

TEST_P(ClusterProviderConformanceTest, SpotIsKeptAndClustersAndInstancesHaveIdsOfTheirOwn) {
  absl::StatusOr<Cluster> first = ProvisionOne(2, "first");
  absl::StatusOr<Cluster> second =
      Provision({{kHomogeneousGroupName, "ml.m5.large", 1}}, "second", /*spot=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(first->spot);
  EXPECT_TRUE(second->spot);
  EXPECT_NE(first->id, second->id);
  for (const Instance& i : first->instances) EXPECT_NE(i.id, second->instances[0].id);
  EXPECT_EQ(second->instances[0].host_name, "algo-1");
  provider().Release(*first);
  provider().Release(*second);
}

TEST_P(ClusterProviderConformanceTest, PrepareImageCompletesLaterOnTheLoopThread) {
  absl::StatusOr<Cluster> cluster = ProvisionOne(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_TRUE(Prepare(*cluster, h_->image()).ok());
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, AnImageThatCannotBeHadFailsPrepareImage) {
  if (h_->bad_image().empty()) GTEST_SKIP() << "this provider accepts any image";
  absl::StatusOr<Cluster> cluster = ProvisionOne();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_FALSE(Prepare(*cluster, h_->bad_image()).ok());
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, EveryContainerLogsThenExitsExactlyOnce) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kLogThenExit, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllExited(*cluster));
  h_->RunALittle();  // no second exit, no late line (Events checks)
  ASSERT_EQ(events_.exits.size(), 2u);
  for (const Instance& i : cluster->instances) {
    EXPECT_EQ(events_.exits[i.host_name].exit_code, 0) << i.host_name;
    EXPECT_EQ(events_.exits[i.host_name].failure_text, "") << i.host_name;
    EXPECT_THAT(events_.lines[i.host_name], ElementsAre("hello")) << i.host_name;
  }
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, AFailingContainerReportsItsExitCodeAndFailureText) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kFail, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllExited(*cluster));
  EXPECT_EQ(events_.exits["algo-1"].exit_code, 3);
  EXPECT_EQ(events_.exits["algo-1"].failure_text, "boom");
  EXPECT_EQ(events_.exits["algo-2"].exit_code, 0);
  EXPECT_EQ(events_.exits["algo-2"].failure_text, "");
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, SigtermEndsAContainerThatTrapsIt) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kRunUntilTerm, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllLogged(*cluster, "ready"));
  h_->RunALittle();
  EXPECT_THAT(events_.exits, IsEmpty()) << "a container ended before it was signalled";
  provider().Signal(*cluster, SIGTERM);
  ASSERT_TRUE(AllExited(*cluster));
  for (const Instance& i : cluster->instances) {
    EXPECT_EQ(events_.exits[i.host_name].exit_code, 0) << i.host_name;
  }
  provider().Signal(*cluster, SIGTERM);  // a no-op now: no second exit (Events checks)
  provider().Signal(*cluster, SIGKILL);
  h_->RunALittle();
  EXPECT_EQ(events_.exits.size(), 2u);
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, SigkillEndsAContainerThatIgnoresSigterm) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kIgnoreTerm, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllLogged(*cluster, "ready"));
  provider().Signal(*cluster, SIGTERM);
  h_->RunALittle();
  EXPECT_THAT(events_.exits, IsEmpty()) << "SIGTERM ended a container that ignores it";
  provider().Signal(*cluster, SIGKILL);
  ASSERT_TRUE(AllExited(*cluster));
  EXPECT_EQ(events_.exits["algo-1"].exit_code, 128 + SIGKILL);
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, AfterReleaseTheContainersEventsAreNeverCalled) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kRunUntilTerm, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllLogged(*cluster, "ready"));
  provider().Release(*cluster);
  const auto lines = events_.lines;
  const auto exits = events_.exits;
  h_->RunALittle();
  EXPECT_EQ(events_.lines, lines);
  EXPECT_EQ(events_.exits.size(), exits.size());
}

TEST_P(ClusterProviderConformanceTest, StartContainersOnAReleasedClusterFailsLater) {
  absl::StatusOr<Cluster> cluster = ProvisionOne();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(Prepare(*cluster, h_->image()).ok());
  provider().Release(*cluster);
  absl::Status started = Start(Job("released", Behavior::kLogThenExit, *cluster), events_);
  EXPECT_TRUE(absl::IsFailedPrecondition(started)) << started;
  h_->RunALittle();
  EXPECT_THAT(events_.exits, IsEmpty());
}

TEST_P(ClusterProviderConformanceTest, UploadArtifactsNamesTheModelUnderTheOutputPath) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kLogThenExit, 2, "upload");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllExited(*cluster));
  const JobContext job = Job("upload", Behavior::kLogThenExit, *cluster);
  auto result = Await<absl::StatusOr<ArtifactsResult>>(
      [&](auto done) { provider().UploadArtifacts(job, std::move(done)); });
  ASSERT_TRUE(result.has_value()) << "UploadArtifacts did not complete";
  ASSERT_TRUE(result->ok()) << result->status();
  EXPECT_EQ((*result)->model_uri, h_->output_path() + "/upload/output/model.tar.gz");
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, ARecycledClusterRunsTheNextJob) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kLogThenExit, 2, "first");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllExited(*cluster));
  const JobContext first = Job("first", Behavior::kLogThenExit, *cluster);
  auto uploaded = Await<absl::StatusOr<ArtifactsResult>>(
      [&](auto done) { provider().UploadArtifacts(first, std::move(done)); });
  ASSERT_TRUE(uploaded.has_value() && uploaded->ok());
  provider().Recycle(*cluster);
  ASSERT_TRUE(Prepare(*cluster, h_->image()).ok());
  Events second_events;
  second_events.Attach(loop());
  ASSERT_TRUE(Start(Job("second", Behavior::kFail, *cluster), second_events).ok());
  ASSERT_TRUE(h_->RunUntil([&] { return second_events.exits.size() >= 2; }));
  EXPECT_EQ(second_events.exits["algo-1"].exit_code, 3);
  EXPECT_EQ(second_events.exits["algo-1"].failure_text, "boom");
  EXPECT_EQ(events_.exits.size(), 2u) << "the first job's events heard of the second";
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, InjectingIntoAnUnknownInstanceIsNotFound) {
  absl::Status s = provider().InjectInterruption("no-such-instance",
                                                 InterruptionKind::kInstanceLoss, absl::Seconds(1));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
}

TEST_P(ClusterProviderConformanceTest, ALostInstanceIsReportedAndItsContainerNeverExits) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kRunUntilTerm, 2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllLogged(*cluster, "ready"));
  ASSERT_TRUE(provider()
                  .InjectInterruption(cluster->instances[0].id, InterruptionKind::kInstanceLoss,
                                      absl::ZeroDuration())
                  .ok());
  ASSERT_TRUE(h_->RunUntil([&] { return !events_.lost.empty(); }));
  EXPECT_THAT(events_.lost, ElementsAre("algo-1"));
  EXPECT_TRUE(events_.notices.empty());
  provider().Signal(*cluster, SIGTERM);
  ASSERT_TRUE(h_->RunUntil([&] { return events_.exits.count("algo-2") > 0; }));
  h_->RunALittle();
  EXPECT_EQ(events_.exits.count("algo-1"), 0u) << "the lost instance's container reported an exit";
  provider().Release(*cluster);
}

TEST_P(ClusterProviderConformanceTest, ASpotNoticeComesBeforeTheInstanceIsLost) {
  absl::StatusOr<Cluster> cluster = Running(Behavior::kRunUntilTerm, 1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(AllLogged(*cluster, "ready"));
  const absl::Time injected = loop().Now();
  ASSERT_TRUE(provider()
                  .InjectInterruption(cluster->instances[0].id, InterruptionKind::kSpotNotice,
                                      h_->spot_notice())
                  .ok());
  ASSERT_TRUE(h_->RunUntil([&] { return !events_.notices.empty(); }));
  EXPECT_TRUE(events_.lost.empty()) << "lost before its notice's deadline";
  EXPECT_EQ(events_.notices[0].first, "algo-1");
  EXPECT_GE(events_.notices[0].second, injected + h_->spot_notice());
  ASSERT_TRUE(h_->RunUntil([&] { return !events_.lost.empty(); }));
  EXPECT_GE(loop().Now(), events_.notices[0].second);
  EXPECT_THAT(events_.lost, ElementsAre("algo-1"));
  h_->RunALittle();
  EXPECT_THAT(events_.exits, IsEmpty());
  provider().Release(*cluster);
}

INSTANTIATE_TEST_SUITE_P(
    Providers, ClusterProviderConformanceTest,
    ::testing::Values(Implementation{"Sim", [] { return std::make_unique<SimHarness>(); }},
                      Implementation{"Local", [] { return std::make_unique<LocalHarness>(); }},
                      Implementation{"ForwardingDouble",
                                     [] { return std::make_unique<ForwardingHarness>(); }}),
    [](const ::testing::TestParamInfo<Implementation>& p) { return p.param.name; });

}  // namespace
}  // namespace kiln
