// The agent on a host (kiln/agent/agent.h): joins once, then keeps a session
// with the hub, dialling again with a growing delay whenever it ends.
//
// A session runs on two threads: the session thread reads the hub's messages;
// the beat thread writes heartbeats at the Welcome's interval and cancels the
// call when the hub has been silent for the Welcome's silence timeout (a link
// that went down without a reset).
#include "kiln/agent/agent.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/agent.grpc.pb.h"
#include "agent/convert.h"
#include "agent/state_files.h"
#include "kiln/agent/pki.h"

namespace kiln::agent {
namespace {

namespace pb = ::kiln::agent::v1;

constexpr absl::Duration kJoinDeadline = absl::Seconds(15);
constexpr absl::Duration kFirstRedialDelay = absl::Milliseconds(100);

std::string ThisHostName() {
  char host[HOST_NAME_MAX + 1] = {0};
  if (gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

class AgentImpl final : public Agent {
 public:
  explicit AgentImpl(AgentOptions options) : options_(std::move(options)) {}
  ~AgentImpl() override;

  // Loads or makes the key and certificate; then starts the session thread.
  absl::Status Init();

  const std::string& host_name() const override { return host_name_; }
  bool connected() const override {
    absl::MutexLock lock(&mu_);
    return connected_;
  }
  bool WaitConnected(absl::Duration timeout) const override {
    absl::MutexLock lock(&mu_);
    auto up = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return connected_; };
    return mu_.AwaitWithTimeout(absl::Condition(&up), timeout);
  }
  int64_t sessions() const override {
    absl::MutexLock lock(&mu_);
    return sessions_;
  }
  absl::Status last_error() const override {
    absl::MutexLock lock(&mu_);
    return last_error_;
  }

 private:
  std::string Path(const char* name) const { return absl::StrCat(options_.state_dir, "/", name); }
  absl::Status JoinHub();
  void Run();
  // One session, from dialling to its end; the error that ended it.
  absl::Status RunSession();
  void Beat(grpc::ClientReaderWriter<pb::AgentMessage, pb::ControllerMessage>* stream,
            grpc::ClientContext* context, absl::Duration interval, absl::Duration silence);
  pb::HostFacts Facts() const;

  const AgentOptions options_;
  std::string host_name_;
  std::string key_pem_;
  std::string cert_pem_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  int64_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // the session's call
  absl::Time last_from_hub_ ABSL_GUARDED_BY(mu_);
  bool session_over_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

absl::Status AgentImpl::Init() {
  absl::Status status = internal::MakeDir(options_.state_dir);
  if (!status.ok()) return status;
  const std::string cert_path = Path("cert.pem");
  const std::string key_path = Path("key.pem");
  if (internal::Exists(cert_path)) {
    absl::StatusOr<std::string> cert = internal::ReadFile(cert_path);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = internal::ReadFile(key_path);
    if (!key.ok()) {
      return absl::DataLossError(
          absl::StrCat(cert_path, " has no key beside it: ", key.status().message()));
    }
    absl::StatusOr<std::string> name = CertificateCommonName(*cert);
    if (!name.ok())
      return absl::DataLossError(absl::StrCat(cert_path, ": ", name.status().message()));
    absl::Status verified = VerifyPeerCertificate(options_.ca_pem, *cert);
    if (!verified.ok()) {
      return absl::DataLossError(
          absl::StrCat(cert_path, " is refused by the CA given: ", verified.message()));
    }
    if (!options_.host_name.empty() && options_.host_name != *name) {
      return absl::InvalidArgumentError(absl::StrCat("host name '", options_.host_name,
                                                     "': ", cert_path, " is the certificate of '",
                                                     *name, "'"));
    }
    host_name_ = *std::move(name);
    key_pem_ = *std::move(key);
    cert_pem_ = *std::move(cert);
  } else {
    host_name_ = options_.host_name.empty() ? ThisHostName() : options_.host_name;
    if (options_.token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("a join token is needed: ", cert_path,
                                                     " does not exist (the host has not joined)"));
    }
    status = JoinHub();
    if (!status.ok()) return status;
  }
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

absl::Status AgentImpl::JoinHub() {
  absl::StatusOr<KeyAndCsr> mine = MakeKeyAndCsr(host_name_);
  if (!mine.ok()) return mine.status();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options_.ca_pem;
  auto channel = grpc::CreateChannel(options_.controller, grpc::SslCredentials(ssl));
  auto stub = pb::Controller::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineIn(kJoinDeadline));
  pb::JoinRequest request;
  request.set_token(options_.token);
  request.set_host_name(host_name_);
  request.set_csr_pem(mine->csr_pem);
  pb::JoinResponse response;
  grpc::Status joined = stub->Join(&context, request, &response);
  if (!joined.ok()) {
    return FromGrpcStatus(joined, absl::StrCat("joining the controller at ", options_.controller));
  }
  // The key first: a certificate is never without its key.
  absl::Status status = internal::WriteFileAtomically(Path("key.pem"), mine->key_pem, 0600);
  if (status.ok()) {
    status = internal::WriteFileAtomically(Path("cert.pem"), response.certificate_pem(), 0644);
  }
  if (!status.ok()) return status;
  key_pem_ = std::move(mine->key_pem);
  cert_pem_ = response.certificate_pem();
  return absl::OkStatus();
}

AgentImpl::~AgentImpl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

pb::HostFacts AgentImpl::Facts() const {
  HostFacts facts = options_.facts;
  const HostFacts here = LocalHostFacts(options_.state_dir);
  if (facts.cpus == 0) facts.cpus = here.cpus;
  if (facts.memory_bytes == 0) facts.memory_bytes = here.memory_bytes;
  if (facts.gpus == 0) facts.gpus = here.gpus;
  if (facts.free_disk_bytes == 0) facts.free_disk_bytes = here.free_disk_bytes;
  if (facts.offers.empty()) facts.offers.push_back({.instance_type = "", .count = 1});
  pb::HostFacts out;
  ToProto(facts, &out);
  return out;
}

void AgentImpl::Run() {
  absl::BitGen random;
  absl::Duration delay = kFirstRedialDelay;
  for (;;) {
    const int64_t before = sessions();
    absl::Status ended = RunSession();
    if (options_.on_session) options_.on_session(ended);
    absl::MutexLock lock(&mu_);
    connected_ = false;
    last_error_ = ended;
    if (stopping_) return;
    // A session that got as far as its Welcome starts the delays over.
    if (sessions_ > before) delay = kFirstRedialDelay;
    const absl::Duration wait = delay * absl::Uniform(random, 0.5, 1.0);
    delay = std::min(delay * 2, options_.max_redial_delay);
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), wait)) return;
  }
}

