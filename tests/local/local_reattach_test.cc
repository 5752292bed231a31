// The local provider's containers outliving the process that started them
// (LocalOptions::reattach_lease), and a provider made later on the state
// directory taking them back (Reattach). The process that starts a run is a
// forked child killed with SIGKILL, as a crash would end it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "local/local_test_util.h"

namespace kiln::local {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::Recorder;
using testing::RunUntil;
using testing::TempDir;
using testing::WriteFile;

constexpr char kArn[] = "arn:aws:sagemaker:us-east-1:000000000000:training-job/job";

class LocalReattachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    state_dir_ = tmp_.path() + "/state";
    image_dir_ = tmp_.path() + "/image";
  }

  std::unique_ptr<ClusterProvider> MakeProvider(EventLoop& loop, absl::Duration lease) {
    LocalOptions options;
    options.state_dir = state_dir_;
    options.reattach_lease = lease;
    auto provider = NewLocalClusterProvider(loop, options);
    EXPECT_TRUE(provider.ok()) << provider.status();
    return provider.ok() ? *std::move(provider) : nullptr;
  }

  void AddScript(const std::string& name, const std::string& body) {
    WriteFile(absl::StrCat(image_dir_, "/", name), absl::StrCat("#!/bin/sh\n", body), 0755);
  }

  static v1::CreateTrainingJobRequest Request(const std::string& program) {
    v1::CreateTrainingJobRequest r;
    r.set_training_job_name("job");
    r.set_role_arn("arn:aws:iam::000000000000:role/test");
    r.mutable_algorithm_specification()->set_training_input_mode("File");
    r.mutable_algorithm_specification()->add_container_entrypoint("/opt/program/" + program);
    r.mutable_output_data_config()->set_s3_output_path("file:///unused");
    return r;
  }

  // In a forked child: a provider with `lease` starts `program` on a cluster
  // of `hosts` instances, waits until `ready` says so about the lines it has
  // seen, writes the cluster to <tmp>/cluster, and is killed (SIGKILL).
  // Returns the cluster as the child held it, or nullopt (with a failure).
  // `then`, when given, runs after `ready` in the child (false: a failure).
  std::optional<Cluster> StartAndCrash(
      const std::string& program, int hosts, absl::Duration lease,
      const std::function<bool(const Recorder&)>& ready,
      const std::function<bool(EventLoop&, ClusterProvider&, const Cluster&, Recorder&)>& then =
          nullptr) {
    const std::string cluster_file = tmp_.path() + "/cluster";
    const pid_t child = fork();
    if (child == 0) {
      std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
      std::unique_ptr<ClusterProvider> provider = MakeProvider(*loop, lease);
      if (provider == nullptr) _exit(2);
      std::optional<absl::StatusOr<Cluster>> cluster;
      ClusterSpec spec;
      spec.job_name = "job";
      spec.groups = {{kHomogeneousGroupName, "ml.m5.large", hosts}};
      provider->Provision(spec, [&](absl::StatusOr<Cluster> c) { cluster = std::move(c); });
      if (!RunUntil(*loop, [&] { return cluster.has_value(); }) || !cluster->ok()) _exit(3);
      std::optional<absl::Status> prepared;
      provider->PrepareImage(**cluster, image_dir_, [&](absl::Status s) { prepared = s; });
      if (!RunUntil(*loop, [&] { return prepared.has_value(); }) || !prepared->ok()) _exit(4);
      Recorder events;
      std::optional<absl::Status> started;
      const v1::CreateTrainingJobRequest request = Request(program);
      JobContext job{"job", kArn, request, **cluster, 1};
      provider->StartContainers(job, events, [&](absl::Status s) { started = s; });
      if (!RunUntil(
              *loop, [&] { return started.has_value() && ready(events); }, absl::Seconds(20)) ||
          !started->ok()) {
        _exit(5);
      }
      if (then && !then(*loop, *provider, **cluster, events)) _exit(7);
      std::string text = (*cluster)->id + "\n";
      for (const Instance& i : (*cluster)->instances) {
        absl::StrAppend(&text, i.host_name, " ", i.id, "\n");
      }
      WriteFile(cluster_file, text);
      kill(getpid(), SIGKILL);
      _exit(6);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      ADD_FAILURE() << "the child that starts the run failed at step "
                    << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      return std::nullopt;
    }
    const std::vector<std::string> lines =
        absl::StrSplit(ReadFile(cluster_file), '\n', absl::SkipEmpty());
    Cluster c;
    c.id = lines.at(0);
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::vector<std::string> parts = absl::StrSplit(lines[i], ' ');
      Instance inst;
      inst.host_name = parts.at(0);
      inst.id = parts.at(1);
      inst.group_name = kHomogeneousGroupName;
      inst.instance_type = "ml.m5.large";
      c.instances.push_back(inst);
    }
    return c;
  }

  // The contents of every log stream of the job, one after the other.
  std::string LogStreams() {
    std::string all;
    const std::string dir = state_dir_ + "/logs/job";
    for (const std::string& name : testing::ListDir(dir)) {
      absl::StrAppend(&all, ReadFile(dir + "/" + name));
    }
    return all;
  }

  testing::TempDir tmp_;
  std::string state_dir_;
  std::string image_dir_;
};

