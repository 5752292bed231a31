// The hub and the agent over real gRPC with TLS on loopback
// (kiln/agent/hub.h, kiln/agent/agent.h): joining with a token, sessions over
// mutual TLS, what the hub refuses, hosts that restart or fall silent.
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/agent.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/agent/agent.h"
#include "kiln/agent/host.h"
#include "kiln/agent/hub.h"
#include "kiln/agent/pki.h"

namespace kiln::agent {
namespace {

using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kiln-session-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Records what the hub tells its listener.
class Recorder : public HubListener {
 public:
  void OnHostConnected(const HostStatus& host) override {
    absl::MutexLock lock(&mu_);
    connected_.push_back(host.name);
  }
  void OnHostLost(const HostStatus& host) override {
    absl::MutexLock lock(&mu_);
    lost_.push_back(host.name);
    lost_at_ = absl::Now();
  }
  std::vector<std::string> connected() {
    absl::MutexLock lock(&mu_);
    return connected_;
  }
  // Waits for a loss; the time it was told, or InfinitePast after `timeout`.
  absl::Time WaitLost(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto any = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !lost_.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&any), timeout)) return absl::InfinitePast();
    return lost_at_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> connected_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> lost_ ABSL_GUARDED_BY(mu_);
  absl::Time lost_at_ ABSL_GUARDED_BY(mu_);
};

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pki = OpenOrCreatePki(dir_.path() + "/pki", {"127.0.0.1", "localhost"});
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    StartHub(0);
  }

  void StartHub(int port) {
    HubOptions options;
    options.listen = absl::StrCat("127.0.0.1:", port);
    options.pki = pki_.get();
    options.heartbeat_interval = absl::Milliseconds(100);
    options.silence_timeout = absl::Milliseconds(600);
    options.listener = &recorder_;
    auto hub = Hub::Start(options);
    ASSERT_TRUE(hub.ok()) << hub.status();
    hub_ = *std::move(hub);
  }

  AgentOptions AgentFor(const std::string& host, const std::string& token) {
    AgentOptions options;
    options.controller = absl::StrCat("127.0.0.1:", hub_->port());
    options.ca_pem = pki_->ca_cert_pem();
    options.token = token;
    options.state_dir = absl::StrCat(dir_.path(), "/", host);
    options.host_name = host;
    options.max_redial_delay = absl::Milliseconds(200);
    return options;
  }

  std::string Token() {
    auto token = pki_->CreateJoinToken(absl::Minutes(5));
    EXPECT_TRUE(token.ok()) << token.status();
    return token.value_or("");
  }

  // The hub's view of `name`, waiting up to 10 s for `state`.
  HostStatus WaitForHost(const std::string& name, HostState state) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    HostStatus last;
    while (absl::Now() < deadline) {
      for (const HostStatus& h : hub_->Hosts()) {
        if (h.name == name) last = h;
      }
      if (last.name == name && last.state == state) return last;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << name << " never became " << HostStateName(state);
    return last;
  }

  TempDir dir_;
  std::unique_ptr<Pki> pki_;
  Recorder recorder_;
  std::unique_ptr<Hub> hub_;
};

