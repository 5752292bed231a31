// Untrusted jobs stay in their box: each test is an attack a job could try on
// the host that runs it, on both runtimes, with Kiln running as root (the
// case that matters: without root the job already has no more power than
// Kiln's own user, which docs/security.md describes). Every script prints
// what it managed; the test checks both what it printed and the host.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <list>
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
#include "kiln/object_store.h"
#include "local/internal/fs.h"
#include "local/local_test_util.h"

namespace kiln::local {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::ListDir;
using testing::ReadFile;
using testing::Recorder;
using testing::RunUntil;
using testing::WriteFile;

class SandboxTest : public ::testing::TestWithParam<LocalRuntime> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "these attacks matter when Kiln runs as root, and this test does not";
    }
    if (bwrap() && !testing::BwrapWorks()) {
      GTEST_SKIP() << testing::kNoBwrap;
    }
    // Outside /tmp, which bwrap covers anyway: the state directory is hidden
    // by a mount of its own, the one a job would try to take away.
    char pattern[] = "/var/tmp/kiln-sandbox-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    chmod(root_.c_str(), 0755);
    state_dir_ = root_ + "/state";
    image_dir_ = root_ + "/image";
    loop_ = NewRealTimeEventLoop();
    LocalOptions options;
    options.state_dir = state_dir_;
    options.runtime = GetParam();
    auto provider = NewLocalClusterProvider(*loop_, options);
    ASSERT_TRUE(provider.ok()) << provider.status();
    provider_ = *std::move(provider);
  }

  void TearDown() override {
    provider_.reset();
    if (!root_.empty()) internal::RemoveTree(root_).IgnoreError();
  }

  bool bwrap() const { return GetParam() == LocalRuntime::kBwrap; }

  void AddScript(const std::string& name, const std::string& body) {
    WriteFile(absl::StrCat(image_dir_, "/", name), absl::StrCat("#!/bin/sh\n", body), 0755);
  }

  absl::StatusOr<Cluster> Provision() {
    ClusterSpec spec;
    spec.job_name = "job";
    spec.groups = {{"homogeneousCluster", "ml.m5.large", 1}};
    std::optional<absl::StatusOr<Cluster>> result;
    provider_->Provision(spec, [&](absl::StatusOr<Cluster> c) { result = std::move(c); });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("Provision did not complete");
    }
    return *result;
  }

  absl::Status Prepare(const Cluster& cluster) {
    std::optional<absl::Status> result;
    provider_->PrepareImage(cluster, image_dir_, [&](absl::Status s) { result = s; });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("PrepareImage did not complete");
    }
    return *result;
  }

  // A cluster of one instance with the test image prepared.
  absl::StatusOr<Cluster> ReadyCluster() {
    absl::StatusOr<Cluster> cluster = Provision();
    if (!cluster.ok()) return cluster;
    if (absl::Status prepared = Prepare(*cluster); !prepared.ok()) return prepared;
    return cluster;
  }

  static v1::CreateTrainingJobRequest Request(const std::string& name,
                                              const std::string& entrypoint) {
    v1::CreateTrainingJobRequest r;
    r.set_training_job_name(name);
    r.set_role_arn("arn:aws:iam::000000000000:role/test");
    r.mutable_algorithm_specification()->set_training_input_mode("File");
    r.mutable_algorithm_specification()->add_container_entrypoint(entrypoint);
    r.mutable_output_data_config()->set_s3_output_path("file:///unused");
    return r;
  }

  // Runs `request` on `cluster` to its end; its output lines, joined.
  // `while_running` is called once the containers have started.
  std::string Run(const v1::CreateTrainingJobRequest& request, const Cluster& cluster,
                  const std::function<void(Recorder&)>& while_running = nullptr) {
    Recorder& events = recorders_.emplace_back();  // (the provider keeps it until the next run)
    JobContext job{request.training_job_name(), "arn:job", request, cluster, 1};
    std::optional<absl::Status> started;
    provider_->StartContainers(job, events, [&](absl::Status s) { started = s; });
    EXPECT_TRUE(RunUntil(*loop_, [&] { return started.has_value(); }));
    EXPECT_TRUE(started.has_value() && started->ok()) << (started ? *started : absl::OkStatus());
    if (while_running) while_running(events);
    EXPECT_TRUE(RunUntil(*loop_, [&] { return events.exit_calls > 0; }, absl::Seconds(30)))
        << events.AllLines();
    return events.AllLines();
  }

  std::string root_, state_dir_, image_dir_;
  std::unique_ptr<EventLoop> loop_;
  std::list<Recorder> recorders_;  // (before the provider: outlive it)
  std::unique_ptr<ClusterProvider> provider_;
};