TEST_F(LocalReattachTest, ARunOutlivesACrashAndIsTakenBackWithEveryLineOnce) {
  AddScript("count.sh",
            "i=1; while [ $i -le 40 ]; do echo \"line $i\"; sleep 0.05; i=$((i+1)); done\n"
            "exit 7\n");
  std::optional<Cluster> cluster =
      StartAndCrash("count.sh", 2, absl::Seconds(30), [](const Recorder& r) {
        return r.HasLine("algo-1", "line 5") && r.HasLine("algo-2", "line 5");
      });
  ASSERT_TRUE(cluster.has_value());
  // No process holds the run for a while: the output waits.
  absl::SleepFor(absl::Milliseconds(500));

  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::unique_ptr<ClusterProvider> provider = MakeProvider(*loop, absl::Seconds(30));
  ASSERT_NE(provider, nullptr);
  Recorder events;
  const v1::CreateTrainingJobRequest request = Request("count.sh");
  JobContext job{"job", kArn, request, *cluster, 1};
  ASSERT_TRUE(provider->Reattach(job, events).ok());
  ASSERT_TRUE(RunUntil(
      *loop, [&] { return events.exit_calls == 2; }, absl::Seconds(20)))
      << events.AllLines();
  EXPECT_EQ(events.exits["algo-1"].exit_code, 7);
  EXPECT_EQ(events.exits["algo-2"].exit_code, 7);
  EXPECT_TRUE(events.HasLine("algo-1", "line 40")) << events.AllLines();
  // Each line is in its stream once (two streams), the run's first ones
  // included.
  const std::string streams = LogStreams();
  std::map<std::string, int> counts;
  for (absl::string_view line : absl::StrSplit(streams, '\n')) ++counts[std::string(line)];
  for (int i = 1; i <= 40; ++i) {
    EXPECT_EQ(counts[absl::StrCat("line ", i)], 2) << "line " << i << " in\n" << streams;
  }
  EXPECT_THAT(streams, HasSubstr("algo-1: taken back by process"));
  EXPECT_THAT(streams, HasSubstr("algo-1 exited with 7"));
  provider->Release(*cluster);
}

TEST_F(LocalReattachTest, ARunThatEndsWhileNoProcessHoldsItIsReportedWhole) {
  AddScript("quick.sh",
            "echo first; sleep 0.5\n"
            "i=1; while [ $i -le 200 ]; do echo \"after $i\"; i=$((i+1)); done\n"
            "exit 3\n");
  std::optional<Cluster> cluster =
      StartAndCrash("quick.sh", 1, absl::Seconds(30),
                    [](const Recorder& r) { return r.HasLine("algo-1", "first"); });
  ASSERT_TRUE(cluster.has_value());
  absl::SleepFor(absl::Seconds(1));  // it has ended meanwhile

  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::unique_ptr<ClusterProvider> provider = MakeProvider(*loop, absl::Seconds(30));
  ASSERT_NE(provider, nullptr);
  Recorder events;
  const v1::CreateTrainingJobRequest request = Request("quick.sh");
  JobContext job{"job", kArn, request, *cluster, 1};
  ASSERT_TRUE(provider->Reattach(job, events).ok());
  ASSERT_TRUE(RunUntil(
      *loop, [&] { return events.exit_calls == 1; }, absl::Seconds(20)));
  EXPECT_EQ(events.exits["algo-1"].exit_code, 3);
  EXPECT_EQ(events.lines.size(), 200u) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-1", "after 200"));
  provider->Release(*cluster);
}

TEST_F(LocalReattachTest, ALeaseThatRunsOutEndsTheContainerAndItsCluster) {
  AddScript("sleep.sh", "echo $$ > \"$SM_MODEL_DIR/pid\"; echo started; exec sleep 300\n");
  std::optional<Cluster> cluster =
      StartAndCrash("sleep.sh", 1, absl::Seconds(1),
                    [](const Recorder& r) { return r.HasLine("algo-1", "started"); });
  ASSERT_TRUE(cluster.has_value());
  const std::string pid_file =
      absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id, "/ml/model/pid");
  const int pid = std::atoi(ReadFile(pid_file).c_str());
  ASSERT_GT(pid, 0);
  const auto alive = [&] {
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    return !stat.empty() && !absl::StrContains(stat, ") Z");
  };
  EXPECT_TRUE(alive()) << "the container ended with the process that started it";
  // The keeper looks at its lease every second.
  for (int i = 0; i < 50 && alive(); ++i) absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(alive()) << "the container outlived its lease";

  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::unique_ptr<ClusterProvider> provider = MakeProvider(*loop, absl::Seconds(1));
  ASSERT_NE(provider, nullptr);
  Recorder events;
  const v1::CreateTrainingJobRequest request = Request("sleep.sh");
  JobContext job{"job", kArn, request, *cluster, 1};
  const absl::Status s = provider->Reattach(job, events);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(cluster->id));
  // What the crashed process left is deleted.
  EXPECT_TRUE(RunUntil(
      *loop, [&] { return testing::ListDir(state_dir_ + "/instances").empty(); },
      absl::Seconds(5)));
}

