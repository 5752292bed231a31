// Between kiln::agent's types and the protocol's messages (agent.proto), and
// between absl::Status and grpc::Status (their codes are the same canonical
// codes). Internal to kiln::agent. Thread-safe (no shared state).
#ifndef KILN_LIB_AGENT_CONVERT_H_
#define KILN_LIB_AGENT_CONVERT_H_

#include <grpcpp/support/status.h>

#include <string_view>

#include "absl/status/status.h"
#include "agent/agent.pb.h"
#include "kiln/agent/host.h"

namespace kiln::agent {

HostFacts FromProto(const v1::HostFacts& facts);
void ToProto(const HostFacts& facts, v1::HostFacts* out);

grpc::Status ToGrpcStatus(const absl::Status& status);
// `what` says what was being done ("joining the controller at 10.0.0.1:7070").
absl::Status FromGrpcStatus(const grpc::Status& status, std::string_view what);

}  // namespace kiln::agent

#endif  // KILN_LIB_AGENT_CONVERT_H_
