// A local provider running a part of a cluster that spans hosts
// (LocalClusterProviderInterface::ProvisionPart): here algo-2 and algo-3 of a
// heterogeneous cluster of three whose algo-1 runs on another host. Their
// containers are told of the whole cluster, and its names resolve to the
// part's addresses.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/event_loop.h"
#include "kiln/local/local.h"
#include "kiln/object_store.h"
#include "kiln/plugin/json_value.h"
#include "local/local_test_util.h"

namespace kiln::local {
namespace {

using ::kiln::JsonValue;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::Recorder;
using testing::RunUntil;
using testing::TempDir;
using testing::WriteFile;

constexpr char kArnPrefix[] = "arn:aws:sagemaker:us-east-1:000000000000:training-job/";
// algo-1's host: a documentation address (RFC 5737), never reached.
constexpr char kElsewhere[] = "192.0.2.10";

Instance Member(int k, const std::string& group, const std::string& type) {
  Instance i;
  i.host_name = absl::StrCat("algo-", k);
  i.group_name = group;
  i.instance_type = type;
  return i;
}

// algo-1 (group "lead", elsewhere), algo-2 and algo-3 (group "work", here).
ClusterPart ThreeHostPart() {
  ClusterPart part;
  part.instances = {Member(1, "lead", "ml.m5.large"), Member(2, "work", "ml.c5.xlarge"),
                    Member(3, "work", "ml.c5.xlarge")};
  part.addresses = {kElsewhere, "127.0.0.1", "127.0.0.1"};
  part.here = {"algo-2", "algo-3"};
  return part;
}

std::string ExpectedHostsFile() {
  return absl::StrCat("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                      kElsewhere, "\talgo-1\n127.0.0.1\talgo-2\n127.0.0.1\talgo-3\n");
}

v1::CreateTrainingJobRequest Request(const std::string& name, std::vector<std::string> entrypoint) {
  v1::CreateTrainingJobRequest r;
  r.set_training_job_name(name);
  r.set_role_arn("arn:aws:iam::000000000000:role/test");
  r.mutable_algorithm_specification()->set_training_input_mode("File");
  for (const std::string& e : entrypoint)
    r.mutable_algorithm_specification()->add_container_entrypoint(e);
  r.mutable_output_data_config()->set_s3_output_path("file:///unused");
  return r;
}

// Prints what the container was told of its cluster as one JSON line, and
// sends its host name to algo-2 at port $PEER_PORT, the address found in
// $KILN_HOSTS_FILE (a listener of the test's, on this host's network).
constexpr char kTellScript[] = R"(
import json, os, socket, subprocess, sys
env = {k: os.environ.get(k) for k in ["SM_HOSTS", "SM_CURRENT_HOST", "SM_CURRENT_INSTANCE_GROUP",
       "SM_CURRENT_INSTANCE_GROUP_HOSTS", "SM_INSTANCE_GROUPS", "SM_NETWORK_INTERFACE_NAME",
       "KILN_HOSTS_FILE"]}
out = {"env": env}
with open(os.path.join(os.environ["SM_INPUT_CONFIG_DIR"], "resourceconfig.json")) as f:
    out["resourceconfig"] = json.load(f)
with open(os.environ["KILN_HOSTS_FILE"]) as f:
    out["hosts_file"] = f.read()
names = {}
for line in out["hosts_file"].splitlines():
    fields = line.split()
    for name in fields[1:]:
        names.setdefault(name, fields[0])
if len(sys.argv) > 1 and sys.argv[1] == "getent":
    got = subprocess.run(["getent", "hosts", "algo-1"], capture_output=True, text=True)
    out["getent_algo_1"] = got.stdout.split()
    with open("/etc/hosts") as f:
        out["etc_hosts"] = f.read()
c = socket.create_connection((names["algo-2"], int(os.environ["PEER_PORT"])), timeout=10)
c.sendall(os.environ["SM_CURRENT_HOST"].encode())
c.close()
print("TOLD " + json.dumps(out), flush=True)
)";

class ClusterPartTest : public ::testing::TestWithParam<LocalRuntime> {
 protected:
  void SetUp() override {
    if (GetParam() == LocalRuntime::kBwrap && !testing::BwrapWorks()) {
      GTEST_SKIP() << testing::kNoBwrap;
    }
    ASSERT_FALSE(tmp_.path().empty());
    state_dir_ = tmp_.path() + "/state";
    image_dir_ = tmp_.path() + "/image";
    loop_ = NewRealTimeEventLoop();
    MakeProvider(LocalOptions());
  }