TEST_F(LocalReattachTest, ARunWhoseClusterIsDeletedEndsWithoutWaitingForItsLease) {
  AddScript("sleep.sh", "echo $$ > \"$SM_MODEL_DIR/pid\"; echo started; exec sleep 300\n");
  std::optional<Cluster> cluster =
      StartAndCrash("sleep.sh", 1, absl::Seconds(60),
                    [](const Recorder& r) { return r.HasLine("algo-1", "started"); });
  ASSERT_TRUE(cluster.has_value());
  const std::string pid_file =
      absl::StrCat(state_dir_, "/instances/", cluster->instances[0].id, "/ml/model/pid");
  const int pid = std::atoi(ReadFile(pid_file).c_str());
  ASSERT_GT(pid, 0);
  const auto alive = [&] {
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    return !stat.empty() && !absl::StrContains(stat, ") Z");
  };
  ASSERT_TRUE(alive());
  // As a provider does with a cluster it cannot take back (a run whose
  // record was never written): the cluster's files go.
  ASSERT_EQ(
      unlink(absl::StrCat(state_dir_, "/instances/", cluster->id, "/runs/algo-1/lease").c_str()),
      0);
  for (int i = 0; i < 40 && alive(); ++i) absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(alive()) << "the container waited for its 60 s lease";
}

TEST_F(LocalReattachTest, AWarmPoolsClusterIsTakenBackAndRunsTheNextJob) {
  AddScript("quick.sh", "echo \"run of $TRAINING_JOB_NAME\"\n");
  // The first job ends; its cluster is kept for a warm pool (Recycle); then
  // the process dies.
  std::optional<Cluster> cluster = StartAndCrash(
      "quick.sh", 1, absl::Seconds(30), [](const Recorder&) { return true; },
      [](EventLoop& loop, ClusterProvider& provider, const Cluster& c, Recorder& events) {
        if (!RunUntil(
                loop, [&] { return events.exit_calls == 1; }, absl::Seconds(20))) {
          return false;
        }
        provider.Recycle(c);
        return true;
      });
  ASSERT_TRUE(cluster.has_value());

  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::unique_ptr<ClusterProvider> provider = MakeProvider(*loop, absl::Seconds(30));
  ASSERT_NE(provider, nullptr);
  Recorder unused;
  const v1::CreateTrainingJobRequest first = Request("quick.sh");
  JobContext pool{"job", kArn, first, *cluster, 1};
  pool.warm_pool = true;
  ASSERT_TRUE(provider->Reattach(pool, unused).ok());
  // The next job runs on it.
  std::optional<absl::Status> prepared;
  provider->PrepareImage(*cluster, image_dir_, [&](absl::Status s) { prepared = s; });
  ASSERT_TRUE(RunUntil(*loop, [&] { return prepared.has_value(); }));
  ASSERT_TRUE(prepared->ok()) << *prepared;
  Recorder events;
  v1::CreateTrainingJobRequest next = Request("quick.sh");
  next.set_training_job_name("next");
  JobContext job{"next", kArn, next, *cluster, 1};
  std::optional<absl::Status> started;
  provider->StartContainers(job, events, [&](absl::Status s) { started = s; });
  ASSERT_TRUE(RunUntil(
      *loop, [&] { return events.exit_calls == 1; }, absl::Seconds(20)));
  EXPECT_TRUE(started.has_value() && started->ok());
  EXPECT_EQ(events.exits["algo-1"].exit_code, 0);
  EXPECT_TRUE(events.HasLine("algo-1", "run of next")) << events.AllLines();
  EXPECT_EQ(unused.exit_calls, 0);
  provider->Release(*cluster);
}

TEST_F(LocalReattachTest, WithoutALeaseNothingIsTakenBack) {
  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::unique_ptr<ClusterProvider> provider = MakeProvider(*loop, absl::ZeroDuration());
  ASSERT_NE(provider, nullptr);
  Recorder events;
  const v1::CreateTrainingJobRequest request = Request("none.sh");
  Cluster cluster;
  cluster.id = "cluster-1-1";
  JobContext job{"job", kArn, request, cluster, 1};
  const absl::Status s = provider->Reattach(job, events);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("reattach_lease"));
}

}  // namespace
}  // namespace kiln::local
