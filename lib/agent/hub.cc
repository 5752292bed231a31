// The controller's hub: Join and Session over gRPC with TLS (kiln/agent/hub.h).
//
// Sessions use gRPC's synchronous server: each runs its handler on a thread
// of the server's pool, reading the agent's messages; heartbeats are answered
// from that thread. A monitor thread ends the sessions of silent hosts
// (ServerContext::TryCancel wakes their handler) and tells the listener.
#include "kiln/agent/hub.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "agent/agent.grpc.pb.h"
#include "agent/convert.h"

namespace kiln::agent {

std::string_view HostStateName(HostState state) {
  switch (state) {
    case HostState::kConnected:
      return "Connected";
    case HostState::kDisconnected:
      return "Disconnected";
    case HostState::kLost:
      return "Lost";
  }
  return "Unknown";
}

namespace {

double EpochSeconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

JsonValue HostsJson(const std::vector<HostStatus>& hosts) {
  JsonValue list = JsonValue::Array();
  for (const HostStatus& host : hosts) {
    JsonValue offers = JsonValue::Array();
    for (const Offer& offer : host.facts.offers) {
      JsonValue o = JsonValue::Object();
      o.Set("InstanceType",
            JsonValue::String(offer.instance_type.empty() ? "*" : offer.instance_type));
      o.Set("Count", JsonValue::Int(offer.count));
      offers.Push(std::move(o));
    }
    JsonValue h = JsonValue::Object();
    h.Set("HostName", JsonValue::String(host.name));
    h.Set("State", JsonValue::String(std::string(HostStateName(host.state))));
    h.Set("Address", JsonValue::String(host.facts.address));
    h.Set("Peer", JsonValue::String(host.peer));
    h.Set("Cpus", JsonValue::Int(host.facts.cpus));
    h.Set("MemoryBytes", JsonValue::Int(host.facts.memory_bytes));
    h.Set("Gpus", JsonValue::Int(host.facts.gpus));
    h.Set("FreeDiskBytes", JsonValue::Int(host.facts.free_disk_bytes));
    h.Set("Runtime", JsonValue::String(host.facts.runtime));
    h.Set("NetworkInterface", JsonValue::String(host.facts.network_interface));
    h.Set("Offers", std::move(offers));
    h.Set("Version", JsonValue::String(host.facts.version));
    h.Set("JoinedTime", JsonValue::Double(EpochSeconds(host.joined)));
    h.Set("ConnectedTime", JsonValue::Double(EpochSeconds(host.connected)));
    h.Set("LastHeardTime", JsonValue::Double(EpochSeconds(host.last_heard)));
    h.Set("Sessions", JsonValue::Int(host.sessions));
    list.Push(std::move(h));
  }
  JsonValue out = JsonValue::Object();
  out.Set("Hosts", std::move(list));
  return out;
}

namespace {

namespace pb = ::kiln::agent::v1;

// "ipv4:10.0.0.2:41234" -> "10.0.0.2"; "ipv6:[::1]:5" -> "::1"; else "".
std::string AddressOfPeer(absl::string_view peer) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    return std::string(peer.substr(0, colon));
  }
  if (absl::ConsumePrefix(&peer, "ipv6:") && absl::ConsumePrefix(&peer, "[")) {
    const size_t bracket = peer.find(']');
    if (bracket != absl::string_view::npos) return std::string(peer.substr(0, bracket));
  }
  return "";
}

// Checks HOST:PORT (HOST may be [v6]); the port is 0 to 65535.
bool IsHostPort(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port = 0;
  return absl::SimpleAtoi(absl::string_view(text).substr(colon + 1), &port) && port >= 0 &&
         port <= 65535;
}

class HubImpl final : public Hub, public pb::Controller::Service {
 public:
  explicit HubImpl(HubOptions options) : options_(std::move(options)) {}
  ~HubImpl() override;

  absl::Status Listen();

  int port() const override { return port_; }
  std::vector<HostStatus> Hosts() const override;

  grpc::Status Join(grpc::ServerContext* context, const pb::JoinRequest* request,
                    pb::JoinResponse* response) override;
  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<pb::ControllerMessage, pb::AgentMessage>* stream) override;

 private:
  struct Host {
    HostStatus status;
    // The running session's context and number; null when none runs.
    grpc::ServerContext* context = nullptr;
    int64_t session = 0;
  };

  void Monitor();
  // Calls the listener, one call at a time, with no other lock held.
  void Tell(bool connected, const HostStatus& host);

  const HubOptions options_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;

  mutable absl::Mutex mu_;
  std::map<std::string, Host> hosts_ ABSL_GUARDED_BY(mu_);
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex listener_mu_;
  std::thread monitor_;
};

absl::Status HubImpl::Listen() {
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_root_certs = options_.pki->ca_cert_pem();
  ssl.pem_key_cert_pairs.push_back(
      {options_.pki->controller_key_pem(), options_.pki->controller_cert_pem()});
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, grpc::SslServerCredentials(ssl), &port_);
  builder.RegisterService(this);
  // Agents' keepalive pings come at most every heartbeat interval.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen for agents at ", options_.listen));
  }
  monitor_ = std::thread([this] { Monitor(); });
  return absl::OkStatus();
}

HubImpl::~HubImpl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [name, host] : hosts_) {
      if (host.context != nullptr) host.context->TryCancel();
    }
  }
  if (monitor_.joinable()) monitor_.join();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
  }
}