// The container holds no capability, and under bwrap runs with no_new_privs
// and the seccomp filter.
TEST_P(SandboxTest, TheContainerHasNoCapabilities) {
  AddScript("status.sh", "grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status\n");
  auto cluster = ReadyCluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string out = Run(Request("caps", "/opt/program/status.sh"), *cluster);
  EXPECT_THAT(out, HasSubstr("CapEff:\t0000000000000000"));
  EXPECT_THAT(out, HasSubstr("CapPrm:\t0000000000000000"));
  if (bwrap()) {
    EXPECT_THAT(out, HasSubstr("NoNewPrivs:\t1"));
    EXPECT_THAT(out, HasSubstr("Seccomp:\t2"));
  }
}

// Remounting the host's root writable fails, and nothing lands on its disk.
TEST_P(SandboxTest, RemountingTheRootWritableFails) {
  const std::string probe = root_ + "/written-through-remount";
  AddScript("remount.sh", absl::StrCat("mount -o remount,rw / 2>/dev/null && echo remounted\n",
                                       "mount -o remount,rw,bind / 2>/dev/null && echo rebound\n",
                                       "touch '", probe, "' 2>/dev/null && echo wrote\n",
                                       "echo done\n"));
  auto cluster = ReadyCluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string out = Run(Request("remount", "/opt/program/remount.sh"), *cluster);
  EXPECT_THAT(out, HasSubstr("done"));
  EXPECT_THAT(out, Not(HasSubstr("remounted")));
  EXPECT_THAT(out, Not(HasSubstr("rebound")));
  EXPECT_THAT(out, Not(HasSubstr("wrote")));
  EXPECT_FALSE(internal::Exists(probe));
}

// A bwrap container cannot take away the mount that hides the state
// directory, nor read what is below it (another job's files); nor can it make
// namespaces of its own to mount in.
TEST_P(SandboxTest, TheStateDirectoryStaysHidden) {
  if (!bwrap()) GTEST_SKIP() << "the process runtime hides nothing (docs/security.md)";
  WriteFile(state_dir_ + "/other-job-secret", "other job's model\n");
  AddScript("peek.sh", absl::StrCat("umount '", state_dir_, "' 2>/dev/null && echo unmounted\n",
                                    "umount -l '", state_dir_, "' 2>/dev/null && echo detached\n",
                                    "unshare -Urm true 2>/dev/null && echo unshared\n",
                                    "cat '", state_dir_, "/other-job-secret' 2>/dev/null\n",
                                    "ls '", state_dir_, "/instances' 2>/dev/null | grep . "
                                    "&& echo listed\n",
                                    "echo done\n"));
  auto cluster = ReadyCluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string out = Run(Request("peek", "/opt/program/peek.sh"), *cluster);
  EXPECT_THAT(out, HasSubstr("done"));
  EXPECT_THAT(out, Not(HasSubstr("unmounted")));
  EXPECT_THAT(out, Not(HasSubstr("detached")));
  EXPECT_THAT(out, Not(HasSubstr("unshared")));
  EXPECT_THAT(out, Not(HasSubstr("other job's model")));
  EXPECT_THAT(out, Not(HasSubstr("listed")));
}

// A file only root may read (a key, credentials) stays unread: the container
// user is not the host's root.
TEST_P(SandboxTest, AFileOnlyRootMayReadStaysUnread) {
  const std::string secret = root_ + "/credentials";
  WriteFile(secret, "aws_secret_access_key=hunter2\n", 0600);
  AddScript("read.sh", absl::StrCat("cat '", secret, "' 2>&1\necho done\n"));
  auto cluster = ReadyCluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string out = Run(Request("read", "/opt/program/read.sh"), *cluster);
  EXPECT_THAT(out, HasSubstr("done"));
  EXPECT_THAT(out, Not(HasSubstr("hunter2")));
}

