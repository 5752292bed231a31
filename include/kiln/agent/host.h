// What the controller and the agents say about a host: what it offers and
// what it has (kiln/agent/hub.h, kiln/agent/agent.h).
#ifndef KILN_AGENT_HOST_H_
#define KILN_AGENT_HOST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::agent {

// Up to `count` instances at once of `instance_type` ("" for any type).
struct Offer {
  std::string instance_type;
  int32_t count = 1;
};

// Parses "TYPE:COUNT,..." (e.g. "ml.m5.xlarge:2,ml.g5.xlarge:1"; "*" or ""
// as TYPE for any type). Errors: InvalidArgument naming the item and the
// rule (an empty item, a count that is not a whole number from 1 to 1024, a
// type given twice).
absl::StatusOr<std::vector<Offer>> ParseOffers(std::string_view text);
// The inverse of ParseOffers ("*" for any type).
std::string FormatOffers(const std::vector<Offer>& offers);

struct HostFacts {
  // The address peers reach the host at (IPv4 or IPv6). Empty from an agent
  // that leaves it to the controller, which then takes the address its
  // session comes from.
  std::string address;
  int32_t cpus = 0;
  int64_t memory_bytes = 0;
  int32_t gpus = 0;
  int64_t free_disk_bytes = 0;  // where the agent keeps its state
  std::string runtime;          // "process" or "bwrap"
  std::string network_interface;
  std::vector<Offer> offers;
  std::string version;  // Kiln's
};

// This machine's CPUs (those this process may run on), memory, GPUs (NVIDIA
// devices /dev/nvidia<N>) and the free bytes of the file system that holds
// `dir`. Fields that cannot be learned stay 0. Thread-safe.
HostFacts LocalHostFacts(const std::string& dir);

}  // namespace kiln::agent

#endif  // KILN_AGENT_HOST_H_