std::vector<HostStatus> HubImpl::Hosts() const {
  absl::MutexLock lock(&mu_);
  std::vector<HostStatus> hosts;
  hosts.reserve(hosts_.size());
  for (const auto& [name, host] : hosts_) hosts.push_back(host.status);
  return hosts;
}

void HubImpl::Tell(bool connected, const HostStatus& host) {
  if (options_.listener == nullptr) return;
  absl::MutexLock lock(&listener_mu_);
  if (connected) {
    options_.listener->OnHostConnected(host);
  } else {
    options_.listener->OnHostLost(host);
  }
}

grpc::Status HubImpl::Join(grpc::ServerContext* context, const pb::JoinRequest* request,
                           pb::JoinResponse* response) {
  absl::StatusOr<std::string> cert =
      options_.pki->RedeemJoinToken(request->token(), request->csr_pem(), request->host_name());
  if (!cert.ok()) return ToGrpcStatus(cert.status());
  response->set_certificate_pem(*std::move(cert));
  return grpc::Status::OK;
}

grpc::Status HubImpl::Session(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<pb::ControllerMessage, pb::AgentMessage>* stream) {
  // The TLS handshake checked the certificate against the CA; a client with
  // none (one that has not joined) got this far too.
  std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  std::vector<grpc::string_ref> names = auth != nullptr
                                            ? auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)
                                            : std::vector<grpc::string_ref>();
  if (auth == nullptr || !auth->IsPeerAuthenticated() || names.size() != 1) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "a session needs the host's certificate from this controller's CA "
                        "(join with a token first)");
  }
  const std::string name(names[0].data(), names[0].size());
  pb::AgentMessage message;
  if (!stream->Read(&message)) return grpc::Status::CANCELLED;
  if (!message.has_hello()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a session begins with the agent's Hello");
  }
  const absl::Time now = absl::Now();
  int64_t session = 0;
  HostStatus connected;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the hub is stopping");
    Host& host = hosts_[name];
    // A host that dials again (its agent restarted, or its link came back
    // before the old session ended) keeps only its newest session.
    if (host.context != nullptr) host.context->TryCancel();
    host.context = context;
    host.session = session = ++next_session_;
    HostStatus& status = host.status;
    if (status.sessions == 0) status.joined = now;
    status.name = name;
    status.state = HostState::kConnected;
    status.facts = FromProto(message.hello().facts());
    status.peer = context->peer();
    if (status.facts.address.empty()) status.facts.address = AddressOfPeer(status.peer);
    status.connected = now;
    status.last_heard = now;
    ++status.sessions;
    connected = status;
  }
  Tell(/*connected=*/true, connected);

  pb::ControllerMessage welcome;
  welcome.mutable_welcome()->set_host_name(name);
  welcome.mutable_welcome()->set_heartbeat_interval_ms(
      absl::ToInt64Milliseconds(options_.heartbeat_interval));
  welcome.mutable_welcome()->set_silence_timeout_ms(
      absl::ToInt64Milliseconds(options_.silence_timeout));
  bool open = stream->Write(welcome);
  pb::ControllerMessage beat;
  beat.mutable_heartbeat();
  while (open && stream->Read(&message)) {
    {
      absl::MutexLock lock(&mu_);
      Host& host = hosts_[name];
      if (host.session != session) break;  // a newer session took over
      host.status.last_heard = absl::Now();
      if (message.has_heartbeat() && message.heartbeat().has_facts()) {
        std::string address = host.status.facts.address;
        host.status.facts = FromProto(message.heartbeat().facts());
        if (host.status.facts.address.empty()) host.status.facts.address = std::move(address);
      }
    }
    if (message.has_heartbeat()) open = stream->Write(beat);
  }
  absl::MutexLock lock(&mu_);
  Host& host = hosts_[name];
  if (host.session == session) {
    host.context = nullptr;
    if (host.status.state == HostState::kConnected) host.status.state = HostState::kDisconnected;
  }
  return grpc::Status::OK;
}

void HubImpl::Monitor() {
  const absl::Duration tick = std::min(absl::Milliseconds(200), options_.heartbeat_interval / 2);
  for (;;) {
    std::vector<HostStatus> lost;
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), tick)) return;
      const absl::Time now = absl::Now();
      for (auto& [name, host] : hosts_) {
        if (host.status.state == HostState::kLost) continue;
        if (now - host.status.last_heard < options_.silence_timeout) continue;
        host.status.state = HostState::kLost;
        if (host.context != nullptr) host.context->TryCancel();
        lost.push_back(host.status);
      }
    }
    for (const HostStatus& host : lost) Tell(/*connected=*/false, host);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Hub>> Hub::Start(HubOptions options) {
  if (options.pki == nullptr) return absl::InvalidArgumentError("HubOptions.pki is required");
  if (!IsHostPort(options.listen)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HubOptions.listen '", options.listen, "' is not HOST:PORT"));
  }
  if (options.heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("HubOptions.heartbeat_interval must be positive");
  }
  if (options.silence_timeout <= options.heartbeat_interval) {
    return absl::InvalidArgumentError(
        "HubOptions.silence_timeout must be longer than heartbeat_interval");
  }
  auto hub = std::make_unique<HubImpl>(std::move(options));
  absl::Status status = hub->Listen();
  if (!status.ok()) return status;
  return hub;
}

}  // namespace kiln::agent