  void TearDown() override { provider_.reset(); }

  void MakeProvider(LocalOptions options) {
    provider_.reset();
    options.state_dir = state_dir_;
    options.runtime = GetParam();
    options.network_interface_name = "eth7";
    auto provider = NewLocalClusterProviderWithParts(*loop_, options);
    ASSERT_TRUE(provider.ok()) << provider.status();
    provider_ = *std::move(provider);
  }

  bool bwrap() const { return GetParam() == LocalRuntime::kBwrap; }

  void AddScript(const std::string& name, const std::string& body) {
    WriteFile(absl::StrCat(image_dir_, "/", name), absl::StrCat("#!/bin/sh\n", body), 0755);
  }

  absl::StatusOr<Cluster> ProvisionPart(const ClusterPart& part, ClusterSpec spec = {}) {
    spec.job_name = "job";
    std::optional<absl::StatusOr<Cluster>> result;
    provider_->ProvisionPart(spec, part, [&](absl::StatusOr<Cluster> c) { result = std::move(c); });
    if (!RunUntil(*loop_, [&] { return result.has_value(); })) {
      return absl::DeadlineExceededError("ProvisionPart did not complete");
    }
    return *result;
  }

  absl::StatusOr<Cluster> Provision(int count) {
    ClusterSpec spec;
    spec.job_name = "job";
    spec.groups = {{kHomogeneousGroupName, "ml.m5.large", count}};
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

  TempDir tmp_;
  std::string state_dir_;
  std::string image_dir_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<LocalClusterProviderInterface> provider_;
};

// A TCP listener on 127.0.0.1 of the test's own network; Take() returns what
// each connection sent, once `n` have.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd_, 8) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~Listener() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }
  // The text of every connection accepted so far (without waiting: the
  // containers have ended, their connections are queued).
  std::vector<std::string> Take() {
    std::vector<std::string> out;
    for (;;) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) break;
      std::string text;
      char buf[256];
      ssize_t n;
      while ((n = read(c, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
      close(c);
      out.push_back(text);
    }
    return out;
  }
  void NonBlocking() { fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// The JSON a container printed after "TOLD ", or null.
JsonValue Told(const Recorder& events, const std::string& host) {
  for (const Recorder::Line& l : events.lines) {
    if (l.host == host && absl::StartsWith(l.text, "TOLD ")) {
      absl::StatusOr<JsonValue> v = ParseJsonValue(l.text.substr(5));
      if (v.ok()) return *v;
    }
  }
  return JsonValue::Null();
}

std::string Str(const JsonValue& v, std::string_view key) {
  const JsonValue* m = v.is_object() ? v.Find(key) : nullptr;
  return m != nullptr && m->is_string() ? m->string_value() : "<none>";
}

TEST_P(ClusterPartTest, APartsContainersAreToldOfTheWholeClusterAndResolveItsNames) {
  WriteFile(image_dir_ + "/tell.py", kTellScript, 0755);
  absl::StatusOr<Cluster> cluster = ProvisionPart(ThreeHostPart());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Only the part's instances, with their host names, group and type.
  ASSERT_EQ(cluster->instances.size(), 2u);
  EXPECT_EQ(cluster->instances[0].host_name, "algo-2");
  EXPECT_EQ(cluster->instances[1].host_name, "algo-3");
  for (const Instance& i : cluster->instances) {
    EXPECT_EQ(i.group_name, "work");
    EXPECT_EQ(i.instance_type, "ml.c5.xlarge");
  }
  EXPECT_NE(cluster->instances[0].id, cluster->instances[1].id);
  ASSERT_TRUE(Prepare(*cluster).ok());

  Listener peer;
  ASSERT_GT(peer.port(), 0);
  peer.NonBlocking();
  std::vector<std::string> argv = {testing::Python(), "/opt/program/tell.py"};
  if (bwrap()) argv.push_back("getent");
  v1::CreateTrainingJobRequest r = Request("part-job", argv);
  (*r.mutable_environment())["PEER_PORT"] = absl::StrCat(peer.port());
  Recorder events;
  const absl::Status started = Start(r, *cluster, events);
  ASSERT_TRUE(started.ok()) << started << "\n" << events.AllLines();
  ASSERT_TRUE(RunUntil(
      *loop_, [&] { return events.exits.size() == 2; }, absl::Seconds(30)))
      << events.AllLines();
  for (const char* host : {"algo-2", "algo-3"}) {
    SCOPED_TRACE(host);
    EXPECT_EQ(events.exits[host].exit_code, 0) << events.AllLines();
    const JsonValue told = Told(events, host);
    ASSERT_TRUE(told.is_object()) << events.AllLines();
    const JsonValue& env = *told.Find("env");
    EXPECT_EQ(Str(env, "SM_HOSTS"), R"(["algo-1","algo-2","algo-3"])");
    EXPECT_EQ(Str(env, "SM_CURRENT_HOST"), host);
    EXPECT_EQ(Str(env, "SM_CURRENT_INSTANCE_GROUP"), "work");
    EXPECT_EQ(Str(env, "SM_CURRENT_INSTANCE_GROUP_HOSTS"), R"(["algo-2","algo-3"])");
    EXPECT_EQ(Str(env, "SM_INSTANCE_GROUPS"), R"(["lead","work"])");
    EXPECT_EQ(Str(env, "SM_NETWORK_INTERFACE_NAME"), "eth7");
    const JsonValue& rc = *told.Find("resourceconfig");
    EXPECT_EQ(WriteJson(*rc.Find("hosts")), R"(["algo-1","algo-2","algo-3"])");
    EXPECT_EQ(Str(rc, "current_host"), host);
    EXPECT_EQ(Str(rc, "current_group_name"), "work");
    EXPECT_EQ(Str(rc, "current_instance_type"), "ml.c5.xlarge");
    EXPECT_EQ(Str(rc, "network_interface_name"), "eth7");
    EXPECT_EQ(WriteJson(*rc.Find("instance_groups")),
              R"([{"instance_group_name":"lead","instance_type":"ml.m5.large",)"
              R"("hosts":["algo-1"]},{"instance_group_name":"work",)"
              R"("instance_type":"ml.c5.xlarge","hosts":["algo-2","algo-3"]}])");
    EXPECT_EQ(Str(told, "hosts_file"), ExpectedHostsFile());
    const std::string hosts_file = Str(env, "KILN_HOSTS_FILE");
    if (bwrap()) {
      EXPECT_EQ(hosts_file, "/opt/ml/input/config/hosts");
      EXPECT_EQ(Str(told, "etc_hosts"), ExpectedHostsFile());
      EXPECT_EQ(WriteJson(*told.Find("getent_algo_1")),
                absl::StrCat(R"([")", kElsewhere, R"(","algo-1"])"));
    } else {
      // The instance's tree on this host.
      EXPECT_TRUE(absl::StartsWith(hosts_file, "/") &&
                  absl::EndsWith(hosts_file, absl::StrCat("/", host, "/ml/input/config/hosts")))
          << hosts_file;
      EXPECT_EQ(ReadFile(hosts_file), ExpectedHostsFile());
    }
  }
  // Both reached the listener of this host's network through algo-2's
  // address: a part has no network of its own.
  std::vector<std::string> said = peer.Take();
  std::sort(said.begin(), said.end());
  EXPECT_THAT(said, ElementsAre("algo-2", "algo-3"));
  provider_->Release(*cluster);
}

TEST_P(ClusterPartTest, APartCountsOnlyItsOwnInstancesAgainstTheLimit) {
  LocalOptions options;
  options.max_instances = 3;
  MakeProvider(options);
  absl::StatusOr<Cluster> part = ProvisionPart(ThreeHostPart());
  ASSERT_TRUE(part.ok()) << part.status();
  absl::StatusOr<Cluster> one = Provision(1);
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<Cluster> more = Provision(1);
  EXPECT_TRUE(absl::IsResourceExhausted(more.status())) << more.status();
  provider_->Release(*part);
  more = Provision(2);
  EXPECT_TRUE(more.ok()) << more.status();
}

TEST_P(ClusterPartTest, AnOrdinaryClusterIsGivenNoHostsFileVariable) {
  AddScript("env.sh", "echo \"hosts file: <${KILN_HOSTS_FILE}>\"\necho \"hosts: $SM_HOSTS\"\n");
  absl::StatusOr<Cluster> cluster = Provision(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE(Prepare(*cluster).ok());
  Recorder events;
  ASSERT_TRUE(Start(Request("plain", {"/opt/program/env.sh"}), *cluster, events).ok());
  ASSERT_TRUE(RunUntil(
      *loop_, [&] { return events.exits.size() == 1; }, absl::Seconds(30)));
  EXPECT_TRUE(events.HasLine("algo-1", "hosts file: <>")) << events.AllLines();
  EXPECT_TRUE(events.HasLine("algo-1", R"(hosts: ["algo-1"])")) << events.AllLines();
}

TEST_P(ClusterPartTest, BadPartsAreRefusedNamingTheFieldAndTheRule) {
  struct Case {
    const char* what;
    std::function<void(ClusterPart&, ClusterSpec&)> spoil;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"no instances", [](ClusterPart& p, ClusterSpec&) { p.instances.clear(); },
       "ClusterPart.instances is empty"},
      {"an address short", [](ClusterPart& p, ClusterSpec&) { p.addresses.pop_back(); },
       "ClusterPart.addresses has 2 addresses for 3 instances"},
      {"a name twice", [](ClusterPart& p, ClusterSpec&) { p.instances[2].host_name = "algo-2"; },
       "ClusterPart.instances[2].host_name 'algo-2' must be 'algo-3'"},
      {"out of order",
       [](ClusterPart& p, ClusterSpec&) { std::swap(p.instances[0], p.instances[1]); },
       "ClusterPart.instances[0].host_name 'algo-2' must be 'algo-1'"},
      {"no group", [](ClusterPart& p, ClusterSpec&) { p.instances[1].group_name = ""; },
       "ClusterPart.instances[1] (algo-2) needs a group_name and an instance_type"},
      {"a host name for an address",
       [](ClusterPart& p, ClusterSpec&) { p.addresses[0] = "lead.example"; },
       "ClusterPart.addresses[0] 'lead.example' (algo-1) is not an IPv4 or IPv6 address"},
      {"an empty address", [](ClusterPart& p, ClusterSpec&) { p.addresses[2] = ""; },
       "ClusterPart.addresses[2] '' (algo-3) is not an IPv4 or IPv6 address"},
      {"nothing here", [](ClusterPart& p, ClusterSpec&) { p.here.clear(); },
       "ClusterPart.here is empty"},
      {"an unknown name here", [](ClusterPart& p, ClusterSpec&) { p.here.push_back("algo-4"); },
       "ClusterPart.here: 'algo-4' is not the host name of one of ClusterPart.instances"},
      {"a name here twice", [](ClusterPart& p, ClusterSpec&) { p.here.push_back("algo-3"); },
       "ClusterPart.here names 'algo-3' twice"},
      {"groups other than the spec's",
       [](ClusterPart&, ClusterSpec& s) {
         s.groups = {{"lead", "ml.m5.large", 2}, {"work", "ml.c5.xlarge", 1}};
       },
       "ClusterPart.instances[1] (algo-2) is of group 'work' (ml.c5.xlarge), where "
       "ClusterSpec.groups has group 'lead' (ml.m5.large)"},
      {"more instances than the spec's",
       [](ClusterPart&, ClusterSpec& s) {
         s.groups = {{"lead", "ml.m5.large", 1}, {"work", "ml.c5.xlarge", 1}};
       },
       "ClusterPart.instances has 3 instances, where ClusterSpec.groups asks for 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ClusterPart part = ThreeHostPart();
    ClusterSpec spec;
    c.spoil(part, spec);
    absl::StatusOr<Cluster> cluster = ProvisionPart(part, spec);
    EXPECT_TRUE(absl::IsInvalidArgument(cluster.status())) << cluster.status();
    EXPECT_THAT(cluster.status().message(), HasSubstr(c.says));
  }
  // Nothing was made, and nothing counts against a limit.
  EXPECT_THAT(testing::ListDir(state_dir_ + "/instances"), ElementsAre());
  // The spec's own groups, IPv6 addresses: fine.
  ClusterPart part = ThreeHostPart();
  part.addresses = {"2001:db8::1", "::1", "::1"};
  ClusterSpec spec;
  spec.groups = {{"lead", "ml.m5.large", 1}, {"work", "ml.c5.xlarge", 2}};
  absl::StatusOr<Cluster> cluster = ProvisionPart(part, spec);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
}

// A part's warm pool taken back by a provider made later on the state
// directory (Reattach, with a lease: the process runtime) still tells its
// containers of the whole cluster. The process that provisions it is a
// forked child killed with SIGKILL, as a crash would end it.
TEST(ClusterPartReattachTest, APartsWarmPoolTakenBackStillKnowsTheWholeCluster) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string state_dir = tmp.path() + "/state";
  const std::string image_dir = tmp.path() + "/image";
  const std::string cluster_file = tmp.path() + "/cluster";
  WriteFile(image_dir + "/tell.sh",
            "#!/bin/sh\necho \"job $TRAINING_JOB_NAME hosts $SM_HOSTS\"\n"
            "tr '\\t' ' ' < \"$KILN_HOSTS_FILE\"\n",
            0755);
  auto make_provider = [&](EventLoop& loop) {
    LocalOptions options;
    options.state_dir = state_dir;
    options.reattach_lease = absl::Seconds(30);
    auto provider = NewLocalClusterProviderWithParts(loop, options);
    EXPECT_TRUE(provider.ok()) << provider.status();
    return provider.ok() ? *std::move(provider) : nullptr;
  };
  const pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
    std::unique_ptr<LocalClusterProviderInterface> provider = make_provider(*loop);
    if (provider == nullptr) _exit(2);
    std::optional<absl::StatusOr<Cluster>> cluster;
    ClusterSpec spec;
    spec.job_name = "first";
    provider->ProvisionPart(spec, ThreeHostPart(),
                            [&](absl::StatusOr<Cluster> c) { cluster = std::move(c); });
    if (!RunUntil(*loop, [&] { return cluster.has_value(); }) || !cluster->ok()) _exit(3);
    std::optional<absl::Status> prepared;
    provider->PrepareImage(**cluster, image_dir, [&](absl::Status s) { prepared = s; });
    if (!RunUntil(*loop, [&] { return prepared.has_value(); }) || !prepared->ok()) _exit(4);
    Recorder events;
    const v1::CreateTrainingJobRequest request = Request("first", {"/opt/program/tell.sh"});
    const std::string arn = kArnPrefix + std::string("first");
    JobContext job{"first", arn, request, **cluster, 1};
    provider->StartContainers(job, events, [](absl::Status) {});
    if (!RunUntil(
            *loop, [&] { return events.exit_calls == 2; }, absl::Seconds(20)))
      _exit(5);
    provider->Recycle(**cluster);
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
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child failed at step " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  const std::vector<std::string> lines =
      absl::StrSplit(ReadFile(cluster_file), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  Cluster cluster;
  cluster.id = lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> parts = absl::StrSplit(lines[i], ' ');
    Instance inst = Member(static_cast<int>(i) + 1, "work", "ml.c5.xlarge");
    inst.id = parts.at(1);
    cluster.instances.push_back(inst);
  }

  std::unique_ptr<EventLoop> loop = NewRealTimeEventLoop();
  std::unique_ptr<LocalClusterProviderInterface> provider = make_provider(*loop);
  ASSERT_NE(provider, nullptr);
  Recorder unused;
  const v1::CreateTrainingJobRequest first = Request("first", {"/opt/program/tell.sh"});
  const std::string first_arn = kArnPrefix + std::string("first");
  JobContext pool{"first", first_arn, first, cluster, 1};
  pool.warm_pool = true;
  ASSERT_TRUE(provider->Reattach(pool, unused).ok());
  std::optional<absl::Status> prepared;
  provider->PrepareImage(cluster, image_dir, [&](absl::Status s) { prepared = s; });
  ASSERT_TRUE(RunUntil(*loop, [&] { return prepared.has_value(); }));
  ASSERT_TRUE(prepared->ok()) << *prepared;
  Recorder events;
  const v1::CreateTrainingJobRequest next = Request("next", {"/opt/program/tell.sh"});
  const std::string next_arn = kArnPrefix + std::string("next");
  JobContext job{"next", next_arn, next, cluster, 1};
  provider->StartContainers(job, events, [](absl::Status) {});
  ASSERT_TRUE(RunUntil(
      *loop, [&] { return events.exit_calls == 2; }, absl::Seconds(20)));
  for (const char* host : {"algo-2", "algo-3"}) {
    EXPECT_EQ(events.exits[host].exit_code, 0) << events.AllLines();
    EXPECT_TRUE(events.HasLine(host, R"(job next hosts ["algo-1","algo-2","algo-3"])"))
        << events.AllLines();
    EXPECT_TRUE(events.HasLine(host, absl::StrCat(kElsewhere, " algo-1"))) << events.AllLines();
    EXPECT_TRUE(events.HasLine(host, "127.0.0.1 algo-3")) << events.AllLines();
  }
  provider->Release(cluster);
}

INSTANTIATE_TEST_SUITE_P(Runtimes, ClusterPartTest,
                         ::testing::Values(LocalRuntime::kProcess, LocalRuntime::kBwrap),
                         testing::RuntimeName);

}  // namespace
}  // namespace kiln::local