absl::Status AgentImpl::RunSession() {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options_.ca_pem;
  ssl.pem_private_key = key_pem_;
  ssl.pem_cert_chain = cert_pem_;
  grpc::ChannelArguments args;
  // A fresh connection per session: one that went bad is not reused.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(options_.controller, grpc::SslCredentials(ssl), args);
  auto stub = pb::Controller::NewStub(channel);
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("the agent is stopping");
    context_ = &context;
    session_over_ = false;
  }
  auto forget_context = [&] {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  };
  auto stream = stub->Session(&context);
  pb::AgentMessage hello;
  *hello.mutable_hello()->mutable_facts() = Facts();
  pb::ControllerMessage message;
  const std::string what = absl::StrCat("the session with the controller at ", options_.controller);
  if (!stream->Write(hello) || !stream->Read(&message) || !message.has_welcome()) {
    context.TryCancel();
    grpc::Status finished = stream->Finish();
    forget_context();
    if (finished.ok()) {
      return absl::UnavailableError(absl::StrCat(what, " ended before its Welcome"));
    }
    return FromGrpcStatus(finished, what);
  }
  const absl::Duration interval =
      absl::Milliseconds(std::max<int64_t>(10, message.welcome().heartbeat_interval_ms()));
  const absl::Duration silence =
      std::max(interval * 2, absl::Milliseconds(message.welcome().silence_timeout_ms()));
  {
    absl::MutexLock lock(&mu_);
    connected_ = true;
    ++sessions_;
    last_error_ = absl::OkStatus();
    last_from_hub_ = absl::Now();
  }
  if (options_.on_session) options_.on_session(absl::OkStatus());
  std::thread beat([&] { Beat(stream.get(), &context, interval, silence); });
  while (stream->Read(&message)) {
    absl::MutexLock lock(&mu_);
    last_from_hub_ = absl::Now();
  }
  {
    absl::MutexLock lock(&mu_);
    session_over_ = true;
  }
  beat.join();
  grpc::Status finished = stream->Finish();
  forget_context();
  if (finished.ok()) return absl::UnavailableError(absl::StrCat(what, " was ended by the hub"));
  return FromGrpcStatus(finished, what);
}

void AgentImpl::Beat(grpc::ClientReaderWriter<pb::AgentMessage, pb::ControllerMessage>* stream,
                     grpc::ClientContext* context, absl::Duration interval,
                     absl::Duration silence) {
  pb::AgentMessage beat;
  for (int64_t n = 1;; ++n) {
    {
      absl::MutexLock lock(&mu_);
      auto over = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return session_over_ || stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&over), interval)) return;
      if (absl::Now() - last_from_hub_ > silence) {
        context->TryCancel();
        return;
      }
    }
    beat.Clear();
    if (n % 10 == 0) {
      *beat.mutable_heartbeat()->mutable_facts() = Facts();
    } else {
      beat.mutable_heartbeat();
    }
    if (!stream->Write(beat)) return;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Agent>> Agent::Start(AgentOptions options) {
  if (options.controller.empty()) {
    return absl::InvalidArgumentError("AgentOptions.controller (HOST:PORT) is required");
  }
  if (options.ca_pem.empty()) return absl::InvalidArgumentError("AgentOptions.ca_pem is required");
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("AgentOptions.state_dir is required");
  }
  auto agent = std::make_unique<AgentImpl>(std::move(options));
  absl::Status status = agent->Init();
  if (!status.ok()) return status;
  return agent;
}

}  // namespace kiln::agent