TEST_F(SessionTest, AHostJoinsWithATokenAndKeepsASession) {
  AgentOptions options = AgentFor("host-a", Token());
  options.facts.offers = {{.instance_type = "ml.m5.xlarge", .count = 2}};
  options.facts.runtime = "process";
  auto agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE((*agent)->WaitConnected(absl::Seconds(10))) << (*agent)->last_error();
  EXPECT_EQ((*agent)->host_name(), "host-a");

  HostStatus host = WaitForHost("host-a", HostState::kConnected);
  EXPECT_EQ(host.facts.address, "127.0.0.1");
  EXPECT_THAT(host.peer, HasSubstr("127.0.0.1"));
  ASSERT_EQ(host.facts.offers.size(), 1u);
  EXPECT_EQ(host.facts.offers[0].instance_type, "ml.m5.xlarge");
  EXPECT_EQ(host.facts.offers[0].count, 2);
  EXPECT_EQ(host.facts.runtime, "process");
  EXPECT_GT(host.facts.cpus, 0);
  EXPECT_GT(host.facts.memory_bytes, 0);
  EXPECT_GT(host.facts.free_disk_bytes, 0);
  EXPECT_EQ(host.sessions, 1);
  EXPECT_EQ(recorder_.connected(), std::vector<std::string>{"host-a"});

  // Heartbeats keep it connected well past the silence timeout.
  absl::SleepFor(absl::Milliseconds(1500));
  host = WaitForHost("host-a", HostState::kConnected);
  EXPECT_GT(host.last_heard, host.connected);
  EXPECT_EQ(host.sessions, 1);

  // The key stays on the host, readable by its owner only.
  struct stat st;
  ASSERT_EQ(stat((options.state_dir + "/key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(
      VerifyPeerCertificate(pki_->ca_cert_pem(), ReadAll(options.state_dir + "/cert.pem")).ok());
}

TEST_F(SessionTest, ARestartedAgentNeedsNoTokenAndTheHostKeepsItsName) {
  AgentOptions options = AgentFor("host-b", Token());
  {
    auto agent = Agent::Start(options);
    ASSERT_TRUE(agent.ok()) << agent.status();
    ASSERT_TRUE((*agent)->WaitConnected(absl::Seconds(10)));
  }
  options.token.clear();
  auto again = Agent::Start(options);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->WaitConnected(absl::Seconds(10))) << (*again)->last_error();
  HostStatus host = WaitForHost("host-b", HostState::kConnected);
  EXPECT_EQ(host.sessions, 2);
  EXPECT_EQ(hub_->Hosts().size(), 1u);

  // Another name for the same certificate is refused by name.
  options.host_name = "host-c";
  auto renamed = Agent::Start(options);
  ASSERT_FALSE(renamed.ok());
  EXPECT_EQ(renamed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(renamed.status().message(), HasSubstr("certificate of 'host-b'"));
}

TEST_F(SessionTest, AReusedTokenIsRefusedAndNoHostJoins) {
  const std::string token = Token();
  auto first = Agent::Start(AgentFor("host-d", token));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Agent::Start(AgentFor("host-e", token));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(second.status().message(), HasSubstr("joining the controller at 127.0.0.1:"));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/host-e/cert.pem"));

  auto unknown = Agent::Start(AgentFor("host-f", "kiln1.0123456789abcdef." + std::string(64, 'a')));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);

  auto without = Agent::Start(AgentFor("host-g", ""));
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(without.status().message(), HasSubstr("join token is needed"));
}

// A gRPC client of the hub with the credentials given, to try what an agent
// never does.
std::unique_ptr<v1::Controller::Stub> RawClient(int port, const grpc::SslCredentialsOptions& ssl) {
  return v1::Controller::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl)));
}

grpc::Status TrySession(v1::Controller::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto stream = stub.Session(&context);
  v1::AgentMessage hello;
  hello.mutable_hello();
  stream->Write(hello);
  v1::ControllerMessage reply;
  while (stream->Read(&reply)) {
    if (reply.has_welcome()) context.TryCancel();
  }
  return stream->Finish();
}

TEST_F(SessionTest, TheHubAcceptsOnlyCertificatesOfItsCa) {
  TempDir other;
  auto foreign = OpenOrCreatePki(other.path() + "/pki", {"127.0.0.1"});
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  auto mine = MakeKeyAndCsr("host-x");
  ASSERT_TRUE(mine.ok());
  auto cert = (*foreign)->RedeemJoinToken((*foreign)->CreateJoinToken(absl::Minutes(1)).value(),
                                          mine->csr_pem, "host-x");
  ASSERT_TRUE(cert.ok()) << cert.status();

  // A certificate of another CA: the handshake fails.
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pki_->ca_cert_pem();
  ssl.pem_private_key = mine->key_pem;
  ssl.pem_cert_chain = *cert;
  grpc::Status status = TrySession(*RawClient(hub_->port(), ssl));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();

  // No certificate at all: TLS lets it through (it may want to join), the
  // session does not.
  grpc::SslCredentialsOptions anonymous;
  anonymous.pem_root_certs = pki_->ca_cert_pem();
  status = TrySession(*RawClient(hub_->port(), anonymous));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("join with a token first"));
  EXPECT_TRUE(hub_->Hosts().empty());

  // The agent refuses a certificate the CA it was given did not sign.
  AgentOptions options = AgentFor("host-x", "");
  ASSERT_EQ(mkdir(options.state_dir.c_str(), 0700), 0);
  WriteAll(options.state_dir + "/key.pem", mine->key_pem);
  WriteAll(options.state_dir + "/cert.pem", *cert);
  auto agent = Agent::Start(options);
  ASSERT_FALSE(agent.ok());
  EXPECT_EQ(agent.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(agent.status().message(), HasSubstr("cert.pem is refused by the CA given"));
}