// A job cannot change the image the instance's next job runs: neither by
// writing the program, nor by remounting it writable, nor by replacing it.
TEST_P(SandboxTest, AJobCannotPoisonTheImageOfTheNextJob) {
  AddScript("victim.sh", "echo clean\n");
  AddScript("poison.sh",
            "dir=$(dirname \"$0\")\n"
            "mount -o remount,rw,bind \"$dir\" 2>/dev/null && echo remounted\n"
            "echo 'echo POISONED' >> \"$dir/victim.sh\" 2>/dev/null && echo appended\n"
            "chmod u+w \"$dir/victim.sh\" 2>/dev/null && echo chmodded\n"
            "rm -f \"$dir/victim.sh\" 2>/dev/null && echo removed\n"
            "printf '#!/bin/sh\\necho POISONED\\n' > \"$dir/victim.sh\" 2>/dev/null && echo replaced\n"
            "echo done\n");
  auto cluster = ReadyCluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string attack = Run(Request("poison", "/opt/program/poison.sh"), *cluster);
  EXPECT_THAT(attack, HasSubstr("done"));
  for (const char* step : {"remounted", "appended", "chmodded", "removed", "replaced"}) {
    EXPECT_THAT(attack, Not(HasSubstr(step))) << step;
  }
  // The warm instance's next job, on the same cached image.
  provider_->Recycle(*cluster);
  ASSERT_TRUE(Prepare(*cluster).ok());
  const std::string next = Run(Request("next", "/opt/program/victim.sh"), *cluster);
  EXPECT_THAT(next, HasSubstr("clean"));
  EXPECT_THAT(next, Not(HasSubstr("POISONED")));
}

// Under bwrap, the job's Environment reaches the entrypoint only: bubblewrap
// itself (root's process, in the host's namespaces) starts with an empty
// environment, and no variable shows in its command line, so LD_PRELOAD
// cannot load a library into it.
TEST_P(SandboxTest, TheJobsEnvironmentNeverReachesBubblewrap) {
  if (!bwrap()) GTEST_SKIP() << "the process runtime starts the keeper, a static program";
  AddScript("env.sh", "echo \"token=$TOKEN\"\nsleep 30\n");
  auto cluster = ReadyCluster();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  v1::CreateTrainingJobRequest r = Request("env", "/opt/program/env.sh");
  (*r.mutable_environment())["LD_PRELOAD"] = "/nonexistent/kiln-evil.so";
  (*r.mutable_environment())["TOKEN"] = "s3cr3t-token";
  std::vector<std::string> bwrap_envs, bwrap_cmdlines;
  const std::string out = Run(r, *cluster, [&](Recorder& events) {
    EXPECT_TRUE(RunUntil(*loop_, [&] { return absl::StrContains(events.AllLines(), "token="); }));
    // bubblewrap: this process's children whose program is bwrap.
    const std::string me = absl::StrCat(getpid());
    for (const std::string& pid : ListDir("/proc")) {
      const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
      const size_t close = stat.rfind(')');
      if (close == std::string::npos || stat.find("(bwrap)") == std::string::npos) continue;
      std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
      if (fields.size() < 2 || fields[1] != me) continue;
      bwrap_envs.push_back(ReadFile(absl::StrCat("/proc/", pid, "/environ")));
      bwrap_cmdlines.push_back(ReadFile(absl::StrCat("/proc/", pid, "/cmdline")));
    }
    provider_->Signal(*cluster, SIGKILL);
  });
  EXPECT_THAT(out, HasSubstr("token=s3cr3t-token"));
  ASSERT_EQ(bwrap_envs.size(), 1u) << "bubblewrap processes of this test";
  EXPECT_EQ(bwrap_envs[0], "");
  EXPECT_THAT(bwrap_cmdlines[0], Not(HasSubstr("s3cr3t")));
  EXPECT_THAT(bwrap_cmdlines[0], Not(HasSubstr("LD_PRELOAD")));
}

// A provider that runs containers as a user who cannot reach its state
// directory says so when it is made, naming the directory in the way.
TEST_P(SandboxTest, AStateDirectoryTheContainerUserCannotReachIsRefused) {
  const std::string closed = root_ + "/closed";
  ASSERT_TRUE(MakeDirs(closed + "/state").ok());
  chmod(closed.c_str(), 0700);
  LocalOptions options;
  options.state_dir = closed + "/state";
  options.runtime = GetParam();
  auto provider = NewLocalClusterProvider(*loop_, options);
  ASSERT_FALSE(provider.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(provider.status())) << provider.status();
  EXPECT_THAT(provider.status().message(),
              HasSubstr(absl::StrCat("'", closed, "' is not searchable by uid 65534")));
  // Root by choice: no such need (and under bwrap no capabilities either).
  options.container_user = ContainerUser{0, 0};
  provider = NewLocalClusterProvider(*loop_, options);
  EXPECT_TRUE(provider.ok()) << provider.status();
}

INSTANTIATE_TEST_SUITE_P(Runtimes, SandboxTest,
                         ::testing::Values(LocalRuntime::kProcess, LocalRuntime::kBwrap),
                         testing::RuntimeName);

}  // namespace
}  // namespace kiln::local
