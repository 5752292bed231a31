// The agent on each host: it joins the controller's hub (kiln/agent/hub.h)
// and keeps a session with it, dialling again whenever it ends.
//
// Joining: the first start needs a one-time join token. The agent makes its
// own key (it never leaves the host) and trades the token and a signing
// request for its certificate, over TLS that checks the controller's
// certificate against the CA given. Key and certificate are kept in the
// state directory (key.pem 0600, cert.pem), so later starts need no token.
// Certificates made in advance can be put there instead.
//
//   kiln::agent::AgentOptions options;
//   options.controller = "10.0.0.1:7070";
//   options.ca_pem = ReadFile("ca.pem");
//   options.token = "kiln1....";
//   options.state_dir = "/var/lib/kiln-agent";
//   auto agent = kiln::agent::Agent::Start(options).value();  // joined
//
// Threading: thread-safe. The agent runs its session on its own threads.
#ifndef KILN_AGENT_AGENT_H_
#define KILN_AGENT_AGENT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/agent/host.h"

namespace kiln::agent {

struct AgentOptions {
  // HOST:PORT of the hub. HOST must be a name or address its certificate
  // holds.
  std::string controller;
  // PEM of the controller's CA: the only CA whose certificates the agent
  // accepts.
  std::string ca_pem;
  // The join token; needed only when state_dir holds no certificate yet.
  std::string token;
  // Where the key, the certificate and the agent's state live; made when
  // missing (0700).
  std::string state_dir;
  // The host's name (its certificate's common name): this machine's host
  // name when empty. A DNS name.
  std::string host_name;
  // What the host tells the hub (kiln/agent/host.h). Unset fields are
  // learned from the machine (LocalHostFacts); offers default to one
  // instance of any type.
  HostFacts facts;
  // The longest wait between two attempts to dial the hub.
  absl::Duration max_redial_delay = absl::Seconds(5);
  // Optional: told when a session comes up (OK) and when it ends or an
  // attempt to dial fails (why). Called on the agent's thread, one call at a
  // time; must not block for long or call the agent's destructor.
  std::function<void(const absl::Status&)> on_session;
};

class Agent {
 public:
  // Joins when state_dir has no certificate, then starts the session and
  // returns without waiting for it (connected() says when it is up). Errors:
  // InvalidArgument naming the option (no controller, ca_pem, state_dir, or
  // token when one is needed; a host name that is not a DNS name);
  // Unavailable when the hub cannot be reached to join; PermissionDenied or
  // NotFound as the hub answers a token it refuses (used, expired, unknown);
  // Internal naming the file when the state directory cannot be written;
  // DataLoss naming the file when it holds a key or certificate that does not
  // parse or a certificate not of the CA given.
  static absl::StatusOr<std::unique_ptr<Agent>> Start(AgentOptions options);

  // Ends the session and returns when the agent's threads have ended.
  virtual ~Agent() = default;

  // The name the hub knows this host by.
  virtual const std::string& host_name() const = 0;
  // Whether a session is up (the hub's Welcome was received).
  virtual bool connected() const = 0;
  // Blocks until a session is up or `timeout` passes; returns connected().
  virtual bool WaitConnected(absl::Duration timeout) const = 0;
  // Sessions begun so far (1 after the first Welcome).
  virtual int64_t sessions() const = 0;
  // Why the last attempt to dial failed or the last session ended (OK while
  // connected and before any failure).
  virtual absl::Status last_error() const = 0;
};

}  // namespace kiln::agent

#endif  // KILN_AGENT_AGENT_H_