TEST_F(SessionTest, AnAgentAcceptsOnlyItsController) {
  // The agent trusts another CA than the hub's: it never gets a session.
  TempDir other;
  auto foreign = OpenOrCreatePki(other.path() + "/pki", {"127.0.0.1"});
  ASSERT_TRUE(foreign.ok()) << foreign.status();
  AgentOptions options = AgentFor("host-y", Token());
  options.ca_pem = (*foreign)->ca_cert_pem();
  auto agent = Agent::Start(options);
  ASSERT_FALSE(agent.ok());
  EXPECT_EQ(agent.status().code(), absl::StatusCode::kUnavailable) << agent.status();
  EXPECT_TRUE(hub_->Hosts().empty());
}

TEST_F(SessionTest, AHostThatFallsSilentIsLostAndComesBackWhenItDialsAgain) {
  AgentOptions options = AgentFor("host-h", Token());
  auto agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE((*agent)->WaitConnected(absl::Seconds(10)));
  WaitForHost("host-h", HostState::kConnected);

  const absl::Time stopped = absl::Now();
  agent->reset();
  WaitForHost("host-h", HostState::kDisconnected);
  const absl::Time lost = recorder_.WaitLost(absl::Seconds(10));
  ASSERT_NE(lost, absl::InfinitePast()) << "the hub never said the host was lost";
  // Lost after the silence timeout (600 ms), and not much later.
  EXPECT_GE(lost - stopped, absl::Milliseconds(400));
  EXPECT_LE(lost - stopped, absl::Seconds(3));
  WaitForHost("host-h", HostState::kLost);

  options.token.clear();
  auto back = Agent::Start(options);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE((*back)->WaitConnected(absl::Seconds(10)));
  HostStatus host = WaitForHost("host-h", HostState::kConnected);
  EXPECT_EQ(host.sessions, 2);
}

TEST_F(SessionTest, AgentsDialARestartedHubAgain) {
  auto agent = Agent::Start(AgentFor("host-i", Token()));
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE((*agent)->WaitConnected(absl::Seconds(10)));
  const int port = hub_->port();
  hub_.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*agent)->connected() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE((*agent)->connected());
  EXPECT_FALSE((*agent)->last_error().ok());

  StartHub(port);
  ASSERT_TRUE((*agent)->WaitConnected(absl::Seconds(10))) << (*agent)->last_error();
  EXPECT_EQ((*agent)->sessions(), 2);
  WaitForHost("host-i", HostState::kConnected);
}

TEST(HubOptionsTest, BadOptionsAreRefusedByName) {
  HubOptions options;
  auto hub = Hub::Start(options);
  ASSERT_FALSE(hub.ok());
  EXPECT_THAT(hub.status().message(), HasSubstr("HubOptions.pki"));
}

TEST(OffersTest, ParsesAndFormatsOffers) {
  auto offers = ParseOffers("ml.m5.xlarge:2,*:1");
  ASSERT_TRUE(offers.ok()) << offers.status();
  ASSERT_EQ(offers->size(), 2u);
  EXPECT_EQ((*offers)[0].instance_type, "ml.m5.xlarge");
  EXPECT_EQ((*offers)[0].count, 2);
  EXPECT_EQ((*offers)[1].instance_type, "");
  EXPECT_EQ(FormatOffers(*offers), "ml.m5.xlarge:2,*:1");
  EXPECT_THAT(ParseOffers("ml.m5.xlarge").status().message(), HasSubstr("is not TYPE:COUNT"));
  EXPECT_THAT(ParseOffers("a:0").status().message(), HasSubstr("from 1 to 1024"));
  EXPECT_THAT(ParseOffers("a:1,a:2").status().message(), HasSubstr("offered twice"));
  EXPECT_THAT(ParseOffers("a:1,").status().message(), HasSubstr("offer ''"));
}

}  // namespace
}  // namespace kiln::agent
