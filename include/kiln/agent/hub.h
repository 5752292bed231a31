// The controller's side of Kiln's agents: a gRPC server that hosts dial.
//
// A host joins once, with a one-time join token from the controller's PKI
// (kiln/agent/pki.h): the hub redeems the token for a certificate of the
// host's own key. From then on the host's agent keeps one session with the
// hub over mutual TLS: the hub accepts only certificates of its CA, and knows
// the host by its certificate's name. Sessions carry heartbeats both ways; a
// host the hub hears nothing from for `silence_timeout` is lost.
//
//   auto pki = kiln::agent::OpenOrCreatePki("/var/lib/kiln/pki", {"10.0.0.1"}).value();
//   kiln::agent::HubOptions options;
//   options.listen = "10.0.0.1:7070";
//   options.pki = pki.get();
//   auto hub = kiln::agent::Hub::Start(options).value();
//   for (const kiln::agent::HostStatus& host : hub->Hosts()) ...
//
// Threading: every method is thread-safe. The listener is called on the
// hub's own threads, one call at a time, never while a method of the hub
// holds a lock; it must not block for long.
#ifndef KILN_AGENT_HUB_H_
#define KILN_AGENT_HUB_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kiln/agent/host.h"
#include "kiln/agent/pki.h"
#include "kiln/plugin/json_value.h"

namespace kiln::agent {

enum class HostState {
  kConnected,     // its session is up
  kDisconnected,  // its session ended; not yet silent for silence_timeout
  kLost,          // silent for silence_timeout (it may come back)
};
std::string_view HostStateName(HostState state);  // "Connected", ...

struct HostStatus {
  std::string name;  // its certificate's common name
  HostState state = HostState::kConnected;
  HostFacts facts;        // address filled in (see HostFacts::address)
  std::string peer;       // where its session came from, "ipv4:10.0.0.2:41234"
  absl::Time joined;      // when its first session of this hub began
  absl::Time connected;   // when its current (or last) session began
  absl::Time last_heard;  // its last message
  int64_t sessions = 0;   // sessions it began with this hub
};

// Hears about hosts. Called on the hub's threads (see above).
class HubListener {
 public:
  virtual ~HubListener() = default;
  // A session began: a new host, or one that was disconnected or lost.
  virtual void OnHostConnected(const HostStatus& host) {}
  // The host has been silent for silence_timeout: its session is ended.
  virtual void OnHostLost(const HostStatus& host) {}
};

struct HubOptions {
  // HOST:PORT to listen at; port 0 picks one (Hub::port).
  std::string listen = "127.0.0.1:0";
  // Required; must outlive the hub. Its controller certificate must name the
  // host agents dial (Pki::CoverControllerNames).
  Pki* pki = nullptr;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // How long a host may be silent before it is lost; more than
  // heartbeat_interval.
  absl::Duration silence_timeout = absl::Seconds(5);
  HubListener* listener = nullptr;  // optional; must outlive the hub
};

// `hosts` as Kiln.ListHosts answers (kiln/serve/server.h): {"Hosts": [{
// "HostName", "State" (HostStateName), "Address", "Peer", "Cpus",
// "MemoryBytes", "Gpus", "FreeDiskBytes", "Runtime", "NetworkInterface",
// "Offers": [{"InstanceType" ("*" for any), "Count"}], "Version",
// "JoinedTime", "ConnectedTime", "LastHeardTime" (seconds since the epoch,
// as the API's timestamps), "Sessions"}, ...]} in the order given.
JsonValue HostsJson(const std::vector<HostStatus>& hosts);

class Hub {
 public:
  // Starts listening. Errors: InvalidArgument naming the option (no pki, a
  // listen address that is not HOST:PORT, a silence_timeout not longer than
  // heartbeat_interval); Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Hub>> Start(HubOptions options);

  // Stops listening, ends every session (agents dial again) and returns when
  // the hub's threads have ended.
  virtual ~Hub() = default;

  // The port listened at.
  virtual int port() const = 0;
  // Every host that began a session with this hub, by name.
  virtual std::vector<HostStatus> Hosts() const = 0;
};

}  // namespace kiln::agent

#endif  // KILN_AGENT_HUB_H_
